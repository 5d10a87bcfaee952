//! docs/ops.md is generated from the op catalog (`torchtpu-opt --list-ops=markdown`): the
//! vocabulary joined with each layer's side table; this fails when it is not regenerated.

#[test]
fn docs_ops_md_matches_the_registry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ops.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/ops.md exists");
    let generated = torchtpu_compiler::catalog::markdown();
    assert!(
        on_disk == generated,
        "docs/ops.md is stale: regenerate it with `./target/release/torchtpu-opt --list-ops=markdown -o docs/ops.md`"
    );
}

#[test]
fn every_lowered_op_is_listed() {
    let listing = torchtpu_compiler::catalog::listing();
    for op in torchtpu_compiler::lower::table::lowered_ops() {
        assert!(listing.lines().any(|l| l.starts_with(&format!("{op} "))), "{op} missing from --list-ops");
    }
}
