//! The agent execute endpoints: `POST /agent/{name}/execute` runs one execution of an
//! [`LlmAgent`] as SSE of its events; `GET /agent/{name}/session/{id}` reads a session.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse as _, Response};
use bidi_agent::{AgentInit, AgentOutput};
use bidi_core::Connection;
use bidi_flow::text::cap;
use bidi_llm::{
    AgentEvent, Context, ErrorCode, LlmAgent, LlmSession, Message, ModelOptions, Status, ToolCall,
    TurnInput,
};
use bidi_session::{Scoped, Session, SessionStore};
use futures_util::{FutureExt as _, StreamExt as _};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::codec::{self, Code, Failure};
use crate::extract::Segments;
use crate::flow::body;
use crate::idle::{Activity, Idle};
use crate::{Disconnected, Identity, IdleTimeout, Shared};

/// The header that carries the session's id.
pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");

/// `POST /agent/{name}/execute`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExecuteRequest {
    /// The session; none creates one with a fresh id.
    #[serde(default)]
    session_id: Option<String>,
    /// A user message, or the results of the pending tool calls.
    input: TurnInput,
    /// The new session's system prompt, messages and remote tools.
    #[serde(default)]
    context: Option<Context>,
    /// How the new session's model calls sample their answers.
    #[serde(default)]
    options: Option<ModelOptions>,
    /// Answer at once (202, the session and the running snapshot) and let the execution run
    /// to its end without a client.
    #[serde(default)]
    detach: bool,
}

type AgentConnection = Connection<TurnInput, AgentOutput<LlmSession, u32>, AgentEvent>;

/// The agent `name` serves, or 404.
pub(crate) fn agent<'a>(
    shared: &'a Shared,
    kind: &str,
    name: &str,
) -> Result<&'a LlmAgent, Failure> {
    shared
        .agents
        .get(name)
        .filter(|_| kind == "agent")
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                Code::NotFound,
                format!("no agent is served under `/{kind}/{name}/`"),
            )
        })
}

/// `POST /agent/{name}/execute`: one execution, as SSE of its events.
pub(crate) async fn execute(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let agent = agent(&shared, &kind, &name)?;
    let bytes = body(bytes, shared.limits.max_body_bytes)?;
    let request: ExecuteRequest = codec::decode_object(&bytes)?;
    if request.options.is_some() && request.context.is_none() {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            "`options` are set when a session is created, with its `context`",
        )
        .at("/options"));
    }
    // A session named without a context must exist: if not, it would be a new one without one.
    let resumed = match (&request.session_id, &request.context) {
        (Some(id), None) => Some(id.clone()),
        _ => None,
    };
    let init = match (request.session_id, request.context) {
        (None, None) => {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::ContextRequired,
                "a new session needs a `context` (its system prompt, messages and tools); \
                 to go on with a session, send its `sessionId`",
            )
            .at("/context"));
        }
        (Some(id), None) => AgentInit::new().resume(id),
        (id, Some(context)) => {
            let mut state = agent.new_session(context).map_err(|error| {
                Failure::new(
                    StatusCode::BAD_REQUEST,
                    Code::InvalidInput,
                    error.to_string(),
                )
                .at("/context")
            })?;
            state.options = request.options.unwrap_or_default();
            let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            AgentInit::new().session_id(id).init(state)
        }
    };
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let started = if request.detach {
        let started = spawn(
            &shared,
            agent,
            init,
            request.input,
            identity,
            Records::default(),
            Detached,
        )
        .await;
        started.map(|started| (started, None))
    } else {
        let started = start(
            &shared,
            agent,
            init,
            request.input,
            identity,
            Records::default(),
        )
        .await;
        started.map(|(started, body)| (started, Some(body)))
    };
    let (
        Started {
            session_id,
            snapshot_id,
        },
        body,
    ) = match started {
        Ok(started) => started,
        Err(failure) => match resumed {
            Some(id) if failure.code == Code::NotFound => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    Code::ContextRequired,
                    format!(
                        "there is no session `{}`: a new session needs a `context`",
                        cap(&id)
                    ),
                )
                .at("/context"));
            }
            _ => return Err(failure),
        },
    };
    let mut response = match body {
        Some(body) => crate::sse::response(body),
        None => {
            let started = json!({ "sessionId": session_id, "snapshotId": snapshot_id });
            (StatusCode::ACCEPTED, Json(started)).into_response()
        }
    };
    if let Ok(value) = HeaderValue::from_str(&session_id) {
        response.headers_mut().insert(SESSION_ID, value);
    }
    Ok(response)
}

/// The session `id` of `agent` as `identity` sees it (in its scope), if there is one.
///
/// # Errors
///
/// The store's, as a 500.
pub(crate) async fn load(
    agent: &LlmAgent,
    identity: Option<&Identity>,
    id: &str,
) -> Result<Option<Session<LlmSession>>, Failure> {
    let store: Arc<dyn SessionStore> = Arc::new(sessions_of(agent, identity));
    Session::load(store, id)
        .await
        .map_err(|error| store_failed(&error))
}

/// What an execution that started says: its session, and the snapshot it writes (pending
/// while it runs).
#[derive(Debug, Clone)]
pub(crate) struct Started {
    pub(crate) session_id: String,
    pub(crate) snapshot_id: Option<String>,
}

/// Starts one execution of `agent` on the session `init` names, with `input`, as `identity`:
/// once it has started, its session and snapshot and the response body its events make through
/// `encoder`.
///
/// # Errors
///
/// The execution's refusal (a session that is running, an input that does not fit, a session
/// that does not exist: [`Code::NotFound`]) as the failure to answer.
pub(crate) async fn start<E: Encoder>(
    shared: &Shared,
    agent: &LlmAgent,
    init: AgentInit<LlmSession>,
    input: TurnInput,
    identity: Option<&Identity>,
    encoder: E,
) -> Result<(Started, Body), Failure> {
    let (writes, body) = mpsc::channel::<Bytes>(1);
    let started = spawn(shared, agent, init, input, identity, encoder, writes).await?;
    Ok((started, body_of(body)))
}

/// A response body of `writes`, in order.
pub(crate) fn body_of(writes: mpsc::Receiver<Bytes>) -> Body {
    let body = futures_util::stream::unfold(writes, |mut writes| async move {
        writes
            .recv()
            .await
            .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), writes))
    });
    Body::from_stream(body)
}

/// Where an execution's body goes, one write at a time: one client's response body, or more.
pub(crate) trait Writes: Send + Sync + 'static {
    /// Writes `bytes`, once there is room for them; fails once nobody reads any more.
    fn send(&self, bytes: Bytes) -> impl Future<Output = Result<(), Gone>> + Send;

    /// Completes once nobody reads any more.
    fn closed(&self) -> impl Future<Output = ()> + Send;
}

/// Nobody reads an execution's body any more.
#[derive(Debug)]
pub(crate) struct Gone;

/// Nobody reads, and nobody goes away: the body of a detached execution, which runs to its end
/// without its client.
#[derive(Debug)]
pub(crate) struct Detached;

impl Writes for Detached {
    async fn send(&self, bytes: Bytes) -> Result<(), Gone> {
        drop(bytes);
        Ok(())
    }

    async fn closed(&self) {
        std::future::pending::<()>().await;
    }
}

impl Writes for mpsc::Sender<Bytes> {
    async fn send(&self, bytes: Bytes) -> Result<(), Gone> {
        Self::send(self, bytes).await.map_err(|_| Gone)
    }

    async fn closed(&self) {
        Self::closed(self).await;
    }
}

/// [`start`], writing the body to `writes`: the execution runs while somebody reads it, and is
/// cancelled (as its client going away) once [`Writes::closed`] says nobody does. `writes` is
/// dropped when the execution is over.
///
/// # Errors
///
/// As [`start`].
pub(crate) async fn spawn<E: Encoder, W: Writes>(
    shared: &Shared,
    agent: &LlmAgent,
    init: AgentInit<LlmSession>,
    input: TurnInput,
    identity: Option<&Identity>,
    encoder: E,
    writes: W,
) -> Result<Started, Failure> {
    let conn = agent.connect_with(init, Shared::options(identity));
    let (head, answer) = oneshot::channel();
    let idle = Idle::new(Activity::new(), shared.limits.idle_timeout);
    tokio::spawn(run(conn, input, head, writes, idle, encoder));
    let started = match answer.await {
        Ok(started) => started?,
        Err(_) => {
            return Err(Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                Code::ConnectionFailed,
                "the execution ended before it started",
            ));
        }
    };
    Ok(started)
}

/// Turns an execution's events into a response body's bytes, one event at a time: the
/// execute endpoint's SSE records, AG-UI's events, the UI message stream's chunks.
pub(crate) trait Encoder: Send + 'static {
    /// Appends what `event` becomes to `buf` (perhaps nothing).
    fn event(&mut self, event: &AgentEvent, buf: &mut Vec<u8>);

    /// Appends what says the execution was cut short (its connection failed with `message`).
    fn failed(&mut self, message: &str, buf: &mut Vec<u8>);

    /// Whether the wire shows the connection's output ([`output`](Self::output)): the body
    /// then ends once the agent has returned it, not at the execution's last event.
    const OUTPUT: bool = false;

    /// Takes the connection's output (its session's state), before [`end`](Self::end), if
    /// [`OUTPUT`](Self::OUTPUT): what a wire that hands the state back to its client needs.
    fn output(&mut self, output: &AgentOutput<LlmSession, u32>) {
        let _ = output;
    }

    /// Appends what ends the body, after the last event (nothing by default).
    fn end(&mut self, buf: &mut Vec<u8>) {
        let _ = buf;
    }
}

/// The execute endpoint's SSE: `event: {kind}` and the event's JSON.
#[derive(Debug, Default)]
pub(crate) struct Records {
    /// `execute_complete` was written: nothing comes after it.
    completed: bool,
}

impl Encoder for Records {
    fn event(&mut self, event: &AgentEvent, buf: &mut Vec<u8>) {
        self.completed |= matches!(event, AgentEvent::ExecuteComplete { .. });
        event_record(event, buf);
    }

    fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        if !self.completed {
            failed_event(message, buf);
        }
    }
}

/// How many bytes of events a write gathers at most.
const WRITE_BATCH: usize = 16 * 1024;

/// Runs the execution: reports its start (the session's id) or its refusal through `head`, then
/// writes every event to `writes` as an SSE event named by its kind.
async fn run<E: Encoder, W: Writes>(
    mut conn: AgentConnection,
    input: TurnInput,
    head: oneshot::Sender<Result<Started, Failure>>,
    writes: W,
    mut idle: Idle,
    mut encoder: E,
) {
    let mut head = Some(head);
    let refuse = |head: &mut Option<oneshot::Sender<_>>, failure: Failure| {
        if let Some(head) = head.take() {
            let _ = head.send(Err(failure));
        }
    };
    let mut run = match bidi_llm::execute(&mut conn, input).await {
        Ok(run) => run,
        Err(error) => {
            let failure = match error.error() {
                Some(error) => Failure::from_connection(error),
                None => Failure::new(StatusCode::CONFLICT, Code::SendFailed, error.to_string()),
            };
            refuse(&mut head, failure);
            return;
        }
    };
    let mut buf = Vec::with_capacity(256);
    let mut stopped = false;
    loop {
        let next = tokio::select! {
            biased;
            next = run.next() => next,
            () = gone(&mut head, &writes), if !stopped => {
                run.cancel_with(Disconnected);
                stopped = true;
                continue;
            }
            () = idle.expired(), if !stopped => {
                run.cancel_with(IdleTimeout(idle.timeout()));
                stopped = true;
                continue;
            }
        };
        let event = match next {
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                let failure = Failure::from_connection(&error);
                if head.is_some() {
                    refuse(&mut head, failure);
                    return;
                }
                encoder.failed(&failure.message, &mut buf);
                break;
            }
            None => break,
        };
        if let Some(sender) = head.take() {
            match &event {
                AgentEvent::SessionStart {
                    session_id,
                    snapshot_id,
                } => {
                    let started = Started {
                        session_id: session_id.clone(),
                        snapshot_id: snapshot_id.clone(),
                    };
                    if sender.send(Ok(started)).is_err() {
                        run.cancel_with(Disconnected);
                        stopped = true;
                    }
                }
                AgentEvent::Error { code, error, .. } => {
                    let (status, code) = match code {
                        ErrorCode::SessionRunning => (StatusCode::CONFLICT, Code::SessionRunning),
                        ErrorCode::InvalidInput => (StatusCode::BAD_REQUEST, Code::InvalidInput),
                        _ => (StatusCode::INTERNAL_SERVER_ERROR, Code::ConnectionFailed),
                    };
                    let _ = sender.send(Err(Failure::new(status, code, error.clone())));
                    // The refusal's `execute_complete` and turn end: read and dropped.
                    let _ = run.result().await;
                    conn.close();
                    let _ = conn.output().await;
                    return;
                }
                _ => {
                    let _ = sender.send(Err(Failure::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Code::ConnectionFailed,
                        format!("the execution began with `{}`", event.kind()),
                    )));
                    return;
                }
            }
        }
        if stopped {
            continue;
        }
        encoder.event(&event, &mut buf);
        let mut ended = false;
        while buf.len() < WRITE_BATCH {
            match run.next().now_or_never() {
                Some(Some(Ok(event))) => encoder.event(&event, &mut buf),
                Some(Some(Err(error))) => {
                    encoder.failed(&Failure::from_connection(&error).message, &mut buf);
                    ended = true;
                    break;
                }
                Some(None) => {
                    ended = true;
                    break;
                }
                None => break,
            }
        }
        idle.touch();
        if ended {
            break;
        }
        if buf.is_empty() {
            continue; // Events the encoder shows as nothing.
        }
        let write = Bytes::from(std::mem::replace(&mut buf, Vec::with_capacity(256)));
        match idle.within(writes.send(write)).await {
            Some(Ok(())) => {}
            Some(Err(Gone)) => {
                run.cancel_with(Disconnected);
                stopped = true;
            }
            None => {
                run.cancel_with(IdleTimeout(idle.timeout()));
                stopped = true;
            }
        }
    }
    drop(run);
    conn.close();
    let output = conn.output();
    if stopped {
        let _ = output.await;
        return;
    }
    // The output first, if the wire shows it; else the body ends at once.
    let output = if E::OUTPUT {
        if let Some(Ok(output)) = idle.within(output).await {
            encoder.output(&output);
        }
        None
    } else {
        Some(output)
    };
    encoder.end(&mut buf);
    if !buf.is_empty() {
        let _ = idle.within(writes.send(Bytes::from(buf))).await;
    }
    if let Some(output) = output {
        let _ = output.await;
    }
}

/// Completes when nobody waits for the answer any more: the request was dropped before the
/// execution started, or the body after.
async fn gone(head: &mut Option<oneshot::Sender<Result<Started, Failure>>>, writes: &impl Writes) {
    match head {
        Some(head) => head.closed().await,
        None => writes.closed().await,
    }
}

/// `event: {kind}\ndata: {json}\n\n`.
fn event_record(event: &AgentEvent, buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(event.kind().as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    // Events are plain data: they always serialize.
    let _ = serde_json::to_writer(&mut *buf, event);
    buf.extend_from_slice(b"\n\n");
}

/// The `error` event of an execution the connection's end cut short.
fn failed_event(message: &str, buf: &mut Vec<u8>) {
    let event = AgentEvent::Error {
        code: ErrorCode::Other,
        error: message.to_owned(),
        message: None,
    };
    event_record(&event, buf);
}

/// `GET /agent/{name}/session/{id}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionView {
    session_id: String,
    status: Status,
    messages: Vec<Message>,
    pending_tool_calls: Vec<ToolCall>,
}

/// The state of session `id` of the agent served under `/{kind}/{name}/`, as `identity` sees
/// it.
///
/// # Errors
///
/// No such agent or session (404), or the store's failure (500).
pub(crate) async fn stored(
    shared: &Shared,
    kind: &str,
    name: &str,
    identity: Option<&Identity>,
    id: &str,
) -> Result<LlmSession, Failure> {
    let agent = agent(shared, kind, name)?;
    match load(agent, identity, id).await? {
        Some(session) => Ok(session.state()),
        None => Err(Failure::new(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            format!("no session `{}`", cap(id)),
        )),
    }
}

/// The sessions of `agent` that `identity` sees (its scope's).
pub(crate) fn sessions_of(agent: &LlmAgent, identity: Option<&Identity>) -> Scoped {
    crate::scope(identity).sessions(agent.agent().name(), Arc::clone(agent.agent().store()))
}

/// A store failure, as a 500.
pub(crate) fn store_failed(error: &bidi_session::StoreError) -> Failure {
    Failure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        Code::ConnectionFailed,
        error.to_string(),
    )
}

/// `GET /agent/{name}/sessions`: the ids of the sessions the identity asking has, sorted.
pub(crate) async fn sessions(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<SessionList>, Failure> {
    let agent = agent(&shared, &kind, &name)?;
    let identity = identity.map(|Extension(identity)| identity);
    let ids = sessions_of(agent, identity.as_ref())
        .list()
        .await
        .map_err(|error| store_failed(&error))?;
    Ok(Json(SessionList { sessions: ids }))
}

/// `GET /agent/{name}/sessions`.
#[derive(Debug, Serialize)]
pub(crate) struct SessionList {
    sessions: Vec<String>,
}

/// `DELETE /agent/{name}/session/{id}`: deletes the session (204), unless an execution runs on
/// it (409) or there is none (404).
pub(crate) async fn delete_session(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<StatusCode, Failure> {
    let agent = agent(&shared, &kind, &name)?;
    let identity = identity.map(|Extension(identity)| identity);
    let missing = || {
        Failure::new(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            format!("no session `{}`", cap(&id)),
        )
    };
    let Some(session) = load(agent, identity.as_ref(), &id).await? else {
        return Err(missing());
    };
    if session
        .head()
        .lease
        .is_some_and(|lease| !lease.is_expired())
    {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            Code::SessionRunning,
            format!(
                "session `{}` is busy with an answer; delete it once that has ended",
                cap(&id)
            ),
        ));
    }
    match sessions_of(agent, identity.as_ref()).delete(&id).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(missing()),
        Err(error) => Err(store_failed(&error)),
    }
}

/// `GET /agent/{name}/session/{id}`: the session as the identity asking sees it, or 404.
pub(crate) async fn session(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<SessionView>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let state = stored(&shared, &kind, &name, identity.as_ref(), &id).await?;
    Ok(Json(SessionView {
        session_id: id,
        status: state.status,
        messages: state.messages.into_vec(),
        pending_tool_calls: state.pending_tool_calls,
    }))
}
