//! The channel under both directions of every connection.
//!
//! A single-consumer queue with a capacity that may be zero. With capacity zero it is a
//! rendezvous, like Go's unbuffered channels: a send completes only once the receiver has taken
//! the value, or, when the receiver is already parked waiting, once the value has been handed to
//! it. A send whose future is dropped before that delivers nothing.
//!
//! The channel is closed with a [`Reason`]; the first reason wins, so "closed by the caller",
//! "the action completed" and "cancelled" are decided in one place, under one lock. Closing
//! fails every parked send (the value goes back to its sender) while the values already accepted
//! stay receivable.
//!
//! The module is private to the crate; `bidi_core::__bench` re-exports it so the benchmarks can
//! measure a connection against the bare channel underneath it.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker, ready};

/// Why a channel is closed. The first reason given wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The sending side closed it, or the receiving side went away.
    Closed,
    /// The action completed.
    Completed,
    /// The connection was cancelled.
    Cancelled,
}

/// A bounded single-consumer channel; capacity zero is a rendezvous.
pub struct Chan<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    /// Values accepted and not yet taken: at most `capacity`, plus one handed to a waiting receiver.
    queue: VecDeque<T>,
    capacity: usize,
    /// The receiver is parked waiting for a value: the next send may hand its value over at once.
    demand: bool,
    receiver: Option<Waker>,
    /// Sends waiting for room, in order. Their values are not accepted yet.
    parked: VecDeque<Parked<T>>,
    next_ticket: u64,
    closed: Option<Reason>,
}

struct Parked<T> {
    ticket: u64,
    value: T,
    waker: Waker,
}

impl<T> Chan<T> {
    /// A channel that accepts `capacity` values ahead of the receiver (0: a rendezvous).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                capacity,
                demand: false,
                receiver: None,
                parked: VecDeque::new(),
                next_ticket: 0,
                closed: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while the lock is held, but a poisoned lock must not wedge a connection.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `value`; resolves once it has been accepted (see the module docs).
    ///
    /// Fails with the close reason and the value if the channel is or becomes closed first.
    pub fn send(&self, value: T) -> Send<'_, T> {
        Send {
            chan: self,
            value: Some(value),
            ticket: None,
        }
    }

    /// Polls for the next value; `None` once the channel is closed and every accepted value was taken.
    ///
    /// Each value taken spends one unit of the tokio task's budget, as a tokio channel's
    /// receive does: a task whose reads always find a value (an action and its reader polled
    /// in one task, say, over a model that never waits) still yields to the runtime now and
    /// then, and the tasks beside it on its worker (an action finishing after its connection
    /// was dropped, a timer) get their turn. Out of budget, the poll is pending and the task
    /// is woken again once it yielded.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let coop = ready!(tokio::task::coop::poll_proceed(cx));
        let received = self.poll_take(cx);
        if received.is_ready() {
            coop.made_progress();
        }
        received
    }

    fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut state = self.lock();
        if let Some(value) = state.queue.pop_front() {
            state.demand = false;
            // Room was made: the oldest parked send is accepted into the queue.
            let wake = if state.closed.is_none() && state.queue.len() < state.capacity {
                state.parked.pop_front().map(|parked| {
                    state.queue.push_back(parked.value);
                    parked.waker
                })
            } else {
                None
            };
            drop(state);
            if let Some(waker) = wake {
                waker.wake();
            }
            return Poll::Ready(Some(value));
        }
        if state.closed.is_some() {
            state.demand = false;
            return Poll::Ready(None);
        }
        if let Some(parked) = state.parked.pop_front() {
            state.demand = false;
            drop(state);
            parked.waker.wake();
            return Poll::Ready(Some(parked.value));
        }
        state.demand = true;
        match &mut state.receiver {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// The receiver stopped waiting (its `recv` future or stream was dropped while pending).
    pub fn stop_waiting(&self) {
        let mut state = self.lock();
        state.demand = false;
        state.receiver = None;
    }

    /// Closes the channel with `reason` unless it is closed already; returns whether this call closed it.
    pub fn close(&self, reason: Reason) -> bool {
        let mut state = self.lock();
        if state.closed.is_some() {
            return false;
        }
        state.closed = Some(reason);
        let receiver = state.receiver.take();
        let parked: Vec<Waker> = state
            .parked
            .iter_mut()
            .map(|p| mem::replace(&mut p.waker, Waker::noop().clone()))
            .collect();
        drop(state);
        parked.into_iter().for_each(Waker::wake);
        if let Some(waker) = receiver {
            waker.wake();
        }
        true
    }

    /// The reason the channel was closed with, if it is closed.
    pub fn reason(&self) -> Option<Reason> {
        self.lock().closed
    }
}

impl<T> fmt::Debug for Chan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Chan")
            .field("capacity", &state.capacity)
            .field("queued", &state.queue.len())
            .field("parked", &state.parked.len())
            .field("closed", &state.closed)
            .finish()
    }
}

/// The future of [`Chan::send`].
#[must_use = "futures do nothing unless polled"]
pub struct Send<'a, T> {
    chan: &'a Chan<T>,
    /// The value until the first poll parks or delivers it.
    value: Option<T>,
    /// Set while parked.
    ticket: Option<u64>,
}

// The value is moved, never pinned.
impl<T> Unpin for Send<'_, T> {}

impl<T> Future for Send<'_, T> {
    type Output = Result<(), (Reason, T)>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut state = this.chan.lock();
        let Some(ticket) = this.ticket else {
            let Some(value) = this.value.take() else {
                panic!("`send` future polled after it completed");
            };
            if let Some(reason) = state.closed {
                return Poll::Ready(Err((reason, value)));
            }
            if state.parked.is_empty() && (state.demand || state.queue.len() < state.capacity) {
                state.queue.push_back(value);
                state.demand = false;
                let receiver = state.receiver.take();
                drop(state);
                if let Some(waker) = receiver {
                    waker.wake();
                }
                return Poll::Ready(Ok(()));
            }
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.parked.push_back(Parked {
                ticket,
                value,
                waker: cx.waker().clone(),
            });
            this.ticket = Some(ticket);
            return Poll::Pending;
        };
        let Some(index) = state.parked.iter().position(|p| p.ticket == ticket) else {
            // The receiver took it.
            this.ticket = None;
            return Poll::Ready(Ok(()));
        };
        if let Some(reason) = state.closed {
            this.ticket = None;
            return match state.parked.remove(index) {
                Some(parked) => Poll::Ready(Err((reason, parked.value))),
                None => Poll::Ready(Ok(())),
            };
        }
        if let Some(parked) = state.parked.get_mut(index)
            && !parked.waker.will_wake(cx.waker())
        {
            parked.waker = cx.waker().clone();
        }
        Poll::Pending
    }
}

impl<T> Drop for Send<'_, T> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else { return };
        let mut state = self.chan.lock();
        let withdrawn = state
            .parked
            .iter()
            .position(|p| p.ticket == ticket)
            .and_then(|index| state.parked.remove(index));
        drop(state);
        // The value was never accepted: it is dropped here, outside the lock.
        drop(withdrawn);
    }
}

impl<T> fmt::Debug for Send<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Send")
            .field("parked", &self.ticket.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let waker = Waker::noop();
        Pin::new(f).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn rendezvous_send_waits_for_the_receiver() {
        let chan = Chan::new(0);
        let mut send = chan.send(1);
        assert!(poll_once(&mut send).is_pending());
        let waker = Waker::noop();
        assert_eq!(
            chan.poll_recv(&mut Context::from_waker(waker)),
            Poll::Ready(Some(1))
        );
        assert_eq!(poll_once(&mut send), Poll::Ready(Ok(())));
    }

    #[test]
    fn dropped_send_delivers_nothing() {
        let chan = Chan::new(0);
        let mut send = chan.send(1);
        assert!(poll_once(&mut send).is_pending());
        drop(send);
        chan.close(Reason::Closed);
        let waker = Waker::noop();
        assert_eq!(
            chan.poll_recv(&mut Context::from_waker(waker)),
            Poll::Ready(None)
        );
    }

    #[test]
    fn waiting_receiver_takes_the_value_directly() {
        let chan = Chan::new(0);
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        assert!(
            chan.poll_recv(&mut Context::from_waker(&waker))
                .is_pending()
        );
        let mut send = chan.send(7);
        assert_eq!(poll_once(&mut send), Poll::Ready(Ok(())));
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst));
        // A second send finds no waiting receiver and parks.
        let mut second = chan.send(8);
        assert!(poll_once(&mut second).is_pending());
        assert_eq!(
            chan.poll_recv(&mut Context::from_waker(&waker)),
            Poll::Ready(Some(7))
        );
        assert_eq!(
            chan.poll_recv(&mut Context::from_waker(&waker)),
            Poll::Ready(Some(8))
        );
        assert_eq!(poll_once(&mut second), Poll::Ready(Ok(())));
    }

    #[test]
    fn close_returns_parked_values_and_keeps_accepted_ones() {
        let chan = Chan::new(1);
        let mut first = chan.send(1);
        assert_eq!(poll_once(&mut first), Poll::Ready(Ok(())));
        let mut second = chan.send(2);
        assert!(poll_once(&mut second).is_pending());
        assert!(chan.close(Reason::Completed));
        assert!(!chan.close(Reason::Cancelled));
        assert_eq!(
            poll_once(&mut second),
            Poll::Ready(Err((Reason::Completed, 2)))
        );
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert_eq!(chan.poll_recv(&mut cx), Poll::Ready(Some(1)));
        assert_eq!(chan.poll_recv(&mut cx), Poll::Ready(None));
        assert_eq!(chan.reason(), Some(Reason::Completed));
    }

    #[test]
    fn buffered_channel_refills_in_order() {
        let chan = Chan::new(2);
        let mut sends: Vec<_> = (0..4).map(|i| chan.send(i)).collect();
        let ready: Vec<bool> = sends.iter_mut().map(|s| poll_once(s).is_ready()).collect();
        assert_eq!(ready, [true, true, false, false]);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let got: Vec<_> = (0..4)
            .map(|_| match chan.poll_recv(&mut cx) {
                Poll::Ready(Some(v)) => v,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, [0, 1, 2, 3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_values_cross_threads_in_order() {
        let chan = Arc::new(Chan::new(0));
        let tx = chan.clone();
        let producer = tokio::spawn(async move {
            for i in 0..20_000u32 {
                tx.send(i).await.expect("open");
            }
            tx.close(Reason::Closed);
        });
        let mut expected = 0;
        while let Some(v) = poll_fn(|cx| chan.poll_recv(cx)).await {
            assert_eq!(v, expected);
            expected += 1;
        }
        assert_eq!(expected, 20_000);
        producer.await.expect("producer");
    }
}
