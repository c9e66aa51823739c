//! Agent replies delivered to users on their chat channels, streamed as they are generated:
//! a [`MessageRouter`] that holds one agent connection per user, the [`Channel`] and
//! [`StreamingChannel`] traits a transport implements, a [`Terminal`] channel, and a
//! [`telegram`] channel (the [Bot API](https://core.telegram.org/bots/api)) that edits its
//! message as the reply grows.
//!
//! ```
//! use std::sync::Arc;
//!
//! use bidi_channel::{Event, MessageRouter, Terminal};
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use bidi_llm::{LlmAgent, simple_tool};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), bidi_channel::Error> {
//! let search = simple_tool("search", "Search", "Searches the web", |_id, _args: serde_json::Value| async move {
//!     Ok::<_, String>(("Oslo: sunny".to_owned(), None))
//! });
//! let model = ScriptedModel::new([
//!     Scripted::new().tool_call("call-1", "search", &json!({"q": "weather Oslo"})),
//!     Scripted::new().text("It is sunny in Oslo."),
//! ]);
//! let router = MessageRouter::new(LlmAgent::builder("helper", model).tool(search).build());
//! let mut events = router.subscribe();
//!
//! // The terminal prints the reply word by word, the tool call on a line of its own.
//! let terminal = Arc::new(Terminal::new(Vec::new()));
//! let reply = router.handle(terminal.clone(), "me", "Weather in Oslo?").await?;
//! assert_eq!(reply.text, "It is sunny in Oslo.");
//! assert_eq!(terminal.written().await, b"  [Using: search]\nIt is sunny in Oslo.\n");
//!
//! // The bus has the whole message and the whole reply.
//! assert!(matches!(events.recv().await, Ok(Event::UserMessage { .. })));
//! assert!(matches!(events.recv().await, Ok(Event::AgentResponse { text, .. }) if text == reply.text));
//! # Ok(())
//! # }
//! ```
//!
//! # Two paths, one reply
//!
//! A channel that can show a reply as it grows hands out its [`StreamingChannel`] side from
//! [`Channel::streaming`]; the router then calls `start`, `chunk` for each piece of text and
//! `status` for each tool call (`Using: {tool}`), in the order the agent produced them, and
//! `end` with the whole text. A channel that cannot (or whose streaming is switched off) gets
//! the whole reply in one [`Channel::send_to_user`]. Either way the bus carries the same
//! [`Event`]s with the same payloads: subscribers never see chunks.
//!
//! - One user's messages are answered one at a time, in order (each user has one connection to
//!   the agent, held by a task of its own); different users are answered at the same time.
//! - A user quiet for the idle timeout has their session rotated: the next message starts a
//!   new one.
//! - An agent that fails midway (a model error, its turn limit) ends the reply with the text so
//!   far and `(Error: ..)`, on both paths. The next message goes on with the same session.
//! - A channel error during the stream (a failed edit) is logged and the stream goes on; the
//!   channel still gets the whole text at `end`. Only a failed final delivery is an error for
//!   the caller ([`Error::Delivery`]).
//!
//! The router serves any [`Backend`]: [`LlmAgent`](bidi_llm::LlmAgent)s, and any
//! [`bidi_agent::Agent`] whose input is made from a `String` and whose chunks implement
//! [`Chunk`] (`String` does).
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]
//!
//! `bidi-channel` depends on `bidi-session` without its default feature `sqlite`: a program that
//! keeps sessions in `bidi_session::SqliteStore` depends on `bidi-session` itself (default
//! features), and one that does not compiles no SQLite.
//!
//! The router needs a tokio runtime with timers (`rt`, `time`).

#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod channel;
mod error;
mod router;
pub mod telegram;
mod terminal;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
#[cfg(feature = "web")]
#[cfg_attr(docsrs, doc(cfg(feature = "web")))]
pub mod web;

pub use async_trait::async_trait;
pub use channel::{Channel, StreamingChannel};
pub use error::Error;
pub use router::{Backend, Chunk, Event, MessageRouter, MessageRouterBuilder, Piece, Reply};
pub use terminal::Terminal;
