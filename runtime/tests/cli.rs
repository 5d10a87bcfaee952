//! The `torchtpu-cache` tool on a populated cache, its `--json` output, and its one-line
//! messages for an absent cache and bad arguments.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::modules::neg_square;
use common::*;
use serde_json::Value;
use torchtpu_runtime::store::{named_digest, Components, NewEntry, Slot, Store};
use torchtpu_runtime::{CompileOptions, DiskCache, ExecutableCache, Level};

fn tool(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_torchtpu-cache"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("TORCHTPU_CACHE_MAX_SIZE")
        .env_remove("TORCHTPU_CACHE_MIN_COMPILE_SECS")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = tool(dir, &all);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
}

/// A cache with three entries (two graphs differing in the module, one in the options),
/// one of them hit once. Returns the three keys.
fn populate(dir: &Path) -> [String; 3] {
    let one = CompileOptions::default();
    let two = CompileOptions::new(2, 1);
    let (a, b) = (neg_square(20), neg_square(21));
    let cache = ExecutableCache::with_disk(DiskCache::new(dir));
    cache.get_or_compile_named(client(), &a, &one, Some("graph_a")).unwrap();
    cache.get_or_compile_named(client(), &b, &one, Some("graph_b")).unwrap();
    cache.get_or_compile_named(client(), &a, &two, None).unwrap();
    // A hit from a fresh cache (as in another process).
    ExecutableCache::with_disk(DiskCache::new(dir)).get_or_compile(client(), &a, &one).unwrap();
    let disk = DiskCache::new(dir);
    [(&a, &one), (&b, &one), (&a, &two)].map(|(m, o)| disk.key(client(), m, o).unwrap().digest().hex())
}

/// Two graph-level entries, as the engine's graph cache files them (the runtime cannot lower
/// graphs itself); the second one hit once. Returns their keys.
fn populate_graphs(dir: &Path) -> [String; 2] {
    let store = Store::new(dir);
    let keys = ["graph @f", "graph @g"].map(|ir| {
        let slot = Slot {
            level: Level::Graph,
            partition: "00112233445566aa".into(),
            key: named_digest(&[("torchtpu-graph-cache-key", b"v1"), ("canonical_ir", ir.as_bytes())]),
        };
        let components = Components::new()
            .with("torchtpu_version", "0.1.0")
            .with("compiler_build", "build")
            .with("options", if ir.ends_with('f') { "cse" } else { "dce" })
            .with("canonical_ir_bytes", ir.len());
        let new = NewEntry { components, graph_name: Some(format!("lowered_{}", &ir[7..])), compile_seconds: 0.01 };
        store.put(&slot, b"\0\0\0\0\0\0\0\0bytecode", &new).unwrap();
        slot
    });
    store.record_hit(&keys[1]);
    keys.map(|s| s.key.hex())
}

#[test]
fn both_levels_in_list_stats_show_explain_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let [ka, ..] = populate(dir.path());
    let [gf, gg] = populate_graphs(dir.path());

    let o = tool(dir.path(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let header = text.lines().next().unwrap();
    assert!(header.starts_with("LEVEL "), "{header}");
    let row = |key: &str| text.lines().find(|l| l.contains(&key[..12])).unwrap_or_else(|| panic!("{key}: {text}"));
    assert!(row(&gf).starts_with("graph "), "{text}");
    assert!(row(&gf).contains("lowered_f"), "{text}");
    assert!(row(&ka).starts_with("executable "), "{text}");
    assert!(text.contains("5 entries (2 graph, 3 executable)"), "{text}");

    let list = json(dir.path(), &["list"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 5);
    let levels: Vec<&str> = list.iter().map(|e| e["level"].as_str().unwrap()).collect();
    assert_eq!(levels.iter().filter(|l| **l == "graph").count(), 2, "{levels:?}");
    assert_eq!(levels.iter().filter(|l| **l == "executable").count(), 3, "{levels:?}");
    let g = list.iter().find(|e| e["key"] == gg.as_str()).unwrap();
    assert_eq!((g["meta"]["level"].as_str(), g["meta"]["hit_count"].as_u64()), (Some("graph"), Some(1)));
    assert_eq!(g["partition"], "00112233445566aa");

    let stats = json(dir.path(), &["stats"]);
    assert_eq!(stats["entries"], 5);
    assert_eq!(stats["hits"], 2);
    assert_eq!(stats["levels"][0]["level"], "graph");
    assert_eq!(stats["levels"][0]["entries"], 2);
    assert_eq!(stats["levels"][1]["level"], "executable");
    assert_eq!(stats["levels"][1]["entries"], 3);
    let text = stdout(&tool(dir.path(), &["stats"]));
    assert!(text.contains("5 (2 graph, 3 executable; in 1 toolchain folder)"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("graph ") && l.contains(" 2 ")), "{text}");

    // show says clearly that it is a graph entry.
    let text = stdout(&tool(dir.path(), &["show", &gf[..12]]));
    assert!(text.contains("level                graph (a graph-cache entry"), "{text}");
    assert!(text.contains("compiler build folder"), "{text}");
    assert!(text.contains("canonical_ir_bytes"), "{text}");
    assert_eq!(json(dir.path(), &["show", &gf])["level"], "graph");

    // explain between two graph entries, and across levels.
    let e = json(dir.path(), &["explain", &gf[..12], &gg[..12]]);
    assert_eq!(e["level1"], "graph");
    let diffs: Vec<&str> =
        e["differences"].as_array().unwrap().iter().map(|d| d["component"].as_str().unwrap()).collect();
    assert_eq!(diffs, ["options"]);
    let text = stdout(&tool(dir.path(), &["explain", &gf[..12], &ka[..12]]));
    assert!(text.contains("is a graph entry and") && text.contains("an executable entry: different levels"), "{text}");

    // verify covers both levels; a damaged graph entry is reported with its level.
    let o = tool(dir.path(), &["verify"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("verified 5 entries (2 graph, 3 executable): 5 ok, 0 bad"), "{}", stdout(&o));
    let path = DiskCache::new(dir.path()).find(&gf).unwrap().path;
    let mut bytes = std::fs::read(&path).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let o = tool(dir.path(), &["verify", "--checksums-only"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(&format!("BAD  {}  graph ", &gf[..12])), "{}", stdout(&o));
    let report: Value = serde_json::from_slice(&tool(dir.path(), &["--json", "verify"]).stdout).unwrap();
    assert_eq!(report["bad"][0]["level"], "graph");
    assert!(report["bad"][0]["reason"].as_str().unwrap().contains("checksum"));
    assert!(path.exists(), "verify removes nothing");

    // prune and clear cover both levels.
    let total = json(dir.path(), &["stats"])["total_bytes"].as_u64().unwrap();
    let r = json(dir.path(), &["prune", "--max-size", &(total - 1).to_string()]);
    assert_eq!(r["removed_entries"], 1);
    let o = tool(dir.path(), &["clear"]);
    assert!(stdout(&o).contains("removed 4 entries"), "{}", stdout(&o));
    assert_eq!(json(dir.path(), &["list"]).as_array().unwrap().len(), 0);
}

#[test]
fn list_show_stats_and_explain() {
    let dir = tempfile::tempdir().unwrap();
    let [ka, kb, ka2] = populate(dir.path());

    let o = tool(dir.path(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in ["KEY", "GRAPH", "SIZE", "COMPILE", "HITS", "LAST HIT", "graph_a", "graph_b", &ka[..12], "3 entries"]
    {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let list = json(dir.path(), &["list"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3);
    let a = list.iter().find(|e| e["key"] == ka.as_str()).unwrap();
    assert_eq!(a["meta"]["graph_name"], "graph_a");
    assert_eq!(a["meta"]["hit_count"], 1);

    // show: a unique prefix is enough.
    let o = tool(dir.path(), &["show", &kb[..10]]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        kb.as_str(),
        "graph_b",
        "module_sha256",
        "compile_options_hex",
        "plugin_sha256",
        "torchtpu_version",
        "platform_name",
        "compile time",
        "hits",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let shown = json(dir.path(), &["show", &ka]);
    assert_eq!(shown["key"], ka.as_str());
    assert_eq!(shown["meta"]["components"]["platform_name"], "cpu");
    assert!(shown["entry_bytes"].as_u64().unwrap() > 1000);

    let stats = json(dir.path(), &["stats"]);
    assert_eq!(stats["entries"], 3);
    assert_eq!(stats["hits"], 1);
    assert_eq!(stats["toolchains"], 1);
    assert!(stats["compile_seconds_saved"].as_f64().unwrap() > 0.0);
    assert!(stats["total_bytes"].as_u64().unwrap() > 3000);
    let o = tool(dir.path(), &["stats"]);
    assert!(stdout(&o).contains("compile time saved"), "{}", stdout(&o));

    // explain: different modules, then different options.
    let e = json(dir.path(), &["explain", &ka[..12], &kb[..12]]);
    let diffs: Vec<&str> =
        e["differences"].as_array().unwrap().iter().map(|d| d["component"].as_str().unwrap()).collect();
    assert_eq!(diffs, ["module_sha256"]);
    assert!(e["same"].as_array().unwrap().iter().any(|s| s == "plugin_sha256"));
    let o = tool(dir.path(), &["explain", &ka, &ka2]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("compile_options_hex differs"), "{}", stdout(&o));
}

#[test]
fn show_with_an_unknown_or_ambiguous_prefix_says_so_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    // A malformed prefix is a bad argument (2); one that matches nothing is an error (1).
    for (prefix, expect, code) in
        [("ffffffffffffffff", "no cache entry", 1), ("", "not a key prefix", 2), ("xyz", "not a key prefix", 2)]
    {
        let o = tool(dir.path(), &["show", prefix]);
        assert_eq!(o.status.code(), Some(code), "{prefix:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expect), "{prefix:?}: {err}");
    }
}

#[test]
fn verify_reports_damaged_entries_and_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let [ka, kb, _] = populate(dir.path());
    let o = tool(dir.path(), &["verify"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("3 ok, 0 bad"), "{}", stdout(&o));

    let path_of = |k: &str| DiskCache::new(dir.path()).find(k).unwrap().path;
    let pa = path_of(&ka);
    let len = std::fs::metadata(&pa).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&pa).unwrap().set_len(len - 7).unwrap();
    let pb = path_of(&kb);
    let mut bytes = std::fs::read(&pb).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x80;
    std::fs::write(&pb, bytes).unwrap();

    let o = tool(dir.path(), &["verify"]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(text.contains(&format!("BAD  {}", &ka[..12])), "{text}");
    assert!(text.contains(&format!("BAD  {}", &kb[..12])), "{text}");
    assert!(text.contains("1 ok, 2 bad"), "{text}");

    let o = tool(dir.path(), &["--json", "verify", "--checksums-only"]);
    assert_eq!(o.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["loaded"], false);
    let mut reasons: Vec<String> =
        report["bad"].as_array().unwrap().iter().map(|b| b["reason"].as_str().unwrap().to_owned()).collect();
    reasons.sort();
    assert!(reasons[0].contains("checksum") && reasons[1].contains("truncated"), "{reasons:?}");
}

#[test]
fn prune_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let r = json(dir.path(), &["prune", "--older-than", "1d"]);
    assert_eq!((r["removed_entries"].as_u64(), r["remaining_entries"].as_u64()), (Some(0), Some(3)));
    let total = json(dir.path(), &["stats"])["total_bytes"].as_u64().unwrap();
    let r = json(dir.path(), &["prune", "--max-size", &(total - 1).to_string()]);
    assert_eq!(r["removed_entries"], 1);
    assert_eq!(r["remaining_entries"], 2);
    assert!(r["remaining_bytes"].as_u64().unwrap() < total);

    std::fs::write(dir.path().join("notes.txt"), "not ours").unwrap();
    let o = tool(dir.path(), &["clear"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("removed 2 entries"), "{}", stdout(&o));
    assert_eq!(json(dir.path(), &["stats"])["entries"], 0);
    assert!(dir.path().join("notes.txt").exists(), "clear leaves unknown files alone");
    let o = tool(dir.path(), &["list"]);
    assert!(stdout(&o).contains("0 entries"), "{}", stdout(&o));
}

#[test]
fn an_absent_cache_gives_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("never-created");
    for args in [&["list"][..], &["stats"], &["--json", "stats"], &["show", "ab"], &["verify"], &["explain", "a", "b"]]
    {
        let o = tool(&missing, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("no cache at") && err.contains("never-created"), "{err}");
        assert!(o.stdout.is_empty());
    }
    // Removing from nothing is not an error.
    let o = tool(&missing, &["clear"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("nothing to do"), "{}", stdout(&o));
    assert!(!missing.exists(), "the tool does not create the folder");
}

#[test]
fn bad_arguments_give_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["prune", "--max-size", "lots"][..],
        &["prune", "--older-than", "3 fortnights"],
        &["prune"],
        &["frobnicate"],
        &["show"],
        &["list", "--bogus"],
        &["show", "not-hex"],
        &["show", ""],
        &["explain", "ab", "xyz"],
    ] {
        let o = tool(dir.path(), args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("torchtpu-cache: "), "{err}");
    }
    let o = tool(dir.path(), &["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("explain"));
}

/// Runs the tool with its stdout a pipe whose reader is already gone: every write fails with
/// EPIPE, as in `torchtpu-cache show KEY | head` once head has exited.
fn tool_with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    // The write end of a pipe whose only reader (`true`) has exited.
    let mut reader = Command::new("true").stdin(std::process::Stdio::piped()).spawn().unwrap();
    let writer = reader.stdin.take().unwrap();
    reader.wait().unwrap();
    Command::new(env!("CARGO_BIN_EXE_torchtpu-cache"))
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_the_tool_quietly_with_its_own_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let [ka, ..] = populate(dir.path());
    for args in [
        &["show", &ka[..12]][..],
        &["list"],
        &["stats"],
        &["--json", "list"],
        &["explain", &ka[..12], &ka[..12]],
        &["verify", "--checksums-only"],
    ] {
        let o = tool_with_closed_stdout(dir.path(), args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(o.stderr.is_empty(), "{args:?}: {}", stderr(&o));
    }
    // verify still reports bad entries through its exit code.
    let path = DiskCache::new(dir.path()).find(&ka).unwrap().path;
    std::fs::write(&path, b"damaged").unwrap();
    let o = tool_with_closed_stdout(dir.path(), &["verify", "--checksums-only"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
}
