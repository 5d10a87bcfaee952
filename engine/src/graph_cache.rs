//! The graph-level cache: (canonical input IR, pass pipeline, torchtpu version, compiler
//! build id) -> the lowered StableHLO bytecode, so a graph seen before skips the passes and the lowering. In memory,
//! and on disk under `<cache root>/graphs/v1-<version>/` next to the executable entries.
//! Disk entries are `<sha256>.hlo`: a magic, the payload's sha256, then the payload; written to
//! a temporary file and renamed into place; a damaged entry is a miss that is removed and
//! reported, never trusted.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MAGIC: &[u8; 8] = b"TTPUGRF1";
const HEADER: usize = 8 + 32;

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
    memory: HashMap<[u8; 32], Arc<Vec<u8>>>,
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
        {
            let mut state = self.lock();
            if let Some(code) = state.memory.get(key).cloned() {
                state.stats.memory_hits += 1;
                return Some(code);
            }
        }
        let found = self.dir.as_ref().and_then(|dir| self.read(&dir.join(format!("{}.hlo", hex(key)))));
        let mut state = self.lock();
        match found {
            Some(code) => {
                state.stats.disk_hits += 1;
                let code = Arc::new(code);
                state.memory.insert(*key, Arc::clone(&code));
                Some(code)
            }
            None => {
                state.stats.misses += 1;
                None
            }
        }
    }

    /// Reads and checks a disk entry; a damaged one is removed and reported.
    fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let bytes = std::fs::read(path).ok()?;
        let ok = bytes.len() >= HEADER
            && &bytes[..8] == MAGIC
            && Sha256::digest(&bytes[HEADER..]).as_slice() == &bytes[8..HEADER];
        if ok {
            return Some(bytes[HEADER..].to_vec());
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
        let code = Arc::new(code);
        if let Some(dir) = &self.dir {
            if let Err(e) = write_atomically(dir, &format!("{}.hlo", hex(key)), &code) {
                self.lock().warnings.push(format!("{}: cannot write graph-cache entry: {e}", dir.display()));
            }
        }
        self.lock().memory.insert(*key, Arc::clone(&code));
        code
    }
}

/// Writes `MAGIC | sha256 | payload` to a temporary file in `dir`, then renames it into place:
/// readers see the old entry, no entry, or the whole new one.
fn write_atomically(dir: &Path, name: &str, payload: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(".tmp-{}-{nanos}-{name}", std::process::id()));
    let mut bytes = Vec::with_capacity(HEADER + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&Sha256::digest(payload));
    bytes.extend_from_slice(payload);
    std::fs::write(&tmp, &bytes)?;
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
