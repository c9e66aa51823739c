//! The pump: an execution's events through a wire to a sink, batched, until the events end or
//! the peer goes away.

use std::task::Poll;

use bidi_agent::Refusal;
use bidi_core::{BoxError, Error, PeerGone, Responses};
use bidi_flow::idle::Idle;
use bidi_llm::{AgentEvent, ExecuteStream};
use futures_util::{FutureExt as _, Stream, StreamExt as _};

use crate::sink::{Closed, Sink};
use crate::wire::{Frames, Wire};

/// A stream of one execution's (or one turn's) events that the pump can stop:
/// [`ExecuteStream`] and a connection's [`Responses`].
pub trait Events<E>: Stream<Item = Result<E, Error>> + Unpin + Send {
    /// Cancels the connection with `cause`: the stream ends with the cancellation.
    fn cancel_with(&self, cause: BoxError);
}

impl Events<AgentEvent> for ExecuteStream<'_> {
    fn cancel_with(&self, cause: BoxError) {
        ExecuteStream::cancel_with(self, cause);
    }
}

impl<S: Send> Events<S> for Responses<'_, S> {
    fn cancel_with(&self, cause: BoxError) {
        Responses::cancel_with(self, cause);
    }
}

/// How a pumped stream of events ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended {
    /// The events ended: the wire wrote them all.
    Done,
    /// The connection failed: the wire wrote [`Wire::failed`] with why.
    Failed(Refusal),
    /// The peer went away, stayed idle, or asked to stop: the execution was cancelled with
    /// that cause and its remaining events read and dropped.
    Stopped,
}

/// Pumps `events` through `wire` to `sink` until they end: what the wire writes of an event,
/// with what it writes of those ready behind it, in one batch (up to [`Frames::is_full`]);
/// written once the sink has room, so a slow peer slows the execution.
///
/// The execution is cancelled once the sink is [closed](Sink::closed) (with the cause it
/// gives) or a write fails ([`PeerGone::Disconnected`]), or once nothing moves for `idle`'s
/// timeout ([`PeerGone::Idle`]); the pump then reads the events to their end and drops them,
/// so the execution never waits on it. `first`, if given, is written before the rest: an
/// event read already (the one that said the execution started).
///
/// # Cancel safety
///
/// Dropped, the events not read yet stay with `events`, and what the wire wrote and the pump
/// did not send yet is lost.
pub async fn pump<E, W, S>(
    events: &mut impl Events<E>,
    first: Option<E>,
    wire: &mut W,
    sink: &S,
    mut idle: Option<&mut Idle>,
) -> Ended
where
    W: Wire<Event = E>,
    S: Sink<W::Frames>,
{
    let mut frames = W::Frames::default();
    // Made once: a sink that closes on a signal (a cancellation token, a closed channel) is
    // registered once for the whole stream, not once an event.
    let mut closed = std::pin::pin!(sink.closed());
    let mut first = first;
    loop {
        let mut ended = None;
        if let Some(event) = first.take() {
            wire.event(event, &mut frames);
        } else {
            let step = next(events, closed.as_mut(), idle.as_deref_mut()).await;
            match step {
                Step::Item(Some(Ok(event))) => wire.event(event, &mut frames),
                Step::Item(Some(Err(error))) => ended = Some(failed(wire, &error, &mut frames)),
                Step::Item(None) => ended = Some(Ended::Done),
                Step::Stop(cause) => return stop(events, cause).await,
            }
        }
        // What is ready behind it goes in the same write (an event that wrote nothing waits
        // for the next as any other).
        while ended.is_none() && !frames.is_empty() && !frames.is_full() {
            match events.next().now_or_never() {
                Some(Some(Ok(event))) => wire.event(event, &mut frames),
                Some(Some(Err(error))) => ended = Some(failed(wire, &error, &mut frames)),
                Some(None) => ended = Some(Ended::Done),
                None => break,
            }
        }
        if !frames.is_empty() {
            let batch = std::mem::take(&mut frames);
            let sent = match idle.as_deref_mut() {
                Some(idle) => {
                    idle.touch();
                    idle.within(sink.send(batch)).await.ok_or(idle.timeout())
                }
                None => Ok(sink.send(batch).await),
            };
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(Closed)) => return stop(events, Box::new(PeerGone::Disconnected)).await,
                Err(timeout) => return stop(events, Box::new(PeerGone::Idle(timeout))).await,
            }
        } else if let Some(idle) = idle.as_deref() {
            idle.touch();
        }
        if let Some(ended) = ended {
            return ended;
        }
    }
}

/// What the pump waits for next.
enum Step<E> {
    /// The next event, or the end of the events.
    Item(Option<Result<E, Error>>),
    /// The sink closed or the peer was idle: the cause to cancel with.
    Stop(BoxError),
}

/// The next event, unless `closed` completes or `idle` expires first; the events are polled
/// first, the rest only while none is ready.
async fn next<E>(
    events: &mut impl Events<E>,
    mut closed: std::pin::Pin<&mut impl Future<Output = BoxError>>,
    idle: Option<&mut Idle>,
) -> Step<E> {
    let next = std::future::poll_fn(|cx| {
        if let Poll::Ready(item) = events.poll_next_unpin(cx) {
            return Poll::Ready(Step::Item(item));
        }
        closed.as_mut().poll(cx).map(Step::Stop)
    });
    match idle {
        None => next.await,
        Some(idle) => {
            let timeout = idle.timeout();
            tokio::select! {
                biased;
                step = next => step,
                () = idle.expired() => Step::Stop(Box::new(PeerGone::Idle(timeout))),
            }
        }
    }
}

/// Writes what says the connection failed with `error`.
fn failed<W: Wire>(wire: &mut W, error: &Error, frames: &mut W::Frames) -> Ended {
    let refusal = Refusal::of(error);
    wire.failed(refusal.message(), frames);
    Ended::Failed(refusal)
}

/// Cancels the execution with `cause` and reads what it still sends to its end.
pub(crate) async fn stop<E>(events: &mut impl Events<E>, cause: BoxError) -> Ended {
    events.cancel_with(cause);
    while events.next().await.is_some() {}
    Ended::Stopped
}

/// Completes with the timeout once `idle` expired; never without one.
pub(crate) async fn expired(idle: Option<&mut Idle>) -> std::time::Duration {
    match idle {
        Some(idle) => {
            idle.expired().await;
            idle.timeout()
        }
        None => std::future::pending().await,
    }
}
