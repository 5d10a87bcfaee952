//! The executable cache the engine calls: an in-memory level per client, optionally backed
//! by the persistent [`DiskCache`], with hit/miss counts and the compile time saved. On a
//! miss, processes sharing the disk folder compile a program once: the first holds the key's
//! lock while it compiles and stores; the others wait, then read (`CacheSource::Waited`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::cache_key::{CacheDigest, CacheKey};
use crate::client::Client;
use crate::disk_cache::{CacheWarning, DiskCache, EntryMeta, Lookup, PutMeta};
use crate::error::Result;
use crate::executable::Executable;
use crate::options::CompileOptions;
use crate::store::Claim;
use crate::RuntimeError;

/// Counters of an [`ExecutableCache`] (a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CacheStats {
    /// Found in memory.
    pub memory_hits: u64,
    /// Not in memory, loaded from disk (including `disk_hits_after_wait`).
    pub disk_hits: u64,
    /// Of the disk hits, those this process waited for: it missed, another process was
    /// compiling the same program (it held the key's lock), and this one read the result.
    pub disk_hits_after_wait: u64,
    /// Time spent waiting for other processes' compiles (the key locks).
    pub lock_wait_seconds: f64,
    /// Waits that reached the lock timeout (then this process compiled; a warning says so).
    pub lock_timeouts: u64,
    /// Compiled (found nowhere, or the disk entry was unusable).
    pub misses: u64,
    /// Sum of the recorded compile times of the disk hits.
    pub compile_seconds_saved: f64,
    /// Time spent compiling misses.
    pub compile_seconds: f64,
    /// Disk entries found unusable and discarded (each also a miss).
    pub disk_discarded: u64,
    /// Entries written to disk.
    pub disk_writes: u64,
    /// Disk operations that failed or were refused (a folder or entry another user could
    /// write); the compile went ahead; see `take_warnings`.
    pub disk_errors: u64,
}

/// Where one request's executable came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSource {
    /// This process's memory level.
    Memory,
    /// The persistent cache; `compile_seconds_saved` is what its compile took when stored.
    Disk { compile_seconds_saved: f64 },
    /// The persistent cache, after waiting `waited_seconds` for another process that was
    /// compiling the same program (it held the key's lock) and stored it.
    Waited { compile_seconds_saved: f64, waited_seconds: f64 },
    /// Compiled now, taking `seconds`.
    Compiled { seconds: f64 },
}

impl CacheSource {
    /// "memory", "disk", "waited" or "compiled".
    pub fn name(&self) -> &'static str {
        match self {
            CacheSource::Memory => "memory",
            CacheSource::Disk { .. } => "disk",
            CacheSource::Waited { .. } => "waited",
            CacheSource::Compiled { .. } => "compiled",
        }
    }

    /// The compile time the persistent cache saved (0 for memory hits and compiles).
    pub fn compile_seconds_saved(&self) -> f64 {
        match self {
            CacheSource::Disk { compile_seconds_saved } | CacheSource::Waited { compile_seconds_saved, .. } => {
                *compile_seconds_saved
            }
            CacheSource::Memory | CacheSource::Compiled { .. } => 0.0,
        }
    }
}

#[derive(Default)]
struct CacheState {
    /// Keyed by client and in-process digest: an executable is loaded on one client only.
    entries: HashMap<(usize, CacheDigest), Arc<Executable>>,
    stats: CacheStats,
}

/// Thread-safe executable cache. Memory entries live until [`ExecutableCache::clear`] or
/// drop; disk entries (with [`ExecutableCache::with_disk`]) outlive the process.
#[derive(Default)]
pub struct ExecutableCache {
    state: Mutex<CacheState>,
    disk: Option<DiskCache>,
}

impl std::fmt::Debug for ExecutableCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutableCache")
            .field("len", &self.len())
            .field("stats", &self.stats())
            .field("disk", &self.disk.as_ref().map(DiskCache::root))
            .finish()
    }
}

impl ExecutableCache {
    /// Memory only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Memory backed by `disk`.
    pub fn with_disk(disk: DiskCache) -> Self {
        ExecutableCache { state: Mutex::default(), disk: Some(disk) }
    }

    /// Memory backed by [`DiskCache::from_env`] (memory only when that is `None`).
    pub fn from_env() -> Self {
        ExecutableCache { state: Mutex::default(), disk: DiskCache::from_env() }
    }

    /// The persistent level, if any.
    pub fn disk(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached executable for (`mlir` text or bytecode, `options`, `client`), compiling
    /// only when neither memory nor disk has it.
    pub fn get_or_compile(
        &self,
        client: &Client,
        mlir: &(impl AsRef<[u8]> + ?Sized),
        options: &CompileOptions,
    ) -> Result<Arc<Executable>> {
        self.get_or_compile_named(client, mlir, options, None)
    }

    /// [`ExecutableCache::get_or_compile`], recording `graph_name` in a new disk entry.
    ///
    /// Order: memory, then disk, then compile (and store to disk). The memory lock is not
    /// held while loading or compiling. Two threads or processes missing the same program on
    /// one disk folder compile it once: the first takes the key's lock, compiles and stores;
    /// the others wait (at most the lock timeout) and load its entry. A disk failure never
    /// fails the call: it is counted and left as a warning ([`ExecutableCache::take_warnings`]),
    /// and the module is compiled.
    pub fn get_or_compile_named(
        &self,
        client: &Client,
        mlir: &(impl AsRef<[u8]> + ?Sized),
        options: &CompileOptions,
        graph_name: Option<&str>,
    ) -> Result<Arc<Executable>> {
        self.lookup_or_compile(client, mlir.as_ref(), options, graph_name).map(|(exe, _)| exe)
    }

    /// [`ExecutableCache::get_or_compile_named`], saying where the executable came from. The
    /// graph's name labels the executable in profiles (`trace`).
    pub fn lookup_or_compile(
        &self,
        client: &Client,
        mlir: &[u8],
        options: &CompileOptions,
        graph_name: Option<&str>,
    ) -> Result<(Arc<Executable>, CacheSource)> {
        let found = self.find_or_compile(client, mlir, options, graph_name);
        if let (Ok((exe, _)), Some(name)) = (&found, graph_name) {
            exe.set_label(name);
        }
        found
    }

    fn find_or_compile(
        &self,
        client: &Client,
        mlir: &[u8],
        options: &CompileOptions,
        graph_name: Option<&str>,
    ) -> Result<(Arc<Executable>, CacheSource)> {
        let slot = (client.identity(), CacheKey::in_process(client, mlir, options).digest());
        {
            let mut state = self.lock();
            if let Some(exe) = state.entries.get(&slot).cloned() {
                state.stats.memory_hits += 1;
                return Ok((exe, CacheSource::Memory));
            }
        }

        let disk_key = self
            .disk
            .as_ref()
            .and_then(|disk| disk.key(client, mlir, options).map_err(|e| self.disk_error(disk, e)).ok());
        // Held from a miss until the entry is stored: other processes wait for it.
        let mut held = None;
        if let (Some(disk), Some(key)) = (&self.disk, &disk_key) {
            let mut usable = true;
            match disk.lookup(client, key) {
                Ok(Lookup::Hit { executable, meta }) => return Ok(self.disk_hit(slot, executable, meta, None)),
                Ok(Lookup::Miss) => {}
                Ok(Lookup::Discarded { .. }) => self.lock().stats.disk_discarded += 1,
                Err(e) => {
                    self.disk_error(disk, e);
                    usable = false;
                }
            }
            // Another process may be compiling this very program: wait for it, then read.
            match usable.then(|| disk.claim(key)) {
                None | Some(Ok(Claim::Unshared)) => {}
                Some(Ok(Claim::Locked(lock))) => {
                    self.lock().stats.lock_wait_seconds += lock.waited().as_secs_f64();
                    held = Some(lock);
                }
                Some(Ok(Claim::Stored { waited })) => {
                    self.lock().stats.lock_wait_seconds += waited.as_secs_f64();
                    match disk.lookup(client, key) {
                        Ok(Lookup::Hit { executable, meta }) => {
                            return Ok(self.disk_hit(slot, executable, meta, Some(waited.as_secs_f64())));
                        }
                        Ok(Lookup::Miss) => {} // evicted meanwhile
                        Ok(Lookup::Discarded { .. }) => self.lock().stats.disk_discarded += 1,
                        Err(e) => self.disk_error(disk, e),
                    }
                }
                Some(Err(e)) => self.disk_error(disk, e),
            }
        }

        let started = Instant::now();
        let compiled = client.compile_bytes(mlir, options);
        let seconds = started.elapsed().as_secs_f64();
        {
            let mut state = self.lock();
            state.stats.misses += 1;
            state.stats.compile_seconds += seconds;
        }
        let compiled = Arc::new(compiled?);

        if let (Some(disk), Some(key)) = (&self.disk, &disk_key) {
            let meta = PutMeta { graph_name: graph_name.map(str::to_owned), compile_seconds: seconds };
            match disk.put(key, &compiled, &meta) {
                Ok(crate::disk_cache::PutOutcome::Stored { .. }) => self.lock().stats.disk_writes += 1,
                Ok(_) => {}
                Err(e) => self.disk_error(disk, e),
            }
        }
        // Stored (or not storable): the processes waiting for this key go on.
        drop(held);
        let mut state = self.lock();
        Ok((Arc::clone(state.entries.entry(slot).or_insert(compiled)), CacheSource::Compiled { seconds }))
    }

    /// Counts a disk hit (`waited`: after waiting that long for another process's compile)
    /// and keeps the executable in memory.
    fn disk_hit(
        &self,
        slot: (usize, CacheDigest),
        executable: Executable,
        meta: Option<EntryMeta>,
        waited: Option<f64>,
    ) -> (Arc<Executable>, CacheSource) {
        let mut state = self.lock();
        state.stats.disk_hits += 1;
        let saved = meta.map_or(0.0, |m| m.compile_seconds);
        state.stats.compile_seconds_saved += saved;
        let source = match waited {
            None => CacheSource::Disk { compile_seconds_saved: saved },
            Some(waited_seconds) => {
                state.stats.disk_hits_after_wait += 1;
                CacheSource::Waited { compile_seconds_saved: saved, waited_seconds }
            }
        };
        let exe = Arc::new(executable);
        (Arc::clone(state.entries.entry(slot).or_insert(exe)), source)
    }

    /// Counts a disk failure and leaves a warning. A refused folder or entry was already
    /// reported once by the store (with its fix), so it is only counted; a lock timeout is
    /// counted as such.
    fn disk_error(&self, disk: &DiskCache, e: RuntimeError) {
        let mut state = self.lock();
        let at = match &e {
            RuntimeError::CacheRefused { .. } => {
                state.stats.disk_errors += 1;
                return;
            }
            RuntimeError::CacheLockTimeout { path, waited } => {
                state.stats.lock_timeouts += 1;
                state.stats.lock_wait_seconds += waited.as_secs_f64();
                path.clone()
            }
            _ => {
                state.stats.disk_errors += 1;
                disk.root().to_path_buf()
            }
        };
        drop(state);
        disk.warn(&at, e.to_string());
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        self.lock().stats
    }

    /// Requests served from memory.
    pub fn hits(&self) -> u64 {
        self.lock().stats.memory_hits
    }

    /// Requests served from disk (not in memory).
    pub fn disk_hits(&self) -> u64 {
        self.lock().stats.disk_hits
    }

    /// Requests that compiled.
    pub fn misses(&self) -> u64 {
        self.lock().stats.misses
    }

    /// Sum of the recorded compile times of the disk hits, in seconds.
    pub fn compile_seconds_saved(&self) -> f64 {
        self.lock().stats.compile_seconds_saved
    }

    /// The disk level's warnings since the last call (empty without a disk level).
    pub fn take_warnings(&self) -> Vec<CacheWarning> {
        self.disk.as_ref().map_or_else(Vec::new, DiskCache::take_warnings)
    }

    /// Number of executables in memory.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every memory entry (executables still referenced elsewhere stay alive; disk
    /// entries stay); keeps the counters.
    pub fn clear(&self) {
        self.lock().entries.clear();
    }
}
