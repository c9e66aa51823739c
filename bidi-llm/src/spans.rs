//! An execution as OpenTelemetry spans in the GenAI semantic conventions: the development
//! version published with the semantic conventions up to v1.41 and carried on by their GenAI
//! repository (its `gen-ai-dev` 1.42 schema). Every name and attribute that is bidi's own
//! stays under `bidi.*`.
//!
//! In the turn span of the agent's connection (`turn {n}`, under the connection's span):
//!
//! - `invoke_agent {agent}` (internal), one per execution: `gen_ai.operation.name`,
//!   `gen_ai.agent.name`, `gen_ai.conversation.id` (the session id), the token totals of its
//!   model calls (`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`), the finish
//!   reason of its last answer, and how it ended (`bidi.status`: `completed`,
//!   `awaiting_tool_execution`, `error`); a failure sets the error status and `error.type`.
//! - `chat {model}` (client), one per model call: the provider (`gen_ai.provider.name`, from
//!   [`Model::provider`](crate::Model::provider)), the model, the options asked (`gen_ai.request.max_tokens`,
//!   `gen_ai.request.temperature`, `gen_ai.request.stream`), the finish reasons (`stop`,
//!   `length`, `tool_call`, `content_filter`, `error`) and the tokens used (input, output,
//!   cache read and written). A model's failure is `error.type` `model_error`, a call cut
//!   short `cancelled`.
//! - `execute_tool {tool}` (internal), one per tool call: `gen_ai.tool.name`,
//!   `gen_ai.tool.call.id`, `gen_ai.tool.type` (`extension` for a tool the agent runs,
//!   `function` for one its client runs) and, as `bidi.tool.outcome`, what became of it:
//!   `completed`, `failed` (`error.type` `tool_error`), `denied` (its approval refused,
//!   `error.type` `denied`), `cancelled`, or, for a call the execution stops at,
//!   `awaiting_approval` or `awaiting_client` (a call approved later has a span of its own in
//!   the execution that runs it; a call the client runs has no other: its result comes with
//!   the next input).
//!
//! What was said is recorded only when asked for
//! ([`record_content`](crate::LlmAgentBuilder::record_content), or the environment variable
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`): the conventions' opt-in
//! attributes as JSON, `gen_ai.system_instructions`, `gen_ai.input.messages` and
//! `gen_ai.output.messages` on a model call, `gen_ai.tool.call.arguments` and
//! `gen_ai.tool.call.result` on a tool call. Each text is cut at [`TEXT_LIMIT`] bytes, and a
//! model call's input keeps its latest messages within [`INPUT_LIMIT`] bytes
//! (`bidi.input_messages_omitted` counts the older ones left out): the JSON stays whole.
//!
//! The `chat` span is current while the model makes its stream: `OpenAiModel` sends it to the
//! provider as the application's propagator writes it (`traceparent` and `tracestate` with
//! OpenTelemetry's W3C propagator, installed with `global::set_text_map_propagator`).
//!
//! A connection that is not traced (no OpenTelemetry provider installed, or its span sampled
//! out) makes none of these: the execution checks once, at its start.

use std::sync::OnceLock;

use bidi_core::ActionContext;
use opentelemetry::trace::{SpanBuilder, SpanKind, Status, TraceContextExt as _};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value as OtelValue};
use serde_json::{Value, json};

use crate::message::{AssistantContent, AssistantMessage, Message, StopReason, ToolCall, Usage};
use crate::model::ModelRequest;
use crate::session::Status as Ended;

/// The most bytes of one text recorded as content.
pub const TEXT_LIMIT: usize = 4096;

/// The most bytes of a model call's input messages recorded as content.
pub const INPUT_LIMIT: usize = 32 * 1024;

/// The environment variable that turns content recording on for every agent.
const CAPTURE_VARIABLE: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Whether the environment asks for content.
fn content_from_env() -> bool {
    static ASKED: OnceLock<bool> = OnceLock::new();
    *ASKED.get_or_init(|| {
        std::env::var(CAPTURE_VARIABLE).is_ok_and(|value| value.eq_ignore_ascii_case("true"))
    })
}

/// What becomes of a tool call, as its span says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Failed,
    Denied,
    Cancelled,
    AwaitingApproval,
    AwaitingClient,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Denied => "denied",
            Self::Cancelled => "cancelled",
            Self::AwaitingApproval => "awaiting_approval",
            Self::AwaitingClient => "awaiting_client",
        }
    }

    /// Its `error.type`, when it is an error.
    fn error_type(self) -> Option<&'static str> {
        match self {
            Self::Failed => Some("tool_error"),
            Self::Denied => Some("denied"),
            Self::Cancelled => Some("cancelled"),
            _ => None,
        }
    }
}

/// The spans of one execution: its `invoke_agent` span, and what its model and tool calls
/// need to make theirs.
pub(crate) struct Spans {
    agent: Context,
    agent_name: String,
    session_id: String,
    content: bool,
    input_tokens: u64,
    output_tokens: u64,
    finish: Option<&'static str>,
}

/// A model call's span.
pub(crate) struct ChatSpan(Context);

impl ChatSpan {
    /// The context of the span, for the model's requests.
    pub(crate) fn context(&self) -> &Context {
        &self.0
    }
}

/// A tool call's span.
pub(crate) struct ToolSpan {
    cx: Context,
    content: bool,
}

impl ToolSpan {
    /// The context of the span, current while the tool runs (a client that runs it is sent
    /// it).
    pub(crate) fn context(&self) -> &Context {
        &self.cx
    }
}

impl Spans {
    /// The `invoke_agent` span of an execution of `agent` on `session_id`, in `ctx`'s turn;
    /// none when the connection is not traced.
    pub(crate) fn start(
        ctx: &ActionContext,
        agent: &str,
        session_id: &str,
        record_content: bool,
    ) -> Option<Self> {
        let builder = SpanBuilder::from_name(format!("invoke_agent {agent}"))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", agent.to_owned()),
                KeyValue::new("gen_ai.conversation.id", session_id.to_owned()),
            ]);
        let cx = bidi_flow::turn_span(ctx, builder)?;
        Some(Self {
            agent: cx,
            agent_name: agent.to_owned(),
            session_id: session_id.to_owned(),
            content: record_content || content_from_env(),
            input_tokens: 0,
            output_tokens: 0,
            finish: None,
        })
    }

    /// A `chat` span for a call of `model` (of `provider`) with `request`.
    pub(crate) fn chat(&self, model: &str, provider: &str, request: &ModelRequest) -> ChatSpan {
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_owned()),
            KeyValue::new("gen_ai.request.model", model.to_owned()),
            KeyValue::new("gen_ai.conversation.id", self.session_id.clone()),
            KeyValue::new("gen_ai.request.stream", true),
        ];
        if let Some(max_tokens) = request.options.max_tokens {
            attributes.push(KeyValue::new(
                "gen_ai.request.max_tokens",
                i64::from(max_tokens),
            ));
        }
        if let Some(temperature) = request.options.temperature {
            attributes.push(KeyValue::new("gen_ai.request.temperature", temperature));
        }
        let builder = SpanBuilder::from_name(format!("chat {model}"))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes);
        let cx = bidi_flow::child_span(&self.agent, builder);
        if self.content {
            record_input(&cx, request);
        }
        ChatSpan(cx)
    }

    /// Ends a model call's span with its answer, adding its tokens to the execution's.
    pub(crate) fn answered(&mut self, chat: ChatSpan, answer: &AssistantMessage) {
        let finish = finish_reason(answer.stop_reason);
        self.input_tokens += answer.usage.input;
        self.output_tokens += answer.usage.output;
        self.finish = Some(finish);
        let ChatSpan(cx) = chat;
        let span = cx.span();
        span.set_attribute(string_array("gen_ai.response.finish_reasons", finish));
        span.set_attributes(usage(&answer.usage));
        if self.content {
            let output = json!([{"role": "assistant", "parts": assistant_parts(answer)}]);
            span.set_attribute(KeyValue::new("gen_ai.output.messages", output.to_string()));
        }
        span.end();
    }

    /// Ends a model call's span that failed (`cancelled`: it was cut short), saying `why`.
    pub(crate) fn failed(&mut self, chat: ChatSpan, why: &str, cancelled: bool) {
        self.finish = Some("error");
        let ChatSpan(cx) = chat;
        let span = cx.span();
        span.set_attribute(string_array("gen_ai.response.finish_reasons", "error"));
        let error_type = if cancelled {
            "cancelled"
        } else {
            "model_error"
        };
        span.set_attribute(KeyValue::new("error.type", error_type));
        span.set_status(Status::error(why.to_owned()));
        span.end();
    }

    /// An `execute_tool` span for `call`, run by the agent (`local`) or its client.
    pub(crate) fn tool(&self, call: &ToolCall, local: bool) -> ToolSpan {
        let kind = if local { "extension" } else { "function" };
        let builder = SpanBuilder::from_name(format!("execute_tool {}", call.name))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", call.name.clone()),
                KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
                KeyValue::new("gen_ai.tool.type", kind),
                KeyValue::new("gen_ai.agent.name", self.agent_name.clone()),
                KeyValue::new("gen_ai.conversation.id", self.session_id.clone()),
            ]);
        let cx = bidi_flow::child_span(&self.agent, builder);
        if self.content {
            let arguments = bounded(&call.arguments);
            cx.span()
                .set_attribute(KeyValue::new("gen_ai.tool.call.arguments", arguments));
        }
        ToolSpan {
            cx,
            content: self.content,
        }
    }

    /// A span for each of `calls` the execution stops at, ended at once with `outcome`.
    pub(crate) fn stopped_at(&self, calls: &[ToolCall], local: bool, outcome: Outcome) {
        for call in calls {
            self.tool(call, local).end(outcome, None);
        }
    }

    /// Ends the `invoke_agent` span: how the execution ended (`status`), and why it failed.
    pub(crate) fn end(self, status: &str, failure: Option<&str>) {
        let span = self.agent.span();
        span.set_attributes([
            KeyValue::new("gen_ai.usage.input_tokens", saturating(self.input_tokens)),
            KeyValue::new("gen_ai.usage.output_tokens", saturating(self.output_tokens)),
            KeyValue::new("bidi.status", status.to_owned()),
        ]);
        if let Some(finish) = self.finish {
            span.set_attribute(string_array("gen_ai.response.finish_reasons", finish));
        }
        if let Some(why) = failure {
            span.set_attribute(KeyValue::new("error.type", "_OTHER"));
            span.set_status(Status::error(why.to_owned()));
        }
        span.end();
    }
}

impl ToolSpan {
    /// Ends the span with what became of the call, and its result.
    pub(crate) fn end(self, outcome: Outcome, result: Option<&str>) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("bidi.tool.outcome", outcome.as_str()));
        if let Some(error_type) = outcome.error_type() {
            span.set_attribute(KeyValue::new("error.type", error_type));
            span.set_status(Status::error(result.map(cut).unwrap_or_default()));
        } else if self.content
            && let Some(result) = result
        {
            span.set_attribute(KeyValue::new("gen_ai.tool.call.result", cut(result)));
        }
        span.end();
    }
}

/// How an execution ended, as `bidi.status` says it (the status's JSON name).
pub(crate) fn status_name(status: Ended) -> &'static str {
    match status {
        Ended::Running => "running",
        Ended::AwaitingToolExecution => "awaiting_tool_execution",
        Ended::Completed => "completed",
        Ended::Error => "error",
    }
}

/// `n` as an attribute's integer.
fn saturating(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A string array attribute of one value.
fn string_array(key: &'static str, value: &'static str) -> KeyValue {
    KeyValue::new(
        key,
        OtelValue::Array(Array::String(vec![StringValue::from(value)])),
    )
}

/// A stop reason as the conventions' finish reason.
fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Stop => "stop",
        StopReason::Length => "length",
        StopReason::ToolCalls => "tool_call",
        StopReason::Refusal => "content_filter",
        StopReason::Error | StopReason::Aborted => "error",
    }
}

/// The token counts of `usage`: input (cached included), output, cache read and written.
fn usage(usage: &Usage) -> [KeyValue; 4] {
    [
        KeyValue::new("gen_ai.usage.input_tokens", saturating(usage.input)),
        KeyValue::new("gen_ai.usage.output_tokens", saturating(usage.output)),
        KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            saturating(usage.cache_read),
        ),
        KeyValue::new(
            "gen_ai.usage.cache_write.input_tokens",
            saturating(usage.cache_write),
        ),
    ]
}

/// `text` cut at [`TEXT_LIMIT`] bytes, on a character boundary, saying how long it was.
fn cut(text: &str) -> String {
    if text.len() <= TEXT_LIMIT {
        return text.to_owned();
    }
    let mut end = TEXT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[truncated, {} bytes]", &text[..end], text.len())
}

/// A JSON value recorded whole if it is small, else as its JSON text cut.
fn bounded(value: &Value) -> String {
    cut(&value.to_string())
}

/// An assistant message's parts, in the conventions' shape.
fn assistant_parts(answer: &AssistantMessage) -> Vec<Value> {
    answer
        .content
        .iter()
        .map(|block| match block {
            AssistantContent::Text { text } => json!({"type": "text", "content": cut(text)}),
            AssistantContent::Thinking { thinking } => {
                json!({"type": "reasoning", "content": cut(thinking)})
            }
            AssistantContent::ToolCall(call) => json!({
                "type": "tool_call",
                "id": call.id,
                "name": call.name,
                "arguments": bounded_value(&call.arguments),
            }),
        })
        .collect()
}

/// `value` as it is when its JSON fits [`TEXT_LIMIT`], else its JSON text cut.
fn bounded_value(value: &Value) -> Value {
    let text = value.to_string();
    if text.len() <= TEXT_LIMIT {
        value.clone()
    } else {
        Value::String(cut(&text))
    }
}

/// One message of the conversation in the conventions' shape.
fn message(message: &Message) -> Value {
    match message {
        Message::User(user) => {
            json!({"role": "user", "parts": [{"type": "text", "content": cut(&user.content)}]})
        }
        Message::Assistant(answer) => {
            json!({"role": "assistant", "parts": assistant_parts(answer)})
        }
        Message::ToolResult(result) => json!({
            "role": "tool",
            "parts": [{
                "type": "tool_call_response",
                "id": result.tool_call_id,
                "response": cut(&result.content),
            }],
        }),
        Message::Error(error) => json!({
            "role": "assistant",
            "parts": [{"type": "text", "content": cut(&error.error)}],
        }),
        Message::Aborted(_) => json!({"role": "assistant", "parts": []}),
    }
}

/// Records a model call's input: its system instructions, and its latest messages within
/// [`INPUT_LIMIT`], counting those left out.
fn record_input(cx: &Context, request: &ModelRequest) {
    let span = cx.span();
    if let Some(system) = &request.system_prompt {
        let instructions = json!([{"type": "text", "content": cut(system)}]);
        span.set_attribute(KeyValue::new(
            "gen_ai.system_instructions",
            instructions.to_string(),
        ));
    }
    let mut kept = Vec::new();
    let mut size = 2;
    for each in request.messages.iter().rev() {
        let text = message(each).to_string();
        if size + text.len() + 1 > INPUT_LIMIT && !kept.is_empty() {
            break;
        }
        size += text.len() + 1;
        kept.push(text);
    }
    let omitted = request.messages.len() - kept.len();
    kept.reverse();
    span.set_attribute(KeyValue::new(
        "gen_ai.input.messages",
        format!("[{}]", kept.join(",")),
    ));
    if omitted > 0 {
        span.set_attribute(KeyValue::new(
            "bidi.input_messages_omitted",
            saturating(omitted as u64),
        ));
    }
}
