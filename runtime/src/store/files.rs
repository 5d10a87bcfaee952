//! File-system primitives that keep the cache consistent without locks on its entries: every
//! write goes to a uniquely named temporary file (mode 0600) in the destination folder and is
//! `rename`d into place, so readers (in any process) see the old file or the new one, never a
//! partial one. (The per-key locks of `lock.rs` only spare other processes a compile.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use super::error::io_err;
use super::error::Result;

/// Temporary files start with this, so listings skip them and stale ones can be swept.
pub const TMP_PREFIX: &str = ".tmp-";

/// A temporary name next to `dest`, unique across processes and threads.
fn temp_path(dest: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let name = dest.file_name().map_or_else(Default::default, |n| n.to_string_lossy());
    dest.with_file_name(format!("{TMP_PREFIX}{}-{n}-{nanos}-{name}", std::process::id()))
}

/// Writes `bytes` to `dest` atomically (temporary file + rename), creating the folder (mode
/// 0700) if missing. The temporary file is created with mode 0600, so the entry is private
/// from its first byte. Not fsync'ed: after a power loss an entry may be empty or stale, which
/// its checksum turns into a miss.
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = dest.parent() {
        super::private::create_dir_all(dir)?;
    }
    let tmp = temp_path(dest);
    let written = super::private::new_file_options()
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(io_err("write", &tmp))
        .and_then(|()| std::fs::rename(&tmp, dest).map_err(io_err("rename into", dest)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads `path`; `Ok(None)` if it does not exist.
pub fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", path)(e)),
    }
}

/// Removes `path`; a file that is already gone is not an error. Returns whether it removed.
pub fn remove_if_exists(path: &Path) -> Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}

/// A file's identity (device and inode on Unix).
pub type FileId = (u64, u64);

/// Identity of the file now at `path`, to avoid deleting a file that another process renamed
/// into place after we read the old one.
#[cfg(unix)]
pub fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
pub fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|m| (m.len(), 0))
}

/// Identity of an open file.
#[cfg(unix)]
pub fn identity(file: &std::fs::File) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
pub fn identity(file: &std::fs::File) -> Option<FileId> {
    file.metadata().ok().map(|m| (m.len(), 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("sub").join("a.bin");
        write_atomic(&dest, b"one").unwrap();
        write_atomic(&dest, b"two").unwrap();
        assert_eq!(read_if_exists(&dest).unwrap().unwrap(), b"two");
        let names: Vec<_> =
            std::fs::read_dir(dest.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["a.bin"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
            assert_eq!(mode(&dest), 0o600, "new files are private");
            assert_eq!(mode(dest.parent().unwrap()), 0o700, "new folders are private");
        }
        assert!(remove_if_exists(&dest).unwrap());
        assert!(!remove_if_exists(&dest).unwrap());
        assert!(read_if_exists(&dest).unwrap().is_none());
    }
}
