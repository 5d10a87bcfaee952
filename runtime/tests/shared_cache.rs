//! One disk cache shared by several processes or threads (the ranks of a host), against the
//! real plugin: a missing program is compiled once while the others wait and read it; a
//! waiter gives up at its timeout and compiles; a crashed holder blocks nobody; folders and
//! entries another user could write are refused, and what the cache creates is private.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::modules::{dense, neg_square};
use common::*;
use torchtpu_runtime::store::Claim;
use torchtpu_runtime::{CacheSource, CompileOptions, DiskCache, ExecutableCache};

fn run_neg_square(exe: &torchtpu_runtime::Executable, n: usize) -> Vec<f32> {
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
    let out = exe.execute(&[&upload_f32(&x, &[n as i64])]).unwrap();
    f32s(&out[0].to_host().unwrap())
}

fn expected_neg_square(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 1.0).map(|x| -(x * x)).collect()
}

/// Every file and folder under `root` (root included).
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if out[i].is_dir() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&out[i]).unwrap().map(|e| e.unwrap().path()).collect();
            children.sort();
            out.extend(children);
        }
        i += 1;
    }
    out
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The one executable entry's `.bin` under `root`.
fn only_executable(root: &Path) -> PathBuf {
    let entries = DiskCache::new(root).entries().unwrap();
    let bins: Vec<_> = entries.iter().filter(|e| e.level == torchtpu_runtime::Level::Executable).collect();
    assert_eq!(bins.len(), 1, "{entries:?}");
    bins[0].path.clone()
}

/// `threads` caches (fresh memory each, as in separate processes) on one folder, released at
/// once by a barrier after each has its key (so the plugin hash is not part of the race),
/// compile the same module. Returns each one's source and stats.
fn race(root: &Path, threads: usize, timeout: Option<Duration>, module: &str) -> Vec<(CacheSource, u64, u64)> {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (root, barrier, module) = (root.to_path_buf(), Arc::clone(&barrier), module.to_owned());
            std::thread::spawn(move || {
                let cache = ExecutableCache::with_disk(DiskCache::new(&root).with_lock_timeout(timeout));
                cache.disk().unwrap().key(client(), &module, &CompileOptions::default()).unwrap();
                barrier.wait();
                let (exe, source) =
                    cache.lookup_or_compile(client(), module.as_bytes(), &CompileOptions::default(), None).unwrap();
                assert_eq!(run_neg_square(&exe, 64), expected_neg_square(64));
                let s = cache.stats();
                assert!(cache.take_warnings().is_empty());
                (source, s.misses, s.disk_hits_after_wait)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn threads_racing_on_one_key_compile_it_once_and_the_others_wait_and_read() {
    let module = neg_square(64);
    // The control: without the lock the threads miss together and each compiles (so the race
    // is real; >= 2 in case the machine is so loaded that one thread starts late).
    let dir = tempfile::tempdir().unwrap();
    let unshared = race(dir.path(), 3, None, &module);
    let compiles: u64 = unshared.iter().map(|r| r.1).sum();
    assert!(compiles >= 2, "{unshared:?}");

    let dir = tempfile::tempdir().unwrap();
    let shared = race(dir.path(), 3, Some(Duration::from_secs(60)), &module);
    let compiles: u64 = shared.iter().map(|r| r.1).sum();
    assert_eq!(compiles, 1, "one compile in all: {shared:?}");
    // The others waited and read (a thread that started late finds the entry: a plain hit).
    let waited: Vec<_> = shared.iter().filter(|r| matches!(r.0, CacheSource::Waited { .. })).collect();
    let read = shared.iter().filter(|r| matches!(r.0, CacheSource::Disk { .. })).count();
    assert!(!waited.is_empty() && waited.len() + read == 2, "{shared:?}");
    assert!(waited.iter().all(|r| r.2 == 1));
    for (source, ..) in &shared {
        if let CacheSource::Waited { compile_seconds_saved, waited_seconds } = source {
            assert!(*compile_seconds_saved > 0.0 && *waited_seconds > 0.0, "{source:?}");
        }
    }
    // No lock file is left behind.
    assert!(!walk(dir.path()).iter().any(|p| p.extension().is_some_and(|e| e == "lock")), "{:?}", walk(dir.path()));
}

#[test]
fn a_waiter_gives_up_at_its_timeout_compiles_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let module = neg_square(7);
    let opts = CompileOptions::default();
    // Someone else holds the key's lock and never finishes.
    let holder = DiskCache::new(dir.path());
    let key = holder.key(client(), &module, &opts).unwrap();
    let Claim::Locked(lock) = holder.claim(&key).unwrap() else { panic!("the key should be free") };

    let cache =
        ExecutableCache::with_disk(DiskCache::new(dir.path()).with_lock_timeout(Some(Duration::from_millis(300))));
    let started = Instant::now();
    let (exe, source) = cache.lookup_or_compile(client(), module.as_bytes(), &opts, None).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(matches!(source, CacheSource::Compiled { .. }), "{source:?}");
    assert_eq!(run_neg_square(&exe, 7), expected_neg_square(7));
    let s = cache.stats();
    assert_eq!((s.misses, s.lock_timeouts, s.disk_writes, s.disk_errors), (1, 1, 1, 0), "{s:?}");
    assert!(s.lock_wait_seconds >= 0.3, "{s:?}");
    let warnings = cache.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].to_string();
    assert!(w.contains("gave up") && w.contains("TORCHTPU_CACHE_LOCK_TIMEOUT") && w.contains(".lock"), "{w}");
    drop(lock);
    assert!(!walk(dir.path()).iter().any(|p| p.extension().is_some_and(|e| e == "lock")));
}

const WORKER_ENV: &str = "TORCHTPU_SHARED_CACHE_TEST_WORKER";

/// Body of the worker processes; a no-op in a normal test run.
///
/// `compile:<dir>:<id>:<go file>`: writes `<dir>/ready-<id>`, waits for the go file, compiles
/// `neg_square(96)` through a fresh cache on `<dir>/cache` and writes the source's name to
/// `<dir>/out-<id>`.
/// `hold:<dir>:<n>`: takes the lock of `neg_square(n)`'s key in `<dir>`, writes `<dir>/held`
/// and sleeps (the parent kills it).
#[test]
fn worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let dir = Path::new(parts[1]);
    let opts = CompileOptions::default();
    match parts[0] {
        "compile" => {
            let module = neg_square(96);
            let cache = ExecutableCache::with_disk(DiskCache::new(dir.join("cache")));
            cache.disk().unwrap().key(client(), &module, &opts).unwrap();
            std::fs::write(dir.join(format!("ready-{}", parts[2])), b"").unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !Path::new(parts[3]).exists() {
                assert!(Instant::now() < deadline, "no go signal");
                std::thread::sleep(Duration::from_millis(1));
            }
            let (exe, source) = cache.lookup_or_compile(client(), module.as_bytes(), &opts, None).unwrap();
            assert_eq!(run_neg_square(&exe, 96), expected_neg_square(96));
            std::fs::write(dir.join(format!("out-{}", parts[2])), source.name()).unwrap();
        }
        "hold" => {
            let disk = DiskCache::new(dir);
            let module = neg_square(parts[2].parse().unwrap());
            let key = disk.key(client(), &module, &opts).unwrap();
            let Claim::Locked(_lock) = disk.claim(&key).unwrap() else { panic!("the key should be free") };
            std::fs::write(dir.join("held"), b"").unwrap();
            std::thread::sleep(Duration::from_secs(120));
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

fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn processes_racing_on_one_key_compile_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let n = 3;
    let mut children: Vec<_> =
        (0..n).map(|id| spawn_worker(&format!("compile:{}:{id}:{}", dir.path().display(), go.display()))).collect();
    for id in 0..n {
        wait_for(&dir.path().join(format!("ready-{id}")), "the workers");
    }
    std::fs::write(&go, b"").unwrap();
    for (id, child) in children.iter_mut().enumerate() {
        assert!(child.wait().unwrap().success(), "worker {id} failed");
    }
    let sources: Vec<String> =
        (0..n).map(|id| std::fs::read_to_string(dir.path().join(format!("out-{id}"))).unwrap()).collect();
    // The first compiled; the others missed at the same moment, waited for it and read it (one
    // that started late on a loaded machine finds the entry: a plain disk hit).
    let count = |name: &str| sources.iter().filter(|s| *s == name).count();
    assert_eq!(count("compiled"), 1, "{sources:?}");
    assert!(count("waited") >= 1 && count("waited") + count("disk") == n - 1, "{sources:?}");
}

#[test]
fn a_killed_holder_blocks_nobody_and_its_lock_file_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let mut holder = spawn_worker(&format!("hold:{}:11", dir.path().display()));
    wait_for(&dir.path().join("held"), "the holder");
    let locks = || walk(dir.path()).into_iter().filter(|p| p.extension().is_some_and(|e| e == "lock")).count();
    assert_eq!(locks(), 1);
    // While it lives, a sweep leaves its lock alone.
    assert_eq!(DiskCache::new(dir.path()).prune(None, None).unwrap().removed_leftovers, 0);
    holder.kill().unwrap();
    holder.wait().unwrap();
    // The OS let its lock go: a sweep removes the leftover file ...
    assert_eq!(locks(), 1);
    assert_eq!(DiskCache::new(dir.path()).prune(None, None).unwrap().removed_leftovers, 1);
    assert_eq!(locks(), 0);
    // ... and the key is free for the next process, with no wait.
    let cache = ExecutableCache::with_disk(DiskCache::new(dir.path()).with_lock_timeout(Some(Duration::from_secs(60))));
    let started = Instant::now();
    let (_, source) =
        cache.lookup_or_compile(client(), neg_square(11).as_bytes(), &CompileOptions::default(), None).unwrap();
    assert!(matches!(source, CacheSource::Compiled { .. }));
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(cache.stats().lock_timeouts, 0);

    // A leftover lock file (without a holder) does not block either, and `clear` removes it.
    let mut holder = spawn_worker(&format!("hold:{}:12", dir.path().display()));
    std::fs::remove_file(dir.path().join("held")).unwrap();
    wait_for(&dir.path().join("held"), "the holder");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(locks(), 1);
    DiskCache::new(dir.path()).clear().unwrap();
    assert_eq!(locks(), 0);
}

#[test]
fn new_folders_and_files_are_private() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fresh").join("cache");
    let cache = ExecutableCache::with_disk(DiskCache::new(&root));
    cache.get_or_compile_named(client(), &neg_square(3), &CompileOptions::default(), Some("n")).unwrap();
    let all = walk(&tmp.path().join("fresh"));
    assert!(all.iter().any(|p| p.extension().is_some_and(|e| e == "bin")), "{all:?}");
    assert!(all.iter().any(|p| p.extension().is_some_and(|e| e == "json")), "{all:?}"); // sidecar and memo
    for p in &all {
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(p), want, "{}", p.display());
    }
}

#[test]
fn a_folder_others_can_write_is_refused_once_with_its_fix_and_nothing_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cache");
    let opts = CompileOptions::default();
    let (small, big) = (neg_square(4), dense(4, 8, 2));
    let first = ExecutableCache::with_disk(DiskCache::new(&root));
    first.get_or_compile(client(), &small, &opts).unwrap();
    let bin = only_executable(&root);
    let partition = bin.parent().unwrap().to_path_buf();

    for (folder, bad) in [(partition.clone(), 0o770), (root.clone(), 0o757), (root.join("v2"), 0o777)] {
        chmod(&folder, bad);
        let cache = ExecutableCache::with_disk(DiskCache::new(&root));
        let (exe, source) = cache.lookup_or_compile(client(), small.as_bytes(), &opts, None).unwrap();
        assert!(matches!(source, CacheSource::Compiled { .. }), "{source:?}: the entry must not be loaded");
        assert_eq!(run_neg_square(&exe, 4), expected_neg_square(4));
        cache.get_or_compile(client(), &big, &opts).unwrap();
        let s = cache.stats();
        assert_eq!((s.disk_hits, s.misses, s.disk_writes), (0, 2, 0), "{s:?}");
        assert!(s.disk_errors >= 2, "{s:?}");
        // One warning, naming the folder and the fix, however often the folder is refused.
        let warnings: Vec<String> = cache.take_warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(&format!("chmod 700 {}", folder.display())), "{warnings:?}");
        assert!(warnings[0].contains("writable by"), "{warnings:?}");
        // verify refuses to hand the entry to the plugin.
        let report = DiskCache::new(&root).verify(Some(client())).unwrap();
        assert_eq!(report.ok, 0);
        assert!(report.bad.iter().any(|b| b.reason.contains("chmod 700")), "{report:?}");
        chmod(&folder, 0o700);
        // Private again: hits.
        let fixed = ExecutableCache::with_disk(DiskCache::new(&root));
        let (_, source) = fixed.lookup_or_compile(client(), small.as_bytes(), &opts, None).unwrap();
        assert!(matches!(source, CacheSource::Disk { .. }), "{source:?}");
    }
}

#[test]
fn an_entry_others_can_write_is_refused_and_replaced_by_a_private_one() {
    let dir = tempfile::tempdir().unwrap();
    let opts = CompileOptions::default();
    let module = neg_square(6);
    ExecutableCache::with_disk(DiskCache::new(dir.path())).get_or_compile(client(), &module, &opts).unwrap();
    let bin = only_executable(dir.path());
    chmod(&bin, 0o664);

    let cache = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    let (exe, source) = cache.lookup_or_compile(client(), module.as_bytes(), &opts, None).unwrap();
    assert!(matches!(source, CacheSource::Compiled { .. }), "{source:?}");
    assert_eq!(run_neg_square(&exe, 6), expected_neg_square(6));
    let warnings: Vec<String> = cache.take_warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains(&format!("chmod 600 {}", bin.display())), "{warnings:?}");
    // The compile rewrote it privately; the next process loads it.
    assert_eq!(mode(&bin), 0o600);
    let next = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    let (_, source) = next.lookup_or_compile(client(), module.as_bytes(), &opts, None).unwrap();
    assert!(matches!(source, CacheSource::Disk { .. }), "{source:?}");
}

/// Only root can give a folder away (as another user, the mode tests above cover the checks).
#[test]
fn a_folder_owned_by_another_user_is_refused() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: not root, cannot chown");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = CompileOptions::default();
    let module = neg_square(9);
    ExecutableCache::with_disk(DiskCache::new(dir.path())).get_or_compile(client(), &module, &opts).unwrap();
    let partition = only_executable(dir.path()).parent().unwrap().to_path_buf();
    rustix::fs::chown(&partition, Some(rustix::fs::Uid::from_raw(4321)), None).unwrap();
    let cache = ExecutableCache::with_disk(DiskCache::new(dir.path()));
    let (_, source) = cache.lookup_or_compile(client(), module.as_bytes(), &opts, None).unwrap();
    assert!(matches!(source, CacheSource::Compiled { .. }), "{source:?}");
    let warnings: Vec<String> = cache.take_warnings().iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("owned by uid 4321"), "{warnings:?}");
}
