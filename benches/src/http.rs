//! The pieces of the `bidi-http` benchmarks: the flows a [`bidi_http::Server`] serves, the raw
//! axum handlers they are measured against, and a client that reads Genkit's SSE records.
//!
//! | flow | init → input → chunks → output |
//! |---|---|
//! | `/bidi-flow/stream` | `()` → `{"n": n}` → `{"i": 0}` … `{"i": n-1}` → `n` |
//! | `/bidi-flow/echo` | `()` → any value, per input: the value back, then a turn end → inputs seen |
//! | `/bidi-flow/hold` | `()` → `null` (not taken) → `"open"`, then waits until cancelled → `()` |
//!
//! The raw router answers `POST /raw/stream` with the same records as `/bidi-flow/stream`
//! (axum's [`Sse`] over the chunks, one body frame per record, no bidi), `POST
//! /raw/stream-batched` with the same records gathered into body frames of 16 KiB (as
//! `bidi-http` writes them), and `GET /raw/echo` (WebSocket) each text message
//! `{"type":"send","input":v}` with `{"type":"chunk","chunk":v}` and `{"type":"turn_end"}`;
//! `GET /raw/echo-task` does the same with a writer task of its own, as `bidi-http` has.
//! `POST /raw/hold` answers `hold`'s one record and then keeps the stream open, with no task
//! but the connection's.

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::header::CONTENT_TYPE;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use futures_util::{SinkExt as _, StreamExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::net::TcpListener;

/// The input of `stream`: how many chunks to send.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
pub struct Count {
    /// The number of chunks.
    pub n: u64,
}

/// One chunk of `stream`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
pub struct Chunk {
    /// Its index, from 0.
    pub i: u64,
}

/// `stream`: `n` chunks `{"i": k}` for the one input `{"n": n}`, then `n`.
async fn stream(
    _: ActionContext,
    (): (),
    mut inbound: Inbound<Count>,
    out: Outbound<Chunk>,
) -> Result<u64, BoxError> {
    let Some(Count { n }) = inbound.recv().await else {
        return Ok(0);
    };
    for i in 0..n {
        out.send(Chunk { i }).await?;
    }
    Ok(n)
}

/// `echo`: each input back as one chunk, then a turn end; the output counts the inputs.
async fn echo(
    _: ActionContext,
    (): (),
    mut inbound: Inbound<Value>,
    out: Outbound<Value>,
) -> Result<u64, BoxError> {
    let mut turns = 0;
    while let Some(value) = inbound.recv().await {
        out.send(value).await?;
        out.end_turn().await?;
        turns += 1;
    }
    Ok(turns)
}

/// `hold`: one chunk, then nothing until the connection is cancelled.
async fn hold(
    ctx: ActionContext,
    (): (),
    _inbound: Inbound<()>,
    out: Outbound<String>,
) -> Result<(), BoxError> {
    out.send("open".to_owned()).await?;
    ctx.cancelled().await;
    Ok(())
}

/// The registry of the benchmarks: `stream`, `echo` and `hold`.
///
/// # Panics
///
/// Never: the keys are distinct.
#[must_use]
pub fn registry() -> Registry {
    let registry = Registry::new();
    registry
        .register(BidiFlow::new("stream", stream))
        .expect("a new key");
    registry
        .register(BidiFlow::new("echo", echo))
        .expect("a new key");
    registry
        .register(BidiFlow::new("hold", hold))
        .expect("a new key");
    registry
}

/// Serves [`registry`] with [`bidi_http::Server`] on a free port of 127.0.0.1, on the current
/// runtime, and returns its address.
///
/// # Panics
///
/// Panics if 127.0.0.1 cannot be bound.
pub async fn serve_bidi() -> SocketAddr {
    serve(bidi_http::Server::new(registry())).await
}

/// Serves `server` on a free port of 127.0.0.1, on the current runtime, and returns its
/// address.
///
/// # Panics
///
/// Panics if 127.0.0.1 cannot be bound.
pub async fn serve(server: bidi_http::Server) -> SocketAddr {
    let bound = server
        .addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .bind()
        .await
        .expect("bind 127.0.0.1");
    let addr = bound.local_addr().expect("local address");
    tokio::spawn(bound.serve());
    addr
}

/// The raw axum baseline: `POST /raw/stream`, `POST /raw/stream-batched`, `POST /raw/hold`,
/// `GET /raw/echo` and `GET /raw/echo-task`.
pub fn raw_router() -> Router {
    Router::new()
        .route("/raw/stream", post(raw_stream))
        .route("/raw/stream-batched", post(raw_stream_batched))
        .route("/raw/hold", post(raw_hold))
        .route("/raw/echo", get(raw_echo))
        .route("/raw/echo-task", get(raw_echo_task))
}

/// Serves [`raw_router`] with `axum::serve` on a free port of 127.0.0.1, on the current runtime,
/// with `TCP_NODELAY` on every accepted socket (without it, the second of two small WebSocket
/// frames waits for the peer's delayed ACK, about 40 ms).
///
/// # Panics
///
/// Panics if 127.0.0.1 cannot be bound.
pub async fn serve_raw() -> SocketAddr {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, raw_router()).await });
    addr
}

#[derive(Deserialize)]
struct RawRequest {
    data: Count,
}

#[derive(Serialize)]
struct Message1<T> {
    message: T,
}

#[derive(Serialize)]
struct Result1<T> {
    result: T,
}

/// `data: {"message":{"i":k}}` for each chunk, then `data: {"result":n}`, as axum SSE events.
async fn raw_stream(Json(RawRequest { data: Count { n } }): Json<RawRequest>) -> Response {
    let chunks = futures_util::stream::iter(0..n).map(|i| {
        Ok::<_, Infallible>(
            Event::default()
                .json_data(Message1 {
                    message: Chunk { i },
                })
                .unwrap_or_default(),
        )
    });
    let result = futures_util::stream::once(async move {
        Ok(Event::default()
            .json_data(Result1 { result: n })
            .unwrap_or_default())
    });
    Sse::new(chunks.chain(result)).into_response()
}

/// The same records gathered into body frames of about 16 KiB, as `bidi-http` writes them: what
/// the wire costs with no per-record frame.
async fn raw_stream_batched(Json(RawRequest { data: Count { n } }): Json<RawRequest>) -> Response {
    const BATCH: usize = 16 * 1024;
    let frames = futures_util::stream::unfold(Some(0), move |next| async move {
        let mut i = next?;
        let mut buf = Vec::with_capacity(BATCH + 64);
        while i < n && buf.len() < BATCH {
            buf.extend_from_slice(b"data: ");
            let _ = serde_json::to_writer(
                &mut buf,
                &Message1 {
                    message: Chunk { i },
                },
            );
            buf.extend_from_slice(b"\n\n");
            i += 1;
        }
        let next = if i < n {
            Some(i)
        } else {
            buf.extend_from_slice(b"data: ");
            let _ = serde_json::to_writer(&mut buf, &Result1 { result: n });
            buf.extend_from_slice(b"\n\n");
            None
        };
        Some((Ok::<_, Infallible>(Bytes::from(buf)), next))
    });
    (
        [(CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(frames),
    )
        .into_response()
}

/// `data: {"message":"open"}`, then nothing until the client goes away: `hold` without bidi.
async fn raw_hold() -> Response {
    let open = futures_util::stream::once(async {
        Ok::<_, Infallible>(
            Event::default()
                .json_data(Message1 { message: "open" })
                .unwrap_or_default(),
        )
    });
    Sse::new(open.chain(futures_util::stream::pending())).into_response()
}

#[derive(Deserialize)]
struct RawFrame {
    #[serde(default)]
    input: Value,
}

#[derive(Serialize)]
struct RawChunk<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    chunk: &'a Value,
}

async fn raw_echo(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(raw_echo_socket)
}

async fn raw_echo_task(upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(raw_echo_socket_task)
}

/// The two frames of one input.
fn echo_frames(input: &Value) -> Option<[Message; 2]> {
    let chunk = serde_json::to_string(&RawChunk {
        kind: "chunk",
        chunk: input,
    })
    .ok()?;
    Some([
        Message::Text(chunk.into()),
        Message::Text(r#"{"type":"turn_end"}"#.into()),
    ])
}

/// As [`raw_echo_socket`], but a writer task of its own writes the frames, handed the inputs
/// through a channel of one: the task layout of `bidi-http` (reader, writer) less the action's
/// task.
async fn raw_echo_socket_task(socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (inputs, mut pending) = tokio::sync::mpsc::channel::<Value>(1);
    let writer = tokio::spawn(async move {
        while let Some(input) = pending.recv().await {
            let Some(frames) = echo_frames(&input) else {
                continue;
            };
            for frame in frames {
                if sink.send(frame).await.is_err() {
                    return;
                }
            }
        }
    });
    while let Some(Ok(message)) = stream.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let Ok(frame) = serde_json::from_str::<RawFrame>(text.as_str()) else {
            continue;
        };
        if inputs.send(frame.input).await.is_err() {
            break;
        }
    }
    drop(inputs);
    let _ = writer.await;
}

/// Each text message's `input` back as a `chunk` frame, then a `turn_end` frame.
async fn raw_echo_socket(mut socket: WebSocket) {
    while let Some(Ok(message)) = socket.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let Ok(frame) = serde_json::from_str::<RawFrame>(text.as_str()) else {
            continue;
        };
        let Some(frames) = echo_frames(&frame.input) else {
            continue;
        };
        for frame in frames {
            if socket.send(frame).await.is_err() {
                return;
            }
        }
    }
}

/// How many bytes of the body [`Records`] keeps.
const KEEP: usize = 64;

/// Counts Genkit SSE records (`…\n\n`) in a body read in pieces, and keeps its last bytes.
#[derive(Debug, Default)]
pub struct Records {
    /// Whole records seen.
    pub count: u64,
    last_newline: bool,
    tail: Vec<u8>,
}

impl Records {
    /// Takes the next piece of the body.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let newline = byte == b'\n';
            if newline && self.last_newline {
                self.count += 1;
                self.last_newline = false;
            } else {
                self.last_newline = newline;
            }
        }
        self.tail
            .extend_from_slice(&bytes[bytes.len().saturating_sub(KEEP)..]);
        let excess = self.tail.len().saturating_sub(KEEP);
        self.tail.drain(..excess);
    }

    /// Whether the body ended with `record` (the last one, `\n\n` included).
    #[must_use]
    pub fn ends_with(&self, record: &[u8]) -> bool {
        self.tail.ends_with(record)
    }
}

/// POSTs `{"data":{"n":n}}` to `url` (`?stream=true` added) and reads the SSE body to its end;
/// returns the number of records.
///
/// # Panics
///
/// Panics unless the answer is 200 with `n` chunk records and the result record `n`.
pub async fn read_stream(client: &reqwest::Client, url: &str, n: u64) -> u64 {
    let mut response = client
        .post(format!("{url}?stream=true"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"data":{{"n":{n}}}}}"#))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200, "{url}");
    let mut records = Records::default();
    while let Some(bytes) = response.chunk().await.expect("body") {
        records.feed(&bytes);
    }
    assert_eq!(records.count, n + 1, "{url}: records");
    let last = format!("data: {{\"result\":{n}}}\n\n");
    assert!(
        records.ends_with(last.as_bytes()),
        "{url}: the result record"
    );
    records.count
}

/// This process's resident set, in bytes (`VmRSS` of `/proc/self/status`; 0 where there is
/// none).
#[must_use]
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}
