//! The calls that missed and run in the Python path now, per thread (innermost last: the
//! Python path's run of one op may dispatch others). The Python path gives back how it ran the
//! call (`learn`), which binds a recipe to its key; a call it gives nothing for leaves its key
//! to Python from then on (`done`).

use std::cell::RefCell;
use std::sync::Arc;

use crate::cache::{Entry, RecipeCache};
use crate::key::{with_values, Key};

/// A call that missed.
pub struct Missed {
    pub key: Key,
    /// The key was known to bake its floats (only this call's values missed).
    pub baked: bool,
    /// The op's name, as the Python path names it back.
    pub name: String,
    pub n_leaves: usize,
    pub float_bits: Vec<u64>,
}

struct Waiting {
    call: Missed,
    learnt: bool,
}

thread_local! {
    static WAITING: RefCell<Vec<Waiting>> = const { RefCell::new(Vec::new()) };
}

/// The Python path runs `call` now.
pub fn missed(call: Missed) {
    WAITING.with(|w| w.borrow_mut().push(Waiting { call, learnt: false }));
}

/// The key a recipe for this thread's innermost waiting call would be kept under (with its
/// floats' values where the op bakes them), if a call waits: what the Python path's key is
/// checked against (`test_device_native.py`: one native key, one Python key).
pub fn waiting_key(baked: bool) -> Option<Key> {
    WAITING.with(|w| {
        w.borrow().last().map(|t| if baked { with_values(&t.call.key, &t.call.float_bits) } else { t.call.key.clone() })
    })
}

/// Binds `recipe`, how the Python path just ran the call of `name` (reading `n_leaves` tensor
/// leaves and `n_floats` floats; `baked`: its floats are attributes, kept per value), to that
/// call's key, if it is this thread's innermost waiting call, not yet bound, and its leaves and
/// floats are the ones the recipe reads. A recipe it refuses comes back (`Err`), so the caller
/// drops it where it chooses (the extension's holds Python objects: not under its cache's lock).
pub fn learn<R>(
    cache: &mut RecipeCache<R>,
    name: &str,
    n_leaves: usize,
    n_floats: usize,
    baked: bool,
    recipe: Arc<R>,
) -> Result<(), Arc<R>> {
    WAITING.with(|w| {
        let mut w = w.borrow_mut();
        let Some(top) = w.last_mut() else { return Err(recipe) };
        let call = &top.call;
        let floats_match = if baked { n_floats == 0 } else { n_floats == call.float_bits.len() };
        if top.learnt || call.name != name || call.n_leaves != n_leaves || !floats_match {
            return Err(recipe);
        }
        top.learnt = true;
        let recipe = Entry::Run(recipe);
        if baked {
            cache.insert(call.key.clone(), Entry::Baked);
            cache.insert(with_values(&call.key, &call.float_bits), recipe);
        } else {
            cache.insert(call.key.clone(), recipe);
        }
        cache.counters.learnt += 1;
        Ok(())
    })
}

/// Ends this thread's innermost waiting call: a key the Python path gave no recipe for is its
/// from now on (for a baked op, only these values: its other values keep their recipes).
pub fn done<R>(cache: &mut RecipeCache<R>) {
    let Some(top) = WAITING.with(|w| w.borrow_mut().pop()) else { return };
    if top.learnt {
        return;
    }
    let call = top.call;
    let key = if call.baked { with_values(&call.key, &call.float_bits) } else { call.key };
    cache.insert(key, Entry::Python);
    cache.counters.python += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Found;

    fn call(key: &[i64], name: &str, n_leaves: usize, floats: &[f64]) -> Missed {
        Missed {
            key: key.to_vec(),
            baked: false,
            name: name.into(),
            n_leaves,
            float_bits: floats.iter().map(|f| f.to_bits()).collect(),
        }
    }

    fn runs(cache: &RecipeCache<u32>, key: &[i64], floats: &[f64]) -> Option<u32> {
        let bits: Vec<u64> = floats.iter().map(|f| f.to_bits()).collect();
        match cache.find(key, &bits) {
            Found::Run { recipe, .. } => Some(*recipe),
            _ => None,
        }
    }

    #[test]
    fn a_recipe_binds_to_the_call_that_missed() {
        let mut cache = RecipeCache::default();
        missed(call(&[1], "aten::add.Tensor", 2, &[1.0]));
        assert!(learn(&mut cache, "aten::add.Tensor", 2, 1, false, Arc::new(10)).is_ok());
        done(&mut cache);
        assert_eq!(runs(&cache, &[1], &[7.0]), Some(10), "a float's value is an input");
        assert_eq!(cache.counters.learnt, 1);
        assert_eq!(cache.counters.python, 0);
    }

    #[test]
    fn a_recipe_for_other_leaves_floats_or_another_op_is_refused() {
        let mut cache = RecipeCache::default();
        missed(call(&[2], "aten::mul.Tensor", 2, &[]));
        assert!(learn(&mut cache, "aten::add.Tensor", 2, 0, false, Arc::new(1)).is_err());
        assert!(learn(&mut cache, "aten::mul.Tensor", 3, 0, false, Arc::new(1)).is_err());
        assert!(learn(&mut cache, "aten::mul.Tensor", 2, 1, false, Arc::new(1)).is_err());
        assert!(learn(&mut cache, "aten::mul.Tensor", 2, 0, false, Arc::new(1)).is_ok());
        assert!(learn(&mut cache, "aten::mul.Tensor", 2, 0, false, Arc::new(2)).is_err(), "bound once");
        done(&mut cache);
        assert_eq!(runs(&cache, &[2], &[]), Some(1));
    }

    #[test]
    fn an_unanswered_call_leaves_its_key_to_python() {
        let mut cache: RecipeCache<u32> = RecipeCache::default();
        missed(call(&[3], "aten::nonzero", 1, &[]));
        done(&mut cache);
        assert!(matches!(cache.find(&[3], &[]), Found::Python));
        assert_eq!(cache.counters.python, 1);
        done(&mut cache); // nothing waits: nothing happens
        assert_eq!(cache.counters.python, 1);
    }

    #[test]
    fn a_baked_op_is_learnt_and_refused_per_value() {
        let mut cache = RecipeCache::default();
        missed(call(&[4], "aten::pow.Tensor_Scalar", 1, &[2.0]));
        assert!(learn(&mut cache, "aten::pow.Tensor_Scalar", 1, 0, true, Arc::new(20)).is_ok());
        done(&mut cache);
        assert_eq!(runs(&cache, &[4], &[2.0]), Some(20));
        assert!(matches!(cache.find(&[4], &[3.0f64.to_bits()]), Found::Miss { baked: true }));
        missed(Missed { baked: true, ..call(&[4], "aten::pow.Tensor_Scalar", 1, &[3.0]) });
        done(&mut cache);
        assert!(matches!(cache.find(&[4], &[3.0f64.to_bits()]), Found::Python));
        assert_eq!(runs(&cache, &[4], &[2.0]), Some(20), "the other value keeps its recipe");
    }

    #[test]
    fn the_waiting_key_is_the_innermost_calls_with_baked_values() {
        let mut cache: RecipeCache<u32> = RecipeCache::default();
        assert_eq!(waiting_key(false), None);
        missed(call(&[8], "outer", 1, &[]));
        missed(call(&[9], "inner", 1, &[2.5]));
        assert_eq!(waiting_key(false), Some(vec![9]));
        assert_eq!(waiting_key(true), Some(with_values(&[9], &[2.5f64.to_bits()])));
        done(&mut cache);
        assert_eq!(waiting_key(false), Some(vec![8]));
        done(&mut cache);
        assert_eq!(waiting_key(false), None);
    }

    #[test]
    fn only_the_innermost_call_learns() {
        let mut cache = RecipeCache::default();
        missed(call(&[5], "outer", 1, &[]));
        missed(call(&[6], "inner", 1, &[]));
        assert!(learn(&mut cache, "outer", 1, 0, false, Arc::new(5)).is_err());
        assert!(learn(&mut cache, "inner", 1, 0, false, Arc::new(6)).is_ok());
        done(&mut cache);
        assert!(learn(&mut cache, "outer", 1, 0, false, Arc::new(5)).is_ok());
        done(&mut cache);
        assert_eq!((runs(&cache, &[5], &[]), runs(&cache, &[6], &[])), (Some(5), Some(6)));
    }

    #[test]
    fn another_thread_cannot_answer_this_threads_call() {
        missed(call(&[7], "aten::abs", 1, &[]));
        let answered =
            std::thread::spawn(|| learn(&mut RecipeCache::default(), "aten::abs", 1, 0, false, Arc::new(7u32)))
                .join()
                .unwrap();
        assert_eq!(answered, Err(Arc::new(7)), "refused, and the recipe comes back");
        let mut cache = RecipeCache::default();
        assert!(learn(&mut cache, "aten::abs", 1, 0, false, Arc::new(7u32)).is_ok());
        done(&mut cache);
    }
}
