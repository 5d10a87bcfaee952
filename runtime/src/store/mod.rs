//! The one disk store behind both cache levels: the graph level (canonical IR + pipeline ->
//! lowered StableHLO, `torchtpu_engine::GraphCache`) and the executable level (StableHLO +
//! options + toolchain -> serialized executable, [`crate::DiskCache`]). Device-agnostic: it
//! stores opaque payloads under keys and knows nothing about executables or graphs.
//!
//! What it does for every level, once: keys ([`named_digest`] over named, length-prefixed
//! components), checked entry files ([`entry`]: magic per level, version, length, SHA-256,
//! key digest), atomic writes (temporary file + rename, [`files`]), sidecars
//! ([`EntryMeta`]: components, sizes, compile time, hits), LRU eviction to one size limit
//! over both levels, pruning, clearing, listing and verification ([`maintain`]); per-key
//! locks so that the processes of a host make a missing entry once ([`lock`],
//! [`Store::claim`]); and folders and entries private to their user, checked before any read
//! ([`private`]).
//!
//! Layout (see `docs/cache.md`): `<root>/v2/<level>/<partition>/<key>.bin` + `.json`. A layout
//! change bumps [`LAYOUT_VERSION`], so the old files are never read; they are pruned like
//! entries, least recently used first.

pub mod entry;
pub mod error;
pub mod files;
pub mod key;
pub mod layout;
pub mod lock;
pub mod maintain;
pub mod meta;
pub mod private;
pub mod units;

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use error::Result;

pub use error::StoreError;
pub use key::{fingerprint, hex, named_digest, sha256_hex, CacheDigest, Components};
pub use layout::{
    EntryPaths, CACHE_DIR_ENV, CACHE_ENV, CACHE_LOCK_TIMEOUT_ENV, CACHE_MAX_SIZE_ENV, CACHE_MIN_COMPILE_SECS_ENV,
    CACHE_SHARED_ENV,
};
pub use lock::{KeyLock, DEFAULT_LOCK_TIMEOUT};
pub use maintain::{BadEntry, CacheSummary, EntryInfo, LevelSummary, PruneReport, SkippedEntry, VerifyReport};
pub use meta::EntryMeta;

use files::{file_id, read_if_exists, remove_if_exists, write_atomic, FileId};

/// The store's layout version: the `v<N>` folder and every entry header's format version.
pub const LAYOUT_VERSION: u32 = 2;

/// Default size limit: 2 GiB, for both levels together.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// At most this many warnings are kept until [`Store::take_warnings`].
const MAX_WARNINGS: usize = 100;

/// Which cache an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Canonical IR + pipeline -> lowered StableHLO (the engine's graph cache).
    Graph,
    /// StableHLO + compile options + toolchain -> the plugin's serialized executable.
    Executable,
}

impl Level {
    pub const ALL: [Level; 2] = [Level::Graph, Level::Executable];

    /// `"graph"` or `"executable"`: the `level` column of `torchtpu-cache`, the folder name.
    pub fn name(self) -> &'static str {
        match self {
            Level::Graph => "graph",
            Level::Executable => "executable",
        }
    }

    pub(crate) fn dir_name(self) -> &'static str {
        self.name()
    }

    /// The first 8 bytes of the level's entry files.
    pub fn magic(self) -> [u8; 8] {
        match self {
            Level::Graph => *b"TTPUGRF\0",
            Level::Executable => *b"TTPUEXE\0",
        }
    }

    /// What a partition folder of this level stands for.
    pub fn partition_meaning(self) -> &'static str {
        match self {
            Level::Graph => "compiler build",
            Level::Executable => "toolchain",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where one entry lives: its level, partition (16 hex: a folder per toolchain or compiler
/// build, so entries that can no longer hit age out together) and key digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub level: Level,
    pub partition: String,
    pub key: CacheDigest,
}

/// What the caller records with a new entry (in its sidecar).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewEntry {
    pub components: Components,
    /// A name for the compiled graph, shown by `torchtpu-cache list`.
    pub graph_name: Option<String>,
    /// How long making the payload took: what each hit saves.
    pub compile_seconds: f64,
}

/// Something the store noticed and recovered from (a damaged entry it discarded, a write
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

/// What [`Store::read`] found.
#[derive(Debug)]
pub enum Read {
    /// A checked payload. `id` identifies the file read, for [`Store::discard`] when the
    /// caller finds the payload unusable after all.
    Found {
        payload: Vec<u8>,
        id: Option<FileId>,
    },
    Miss,
    /// There was an entry but it was damaged; it has been removed (and a warning recorded).
    Discarded {
        path: PathBuf,
        reason: String,
    },
}

/// What [`Store::put`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written; `evicted` older entries were removed to stay under the size limit.
    Stored { entry_bytes: u64, evicted: usize },
    /// The compile was faster than the configured threshold (see `DiskCache`).
    SkippedFastCompile,
    /// The entry alone is bigger than the size limit.
    SkippedTooLarge,
}

/// What [`Store::claim`] found after a miss.
#[derive(Debug)]
pub enum Claim {
    /// The entry is still missing and this process holds the key's lock: make the entry,
    /// `put` it, then drop the lock (other processes wait for it meanwhile).
    Locked(KeyLock),
    /// Another process stored the entry while this one waited `waited` for the lock (or just
    /// before it asked): read it.
    Stored { waited: Duration },
    /// Sharing is off ([`Store::with_lock_timeout`] `None`): make the entry without a lock.
    Unshared,
}

/// A store folder and its size limit. Cheap to create (nothing is touched until the first
/// `put`); thread-safe; any number of processes may share one folder.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    max_size: u64,
    /// How long [`Store::claim`] waits for another process making the same entry; `None`:
    /// no locks at all.
    lock_timeout: Option<Duration>,
    warnings: Mutex<Vec<CacheWarning>>,
    /// Paths already reported as refused (one warning each).
    refused: Mutex<HashSet<PathBuf>>,
    /// Set when the file system refused a `flock` (some network or FUSE file systems): the
    /// first failure is returned (and warned by the caller), later claims are `Unshared`.
    locks_failed: AtomicBool,
    /// What a put knows of the folder's size without scanning it (shared by clones: the two
    /// levels of one engine).
    since_scan: Arc<Mutex<SinceScan>>,
}

/// The folder's bytes at this process's last scan plus what it stored since, and its puts
/// since: a put scans (and evicts) only when that estimate passes the limit, every
/// [`RESCAN_EVERY`] puts (other processes store too), and at its first put. A scan per put
/// cost a `stat` per file: with eager one-op programs (a compile of ~20 ms each) and a
/// folder of a few thousand entries, about as much as the compile.
#[derive(Debug, Default)]
struct SinceScan {
    bytes: Option<u64>,
    puts: u32,
}

/// Puts between two scans at most, whatever the estimate says.
pub const RESCAN_EVERY: u32 = 64;

impl Clone for Store {
    /// The same folder, limit and lock timeout (and size estimate), with no warnings.
    fn clone(&self) -> Store {
        let mut store = Store::new(self.root.clone()).with_max_size(self.max_size).with_lock_timeout(self.lock_timeout);
        store.since_scan = Arc::clone(&self.since_scan);
        store
    }
}

impl Store {
    /// A store in `root` with the default limit (2 GiB) and lock timeout (300 s).
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store {
            root: root.into(),
            max_size: DEFAULT_MAX_SIZE,
            lock_timeout: Some(DEFAULT_LOCK_TIMEOUT),
            warnings: Mutex::new(Vec::new()),
            refused: Mutex::new(HashSet::new()),
            locks_failed: AtomicBool::new(false),
            since_scan: Arc::default(),
        }
    }

    /// How long [`Store::claim`] waits for another process making the same entry before it
    /// gives up ([`StoreError::LockTimeout`]); `None` turns the per-key locks off (each
    /// process makes its own misses).
    pub fn with_lock_timeout(mut self, timeout: Option<Duration>) -> Store {
        self.lock_timeout = timeout;
        self
    }

    pub(crate) fn set_lock_timeout(&mut self, timeout: Option<Duration>) {
        self.lock_timeout = timeout;
    }

    pub fn lock_timeout(&self) -> Option<Duration> {
        self.lock_timeout
    }

    /// Sets the size limit; after a `put` that may pass it, least-recently-used entries of every
    /// level are evicted until the whole folder fits ([`SinceScan`]).
    pub fn with_max_size(mut self, bytes: u64) -> Store {
        self.max_size = bytes;
        self
    }

    pub(crate) fn set_max_size(&mut self, bytes: u64) {
        self.max_size = bytes;
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    pub fn paths(&self, slot: &Slot) -> EntryPaths {
        layout::entry_paths(&self.root, slot.level, &slot.partition, &slot.key.hex())
    }

    /// Records one warning per refused path, and passes the error on.
    fn refused(&self, e: StoreError) -> StoreError {
        if let StoreError::Insecure { path, problem, fix } = &e {
            if self.refused.lock().unwrap_or_else(|p| p.into_inner()).insert(path.clone()) {
                self.warn(
                    path,
                    format!(
                        "refused: {problem}. A cached executable is native code, so the cache is not used for \
                         it. Fix: {fix}"
                    ),
                );
            }
        }
        e
    }

    /// Opens the file at `path` in the store after checking that every folder from the root
    /// down to it, and the file itself, is private to this user (`Err(Insecure)`, with one
    /// warning per path, if not). `None` when it does not exist.
    fn open_private(&self, path: &Path) -> Result<Option<std::fs::File>> {
        let dir = path.parent().unwrap_or(&self.root);
        if !private::check_dirs(&self.root, dir).map_err(|e| self.refused(e))? {
            return Ok(None);
        }
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(files::io_err("open", path)(e)),
        };
        let meta = file.metadata().map_err(files::io_err("inspect", path))?;
        private::check_file(path, &meta).map_err(|e| self.refused(e))?;
        Ok(Some(file))
    }

    /// The bytes of the store file at `path`, checked like [`Store::read`] checks an entry's
    /// folders and file before reading (`Err(Insecure)` if another user could have written
    /// them); `None` when it does not exist.
    pub fn read_private(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        let Some(mut file) = self.open_private(path)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(files::io_err("read", path))?;
        Ok(Some(bytes))
    }

    /// Reads and checks `slot`'s entry. A missing entry is a `Miss`; a truncated, corrupt,
    /// misnamed or other-level one is removed and `Discarded` (with a warning). An entry that
    /// another user could have written (the file, or a folder from the root down to it, owned
    /// by someone else or writable by group or others) is never read: `Err(Insecure)`, with a
    /// warning naming the path and the fix. `Err` otherwise only for file-system failures other
    /// than "not found".
    pub fn read(&self, slot: &Slot) -> Result<Read> {
        let paths = self.paths(slot);
        let Some(mut file) = self.open_private(&paths.bin)? else {
            return Ok(Read::Miss);
        };
        let id = files::identity(&file);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(files::io_err("read", &paths.bin))?;
        drop(file);
        match entry::decode(slot.level, &bytes, Some(&slot.key)) {
            Ok(payload) => {
                let header = entry::HEADER_LEN;
                debug_assert_eq!(payload.len(), bytes.len() - header);
                bytes.drain(..header);
                Ok(Read::Found { payload: bytes, id })
            }
            Err(reason) => Ok(self.discard(slot, id, reason)),
        }
    }

    /// Removes `slot`'s entry, unless another process has already renamed a fresh one into
    /// place since the file `id` was read, and records a warning.
    pub fn discard(&self, slot: &Slot, id: Option<FileId>, reason: String) -> Read {
        let paths = self.paths(slot);
        if id.is_some() && file_id(&paths.bin) == id {
            let _ = remove_if_exists(&paths.bin);
            let _ = remove_if_exists(&paths.json);
        }
        self.warn(&paths.bin, format!("discarded unusable {} entry ({reason})", slot.level));
        Read::Discarded { path: paths.bin, reason }
    }

    /// Counts a hit in the sidecar (best effort: read, update, atomic rewrite); the rewrite
    /// also makes the entry the most recently used.
    pub fn record_hit(&self, slot: &Slot) -> Option<EntryMeta> {
        let paths = self.paths(slot);
        let mut meta = EntryMeta::from_json(&read_if_exists(&paths.json).ok()??).ok()?;
        meta.hit_count += 1;
        meta.last_hit_unix_ms = Some(units::now_unix_ms());
        // Skip the rewrite if the entry was evicted meanwhile (it would leave an orphan).
        if paths.bin.exists() {
            let _ = write_atomic(&paths.json, &meta.to_json());
        }
        Some(meta)
    }

    /// Stores `payload` under `slot`: the `.bin` entry, then its sidecar, each written
    /// atomically; then, where the folder may have passed the size limit ([`SinceScan`]),
    /// evicts least-recently-used entries (any level) until it is under it. Concurrent puts of the same key all succeed (the last rename
    /// wins; every version is complete).
    pub fn put(&self, slot: &Slot, payload: &[u8], new: &NewEntry) -> Result<PutOutcome> {
        let paths = self.paths(slot);
        let file = entry::encode(slot.level, &slot.key, payload);
        let entry_bytes = file.len() as u64;
        if entry_bytes > self.max_size {
            return Ok(PutOutcome::SkippedTooLarge);
        }
        self.ensure_dir(&paths.bin)?;
        write_atomic(&paths.bin, &file)?;
        let sidecar = EntryMeta {
            format: meta::META_FORMAT,
            level: slot.level.name().to_owned(),
            key: slot.key.hex(),
            components: new.components.clone(),
            graph_name: new.graph_name.clone(),
            payload_bytes: payload.len() as u64,
            entry_bytes,
            compile_seconds: new.compile_seconds,
            created_unix_ms: units::now_unix_ms(),
            last_hit_unix_ms: None,
            hit_count: 0,
        };
        let sidecar = sidecar.to_json();
        write_atomic(&paths.json, &sidecar)?;
        let evicted = if self.must_scan(entry_bytes + sidecar.len() as u64) {
            let report = self.evict_to(self.max_size, Some(&paths.bin))?;
            *self.since_scan() = SinceScan { bytes: Some(report.remaining_bytes), puts: 0 };
            report.removed_entries
        } else {
            0
        };
        Ok(PutOutcome::Stored { entry_bytes, evicted })
    }

    fn since_scan(&self) -> std::sync::MutexGuard<'_, SinceScan> {
        self.since_scan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After a prune or clear: the next put scans.
    pub(crate) fn forget_size(&self) {
        *self.since_scan() = SinceScan::default();
    }

    /// Whether a put of `bytes` must scan the folder (see [`SinceScan`]); if not, counts it.
    fn must_scan(&self, bytes: u64) -> bool {
        let mut s = self.since_scan();
        match s.bytes {
            Some(known) if known + bytes <= self.max_size && s.puts + 1 < RESCAN_EVERY => {
                s.bytes = Some(known + bytes);
                s.puts += 1;
                false
            }
            _ => true,
        }
    }

    /// Creates the folders down to `path`'s (mode 0700) where missing and checks that each is
    /// private to this user.
    fn ensure_dir(&self, path: &Path) -> Result<()> {
        let dir = path.parent().unwrap_or(&self.root);
        private::ensure_dirs(&self.root, dir).map_err(|e| self.refused(e))
    }

    /// Whether `slot`'s entry file exists (unchecked: [`Store::read`] checks it).
    pub fn contains(&self, slot: &Slot) -> bool {
        self.paths(slot).bin.is_file()
    }

    /// After a miss: takes `slot`'s lock, so that only one of the processes sharing this
    /// store makes the entry. Waits at most the lock timeout for another process making it,
    /// then:
    /// - [`Claim::Stored`]: the other process stored it meanwhile (the lock is already let go);
    /// - [`Claim::Locked`]: it is still missing; make it, `put` it, then drop the lock;
    /// - `Err(LockTimeout)`: the holder took too long; make the entry without the lock.
    ///
    /// [`Claim::Unshared`] when the store has no lock timeout, or once the file system has
    /// refused a lock (that first refusal is the error). A holder that dies releases its lock
    /// (the OS does), so nobody waits for a crashed process.
    pub fn claim(&self, slot: &Slot) -> Result<Claim> {
        let Some(timeout) = self.lock_timeout.filter(|_| !self.locks_failed.load(Ordering::Relaxed)) else {
            return Ok(Claim::Unshared);
        };
        let paths = self.paths(slot);
        self.ensure_dir(&paths.lock)?;
        let lock = match lock::acquire(&paths.lock, timeout) {
            Ok(lock) => lock,
            Err(e @ StoreError::Io { action: "lock", .. }) => {
                self.locks_failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if paths.bin.is_file() {
            return Ok(Claim::Stored { waited: lock.waited() });
        }
        Ok(Claim::Locked(lock))
    }

    /// Records a warning (kept until [`Store::take_warnings`], at most 100).
    pub fn warn(&self, path: &Path, message: String) {
        let mut w = self.warnings.lock().unwrap_or_else(|p| p.into_inner());
        if w.len() < MAX_WARNINGS {
            w.push(CacheWarning { path: path.to_path_buf(), message });
        }
    }

    /// The warnings recorded since the last call, oldest first.
    pub fn take_warnings(&self) -> Vec<CacheWarning> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
