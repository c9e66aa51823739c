//! The caller's side of a connection: [`Connection`], its halves, and per-turn [`Responses`].

use std::fmt;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_core::{FusedStream, Stream};
use futures_util::future::{Either, join};
use uuid::Uuid;

use crate::chan::Reason;
use crate::error::{BoxError, Cause, Error, SendError};
use crate::in_place::{Beside, Local};
use crate::link::{self, Core, Frame, InputLink, Link, ResultLink};

/// An open connection to a running action: send inputs, read each turn's chunks, get the output.
///
/// Dropping it (and every half split from it) cancels the action. Drive it from a task: an
/// action that runs alone hands each unbuffered value over with a task switch, and a runtime
/// worker makes those far cheaper than the thread that runs `block_on` does. While the action
/// waits only on the caller, it runs in the caller's task, polled as the caller awaits the
/// connection ([`BidiAction::connect`](crate::BidiAction::connect) says when it leaves).
#[must_use = "dropping a connection cancels its action"]
pub struct Connection<In, Out, Stream> {
    // Declared first so it drops first: dropping an unconsumed connection cancels the action
    // before the halves' drops close the input gracefully.
    guard: CancelOnDrop,
    /// The action's task while the connection runs it in the caller's task (`None` with a
    /// [`Driver`](crate::Driver)). After `guard`: an unfinished action it spawns as it drops
    /// is cancelled already.
    local: Option<Arc<Local>>,
    tx: SendHalf<In>,
    rx: RecvHalf<Out, Stream>,
}

impl<In, Out, S> Connection<In, Out, S>
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    pub(crate) fn new(core: Arc<Core<In, Out, S>>, local: Option<Local>) -> Self {
        let local = local.map(Arc::new);
        Self {
            guard: CancelOnDrop(Some(core.clone())),
            local: local.clone(),
            tx: SendHalf { link: core.clone() },
            rx: RecvHalf {
                source: Source {
                    link: core,
                    error_yielded: false,
                    local,
                },
                backlog: Mutex::new(Vec::new().into_iter()),
            },
        }
    }

    /// Sends one input. With the default unbuffered input it completes when the action has
    /// taken it.
    ///
    /// # Errors
    ///
    /// The input comes back in a [`SendError`]: `Closed` after [`close`](Self::close),
    /// `Completed` once the action has returned, `Cancelled` once the connection was cancelled.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the input is not delivered.
    pub async fn send(&self, input: In) -> Result<(), SendError<In>> {
        let send = self.tx.send(input);
        match &self.local {
            None => send.await,
            Some(local) => local.beside(send).await,
        }
    }

    /// Closes the input: the action's [`Inbound`](crate::Inbound) ends once it has taken every
    /// input sent before. Idempotent. Chunks and the output can still be read.
    pub fn close(&self) {
        self.tx.close();
    }

    /// The chunks of the current turn: a stream that ends at the action's next
    /// [`end_turn`](crate::Outbound::end_turn), or when the action returns. If the connection
    /// failed, its error is the last item, yielded once per connection.
    ///
    /// Dropping the stream cancels nothing: the next call continues where it stopped.
    pub fn responses(&mut self) -> Responses<'_, S> {
        self.rx.responses()
    }

    /// Waits for the action's output, discarding chunks nobody read, so a streaming action can
    /// never deadlock it. Closes the input first.
    ///
    /// After a cancel it returns once the action's future has finished or been dropped (see
    /// [`ConnectOptions::grace`](crate::ConnectOptions::grace)): whatever the action does on
    /// its way out has happened by then.
    ///
    /// # Errors
    ///
    /// [`Error::Action`] with the action's error as source, [`Error::Panicked`], or
    /// [`Error::Cancelled`] if the connection was cancelled before the action completed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection, which cancels the action.
    pub fn output(self) -> impl Future<Output = Result<Out, Error>> {
        // Made here, not in an `async fn`, which would keep the connection twice and the
        // output's future twice more: agent wires await it inside every execution's future.
        let (local, tx, rx) = self.into_parts();
        drop(tx);
        let output = rx.output();
        match local {
            None => Either::Left(output),
            Some(local) => Either::Right(Beside::new(local, output)),
        }
    }

    /// The one-shot path: sends `input` as the only input, closes the input, discards the
    /// chunks and returns the output. The chunks are drained while the input is being sent, so
    /// an action may stream before it reads.
    ///
    /// # Errors
    ///
    /// As [`output`](Self::output). An action that completes without taking the input is not an
    /// error: its output says how it went.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection, which cancels the action.
    pub async fn run(self, input: In) -> Result<Out, Error> {
        let (local, tx, rx) = self.into_parts();
        let send = async move {
            let _ = tx.send(input).await;
        };
        let both = join(send, rx.output());
        match &local {
            None => both.await.1,
            Some(local) => local.beside(both).await.1,
        }
    }

    /// Cancels the connection, unless it already ended.
    pub fn cancel(&self) {
        self.tx.cancel();
    }

    /// Cancels the connection with `cause`, unless it already ended. The first cause wins; the
    /// action sees it through [`ActionContext::cancelled`](crate::ActionContext::cancelled).
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.tx.cancel_with(cause);
    }

    /// Whether the connection ended: the action returned or the connection was cancelled.
    ///
    /// A cancelled action may still be finishing (within its grace period, see
    /// [`ConnectOptions::grace`](crate::ConnectOptions::grace)); [`done`](Self::done) waits
    /// for that.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.tx.is_finished()
    }

    /// Waits until the connection is over: the action's future has finished, or, after a
    /// cancel, finished or been dropped at the end of its grace period. Nothing of the action
    /// runs once this returns. Consumes nothing: chunks and the output stay readable.
    ///
    /// How a transport waits for "this connection is over" while other tasks read and write.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn done(&self) {
        match &self.local {
            None => self.tx.done().await,
            Some(local) => local.beside(self.tx.done()).await,
        }
    }

    /// The connection's id (a UUID), the same as the action's
    /// [`ActionContext::connection_id`](crate::ActionContext::connection_id).
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.tx.id()
    }

    /// Splits the connection into an owned, cloneable sending half and an owned receiving half,
    /// for full-duplex use from two tasks.
    ///
    /// Dropping every sending half closes the input; dropping every half cancels the action.
    ///
    /// An action still run in the caller's task gets a task of its own here: two tasks cannot
    /// both drive it.
    ///
    /// # Panics
    ///
    /// Panics if the connection is [strictly in place](crate::ConnectOptions::in_place) and
    /// this is called outside a tokio runtime.
    #[must_use]
    pub fn into_split(self) -> (SendHalf<In>, RecvHalf<Out, S>) {
        let (local, tx, mut rx) = self.into_parts();
        rx.source.local = None;
        if let Some(local) = local {
            local.spawn();
        }
        (tx, rx)
    }

    /// The connection's parts, its cancel on drop disarmed.
    fn into_parts(self) -> (Option<Arc<Local>>, SendHalf<In>, RecvHalf<Out, S>) {
        let Self {
            guard,
            local,
            tx,
            rx,
        } = self;
        guard.disarm();
        (local, tx, rx)
    }
}

impl<In, Out, S> fmt::Debug for Connection<In, Out, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.tx.link.control().id())
            .field("finished", &self.tx.link.control().is_finished())
            .finish_non_exhaustive()
    }
}

struct CancelOnDrop(Option<Arc<dyn Link>>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(link) = self.0.take() {
            link.cancel(Cause::dropped());
        }
    }
}

/// The sending half of a [`Connection`], from [`Connection::into_split`]. Cloneable.
pub struct SendHalf<In> {
    link: Arc<dyn InputLink<In>>,
}

impl<In> SendHalf<In> {
    /// As [`Connection::send`].
    ///
    /// # Errors
    ///
    /// As [`Connection::send`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the input is not delivered.
    pub async fn send(&self, input: In) -> Result<(), SendError<In>> {
        self.link
            .input()
            .send(input)
            .await
            .map_err(|(reason, input)| match reason {
                // Say why it completed when it failed: the action's error, not just "completed".
                Reason::Completed => match self.link.failure() {
                    Some(error) => SendError::Failed(input, error),
                    None => SendError::Completed(input),
                },
                reason => SendError::new(reason, input),
            })
    }

    /// As [`Connection::close`].
    pub fn close(&self) {
        self.link.input().close(Reason::Closed);
    }

    /// As [`Connection::cancel`].
    pub fn cancel(&self) {
        self.link.cancel(Cause::requested());
    }

    /// As [`Connection::cancel_with`].
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.link.cancel(Cause::new(cause));
    }

    /// As [`Connection::is_finished`].
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.link.control().is_finished()
    }

    /// As [`Connection::done`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn done(&self) {
        self.link.control().done().await;
    }

    /// As [`Connection::id`].
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.link.control().id()
    }
}

impl<In> Clone for SendHalf<In> {
    fn clone(&self) -> Self {
        link::add_sender(&*self.link);
        Self {
            link: Arc::clone(&self.link),
        }
    }
}

impl<In> Drop for SendHalf<In> {
    fn drop(&mut self) {
        if link::release_sender(&*self.link) {
            self.link.input().close(Reason::Closed);
        }
    }
}

impl<In> fmt::Debug for SendHalf<In> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendHalf")
            .field("id", &self.link.control().id())
            .finish_non_exhaustive()
    }
}

/// The receiving half of a [`Connection`], from [`Connection::into_split`]: each turn's
/// chunks and the output.
pub struct RecvHalf<Out, S> {
    source: Source<Out, S>,
    /// The rest of a batch taken from the channel ([`Outbound::send_batch`](crate::Outbound::send_batch)),
    /// read before the channel. Only ever reached through `&mut self` (`Mutex::get_mut`, no
    /// locking): the mutex is there so the half is `Sync` whatever the chunk type.
    backlog: Mutex<std::vec::IntoIter<S>>,
}

/// What a [`Responses`] reads from besides the backlog.
struct Source<Out, S> {
    link: Arc<dyn ResultLink<Out, S>>,
    /// The connection's error was already yielded by a `Responses`.
    error_yielded: bool,
    /// The action's task, when the connection runs it in place: polled whenever the channel
    /// has nothing. Here, behind the `dyn` call, so that a turn's loop over its chunks is the
    /// same whichever way the action runs.
    local: Option<Arc<Local>>,
}

impl<Out, S> RecvHalf<Out, S> {
    /// As [`Connection::responses`].
    pub fn responses(&mut self) -> Responses<'_, S> {
        Responses {
            source: &mut self.source,
            backlog: self
                .backlog
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
            done: false,
            turn_ended: false,
            waiting: false,
        }
    }

    /// As [`Connection::output`], without closing the input (the sending halves do that).
    ///
    /// # Errors
    ///
    /// As [`Connection::output`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops this half; once every half is gone the action is cancelled.
    #[expect(
        clippy::manual_async_fn,
        reason = "an `async fn` would keep this half twice: as its argument and as its local"
    )]
    pub fn output(self) -> impl Future<Output = Result<Out, Error>> {
        async move {
            let output = self.source.link.output();
            poll_fn(|cx| {
                loop {
                    match output.poll_recv(cx) {
                        Poll::Ready(Some(_)) => {}
                        Poll::Ready(None) => return Poll::Ready(()),
                        Poll::Pending => return Poll::Pending,
                    }
                }
            })
            .await;
            let control = self.source.link.control();
            if control.was_cancelled() {
                // Nothing of the action may still run when the caller learns it was cancelled.
                control.done().await;
            }
            self.source.link.take_result()
        }
    }

    /// As [`Connection::cancel`].
    pub fn cancel(&self) {
        self.source.link.cancel(Cause::requested());
    }

    /// As [`Connection::cancel_with`].
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.source.link.cancel(Cause::new(cause));
    }

    /// As [`Connection::is_finished`].
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.source.link.control().is_finished()
    }

    /// As [`Connection::done`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn done(&self) {
        self.source.link.control().done().await;
    }

    /// As [`Connection::id`].
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.source.link.control().id()
    }
}

impl<Out, S> Drop for RecvHalf<Out, S> {
    fn drop(&mut self) {
        // Nobody reads chunks any more: the action's sends fail instead of waiting forever.
        if !link::release_handle(&*self.source.link) {
            self.source.link.output().close(Reason::Closed);
        }
    }
}

impl<Out, S> fmt::Debug for RecvHalf<Out, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvHalf")
            .field("id", &self.source.link.control().id())
            .finish_non_exhaustive()
    }
}

/// The chunks of one turn, from [`Connection::responses`]: a [`Stream`] of
/// `Result<Stream, Error>` that ends at the turn's end or when the connection ends.
///
/// Dropping it cancels nothing; the next [`responses`](Connection::responses) call continues
/// with the next chunk.
pub struct Responses<'a, S> {
    source: &'a mut dyn ResponsesSource<S>,
    /// The rest of a batch, read before the channel.
    backlog: &'a mut std::vec::IntoIter<S>,
    done: bool,
    /// The stream ended at an `end_turn`, not at the connection's end.
    turn_ended: bool,
    waiting: bool,
}

impl<S> Responses<'_, S> {
    /// Whether the stream ended at the action's [`end_turn`](crate::Outbound::end_turn):
    /// `false` while it still streams, and when it ended because the connection ended.
    ///
    /// How a transport tells a peer "this turn is over" apart from "this connection is over".
    #[must_use]
    pub fn turn_ended(&self) -> bool {
        self.turn_ended
    }

    /// Cancels the connection with `cause`, unless it already ended, as
    /// [`Connection::cancel_with`]: for a consumer that cannot use what it read (a chunk its
    /// transport cannot encode, say) while this stream holds the connection borrowed.
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.source.cancel(Cause::new(cause));
    }
}

/// What `Responses` needs of its half, without the `Out` type.
trait ResponsesSource<S>: Send + Sync {
    /// The next frame; `waiting` says, across polls, whether the stream waits for one.
    fn poll_frame(&self, cx: &mut Context<'_>, waiting: &mut bool) -> Poll<Option<Frame<S>>>;
    fn stop_waiting(&self);
    fn cancel(&self, cause: Cause);
    /// The connection's error, the first time it is asked for.
    fn take_error(&mut self) -> Option<Error>;
}

impl<Out, S> ResponsesSource<S> for Source<Out, S> {
    fn poll_frame(&self, cx: &mut Context<'_>, waiting: &mut bool) -> Poll<Option<Frame<S>>> {
        let output = self.link.output();
        match &self.local {
            None => {
                let frame = output.poll_recv(cx);
                *waiting = frame.is_pending();
                frame
            }
            Some(local) => local.poll_beside(cx, waiting, |cx| output.poll_recv(cx)),
        }
    }

    fn stop_waiting(&self) {
        self.link.output().stop_waiting();
        if let Some(local) = &self.local {
            local.leave();
        }
    }

    fn cancel(&self, cause: Cause) {
        self.link.cancel(cause);
    }

    fn take_error(&mut self) -> Option<Error> {
        if self.error_yielded {
            return None;
        }
        let error = self.link.error()?;
        self.error_yielded = true;
        Some(error)
    }
}

impl<S> Stream for Responses<'_, S> {
    type Item = Result<S, Error>;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        loop {
            if let Some(chunk) = this.backlog.next() {
                return Poll::Ready(Some(Ok(chunk)));
            }
            let Poll::Ready(frame) = this.source.poll_frame(cx, &mut this.waiting) else {
                return Poll::Pending;
            };
            return match frame {
                Some(Frame::Chunk(chunk)) => Poll::Ready(Some(Ok(chunk))),
                Some(Frame::Batch(chunks)) => {
                    *this.backlog = (*chunks).into_iter();
                    continue;
                }
                Some(Frame::EndTurn) => {
                    this.done = true;
                    this.turn_ended = true;
                    Poll::Ready(None)
                }
                None => {
                    this.done = true;
                    Poll::Ready(this.source.take_error().map(Err))
                }
            };
        }
    }
}

impl<S> FusedStream for Responses<'_, S> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<S> Drop for Responses<'_, S> {
    fn drop(&mut self) {
        if self.waiting {
            self.source.stop_waiting();
        }
    }
}

impl<S> fmt::Debug for Responses<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responses")
            .field("done", &self.done)
            .field("turn_ended", &self.turn_ended)
            .finish_non_exhaustive()
    }
}
