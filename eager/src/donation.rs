//! Which inputs of an in-place or out= op's program are donated: PJRT may then write the result
//! into the target's memory instead of a copy of it, so `x.fill_(1)` needs one buffer of `x`,
//! not two, and a KV cache's `index_copy_` costs the update, not the cache. One rule for both
//! paths: the native one (`python/src/eager/path.rs`) and the Python one
//! (`device/_dispatch._donations`, through `_C.eager_donations`). Each describes its targets;
//! this decides.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Below this size (bytes) a target is not donated: copying it costs less than compiling the
/// program's donating variant. `benches/inplace_peak.py` moves it to measure donation.
static MIN_BYTES: AtomicUsize = AtomicUsize::new(1 << 20);

/// The smallest target a program donates, in bytes.
pub fn min_bytes() -> usize {
    MIN_BYTES.load(Ordering::Relaxed)
}

/// Sets `min_bytes` (0: every target; a huge value: none), returning the old one.
pub fn set_min_bytes(bytes: usize) -> usize {
    MIN_BYTES.swap(bytes, Ordering::Relaxed)
}

/// One tensor an op writes, as its path sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Whether the program's result replaces the target storage's whole buffer (the target is
    /// its whole storage, or the program scatters the view's result into it), at the buffer's
    /// dtype and size.
    pub replaces_buffer: bool,
    /// The program inputs (positions) that read the storage's buffer.
    pub read_by: Vec<usize>,
    /// The buffer's size in bytes.
    pub nbytes: usize,
    /// Who else holds the buffer: another storage (a `copy_` shares buffers), a pending value,
    /// a Python variable; counted by the caller beyond the storage's slot and its own
    /// references for this call.
    pub other_holders: usize,
}

/// The program input through which `t`'s buffer is donated, if it is: the result replaces the
/// buffer whole, the program reads it as exactly one input, it is at least `min` bytes (the
/// callers pass `min_bytes()`) and nothing else holds it.
pub fn donated_input(t: &Target, min: usize) -> Option<usize> {
    match t.read_by[..] {
        [input] if t.replaces_buffer && t.nbytes >= min && t.other_holders == 0 => Some(input),
        _ => None,
    }
}

/// The program inputs to donate: each target's `donated_input`, once however many targets name
/// it.
pub fn donations(targets: &[Target], min: usize) -> Vec<usize> {
    let mut donate = Vec::new();
    for input in targets.iter().filter_map(|t| donated_input(t, min)) {
        if !donate.contains(&input) {
            donate.push(input);
        }
    }
    donate
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: usize = 1 << 20;

    fn target(read_by: &[usize]) -> Target {
        Target { replaces_buffer: true, read_by: read_by.to_vec(), nbytes: MB, other_holders: 0 }
    }

    #[test]
    fn a_whole_target_read_once_and_held_by_nothing_else_is_donated() {
        assert_eq!(donations(&[target(&[2])], MB), vec![2]);
    }

    #[test]
    fn a_target_is_kept_where_the_rule_does_not_hold() {
        let view = Target { replaces_buffer: false, ..target(&[0]) };
        let small = Target { nbytes: MB - 1, ..target(&[0]) };
        let shared = Target { other_holders: 1, ..target(&[0]) };
        for t in [view, small, shared, target(&[0, 1]), target(&[])] {
            assert_eq!(donations(std::slice::from_ref(&t), MB), Vec::<usize>::new(), "{t:?}");
        }
    }

    #[test]
    fn an_input_two_targets_name_is_donated_once() {
        assert_eq!(donations(&[target(&[1]), target(&[1]), target(&[3])], MB), vec![1, 3]);
    }

    #[test]
    fn the_smallest_donated_size_is_a_setting() {
        let tiny = Target { nbytes: 4, ..target(&[0]) };
        assert_eq!(donations(std::slice::from_ref(&tiny), 0), vec![0]);
        assert_eq!(donations(std::slice::from_ref(&tiny), min_bytes()), Vec::<usize>::new());
        // The only test that moves it (tests run in threads of one process).
        let old = set_min_bytes(4);
        assert_eq!(donations(std::slice::from_ref(&tiny), min_bytes()), vec![0]);
        assert_eq!(set_min_bytes(old), 4);
    }
}
