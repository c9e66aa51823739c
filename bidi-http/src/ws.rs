//! Full duplex over WebSocket: one socket is one connection. This task reads the socket and
//! drives the connection's input; a writer task writes its chunks, turn ends and output.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bidi_flow::{JsonError, JsonRecvHalf, JsonSendHalf};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::codec::{self, Code, Failure, Frame, Op};
use crate::extract::Segments;
use crate::idle::{Activity, Idle};
use crate::{Disconnected, INPUT_WINDOW, Identity, IdleTimeout, Shared};

/// `GET /{type}/{name}` with an upgrade.
pub(crate) async fn upgrade(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return Failure::new(
            StatusCode::UPGRADE_REQUIRED,
            Code::MethodNotAllowed,
            "GET on an action opens a WebSocket (send an upgrade); POST runs it on one input",
        )
        .into_response();
    };
    let key = format!("/{kind}/{name}");
    if let Err(missing) = shared.registry.action(&key) {
        return Failure::not_found(&missing).into_response();
    }
    // Messages up to the limit are read and refused if over it; past twice the limit the
    // socket closes with 1009 rather than buffer them.
    let hard = shared
        .limits
        .max_message_bytes
        .saturating_mul(2)
        .saturating_add(64 * 1024);
    let identity = identity.map(|Extension(identity)| identity);
    upgrade
        .max_message_size(hard)
        .max_frame_size(hard)
        .on_upgrade(move |socket| serve(shared, key, identity, socket))
}

/// The writing side of a socket, shared by the reader (error frames) and the writer.
struct Peer {
    sink: Mutex<SplitSink<WebSocket, Message>>,
    activity: Activity,
}

impl Peer {
    async fn send(&self, frame: &Frame<'_>) -> Result<(), axum::Error> {
        let text = frame.encode();
        let result = self
            .sink
            .lock()
            .await
            .send(Message::Text(text.into()))
            .await;
        self.activity.touch();
        result
    }

    async fn refuse(&self, failure: &Failure) -> Result<(), axum::Error> {
        self.send(&Frame::error(failure)).await
    }

    async fn close(&self, code: u16, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let mut sink = self.sink.lock().await;
        let _ = sink.send(Message::Close(Some(frame))).await;
        let _ = sink.close().await;
    }
}

/// How a socket's reading ends.
enum End {
    /// The socket closed or failed.
    Gone,
    /// The client broke the protocol: the close code and reason to answer with (1009 for a
    /// message over the hard limit, 1007 for text that is not UTF-8, 1002 for the rest).
    Broken(u16, &'static str),
    /// Nothing moved for the idle timeout.
    Idle,
    /// The writer wrote the last frame and closed the socket.
    Written,
}

/// What the reader read.
enum Read {
    Op(Op),
    Refused(Failure),
    End(End),
}

/// How many frames the reader reads ahead of an input the action has not taken, looking for a
/// `cancel`.
const READ_AHEAD: usize = 16;

/// The reading side of a socket: frames in order, the ones read ahead held back.
struct Reader {
    stream: SplitStream<WebSocket>,
    held: VecDeque<Message>,
    /// The bytes of the frames held back.
    held_bytes: usize,
    idle: Idle,
    limit: usize,
}

impl Reader {
    /// The next frame decoded, a frame refused, or the end.
    async fn next(&mut self, writer: &mut Option<JoinHandle<()>>) -> Read {
        loop {
            let message = match self.held.pop_front() {
                Some(message) => {
                    self.held_bytes -= size(&message);
                    message
                }
                None => {
                    let written = async {
                        match writer.as_mut() {
                            Some(writer) => {
                                let _ = writer.await;
                            }
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        message = self.stream.next() => match message_or_end(message) {
                            Ok(message) => message,
                            Err(end) => return Read::End(end),
                        },
                        () = self.idle.expired() => return Read::End(End::Idle),
                        () = written => {
                            *writer = None;
                            return Read::End(End::Written);
                        }
                    }
                }
            };
            if let Some(read) = self.decode(message) {
                return read;
            }
        }
    }

    /// A message as an operation or a refusal; `None` for a ping or a pong.
    fn decode(&self, message: Message) -> Option<Read> {
        let text = match message {
            Message::Text(text) => text,
            Message::Binary(_) => {
                return Some(Read::Refused(Failure::malformed(
                    "frames are JSON text, not binary",
                )));
            }
            // Pings are answered by the socket itself.
            _ => return None,
        };
        self.idle.touch();
        if text.len() > self.limit {
            return Some(Read::Refused(Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::FrameTooLarge,
                format!(
                    "a {} byte message; the limit is {} bytes",
                    text.len(),
                    self.limit
                ),
            )));
        }
        Some(match codec::decode(text.as_str()) {
            Ok(op) => Read::Op(op),
            Err(failure) => Read::Refused(failure),
        })
    }

    /// Sends `value`, reading ahead meanwhile: a `cancel` among the frames that follow cancels
    /// at once, even while the action does not take the input; the others wait their turn.
    async fn send(
        &mut self,
        input: &JsonSendHalf,
        value: Value,
    ) -> (Result<(), JsonError>, Option<End>) {
        let mut send = pin!(input.send(value));
        let mut end = None;
        loop {
            tokio::select! {
                biased;
                result = &mut send => return (result, end),
                message = self.stream.next(),
                    if self.held.len() < READ_AHEAD && self.held_bytes < self.limit && end.is_none() =>
                {
                    match message_or_end(message) {
                        Ok(Message::Text(text))
                            if text.len() <= self.limit
                                && let Ok(Op::Cancel(reason)) = codec::decode(text.as_str()) =>
                        {
                            self.idle.touch();
                            input.cancel_with(cancel_cause(reason));
                        }
                        Ok(message) => {
                            self.held_bytes += size(&message);
                            self.held.push_back(message);
                        }
                        Err(gone) => {
                            input.cancel_with(Disconnected);
                            end = Some(gone);
                        }
                    }
                }
                () = self.idle.expired(), if end.is_none() => {
                    input.cancel_with(IdleTimeout(self.idle.timeout()));
                    end = Some(End::Idle);
                }
            }
        }
    }
}

fn message_or_end(message: Option<Result<Message, axum::Error>>) -> Result<Message, End> {
    match message {
        Some(Ok(Message::Close(_))) | None => Err(End::Gone),
        Some(Ok(message)) => Ok(message),
        Some(Err(error)) => Err(broken(&error.to_string())),
    }
}

/// The bytes a message holds.
fn size(message: &Message) -> usize {
    match message {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) | Message::Ping(bytes) | Message::Pong(bytes) => bytes.len(),
        Message::Close(_) => 0,
    }
}

/// How a socket that failed with `error` (the WebSocket library's message) ended: the
/// client's protocol violations are answered with their close code, anything else (a reset,
/// a closed connection) means the client went away.
fn broken(error: &str) -> End {
    // A client that drops its connection without a close frame is gone, not broken (the
    // library files that under protocol errors).
    let gone = [
        "closing handshake",
        "Connection reset",
        "Broken pipe",
        "closed",
    ];
    if gone.iter().any(|sign| error.contains(sign)) {
        End::Gone
    } else if error.contains("Space limit exceeded") {
        End::Broken(close_code::SIZE, "message too big")
    } else if error.contains("UTF-8") || error.contains("utf-8") || error.contains("Utf8") {
        End::Broken(close_code::INVALID, "text that is not UTF-8")
    } else if error.contains("protocol error") || error.contains("Protocol") {
        End::Broken(close_code::PROTOCOL, "a WebSocket protocol violation")
    } else {
        End::Gone
    }
}

/// The cause of a client's `cancel`: its reason.
fn cancel_cause(reason: Option<String>) -> String {
    reason.unwrap_or_else(|| "cancelled by the client".to_owned())
}

async fn serve(shared: Arc<Shared>, key: String, identity: Option<Identity>, socket: WebSocket) {
    let (sink, stream) = socket.split();
    let activity = Activity::new();
    let peer = Arc::new(Peer {
        sink: Mutex::new(sink),
        activity: activity.clone(),
    });
    let mut reader = Reader {
        stream,
        held: VecDeque::new(),
        held_bytes: 0,
        idle: Idle::new(activity, shared.limits.idle_timeout),
        limit: shared.limits.max_message_bytes,
    };
    let mut input: Option<JsonSendHalf> = None;
    let mut writer: Option<JoinHandle<()>> = None;
    let end = loop {
        let op = match reader.next(&mut writer).await {
            Read::Op(op) => op,
            Read::Refused(failure) => {
                let _ = peer.refuse(&failure).await;
                continue;
            }
            Read::End(end) => break end,
        };
        let refusal = match (op, &input) {
            (Op::Init(init), None) => {
                let options = Shared::options(identity.as_ref()).input_buffer(INPUT_WINDOW);
                match shared.registry.connect_json_with(&key, init, options) {
                    Ok(conn) => {
                        let (half, output) = conn.into_split();
                        input = Some(half);
                        writer = Some(tokio::spawn(write(output, Arc::clone(&peer))));
                        None
                    }
                    Err(error) => Some(Failure::from_json(&error)),
                }
            }
            (Op::Init(_), Some(_)) => Some(Failure::new(
                StatusCode::CONFLICT,
                Code::DuplicateConnection,
                "the socket's connection is open already: one socket, one connection",
            )),
            (_, None) => Some(Failure::new(
                StatusCode::CONFLICT,
                Code::UnknownConnection,
                "no connection yet: the first frame is `init`",
            )),
            (Op::Send(value), Some(half)) => {
                let (result, end) = reader.send(half, value).await;
                let refusal = match result {
                    Ok(()) => None,
                    Err(error @ JsonError::InvalidInput { .. }) => Some(Failure::from_json(&error)),
                    Err(error) => Some(Failure::new(
                        StatusCode::CONFLICT,
                        Code::SendFailed,
                        error.to_string(),
                    )),
                };
                if let Some(end) = end {
                    break end;
                }
                refusal
            }
            (Op::Close, Some(half)) => {
                half.close();
                None
            }
            (Op::Cancel(reason), Some(half)) => {
                half.cancel_with(cancel_cause(reason));
                None
            }
        };
        if let Some(failure) = refusal {
            let _ = peer.refuse(&failure).await;
        }
    };
    match (end, &input) {
        (End::Idle, Some(half)) => half.cancel_with(IdleTimeout(reader.idle.timeout())),
        (End::Idle, None) => {
            let failure = Failure::new(
                StatusCode::GATEWAY_TIMEOUT,
                Code::IdleTimeout,
                format!("no `init` within {:?}", reader.idle.timeout()),
            );
            let _ = peer.refuse(&failure).await;
            peer.close(close_code::NORMAL, "idle").await;
        }
        (End::Gone, half) => {
            if let Some(half) = half
                && !half.is_finished()
            {
                half.cancel_with(Disconnected);
            }
        }
        (End::Broken(code, reason), half) => {
            if let Some(half) = half
                && !half.is_finished()
            {
                half.cancel_with(format!("the client sent {reason}"));
            }
            peer.close(code, reason).await;
        }
        (End::Written, _) => {}
    }
    drop(input);
    if let Some(mut writer) = writer {
        // A writer blocked on a client that stopped reading would wait for good: it gets the
        // idle timeout to write its last frames, then it is dropped with the socket.
        if tokio::time::timeout(reader.idle.timeout(), &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
    }
}

/// Every turn's chunks and its end, then the output (or the error that ended the connection),
/// then a normal close.
async fn write(mut output: JsonRecvHalf, peer: Arc<Peer>) {
    'turns: loop {
        let mut turn = output.responses();
        while let Some(item) = turn.next().await {
            let Ok(chunk) = item else { break 'turns };
            if peer.send(&Frame::Chunk { chunk: &chunk }).await.is_err() {
                turn.cancel_with(Disconnected);
                break 'turns;
            }
        }
        if !turn.turn_ended() {
            break;
        }
        drop(turn);
        if peer.send(&Frame::TurnEnd).await.is_err() {
            output.cancel_with(Disconnected);
            break;
        }
    }
    let last = match output.output().await {
        Ok(value) => peer.send(&Frame::Output { output: &value }).await,
        Err(error) => peer.refuse(&Failure::from_json(&error)).await,
    };
    if last.is_ok() {
        peer.close(close_code::NORMAL, "").await;
    }
}
