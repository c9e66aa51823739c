//! An answer across processes: its writes published to the store's
//! [`Streams`] (when the store has them, as `PostgresStore` does) under
//! its turn's snapshot id, and followed from there by a client that comes back to it on
//! another process.
//!
//! A [`Publisher`] is a task per answer that keeps an opening piece as soon as the turn's
//! snapshot is known, then stores what queued while the last piece was being stored as the
//! next piece, so that the answer never waits on the store; a piece the store fails to keep is
//! tried again (the writes queuing meanwhile) for a minute. A reader in the answer's own
//! process keeps reading its [`Tee`](super::Tee), with no copy. A client that
//! comes back and finds no answer in its process follows the running turn of the session from
//! the store ([`follow`]). The repository's `examples/tests/serve.rs` runs two `serve`
//! processes on one PostgreSQL database and resumes on the process that is not streaming: a
//! chat with the AI SDK's `reconnectToStream` (`tests/node/vercel_reconnect.mjs`), and a
//! Genkit stream by its stream id.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use bidi_session::{Follow, Piece, SessionStore, StoreError, Streams};
use futures_util::StreamExt as _;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// At most this many bytes of writes make one piece: the writes that queue while a piece is
/// being stored go together in the next.
const PIECE_BYTES: usize = 64 * 1024;

/// Publishes an answer's writes, in order, as the pieces of its turn's stream. Dropping it
/// ends the stream (its last piece).
#[derive(Debug)]
pub struct Publisher {
    writes: mpsc::UnboundedSender<Bytes>,
}

impl Publisher {
    /// A publisher to `store`'s streams, if it has any. The pieces wait for the turn's
    /// snapshot id, which comes through `snapshot` once the answer has started; without it
    /// (the answer was refused) nothing is published.
    pub fn start(
        store: Arc<dyn SessionStore>,
        snapshot: oneshot::Receiver<String>,
    ) -> Option<Self> {
        store.streams()?;
        let (writes, queued) = mpsc::unbounded_channel();
        tokio::spawn(publish(store, snapshot, queued));
        Some(Self { writes })
    }

    /// Queues `bytes` for the store.
    pub fn send(&self, bytes: &Bytes) {
        // The task is there until every sender is dropped, unless the store failed for a
        // minute: then the rest is not published, and readers elsewhere end where it stopped.
        let _ = self.writes.send(bytes.clone());
    }
}

/// The publishing task: an opening piece as soon as the turn's snapshot is known (so that a
/// follower can tell a streamed turn from one that is not), one piece per batch of queued
/// writes, then the last piece.
async fn publish(
    store: Arc<dyn SessionStore>,
    snapshot: oneshot::Receiver<String>,
    mut queued: mpsc::UnboundedReceiver<Bytes>,
) {
    let (Ok(snapshot), Some(streams)) = (snapshot.await, store.streams()) else {
        return;
    };
    if !keep(streams, &snapshot, Piece::new(0, Vec::new(), false)).await {
        return;
    }
    let mut seq = 1;
    while let Some(first) = queued.recv().await {
        let mut bytes = first.to_vec();
        while bytes.len() < PIECE_BYTES {
            match queued.try_recv() {
                Ok(more) => bytes.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if !keep(streams, &snapshot, Piece::new(seq, bytes, false)).await {
            return;
        }
        seq += 1;
    }
    keep(streams, &snapshot, Piece::new(seq, Vec::new(), true)).await;
}

/// The first wait before a failed piece is kept again; it doubles up to [`RETRY_LONGEST`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_LONGEST: Duration = Duration::from_secs(2);
/// How long a piece is tried before the stream is given up.
const RETRY_FOR: Duration = Duration::from_secs(60);

/// Keeps `piece`, trying again while the store fails (waits doubling from 50 ms to 2 s, for a
/// minute at most), so that a store that comes back loses nothing of the answer; the writes
/// queue meanwhile. Answers whether it was kept: if not, the stream is given up (readers
/// elsewhere end where it stopped, the client in this process reads on) and the operator told.
async fn keep(streams: &dyn Streams, snapshot: &str, piece: Piece) -> bool {
    let started = Instant::now();
    let mut wait = RETRY_FIRST;
    loop {
        let error = match streams.publish(snapshot, piece.clone()).await {
            Ok(()) => return true,
            Err(error) => error,
        };
        if started.elapsed() + wait > RETRY_FOR {
            bidi_flow::log::line(format!(
                "[bidi-http] an answer's stream was not kept for other processes after {} s \
                 of store failures (readers elsewhere end where it stopped): {error}",
                RETRY_FOR.as_secs()
            ));
            return false;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_LONGEST);
    }
}

/// What the turn of snapshot `snapshot_id` streams (or streamed, while the store keeps it)
/// in a process sharing `store`, from its first byte, as a response body; `None` if the store
/// keeps no streams or has nothing of it (the turn was not streamed, or its pieces are gone).
/// It answers once the first piece is there.
///
/// # Errors
///
/// The store's.
///
/// # Cancel safety
///
/// Cancel safe: a follow dropped before it answers reads nothing more.
pub async fn follow(
    store: &dyn SessionStore,
    snapshot_id: &str,
) -> Result<Option<Body>, StoreError> {
    let Some(streams) = store.streams() else {
        return Ok(None);
    };
    let mut follow = streams.follow(snapshot_id).await?;
    match follow.next().await {
        Some(Ok(first)) => Ok(Some(body(first, follow))),
        Some(Err(error)) => Err(error),
        None => Ok(None),
    }
}

/// The pieces' bytes as a body, from `first` to the last piece (or the first failure).
fn body(first: Piece, follow: Follow) -> Body {
    let rest = futures_util::stream::unfold(follow, |mut follow| async move {
        match follow.next().await {
            Some(Ok(piece)) => Some((piece, follow)),
            Some(Err(_)) | None => None,
        }
    });
    let pieces = futures_util::stream::iter([first])
        .chain(rest)
        .map(|piece| Ok::<_, std::convert::Infallible>(Bytes::from(piece.bytes)));
    Body::from_stream(pieces)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bidi_session::async_trait;

    use super::*;

    /// Streams whose first `failures` publishes fail; the pieces kept, in order.
    struct Flaky {
        failures: Mutex<u32>,
        kept: Mutex<Vec<Piece>>,
    }

    #[async_trait]
    impl Streams for Flaky {
        async fn publish(&self, _: &str, piece: Piece) -> Result<(), StoreError> {
            let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if *failures > 0 {
                *failures -= 1;
                return Err(StoreError::backend("the database is restarting"));
            }
            self.kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(piece);
            Ok(())
        }

        async fn follow(&self, _: &str) -> Result<Follow, StoreError> {
            Err(StoreError::backend("not followed here"))
        }
    }

    fn flaky(failures: u32) -> Flaky {
        Flaky {
            failures: Mutex::new(failures),
            kept: Mutex::new(Vec::new()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_piece_the_store_fails_to_keep_is_kept_once_it_comes_back() {
        let streams = flaky(5);
        let started = Instant::now();
        assert!(keep(&streams, "s", Piece::new(3, b"data: x".to_vec(), false)).await);
        let kept = streams.kept.lock().unwrap().clone();
        assert_eq!(kept, [Piece::new(3, b"data: x".to_vec(), false)]);
        // 50, 100, 200, 400, 800 ms of waits.
        assert_eq!(started.elapsed(), Duration::from_millis(1_550));
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_down_for_a_minute_ends_the_stream() {
        let streams = flaky(u32::MAX);
        let started = Instant::now();
        assert!(!keep(&streams, "s", Piece::new(0, Vec::new(), false)).await);
        assert!(started.elapsed() <= RETRY_FOR);
        assert!(started.elapsed() >= RETRY_FOR - RETRY_LONGEST);
        assert!(streams.kept.lock().unwrap().is_empty());
    }
}
