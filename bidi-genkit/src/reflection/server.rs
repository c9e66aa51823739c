//! The reflection API's routes (version 1): health, notify, actions, values, `runAction` and
//! `cancelAction`, behind the checks of [`Access`].
//!
//! They answer over the server's registry: `GET /api/actions` is `GET /actions`'s descriptors.
//! `runAction` is the flow wire's run (`bidi_http::flow::records_body`, writing NDJSON records
//! instead of SSE's) whose headers carry the connection span's ids
//! (`JsonConnection::span_context`) before any body, and runs are kept by trace id for
//! `cancelAction`.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bidi_core::{Error, PeerGone};
use bidi_flow::idle::{Activity, Idle};
use bidi_flow::text::cap;
use bidi_flow::{JsonConnection, JsonError, JsonSendHalf, Registry};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use super::GENKIT_VERSION;
use super::access::Access;
use super::telemetry::Telemetry;
use bidi_http::codec::{self, Failure};
use bidi_http::flow::{self, CancelOnDrop, Records};
use bidi_http::{Host, Limits, serve};

/// Everything a reflection request needs.
pub(crate) struct Api {
    pub(crate) registry: Registry,
    /// The runtime's id, as its file says.
    pub(crate) id: String,
    pub(crate) limits: Limits,
    /// Who may call: the hosts, no browser, the secret, JSON bodies.
    pub(crate) access: Access,
    pub(crate) telemetry: Arc<Telemetry>,
    /// The runs going on, by trace id, for `cancelAction`.
    pub(crate) running: Mutex<HashMap<String, JsonSendHalf>>,
    /// Notified by the tools' `POST /api/notify`: they found the runtime, which stops
    /// announcing itself.
    pub(crate) found: Notify,
}

impl Api {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, JsonSendHalf>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Cancels the run of trace `trace_id`: whether one ran.
    pub(super) fn cancel(&self, trace_id: &str) -> bool {
        let Some(input) = self.running().remove(trace_id) else {
            return false;
        };
        input.cancel_with(CancelledByTools);
        true
    }

    /// The registry's descriptors, by key.
    pub(super) fn actions(&self) -> Map<String, Value> {
        self.registry
            .actions()
            .into_iter()
            .filter_map(|desc| Some((desc.key.clone(), serde_json::to_value(desc).ok()?)))
            .collect()
    }
}

/// The answer of `cancelAction` that found no run.
pub(super) const NOT_RUNNING: &str = "Action not found or already completed";

/// The answer of `cancelAction` that cancelled a run.
pub(super) const CANCELLED: &str = "Action cancelled";

/// The reflection API's router.
pub(crate) fn router(reflection: Arc<Api>) -> Router {
    let limits = reflection.limits;
    Router::new()
        .route("/api/__health", get(health))
        .route("/api/notify", post(notify))
        .route("/api/actions", get(actions))
        .route("/api/values", get(values))
        .route("/api/runAction", post(run_action))
        .route("/api/cancelAction", post(cancel_action))
        .fallback(no_route)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .with_state(Arc::clone(&reflection))
        .layer(serve::BodyDeadline::new(limits))
        .layer(axum::middleware::from_fn_with_state(reflection, guard))
}

/// Refuses a request [`Access`] does not let through, and stamps every answer with the
/// runtime's version, as Genkit's runtimes do.
async fn guard(State(reflection): State<Arc<Api>>, request: Request, next: Next) -> Response {
    let refusal = reflection
        .access
        .refusal(request.method(), request.headers());
    let mut response = match refusal {
        None => next.run(request).await,
        Some(refused) => refused,
    };
    response.headers_mut().insert(
        HeaderName::from_static("x-genkit-version"),
        HeaderValue::from_static(GENKIT_VERSION),
    );
    response
}

#[derive(Deserialize)]
struct HealthQuery {
    id: Option<String>,
}

/// `GET /api/__health?id=`: 200, or 503 when `id` names another runtime (a file left by a
/// process that had this port before).
async fn health(State(reflection): State<Arc<Api>>, Query(query): Query<HealthQuery>) -> Response {
    match query.id {
        Some(id) if id != reflection.id => {
            (StatusCode::SERVICE_UNAVAILABLE, "Invalid runtime ID").into_response()
        }
        _ => (StatusCode::OK, "OK").into_response(),
    }
}

/// `POST /api/notify {"telemetryServerUrl", "reflectionApiSpecVersion"}`: where to send spans
/// (unless `GENKIT_TELEMETRY_SERVER` said it first).
async fn notify(State(reflection): State<Arc<Api>>, body: Bytes) -> Response {
    reflection.found.notify_one();
    let notice: Map<String, Value> = match serde_json::from_slice(&body) {
        Ok(notice) => notice,
        Err(error) => {
            return (
                StatusCode::BAD_REQUEST,
                format!(
                    "the notice is not a JSON object: {}",
                    cap(&error.to_string())
                ),
            )
                .into_response();
        }
    };
    match notice.get("telemetryServerUrl") {
        None | Some(Value::Null) => {}
        Some(Value::String(url)) => {
            if let Err(refused) = reflection.telemetry.notify(url) {
                return (StatusCode::BAD_REQUEST, refused).into_response();
            }
        }
        Some(_) => {
            return (StatusCode::BAD_REQUEST, "`telemetryServerUrl` is a string").into_response();
        }
    }
    (StatusCode::OK, "OK").into_response()
}

/// `GET /api/actions`: the registry's descriptors, by key.
async fn actions(State(reflection): State<Arc<Api>>) -> Response {
    axum::Json(reflection.actions()).into_response()
}

#[derive(Deserialize)]
struct ValuesQuery {
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// `GET /api/values?type=defaultModel|middleware`: none; a bidi runtime has no default model
/// and no middleware to list.
async fn values(Query(query): Query<ValuesQuery>) -> Response {
    match values_of(query.kind.as_deref()) {
        Ok(values) => axum::Json(values).into_response(),
        Err(refused) => (StatusCode::BAD_REQUEST, refused).into_response(),
    }
}

/// The values of `kind`: none.
///
/// # Errors
///
/// No kind, or one the tools do not ask for.
pub(super) fn values_of(kind: Option<&str>) -> Result<Value, String> {
    match kind {
        None => Err("Query parameter \"type\" is required.".to_owned()),
        Some("defaultModel" | "middleware") => Ok(json!({})),
        Some(other) => Err(format!(
            "'type' {} is not supported. Only 'defaultModel' and 'middleware' are supported",
            cap(other)
        )),
    }
}

/// Any other path.
async fn no_route() -> Response {
    (
        StatusCode::NOT_FOUND,
        "no such route of Genkit's reflection API (version 1)",
    )
        .into_response()
}

/// `POST /api/runAction`: what to run.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunRequest {
    key: String,
    /// The one input; absent is `null`.
    #[serde(default)]
    input: Value,
    /// The init; absent or `null` for an action that takes none.
    #[serde(default)]
    init: Option<Value>,
    // `context` and `telemetryLabels`, which Genkit's actions read, and the tools' own fields
    // (`runtimeId`), mean nothing to a bidi action: they are accepted and left.
}

/// Why a connection was cancelled through `cancelAction`.
#[derive(Debug)]
struct CancelledByTools;

impl fmt::Display for CancelledByTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cancelled from Genkit's tools")
    }
}

impl std::error::Error for CancelledByTools {}

/// `POST /api/runAction[?stream=true]`: opens a connection with `init`, sends `input`, closes
/// the input, and answers at once with the trace's headers, then (streaming) each chunk as a
/// line of JSON, then the last line: `{"result", "telemetry": {"traceId"}}` or `{"error"}`.
async fn run_action(
    State(reflection): State<Arc<Api>>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    let stream = query
        .as_deref()
        .is_some_and(|query| query.split('&').any(|pair| pair == "stream=true"));
    let request: RunRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            let message = format!("not a run request: {}", cap(&error.to_string()));
            return error_response(StatusCode::OK, 3, &message, None);
        }
    };
    let conn = match open(&reflection.registry, &request.key, request.init) {
        Ok(conn) => conn,
        Err(Refused::NotFound(message)) => {
            return (StatusCode::NOT_FOUND, message).into_response();
        }
        Err(Refused::Failed(code, message)) => {
            return error_response(StatusCode::OK, code, &message, None);
        }
    };
    let ids = Ids::of(&conn);
    if conn.span_context().is_some() {
        reflection.telemetry.input(&ids.span, &request.input);
    }
    let (input, output) = conn.into_split();
    let guard = CancelOnDrop(Some(input.clone()));
    let running = Running::start(&reflection, &ids.trace, &input);
    if let Err(error @ JsonError::InvalidInput { .. }) = input.send(request.input).await {
        input.cancel_with("the request's input was refused");
        guard.disarm();
        let (code, message) = status(&error);
        let mut response = error_response(StatusCode::OK, code, &message, Some(&ids.trace));
        ids.stamp(response.headers_mut());
        return response;
    }
    // Any other failure to send: the action ended without the input, and its end says how.
    input.close();
    drop(input);
    let records = Ndjson {
        stream,
        trace_id: ids.trace.clone(),
        _running: running,
    };
    let idle = Idle::new(Activity::new(), reflection.limits.idle_timeout);
    let body = flow::records_body(None, output, idle, guard, records);
    let content_type = if stream {
        "text/plain"
    } else {
        "application/json"
    };
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    ids.stamp(response.headers_mut());
    response
}

/// Why a run did not start.
pub(super) enum Refused {
    /// No action has the key: its message.
    NotFound(String),
    /// The numeric gRPC code and message: an init the action refuses.
    Failed(u16, String),
}

/// Opens a run's connection to `key` with `init`, as [`connect`] does.
///
/// # Errors
///
/// An unknown key, an init given to an action that takes none, or one it refuses.
pub(super) fn open(
    registry: &Registry,
    key: &str,
    init: Option<Value>,
) -> Result<JsonConnection, Refused> {
    let Ok(desc) = registry.action(key) else {
        return Err(Refused::NotFound(format!("action {} not found", cap(key))));
    };
    let init = match init {
        Some(init) if !init.is_null() && desc.init_schema.is_none() => {
            return Err(Refused::Failed(3, format!("`{}` takes no init", cap(key))));
        }
        init => init.unwrap_or(Value::Null),
    };
    connect(registry, key, init).map_err(|error| {
        let (code, message) = status(&error);
        Refused::Failed(code, message)
    })
}

/// Opens a connection to `key` with `init`. A run without init (`null`, which is what
/// `genkit flow:run` sends) of an action whose init type does not take `null` gets the empty
/// object `{}`: an init type whose fields all have defaults (`#[serde(default)]`) runs with
/// them. An init type that takes neither is refused with a message saying how to pass one.
fn connect(registry: &Registry, key: &str, init: Value) -> Result<JsonConnection, JsonError> {
    let options = || {
        Host::connect_options(None)
            .input_buffer(1)
            .output_buffer(64)
    };
    if !init.is_null() {
        return registry.connect_json_with(key, init, options());
    }
    match registry.connect_json_with(key, Value::Null, options()) {
        Err(JsonError::InvalidInit { .. }) => {}
        connected => return connected,
    }
    registry
        .connect_json_with(key, Value::Object(Map::new()), options())
        .map_err(|error| match error {
            JsonError::InvalidInit { path, reason } => JsonError::InvalidInit {
                path,
                reason: format!(
                    "{reason}; this run sent no init (`genkit flow:run` sends none), and the \
                     action needs one: send an `init` with the run, or give the init type \
                     defaults (`#[derive(Default)]` and `#[serde(default)]`), which a run \
                     without init then gets"
                ),
            },
            other => other,
        })
}

/// A run's trace and span ids: its connection span's, or fresh ones for an untraced flow
/// (which a cancel can still name).
pub(super) struct Ids {
    pub(super) trace: String,
    pub(super) span: String,
}

impl Ids {
    pub(super) fn of(conn: &bidi_flow::JsonConnection) -> Self {
        match conn.span_context() {
            Some(span) => Self {
                trace: span.trace_id().to_string(),
                span: span.span_id().to_string(),
            },
            None => {
                let trace = bidi_session::new_id().replace('-', "");
                let span = trace[..16].to_owned();
                Self { trace, span }
            }
        }
    }

    /// Adds the headers Genkit's tools read before the body: the trace, the span, the version.
    fn stamp(&self, headers: &mut HeaderMap) {
        for (name, value) in [
            ("x-genkit-trace-id", self.trace.as_str()),
            ("x-genkit-span-id", self.span.as_str()),
            ("x-genkit-version", GENKIT_VERSION),
        ] {
            // Hex digits and the version are valid header values.
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
    }
}

/// A run in the `running` map while it goes on: removed when dropped.
pub(super) struct Running {
    reflection: Arc<Api>,
    trace_id: String,
}

impl Running {
    pub(super) fn start(reflection: &Arc<Api>, trace_id: &str, input: &JsonSendHalf) -> Self {
        reflection
            .running()
            .insert(trace_id.to_owned(), input.clone());
        Self {
            reflection: Arc::clone(reflection),
            trace_id: trace_id.to_owned(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.reflection.running().remove(&self.trace_id);
    }
}

/// The answer of `runAction`: each chunk as a line of JSON when streaming, then the last
/// line, without a newline (the tools read what follows the last newline as the end).
struct Ndjson {
    stream: bool,
    trace_id: String,
    _running: Running,
}

impl Records for Ndjson {
    fn chunk(&self, chunk: &RawValue, buf: &mut Vec<u8>) {
        if self.stream {
            buf.extend_from_slice(chunk.get().as_bytes());
            buf.push(b'\n');
        }
    }

    fn end(self, output: Result<Value, JsonError>, buf: &mut Vec<u8>) {
        let line = match output {
            Ok(result) => json!({"result": result, "telemetry": {"traceId": self.trace_id}}),
            Err(error) => {
                let (code, message) = status(&error);
                error_body(code, &message, Some(&self.trace_id))
            }
        };
        let _ = serde_json::to_writer(&mut *buf, &line);
    }
}

/// The numeric gRPC code and message of a run that failed: 3 for an init or input that does
/// not fit, 1 for a cancelled connection (4 for one idle too long), 13 for an action that
/// failed; a session an agent cannot find or take keeps its own code (5, 10).
pub(crate) fn status(error: &JsonError) -> (u16, String) {
    let connection = match error {
        JsonError::Connection(error) => Some(error),
        JsonError::Send(send) => send.error(),
        _ => None,
    };
    if let Some(Error::Cancelled(cause)) = connection {
        let code = match cause.peer_gone() {
            Some(PeerGone::Idle(_)) => 4,
            _ => 1,
        };
        return (code, format!("the action was cancelled: {cause}"));
    }
    let failure = Failure::from_json(error);
    (codec::grpc_code(&failure), failure.message)
}

/// `{"error": {"code", "message", "details": {"traceId"?}}}`: Genkit's error, whose
/// `details` the tools read (an object, always).
pub(super) fn error_body(code: u16, message: &str, trace_id: Option<&str>) -> Value {
    let details = match trace_id {
        Some(trace_id) => json!({"traceId": trace_id}),
        None => json!({}),
    };
    json!({"error": {"code": code, "message": message, "details": details}})
}

/// A refusal of status `status` with Genkit's error body.
pub(crate) fn error_response(
    status: StatusCode,
    code: u16,
    message: &str,
    trace: Option<&str>,
) -> Response {
    (status, axum::Json(error_body(code, message, trace))).into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelRequest {
    trace_id: String,
}

#[derive(Serialize)]
struct Message {
    message: &'static str,
}

/// `POST /api/cancelAction {"traceId"}`: cancels the run of that trace; 404 when none runs.
async fn cancel_action(State(reflection): State<Arc<Api>>, body: Bytes) -> Response {
    let Ok(CancelRequest { trace_id }) = serde_json::from_slice(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "traceId is required"})),
        )
            .into_response();
    };
    if !reflection.cancel(&trace_id) {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(Message {
                message: NOT_RUNNING,
            }),
        )
            .into_response();
    }
    axum::Json(Message { message: CANCELLED }).into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use bidi_core::{Cause, NotFound, SendError};

    use super::*;

    #[test]
    fn errors_have_grpc_codes() {
        let invalid = JsonError::InvalidInput {
            path: "/n".into(),
            reason: "expected u32".into(),
            input: json!("x"),
        };
        assert_eq!(status(&invalid).0, 3);
        let init = JsonError::InvalidInit {
            path: String::new(),
            reason: "expected a map".into(),
        };
        assert_eq!(status(&init).0, 3);
        let cancelled = JsonError::Connection(Error::Cancelled(Cause::new(CancelledByTools)));
        assert_eq!(
            status(&cancelled),
            (
                1,
                "the action was cancelled: cancelled from Genkit's tools".into()
            )
        );
        let gone = JsonError::Connection(Error::Cancelled(Cause::new(PeerGone::Disconnected)));
        assert_eq!(status(&gone).0, 1);
        let idle = Error::Cancelled(Cause::new(PeerGone::Idle(Duration::from_secs(300))));
        assert_eq!(status(&JsonError::Connection(idle.clone())).0, 4);
        assert_eq!(
            status(&JsonError::Send(SendError::Failed(json!(1), idle))).0,
            4
        );
        let failed = JsonError::Connection(Error::action("boom"));
        assert_eq!(status(&failed), (13, "action failed: boom".into()));
        let panicked = JsonError::Connection(Error::Panicked("oops".into()));
        assert_eq!(status(&panicked).0, 13);
        let missing = JsonError::NotFound(NotFound::new("action", "/flow/x"));
        assert_eq!(status(&missing).0, 5);
        let session = Error::action(bidi_session::StoreError::not_found("chat-9"));
        assert_eq!(status(&JsonError::Connection(session)).0, 5);
    }

    /// What `records` write for `chunks`, then `output`.
    fn written(
        records: impl Records,
        chunks: &[Value],
        output: Result<Value, JsonError>,
    ) -> String {
        let mut buf = Vec::new();
        for chunk in chunks {
            let chunk = serde_json::value::to_raw_value(chunk).unwrap();
            records.chunk(&chunk, &mut buf);
        }
        records.end(output, &mut buf);
        String::from_utf8(buf).unwrap()
    }

    fn ndjson(stream: bool) -> Ndjson {
        let reflection = Arc::new(Api {
            registry: Registry::new(),
            id: "1-3100".into(),
            limits: Limits::default(),
            access: Access::loopback(3100),
            telemetry: Arc::new(Telemetry::new(None)),
            running: Mutex::default(),
            found: Notify::new(),
        });
        Ndjson {
            stream,
            trace_id: "ab".into(),
            _running: Running {
                reflection,
                trace_id: "ab".into(),
            },
        }
    }

    #[test]
    fn answers_are_lines_of_json_and_the_last_has_no_newline() {
        let chunks = [json!({"left": 2}), json!("one")];
        assert_eq!(
            written(ndjson(true), &chunks, Ok(json!("done"))),
            "{\"left\":2}\n\"one\"\n{\"result\":\"done\",\"telemetry\":{\"traceId\":\"ab\"}}"
        );
        // Not streaming: no chunks, only the end.
        let failed = JsonError::Connection(Error::action("boom"));
        let last = written(ndjson(false), &chunks, Err(failed));
        assert!(!last.contains('\n'), "{last}");
        // The keys' order is serde_json's (insertion order with `preserve_order`).
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&last).unwrap(),
            json!({"error": {"code": 13, "message": "action failed: boom", "details": {"traceId": "ab"}}})
        );
    }
}
