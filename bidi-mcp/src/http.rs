//! The streamable HTTP endpoint: rmcp's service, its sessions bound to the identity that
//! opened them and capped, and the refusals of requests it cannot read in JSON-RPC's terms.
//!
//! `McpHttpService` wraps rmcp's `StreamableHttpService` and owns the session rules rmcp has
//! no hook for. Its session manager wraps rmcp's `LocalSessionManager` (whose `keep_alive` is
//! the idle lifetime) and books every session with its owner: created `Opening`, bound to the
//! `Identity` of the `initialize` request once its answer carries the id, removed when rmcp
//! closes it (a `DELETE`, the idle timeout, a failed start). The wrapper answers a request
//! naming a session not bound to the request's identity itself, 404 with `-32001` as for an
//! unknown one, before rmcp sees it, so another identity's request is never served, cancels
//! nothing and deletes nothing. An `initialize` takes a reservation (sessions plus
//! reservations at most `max_sessions`, else 503, `Retry-After`, `-32000`), given back when
//! its answer is out. The wrapper reads a POST's body first (kept as `Bytes`), so that rmcp's
//! 415 for a body it cannot parse becomes JSON-RPC's `-32700` or `-32600`. A session store is
//! never consulted, since a restored session would have no owner.
//!
//! A client that reopens an SSE stream names the last event it read (`Last-Event-ID`, as SSE
//! has it), and is owed the events after it. rmcp (3.9 to 3.11) replays from the event named,
//! so the client would read that one twice (a log record, a progress step): the wrapper names
//! the event after it instead ([`after`]). A `GET` that names none and replaces a session's
//! dead stream would get rmcp's whole cache again: the wrapper notes the last event of the
//! session's own stream that went out, and names it for such a `GET`. rmcp's priming event
//! (no data) has the id `0` on every stream, as the stream's first event does: a client naming
//! `0` when no event of the session's own stream went out read only the priming, and is owed
//! event `0`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionTransport,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::{Value, json};

use super::McpServer;
use bidi_http::Identity;

/// The JSON-RPC error of a session that is not found (the MCP SDKs' own).
const SESSION_NOT_FOUND: i64 = -32001;
/// The JSON-RPC error of a session refused because the server has as many as it allows: a
/// server error of JSON-RPC's implementation-defined range.
const TOO_MANY_SESSIONS: i64 = -32000;
/// JSON-RPC's parse error: the body is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request: the body is JSON, but not a JSON-RPC message.
const INVALID_REQUEST: i64 = -32600;
/// The header naming the last event a client read of a stream it reopens.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// How many seconds a client refused for the session cap is told to wait (`Retry-After`).
const RETRY_AFTER_SECONDS: u64 = 10;

/// The streamable HTTP endpoint of an [`McpServer`], a tower service to mount on a route (as
/// an `McpServer` added with [`Server::protocol`](bidi_http::Server::protocol) does at
/// `/mcp`): made by [`McpServer::http`] and
/// [`McpServer::http_with`].
///
/// Each session belongs to the identity whose request opened it; sessions are capped and end
/// when idle: see the [module](super).
#[derive(Clone)]
pub struct McpHttpService {
    inner: StreamableHttpService<McpServer, Sessions>,
    sessions: Arc<Sessions>,
    max_body_bytes: usize,
}

impl std::fmt::Debug for McpHttpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttpService")
            .field("config", &self.inner.config)
            .field("max_sessions", &self.sessions.max)
            .finish_non_exhaustive()
    }
}

impl McpHttpService {
    pub(super) fn new(server: McpServer, config: StreamableHttpServerConfig) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(server.sessions.idle_timeout);
        let sessions = Arc::new(Sessions {
            local,
            book: Mutex::default(),
            max: server.sessions.max,
        });
        let max_body_bytes = config.max_request_body_bytes;
        let inner =
            StreamableHttpService::new(move || Ok(server.clone()), Arc::clone(&sessions), config);
        Self {
            inner,
            sessions,
            max_body_bytes,
        }
    }

    /// Answers `request`.
    async fn handle(self, request: Request) -> Response {
        let identity = request.extensions().get::<Identity>().cloned();
        let session = request.headers().get(HEADER_SESSION_ID);
        if let Some(session) = session {
            // A session of another identity is answered as one that does not exist.
            let owned = session
                .to_str()
                .is_ok_and(|id| self.sessions.owned_by(id, identity.as_ref()));
            if !owned {
                return refusal(
                    StatusCode::NOT_FOUND,
                    &Value::Null,
                    SESSION_NOT_FOUND,
                    "session not found: it ended, or is not one of yours; open a new one with \
                     `initialize`",
                );
            }
        }
        if request.method() != Method::POST {
            return self.stream(request).await;
        }
        let opens = session.is_none();
        let json_body = is_json(request.headers().get(header::CONTENT_TYPE));
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, self.max_body_bytes).await {
            Ok(bytes) => bytes,
            Err(error) => return unreadable(&error, self.max_body_bytes),
        };
        // An `initialize` takes a place among the sessions for as long as it runs.
        let mut opening = None;
        if opens
            && let Ok(peek) = serde_json::from_slice::<Peek>(&bytes)
            && peek.method.as_deref() == Some("initialize")
        {
            match self.sessions.reserve() {
                Some(reserved) => opening = Some(reserved),
                None => return self.full(&peek.id),
            }
        }
        let request = Request::from_parts(parts, axum::body::Body::from(bytes.clone()));
        let response = self.inner.handle(request).await;
        if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE && json_body {
            // JSON the session manager could not read as a JSON-RPC message.
            if let Some(refused) = not_json_rpc(&bytes) {
                return refused;
            }
        }
        if opening.is_some()
            && let Some(id) = response
                .headers()
                .get(HEADER_SESSION_ID)
                .and_then(|id| id.to_str().ok())
        {
            self.sessions.bind(id, identity);
        }
        drop(opening);
        response.map(Body::new)
    }

    /// Answers a request other than a POST: a `GET` opens (or reopens) an SSE stream, which
    /// starts after the last event its client read: the one its `Last-Event-ID` names, else,
    /// on the session's own stream, the last one that went out on it (rmcp would send its whole
    /// cache again to a stream that replaces a dead one). The events of the session's own
    /// stream that go out are noted, for the next.
    async fn stream(&self, mut request: Request) -> Response {
        let session = request
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned);
        let resumed = request.headers().get(&LAST_EVENT_ID).cloned();
        let out = session.as_deref().and_then(|id| self.sessions.last_out(id));
        let last = match (&resumed, out) {
            // rmcp's priming event (no data) is `0` too: a client that names `0` read no event
            // of the session's own stream unless one went out.
            (Some(named), out) => named
                .to_str()
                .ok()
                .filter(|named| *named != "0" || out.is_some())
                .map(str::to_owned),
            (None, Some(out)) if request.method() == Method::GET => Some(out.to_string()),
            (None, _) => None,
        };
        if let Some(next) = last.as_deref().and_then(after) {
            request.headers_mut().insert(LAST_EVENT_ID, next);
        }
        let get = request.method() == Method::GET;
        let response = self.inner.handle(request).await.map(Body::new);
        let Some(id) = session.filter(|_| get) else {
            return response;
        };
        // The ids of the session's own stream are plain indexes (a request's are
        // `{index}/{request}`), whichever `GET` carries them.
        let sessions = Arc::clone(&self.sessions);
        let (parts, body) = response.into_parts();
        let events = body.into_data_stream().inspect(move |chunk| {
            if let Ok(bytes) = chunk
                && let Some(index) = last_event_index(bytes)
            {
                sessions.went_out(&id, index);
            }
        });
        Response::from_parts(parts, Body::from_stream(events))
    }

    /// The refusal of an `initialize` (whose JSON-RPC id is `id`) past the session cap.
    fn full(&self, id: &Value) -> Response {
        let message = format!(
            "the server has as many MCP sessions open as it allows ({}): end one (an HTTP \
             DELETE of its session), or try again later",
            self.sessions.max
        );
        let mut response = refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            TOO_MANY_SESSIONS,
            &message,
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        response
    }
}

impl tower_service::Service<Request> for McpHttpService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}

/// The id of the event after `last` (rmcp's ids: `{index}` on a session's own stream,
/// `{index}/{request}` on a request's), which rmcp takes as the first event to send again;
/// none for an id that is not rmcp's, left for rmcp to refuse.
fn after(last: &str) -> Option<HeaderValue> {
    let (index, request) = match last.split_once('/') {
        Some((index, request)) => (index, Some(request)),
        None => (last, None),
    };
    let next = index.parse::<usize>().ok()?.checked_add(1)?;
    let id = match request {
        Some(request) => format!("{next}/{request}"),
        None => next.to_string(),
    };
    HeaderValue::from_str(&id).ok()
}

/// The greatest id of the session's own stream (`{index}`, no request) among the events of
/// an SSE chunk that carry a message, if it has any (rmcp's priming event, with no data, is
/// no event of the stream: its id is `0` whatever the stream).
fn last_event_index(chunk: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(chunk).ok()?;
    text.split("\n\n")
        .filter(|event| {
            event.lines().any(|line| {
                line.strip_prefix("data:")
                    .is_some_and(|data| !data.trim().is_empty())
            })
        })
        .flat_map(|event| event.lines().filter_map(|line| line.strip_prefix("id:")))
        .filter_map(|id| id.trim().parse::<u64>().ok())
        .max()
}

/// What a request without a session says it is, read before rmcp reads it.
#[derive(Deserialize)]
struct Peek {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    method: Option<String>,
}

/// Whether a `Content-Type` is JSON's.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// A JSON-RPC error response with `status`, answering the request whose id is `id` (`null`
/// when it has none or it could not be read).
fn refusal(status: StatusCode, id: &Value, code: i64, message: &str) -> Response {
    let id = match id {
        Value::String(_) | Value::Number(_) => id.clone(),
        _ => Value::Null,
    };
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    });
    (status, axum::Json(body)).into_response()
}

/// The refusal of a body that is not JSON (`-32700`) or JSON but not a JSON-RPC message
/// (`-32600`); `None` when it is a JSON-RPC message after all (refused for another reason).
fn not_json_rpc(bytes: &Bytes) -> Option<Response> {
    let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
        return Some(refusal(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            PARSE_ERROR,
            "parse error: the body is not JSON",
        ));
    };
    if serde_json::from_value::<ClientJsonRpcMessage>(value.clone()).is_ok() {
        return None;
    }
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let message = match &value {
        Value::Array(_) => "invalid request: a JSON-RPC batch is not accepted; send one message",
        Value::Object(_) => {
            "invalid request: not a JSON-RPC 2.0 message (`jsonrpc: \"2.0\"` with a `method`, \
             or a `result` or an `error` with an `id`)"
        }
        _ => "invalid request: a JSON-RPC message is an object",
    };
    Some(refusal(
        StatusCode::BAD_REQUEST,
        &id,
        INVALID_REQUEST,
        message,
    ))
}

/// The refusal of a body that could not be read: too large (413), or broken off (400).
fn unreadable(error: &axum::Error, max: usize) -> Response {
    if error.to_string().contains("length limit") {
        let message = format!("invalid request: the body is larger than {max} bytes");
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Value::Null,
            INVALID_REQUEST,
            &message,
        );
    }
    refusal(
        StatusCode::BAD_REQUEST,
        &Value::Null,
        PARSE_ERROR,
        "parse error: the body could not be read",
    )
}

/// Who a session belongs to.
enum Owner {
    /// Its `initialize` is under way: nobody's yet.
    Opening,
    /// The identity of the request that opened it (none: a server without identities).
    Of(Option<Identity>),
}

/// The sessions and their owners, and how many `initialize`s are under way.
#[derive(Default)]
struct Book {
    owners: HashMap<SessionId, Owner>,
    opening: usize,
    /// The last event of each session's own stream that went out to its client.
    read: HashMap<SessionId, u64>,
}

/// rmcp's in-memory sessions, with the owner of each and a cap on how many there are.
pub(super) struct Sessions {
    local: LocalSessionManager,
    book: Mutex<Book>,
    max: usize,
}

impl Sessions {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a session about to open, if the cap leaves one.
    fn reserve(self: &Arc<Self>) -> Option<Reserved> {
        let mut book = self.book();
        if book.owners.len() + book.opening >= self.max {
            return None;
        }
        book.opening += 1;
        Some(Reserved(Arc::clone(self)))
    }

    /// Binds the session `id`, just opened, to `identity`.
    fn bind(&self, id: &str, identity: Option<Identity>) {
        if let Some(owner) = self.book().owners.get_mut(id) {
            *owner = Owner::Of(identity);
        }
    }

    /// Whether the session `id` is open and belongs to `identity`.
    fn owned_by(&self, id: &str, identity: Option<&Identity>) -> bool {
        matches!(self.book().owners.get(id), Some(Owner::Of(owner)) if owner.as_ref() == identity)
    }

    /// Notes that event `index` of session `id`'s own stream went out to its client.
    fn went_out(&self, id: &str, index: u64) {
        let mut book = self.book();
        if book.owners.contains_key(id) {
            let last = book.read.entry(Arc::from(id)).or_insert(index);
            *last = (*last).max(index);
        }
    }

    /// The last event of session `id`'s own stream that went out to its client, if any did.
    fn last_out(&self, id: &str) -> Option<u64> {
        self.book().read.get(id).copied()
    }
}

/// A place among the sessions, taken while an `initialize` runs; given back when dropped
/// (the session it opened, if any, holds its own).
struct Reserved(Arc<Sessions>);

impl Drop for Reserved {
    fn drop(&mut self) {
        let mut book = self.0.book();
        book.opening = book.opening.saturating_sub(1);
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = SessionTransport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.local.create_session().await?;
        self.book().owners.insert(id.clone(), Owner::Opening);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        {
            let mut book = self.book();
            book.owners.remove(id);
            book.read.remove(id);
        }
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<
        impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.local.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<
        impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<
        impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.local.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        _id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // A session kept elsewhere has no owner here: it is not restored.
        Ok(RestoreOutcome::NotSupported)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.local.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_stream_starts_after_the_event_its_client_read() {
        let id = |last: &str| after(last).and_then(|id| id.to_str().ok().map(str::to_owned));
        assert_eq!(id("7").as_deref(), Some("8"));
        assert_eq!(id("0/3").as_deref(), Some("1/3"));
        assert_eq!(id("not-rmcp"), None);
        assert_eq!(id(&usize::MAX.to_string()), None);
    }

    #[test]
    fn the_ids_of_a_sessions_own_stream_are_read_from_its_chunks() {
        let chunk = b"id: 3\ndata: {}\n\nid: 4\ndata: {}\n\n";
        assert_eq!(last_event_index(chunk), Some(4));
        assert_eq!(last_event_index(b"id: 2/7\ndata: {}\n\n"), None);
        assert_eq!(last_event_index(b": keep-alive\n\n"), None);
        // rmcp's priming event: no data, and `0` on every stream.
        assert_eq!(last_event_index(b"data: \nid: 0\nretry: 3000\n\n"), None);
    }
}
