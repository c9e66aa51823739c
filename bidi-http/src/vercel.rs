//! The Vercel AI SDK's UI message stream (v1): `POST /agent/{name}/chat` takes the body
//! `DefaultChatTransport` (`useChat`) sends and answers an execution of the agent as the stream
//! `readUIMessageStream` reads, and `GET /agent/{name}/chat/{id}/stream` gives it again, whole,
//! to clients that resume it while it runs; [`UiMessageStream`] is the encoder, usable on its
//! own.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::{
    AgentEvent, Approval, AssistantContent, AssistantMessage, Attachment, Context, LlmAgent,
    LlmSession, Message, Resume, Role, Status, StopReason, ToolCall, ToolResultMessage, ToolSpec,
    TurnInput, UserMessage,
};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codec::{self, Code, Failure};
use crate::extract::Segments;
use crate::flow::body;
use crate::{Identity, Shared, WaitingCalls, agent};

mod history;
mod tee;

use tee::{Attached, ChatKey, Tee};
pub(crate) use tee::{Chats, RESUME_BYTES};

// ---------------------------------------------------------------------------------------------
// The chunks.

/// One chunk of the UI message stream: `data: {json}` with a kebab-case `type` and camelCase
/// fields, exactly the keys `ai`'s `uiMessageChunkSchema` knows (`ai@6.0.0` refused any other).
#[derive(Debug, Serialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
enum Chunk<'a> {
    /// The answer begins; `messageId` names the assistant message it builds.
    Start {
        #[serde(skip_serializing_if = "Option::is_none")]
        message_id: Option<&'a str>,
    },
    /// A model call begins (a `step-start` part).
    StartStep,
    /// A model call and the local tools it called are done.
    FinishStep,
    TextStart {
        id: &'a str,
    },
    TextDelta {
        id: &'a str,
        delta: &'a str,
    },
    TextEnd {
        id: &'a str,
    },
    ReasoningStart {
        id: &'a str,
    },
    ReasoningDelta {
        id: &'a str,
        delta: &'a str,
    },
    ReasoningEnd {
        id: &'a str,
    },
    ToolInputStart {
        tool_call_id: &'a str,
        tool_name: &'a str,
    },
    ToolInputDelta {
        tool_call_id: &'a str,
        input_text_delta: &'a str,
    },
    ToolInputAvailable {
        tool_call_id: &'a str,
        tool_name: &'a str,
        input: &'a Value,
    },
    /// A call whose input never completed: `input` is the argument text the model wrote.
    ToolInputError {
        tool_call_id: &'a str,
        tool_name: &'a str,
        input: &'a Value,
        error_text: &'a str,
    },
    /// A local tool's output: `preliminary` while it streams, then final.
    ToolOutputAvailable {
        tool_call_id: &'a str,
        output: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        preliminary: bool,
    },
    ToolOutputError {
        tool_call_id: &'a str,
        error_text: &'a str,
    },
    /// The call waits for the user's approval.
    ToolApprovalRequest {
        approval_id: &'a str,
        tool_call_id: &'a str,
    },
    /// The user denied the call: it did not run.
    ToolOutputDenied {
        tool_call_id: &'a str,
    },
    Error {
        error_text: &'a str,
    },
    /// The answer is complete; the client's `onFinish` gets the reason.
    Finish {
        finish_reason: FinishReason,
    },
}

/// Why an answer ended, as `finish` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum FinishReason {
    Stop,
    Length,
    ContentFilter,
    ToolCalls,
    Error,
    Other,
}

/// A `data-{name}` chunk: its type is made of the name, so it is not a [`Chunk`].
#[derive(Serialize)]
struct DataChunk<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    id: &'a str,
    data: &'a Value,
}

fn write_chunk(chunk: &Chunk<'_>, buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"data: ");
    // Chunks are plain data: they always serialize.
    let _ = serde_json::to_writer(&mut *buf, chunk);
    buf.extend_from_slice(b"\n\n");
}

/// The kinds of content block a delta goes to.
#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    Reasoning,
}

/// The block being streamed.
#[derive(Debug)]
enum Open {
    Text(String),
    Reasoning(String),
    /// A tool call whose input is streaming (`shown`: its `tool-input-start` is written), or,
    /// for a start without an id, whose arguments wait for its end.
    Tool {
        id: String,
        name: String,
        arguments: String,
        shown: bool,
    },
}

/// What an approval's id starts with (the call's id follows).
const APPROVAL: &str = "approval-";

/// What a tool call cut short says.
const CUT: &str = "the model's answer ended before the tool call was complete";

/// Encodes an execution's [`AgentEvent`]s as the Vercel AI SDK's UI message stream (v1):
/// `data: {json}` chunks, one assistant message per execution, ended by `data: [DONE]`.
///
/// | events | chunks |
/// |---|---|
/// | `session_start` | `start{messageId}` |
/// | `message_start` of the assistant (a model call) | `start-step` (and `finish-step` of the one before) |
/// | `text_*` / `thinking_*` | `text-start/delta/end` / `reasoning-start/delta/end` |
/// | `toolcall_start` / `toolcall_delta` / `toolcall_end` | `tool-input-start` / `tool-input-delta` (the arguments' text as the model writes it) / `tool-input-available` |
/// | `tool_execution_delta` | `tool-output-available` with `preliminary: true` and the output so far |
/// | `tool_execution_end` | `tool-output-available`, or `tool-output-error` if it failed (`tool-output-denied` if the user [denied](Self::denied) it) |
/// | `awaiting_approval` | `tool-approval-request{approvalId, toolCallId}` per call |
/// | `tool_execution_data` | `data-{name}{id, data}`, the id the call's: a call's later data of a name replaces its earlier |
/// | `error` | `error{errorText}` |
/// | `execute_complete` | `finish-step`, `finish{finishReason}` |
///
/// A tool call's input streams as the model writes it; a call the model never finished (its
/// answer failed or was cancelled mid-call) ends with `tool-input-error`, its `input` the
/// argument text so far, and the client shows it as failed. Calls the client runs stay at
/// `input-available`, calls waiting for the user's approval at `approval-requested`, and the
/// answer finishes with `tool-calls`.
///
/// The encoder is total: any sequence of events becomes a stream `ai`'s client reads to its
/// end. A block left open when the model fails or the execution is cut short is closed
/// (`text-end`, `reasoning-end`, `tool-input-error`) before the `error` chunk, the open step is
/// finished, and `finish` (`error`) and `[DONE]` still come; nothing comes after `finish`.
///
/// ```
/// use bidi_http::UiMessageStream;
/// use bidi_llm::AgentEvent;
///
/// let mut encoder = UiMessageStream::new("msg-1");
/// let mut buf = Vec::new();
/// encoder.event(&AgentEvent::SessionStart { session_id: "chat-1".into() }, &mut buf);
/// encoder.event(&AgentEvent::TextStart, &mut buf);
/// encoder.event(&AgentEvent::TextDelta { delta: "Hi".into() }, &mut buf);
/// encoder.failed("the model went away", &mut buf);
/// encoder.end(&mut buf);
/// let text = String::from_utf8(buf).unwrap();
/// assert!(text.starts_with("data: {\"type\":\"start\",\"messageId\":\"msg-1\"}\n\n"));
/// assert!(text.contains("{\"type\":\"text-end\",\"id\":\"text-0\"}"));
/// assert!(text.ends_with("data: {\"type\":\"finish\",\"finishReason\":\"error\"}\n\ndata: [DONE]\n\n"));
/// ```
#[derive(Debug)]
pub struct UiMessageStream {
    message_id: String,
    started: bool,
    step: bool,
    open: Option<Open>,
    /// How many text and reasoning blocks were opened: their ids.
    blocks: usize,
    /// The calls whose input the client has (or had cut short).
    inputs: HashSet<String>,
    /// What each streaming local tool output so far.
    outputs: HashMap<String, String>,
    /// Why the last model call stopped.
    stop: Option<StopReason>,
    /// `finish` was written: nothing comes after it.
    finished: bool,
    /// The calls the user denied: their error results are denials.
    denied: HashSet<String>,
}

impl UiMessageStream {
    /// An encoder for an answer that builds the assistant message `message_id`.
    pub fn new(message_id: impl Into<String>) -> Self {
        Self {
            message_id: message_id.into(),
            started: false,
            step: false,
            open: None,
            blocks: 0,
            inputs: HashSet::new(),
            outputs: HashMap::new(),
            stop: None,
            finished: false,
            denied: HashSet::new(),
        }
    }

    /// Goes on with an answer whose tool calls `ids` the client has: their input is not sent
    /// again (the calls whose approval or results the request brings, say).
    #[must_use]
    pub fn shown(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.inputs.extend(ids);
        self
    }

    /// The calls `ids` were denied by the user: their (error) results are `tool-output-denied`.
    #[must_use]
    pub fn denied(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.denied.extend(ids);
        self
    }

    /// Appends the chunks `event` becomes to `buf` (perhaps none).
    pub fn event(&mut self, event: &AgentEvent, buf: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.start(buf);
        match event {
            AgentEvent::MessageStart {
                role: Role::Assistant,
            } => {
                self.close(buf);
                if self.step {
                    write_chunk(&Chunk::FinishStep, buf);
                }
                write_chunk(&Chunk::StartStep, buf);
                self.step = true;
            }
            AgentEvent::TextStart => self.open_text(buf),
            AgentEvent::TextDelta { delta } => self.delta(Block::Text, delta, buf),
            AgentEvent::TextEnd { text } => self.end_block(Block::Text, text, buf),
            AgentEvent::ThinkingStart => self.open_reasoning(buf),
            AgentEvent::ThinkingDelta { delta } => self.delta(Block::Reasoning, delta, buf),
            AgentEvent::ThinkingEnd { thinking } => {
                self.end_block(Block::Reasoning, thinking, buf);
            }
            AgentEvent::ToolcallStart {
                tool_call_id,
                tool_name,
                ..
            } => {
                self.close(buf);
                // A start without an id (from a producer that does not send it), or naming a
                // call the client has, is shown whole at its end, or not at all.
                let shown = !tool_call_id.is_empty() && !self.inputs.contains(tool_call_id);
                if shown {
                    self.step(buf);
                    write_chunk(
                        &Chunk::ToolInputStart {
                            tool_call_id,
                            tool_name,
                        },
                        buf,
                    );
                }
                self.open = Some(Open::Tool {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                    arguments: String::new(),
                    shown,
                });
            }
            AgentEvent::ToolcallDelta { delta, .. } => {
                if let Some(Open::Tool {
                    id,
                    arguments,
                    shown,
                    ..
                }) = &mut self.open
                {
                    arguments.push_str(delta);
                    if *shown && !delta.is_empty() {
                        write_chunk(
                            &Chunk::ToolInputDelta {
                                tool_call_id: id,
                                input_text_delta: delta,
                            },
                            buf,
                        );
                    }
                }
            }
            AgentEvent::ToolcallEnd { tool_call, .. } => match self.open.take() {
                Some(Open::Tool {
                    id, shown: true, ..
                }) if id == tool_call.id => {
                    write_chunk(
                        &Chunk::ToolInputAvailable {
                            tool_call_id: &tool_call.id,
                            tool_name: &tool_call.name,
                            input: &tool_call.arguments,
                        },
                        buf,
                    );
                    self.inputs.insert(id);
                }
                Some(Open::Tool {
                    arguments,
                    shown: false,
                    ..
                }) => self.input(tool_call, &arguments, buf),
                open => {
                    // An end without its start: the whole call at once.
                    self.open = open;
                    self.input(tool_call, "", buf);
                }
            },
            AgentEvent::MessageEnd { message } => {
                // A call the model never finished ends with its message.
                self.close(buf);
                match &**message {
                    Message::Assistant(assistant) => self.stop = Some(assistant.stop_reason),
                    Message::Error(_) => self.stop = Some(StopReason::Error),
                    Message::Aborted(_) => self.stop = Some(StopReason::Aborted),
                    _ => {}
                }
            }
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                args,
            } => {
                let call = ToolCall {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                    arguments: args.clone(),
                };
                self.input(&call, "", buf);
            }
            AgentEvent::ToolExecutionDelta {
                tool_call_id,
                delta,
            } => {
                self.known(tool_call_id, buf);
                let output = self.outputs.entry(tool_call_id.clone()).or_default();
                output.push_str(delta);
                write_chunk(
                    &Chunk::ToolOutputAvailable {
                        tool_call_id,
                        output,
                        preliminary: true,
                    },
                    buf,
                );
            }
            AgentEvent::ToolExecutionData {
                tool_call_id,
                name,
                data,
            } => {
                buf.extend_from_slice(b"data: ");
                let chunk = DataChunk {
                    kind: &format!("data-{name}"),
                    id: tool_call_id,
                    data,
                };
                // Plain data: it always serializes.
                let _ = serde_json::to_writer(&mut *buf, &chunk);
                buf.extend_from_slice(b"\n\n");
            }
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                output,
                is_error,
                ..
            } => {
                self.known(tool_call_id, buf);
                self.outputs.remove(tool_call_id);
                let chunk = if *is_error && self.denied.contains(tool_call_id) {
                    Chunk::ToolOutputDenied { tool_call_id }
                } else if *is_error {
                    Chunk::ToolOutputError {
                        tool_call_id,
                        error_text: output,
                    }
                } else {
                    Chunk::ToolOutputAvailable {
                        tool_call_id,
                        output,
                        preliminary: false,
                    }
                };
                write_chunk(&chunk, buf);
            }
            AgentEvent::AwaitingToolExecution { tool_calls, .. } => {
                for call in tool_calls {
                    self.input(call, "", buf);
                }
            }
            AgentEvent::AwaitingApproval { tool_calls, .. } => {
                for call in tool_calls {
                    self.input(call, "", buf);
                    write_chunk(
                        &Chunk::ToolApprovalRequest {
                            approval_id: &format!("{APPROVAL}{}", call.id),
                            tool_call_id: &call.id,
                        },
                        buf,
                    );
                }
            }
            AgentEvent::Error { error, .. } => {
                self.close(buf);
                write_chunk(&Chunk::Error { error_text: error }, buf);
            }
            AgentEvent::ExecuteComplete { status, .. } => {
                let reason = match status {
                    Status::AwaitingToolExecution => FinishReason::ToolCalls,
                    Status::Error => FinishReason::Error,
                    Status::Completed => match self.stop {
                        None | Some(StopReason::Stop) => FinishReason::Stop,
                        Some(StopReason::Length) => FinishReason::Length,
                        Some(StopReason::Refusal) => FinishReason::ContentFilter,
                        Some(StopReason::ToolCalls) => FinishReason::ToolCalls,
                        Some(StopReason::Error) => FinishReason::Error,
                        Some(_) => FinishReason::Other,
                    },
                    _ => FinishReason::Other,
                };
                self.finish(reason, buf);
            }
            _ => {}
        }
    }

    /// Appends what says the execution was cut short with `message`: the open block closed,
    /// `error{errorText}` and `finish` (`error`). Nothing if the answer already finished.
    pub fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.start(buf);
        self.close(buf);
        write_chunk(
            &Chunk::Error {
                error_text: message,
            },
            buf,
        );
        self.finish(FinishReason::Error, buf);
    }

    /// Appends the end of the stream: `finish` (`other`) if the events did not finish the
    /// answer, then `data: [DONE]`.
    pub fn end(&mut self, buf: &mut Vec<u8>) {
        if !self.finished {
            self.start(buf);
            self.finish(FinishReason::Other, buf);
        }
        buf.extend_from_slice(b"data: [DONE]\n\n");
    }

    fn start(&mut self, buf: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            write_chunk(
                &Chunk::Start {
                    message_id: Some(&self.message_id),
                },
                buf,
            );
        }
    }

    fn step(&mut self, buf: &mut Vec<u8>) {
        if !self.step {
            self.step = true;
            write_chunk(&Chunk::StartStep, buf);
        }
    }

    fn finish(&mut self, finish_reason: FinishReason, buf: &mut Vec<u8>) {
        self.close(buf);
        if self.step {
            self.step = false;
            write_chunk(&Chunk::FinishStep, buf);
        }
        write_chunk(&Chunk::Finish { finish_reason }, buf);
        self.finished = true;
    }

    fn next_id(&mut self, kind: &str) -> String {
        let id = format!("{kind}-{}", self.blocks);
        self.blocks += 1;
        id
    }

    /// Whether a block of `kind` is open.
    fn is_open(&self, kind: Block) -> bool {
        matches!(
            (&self.open, kind),
            (Some(Open::Text(_)), Block::Text) | (Some(Open::Reasoning(_)), Block::Reasoning)
        )
    }

    /// Writes `delta` to the open block of `kind`, opening one first if another is open.
    fn delta(&mut self, kind: Block, delta: &str, buf: &mut Vec<u8>) {
        if !self.is_open(kind) {
            match kind {
                Block::Text => self.open_text(buf),
                Block::Reasoning => self.open_reasoning(buf),
            }
        }
        match &self.open {
            Some(Open::Text(id)) => write_chunk(&Chunk::TextDelta { id, delta }, buf),
            Some(Open::Reasoning(id)) => write_chunk(&Chunk::ReasoningDelta { id, delta }, buf),
            _ => {}
        }
    }

    /// Ends the block of `kind`; an end without its start is the whole block at once.
    fn end_block(&mut self, kind: Block, whole: &str, buf: &mut Vec<u8>) {
        if !self.is_open(kind) {
            self.delta(kind, whole, buf);
        }
        self.close(buf);
    }

    fn open_text(&mut self, buf: &mut Vec<u8>) {
        self.close(buf);
        self.step(buf);
        let id = self.next_id("text");
        write_chunk(&Chunk::TextStart { id: &id }, buf);
        self.open = Some(Open::Text(id));
    }

    fn open_reasoning(&mut self, buf: &mut Vec<u8>) {
        self.close(buf);
        self.step(buf);
        let id = self.next_id("reasoning");
        write_chunk(&Chunk::ReasoningStart { id: &id }, buf);
        self.open = Some(Open::Reasoning(id));
    }

    /// Closes the open block: a tool call open now was cut short.
    fn close(&mut self, buf: &mut Vec<u8>) {
        match self.open.take() {
            Some(Open::Text(id)) => write_chunk(&Chunk::TextEnd { id: &id }, buf),
            Some(Open::Reasoning(id)) => write_chunk(&Chunk::ReasoningEnd { id: &id }, buf),
            Some(Open::Tool {
                id,
                name,
                arguments,
                shown: true,
            }) => {
                write_chunk(
                    &Chunk::ToolInputError {
                        tool_call_id: &id,
                        tool_name: &name,
                        input: &Value::String(arguments),
                        error_text: CUT,
                    },
                    buf,
                );
                self.inputs.insert(id);
            }
            Some(Open::Tool { shown: false, .. }) | None => {}
        }
    }

    /// Gives the client `call`'s input, unless it has it.
    fn input(&mut self, call: &ToolCall, arguments: &str, buf: &mut Vec<u8>) {
        if self.inputs.contains(&call.id) {
            return;
        }
        self.close(buf);
        self.step(buf);
        write_chunk(
            &Chunk::ToolInputStart {
                tool_call_id: &call.id,
                tool_name: &call.name,
            },
            buf,
        );
        if !arguments.is_empty() {
            write_chunk(
                &Chunk::ToolInputDelta {
                    tool_call_id: &call.id,
                    input_text_delta: arguments,
                },
                buf,
            );
        }
        write_chunk(
            &Chunk::ToolInputAvailable {
                tool_call_id: &call.id,
                tool_name: &call.name,
                input: &call.arguments,
            },
            buf,
        );
        self.inputs.insert(call.id.clone());
    }

    /// Makes sure the client has a tool part for `id` before its output (a call it never saw
    /// shows as a call of a tool named `unknown`).
    fn known(&mut self, id: &str, buf: &mut Vec<u8>) {
        if !self.inputs.contains(id) {
            let call = ToolCall {
                id: id.to_owned(),
                name: "unknown".to_owned(),
                arguments: Value::Object(Map::new()),
            };
            self.input(&call, "", buf);
        }
    }
}

impl agent::Encoder for UiMessageStream {
    fn event(&mut self, event: &AgentEvent, buf: &mut Vec<u8>) {
        Self::event(self, event, buf);
    }

    fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        Self::failed(self, message, buf);
    }

    fn end(&mut self, buf: &mut Vec<u8>) {
        Self::end(self, buf);
    }
}

// ---------------------------------------------------------------------------------------------
// The request.

/// `POST /agent/{name}/chat`: what `DefaultChatTransport` sends, and the two fields of ours a
/// client may add through its `body` option.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChatRequest {
    /// The chat: the session's id.
    id: String,
    /// The whole conversation, as the client has it.
    messages: Vec<UiMessage>,
    /// `submit-message` or `regenerate-message`.
    #[serde(default)]
    trigger: Trigger,
    /// The assistant message to regenerate.
    #[serde(default)]
    message_id: Option<String>,
    /// The client's own tools (run by the client), for a chat the server does not know yet.
    #[serde(default)]
    tools: Vec<ToolSpec>,
    /// The system prompt, for a chat the server does not know yet.
    #[serde(default)]
    system: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Trigger {
    #[default]
    SubmitMessage,
    RegenerateMessage,
}

/// A `UIMessage`: the parts are read as far as the agent needs them, others are skipped.
#[derive(Debug, Deserialize)]
struct UiMessage {
    #[serde(default)]
    id: String,
    role: UiRole,
    #[serde(default)]
    parts: Vec<UiPart>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum UiRole {
    System,
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
struct UiPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    fields: Map<String, Value>,
}

impl UiPart {
    fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// The tool a tool part calls: `tool-{name}`, or a `dynamic-tool`'s `toolName`.
    fn tool_name(&self) -> Option<&str> {
        match self.kind.strip_prefix("tool-") {
            Some(name) => Some(name),
            None if self.kind == "dynamic-tool" => self.str("toolName"),
            None => None,
        }
    }

    /// A tool part's call, once its input is complete.
    fn tool_call(&self) -> Option<ToolCall> {
        let name = self.tool_name()?;
        let state = self.str("state")?;
        if state == "input-streaming" {
            return None;
        }
        Some(ToolCall {
            id: self.str("toolCallId")?.to_owned(),
            name: name.to_owned(),
            arguments: self
                .fields
                .get("input")
                .filter(|input| !input.is_null())
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
        })
    }

    /// A tool part's approval, once the user answered it (state `approval-responded`).
    fn approval(&self) -> Option<Approval> {
        if self.str("state")? != "approval-responded" {
            return None;
        }
        let call = self.str("toolCallId")?;
        let approval = self.fields.get("approval")?;
        let reason = approval.get("reason").and_then(Value::as_str);
        Some(match approval.get("approved").and_then(Value::as_bool)? {
            true => Approval::approve(call),
            false => Approval::deny(call, reason.unwrap_or_default()),
        })
    }

    /// A tool part's result: its output or error, if it has one.
    fn tool_result(&self) -> Option<ToolResultMessage> {
        let call = self.tool_call()?;
        let (content, details, is_error) = match self.str("state")? {
            "output-available" => match self.fields.get("output") {
                Some(Value::String(text)) => (text.clone(), None, false),
                Some(output) => (output.to_string(), Some(output.clone()), false),
                None => (String::new(), None, false),
            },
            "output-error" => (
                self.str("errorText")
                    .unwrap_or("the tool failed")
                    .to_owned(),
                None,
                true,
            ),
            "output-denied" => ("the user denied the call".to_owned(), None, true),
            _ => return None,
        };
        Some(ToolResultMessage {
            tool_call_id: call.id,
            tool_name: call.name,
            content,
            details,
            is_error,
            attachments: Vec::new(),
        })
    }
}

/// A user message's text and files.
fn user_message(message: &UiMessage) -> UserMessage {
    let text: Vec<&str> = message
        .parts
        .iter()
        .filter(|part| part.kind == "text")
        .filter_map(|part| part.str("text"))
        .collect();
    let files = message
        .parts
        .iter()
        .filter(|part| part.kind == "file")
        .filter_map(attachment);
    UserMessage::new(text.join("\n")).attachments(files)
}

/// A `file` part as an attachment: inline (`data:` URLs) or by its address.
fn attachment(part: &UiPart) -> Option<Attachment> {
    let url = part.str("url")?;
    let media_type = part.str("mediaType").unwrap_or("application/octet-stream");
    let inline = url
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
        .map(|(_, data)| data);
    Some(match (media_type.split('/').next(), inline) {
        (Some("image"), Some(data)) => Attachment::image(data, media_type),
        (Some("audio"), Some(data)) => Attachment::audio(data, media_type),
        (_, Some(data)) => Attachment::blob_resource(url_name(part), data, media_type),
        (Some("image"), None) => Attachment::Image {
            data: String::new(),
            mime_type: media_type.to_owned(),
            uri: Some(url.to_owned()),
        },
        (_, None) => Attachment::Resource {
            uri: url.to_owned(),
            mime_type: Some(media_type.to_owned()),
            text: None,
            blob: None,
        },
    })
}

fn url_name(part: &UiPart) -> String {
    part.str("filename").unwrap_or("attachment").to_owned()
}

/// An assistant `UIMessage` as the conversation's messages: one assistant message per step,
/// each followed by the results its tool parts carry (but for the calls in `skip`).
fn assistant_messages(message: &UiMessage, skip: &HashSet<String>, out: &mut Vec<Message>) {
    let mut content = Vec::new();
    let mut results = Vec::new();
    let flush = |content: &mut Vec<AssistantContent>,
                 results: &mut Vec<ToolResultMessage>,
                 out: &mut Vec<Message>| {
        if content.is_empty() {
            return;
        }
        let calls = content
            .iter()
            .any(|block| matches!(block, AssistantContent::ToolCall(_)));
        out.push(Message::Assistant(AssistantMessage {
            content: std::mem::take(content),
            stop_reason: if calls {
                StopReason::ToolCalls
            } else {
                StopReason::Stop
            },
            ..AssistantMessage::default()
        }));
        out.extend(results.drain(..).map(Message::ToolResult));
    };
    for part in &message.parts {
        match part.kind.as_str() {
            "step-start" => flush(&mut content, &mut results, out),
            "text" => {
                if let Some(text) = part.str("text") {
                    content.push(AssistantContent::Text {
                        text: text.to_owned(),
                    });
                }
            }
            "reasoning" => {
                if let Some(thinking) = part.str("text") {
                    content.push(AssistantContent::Thinking {
                        thinking: thinking.to_owned(),
                    });
                }
            }
            _ => {
                if let Some(call) = part.tool_call() {
                    if !skip.contains(&call.id)
                        && let Some(result) = part.tool_result()
                    {
                        results.push(result);
                    }
                    content.push(AssistantContent::ToolCall(call));
                }
            }
        }
    }
    flush(&mut content, &mut results, out);
}

/// The tool parts of the message's last step.
fn last_step(message: &UiMessage) -> &[UiPart] {
    let start = message
        .parts
        .iter()
        .rposition(|part| part.kind == "step-start")
        .map_or(0, |at| at + 1);
    &message.parts[start..]
}

/// A new chat's session state from the client's conversation, and what to run: the last user
/// message, or the results of the client's calls in the last step of the last assistant
/// message.
fn stateless(agent: &LlmAgent, request: &ChatRequest) -> Result<(LlmSession, TurnInput), Failure> {
    let Some((last, earlier)) = request.messages.split_last() else {
        return Err(
            Failure::malformed("`messages` is empty: there is nothing to answer").at("/messages"),
        );
    };
    let remote = |name: &str| match agent.tools().iter().find(|tool| tool.name() == name) {
        Some(tool) => !tool.is_local(),
        None => request.tools.iter().any(|tool| tool.name == name),
    };
    let mut system: Vec<String> = request.system.iter().cloned().collect();
    let mut history = Vec::new();
    let mut pending = Vec::new();
    let mut results = Vec::new();
    let mut skip = HashSet::new();
    if last.role == UiRole::Assistant {
        if let Some(part) = last_step(last)
            .iter()
            .find(|part| part.approval().is_some())
        {
            // The client could make up the call it approves: only a chat kept here has calls
            // waiting for approval.
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                format!(
                    "chat `{}` is not kept here, so it has no call `{}` waiting for approval",
                    cap(&request.id),
                    cap(part.str("toolCallId").unwrap_or_default())
                ),
            )
            .at("/messages"));
        }
        for part in last_step(last) {
            if let Some(call) = part.tool_call()
                && remote(&call.name)
            {
                if let Some(result) = part.tool_result() {
                    results.push(result);
                }
                skip.insert(call.id.clone());
                pending.push(call);
            }
        }
        if pending.is_empty() {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                "the last message is the assistant's and has no tool calls for the client: \
                 there is nothing to answer",
            )
            .at("/messages"));
        }
    }
    let convert =
        |message: &UiMessage, system: &mut Vec<String>, history: &mut Vec<Message>| match message
            .role
        {
            UiRole::System => system.push(user_message(message).content),
            UiRole::User => history.push(Message::User(user_message(message))),
            UiRole::Assistant => assistant_messages(message, &skip, history),
        };
    for message in earlier {
        convert(message, &mut system, &mut history);
    }
    let input = match last.role {
        UiRole::User => TurnInput::User(user_message(last)),
        UiRole::Assistant => {
            convert(last, &mut system, &mut history);
            TurnInput::ToolResults(results)
        }
        UiRole::System => {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                "the last message is a system message: there is nothing to answer",
            )
            .at("/messages"));
        }
    };
    let context = Context {
        system_prompt: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: history,
        tools: request.tools.clone(),
    };
    let mut state = agent.new_session(context).map_err(|error| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            error.to_string(),
        )
        .at("/tools")
    })?;
    if !pending.is_empty() {
        state.status = Status::AwaitingToolExecution;
        state.pending_tool_calls = pending;
    }
    Ok((state, input))
}

/// What to run on a stored session: the results of its pending client calls and the user's
/// decisions on its calls waiting for approval, from the last message's tool parts, or the last
/// user message.
fn resumed(
    agent: &LlmAgent,
    state: &LlmSession,
    request: &ChatRequest,
    waiting: WaitingCalls,
) -> Result<TurnInput, Failure> {
    let Some(last) = request.messages.last() else {
        return Err(
            Failure::malformed("`messages` is empty: there is nothing to answer").at("/messages"),
        );
    };
    if state.status == Status::AwaitingToolExecution && last.role == UiRole::Assistant {
        let local = |name: &str| {
            agent
                .tools()
                .iter()
                .any(|tool| tool.name() == name && tool.is_local())
        };
        let (approving, running): (Vec<&ToolCall>, Vec<&ToolCall>) = state
            .pending_tool_calls
            .iter()
            .partition(|call| local(&call.name));
        let pending = |calls: &[&ToolCall], id: &str| calls.iter().any(|call| call.id == id);
        let results: Vec<ToolResultMessage> = last
            .parts
            .iter()
            .filter_map(UiPart::tool_result)
            .filter(|result| pending(&running, &result.tool_call_id))
            .collect();
        if approving.is_empty() {
            return Ok(TurnInput::ToolResults(results));
        }
        let mut resume = Resume::new();
        resume.results = results;
        resume.approvals = last
            .parts
            .iter()
            .filter_map(UiPart::approval)
            .filter(|approval| pending(&approving, &approval.tool_call_id))
            .collect();
        return Ok(TurnInput::Resume(resume));
    }
    match last.role {
        UiRole::User
            if !state.pending_tool_calls.is_empty() && waiting == WaitingCalls::SetAside =>
        {
            Ok(agent.set_aside(state, user_message(last)))
        }
        UiRole::User => Ok(TurnInput::User(user_message(last))),
        _ => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            "the last message is not the user's, and the chat awaits no tool results from it: \
             there is nothing to answer",
        )
        .at(&format!("/messages/{}", request.messages.len() - 1))),
    }
}

// ---------------------------------------------------------------------------------------------
// The endpoint.

/// The headers of a UI message stream, as the AI SDK sends them.
const HEADERS: [(HeaderName, &str); 2] = [
    (header::CONNECTION, "keep-alive"),
    (
        HeaderName::from_static("x-vercel-ai-ui-message-stream"),
        "v1",
    ),
];

/// `POST /agent/{name}/chat`: one execution, as a UI message stream.
pub(crate) async fn chat(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, Failure> {
    let agent = agent::agent(&shared, &kind, &name)?;
    let bytes = body(bytes, shared.limits.max_body_bytes)?;
    let request: ChatRequest = codec::decode_object(&bytes)?;
    if request.id.is_empty() {
        return Err(Failure::malformed("`id` (the chat) is empty").at("/id"));
    }
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let stored = agent::load(agent, identity, &request.id).await?;
    let (init, input) = match (&stored, request.trigger) {
        (Some(session), Trigger::SubmitMessage) => {
            let waiting = shared.waiting_calls.unwrap_or(WaitingCalls::Refuse);
            let input = resumed(agent, &session.state(), &request, waiting)?;
            (AgentInit::new().resume(request.id.clone()), input)
        }
        (Some(session), Trigger::RegenerateMessage) => {
            // The client's conversation replaces the stored one; the chat's tools and prompt
            // stay unless the request brings its own.
            let (mut state, input) = stateless(agent, &request)?;
            let before = session.state();
            if before.status == Status::Running {
                return Err(Failure::new(
                    StatusCode::CONFLICT,
                    Code::SessionRunning,
                    format!("an execution runs on chat `{}`", cap(&request.id)),
                ));
            }
            if request.tools.is_empty() {
                state.tools = before.tools;
            }
            if state.system_prompt.is_none() {
                state.system_prompt = before.system_prompt;
            }
            state.options = before.options;
            state.total_cost = before.total_cost;
            session
                .update_state(state)
                .await
                .map_err(|error| match error {
                    // Another request changed the chat meanwhile.
                    bidi_session::StoreError::Conflict { .. } => Failure::new(
                        StatusCode::CONFLICT,
                        Code::SessionRunning,
                        error.to_string(),
                    ),
                    _ => Failure::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Code::ConnectionFailed,
                        error.to_string(),
                    ),
                })?;
            (AgentInit::new().resume(request.id.clone()), input)
        }
        (None, _) => {
            let (state, input) = stateless(agent, &request)?;
            (
                AgentInit::new().session_id(request.id.clone()).init(state),
                input,
            )
        }
    };
    let message_id = match (&input, request.messages.last()) {
        // Answers go on with the assistant message that called the tools.
        (TurnInput::ToolResults(_) | TurnInput::Resume(_), Some(last)) if !last.id.is_empty() => {
            last.id.clone()
        }
        _ => request
            .message_id
            .clone()
            .filter(|_| request.trigger == Trigger::RegenerateMessage)
            .unwrap_or_else(|| format!("msg-{}", uuid::Uuid::new_v4())),
    };
    let mut encoder = UiMessageStream::new(message_id);
    if let TurnInput::Resume(resume) = &input {
        let answered = resume.approvals.iter().map(|a| a.tool_call_id.clone());
        let denied = resume.approvals.iter().filter(|a| !a.approved);
        encoder = encoder
            .denied(denied.map(|a| a.tool_call_id.clone()).collect::<Vec<_>>())
            .shown(answered.collect::<Vec<_>>());
    }
    let key = ChatKey::new(identity, &name, &request.id);
    let (tee, reader) = Tee::new(Arc::clone(&shared), key.clone());
    let stream = Arc::clone(&tee.stream);
    agent::spawn(&shared, agent, init, input, identity, encoder, tee).await?;
    shared.chats.insert(key, &stream);
    Ok(ui_stream(reader.body()))
}

/// `body` as a UI message stream: 200 with the AI SDK's headers.
fn ui_stream(body: Body) -> Response {
    let mut response = crate::sse::response(body);
    for (name, value) in HEADERS {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `GET /agent/{name}/chat/{id}`: the stored chat as the AI SDK's `UIMessage[]` (for
/// `useChat({ messages })` after a page reload), or 404.
pub(crate) async fn messages(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<axum::Json<Vec<Value>>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let state = agent::stored(&shared, &kind, &name, identity.as_ref(), &id).await?;
    Ok(axum::Json(history::ui_messages(&state.messages)))
}

/// `GET /agent/{name}/chat/{id}/stream`: the answer chat `id` is streaming in this process,
/// from its first chunk, or 204 when there is none.
pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Response, Failure> {
    agent::agent(&shared, &kind, &name)?;
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    match shared.chats.attach(&ChatKey::new(identity, &name, &id)) {
        Attached::Nothing => Ok(StatusCode::NO_CONTENT.into_response()),
        Attached::TooLong => Err(Failure::new(
            StatusCode::GONE,
            Code::FrameTooLarge,
            format!(
                "the answer of chat `{}` is over the {} MiB kept for resuming it: only its \
                 first client reads it",
                cap(&id),
                RESUME_BYTES >> 20
            ),
        )),
        Attached::Reader(written, reader) => {
            let written = futures_util::stream::iter([Ok(written)]);
            let rest = reader.body().into_data_stream();
            Ok(ui_stream(Body::from_stream(written.chain(rest))))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bidi_llm::{AgentEvent, AssistantMessage, ErrorCode, ErrorMessage, Message, Role, Status};
    use serde_json::{Value, json};

    use super::*;

    /// The chunks of an encoded stream, `[DONE]` as the string "[DONE]".
    fn chunks(buf: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(buf).unwrap();
        assert!(text.ends_with("\n\n"), "{text}");
        text.split_terminator("\n\n")
            .map(|record| {
                let data = record.strip_prefix("data: ").unwrap();
                if data == "[DONE]" {
                    json!("[DONE]")
                } else {
                    serde_json::from_str(data).unwrap()
                }
            })
            .collect()
    }

    fn encode(events: &[AgentEvent], failed: Option<&str>) -> Vec<Value> {
        let mut encoder = UiMessageStream::new("m1");
        let mut buf = Vec::new();
        for event in events {
            encoder.event(event, &mut buf);
        }
        if let Some(message) = failed {
            encoder.failed(message, &mut buf);
        }
        encoder.end(&mut buf);
        chunks(&buf)
    }

    fn start() -> Vec<AgentEvent> {
        vec![
            AgentEvent::SessionStart {
                session_id: "c".into(),
            },
            AgentEvent::MessageStart { role: Role::User },
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
        ]
    }

    fn complete(status: Status) -> AgentEvent {
        AgentEvent::ExecuteComplete {
            status,
            pending_tool_calls: vec![],
            cost: 0.0,
        }
    }

    #[test]
    fn a_text_answer_is_one_step_of_one_text_block() {
        let mut events = start();
        events.extend([
            AgentEvent::ThinkingStart,
            AgentEvent::ThinkingDelta { delta: "hm".into() },
            AgentEvent::ThinkingEnd {
                thinking: "hm".into(),
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta { delta: "Hi".into() },
            AgentEvent::TextEnd { text: "Hi".into() },
            AgentEvent::MessageEnd {
                message: Box::new(Message::Assistant(AssistantMessage::default())),
            },
            complete(Status::Completed),
        ]);
        assert_eq!(
            encode(&events, None),
            [
                json!({"type": "start", "messageId": "m1"}),
                json!({"type": "start-step"}),
                json!({"type": "reasoning-start", "id": "reasoning-0"}),
                json!({"type": "reasoning-delta", "id": "reasoning-0", "delta": "hm"}),
                json!({"type": "reasoning-end", "id": "reasoning-0"}),
                json!({"type": "text-start", "id": "text-1"}),
                json!({"type": "text-delta", "id": "text-1", "delta": "Hi"}),
                json!({"type": "text-end", "id": "text-1"}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "stop"}),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn tool_call_inputs_stream_and_local_outputs_follow_in_the_step() {
        let call = ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: json!({"city": "Oslo"}),
        };
        let mut events = start();
        events.extend([
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Let me".into(),
            },
            // No `text_end`: the call's start ends the text.
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{\"city\":".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: String::new(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "\"Oslo\"}".into(),
            },
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: call.clone(),
            },
            AgentEvent::ToolExecutionStart {
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
                args: call.arguments,
            },
            AgentEvent::ToolExecutionDelta {
                tool_call_id: "c1".into(),
                delta: "su".into(),
            },
            AgentEvent::ToolExecutionDelta {
                tool_call_id: "c1".into(),
                delta: "n".into(),
            },
            AgentEvent::ToolExecutionEnd {
                tool_call_id: "c1".into(),
                output: "sun".into(),
                details: None,
                is_error: false,
                attachments: vec![],
            },
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c2".into(),
                tool_name: "ask".into(),
            },
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: ToolCall {
                    id: "c2".into(),
                    name: "ask".into(),
                    arguments: json!({}),
                },
            },
            complete(Status::AwaitingToolExecution),
        ]);
        assert_eq!(
            encode(&events, None),
            [
                json!({"type": "start", "messageId": "m1"}),
                json!({"type": "start-step"}),
                json!({"type": "text-start", "id": "text-0"}),
                json!({"type": "text-delta", "id": "text-0", "delta": "Let me"}),
                json!({"type": "text-end", "id": "text-0"}),
                json!({"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather"}),
                json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{\"city\":"}),
                json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "\"Oslo\"}"}),
                json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "weather", "input": {"city": "Oslo"}}),
                json!({"type": "tool-output-available", "toolCallId": "c1", "output": "su", "preliminary": true}),
                json!({"type": "tool-output-available", "toolCallId": "c1", "output": "sun", "preliminary": true}),
                json!({"type": "tool-output-available", "toolCallId": "c1", "output": "sun"}),
                json!({"type": "finish-step"}),
                json!({"type": "start-step"}),
                json!({"type": "tool-input-start", "toolCallId": "c2", "toolName": "ask"}),
                json!({"type": "tool-input-available", "toolCallId": "c2", "toolName": "ask", "input": {}}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "tool-calls"}),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn a_model_failure_mid_block_closes_the_block_before_the_error() {
        let mut events = start();
        events.extend([
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hal".into(),
            },
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{\"ci".into(),
            },
            AgentEvent::MessageEnd {
                message: Box::new(Message::Error(ErrorMessage {
                    error: "boom".into(),
                    partial: None,
                })),
            },
            AgentEvent::Error {
                code: ErrorCode::Other,
                error: "boom".into(),
                message: None,
            },
            complete(Status::Error),
        ]);
        assert_eq!(
            encode(&events, None),
            [
                json!({"type": "start", "messageId": "m1"}),
                json!({"type": "start-step"}),
                json!({"type": "text-start", "id": "text-0"}),
                json!({"type": "text-delta", "id": "text-0", "delta": "Hal"}),
                json!({"type": "text-end", "id": "text-0"}),
                json!({"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather"}),
                json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{\"ci"}),
                json!({"type": "tool-input-error", "toolCallId": "c1", "toolName": "weather",
                       "input": "{\"ci", "errorText": CUT}),
                json!({"type": "error", "errorText": "boom"}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "error"}),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn a_stream_cut_short_still_ends_and_nothing_follows_finish() {
        let mut events = start();
        events.extend([
            AgentEvent::ThinkingStart,
            AgentEvent::ThinkingDelta { delta: "a".into() },
        ]);
        let cut = encode(&events, Some("cancelled"));
        assert_eq!(
            cut[3..],
            [
                json!({"type": "reasoning-delta", "id": "reasoning-0", "delta": "a"}),
                json!({"type": "reasoning-end", "id": "reasoning-0"}),
                json!({"type": "error", "errorText": "cancelled"}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "error"}),
                json!("[DONE]"),
            ]
        );
        // Events after the end, and a failure after `finish`, add nothing.
        let mut done = start();
        done.push(complete(Status::Completed));
        done.push(AgentEvent::TextStart);
        let ended = encode(&done, Some("late"));
        assert_eq!(
            ended,
            [
                json!({"type": "start", "messageId": "m1"}),
                json!({"type": "start-step"}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "stop"}),
                json!("[DONE]"),
            ]
        );
        // No events at all: still a whole stream.
        assert_eq!(
            encode(&[], None),
            [
                json!({"type": "start", "messageId": "m1"}),
                json!({"type": "finish", "finishReason": "other"}),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn a_call_cut_by_a_cancellation_or_a_lost_connection_fails_its_input() {
        let mut events = start();
        events.extend([
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{".into(),
            },
        ]);
        let cut = json!({"type": "tool-input-error", "toolCallId": "c1", "toolName": "weather",
                         "input": "{", "errorText": CUT});
        // The execution's connection fails.
        assert_eq!(
            encode(&events, Some("gone"))[4..],
            [
                cut.clone(),
                json!({"type": "error", "errorText": "gone"}),
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "error"}),
                json!("[DONE]"),
            ]
        );
        // A cancellation aborts the answer.
        events.extend([
            AgentEvent::MessageEnd {
                message: Box::new(Message::Aborted(bidi_llm::AbortedMessage {
                    partial: AssistantMessage::default(),
                })),
            },
            complete(Status::Completed),
        ]);
        assert_eq!(
            encode(&events, None)[4..],
            [
                cut,
                json!({"type": "finish-step"}),
                json!({"type": "finish", "finishReason": "other"}),
                json!("[DONE]"),
            ]
        );
    }

    #[test]
    fn a_call_whose_start_has_no_id_comes_whole_at_its_end() {
        let mut events = start();
        events.extend([
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: String::new(),
                tool_name: String::new(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{}".into(),
            },
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: ToolCall {
                    id: "c1".into(),
                    name: "ask".into(),
                    arguments: json!({}),
                },
            },
        ]);
        assert_eq!(
            encode(&events, None)[2..5],
            [
                json!({"type": "tool-input-start", "toolCallId": "c1", "toolName": "ask"}),
                json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{}"}),
                json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "ask", "input": {}}),
            ]
        );
    }

    #[test]
    fn outputs_of_calls_the_client_never_saw_get_their_input_first() {
        let events = [AgentEvent::ToolExecutionEnd {
            tool_call_id: "x".into(),
            output: "no".into(),
            details: None,
            is_error: true,
            attachments: vec![],
        }];
        assert_eq!(
            encode(&events, None)[1..5],
            [
                json!({"type": "start-step"}),
                json!({"type": "tool-input-start", "toolCallId": "x", "toolName": "unknown"}),
                json!({"type": "tool-input-available", "toolCallId": "x", "toolName": "unknown", "input": {}}),
                json!({"type": "tool-output-error", "toolCallId": "x", "errorText": "no"}),
            ]
        );
    }

    fn request(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_new_chat_is_made_from_the_client_conversation() {
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let chat = request(json!({
            "id": "c", "trigger": "submit-message", "system": "Be brief.",
            "tools": [{"name": "ask", "description": "Asks", "parameters": {"type": "object"}}],
            "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                {"id": "a1", "role": "assistant", "parts": [
                    {"type": "step-start"},
                    {"type": "text", "text": "Let me ask.", "state": "done"},
                    {"type": "tool-ask", "toolCallId": "k1", "state": "output-available",
                     "input": {"q": "ok?"}, "output": {"yes": true}},
                ]},
            ],
        }));
        let (state, input) = stateless(&agent, &chat).unwrap();
        assert_eq!(state.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(state.status, Status::AwaitingToolExecution);
        assert_eq!(state.pending_tool_calls[0].id, "k1");
        assert_eq!(state.messages.len(), 2, "{:?}", state.messages);
        let TurnInput::ToolResults(results) = input else {
            panic!("{input:?}")
        };
        assert_eq!(results[0].content, r#"{"yes":true}"#);
        assert_eq!(results[0].details, Some(json!({"yes": true})));
    }

    // -----------------------------------------------------------------------------------------
    // Resumption: the registry and its tee, without sockets.
}
