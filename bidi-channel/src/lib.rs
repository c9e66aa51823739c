//! Agent replies delivered to users on their chat channels, streamed as they are generated:
//! a [`MessageRouter`] that holds one agent connection per user, the [`Channel`] and
//! [`StreamingChannel`] traits a transport implements, a [`Terminal`] channel, and a
//! [`telegram`] channel that edits its message as the reply grows.
//!
//! wip

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

pub use async_trait::async_trait;
pub use channel::{Channel, StreamingChannel};
pub use error::Error;
pub use router::{Backend, Chunk, Event, MessageRouter, MessageRouterBuilder, Piece, Reply};
pub use terminal::Terminal;
