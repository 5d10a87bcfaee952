//! Where the store lives and how it is laid out: the root folder (from the environment),
//! `v<LAYOUT_VERSION>/<level>/<partition>/` (a partition: one toolchain, one compiler build)
//! and `<key>.bin` + `<key>.json` per entry; plus a scan of everything in it, older layouts
//! included.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::Result;

use super::files::{io_err, TMP_PREFIX};
use super::{Level, LAYOUT_VERSION};

/// Overrides the cache folder.
pub const CACHE_DIR_ENV: &str = "TORCHTPU_CACHE_DIR";
/// `0` (or `false`, `off`, `no`) disables the persistent cache.
pub const CACHE_ENV: &str = "TORCHTPU_CACHE";
/// Size limit, e.g. `2GiB` (default) or `500M`.
pub const CACHE_MAX_SIZE_ENV: &str = "TORCHTPU_CACHE_MAX_SIZE";
/// Compiles faster than this many seconds are not stored (default 0: store everything).
pub const CACHE_MIN_COMPILE_SECS_ENV: &str = "TORCHTPU_CACHE_MIN_COMPILE_SECS";
/// `0` (or `false`, `off`, `no`) turns the per-key locks off: each process compiles its own
/// misses, even when another one is compiling the same program (`lock.rs`).
pub const CACHE_SHARED_ENV: &str = "TORCHTPU_CACHE_SHARED";
/// How long a process waits for another one making the same entry, e.g. `300` (seconds,
/// the default), `90s`, `10m`.
pub const CACHE_LOCK_TIMEOUT_ENV: &str = "TORCHTPU_CACHE_LOCK_TIMEOUT";

/// The cache folder: `$TORCHTPU_CACHE_DIR`, else `$XDG_CACHE_HOME/torchtpu` (when absolute),
/// else `$HOME/.cache/torchtpu`; `None` when none is set. `var` reads the environment.
pub fn resolve_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(CACHE_DIR_ENV) {
        return Some(dir);
    }
    if let Some(xdg) = set("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("torchtpu"));
    }
    set("HOME").map(|home| home.join(".cache").join("torchtpu"))
}

/// Whether `TORCHTPU_CACHE`'s value turns the cache off.
pub fn disabled_by(value: Option<&OsString>) -> bool {
    value.is_some_and(|v| {
        matches!(v.to_string_lossy().trim().to_ascii_lowercase().as_str(), "0" | "false" | "off" | "no")
    })
}

pub(crate) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `<root>/v<LAYOUT_VERSION>`: everything this torchtpu reads.
pub fn layout_dir(root: &Path) -> PathBuf {
    root.join(format!("v{LAYOUT_VERSION}"))
}

/// The folder of one partition of a level.
pub fn partition_dir(root: &Path, level: Level, partition: &str) -> PathBuf {
    layout_dir(root).join(level.dir_name()).join(partition)
}

/// Paths of one entry.
#[derive(Clone, Debug)]
pub struct EntryPaths {
    pub bin: PathBuf,
    pub json: PathBuf,
    /// The key's lock file (present only while a process makes the entry, or after a crash).
    pub lock: PathBuf,
}

pub fn entry_paths(root: &Path, level: Level, partition: &str, key_hex: &str) -> EntryPaths {
    let dir = partition_dir(root, level, partition);
    EntryPaths {
        bin: dir.join(format!("{key_hex}.bin")),
        json: dir.join(format!("{key_hex}.json")),
        lock: dir.join(format!("{key_hex}.lock")),
    }
}

/// One entry found on disk (its `.bin` exists; the sidecar may not).
#[derive(Clone, Debug)]
pub struct ScannedEntry {
    pub level: Level,
    pub partition: String,
    pub key: String,
    pub paths: EntryPaths,
    pub bin_bytes: u64,
    pub json_bytes: u64,
    /// The later of the two files' modification times (a hit rewrites the sidecar).
    pub last_used: SystemTime,
}

impl ScannedEntry {
    pub fn total_bytes(&self) -> u64 {
        self.bin_bytes + self.json_bytes
    }
}

/// A file in a store folder that is not part of a complete entry.
#[derive(Clone, Debug)]
pub struct Leftover {
    pub path: PathBuf,
    pub modified: SystemTime,
    pub bytes: u64,
}

/// Everything under a cache root.
#[derive(Debug, Default)]
pub struct Scan {
    pub entries: Vec<ScannedEntry>,
    /// Sidecars whose `.bin` is gone (an eviction raced a hit's sidecar update).
    pub orphans: Vec<Leftover>,
    /// Temporary files (a write in progress, or one a crash left behind).
    pub temps: Vec<Leftover>,
    /// Per-key lock files (a compile in progress, or one a crash left behind).
    pub locks: Vec<Leftover>,
    /// Files of older layouts (never read; pruned like entries, least recently used first).
    pub stale: Vec<Leftover>,
    /// Folders that hold (or held) stale files, deepest first, removed by `clear` when empty.
    pub stale_dirs: Vec<PathBuf>,
}

fn read_dir_or_empty(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    match std::fs::read_dir(dir) {
        Ok(it) => Ok(it.filter_map(|e| e.ok()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err("list", dir)(e)),
    }
}

fn size_and_mtime(path: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
}

/// Whether `name` is a file some layout of the store writes (entries, sidecars, old graph
/// entries, temporaries): only such files are ever removed.
fn is_store_file(name: &str) -> bool {
    name.starts_with(TMP_PREFIX)
        || [".bin", ".json", ".hlo"].iter().any(|ext| name.strip_suffix(ext).is_some_and(|stem| is_hex(stem, 64)))
}

/// The store files directly in `dir`, as stale leftovers.
fn stale_files(dir: &Path, out: &mut Scan) -> Result<()> {
    for file in read_dir_or_empty(dir)? {
        let name = file.file_name().to_string_lossy().into_owned();
        if is_store_file(&name) {
            if let Some((bytes, modified)) = size_and_mtime(&file.path()) {
                out.stale.push(Leftover { path: file.path(), modified, bytes });
            }
        }
    }
    out.stale_dirs.push(dir.to_path_buf());
    Ok(())
}

/// Older layouts under `root`: version 1 put executable entries in `<root>/<16 hex>/` and
/// graph entries in `<root>/graphs/v1-<version>/<sha256>.hlo`; `<root>/v<N>/` for N below
/// [`LAYOUT_VERSION`] are older versions of this layout. Newer versions are left alone.
fn scan_stale(root: &Path, out: &mut Scan) -> Result<()> {
    for folder in read_dir_or_empty(root)? {
        let name = folder.file_name().to_string_lossy().into_owned();
        let path = folder.path();
        if !path.is_dir() {
            continue;
        }
        if is_hex(&name, 16) {
            stale_files(&path, out)?;
        } else if name == "graphs" {
            for sub in read_dir_or_empty(&path)? {
                if sub.file_name().to_string_lossy().starts_with("v1-") && sub.path().is_dir() {
                    stale_files(&sub.path(), out)?;
                }
            }
            out.stale_dirs.push(path);
        } else if let Some(n) = name.strip_prefix('v').and_then(|n| n.parse::<u32>().ok()) {
            if n < LAYOUT_VERSION {
                for level in read_dir_or_empty(&path)? {
                    for part in read_dir_or_empty(&level.path())? {
                        if part.path().is_dir() {
                            stale_files(&part.path(), out)?;
                        }
                    }
                    out.stale_dirs.push(level.path());
                }
                out.stale_dirs.push(path);
            }
        }
    }
    Ok(())
}

/// Lists every entry (both levels), orphaned sidecar, temporary file, lock file and stale file under
/// `root` (a missing root is empty). Files that vanish while scanning (another process
/// evicting) are skipped.
pub fn scan(root: &Path) -> Result<Scan> {
    let mut out = Scan::default();
    for level in Level::ALL {
        let level_dir = layout_dir(root).join(level.dir_name());
        for folder in read_dir_or_empty(&level_dir)? {
            let partition = folder.file_name().to_string_lossy().into_owned();
            if !is_hex(&partition, 16) || !folder.path().is_dir() {
                continue;
            }
            let mut bins = Vec::new();
            let mut jsons = Vec::new();
            for file in read_dir_or_empty(&folder.path())? {
                let name = file.file_name().to_string_lossy().into_owned();
                let path = file.path();
                if name.starts_with(TMP_PREFIX) {
                    if let Some((bytes, modified)) = size_and_mtime(&path) {
                        out.temps.push(Leftover { path, modified, bytes });
                    }
                } else if name.strip_suffix(".lock").is_some_and(|s| is_hex(s, 64)) {
                    if let Some((bytes, modified)) = size_and_mtime(&path) {
                        out.locks.push(Leftover { path, modified, bytes });
                    }
                } else if let Some(stem) = name.strip_suffix(".bin").filter(|s| is_hex(s, 64)) {
                    bins.push(stem.to_owned());
                } else if let Some(stem) = name.strip_suffix(".json").filter(|s| is_hex(s, 64)) {
                    jsons.push(stem.to_owned());
                }
            }
            for key in &bins {
                let paths = entry_paths(root, level, &partition, key);
                let Some((bin_bytes, bin_time)) = size_and_mtime(&paths.bin) else {
                    continue;
                };
                let (json_bytes, json_time) = size_and_mtime(&paths.json).unwrap_or((0, SystemTime::UNIX_EPOCH));
                out.entries.push(ScannedEntry {
                    level,
                    partition: partition.clone(),
                    key: key.clone(),
                    paths,
                    bin_bytes,
                    json_bytes,
                    last_used: bin_time.max(json_time),
                });
            }
            for key in jsons.iter().filter(|k| !bins.contains(k)) {
                let path = entry_paths(root, level, &partition, key).json;
                if let Some((bytes, modified)) = size_and_mtime(&path) {
                    out.orphans.push(Leftover { path, modified, bytes });
                }
            }
        }
    }
    scan_stale(root, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
    }

    #[test]
    fn directory_resolution_order() {
        let all = [(CACHE_DIR_ENV, "/explicit"), ("XDG_CACHE_HOME", "/xdg"), ("HOME", "/home/u")];
        assert_eq!(resolve_dir(env(&all)), Some(PathBuf::from("/explicit")));
        assert_eq!(resolve_dir(env(&all[1..])), Some(PathBuf::from("/xdg/torchtpu")));
        assert_eq!(
            resolve_dir(env(&[("XDG_CACHE_HOME", "relative"), ("HOME", "/home/u")])),
            Some(PathBuf::from("/home/u/.cache/torchtpu"))
        );
        assert_eq!(resolve_dir(env(&[(CACHE_DIR_ENV, ""), ("HOME", "/h")])), Some(PathBuf::from("/h/.cache/torchtpu")));
        assert_eq!(resolve_dir(env(&[])), None);
    }

    #[test]
    fn disable_values() {
        for v in ["0", "false", "OFF", "no"] {
            assert!(disabled_by(Some(&OsString::from(v))), "{v}");
        }
        for v in ["1", "", "yes"] {
            assert!(!disabled_by(Some(&OsString::from(v))), "{v}");
        }
        assert!(!disabled_by(None));
    }
}
