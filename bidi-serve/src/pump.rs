//! The pump: an execution's events through a wire to a sink, batched, until the events end or
//! the peer goes away.

use bidi_core::{BoxError, Error, PeerGone, Responses};
use bidi_flow::idle::Idle;
use bidi_llm::{AgentEvent, ExecuteStream};
use futures_util::{FutureExt as _, Stream, StreamExt as _};

use crate::sink::{Closed, Sink};
use crate::wire::{Frames, Wire};
use bidi_agent::Refusal;

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

/// Pumps `events` through `wire` to `sink` until they end: each event the wire writes, with
/// those ready behind it, in one batch (up to [`Frames::is_full`]); written once the sink has
/// room, so a slow peer slows the execution.
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
    let mut next = first.map(Ok);
    loop {
        let item = match next.take() {
            Some(item) => Some(item),
            None => {
                tokio::select! {
                    biased;
                    item = events.next() => item,
                    cause = sink.closed() => return stop(events, cause).await,
                    () = expired(idle.as_deref_mut()) => {
                        let timeout = idle.as_ref().map(|idle| idle.timeout()).unwrap_or_default();
                        return stop(events, Box::new(PeerGone::Idle(timeout))).await;
                    }
                }
            }
        };
        let mut ended = None;
        match item {
            Some(Ok(event)) => wire.event(event, &mut frames),
            Some(Err(error)) => ended = Some(failed(wire, &error, &mut frames)),
            None => ended = Some(Ended::Done),
        }
        // What is ready behind it goes in the same write.
        while ended.is_none() && !frames.is_full() {
            match events.next().now_or_never() {
                Some(Some(Ok(event))) => wire.event(event, &mut frames),
                Some(Some(Err(error))) => ended = Some(failed(wire, &error, &mut frames)),
                Some(None) => ended = Some(Ended::Done),
                None => break,
            }
        }
        if let Some(idle) = idle.as_deref() {
            idle.touch();
        }
        if !frames.is_empty() {
            let batch = std::mem::take(&mut frames);
            match within(idle.as_deref_mut(), sink.send(batch)).await {
                Ok(Ok(())) => {}
                Ok(Err(Closed)) => return stop(events, Box::new(PeerGone::Disconnected)).await,
                Err(timeout) => return stop(events, Box::new(PeerGone::Idle(timeout))).await,
            }
        }
        if let Some(ended) = ended {
            return ended;
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
async fn stop<E>(events: &mut impl Events<E>, cause: BoxError) -> Ended {
    events.cancel_with(cause);
    while events.next().await.is_some() {}
    Ended::Stopped
}

/// Completes once `idle` expired; never without one.
async fn expired(idle: Option<&mut Idle>) {
    match idle {
        Some(idle) => idle.expired().await,
        None => std::future::pending().await,
    }
}

/// `work`, unless `idle` expires first: then the timeout.
async fn within<F: Future>(
    idle: Option<&mut Idle>,
    work: F,
) -> Result<F::Output, std::time::Duration> {
    match idle {
        Some(idle) => {
            let timeout = idle.timeout();
            idle.within(work).await.ok_or(timeout)
        }
        None => Ok(work.await),
    }
}
