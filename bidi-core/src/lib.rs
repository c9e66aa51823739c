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
//! A connection runs its action in the caller's task while the action waits only on its caller
//! (C2), so a hand-off is a call. Drive connections from tasks rather than from the thread
//! running `block_on`: an action that runs alone hands each value over with a task switch,
//! which is much cheaper between runtime workers.
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
//!
//! # Contract
//!
//! The rules this crate keeps, for the crates built on it (flows, agents, transports) and for
//! anyone extending it. They are numbered so that reviews and other crates' docs can point at
//! them; a change to the crate keeps every one, or says here which it changes.
//!
//! - **C1** [`BidiAction::new`] takes any function of the one bound [`ActionFn`] (with
//!   [`ActionFuture`] for its future): `Fn(ActionContext, Init, Inbound<In>, Outbound<Stream>)
//!   -> Fut`, `Send + Sync + 'static`, where `Fut: Future<Output = Result<Out, E>> + Send +
//!   'static` and `E: Into<BoxError>`. Flows and agents put the same bound on their functions,
//!   so a mistake gets one diagnostic. A [`BidiAction`] is cheap to clone.
//! - **C2** [`connect`](BidiAction::connect) runs the action in at most one task of its own
//!   (inside a tokio runtime) and returns a `#[must_use]` [`Connection`]. It starts the action
//!   in the caller's task and keeps it there while it waits only on its caller, polled as the
//!   caller awaits the connection, so that a hand-off is a call; the first wake that comes
//!   while no poll of the connection is under way (a timer, I/O, another task, a cancel)
//!   spawns it, as if it had been spawned at once; a connection with a buffer, whose action
//!   is to run ahead of its caller, spawns it at once. (The contract this crate started from
//!   spawned at once: a turn's every hand-off then crossed tasks, and on a multi-thread
//!   runtime often a worker thread.)
//!   [`connect_with`](BidiAction::connect_with) takes [`ConnectOptions`]: buffer sizes, a parent
//!   cancellation token, extensions, an observer, the grace period.
//!   [`ConnectOptions::driver`] leaves the task's future ([`ActionTask`]) in a [`Driver`]
//!   instead of spawning it, for a transport that polls it in its own task beside its reads and
//!   writes, so that a turn crosses no task boundary. The task must be polled for the action to
//!   run; a transport that stops driving it spawns it (dropping it drops the action, as a
//!   runtime shutdown would). Every other rule holds as for a spawned action. Such a task
//!   wraps its future in [`InPlace`]: the action and the connection's ends wake one another
//!   from inside its poll, and a tokio runtime would answer each of those wakes as a
//!   `yield_now` (the back of the queue, an idle worker unparked to steal it); `InPlace` polls
//!   again at once, up to a budget, and hands the runtime only the wakes from elsewhere;
//!   [`InPlace::spawn`] runs such a future here as far as it goes without waiting, then in a
//!   task of its own (a request answered at once spawns nothing); [`InPlace::spawn_beside`]
//!   does so for an action's task joined with what reads it. A task that keeps a connection
//!   across turns and runs each turn itself polls the action only while a turn runs:
//!   [`beside`] runs the turn's work with the action polled beside it, whatever the work waits
//!   on, and leaves the task for the next turn.
//!   [`ConnectOptions::in_place`] keeps the task in the [`Connection`] for good, polled only
//!   while the caller awaits the connection (no runtime needed to open it); splitting or
//!   dropping a connection before its action finished spawns the task.
//! - **C3** Channels are unbuffered by default (rendezvous): [`Connection::send`] completes only
//!   when the action has taken the value, [`Outbound::send`] only when the consumer has taken
//!   the chunk, and a send whose future is dropped delivers nothing. [`ConnectOptions`] can set
//!   a buffer for either direction. [`Outbound::send_batch`] hands several chunks over as one:
//!   each counts as taken when the consumer takes the batch.
//! - **C4** A send after [`close`](Connection::close) fails with the value handed back
//!   ([`SendError::Closed`]); after the action completed with an output,
//!   [`SendError::Completed`]; after it ended with an error (its own or a panic),
//!   [`SendError::Failed`] carrying that error (the one [`output`](Connection::output)
//!   returns), so a transport can tell its peer why at once; after a cancel,
//!   [`SendError::Cancelled`]. All deterministic.
//! - **C5** [`close`](Connection::close) is idempotent and only half-closes:
//!   [`Inbound::recv`] returns `None` once everything sent was taken.
//! - **C6** [`responses`](Connection::responses) returns a [`Responses`] (a fused stream of
//!   `Result<Stream, Error>`) that ends at the next [`Outbound::end_turn`] or when the action
//!   returns; [`Responses::turn_ended`] tells which. If the action failed, its error is yielded
//!   once, as the last item. Dropping a `Responses` cancels nothing: the next call goes on where
//!   it stopped. [`Responses::cancel_with`] cancels from where a consumer reads.
//! - **C7** [`output`](Connection::output) waits for the action's result, discarding unread
//!   chunks, so a streaming action can never deadlock it. A completed result wins over a cancel
//!   that raced with it.
//! - **C8** [`cancel`](Connection::cancel) / [`cancel_with`](Connection::cancel_with): the first
//!   cause wins; the action sees it through [`ActionContext`] (`cancelled().await`,
//!   `is_cancelled()`), and its pending sends and receives return promptly. The action then has
//!   a grace period ([`ConnectOptions::grace`], default [`DEFAULT_GRACE`], one second) to
//!   finish; after it, its future is dropped wherever it waits (the cancel wakes the action's
//!   task, so the grace runs even while the action awaits something that knows nothing of the
//!   cancel). `output()` after a cancel returns [`Error::Cancelled`] (unless the action had
//!   already completed) only once the action's future has finished or been dropped: when it
//!   returns, nothing of the action runs. [`Cause::kind`] says where a cause came from
//!   ([`CauseKind::Requested`]: a handle's cancel; `Parent`: the parent token; `Dropped`: every
//!   handle dropped) without matching text; the error inside is the reason, downcastable.
//! - **C9** Dropping every handle of a connection cancels the action; its task ends within the
//!   grace period even if the action ignores its cancellation. No task, channel or span outlives
//!   its connection (the tests check the runtime's count of alive tasks). `done()` on a
//!   connection or either half waits for that moment without consuming anything;
//!   `is_finished()` says whether the outcome is decided (completed or cancelled), which can be
//!   earlier.
//! - **C10** A panic in the action becomes [`Error::Panicked`] through `responses()` and
//!   `output()`; it never hangs a caller and never takes the runtime down.
//! - **C11** The framework owns the end of the stream: the action cannot close its
//!   [`Outbound`]; returning closes it.
//! - **C12** [`run`](BidiAction::run) is the one-shot path: the input is the only inbound value,
//!   then the input is closed, chunks are drained, and the output returned. No task leaks even
//!   when the caller drops the future midway.
//! - **C13** [`into_split`](Connection::into_split) gives an owned, cloneable [`SendHalf`] and
//!   an owned [`RecvHalf`] (responses and output) for full-duplex use from two tasks. Dropping
//!   every sending half closes the input; dropping every half cancels.
//! - **C14** [`ActionContext`] carries the cancellation, the action's name, a connection id (a
//!   UUID), and typed [`Extensions`] (like `http::Extensions`), through which transports hand
//!   auth and request data to actions.
//! - **C15** Errors are small and specific: [`Error`] is a `#[non_exhaustive]` enum; the
//!   action's own error is kept as its source ([`Error::Action`]), so callers can downcast it.
//!   One [`BoxError`] and one [`NotFound`] (`kind`, `name`, `suggestion`) serve the workspace.
//!
//! The crate's public API has no OpenTelemetry, schemars, HTTP or database types: those belong
//! to the crates above it.

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
pub use in_place::{InPlace, beside};
pub use observer::Observer;

/// The channel underneath connections, for the benchmarks' raw baselines. Not a public API.
#[doc(hidden)]
pub mod __bench {
    pub use crate::chan::{Chan, Reason, Send};
}
