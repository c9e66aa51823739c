//! Where an agent's turn stands: the one lifecycle every wire projects into its own terms.
//!
//! A turn runs, then stops for its caller (tool calls waiting for the client's results or for
//! a decision), completes, fails, or is aborted; a turn whose process went away mid-way has
//! expired. [`TurnState`] is that lifecycle, typed once. It is read in one of two places, and
//! every wire maps it into its own terms (an A2A task state, an AG-UI outcome, a UI message
//! stream's finish, a Genkit finish reason, an ACP stop reason, an MCP result) from there:
//!
//! - as an execution ends, from its events: [`Ending`] (what [`ExecuteStream`] builds its
//!   result from, and what a wire keeps as the events pass);
//! - from the store, for a turn read back later or in another process:
//!   [`TurnState::stored`].
//!
//! [`ExecuteStream`]: crate::ExecuteStream

use bidi_session::Status as Snapshot;
use serde::Deserialize as _;
use serde_json::Value;

use crate::event::AgentEvent;
use crate::execute::Failure;
use crate::message::{Message, ToolCall};
use crate::session::{LlmSession, Status};
use bidi_flow::Code;

/// Where an agent's turn stands.
///
/// ```
/// use bidi_llm::{LlmSession, Status, ToolCall, TurnState};
///
/// // A stored turn that ended waiting for a call of the client's tool `search`.
/// let mut session = LlmSession::default();
/// session.status = Status::AwaitingToolExecution;
/// session.pending_tool_calls = vec![ToolCall {
///     id: "call-1".into(),
///     name: "search".into(),
///     arguments: serde_json::json!({}),
/// }];
/// let is_local = |name: &str| name == "transfer";
/// let state = TurnState::stored(bidi_session::Status::Completed, None, &session, is_local);
/// let TurnState::Waiting { results, approvals } = &state else { panic!("{state:?}") };
/// assert_eq!((results.len(), approvals.len()), (1, 0));
/// assert_eq!(state.name(), "awaiting_tool_execution");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TurnState {
    /// It runs: its pending snapshot holds the session.
    Running,
    /// It stopped for its caller: tool calls wait, and the next input must answer them all.
    Waiting {
        /// Calls of the client's tools, waiting for their results.
        results: Vec<ToolCall>,
        /// Calls of the agent's tools that need approval, waiting for a decision.
        approvals: Vec<ToolCall>,
    },
    /// It ran to its end.
    Completed,
    /// It failed (the model, the turn limit, the store), or its input was refused.
    Failed(Failure),
    /// It was cancelled, or aborted by its snapshot's id from any process.
    Aborted,
    /// The process running it went away before it finished (its lease lapsed): the next turn
    /// starts from the state before it.
    Expired,
}

impl TurnState {
    /// Where a stored turn stands: its snapshot's status (and, for a failed one, its error as
    /// the store keeps it, `{"message": .., "code": ..}`), and the session's state after it.
    /// The waiting calls of the agent's own tools (`is_local` of their name) wait for
    /// approval, the others for the client's results.
    #[must_use]
    pub fn stored(
        snapshot: Snapshot,
        error: Option<&Value>,
        session: &LlmSession,
        is_local: impl Fn(&str) -> bool,
    ) -> Self {
        match snapshot {
            Snapshot::Pending => return Self::Running,
            Snapshot::Aborted => return Self::Aborted,
            Snapshot::Expired => return Self::Expired,
            Snapshot::Failed => {
                let message = error.and_then(|error| error.get("message"));
                let message = message.and_then(Value::as_str);
                let code = error.and_then(|error| error.get("code"));
                let code = code.and_then(|code| Code::deserialize(code).ok());
                let mut failed = failure(message.or_else(|| last_error(&session.messages)));
                failed.code = code.unwrap_or(failed.code);
                return Self::Failed(failed);
            }
            _ => {}
        }
        match session.status {
            Status::Running => Self::Running,
            Status::AwaitingToolExecution => {
                let (approvals, results) = session
                    .pending_tool_calls
                    .iter()
                    .cloned()
                    .partition(|call| is_local(&call.name));
                Self::Waiting { results, approvals }
            }
            Status::Error => Self::Failed(failure(last_error(&session.messages))),
            Status::Completed => Self::Completed,
        }
    }

    /// Its name on the wire: `running`, `awaiting_tool_execution`, `completed`, `failed`,
    /// `aborted` or `expired`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Waiting { .. } => "awaiting_tool_execution",
            Self::Completed => "completed",
            Self::Failed(_) => "failed",
            Self::Aborted => "aborted",
            Self::Expired => "expired",
        }
    }

    /// Whether nothing follows it on its own: it completed, failed, was aborted or expired
    /// (a waiting turn goes on once its caller answers).
    #[must_use]
    pub fn is_over(&self) -> bool {
        !matches!(self, Self::Running | Self::Waiting { .. })
    }

    /// The session's [`Status`] this state reads as (`running` while it runs; an aborted or
    /// expired turn left the session as it was: `completed`).
    #[must_use]
    pub fn status(&self) -> Status {
        match self {
            Self::Running => Status::Running,
            Self::Waiting { .. } => Status::AwaitingToolExecution,
            Self::Failed(_) => Status::Error,
            Self::Completed | Self::Aborted | Self::Expired => Status::Completed,
        }
    }
}

/// How an execution ended, read from its events as they pass: its `execute_complete`, the
/// calls its `awaiting_approval` names, its `error`, and whether its answer was aborted. What
/// [`ExecuteStream`](crate::ExecuteStream) builds its result from, and what a wire that shows
/// a turn's end keeps.
///
/// ```
/// use bidi_llm::{AgentEvent, Ending, Status, TurnState};
///
/// let mut ending = Ending::default();
/// assert_eq!(ending.state(), None, "not over yet");
/// ending.observe(&AgentEvent::ExecuteComplete {
///     status: Status::Completed,
///     pending_tool_calls: Vec::new(),
///     pending_approvals: Vec::new(),
///     cost: 0.0,
/// });
/// assert_eq!(ending.state(), Some(TurnState::Completed));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Ending {
    /// What `execute_complete` said: status, remote calls, cost.
    complete: Option<(Status, Vec<ToolCall>, f64)>,
    /// What `awaiting_approval` said.
    approvals: Vec<ToolCall>,
    error: Option<Failure>,
    aborted: bool,
}

impl Ending {
    /// Keeps what `event` says of how the execution ends.
    pub fn observe(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::MessageEnd { message } => {
                self.aborted = matches!(**message, Message::Aborted(_));
            }
            AgentEvent::AwaitingApproval { tool_calls, .. } => {
                self.approvals.clone_from(tool_calls);
            }
            AgentEvent::Error { code, error, .. } => {
                self.error = Some(Failure {
                    code: *code,
                    error: error.clone(),
                });
            }
            AgentEvent::ExecuteComplete {
                status,
                pending_tool_calls,
                pending_approvals,
                cost,
            } => {
                if !pending_approvals.is_empty() {
                    self.approvals.clone_from(pending_approvals);
                }
                self.complete = Some((*status, pending_tool_calls.clone(), *cost));
            }
            _ => {}
        }
    }

    /// How the execution ended, once its `execute_complete` has passed.
    #[must_use]
    pub fn state(&self) -> Option<TurnState> {
        let (status, results, _) = self.complete.as_ref()?;
        Some(match status {
            Status::AwaitingToolExecution => TurnState::Waiting {
                results: results.clone(),
                approvals: self.approvals.clone(),
            },
            Status::Error => TurnState::Failed(self.error.clone().unwrap_or_else(|| failure(None))),
            _ if self.aborted => TurnState::Aborted,
            _ => TurnState::Completed,
        })
    }

    /// Whether the execution's `execute_complete` has passed.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.complete.is_some()
    }

    /// What its `error` event said, if it had one.
    #[must_use]
    pub fn error(&self) -> Option<&Failure> {
        self.error.as_ref()
    }

    /// What the execution's result is made of: `execute_complete`'s status, remote calls and
    /// cost, the calls waiting for approval, the error.
    pub(crate) fn into_parts(
        self,
    ) -> Option<(Status, Vec<ToolCall>, f64, Vec<ToolCall>, Option<Failure>)> {
        let (status, results, cost) = self.complete?;
        Some((status, results, cost, self.approvals, self.error))
    }
}

/// A failure saying `message`, or that the turn failed, of a code not known.
pub(crate) fn failure(message: Option<&str>) -> Failure {
    Failure {
        code: Code::Other,
        error: message.unwrap_or("the turn failed").to_owned(),
    }
}

/// The error message the conversation ends with, if any.
fn last_error(messages: &[Message]) -> Option<&str> {
    messages.iter().rev().find_map(|message| match message {
        Message::Error(failed) => Some(failed.error.as_str()),
        _ => None,
    })
}
