//! Typed bidirectional streaming actions: the core every other `bidi` crate stands on.
//!
//! An action is one async function. A caller [connects](BidiAction::connect) with an `Init`
//! value, [sends](Connection::send) typed inputs over an unbuffered channel, reads each turn's
//! typed chunks with [`responses`](Connection::responses), and gets a typed
//! [`output`](Connection::output) at the end:
//!
//! ```
//! use bidi_core::{ActionContext, BidiAction, BoxError, Inbound, Outbound};
//! use futures_util::StreamExt;
//!
//! async fn echo(
//!     _ctx: ActionContext,
//!     _init: (),
//!     mut inbound: Inbound<String>,
//!     out: Outbound<String>,
//! ) -> Result<usize, BoxError> {
//!     let mut turns = 0;
//!     while let Some(msg) = inbound.recv().await {
//!         out.send(format!("echo: {msg}")).await?;
//!         out.end_turn().await?;
//!         turns += 1;
//!     }
//!     Ok(turns)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let action = BidiAction::new("echo", echo);
//! let mut conn = action.connect(());
//! for text in ["hi", "there"] {
//!     conn.send(text.to_owned()).await?;
//!     let mut turn = conn.responses();
//!     while let Some(chunk) = turn.next().await {
//!         println!("{}", chunk?);
//!     }
//! }
//! conn.close();
//! assert_eq!(conn.output().await?, 2);
//! # Ok(())
//! # }
//! ```
//!
//! # Concepts
//!
//! - **Action** ([`BidiAction`]): a name and a function
//!   `Fn(ActionContext, Init, Inbound<In>, Outbound<Stream>) -> impl Future<Output = Result<Out, E>>`.
//! - **Connection** ([`Connection`]): one run of the action on its own task. Inputs go in with
//!   [`send`](Connection::send), [`close`](Connection::close) half-closes, and
//!   [`cancel`](Connection::cancel) stops it. Dropping it cancels the action.
//! - **Turn**: the chunks the action sends until it calls [`Outbound::end_turn`]. Each
//!   [`responses`](Connection::responses) call streams one turn; the action's error, if it fails,
//!   is the last item.
//! - **Rendezvous**: by default both directions are unbuffered. A send completes when the other
//!   side has taken the value (or, if it is already waiting, once the value is handed to it), and
//!   a send whose future is dropped delivers nothing. [`ConnectOptions`] sets buffers instead.
//!   An action with several chunks ready at once hands them over together with
//!   [`Outbound::send_batch`]: one hand-off, the consumer reads them one by one.
//!
//! Drive connections from tasks rather than from the thread running `block_on`: each unbuffered
//! hand-off is a task switch, which is much cheaper between runtime workers.
//!
//! # Cancellation
//!
//! [`cancel`](Connection::cancel), a parent token, or dropping every handle cancels a
//! connection. The action sees it at once ([`ActionContext::cancelled`], failing sends, an ended
//! inbound) and has a grace period ([`ConnectOptions::grace`], one second by default) to finish;
//! then its future is dropped. [`Connection::output`] and [`Connection::done`] return only when
//! nothing of the action runs any more, and [`Cause::kind`] says where the cancel came from.
//!
//! # Tokio
//!
//! Connections run on a tokio runtime with its time driver (for the grace period):
//! `#[tokio::main]`, or a runtime built with `enable_all()` or `enable_time()`. For
//! `#[tokio::main]` as in the examples, your `Cargo.toml` needs:
//!
//! ```toml
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! # Feature flags
//!
//! `bidi-core` has no optional features. Tracing, schemas and registries live in `bidi-flow`.

#![doc(test(attr(deny(warnings))))]

mod action;
mod chan;
mod connection;
mod context;
mod endpoint;
mod error;
mod extensions;
mod in_place;
mod link;
mod observer;

pub use action::{
    ActionFn, ActionFuture, ActionTask, BidiAction, ConnectOptions, DEFAULT_GRACE, Driver,
};
pub use connection::{Connection, RecvHalf, Responses, SendHalf};
pub use context::ActionContext;
pub use endpoint::{Inbound, Outbound, Recv};
pub use error::{BoxError, Cause, CauseKind, Error, NotFound, PeerGone, SendError};
pub use extensions::Extensions;
pub use in_place::InPlace;
pub use observer::Observer;

/// The channel underneath connections, for the benchmarks' raw baselines. Not a public API.
#[doc(hidden)]
pub mod __bench {
    pub use crate::chan::{Chan, Reason, Send};
}
