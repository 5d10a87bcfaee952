//! The store's own errors: what the file system refused, a folder or entry another user could
//! have written (refused, as ssh refuses a `~/.ssh` others can write), a per-key lock that
//! another process held for too long, and a key or prefix that names no entry (or several).
//! The runtime wraps them (`RuntimeError::from`); the store knows nothing of PJRT.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file-system operation on the store failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A key prefix that is malformed, names no entry, or names several.
    #[error("{0}")]
    Key(String),
    /// A folder of the store, or an entry, is owned by another user or writable by group or
    /// others: it is not used (a cached executable is native code). `fix` is the command
    /// that makes it private again.
    #[error(
        "refusing {}: {problem}. A cached executable is native code, so torchtpu uses no cache folder or entry \
         another user could have written; the cache is not used for it. Fix: {fix}",
        path.display()
    )]
    Insecure { path: PathBuf, problem: String, fix: String },
    /// Another process held the entry's lock (it was making the same entry) for longer than
    /// the store's lock timeout: the caller makes the entry itself.
    #[error(
        "waited {:.1} s for {} (another process making the same entry) and gave up: making it here instead \
         (the wait is set by TORCHTPU_CACHE_LOCK_TIMEOUT)",
        waited.as_secs_f64(),
        path.display()
    )]
    LockTimeout { path: PathBuf, waited: Duration },
}

/// The `map_err` for a file-system call on `path`.
pub fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { action, path, source }
}
