//! Forked children. A PJRT plugin's client runs thread pools and holds locks; after `fork()`
//! only the forking thread exists in the child, so any PJRT call there can wait forever on a
//! thread or lock that is gone (a DataLoader worker forked after the parent used the device).
//! The process that loaded the first plugin is remembered; in any other process (a fork that
//! inherited the plugin) every PJRT call is refused with [`RuntimeError::ForkedChild`]
//! instead, and drops skip their destroy calls (the memory belongs to the parent's device).

use std::sync::OnceLock;

use crate::error::{Result, RuntimeError};

static LOADING_PROCESS: OnceLock<u32> = OnceLock::new();

/// Records this process as the one that owns the plugins (at the first load).
pub(crate) fn note_plugin_loaded() {
    let _ = LOADING_PROCESS.set(std::process::id());
}

/// Whether this process was forked from one that had already loaded a PJRT plugin.
pub fn in_forked_child() -> bool {
    LOADING_PROCESS.get().is_some_and(|&pid| pid != std::process::id())
}

/// `Err(ForkedChild)` in a forked child, before any PJRT call is made.
pub(crate) fn check_not_forked() -> Result<()> {
    if in_forked_child() {
        return Err(RuntimeError::ForkedChild);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loading_process_is_not_a_forked_child() {
        note_plugin_loaded();
        assert!(!in_forked_child());
        assert!(check_not_forked().is_ok());
    }
}
