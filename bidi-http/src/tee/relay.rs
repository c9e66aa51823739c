//! An answer across processes: its writes published to the store's
//! [`Streams`](bidi_session::Streams) (when the store has them, as `PostgresStore` does) under
//! its turn's snapshot id, and followed from there by a client that comes back to it on
//! another process.
//!
//! A [`Publisher`] is a task per answer that stores what queued while the last piece was being
//! stored as the next piece, so that the answer never waits on the store; a reader in the
//! answer's own process keeps reading its [`Tee`](super::Tee), with no copy. A client that
//! comes back and finds no answer in its process follows the running turn of the session from
//! the store ([`follow`]). The repository's `examples/tests/serve.rs` runs two `serve`
//! processes on one PostgreSQL database and resumes on the process that is not streaming: a
//! chat with the AI SDK's `reconnectToStream` (`tests/node/vercel_reconnect.mjs`), and a
//! Genkit stream by its stream id.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use bidi_session::{Follow, Piece, SessionStore, StoreError};
use futures_util::StreamExt as _;
use tokio::sync::{mpsc, oneshot};

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
        // The task is there until every sender is dropped, unless the store failed: then
        // the rest is not published, and readers elsewhere end where it stopped.
        let _ = self.writes.send(bytes.clone());
    }
}

/// The publishing task: one piece per batch of queued writes, then the last piece.
async fn publish(
    store: Arc<dyn SessionStore>,
    snapshot: oneshot::Receiver<String>,
    mut queued: mpsc::UnboundedReceiver<Bytes>,
) {
    let (Ok(snapshot), Some(streams)) = (snapshot.await, store.streams()) else {
        return;
    };
    let mut seq = 0;
    while let Some(first) = queued.recv().await {
        let mut bytes = first.to_vec();
        while bytes.len() < PIECE_BYTES {
            match queued.try_recv() {
                Ok(more) => bytes.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if streams
            .publish(&snapshot, Piece::new(seq, bytes, false))
            .await
            .is_err()
        {
            return;
        }
        seq += 1;
    }
    let _ = streams
        .publish(&snapshot, Piece::new(seq, Vec::new(), true))
        .await;
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
