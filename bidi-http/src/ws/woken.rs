//! A stream polled only when it asked to be: for a stream polled in a `select!` beside others,
//! whose polls cost even when nothing came (tungstenite zeroes its 128 KiB read buffer before
//! every read it tries, `WouldBlock` included).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::Stream;
use futures_util::task::AtomicWaker;

/// Wraps a stream so that a poll reaches it only if it woke since it last said `Pending`.
pub(super) struct Woken<S> {
    inner: S,
    flag: Arc<Flag>,
    waker: Waker,
}

/// Set when the inner stream wakes; wakes the task that polls.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<S> Woken<S> {
    pub(super) fn new(inner: S) -> Self {
        let flag = Arc::new(Flag {
            // The first poll reaches the stream.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&flag));
        Self { inner, flag, waker }
    }
}

impl<S: Stream + Unpin> Stream for Woken<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_next(&mut Context::from_waker(&this.waker));
        if polled.is_ready() {
            // More may be ready at once: the next poll reaches the stream again.
            this.flag.woken.store(true, Ordering::Release);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use futures_util::StreamExt as _;

    use super::*;

    /// Pending on every other poll, waking itself at once; counts its polls.
    struct Counted(Arc<AtomicUsize>);

    impl Stream for Counted {
        type Item = usize;

        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<usize>> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            if n.is_multiple_of(2) {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(Some(n))
            }
        }
    }

    #[tokio::test]
    async fn polls_reach_the_stream_only_after_it_woke() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut woken = Woken::new(Counted(Arc::clone(&polls)));
        assert_eq!(woken.next().await, Some(1));
        assert_eq!(woken.next().await, Some(3));
        assert_eq!(polls.load(Ordering::SeqCst), 4);

        // A stream that never wakes is polled once, however often it is asked.
        let polls = Arc::new(AtomicUsize::new(0));
        let mut never = Woken::new(futures_util::stream::poll_fn({
            let polls = Arc::clone(&polls);
            move |_| {
                polls.fetch_add(1, Ordering::SeqCst);
                Poll::<Option<()>>::Pending
            }
        }));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        for _ in 0..3 {
            assert!(Pin::new(&mut never).poll_next(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1);
    }
}
