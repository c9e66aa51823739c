//! Serves a [`Registry`] over NDJSON on stdin and stdout: one JSON object per line, several
//! connections multiplexed by an id the peer picks. The template every protocol crate follows
//! (see `docs/adding-a-protocol-crate.md`). The frames are the library's: `bidi_flow::frame`,
//! on its multiplexed wire (`decode_addressed`, `Frame`, `Code`).
//!
//! ```sh
//! cargo run -p examples --bin stdio
//! printf '%s\n' \
//!   '{"type":"connect","id":"a","key":"/bidi-flow/echo","init":"> "}' \
//!   '{"type":"send","id":"a","input":"hello there"}' \
//!   '{"type":"close","id":"a"}' | cargo run -p examples --bin stdio
//! ```
//!
//! It serves `/bidi-flow/echo` (init: a prefix string; input: a line; one chunk per word),
//! `/agent/chat` (init: `{}` or `{"sessionId": ".."}`; input: a line; chunks: words of the
//! answer) and `/bidi-flow/tick` (init: `{"everyMs": 100}`; a chunk per tick until cancelled).
//!
//! # Frames from the peer (stdin)
//!
//! | frame | fields | what it does |
//! |---|---|---|
//! | `{"type":"connect","id":"a","key":"/bidi-flow/echo","init":"> "}` | `id` (the peer's name for the connection, unique among open ones), `key`, `init` (default `null`) | opens a connection |
//! | `{"type":"send","id":"a","input":"hello"}` | `input` (default `null`) | sends one input |
//! | `{"type":"close","id":"a"}` | | closes the input: the action finishes and returns its output |
//! | `{"type":"cancel","id":"a","reason":"stop"}` | `reason` (optional) | cancels the connection |
//!
//! # Frames to the peer (stdout)
//!
//! | frame | what it says |
//! |---|---|
//! | `{"type":"chunk","id":"a","chunk":"> hello"}` | one chunk of the current turn |
//! | `{"type":"turn_end","id":"a"}` | the action ended the turn |
//! | `{"type":"output","id":"a","output":1}` | the connection's output: its last frame; the id is free again |
//! | `{"type":"error","id":"a","code":"invalid_input","message":"..","path":"/text"}` | a refused frame: everything else goes on. With code `connection_failed` or `cancelled`, the connection's last frame |
//!
//! Error codes: `frame_too_large`, `malformed_frame` (not a JSON object, or a field missing or
//! of the wrong type), `unknown_frame_type`, `unknown_connection`, `duplicate_connection`,
//! `not_found` (with a `suggestion` when a registered key resembles the one asked for),
//! `invalid_init` and `invalid_input` (with the JSON Pointer `path` of the problem),
//! `send_failed` (the input is closed or the connection over), `too_many_connections` (see
//! below), `cancelled` (the connection was cancelled: by the peer's `cancel`, its `message` the
//! reason) and `connection_failed` (the action failed or panicked, or the peer went away). An error
//! frame has an `id` when the refused frame named one.
//!
//! # Rules
//!
//! - A line is at most `--max-frame-bytes` (1 MiB) long; a longer one is answered with
//!   `frame_too_large` without being buffered, and the stream goes on. Blank lines are skipped.
//! - Each connection takes up to 8 inputs ahead of its action. A peer that sends more waits: the
//!   server reads nothing more until the action takes one (backpressure, never an unbounded
//!   buffer). Likewise a peer that does not read stdout slows every action down.
//! - At most `--max-connections` (1024) connections are open or writing their last frame at
//!   once; a `connect` beyond is refused with `too_many_connections`. So a peer that does not
//!   read stdout holds at most that many connections' frames: once the refusal cannot be
//!   written either, the server reads nothing more until the peer reads.
//! - Logs go to stderr, never to stdout; the ids, keys and text a peer sent are escaped in them
//!   (`\n`, `\u{1b}`), so they cannot forge log lines.
//! - Logging never waits for stderr: lines queue (up to 1,024) for a thread that writes them,
//!   so a parent that never reads the server's stderr does not stall it once the pipe is full.
//!   Lines that find the queue full are dropped and counted, and `log: N lines dropped: stderr was not read`
//!   is written once stderr is read again.
//! - End of stdin closes every input; the server writes the outputs and exits. Connections still
//!   running after `--drain-ms` are cancelled with a cause saying the peer went away. If stdout
//!   closes, every connection is cancelled the same way at once.

use std::collections::HashMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bidi_agent::Agent;
use bidi_core::{ActionContext, BoxError, ConnectOptions, Inbound, Outbound, PeerGone};
use bidi_flow::{BidiFlow, JsonError, JsonRecvHalf, JsonSendHalf, Registry};
use clap::Parser;
use futures_util::StreamExt as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use bidi_flow::Code;
use bidi_flow::frame::{self, Addressed, Frame, FrameError, Op};
use bidi_flow::lines::{Line, read_line};
use bidi_flow::text::cap;
use examples::{chat, echo};

/// Serves the example flows over NDJSON on stdin and stdout.
#[derive(Debug, Parser)]
struct Args {
    /// The longest frame (line) accepted, in bytes.
    #[arg(long, default_value_t = frame::MAX_FRAME_BYTES)]
    max_frame_bytes: usize,
    /// After end of input, how long connections may run on before they are cancelled.
    #[arg(long, default_value_t = 30_000)]
    drain_ms: u64,
    /// How many connections may be open (or writing their last frame) at once; a `connect`
    /// beyond is refused with `too_many_connections`.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
}

/// How many inputs a connection takes ahead of its action before the reader waits.
const INPUT_WINDOW: usize = 8;

/// Logs a line to stderr without ever waiting for it (see `bidi_flow::log`).
macro_rules! log {
    ($($arg:tt)*) => { bidi_flow::log::line(format!("[stdio] {}", format_args!($($arg)*))) };
}

/// `text` for a log line: its control characters (line breaks, terminal escapes) escaped, so
/// that what a peer sent cannot forge log lines. Ids are logged with `{:?}`, quoted and escaped.
fn escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_debug());
        } else {
            escaped.push(c);
        }
    }
    escaped
}

// ---------------------------------------------------------------------------------------------
// The flows served.

/// How often the clock ticks.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Every {
    /// Milliseconds between ticks.
    every_ms: u64,
}

/// A chunk per tick until the connection is cancelled; ignores its input closing.
async fn tick(
    ctx: ActionContext,
    every: Every,
    _inbound: Inbound<()>,
    out: Outbound<u64>,
) -> Result<u64, BoxError> {
    let mut clock = tokio::time::interval(Duration::from_millis(every.every_ms.max(1)));
    let mut ticks = 0;
    loop {
        tokio::select! {
            biased;
            cause = ctx.cancelled() => {
                log!(
                    "tick {}: cancelled after {ticks} ticks: {}",
                    ctx.connection_id(),
                    escaped(&cause.to_string())
                );
                return Ok(ticks);
            }
            _ = clock.tick() => match out.send(ticks).await {
                Ok(()) => ticks += 1,
                // Cancelled while sending: the next round says so.
                Err(_) if ctx.is_cancelled() => {}
                Err(error) => return Err(error.into()),
            },
        }
    }
}

fn registry() -> Result<Registry, BoxError> {
    let registry = Registry::new();
    registry.register(BidiFlow::new("echo", echo).with_description("Echoes each word"))?;
    registry.register(
        Agent::builder("chat")
            .description("Remembers what you said")
            .build(chat)
            .into_flow(),
    )?;
    registry.register(BidiFlow::new("tick", tick).with_description("A clock"))?;
    Ok(registry)
}

// ---------------------------------------------------------------------------------------------
// The server: one reader task (this one), one writer task per connection.

/// The peer went away (stdout closed), for the server's last log line. The connections it
/// cancels see [`PeerGone::Disconnected`] as the cause, as with every transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gone;

impl fmt::Display for Gone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the peer went away: stdout is closed")
    }
}

impl std::error::Error for Gone {}

/// What the reader and the writers share: the peer's output and the open connections.
struct Peer<W> {
    output: tokio::sync::Mutex<W>,
    /// Open connections by the peer's id: the input half (the writer task has the output half).
    connections: Mutex<HashMap<String, JsonSendHalf>>,
    gone: AtomicBool,
    gone_notify: Notify,
}

impl<W: AsyncWrite + Unpin + Send + 'static> Peer<W> {
    fn new(output: W) -> Self {
        Self {
            output: tokio::sync::Mutex::new(output),
            connections: Mutex::new(HashMap::new()),
            gone: AtomicBool::new(false),
            gone_notify: Notify::new(),
        }
    }

    fn connections(&self) -> std::sync::MutexGuard<'_, HashMap<String, JsonSendHalf>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes one encoded frame. Waits while the peer does not read: that is the backpressure.
    /// If stdout is closed, the peer went away: every connection is cancelled.
    async fn write(&self, line: &[u8]) -> Result<(), Gone> {
        if self.is_gone() {
            return Err(Gone);
        }
        let mut output = self.output.lock().await;
        let written = async {
            output.write_all(line).await?;
            output.flush().await
        };
        if let Err(error) = written.await {
            drop(output);
            log!("cannot write to stdout ({error}): the peer went away");
            self.went_away();
            return Err(Gone);
        }
        Ok(())
    }

    /// Encodes and writes one frame (for the reader's answers; writers reuse their buffer).
    async fn send(&self, frame: &Frame<'_>) -> Result<(), Gone> {
        let mut line = Vec::new();
        encode(frame, &mut line);
        self.write(&line).await
    }

    /// Answers a refused frame with an error frame.
    async fn refuse(&self, frame: Frame<'_>) -> Result<(), Gone> {
        if let Frame::Error {
            id, code, message, ..
        } = &frame
        {
            // What the peer chose (its ids, the text quoted in messages) is escaped: it cannot
            // forge log lines.
            log!(
                "refused a frame (id {:?}): {code}: {}",
                id.unwrap_or("-"),
                escaped(message)
            );
        }
        self.send(&frame).await
    }

    fn went_away(&self) {
        if !self.gone.swap(true, Ordering::SeqCst) {
            self.cancel_all();
            self.gone_notify.notify_waiters();
        }
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Waits until stdout is closed.
    async fn gone(&self) {
        let notified = self.gone_notify.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if !self.is_gone() {
            notified.await;
        }
    }

    fn cancel_all(&self) {
        for input in self.connections().values() {
            input.cancel_with(PeerGone::Disconnected);
        }
    }

    fn close_all(&self) {
        for input in self.connections().values() {
            input.close();
        }
    }

    /// The input half of connection `id`, if it is open.
    fn connection(&self, id: &str) -> Option<JsonSendHalf> {
        self.connections().get(id).cloned()
    }

    /// Frees `id`, if it still names the connection of `output`.
    fn forget(&self, id: &str, output: &JsonRecvHalf) {
        let mut connections = self.connections();
        if connections
            .get(id)
            .is_some_and(|input| input.id() == output.id())
        {
            connections.remove(id);
        }
    }
}

/// Handles one decoded frame. Errors only when the peer went away.
async fn handle<W: AsyncWrite + Unpin + Send + 'static>(
    registry: &Registry,
    peer: &Arc<Peer<W>>,
    (writers, max_connections): (&mut JoinSet<()>, usize),
    Addressed { id, op }: Addressed,
) -> Result<(), Gone> {
    match op {
        Op::Open { key, init } => {
            if peer.connection(&id).is_some() {
                let message = format!("connection `{}` is open already", cap(&id));
                return peer
                    .refuse(Frame::error(Some(&id), Code::DuplicateConnection, &message))
                    .await;
            }
            // Each connection has a writer until its last frame is written: a peer that does
            // not read stdout cannot open connections without bound.
            while writers.try_join_next().is_some() {}
            if writers.len() >= max_connections {
                let message = format!(
                    "{max_connections} connections are open or writing their last frame: \
                     close one, or read their frames, first"
                );
                return peer
                    .refuse(Frame::error(Some(&id), Code::TooManyConnections, &message))
                    .await;
            }
            let options = ConnectOptions::new().input_buffer(INPUT_WINDOW);
            match registry.connect_json_with(&key, init, options) {
                Err(error) => refuse(peer, &id, &error).await,
                Ok(conn) => {
                    log!("{id:?}: connected to {key:?} (connection {})", conn.id());
                    let (input, output) = conn.into_split();
                    peer.connections().insert(id.clone(), input);
                    writers.spawn(write_connection(Arc::clone(peer), id, output));
                    Ok(())
                }
            }
        }
        Op::Send { input } => {
            let Some(conn) = peer.connection(&id) else {
                return unknown(peer, &id).await;
            };
            // Waits while the connection's input window is full.
            match conn.send(input).await {
                Ok(()) => Ok(()),
                Err(error) => refuse(peer, &id, &error).await,
            }
        }
        Op::Close => match peer.connection(&id) {
            Some(conn) => {
                conn.close();
                Ok(())
            }
            None => unknown(peer, &id).await,
        },
        Op::Cancel { reason } => match peer.connection(&id) {
            Some(conn) => {
                conn.cancel_with(reason.unwrap_or_else(|| "cancelled by the peer".to_owned()));
                Ok(())
            }
            None => unknown(peer, &id).await,
        },
    }
}

async fn unknown<W: AsyncWrite + Unpin + Send + 'static>(
    peer: &Peer<W>,
    id: &str,
) -> Result<(), Gone> {
    let message = format!("no open connection `{}`", cap(id));
    peer.refuse(Frame::error(Some(id), Code::UnknownConnection, &message))
        .await
}

/// Answers a refused `connect` or `send`.
async fn refuse<W: AsyncWrite + Unpin + Send + 'static>(
    peer: &Peer<W>,
    id: &str,
    error: &JsonError,
) -> Result<(), Gone> {
    let message = error.to_string();
    peer.refuse(Frame::refusal(Some(id), error, &message)).await
}

/// Writes `frame` into `line` as one line of JSON, replacing what was there (the buffer is
/// reused from frame to frame).
fn encode(frame: &Frame<'_>, line: &mut Vec<u8>) {
    line.clear();
    frame.encode(line);
    line.push(b'\n');
}

/// The writer task of one connection: its chunks, turn ends and output, as frames.
async fn write_connection<W: AsyncWrite + Unpin + Send + 'static>(
    peer: Arc<Peer<W>>,
    id: String,
    mut output: JsonRecvHalf,
) {
    let mut line = Vec::new();
    'turns: loop {
        let mut turn = output.responses();
        while let Some(item) = turn.next().await {
            // An error is the connection's end: `output()` below returns it.
            let Ok(chunk) = item else { break 'turns };
            let frame = Frame::Chunk {
                id: Some(&id),
                chunk: &chunk,
            };
            encode(&frame, &mut line);
            if peer.write(&line).await.is_err() {
                break 'turns;
            }
        }
        // A turn's end, not the connection's: the action returned mid-turn otherwise.
        if !turn.turn_ended() {
            break;
        }
        drop(turn);
        encode(&Frame::TurnEnd { id: Some(&id) }, &mut line);
        if peer.write(&line).await.is_err() {
            break;
        }
    }
    // The id is free before the peer hears the connection is over, so it can reuse it at once.
    peer.forget(&id, &output);
    let (frame, outcome) = match output.output().await {
        Ok(value) => {
            let frame = Frame::Output {
                id: Some(&id),
                output: &value,
            };
            encode(&frame, &mut line);
            (line, "output".to_owned())
        }
        Err(error) => {
            let message = error.to_string();
            log!("{id:?}: failed: {}", escaped(&message));
            // `cancelled` for a cancel, `connection_failed` for the other ends.
            let frame = Frame::refusal(Some(&id), &error, &message);
            encode(&frame, &mut line);
            (line, "error".to_owned())
        }
    };
    if peer.write(&frame).await.is_ok() {
        log!("{id:?}: ended ({outcome} written)");
    }
}

/// Serves `registry` to the peer at the other end of `input` and `output` until the input ends
/// (then drains) or the output closes.
async fn serve<R, W>(registry: Registry, input: R, output: W, args: Args) -> Result<(), Gone>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let peer = Arc::new(Peer::new(output));
    let mut writers = JoinSet::new();
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    log!(
        "serving {} over NDJSON on stdin/stdout",
        registry
            .actions()
            .iter()
            .map(|action| action.key.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let served = loop {
        let read = tokio::select! {
            read = read_line(&mut input, &mut line, args.max_frame_bytes) => read,
            () = peer.gone() => break Err(Gone),
        };
        let handled = match read {
            Ok(None) => break Ok(()),
            Err(error) => {
                log!("cannot read stdin ({error}): treating it as its end");
                break Ok(());
            }
            Ok(Some(Line::TooLarge(len))) => {
                let error = FrameError::TooLarge {
                    len,
                    limit: args.max_frame_bytes,
                };
                let message = error.to_string();
                peer.refuse(error.frame(&message)).await
            }
            Ok(Some(Line::Frame)) if line.trim_ascii().is_empty() => Ok(()),
            Ok(Some(Line::Frame)) => match frame::decode_addressed(&line) {
                Ok(frame) => {
                    let writers = (&mut writers, args.max_connections.max(1));
                    handle(&registry, &peer, writers, frame).await
                }
                Err(error) => {
                    let message = error.to_string();
                    peer.refuse(error.frame(&message)).await
                }
            },
        };
        if let Err(gone) = handled {
            break Err(gone);
        }
        // Reap finished writers so the set does not grow with every connection.
        while writers.try_join_next().is_some() {}
    };
    if served.is_ok() {
        // The peer sends nothing more: close every input, let the actions finish and their
        // outputs be written, then cancel whatever is still running.
        peer.close_all();
        let drain = Duration::from_millis(args.drain_ms);
        let drained = tokio::time::timeout(drain, async {
            while writers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            log!("input ended {drain:?} ago: cancelling what still runs");
            peer.cancel_all();
        }
    }
    // Every writer ends: its connection ended, or was cancelled and has its grace period.
    while writers.join_next().await.is_some() {}
    served
}

fn main() -> ExitCode {
    let code = run();
    // The last lines (why it failed, say), unless nobody reads stderr.
    bidi_flow::log::flush(Duration::from_secs(1));
    code
}

fn run() -> ExitCode {
    let args = Args::parse();
    let registry = match registry() {
        Ok(registry) => registry,
        Err(error) => {
            log!("cannot build the registry: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            log!("cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Served from a task: hand-offs between runtime workers are cheap.
    let served = runtime.block_on(runtime.spawn(serve(
        registry,
        tokio::io::stdin(),
        tokio::io::stdout(),
        args,
    )));
    // A read of stdin may still be blocked in a runtime thread: do not wait for it.
    runtime.shutdown_background();
    match served {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(gone)) => {
            log!("{gone}: every connection was cancelled");
            ExitCode::FAILURE
        }
        Err(error) => {
            log!("the server task failed: {error}");
            ExitCode::FAILURE
        }
    }
}
