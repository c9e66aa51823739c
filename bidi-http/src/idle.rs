//! The idle timeout: a deadline pushed back by every frame, either way, that costs a clock read
//! per frame and a timer only while nothing moves.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// When something last moved on a connection, shared by its reader and writer.
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: Arc<AtomicU64>,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Something moved.
    pub(crate) fn touch(&self) {
        let since = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(since, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// Waits out an idle timeout on an [`Activity`].
#[derive(Debug)]
pub(crate) struct Idle {
    activity: Activity,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Idle {
    pub(crate) fn new(activity: Activity, timeout: Duration) -> Self {
        let sleep = Box::pin(tokio::time::sleep(timeout));
        Self {
            activity,
            timeout,
            sleep,
        }
    }

    /// Something moved.
    pub(crate) fn touch(&self) {
        self.activity.touch();
    }

    /// The timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Completes once nothing has moved for the timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped and called again, it waits for the same deadline.
    pub(crate) async fn expired(&mut self) {
        loop {
            self.sleep.as_mut().await;
            let deadline = self.activity.last() + self.timeout;
            if deadline <= Instant::now() {
                return;
            }
            self.sleep.as_mut().reset(deadline);
        }
    }

    /// Runs `work` (a write to the peer, say) unless nothing moves for the timeout first: a
    /// peer that stops reading stalls a write, and a stalled write is as idle as silence.
    /// `None` once the timeout passed; `work` is then dropped.
    ///
    /// # Cancel safety
    ///
    /// As cancel safe as `work`.
    pub(crate) async fn within<F: Future>(&mut self, work: F) -> Option<F::Output> {
        tokio::select! {
            biased;
            output = work => Some(output),
            () = self.expired() => None,
        }
    }
}
