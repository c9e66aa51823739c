//! The caller's view of an execution: [`execute`] sends the input, [`ExecuteStream`] streams
//! the events, [`ExecuteStream::result`] says how it ended.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bidi_core::{Connection, Responses, SendError};
use futures_core::Stream;
use futures_core::stream::FusedStream;
use futures_util::StreamExt as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use bidi_flow::Code;

use crate::error::ExecuteError;
use crate::event::AgentEvent;
use crate::message::{Message, ToolCall};
use crate::session::{Status, TurnInput};
use crate::state::{self, Ending, TurnState};

/// How an execution ended: its `execute_complete` event, the messages of its `session_end`, and
/// what its `error` event said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExecuteResult {
    /// `completed`, `awaiting_tool_execution`, or `error` (failed, or the input was refused).
    pub status: Status,
    /// The messages this execution added.
    pub messages: Vec<Message>,
    /// The remote calls to execute, when awaiting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<ToolCall>,
    /// The calls waiting for the caller's approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<ToolCall>,
    /// What the execution's model calls cost, in the provider's currency.
    pub cost: f64,
    /// Why the execution failed or its input was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
}

impl ExecuteResult {
    /// Where the execution's turn stands now that it ended: waiting for the calls it names,
    /// failed, aborted (its answer was), or completed.
    #[must_use]
    pub fn state(&self) -> TurnState {
        match self.status {
            Status::AwaitingToolExecution => TurnState::Waiting {
                results: self.pending_tool_calls.clone(),
                approvals: self.pending_approvals.clone(),
            },
            Status::Error => {
                TurnState::Failed(self.error.clone().unwrap_or_else(|| state::failure(None)))
            }
            _ if self
                .messages
                .iter()
                .any(|message| matches!(message, Message::Aborted(_))) =>
            {
                TurnState::Aborted
            }
            _ => TurnState::Completed,
        }
    }
}

/// What an `error` event reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Failure {
    /// What kind of failure.
    pub code: Code,
    /// What happened.
    pub error: String,
}

/// One execution on an open connection: a stream of its events, the last one
/// `execute_complete`, then [`result`](Self::result).
///
/// It borrows the connection; [`result`](Self::result) consumes it, so the connection is free
/// again (to [`close`](Connection::close) it, or for the next execution) once the result is in.
///
/// A caller that reads each execution as it streams, as here, goes fastest on a connection
/// opened with [`ConnectOptions::in_place`](bidi_core::ConnectOptions::in_place)
/// (`agent.agent().connect_with(init, ConnectOptions::new().in_place())`): the agent loop then
/// runs in the caller's task, and each batch of events is handed over by a call rather than a
/// task switch.
///
/// ```
/// use bidi_agent::AgentInit;
/// use bidi_llm::testing::{Scripted, ScriptedModel};
/// use bidi_llm::{LlmAgent, Status, TurnInput, UserMessage, execute};
/// use futures_util::StreamExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let agent = LlmAgent::builder("helper", ScriptedModel::new([Scripted::new().text("Hi!")])).build();
/// let mut conn = agent.connect(AgentInit::new());
/// let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("hello"))).await?;
/// while let Some(event) = run.next().await {
///     println!("{}", serde_json::to_string(&event?)?);
/// }
/// let result = run.result().await?;
/// assert_eq!(result.status, Status::Completed);
/// assert_eq!(result.messages.len(), 2);
///
/// conn.close();
/// assert_eq!(conn.output().await?.output, 1, "one execution");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ExecuteStream<'a> {
    responses: Responses<'a, AgentEvent>,
    messages: Vec<Message>,
    /// How it ends, as its events say.
    ending: Ending,
    failed: Option<bidi_core::Error>,
}

/// Sends `input` on `conn` and returns the execution's event stream.
///
/// Read the previous execution on `conn` to its end first ([`ExecuteStream::result`] does): the
/// events of a turn nobody read stay on the connection, ahead of the next one's.
///
/// # Errors
///
/// The input back, if the connection no longer takes inputs.
///
/// # Cancel safety
///
/// If the future is dropped before it completes, the input is not delivered.
pub async fn execute<Out: Send + 'static>(
    conn: &mut Connection<TurnInput, Out, AgentEvent>,
    input: TurnInput,
) -> Result<ExecuteStream<'_>, SendError<TurnInput>> {
    conn.send(input).await?;
    Ok(ExecuteStream {
        responses: conn.responses(),
        messages: Vec::new(),
        ending: Ending::default(),
        failed: None,
    })
}

impl ExecuteStream<'_> {
    /// Reads the execution to its end (the events not read yet are discarded) and returns how
    /// it ended.
    ///
    /// # Errors
    ///
    /// [`ExecuteError::Connection`] if the connection failed or was cancelled before the
    /// execution ended; [`ExecuteError::Unfinished`] if the turn ended without an
    /// `execute_complete` event.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the events it had not read yet stay on the connection: the
    /// next [`Connection::responses`] reads them.
    pub async fn result(mut self) -> Result<ExecuteResult, ExecuteError> {
        while self.next().await.is_some() {}
        if let Some(error) = self.failed {
            return Err(ExecuteError::Connection(error));
        }
        let (status, pending_tool_calls, cost, pending_approvals, error) =
            self.ending.into_parts().ok_or(ExecuteError::Unfinished)?;
        Ok(ExecuteResult {
            status,
            messages: self.messages,
            pending_tool_calls,
            pending_approvals,
            cost,
            error,
        })
    }

    /// Cancels the connection with `cause` (the stream holds it borrowed): the execution stops
    /// where it is and saves the session, and the stream ends with the cancellation.
    pub fn cancel_with(&self, cause: impl Into<bidi_core::BoxError>) {
        self.responses.cancel_with(cause);
    }

    /// Keeps what the result is made of.
    fn observe(&mut self, event: &AgentEvent) {
        if let AgentEvent::SessionEnd { messages, .. } = event {
            self.messages.clone_from(messages);
        }
        self.ending.observe(event);
    }
}

impl Stream for ExecuteStream<'_> {
    type Item = Result<AgentEvent, bidi_core::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = ready!(self.responses.poll_next_unpin(cx));
        match &item {
            Some(Ok(event)) => self.observe(event),
            Some(Err(error)) => self.failed = Some(error.clone()),
            None => {}
        }
        Poll::Ready(item)
    }
}

impl FusedStream for ExecuteStream<'_> {
    fn is_terminated(&self) -> bool {
        self.responses.is_terminated()
    }
}
