//! The chunks of the UI message stream, as `ai`'s `uiMessageChunkSchema` reads them.

use serde::Serialize;
use serde_json::Value;

/// One chunk of the UI message stream: `data: {json}` with a kebab-case `type` and camelCase
/// fields, exactly the keys `ai`'s `uiMessageChunkSchema` knows (`ai@6.0.0` refused any other).
#[derive(Debug, Serialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub(super) enum Chunk<'a> {
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
pub(super) enum FinishReason {
    Stop,
    Length,
    ContentFilter,
    ToolCalls,
    Error,
    Other,
}

/// A `data-{name}` chunk: its type is made of the name, so it is not a [`Chunk`].
#[derive(Serialize)]
pub(super) struct DataChunk<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'a str,
    pub(super) id: &'a str,
    pub(super) data: &'a Value,
}

pub(super) fn write_chunk(chunk: &Chunk<'_>, buf: &mut Vec<u8>) {
    bidi_http::sse::data(buf, chunk);
}
