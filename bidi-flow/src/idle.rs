//! The idle timeout of a transport: a deadline pushed back by every frame, either way, that
//! costs a clock read per frame and a timer only while nothing moves.
//!
//! A transport shares one [`Activity`] between the task that reads its peer and the one that
//! writes to it, and waits on an [`Idle`] over it; once nothing has moved for the timeout, it
//! cancels the connection with [`PeerGone::Idle`](bidi_core::PeerGone::Idle).
//!
//! ```
//! use std::time::Duration;
//!
//! use bidi_flow::idle::{Activity, Idle};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let activity = Activity::new();
//! let mut idle = Idle::new(activity.clone(), Duration::from_secs(30));
//! // A frame came in: the deadline moves.
//! activity.touch();
//! // A write that stalls for longer than the timeout gives up.
//! let stalled = idle.within(std::future::pending::<()>()).await;
//! assert_eq!(stalled, None);
//! # }
//! ```

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// When something last moved on a connection, shared by its reader and writer.
#[derive(Debug, Clone)]
pub struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: Arc<AtomicU64>,
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// Activity starting now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Something moved.
    #[inline]
    pub fn touch(&self) {
        let since = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(since, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// Waits out an idle timeout on an [`Activity`].
#[derive(Debug)]
pub struct Idle {
    activity: Activity,
    timeout: Duration,
    /// When it was made: nothing expires before `timeout` from then.
    since: Instant,
    /// The timer, made the first time something is waited for: a connection whose writes all
    /// go at once never registers one.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Idle {
    /// Waits for `timeout` of nothing moving on `activity`.
    #[must_use]
    pub fn new(activity: Activity, timeout: Duration) -> Self {
        Self {
            activity,
            timeout,
            since: Instant::now(),
            sleep: None,
        }
    }

    /// Something moved.
    #[inline]
    pub fn touch(&self) {
        self.activity.touch();
    }

    /// The timeout.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Completes once nothing has moved for the timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped and called again, it waits for the same deadline.
    pub async fn expired(&mut self) {
        std::future::poll_fn(|cx| self.poll_expired(cx)).await;
    }

    /// `Ready` once nothing has moved for the timeout; otherwise the timer is set for the
    /// deadline and wakes `cx` then.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let deadline = self.activity.last().max(self.since) + self.timeout;
            if deadline <= Instant::now() {
                return Poll::Ready(());
            }
            // A timer that has not fired yet waits on; activity since only moves the deadline
            // it checks when it fires.
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if sleep.is_elapsed() {
                sleep.as_mut().reset(deadline);
            }
            ready!(sleep.as_mut().poll(cx));
        }
    }

    /// Runs `work` (a write to the peer, say) unless nothing moves for the timeout first: a
    /// peer that stops reading stalls a write, and a stalled write is as idle as silence.
    /// `None` once the timeout passed; `work` is then dropped.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as `work`.
    pub fn within<F: Future>(&mut self, work: F) -> Within<'_, F> {
        Within { work, idle: self }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Idle::within`]: `work`'s output, or `None` once the idle timeout passed
    /// first. `work` is polled first.
    ///
    /// A future of its own rather than an `async fn`, which would keep `work` twice (as its
    /// argument, and in what it awaits): the writes of every wire go through it.
    #[must_use = "futures do nothing unless polled"]
    pub struct Within<'a, F> {
        #[pin]
        work: F,
        idle: &'a mut Idle,
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.work.poll(cx) {
            return Poll::Ready(Some(output));
        }
        this.idle.poll_expired(cx).map(|()| None)
    }
}

impl<F> fmt::Debug for Within<'_, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Within")
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}
