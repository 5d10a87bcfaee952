//! What the command-line tools (`torchtpu-cache`, `torchtpu-run`) share: output that a closed
//! pipe does not turn into a panic or an error.

use std::io::{self, ErrorKind, Write};

/// Standard output on which a closed reader (`torchtpu-cache list | head`) is not an error:
/// the write that meets EPIPE and every later one are dropped, so the tool finishes quietly
/// with the exit code it would have had (`println!` would panic instead).
pub struct Stdout {
    inner: io::StdoutLock<'static>,
    closed: bool,
}

impl Stdout {
    pub fn lock() -> Stdout {
        Stdout { inner: io::stdout().lock(), closed: false }
    }

    /// Whether the reader went away.
    pub fn closed(&self) -> bool {
        self.closed
    }

    fn quiet<T>(&mut self, r: io::Result<T>, dropped: T) -> io::Result<T> {
        match r {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(dropped)
            }
            r => r,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let r = self.inner.write(buf);
        self.quiet(r, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.inner.flush();
        self.quiet(r, ())
    }
}

/// Writes one line to standard error, ignoring failure (`eprintln!` panics when stderr is a
/// closed pipe, as with `2>&1 | head`).
pub fn eprint_line(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}
