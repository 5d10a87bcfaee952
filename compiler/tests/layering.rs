//! The structure docs/architecture.md describes, checked on the sources: lowering does not
//! reach into the passes, no lowering rule picks its behaviour by reading its op's name (the
//! registry's parameter says it), and the Python extension reaches the compiler only through
//! the engine, naming neither its driver nor its IR; the disk store imports nothing around it.

use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("source dir") {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path, text));
        }
    }
    out
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn offenders(dir: &str, needles: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in sources(&root().join(dir)) {
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if needles.iter().any(|n| code.contains(n)) {
                bad.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    bad
}

#[test]
fn lowering_does_not_depend_on_passes() {
    let bad = offenders("compiler/src/lower", &["crate::passes", "passes::"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn no_rule_reads_its_op_name() {
    let bad = offenders("compiler/src/lower/ops", &["o.name", ".name ==", "op_name("]);
    assert!(bad.is_empty(), "rules take the registry's `param` instead: {bad:#?}");
}

#[test]
fn the_extension_reaches_the_compiler_only_through_the_engine() {
    let bad = offenders("python/src", &["torchtpu_compiler"]);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn the_extension_only_marshals() {
    // No driver runs and no IR rewriting in the extension: the engine's `text`, `Options`
    // (with `MeshAnnotation`) and `Engine` are its whole interface to the compiler.
    let bad = offenders("python/src", &["driver::", "ir::"]);
    assert!(bad.is_empty(), "python/src names the compiler's driver or IR; give the engine a function: {bad:#?}");
}

#[test]
fn the_eager_runtime_needs_no_python_and_no_device() {
    // The eager device's per-op runtime (keys, the recipe cache, waiting calls, the mode,
    // region keys) is plain Rust, tested by `cargo test`: the extension marshals for it.
    let bad = offenders("eager/src", &["pyo3", "torchtpu_engine", "torchtpu_runtime", "unsafe"]);
    assert!(bad.is_empty(), "{bad:#?}");
    let manifest = std::fs::read_to_string(root().join("eager/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap_or("");
    assert!(deps.trim().is_empty(), "torchtpu-eager depends on nothing: {deps}");
}

#[test]
fn the_disk_store_is_a_leaf() {
    // The store keeps opaque payloads under keys: it names nothing of the runtime around it
    // (PJRT client, plugin, runtime errors), only itself.
    let bad: Vec<String> = offenders("runtime/src/store", &["crate::"])
        .into_iter()
        .filter(|l| l.split("crate::").skip(1).any(|rest| !rest.starts_with("store")))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn the_ir_and_its_op_vocabulary_import_nothing_above_them() {
    // The verifier reads signatures from the vocabulary; neither may reach lowering, the
    // sharding rules, the passes, the analyses or the driver (each layer's rules sit in its own
    // side table, keyed by `OpId`).
    let above =
        ["crate::lower", "crate::sharding", "crate::passes", "crate::analysis", "crate::driver", "crate::catalog"];
    for dir in ["compiler/src/ir", "compiler/src/registry"] {
        let bad = offenders(dir, &above);
        assert!(bad.is_empty(), "{bad:#?}");
    }
}

#[test]
fn op_names_are_written_once_in_the_lowering() {
    // Rules and the emitter name ops by `lower::names` constants, which the engine's
    // `emitted_names` test checks against the installed plugin's dialects. An op-name literal
    // is a quoted `dialect.name` and nothing more (`"sdy.sharding = ..."` is attribute text).
    let is_op_literal = |rest: &str| {
        let end = rest.find('"').unwrap_or(0);
        end > 0 && rest[..end].bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    let bad: Vec<String> = offenders("compiler/src/lower", &["\"stablehlo.", "\"chlo.", "\"sdy."])
        .into_iter()
        .filter(|l| !l.contains("lower/names.rs"))
        .filter(|l| ["\"stablehlo.", "\"chlo.", "\"sdy."].iter().any(|d| l.split(d).skip(1).any(&is_op_literal)))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn attributes_are_written_through_their_typed_keys() {
    // `KEY.set(attrs, value)` and `KEY.entry(value)` (`registry::attrs`): the value's kind is the
    // key's, so a pass cannot write an attribute the verifier and the lowering read as another.
    let needles = [".to_string(), Attr::", ".into(), Attr::", ".to_owned(), Attr::"];
    let bad: Vec<String> = ["compiler/src", "engine/src"]
        .iter()
        .flat_map(|dir| offenders(dir, &needles))
        .filter(|l| !l.contains("ir/parser.rs") && !l.contains("registry/attrs.rs"))
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}
