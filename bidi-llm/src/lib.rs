//! The agent loop as a flow: [`Message`]s, granular [`AgentEvent`]s, [`Model`]s that stream
//! answers, and [`Tool`]s, local or remote.
//!
//! [`LlmAgent`] is the loop: a `bidi-agent` agent whose input is a user message or the results
//! of remote tool calls ([`TurnInput`]) and whose chunks are [`AgentEvent`]s. [`execute`] runs
//! one execution on a connection; its last event, `execute_complete`, says how it ended, and
//! [`ExecuteStream::result`] returns that.
//!
//! ```
//! use bidi_agent::AgentInit;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use bidi_llm::{AgentEvent, LlmAgent, Status, Tool, TurnInput, UserMessage, execute};
//! use futures_util::StreamExt;
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Booking {
//!     city: String,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let model = ScriptedModel::new([
//!     Scripted::new().tool_call("call-1", "book", &json!({"city": "Oslo"})),
//!     Scripted::new().text("Booked!"),
//! ]);
//! // No executor: the client runs `book`, the execution stops until its result comes back.
//! let book = Tool::remote::<Booking>("book", "Book", "Books a trip");
//! let agent = LlmAgent::builder("travel", model).tool(book).build();
//! let mut conn = agent.connect(AgentInit::new());
//!
//! let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("Oslo, please"))).await?;
//! while let Some(event) = run.next().await {
//!     if let AgentEvent::ToolcallEnd { tool_call, .. } = event? {
//!         println!("the model calls {}", tool_call.name);
//!     }
//! }
//! let result = run.result().await?;
//! assert_eq!(result.status, Status::AwaitingToolExecution);
//!
//! // The client runs the call.
//! let call = &result.pending_tool_calls[0];
//! let booking: Booking = serde_json::from_value(call.arguments.clone())?;
//! let answer = bidi_llm::ToolResultMessage {
//!     tool_call_id: call.id.clone(),
//!     tool_name: call.name.clone(),
//!     content: format!("booked a trip to {}", booking.city),
//!     details: None,
//!     is_error: false,
//!     attachments: Vec::new(),
//! };
//! let run = execute(&mut conn, TurnInput::ToolResults(vec![answer])).await?;
//! assert_eq!(run.result().await?.status, Status::Completed);
//! # Ok(())
//! # }
//! ```
//!
//! # Client-declared context
//!
//! A client can start a session with a [`Context`] of its own: a system prompt, the
//! conversation so far, and tools it declares (a name, a description and a JSON Schema of the
//! arguments, as [`ToolSpec`]s). [`LlmAgent::new_session`] checks it against the agent's tools
//! and makes it the state the session starts from. The model is offered the agent's tools, then
//! the client's; a call of a client's tool suspends the execution with
//! `awaiting_tool_execution`, like a remote [`Tool`], until the client sends its result. The
//! agent does not check such a call's arguments: the client that runs it does. The context is
//! saved in the session, so any agent sharing the store can take the results.
//!
//! A local tool may [need approval](Tool::needs_approval): its calls end the execution with
//! `awaiting_approval`, and the next input, a [`TurnInput::Resume`], carries the caller's
//! decision on each (an [`Approval`]); an approved call runs, a denied one gives the model the
//! denial. A connection's [`Policy`] gate decides in the execution's course instead.
//!
//! Sessions are kept in the agent's store as [`LlmSession`]s. An execution marks its session
//! `running` with a [`Lease`] as it starts and saves how it ended as it ends, so agents in
//! several processes sharing a store never run one session at once.
//!
//! A model call that fails can be tried again: a [`Retry`] policy on the agent
//! ([`LlmAgentBuilder::retry`]) waits a backoff that honours the provider's `Retry-After`, then
//! hands over to the agent's [fallback models](LlmAgentBuilder::fallback), and restarts or
//! keeps an answer whose stream was cut; each retry is an [`AgentEvent::ModelRetry`] (the
//! [`retry`] module says what is retried).
//!
//! [`peer`] serves an agent's executions to a peer through a protocol's wire (every agent
//! front end stands on it). [`testing`] has models for tests and examples; `OpenAiModel` (feature `openai`) streams from
//! any OpenAI-compatible Chat Completions endpoint.
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]
//!
//! `bidi-llm` depends on `bidi-session` without its default feature `sqlite`: a program that keeps
//! sessions in `bidi_session::SqliteStore` depends on `bidi-session` itself (default features), and
//! one that does not compiles no SQLite.

#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod agent;
mod blocks;
mod conversation;
mod custom;
mod error;
mod event;
mod execute;
mod host;
mod message;
mod model;
#[cfg(feature = "openai")]
mod openai;
pub mod peer;
mod policy;
pub mod retry;
mod session;
pub mod spans;
mod state;
pub mod takeover;
pub mod testing;
mod tool;
mod turn;

pub use agent::{LlmAgent, LlmAgentBuilder};
pub use bidi_flow::Code;
pub use bidi_session::Lease;
pub use blocks::{Block, Blocks};
pub use conversation::Conversation;
pub use custom::CustomTurn;
pub use error::{Error, ExecuteError, ModelError};
pub use event::AgentEvent;
pub use execute::{ExecuteResult, ExecuteStream, Failure, execute};
pub use host::HostModel;
pub use message::{
    AbortedMessage, AssistantContent, AssistantMessage, Attachment, Cost, ErrorMessage, Message,
    Role, StopReason, ToolCall, ToolResultMessage, Usage, UserMessage,
};
pub use model::{Assembled, Assembler, Model, ModelEvent, ModelOptions, ModelRequest, ToolSpec};
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use openai::OpenAiModel;
pub use policy::Policy;
pub use retry::{Cut, Retry};
pub use session::{Approval, Context, LlmSession, Resume, Status, TurnInput};
pub use state::{Ending, TurnState};
pub use tool::{Tool, ToolEvent, simple_tool};
