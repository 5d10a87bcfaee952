//! Derives `TORCHTPU_COMPILER_BUILD_ID`: a sha256 over the compiler's sources. Lowered
//! programs are cached on disk by (IR, options, this id), so a changed compiler never serves
//! StableHLO that an older build emitted for the same IR (the crate version alone does not
//! change between development builds).
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut h = Sha256::new();
    for f in &files {
        let rel = f.strip_prefix(root).unwrap_or(f);
        h.update(rel.to_string_lossy().as_bytes());
        h.update(std::fs::read(f).unwrap_or_default());
    }
    let id: String = h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=TORCHTPU_COMPILER_BUILD_ID={id}");
}
