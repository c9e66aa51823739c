//! Genkit's flow wire: `POST /{type}/{name}` runs an action on one input, answering JSON or SSE;
//! `GET /actions` lists the registry.
//!
//! A request is one connection with room for its one input, so that an action may stream
//! before it takes it. Its action and what reads it (the pump of a streamed answer, the wait
//! for a JSON one) run first in the request's own task, polled together in place
//! ([`InPlace::spawn_beside`]), for as long as they go without waiting: an action that
//! answers at once costs no task, no wake-up of another thread, and its whole answer is a
//! body of known length ([`body::of_writes`](crate::body::of_writes)) that goes out in one
//! write with the response's head. What waits (a model, a slow client) goes on in a task of
//! its own, and its answer streams.
//!
//! A streamed answer pumps the connection's turns through the wire seam (`bidi_flow::wire`),
//! handing the body its writes through a channel of two, the records ready at once gathered
//! into one write (up to 16 KiB) and the last chunks' records sent with the last record:
//! backpressure runs from the socket to the action, and a burst costs one system call.
//! Every write is bounded by the idle timeout (`bidi_flow::idle`): a write the client does not
//! take is nothing moving, so a client that stops reading is as gone as a silent one. A
//! failed stream ends with an `error:` record whose `details` is text, which Genkit's client
//! prints.

use axum::Extension;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bidi_flow::{ActionDesc, JsonError, JsonRecvHalf, JsonSendHalf};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::codec::{self, Code, Failure, FlowRequest};
use crate::extract::{Limited, Segments};
use bidi_core::{ActionTask, BoxError, Driver, InPlace, PeerGone};
use bidi_flow::idle::{Activity, Idle};
use bidi_flow::wire::{self, Closed, Detached, Sink, Wire};

use crate::{Host, Identity};

/// The flow routes: `GET /actions`, and every registered action at `/{type}/{name}` (`POST`
/// for one input over JSON or SSE, a `GET` upgrade for a WebSocket).
pub(crate) fn routes() -> Router<Host> {
    Router::new()
        .route("/actions", get(actions))
        .route("/{kind}/{name}", route())
}

/// `POST` a run; with the feature `ws`, `GET` a WebSocket.
fn route() -> axum::routing::MethodRouter<Host> {
    let route = post(run);
    #[cfg(feature = "ws")]
    let route = route.get(crate::ws::upgrade);
    route
}

/// `GET /actions`: the registry's descriptors.
pub(crate) async fn actions(State(host): State<Host>) -> Json<Vec<ActionDesc>> {
    Json(host.registry().actions())
}

/// Any path the router does not know.
pub(crate) async fn no_route() -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        Code::NotFound,
        "no such route: actions are at /{type}/{name} (GET /actions lists them)",
    )
}

/// A known path with another method.
pub(crate) async fn no_method(method: axum::http::Method) -> Failure {
    if method == axum::http::Method::OPTIONS {
        return Failure::new(
            StatusCode::METHOD_NOT_ALLOWED,
            Code::MethodNotAllowed,
            "this server takes no cross-origin requests from browsers: allow the page's origin \
             with CORS (Server::cors)",
        );
    }
    Failure::new(
        StatusCode::METHOD_NOT_ALLOWED,
        Code::MethodNotAllowed,
        "this route takes another method: POST /{type}/{name} runs an action, GET with a \
         WebSocket upgrade connects to it",
    )
}

/// A request body over `limit` bytes: 413.
pub(crate) fn too_large(limit: usize) -> Failure {
    Failure::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        Code::FrameTooLarge,
        format!("the request body is over {limit} bytes"),
    )
}

/// Whether the client asked for SSE: `Accept: text/event-stream` or `?stream=true`.
pub fn wants_stream(headers: &HeaderMap, query: Option<&str>) -> bool {
    let accepts = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"));
    accepts
        || query.is_some_and(|query| {
            query
                .split('&')
                .any(|pair| pair == "stream=true" || pair == "stream=1" || pair == "stream")
        })
}

/// What a run's request says beside its body: the action's key and how it wants its answer.
pub(crate) struct Target {
    /// `/{type}/{name}`, decoded.
    key: String,
    /// Whether the answer is SSE ([`wants_stream`]).
    stream: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Target {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Failure> {
        let stream = wants_stream(&parts.headers, parts.uri.query());
        // The route matched `/{type}/{name}`, so a path without percent-encoding is the key
        // as it is; only an encoded one is decoded segment by segment.
        let path = parts.uri.path();
        let key = if path.contains('%') {
            let Segments((kind, name)) =
                Segments::<(String, String)>::from_request_parts(parts, state).await?;
            format!("/{kind}/{name}")
        } else {
            path.to_owned()
        };
        Ok(Self { key, stream })
    }
}

/// `POST /{type}/{name}`: one input, then the output (or every chunk, then the output).
pub(crate) async fn run(
    State(host): State<Host>,
    Target { key, stream }: Target,
    identity: Option<Extension<Identity>>,
    Limited(bytes): Limited,
) -> Result<Response, Failure> {
    let request: FlowRequest = codec::decode_object(&bytes)?;
    // No `data` is a `null` input, as Genkit's servers run a flow with no input: an action
    // whose input is `()` or an `Option` takes it, any other refuses it as its input.
    let input = request.data;
    // An unknown key is refused by the connect, as is a bad init; an init for an action that
    // takes none is refused here, naming it (the descriptor, schemas and all, is read only
    // then).
    let init = match request.init {
        Some(init) if !init.is_null() => {
            let desc = host
                .registry()
                .action(&key)
                .map_err(|missing| Failure::not_found(&missing))?;
            if desc.init_schema.is_none() {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    Code::InvalidInit,
                    format!("`{key}` takes no init"),
                )
                .at("/init"));
            }
            init
        }
        _ => Value::Null,
    };
    // Room for the one input: the action may stream before it takes it (or never take it); and
    // for a few chunks: while a write goes out the action goes on, and the next write gathers
    // what it sent meanwhile.
    let driver = Driver::new();
    let options = Host::connect_options(identity.as_ref().map(|Extension(identity)| identity))
        .input_buffer(1)
        .output_buffer(OUTPUT_BUFFER)
        .driver(&driver);
    let conn = host
        .registry()
        .connect_json_with(&key, init, options)
        .map_err(|error| Failure::from_json(&error))?;
    let task = driver.take();
    let (input_half, output) = conn.into_split();
    // Dropped with the request: a client that goes away cancels the connection.
    let guard = CancelOnDrop(Some(input_half.clone()));
    match input_half.send(input).await {
        Ok(()) => {}
        Err(error @ JsonError::InvalidInput { .. }) => {
            input_half.cancel_with("the request's input was refused");
            guard.disarm();
            return Err(Failure::from_json(&error));
        }
        // The action ended without taking it: its output (or error) says how.
        Err(_) => {}
    }
    input_half.close();
    drop(input_half);
    let idle = Idle::new(Activity::new(), host.limits().idle_timeout);
    if stream {
        return Ok(sse(task, output, idle, guard));
    }
    let (result, collected) = oneshot::channel();
    InPlace::spawn_beside(task, async move {
        let _ = result.send(collect(output, idle).await);
    });
    // Dropped with the request, the guard cancels the connection: the task that runs it sees
    // the cancel and ends.
    let result = collected.await.unwrap_or_else(|_| {
        Err(Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::ConnectionFailed,
            "the flow's run ended without an answer",
        ))
    });
    guard.disarm();
    match result {
        Ok(output) => Ok((
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            codec::result_body(&output),
        )
            .into_response()),
        Err(failure) => Err(failure),
    }
}

/// Cancels a connection with [`PeerGone::Disconnected`] when dropped, unless disarmed: the request's
/// future was dropped because its client went away.
#[derive(Debug)]
pub struct CancelOnDrop(pub Option<JsonSendHalf>);

impl CancelOnDrop {
    /// Leaves the connection be: the request ended as it should.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(input) = self.0.take()
            && !input.is_finished()
        {
            input.cancel_with(PeerGone::Disconnected);
        }
    }
}

/// Reads the connection to its end, chunks discarded: the output, or why there is none.
async fn collect(mut output: JsonRecvHalf, mut idle: Idle) -> Result<Value, Failure> {
    wire::pump_turns(
        &mut output,
        &mut Discard,
        &Detached,
        Some(&mut idle),
        &mut (),
    )
    .await;
    output
        .output()
        .await
        .map_err(|error| Failure::from_json(&error))
}

/// The wire of a JSON answer: the chunks are read only to wait for the output.
struct Discard;

impl Wire for Discard {
    type Event = Box<RawValue>;
    type Output = ();
    type Frames = ();

    fn event(&mut self, _: Box<RawValue>, (): &mut ()) {}

    fn failed(&mut self, _: &str, (): &mut ()) {}
}

/// How many chunks an action may send ahead of the writer. Unbuffered, each chunk would wait
/// for the writer to take it, and every write would carry one record: a system call and a
/// chunked-encoding frame per chunk.
const OUTPUT_BUFFER: usize = 64;

/// How many writes the writer may make ahead of the socket. Two: a burst the action sends
/// at once (its output buffer's chunks, then the rest with the output) is two writes, which the
/// body then holds whole, with its length, when they are ready before the handler returns.
const WRITES_AHEAD: usize = 2;

/// The SSE answer, written as [`records_body`] writes.
fn sse(
    task: Option<ActionTask>,
    output: JsonRecvHalf,
    idle: Idle,
    guard: CancelOnDrop,
) -> Response {
    crate::sse::response(records_body(task, output, idle, guard, Sse))
}

/// How a streamed answer writes a connection: a record per chunk, then the last record.
pub trait Records: Send + 'static {
    /// Appends the record of one chunk, given as its JSON text (or nothing, for an answer
    /// without chunks).
    fn chunk(&self, chunk: &RawValue, buf: &mut Vec<u8>);
    /// Appends the last record: the output, or why there is none.
    fn end(self, output: Result<Value, JsonError>, buf: &mut Vec<u8>);
}

/// Genkit's flow wire over SSE: `message` records, then the `result` or `error` record.
struct Sse;

impl Records for Sse {
    fn chunk(&self, chunk: &RawValue, buf: &mut Vec<u8>) {
        codec::message_record(chunk, buf);
    }

    fn end(self, output: Result<Value, JsonError>, buf: &mut Vec<u8>) {
        match output {
            Ok(value) => codec::result_record(&value, buf),
            Err(error) => codec::error_record(&Failure::from_json(&error), buf),
        }
    }
}

/// The body of a streamed answer: a writer reads the connection and hands `records` to the
/// body through a channel of two writes (`WRITES_AHEAD`), so a slow client slows the action
/// (which runs at most `OUTPUT_BUFFER` (64) chunks and two writes ahead of the socket). The
/// writer runs beside the action's `task` (a connection opened with a [`Driver`]; `None` for
/// one that runs in a task of its own) as [`InPlace::spawn_beside`] runs them. The body ends
/// with the last record, and is whole if that record is written before this returns
/// ([`body::of_writes`](crate::body::of_writes)); a client that goes away cancels the
/// connection.
pub fn records_body(
    task: Option<ActionTask>,
    output: JsonRecvHalf,
    idle: Idle,
    guard: CancelOnDrop,
    records: impl Records,
) -> Body {
    // Plain buffers, the last one followed by the writer's end: a channel of `Vec`s keeps its
    // slots within the allocator's thread cache, where `(Bytes, bool)`s would not.
    let (writes, body) = mpsc::channel::<Vec<u8>>(WRITES_AHEAD);
    let (mut output, mut idle) = (output, idle);
    // Every chunk's record, then the last record, through the wire seam's pump: what is ready
    // at once goes in one write, and the last chunks' records go with the last record. A block,
    // not an `async fn`, which would keep each of its arguments twice: the future is boxed for
    // every request, and kept under the allocator's 1 KiB thread cache.
    let write = async move {
        let body = Writes(writes);
        let mut wire = Chunks(records);
        let mut buf = Vec::with_capacity(256);
        wire::pump_turns(&mut output, &mut wire, &body, Some(&mut idle), &mut buf).await;
        guard.disarm();
        wire.0.end(output.output().await, &mut buf);
        // The writer ends with it: the body ends with the last record.
        let _ = idle.within(body.0.send(buf)).await;
    };
    InPlace::spawn_beside(task, write);
    crate::body::of_writes(body)
}

/// [`Records`] as a wire: a record per chunk; a failure is said by the last record, which
/// reads it from the output.
struct Chunks<R>(R);

impl<R: Records> Wire for Chunks<R> {
    type Event = Box<RawValue>;
    type Output = ();
    type Frames = Vec<u8>;

    fn event(&mut self, chunk: Box<RawValue>, out: &mut Vec<u8>) {
        self.0.chunk(&chunk, out);
    }

    fn failed(&mut self, _: &str, _: &mut Vec<u8>) {}
}

/// The writes of a streamed answer's body.
struct Writes(mpsc::Sender<Vec<u8>>);

impl Sink<Vec<u8>> for Writes {
    async fn send(&self, records: Vec<u8>) -> Result<(), Closed> {
        self.0.send(records).await.map_err(|_| Closed)
    }

    async fn closed(&self) -> BoxError {
        self.0.closed().await;
        Box::new(PeerGone::Disconnected)
    }
}
