//! Log lines for stderr that never make the program wait for it.
//!
//! A program whose parent does not read its stderr (an editor running an agent over stdio, a
//! supervisor that pipes and forgets) fills the pipe after 64 KiB, and a plain `eprintln!` then
//! blocks the thread that logs, and with it whatever that thread serves. Lines given to [`line()`]
//! go to a queue of 1,024 that one thread of its own writes to stderr; a line that finds the
//! queue full is dropped and counted, and once stderr is read again the count is written
//! (`log: N lines dropped: stderr was not read`) before the next line.
//!
//! ```
//! use std::time::Duration;
//!
//! bidi_flow::log::line(format!("[my-agent] listening on {}", "stdio"));
//! // Before the program exits: the lines logged so far, written (for at most a second).
//! bidi_flow::log::flush(Duration::from_secs(1));
//! ```
//!
//! Write what a peer sent escaped (`{:?}`), so that line breaks and terminal escapes in it
//! cannot forge log lines.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How many lines wait for stderr at most.
const QUEUE: usize = 1024;

enum Entry {
    /// A line, and how many were dropped just before it.
    Line { dropped: u64, line: String },
    /// Answered once everything queued before it is written.
    Flush(SyncSender<()>),
}

struct Logs {
    queue: SyncSender<Entry>,
    /// The lines dropped since the last one queued.
    dropped: Arc<AtomicU64>,
}

static LOGS: OnceLock<Option<Logs>> = OnceLock::new();

/// The queue, and its writer started on first use; `None` if no thread could start (then
/// lines are dropped).
fn logs() -> Option<&'static Logs> {
    LOGS.get_or_init(|| {
        let (queue, entries) = mpsc::sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("bidi-log".to_owned())
            .spawn(move || write(&entries, &lost))
            .ok()?;
        Some(Logs { queue, dropped })
    })
    .as_ref()
}

/// Queues `line` for stderr without waiting: if the queue is full (nobody reads stderr), the
/// line is dropped and counted.
pub fn line(line: String) {
    let Some(logs) = logs() else {
        return;
    };
    let dropped = logs.dropped.swap(0, Ordering::Relaxed);
    if logs.queue.try_send(Entry::Line { dropped, line }).is_err() {
        logs.dropped.fetch_add(dropped + 1, Ordering::Relaxed);
    }
}

/// Blocks until the lines logged so far are written, for at most `limit`: before the program
/// exits, so that its last lines are not lost, and a pipe nobody reads cannot hang the exit.
/// From async code, call it on a blocking thread (`tokio::task::spawn_blocking`).
pub fn flush(limit: Duration) {
    let Some(logs) = logs() else {
        return;
    };
    let (done, written) = mpsc::sync_channel(1);
    if logs.queue.try_send(Entry::Flush(done)).is_ok() {
        let _ = written.recv_timeout(limit);
    }
}

/// The writer: each line after the count of those dropped before it, and the count of the
/// last ones dropped when the queue runs empty.
fn write(entries: &Receiver<Entry>, lost: &AtomicU64) {
    let report = |count: u64| {
        if count > 0 {
            let _ = writeln!(
                std::io::stderr(),
                "log: {count} lines dropped: stderr was not read"
            );
        }
    };
    loop {
        let entry = match entries.try_recv() {
            Ok(entry) => entry,
            Err(TryRecvError::Empty) => {
                report(lost.swap(0, Ordering::Relaxed));
                match entries.recv() {
                    Ok(entry) => entry,
                    Err(_) => return,
                }
            }
            Err(TryRecvError::Disconnected) => return,
        };
        match entry {
            Entry::Line { dropped, line } => {
                report(dropped);
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            Entry::Flush(done) => {
                report(lost.swap(0, Ordering::Relaxed));
                let _ = done.send(());
            }
        }
    }
}
