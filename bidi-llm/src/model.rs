//! [`Model`]: what the agent loop calls, the events it streams, and the [`Assembler`] that
//! turns them into a message and [`AgentEvent`]s.

use futures_util::stream::BoxStream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::Conversation;
use crate::error::ModelError;
use crate::event::AgentEvent;
use crate::message::{AssistantContent, AssistantMessage, StopReason, ToolCall, Usage};

/// What a model is asked: the system prompt, the conversation so far and the tools it may call.
///
/// ```
/// use bidi_llm::{Message, ModelRequest, UserMessage};
///
/// let request = ModelRequest::new(vec![Message::User(UserMessage::new("Hi"))], vec![])
///     .with_system_prompt("Answer in French.");
/// assert_eq!(request.system_prompt.as_deref(), Some("Answer in French."));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModelRequest {
    /// The instructions that come before the conversation, if any.
    pub system_prompt: Option<String>,
    /// The conversation, oldest first: shared with the session, not copied.
    pub messages: Conversation,
    /// The tools it may call.
    pub tools: Vec<ToolSpec>,
    /// How to sample the answer.
    pub options: ModelOptions,
}

/// How a model samples its answers: camelCase JSON, unknown keys refused. Unset options are the
/// provider's defaults.
///
/// ```
/// use bidi_llm::ModelOptions;
/// use serde_json::json;
///
/// let options: ModelOptions = serde_json::from_value(json!({"temperature": 0.2, "maxTokens": 500}))?;
/// assert_eq!((options.temperature, options.max_tokens), (Some(0.2), Some(500)));
/// assert!(serde_json::from_value::<ModelOptions>(json!({"model": "other"})).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelOptions {
    /// The sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// The most tokens an answer may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl ModelOptions {
    /// No options: the provider's defaults.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Samples at `temperature`.
    #[must_use]
    pub fn temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Caps answers at `max_tokens`.
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Whether every option is the provider's default.
    #[must_use]
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl ModelRequest {
    /// A request for `messages` with `tools`, without a system prompt.
    #[must_use]
    pub fn new(messages: impl Into<Conversation>, tools: Vec<ToolSpec>) -> Self {
        Self {
            system_prompt: None,
            messages: messages.into(),
            tools,
            options: ModelOptions::default(),
        }
    }

    /// Samples the answer with `options`.
    #[must_use]
    pub fn with_options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Puts `prompt` before the conversation, as its system prompt.
    #[must_use]
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }
}

/// A tool as the model sees it: camelCase JSON, how a client declares a tool of its own in a
/// [`Context`](crate::Context).
///
/// ```
/// use bidi_llm::ToolSpec;
/// use serde_json::json;
///
/// let spec: ToolSpec = serde_json::from_value(json!({
///     "name": "pick_file",
///     "description": "Asks the user to pick a file",
///     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}},
/// }))?;
/// assert_eq!(spec.name, "pick_file");
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// Other fields (a `label`, say) are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// A JSON Schema of its arguments: a JSON object.
    pub parameters: Value,
}

/// One event of a model's streamed answer.
#[derive(Debug, Clone)]
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
    Error(ModelError),
}

/// A language model the agent loop can call: one streamed answer per request.
///
/// A stream that ends without [`ModelEvent::Done`] or [`ModelEvent::Error`] counts as an error.
pub trait Model: Send + Sync + 'static {
    /// The model's name (`gpt-4o-mini`): the session records the last one it called.
    fn name(&self) -> &str;

    /// Who serves it, as OpenTelemetry's GenAI conventions name providers
    /// (`gen_ai.provider.name`: `openai`, `anthropic`, `gcp.gemini`, ...): its model calls'
    /// spans say it. `_OTHER` unless a model says.
    fn provider(&self) -> &str {
        "_OTHER"
    }

    /// Streams the answer to `request`.
    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent>;
}

/// Builds an [`AssistantMessage`] from model events, and says which [`AgentEvent`]s they are:
/// what the agent loop does with each answer, for loops of your own.
///
/// ```
/// use bidi_llm::testing::{Scripted, ScriptedModel};
/// use bidi_llm::{AgentEvent, Assembled, Assembler, Model, ModelRequest};
/// use futures_util::StreamExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let model = ScriptedModel::new([Scripted::new().thinking("easy").text("Hello there")]);
/// let mut answer = model.stream(ModelRequest::new(vec![], vec![]));
/// let (mut assembler, mut events) = (Assembler::new(), Vec::new());
/// let mut message = None;
/// while let Some(event) = answer.next().await {
///     if let Assembled::Done(done) = assembler.apply(event, &mut events) {
///         message = Some(done);
///     }
/// }
/// assert_eq!(message.unwrap().text(), "Hello there");
/// assert_eq!(events.last(), Some(&AgentEvent::TextEnd { text: "Hello there".into() }));
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Assembler {
    message: AssistantMessage,
    /// The block being streamed: its kind and text so far.
    open: Option<Open>,
    tool_calls: usize,
}

#[derive(Debug, Clone)]
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
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Assembled {
    /// More to come.
    Streaming,
    /// The message is complete.
    Done(AssistantMessage),
    /// The call failed; the partial message.
    Failed {
        /// What went wrong.
        error: ModelError,
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
            message.content.push(close(open.clone()));
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
                out.push(AgentEvent::ToolcallStart {
                    index: self.tool_calls,
                    tool_call_id: id.clone(),
                    tool_name: name.clone(),
                });
                self.open = Some(Open::ToolCall {
                    id,
                    name,
                    arguments: String::new(),
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
                        return self.fail(ModelError::Protocol(format!(
                            "the model streamed {delta:?} outside any block"
                        )));
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
        self.fail(ModelError::Ended)
    }

    fn fail(&mut self, error: ModelError) -> Assembled {
        let mut partial = self.partial();
        self.open = None;
        partial.stop_reason = StopReason::Error;
        Assembled::Failed { error, partial }
    }

    fn finish_open(&mut self, out: &mut Vec<AgentEvent>) {
        let Some(open) = self.open.take() else { return };
        let block = close(open);
        match &block {
            AssistantContent::Text { text } => out.push(AgentEvent::TextEnd { text: text.clone() }),
            AssistantContent::Thinking { thinking } => out.push(AgentEvent::ThinkingEnd {
                thinking: thinking.clone(),
            }),
            AssistantContent::ToolCall(call) => {
                out.push(AgentEvent::ToolcallEnd {
                    index: self.tool_calls,
                    tool_call: Box::new(call.clone()),
                });
                self.tool_calls += 1;
            }
        }
        self.message.content.push(block);
    }
}

/// A block as it stands. Tool-call arguments that are not valid JSON are kept as a string, so
/// that the tool's validation reports them instead of the loop failing.
fn close(open: Open) -> AssistantContent {
    match open {
        Open::Text(text) => AssistantContent::Text { text },
        Open::Thinking(thinking) => AssistantContent::Thinking { thinking },
        Open::ToolCall {
            id,
            name,
            arguments,
        } => AssistantContent::ToolCall(ToolCall {
            id,
            name,
            arguments: if arguments.trim().is_empty() {
                Value::Object(serde_json::Map::new())
            } else {
                serde_json::from_str(&arguments).unwrap_or(Value::String(arguments))
            },
        }),
    }
}
