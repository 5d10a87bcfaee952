//! torchtpu-opt on closed pipes: a reader that went away (`| head`) on stdout or stderr ends
//! the tool quietly instead of a panic ("failed printing to stderr").

use std::process::{Command, Output, Stdio};

/// The write end of a pipe whose only reader (`true`) has exited: every write fails (EPIPE).
fn closed_pipe() -> std::process::ChildStdin {
    let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
    let writer = reader.stdin.take().unwrap();
    reader.wait().unwrap();
    writer
}

fn opt(args: &[&str], input: &str, stdout: Stdio, stderr: Stdio) -> Output {
    let dir = std::env::temp_dir().join(format!("torchtpu-opt-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("in-{n}.ir"));
    std::fs::write(&file, input).unwrap();
    Command::new(env!("CARGO_BIN_EXE_torchtpu-opt"))
        .arg(&file)
        .args(args)
        .stdout(stdout)
        .stderr(stderr)
        .output()
        .unwrap()
}

const GOOD: &str = "graph @g(%x: f32[2]) -> (f32[2]) {\n  %0 = aten.neg.default(%x) : f32[2]\n  %1 = aten.neg.default(%0) : f32[2]\n  return %1\n}\n";
const BAD: &str = "graph @g(%x: f32[2]) -> (f32[3]) {\n  %0 = aten.neg.default(%x) : f32[3]\n  return %0\n}\n";

#[test]
fn a_closed_stdout_is_quiet() {
    let o = opt(&["--pass-pipeline=canonicalize"], GOOD, Stdio::from(closed_pipe()), Stdio::piped());
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_closed_stderr_is_quiet_for_dumps_and_errors() {
    // IR dumps and timing go to stderr.
    let o = opt(
        &["--print-ir-after-all", "--timing", "--pass-pipeline=canonicalize,cse"],
        GOOD,
        Stdio::piped(),
        Stdio::from(closed_pipe()),
    );
    assert_eq!(o.status.code(), Some(0));
    // An error still exits 1 when it cannot be printed.
    let o = opt(&[], BAD, Stdio::piped(), Stdio::from(closed_pipe()));
    assert_eq!(o.status.code(), Some(1));
    // Both on one closed pipe, as with `2>&1 | head`.
    let pipe = closed_pipe();
    let o = opt(
        &["--print-ir-after-all", "--pass-pipeline=cse"],
        GOOD,
        Stdio::from(pipe.try_clone_pipe()),
        Stdio::from(pipe),
    );
    assert_eq!(o.status.code(), Some(0));
}

trait TryClonePipe {
    fn try_clone_pipe(&self) -> std::fs::File;
}

impl TryClonePipe for std::process::ChildStdin {
    fn try_clone_pipe(&self) -> std::fs::File {
        use std::os::fd::AsFd;
        std::fs::File::from(self.as_fd().try_clone_to_owned().unwrap())
    }
}
