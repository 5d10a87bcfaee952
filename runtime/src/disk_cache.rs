//! The persistent compilation cache: serialized executables on disk, keyed by
//! [`CacheKey`], shared safely by every process that uses the same folder.
//!
//! Layout, knobs and the `torchtpu-cache` tool are described in `docs/cache.md`. No locks:
//! every file is written to a temporary name and renamed into place, and every reader checks
//! what it reads, so a damaged entry is a miss (reported, then removed), never a crash.

mod entry;
mod files;
mod layout;
mod maintain;
mod meta;
mod plugin_memo;
pub mod units;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cache_key::CacheKey;
use crate::client::Client;
use crate::error::Result;
use crate::executable::Executable;
use crate::options::CompileOptions;

pub use entry::{FORMAT_VERSION as ENTRY_FORMAT_VERSION, HEADER_LEN as ENTRY_HEADER_LEN};
pub use layout::{CACHE_DIR_ENV, CACHE_ENV, CACHE_MAX_SIZE_ENV, CACHE_MIN_COMPILE_SECS_ENV};
pub use maintain::{BadEntry, CacheSummary, EntryInfo, PruneReport, SkippedEntry, VerifyReport};
pub use meta::EntryMeta;

use files::{file_id, io_err, read_if_exists, remove_if_exists, write_atomic};
use layout::{entry_paths, toolchain_fingerprint, EntryPaths};

/// Default size limit: 2 GiB.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// At most this many warnings are kept until [`DiskCache::take_warnings`].
const MAX_WARNINGS: usize = 100;

/// Something the cache noticed and recovered from (a damaged entry it discarded, a write
/// that failed, a bad environment value), for the caller to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheWarning {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for CacheWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "torchtpu cache: {}: {}", self.path.display(), self.message)
    }
}

/// What a lookup found.
// A `Hit` is much bigger than the other variants; one is returned per lookup, so no Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Lookup {
    /// A usable entry, loaded on the client; `meta` is its sidecar after counting the hit
    /// (`None` if the sidecar is missing or unreadable).
    Hit { executable: Executable, meta: Option<EntryMeta> },
    /// No entry for the key.
    Miss,
    /// There was an entry but it was unusable; it has been removed (and a warning recorded).
    Discarded { path: PathBuf, reason: String },
}

/// What the caller knows about a compile it is storing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PutMeta {
    /// A name for the compiled graph, shown by `torchtpu-cache list`.
    pub graph_name: Option<String>,
    /// How long the compile took.
    pub compile_seconds: f64,
}

/// What [`DiskCache::put`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written; `evicted` older entries were removed to stay under the size limit.
    Stored { entry_bytes: u64, evicted: usize },
    /// The compile was faster than the configured threshold.
    SkippedFastCompile,
    /// The entry alone is bigger than the size limit.
    SkippedTooLarge,
}

/// A cache folder and its limits. Cheap to create (nothing is touched until the first
/// `put`); thread-safe.
#[derive(Debug)]
pub struct DiskCache {
    root: PathBuf,
    max_size: u64,
    min_compile_seconds: f64,
    warnings: Mutex<Vec<CacheWarning>>,
    /// Plugins (by path) whose hash memo this cache has already consulted and recorded.
    memoized: Mutex<Vec<PathBuf>>,
}

impl DiskCache {
    /// A cache in `root` with the default limits (2 GiB, store every compile).
    pub fn new(root: impl Into<PathBuf>) -> DiskCache {
        DiskCache {
            root: root.into(),
            max_size: DEFAULT_MAX_SIZE,
            min_compile_seconds: 0.0,
            warnings: Mutex::new(Vec::new()),
            memoized: Mutex::new(Vec::new()),
        }
    }

    /// The cache the environment asks for (see `docs/cache.md`): `None` when
    /// `TORCHTPU_CACHE=0` or no folder can be found. Invalid limit values keep the defaults
    /// and leave a warning.
    pub fn from_env() -> Option<DiskCache> {
        Self::from_vars(|name| std::env::var_os(name))
    }

    /// The folder the environment names (`TORCHTPU_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`),
    /// whether or not `TORCHTPU_CACHE` disables the cache.
    pub fn default_dir() -> Option<PathBuf> {
        layout::resolve_dir(|name| std::env::var_os(name))
    }

    /// [`DiskCache::from_env`] over any variable lookup (for tests and embedders).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Option<DiskCache> {
        if layout::disabled_by(var(CACHE_ENV).as_ref()) {
            return None;
        }
        let mut cache = DiskCache::new(layout::resolve_dir(&var)?);
        if let Some(v) = var(CACHE_MAX_SIZE_ENV) {
            match units::parse_size(&v.to_string_lossy()) {
                Ok(bytes) => cache.max_size = bytes,
                Err(e) => cache.warn(Path::new(CACHE_MAX_SIZE_ENV), format!("{e}; using 2 GiB")),
            }
        }
        if let Some(v) = var(CACHE_MIN_COMPILE_SECS_ENV) {
            match v.to_string_lossy().trim().parse::<f64>() {
                Ok(s) if s.is_finite() && s >= 0.0 => cache.min_compile_seconds = s,
                _ => cache.warn(
                    Path::new(CACHE_MIN_COMPILE_SECS_ENV),
                    format!("invalid value {v:?} (expected seconds >= 0); using 0"),
                ),
            }
        }
        Some(cache)
    }

    /// Sets the size limit; after each `put`, least-recently-used entries are evicted until
    /// the whole folder (every toolchain) fits.
    pub fn with_max_size(mut self, bytes: u64) -> DiskCache {
        self.max_size = bytes;
        self
    }

    /// Compiles that took less than `seconds` are not stored (0 stores everything).
    pub fn with_min_compile_seconds(mut self, seconds: f64) -> DiskCache {
        self.min_compile_seconds = seconds.max(0.0);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    pub fn min_compile_seconds(&self) -> f64 {
        self.min_compile_seconds
    }

    /// The persistent key for compiling `module` with `options` on `client`. Like
    /// [`CacheKey::new`], but the plugin binary's hash comes from a memo in this folder when
    /// the plugin file is unchanged (hashing it costs 0.2-0.4 s once per process otherwise).
    pub fn key<'a>(
        &self,
        client: &'a Client,
        module: &'a (impl AsRef<[u8]> + ?Sized),
        options: &CompileOptions,
    ) -> Result<CacheKey<'a>> {
        self.plugin_sha256(client.plugin())?;
        CacheKey::new(client, module, options)
    }

    /// `plugin`'s binary hash via the memo in this folder (consulted once per plugin).
    pub(crate) fn plugin_sha256(&self, plugin: &crate::Plugin) -> Result<String> {
        let mut done = self.memoized.lock().unwrap_or_else(|p| p.into_inner());
        if plugin.binary_sha256_is_known() && done.iter().any(|p| p == plugin.path()) {
            return plugin.binary_sha256().map(str::to_owned);
        }
        let sha = plugin_memo::plugin_sha256(&self.root, plugin)?;
        done.push(plugin.path().to_path_buf());
        Ok(sha)
    }

    /// The entry files for `key`; a key without the plugin hash (`CacheKey::in_process`)
    /// cannot name a persistent entry.
    fn paths(&self, key: &CacheKey<'_>) -> Result<(String, EntryPaths)> {
        if key.plugin_sha256.is_empty() {
            return Err(crate::RuntimeError::InvalidArgument(
                "a disk cache key needs the plugin binary's hash (use DiskCache::key or \
                 CacheKey::new, not CacheKey::in_process)"
                    .into(),
            ));
        }
        let key_hex = key.digest().hex();
        let paths = entry_paths(&self.root, &toolchain_fingerprint(key), &key_hex);
        Ok((key_hex, paths))
    }

    /// Looks `key` up and loads the entry on `client`. A missing entry is a `Miss`; a
    /// truncated, corrupt, misnamed or unloadable one is removed and `Discarded` (with a
    /// warning). `Err` only for file-system failures other than "not found".
    pub fn lookup(&self, client: &Client, key: &CacheKey<'_>) -> Result<Lookup> {
        let (_, paths) = self.paths(key)?;
        let mut file = match std::fs::File::open(&paths.bin) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lookup::Miss),
            Err(e) => return Err(io_err("open", &paths.bin)(e)),
        };
        let read_id = file_identity(&file);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_err("read", &paths.bin))?;
        drop(file);

        let reason = match entry::decode(&bytes, Some(&key.digest())) {
            Err(reason) => reason,
            Ok(payload) => match client.deserialize_executable(payload) {
                Ok(executable) => {
                    let meta = self.record_hit(&paths);
                    return Ok(Lookup::Hit { executable, meta });
                }
                Err(e) => format!("the plugin could not load it: {e}"),
            },
        };
        // Remove it unless another process has already renamed a fresh entry into place.
        if read_id.is_some() && file_id(&paths.bin) == read_id {
            let _ = remove_if_exists(&paths.bin);
            let _ = remove_if_exists(&paths.json);
        }
        self.warn(&paths.bin, format!("discarded unusable entry ({reason})"));
        Ok(Lookup::Discarded { path: paths.bin, reason })
    }

    /// [`DiskCache::lookup`] as an `Option`: anything but a hit is `None` (a discarded
    /// entry leaves a warning, see [`DiskCache::take_warnings`]).
    pub fn get(&self, client: &Client, key: &CacheKey<'_>) -> Result<Option<Executable>> {
        Ok(match self.lookup(client, key)? {
            Lookup::Hit { executable, .. } => Some(executable),
            Lookup::Miss | Lookup::Discarded { .. } => None,
        })
    }

    /// Counts a hit in the sidecar (best effort: read, update, atomic rewrite).
    fn record_hit(&self, paths: &EntryPaths) -> Option<EntryMeta> {
        let mut meta = EntryMeta::from_json(&read_if_exists(&paths.json).ok()??).ok()?;
        meta.hit_count += 1;
        meta.last_hit_unix_ms = Some(units::now_unix_ms());
        // Skip the rewrite if the entry was evicted meanwhile (it would leave an orphan).
        if paths.bin.exists() {
            let _ = write_atomic(&paths.json, &meta.to_json());
        }
        Some(meta)
    }

    /// Serializes `exe` and stores it under `key` (see [`DiskCache::put_serialized`]).
    pub fn put(&self, key: &CacheKey<'_>, exe: &Executable, meta: &PutMeta) -> Result<PutOutcome> {
        if meta.compile_seconds < self.min_compile_seconds {
            return Ok(PutOutcome::SkippedFastCompile);
        }
        self.put_serialized(key, &exe.serialize()?, meta)
    }

    /// Stores `payload` (from [`Executable::serialize`]) under `key`: the `.bin` entry, then
    /// its sidecar, each written atomically; then evicts least-recently-used entries until
    /// the folder is under the size limit. Concurrent puts of the same key all succeed (the
    /// last rename wins; every version is complete).
    pub fn put_serialized(&self, key: &CacheKey<'_>, payload: &[u8], meta: &PutMeta) -> Result<PutOutcome> {
        if meta.compile_seconds < self.min_compile_seconds {
            return Ok(PutOutcome::SkippedFastCompile);
        }
        let (key_hex, paths) = self.paths(key)?;
        let file = entry::encode(&key.digest(), payload);
        let entry_bytes = file.len() as u64;
        if entry_bytes > self.max_size {
            return Ok(PutOutcome::SkippedTooLarge);
        }
        write_atomic(&paths.bin, &file)?;
        let sidecar = EntryMeta {
            format: meta::META_FORMAT,
            key: key_hex,
            components: key.components(),
            graph_name: meta.graph_name.clone(),
            payload_bytes: payload.len() as u64,
            entry_bytes,
            compile_seconds: meta.compile_seconds,
            created_unix_ms: units::now_unix_ms(),
            last_hit_unix_ms: None,
            hit_count: 0,
        };
        write_atomic(&paths.json, &sidecar.to_json())?;
        let evicted = self.evict_to(self.max_size, Some(&paths.bin))?.removed_entries;
        Ok(PutOutcome::Stored { entry_bytes, evicted })
    }

    /// Records a warning (kept until [`DiskCache::take_warnings`], at most 100).
    pub(crate) fn warn(&self, path: &Path, message: String) {
        let mut w = self.warnings.lock().unwrap_or_else(|p| p.into_inner());
        if w.len() < MAX_WARNINGS {
            w.push(CacheWarning { path: path.to_path_buf(), message });
        }
    }

    /// The warnings recorded since the last call (damaged entries discarded, failed writes,
    /// bad environment values), oldest first.
    pub fn take_warnings(&self) -> Vec<CacheWarning> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(unix)]
fn file_identity(file: &std::fs::File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_identity(file: &std::fs::File) -> Option<(u64, u64)> {
    file.metadata().ok().map(|m| (m.len(), 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_knobs() {
        let vars = |pairs: Vec<(&'static str, &'static str)>| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        assert!(DiskCache::from_vars(vars(vec![(CACHE_ENV, "0"), ("HOME", "/h")])).is_none());
        assert!(DiskCache::from_vars(vars(vec![])).is_none());
        let c = DiskCache::from_vars(vars(vec![
            ("HOME", "/h"),
            (CACHE_MAX_SIZE_ENV, "10M"),
            (CACHE_MIN_COMPILE_SECS_ENV, "0.5"),
        ]))
        .unwrap();
        assert_eq!(c.root(), Path::new("/h/.cache/torchtpu"));
        assert_eq!((c.max_size(), c.min_compile_seconds()), (10 << 20, 0.5));
        assert!(c.take_warnings().is_empty());

        let bad = DiskCache::from_vars(vars(vec![
            (CACHE_DIR_ENV, "/d"),
            (CACHE_MAX_SIZE_ENV, "lots"),
            (CACHE_MIN_COMPILE_SECS_ENV, "-1"),
        ]))
        .unwrap();
        assert_eq!(bad.root(), Path::new("/d"));
        assert_eq!((bad.max_size(), bad.min_compile_seconds()), (DEFAULT_MAX_SIZE, 0.0));
        let w = bad.take_warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].to_string().contains(CACHE_MAX_SIZE_ENV), "{}", w[0]);
        assert!(bad.take_warnings().is_empty());
    }
}
