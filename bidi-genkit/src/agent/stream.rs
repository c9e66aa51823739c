//! Genkit's durable streams: every streamed turn is one of the server's streamed turns
//! (`bidi_http::turns`) under a stream id (the `x-genkit-stream-id` header of its answer), runs on
//! when its client goes away, and is read again, from its first chunk, by a request that sends
//! that header back.
//!
//! The stream id is the turn's snapshot id, the id a store's `Streams` keys the turn's pieces
//! by, so a request on another process follows the stream from the store (through the
//! caller's scope: the snapshot's `entry`, then its pieces; nothing published yet is waited
//! for). A client-managed agent's turn has no snapshot in a shared store: its stream is one of
//! this process only, under an id minted with `bidi_session::new_id`; it runs on, and its
//! reconnecting client still gets the output, which carries the state the client keeps.
//! Answers that are not streamed, detached turns and refusals carry no stream id: they are
//! whole at once.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse as _, Response};
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::{LlmAgent, LlmSession, TurnInput};
use bidi_session::SessionStore as _;

use std::sync::Arc;

use bidi_http::agent::{self, HttpWire};
use bidi_http::codec::{Code, Failure};
use bidi_http::tee::relay;
use bidi_http::tee::{Attached, RESUME_BYTES, Tees};
use bidi_http::turns::{self, TurnKey};
use bidi_http::{Host, Identity};

/// The streamed turns of a server's agent wire, for the clients that reconnect to them.
pub(super) type Streams = Arc<Tees<TurnKey>>;

/// The header that names a stream: on a streamed answer, and on a request that reconnects.
pub const STREAM_ID: HeaderName = HeaderName::from_static("x-genkit-stream-id");

/// How long a stream id a client sends may be.
const MAX_ID_BYTES: usize = 256;

/// The stream id a request reconnects to, if it sends one.
///
/// # Errors
///
/// A header that is not a stream id (not text, empty, or too long), as a 400.
pub(super) fn requested(headers: &HeaderMap) -> Result<Option<String>, Failure> {
    let Some(value) = headers.get(&STREAM_ID) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(id) if !id.is_empty() && id.len() <= MAX_ID_BYTES => Ok(Some(id.to_owned())),
        _ => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            format!("`{STREAM_ID}` is not a stream id (text of 1 to {MAX_ID_BYTES} bytes)"),
        )),
    }
}

/// Starts one streamed turn of `agent` (served as `name`) through a tee: its stream id (the
/// turn's snapshot id, or for an agent whose client keeps its state, a fresh one) and its
/// first client's body. The turn runs to its end whoever reads it, and, where the store keeps
/// streams, its writes are published under its snapshot id for other processes.
///
/// # Errors
///
/// The turn's refusal, as [`agent::start`]'s.
pub(super) async fn start<W: HttpWire>(
    (host, streams): (&Host, &Streams),
    agent: &LlmAgent,
    name: &str,
    turn: (AgentInit<LlmSession>, TurnInput),
    identity: Option<&Identity>,
    wire: W,
) -> Result<(String, Body), Failure> {
    let started = turns::start(streams, host, (agent, name), turn, identity, wire);
    started.await.map(|(_, id, body)| (id, body))
}

/// `POST /agent/{name}/genkit` with the header naming stream `id`: the stream from its first
/// chunk, then the rest as it comes, from this process or, through the store, from another
/// one; 204 when the caller has no such stream.
///
/// # Errors
///
/// A stream over what is kept of it (410), or the store's failure (500).
///
/// # Cancel safety
///
/// Cancel safe: a reconnection dropped before it answers leaves the stream as it was.
pub(super) async fn reconnect(
    streams: &Streams,
    agent: &LlmAgent,
    name: &str,
    identity: Option<&Identity>,
    id: &str,
) -> Result<Response, Failure> {
    match streams.attach(&TurnKey::new(identity, name, id)) {
        Attached::Reader(written, reader) => Ok(response(id, Attached::body(written, reader))),
        Attached::TooLong => Err(Failure::new(
            StatusCode::GONE,
            Code::FrameTooLarge,
            format!(
                "stream `{}` is over the {} MiB kept for reconnecting to it: only its first \
                 client reads it",
                cap(id),
                RESUME_BYTES >> 20
            ),
        )),
        Attached::Nothing if agent.agent().is_client_managed() => Ok(not_found()),
        Attached::Nothing => {
            // Another process sharing the store may be streaming it: a snapshot of the
            // caller's sessions of this agent, or nothing.
            let store = agent::sessions_of(agent, identity);
            let followed = match store.entry(id).await {
                Ok(Some(entry)) => relay::follow(&store, &entry.id).await,
                Ok(None) => Ok(None),
                Err(error) => Err(error),
            };
            match followed {
                Ok(Some(body)) => Ok(response(id, body)),
                Ok(None) => Ok(not_found()),
                Err(error) => Err(agent::store_failed(&error)),
            }
        }
    }
}

/// No such stream: 204, which Genkit's client reports as `NOT_FOUND: Stream not found.`.
fn not_found() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// A streamed answer: the SSE of `body`, under stream `id`.
pub(super) fn response(id: &str, body: Body) -> Response {
    let mut response = bidi_http::sse::response(body);
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(STREAM_ID, value);
    }
    response
}
