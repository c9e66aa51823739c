//! The body of a streamed answer: the writes its writer sends through a channel, in order.
//!
//! An answer that is ready before its handler returns (an action that answers at once, run in
//! the request's task) is a whole body: one buffer with its length, which goes out with the
//! response's head in one write, and the client reads its end without a chunked-encoding
//! trailer. Any other streams its writes as they come, each one frame, and ends with the last
//! one without waiting for its writer to go.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use tokio::sync::mpsc::{self, error::TryRecvError};

/// One write of a body: its bytes, and whether it is the last.
pub trait Write: Send + 'static {
    /// The bytes, and whether nothing comes after them.
    fn into_parts(self) -> (Bytes, bool);
}

/// The records of an answer that ends when its writer closes the channel.
impl Write for Vec<u8> {
    fn into_parts(self) -> (Bytes, bool) {
        (Bytes::from(self), false)
    }
}

/// The records of an answer, and whether they are its last.
impl Write for (Bytes, bool) {
    fn into_parts(self) -> (Bytes, bool) {
        self
    }
}

/// The body of the writes `writes` carries: whole if its last write is already there, else
/// the writes there already and then each as it comes.
///
/// ```
/// use axum::body::HttpBody as _;
/// use tokio::sync::mpsc;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (writes, written) = mpsc::channel(1);
/// writes.send(b"data: {}\n\n".to_vec()).await.unwrap();
/// drop(writes);
/// // Its writer is done: the body is whole, and says its length.
/// let body = bidi_http::body::of_writes(written);
/// assert_eq!(body.size_hint().exact(), Some(10));
/// # }
/// ```
pub fn of_writes<W: Write>(mut writes: mpsc::Receiver<W>) -> Body {
    let mut ready = Ready::default();
    loop {
        match writes.try_recv() {
            Ok(write) => {
                let (bytes, last) = write.into_parts();
                ready.push(bytes);
                if last {
                    return Body::from(ready.take());
                }
            }
            Err(TryRecvError::Disconnected) => return Body::from(ready.take()),
            Err(TryRecvError::Empty) => break,
        }
    }
    let first = ready.take();
    let rest = futures_util::stream::unfold(Some(writes), |writes| async move {
        let mut writes = writes?;
        let (bytes, last) = writes.recv().await?.into_parts();
        Some((Ok::<_, Infallible>(bytes), (!last).then_some(writes)))
    });
    if first.is_empty() {
        return Body::from_stream(rest);
    }
    let first = futures_util::stream::once(std::future::ready(Ok(first)));
    Body::from_stream(futures_util::StreamExt::chain(first, rest))
}

/// The writes already there: one kept as it is, several copied into one buffer.
#[derive(Default)]
struct Ready {
    one: Bytes,
    more: Vec<u8>,
}

impl Ready {
    fn push(&mut self, bytes: Bytes) {
        if self.one.is_empty() && self.more.is_empty() {
            self.one = bytes;
            return;
        }
        if !self.one.is_empty() {
            self.more.extend_from_slice(&std::mem::take(&mut self.one));
        }
        self.more.extend_from_slice(&bytes);
    }

    fn take(&mut self) -> Bytes {
        if self.more.is_empty() {
            std::mem::take(&mut self.one)
        } else {
            Bytes::from(std::mem::take(&mut self.more))
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::HttpBody as _;

    use super::*;

    async fn read(body: Body) -> String {
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn an_answer_ready_at_once_is_whole() {
        let (tx, rx) = mpsc::channel(2);
        tx.send(b"a".to_vec()).await.unwrap();
        tx.send(b"b".to_vec()).await.unwrap();
        drop(tx);
        let body = of_writes(rx);
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(read(body).await, "ab");
    }

    #[tokio::test]
    async fn the_last_write_ends_the_body_with_its_writer_still_there() {
        let (tx, rx) = mpsc::channel(1);
        tx.send((Bytes::from_static(b"end"), true)).await.unwrap();
        let body = of_writes(rx);
        assert_eq!(body.size_hint().exact(), Some(3));
        assert_eq!(read(body).await, "end");
        drop(tx);
    }

    #[tokio::test]
    async fn a_body_still_written_streams_what_is_there_then_the_rest() {
        let (tx, rx) = mpsc::channel(1);
        tx.send((Bytes::from_static(b"one "), false)).await.unwrap();
        let body = of_writes(rx);
        assert_eq!(body.size_hint().exact(), None);
        let writer = tokio::spawn(async move {
            tx.send((Bytes::from_static(b"two "), false)).await.unwrap();
            tx.send((Bytes::from_static(b"three"), true)).await.unwrap();
            // Still open: the last write ended the body.
            tx
        });
        assert_eq!(read(body).await, "one two three");
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn a_body_with_nothing_yet_waits_for_its_writes() {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(1);
        let body = of_writes(rx);
        let writer = tokio::spawn(async move {
            tx.send(b"late".to_vec()).await.unwrap();
        });
        assert_eq!(read(body).await, "late");
        writer.await.unwrap();
    }
}
