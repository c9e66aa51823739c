//! Where a wire's frames go: one peer's response body or socket, several readers, or nowhere.

use std::convert::Infallible;
use std::future::Future;

use bidi_core::{BoxError, PeerGone};
use tokio::sync::mpsc;

/// Nobody reads a connection's frames any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// Where a connection's frames go, one write at a time: a response body, a socket, a channel's
/// streaming calls, or several readers at once.
///
/// The pump writes a batch of frames once there is room for it, so a slow peer slows the
/// action; and it cancels the connection once [`closed`](Self::closed) completes.
pub trait Sink<F>: Send + Sync {
    /// Writes `frames` once there is room for them.
    ///
    /// # Errors
    ///
    /// [`Closed`] once nobody reads any more: the connection is then cancelled with
    /// [`PeerGone::Disconnected`].
    ///
    /// # Cancel safety
    ///
    /// Dropped before it completes (on the idle timeout), the frames may be lost: the
    /// connection is cancelled then.
    fn send(&self, frames: F) -> impl Future<Output = Result<(), Closed>> + Send;

    /// Completes once the connection is to stop, with the cause to cancel it with: nobody
    /// reads any more ([`PeerGone::Disconnected`]), or the peer asked to stop. Never, by
    /// default.
    ///
    /// The pump makes this future once per stream and polls it while it waits for events.
    fn closed(&self) -> impl Future<Output = BoxError> + Send {
        std::future::pending()
    }
}

/// Nobody reads, and nobody goes away: the sink of a detached execution (which runs to its end
/// without its client), or of an answer that reads the chunks only to wait for the output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Detached;

impl<F: Send + 'static> Sink<F> for Detached {
    async fn send(&self, frames: F) -> Result<(), Closed> {
        drop(frames);
        Ok(())
    }
}

/// A channel whose receiver is one peer's response body: closed once the body is dropped.
impl<F: Send + 'static> Sink<F> for mpsc::Sender<F> {
    async fn send(&self, frames: F) -> Result<(), Closed> {
        Self::send(self, frames).await.map_err(|_| Closed)
    }

    async fn closed(&self) -> BoxError {
        Self::closed(self).await;
        Box::new(PeerGone::Disconnected)
    }
}

/// The body of a channel of frames, in order, as a stream that never fails: what an HTTP
/// response body takes.
pub fn stream<F: Send + 'static>(
    frames: mpsc::Receiver<F>,
) -> impl futures_util::Stream<Item = Result<F, Infallible>> + Send + 'static {
    futures_util::stream::unfold(frames, |mut frames| async move {
        frames.recv().await.map(|batch| (Ok(batch), frames))
    })
}
