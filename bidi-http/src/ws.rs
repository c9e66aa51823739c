//! Full duplex over WebSocket: one socket is one connection, served from the socket's own task.
//! That task runs the action (its connection is opened with a `Driver`, so the action's task is
//! polled here rather than spawned), reads the socket, hands inputs to the action and writes its
//! chunks, turn ends and output, all in one `select!`: a round trip crosses no task boundary,
//! and the wakes between the action and the socket's side are answered in place (`InPlace`),
//! not by the runtime's queue.
//! When the socket's serving ends first, the action goes on in a task of its own for what it
//! has left (its grace period after a cancel). The frames are `bidi_flow::frame`'s socket wire.
//!
//! An input the action has not taken waits as a branch of that `select!` while the action runs
//! and its chunks are written; a write the client has not taken waits while frames are read
//! ahead. The reader reads up to 16 frames, and at most `max_message_bytes`, ahead of an input
//! or a write that waits, looking for a `cancel`: what a client sending large inputs holds is
//! bounded in bytes (a window of 8 inputs held 8 of them, 8 MiB at the default limit). When
//! the serving ends first (the client gone, a protocol violation, the idle timeout), the last
//! frames are written within the idle timeout. A protocol violation closes the socket with
//! 1002 (1007 for text that is not UTF-8, 1009 for a message over twice the limit) and cancels
//! the connection with that reason, not with `PeerGone`: the client did not go away.

use std::collections::VecDeque;
use std::pin::{Pin, pin};

use axum::Extension;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bidi_core::{ActionTask, Driver, InPlace, PeerGone};
use bidi_flow::frame::{self, Frame, FrameError, Op};
use bidi_flow::wire::{self, Ended, Wire};
use bidi_flow::{JsonError, JsonRecvHalf, JsonSendHalf};
use futures_util::future::OptionFuture;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{FutureExt as _, SinkExt as _, StreamExt as _};
use opentelemetry::context::FutureExt as _;
use serde_json::Value;

use crate::codec::{Code, Failure};
use crate::extract::Segments;
use crate::{Host, INPUT_WINDOW, Identity};
use bidi_flow::idle::{Activity, Idle};

mod woken;

use woken::Woken;

/// `GET /{type}/{name}` with an upgrade.
pub(crate) async fn upgrade(
    State(host): State<Host>,
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
    if let Err(missing) = host.registry().action(&key) {
        return Failure::not_found(&missing).into_response();
    }
    // Messages up to the limit are read and refused if over it; past twice the limit the
    // socket closes with 1009 rather than buffer them.
    let hard = host
        .limits()
        .max_message_bytes
        .saturating_mul(2)
        .saturating_add(64 * 1024);
    let identity = identity.map(|Extension(identity)| identity);
    let caller = opentelemetry::Context::current();
    upgrade
        .max_message_size(hard)
        .max_frame_size(hard)
        // The connection runs after the upgrade, in the caller's trace still.
        .on_upgrade(move |socket| {
            InPlace::new(serve(host, key, identity, socket).with_context(caller))
        })
}

/// The writing side of a socket.
struct Writer {
    sink: SplitSink<WebSocket, Message>,
    activity: Activity,
}

impl Writer {
    async fn send(&mut self, frame: &Frame<'_>) -> Result<(), axum::Error> {
        self.send_text(frame.to_text()).await
    }

    async fn send_text(&mut self, text: String) -> Result<(), axum::Error> {
        let result = self.sink.send(Message::Text(text.into())).await;
        self.activity.touch();
        result
    }

    /// Queues `frame` without writing it out: the next [`flush`](Self::flush) (or send) writes
    /// it with whatever was queued after it.
    async fn feed(&mut self, frame: &Frame<'_>) -> Result<(), axum::Error> {
        let result = self.sink.feed(Message::Text(frame.to_text().into())).await;
        self.activity.touch();
        result
    }

    async fn flush(&mut self) -> Result<(), axum::Error> {
        let result = self.sink.flush().await;
        self.activity.touch();
        result
    }

    async fn refuse(&mut self, failure: &Failure) -> Result<(), axum::Error> {
        self.send(&failure.frame()).await
    }

    async fn close(&mut self, code: u16, reason: &'static str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = self.sink.send(Message::Close(Some(frame))).await;
        let _ = self.sink.close().await;
    }
}

/// How a socket's serving ends.
#[derive(Debug, Clone, Copy)]
enum End {
    /// The socket closed or failed.
    Gone,
    /// The client broke the protocol: the close code and reason to answer with (1009 for a
    /// message over the hard limit, 1007 for text that is not UTF-8, 1002 for the rest).
    Broken(u16, &'static str),
    /// Nothing moved for the idle timeout.
    Idle,
    /// The action is done: the last frame is next.
    Done,
}

/// How many frames the reader reads ahead of an input the action has not taken (or a write
/// the client has not taken), looking for a `cancel`.
const READ_AHEAD: usize = 16;

/// The reading side of a socket: frames in order, the ones read ahead held back.
struct Reader {
    /// Polled only once it woke: the `select!`s poll it beside the action on every turn.
    stream: Woken<SplitStream<WebSocket>>,
    held: VecDeque<Message>,
    /// The bytes of the frames held back.
    held_bytes: usize,
    idle: Idle,
    limit: usize,
}

impl Reader {
    /// Whether another frame may be read ahead.
    fn has_room(&self) -> bool {
        self.held.len() < READ_AHEAD && self.held_bytes < self.limit
    }

    fn pop_held(&mut self) -> Option<Message> {
        let message = self.held.pop_front()?;
        self.held_bytes -= size(&message);
        Some(message)
    }

    /// The next message: one held back, else the socket's next, or the end.
    async fn next(&mut self) -> Result<Message, End> {
        if let Some(message) = self.pop_held() {
            return Ok(message);
        }
        tokio::select! {
            biased;
            message = self.stream.next() => message_or_end(message),
            () = self.idle.expired() => Err(End::Idle),
        }
    }

    /// A message as an operation or a refusal; `None` for a ping or a pong.
    fn decode(&self, message: Message) -> Option<Result<Op, Failure>> {
        let text = match message {
            Message::Text(text) => text,
            Message::Binary(_) => {
                return Some(Err(Failure::malformed("frames are JSON text, not binary")));
            }
            // Pings are answered by the socket itself.
            _ => return None,
        };
        self.idle.touch();
        let decoded = FrameError::check_size(text.len(), self.limit)
            .and_then(|()| frame::decode(text.as_bytes()));
        Some(decoded.map_err(|error| Failure::from_frame(&error)))
    }

    /// Holds back a message read while an input or a write waits, unless it is a `cancel`,
    /// which cancels at once.
    fn hold(&mut self, message: Message, input: &JsonSendHalf) {
        if let Message::Text(text) = &message
            && text.len() <= self.limit
            && let Ok(Op::Cancel { reason }) = frame::decode(text.as_bytes())
        {
            self.idle.touch();
            input.cancel_with(cancel_cause(reason));
            return;
        }
        self.held_bytes += size(&message);
        self.held.push_back(message);
    }

    /// Waits for `work` (a write, a refusal), reading ahead meanwhile: a `cancel` among the
    /// frames that follow cancels at once; the others wait their turn.
    async fn wait<F: Future>(&mut self, work: F, input: &JsonSendHalf) -> Result<F::Output, End> {
        let mut work = pin!(work);
        loop {
            tokio::select! {
                biased;
                output = &mut work => return Ok(output),
                message = self.stream.next(), if self.has_room() => {
                    self.hold(message_or_end(message)?, input);
                }
                () = self.idle.expired() => return Err(End::Idle),
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

async fn serve(host: Host, key: String, identity: Option<Identity>, socket: WebSocket) {
    let (sink, stream) = socket.split();
    let activity = Activity::new();
    let mut writer = Writer {
        sink,
        activity: activity.clone(),
    };
    let mut reader = Reader {
        stream: Woken::new(stream),
        held: VecDeque::new(),
        held_bytes: 0,
        idle: Idle::new(activity, host.limits().idle_timeout),
        limit: host.limits().max_message_bytes,
    };
    // Until `init`, nothing but refusals.
    let end = loop {
        let message = match reader.next().await {
            Ok(message) => message,
            Err(end) => break end,
        };
        let refusal = match reader.decode(message) {
            None => continue,
            Some(Err(failure)) => failure,
            Some(Ok(Op::Open { init, .. })) => {
                // The action's task is this one's to poll: no hop between the two.
                let driver = Driver::new();
                let options = Host::connect_options(identity.as_ref())
                    .input_buffer(INPUT_WINDOW)
                    .driver(&driver);
                match host.registry().connect_json_with(&key, init, options) {
                    Ok(conn) => {
                        let (input, output) = conn.into_split();
                        let connected = Connected {
                            reader: &mut reader,
                            writer: &mut writer,
                            input,
                            output,
                            action: driver.take(),
                        };
                        connected.serve().await;
                        return;
                    }
                    Err(error) => Failure::from_json(&error),
                }
            }
            Some(Ok(_)) => Failure::new(
                StatusCode::CONFLICT,
                Code::UnknownConnection,
                "no connection yet: the first frame is `init`",
            ),
        };
        let _ = writer.refuse(&refusal).await;
    };
    match end {
        End::Idle => {
            let failure = Failure::new(
                StatusCode::GATEWAY_TIMEOUT,
                Code::IdleTimeout,
                format!("no `init` within {:?}", reader.idle.timeout()),
            );
            let _ = writer.refuse(&failure).await;
            writer.close(close_code::NORMAL, "idle").await;
        }
        End::Broken(code, reason) => writer.close(code, reason).await,
        End::Gone | End::Done => {}
    }
}

/// What woke the socket's task once connected.
enum Event {
    /// The action's future finished (its outcome is the connection's).
    ActionDone,
    /// The pending input was taken, or refused.
    Sent(Result<(), JsonError>),
    /// The action's next chunk, turn end or end.
    Out(Out),
    /// A message from the client, or the socket's end.
    Read(Result<Message, End>),
    /// Nothing moved for the idle timeout.
    Idle,
}

/// What the action's side had next.
enum Out {
    Chunk(Value),
    TurnEnd,
    /// The connection ended: its output (or error) is next, once the action is done.
    Ended,
    /// The action is done: the output is ready.
    Done,
}

/// The action's next chunk or turn end; after the connection ended, the moment the action is
/// done. Cancel safe: a chunk not returned stays for the next call.
async fn next_out(output: &mut JsonRecvHalf, ended: bool) -> Out {
    if ended {
        output.done().await;
        return Out::Done;
    }
    let mut turn = output.responses();
    match turn.next().await {
        Some(Ok(chunk)) => Out::Chunk(chunk),
        // A turn's end, not the connection's: the action returned mid-turn otherwise.
        None if turn.turn_ended() => Out::TurnEnd,
        // An error is the connection's end: `output()` returns it.
        Some(Err(_)) | None => Out::Ended,
    }
}

/// Polls the action's task, if there is one.
async fn run_action(action: &mut Option<ActionTask>) {
    match action {
        Some(task) => task.await,
        None => std::future::pending().await,
    }
}

/// A socket with its connection: one task runs the action, reads the client, hands its inputs
/// to the action, and writes the action's chunks, turn ends and output.
struct Connected<'a> {
    reader: &'a mut Reader,
    writer: &'a mut Writer,
    input: JsonSendHalf,
    output: JsonRecvHalf,
    /// The action's task, polled here until it is done or the socket's serving ends.
    action: Option<ActionTask>,
}

impl Connected<'_> {
    /// Serves the connection to its end; then cancels what still runs, as the end says, and
    /// writes the last frames the client is still there to read.
    async fn serve(mut self) {
        let end = self.run().await;
        let Self {
            reader,
            writer,
            input,
            output,
            action,
        } = self;
        // An action that still runs (to its output, or through its grace period) goes on in a
        // task of its own: it ends with its connection, as a spawned one does.
        if let Some(action) = action {
            tokio::spawn(action);
        }
        let unfinished = !input.is_finished();
        match end {
            End::Gone if unfinished => input.cancel_with(PeerGone::Disconnected),
            End::Broken(code, reason) => {
                if unfinished {
                    input.cancel_with(format!("the client sent {reason}"));
                }
                writer.close(code, reason).await;
            }
            End::Idle | End::Done => {
                let timeout = reader.idle.timeout();
                if matches!(end, End::Idle) {
                    input.cancel_with(PeerGone::Idle(timeout));
                }
                drop(input);
                // A client that stopped reading would hold this for good: it gets the idle
                // timeout to take the last frames, then the socket is dropped.
                let _ = tokio::time::timeout(timeout, write_rest(output, writer)).await;
            }
            End::Gone => {}
        }
    }

    /// Reads, sends and writes until the action is done or the socket ends.
    async fn run(&mut self) -> End {
        let input = self.input.clone();
        // The input the action has not taken yet, if any: while it waits, chunks are written
        // and frames are read ahead (a `cancel` among them cancels at once).
        let mut sending = pin!(OptionFuture::from(None));
        let mut waiting = false;
        let mut ended = false;
        // Frames of the action's queued and not yet written out.
        let mut queued = false;
        loop {
            let held = if waiting {
                None
            } else {
                self.reader.pop_held()
            };
            let event = match held {
                Some(message) => Event::Read(Ok(message)),
                None if queued => {
                    // What is ready now (a turn's end after its last chunk, say) goes out with
                    // the frames queued before it, in one write; before waiting, they go out.
                    // Every branch of the wait is cancel safe: polled once, nothing is lost.
                    let ready = self
                        .next_event(sending.as_mut(), waiting, ended)
                        .now_or_never();
                    match ready {
                        Some(event) => event,
                        None => {
                            queued = false;
                            if let Err(end) = self.flush(&input).await {
                                return end;
                            }
                            self.next_event(sending.as_mut(), waiting, ended).await
                        }
                    }
                }
                None => self.next_event(sending.as_mut(), waiting, ended).await,
            };
            let step = match event {
                Event::ActionDone => {
                    self.action = None;
                    Ok(())
                }
                Event::Sent(result) => {
                    waiting = false;
                    self.sent(result, &input).await
                }
                Event::Out(Out::Chunk(chunk)) => {
                    let frame = Frame::Chunk {
                        id: None,
                        chunk: &chunk,
                    };
                    queued = true;
                    self.write(&frame, &input).await
                }
                Event::Out(Out::TurnEnd) => {
                    queued = true;
                    self.write(&Frame::TurnEnd { id: None }, &input).await
                }
                Event::Out(Out::Ended) => {
                    ended = true;
                    Ok(())
                }
                Event::Out(Out::Done) => Err(End::Done),
                Event::Read(Err(end)) => Err(end),
                Event::Read(Ok(message)) if waiting => {
                    self.reader.hold(message, &input);
                    Ok(())
                }
                Event::Read(Ok(message)) => match self.apply(message, &input).await {
                    Ok(Some(value)) => {
                        sending.set(Some(input.send(value)).into());
                        waiting = true;
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(end) => Err(end),
                },
                Event::Idle => Err(End::Idle),
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    /// Whichever comes first: the input taken, the action's next chunk, turn end or end, a
    /// message (while an input waits, only as far as the read-ahead allows), the idle timeout.
    async fn next_event<F>(
        &mut self,
        sending: Pin<&mut OptionFuture<F>>,
        waiting: bool,
        ended: bool,
    ) -> Event
    where
        F: Future<Output = Result<(), JsonError>>,
    {
        let read = !waiting || self.reader.has_room();
        let running = self.action.is_some();
        tokio::select! {
            biased;
            () = run_action(&mut self.action), if running => Event::ActionDone,
            Some(result) = sending, if waiting => Event::Sent(result),
            out = next_out(&mut self.output, ended) => Event::Out(out),
            message = self.reader.stream.next(), if read => Event::Read(message_or_end(message)),
            () = self.reader.idle.expired() => Event::Idle,
        }
    }

    /// Answers an input the action did not take.
    async fn sent(&mut self, result: Result<(), JsonError>, input: &JsonSendHalf) -> Step {
        let refusal = match result {
            Ok(()) => return Ok(()),
            Err(error @ JsonError::InvalidInput { .. }) => Failure::from_json(&error),
            Err(error) => Failure::new(StatusCode::CONFLICT, Code::SendFailed, error.to_string()),
        };
        self.refuse(&refusal, input).await
    }

    /// Applies a client's frame to the connection: the input to send, if it is one.
    async fn apply(
        &mut self,
        message: Message,
        input: &JsonSendHalf,
    ) -> Result<Option<Value>, End> {
        let refusal = match self.reader.decode(message) {
            None => return Ok(None),
            Some(Ok(Op::Send { input })) => return Ok(Some(input)),
            Some(Ok(Op::Close)) => {
                input.close();
                return Ok(None);
            }
            Some(Ok(Op::Cancel { reason })) => {
                input.cancel_with(cancel_cause(reason));
                return Ok(None);
            }
            Some(Ok(Op::Open { .. })) => Failure::new(
                StatusCode::CONFLICT,
                Code::DuplicateConnection,
                "the socket's connection is open already: one socket, one connection",
            ),
            Some(Err(failure)) => failure,
        };
        self.refuse(&refusal, input).await?;
        Ok(None)
    }

    /// Queues a frame of the action's, written out by the next [`flush`](Self::flush) (the
    /// queue is written before it grows past the socket's write buffer); a client that does
    /// not take it is gone.
    async fn write(&mut self, frame: &Frame<'_>, input: &JsonSendHalf) -> Step {
        match self.reader.wait(self.writer.feed(frame), input).await? {
            Ok(()) => Ok(()),
            Err(_) => Err(End::Gone),
        }
    }

    /// Writes out the queued frames; a client that does not take them is gone.
    async fn flush(&mut self, input: &JsonSendHalf) -> Step {
        match self.reader.wait(self.writer.flush(), input).await? {
            Ok(()) => Ok(()),
            Err(_) => Err(End::Gone),
        }
    }

    /// Writes an error frame; the socket goes on.
    async fn refuse(&mut self, failure: &Failure, input: &JsonSendHalf) -> Step {
        let _ = self.reader.wait(self.writer.refuse(failure), input).await?;
        Ok(())
    }
}

/// Go on, or end so.
type Step = Result<(), End>;

/// Every turn's chunks and its end not written yet, then the output (or the error that ended
/// the connection), then a normal close: the rest of the connection's turns pumped through the
/// wire seam, one frame a write.
async fn write_rest(mut output: JsonRecvHalf, writer: &mut Writer) {
    let socket = Socket(tokio::sync::Mutex::new(writer));
    let mut last = Texts::default();
    let ended = wire::pump_turns(&mut output, &mut Rest, &socket, None, &mut last).await;
    let writer = socket.0.into_inner();
    if matches!(ended, Ended::Stopped) {
        return;
    }
    for text in last.0 {
        if writer.send_text(text).await.is_err() {
            return;
        }
    }
    let last = match output.output().await {
        Ok(value) => {
            let frame = Frame::Output {
                id: None,
                output: &value,
            };
            writer.send(&frame).await
        }
        Err(error) => writer.refuse(&Failure::from_json(&error)).await,
    };
    if last.is_ok() {
        writer.close(close_code::NORMAL, "").await;
    }
}

/// The socket wire's frames of a connection's chunks and turn ends.
struct Rest;

impl Wire for Rest {
    type Event = Value;
    type Output = ();
    type Frames = Texts;

    fn event(&mut self, chunk: Value, out: &mut Texts) {
        let frame = Frame::Chunk {
            id: None,
            chunk: &chunk,
        };
        out.0.push(frame.to_text());
    }

    /// The output's error frame says why.
    fn failed(&mut self, _: &str, _: &mut Texts) {}

    fn turn_end(&mut self, out: &mut Texts) {
        out.0.push(Frame::TurnEnd { id: None }.to_text());
    }
}

/// Frames not written yet, written one at a time.
#[derive(Default)]
struct Texts(Vec<String>);

impl wire::Frames for Texts {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn is_full(&self) -> bool {
        !self.0.is_empty()
    }
}

/// The socket's writer as the sink of the rest of its connection.
struct Socket<'a>(tokio::sync::Mutex<&'a mut Writer>);

impl wire::Sink<Texts> for Socket<'_> {
    async fn send(&self, Texts(texts): Texts) -> Result<(), wire::Closed> {
        let mut writer = self.0.lock().await;
        for text in texts {
            writer.send_text(text).await.map_err(|_| wire::Closed)?;
        }
        Ok(())
    }
}
