//! The encoder: an execution's [`AgentEvent`]s as the chunks of the UI message stream.
//!
//! Its open block is `bidi_llm`'s `Blocks`, the tracker AG-UI's encoder shares. A tool call
//! opens at `toolcall_start` (`tool-input-start`); a start without an id, from an older
//! producer, falls back to the whole call at `toolcall_end`. The repository's
//! `tests/tests/vercel_client.rs` runs hundreds of seeded executions of the real agent loop
//! through it, then through `ai`'s `readUIMessageStream`, which must read every one.

use std::collections::{HashMap, HashSet};

use bidi_llm::{AgentEvent, Message, Role, Status, StopReason, ToolCall};
use serde_json::{Map, Value};

use super::chunk::{Chunk, DataChunk, FinishReason, write_chunk};
use axum::body::Body;
use axum::http::HeaderValue;
use axum::response::Response;
use bidi_agent::AgentOutput;
use bidi_flow::wire::Wire;
use bidi_llm::LlmSession;
use bidi_llm::{Block, Blocks};

/// The kinds of content block a delta goes to.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Reasoning,
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
/// | `model_retry` | the open block's end, then `data-model-retry{id, data: {attempt, model, delayMs, error, discarded}}` |
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
/// use bidi_ai_sdk::UiMessageStream;
/// use bidi_llm::AgentEvent;
///
/// let mut encoder = UiMessageStream::new("msg-1");
/// let mut buf = Vec::new();
/// encoder.event(&AgentEvent::SessionStart { session_id: "chat-1".into(), snapshot_id: None }, &mut buf);
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
    /// The block being streamed: text, reasoning, or a tool call whose input is streaming
    /// (`shown`: its `tool-input-start` is written), or, for a start without an id, whose
    /// arguments wait for its end.
    open: Blocks,
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
            open: Blocks::default(),
            blocks: 0,
            inputs: HashSet::new(),
            outputs: HashMap::new(),
            stop: None,
            finished: false,
            denied: HashSet::new(),
        }
    }

    /// `body` (the bytes of a stream this encoder wrote) as the AI SDK reads it: 200,
    /// `text/event-stream`, and the UI message stream's headers.
    pub fn response(body: Body) -> Response {
        let mut response = bidi_http::sse::response(body);
        for (name, value) in super::HEADERS {
            response
                .headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        response
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
    ///
    /// Long by design: one arm per event kind, in the order of the table above, so the wire's
    /// whole mapping reads in one place.
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
            AgentEvent::TextDelta { delta } => self.delta(Kind::Text, delta, buf),
            AgentEvent::TextEnd { text } => self.end_block(Kind::Text, text, buf),
            AgentEvent::ThinkingStart => self.open_reasoning(buf),
            AgentEvent::ThinkingDelta { delta } => self.delta(Kind::Reasoning, delta, buf),
            AgentEvent::ThinkingEnd { thinking } => {
                self.end_block(Kind::Reasoning, thinking, buf);
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
                self.open.open(Block::ToolCall {
                    id: tool_call_id.clone(),
                    name: tool_name.clone(),
                    arguments: String::new(),
                    shown,
                });
            }
            AgentEvent::ToolcallDelta { delta, .. } => {
                if let Some(Block::ToolCall {
                    id,
                    arguments,
                    shown,
                    ..
                }) = self.open.current_mut()
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
            AgentEvent::ToolcallEnd { tool_call, .. } => match self.open.close() {
                Some(Block::ToolCall {
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
                Some(Block::ToolCall {
                    arguments,
                    shown: false,
                    ..
                }) => self.input(tool_call, &arguments, buf),
                open => {
                    // An end without its start: the whole call at once.
                    if let Some(open) = open {
                        self.open.open(open);
                    }
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
                    arguments: (**args).clone(),
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
                let chunk = DataChunk {
                    kind: &format!("data-{name}"),
                    id: tool_call_id,
                    data,
                };
                bidi_http::sse::data(buf, &chunk);
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
            AgentEvent::ModelRetry { attempt, .. } => {
                // The failed attempt's open block ends where it stopped; what the next
                // attempt streams goes to blocks of its own.
                self.close(buf);
                let chunk = DataChunk {
                    kind: "data-model-retry",
                    id: &format!("model-retry-{attempt}"),
                    data: &event.fields(),
                };
                bidi_http::sse::data(buf, &chunk);
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
        bidi_http::sse::done(buf);
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
    fn is_open(&self, kind: Kind) -> bool {
        match kind {
            Kind::Text => self.open.text().is_some(),
            Kind::Reasoning => self.open.reasoning().is_some(),
        }
    }

    /// Writes `delta` to the open block of `kind`, opening one first if another is open.
    fn delta(&mut self, kind: Kind, delta: &str, buf: &mut Vec<u8>) {
        if !self.is_open(kind) {
            match kind {
                Kind::Text => self.open_text(buf),
                Kind::Reasoning => self.open_reasoning(buf),
            }
        }
        match self.open.current() {
            Some(Block::Text(id)) => write_chunk(&Chunk::TextDelta { id, delta }, buf),
            Some(Block::Reasoning(id)) => write_chunk(&Chunk::ReasoningDelta { id, delta }, buf),
            _ => {}
        }
    }

    /// Ends the block of `kind`; an end without its start is the whole block at once.
    fn end_block(&mut self, kind: Kind, whole: &str, buf: &mut Vec<u8>) {
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
        self.open.open(Block::Text(id));
    }

    fn open_reasoning(&mut self, buf: &mut Vec<u8>) {
        self.close(buf);
        self.step(buf);
        let id = self.next_id("reasoning");
        write_chunk(&Chunk::ReasoningStart { id: &id }, buf);
        self.open.open(Block::Reasoning(id));
    }

    /// Closes the open block: a tool call open now was cut short.
    fn close(&mut self, buf: &mut Vec<u8>) {
        match self.open.close() {
            Some(Block::Text(id)) => write_chunk(&Chunk::TextEnd { id: &id }, buf),
            Some(Block::Reasoning(id)) => write_chunk(&Chunk::ReasoningEnd { id: &id }, buf),
            Some(Block::ToolCall {
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
            _ => {}
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

impl Wire for UiMessageStream {
    type Event = AgentEvent;
    type Output = AgentOutput<LlmSession, u32>;
    type Frames = Vec<u8>;

    fn event(&mut self, event: AgentEvent, buf: &mut Vec<u8>) {
        Self::event(self, &event, buf);
    }

    fn failed(&mut self, message: &str, buf: &mut Vec<u8>) {
        Self::failed(self, message, buf);
    }

    fn end(&mut self, buf: &mut Vec<u8>) {
        Self::end(self, buf);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bidi_llm::{AgentEvent, AssistantMessage, Code, ErrorMessage, Message, Role, Status};
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
                snapshot_id: None,
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
            pending_approvals: Vec::new(),
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
    fn a_retry_ends_the_cut_block_and_says_so_in_a_data_part() {
        let mut events = start();
        events.extend([
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hel".into(),
            },
            AgentEvent::ModelRetry {
                attempt: 2,
                model: "m".into(),
                delay_ms: 1_000,
                error: "HTTP 429: {}".into(),
                discarded: true,
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hello".into(),
            },
            AgentEvent::TextEnd {
                text: "Hello".into(),
            },
            complete(Status::Completed),
        ]);
        let chunks = encode(&events, None);
        assert_eq!(chunks[4], json!({"type": "text-end", "id": "text-0"}));
        assert_eq!(
            chunks[5],
            json!({"type": "data-model-retry", "id": "model-retry-2", "data": {
                "attempt": 2, "model": "m", "delayMs": 1_000, "error": "HTTP 429: {}",
                "discarded": true}})
        );
        assert_eq!(chunks[6], json!({"type": "text-start", "id": "text-1"}));
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
                tool_call: Box::new(call.clone()),
            },
            AgentEvent::ToolExecutionStart {
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
                args: Box::new(call.arguments),
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
                tool_call: Box::new(ToolCall {
                    id: "c2".into(),
                    name: "ask".into(),
                    arguments: json!({}),
                }),
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
                code: Code::Other,
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
                tool_call: Box::new(ToolCall {
                    id: "c1".into(),
                    name: "ask".into(),
                    arguments: json!({}),
                }),
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
}
