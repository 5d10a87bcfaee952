//! The graph-level cache: (canonical input IR, pass pipeline and lowering options, torchtpu
//! version, compiler build id) -> the lowered StableHLO bytecode, so a graph seen before skips
//! the passes and the lowering. In memory, and on disk as the graph level of the runtime's one
//! store (`torchtpu_runtime::store`: keys, checked entry files, atomic writes, sidecars and
//! LRU eviction shared with the executable level; `docs/cache.md`). This file only says what
//! the key is made of and what the payload holds.
//!
//! Payload: the length of `meta` (u64, little-endian), `meta` (UTF-8: the analyses a compile
//! needs besides the code, as JSON, `GraphAnalyses`, so a hit runs no pipeline), then the bytecode. The store
//! checksums all of it; a damaged entry is a miss that is removed and reported, never trusted.
//!
//! After a miss, [`GraphCache::claim`] takes the key's lock in the store, so that of the
//! processes sharing the folder (the ranks of a host) one lowers a graph while the others wait
//! for its entry and read it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::kernel_choice::ProgramMeasurement;
use torchtpu_compiler::driver::{MemorySummary, ShardingPlan};
use torchtpu_runtime::store::{
    fingerprint, named_digest, sha256_hex, Claim, Components, KeyLock, NewEntry, Read, Slot, StoreError,
};
use torchtpu_runtime::{CacheDigest, DiskCache, Level, Store};

/// Encoding version of [`graph_key`] (v2: the sidecar is `GraphAnalyses` as JSON).
const KEY_VERSION: &str = "v2";
/// What the payload is.
const FORMAT: &str = "mlir-bytecode";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphCacheStats {
    pub memory_hits: u64,
    /// Found on disk (including `disk_hits_after_wait`).
    pub disk_hits: u64,
    /// Of the disk hits, those found after waiting for another process that was lowering the
    /// same graph ([`GraphCache::claim`]).
    pub disk_hits_after_wait: u64,
    pub misses: u64,
    /// Damaged disk entries that were discarded.
    pub discarded: u64,
}

/// The driver's analyses a compile needs besides the code, kept in an entry's sidecar: the
/// memory estimate and, for a graph with a mesh, its sharding plan (how inputs are split and
/// outputs assembled). A hit thus needs no pass to run again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphAnalyses {
    pub memory: MemorySummary,
    pub sharding: Option<ShardingPlan>,
    /// Where the program raced ATen's kernels against XLA's (`kernel_choice.rs`): the race, so
    /// that a hit lists the choice in `torchtpu.stats()["kernel_choices"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_race: Option<ProgramMeasurement>,
}

impl GraphAnalyses {
    pub fn to_meta(&self) -> String {
        serde_json::to_string(self).expect("analyses are plain data")
    }

    /// The analyses `to_meta` wrote; None for a sidecar that is not (an entry of an older
    /// layout or a damaged one: the caller lowers again and overwrites it).
    pub fn from_meta(meta: &str) -> Option<GraphAnalyses> {
        serde_json::from_str(meta).ok()
    }
}

/// One graph-cache entry: the lowered bytecode and its sidecar (`meta`, e.g. the compiler's
/// memory estimate, so a hit carries it; "" when the entry has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphEntry {
    pub code: Arc<Vec<u8>>,
    pub meta: String,
}

/// A graph-cache key: its digest, the store partition (one per torchtpu version and compiler
/// build, so a rebuilt compiler's entries age out together) and its readable components.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphKey {
    pub digest: CacheDigest,
    partition: String,
    components: Components,
}

impl GraphKey {
    fn slot(&self) -> Slot {
        Slot { level: Level::Graph, partition: self.partition.clone(), key: self.digest }
    }
}

#[derive(Default)]
struct State {
    memory: HashMap<CacheDigest, GraphEntry>,
    stats: GraphCacheStats,
    warnings: Vec<String>,
}

/// What [`GraphCache::claim`] gives after a miss: the entry another process stored while this
/// one waited, or else the key's lock (if sharing is on), held until this value is dropped:
/// lower the graph, `put_entry_named` it, then drop the claim.
#[derive(Debug, Default)]
pub struct GraphClaim {
    entry: Option<GraphEntry>,
    _lock: Option<KeyLock>,
}

impl GraphClaim {
    /// The entry another process stored meanwhile (counted as a disk hit after a wait).
    pub fn entry(&self) -> Option<&GraphEntry> {
        self.entry.as_ref()
    }
}

#[derive(Default)]
pub struct GraphCache {
    store: Option<Store>,
    state: Mutex<State>,
}

/// The key: the store's named, length-prefixed digest over the graph's components.
/// `options` is everything the lowered module depends on besides the IR (the pipeline and
/// lowering options, `Options::cache_component`).
pub fn graph_key(canonical_ir: &str, options: &str) -> GraphKey {
    key_for_build(canonical_ir, options, torchtpu_compiler::BUILD_ID)
}

fn key_for_build(canonical_ir: &str, options: &str, compiler_build: &str) -> GraphKey {
    let version = torchtpu_runtime::TORCHTPU_VERSION;
    let digest = named_digest(&[
        ("torchtpu-graph-cache-key", KEY_VERSION.as_bytes()),
        ("torchtpu_version", version.as_bytes()),
        ("compiler_build", compiler_build.as_bytes()),
        ("options", options.as_bytes()),
        ("format", FORMAT.as_bytes()),
        ("canonical_ir", canonical_ir.as_bytes()),
    ]);
    let partition = fingerprint(&[
        ("torchtpu-graph-build", KEY_VERSION.as_bytes()),
        ("torchtpu_version", version.as_bytes()),
        ("compiler_build", compiler_build.as_bytes()),
    ]);
    let components = Components::new()
        .with("torchtpu_version", version)
        .with("compiler_build", compiler_build)
        .with("options", options)
        .with("format", FORMAT)
        .with("canonical_ir_sha256", sha256_hex(canonical_ir.as_bytes()))
        .with("canonical_ir_bytes", canonical_ir.len());
    GraphKey { digest, partition, components }
}

fn encode(code: &[u8], meta: &str) -> Vec<u8> {
    let mut payload = Vec::with_capacity(8 + meta.len() + code.len());
    payload.extend_from_slice(&(meta.len() as u64).to_le_bytes());
    payload.extend_from_slice(meta.as_bytes());
    payload.extend_from_slice(code);
    payload
}

fn decode(mut payload: Vec<u8>) -> Result<GraphEntry, String> {
    let len = payload.get(..8).ok_or("shorter than its sidecar's length")?;
    let meta_len = usize::try_from(u64::from_le_bytes(len.try_into().unwrap())).map_err(|e| e.to_string())?;
    if meta_len > payload.len() - 8 {
        return Err(format!("sidecar length {meta_len} runs past the entry"));
    }
    let meta = std::str::from_utf8(&payload[8..8 + meta_len]).map_err(|e| format!("sidecar: {e}"))?.to_owned();
    payload.drain(..8 + meta_len);
    Ok(GraphEntry { code: Arc::new(payload), meta })
}

impl GraphCache {
    /// A cache whose disk level is the store under `cache_root`, with the default size
    /// limit (None: memory only).
    pub fn new(cache_root: Option<&Path>) -> GraphCache {
        GraphCache { store: cache_root.map(Store::new), state: Mutex::default() }
    }

    /// A cache on the same store (folder and size limit) as the executable cache's `disk`
    /// level (None: memory only).
    pub fn for_disk(disk: Option<&DiskCache>) -> GraphCache {
        GraphCache { store: disk.map(|d| d.store().clone()), state: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> GraphCacheStats {
        self.lock().stats
    }

    /// Warnings about discarded or unwritable entries since the last call.
    pub fn take_warnings(&self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.lock().warnings);
        if let Some(store) = &self.store {
            out.extend(store.take_warnings().into_iter().map(|w| w.to_string()));
        }
        out
    }

    pub fn get(&self, key: &GraphKey) -> Option<Arc<Vec<u8>>> {
        self.get_entry(key).map(|e| e.code)
    }

    /// The entry with its sidecar: memory, then disk (a disk hit goes into memory).
    pub fn get_entry(&self, key: &GraphKey) -> Option<GraphEntry> {
        {
            let mut state = self.lock();
            if let Some(entry) = state.memory.get(&key.digest).cloned() {
                state.stats.memory_hits += 1;
                return Some(entry);
            }
        }
        let found = self.store.as_ref().and_then(|store| self.read(store, key));
        let mut state = self.lock();
        match found {
            Some(entry) => {
                state.stats.disk_hits += 1;
                state.memory.insert(key.digest, entry.clone());
                Some(entry)
            }
            None => {
                state.stats.misses += 1;
                None
            }
        }
    }

    /// After [`GraphCache::get_entry`] missed: waits (bounded) for another process that is
    /// lowering the same graph and returns its entry, or takes the key's lock so the others
    /// wait for this one. The miss `get_entry` counted becomes a disk hit when the entry
    /// turns up. Without a disk level, with sharing off, or when the lock cannot be had (a
    /// timeout, a refused folder: warned), the claim is empty and the caller lowers anyway.
    pub fn claim(&self, key: &GraphKey) -> GraphClaim {
        let Some(store) = &self.store else {
            return GraphClaim::default();
        };
        match store.claim(&key.slot()) {
            Ok(Claim::Locked(lock)) => GraphClaim { entry: None, _lock: Some(lock) },
            Ok(Claim::Stored { .. }) => {
                let entry = self.read(store, key);
                if let Some(entry) = &entry {
                    let mut state = self.lock();
                    state.stats.misses = state.stats.misses.saturating_sub(1);
                    state.stats.disk_hits += 1;
                    state.stats.disk_hits_after_wait += 1;
                    state.memory.insert(key.digest, entry.clone());
                }
                GraphClaim { entry, _lock: None }
            }
            Ok(Claim::Unshared) => GraphClaim::default(),
            // Reported once by the store, with its fix.
            Err(StoreError::Insecure { .. }) => GraphClaim::default(),
            Err(e) => {
                self.lock().warnings.push(format!("torchtpu cache: graph level: {e}"));
                GraphClaim::default()
            }
        }
    }

    /// Reads a disk entry through the store; a damaged one is removed and reported.
    fn read(&self, store: &Store, key: &GraphKey) -> Option<GraphEntry> {
        let slot = key.slot();
        let read = match store.read(&slot) {
            Ok(Read::Found { payload, id }) => match decode(payload) {
                Ok(entry) => {
                    store.record_hit(&slot);
                    return Some(entry);
                }
                Err(reason) => store.discard(&slot, id, reason),
            },
            Ok(read) => read,
            // Reported once by the store, with its fix: never read.
            Err(StoreError::Insecure { .. }) => return None,
            Err(e) => {
                self.lock().warnings.push(format!("torchtpu cache: graph level: {e}"));
                return None;
            }
        };
        if let Read::Discarded { .. } = read {
            self.lock().stats.discarded += 1;
        }
        None
    }

    pub fn put(&self, key: &GraphKey, code: Vec<u8>) -> Arc<Vec<u8>> {
        self.put_entry(key, code, "").code
    }

    /// Stores `code` with its sidecar `meta`, in memory and on disk.
    pub fn put_entry(&self, key: &GraphKey, code: Vec<u8>, meta: &str) -> GraphEntry {
        self.put_entry_named(key, code, meta, None, 0.0)
    }

    /// [`GraphCache::put_entry`], recording the graph's name and how long the passes and the
    /// lowering took (shown by `torchtpu-cache list`; each hit saves that time).
    pub fn put_entry_named(
        &self,
        key: &GraphKey,
        code: Vec<u8>,
        meta: &str,
        graph_name: Option<&str>,
        seconds: f64,
    ) -> GraphEntry {
        if let Some(store) = &self.store {
            let new = NewEntry {
                components: key.components.clone(),
                graph_name: graph_name.map(str::to_owned),
                compile_seconds: seconds,
            };
            match store.put(&key.slot(), &encode(&code, meta), &new) {
                Ok(_) | Err(StoreError::Insecure { .. }) => {}
                Err(e) => self.lock().warnings.push(format!("torchtpu cache: cannot write graph-cache entry: {e}")),
            }
        }
        let entry = GraphEntry { code: Arc::new(code), meta: meta.to_string() };
        self.lock().memory.insert(key.digest, entry.clone());
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_root(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("torchtpu-graph-cache-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn only_entry(root: &Path) -> std::path::PathBuf {
        let entries = Store::new(root).entries().unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].level, Level::Graph);
        entries[0].path.clone()
    }

    #[test]
    fn analyses_round_trip_through_the_sidecar_and_an_old_one_is_no_entry() {
        use torchtpu_compiler::ir::{Mesh, Origin, Sharding};
        let split = Sharding { dims: vec![vec!["dp".into()], vec![]], partial: vec![], origin: Origin::User };
        let a = GraphAnalyses {
            memory: MemorySummary { peak_bytes: 96, peak_at: Some("%0 (a;b\\c=\"d\")".into()), ..Default::default() },
            sharding: Some(ShardingPlan {
                mesh: Mesh { axes: vec![("dp".into(), 2)] },
                inputs: vec![split.clone()],
                outputs: vec![Sharding { origin: Origin::Rule("dot".into()), ..split }],
                collectives: vec![],
                total_bytes_per_device: 48,
            }),
            kernel_race: Some(ProgramMeasurement {
                graph: "inference_3".into(),
                xla_seconds: 2e-4,
                aten_seconds: 1e-4,
                aten: true,
                note: None,
            }),
        };
        assert_eq!(GraphAnalyses::from_meta(&a.to_meta()), Some(a.clone()));
        // A sidecar written before races were kept reads back without one.
        let older = a.to_meta().replace(r#","kernel_race":{"graph":"inference_3","xla_seconds":0.0002,"aten_seconds":0.0001,"aten":true,"note":null}"#, "");
        assert_ne!(older, a.to_meta());
        assert_eq!(GraphAnalyses::from_meta(&older), Some(GraphAnalyses { kernel_race: None, ..a }));
        // v1 sidecars were `key=value;` pairs: not analyses, so the graph is lowered again.
        assert_eq!(GraphAnalyses::from_meta("peak_bytes=1;"), None);
        assert_eq!(GraphAnalyses::from_meta(""), None);
    }

    #[test]
    fn keys_change_with_every_component() {
        let k = graph_key("graph @g() -> () {\n  return\n}\n", "cse");
        assert_ne!(k.digest, graph_key("graph @h() -> () {\n  return\n}\n", "cse").digest);
        assert_ne!(k.digest, graph_key("graph @g() -> () {\n  return\n}\n", "dce").digest);
        assert_eq!(k, graph_key("graph @g() -> () {\n  return\n}\n", "cse"));
        // A rebuilt compiler (same version, other sources) never reads the old build's entries,
        // and files them in another partition.
        assert_eq!(k, key_for_build("graph @g() -> () {\n  return\n}\n", "cse", torchtpu_compiler::BUILD_ID));
        let other = key_for_build("graph @g() -> () {\n  return\n}\n", "cse", "another-build");
        assert_ne!(k.digest, other.digest);
        assert_ne!(k.partition, other.partition);
        assert_eq!(k.components.get("options"), Some("cse"));
    }

    #[test]
    fn memory_then_disk_then_damage() {
        let root = temp_root("levels");
        let key = graph_key("ir", "p");
        let first = GraphCache::new(Some(&root));
        assert!(first.get(&key).is_none());
        first.put(&key, b"bytecode".to_vec());
        assert_eq!(first.get(&key).as_deref().map(|v| v.as_slice()), Some(&b"bytecode"[..]));
        assert_eq!(
            first.stats(),
            GraphCacheStats { memory_hits: 1, disk_hits: 0, disk_hits_after_wait: 0, misses: 1, discarded: 0 }
        );

        // A fresh process (fresh memory) finds it on disk; the hit is counted in the sidecar.
        let second = GraphCache::new(Some(&root));
        assert_eq!(second.get(&key).as_deref().map(|v| v.as_slice()), Some(&b"bytecode"[..]));
        assert_eq!(second.stats().disk_hits, 1);
        let listed = Store::new(&root).entries().unwrap();
        assert_eq!(listed[0].meta.as_ref().unwrap().hit_count, 1);
        assert_eq!(listed[0].meta.as_ref().unwrap().components.get("format"), Some(FORMAT));

        // A flipped byte is detected: a miss, the file removed, a warning.
        let path = only_entry(&root);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        let third = GraphCache::new(Some(&root));
        assert!(third.get(&key).is_none());
        assert_eq!(third.stats().discarded, 1);
        assert!(!path.exists());
        let w = third.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("checksum"), "{w:?}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn sidecar_round_trips_and_is_checksummed() {
        let root = temp_root("meta");
        let key = graph_key("ir-meta", "p");
        let first = GraphCache::new(Some(&root));
        first.put_entry_named(&key, b"code".to_vec(), "peak=123", Some("forward"), 0.25);
        assert_eq!(first.get_entry(&key).unwrap().meta, "peak=123");
        let second = GraphCache::new(Some(&root));
        let e = second.get_entry(&key).unwrap();
        assert_eq!((e.code.as_slice(), e.meta.as_str()), (&b"code"[..], "peak=123"));
        assert_eq!(second.stats().disk_hits, 1);
        let info = &Store::new(&root).entries().unwrap()[0];
        let m = info.meta.as_ref().unwrap();
        assert_eq!((m.graph_name.as_deref(), m.compile_seconds, m.level.as_str()), (Some("forward"), 0.25, "graph"));

        // An entry without meta reads as "".
        let plain = graph_key("ir-plain", "p");
        first.put(&plain, b"x".to_vec());
        assert_eq!(GraphCache::new(Some(&root)).get_entry(&plain).unwrap().meta, "");

        // A flipped byte in the sidecar is caught by the checksum.
        let path = Store::new(&root).paths(&key.slot()).bin;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[torchtpu_runtime::disk_cache::ENTRY_HEADER_LEN + 9] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let third = GraphCache::new(Some(&root));
        assert!(third.get_entry(&key).is_none());
        assert_eq!(third.stats().discarded, 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_old_layout_is_ignored_and_pruned() {
        let root = temp_root("old");
        let key = graph_key("ir-old", "p");
        // Version 1 wrote `<root>/graphs/v1-<version>/<sha256>.hlo`.
        let old_dir = root.join("graphs").join(format!("v1-{}", torchtpu_runtime::TORCHTPU_VERSION));
        std::fs::create_dir_all(&old_dir).unwrap();
        let old = old_dir.join(format!("{}.hlo", key.digest.hex()));
        std::fs::write(&old, b"TTPUGRF1 old entry").unwrap();
        let cache = GraphCache::new(Some(&root));
        assert!(cache.get(&key).is_none(), "never read");
        assert_eq!(cache.stats().discarded, 0);
        let store = Store::new(&root);
        assert_eq!(store.summary().unwrap().stale_files, 1);
        let r = store.clear().unwrap();
        assert_eq!(r.removed_leftovers, 1);
        assert!(!old.exists() && !root.join("graphs").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_graph_another_process_is_lowering_is_waited_for_and_read() {
        let root = temp_root("claim");
        let key = graph_key("ir-claim", "p");
        let first = GraphCache::new(Some(&root));
        assert!(first.get_entry(&key).is_none());
        let claim = first.claim(&key);
        assert!(claim.entry().is_none(), "nobody else has it: ours to lower");
        let started = std::time::Instant::now();
        let waiter = std::thread::spawn({
            let (root, key) = (root.clone(), key.clone());
            move || {
                // Another process: fresh memory, the same folder.
                let cache = GraphCache::new(Some(&root));
                assert!(cache.get_entry(&key).is_none());
                let claim = cache.claim(&key);
                (claim.entry().cloned(), cache.stats(), cache.get_entry(&key))
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(150));
        first.put_entry_named(&key, b"lowered".to_vec(), "meta", Some("g"), 0.1);
        drop(claim);
        let (entry, stats, again) = waiter.join().unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(150));
        assert_eq!(entry.as_ref().map(|e| (e.code.as_slice(), e.meta.as_str())), Some((&b"lowered"[..], "meta")));
        assert_eq!(
            stats,
            GraphCacheStats { memory_hits: 0, disk_hits: 1, disk_hits_after_wait: 1, misses: 0, discarded: 0 },
            "the miss became a hit after the wait"
        );
        assert_eq!(again, entry, "and it is in memory now");
        // Without a disk level there is nothing to wait for.
        assert!(GraphCache::new(None).claim(&key).entry().is_none());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn concurrent_writers_leave_whole_entries() {
        let root = temp_root("threads");
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let root = root.clone();
                std::thread::spawn(move || {
                    let cache = GraphCache::new(Some(&root));
                    for round in 0..20 {
                        cache.put(&graph_key("shared", "p"), vec![7u8; 4096]);
                        cache.put(&graph_key(&format!("own-{i}-{round}"), "p"), vec![i as u8; 100]);
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        let reader = GraphCache::new(Some(&root));
        assert_eq!(reader.get(&graph_key("shared", "p")).unwrap().len(), 4096);
        for i in 0..8 {
            assert_eq!(reader.get(&graph_key(&format!("own-{i}-19"), "p")).unwrap()[0], i as u8);
        }
        assert_eq!(reader.stats().discarded, 0);
        assert!(reader.take_warnings().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}
