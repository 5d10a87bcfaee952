//! Every op name the lowering can emit (`lower::names::ALL`) is one the installed PJRT plugin's
//! dialects register. Our MLIR context does not register StableHLO, CHLO or Shardy (the
//! generic builder takes any name), so without this a misspelt name would fail only inside
//! PJRT, on the first graph that needs the op. The whitelist is generated from the plugin
//! binary itself: MLIR keeps each registered op's name as a NUL-terminated string.

use std::collections::HashSet;

const DIALECTS: [&str; 3] = ["stablehlo.", "chlo.", "sdy."];

/// The `dialect.name` strings in `binary`: each NUL-terminated run's trailing name characters.
fn registered_names(binary: &[u8]) -> HashSet<String> {
    let name_byte = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'.';
    let mut names = HashSet::new();
    for chunk in binary.split(|&b| b == 0) {
        let start = chunk.len() - chunk.iter().rev().take_while(|b| name_byte(b)).count();
        let tail = &chunk[start..];
        if let Ok(s) = std::str::from_utf8(tail) {
            if let Some(d) = DIALECTS.iter().find(|d| s.starts_with(**d)) {
                if s.len() > d.len() && !s[d.len()..].contains('.') {
                    names.insert(s.to_string());
                }
            }
        }
    }
    names
}

#[test]
fn every_emitted_op_name_is_registered_by_the_plugin() {
    let plugin = torchtpu_runtime::Plugin::load_default().expect("the PJRT plugin (make setup installs it)");
    let binary = std::fs::read(plugin.path()).expect("the plugin binary is readable");
    let registered = registered_names(&binary);
    // The scan itself works: the plugin registers the ops of every dialect we emit.
    for known in ["stablehlo.add", "chlo.erf", "sdy.sharding_constraint"] {
        assert!(registered.contains(known), "{known} not found in {}", plugin.path().display());
    }
    let unknown: Vec<&str> =
        torchtpu_compiler::lower::names::ALL.iter().copied().filter(|n| !registered.contains(*n)).collect();
    assert!(unknown.is_empty(), "emitted op names the plugin's dialects do not register: {unknown:?}");
    assert!(!registered.contains("stablehlo.exponentail"), "a misspelt name is not registered");
}
