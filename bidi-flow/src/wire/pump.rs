//! The pump: a stream of events through a wire to a sink, batched, until the events end or the
//! peer goes away.

use std::fmt;
use std::task::Poll;
use std::time::Duration;

use bidi_core::{BoxError, Error, PeerGone, Responses};
use futures_util::future::Either;
use futures_util::{FutureExt as _, Stream, StreamExt as _};

use super::sink::{Closed, Sink};
use super::{Frames, Wire};
use crate::idle::Idle;
use crate::json::{JsonChunk, JsonError, JsonRecvHalf, JsonResponses};
use crate::text::untyped;

/// A stream of events the pump can stop: a turn's [`Responses`], a flow's
/// [`JsonResponses`], an agent's execution.
pub trait Events<E>: Stream<Item = Result<E, Self::Error>> + Unpin + Send {
    /// What ends the events with a failure.
    type Error: fmt::Display;

    /// Cancels the connection with `cause`: the stream ends with the cancellation.
    fn cancel_with(&self, cause: BoxError);
}

impl<S: Send> Events<S> for Responses<'_, S> {
    type Error = Error;

    fn cancel_with(&self, cause: BoxError) {
        Responses::cancel_with(self, cause);
    }
}

impl<C: Send> Events<C> for JsonResponses<'_, C> {
    type Error = JsonError;

    fn cancel_with(&self, cause: BoxError) {
        JsonResponses::cancel_with(self, cause);
    }
}

/// How a pumped stream of events ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended<F = Error> {
    /// The events ended: the wire wrote them all.
    Done,
    /// The connection failed: the wire wrote [`Wire::failed`] with why.
    Failed(F),
    /// The peer went away, stayed idle, or asked to stop: the connection was cancelled with
    /// that cause and its remaining events read and dropped.
    Stopped,
}

/// Pumps `events` through `wire` to `sink` until they end: what the wire writes of an event,
/// with what it writes of those ready behind it, in one batch (up to [`Frames::is_full`]);
/// written once the sink has room, so a slow peer slows the action.
///
/// The connection is cancelled once the sink is [closed](Sink::closed) (with the cause it
/// gives) or a write fails ([`PeerGone::Disconnected`]), or once nothing moves for `idle`'s
/// timeout ([`PeerGone::Idle`]); the pump then reads the events to their end and drops them,
/// so the action never waits on it. `first`, if given, is written before the rest: an
/// event read already (the one that said an execution started).
///
/// # Cancel safety
///
/// Dropped, the events not read yet stay with `events`, and what the wire wrote and the pump
/// did not send yet is lost.
pub async fn pump<Ev, W, S>(
    events: &mut Ev,
    first: Option<W::Event>,
    wire: &mut W,
    sink: &S,
    mut idle: Option<&mut Idle>,
) -> Ended<Ev::Error>
where
    Ev: Events<W::Event>,
    W: Wire,
    S: Sink<W::Frames>,
{
    let mut held = W::Frames::default();
    let ended = pump_held(events, first, wire, sink, idle.as_deref_mut(), &mut held).await;
    if matches!(ended, Ended::Stopped) || held.is_empty() {
        return ended;
    }
    match write(sink, held, idle).await {
        Ok(()) => ended,
        Err(_) => Ended::Stopped,
    }
}

/// As [`pump`], but what the last events wrote stays in `held`, unsent, once the events end
/// or fail: the caller writes it with what ends its stream (an output, a last record), in one
/// write. Stopped, `held` is left as it was.
///
/// # Cancel safety
///
/// As [`pump`].
pub async fn pump_held<Ev, W, S>(
    events: &mut Ev,
    first: Option<W::Event>,
    wire: &mut W,
    sink: &S,
    mut idle: Option<&mut Idle>,
    held: &mut W::Frames,
) -> Ended<Ev::Error>
where
    Ev: Events<W::Event>,
    W: Wire,
    S: Sink<W::Frames>,
{
    // Made once: a sink that closes on a signal (a cancellation token, a closed channel) is
    // registered once for the whole stream, not once an event.
    let mut closed = std::pin::pin!(sink.closed());
    let mut first = first;
    let frames = held;
    loop {
        // In a block of its own, so that none of it is kept in the pump's future while the
        // write waits.
        let batch = {
            let step = match first.take() {
                Some(event) => Step::Item(Some(Ok(event))),
                None => next(events, closed.as_mut(), idle.as_deref_mut()).await,
            };
            let mut ended = match step {
                Step::Item(Some(Ok(event))) => {
                    wire.event(event, frames);
                    None
                }
                Step::Item(Some(Err(error))) => Some(failed(wire, error, frames)),
                Step::Item(None) => Some(Ended::Done),
                Step::Stop(cause) => return stop(events, cause).await,
            };
            // What is ready behind it goes in the same write (an event that wrote nothing
            // waits for the next as any other).
            while ended.is_none() && !frames.is_empty() && !frames.is_full() {
                match events.next().now_or_never() {
                    Some(Some(Ok(event))) => wire.event(event, frames),
                    Some(Some(Err(error))) => ended = Some(failed(wire, error, frames)),
                    Some(None) => ended = Some(Ended::Done),
                    None => break,
                }
            }
            if let Some(ended) = ended {
                if let Some(idle) = idle.as_deref() {
                    idle.touch();
                }
                return ended;
            }
            if frames.is_empty() {
                if let Some(idle) = idle.as_deref() {
                    idle.touch();
                }
                continue;
            }
            std::mem::take(frames)
        };
        if let Err(cause) = write(sink, batch, idle.as_deref_mut()).await {
            return stop(events, cause).await;
        }
    }
}

/// Pumps every turn of a flow's connection, one after another, until the connection ends: at
/// each turn's end (more may follow) the wire marks it ([`Wire::turn_end`]) and what the
/// turn wrote goes out, so the peer reads a turn whole before it answers it. What the last
/// turn wrote stays in `held`, as [`pump_held`] leaves it: the caller writes it with the
/// output (which [`JsonRecvHalf::output`] then answers at once). The wire's events are the
/// chunks as [`Value`](serde_json::Value)s, or as their JSON text for a wire that only writes
/// them on ([`JsonChunk`]).
///
/// # Cancel safety
///
/// As [`pump`].
pub async fn pump_turns<W, S>(
    output: &mut JsonRecvHalf,
    wire: &mut W,
    sink: &S,
    mut idle: Option<&mut Idle>,
    held: &mut W::Frames,
) -> Ended<JsonError>
where
    W: Wire,
    W::Event: JsonChunk,
    S: Sink<W::Frames>,
{
    loop {
        // A turn's events in a block of their own: nothing of them is kept while the turn's
        // end is written.
        {
            let mut turn = W::Event::responses(output);
            let ended = pump_held(&mut turn, None, wire, sink, idle.as_deref_mut(), held).await;
            if !matches!(ended, Ended::Done) || !turn.turn_ended() {
                return ended;
            }
        }
        wire.turn_end(held);
        if held.is_empty() {
            continue;
        }
        if let Err(cause) = write(sink, std::mem::take(held), idle.as_deref_mut()).await {
            output.cancel_with(cause);
            return Ended::Stopped;
        }
    }
}

/// Writes `frames` once the sink has room, within the idle timeout: the cause to cancel with
/// if the peer is gone ([`PeerGone::Disconnected`]) or did not take them in time
/// ([`PeerGone::Idle`]).
///
/// A plain function returning its future, not an `async fn`, which would keep its arguments
/// twice in the future of every pump that awaits it.
fn write<'a, F: 'a, S: Sink<F>>(
    sink: &'a S,
    frames: F,
    idle: Option<&'a mut Idle>,
) -> impl Future<Output = Result<(), BoxError>> + 'a {
    let (sent, timeout) = match idle {
        Some(idle) => {
            idle.touch();
            let timeout = idle.timeout();
            (Either::Left(idle.within(sink.send(frames))), timeout)
        }
        None => (Either::Right(sink.send(frames).map(Some)), Duration::ZERO),
    };
    sent.map(move |sent| match sent {
        Some(Ok(())) => Ok(()),
        Some(Err(Closed)) => Err(Box::new(PeerGone::Disconnected) as BoxError),
        None => Err(Box::new(PeerGone::Idle(timeout)) as BoxError),
    })
}

/// What the pump waits for next.
enum Step<E, F> {
    /// The next event, or the end of the events.
    Item(Option<Result<E, F>>),
    /// The sink closed or the peer was idle: the cause to cancel with.
    Stop(BoxError),
}

/// The next event, unless `closed` completes or `idle` expires first; the events are polled
/// first, the rest only while none is ready.
async fn next<E, Ev: Events<E>>(
    events: &mut Ev,
    mut closed: std::pin::Pin<&mut impl Future<Output = BoxError>>,
    idle: Option<&mut Idle>,
) -> Step<E, Ev::Error> {
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

/// Writes what says the connection failed with `error`: its message, in words a user may
/// read.
fn failed<W: Wire, F: fmt::Display>(wire: &mut W, error: F, frames: &mut W::Frames) -> Ended<F> {
    wire.failed(&untyped(&error.to_string()), frames);
    Ended::Failed(error)
}

/// Cancels the connection with `cause` and reads what it still sends to its end.
///
/// # Cancel safety
///
/// Dropped, the rest of the events stay unread; the connection is cancelled already.
pub async fn stop<E, F>(events: &mut impl Events<E, Error = F>, cause: BoxError) -> Ended<F> {
    events.cancel_with(cause);
    while events.next().await.is_some() {}
    Ended::Stopped
}
