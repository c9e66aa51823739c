//! Serve agents to peers: the seam every agent front end stands on.
//!
//! A front end (an HTTP endpoint, AG-UI, the UI message stream, ACP, a chat channel, A2A)
//! does three things for each execution its peer asks for, and this crate does the same three
//! for all of them:
//!
//! - **Start** ([`Execution`]): open a connection on the session the peer names (new,
//!   resumed, or made from the peer's transcript, in its scope), send the input, and answer
//!   the session it runs on, or a typed [`Refusal`], before a byte is written, so the
//!   front end answers with its protocol's head or its protocol's error.
//! - **Pump** ([`pump`]): read the execution's events, hand them to the wire, batch what the
//!   wire writes, write it once the peer has room, and cancel the execution with
//!   [`PeerGone`](bidi_core::PeerGone) once the peer goes away or stays idle.
//! - **Wire** ([`Wire`]): the protocol itself, events in and frames out, closing what it has
//!   open when the execution fails or is cut short.
//!
//! A new protocol is one more [`Wire`] (and the route or method that hands it to
//! [`Execution::start`]); everything else is shared.
//!
//! ```
//! use bidi_agent::AgentInit;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage};
//! use bidi_serve::{Execution, RefusalKind, Wire};
//!
//! /// Each event's kind, a line each.
//! struct Kinds;
//!
//! impl Wire for Kinds {
//!     type Event = AgentEvent;
//!     type Output = bidi_serve::Output;
//!     type Frames = Vec<u8>;
//!
//!     fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
//!         out.extend_from_slice(event.kind().as_bytes());
//!         out.push(b'\n');
//!     }
//!
//!     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
//!         out.extend_from_slice(format!("failed: {message}\n").as_bytes());
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let agent = LlmAgent::builder("helper", ScriptedModel::new([Scripted::new().text("Hi!")])).build();
//! let hello = || TurnInput::User(UserMessage::new("hello"));
//!
//! // A session that does not exist, resumed: refused before anything is written.
//! let conn = agent.connect(AgentInit::new().resume("nobody"));
//! let (body, _frames) = tokio::sync::mpsc::channel(1);
//! let refused = Execution::new(conn, hello()).start(Kinds, body).await.unwrap_err();
//! assert_eq!(refused.kind(), RefusalKind::NotFound);
//!
//! // A new one: started, then its events.
//! let conn = agent.connect(AgentInit::new());
//! let (body, mut frames) = tokio::sync::mpsc::channel(1);
//! let started = Execution::new(conn, hello()).start(Kinds, body).await?;
//! let mut kinds = Vec::new();
//! while let Some(batch) = frames.recv().await {
//!     kinds.extend(batch);
//! }
//! let kinds = String::from_utf8(kinds)?;
//! assert!(kinds.starts_with("session_start\n"));
//! assert!(kinds.ends_with("execute_complete\n"));
//! # let _ = started;
//! # Ok(())
//! # }
//! ```

#![doc(test(attr(deny(warnings))))]

mod pump;
pub mod sink;
mod start;
mod wire;

pub use bidi_agent::{Refusal, RefusalKind};
pub use pump::{Ended, Events, pump};
pub use sink::{Closed, Detached, Sink};
pub use start::{AgentConnection, Execution, Output, Started};
pub use wire::{BATCH_BYTES, Block, Blocks, Frames, Wire};
