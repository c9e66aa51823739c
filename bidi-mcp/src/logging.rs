//! MCP's logging: the log records of the flows and agents a session calls, as
//! `notifications/message`, at or above the level its client set with `logging/setLevel`
//! (`info` until it sets one).
//!
//! Each call's connection carries a [`Logger`] (`bidi_flow::log`): a record at or above the
//! session's level is queued, with the tool's name as its `logger`, for one task per session
//! that notifies the client in order. The task starts with the session's first record, so a
//! session that logs nothing costs nothing. The queue holds [`QUEUE`] records: a record that
//! finds it full (a client that does not read) is dropped and counted, and the count goes to
//! the client as a `warning` before the next record, as `bidi_flow::log` does for stderr.
//!
//! MCP sends notifications that answer no request on the session's own stream (an HTTP
//! client's `GET`), where a client that opened none hears nothing.
//!
//! MCP's next protocol version deprecates logging (SEP-2577, as rmcp marks it); the 2025
//! versions every client speaks today have it.
#![expect(deprecated, reason = "MCP 2025-11-25's logging, which clients speak")]

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bidi_flow::log::{Level, Logger, Record};
use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::Peer;
use serde_json::json;
use tokio::sync::mpsc;

/// How many records wait for the client at most, per session.
const QUEUE: usize = 256;

/// A session's logging: its level, and its queue once it has logged.
pub(super) struct Logging {
    /// The least severe level sent, as its [`rank`]; `info` until the client sets one.
    level: AtomicU8,
    queue: OnceLock<mpsc::Sender<LoggingMessageNotificationParam>>,
    /// The records dropped since the last one queued.
    dropped: AtomicU64,
}

impl Default for Logging {
    fn default() -> Self {
        Self {
            level: AtomicU8::new(rank(LoggingLevel::Info)),
            queue: OnceLock::new(),
            dropped: AtomicU64::new(0),
        }
    }
}

impl Logging {
    /// Sets the least severe level sent (`logging/setLevel`).
    pub(super) fn set_level(&self, level: LoggingLevel) {
        self.level.store(rank(level), Ordering::Relaxed);
    }

    /// The logger of a call of the tool `tool`, whose records go to `peer`.
    pub(super) fn logger(self: &Arc<Self>, tool: &str, peer: &Peer<RoleServer>) -> Logger {
        let (logging, peer) = (Arc::clone(self), peer.clone());
        let tool: Arc<str> = Arc::from(tool);
        Logger::new(move |record| logging.send(&tool, &peer, record))
    }

    /// Queues `record` of the tool `tool` if it is at or above the level, starting the task
    /// that notifies `peer` with the first one.
    fn send(&self, tool: &str, peer: &Peer<RoleServer>, record: Record) {
        let level = level(record.level);
        if rank(level) < self.level.load(Ordering::Relaxed) {
            return;
        }
        let queue = self.queue.get_or_init(|| start(peer.clone()));
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let note = format!("{dropped} log records dropped: the client did not read them");
            let note = LoggingMessageNotificationParam::new(LoggingLevel::Warning, json!(note));
            if queue.try_send(note).is_err() {
                self.dropped.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        let param = LoggingMessageNotificationParam::new(level, record.data).with_logger(tool);
        if queue.try_send(param).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The queue of a session's records, and the task that notifies `peer` of them in order; it
/// ends when the session's handler and its calls' loggers are gone.
fn start(peer: Peer<RoleServer>) -> mpsc::Sender<LoggingMessageNotificationParam> {
    let (queue, mut records) = mpsc::channel(QUEUE);
    drop(tokio::spawn(async move {
        while let Some(record) = records.recv().await {
            // A client gone is noticed by its session's end, which drops the queue.
            let _ = peer.notify_logging_message(record).await;
        }
    }));
    queue
}

/// MCP's name of `level`.
fn level(level: Level) -> LoggingLevel {
    match level {
        Level::Debug => LoggingLevel::Debug,
        Level::Info => LoggingLevel::Info,
        Level::Notice => LoggingLevel::Notice,
        Level::Warning => LoggingLevel::Warning,
        Level::Error => LoggingLevel::Error,
        Level::Critical => LoggingLevel::Critical,
        Level::Alert => LoggingLevel::Alert,
        Level::Emergency => LoggingLevel::Emergency,
    }
}

/// How severe `level` is: `debug` 0 to `emergency` 7.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
