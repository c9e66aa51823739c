//! [AG-UI](https://docs.ag-ui.com) 1.0: `POST /agent/{name}/ag-ui` takes a `RunAgentInput` and
//! answers SSE of AG-UI events, and [`Encoder`] turns an execution's [`AgentEvent`]s into those
//! events, for transports of your own. `@ag-ui/client`'s `HttpAgent` speaks it:
//!
//! ```js
//! const agent = new HttpAgent({ url: 'http://127.0.0.1:8080/agent/helper/ag-ui', threadId: 't-1' });
//! agent.addMessage({ id: 'u1', role: 'user', content: 'Deploy, please' });
//! const { newMessages } = await agent.runAgent({ tools: [confirmTool] });
//! ```
//!
//! # The endpoint
//!
//! [`AgUi`] serves it for each agent of a [`bidi_http::Server`], beside the server's other
//! wires. The `threadId` is the agent's session, in the request's identity's scope as with the execute
//! endpoint; each request is one execution.
//!
//! - A **new thread** is created from the input: the messages before its last one are the
//!   history (`system` and `developer` messages make the system prompt; `reasoning` and
//!   `activity` messages are left out), the input's `tools` are the session's **remote tools**,
//!   and the last message, which must be the user's, is answered.
//! - An **existing thread** goes on with its last message, a user message; only that one is
//!   read (the thread has the rest, and keeps the tools it was created with). When the thread
//!   waits for frontend tool results, the `tool` messages answering its pending calls are read
//!   instead, and must answer all of them.
//! - When the model calls a frontend tool, the run finishes (`RUN_FINISHED`, outcome `success`
//!   with the call in `pendingToolCallIds`); the next run's `tool` messages resume it.
//! - When the model calls a tool that needs approval
//!   ([`Tool::needs_approval`](bidi_llm::Tool::needs_approval)), the run finishes with outcome
//!   `interrupt`, one [`Interrupt`] per call (reason `tool_approval`, id `approval-` and the call's
//!   id), after a `MESSAGES_SNAPSHOT` of the thread. The next run's `resume` answers them:
//!   `resolved` approves (unless the payload says `"approved": false`), `cancelled` denies, and a
//!   payload's `reason` goes to the model with a denial. Every open interrupt must be answered;
//!   input without a `resume` while interrupts are open fails with `RUN_ERROR`
//!   (`interrupts_pending`), and so does a `resume` naming an interrupt the thread never had
//!   (`no_interrupt`). Resuming is idempotent: a `resume` whose interrupts were already answered
//!   is a run that does nothing.
//! - `state`, when the input has one, comes back as a `STATE_SNAPSHOT` (the agent keeps no
//!   state of its own). `context` and `forwardedProps` are read and ignored.
//!
//! A request that is not a run's (a body that is not a `RunAgentInput`, messages or tools that
//! do not fit, an unknown agent) gets the crate's JSON error (400, 404), its `path` pointing at
//! what is wrong. A run refused on its thread (another request runs it: `session_running`; its
//! stored state does not fit the agent: `session_incompatible`) is, for a client that accepts
//! `text/event-stream` as `HttpAgent` does, a stream of one `RUN_ERROR` with that `code`: AG-UI
//! clients show it as the run's error, where an HTTP error reaches the user as its raw body.
//! Other clients get the JSON error (409). Once the stream has started, a failure is
//! `RUN_ERROR`.
//!
//! # The events
//!
//! An execution becomes one run:
//!
//! | agent events | AG-UI events |
//! |---|---|
//! | `session_start` | `RUN_STARTED`, then `STATE_SNAPSHOT` of the input's `state` if it has one |
//! | `custom_update` (a custom agent's state) | `STATE_SNAPSHOT` of it |
//! | `text_start` / `text_delta` / `text_end` | `TEXT_MESSAGE_START` / `_CONTENT` / `_END`, the message id one per model answer |
//! | `thinking_start` / `thinking_delta` / `thinking_end` | `REASONING_START` + `REASONING_MESSAGE_START` / `REASONING_MESSAGE_CONTENT` / `REASONING_MESSAGE_END` + `REASONING_END` |
//! | `toolcall_start` / `toolcall_delta` / `toolcall_end` | `TOOL_CALL_START` (its parent the answer's message) / `TOOL_CALL_ARGS` (the arguments' text as the model writes it) / `TOOL_CALL_END` |
//! | `tool_execution_end` | `TOOL_CALL_RESULT` |
//! | `error` | `RUN_ERROR`, after the end events of every open block; nothing follows it |
//! | `tool_execution_data` | `CUSTOM{name, value: {toolCallId, data}}` |
//! | `model_retry` | the open block's end, then `CUSTOM{name: "model_retry", value: {attempt, model, delayMs, error, discarded, messageId}}`; when `discarded`, `messageId` is the voided answer's and the next attempt streams a new message |
//! | `awaiting_approval` | the run's interrupts |
//! | `execute_complete` | `RUN_FINISHED`: outcome `interrupt` (after `MESSAGES_SNAPSHOT`) when calls wait for approval; `success`, with `pendingToolCallIds` when remote tools wait for their results; `cancelled` when the model's answer was cut short by a cancellation. A client that sends no `protocolVersion` (before AG-UI 1.0, like CopilotKit's) gets a plain `success` in the last two cases, which its schema accepts |
//!
//! A tool call's arguments stream as the model writes them (JSON text, complete only at
//! `TOOL_CALL_END`; arguments the model got wrong stay the text it wrote). A call the model
//! left unfinished (its answer failed or was cancelled mid-call) still gets its
//! `TOOL_CALL_END`, before `RUN_ERROR` or the run's cancelled end: it has no result and is not
//! pending. Tool progress (`tool_execution_delta`) is not shown.

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::{
    AgentEvent, Approval, AssistantContent, AssistantMessage, Attachment, Context, Ending,
    LlmAgent, LlmSession, Message, Resume, Tool, ToolCall, ToolResultMessage, ToolSpec, TurnInput,
    TurnState, UserMessage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use bidi_http::agent::WaitingCalls;
use bidi_http::codec::{Code, Failure};
use bidi_http::extract::{JsonBody, Segments, Served};
use bidi_http::{Host, Identity, Protocol};

mod encoder;
mod history;
mod input;

use bidi_llm::{Block, Blocks};
pub use encoder::Encoder;
use encoder::Phase;

use input::{
    Answered, NO_INTERRUPT, RawMessages, RunAgentInput, create, interrupts, invalid, resume,
};

// ---------------------------------------------------------------------------------------------
// The events.

/// One AG-UI event: `type` tag in `SCREAMING_SNAKE_CASE`, `camelCase` fields, as `@ag-ui/core`
/// 1.0 defines them. Only the events an execution of an agent makes.
///
/// ```
/// use bidi_agui::Event;
/// use serde_json::json;
///
/// let event = Event::TextMessageContent { message_id: "m1".into(), delta: "Hi".into() };
/// assert_eq!(
///     serde_json::to_value(&event)?,
///     json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"}),
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum Event {
    /// The run began: always the first event.
    RunStarted {
        /// The thread: the agent's session.
        thread_id: String,
        /// The run, as the input named it.
        run_id: String,
    },
    /// The run ended without failing: the last event.
    RunFinished {
        /// The thread.
        thread_id: String,
        /// The run.
        run_id: String,
        /// How it ended.
        outcome: Outcome,
    },
    /// The run failed: the last event.
    RunError {
        /// What went wrong.
        message: String,
        /// What kind of failure: the agent's error code (`model`, `max_turns`, `store`, ...)
        /// or `connection_failed`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    /// The agent's state, whole.
    StateSnapshot {
        /// The state.
        snapshot: Value,
    },
    /// Data for the application: what a tool sent (`value`: `{toolCallId, data}`).
    Custom {
        /// What kind of data.
        name: String,
        /// The call and its data.
        value: Value,
    },
    /// The thread's messages, whole, as the client should have them: `@ag-ui/core` messages
    /// (`{id, role, content, toolCalls, toolCallId}`).
    MessagesSnapshot {
        /// The messages.
        messages: Vec<Value>,
    },
    /// A text message begins (or goes on: a message of several text blocks starts once per
    /// block).
    TextMessageStart {
        /// The message.
        message_id: String,
        /// Always `assistant`.
        role: String,
    },
    /// More text.
    TextMessageContent {
        /// The message.
        message_id: String,
        /// The new text; never empty.
        delta: String,
    },
    /// A text message's block ends.
    TextMessageEnd {
        /// The message.
        message_id: String,
    },
    /// A span of reasoning begins.
    ReasoningStart {
        /// The reasoning message.
        message_id: String,
    },
    /// A reasoning message begins.
    ReasoningMessageStart {
        /// The reasoning message.
        message_id: String,
        /// Always `reasoning`.
        role: String,
    },
    /// More reasoning.
    ReasoningMessageContent {
        /// The reasoning message.
        message_id: String,
        /// The new reasoning; never empty.
        delta: String,
    },
    /// A reasoning message ends.
    ReasoningMessageEnd {
        /// The reasoning message.
        message_id: String,
    },
    /// A span of reasoning ends.
    ReasoningEnd {
        /// The reasoning message.
        message_id: String,
    },
    /// A tool call begins.
    ToolCallStart {
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_call_name: String,
        /// The assistant message that makes the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    /// More of the call's arguments, JSON text.
    ToolCallArgs {
        /// The call.
        tool_call_id: String,
        /// The new argument text; never empty.
        delta: String,
    },
    /// The call's arguments are complete.
    ToolCallEnd {
        /// The call.
        tool_call_id: String,
    },
    /// What a tool the agent ran returned.
    ToolCallResult {
        /// The tool message it makes.
        message_id: String,
        /// The call.
        tool_call_id: String,
        /// The tool's output.
        content: String,
        /// Always `tool`.
        role: String,
    },
}

/// How a run ended without failing: `type` tag, `camelCase` fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum Outcome {
    /// It completed; frontend tool calls may wait for their results, which the next run's
    /// `tool` messages bring.
    Success {
        /// The calls waiting for their results.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending_tool_call_ids: Vec<String>,
    },
    /// It stopped to ask the user: the next run must answer every interrupt in its `resume`.
    Interrupt {
        /// What the run asks.
        interrupts: Vec<Interrupt>,
    },
    /// It was cancelled before it completed.
    Cancelled,
}

/// A question an interrupted run asks: here, whether a tool call that needs approval may run.
/// `camelCase` JSON.
///
/// The next run answers it with a `resume` entry naming its `id`: `status: "resolved"` approves
/// the call unless the `payload` says `"approved": false`; `status: "cancelled"` denies it.
/// A `reason` in the payload goes to the model with a denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Interrupt {
    /// The interrupt: `approval-` and the call's id.
    pub id: String,
    /// Always `tool_approval`.
    pub reason: String,
    /// What to show the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The call waiting for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The JSON Schema of the answer's payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

impl Interrupt {
    /// The interrupt asking whether `call` may run.
    #[must_use]
    pub fn approval(call: &ToolCall) -> Self {
        Self {
            id: format!("{APPROVAL}{}", call.id),
            reason: "tool_approval".to_owned(),
            message: Some(format!(
                "Allow `{}` to run with {}?",
                call.name, call.arguments
            )),
            tool_call_id: Some(call.id.clone()),
            response_schema: Some(serde_json::json!({
                "type": "object",
                "properties": {
                    "approved": {"type": "boolean"},
                    "reason": {"type": "string"},
                },
            })),
        }
    }
}

/// What an approval interrupt's id starts with.
const APPROVAL: &str = "approval-";

/// The endpoint's SSE: `data: {json}\n\n` per event.
#[derive(Debug)]
struct Sse {
    encoder: Encoder,
    events: Vec<Event>,
}

impl Sse {
    fn write(&mut self, buf: &mut Vec<u8>) {
        for event in self.events.drain(..) {
            bidi_http::sse::data(buf, &event);
        }
    }
}

/// A `TEXT_MESSAGE_CONTENT` or `REASONING_MESSAGE_CONTENT` event, borrowed: the same JSON as
/// its [`Event`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message_id: &'a str,
    delta: &'a str,
}

impl bidi_flow::wire::Wire for Sse {
    type Event = AgentEvent;
    type Output = bidi_agent::AgentOutput<LlmSession, u32>;
    type Frames = Vec<u8>;

    fn event(&mut self, event: AgentEvent, buf: &mut Vec<u8>) {
        // The hot path: a delta of the block already open is one event, written as it is,
        // without copying it into an `Event` first (what `Encoder::event` would make of it).
        if self.encoder.phase == Phase::Running {
            let blocks = &self.encoder.blocks;
            let content = match (&event, blocks.text(), blocks.reasoning()) {
                (AgentEvent::TextDelta { delta }, Some(id), _) => {
                    Some(("TEXT_MESSAGE_CONTENT", id, delta))
                }
                (AgentEvent::ThinkingDelta { delta }, _, Some(id)) => {
                    Some(("REASONING_MESSAGE_CONTENT", id, delta))
                }
                _ => None,
            };
            if let Some((kind, message_id, delta)) = content {
                if !delta.is_empty() {
                    bidi_http::sse::data(
                        buf,
                        &Delta {
                            kind,
                            message_id,
                            delta,
                        },
                    );
                }
                return;
            }
        }
        self.encoder.event(&event, &mut self.events);
        self.write(buf);
    }

    fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        self.encoder.failed(message, &mut self.events);
        self.write(buf);
    }

    fn end(&mut self, buf: &mut Vec<u8>) {
        self.encoder.end(&mut self.events);
        self.write(buf);
    }
}

/// AG-UI served by a [`bidi_http::Server`] for each of its agents: `POST
/// /agent/{name}/ag-ui` (a run) and `GET /agent/{name}/ag-ui/{threadId}` (the stored
/// thread). See the [crate docs](crate).
///
/// ```no_run
/// use bidi_agui::AgUi;
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
///     .protocol(AgUi::new())
///     .bind()
///     .await?
///     .serve()
///     .await
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct AgUi {
    waiting_calls: WaitingCalls,
}

impl Default for AgUi {
    fn default() -> Self {
        Self::new()
    }
}

impl AgUi {
    /// AG-UI, a user message setting aside the calls that wait for the client.
    pub fn new() -> Self {
        Self {
            waiting_calls: WaitingCalls::SetAside,
        }
    }

    /// What a user message does while client tool calls of its thread are still open:
    /// refused (400, the calls must be answered first), or the open calls are set aside (the
    /// default: each answered as an error saying the user moved on, which the model reads
    /// before the message), as AG-UI runtimes cancel a pending frontend tool when the user
    /// sends a new message. Interrupts (approvals) always need their `resume`, which AG-UI
    /// clients enforce.
    pub fn waiting_calls(mut self, waiting: WaitingCalls) -> Self {
        self.waiting_calls = waiting;
        self
    }
}

impl Protocol for AgUi {
    fn routes(&self, host: &Host) -> Router {
        Router::new()
            .route("/{kind}/{name}/ag-ui", post(run))
            .route("/{kind}/{name}/ag-ui/{thread}", get(messages))
            .layer(Extension(*self))
            .with_state(host.clone())
    }
}

/// `POST /agent/{name}/ag-ui`: one run, as SSE of AG-UI events.
async fn run(
    State(host): State<Host>,
    Extension(agui): Extension<AgUi>,
    Served { agent, .. }: Served,
    identity: Option<Extension<Identity>>,
    headers: HeaderMap,
    JsonBody {
        value: input,
        bytes,
    }: JsonBody<RunAgentInput>,
) -> Result<Response, Failure> {
    if input.thread_id.is_empty() {
        return Err(invalid("the `threadId` is empty", "/threadId"));
    }
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let started = start(&host, agui, &agent, identity, input, &bytes).await;
    match started {
        // What points into the request is the request's error; the rest is the run's.
        Err(failure) if failure.path.is_none() && accepts_events(&headers) => Ok(refused(failure)),
        started => started,
    }
}

/// Whether the request asks for an event stream, as AG-UI's `HttpAgent` does.
fn accepts_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
}

/// A run refused before it started, in AG-UI's terms: a stream of one `RUN_ERROR`, which
/// clients show as the run's error (an HTTP error reaches their users as its raw body).
fn refused(failure: Failure) -> Response {
    sse(&[Event::RunError {
        message: failure.message,
        code: Some(failure.code.as_str().to_owned()),
    }])
}

/// The run `input` asks for, on its thread: its events' stream, or why it cannot start.
async fn start(
    host: &Host,
    agui: AgUi,
    agent: &LlmAgent,
    identity: Option<&Identity>,
    input: RunAgentInput,
    bytes: &[u8],
) -> Result<Response, Failure> {
    let loaded = bidi_http::agent::load(agent, identity, &input.thread_id).await?;
    let entries = input.resume.unwrap_or_default();
    let (init, turn) = match loaded {
        Some(session) => {
            let state = session.state();
            let approvals = match interrupts(agent, &state, &entries) {
                Answered::Approvals(approvals) => approvals,
                Answered::Before => {
                    return Ok(sse(&[
                        Event::RunStarted {
                            thread_id: input.thread_id.clone(),
                            run_id: input.run_id.clone(),
                        },
                        Event::RunFinished {
                            thread_id: input.thread_id,
                            run_id: input.run_id,
                            outcome: Outcome::Success {
                                pending_tool_call_ids: Vec::new(),
                            },
                        },
                    ]));
                }
                Answered::Wrong { message, code } => {
                    return Ok(sse(&[Event::RunError {
                        message,
                        code: Some(code.to_owned()),
                    }]));
                }
            };
            (
                AgentInit::new().resume(&input.thread_id),
                resume(agent, &state, input.messages, approvals, agui.waiting_calls)?,
            )
        }
        None if !entries.is_empty() => {
            return Ok(sse(&[Event::RunError {
                message: "the thread is new: it has no interrupt to resume".to_owned(),
                code: Some(NO_INTERRUPT.to_owned()),
            }]));
        }
        None => {
            let (state, turn) = create(agent, input.messages, input.tools)?;
            (
                AgentInit::new().session_id(&input.thread_id).init(state),
                turn,
            )
        }
    };
    let mut encoder = Encoder::new(input.thread_id, input.run_id);
    if input.protocol_version.is_none() {
        encoder = encoder.before_1_0();
    }
    if let Some(state) = input.state {
        encoder = encoder.state(state);
    }
    if agent.tools().iter().any(Tool::requires_approval) {
        // The run may end with interrupts, after a snapshot of the messages.
        let raw: RawMessages = serde_json::from_slice(bytes)
            .map_err(|error| invalid(format!("bad messages: {error}"), "/messages"))?;
        encoder = encoder.messages(raw.messages);
    }
    let sse = Sse {
        encoder,
        events: Vec::new(),
    };
    let (_, body) = bidi_http::agent::start(host, agent, init, turn, identity, sse).await?;
    Ok(stream(body))
}

/// `GET /agent/{name}/ag-ui/{threadId}`: the stored thread as AG-UI messages (for a client
/// that reloads it), or 404.
async fn messages(
    State(host): State<Host>,
    Segments((kind, name, thread)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<axum::Json<Vec<Value>>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let state = bidi_http::agent::stored(&host, &kind, &name, identity.as_ref(), &thread).await?;
    Ok(axum::Json(history::messages(&state.messages)))
}

/// An SSE response of `body`.
fn stream(body: Body) -> Response {
    bidi_http::sse::response(body)
}

/// A run of `events` only, with no execution behind it.
fn sse(events: &[Event]) -> Response {
    let mut buf = Vec::new();
    for event in events {
        bidi_http::sse::data(&mut buf, event);
    }
    stream(Body::from(buf))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bidi_llm::Role;

    use super::*;

    #[test]
    fn the_written_stream_is_the_encoders_events_deltas_included() {
        use bidi_flow::wire::Wire as _;

        let events = [
            AgentEvent::SessionStart {
                session_id: "t".into(),
                snapshot_id: None,
            },
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::ThinkingStart,
            AgentEvent::ThinkingDelta {
                delta: "hmm \"quoted\"".into(),
            },
            AgentEvent::ThinkingDelta { delta: "".into() },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hi\nthere ✓".into(),
            },
            AgentEvent::TextDelta { delta: "".into() },
            AgentEvent::TextDelta {
                delta: " again".into(),
            },
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "pick".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{\"a\"".into(),
            },
        ];
        let mut sse = Sse {
            encoder: Encoder::new("t", "r"),
            events: Vec::new(),
        };
        let mut written = Vec::new();
        let mut encoder = Encoder::new("t", "r");
        let mut expected = Vec::new();
        for event in &events {
            sse.event(event.clone(), &mut written);
            let mut out = Vec::new();
            encoder.event(event, &mut out);
            for event in out {
                bidi_http::sse::data(&mut expected, &event);
            }
        }
        sse.failed("gone", &mut written);
        let mut out = Vec::new();
        encoder.failed("gone", &mut out);
        for event in out {
            bidi_http::sse::data(&mut expected, &event);
        }
        // Message ids are fresh per run: compare with them named by order of appearance.
        let normalize = |bytes: &[u8]| {
            let mut ids: Vec<String> = Vec::new();
            String::from_utf8(bytes.to_vec())
                .unwrap()
                .split("\n\n")
                .filter(|record| !record.is_empty())
                .map(|record| {
                    let mut event: Value =
                        serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap();
                    for field in ["messageId", "parentMessageId"] {
                        if let Some(Value::String(id)) = event.get_mut(field) {
                            let n = ids.iter().position(|known| known == id).unwrap_or_else(|| {
                                ids.push(id.clone());
                                ids.len() - 1
                            });
                            *id = format!("m{n}");
                        }
                    }
                    event
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(normalize(&written), normalize(&expected));
        assert!(
            String::from_utf8(written)
                .unwrap()
                .contains("TEXT_MESSAGE_CONTENT")
        );
    }
}
