//! The persistent cache against the real plugin: hits across caches, damaged entries,
//! several processes at once, LRU eviction, the plugin-hash memo, and measured sizes/times.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::modules::{dense, neg_square};
use common::*;
use torchtpu_runtime::{CompileOptions, DiskCache, ExecutableCache, Lookup, PutMeta, PutOutcome};

fn run_neg_square(exe: &torchtpu_runtime::Executable, n: usize) -> Vec<f32> {
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
    let out = exe.execute(&[&upload_f32(&x, &[n as i64])]).unwrap();
    f32s(&out[0].to_host().unwrap())
}

/// The executable level's folder under `root`.
fn executable_dir(root: &Path) -> PathBuf {
    root.join(format!("v{}", torchtpu_runtime::store::LAYOUT_VERSION)).join("executable")
}

/// Every executable `.bin` under `root`.
fn entry_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(executable_dir(root)) else {
        return out;
    };
    for dir in dirs.flatten() {
        if dir.path().is_dir() {
            for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
                if f.path().extension().is_some_and(|e| e == "bin") {
                    out.push(f.path());
                }
            }
        }
    }
    out.sort();
    out
}

/// Every temporary file left anywhere under `root`.
fn temp_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for f in std::fs::read_dir(&d).unwrap().flatten() {
            if f.path().is_dir() {
                stack.push(f.path());
            } else if f.file_name().to_string_lossy().starts_with(".tmp-") {
                out.push(f.path());
            }
        }
    }
    out
}

#[test]
fn a_fresh_cache_on_the_same_folder_hits_disk_and_does_not_compile() {
    let dir = tempfile::tempdir().unwrap();
    let module = neg_square(5);
    let opts = CompileOptions::default();

    let first = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    let exe = first.get_or_compile_named(client(), &module, &opts, Some("neg_square_5")).unwrap();
    let s = first.stats();
    assert_eq!((s.memory_hits, s.disk_hits, s.misses, s.disk_writes), (0, 0, 1, 1));
    assert!(s.compile_seconds > 0.0);
    let expected = run_neg_square(&exe, 5);
    assert_eq!(expected, [-1.0, -0.25, 0.0, -0.25, -1.0]);
    assert_eq!(entry_files(dir.path()).len(), 1);

    // A second cache (fresh memory, as in a new process) loads from disk.
    let second = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    let loaded = second.get_or_compile(client(), &module, &opts).unwrap();
    let s = second.stats();
    assert_eq!((s.memory_hits, s.disk_hits, s.misses), (0, 1, 0), "{s:?}");
    assert_eq!(s.compile_seconds, 0.0, "nothing was compiled");
    assert!(s.compile_seconds_saved > 0.0, "{s:?}");
    assert!(loaded.is_deserialized());
    assert_eq!(run_neg_square(&loaded, 5), expected);
    // Then from memory.
    second.get_or_compile(client(), &module, &opts).unwrap();
    assert_eq!((second.hits(), second.disk_hits(), second.misses()), (1, 1, 0));
    assert!(second.take_warnings().is_empty());

    // The sidecar counted the hit and keeps the graph name and key components.
    let entries = DiskCache::new(dir.path()).entries().unwrap();
    assert_eq!(entries.len(), 1);
    let meta = entries[0].meta.as_ref().unwrap();
    assert_eq!(meta.hit_count, 1);
    assert!(meta.last_hit_unix_ms.is_some());
    assert_eq!(meta.graph_name.as_deref(), Some("neg_square_5"));
    assert_eq!(meta.level, "executable");
    assert_eq!(meta.components.get("platform_name"), Some("cpu"));
    assert_eq!(meta.components.get("plugin_sha256"), Some(client().plugin().binary_sha256().unwrap()));
    assert_eq!(meta.components.get("module_bytes"), Some(module.len().to_string().as_str()));
    assert_eq!(meta.entry_bytes, entries[0].entry_bytes);
    assert_eq!(meta.entry_bytes, meta.payload_bytes + torchtpu_runtime::disk_cache::ENTRY_HEADER_LEN as u64);
}

#[test]
fn get_and_put_directly() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskCache::new(dir.path());
    let module = neg_square(3);
    let key = disk.key(client(), &module, &CompileOptions::default()).unwrap();
    assert!(disk.get(client(), &key).unwrap().is_none(), "empty cache misses");
    assert!(!dir.path().join(key.digest().hex()).exists());

    let exe = client().compile(&module, &CompileOptions::default()).unwrap();
    let meta = PutMeta { graph_name: None, compile_seconds: 0.5 };
    let outcome = disk.put(&key, &exe, &meta).unwrap();
    assert!(matches!(outcome, PutOutcome::Stored { evicted: 0, .. }), "{outcome:?}");
    let hit = disk.get(client(), &key).unwrap().unwrap();
    assert_eq!(run_neg_square(&hit, 3), run_neg_square(&exe, 3));

    // A deserialized executable is not stored again (its re-serialization would be broken).
    assert!(disk.put(&key, &hit, &meta).is_err());

    // An in-process key (no plugin hash) cannot name a disk entry.
    let local = torchtpu_runtime::CacheKey::in_process(client(), &module, &CompileOptions::default());
    assert!(disk.lookup(client(), &local).is_err());
    assert!(disk.put(&local, &exe, &meta).is_err());

    // Thresholds.
    let picky = DiskCache::new(dir.path()).with_min_compile_seconds(10.0);
    assert_eq!(picky.put(&key, &exe, &meta).unwrap(), PutOutcome::SkippedFastCompile);
    let tiny = DiskCache::new(dir.path()).with_max_size(100);
    assert_eq!(tiny.put(&key, &exe, &meta).unwrap(), PutOutcome::SkippedTooLarge);
}

/// Damages the only entry under `root` with `damage`, then checks that a fresh cache treats
/// it as a miss (with a warning naming `expect`), recompiles, and replaces it with a good one.
fn damaged_entry_is_recompiled(damage: impl Fn(&Path), expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let module = neg_square(4);
    let opts = CompileOptions::default();
    ExecutableCache::with_disk(DiskCache::new(dir.path())).get_or_compile(client(), &module, &opts).unwrap();
    let files = entry_files(dir.path());
    assert_eq!(files.len(), 1);
    damage(&files[0]);

    let report = DiskCache::new(dir.path()).verify(Some(client())).unwrap();
    assert_eq!(report.bad.len(), 1, "{report:?}");
    assert!(report.bad[0].reason.contains(expect), "{report:?}");

    let cache = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    let exe = cache.get_or_compile(client(), &module, &opts).unwrap();
    let s = cache.stats();
    assert_eq!((s.disk_hits, s.misses, s.disk_discarded, s.disk_writes), (0, 1, 1, 1), "{s:?}");
    let warnings = cache.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].message.contains(expect), "{}", warnings[0]);
    assert_eq!(run_neg_square(&exe, 4), [-1.0, -0.25, 0.0, -0.25]);

    // Replaced: the next fresh cache hits, and everything verifies.
    let report = DiskCache::new(dir.path()).verify(Some(client())).unwrap();
    assert_eq!((report.checked, report.ok, report.bad.len()), (1, 1, 0), "{report:?}");
    let again = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    again.get_or_compile(client(), &module, &opts).unwrap();
    assert_eq!((again.disk_hits(), again.misses()), (1, 0));
}

#[test]
fn a_truncated_entry_is_a_miss_and_is_replaced() {
    damaged_entry_is_recompiled(
        |p| {
            let len = std::fs::metadata(p).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(len / 2).unwrap();
        },
        "truncated",
    );
}

#[test]
fn a_flipped_byte_is_a_miss_and_is_replaced() {
    damaged_entry_is_recompiled(
        |p| {
            let mut bytes = std::fs::read(p).unwrap();
            let i = bytes.len() - 100;
            bytes[i] ^= 0x01;
            std::fs::write(p, bytes).unwrap();
        },
        "checksum",
    );
}

#[test]
fn an_empty_entry_and_a_foreign_file_are_misses() {
    damaged_entry_is_recompiled(|p| std::fs::write(p, b"").unwrap(), "truncated");
    damaged_entry_is_recompiled(|p| std::fs::write(p, [7u8; 200]).unwrap(), "bad magic");
}

#[test]
fn an_entry_under_the_wrong_name_is_a_miss() {
    // Copy entry A's file over entry B's: the header names A's key.
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskCache::new(dir.path());
    let opts = CompileOptions::default();
    let (ma, mb) = (neg_square(6), neg_square(7));
    let cache = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    cache.get_or_compile(client(), &ma, &opts).unwrap();
    cache.get_or_compile(client(), &mb, &opts).unwrap();
    let ka = disk.key(client(), &ma, &opts).unwrap().digest().hex();
    let kb = disk.key(client(), &mb, &opts).unwrap().digest().hex();
    let find = |k: &str| entry_files(dir.path()).into_iter().find(|p| p.to_string_lossy().contains(k)).unwrap();
    std::fs::copy(find(&ka), find(&kb)).unwrap();
    let key_b = disk.key(client(), &mb, &opts).unwrap();
    match disk.lookup(client(), &key_b).unwrap() {
        Lookup::Discarded { reason, .. } => {
            assert!(reason.contains("stored under key"), "{reason}")
        }
        other => panic!("expected Discarded, got {other:?}"),
    }
    assert_eq!(disk.take_warnings().len(), 1);
    assert!(matches!(disk.lookup(client(), &key_b).unwrap(), Lookup::Miss), "it was removed");
}

#[test]
fn lru_eviction_keeps_the_cache_under_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let opts = CompileOptions::default();
    let modules: Vec<String> = (10..14).map(neg_square).collect();
    let exes: Vec<_> = modules.iter().map(|m| client().compile(m, &opts).unwrap()).collect();
    let meta = PutMeta { graph_name: None, compile_seconds: 0.01 };
    // Measure one entry (bin + sidecar) to size the limit at three entries.
    let probe = DiskCache::new(dir.path());
    let k0 = probe.key(client(), &modules[0], &opts).unwrap();
    probe.put(&k0, &exes[0], &meta).unwrap();
    let one = probe.summary().unwrap().total_bytes;
    let limit = one * 3 + one / 2;
    let disk = DiskCache::new(dir.path()).with_max_size(limit);
    let keys: Vec<_> = modules.iter().map(|m| disk.key(client(), m, &opts).unwrap()).collect();

    let pause = || std::thread::sleep(Duration::from_millis(30));
    pause();
    disk.put(&keys[1], &exes[1], &meta).unwrap();
    pause();
    disk.put(&keys[2], &exes[2], &meta).unwrap();
    pause();
    // Use entry 0 again: entry 1 is now the least recently used.
    assert!(disk.get(client(), &keys[0]).unwrap().is_some());
    pause();
    let outcome = disk.put(&keys[3], &exes[3], &meta).unwrap();
    assert!(matches!(outcome, PutOutcome::Stored { evicted: 1, .. }), "{outcome:?}");

    let hit = |i: usize| disk.get(client(), &keys[i]).unwrap().is_some();
    assert!(!hit(1), "the least recently used entry was evicted");
    assert!(hit(0) && hit(2) && hit(3));
    let summary = disk.summary().unwrap();
    assert_eq!(summary.entries, 3);
    assert!(summary.total_bytes <= limit, "{} > {limit}", summary.total_bytes);

    // prune: by age (nothing is a day old), then down to one entry's worth.
    let r = disk.prune(None, Some(Duration::from_secs(86400))).unwrap();
    assert_eq!((r.removed_entries, r.remaining_entries), (0, 3));
    let r = disk.prune(Some(one + one / 2), None).unwrap();
    assert_eq!((r.removed_entries, r.remaining_entries), (2, 1));
    assert!(hit(0) || hit(2) || hit(3));
    let r = disk.clear().unwrap();
    assert_eq!((r.removed_entries, r.remaining_entries), (1, 0));
    assert!(entry_files(dir.path()).is_empty());
}

/// Environment of a worker process (this test binary re-executed).
const WORKER_ENV: &str = "TORCHTPU_DISK_CACHE_TEST_WORKER";

/// Body of the worker processes; a no-op in a normal test run.
///
/// `put:<dir>:<id>:<rounds>:<max_size>`: repeatedly stores a key shared by all workers and
/// one of its own, and reads both back; any discarded (damaged) read fails the worker.
/// `memo:<dir>:<out>`: writes the plugin hash `DiskCache::key` reports to `<out>`.
#[test]
fn worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    match parts[0] {
        "put" => {
            let (dir, id, rounds): (&str, usize, usize) =
                (parts[1], parts[2].parse().unwrap(), parts[3].parse().unwrap());
            let disk = DiskCache::new(dir).with_max_size(parts[4].parse().unwrap());
            let opts = CompileOptions::default();
            let shared = neg_square(100);
            let own = neg_square(200 + id);
            let shared_exe = client().compile(&shared, &opts).unwrap();
            let own_exe = client().compile(&own, &opts).unwrap();
            let shared_key = disk.key(client(), &shared, &opts).unwrap();
            let own_key = disk.key(client(), &own, &opts).unwrap();
            let meta = PutMeta { graph_name: Some(format!("worker{id}")), compile_seconds: 0.02 };
            for round in 0..rounds {
                for (key, exe) in [(&shared_key, &shared_exe), (&own_key, &own_exe)] {
                    disk.put(key, exe, &meta).unwrap();
                    match disk.lookup(client(), key).unwrap() {
                        Lookup::Hit { executable, .. } => {
                            if round == 0 {
                                assert_eq!(executable.num_outputs(), 1);
                            }
                        }
                        Lookup::Miss => {} // evicted by another process meanwhile
                        Lookup::Discarded { reason, .. } => {
                            panic!("worker {id} read a damaged entry: {reason}")
                        }
                    }
                }
            }
        }
        "memo" => {
            let disk = DiskCache::new(parts[1]);
            let key = disk.key(client(), "m", &CompileOptions::default()).unwrap();
            std::fs::write(parts[2], key.plugin_sha256).unwrap();
        }
        other => panic!("unknown worker mode {other}"),
    }
}

fn spawn_worker(spec: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "worker", "--test-threads=1", "--quiet"])
        .env(WORKER_ENV, spec)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn run_workers(dir: &Path, workers: usize, rounds: usize, max_size: u64) {
    let children: Vec<_> =
        (0..workers).map(|id| spawn_worker(&format!("put:{}:{id}:{rounds}:{max_size}", dir.display()))).collect();
    for (id, mut child) in children.into_iter().enumerate() {
        assert!(child.wait().unwrap().success(), "worker {id} failed");
    }
}

#[test]
fn several_processes_writing_the_same_and_different_keys_lose_and_corrupt_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let workers = 6;
    let started = Instant::now();
    run_workers(dir.path(), workers, 10, torchtpu_runtime::disk_cache::DEFAULT_MAX_SIZE);
    eprintln!("{workers} workers x 10 rounds: {:?}", started.elapsed());

    let disk = DiskCache::new(dir.path());
    let report = disk.verify(Some(client())).unwrap();
    assert!(report.bad.is_empty(), "{report:?}");
    // One shared entry plus one per worker: nothing lost.
    assert_eq!((report.checked, report.ok), (workers + 1, workers + 1), "{report:?}");
    let entries = disk.entries().unwrap();
    assert!(entries.iter().all(|e| e.meta.is_some()), "every sidecar parses");
    let mut names: Vec<_> = entries.iter().filter_map(|e| e.meta.as_ref()?.graph_name.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), workers, "{names:?}");
    assert!(temp_files(dir.path()).is_empty(), "{:?}", temp_files(dir.path()));
}

#[test]
fn several_processes_evicting_at_once_keep_the_limit_and_corrupt_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Room for about three entries while six processes write seven keys.
    let opts = CompileOptions::default();
    let probe = DiskCache::new(dir.path());
    let m = neg_square(100);
    let k = probe.key(client(), &m, &opts).unwrap();
    probe.put(&k, &client().compile(&m, &opts).unwrap(), &PutMeta::default()).unwrap();
    let one = probe.summary().unwrap().total_bytes;
    let limit = one * 3 + one / 2;
    run_workers(dir.path(), 6, 10, limit);

    let disk = DiskCache::new(dir.path());
    let report = disk.verify(Some(client())).unwrap();
    assert!(report.bad.is_empty(), "{report:?}");
    assert!(report.checked >= 1, "{report:?}");
    let summary = disk.summary().unwrap();
    assert!(summary.total_bytes <= limit, "{} > {limit}", summary.total_bytes);
    assert!(temp_files(dir.path()).is_empty());
}

#[test]
fn the_plugin_hash_memo_is_used_only_for_the_same_file_stamp() {
    let dir = tempfile::tempdir().unwrap();
    // Record a memo (this process hashes the plugin, once).
    let disk = DiskCache::new(dir.path());
    let real = disk.key(client(), "m", &CompileOptions::default()).unwrap().plugin_sha256.to_owned();
    let memo_dir = dir.path().join("plugin-sha256");
    let memos: Vec<_> = std::fs::read_dir(&memo_dir).unwrap().flatten().collect();
    assert_eq!(memos.len(), 1);
    let memo_path = memos[0].path();
    let memo: serde_json::Value = serde_json::from_slice(&std::fs::read(&memo_path).unwrap()).unwrap();
    assert_eq!(memo["sha256"], real.as_str());

    let in_new_process = |tag: &str| {
        let out = dir.path().join(format!("out-{tag}"));
        let spec = format!("memo:{}:{}", dir.path().display(), out.display());
        assert!(spawn_worker(&spec).wait().unwrap().success());
        std::fs::read_to_string(out).unwrap()
    };
    // A new process trusts a memo whose stamp matches: plant a fake hash to see it used.
    let fake = "0".repeat(64);
    let mut planted = memo.clone();
    planted["sha256"] = fake.clone().into();
    std::fs::write(&memo_path, serde_json::to_vec(&planted).unwrap()).unwrap();
    assert_eq!(in_new_process("planted"), fake);
    // With another stamp (as after replacing the plugin) the memo is ignored and rewritten.
    planted["stamp"]["size"] = 1.into();
    std::fs::write(&memo_path, serde_json::to_vec(&planted).unwrap()).unwrap();
    assert_eq!(in_new_process("stale"), real);
    let rewritten: serde_json::Value = serde_json::from_slice(&std::fs::read(&memo_path).unwrap()).unwrap();
    assert_eq!(rewritten["sha256"], real.as_str());
}

/// Serialize/deserialize timings and entry sizes for a tiny and a mid-sized program.
#[test]
fn measure_sizes_and_times() {
    let dir = tempfile::tempdir().unwrap();
    let opts = CompileOptions::default();
    for (name, module) in [("neg_square(8)", neg_square(8)), ("dense 128x256x64", dense(128, 256, 64))] {
        let t = Instant::now();
        let exe = client().compile(&module, &opts).unwrap();
        let compile = t.elapsed();
        let t = Instant::now();
        let bytes = exe.serialize().unwrap();
        let serialize = t.elapsed();
        let t = Instant::now();
        let loaded = client().deserialize_executable(&bytes).unwrap();
        let deserialize = t.elapsed();
        assert_eq!(loaded.num_outputs(), 1);

        let disk = DiskCache::new(dir.path());
        let key = disk.key(client(), &module, &opts).unwrap();
        let t = Instant::now();
        disk.put(&key, &exe, &PutMeta { graph_name: Some(name.into()), compile_seconds: compile.as_secs_f64() })
            .unwrap();
        let put = t.elapsed();
        let t = Instant::now();
        assert!(disk.get(client(), &key).unwrap().is_some());
        let get = t.elapsed();
        let info = disk.find(&key.digest().hex()).unwrap();
        eprintln!(
            "{name}: compile {compile:.2?}, serialize {serialize:.2?}, deserialize {deserialize:.2?}, \
             disk put {put:.2?}, disk get {get:.2?}; payload {} B, entry {} B + sidecar {} B",
            bytes.len(),
            info.entry_bytes,
            info.sidecar_bytes
        );
    }
}

#[test]
fn a_broken_cache_folder_never_fails_a_compile() {
    // The "folder" is a regular file: every disk operation fails.
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let cache = ExecutableCache::with_disk(DiskCache::new(&not_a_dir));
    let exe = cache.get_or_compile(client(), &neg_square(2), &CompileOptions::default()).unwrap();
    assert_eq!(run_neg_square(&exe, 2), [-1.0, -0.25]);
    let s = cache.stats();
    assert_eq!((s.misses, s.disk_writes, s.disk_errors), (1, 0, 2), "{s:?}");
    let warnings = cache.take_warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.to_string().starts_with("torchtpu cache: ")));
}

#[test]
fn stale_temporaries_and_orphaned_sidecars_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskCache::new(dir.path());
    let module = neg_square(9);
    let opts = CompileOptions::default();
    let key = disk.key(client(), &module, &opts).unwrap();
    let exe = client().compile(&module, &opts).unwrap();
    disk.put(&key, &exe, &PutMeta::default()).unwrap();
    let folder = entry_files(dir.path())[0].parent().unwrap().to_path_buf();
    let old = std::time::SystemTime::now() - Duration::from_secs(7200);
    let backdate = |p: &Path| std::fs::File::options().write(true).open(p).unwrap().set_modified(old).unwrap();
    let stale = folder.join(".tmp-1-2-3-x.bin");
    let fresh = folder.join(".tmp-4-5-6-y.bin");
    let orphan = folder.join(format!("{}.json", "ab".repeat(32)));
    for p in [&stale, &fresh, &orphan] {
        std::fs::write(p, b"partial").unwrap();
    }
    backdate(&stale);
    backdate(&orphan);
    let r = disk.prune(None, Some(Duration::from_secs(86400))).unwrap();
    assert_eq!((r.removed_entries, r.removed_leftovers, r.remaining_entries), (0, 2, 1));
    assert!(!stale.exists() && !orphan.exists());
    assert!(fresh.exists(), "a write in progress is left alone");
    assert_eq!(disk.entries().unwrap().len(), 1, "temporaries are never listed");
}

#[test]
fn verify_skips_entries_of_other_toolchains() {
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskCache::new(dir.path());
    let module = neg_square(11);
    let opts = CompileOptions::default();
    let key = disk.key(client(), &module, &opts).unwrap();
    disk.put(&key, &client().compile(&module, &opts).unwrap(), &PutMeta::default()).unwrap();
    // The same entry as another plugin build would have filed it.
    let bin = &entry_files(dir.path())[0];
    let other = executable_dir(dir.path()).join("0123456789abcdef");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(bin, other.join(bin.file_name().unwrap())).unwrap();

    let report = disk.verify(Some(client())).unwrap();
    assert_eq!((report.checked, report.ok, report.bad.len(), report.skipped.len()), (2, 1, 0, 1));
    assert!(report.skipped[0].reason.contains("another toolchain"), "{report:?}");
    let checksums = disk.verify(None).unwrap();
    assert_eq!((checksums.ok, checksums.loaded), (2, false));
    assert_eq!(disk.summary().unwrap().toolchains, 2);
}
