//! The encoder: one execution's agent events as the AG-UI events of one run.
//!
//! It is stateful and total: blocks left open by a failure or a cancellation are closed before
//! the error, and nothing follows `RUN_ERROR`. The open block is `bidi_llm`'s `Blocks`, the
//! tracker the UI message stream's encoder shares. A tool call opens at `toolcall_start` (which
//! carries its id and tool); a start without an id, from an older producer, falls back to the
//! whole call at `toolcall_end`. Text deltas are written straight from the event, without an
//! AG-UI event in between, so that the hot path costs what the execute endpoint's SSE does.
//! The repository's `tests/tests/agui_client.rs` runs hundreds of seeded executions of the real
//! agent loop (failures, tools of every kind, cancellation at random points) through it, then
//! through `@ag-ui/client`'s `HttpAgent`.

use super::*;

/// Turns one execution's [`AgentEvent`]s into the AG-UI events of one run, in an order
/// `@ag-ui/client` accepts, whatever the execution did: `RUN_STARTED` first; every text,
/// reasoning and tool call block ended before the run's last event; exactly one last event,
/// `RUN_FINISHED` or `RUN_ERROR`, and nothing after it.
///
/// ```
/// use bidi_agui::Encoder;
/// use bidi_llm::AgentEvent;
///
/// let mut encoder = Encoder::new("thread-1", "run-1");
/// let mut events = Vec::new();
/// encoder.event(&AgentEvent::SessionStart { session_id: "thread-1".into(), snapshot_id: None }, &mut events);
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
    pub(super) phase: Phase,
    /// The message of the model's current answer, once it has one.
    message_id: Option<String>,
    /// The text, reasoning or tool call block being streamed.
    pub(super) blocks: Blocks,
    /// A model answer was cut short by a cancellation.
    /// How the run's turn ends, as its events say.
    ending: Ending,
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
pub(super) enum Phase {
    /// Nothing written yet.
    Idle,
    /// `RUN_STARTED` written.
    Running,
    /// `RUN_FINISHED` or `RUN_ERROR` written: nothing more.
    Ended,
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
            blocks: Blocks::default(),
            ending: Ending::default(),
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
    ///
    /// Long by design: one arm per event kind, so the wire's whole mapping reads in one place.
    pub fn event(&mut self, event: &AgentEvent, out: &mut Vec<Event>) {
        if self.phase == Phase::Ended {
            return;
        }
        self.start(out);
        self.ending.observe(event);
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
                if let Some(id) = self.blocks.tool_call()
                    && !delta.is_empty()
                {
                    out.push(Event::ToolCallArgs {
                        tool_call_id: id.to_owned(),
                        delta: delta.clone(),
                    });
                }
            }
            AgentEvent::ToolcallEnd { tool_call, .. } => {
                if self.blocks.tool_call() == Some(tool_call.id.as_str()) {
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
            AgentEvent::ToolExecutionData {
                tool_call_id,
                name,
                data,
            } => out.push(Event::Custom {
                name: name.clone(),
                value: serde_json::json!({"toolCallId": tool_call_id, "data": data}),
            }),
            // A custom agent's state, as AG-UI's shared state.
            AgentEvent::CustomUpdate { custom } => out.push(Event::StateSnapshot {
                snapshot: custom.clone(),
            }),
            AgentEvent::ModelRetry { discarded, .. } => {
                // The failed attempt's open block ends where it stopped; an answer streamed
                // anew is a message of its own, and the event names the one it voids.
                self.close(out);
                let mut value = event.fields();
                let voided = if *discarded {
                    self.message_id.take()
                } else {
                    None
                };
                value["messageId"] = voided.into();
                out.push(Event::Custom {
                    name: "model_retry".to_owned(),
                    value,
                });
            }
            AgentEvent::Error { code, error, .. } => self.fail(error, Some(*code), out),
            AgentEvent::ExecuteComplete { .. } => {
                // The turn's state as the run's outcome: approvals interrupt it, the client's
                // calls are its pending calls, an aborted answer cancels it.
                let outcome = match self.ending.state() {
                    Some(TurnState::Waiting { approvals, .. }) if !approvals.is_empty() => {
                        self.close(out);
                        if let Some(snapshot) = self.snapshot.take() {
                            out.push(Event::MessagesSnapshot {
                                messages: snapshot.messages,
                            });
                        }
                        Outcome::Interrupt {
                            interrupts: approvals.iter().map(Interrupt::approval).collect(),
                        }
                    }
                    Some(TurnState::Waiting { results, .. }) => Outcome::Success {
                        pending_tool_call_ids: results.into_iter().map(|call| call.id).collect(),
                    },
                    Some(TurnState::Aborted) => Outcome::Cancelled,
                    Some(TurnState::Completed) => Outcome::Success {
                        pending_tool_call_ids: Vec::new(),
                    },
                    _ => {
                        // A failure the execution did not report with an `error` event first.
                        self.fail("the execution failed", None, out);
                        return;
                    }
                };
                self.close(out);
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
        let open = if reasoning {
            self.blocks.reasoning()
        } else {
            self.blocks.text()
        };
        let message_id = match open {
            Some(id) => id.to_owned(),
            None => {
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
        self.blocks.open(Block::Text(message_id.clone()));
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
        self.blocks.open(Block::Reasoning(message_id.clone()));
        message_id
    }

    fn open_tool_call(&mut self, tool_call_id: &str, tool_name: &str, out: &mut Vec<Event>) {
        let parent = self.message_id().to_owned();
        out.push(Event::ToolCallStart {
            tool_call_id: tool_call_id.to_owned(),
            tool_call_name: tool_name.to_owned(),
            parent_message_id: Some(parent),
        });
        self.blocks.open(Block::ToolCall {
            id: tool_call_id.to_owned(),
            name: tool_name.to_owned(),
            arguments: String::new(),
            shown: true,
        });
    }

    /// Ends the open block, if any.
    fn close(&mut self, out: &mut Vec<Event>) {
        match self.blocks.close() {
            Some(Block::ToolCall { id, .. }) => out.push(Event::ToolCallEnd { tool_call_id: id }),
            Some(Block::Text(message_id)) => out.push(Event::TextMessageEnd { message_id }),
            Some(Block::Reasoning(message_id)) => {
                out.push(Event::ReasoningMessageEnd {
                    message_id: message_id.clone(),
                });
                out.push(Event::ReasoningEnd { message_id });
            }
            _ => {}
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
    fn fail(&mut self, message: &str, code: Option<Code>, out: &mut Vec<Event>) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests;
