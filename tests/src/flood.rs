//! Floods a child process's stdin while nobody reads its stdout: a server that answers every
//! request must stop reading once its answers fill the pipe, rather than queue them without
//! bound.

use std::io::{self, Write as _};
use std::process::ChildStdin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the writer's progress is looked at.
const POLL: Duration = Duration::from_millis(100);
/// How many looks without progress make a stall.
const QUIET_POLLS: usize = 20;
/// How many looks at most before giving up.
const MAX_POLLS: usize = 1200;

/// Kills a process that is still running when a test's time is up, so that a test that waits
/// for it to end fails rather than hangs.
#[derive(Debug)]
pub struct Deadline {
    over: Arc<AtomicBool>,
}

/// Kills process `pid` (with `kill -9`) if the [`Deadline`] is still held after `limit`.
#[must_use]
pub fn deadline(pid: u32, limit: Duration) -> Deadline {
    let over = Arc::new(AtomicBool::new(false));
    std::thread::spawn({
        let over = Arc::clone(&over);
        move || {
            let steps = limit.as_millis() / POLL.as_millis();
            for _ in 0..steps {
                if over.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(POLL);
            }
            if !over.load(Ordering::SeqCst) {
                eprintln!("process {pid} is still running after {limit:?}: killing it");
                let _ = std::process::Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .status();
            }
        }
    });
    Deadline { over }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.over.store(true, Ordering::SeqCst);
    }
}

/// Lines being written to a child's stdin from a thread of their own.
#[derive(Debug)]
pub struct Flood {
    written: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
    thread: JoinHandle<io::Result<()>>,
}

/// Writes `lines` (each with a newline) to `stdin` from a thread; `stdin` is closed after the
/// last one.
#[must_use]
pub fn flood(mut stdin: ChildStdin, lines: Vec<String>) -> Flood {
    let written = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let thread = std::thread::spawn({
        let (written, done) = (Arc::clone(&written), Arc::clone(&done));
        move || {
            for line in lines {
                stdin.write_all(line.as_bytes())?;
                stdin.write_all(b"\n")?;
                written.fetch_add(1, Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
            Ok(())
        }
    });
    Flood {
        written,
        done,
        thread,
    }
}

impl Flood {
    /// How many lines were written when the writes stalled (the child stopped reading: no line
    /// got through for a while); `None` if every line was written first (or the writes failed,
    /// or did not stall within two minutes).
    #[must_use]
    pub fn stalled(&self) -> Option<usize> {
        let mut last = usize::MAX;
        let mut quiet = 0;
        for _ in 0..MAX_POLLS {
            if self.done.load(Ordering::SeqCst) || self.thread.is_finished() {
                return None;
            }
            let written = self.written.load(Ordering::SeqCst);
            if written == last {
                quiet += 1;
                if quiet == QUIET_POLLS {
                    return Some(written);
                }
            } else {
                (last, quiet) = (written, 0);
            }
            std::thread::sleep(POLL);
        }
        None
    }

    /// Waits until every line is written and stdin closed.
    ///
    /// # Errors
    ///
    /// The write's error (the child closed its stdin).
    ///
    /// # Panics
    ///
    /// If the writer thread panicked.
    pub fn finish(self) -> io::Result<()> {
        self.thread.join().expect("the writer thread")
    }
}
