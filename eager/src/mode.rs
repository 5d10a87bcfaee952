//! What the native path reads of the mode on every call: whether the calling thread is in
//! DeferAndFuse mode (per thread, as the mode is: `torchtpu.device._native.set_mode` sets it; a
//! thread that never set its own has the process default's), and whether the programs being
//! built check their indices (process-wide, part of the key, as the Python path keeps programs
//! per setting).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

static DEFER_DEFAULT: AtomicBool = AtomicBool::new(false);
static CHECKS: AtomicBool = AtomicBool::new(true);

thread_local! {
    static DEFER_HERE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether the calling thread is in DeferAndFuse mode.
pub fn defer() -> bool {
    DEFER_HERE.with(Cell::get).unwrap_or_else(|| DEFER_DEFAULT.load(Ordering::Relaxed))
}

/// The calling thread's mode is (or is not) DeferAndFuse.
pub fn set_defer(on: bool) {
    DEFER_HERE.with(|d| d.set(Some(on)));
}

/// Threads that never set their mode are (or are not) in DeferAndFuse mode.
pub fn set_defer_default(on: bool) {
    DEFER_DEFAULT.store(on, Ordering::Relaxed);
}

pub fn checks() -> bool {
    CHECKS.load(Ordering::Relaxed)
}

pub fn set_checks(on: bool) {
    CHECKS.store(on, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_own_mode_and_others_take_the_default() {
        set_defer_default(false);
        set_defer(true);
        assert!(defer());
        assert!(!std::thread::spawn(defer).join().unwrap(), "a new thread has the default's");
        set_defer_default(true);
        assert!(std::thread::spawn(defer).join().unwrap());
        set_defer(false);
        assert!(!defer(), "a thread's own setting wins over the default");
        set_defer_default(false);
    }
}
