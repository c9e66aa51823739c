//! [`Model`]: what the agent loop calls, the events it streams, and [`ScriptedModel`].

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::stream::{self, BoxStream};
use serde_json::Value;

use crate::event::AgentEvent;
use crate::message::{AssistantContent, AssistantMessage, Message, StopReason, ToolCall, Usage};

/// What a model is asked: the conversation so far and the tools it may call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools it may call.
    pub tools: Vec<ToolSpec>,
}

impl ModelRequest {
    /// A request for `messages` with `tools`.
    #[must_use]
    pub fn new(messages: Vec<Message>, tools: Vec<ToolSpec>) -> Self {
        Self { messages, tools }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON Schema of its arguments.
    pub parameters: Value,
}

/// One event of a model's streamed answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelEvent {
    /// A text block begins.
    TextStart,
    /// More text.
    TextDelta(String),
    /// The text block ends.
    TextEnd,
    /// A thinking block begins.
    ThinkingStart,
    /// More thinking.
    ThinkingDelta(String),
    /// The thinking block ends.
    ThinkingEnd,
    /// A tool call begins.
    ToolCallStart {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of the tool call's arguments, as JSON text.
    ToolCallDelta(String),
    /// The tool call ends.
    ToolCallEnd,
    /// The answer is complete.
    Done {
        /// Why the model stopped.
        stop_reason: StopReason,
        /// What the call used.
        usage: Usage,
    },
    /// The call failed (HTTP error, malformed stream, dropped connection).
    Error(String),
}

/// A language model the agent loop can call: one streamed answer per request.
///
/// A stream that ends without [`ModelEvent::Done`] or [`ModelEvent::Error`] counts as an error.
pub trait Model: Send + Sync + 'static {
    /// Streams the answer to `request`.
    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent>;
}

/// Builds an [`AssistantMessage`] from model events, and says which [`AgentEvent`]s they are.
#[derive(Debug, Default)]
pub struct Assembler {
    message: AssistantMessage,
    /// The block being streamed: its kind and text so far.
    open: Option<Open>,
    tool_calls: usize,
}

#[derive(Debug)]
enum Open {
    Text(String),
    Thinking(String),
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

/// What an [`Assembler`] made of the events it was given.
#[derive(Debug, Clone, PartialEq)]
pub enum Assembled {
    /// More to come.
    Streaming,
    /// The message is complete.
    Done(AssistantMessage),
    /// The call failed; the partial message.
    Failed {
        /// What went wrong.
        error: String,
        /// What had been produced.
        partial: AssistantMessage,
    },
}

impl Assembler {
    /// An empty message.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The message so far (open blocks included), for an abort.
    #[must_use]
    pub fn partial(&self) -> AssistantMessage {
        let mut message = self.message.clone();
        if let Some(open) = &self.open {
            message.content.push(close(open));
        }
        message
    }

    /// Applies one model event; pushes the agent events it stands for onto `out`.
    pub fn apply(&mut self, event: ModelEvent, out: &mut Vec<AgentEvent>) -> Assembled {
        match event {
            ModelEvent::TextStart => {
                self.finish_open(out);
                self.open = Some(Open::Text(String::new()));
                out.push(AgentEvent::TextStart);
            }
            ModelEvent::ThinkingStart => {
                self.finish_open(out);
                self.open = Some(Open::Thinking(String::new()));
                out.push(AgentEvent::ThinkingStart);
            }
            ModelEvent::ToolCallStart { id, name } => {
                self.finish_open(out);
                self.open = Some(Open::ToolCall {
                    id,
                    name,
                    arguments: String::new(),
                });
                out.push(AgentEvent::ToolcallStart {
                    index: self.tool_calls,
                });
            }
            ModelEvent::TextDelta(delta)
            | ModelEvent::ThinkingDelta(delta)
            | ModelEvent::ToolCallDelta(delta) => {
                let index = self.tool_calls;
                match &mut self.open {
                    Some(Open::Text(text)) => {
                        text.push_str(&delta);
                        out.push(AgentEvent::TextDelta { delta });
                    }
                    Some(Open::Thinking(thinking)) => {
                        thinking.push_str(&delta);
                        out.push(AgentEvent::ThinkingDelta { delta });
                    }
                    Some(Open::ToolCall { arguments, .. }) => {
                        arguments.push_str(&delta);
                        out.push(AgentEvent::ToolcallDelta { index, delta });
                    }
                    None => {
                        return self
                            .fail(format!("the model streamed {delta:?} outside any block"));
                    }
                }
            }
            ModelEvent::TextEnd | ModelEvent::ThinkingEnd | ModelEvent::ToolCallEnd => {
                self.finish_open(out);
            }
            ModelEvent::Done { stop_reason, usage } => {
                self.finish_open(out);
                self.message.stop_reason = stop_reason;
                self.message.usage = usage;
                return Assembled::Done(std::mem::take(&mut self.message));
            }
            ModelEvent::Error(error) => return self.fail(error),
        }
        Assembled::Streaming
    }

    /// The stream ended without `Done`.
    pub fn ended(&mut self) -> Assembled {
        self.fail("the model's stream ended before the answer was complete".to_owned())
    }

    fn fail(&mut self, error: String) -> Assembled {
        let mut partial = self.partial();
        self.open = None;
        partial.stop_reason = StopReason::Error;
        Assembled::Failed { error, partial }
    }

    fn finish_open(&mut self, out: &mut Vec<AgentEvent>) {
        let Some(open) = self.open.take() else { return };
        let block = close(&open);
        match &block {
            AssistantContent::Text { text } => out.push(AgentEvent::TextEnd { text: text.clone() }),
            AssistantContent::Thinking { thinking } => out.push(AgentEvent::ThinkingEnd {
                thinking: thinking.clone(),
            }),
            AssistantContent::ToolCall(call) => {
                out.push(AgentEvent::ToolcallEnd {
                    index: self.tool_calls,
                    tool_call: call.clone(),
                });
                self.tool_calls += 1;
            }
        }
        self.message.content.push(block);
    }
}

/// A block as it stands. Tool-call arguments that are not valid JSON are kept as a string, so
/// that the tool's validation reports them instead of the loop failing.
fn close(open: &Open) -> AssistantContent {
    match open {
        Open::Text(text) => AssistantContent::Text { text: text.clone() },
        Open::Thinking(thinking) => AssistantContent::Thinking {
            thinking: thinking.clone(),
        },
        Open::ToolCall {
            id,
            name,
            arguments,
        } => AssistantContent::ToolCall(ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: if arguments.trim().is_empty() {
                Value::Object(serde_json::Map::new())
            } else {
                serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.clone()))
            },
        }),
    }
}

/// A deterministic model: answers each request with the next scripted response. The embedded
/// default for examples and tests.
///
/// ```
/// use bidi_llm::{Model, ModelRequest, Scripted, ScriptedModel};
/// use futures_util::StreamExt;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let model = ScriptedModel::new([
///     Scripted::new().tool_call("call-1", "weather", &json!({"city": "Oslo"})),
///     Scripted::new().text("It is sunny in Oslo."),
/// ]);
/// let events: Vec<_> = model.stream(ModelRequest::new(vec![], vec![])).collect().await;
/// assert!(matches!(events.last(), Some(bidi_llm::ModelEvent::Done { .. })));
/// assert_eq!(model.requests().len(), 1);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ScriptedModel {
    script: Arc<Mutex<VecDeque<Scripted>>>,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
}

impl ScriptedModel {
    /// A model answering with `responses`, in order. Once they run out, each call fails.
    pub fn new(responses: impl IntoIterator<Item = Scripted>) -> Self {
        Self {
            script: Arc::new(Mutex::new(responses.into_iter().collect())),
            requests: Arc::default(),
        }
    }

    /// Every request received so far.
    #[must_use]
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Model for ScriptedModel {
    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
        let next = self
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let events = next.map_or_else(
            || {
                vec![ModelEvent::Error(
                    "the scripted model has no response left".to_owned(),
                )]
            },
            |scripted| scripted.events(),
        );
        Box::pin(stream::iter(events))
    }
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field(
                "remaining",
                &self
                    .script
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .finish()
    }
}

/// One scripted answer: blocks streamed in pieces, then `Done` (or a failure).
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct Scripted {
    events: Vec<ModelEvent>,
    usage: Usage,
    ending: Option<ModelEvent>,
    cut: bool,
}

impl Scripted {
    /// An empty answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A text block, streamed word by word.
    pub fn text(mut self, text: &str) -> Self {
        self.events.push(ModelEvent::TextStart);
        self.events.extend(
            text.split_inclusive(' ')
                .map(|word| ModelEvent::TextDelta(word.to_owned())),
        );
        self.events.push(ModelEvent::TextEnd);
        self
    }

    /// A thinking block, streamed word by word.
    pub fn thinking(mut self, thinking: &str) -> Self {
        self.events.push(ModelEvent::ThinkingStart);
        self.events.extend(
            thinking
                .split_inclusive(' ')
                .map(|word| ModelEvent::ThinkingDelta(word.to_owned())),
        );
        self.events.push(ModelEvent::ThinkingEnd);
        self
    }

    /// A tool call whose arguments are streamed in two pieces.
    pub fn tool_call(self, id: &str, name: &str, arguments: &Value) -> Self {
        self.raw_tool_call(id, name, &arguments.to_string())
    }

    /// A tool call with arguments given as raw text (which may be invalid JSON).
    pub fn raw_tool_call(mut self, id: &str, name: &str, arguments: &str) -> Self {
        self.events.push(ModelEvent::ToolCallStart {
            id: id.to_owned(),
            name: name.to_owned(),
        });
        let middle = arguments
            .char_indices()
            .nth(arguments.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        let (first, second) = arguments.split_at(middle);
        for piece in [first, second]
            .into_iter()
            .filter(|piece| !piece.is_empty())
        {
            self.events
                .push(ModelEvent::ToolCallDelta(piece.to_owned()));
        }
        self.events.push(ModelEvent::ToolCallEnd);
        self
    }

    /// The usage reported with `Done`.
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Fails with `error` after the blocks so far (mid-stream, the last block left open).
    pub fn fail(mut self, error: &str) -> Self {
        self.ending = Some(ModelEvent::Error(error.to_owned()));
        self.cut = true;
        self
    }

    /// The model events this answer streams.
    #[must_use]
    pub fn events(&self) -> Vec<ModelEvent> {
        let mut events = self.events.clone();
        match &self.ending {
            Some(ending) => {
                if self.cut {
                    // Leave the last block open, as a dropped connection would.
                    if matches!(
                        events.last(),
                        Some(
                            ModelEvent::TextEnd | ModelEvent::ThinkingEnd | ModelEvent::ToolCallEnd
                        )
                    ) {
                        events.pop();
                    }
                }
                events.push(ending.clone());
            }
            None => {
                let stop_reason = if events
                    .iter()
                    .any(|e| matches!(e, ModelEvent::ToolCallStart { .. }))
                {
                    StopReason::ToolUse
                } else {
                    StopReason::Stop
                };
                events.push(ModelEvent::Done {
                    stop_reason,
                    usage: self.usage,
                });
            }
        }
        events
    }
}
