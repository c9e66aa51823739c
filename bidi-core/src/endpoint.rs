//! The action's ends of a connection: [`Inbound`] inputs and [`Outbound`] chunks.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::{FusedStream, Stream};

use crate::error::SendError;
use crate::link::{Frame, InputLink, OutputLink};

/// The inputs of a connection, as the action receives them.
///
/// Also a [`Stream`] of inputs. It ends (yields `None`) once the caller closed the connection
/// and every input sent before was taken, or once the connection was cancelled.
pub struct Inbound<In> {
    link: Arc<dyn InputLink<In>>,
    /// The last poll returned `Pending`: the channel may hand us a value directly.
    waiting: bool,
    done: bool,
}

impl<In> Inbound<In> {
    pub(crate) fn new(link: Arc<dyn InputLink<In>>) -> Self {
        Self {
            link,
            waiting: false,
            done: false,
        }
    }

    /// Receives the next input, or `None` once the input is closed or the connection cancelled.
    ///
    /// A caller's [`send`](crate::Connection::send) completes when this takes its value (or
    /// when the value is handed to this call while it waits).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before it completes, no input is lost; a value
    /// handed over in the meantime is returned by the next call.
    pub fn recv(&mut self) -> Recv<'_, In> {
        Recv { inbound: self }
    }

    /// Polls for the next input; the poll-based form of [`recv`](Self::recv).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<In>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.link.input().poll_recv(cx) {
            Poll::Pending => {
                self.waiting = true;
                Poll::Pending
            }
            Poll::Ready(value) => {
                self.waiting = false;
                self.done = value.is_none();
                if value.is_some()
                    && let Some(observer) = &self.link.control().observer
                {
                    observer.on_input();
                }
                Poll::Ready(value)
            }
        }
    }

    fn stop_waiting(&mut self) {
        if self.waiting {
            self.waiting = false;
            self.link.input().stop_waiting();
        }
    }
}

impl<In> Stream for Inbound<In> {
    type Item = In;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<In>> {
        self.get_mut().poll_recv(cx)
    }
}

impl<In> FusedStream for Inbound<In> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl<In> Drop for Inbound<In> {
    fn drop(&mut self) {
        self.stop_waiting();
    }
}

impl<In> fmt::Debug for Inbound<In> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbound")
            .field("connection_id", &self.link.control().id())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

/// The future of [`Inbound::recv`].
#[must_use = "futures do nothing unless polled"]
pub struct Recv<'a, In> {
    inbound: &'a mut Inbound<In>,
}

impl<In> Future for Recv<'_, In> {
    type Output = Option<In>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<In>> {
        self.inbound.poll_recv(cx)
    }
}

impl<In> Drop for Recv<'_, In> {
    fn drop(&mut self) {
        self.inbound.stop_waiting();
    }
}

impl<In> fmt::Debug for Recv<'_, In> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recv").finish_non_exhaustive()
    }
}

/// Where the action streams its chunks and ends its turns.
///
/// Cheap to clone, so several tasks inside an action can stream. The framework owns the end of
/// the stream: when the action returns, the consumer's stream ends, and sends through clones that
/// outlive the action fail with [`SendError::Completed`].
pub struct Outbound<S> {
    link: Arc<dyn OutputLink<S>>,
}

impl<S> Outbound<S> {
    pub(crate) fn new(link: Arc<dyn OutputLink<S>>) -> Self {
        Self { link }
    }

    /// Sends one chunk of the current turn. With the default unbuffered output it completes
    /// when the consumer has taken the chunk.
    ///
    /// # Errors
    ///
    /// The chunk comes back in a [`SendError`]: `Closed` once the consumer dropped its receiving
    /// half, `Cancelled` once the connection was cancelled, `Completed` after the action returned.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the chunk is not delivered.
    pub async fn send(&self, chunk: S) -> Result<(), SendError<S>> {
        self.link
            .output()
            .send(Frame::Chunk(chunk))
            .await
            .map_err(|(reason, frame)| {
                SendError::new(reason, frame).map(|frame| match frame {
                    Frame::Chunk(chunk) => chunk,
                    Frame::Batch(_) | Frame::EndTurn => unreachable!("a chunk was sent"),
                })
            })?;
        self.delivered(1);
        Ok(())
    }

    /// Sends several chunks of the current turn as one hand-off: the consumer takes them
    /// together, then reads them one by one from its own side, in order, without waiting for
    /// the action. With the default unbuffered output the send completes when the consumer
    /// takes the batch (reads its first chunk); a batch takes one place in an output buffer.
    ///
    /// This is how a producer with several chunks ready at once (a model's buffered tokens,
    /// say) streams them at the cost of one hand-off instead of one each. The consumer sees
    /// exactly the chunks it would see from one [`send`](Self::send) each.
    ///
    /// ```
    /// use bidi_core::{BidiAction, BoxError, Inbound, Outbound};
    /// use futures_util::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let count = BidiAction::new("count", |_ctx, (), _: Inbound<()>, out: Outbound<u32>| async move {
    ///     out.send_batch((1..=3).collect()).await?;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let mut conn = count.connect(());
    /// let chunks: Vec<u32> = conn.responses().map(|chunk| chunk.unwrap()).collect().await;
    /// assert_eq!(chunks, [1, 2, 3]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send); the whole batch comes back (nothing of it was delivered). An
    /// empty batch delivers nothing and fails only if the output is closed.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, none of the chunks is delivered.
    pub async fn send_batch(&self, mut chunks: Vec<S>) -> Result<(), SendError<Vec<S>>> {
        let count = chunks.len();
        let frame = if count > 1 {
            Frame::Batch(Box::new(chunks))
        } else if let Some(chunk) = chunks.pop() {
            Frame::Chunk(chunk)
        } else {
            return match self.link.output().reason() {
                Some(reason) => Err(SendError::new(reason, chunks)),
                None => Ok(()),
            };
        };
        self.link
            .output()
            .send(frame)
            .await
            .map_err(|(reason, frame)| {
                SendError::new(reason, frame).map(|frame| match frame {
                    Frame::Chunk(chunk) => vec![chunk],
                    Frame::Batch(chunks) => *chunks,
                    Frame::EndTurn => unreachable!("chunks were sent"),
                })
            })?;
        self.delivered(count);
        Ok(())
    }

    fn delivered(&self, count: usize) {
        if let Some(observer) = &self.link.control().observer {
            observer.on_chunks(count);
        }
    }

    /// Ends the current turn: the consumer's [`Responses`](crate::Responses) ends here. With the
    /// default unbuffered output it completes when the consumer has reached the end of the turn.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send), with no value to give back.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the turn is not ended.
    pub async fn end_turn(&self) -> Result<(), SendError<()>> {
        self.link
            .output()
            .send(Frame::EndTurn)
            .await
            .map_err(|(reason, _)| SendError::new(reason, ()))?;
        if let Some(observer) = &self.link.control().observer {
            observer.on_end_turn();
        }
        Ok(())
    }
}

impl<S> Clone for Outbound<S> {
    fn clone(&self) -> Self {
        Self {
            link: Arc::clone(&self.link),
        }
    }
}

impl<S> fmt::Debug for Outbound<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbound")
            .field("connection_id", &self.link.control().id())
            .finish_non_exhaustive()
    }
}
