//! The state one connection shares between the caller's handles, the action's handles and the
//! task that drives the action: both channels, the result, and how the connection ended.
//!
//! Everything lives in one allocation, [`Core`]. Each handle only knows some of its type
//! parameters (an [`Inbound<In>`](crate::Inbound) knows nothing of `Out`), so handles hold it
//! through the object-safe views below.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::chan::{Chan, Reason};
use crate::error::{Cause, Error};
use crate::extensions::Extensions;
use crate::observer::Observer;

/// What travels from the action to the consumer.
pub(crate) enum Frame<S> {
    Chunk(S),
    /// Several chunks taken by the consumer at once (never empty). Boxed so that a frame is no
    /// larger than a chunk and its tag: single chunks pay nothing for batches.
    #[expect(
        clippy::box_collection,
        reason = "one pointer keeps `Frame<S>` the size of `S` and a tag"
    )]
    Batch(Box<Vec<S>>),
    EndTurn,
}

/// How a connection ended. Set once: the first of completion and cancellation wins.
enum Terminal {
    Completed,
    Cancelled(Cause),
}

/// The part of a connection that does not depend on its types.
pub(crate) struct Control {
    pub(crate) name: Arc<str>,
    id: OnceLock<Uuid>,
    /// Made on first use (most connections never need one), or at connect with a parent.
    token: OnceLock<CancellationToken>,
    terminal: OnceLock<Terminal>,
    pub(crate) extensions: Extensions,
    /// Caller-side handles alive (sending halves and the receiving half).
    handles: AtomicUsize,
    /// Sending halves alive.
    senders: AtomicUsize,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    /// How long a cancelled action may run on before its future is dropped.
    pub(crate) grace: Duration,
    /// The task driving the action, woken when the connection is cancelled so that it starts
    /// the grace period even if the action waits on something else.
    pub(crate) task: AtomicWaker,
    /// The action's future has finished or been dropped: nothing of it runs any more.
    done: AtomicBool,
    /// Someone waits (or waited) in `done()`: `set_done` must notify.
    done_awaited: AtomicBool,
    done_waiters: Notify,
}

impl Control {
    /// Whether the action's future has finished or been dropped.
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Records that the action's future has finished or been dropped.
    pub(crate) fn set_done(&self) {
        self.done.store(true, Ordering::SeqCst);
        // Most connections end with nobody waiting: skip the notifier's lock then.
        if self.done_awaited.load(Ordering::SeqCst) {
            self.done_waiters.notify_waiters();
        }
    }

    /// Waits until the action's future has finished or been dropped.
    pub(crate) async fn done(&self) {
        if self.is_done() {
            return;
        }
        let notified = self.done_waiters.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered, and said so, before the flag is read again: a `set_done` in between
        // either sees the waiter or is seen here.
        notified.as_mut().enable();
        self.done_awaited.store(true, Ordering::SeqCst);
        if self.done.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }

    /// Whether the connection ended by a cancel (not by the action completing first).
    pub(crate) fn was_cancelled(&self) -> bool {
        matches!(self.terminal.get(), Some(Terminal::Cancelled(_)))
    }

    /// The connection id, made on first use.
    pub(crate) fn id(&self) -> Uuid {
        *self.id.get_or_init(Uuid::new_v4)
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.terminal.get().is_some()
    }

    /// The connection's cancellation token, cancelled with it.
    pub(crate) fn token(&self) -> &CancellationToken {
        let token = self.token.get_or_init(CancellationToken::new);
        // Pairs with the fence in `cancel`: either the canceller sees this token, or this sees
        // the cancel.
        fence(Ordering::SeqCst);
        if self.was_cancelled() {
            token.cancel();
        }
        token
    }

    /// Whether the parent token (if any) was cancelled.
    pub(crate) fn parent_cancelled(&self) -> bool {
        self.token
            .get()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// The cancellation cause, if the connection was cancelled (or its parent token was).
    pub(crate) fn cause(&self) -> Option<Cause> {
        match self.terminal.get() {
            Some(Terminal::Cancelled(cause)) => Some(cause.clone()),
            _ if self.parent_cancelled() => Some(Cause::parent()),
            _ => None,
        }
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.was_cancelled() || self.parent_cancelled()
    }
}

/// Type-erased access to a connection, for its context and cancellation.
pub(crate) trait Link: Send + Sync {
    fn control(&self) -> &Control;
    /// Cancels unless the connection already ended; returns whether this call cancelled it.
    fn cancel(&self, cause: Cause) -> bool;
    /// The error the action ended with, once it completed with one (not for a cancel).
    fn failure(&self) -> Option<Error>;
}

/// A connection seen from the input side.
pub(crate) trait InputLink<In>: Link {
    fn input(&self) -> &Chan<In>;
}

/// A connection seen from the chunk side.
pub(crate) trait OutputLink<S>: Link {
    fn output(&self) -> &Chan<Frame<S>>;
}

/// A connection seen from its receiving half: chunks and the result.
pub(crate) trait ResultLink<Out, S>: OutputLink<S> {
    /// The error the connection ended with, if it ended with one.
    fn error(&self) -> Option<Error>;
    /// The final result; call once the output channel is closed and drained.
    fn take_result(&self) -> Result<Out, Error>;
}

pub(crate) struct Core<In, Out, S> {
    input: Chan<In>,
    output: Chan<Frame<S>>,
    result: Mutex<Option<Result<Out, Error>>>,
    control: Control,
}

impl<In, Out, S> Core<In, Out, S> {
    pub(crate) fn new(
        name: Arc<str>,
        input_buffer: usize,
        output_buffer: usize,
        token: Option<CancellationToken>,
        extensions: Extensions,
        observer: Option<Arc<dyn Observer>>,
        grace: Duration,
    ) -> Self {
        Self {
            input: Chan::new(input_buffer),
            output: Chan::new(output_buffer),
            result: Mutex::new(None),
            control: Control {
                name,
                id: OnceLock::new(),
                token: token.map_or_else(OnceLock::new, OnceLock::from),
                terminal: OnceLock::new(),
                extensions,
                handles: AtomicUsize::new(2),
                senders: AtomicUsize::new(1),
                observer,
                grace,
                task: AtomicWaker::new(),
                done: AtomicBool::new(false),
                done_awaited: AtomicBool::new(false),
                done_waiters: Notify::new(),
            },
        }
    }

    /// Records the action's result; unless the connection was cancelled first, closes both
    /// channels so pending and later sends fail with `Completed`.
    pub(crate) fn complete(&self, result: Result<Out, Error>) {
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        if self.control.terminal.set(Terminal::Completed).is_ok() {
            self.input.close(Reason::Completed);
            self.output.close(Reason::Completed);
        }
    }
}

impl<In, Out, S> Link for Core<In, Out, S>
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    fn control(&self) -> &Control {
        &self.control
    }

    fn cancel(&self, cause: Cause) -> bool {
        if self
            .control
            .terminal
            .set(Terminal::Cancelled(cause))
            .is_err()
        {
            return false;
        }
        self.input.close(Reason::Cancelled);
        self.output.close(Reason::Cancelled);
        // Pairs with the fence in `Control::token`.
        fence(Ordering::SeqCst);
        if let Some(token) = self.control.token.get() {
            token.cancel();
        }
        // The task starts the grace period, whatever the action is waiting for.
        self.control.task.wake();
        true
    }

    fn failure(&self) -> Option<Error> {
        match self.control.terminal.get()? {
            Terminal::Cancelled(_) => None,
            Terminal::Completed => {
                match &*self.result.lock().unwrap_or_else(PoisonError::into_inner) {
                    Some(Err(error)) => Some(error.clone()),
                    _ => None,
                }
            }
        }
    }
}

impl<In, Out, S> InputLink<In> for Core<In, Out, S>
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    fn input(&self) -> &Chan<In> {
        &self.input
    }
}

impl<In, Out, S> OutputLink<S> for Core<In, Out, S>
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    fn output(&self) -> &Chan<Frame<S>> {
        &self.output
    }
}

impl<In, Out, S> ResultLink<Out, S> for Core<In, Out, S>
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    fn error(&self) -> Option<Error> {
        match self.control.terminal.get()? {
            Terminal::Cancelled(cause) => Some(Error::Cancelled(cause.clone())),
            Terminal::Completed => self.failure(),
        }
    }

    fn take_result(&self) -> Result<Out, Error> {
        match self.control.terminal.get() {
            Some(Terminal::Cancelled(cause)) => Err(Error::Cancelled(cause.clone())),
            Some(Terminal::Completed) => self
                .result
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                // Only reachable if the result was already taken, which `output(self)` rules out.
                .unwrap_or_else(|| Err(Error::Cancelled(Cause::dropped()))),
            // The output channel closes only when the connection ends or its receiving half is
            // dropped, and the receiving half is the caller here.
            None => Err(Error::Cancelled(Cause::dropped())),
        }
    }
}

/// Handle accounting: the last caller-side handle dropped cancels the connection; the last
/// sending half dropped closes the input.
pub(crate) fn add_sender(link: &dyn Link) {
    let control = link.control();
    control.handles.fetch_add(1, Ordering::Relaxed);
    control.senders.fetch_add(1, Ordering::Relaxed);
}

/// Returns whether this was the last sending half (and the connection lives on).
pub(crate) fn release_sender(link: &dyn Link) -> bool {
    let control = link.control();
    let last_sender = control.senders.fetch_sub(1, Ordering::AcqRel) == 1;
    !release_handle(link) && last_sender
}

/// Returns whether this was the last handle (the connection was then cancelled).
pub(crate) fn release_handle(link: &dyn Link) -> bool {
    if link.control().handles.fetch_sub(1, Ordering::AcqRel) == 1 {
        link.cancel(Cause::dropped());
        true
    } else {
        false
    }
}
