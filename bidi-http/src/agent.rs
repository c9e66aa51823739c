//! The agent execute endpoints: `POST /agent/{name}/execute` runs one execution of an
//! [`LlmAgent`] as SSE of its events; `GET /agent/{name}/session/{id}` reads a session.
//!
//! It is also the kit every HTTP agent protocol starts its executions with. An endpoint is a
//! wire on the wire seam, started by `bidi_llm::peer`: [`spawn`] opens the connection in the request's scope
//! ([`Host::connect_options`]) and hands it to `bidi_llm::peer::Execution` with the endpoint's
//! [`HttpWire`] and a sink (the body's channel, a tee, or `bidi_flow::wire::Detached`); a refusal
//! becomes the endpoint's [`Failure`] before a byte is written.
//!
//! One agent, one store, every protocol: a session is the agent's `(scope, name, id)` in its
//! store, never a wire's, so every wire of an agent in one scope (execute, Genkit's agent and
//! flow wires, WebSocket, the UI message stream, AG-UI, A2A, MCP, and bidi-acp given that
//! scope with its `Server::scope`) takes turns of one conversation, in any process on the
//! store. Each turn claims the session by compare-and-swap on its head and writes what it
//! added, so turns of two wires never overwrite each other; a wire that keeps a connection
//! open between turns (ACP) reads the session again when its head moved. Each wire shows the
//! conversation in its own terms (a replay of `session/update`s, `UIMessage[]`, AG-UI
//! messages). The repository's `demo/tests/demo.rs` holds one conversation over the AI SDK's
//! client, the ACP TypeScript SDK's (another process) and the execute wire, read back over
//! AG-UI.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use bidi_agent::{AgentInit, AgentOutput};
use bidi_core::{ConnectOptions, Driver};
use bidi_flow::text::cap;
use bidi_flow::wire::{Detached, Sink, Wire};
use bidi_llm::peer::{Execution, Started};
use bidi_llm::takeover::Resumable;
use bidi_llm::{
    AgentEvent, Context, LlmAgent, LlmSession, Message, ModelOptions, Status, ToolCall, TurnInput,
    TurnState,
};
use bidi_session::{Scoped, Session, SessionStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::mpsc;

use crate::codec::{Code, Failure};
use crate::extract::{JsonBody, Segments, Served};
use crate::{Host, Identity};

/// The header that carries the session's id.
pub const SESSION_ID: HeaderName = HeaderName::from_static("x-session-id");

/// The agent endpoints: `POST /agent/{name}/execute` (one execution as SSE of its events),
/// the agent's sessions (`GET /agent/{name}/sessions`, `GET` and `DELETE
/// /agent/{name}/session/{id}`).
pub fn routes() -> Router<Host> {
    Router::new()
        .route("/{kind}/{name}/execute", post(execute))
        .route("/{kind}/{name}/sessions", get(sessions))
        .route(
            "/{kind}/{name}/session/{id}",
            get(session).delete(delete_session),
        )
}

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

/// The agent `name` serves, or 404.
pub fn agent<'a>(host: &'a Host, kind: &str, name: &str) -> Result<&'a LlmAgent, Failure> {
    host.agent(name).filter(|_| kind == "agent").ok_or_else(|| {
        Failure::new(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            format!("no agent is served under `/{kind}/{name}/`"),
        )
    })
}

/// `POST /agent/{name}/execute`: one execution, as SSE of its events.
async fn execute(
    State(host): State<Host>,
    Served { agent, .. }: Served,
    identity: Option<Extension<Identity>>,
    JsonBody { value: request, .. }: JsonBody<ExecuteRequest>,
) -> Result<Response, Failure> {
    let agent = &agent;
    // A session named without a context must exist: if not, it would be a new one without one.
    let resumed = match (&request.session_id, &request.context) {
        (Some(id), None) => Some(id.clone()),
        _ => None,
    };
    let init = init(agent, request.session_id, request.context, request.options)?;
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let started = if request.detach {
        let started = spawn(
            &host,
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
            &host,
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
            ..
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

/// The session an execute request names: resumed (`sessionId` alone), or new from its
/// `context` (under its `sessionId`, or one the agent gives it).
fn init(
    agent: &LlmAgent,
    session_id: Option<String>,
    context: Option<Context>,
    options: Option<ModelOptions>,
) -> Result<AgentInit<LlmSession>, Failure> {
    if options.is_some() && context.is_none() {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            "`options` are set when a session is created, with its `context`",
        )
        .at("/options"));
    }
    Ok(match (session_id, context) {
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
            state.options = options.unwrap_or_default();
            let init = AgentInit::new().init(state);
            match id {
                Some(id) => init.session_id(id),
                // The agent names the new session.
                None => init,
            }
        }
    })
}

/// The session `id` of `agent` as `identity` sees it (in its scope), if there is one.
///
/// # Errors
///
/// The store's, as a 500.
pub async fn load(
    agent: &LlmAgent,
    identity: Option<&Identity>,
    id: &str,
) -> Result<Option<Session<LlmSession>>, Failure> {
    let store: Arc<dyn SessionStore> = Arc::new(sessions_of(agent, identity));
    Session::load(store, id)
        .await
        .map_err(|error| store_failed(&error))
}

/// Starts one execution of `agent` on the session `init` names, with `input`, as `identity`:
/// once it has started, its session and snapshot and the response body its events make through
/// `wire`.
///
/// # Errors
///
/// The execution's refusal (a session that is running, an input that does not fit, a session
/// that does not exist: [`Code::NotFound`]) as the failure to answer.
pub async fn start<W: HttpWire>(
    host: &Host,
    agent: &LlmAgent,
    init: AgentInit<LlmSession>,
    input: TurnInput,
    identity: Option<&Identity>,
    wire: W,
) -> Result<(Started, Body), Failure> {
    let (writes, body) = mpsc::channel::<Vec<u8>>(1);
    let options = Host::connect_options(identity);
    let started = run(host, agent, (init, input), options, wire, writes).await?;
    Ok((started, crate::body::of_writes(body)))
}

/// A wire of an agent's events into a response body's bytes.
pub trait HttpWire:
    Wire<Event = AgentEvent, Output = AgentOutput<LlmSession, u32>, Frames = Vec<u8>> + 'static
{
}

impl<W> HttpWire for W where
    W: Wire<Event = AgentEvent, Output = AgentOutput<LlmSession, u32>, Frames = Vec<u8>> + 'static
{
}

/// [`start`], detached from its client: the body goes to `sink` (a tee of readers that come
/// and go, or nobody: `bidi_flow::wire::Detached`), and the execution runs to its end whoever
/// reads it. Should this process die meanwhile, another serving the agent on the same store
/// takes the execution over and runs it again ([`bidi_llm::takeover`]). `sink` is dropped when
/// the execution is over.
///
/// # Errors
///
/// As [`start`].
pub async fn spawn<W: HttpWire, S: Sink<Vec<u8>> + 'static>(
    host: &Host,
    agent: &LlmAgent,
    init: AgentInit<LlmSession>,
    input: TurnInput,
    identity: Option<&Identity>,
    wire: W,
    sink: S,
) -> Result<Started, Failure> {
    let options = Host::connect_options(identity).extension(Resumable);
    run(host, agent, (init, input), options, wire, sink).await
}

/// Runs one execution on a connection opened with `options`, its body written to `sink`.
async fn run<W: HttpWire, S: Sink<Vec<u8>> + 'static>(
    host: &Host,
    agent: &LlmAgent,
    (init, input): (AgentInit<LlmSession>, TurnInput),
    options: ConnectOptions,
    wire: W,
    sink: S,
) -> Result<Started, Failure> {
    let driver = Driver::new();
    let conn = agent.connect_with(init, options.driver(&driver));
    let started = Execution::new(conn, input)
        .action(driver.take())
        .idle_timeout(host.limits().idle_timeout)
        .start(wire, sink)
        .await?;
    Ok(started)
}

/// The execute endpoint's SSE: `event: {kind}` and the event's JSON.
#[derive(Debug, Default)]
pub struct Records {
    /// `execute_complete` was written: nothing comes after it.
    completed: bool,
}

impl Wire for Records {
    type Event = AgentEvent;
    type Output = AgentOutput<LlmSession, u32>;
    type Frames = Vec<u8>;

    fn event(&mut self, event: AgentEvent, buf: &mut Vec<u8>) {
        self.completed |= matches!(event, AgentEvent::ExecuteComplete { .. });
        event_record(&event, buf);
    }

    fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        if !self.completed {
            failed_event(message, buf);
        }
    }
}

/// `event: {kind}\ndata: {json}\n\n`.
fn event_record(event: &AgentEvent, buf: &mut Vec<u8>) {
    crate::sse::event(buf, event.kind(), event);
}

/// The `error` event of an execution the connection's end cut short.
fn failed_event(message: &str, buf: &mut Vec<u8>) {
    let event = AgentEvent::Error {
        code: Code::Other,
        error: message.to_owned(),
        message: None,
    };
    event_record(&event, buf);
}

/// `GET /agent/{name}/session/{id}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    session_id: String,
    status: Status,
    messages: Vec<Message>,
    /// The calls of the client's tools waiting for their results.
    pending_tool_calls: Vec<ToolCall>,
    /// The calls of the agent's tools waiting for a decision, as `execute_complete` names
    /// them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pending_approvals: Vec<ToolCall>,
}

/// The state of session `id` of the agent served under `/{kind}/{name}/`, as `identity` sees
/// it.
///
/// # Errors
///
/// No such agent or session (404), or the store's failure (500).
pub async fn stored(
    host: &Host,
    kind: &str,
    name: &str,
    identity: Option<&Identity>,
    id: &str,
) -> Result<LlmSession, Failure> {
    let agent = agent(host, kind, name)?;
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
#[must_use]
pub fn sessions_of(agent: &LlmAgent, identity: Option<&Identity>) -> Scoped {
    crate::scope(identity).sessions(agent.agent().name(), Arc::clone(agent.agent().store()))
}

/// A store failure, as a 500.
#[must_use]
pub fn store_failed(error: &bidi_session::StoreError) -> Failure {
    Failure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        Code::ConnectionFailed,
        error.to_string(),
    )
}

/// `GET /agent/{name}/sessions`: the ids of the sessions the identity asking has, sorted.
async fn sessions(
    Served { agent, .. }: Served,
    identity: Option<Extension<Identity>>,
) -> Result<Json<SessionList>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let ids = sessions_of(&agent, identity.as_ref())
        .list()
        .await
        .map_err(|error| store_failed(&error))?;
    Ok(Json(SessionList { sessions: ids }))
}

/// `GET /agent/{name}/sessions`.
#[derive(Debug, Serialize)]
pub struct SessionList {
    sessions: Vec<String>,
}

/// `DELETE /agent/{name}/session/{id}`: deletes the session (204), unless an execution runs on
/// it (409) or there is none (404).
async fn delete_session(
    Served { agent, .. }: Served,
    Segments((_, _, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<StatusCode, Failure> {
    let agent = &agent;
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

/// `GET /agent/{name}/session/{id}`: the session as the identity asking sees it, or 404: its
/// turn's state (`bidi_llm::TurnState`) as the execute wire says it. While an execution runs
/// on it, its status is `running` and its messages end with the message the execution
/// answers; while calls wait, `pendingToolCalls` names the client's and `pendingApprovals`
/// those waiting for a decision, as `execute_complete` does.
async fn session(
    State(host): State<Host>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<SessionView>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let agent = agent(&host, &kind, &name)?;
    let Some(session) = load(agent, identity.as_ref(), &id).await? else {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            format!("no session `{}`", cap(&id)),
        ));
    };
    let turn = agent.turn_state(&session);
    let (pending_tool_calls, pending_approvals) = match &turn {
        TurnState::Waiting { results, approvals } => (results.clone(), approvals.clone()),
        _ => (Vec::new(), Vec::new()),
    };
    Ok(Json(SessionView {
        session_id: id,
        status: turn.status(),
        messages: session.with_state(|state| state.messages.to_vec()),
        pending_tool_calls,
        pending_approvals,
    }))
}

/// Whether an execution runs on `session` as it was read: its head is pending under a lease
/// that holds (in this process or another).
#[must_use]
pub fn is_running(session: &Session<LlmSession>) -> bool {
    session.head().status == bidi_session::Status::Pending
}

/// What a user message does while calls of its session wait for the client: each protocol's
/// `waiting_calls` option sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitingCalls {
    /// The message is refused (400 `invalid_input`) until the calls are answered.
    Refuse,
    /// The calls are answered as set aside (errors saying the user moved on), then the
    /// message is answered.
    SetAside,
}
