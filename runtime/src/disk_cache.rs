//! The persistent compilation cache: serialized executables on disk, keyed by
//! [`CacheKey`], shared safely by every process that uses the same folder.
//!
//! Layout, knobs and the `torchtpu-cache` tool are described in `docs/cache.md`. Entries need
//! no locks: every file is written to a temporary name and renamed into place, and every
//! reader checks what it reads, so a damaged entry is a miss (reported, then removed), never a
//! crash. A per-key lock ([`DiskCache::claim`]) only lets the processes of a host compile a
//! missing program once; folders and entries another user could write are refused.

mod plugin_memo;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::cache_key::{CacheKey, TORCHTPU_VERSION};
use crate::client::Client;
use crate::error::Result;
use crate::executable::Executable;
use crate::options::CompileOptions;
use crate::store::maintain::Check;
use crate::store::{layout, Claim, Level, NewEntry, Read, Slot, Store};

pub use crate::store::entry::{FORMAT_VERSION as ENTRY_FORMAT_VERSION, HEADER_LEN as ENTRY_HEADER_LEN};
pub use crate::store::units;
pub use crate::store::{
    BadEntry, CacheSummary, CacheWarning, EntryInfo, EntryMeta, LevelSummary, PruneReport, PutOutcome, SkippedEntry,
    VerifyReport, CACHE_DIR_ENV, CACHE_ENV, CACHE_LOCK_TIMEOUT_ENV, CACHE_MAX_SIZE_ENV, CACHE_MIN_COMPILE_SECS_ENV,
    CACHE_SHARED_ENV, DEFAULT_LOCK_TIMEOUT, DEFAULT_MAX_SIZE,
};

/// The folder name for a key's toolchain: 16 hex characters of a hash over the plugin
/// binary's SHA-256, the platform name and version, and torchtpu's version.
pub fn toolchain_fingerprint(key: &CacheKey<'_>) -> String {
    crate::store::fingerprint(&[
        ("torchtpu-toolchain", b"v1"),
        ("plugin_sha256", key.plugin_sha256.as_bytes()),
        ("platform_name", key.platform_name.as_bytes()),
        ("platform_version", key.platform_version.as_bytes()),
        ("torchtpu_version", key.torchtpu_version.as_bytes()),
    ])
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

/// A cache folder and its limits. Cheap to create (nothing is touched until the first
/// `put`); thread-safe.
#[derive(Debug)]
pub struct DiskCache {
    /// The shared store (both levels); this cache reads and writes its executable level.
    store: Store,
    min_compile_seconds: f64,
    /// Plugins (by path) whose hash memo this cache has already consulted and recorded.
    memoized: Mutex<Vec<PathBuf>>,
}

impl DiskCache {
    /// A cache in `root` with the default limits (2 GiB, store every compile).
    pub fn new(root: impl Into<PathBuf>) -> DiskCache {
        DiskCache { store: Store::new(root), min_compile_seconds: 0.0, memoized: Mutex::new(Vec::new()) }
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
                Ok(bytes) => cache.store.set_max_size(bytes),
                Err(e) => cache.warn(Path::new(CACHE_MAX_SIZE_ENV), format!("{e}; using 2 GiB")),
            }
        }
        if layout::disabled_by(var(CACHE_SHARED_ENV).as_ref()) {
            cache.store.set_lock_timeout(None);
        } else if let Some(v) = var(CACHE_LOCK_TIMEOUT_ENV) {
            match units::parse_duration(&v.to_string_lossy()) {
                Ok(timeout) => cache.store.set_lock_timeout(Some(timeout)),
                Err(e) => cache.warn(
                    Path::new(CACHE_LOCK_TIMEOUT_ENV),
                    format!("{e}; using {} s", DEFAULT_LOCK_TIMEOUT.as_secs()),
                ),
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
        self.store.set_max_size(bytes);
        self
    }

    /// How long [`DiskCache::claim`] waits for another process compiling the same program
    /// (default 300 s); `None`: no waiting, each process compiles its own misses.
    pub fn with_lock_timeout(mut self, timeout: Option<Duration>) -> DiskCache {
        self.store.set_lock_timeout(timeout);
        self
    }

    pub fn lock_timeout(&self) -> Option<Duration> {
        self.store.lock_timeout()
    }

    /// Compiles that took less than `seconds` are not stored (0 stores everything).
    pub fn with_min_compile_seconds(mut self, seconds: f64) -> DiskCache {
        self.min_compile_seconds = seconds.max(0.0);
        self
    }

    pub fn root(&self) -> &Path {
        self.store.root()
    }

    pub fn max_size(&self) -> u64 {
        self.store.max_size()
    }

    /// The store under this cache: both levels, for listing, pruning and verification, and
    /// for the engine's graph level (`Store::clone` gives another handle on the same folder
    /// and limit).
    pub fn store(&self) -> &Store {
        &self.store
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
        let sha = plugin_memo::plugin_sha256(&self.store, plugin)?;
        done.push(plugin.path().to_path_buf());
        Ok(sha)
    }

    /// Where `key`'s entry lives; a key without the plugin hash (`CacheKey::in_process`)
    /// cannot name a persistent entry.
    fn slot(&self, key: &CacheKey<'_>) -> Result<Slot> {
        if key.plugin_sha256.is_empty() {
            return Err(crate::RuntimeError::InvalidArgument(
                "a disk cache key needs the plugin binary's hash (use DiskCache::key or \
                 CacheKey::new, not CacheKey::in_process)"
                    .into(),
            ));
        }
        Ok(Slot { level: Level::Executable, partition: toolchain_fingerprint(key), key: key.digest() })
    }

    /// Looks `key` up and loads the entry on `client`. A missing entry is a `Miss`; a
    /// truncated, corrupt, misnamed or unloadable one is removed and `Discarded` (with a
    /// warning). `Err` only for file-system failures other than "not found".
    pub fn lookup(&self, client: &Client, key: &CacheKey<'_>) -> Result<Lookup> {
        let slot = self.slot(key)?;
        Ok(match self.store.read(&slot)? {
            Read::Miss => Lookup::Miss,
            Read::Discarded { path, reason } => Lookup::Discarded { path, reason },
            Read::Found { payload, id } => match client.deserialize_executable(&payload) {
                Ok(executable) => Lookup::Hit { executable, meta: self.store.record_hit(&slot) },
                Err(e) => match self.store.discard(&slot, id, format!("the plugin could not load it: {e}")) {
                    Read::Discarded { path, reason } => Lookup::Discarded { path, reason },
                    _ => unreachable!("discard always discards"),
                },
            },
        })
    }

    /// After a miss: takes `key`'s lock so that one process of those sharing the folder
    /// compiles the program while the others wait (see [`Store::claim`]). `Claim::Stored`: the
    /// entry appeared meanwhile, look it up again; `Claim::Locked`: compile, `put`, then drop
    /// the lock; `Err(CacheLockTimeout)`: compile without it.
    pub fn claim(&self, key: &CacheKey<'_>) -> Result<Claim> {
        self.store.claim(&self.slot(key)?).map_err(Into::into)
    }

    /// [`DiskCache::lookup`] as an `Option`: anything but a hit is `None` (a discarded
    /// entry leaves a warning, see [`DiskCache::take_warnings`]).
    pub fn get(&self, client: &Client, key: &CacheKey<'_>) -> Result<Option<Executable>> {
        Ok(match self.lookup(client, key)? {
            Lookup::Hit { executable, .. } => Some(executable),
            Lookup::Miss | Lookup::Discarded { .. } => None,
        })
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
        let slot = self.slot(key)?;
        let new = NewEntry {
            components: key.components().into(),
            graph_name: meta.graph_name.clone(),
            compile_seconds: meta.compile_seconds,
        };
        self.store.put(&slot, payload, &new).map_err(Into::into)
    }

    /// Every entry of both levels, most recently used first (see [`Store::entries`]).
    pub fn entries(&self) -> Result<Vec<EntryInfo>> {
        self.store.entries().map_err(Into::into)
    }

    /// The one entry (either level) whose key starts with `prefix`.
    pub fn find(&self, prefix: &str) -> Result<EntryInfo> {
        self.store.find(prefix).map_err(Into::into)
    }

    /// Totals over both levels, and per level.
    pub fn summary(&self) -> Result<CacheSummary> {
        self.store.summary().map_err(Into::into)
    }

    /// Whether the cache folder exists at all.
    pub fn exists(&self) -> bool {
        self.store.exists()
    }

    /// The toolchain folder name for entries `client` can load.
    pub fn toolchain_of(&self, client: &Client) -> Result<String> {
        let sha = self.plugin_sha256(client.plugin())?;
        Ok(toolchain_fingerprint(&CacheKey {
            stablehlo: b"",
            compile_options: Vec::new(),
            platform_name: client.platform_name(),
            platform_version: client.platform_version(),
            plugin_sha256: &sha,
            torchtpu_version: TORCHTPU_VERSION,
        }))
    }

    /// Checks every entry's header and checksum (both levels) and, given a client, loads each
    /// executable entry of the client's toolchain into the plugin; executable entries of other
    /// toolchains are skipped. Graph entries are checked by header and checksum only.
    /// Reports; removes nothing.
    pub fn verify(&self, client: Option<&Client>) -> Result<VerifyReport> {
        let current = client.map(|c| self.toolchain_of(c)).transpose()?;
        let mut report = self.store.verify(|e, payload| match (e.level, client, &current) {
            (Level::Graph, ..) => Check::Ok,
            (Level::Executable, Some(client), Some(tc)) if *tc == e.partition => {
                match client.deserialize_executable(payload) {
                    Ok(_) => Check::Ok,
                    Err(err) => Check::Bad(format!("the plugin could not load it: {err}")),
                }
            }
            (Level::Executable, Some(_), _) => Check::Skipped(format!(
                "checksum ok; made by another toolchain (folder {}), not loadable by this plugin",
                e.partition
            )),
            (Level::Executable, None, _) => Check::Ok,
        })?;
        report.loaded = client.is_some();
        Ok(report)
    }

    /// Removes entries (both levels) unused for longer than `older_than`, then evicts
    /// least-recently-used ones until everything fits in `max_size`.
    pub fn prune(&self, max_size: Option<u64>, older_than: Option<std::time::Duration>) -> Result<PruneReport> {
        self.store.prune(max_size, older_than).map_err(Into::into)
    }

    /// Evicts least-recently-used entries (never `protect`) until everything fits.
    pub fn evict_to(&self, max_bytes: u64, protect: Option<&Path>) -> Result<PruneReport> {
        self.store.evict_to(max_bytes, protect).map_err(Into::into)
    }

    /// Removes every entry (both levels), leftover and plugin-hash memo.
    pub fn clear(&self) -> Result<PruneReport> {
        self.store.clear().map_err(Into::into)
    }

    /// Records a warning (kept until [`DiskCache::take_warnings`], at most 100).
    pub(crate) fn warn(&self, path: &Path, message: String) {
        self.store.warn(path, message)
    }

    /// The warnings recorded since the last call (damaged entries discarded, failed writes,
    /// bad environment values), oldest first.
    pub fn take_warnings(&self) -> Vec<CacheWarning> {
        self.store.take_warnings()
    }
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
        assert_eq!(c.lock_timeout(), Some(DEFAULT_LOCK_TIMEOUT), "processes share compiles by default");
        assert!(c.take_warnings().is_empty());

        let timeout = |v: &'static str| {
            let c = DiskCache::from_vars(vars(vec![("HOME", "/h"), (CACHE_LOCK_TIMEOUT_ENV, v)])).unwrap();
            (c.lock_timeout(), c.take_warnings().len())
        };
        assert_eq!(timeout("90s"), (Some(std::time::Duration::from_secs(90)), 0));
        assert_eq!(timeout("10m"), (Some(std::time::Duration::from_secs(600)), 0));
        assert_eq!(timeout("2.5"), (Some(std::time::Duration::from_millis(2500)), 0));
        assert_eq!(timeout("soon"), (Some(DEFAULT_LOCK_TIMEOUT), 1));
        for off in ["0", "off"] {
            let c = DiskCache::from_vars(vars(vec![
                ("HOME", "/h"),
                (CACHE_SHARED_ENV, off),
                (CACHE_LOCK_TIMEOUT_ENV, "9"),
            ]))
            .unwrap();
            assert_eq!(c.lock_timeout(), None, "{off}");
        }

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
