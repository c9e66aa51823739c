//! [`AgentEvent`]: the granular events of the agent loop.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Attachment, Message, Role, ToolCall};
use crate::session::Status;
use bidi_flow::Code;

/// One event of an execution: `type` tag in `snake_case`, `camelCase` fields.
///
/// Every execution ends with [`ExecuteComplete`](Self::ExecuteComplete), also one whose input
/// was refused.
///
/// An execution moves its events by the thousand (a streamed answer is one
/// [`TextDelta`](Self::TextDelta) a token), so the type stays small: the rare events box what is
/// large (a message, a tool call, a JSON value, which `serde_json`'s `preserve_order` makes 72
/// bytes), and an event is at most 88 bytes whatever features are on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum AgentEvent {
    /// An execution started on the session.
    SessionStart {
        /// The session.
        session_id: String,
        /// The snapshot the execution writes: pending while it runs (abort it by this id), the
        /// one `session_end` names once it ends.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot_id: Option<String>,
    },
    /// The execution ended; only the messages it added.
    SessionEnd {
        /// The session.
        session_id: String,
        /// The new messages.
        messages: Vec<Message>,
        /// The snapshot the execution wrote (none if the store failed): load, branch from or
        /// resume at it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot_id: Option<String>,
    },
    /// The turn stopped for tools without a local executor; send their results to go on.
    AwaitingToolExecution {
        /// The session.
        session_id: String,
        /// The calls to execute remotely.
        tool_calls: Vec<ToolCall>,
    },
    /// The turn stopped for calls of tools that need the caller's approval; send a decision on
    /// each (in a [`TurnInput::Resume`](crate::TurnInput::Resume)) to go on. Comes with
    /// [`AwaitingToolExecution`](Self::AwaitingToolExecution) when remote calls wait as well.
    AwaitingApproval {
        /// The session.
        session_id: String,
        /// The calls waiting for approval.
        tool_calls: Vec<ToolCall>,
    },
    /// A message begins.
    MessageStart {
        /// Its role.
        role: Role,
    },
    /// A message is complete (with usage for assistant messages).
    MessageEnd {
        /// The message (boxed: it is much larger than the other events, which are moved
        /// around by the thousand).
        message: Box<Message>,
    },
    /// A text block begins.
    TextStart,
    /// More text.
    TextDelta {
        /// The new text.
        delta: String,
    },
    /// A text block ends.
    TextEnd {
        /// The whole block.
        text: String,
    },
    /// A thinking block begins.
    ThinkingStart,
    /// More thinking.
    ThinkingDelta {
        /// The new thinking.
        delta: String,
    },
    /// A thinking block ends.
    ThinkingEnd {
        /// The whole block.
        thinking: String,
    },
    /// A tool call begins (`index` counts the message's tool calls from 0): the model has named
    /// the call and its tool, and its arguments follow as [`ToolcallDelta`](Self::ToolcallDelta)s.
    ToolcallStart {
        /// Which tool call.
        index: usize,
        /// The call's id (empty from a producer that does not send it).
        #[serde(default)]
        tool_call_id: String,
        /// The tool called (empty from a producer that does not send it).
        #[serde(default)]
        tool_name: String,
    },
    /// More of a tool call's arguments (JSON text).
    ToolcallDelta {
        /// Which tool call.
        index: usize,
        /// The new argument text.
        delta: String,
    },
    /// A tool call is complete.
    ToolcallEnd {
        /// Which tool call.
        index: usize,
        /// The call (boxed, as every large field here: see the type's docs).
        tool_call: Box<ToolCall>,
    },
    /// A custom agent changed the session's custom state: the whole state after the change.
    CustomUpdate {
        /// The custom state.
        custom: Value,
    },
    /// A custom agent added an artifact, or replaced the one of its name.
    ArtifactUpdate {
        /// The artifact.
        artifact: bidi_agent::Artifact,
    },
    /// A local tool starts.
    ToolExecutionStart {
        /// The call.
        tool_call_id: String,
        /// The tool.
        tool_name: String,
        /// Its arguments.
        args: Box<Value>,
    },
    /// A local tool streamed some output.
    ToolExecutionDelta {
        /// The call.
        tool_call_id: String,
        /// The new output.
        delta: String,
    },
    /// A local tool sent data for the application (not kept in the conversation).
    ToolExecutionData {
        /// The call.
        tool_call_id: String,
        /// What kind of data.
        name: String,
        /// The data.
        data: Box<Value>,
    },
    /// A local tool finished.
    ToolExecutionEnd {
        /// The call.
        tool_call_id: String,
        /// Its output.
        output: String,
        /// Its structured details.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Box<Value>>,
        /// Whether it failed (as the shipped protocol reports it).
        #[serde(default)]
        is_error: bool,
        /// The images, audio and documents it returned.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
    /// A model call failed and is tried again, as the agent's [`Retry`](crate::Retry) policy
    /// says: the same model after a wait, or the agent's next fallback model.
    ModelRetry {
        /// The attempt about to start: 2 for the first retry (counted over every model).
        attempt: u32,
        /// The model it calls.
        model: String,
        /// How long it waits first, in milliseconds.
        delay_ms: u64,
        /// Why the last attempt failed.
        error: String,
        /// Whether what the message streamed so far (text, thinking, tool calls) is void: the
        /// failed attempt had begun its answer, and the next streams it anew from the start.
        #[serde(default)]
        discarded: bool,
    },
    /// Something failed: the execution (then `execute_complete` says `error`), or its input
    /// was refused (then the session is unchanged).
    Error {
        /// What kind of failure.
        #[serde(default)]
        code: Code,
        /// What.
        error: String,
        /// The message it left, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<Box<Message>>,
    },
    /// The execution ended; always its last event.
    ExecuteComplete {
        /// How it ended: `completed`, `awaiting_tool_execution` (remote calls or approvals
        /// pending) or `error`.
        status: Status,
        /// The calls to execute remotely when awaiting them; empty otherwise (always on the
        /// wire, as clients read it).
        #[serde(default)]
        pending_tool_calls: Vec<ToolCall>,
        /// The calls of the agent's own tools waiting for the client's approval (those of its
        /// `awaiting_approval` event); on the wire only when some wait.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending_approvals: Vec<ToolCall>,
        /// What the execution's model calls cost, in the provider's currency.
        #[serde(default)]
        cost: f64,
    },
}

impl AgentEvent {
    /// The event's wire JSON without its `type` (`{"attempt": 2, "model": .., ..}`): what a
    /// wire that carries the event in an envelope of its own sends (AG-UI's `CUSTOM` value, the
    /// UI message stream's data part, A2A's status data, Genkit's custom part).
    #[must_use]
    pub fn fields(&self) -> Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            fields.remove("type");
        }
        value
    }

    /// What a person reads of the event, for the wires that say it in words rather than carry
    /// it (A2A's task status, ACP's thought, MCP's log): a model retry's note. `None` for every
    /// other event, which the wires show in their own terms.
    ///
    /// ```
    /// use bidi_llm::AgentEvent;
    ///
    /// let retry = AgentEvent::ModelRetry {
    ///     attempt: 2,
    ///     model: "gpt-x".into(),
    ///     delay_ms: 1500,
    ///     error: "the model answered 429".into(),
    ///     discarded: false,
    /// };
    /// assert_eq!(
    ///     retry.note().as_deref(),
    ///     Some("The model failed (the model answered 429): trying `gpt-x` again in 1.5 s, attempt 2.")
    /// );
    /// ```
    #[must_use]
    pub fn note(&self) -> Option<String> {
        let Self::ModelRetry {
            attempt,
            model,
            delay_ms,
            error,
            discarded,
        } = self
        else {
            return None;
        };
        let void = if *discarded {
            " What it had answered is void."
        } else {
            ""
        };
        let (seconds, tenths) = (delay_ms / 1000, delay_ms % 1000 / 100);
        Some(format!(
            "The model failed ({error}): trying `{model}` again in {seconds}.{tenths} s, attempt \
             {attempt}.{void}"
        ))
    }

    /// The event's `type` tag, as it appears on the wire (`"text_delta"`, ...): what an SSE
    /// transport names its events by.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SessionStart { .. } => "session_start",
            Self::SessionEnd { .. } => "session_end",
            Self::AwaitingToolExecution { .. } => "awaiting_tool_execution",
            Self::AwaitingApproval { .. } => "awaiting_approval",
            Self::MessageStart { .. } => "message_start",
            Self::MessageEnd { .. } => "message_end",
            Self::TextStart => "text_start",
            Self::TextDelta { .. } => "text_delta",
            Self::TextEnd { .. } => "text_end",
            Self::ThinkingStart => "thinking_start",
            Self::ThinkingDelta { .. } => "thinking_delta",
            Self::ThinkingEnd { .. } => "thinking_end",
            Self::ToolcallStart { .. } => "toolcall_start",
            Self::ToolcallDelta { .. } => "toolcall_delta",
            Self::ToolcallEnd { .. } => "toolcall_end",
            Self::CustomUpdate { .. } => "custom_update",
            Self::ArtifactUpdate { .. } => "artifact_update",
            Self::ToolExecutionStart { .. } => "tool_execution_start",
            Self::ToolExecutionDelta { .. } => "tool_execution_delta",
            Self::ToolExecutionData { .. } => "tool_execution_data",
            Self::ToolExecutionEnd { .. } => "tool_execution_end",
            Self::ModelRetry { .. } => "model_retry",
            Self::Error { .. } => "error",
            Self::ExecuteComplete { .. } => "execute_complete",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AgentEvent;

    #[test]
    fn an_event_stays_small_whatever_serde_json_features_are_on() {
        // `serde_json::Value` is 32 bytes, or 72 with `preserve_order`: no variant may hold one
        // inline next to much else.
        assert!(
            std::mem::size_of::<AgentEvent>() <= 88,
            "AgentEvent grew to {} bytes",
            std::mem::size_of::<AgentEvent>()
        );
    }
}
