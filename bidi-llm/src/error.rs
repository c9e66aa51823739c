//! Typed errors: [`Error`] (why an execution failed or its input was refused), [`ModelError`]
//! (why a model call failed), [`ExecuteError`] (why a caller got no result), and the
//! [`Code`] an `error` event carries.

use std::sync::Arc;

use bidi_flow::Code;

use crate::event::AgentEvent;
use crate::message::Message;
use bidi_session::Lease;

/// Why an execution failed, or why its input was refused.
///
/// The loop reports it to the caller as an [`AgentEvent::Error`](crate::AgentEvent::Error)
/// carrying its [`code`](Self::code) and its text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A user message came while tool calls await their results. Nothing changed.
    #[error("the session awaits results for tool calls {}; send those first", ids(.pending))]
    AwaitingToolResults {
        /// The ids of the calls waiting for results.
        pending: Vec<String>,
    },
    /// Calls wait for the caller's approval, and the input does not decide on them (a user
    /// message, or answers that leave some out). Nothing changed.
    #[error("tool calls {} wait for approval; send a decision on each", ids(.pending))]
    AwaitingApproval {
        /// The ids of the calls without a decision.
        pending: Vec<String>,
    },
    /// A tool result or a decision names a call that is not pending. Nothing changed.
    #[error("tool call `{id}` was not found in session history among the pending calls")]
    NotPending {
        /// The id the result named.
        id: String,
    },
    /// A tool result names another tool than its call. Nothing changed.
    #[error("tool call `{id}` is a call of `{expected}`, not `{found}`")]
    WrongTool {
        /// The call.
        id: String,
        /// The tool the model called.
        expected: String,
        /// The tool the result named.
        found: String,
    },
    /// An approval names other arguments than the call's: the caller approved a call the
    /// model did not make. Nothing changed.
    #[error("the approval of tool call `{id}` names modified inputs: they are not the call's")]
    ModifiedArguments {
        /// The call.
        id: String,
    },
    /// Two results for one call. Nothing changed.
    #[error("two results for tool call `{id}`")]
    DuplicateResult {
        /// The call.
        id: String,
    },
    /// Two decisions for one call waiting for approval. Nothing changed.
    #[error("two decisions for tool call `{id}`")]
    DuplicateApproval {
        /// The call.
        id: String,
    },
    /// Results for only some of the pending calls. Nothing changed.
    #[error("missing results for tool calls {}", ids(.missing))]
    MissingResults {
        /// The calls without a result.
        missing: Vec<String>,
    },
    /// Tool results while no calls are pending. Nothing changed.
    #[error("no tool calls are pending; send a user message")]
    NothingPending,
    /// A client's [`Context`](crate::Context) for a new session is refused: a tool without a
    /// name, two tools with one name, a tool named like one of the agent's own, parameters that
    /// are not a JSON object. Nothing was created.
    #[error("invalid context: {reason}")]
    InvalidContext {
        /// What is wrong with it.
        reason: String,
    },
    /// A session chose a model the agent does not offer ([`LlmAgent::choose_model`](crate::LlmAgent::choose_model)).
    #[error("no model `{name}`: this agent offers {}", ids(.offered))]
    UnknownModel {
        /// The name chosen.
        name: String,
        /// The names the agent offers.
        offered: Vec<String>,
    },
    /// Another execution holds the session (in this process or another). Nothing changed.
    #[error("session `{session_id}` is busy with another answer; try again once it has ended")]
    SessionRunning {
        /// The session.
        session_id: String,
        /// Who holds it, since when, and until when.
        lease: Lease,
    },
    /// The model call failed.
    #[error(transparent)]
    Model(ModelError),
    /// The execution made as many model calls as it may.
    #[error("stopped after {max_turns} model calls (max_turns)")]
    MaxTurns {
        /// The limit.
        max_turns: u32,
    },
    /// A tool call's arguments do not fit the tool's argument type.
    #[error("invalid arguments for `{tool}` at `{path}`: {source}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// Where in the arguments (`.` for the whole).
        path: String,
        /// What is wrong there.
        #[source]
        source: serde_json::Error,
    },
    /// The session store failed; a conflict at the end of an execution means another
    /// execution took the session over after this one's lease expired.
    #[error("the session store failed: {0}")]
    Store(#[source] bidi_session::StoreError),
}

impl Error {
    /// What the `error` event calls it.
    #[must_use]
    pub fn code(&self) -> Code {
        match self {
            Self::AwaitingToolResults { .. }
            | Self::AwaitingApproval { .. }
            | Self::NotPending { .. }
            | Self::WrongTool { .. }
            | Self::ModifiedArguments { .. }
            | Self::DuplicateResult { .. }
            | Self::DuplicateApproval { .. }
            | Self::MissingResults { .. }
            | Self::NothingPending
            | Self::InvalidContext { .. }
            | Self::UnknownModel { .. }
            | Self::InvalidArguments { .. } => Code::InvalidInput,
            Self::SessionRunning { .. } => Code::SessionRunning,
            Self::Model(_) => Code::Model,
            Self::MaxTurns { .. } => Code::MaxTurns,
            Self::Store(_) => Code::Store,
        }
    }

    /// The `error` event reporting it, with the message it left.
    pub(crate) fn event(&self, message: Option<Message>) -> AgentEvent {
        AgentEvent::Error {
            code: self.code(),
            error: self.to_string(),
            message: message.map(Box::new),
        }
    }
}

fn ids(ids: &[String]) -> String {
    ids.iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a model call failed: what [`ModelEvent::Error`](crate::ModelEvent::Error) carries.
///
/// Cheap to clone: sources are shared.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The request could not be sent, or its answer could not be read.
    #[error("request failed: {0}")]
    Request(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// The provider answered with an error status.
    #[error("HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the answer's body.
        body: String,
        /// How long the provider asked to wait before trying again (`Retry-After`), if it
        /// said.
        retry_after: Option<std::time::Duration>,
    },
    /// The provider reported an error inside the stream.
    #[error("the provider reported an error: {0}")]
    Provider(String),
    /// A line of the stream is not JSON.
    #[error("malformed SSE data line ({source}): {line}")]
    Malformed {
        /// The line.
        line: String,
        /// Why it does not parse.
        #[source]
        source: Arc<serde_json::Error>,
    },
    /// The stream breaks the wire format: a tool call without an index or an id, text outside
    /// any block, ...
    #[error("invalid model stream: {0}")]
    Protocol(String),
    /// The stream ended before the answer was complete (a dropped connection).
    #[error("the model's stream ended before the answer was complete")]
    Ended,
    /// Any other failure: a model of your own, a scripted failure.
    #[error(transparent)]
    Other(Arc<dyn std::error::Error + Send + Sync>),
}

impl ModelError {
    /// A failure of a model of your own.
    pub fn other(error: impl Into<bidi_core::BoxError>) -> Self {
        Self::Other(Arc::from(error.into()))
    }

    /// Whether calling the model again could succeed: the request could not be sent or its
    /// answer read, the provider answered 408, 409, 425, 429 or a 5xx, reported an error
    /// inside its stream, or the stream ended before the answer was complete. A request the
    /// provider refuses, a malformed stream or a failure of a model of your own is not.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Request(_) | Self::Provider(_) | Self::Ended => true,
            Self::Status { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429) || (500..600).contains(status)
            }
            Self::Malformed { .. } | Self::Protocol(_) | Self::Other(_) => false,
        }
    }

    /// How long the provider asked to wait before trying again, if it said.
    #[must_use]
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Why [`ExecuteStream::result`](crate::ExecuteStream::result) has no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecuteError {
    /// The connection failed or was cancelled before the execution ended.
    #[error("the connection ended before the execution did: {0}")]
    Connection(#[source] bidi_core::Error),
    /// The turn ended without an `execute_complete` event: not an agent loop's connection.
    #[error("the turn ended without an execute_complete event")]
    Unfinished,
}
