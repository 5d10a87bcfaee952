//! The plugin binary's identity on disk: a cheap file stamp and the (expensive) SHA-256.
//!
//! The stamp (device, inode, size, mtime, ctime) is taken when the plugin is loaded; the hash
//! is checked against it so that a file replaced after `dlopen` is never mistaken for the
//! binary that is actually running.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::hex;

/// What `stat` says about a file: any rewrite or replacement changes at least one field
/// (ctime cannot be set back by an unprivileged user).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileStamp {
    /// The stamp of the file at `path` now.
    pub fn of(path: &Path) -> std::io::Result<FileStamp> {
        let m = std::fs::metadata(path)?;
        Ok(Self::from_metadata(&m))
    }

    #[cfg(unix)]
    fn from_metadata(m: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime().saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec()),
            ctime_ns: m.ctime().saturating_mul(1_000_000_000).saturating_add(m.ctime_nsec()),
        }
    }

    #[cfg(not(unix))]
    fn from_metadata(m: &std::fs::Metadata) -> FileStamp {
        let ns = |t: std::io::Result<std::time::SystemTime>| {
            t.ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as i64)
        };
        FileStamp { dev: 0, ino: 0, size: m.len(), mtime_ns: ns(m.modified()), ctime_ns: ns(m.created()) }
    }
}

/// SHA-256 (hex) of the file at `path`, provided its stamp is still `expected` before and
/// after reading (otherwise the content may not be what was loaded).
pub fn sha256_if_unchanged(path: &Path, expected: &FileStamp) -> Result<String, String> {
    let check = |when: &str| match FileStamp::of(path) {
        Ok(now) if now == *expected => Ok(()),
        Ok(_) => {
            Err(format!("the file changed on disk {when} (it was replaced or rewritten after the plugin was loaded)"))
        }
        Err(e) => Err(format!("cannot stat it {when}: {e}")),
    };
    check("since it was loaded")?;
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read it: {e}")),
        }
    }
    check("while it was being hashed")?;
    Ok(hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_a_file_and_notices_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.so");
        std::fs::write(&path, b"abc").unwrap();
        let stamp = FileStamp::of(&path).unwrap();
        assert_eq!(
            sha256_if_unchanged(&path, &stamp).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::write(&path, b"abcd").unwrap();
        let err = sha256_if_unchanged(&path, &stamp).unwrap_err();
        assert!(err.contains("changed"), "{err}");
        std::fs::remove_file(&path).unwrap();
        assert!(sha256_if_unchanged(&path, &stamp).is_err());
    }
}
