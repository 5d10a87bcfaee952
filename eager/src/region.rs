//! DeferAndFuse's region key: what makes two closed regions the same program. A region program
//! is compiled once per key and run for every region with that key (the extension's `cut.rs`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// One recorded program in a region: its serial (op, attributes, input types) and its wiring,
/// per input: an earlier value of the region (>= 0) or the k-th distinct external buffer
/// (-1 - k).
pub type Token = (i64, Box<[i64]>);

/// Aliasing, liveness and donation are in it: the same programs with another value still
/// referenced after the cut (`live`) or another external only the region holds (`dead`, so
/// donated) compile to another program.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct RegionKey {
    pub tokens: Vec<Token>,
    /// Indices of the region's values something outside it still references.
    pub live: Vec<usize>,
    /// Indices of its external buffers only the region holds.
    pub dead: Vec<usize>,
}

impl RegionKey {
    /// The key's name in explain records and miss descriptions: 12 hex digits, stable within
    /// a build.
    pub fn id(&self) -> String {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        format!("{:012x}", h.finish() & 0xFFFF_FFFF_FFFF)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tokens: &[(i64, &[i64])], live: &[usize], dead: &[usize]) -> RegionKey {
        RegionKey {
            tokens: tokens.iter().map(|(s, w)| (*s, w.to_vec().into_boxed_slice())).collect(),
            live: live.to_vec(),
            dead: dead.to_vec(),
        }
    }

    #[test]
    fn the_id_is_twelve_hex_digits_and_equal_keys_share_it() {
        let a = key(&[(3, &[-1, -2]), (4, &[0])], &[1], &[]);
        assert_eq!(a.id().len(), 12);
        assert!(a.id().chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a.id(), a.clone().id());
    }

    #[test]
    fn wiring_liveness_and_donation_each_make_another_program() {
        let a = key(&[(3, &[-1, -2]), (4, &[0])], &[1], &[]);
        let rewired = key(&[(3, &[-1, -1]), (4, &[0])], &[1], &[]);
        let more_live = key(&[(3, &[-1, -2]), (4, &[0])], &[0, 1], &[]);
        let donating = key(&[(3, &[-1, -2]), (4, &[0])], &[1], &[0]);
        for other in [&rewired, &more_live, &donating] {
            assert_ne!(&a, other);
            assert_ne!(a.id(), other.id());
        }
    }
}
