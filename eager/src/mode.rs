//! The eager device's mode, the one copy of it: per thread (`torchtpu.eager.mode` sets the
//! calling thread's; a thread that never set its own has the process default's, from
//! TORCHTPU_EAGER_MODE), read by the native path on every call, by the dispatcher shim through
//! the C ABI (`takes_native`) and by Python through the extension (`_C.eager_mode`). Also
//! whether the programs being built check their indices (process-wide, part of the key, as the
//! Python path keeps programs per setting).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// How ops on the tpu device run (docs/eager.md, "Modes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Each op runs at once, natively where it can.
    Strict = 0,
    /// Each op runs at once in Python, with per-op checks.
    Debug = 1,
    /// Ops are recorded into a region, compiled and run as one program at a cut.
    DeferAndFuse = 2,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Strict, Mode::Debug, Mode::DeferAndFuse];

    /// Its name, as `torchtpu.eager.mode` and TORCHTPU_EAGER_MODE spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Debug => "debug",
            Mode::DeferAndFuse => "defer_and_fuse",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether ops reach the native per-op path (debug's checks stay in Python).
    pub fn takes_native(self) -> bool {
        self != Mode::Debug
    }

    fn from_u8(v: u8) -> Mode {
        Mode::ALL.into_iter().find(|m| *m as u8 == v).unwrap_or(Mode::Strict)
    }
}

static DEFAULT: AtomicU8 = AtomicU8::new(Mode::Strict as u8);
static CHECKS: AtomicBool = AtomicBool::new(true);

thread_local! {
    static HERE: Cell<Option<Mode>> = const { Cell::new(None) };
}

/// The calling thread's mode.
pub fn current() -> Mode {
    HERE.with(Cell::get).unwrap_or_else(|| Mode::from_u8(DEFAULT.load(Ordering::Relaxed)))
}

/// Sets the calling thread's mode.
pub fn set(mode: Mode) {
    HERE.with(|m| m.set(Some(mode)));
}

/// Sets the mode of threads that never set their own.
pub fn set_default(mode: Mode) {
    DEFAULT.store(mode as u8, Ordering::Relaxed);
}

/// Whether the calling thread records ops (DeferAndFuse).
pub fn defer() -> bool {
    current() == Mode::DeferAndFuse
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
    fn names_round_trip_and_only_debug_stays_in_python() {
        for m in Mode::ALL {
            assert_eq!(Mode::from_name(m.name()), Some(m));
            assert_eq!(Mode::from_u8(m as u8), m);
        }
        assert_eq!(Mode::from_name("fast"), None);
        assert!(Mode::Strict.takes_native() && Mode::DeferAndFuse.takes_native());
        assert!(!Mode::Debug.takes_native());
    }

    #[test]
    fn a_thread_keeps_its_own_mode_and_others_take_the_default() {
        set_default(Mode::Strict);
        set(Mode::DeferAndFuse);
        assert!(defer());
        assert_eq!(std::thread::spawn(current).join().unwrap(), Mode::Strict, "a new thread has the default's");
        set_default(Mode::Debug);
        assert_eq!(std::thread::spawn(current).join().unwrap(), Mode::Debug);
        set(Mode::Strict);
        assert_eq!(current(), Mode::Strict, "a thread's own setting wins over the default");
        set_default(Mode::Strict);
    }
}
