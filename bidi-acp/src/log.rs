//! The server's few log lines, written to stderr by a thread of their own so that a client
//! that does not read stderr never stalls the server: a line that finds the queue full is
//! dropped and counted, and the count is written once stderr is read again.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How many lines wait for stderr at most.
const QUEUE: usize = 1024;

/// How long [`flush`] waits for the lines logged before it.
pub(crate) const FLUSH: Duration = Duration::from_secs(1);

enum Entry {
    /// A line, and how many were dropped just before it.
    Line { dropped: u64, line: String },
    /// Answered once everything queued before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
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
        let writer = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("bidi-acp-log".to_owned())
            .spawn(move || write(&entries, &writer))
            .ok()?;
        Some(Logs { queue, dropped })
    })
    .as_ref()
}

/// Queues `line` for stderr without waiting: if the queue is full (nobody reads stderr), the
/// line is dropped and counted.
pub(crate) fn line(line: String) {
    let Some(logs) = logs() else {
        return;
    };
    let dropped = logs.dropped.swap(0, Ordering::Relaxed);
    if logs.queue.try_send(Entry::Line { dropped, line }).is_err() {
        logs.dropped.fetch_add(dropped + 1, Ordering::Relaxed);
    }
}

/// Waits, for at most `limit`, until the lines logged so far are written: at the end of
/// serving, so that its last lines are not lost when the program exits next.
pub(crate) async fn flush(limit: Duration) {
    let Some(logs) = logs() else {
        return;
    };
    let (done, written) = tokio::sync::oneshot::channel();
    if logs.queue.try_send(Entry::Flush(done)).is_ok() {
        let _ = tokio::time::timeout(limit, written).await;
    }
}

/// The writer: each line after the count of those dropped before it, and the count of the
/// last ones dropped when the queue runs empty.
fn write(entries: &Receiver<Entry>, lost: &AtomicU64) {
    let report = |count: u64| {
        if count > 0 {
            let _ = writeln!(
                std::io::stderr(),
                "[bidi-acp] {count} log lines dropped: stderr was not read"
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
