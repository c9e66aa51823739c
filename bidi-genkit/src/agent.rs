//! Genkit's agent wire: an [`LlmAgent`] as Genkit's own agent client reaches an agent
//! (`remoteAgent` from the `genkit` package's beta client).
//!
//! - `POST /agent/{name}/genkit`: Genkit's flow wire (`{"data": input, "init": init}`, SSE of
//!   `{"message": chunk}` records then `{"result": output}` with `Accept: text/event-stream`,
//!   else `{"result": output}`). The input is Genkit's `AgentInput`: a user `message`, or a
//!   `resume` with `respond` (tool responses for the remote calls the last turn stopped for)
//!   and `restart` (the calls that wait for approval, approved, each with the input the client
//!   saw), and `detach` (answer at once with the running snapshot; the turn finishes without
//!   its client). The init of an agent that keeps its sessions is `snapshotId` (resume at that
//!   snapshot: a branch if it is not the latest) and/or `sessionId` (the session's latest
//!   snapshot, or a new session of that id), and a client's `state` is refused; that of a
//!   client-managed agent is the client's `state` (`{sessionId, messages, custom,
//!   artifacts}`), and ids are refused. Chunks are `modelChunk` (text, reasoning, tool
//!   requests as the model writes them; a `tool` chunk with each local tool's response),
//!   `artifact` and `customPatch` (a custom agent's changes: the first patch of a turn
//!   replaces the whole custom state, the next ones are RFC 6902 diffs) and one
//!   `turnEnd {snapshotId, finishReason}`; the output is `{sessionId, snapshotId, message,
//!   finishReason, error, artifacts}`, with `state` for a client-managed agent.
//! - Errors, as Genkit's servers give them: a streamed request that is refused is answered
//!   200, its failure in the stream's `error:` record (`{"error": {status, message,
//!   details}}`), which is where Genkit's client reads the status; a request that is not
//!   streamed gets the HTTP status and the same `{status, message}` in its body. An init that
//!   does not fit the agent is `FAILED_PRECONDITION` (a `state` sent to an agent that keeps its
//!   sessions, a `sessionId` or `snapshotId` sent to a client-managed one); a `snapshotId` of
//!   another session than the init's `sessionId`, or one that is not resumable, is
//!   `INVALID_ARGUMENT`; so is an id (`snapshotId`, `sessionId`, here and in `getSnapshot` and
//!   `abort`) that is empty or longer than 256 bytes. Messages never quote an id whole: past
//!   256 bytes they show its start and end. A resume the agent refuses (answers that do not
//!   fit the calls the session waits for) is a failed turn, not a failed request:
//!   `{finishReason: "failed", error: {status: "INVALID_ARGUMENT"}, sessionId, snapshotId}`,
//!   naming the session and the snapshot it stays at.
//! - Snapshots, as Genkit resumes them: only a `completed` snapshot is resumable; a
//!   `snapshotId` naming a failed, aborted, pending or expired one is refused
//!   (`INVALID_ARGUMENT`). A turn that fails writes a `failed` snapshot (its `turnEnd` names
//!   it), but the output's `snapshotId` is the last completed snapshot before it (none if the
//!   session's first turn failed), so that the client's next turn goes on from there. A
//!   `sessionId` goes on from the session's latest snapshot if it completed, else from the
//!   last completed one before it (a branch: the failed or aborted turn's messages are not in
//!   the history); a session whose latest turn still runs is busy. A session's first snapshot
//!   has no `parentId`: the empty snapshot the session was created with is not shown.
//! - Durable streams, as Genkit's stream manager keeps them: a streamed answer carries the
//!   header `x-genkit-stream-id`, the turn's snapshot id (for a client-managed agent, an id of
//!   its own), and the turn runs to its end when its client goes away. The same POST with
//!   that header (`streamFlow({url, streamId})`; the body is not read) answers the stream from
//!   its first chunk, then the rest and the output (or the `error:` record), while the turn
//!   runs in this process and for five minutes after it ended (in at most 16 MiB for all the
//!   streams that ended, the oldest forgotten first; see
//!   [`AgentWire::stream_retention`]),
//!   or from another process sharing a store that keeps streams (`PostgresStore`; then also
//!   for a minute after the turn), within the caller's identity only; else 204, which Genkit's
//!   client reports as `NOT_FOUND: Stream not found.`. A stream over 8 MiB is read by its
//!   first client only: a reconnection gets 410, and it is not kept after its end.
//! - `POST /agent/{name}/genkit/getSnapshot`: `{"data": {"snapshotId"} | {"sessionId"}}` →
//!   the snapshot (`{snapshotId, sessionId, parentId, createdAt, updatedAt, status,
//!   finishReason, error, state: {sessionId, messages}}`), or `null`.
//! - `POST /agent/{name}/genkit/abort`: `{"data": {"snapshotId"}}` → `{snapshotId, status}`,
//!   the status the snapshot had (none for a snapshot that does not exist); a pending one is
//!   aborted, and its turn stops at its next lease renewal, in whichever process runs it.
//!
//! Genkit's own client, `remoteAgent` from `genkit`'s beta client, is the peer the wire is
//! tested with, and Genkit's agent conformance spec (`tests/specs/agent.yaml` in the Genkit
//! repository) runs against it case by case: the repository's `tests/tests/genkit_spec.rs`
//! says which cases apply and how each runs.

mod init;
mod message;
mod stream;

pub use stream::STREAM_ID;
use stream::Streams;

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bidi_agent::AgentOutput;
use bidi_flow::text::cap;
use bidi_llm::{
    AgentEvent, Ending, LlmAgent, LlmSession, Message, Resume, ToolCall, TurnInput, TurnState,
};
use bidi_session::{self as snapshot, Change, Scoped, SessionStore, Snapshot};
use serde::Deserialize;
use serde_json::{Value, json};

use bidi_flow::wire::{Detached, Wire};

use bidi_http::agent;
use bidi_http::codec::{self, Code, Failure};
use bidi_http::extract::{Limited, Segments, Served};
use bidi_http::flow::wants_stream;
use bidi_http::tee::{Retention, Tees};
use bidi_http::{Host, Identity, Protocol};

/// Genkit's agent wire served by a [`bidi_http::Server`] for each of its agents: `POST
/// /agent/{name}/genkit` (a turn), `.../genkit/getSnapshot` and `.../genkit/abort`. See the
/// [module](self).
///
/// ```no_run
/// use bidi_genkit::agent::AgentWire;
/// use bidi_flow::Registry;
/// use bidi_http::Server;
/// use bidi_llm::LlmAgent;
/// use bidi_llm::testing::DemoModel;
///
/// # #[tokio::main]
/// # async fn main() -> std::io::Result<()> {
/// let assistant = LlmAgent::builder("assistant", DemoModel).build();
/// Server::new(Registry::new())
///     .agent(&assistant)
///     .protocol(AgentWire::new())
///     .bind()
///     .await?
///     .serve()
///     .await
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct AgentWire {
    retention: Retention,
}

impl Default for AgentWire {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentWire {
    /// The agent wire, streams that ended kept five minutes (in 16 MiB at most).
    pub fn new() -> Self {
        Self {
            retention: Retention::GENKIT,
        }
    }

    /// How long a stream that ended (a streamed turn) can still be read again with its
    /// `x-genkit-stream-id`, and how many bytes such streams hold at most, in all (default
    /// five minutes, as Genkit's stream manager keeps them, and 16 MiB). Past its time a
    /// stream is forgotten; past the bytes, the oldest are forgotten first. A reconnection
    /// then gets 204 (`NOT_FOUND: Stream not found.` to Genkit's client). A zero time or size
    /// keeps none: a stream is forgotten when its turn ends.
    pub fn stream_retention(mut self, time: std::time::Duration, bytes: usize) -> Self {
        self.retention = Retention { time, bytes };
        self
    }
}

impl Protocol for AgentWire {
    fn routes(&self, host: &Host) -> Router {
        let streams: Streams = Arc::new(Tees::with_retention(
            Arc::clone(host.kept()),
            self.retention,
        ));
        Router::new()
            .route("/{kind}/{name}/genkit", post(run))
            .route("/{kind}/{name}/genkit/getSnapshot", post(get_snapshot))
            .route("/{kind}/{name}/genkit/abort", post(abort))
            .layer(Extension(streams))
            .with_state(host.clone())
    }

    fn exposed_headers(&self) -> Vec<axum::http::HeaderName> {
        vec![STREAM_ID]
    }
}

/// `{"data": AgentInput, "init": AgentInit}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    data: Input,
    #[serde(default)]
    init: Option<init::Init>,
}

/// Genkit's `AgentInput`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Input {
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    resume: Option<ResumeInput>,
    #[serde(default)]
    detach: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeInput {
    #[serde(default)]
    respond: Option<Vec<Value>>,
    #[serde(default)]
    restart: Option<Vec<Value>>,
}

/// `{"data": {"snapshotId"} | {"sessionId"}}` and `{"data": {"snapshotId"}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lookup {
    data: LookupData,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LookupData {
    #[serde(default)]
    snapshot_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
}

fn refused(message: impl Into<String>, path: &str) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, Code::InvalidInput, message).at(path)
}

/// A request that does not fit how the agent keeps its sessions (Genkit's
/// `FAILED_PRECONDITION`).
fn precondition(message: String, path: &str) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, Code::FailedPrecondition, message).at(path)
}

/// Refuses what only an agent that keeps its sessions has: snapshots to read or abort.
fn keeps_sessions(agent: &LlmAgent, name: &str) -> Result<(), Failure> {
    if agent.agent().is_client_managed() {
        return Err(precondition(
            format!(
                "agent `{}` keeps no snapshots: its client keeps its state",
                cap(name)
            ),
            "/data",
        ));
    }
    Ok(())
}

/// `POST /agent/{name}/genkit`: one turn; or, with the header naming a stream, that stream
/// again. A streamed turn that is refused is answered as Genkit's servers answer it: 200, and
/// the failure as the stream's `error:` record.
async fn run(
    State(host): State<Host>,
    Extension(streams): Extension<Streams>,
    Served { agent, name }: Served,
    RawQuery(query): RawQuery,
    identity: Option<Extension<Identity>>,
    headers: HeaderMap,
    Limited(bytes): Limited,
) -> Result<Response, Failure> {
    let agent = &agent;
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    if let Some(id) = stream::requested(&headers)? {
        // What the client sends along (its first request again, or nothing) is not read: the
        // stream is that request's answer.
        return stream::reconnect(&streams, agent, &name, identity, &id).await;
    }
    let stream = wants_stream(&headers, query.as_deref());
    match turn((&host, &streams), (agent, &name), identity, stream, &bytes).await {
        Err(failure) if stream => {
            let mut buf = Vec::new();
            codec::error_record(&failure, &mut buf);
            Ok(bidi_http::sse::response(Body::from(buf)))
        }
        answered => answered,
    }
}

/// One turn of `agent` (served as `name`) for the request `bytes`, streamed or not.
async fn turn(
    (host, streams): (&Host, &Streams),
    (agent, name): (&LlmAgent, &str),
    identity: Option<&Identity>,
    stream: bool,
    bytes: &[u8],
) -> Result<Response, Failure> {
    let request: Request = codec::decode_object(bytes)?;
    let client = agent.agent().is_client_managed();
    let opened = init::open(agent, name, identity, request.init.unwrap_or_default()).await?;
    let detach = request.data.detach;
    if detach && client {
        return Err(precondition(
            format!(
                "Cannot detach from agent `{}`: it keeps no sessions for a turn to finish in",
                cap(name)
            ),
            "/data/detach",
        ));
    }
    let input = input(request.data)?;
    if detach {
        let encoder = Genkit::new(false, false, None);
        let started =
            agent::spawn(host, agent, opened.init, input, identity, encoder, Detached).await?;
        let output = json!({
            "sessionId": started.session_id,
            "snapshotId": started.snapshot_id,
            "finishReason": "detached",
        });
        return Ok(answer(&output, stream));
    }
    let encoder = Genkit::new(stream, client, opened.last_good.clone());
    let started = if stream {
        let turn = (opened.init, input);
        let started = stream::start((host, streams), agent, name, turn, identity, encoder);
        started.await.map(|(id, body)| (Some(id), body))
    } else {
        let started = agent::start(host, agent, opened.init, input, identity, encoder);
        started.await.map(|(_, body)| (None, body))
    };
    match started {
        Ok((Some(id), body)) => Ok(stream::response(&id, body)),
        Ok((None, body)) => Ok(json_response(body)),
        // The agent refused the input (answers that do not fit the calls the session waits
        // for): a failed turn, as Genkit reports one, not a failed request. The session stays
        // where it was: the output names it, and the snapshot the client goes on from.
        Err(failure) if failure.code == Code::InvalidInput => {
            let mut output = json!({
                "finishReason": "failed",
                "error": { "status": "INVALID_ARGUMENT", "message": failure.message },
            });
            if let Some(id) = opened.session_id {
                output["sessionId"] = json!(id);
            }
            if let Some(id) = opened.last_good {
                output["snapshotId"] = json!(id);
            }
            Ok(answer(&output, stream))
        }
        Err(failure) => Err(failure),
    }
}

/// The turn's input: a user message, or the responses to the calls the last turn stopped for.
fn input(input: Input) -> Result<TurnInput, Failure> {
    match (input.message, input.resume) {
        (Some(message), None) => message::user_message(&message)
            .map(TurnInput::User)
            .map_err(|reason| refused(reason, "/data/message")),
        (None, Some(resume)) => {
            let respond = resume.respond.unwrap_or_default();
            let restart = resume.restart.unwrap_or_default();
            let results = message::tool_results(&respond)
                .map_err(|reason| refused(reason, "/data/resume/respond"))?;
            let approvals = message::restarts(&restart)
                .map_err(|reason| refused(reason, "/data/resume/restart"))?;
            let resume = results.into_iter().fold(Resume::new(), Resume::result);
            let resume = approvals.into_iter().fold(resume, Resume::approval);
            Ok(TurnInput::Resume(resume))
        }
        (Some(_), Some(_)) => Err(refused("send a `message` or a `resume`, not both", "/data")),
        (None, None) => Err(refused(
            "nothing to do: send a `message` or a `resume`",
            "/data",
        )),
    }
}

/// The output as the answer the client asked for: an SSE `result` record, or `{"result"}`.
fn answer(output: &Value, stream: bool) -> Response {
    if stream {
        let mut buf = Vec::new();
        codec::result_record(output, &mut buf);
        bidi_http::sse::response(Body::from(buf))
    } else {
        json_response(Body::from(codec::result_body(output)))
    }
}

fn json_response(body: Body) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// Events as Genkit's agent chunks (when streaming) and its output at the end.
#[derive(Debug)]
struct Genkit {
    stream: bool,
    /// The client keeps the session's state: the output carries it, and no snapshot id.
    client: bool,
    session_id: String,
    snapshot_id: Option<String>,
    /// The turn's last model message.
    answer: Option<Message>,
    /// The remote calls the turn stopped for.
    pending: Vec<ToolCall>,
    /// The local calls running, by id: their results name the tool.
    running: Vec<(String, String)>,
    /// How the turn ends, as its events say.
    ending: Ending,
    /// `failed` wrote the end.
    cut: bool,
    error: Option<String>,
    /// The session's state, for a client that keeps it.
    state: Option<Value>,
    /// The session's artifacts when the connection ended.
    artifacts: Vec<bidi_agent::Artifact>,
    /// The custom state the last `customPatch` left the client with.
    custom: Option<Value>,
    /// The completed snapshot the turn goes on from, if the client has seen it: a failed
    /// turn's output names it, as the snapshot to go on from.
    last_good: Option<String>,
}

impl Genkit {
    fn new(stream: bool, client: bool, last_good: Option<String>) -> Self {
        Self {
            stream,
            client,
            session_id: String::new(),
            snapshot_id: None,
            answer: None,
            pending: Vec::new(),
            running: Vec::new(),
            ending: Ending::default(),
            cut: false,
            error: None,
            state: None,
            artifacts: Vec::new(),
            custom: None,
            last_good,
        }
    }

    fn chunk(&self, chunk: &Value, buf: &mut Vec<u8>) {
        if self.stream {
            codec::message_record(chunk, buf);
        }
    }

    fn model_chunk(&self, part: &Value, buf: &mut Vec<u8>) {
        let chunk = json!({ "modelChunk": { "role": "model", "index": 0, "content": [part] } });
        self.chunk(&chunk, buf);
    }

    fn finish_reason(&self) -> &'static str {
        self.ending
            .state()
            .map_or("failed", |turn| finish_reason(&turn))
    }

    fn result(&self) -> Value {
        let mut output = json!({
            "sessionId": self.session_id,
            "finishReason": self.finish_reason(),
        });
        // A failed turn's snapshot is not resumable: the output names the one before it, the
        // last completed, if the client has seen it.
        let snapshot = match self.finish_reason() {
            "failed" => self.last_good.as_ref(),
            _ => self.snapshot_id.as_ref(),
        };
        if let Some(id) = snapshot.filter(|_| !self.client) {
            output["snapshotId"] = json!(id);
        }
        if let Some(state) = &self.state {
            output["state"] = state.clone();
        }
        if !self.artifacts.is_empty() {
            output["artifacts"] = json!(self.artifacts);
        }
        if let Some(answer) = &self.answer {
            output["message"] = message::to_genkit(answer, &self.pending);
        }
        if let Some(error) = &self.error {
            output["error"] = json!({ "status": "INTERNAL", "message": error });
        }
        output
    }
}

impl Wire for Genkit {
    type Event = AgentEvent;
    type Output = AgentOutput<LlmSession, u32>;
    type Frames = Vec<u8>;

    const OUTPUT: bool = true;

    fn event(&mut self, event: AgentEvent, buf: &mut Vec<u8>) {
        self.ending.observe(&event);
        match &event {
            AgentEvent::SessionStart { session_id, .. } => {
                session_id.clone_into(&mut self.session_id);
            }
            AgentEvent::TextDelta { delta } => self.model_chunk(&json!({ "text": delta }), buf),
            AgentEvent::ThinkingDelta { delta } => {
                self.model_chunk(&json!({ "reasoning": delta }), buf);
            }
            AgentEvent::ToolcallEnd { tool_call, .. } => {
                self.model_chunk(&message::tool_request(tool_call, false), buf);
            }
            // Genkit has no retry: a custom part of the model's chunk carries it.
            AgentEvent::ModelRetry { .. } => {
                let retry = json!({ "custom": { "modelRetry": event.fields() } });
                self.model_chunk(&retry, buf);
            }
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                ..
            } => self.running.push((tool_call_id.clone(), tool_name.clone())),
            AgentEvent::ArtifactUpdate { artifact } => {
                self.chunk(&json!({ "artifact": artifact }), buf);
            }
            AgentEvent::CustomUpdate { custom } => {
                // The first patch of a turn gives the whole state; the next ones what changed.
                let patch = match &self.custom {
                    Some(before) => json!(Change::diff(before, custom)),
                    None => json!([{ "op": "replace", "path": "", "value": custom }]),
                };
                self.chunk(&json!({ "customPatch": patch }), buf);
                self.custom = Some(custom.clone());
            }
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                output,
                details,
                ..
            } => {
                let at = self.running.iter().position(|(id, _)| id == tool_call_id);
                let name = at.map(|at| self.running.swap_remove(at).1);
                let response = message::tool_response(
                    name.as_deref().unwrap_or_default(),
                    tool_call_id,
                    output,
                    details.as_deref(),
                );
                let chunk = json!({ "modelChunk": { "role": "tool", "content": [response] } });
                self.chunk(&chunk, buf);
            }
            AgentEvent::MessageEnd { message } => {
                if matches!(
                    **message,
                    Message::Assistant(_) | Message::Aborted(_) | Message::Error(_)
                ) {
                    self.answer = Some((**message).clone());
                }
            }
            AgentEvent::AwaitingToolExecution { tool_calls, .. }
            | AgentEvent::AwaitingApproval { tool_calls, .. } => {
                self.pending.extend(tool_calls.iter().cloned());
            }
            AgentEvent::Error { error, .. } => self.error = Some(error.clone()),
            AgentEvent::SessionEnd { snapshot_id, .. } => self.snapshot_id.clone_from(snapshot_id),
            AgentEvent::ExecuteComplete { .. } => {
                let mut turn_end = json!({ "turnEnd": { "finishReason": self.finish_reason() } });
                if let Some(id) = self.snapshot_id.as_ref().filter(|_| !self.client) {
                    turn_end["turnEnd"]["snapshotId"] = json!(id);
                }
                self.chunk(&turn_end, buf);
            }
            _ => {}
        }
    }

    fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        let failure = Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::ConnectionFailed,
            message,
        );
        if self.stream {
            codec::error_record(&failure, buf);
        } else {
            // The error body is strings: it always serializes.
            let _ = serde_json::to_writer(&mut *buf, &failure.body());
        }
        self.cut = true;
    }

    fn output(&mut self, output: &AgentOutput<LlmSession, u32>) {
        self.artifacts.clone_from(&output.state.artifacts);
        if self.client {
            self.state = Some(state(&output.session_id, &output.state));
        }
    }

    fn end(&mut self, buf: &mut Vec<u8>) {
        if self.cut || !self.ending.is_complete() {
            return; // `failed` wrote the end.
        }
        let output = self.result();
        if self.stream {
            codec::result_record(&output, buf);
        } else {
            buf.extend_from_slice(&codec::result_body(&output));
        }
    }
}

/// What a `getSnapshot` or `abort` request names, and the sessions of the agent it asks, as
/// its identity sees them.
fn lookup(
    host: &Host,
    kind: &str,
    name: &str,
    identity: Option<&Identity>,
    bytes: &[u8],
) -> Result<(LookupData, Scoped), Failure> {
    let agent = agent::agent(host, kind, name)?;
    keeps_sessions(agent, name)?;
    let Lookup { data } = codec::decode_object(bytes)?;
    let data = LookupData {
        snapshot_id: (data.snapshot_id)
            .map(|id| init::checked(id, "snapshotId", "/data/snapshotId"))
            .transpose()?,
        session_id: (data.session_id)
            .map(|id| init::checked(id, "sessionId", "/data/sessionId"))
            .transpose()?,
    };
    Ok((data, agent::sessions_of(agent, identity)))
}

/// `POST /agent/{name}/genkit/getSnapshot`: the snapshot, or `null`.
async fn get_snapshot(
    State(host): State<Host>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
    Limited(bytes): Limited,
) -> Result<Response, Failure> {
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let (data, store) = lookup(&host, &kind, &name, identity, &bytes)?;
    let found = match (&data.snapshot_id, &data.session_id) {
        (Some(id), session) => store.load_snapshot(id).await.map(|found| {
            found.filter(|s| session.as_ref().is_none_or(|sid| sid == s.session_id()))
        }),
        (None, Some(session)) => store.load(session).await,
        (None, None) => return Err(refused("send a `snapshotId` or a `sessionId`", "/data")),
    }
    .map_err(|error| agent::store_failed(&error))?;
    let output = found.as_ref().map_or(Value::Null, view);
    Ok(answer(&output, false))
}

/// A snapshot as Genkit's `SessionSnapshot`.
fn view(snapshot: &Snapshot) -> Value {
    let entry = &snapshot.entry;
    let mut view = json!({
        "snapshotId": entry.id,
        "sessionId": entry.session_id,
        "createdAt": bidi_http::time::rfc3339(entry.created_at),
        "updatedAt": bidi_http::time::rfc3339(entry.updated_at),
        "status": entry.status.as_str(),
    });
    // A session's first turn follows the empty snapshot the session was created with, which
    // no client saw: as in Genkit, a session's first snapshot has no parent.
    if let Some(parent) = entry.parent_id.as_ref().filter(|_| entry.version > 2) {
        view["parentId"] = json!(parent);
    }
    if let Some(error) = &entry.error {
        let message = error.get("message").cloned().unwrap_or(Value::Null);
        view["error"] = json!({ "status": "INTERNAL", "message": message });
    }
    // A pending snapshot's state is its parent's: Genkit shows none until it settles.
    if entry.status == snapshot::Status::Pending {
        return view;
    }
    if let Ok(state) = serde_json::from_value::<LlmSession>(snapshot.state.clone()) {
        view["state"] = self::state(&entry.session_id, &state);
        let turn = TurnState::stored(entry.status, entry.error.as_ref(), &state, |_| false);
        view["finishReason"] = json!(finish_reason(&turn));
    }
    view
}

/// A turn's state as Genkit's finish reason, read the same way from the turn's events and from
/// its snapshot: `interrupted` while calls wait, `aborted`, `stop`, or `failed` (an expired
/// turn too).
fn finish_reason(turn: &TurnState) -> &'static str {
    match turn {
        TurnState::Waiting { .. } => "interrupted",
        TurnState::Aborted => "aborted",
        TurnState::Completed => "stop",
        _ => "failed",
    }
}

/// A session's state as Genkit's `SessionState`: `{sessionId, messages, custom, artifacts}`.
fn state(session_id: &str, state: &LlmSession) -> Value {
    let mut view = json!({
        "sessionId": session_id,
        "messages": message::conversation(&state.messages, &state.pending_tool_calls),
    });
    if !state.custom.is_null() {
        view["custom"] = state.custom.clone();
    }
    if !state.artifacts.is_empty() {
        view["artifacts"] = json!(state.artifacts);
    }
    view
}

/// `POST /agent/{name}/genkit/abort`: `{snapshotId, status}`, the status it had.
async fn abort(
    State(host): State<Host>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
    Limited(bytes): Limited,
) -> Result<Response, Failure> {
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let (data, store) = lookup(&host, &kind, &name, identity, &bytes)?;
    let Some(id) = data.snapshot_id else {
        return Err(refused("send the `snapshotId` to abort", "/data"));
    };
    let previous = bidi_http::turns::abort(&store, &id).await?;
    let mut output = json!({ "snapshotId": id });
    if let Some(status) = previous {
        output["status"] = json!(status.as_str());
    }
    Ok(answer(&output, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model call tried again is a custom part of a model chunk: the event's fields.
    #[test]
    fn a_retry_is_a_custom_part_of_a_model_chunk() {
        let mut wire = Genkit::new(true, false, None);
        let mut buf = Vec::new();
        let retry = AgentEvent::ModelRetry {
            attempt: 2,
            model: "m".into(),
            delay_ms: 500,
            error: "overloaded".into(),
            discarded: false,
        };
        wire.event(retry, &mut buf);
        let text = String::from_utf8(buf).unwrap();
        let data = text.strip_prefix("data: ").unwrap().trim_end();
        let chunk: Value = serde_json::from_str(data).unwrap();
        let part = &chunk["message"]["modelChunk"]["content"][0]["custom"]["modelRetry"];
        assert_eq!(
            (part["attempt"].clone(), part["model"].clone()),
            (json!(2), json!("m"))
        );
        assert_eq!(part["error"], "overloaded");
    }
}
