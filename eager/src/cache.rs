//! Per program key, how the native path runs the op: a recipe learnt from the Python path's
//! first run of it, or the word that the key's floats are baked (recipes kept per value) or
//! that the key is the Python path's. Bounded: past `LIMIT` keys it starts afresh, as an op
//! whose shapes change at every call would otherwise grow it without bound.
//!
//! Generic over the recipe: the extension's holds the Python path's program objects.

use std::collections::HashMap;
use std::sync::Arc;

use crate::key::{with_values, Key};

/// Keys kept at most.
pub const LIMIT: usize = 8192;

pub enum Entry<R> {
    Run(Arc<R>),
    /// The op reads its floats as numbers: recipes are kept per value (the key with the
    /// floats' bits appended, `key::with_values`).
    Baked,
    /// The Python path ran it and gave no recipe (it falls back to the CPU, writes in a way the
    /// recipe does not model): it goes to Python at once.
    Python,
}

/// What the cache says of a call.
pub enum Found<R> {
    /// Run this recipe (`baked`: found under the floats' values).
    Run { recipe: Arc<R>, baked: bool },
    /// The Python path runs it.
    Python,
    /// No recipe yet (`baked`: the key bakes its floats and only these values missed).
    Miss { baked: bool },
}

/// What the native path did, as `torchtpu.device.stats()` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub hits: u64,
    pub misses: u64,
    pub learnt: u64,
    /// Keys the Python path keeps.
    pub python: u64,
    pub resets: u64,
    /// In-place targets' buffers donated to their op's program.
    pub donated: u64,
}

pub struct RecipeCache<R> {
    map: HashMap<Key, Entry<R>>,
    limit: usize,
    pub counters: Counters,
}

impl<R> Default for RecipeCache<R> {
    fn default() -> Self {
        RecipeCache::with_limit(LIMIT)
    }
}

impl<R> RecipeCache<R> {
    pub fn with_limit(limit: usize) -> RecipeCache<R> {
        RecipeCache { map: HashMap::new(), limit, counters: Counters::default() }
    }

    /// What runs the call of `key` whose floats have the bits `float_bits`.
    pub fn find(&self, key: &[i64], float_bits: &[u64]) -> Found<R> {
        match self.map.get(key) {
            Some(Entry::Run(r)) => Found::Run { recipe: r.clone(), baked: false },
            Some(Entry::Python) => Found::Python,
            None => Found::Miss { baked: false },
            Some(Entry::Baked) => match self.map.get(&with_values(key, float_bits)) {
                Some(Entry::Run(r)) => Found::Run { recipe: r.clone(), baked: true },
                Some(Entry::Python) => Found::Python,
                _ => Found::Miss { baked: true },
            },
        }
    }

    pub fn insert(&mut self, key: Key, entry: Entry<R>) {
        if self.map.len() >= self.limit {
            self.map.clear();
            self.counters.resets += 1;
        }
        self.map.insert(key, entry);
    }

    /// Forgets every key (the counters stay).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cache: &RecipeCache<&'static str>, key: &[i64], floats: &[u64]) -> Option<(&'static str, bool)> {
        match cache.find(key, floats) {
            Found::Run { recipe, baked } => Some((*recipe, baked)),
            _ => None,
        }
    }

    #[test]
    fn a_key_misses_until_a_recipe_is_kept() {
        let mut cache = RecipeCache::default();
        assert!(matches!(cache.find(&[1, 2], &[]), Found::Miss { baked: false }));
        cache.insert(vec![1, 2], Entry::Run(Arc::new("add")));
        assert_eq!(run(&cache, &[1, 2], &[]), Some(("add", false)));
        assert!(matches!(cache.find(&[1, 3], &[]), Found::Miss { .. }));
    }

    #[test]
    fn a_baked_key_keeps_one_recipe_per_float_value() {
        let mut cache = RecipeCache::default();
        let (half, two) = (0.5f64.to_bits(), 2.0f64.to_bits());
        cache.insert(vec![9], Entry::Baked);
        cache.insert(with_values(&[9], &[half]), Entry::Run(Arc::new("pow 0.5")));
        cache.insert(with_values(&[9], &[two]), Entry::Python);
        assert_eq!(run(&cache, &[9], &[half]), Some(("pow 0.5", true)));
        assert!(matches!(cache.find(&[9], &[two]), Found::Python));
        assert!(matches!(cache.find(&[9], &[3.0f64.to_bits()]), Found::Miss { baked: true }));
    }

    #[test]
    fn past_its_limit_the_cache_starts_afresh_and_counts_it() {
        let mut cache: RecipeCache<()> = RecipeCache::with_limit(2);
        for k in 0..3 {
            cache.insert(vec![k], Entry::Python);
        }
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.counters.resets, 1);
        assert!(matches!(cache.find(&[0], &[]), Found::Miss { .. }));
        assert!(matches!(cache.find(&[2], &[]), Found::Python));
    }
}
