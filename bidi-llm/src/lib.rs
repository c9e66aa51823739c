//! The agent loop's vocabulary: [`Message`]s, granular [`AgentEvent`]s, [`Model`]s that stream
//! answers ([`ScriptedModel`] for tests and examples) and [`Tool`]s, local or remote.
//!
//! ```
//! use bidi_llm::{AgentEvent, Assembled, Assembler, Model, ModelRequest, Scripted, ScriptedModel};
//! use futures_util::StreamExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let model = ScriptedModel::new([Scripted::new().thinking("easy").text("Hello there")]);
//! let mut answer = model.stream(ModelRequest::new(vec![], vec![]));
//! let (mut assembler, mut events) = (Assembler::new(), Vec::new());
//! let mut message = None;
//! while let Some(event) = answer.next().await {
//!     if let Assembled::Done(done) = assembler.apply(event, &mut events) {
//!         message = Some(done);
//!     }
//! }
//! assert_eq!(message.unwrap().text(), "Hello there");
//! assert_eq!(events.last(), Some(&AgentEvent::TextEnd { text: "Hello there".into() }));
//! # }
//! ```
//!
//! [`LlmAgent`] is the loop: a `bidi-agent` agent whose turn input is a user message or tool
//! results and whose chunks are these events; [`execute`] runs one execution on a connection.
//! [`OpenAiModel`] streams from any OpenAI-compatible Chat Completions endpoint.
//!
//! # Feature flags
//!
//! | feature | what it adds | default |
//! |---|---|---|
//! | `native-tls` | HTTPS for [`OpenAiModel`] through the system's TLS library | yes |

#![doc(test(attr(deny(warnings))))]

mod agent;
mod event;
mod message;
mod model;
mod openai;
mod tool;

pub use agent::{
    ExecuteResult, ExecuteStream, LlmAgent, LlmAgentBuilder, LlmSession, Status, TurnInput, execute,
};
pub use event::AgentEvent;
pub use message::{
    AbortedMessage, AssistantContent, AssistantMessage, Cost, ErrorMessage, Message, Role,
    StopReason, ToolCall, ToolResultMessage, Usage, UserMessage,
};
pub use model::{
    Assembled, Assembler, Model, ModelEvent, ModelRequest, Scripted, ScriptedModel, ToolSpec,
};
pub use openai::OpenAiModel;
pub use tool::{Tool, ToolEvent, simple_tool};
