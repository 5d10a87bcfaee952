//! The graph-level cache: (canonical input IR, pass pipeline, torchtpu version, compiler
//! build id) -> the lowered StableHLO bytecode, so a graph seen before skips the passes and the lowering. In memory,
//! and on disk under `<cache root>/graphs/v1-<version>/` next to the executable entries.
//! Disk entries are `<sha256>.hlo`: a magic, the sha256 of what follows, the sidecar's length,
//! the sidecar (`meta`, a string the engine fills) and the payload; written to a temporary file
//! and renamed into place; a damaged entry is a miss that is removed and reported, never
//! trusted. Entries of the first format (`TTPUGRF1`: no sidecar) read with an empty `meta`.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The first format: `MAGIC_V1 | sha256(payload) | payload`.
const MAGIC_V1: &[u8; 8] = b"TTPUGRF1";
/// With a sidecar: `MAGIC | sha256(rest) | meta length (u64 LE) | meta | payload`.
const MAGIC: &[u8; 8] = b"TTPUGRF2";
const HEADER: usize = 8 + 32;

/// One graph-cache entry: the lowered bytecode and its sidecar (`meta`, e.g. the compiler's
/// memory estimate, so a hit carries it; "" when the entry has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphEntry {
    pub code: Arc<Vec<u8>>,
    pub meta: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphCacheStats {
    pub memory_hits: u64,
    pub disk_hits: u64,
    pub misses: u64,
    /// Damaged disk entries that were discarded.
    pub discarded: u64,
}

#[derive(Default)]
struct State {
    memory: HashMap<[u8; 32], GraphEntry>,
    stats: GraphCacheStats,
    warnings: Vec<String>,
}

#[derive(Default)]
pub struct GraphCache {
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

/// The key: sha256 over named, length-prefixed components.
/// `options` is everything the lowered module depends on besides the IR (the pipeline and
/// lowering options, `Options::cache_component`).
pub fn graph_key(canonical_ir: &str, options: &str) -> [u8; 32] {
    key_for_build(canonical_ir, options, torchtpu_compiler::BUILD_ID)
}

fn key_for_build(canonical_ir: &str, options: &str, compiler_build: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for (name, value) in [
        ("torchtpu-graph-cache-key", "v1"),
        ("torchtpu_version", env!("CARGO_PKG_VERSION")),
        ("compiler_build", compiler_build),
        ("options", options),
        ("format", "mlir-bytecode"),
        ("canonical_ir", canonical_ir),
    ] {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((value.len() as u64).to_le_bytes());
        h.update(value.as_bytes());
    }
    h.finalize().into()
}

fn hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

impl GraphCache {
    /// A cache whose disk level lives under `cache_root` (None: memory only).
    pub fn new(cache_root: Option<&Path>) -> GraphCache {
        let dir = cache_root.map(|r| r.join("graphs").join(format!("v1-{}", env!("CARGO_PKG_VERSION"))));
        GraphCache { dir, state: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> GraphCacheStats {
        self.lock().stats
    }

    /// Warnings about discarded or unwritable entries since the last call.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().warnings)
    }

    pub fn get(&self, key: &[u8; 32]) -> Option<Arc<Vec<u8>>> {
        self.get_entry(key).map(|e| e.code)
    }

    /// The entry with its sidecar: memory, then disk (a disk hit goes into memory).
    pub fn get_entry(&self, key: &[u8; 32]) -> Option<GraphEntry> {
        {
            let mut state = self.lock();
            if let Some(entry) = state.memory.get(key).cloned() {
                state.stats.memory_hits += 1;
                return Some(entry);
            }
        }
        let found = self.dir.as_ref().and_then(|dir| self.read(&dir.join(format!("{}.hlo", hex(key)))));
        let mut state = self.lock();
        match found {
            Some(entry) => {
                state.stats.disk_hits += 1;
                state.memory.insert(*key, entry.clone());
                Some(entry)
            }
            None => {
                state.stats.misses += 1;
                None
            }
        }
    }

    /// Reads and checks a disk entry; a damaged one is removed and reported.
    fn read(&self, path: &Path) -> Option<GraphEntry> {
        let bytes = std::fs::read(path).ok()?;
        if let Some(entry) = decode(&bytes) {
            return Some(entry);
        }
        let _ = std::fs::remove_file(path);
        let mut state = self.lock();
        state.stats.discarded += 1;
        state
            .warnings
            .push(format!("{}: damaged graph-cache entry discarded (bad header or checksum)", path.display()));
        None
    }

    pub fn put(&self, key: &[u8; 32], code: Vec<u8>) -> Arc<Vec<u8>> {
        self.put_entry(key, code, "").code
    }

    /// Stores `code` with its sidecar `meta`, in memory and on disk.
    pub fn put_entry(&self, key: &[u8; 32], code: Vec<u8>, meta: &str) -> GraphEntry {
        let entry = GraphEntry { code: Arc::new(code), meta: meta.to_string() };
        if let Some(dir) = &self.dir {
            if let Err(e) = write_atomically(dir, &format!("{}.hlo", hex(key)), &encode(&entry)) {
                self.lock().warnings.push(format!("{}: cannot write graph-cache entry: {e}", dir.display()));
            }
        }
        self.lock().memory.insert(*key, entry.clone());
        entry
    }
}

fn encode(entry: &GraphEntry) -> Vec<u8> {
    let mut body = Vec::with_capacity(8 + entry.meta.len() + entry.code.len());
    body.extend_from_slice(&(entry.meta.len() as u64).to_le_bytes());
    body.extend_from_slice(entry.meta.as_bytes());
    body.extend_from_slice(&entry.code);
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&Sha256::digest(&body));
    bytes.extend_from_slice(&body);
    bytes
}

/// A checked entry of either format, or None.
fn decode(bytes: &[u8]) -> Option<GraphEntry> {
    if bytes.len() < HEADER || Sha256::digest(&bytes[HEADER..]).as_slice() != &bytes[8..HEADER] {
        return None;
    }
    let body = &bytes[HEADER..];
    if &bytes[..8] == MAGIC_V1 {
        return Some(GraphEntry { code: Arc::new(body.to_vec()), meta: String::new() });
    }
    if &bytes[..8] != MAGIC || body.len() < 8 {
        return None;
    }
    let meta_len = usize::try_from(u64::from_le_bytes(body[..8].try_into().ok()?)).ok()?;
    let rest = &body[8..];
    if meta_len > rest.len() {
        return None;
    }
    let meta = std::str::from_utf8(&rest[..meta_len]).ok()?.to_string();
    Some(GraphEntry { code: Arc::new(rest[meta_len..].to_vec()), meta })
}

/// Writes `bytes` to a temporary file in `dir`, then renames it into place: readers see the old
/// entry, no entry, or the whole new one.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(".tmp-{}-{nanos}-{name}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join(name)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_root(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("torchtpu-graph-cache-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn keys_change_with_every_component() {
        let k = graph_key("graph @g() -> () {\n  return\n}\n", "cse");
        assert_ne!(k, graph_key("graph @h() -> () {\n  return\n}\n", "cse"));
        assert_ne!(k, graph_key("graph @g() -> () {\n  return\n}\n", "dce"));
        assert_eq!(k, graph_key("graph @g() -> () {\n  return\n}\n", "cse"));
        // A rebuilt compiler (same version, other sources) never reads the old build's entries.
        assert_eq!(k, key_for_build("graph @g() -> () {\n  return\n}\n", "cse", torchtpu_compiler::BUILD_ID));
        assert_ne!(k, key_for_build("graph @g() -> () {\n  return\n}\n", "cse", "another-build"));
    }

    #[test]
    fn memory_then_disk_then_damage() {
        let root = temp_root("levels");
        let key = graph_key("ir", "p");
        let first = GraphCache::new(Some(&root));
        assert!(first.get(&key).is_none());
        first.put(&key, b"bytecode".to_vec());
        assert_eq!(first.get(&key).as_deref().map(|v| v.as_slice()), Some(&b"bytecode"[..]));
        assert_eq!(first.stats(), GraphCacheStats { memory_hits: 1, disk_hits: 0, misses: 1, discarded: 0 });

        // A fresh process (fresh memory) finds it on disk.
        let second = GraphCache::new(Some(&root));
        assert_eq!(second.get(&key).as_deref().map(|v| v.as_slice()), Some(&b"bytecode"[..]));
        assert_eq!(second.stats().disk_hits, 1);

        // A flipped byte is detected: a miss, the file removed, a warning.
        let path =
            root.join("graphs").join(format!("v1-{}", env!("CARGO_PKG_VERSION"))).join(format!("{}.hlo", hex(&key)));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        let third = GraphCache::new(Some(&root));
        assert!(third.get(&key).is_none());
        assert_eq!(third.stats().discarded, 1);
        assert!(!path.exists());
        assert_eq!(third.take_warnings().len(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn sidecar_round_trips_and_old_entries_read_as_empty() {
        let root = temp_root("meta");
        let key = graph_key("ir-meta", "p");
        let first = GraphCache::new(Some(&root));
        first.put_entry(&key, b"code".to_vec(), "peak=123");
        assert_eq!(first.get_entry(&key).unwrap().meta, "peak=123");
        let second = GraphCache::new(Some(&root));
        let e = second.get_entry(&key).unwrap();
        assert_eq!((e.code.as_slice(), e.meta.as_str()), (&b"code"[..], "peak=123"));
        assert_eq!(second.stats().disk_hits, 1);

        // An entry of the first format (no sidecar) reads with meta "".
        let old_key = graph_key("ir-old", "p");
        let dir = root.join("graphs").join(format!("v1-{}", env!("CARGO_PKG_VERSION")));
        let mut old = MAGIC_V1.to_vec();
        old.extend_from_slice(&Sha256::digest(b"old-code"));
        old.extend_from_slice(b"old-code");
        std::fs::write(dir.join(format!("{}.hlo", hex(&old_key))), &old).unwrap();
        let e = GraphCache::new(Some(&root)).get_entry(&old_key).unwrap();
        assert_eq!((e.code.as_slice(), e.meta.as_str()), (&b"old-code"[..], ""));

        // A flipped byte in the sidecar is caught by the checksum.
        let path = dir.join(format!("{}.hlo", hex(&key)));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER + 8] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let third = GraphCache::new(Some(&root));
        assert!(third.get_entry(&key).is_none());
        assert_eq!(third.stats().discarded, 1);
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
        let _ = std::fs::remove_dir_all(&root);
    }
}
