//! Absurd sizes reach neither XLA nor the allocator: the engine refuses tensors XLA's
//! compiler would die on (SIGFPE, or a C++ exception through the C API: "Rust cannot catch
//! foreign exceptions"), and torchtpu-run refuses inputs it cannot make, with one line and
//! exit 1. A closed stdout ends torchtpu-run quietly.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use torchtpu_compiler::ir::parse_graph;
use torchtpu_compiler::lower::LowerError;
use torchtpu_engine::{DriverError, EngineError, Options, DEFAULT_MAX_TENSOR_BYTES};

fn isolated_cache() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("torchtpu-engine-sizes-{}", std::process::id()));
    std::env::set_var("TORCHTPU_CACHE_DIR", &dir);
    dir
}

fn unary(ty: &str) -> String {
    format!("graph @g(%x: {ty}) -> ({ty}) {{\n  %0 = aten.neg.default(%x) : {ty}\n  return %0\n}}\n")
}

/// f32[2^37] (512 GiB) compiled unchecked kills XLA CPU's compiler with SIGFPE.
#[test]
fn the_engine_refuses_tensors_over_its_limit_before_compiling() {
    isolated_cache();
    let g = parse_graph(&unary("f32[137438953472]")).unwrap();
    let engine = torchtpu_engine::default_engine().unwrap();
    match engine.compile(&g, &Options::default()) {
        Err(EngineError::Compiler(DriverError::Lower(LowerError::TooLarge { node, bytes, limit, .. }))) => {
            assert_eq!((node.as_str(), bytes, limit), ("%arg0", 1 << 39, DEFAULT_MAX_TENSOR_BYTES))
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("compiled a 512 GiB graph"),
    }
    // The limit is an option (and part of the graph cache key).
    let small = Options::default().with_max_tensor_bytes(16);
    let g = parse_graph(&unary("f32[8]")).unwrap();
    assert!(matches!(
        engine.compile(&g, &small),
        Err(EngineError::Compiler(DriverError::Lower(LowerError::TooLarge { .. })))
    ));
    assert!(engine.compile(&g, &Options::default()).is_ok());
}

fn write_ir(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn torchtpu_run(args: &[&std::ffi::OsStr], stdout: Stdio) -> Output {
    Command::new(env!("CARGO_BIN_EXE_torchtpu-run"))
        .args(args)
        .env("TORCHTPU_CACHE_DIR", isolated_cache())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn one_error_line(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("torchtpu-run: ")).collect();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(ours.len(), 1, "{err}");
    ours[0].to_string()
}

#[test]
fn torchtpu_run_reports_sizes_it_cannot_handle_and_exits_1() {
    let dir = tempfile_dir();
    // 4 PiB of input: used to abort allocating it.
    let big = write_ir(&dir, "big.ir", &unary("f32[1125899906842624]"));
    let e = one_error_line(&torchtpu_run(&[big.as_os_str()], Stdio::piped()));
    assert!(e.contains("need 9007199254740992 bytes, over the limit of 1073741824 (--max-io-bytes)"), "{e}");
    // Past the I/O limit, the engine's tensor limit still stands between the graph and XLA.
    let e = one_error_line(&torchtpu_run(
        &[big.as_os_str(), "--max-io-bytes=18446744073709551615".as_ref()],
        Stdio::piped(),
    ));
    assert!(
        e.contains("node %arg0 (input) needs a tensor of 4503599627370496 bytes, over the limit of 274877906944 bytes"),
        "{e}"
    );
    // 2^64 bytes in an intermediate: used to abort with "Rust cannot catch foreign exceptions".
    let huge = write_ir(&dir, "huge.ir", "graph @g(%x: f32[1]) -> (f32[3]) {\n  %0 = aten.expand.default(%x) {size = [4611686018427387904]} : f32[4611686018427387904]\n  %1 = aten.exp.default(%0) : f32[4611686018427387904]\n  %2 = aten.slice.Tensor(%1) {dim = 0, end = 3, start = 0} : f32[3]\n  return %2\n}\n");
    let e = one_error_line(&torchtpu_run(&[huge.as_os_str(), "--pass-pipeline=canonicalize".as_ref()], Stdio::piped()));
    assert!(
        e.contains("huge.ir:2:3: node %0 (aten.expand.default): type f32[4611686018427387904] is too large"),
        "{e}"
    );
    // An intermediate within i64 but over the engine's limit.
    let mid = write_ir(&dir, "mid.ir", "graph @g(%x: f32[1]) -> (f32[]) {\n  %0 = aten.expand.default(%x) {size = [1125899906842624]} : f32[1125899906842624]\n  %1 = aten.sum.default(%0) : f32[]\n  return %1\n}\n");
    let e = one_error_line(&torchtpu_run(&[mid.as_os_str()], Stdio::piped()));
    assert!(e.contains("node %0 (aten.expand.default) needs a tensor of 4503599627370496 bytes"), "{e}");
}

#[test]
fn torchtpu_run_ends_quietly_on_a_closed_stdout() {
    let dir = tempfile_dir();
    let ok = write_ir(&dir, "ok.ir", &unary("f32[4]"));
    // The write end of a pipe whose only reader (`true`) has exited.
    let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
    let writer = reader.stdin.take().unwrap();
    reader.wait().unwrap();
    let o = torchtpu_run(&[ok.as_os_str(), "--repeat=1".as_ref()], Stdio::from(writer));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked") && !err.contains("torchtpu-run:"), "{err}");
}

fn tempfile_dir() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("torchtpu-run-sizes-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
