//! The one disk store behind both cache levels, without a plugin: atomic writes, checked
//! reads (a damaged entry is a miss and is removed), LRU eviction and pruning across levels,
//! older layouts ignored and pruned, per-level listing and totals.

use std::path::Path;
use std::time::Duration;

use torchtpu_runtime::store::{named_digest, Components, NewEntry, Read, Slot, Store, LAYOUT_VERSION, RESCAN_EVERY};
use torchtpu_runtime::Level;

fn slot(level: Level, name: &str) -> Slot {
    Slot { level, partition: "0123456789abcdef".into(), key: named_digest(&[("test", name.as_bytes())]) }
}

fn new_entry(name: &str) -> NewEntry {
    NewEntry { components: Components::new().with("name", name), graph_name: Some(name.into()), compile_seconds: 0.5 }
}

fn payload(store: &Store, s: &Slot) -> Option<Vec<u8>> {
    match store.read(s).unwrap() {
        Read::Found { payload, .. } => Some(payload),
        Read::Miss => None,
        Read::Discarded { reason, .. } => panic!("discarded: {reason}"),
    }
}

fn temp_files(root: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for f in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if f.path().is_dir() {
                stack.push(f.path());
            } else if f.file_name().to_string_lossy().starts_with(".tmp-") {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn both_levels_round_trip_and_are_listed_with_their_level() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let (g, e) = (slot(Level::Graph, "a"), slot(Level::Executable, "a"));
    assert!(payload(&store, &g).is_none());
    store.put(&g, b"graph payload", &new_entry("g")).unwrap();
    store.put(&e, b"executable payload", &new_entry("e")).unwrap();
    assert_eq!(payload(&store, &g).unwrap(), b"graph payload");
    assert_eq!(payload(&store, &e).unwrap(), b"executable payload");
    let paths = store.paths(&g);
    assert!(paths.bin.starts_with(dir.path().join(format!("v{LAYOUT_VERSION}")).join("graph")), "{paths:?}");

    store.record_hit(&g);
    let entries = store.entries().unwrap();
    assert_eq!(entries.len(), 2);
    let graph = entries.iter().find(|i| i.level == Level::Graph).unwrap();
    let meta = graph.meta.as_ref().unwrap();
    assert_eq!((meta.level.as_str(), meta.hit_count, meta.components.get("name")), ("graph", 1, Some("g")));
    let s = store.summary().unwrap();
    assert_eq!((s.entries, s.levels[0].entries, s.levels[1].entries, s.hits), (2, 1, 1, 1));
    assert_eq!(s.levels[0].level, Some(Level::Graph));
    // Both entries share the key digest but not the level: a prefix names both.
    assert!(store.find(&g.key.hex()[..8]).unwrap_err().to_string().contains("2 entries"));
    let json = serde_json::to_value(&entries).unwrap();
    assert!(json.as_array().unwrap().iter().any(|v| v["level"] == "graph"));
    assert!(json.as_array().unwrap().iter().any(|v| v["level"] == "executable"));
}

#[test]
fn a_damaged_entry_is_a_miss_and_is_removed_at_either_level() {
    for level in Level::ALL {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        type Damage = fn(&mut Vec<u8>);
        let damages: [(&str, Damage); 4] = [
            ("checksum", |b| *b.last_mut().unwrap() ^= 1),
            ("truncated", |b| b.truncate(b.len() - 3)),
            ("bad magic", |b| b[0] ^= 0x20),
            ("version", |b| b[8] = 99),
        ];
        for (i, (expect, damage)) in damages.iter().enumerate() {
            let s = slot(level, &format!("d{i}"));
            store.put(&s, b"some payload bytes", &new_entry("d")).unwrap();
            let path = store.paths(&s).bin;
            let mut bytes = std::fs::read(&path).unwrap();
            damage(&mut bytes);
            std::fs::write(&path, &bytes).unwrap();
            let report = store.verify(|_, _| torchtpu_runtime::store::maintain::Check::Ok).unwrap();
            assert_eq!(report.bad.len(), 1, "{level} {expect}: {report:?}");
            assert_eq!(report.bad[0].level, level);
            match store.read(&s).unwrap() {
                Read::Discarded { reason, .. } => assert!(reason.contains(expect), "{level}: {reason}"),
                other => panic!("{level} {expect}: {other:?}"),
            }
            assert!(!path.exists() && !store.paths(&s).json.exists(), "removed with its sidecar");
            let w = store.take_warnings();
            assert_eq!(w.len(), 1);
            assert!(w[0].to_string().contains(&format!("unusable {level} entry")), "{}", w[0]);
            assert!(matches!(store.read(&s).unwrap(), Read::Miss));
        }
    }
    // A graph entry renamed into the executable level is caught by its magic.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    let (g, e) = (slot(Level::Graph, "x"), slot(Level::Executable, "x"));
    store.put(&g, b"graph", &new_entry("x")).unwrap();
    let target = store.paths(&e).bin;
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(store.paths(&g).bin, &target).unwrap();
    match store.read(&e).unwrap() {
        Read::Discarded { reason, .. } => assert!(reason.contains("a graph entry filed at the executable level")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn concurrent_writers_of_both_levels_leave_whole_entries_and_no_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let root = root.clone();
            std::thread::spawn(move || {
                let store = Store::new(&root);
                for round in 0..20 {
                    let level = Level::ALL[round % 2];
                    store.put(&slot(level, "shared"), &vec![t as u8; 5000 + round], &new_entry("s")).unwrap();
                    store.put(&slot(level, &format!("own-{t}")), &vec![t as u8; 300], &new_entry("o")).unwrap();
                    // Readers never see a partial file.
                    if let Read::Discarded { reason, .. } = store.read(&slot(level, "shared")).unwrap() {
                        panic!("thread {t} read a damaged entry: {reason}");
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let store = Store::new(&root);
    let report = store.verify(|_, _| torchtpu_runtime::store::maintain::Check::Ok).unwrap();
    assert!(report.bad.is_empty(), "{report:?}");
    // One shared entry and one per thread, at each level.
    assert_eq!(report.checked_per_level, [7, 7], "{report:?}");
    assert_eq!(temp_files(&root), 0);
}

#[test]
fn lru_eviction_and_pruning_span_both_levels() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Store::new(dir.path());
    probe.put(&slot(Level::Graph, "probe"), &[1u8; 1000], &new_entry("p")).unwrap();
    let one = probe.summary().unwrap().total_bytes;
    probe.clear().unwrap();

    let store = Store::new(dir.path()).with_max_size(one * 3 + one / 2);
    let pause = || std::thread::sleep(Duration::from_millis(30));
    let slots = [
        slot(Level::Graph, "g0"),
        slot(Level::Executable, "e1"),
        slot(Level::Graph, "g2"),
        slot(Level::Executable, "e3"),
    ];
    for s in &slots[..3] {
        store.put(s, &[1u8; 1000], &new_entry("x")).unwrap();
        pause();
    }
    // A hit on the oldest (a graph entry) makes the executable entry e1 least recently used.
    store.record_hit(&slots[0]);
    pause();
    let outcome = store.put(&slots[3], &[1u8; 1000], &new_entry("x")).unwrap();
    assert!(matches!(outcome, torchtpu_runtime::store::PutOutcome::Stored { evicted: 1, .. }), "{outcome:?}");
    assert!(payload(&store, &slots[1]).is_none(), "the least recently used entry, of the other level, went");
    assert!([0, 2, 3].iter().all(|&i| payload(&store, &slots[i]).is_some()));

    // prune by size: the oldest first, whatever its level.
    pause();
    store.record_hit(&slots[3]);
    let r = store.prune(Some(one * 2 + one / 2), None).unwrap();
    assert_eq!((r.removed_entries, r.remaining_entries), (1, 2), "{r:?}");
    assert!(payload(&store, &slots[0]).is_some() && payload(&store, &slots[3]).is_some());
    // prune by age: nothing is a day old; everything is older than 0 s.
    assert_eq!(store.prune(None, Some(Duration::from_secs(86400))).unwrap().removed_entries, 0);
    std::thread::sleep(Duration::from_millis(10));
    let r = store.prune(None, Some(Duration::from_millis(1))).unwrap();
    assert_eq!((r.removed_entries, r.remaining_entries), (2, 0));
    // An entry bigger than the limit is not stored.
    let tiny = Store::new(dir.path()).with_max_size(100);
    assert_eq!(
        tiny.put(&slots[0], &[0u8; 200], &new_entry("big")).unwrap(),
        torchtpu_runtime::store::PutOutcome::SkippedTooLarge
    );
}

#[test]
fn a_put_scans_the_folder_only_when_the_limit_may_be_passed() {
    // A scan sweeps stale temporaries: whether one is left tells whether a put scanned.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path());
    store.put(&slot(Level::Graph, "first"), &[1u8; 100], &new_entry("x")).unwrap();
    let folder = store.paths(&slot(Level::Graph, "first")).bin.parent().unwrap().to_path_buf();
    let stale = folder.join(".tmp-1-2-3-x.bin");
    std::fs::write(&stale, b"partial").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::options().write(true).open(&stale).unwrap().set_modified(old).unwrap();
    // Far under the limit: the next puts trust this process's count of the folder's bytes ...
    for i in 1..RESCAN_EVERY {
        store.put(&slot(Level::Graph, &format!("p{i}")), &[1u8; 100], &new_entry("x")).unwrap();
    }
    assert!(stale.exists(), "a put below the limit scanned the folder");
    // ... up to RESCAN_EVERY puts (other processes store too).
    store.put(&slot(Level::Graph, "last"), &[1u8; 100], &new_entry("x")).unwrap();
    assert!(!stale.exists(), "no scan after {RESCAN_EVERY} puts");

    // A clone (the other level of one engine) shares the count: its first put does not scan.
    std::fs::write(&stale, b"partial").unwrap();
    std::fs::File::options().write(true).open(&stale).unwrap().set_modified(old).unwrap();
    store.clone().put(&slot(Level::Executable, "clone"), &[1u8; 100], &new_entry("x")).unwrap();
    assert!(stale.exists(), "a clone's put scanned the folder");
    // Another process's store scans at its first put (and one whose count passes the limit
    // scans and evicts: `lru_eviction_and_pruning_span_both_levels`).
    Store::new(dir.path()).put(&slot(Level::Graph, "other"), &[1u8; 100], &new_entry("x")).unwrap();
    assert!(!stale.exists());
}

#[test]
fn older_layouts_are_never_read_and_are_pruned_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let hex64 = "ab".repeat(32);
    // Layout 1: executables in <root>/<16 hex>/, graphs in <root>/graphs/v1-<version>/.
    let old_exe = root.join("fedcba9876543210");
    let old_graph = root.join("graphs").join("v1-0.1.0");
    std::fs::create_dir_all(&old_exe).unwrap();
    std::fs::create_dir_all(&old_graph).unwrap();
    std::fs::write(old_exe.join(format!("{hex64}.bin")), [0u8; 500]).unwrap();
    std::fs::write(old_exe.join(format!("{hex64}.json")), b"{}").unwrap();
    std::fs::write(old_graph.join(format!("{hex64}.hlo")), [0u8; 500]).unwrap();
    std::fs::write(old_exe.join("notes.txt"), b"not ours").unwrap();
    // A newer layout is left alone.
    let newer = root.join(format!("v{}", LAYOUT_VERSION + 1)).join("graph").join("0123456789abcdef");
    std::fs::create_dir_all(&newer).unwrap();
    std::fs::write(newer.join(format!("{hex64}.bin")), [0u8; 10]).unwrap();

    let store = Store::new(root);
    assert!(store.entries().unwrap().is_empty(), "old entries are not listed as entries");
    let s = store.summary().unwrap();
    assert_eq!((s.stale_files, s.stale_bytes), (3, 1002));
    assert_eq!(s.total_bytes, 1002, "they count toward the size limit");

    // Over the limit, stale files go before any current entry.
    store.put(&slot(Level::Graph, "new"), &[1u8; 100], &new_entry("n")).unwrap();
    let entry_bytes = store.summary().unwrap().total_bytes - 1002;
    let r = store.prune(Some(entry_bytes), None).unwrap();
    assert_eq!((r.removed_entries, r.removed_leftovers, r.remaining_entries), (0, 3, 1), "{r:?}");
    assert!(payload(&store, &slot(Level::Graph, "new")).is_some());

    store.clear().unwrap();
    assert!(old_exe.join("notes.txt").exists(), "unknown files stay");
    assert!(!old_graph.exists(), "emptied old folders go");
    assert!(newer.join(format!("{hex64}.bin")).exists(), "a newer layout is not ours to remove");
}
