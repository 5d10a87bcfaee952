//! Per-key lock files, so that the processes sharing a store (the ranks of a host) make a
//! missing entry once: the first takes the key's lock, compiles, writes the entry and lets go;
//! the others wait for the lock, find the entry and read it.
//!
//! - **The lock.** `<key>.lock` next to the entry, held with an OS advisory lock (`flock`,
//!   exclusive). The OS releases it when its holder's process dies, so a crashed holder never
//!   blocks the others.
//! - **Bounded waits.** A waiter polls without blocking (1 ms, doubling to 25 ms) until its
//!   timeout, then gives up with [`StoreError::LockTimeout`]: the caller makes the entry itself
//!   and records a warning rather than hang behind a stuck holder.
//! - **No leftovers.** The holder removes the file while it still holds the lock, then lets go.
//!   A waiter that then gets the lock on the removed file sees that the path no longer names
//!   the file it locked, and starts again on the path (the usual `flock` + `unlink` protocol).
//!   A lock file left by a crash is removed by eviction, `prune` and `clear`, which take it
//!   first (a lock someone holds is left alone).
//! - `flock` locks belong to an open file, so two threads of one process exclude each other
//!   too. The file is opened close-on-exec.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

use super::error::{io_err, Result, StoreError};
use super::files::FileId;
use super::private;

/// How long a waiter waits by default for the process making an entry.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// First and largest pause between two tries of a held lock.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(25);

/// A held per-key lock. Dropping it removes the lock file and releases the lock.
#[derive(Debug)]
pub struct KeyLock {
    file: File,
    path: PathBuf,
    waited: Duration,
    contended: bool,
}

impl KeyLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How long taking the lock took.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Whether another holder had the lock when this one first tried.
    pub fn contended(&self) -> bool {
        self.contended
    }
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        // Still holding the lock: nobody else can remove the file now, and nobody can lock
        // it after this without seeing that the path is gone. Closing the file lets go.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn identity(file: &File) -> Option<FileId> {
    super::files::identity(file)
}

/// Whether `path` still names the open `file`.
fn same_file(file: &File, path: &Path) -> bool {
    let id = identity(file);
    id.is_some() && super::files::file_id(path) == id
}

/// Whether the error of a non-blocking `flock` means "held by someone else".
fn is_held(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::AGAIN
}

fn open(path: &Path) -> Result<File> {
    let mut options = private::new_file_options();
    options.create_new(false).create(true).read(true);
    options.open(path).map_err(io_err("open lock file", path))
}

/// Takes the lock at `path` (its folder must exist), waiting at most `timeout` for another
/// holder.
pub fn acquire(path: &Path, timeout: Duration) -> Result<KeyLock> {
    let started = Instant::now();
    let mut contended = false;
    let mut pause = FIRST_PAUSE;
    loop {
        let file = open(path)?;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(e) if is_held(e) => {
                    contended = true;
                    let waited = started.elapsed();
                    if waited >= timeout {
                        return Err(StoreError::LockTimeout { path: path.to_path_buf(), waited });
                    }
                    std::thread::sleep(pause.min(timeout - waited));
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(e) => return Err(io_err("lock", path)(e.into())),
            }
        }
        if same_file(&file, path) {
            return Ok(KeyLock { file, path: path.to_path_buf(), waited: started.elapsed(), contended });
        }
        // The previous holder removed the file before letting go: lock the path's new file.
    }
}

/// Removes the lock file at `path` if nobody holds it (a crash's leftover); returns whether
/// it did. A held lock is left alone.
pub fn remove_if_unheld(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() || !same_file(&file, path) {
        return false;
    }
    std::fs::remove_file(path).is_ok()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    #[test]
    fn a_second_taker_waits_for_the_first_and_the_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let first = acquire(&path, Duration::from_secs(5)).unwrap();
        assert!(!first.contended());
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        }
        let barrier = Arc::new(Barrier::new(2));
        let waiter = {
            let (path, barrier) = (path.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let lock = acquire(&path, Duration::from_secs(5)).unwrap();
                (lock.contended(), lock.waited())
            })
        };
        barrier.wait();
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        let (contended, waited) = waiter.join().unwrap();
        assert!(contended);
        assert!(waited >= Duration::from_millis(90), "{waited:?}");
        assert!(!path.exists(), "the last holder removes the lock file");
    }

    #[test]
    fn a_waiter_gives_up_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let _held = acquire(&path, Duration::ZERO).unwrap();
        let started = Instant::now();
        let e = acquire(&path, Duration::from_millis(150)).unwrap_err();
        let elapsed = started.elapsed();
        assert!(matches!(&e, StoreError::LockTimeout { waited, .. } if *waited >= Duration::from_millis(150)), "{e}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        assert!(e.to_string().contains("TORCHTPU_CACHE_LOCK_TIMEOUT"), "{e}");
        assert!(!remove_if_unheld(&path), "a held lock is not swept");
        assert!(path.exists());
    }

    #[test]
    fn an_unheld_leftover_is_swept_and_a_dead_holder_blocks_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        // A crash leaves the file; the OS already released its lock.
        std::fs::write(&path, b"").unwrap();
        let lock = acquire(&path, Duration::ZERO).unwrap();
        assert!(!lock.contended());
        drop(lock);
        std::fs::write(&path, b"").unwrap();
        assert!(remove_if_unheld(&path));
        assert!(!path.exists());
        assert!(!remove_if_unheld(&path));
    }

    /// Many threads taking and dropping one lock: never two holders at once.
    #[test]
    fn holders_never_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let (path, inside) = (path.clone(), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for _ in 0..30 {
                        let _lock = acquire(&path, Duration::from_secs(30)).unwrap();
                        assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                        std::thread::sleep(Duration::from_micros(200));
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert!(!path.exists());
    }
}
