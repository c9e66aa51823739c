//! Log lines for stderr that never make the program wait for it, and log records a connection's
//! peer reads.
//!
//! ## Lines for stderr
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
//!
//! ## A connection's records
//!
//! An action logs for the client of its connection with [`record`]: a [`Level`] and any JSON.
//! The protocol serving the connection decides where records go by putting a [`Logger`] in its
//! extensions: MCP sends them as `notifications/message`, at or above the level its client
//! set. A connection with no logger drops them, so an action may log whatever serves it.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//!
//! use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
//! use bidi_flow::log::{self, Level, Logger, Record};
//! use bidi_flow::BidiFlow;
//! use serde_json::json;
//!
//! async fn count(ctx: ActionContext, _: (), mut inbound: Inbound<u32>, _: Outbound<()>) -> Result<u32, BoxError> {
//!     let n = inbound.recv().await.unwrap_or_default();
//!     log::record(&ctx, Level::Info, json!({"counting": n}));
//!     Ok(n)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let into = Arc::clone(&seen);
//! let logger = Logger::new(move |record: Record| into.lock().unwrap().push(record));
//! let options = bidi_core::ConnectOptions::new().extension(logger);
//! let counted = BidiFlow::new("count", count).connect_with((), options).run(3).await?;
//! assert_eq!(counted, 3);
//! let seen = seen.lock().unwrap();
//! assert_eq!(seen[0].level, Level::Info);
//! assert_eq!(seen[0].data, json!({"counting": 3}));
//! # Ok(())
//! # }
//! ```

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bidi_core::ActionContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// How severe a log record is: syslog's levels (RFC 5424), least severe first, named as MCP
/// names them (`"debug"` .. `"emergency"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Detail for debugging.
    Debug,
    /// What happens, as it happens.
    Info,
    /// Normal but significant.
    Notice,
    /// Something to look at: a tool that failed, a retry.
    Warning,
    /// An operation failed.
    Error,
    /// A component failed.
    Critical,
    /// Action needed at once.
    Alert,
    /// The system is unusable.
    Emergency,
}

/// One log record of a connection, for its client.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Record {
    /// How severe it is.
    pub level: Level,
    /// What it says: a text, or any JSON.
    pub data: Value,
}

/// Where a connection's log records go: put in its extensions by the protocol that serves it.
///
/// The function is called on the action's task, once per record: it must not block (queue
/// the record, or drop it).
#[derive(Clone)]
pub struct Logger(Arc<dyn Fn(Record) + Send + Sync>);

impl Logger {
    /// A logger calling `sink` with each record.
    pub fn new(sink: impl Fn(Record) + Send + Sync + 'static) -> Self {
        Self(Arc::new(sink))
    }

    /// Hands `data` at `level` to the sink.
    pub fn log(&self, level: Level, data: impl Into<Value>) {
        (self.0)(Record {
            level,
            data: data.into(),
        });
    }
}

impl std::fmt::Debug for Logger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logger").finish_non_exhaustive()
    }
}

/// Logs `data` at `level` for the client of `ctx`'s connection: to the [`Logger`] its
/// protocol put in its extensions, or nowhere. Never waits.
pub fn record(ctx: &ActionContext, level: Level, data: impl Into<Value>) {
    if let Some(logger) = ctx.extensions().get::<Logger>() {
        logger.log(level, data);
    }
}
