//! The store's own errors: what the file system refused, and a key or prefix that names no
//! entry (or several). The runtime wraps them (`RuntimeError::from`); the store knows nothing
//! of PJRT.

use std::path::{Path, PathBuf};

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
}

/// The `map_err` for a file-system call on `path`.
pub fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io { action, path, source }
}
