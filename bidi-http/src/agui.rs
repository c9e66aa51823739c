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
//! The `threadId` is the agent's session, in the request's identity's scope as with the execute
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
//! | `text_start` / `text_delta` / `text_end` | `TEXT_MESSAGE_START` / `_CONTENT` / `_END`, the message id one per model answer |
//! | `thinking_start` / `thinking_delta` / `thinking_end` | `REASONING_START` + `REASONING_MESSAGE_START` / `REASONING_MESSAGE_CONTENT` / `REASONING_MESSAGE_END` + `REASONING_END` |
//! | `toolcall_start` / `toolcall_delta` / `toolcall_end` | `TOOL_CALL_START` (its parent the answer's message) / `TOOL_CALL_ARGS` (the arguments' text as the model writes it) / `TOOL_CALL_END` |
//! | `tool_execution_end` | `TOOL_CALL_RESULT` |
//! | `error` | `RUN_ERROR`, after the end events of every open block; nothing follows it |
//! | `tool_execution_data` | `CUSTOM{name, value: {toolCallId, data}}` |
//! | `awaiting_approval` | the run's interrupts |
//! | `execute_complete` | `RUN_FINISHED`: outcome `interrupt` (after `MESSAGES_SNAPSHOT`) when calls wait for approval; `success`, with `pendingToolCallIds` when remote tools wait for their results; `cancelled` when the model's answer was cut short by a cancellation. A client that sends no `protocolVersion` (before AG-UI 1.0, like CopilotKit's) gets a plain `success` in the last two cases, which its schema accepts |
//!
//! A tool call's arguments stream as the model writes them (JSON text, complete only at
//! `TOOL_CALL_END`; arguments the model got wrong stay the text it wrote). A call the model
//! left unfinished (its answer failed or was cancelled mid-call) still gets its
//! `TOOL_CALL_END`, before `RUN_ERROR` or the run's cancelled end: it has no result and is not
//! pending. Tool progress (`tool_execution_delta`) is not shown.

use std::sync::Arc;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::{
    AgentEvent, Approval, AssistantContent, AssistantMessage, Attachment, Context, ErrorCode,
    LlmAgent, LlmSession, Message, Resume, Tool, ToolCall, ToolResultMessage, ToolSpec, TurnInput,
    UserMessage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{self, Code, Failure};
use crate::extract::Segments;
use crate::flow::body;
use crate::{Identity, Shared, WaitingCalls};

mod history;
mod input;

use input::{
    Answered, NO_INTERRUPT, RawMessages, RunAgentInput, create, interrupts, invalid, resume,
};

// ---------------------------------------------------------------------------------------------
// The events.

/// One AG-UI event: `type` tag in `SCREAMING_SNAKE_CASE`, `camelCase` fields, as `@ag-ui/core`
/// 1.0 defines them. Only the events an execution of an agent makes.
///
/// ```
/// use bidi_http::agui::Event;
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

// ---------------------------------------------------------------------------------------------
// The encoder.

/// Turns one execution's [`AgentEvent`]s into the AG-UI events of one run, in an order
/// `@ag-ui/client` accepts, whatever the execution did: `RUN_STARTED` first; every text,
/// reasoning and tool call block ended before the run's last event; exactly one last event,
/// `RUN_FINISHED` or `RUN_ERROR`, and nothing after it.
///
/// ```
/// use bidi_http::agui::Encoder;
/// use bidi_llm::AgentEvent;
///
/// let mut encoder = Encoder::new("thread-1", "run-1");
/// let mut events = Vec::new();
/// encoder.event(&AgentEvent::SessionStart { session_id: "thread-1".into() }, &mut events);
/// encoder.event(&AgentEvent::TextStart, &mut events);
/// encoder.event(&AgentEvent::TextDelta { delta: "Hi".into() }, &mut events);
/// // The execution's connection fails mid-text: the text ends, then the run fails.
/// encoder.failed("the connection failed", &mut events);
/// let kinds: Vec<_> = events.iter().map(|event| {
///     serde_json::to_value(event).unwrap()["type"].as_str().unwrap().to_owned()
/// }).collect();
/// assert_eq!(kinds, [
///     "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_ERROR",
/// ]);
/// // Nothing follows RUN_ERROR.
/// encoder.end(&mut events);
/// assert_eq!(events.len(), 5);
/// ```
#[derive(Debug)]
pub struct Encoder {
    thread_id: String,
    run_id: String,
    state: Option<Value>,
    phase: Phase,
    /// The message of the model's current answer, once it has one.
    message_id: Option<String>,
    /// The text, reasoning or tool call block being streamed.
    open: Option<Open>,
    /// A model answer was cut short by a cancellation.
    cancelled: bool,
    /// The calls waiting for approval: the run's interrupts.
    interrupts: Vec<Interrupt>,
    /// The messages as the client has them, for snapshots; `None`: no snapshots.
    snapshot: Option<Snapshot>,
    /// Write `RUN_FINISHED` as clients before AG-UI 1.0 read it.
    legacy: bool,
}

/// The thread's messages as the client sees them: those it sent, then the run's, under the ids
/// the run's events gave them.
#[derive(Debug, Default)]
struct Snapshot {
    messages: Vec<Value>,
    /// The reasoning messages of the current answer, by id, in order.
    reasoning: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing written yet.
    Idle,
    /// `RUN_STARTED` written.
    Running,
    /// `RUN_FINISHED` or `RUN_ERROR` written: nothing more.
    Ended,
}

#[derive(Debug)]
enum Open {
    Text(String),
    Reasoning(String),
    /// A tool call, by its id.
    ToolCall(String),
}

/// A fresh id for a message of the run: 64 random bits, short because it is in every delta
/// (`m-` and 16 hex digits: 18 bytes, not a UUID's 36).
fn new_id() -> String {
    format!("m-{:016x}", uuid::Uuid::new_v4().as_u64_pair().0)
}

impl Encoder {
    /// An encoder for the run `run_id` of the thread `thread_id`.
    pub fn new(thread_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            state: None,
            phase: Phase::Idle,
            message_id: None,
            open: None,
            cancelled: false,
            interrupts: Vec::new(),
            snapshot: None,
            legacy: false,
        }
    }

    /// Writes the run's end as clients before AG-UI 1.0 read it (those that send no
    /// `protocolVersion`, like CopilotKit's, whose schema refuses keys it does not know): a
    /// success outcome names no pending tool calls (the run's messages show them), and a
    /// cancelled run ends as a success (its messages show the answer cut short). Interrupts
    /// are the same in both.
    #[must_use]
    pub fn before_1_0(mut self) -> Self {
        self.legacy = true;
        self
    }

    /// Sends a `MESSAGES_SNAPSHOT` before a run finishes with interrupts: `messages` (the
    /// input's, `@ag-ui/core` messages) and then the run's own.
    #[must_use]
    pub fn messages(mut self, messages: Vec<Value>) -> Self {
        self.snapshot = Some(Snapshot {
            messages,
            reasoning: Vec::new(),
        });
        self
    }

    /// Sends `state` as a `STATE_SNAPSHOT` right after `RUN_STARTED` (the agent keeps no state
    /// of its own: this echoes the client's).
    #[must_use]
    pub fn state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// Whether the run's last event is written: what comes next is dropped.
    #[must_use]
    pub fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// Appends what `event` becomes to `out` (perhaps nothing).
    pub fn event(&mut self, event: &AgentEvent, out: &mut Vec<Event>) {
        if self.phase == Phase::Ended {
            return;
        }
        self.start(out);
        match event {
            AgentEvent::MessageStart { .. } => {
                self.close(out);
                self.message_id = None;
            }
            AgentEvent::TextStart => {
                self.close(out);
                self.open_text(out);
            }
            AgentEvent::TextDelta { delta } => self.content(false, delta, out),
            AgentEvent::ThinkingStart => {
                self.close(out);
                self.open_reasoning(out);
            }
            AgentEvent::ThinkingDelta { delta } => self.content(true, delta, out),
            AgentEvent::TextEnd { .. } | AgentEvent::ThinkingEnd { .. } => self.close(out),
            AgentEvent::ToolcallStart {
                tool_call_id,
                tool_name,
                ..
            } => {
                self.close(out);
                // A start without its id (from a producer that does not send it) waits for the
                // call's end, which streams it whole.
                if !tool_call_id.is_empty() {
                    self.open_tool_call(tool_call_id, tool_name, out);
                }
            }
            AgentEvent::ToolcallDelta { delta, .. } => {
                if let Some(Open::ToolCall(id)) = &self.open
                    && !delta.is_empty()
                {
                    out.push(Event::ToolCallArgs {
                        tool_call_id: id.clone(),
                        delta: delta.clone(),
                    });
                }
            }
            AgentEvent::ToolcallEnd { tool_call, .. } => {
                if matches!(&self.open, Some(Open::ToolCall(id)) if *id == tool_call.id) {
                    self.close(out);
                } else {
                    // An end without its start: the whole call at once.
                    self.close(out);
                    let parent = self.message_id().to_owned();
                    self.tool_call(tool_call, parent, out);
                }
            }
            AgentEvent::MessageEnd { message } => {
                self.close(out);
                self.cancelled |= matches!(**message, Message::Aborted(_));
                let message_id = self.message_id.take();
                if let Some(snapshot) = &mut self.snapshot {
                    snapshot.answer(message, message_id);
                }
            }
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                output,
                ..
            } => {
                let message_id = new_id();
                if let Some(snapshot) = &mut self.snapshot {
                    snapshot.messages.push(serde_json::json!({
                        "id": message_id, "role": "tool", "toolCallId": tool_call_id,
                        "content": output,
                    }));
                }
                out.push(Event::ToolCallResult {
                    message_id,
                    tool_call_id: tool_call_id.clone(),
                    content: output.clone(),
                    role: "tool".to_owned(),
                });
            }
            AgentEvent::AwaitingApproval { tool_calls, .. } => {
                self.interrupts = tool_calls.iter().map(Interrupt::approval).collect();
            }
            AgentEvent::ToolExecutionData {
                tool_call_id,
                name,
                data,
            } => out.push(Event::Custom {
                name: name.clone(),
                value: serde_json::json!({"toolCallId": tool_call_id, "data": data}),
            }),
            AgentEvent::Error { code, error, .. } => self.fail(error, Some(*code), out),
            AgentEvent::ExecuteComplete {
                status,
                pending_tool_calls,
                ..
            } => {
                if *status == bidi_llm::Status::Error {
                    // A failure the execution did not report with an `error` event first.
                    self.fail("the execution failed", None, out);
                    return;
                }
                self.close(out);
                let outcome = if !self.interrupts.is_empty() {
                    if let Some(snapshot) = self.snapshot.take() {
                        out.push(Event::MessagesSnapshot {
                            messages: snapshot.messages,
                        });
                    }
                    Outcome::Interrupt {
                        interrupts: std::mem::take(&mut self.interrupts),
                    }
                } else if !pending_tool_calls.is_empty() {
                    Outcome::Success {
                        pending_tool_call_ids: pending_tool_calls
                            .iter()
                            .map(|call| call.id.clone())
                            .collect(),
                    }
                } else if self.cancelled {
                    Outcome::Cancelled
                } else {
                    Outcome::Success {
                        pending_tool_call_ids: Vec::new(),
                    }
                };
                let outcome = match outcome {
                    Outcome::Success { .. } | Outcome::Cancelled if self.legacy => {
                        Outcome::Success {
                            pending_tool_call_ids: Vec::new(),
                        }
                    }
                    outcome => outcome,
                };
                out.push(Event::RunFinished {
                    thread_id: self.thread_id.clone(),
                    run_id: self.run_id.clone(),
                    outcome,
                });
                self.phase = Phase::Ended;
            }
            // Shown by other events, or not at all.
            _ => {}
        }
    }

    /// Appends what says the execution was cut short (its connection failed with `message`):
    /// the end of every open block and `RUN_ERROR`, unless the run has ended.
    pub fn failed(&mut self, message: &str, out: &mut Vec<Event>) {
        if self.phase == Phase::Ended {
            return;
        }
        self.start(out);
        self.close(out);
        out.push(Event::RunError {
            message: message.to_owned(),
            code: Some("connection_failed".to_owned()),
        });
        self.phase = Phase::Ended;
    }

    /// Appends what ends the run after the execution's last event: nothing if the run has
    /// ended, else (the events stopped before `execute_complete`) the end of every open block
    /// and `RUN_ERROR`.
    pub fn end(&mut self, out: &mut Vec<Event>) {
        if self.phase != Phase::Ended {
            self.failed("the execution ended before it completed", out);
        }
    }

    /// `RUN_STARTED` (and the state), if not written yet.
    /// A delta of text or (`reasoning`) of reasoning, in the open block of its kind: opened
    /// first, closing any other, if none is.
    fn content(&mut self, reasoning: bool, delta: &str, out: &mut Vec<Event>) {
        if delta.is_empty() {
            return;
        }
        let message_id = match (&self.open, reasoning) {
            (Some(Open::Text(id)), false) | (Some(Open::Reasoning(id)), true) => id.clone(),
            _ => {
                self.close(out);
                if reasoning {
                    self.open_reasoning(out)
                } else {
                    self.open_text(out)
                }
            }
        };
        let delta = delta.to_owned();
        out.push(if reasoning {
            Event::ReasoningMessageContent { message_id, delta }
        } else {
            Event::TextMessageContent { message_id, delta }
        });
    }

    fn start(&mut self, out: &mut Vec<Event>) {
        if self.phase != Phase::Idle {
            return;
        }
        self.phase = Phase::Running;
        out.push(Event::RunStarted {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
        });
        if let Some(snapshot) = self.state.take() {
            out.push(Event::StateSnapshot { snapshot });
        }
    }

    /// The id of the model's current answer.
    fn message_id(&mut self) -> &str {
        self.message_id.get_or_insert_with(new_id)
    }

    fn open_text(&mut self, out: &mut Vec<Event>) -> String {
        let message_id = self.message_id().to_owned();
        out.push(Event::TextMessageStart {
            message_id: message_id.clone(),
            role: "assistant".to_owned(),
        });
        self.open = Some(Open::Text(message_id.clone()));
        message_id
    }

    fn open_reasoning(&mut self, out: &mut Vec<Event>) -> String {
        // A message of its own: the client would append reasoning with the answer's id to the
        // answer's text.
        let message_id = new_id();
        if let Some(snapshot) = &mut self.snapshot {
            snapshot.reasoning.push(message_id.clone());
        }
        out.push(Event::ReasoningStart {
            message_id: message_id.clone(),
        });
        out.push(Event::ReasoningMessageStart {
            message_id: message_id.clone(),
            role: "reasoning".to_owned(),
        });
        self.open = Some(Open::Reasoning(message_id.clone()));
        message_id
    }

    fn open_tool_call(&mut self, tool_call_id: &str, tool_name: &str, out: &mut Vec<Event>) {
        let parent = self.message_id().to_owned();
        out.push(Event::ToolCallStart {
            tool_call_id: tool_call_id.to_owned(),
            tool_call_name: tool_name.to_owned(),
            parent_message_id: Some(parent),
        });
        self.open = Some(Open::ToolCall(tool_call_id.to_owned()));
    }

    /// Ends the open block, if any.
    fn close(&mut self, out: &mut Vec<Event>) {
        match self.open.take() {
            Some(Open::ToolCall(tool_call_id)) => out.push(Event::ToolCallEnd { tool_call_id }),
            Some(Open::Text(message_id)) => out.push(Event::TextMessageEnd { message_id }),
            Some(Open::Reasoning(message_id)) => {
                out.push(Event::ReasoningMessageEnd {
                    message_id: message_id.clone(),
                });
                out.push(Event::ReasoningEnd { message_id });
            }
            None => {}
        }
    }

    fn tool_call(&mut self, call: &ToolCall, parent: String, out: &mut Vec<Event>) {
        // Arguments the model got wrong (not JSON) are kept as the text it wrote.
        let arguments = match &call.arguments {
            Value::String(raw) => raw.clone(),
            arguments => arguments.to_string(),
        };
        out.push(Event::ToolCallStart {
            tool_call_id: call.id.clone(),
            tool_call_name: call.name.clone(),
            parent_message_id: Some(parent),
        });
        if !arguments.is_empty() {
            out.push(Event::ToolCallArgs {
                tool_call_id: call.id.clone(),
                delta: arguments,
            });
        }
        out.push(Event::ToolCallEnd {
            tool_call_id: call.id.clone(),
        });
    }

    /// Ends every open block and the run with `RUN_ERROR`.
    fn fail(&mut self, message: &str, code: Option<ErrorCode>, out: &mut Vec<Event>) {
        self.close(out);
        let code = code.and_then(|code| {
            serde_json::to_value(code)
                .ok()
                .and_then(|code| code.as_str().map(str::to_owned))
        });
        out.push(Event::RunError {
            message: message.to_owned(),
            code,
        });
        self.phase = Phase::Ended;
    }
}

impl Snapshot {
    /// Adds the model's answer `message`, whose text and tool calls went out under
    /// `message_id`, and its reasoning under the ids its reasoning blocks had.
    fn answer(&mut self, message: &Message, message_id: Option<String>) {
        let reasoning = std::mem::take(&mut self.reasoning);
        let answer = match message {
            Message::Assistant(answer) => answer,
            Message::Aborted(aborted) => &aborted.partial,
            Message::Error(failed) => match &failed.partial {
                Some(partial) => partial,
                None => return,
            },
            _ => return,
        };
        let thinking = answer.content.iter().filter_map(|block| match block {
            AssistantContent::Thinking { thinking, .. } => Some(thinking),
            _ => None,
        });
        for (id, content) in reasoning.into_iter().zip(thinking) {
            self.messages
                .push(serde_json::json!({"id": id, "role": "reasoning", "content": content}));
        }
        let Some(id) = message_id else { return };
        let text: String = answer
            .content
            .iter()
            .filter_map(|block| match block {
                AssistantContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let calls: Vec<Value> = answer
            .tool_calls()
            .map(|call| {
                let arguments = match &call.arguments {
                    Value::String(raw) => raw.clone(),
                    arguments => arguments.to_string(),
                };
                serde_json::json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                })
            })
            .collect();
        let mut message = serde_json::json!({"id": id, "role": "assistant"});
        if !text.is_empty() {
            message["content"] = Value::String(text);
        }
        if !calls.is_empty() {
            message["toolCalls"] = Value::Array(calls);
        }
        self.messages.push(message);
    }
}

/// The endpoint's SSE: `data: {json}\n\n` per event.
#[derive(Debug)]
struct Sse {
    encoder: Encoder,
    events: Vec<Event>,
}

impl Sse {
    fn write(&mut self, buf: &mut Vec<u8>) {
        for event in self.events.drain(..) {
            write(buf, &event);
        }
    }
}

/// `data: <json>` and the blank line that ends the record.
fn write(buf: &mut Vec<u8>, event: &impl Serialize) {
    buf.extend_from_slice(b"data: ");
    // Events are plain data: they always serialize.
    let _ = serde_json::to_writer(&mut *buf, event);
    buf.extend_from_slice(b"\n\n");
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

impl crate::agent::Encoder for Sse {
    fn event(&mut self, event: &AgentEvent, buf: &mut Vec<u8>) {
        // The hot path: a delta of the block already open is one event, written as it is,
        // without copying it into an `Event` first (what `Encoder::event` would make of it).
        if self.encoder.phase == Phase::Running {
            let content = match (event, &self.encoder.open) {
                (AgentEvent::TextDelta { delta }, Some(Open::Text(id))) => {
                    Some(("TEXT_MESSAGE_CONTENT", id, delta))
                }
                (AgentEvent::ThinkingDelta { delta }, Some(Open::Reasoning(id))) => {
                    Some(("REASONING_MESSAGE_CONTENT", id, delta))
                }
                _ => None,
            };
            if let Some((kind, message_id, delta)) = content {
                if !delta.is_empty() {
                    write(
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
        self.encoder.event(event, &mut self.events);
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

/// `POST /agent/{name}/ag-ui`: one run, as SSE of AG-UI events.
pub(crate) async fn run(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let agent = crate::agent::agent(&shared, &kind, &name)?;
    let bytes = body(bytes, shared.limits.max_body_bytes)?;
    let input: RunAgentInput = codec::decode_object(&bytes)?;
    if input.thread_id.is_empty() {
        return Err(invalid("the `threadId` is empty", "/threadId"));
    }
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let started = start(&shared, agent, identity, input, &bytes).await;
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
        code: Some(failure.code.name().to_owned()),
    }])
}

/// The run `input` asks for, on its thread: its events' stream, or why it cannot start.
async fn start(
    shared: &Arc<Shared>,
    agent: &LlmAgent,
    identity: Option<&Identity>,
    input: RunAgentInput,
    bytes: &[u8],
) -> Result<Response, Failure> {
    let loaded = crate::agent::load(agent, identity, &input.thread_id).await?;
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
                resume(
                    agent,
                    &state,
                    input.messages,
                    approvals,
                    shared.waiting_calls.unwrap_or(WaitingCalls::SetAside),
                )?,
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
    let (_, body) = crate::agent::start(shared, agent, init, turn, identity, sse).await?;
    Ok(stream(body))
}

/// `GET /agent/{name}/ag-ui/{threadId}`: the stored thread as AG-UI messages (for a client
/// that reloads it), or 404.
pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name, thread)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<axum::Json<Vec<Value>>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let state = crate::agent::stored(&shared, &kind, &name, identity.as_ref(), &thread).await?;
    Ok(axum::Json(history::messages(&state.messages)))
}

/// An SSE response of `body`.
fn stream(body: Body) -> Response {
    crate::sse::response(body)
}

/// A run of `events` only, with no execution behind it.
fn sse(events: &[Event]) -> Response {
    let mut buf = Vec::new();
    for event in events {
        write(&mut buf, event);
    }
    stream(Body::from(buf))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bidi_llm::{AbortedMessage, ErrorMessage, Role, Status};
    use serde_json::json;

    use super::input::{INTERRUPTS_PENDING, InputMessage, ResumeEntry, ResumeStatus};
    use super::*;

    #[test]
    fn the_written_stream_is_the_encoders_events_deltas_included() {
        use crate::agent::Encoder as _;

        let events = [
            AgentEvent::SessionStart {
                session_id: "t".into(),
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
            sse.event(event, &mut written);
            let mut out = Vec::new();
            encoder.event(event, &mut out);
            for event in out {
                write(&mut expected, &event);
            }
        }
        sse.failed("gone", &mut written);
        let mut out = Vec::new();
        encoder.failed("gone", &mut out);
        for event in out {
            write(&mut expected, &event);
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

    fn kinds(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|event| {
                serde_json::to_value(event).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    fn encode(encoder: &mut Encoder, events: &[AgentEvent]) -> Vec<Event> {
        let mut out = Vec::new();
        for event in events {
            encoder.event(event, &mut out);
        }
        encoder.end(&mut out);
        out
    }

    fn start() -> AgentEvent {
        AgentEvent::SessionStart {
            session_id: "t1".into(),
        }
    }

    fn complete(status: Status, pending: Vec<ToolCall>) -> AgentEvent {
        AgentEvent::ExecuteComplete {
            status,
            pending_tool_calls: pending,
            cost: 0.0,
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "pick".into(),
            arguments: json!({"a": 1}),
        }
    }

    #[test]
    fn a_text_answer_is_one_message_between_run_started_and_run_finished() {
        let mut encoder = Encoder::new("t1", "r1").state(json!({"n": 1}));
        let out = encode(
            &mut encoder,
            &[
                start(),
                AgentEvent::MessageStart {
                    role: Role::Assistant,
                },
                AgentEvent::TextStart,
                AgentEvent::TextDelta {
                    delta: "Hi ".into(),
                },
                AgentEvent::TextDelta {
                    delta: String::new(),
                },
                AgentEvent::TextDelta {
                    delta: "there".into(),
                },
                AgentEvent::TextEnd {
                    text: "Hi there".into(),
                },
                complete(Status::Completed, vec![]),
            ],
        );
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "STATE_SNAPSHOT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        );
        let wire: Vec<Value> = out
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_eq!(
            wire[0],
            json!({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
        );
        assert_eq!(
            wire[1],
            json!({"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}})
        );
        assert_eq!(wire[2]["role"], "assistant");
        assert_eq!(wire[2]["messageId"], wire[5]["messageId"]);
        assert_eq!(
            wire[6],
            json!({"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
                   "outcome": {"type": "success"}})
        );
        assert!(encoder.is_ended());
    }

    #[test]
    fn tool_calls_stream_their_arguments_under_their_answer_and_local_results_follow() {
        let mut encoder = Encoder::new("t1", "r1");
        let out = encode(
            &mut encoder,
            &[
                start(),
                AgentEvent::MessageStart {
                    role: Role::Assistant,
                },
                AgentEvent::ThinkingStart,
                AgentEvent::ThinkingDelta {
                    delta: "hmm".into(),
                },
                AgentEvent::ThinkingEnd {
                    thinking: "hmm".into(),
                },
                AgentEvent::TextStart,
                AgentEvent::TextDelta {
                    delta: "Let me".into(),
                },
                // No `text_end`: the call's start ends the text.
                AgentEvent::ToolcallStart {
                    index: 0,
                    tool_call_id: "c1".into(),
                    tool_name: "pick".into(),
                },
                AgentEvent::ToolcallDelta {
                    index: 0,
                    delta: "{\"a\":".into(),
                },
                AgentEvent::ToolcallDelta {
                    index: 0,
                    delta: String::new(),
                },
                AgentEvent::ToolcallDelta {
                    index: 0,
                    delta: "1}".into(),
                },
                AgentEvent::ToolcallEnd {
                    index: 0,
                    tool_call: call("c1"),
                },
                AgentEvent::ToolExecutionStart {
                    tool_call_id: "c1".into(),
                    tool_name: "pick".into(),
                    args: json!({"a": 1}),
                },
                AgentEvent::ToolExecutionDelta {
                    tool_call_id: "c1".into(),
                    delta: "..".into(),
                },
                AgentEvent::ToolExecutionEnd {
                    tool_call_id: "c1".into(),
                    output: "picked".into(),
                    details: None,
                    is_error: false,
                    attachments: vec![],
                },
                complete(Status::Completed, vec![]),
            ],
        );
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
                "REASONING_END",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "RUN_FINISHED"
            ]
        );
        let wire: Vec<Value> = out
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_ne!(
            wire[1]["messageId"], wire[6]["messageId"],
            "reasoning is a message of its own"
        );
        assert_eq!(wire[9]["parentMessageId"], wire[6]["messageId"]);
        assert_eq!(wire[9]["toolCallId"], "c1");
        assert_eq!(wire[9]["toolCallName"], "pick");
        assert_eq!(
            wire[10],
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":"})
        );
        assert_eq!(wire[11]["delta"], "1}");
        assert_eq!(
            wire[12],
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"})
        );
        assert_eq!(wire[13]["toolCallId"], "c1");
        assert_eq!(wire[13]["content"], "picked");
        assert_eq!(wire[13]["role"], "tool");
    }

    fn cut_call() -> [AgentEvent; 4] {
        [
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
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
        ]
    }

    #[test]
    fn a_call_cut_mid_arguments_ends_before_the_run_does() {
        // The model fails mid-call.
        let failed = Message::Error(ErrorMessage {
            error: "boom".into(),
            partial: None,
        });
        let mut events = cut_call().to_vec();
        events.extend([
            AgentEvent::MessageEnd {
                message: Box::new(failed.clone()),
            },
            AgentEvent::Error {
                code: ErrorCode::Model,
                error: "boom".into(),
                message: Some(Box::new(failed)),
            },
            complete(Status::Error, vec![]),
        ]);
        let out = encode(&mut Encoder::new("t1", "r1"), &events);
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "RUN_ERROR"
            ]
        );
        // The execution's connection fails mid-call.
        let mut encoder = Encoder::new("t1", "r1");
        let mut out = Vec::new();
        for event in cut_call() {
            encoder.event(&event, &mut out);
        }
        encoder.failed("gone", &mut out);
        encoder.end(&mut out);
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "RUN_ERROR"
            ]
        );
        // A cancellation cuts it: the run finishes cancelled, the call not pending.
        let mut events = cut_call().to_vec();
        events.extend([
            AgentEvent::MessageEnd {
                message: Box::new(Message::Aborted(AbortedMessage {
                    partial: AssistantMessage::default(),
                })),
            },
            complete(Status::Completed, vec![]),
        ]);
        let out = encode(&mut Encoder::new("t1", "r1"), &events);
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "RUN_FINISHED"
            ]
        );
        assert_eq!(
            serde_json::to_value(out.last().unwrap()).unwrap()["outcome"],
            json!({"type": "cancelled"})
        );
    }

    #[test]
    fn a_call_whose_start_has_no_id_comes_whole_at_its_end() {
        let out = encode(
            &mut Encoder::new("t1", "r1"),
            &[
                start(),
                AgentEvent::ToolcallStart {
                    index: 0,
                    tool_call_id: String::new(),
                    tool_name: String::new(),
                },
                AgentEvent::ToolcallDelta {
                    index: 0,
                    delta: "{\"a\":".into(),
                },
                AgentEvent::ToolcallEnd {
                    index: 0,
                    tool_call: call("c1"),
                },
                complete(Status::Completed, vec![]),
            ],
        );
        let wire: Vec<Value> = out
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        assert_eq!(wire[1]["type"], "TOOL_CALL_START");
        assert_eq!(wire[1]["toolCallId"], "c1");
        assert_eq!(
            wire[2],
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":1}"})
        );
        assert_eq!(wire[3]["type"], "TOOL_CALL_END");
        assert_eq!(wire.len(), 5);
    }

    #[test]
    fn remote_calls_finish_the_run_with_their_ids_pending() {
        let mut encoder = Encoder::new("t1", "r1");
        let out = encode(
            &mut encoder,
            &[
                start(),
                AgentEvent::MessageStart {
                    role: Role::Assistant,
                },
                AgentEvent::ToolcallStart {
                    index: 0,
                    tool_call_id: "c1".into(),
                    tool_name: "pick".into(),
                },
                AgentEvent::ToolcallEnd {
                    index: 0,
                    tool_call: call("c1"),
                },
                AgentEvent::AwaitingToolExecution {
                    session_id: "t1".into(),
                    tool_calls: vec![call("c1")],
                },
                complete(Status::AwaitingToolExecution, vec![call("c1")]),
            ],
        );
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_END",
                "RUN_FINISHED"
            ]
        );
        let last = serde_json::to_value(out.last().unwrap()).unwrap();
        assert_eq!(
            last["outcome"],
            json!({"type": "success", "pendingToolCallIds": ["c1"]})
        );
    }

    #[test]
    fn a_failure_mid_block_ends_the_block_then_the_run_and_nothing_follows() {
        let mut encoder = Encoder::new("t1", "r1");
        let failed = Message::Error(ErrorMessage {
            error: "boom".into(),
            partial: None,
        });
        let out = encode(
            &mut encoder,
            &[
                start(),
                AgentEvent::MessageStart {
                    role: Role::Assistant,
                },
                AgentEvent::ThinkingStart,
                AgentEvent::ThinkingDelta {
                    delta: "hmm".into(),
                },
                AgentEvent::MessageEnd {
                    message: Box::new(failed.clone()),
                },
                AgentEvent::Error {
                    code: ErrorCode::Model,
                    error: "boom".into(),
                    message: Some(Box::new(failed)),
                },
                AgentEvent::SessionEnd {
                    session_id: "t1".into(),
                    messages: vec![],
                },
                complete(Status::Error, vec![]),
            ],
        );
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "REASONING_MESSAGE_END",
                "REASONING_END",
                "RUN_ERROR"
            ]
        );
        assert_eq!(
            serde_json::to_value(out.last().unwrap()).unwrap(),
            json!({"type": "RUN_ERROR", "message": "boom", "code": "model"})
        );
    }

    #[test]
    fn a_cancelled_answer_ends_its_block_and_finishes_the_run_cancelled() {
        let mut encoder = Encoder::new("t1", "r1");
        let aborted = Message::Aborted(AbortedMessage {
            partial: AssistantMessage::default(),
        });
        let out = encode(
            &mut encoder,
            &[
                start(),
                AgentEvent::MessageStart {
                    role: Role::Assistant,
                },
                AgentEvent::TextStart,
                AgentEvent::TextDelta {
                    delta: "Hel".into(),
                },
                AgentEvent::MessageEnd {
                    message: Box::new(aborted),
                },
                complete(Status::Completed, vec![]),
            ],
        );
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "RUN_FINISHED"
            ]
        );
        let last = serde_json::to_value(out.last().unwrap()).unwrap();
        assert_eq!(last["outcome"], json!({"type": "cancelled"}));
    }

    #[test]
    fn events_that_stop_before_the_end_make_a_run_error() {
        let mut encoder = Encoder::new("t1", "r1");
        let out = encode(&mut encoder, &[start(), AgentEvent::TextStart]);
        assert_eq!(
            kinds(&out),
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_END",
                "RUN_ERROR"
            ]
        );
        // And no events at all: the run starts to fail.
        let out = encode(&mut Encoder::new("t1", "r1"), &[]);
        assert_eq!(kinds(&out), ["RUN_STARTED", "RUN_ERROR"]);
    }

    #[test]
    fn input_messages_become_a_session_history_and_its_input() {
        let input: RunAgentInput = serde_json::from_value(json!({
            "threadId": "t1", "runId": "r1", "state": null, "context": [], "forwardedProps": {},
            "messages": [
                {"id": "s", "role": "system", "content": "Be brief."},
                {"id": "u1", "role": "user", "content": "pick one"},
                {"id": "a1", "role": "assistant", "content": "ok",
                 "toolCalls": [{"id": "c1", "type": "function",
                                "function": {"name": "pick", "arguments": "{\"a\":1}"}}]},
                {"id": "t", "role": "tool", "toolCallId": "c1", "content": "1"},
                {"id": "r", "role": "reasoning", "content": "hidden"},
                {"id": "u2", "role": "user", "content": [
                    {"type": "text", "text": "and"},
                    {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}}
                ]}
            ],
            "tools": [{"name": "ask", "description": "asks"}]
        }))
        .unwrap();
        assert!(input.state.is_none());
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let (state, turn) = create(&agent, input.messages, input.tools).unwrap();
        assert_eq!(state.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(state.messages.len(), 3);
        let Message::ToolResult(result) = &state.messages[2] else {
            panic!("{:?}", state.messages[2])
        };
        assert_eq!(
            (result.tool_name.as_str(), result.content.as_str()),
            ("pick", "1")
        );
        assert_eq!(state.tools[0].parameters["type"], "object");
        let TurnInput::User(user) = turn else {
            panic!("{turn:?}")
        };
        assert_eq!(user.content, "and");
        assert_eq!(user.attachments, [Attachment::image("AAAA", "image/png")]);
    }

    #[test]
    fn a_tool_message_answering_nothing_is_refused_with_its_path() {
        let messages: Vec<InputMessage> = serde_json::from_value(json!([
            {"id": "t", "role": "tool", "toolCallId": "c9", "content": "1"},
            {"id": "u", "role": "user", "content": "hi"}
        ]))
        .unwrap();
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let failure = create(&agent, messages, vec![]).unwrap_err();
        assert_eq!(failure.status, StatusCode::BAD_REQUEST);
        assert_eq!(failure.path.as_deref(), Some("/messages/0/toolCallId"));
    }

    #[test]
    fn a_resumed_thread_takes_the_results_of_its_pending_calls() {
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let state = LlmSession {
            pending_tool_calls: vec![call("c1")],
            ..LlmSession::default()
        };
        let messages: Vec<InputMessage> = serde_json::from_value(json!([
            {"id": "u", "role": "user", "content": "hi"},
            {"id": "t", "role": "tool", "toolCallId": "c1", "content": "", "error": "denied"}
        ]))
        .unwrap();
        let set_aside = WaitingCalls::SetAside;
        let resumed = resume(&agent, &state, messages, Vec::new(), set_aside).unwrap();
        let TurnInput::ToolResults(results) = resumed else {
            panic!()
        };
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].tool_name, "pick");
        assert!(results[0].is_error);
        assert_eq!(results[0].content, "denied");

        let user = || -> Vec<InputMessage> {
            serde_json::from_value(json!([{"id": "u", "role": "user", "content": "hi"}])).unwrap()
        };
        let failure = resume(&agent, &state, user(), Vec::new(), WaitingCalls::Refuse).unwrap_err();
        assert!(failure.message.contains("`c1`"), "{}", failure.message);
        // Set aside: the call's error result, then the message.
        let TurnInput::Resume(resumed) =
            resume(&agent, &state, user(), Vec::new(), set_aside).unwrap()
        else {
            panic!()
        };
        assert_eq!(resumed.results[0].tool_call_id, "c1");
        assert!(resumed.results[0].is_error);
        assert_eq!(resumed.message.map(|m| m.content).as_deref(), Some("hi"));
    }

    /// An agent whose `wipe` needs approval, and a thread waiting on calls `w1` and `w2` of it
    /// (and `r1` of the client's `pick`), after `w0` was answered by an earlier run.
    fn waiting() -> (LlmAgent, LlmSession) {
        let wipe = Tool::dynamic(
            "wipe",
            "Wipe",
            "Wipes",
            json!({"type": "object"}),
            |_, _| futures_util::stream::empty(),
        )
        .needs_approval();
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([]))
            .tool(wipe)
            .build();
        let wipe_call = |id: &str| ToolCall {
            id: id.into(),
            name: "wipe".into(),
            arguments: json!({}),
        };
        let state = LlmSession {
            status: Status::AwaitingToolExecution,
            pending_tool_calls: vec![call("r1"), wipe_call("w1"), wipe_call("w2")],
            messages: vec![Message::ToolResult(ToolResultMessage {
                tool_call_id: "w0".into(),
                tool_name: "wipe".into(),
                content: "wiped".into(),
                details: None,
                is_error: false,
                attachments: Vec::new(),
            })],
            ..LlmSession::default()
        };
        (agent, state)
    }

    fn entry(id: &str, status: ResumeStatus, payload: Option<Value>) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: id.into(),
            status,
            payload,
        }
    }

    #[test]
    fn a_resume_must_answer_every_open_interrupt_once() {
        let (agent, state) = waiting();
        let wrong = |entries: &[ResumeEntry]| match interrupts(&agent, &state, entries) {
            Answered::Wrong { message, code } => (message, code),
            other => panic!("{other:?}"),
        };
        let (message, code) = wrong(&[]);
        assert_eq!(code, INTERRUPTS_PENDING);
        assert!(
            message.contains("`approval-w1`, `approval-w2`"),
            "{message}"
        );
        let (message, _) = wrong(&[entry("approval-w1", ResumeStatus::Resolved, None)]);
        assert!(
            message.contains("`approval-w2`") && !message.contains("w1"),
            "{message}"
        );
        let twice = [
            entry("approval-w1", ResumeStatus::Resolved, None),
            entry("approval-w1", ResumeStatus::Cancelled, None),
        ];
        assert!(wrong(&twice).0.contains("answered twice"));
        // A remote call is not an interrupt, nor is a made-up id.
        assert_eq!(
            wrong(&[entry("approval-r1", ResumeStatus::Resolved, None)]).1,
            NO_INTERRUPT
        );
        assert_eq!(
            wrong(&[entry("w1", ResumeStatus::Resolved, None)]).1,
            NO_INTERRUPT
        );

        let answers = [
            entry(
                "approval-w1",
                ResumeStatus::Resolved,
                Some(json!({"approved": false, "reason": "no"})),
            ),
            entry("approval-w2", ResumeStatus::Cancelled, None),
            // Answered by an earlier run: allowed along with the open ones.
            entry("approval-w0", ResumeStatus::Resolved, None),
        ];
        let Answered::Approvals(approvals) = interrupts(&agent, &state, &answers) else {
            panic!()
        };
        assert_eq!(
            approvals,
            [
                Approval::deny("w1", "no"),
                Approval::deny("w2", "the user cancelled the request")
            ]
        );
        let answers = [
            entry(
                "approval-w2",
                ResumeStatus::Resolved,
                Some(json!({"approved": true})),
            ),
            entry("approval-w1", ResumeStatus::Resolved, None),
        ];
        let Answered::Approvals(approvals) = interrupts(&agent, &state, &answers) else {
            panic!()
        };
        assert_eq!(
            approvals,
            [Approval::approve("w2"), Approval::approve("w1")]
        );
    }

    #[test]
    fn a_resume_of_interrupts_answered_before_does_nothing() {
        let (agent, mut state) = waiting();
        state.pending_tool_calls.clear();
        state.status = Status::Completed;
        let again = [entry("approval-w0", ResumeStatus::Resolved, None)];
        assert!(matches!(
            interrupts(&agent, &state, &again),
            Answered::Before
        ));
        let unknown = [entry("approval-w9", ResumeStatus::Resolved, None)];
        assert!(matches!(
            interrupts(&agent, &state, &unknown),
            Answered::Wrong {
                code: NO_INTERRUPT,
                ..
            }
        ));
        // No resume, nothing open: a plain run.
        assert!(matches!(interrupts(&agent, &state, &[]), Answered::Approvals(a) if a.is_empty()));
    }
}
