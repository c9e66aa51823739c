//! Full duplex over WebSocket: one socket is one connection. This task reads the socket and
//! drives the connection's input; a writer task writes its chunks, turn ends and output.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;

use axum::Extension;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bidi_flow::{JsonError, JsonRecvHalf, JsonSendHalf};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::codec::{self, Code, Failure, Frame, Op};
use crate::idle::{Activity, Idle};
use crate::{Disconnected, INPUT_WINDOW, Identity, IdleTimeout, Shared};

/// `GET /{type}/{name}` with an upgrade.
pub(crate) async fn upgrade(
    State(shared): State<Arc<Shared>>,
    Path((kind, name)): Path<(String, String)>,
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
    if shared.registry.action(&key).is_none() {
        if let Err(error) = shared.registry.connect_json(&key, serde_json::Value::Null) {
            return Failure::from_json(&error).into_response();
        }
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

/// What the reader does next.
enum Read {
    Message(Message),
    /// The socket closed or failed (with 1009 for a message over the hard limit).
    Gone(Option<u16>),
    Idle,
}

/// How many frames the reader reads ahead of an input the action has not taken, looking for a
/// `cancel`.
const READ_AHEAD: usize = 16;

/// Reads the next message: the first one held back, or the socket's, unless the idle timeout
/// comes first.
async fn read(
    stream: &mut SplitStream<WebSocket>,
    held: &mut VecDeque<Message>,
    idle: &mut Idle,
) -> Read {
    if let Some(message) = held.pop_front() {
        return Read::Message(message);
    }
    tokio::select! {
        biased;
        message = stream.next() => classify(message),
        () = idle.expired() => Read::Idle,
    }
}

fn classify(message: Option<Result<Message, axum::Error>>) -> Read {
    match message {
        Some(Ok(Message::Close(_))) | None => Read::Gone(None),
        Some(Ok(message)) => Read::Message(message),
        Some(Err(error)) if error.to_string().contains("Space limit exceeded") => {
            Read::Gone(Some(close_code::SIZE))
        }
        Some(Err(_)) => Read::Gone(None),
    }
}

async fn serve(shared: Arc<Shared>, key: String, identity: Option<Identity>, socket: WebSocket) {
    let (sink, mut stream) = socket.split();
    let activity = Activity::new();
    let peer = Arc::new(Peer {
        sink: Mutex::new(sink),
        activity: activity.clone(),
    });
    let limit = shared.limits.max_message_bytes;
    let mut idle = Idle::new(activity.clone(), shared.limits.idle_timeout);
    let mut input: Option<JsonSendHalf> = None;
    let mut writer: Option<JoinHandle<()>> = None;
    let mut held: VecDeque<Message> = VecDeque::new();
    let mut end: Option<Read> = None;
    while end.is_none() {
        let text = match read(&mut stream, &mut held, &mut idle).await {
            Read::Message(Message::Text(text)) => text,
            Read::Message(Message::Binary(_)) => {
                let failure = Failure::malformed("frames are JSON text, not binary");
                let _ = peer.refuse(&failure).await;
                continue;
            }
            // Pings are answered by the socket itself.
            Read::Message(_) => continue,
            other => {
                end = Some(other);
                break;
            }
        };
        activity.touch();
        if text.len() > limit {
            let failure = Failure::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::FrameTooLarge,
                format!("a {} byte message; the limit is {limit} bytes", text.len()),
            );
            let _ = peer.refuse(&failure).await;
            continue;
        }
        let op = match codec::decode(text.as_str()) {
            Ok(op) => op,
            Err(failure) => {
                let _ = peer.refuse(&failure).await;
                continue;
            }
        };
        let op = match (op, &input) {
            (Op::Init(init), None) => {
                let options = Shared::options(identity.as_ref()).input_buffer(INPUT_WINDOW);
                match shared.registry.connect_json_with(&key, init, options) {
                    Ok(conn) => {
                        let (half, output) = conn.into_split();
                        input = Some(half);
                        writer = Some(tokio::spawn(write(output, Arc::clone(&peer))));
                    }
                    Err(error) => {
                        let _ = peer.refuse(&Failure::from_json(&error)).await;
                    }
                }
                continue;
            }
            (Op::Init(_), Some(_)) => {
                let failure = Failure::new(
                    StatusCode::CONFLICT,
                    Code::DuplicateConnection,
                    "the socket's connection is open already: one socket, one connection",
                );
                let _ = peer.refuse(&failure).await;
                continue;
            }
            (_, None) => {
                let failure = Failure::new(
                    StatusCode::CONFLICT,
                    Code::UnknownConnection,
                    "no connection yet: the first frame is `init`",
                );
                let _ = peer.refuse(&failure).await;
                continue;
            }
            (op, Some(half)) => (op, half),
        };
        match op {
            (Op::Send(value), half) => {
                let result = {
                    let mut send = pin!(half.send(value));
                    loop {
                        tokio::select! {
                            biased;
                            result = &mut send => break result,
                            message = stream.next(), if held.len() < READ_AHEAD && end.is_none() => {
                                // Watch for a cancel while the action has not taken the input;
                                // anything else waits its turn.
                                match classify(message) {
                                    Read::Message(Message::Text(text))
                                        if text.len() <= limit
                                            && matches!(codec::decode(text.as_str()), Ok(Op::Cancel(_))) =>
                                    {
                                        if let Ok(Op::Cancel(reason)) = codec::decode(text.as_str()) {
                                            half.cancel_with(reason.unwrap_or_else(|| "cancelled by the client".to_owned()));
                                        }
                                    }
                                    Read::Message(message) => held.push_back(message),
                                    gone => {
                                        half.cancel_with(Disconnected);
                                        end = Some(gone);
                                    }
                                }
                            }
                            () = idle.expired(), if end.is_none() => {
                                half.cancel_with(IdleTimeout(idle.timeout()));
                                end = Some(Read::Idle);
                            }
                        }
                    }
                };
                match result {
                    Ok(()) => {}
                    Err(error @ JsonError::InvalidInput { .. }) => {
                        let _ = peer.refuse(&Failure::from_json(&error)).await;
                    }
                    Err(error) => {
                        let failure =
                            Failure::new(StatusCode::CONFLICT, Code::SendFailed, error.to_string());
                        let _ = peer.refuse(&failure).await;
                    }
                }
            }
            (Op::Close, half) => half.close(),
            (Op::Cancel(reason), half) => {
                half.cancel_with(reason.unwrap_or_else(|| "cancelled by the client".to_owned()));
            }
            (Op::Init(_), _) => {}
        }
    }
    match (end, &input) {
        (Some(Read::Idle), Some(half)) => half.cancel_with(IdleTimeout(idle.timeout())),
        (Some(Read::Idle), None) => {
            let failure = Failure::new(
                StatusCode::GATEWAY_TIMEOUT,
                Code::IdleTimeout,
                format!("no `init` within {:?}", idle.timeout()),
            );
            let _ = peer.refuse(&failure).await;
            peer.close(close_code::NORMAL, "idle").await;
        }
        (Some(Read::Gone(code)), half) => {
            if let Some(half) = half {
                if !half.is_finished() {
                    half.cancel_with(Disconnected);
                }
            }
            if let Some(code) = code {
                peer.close(code, "message too big").await;
            }
        }
        _ => {}
    }
    drop(input);
    if let Some(writer) = writer {
        let _ = writer.await;
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
