//! A chat's answer across processes: its writes published to the store's
//! [`Streams`](bidi_session::Streams) (when the store has them, as `PostgresStore` does), and
//! followed from there by a client that resumes the chat on another process.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use bidi_session::{Follow, Piece, SessionStore, Status};
use tokio::sync::{mpsc, oneshot};

/// At most this many bytes of writes make one piece: the writes that queue while a piece is
/// being stored go together in the next.
const PIECE_BYTES: usize = 64 * 1024;

/// Publishes an answer's writes, in order, as the pieces of its turn's stream. Dropping it
/// ends the stream (its last piece).
#[derive(Debug)]
pub(super) struct Publisher {
    writes: mpsc::UnboundedSender<Bytes>,
}

impl Publisher {
    /// A publisher to `store`'s streams, if it has any. The pieces wait for the turn's
    /// snapshot id, which comes through `snapshot` once the answer has started; without it
    /// (the answer was refused) nothing is published.
    pub(super) fn start(
        store: Arc<dyn SessionStore>,
        snapshot: oneshot::Receiver<String>,
    ) -> Option<Self> {
        store.streams()?;
        let (writes, queued) = mpsc::unbounded_channel();
        tokio::spawn(publish(store, snapshot, queued));
        Some(Self { writes })
    }

    /// Queues `bytes` for the store.
    pub(super) fn send(&self, bytes: &Bytes) {
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

/// The answer chat `id` streams in another process sharing `store` (the session's running
/// turn), from its first byte, as a response body; `None` if there is none.
///
/// # Errors
///
/// The store's.
pub(super) async fn follow(
    store: &dyn SessionStore,
    id: &str,
) -> Result<Option<Body>, bidi_session::StoreError> {
    let Some(streams) = store.streams() else {
        return Ok(None);
    };
    let Some(head) = store.load(id).await? else {
        return Ok(None);
    };
    let entry = &head.entry;
    let running = matches!(entry.status, Status::Pending | Status::Aborted)
        && entry
            .lease
            .as_ref()
            .is_some_and(|lease| !lease.is_expired());
    if !running {
        return Ok(None);
    }
    let follow = streams.follow(&entry.id).await?;
    Ok(Some(body(follow)))
}

/// The pieces' bytes as a body, to the last piece (or the first failure).
fn body(follow: Follow) -> Body {
    let pieces = futures_util::stream::unfold(follow, |mut follow| async move {
        match follow.next().await {
            Some(Ok(piece)) => Some((
                Ok::<_, std::convert::Infallible>(Bytes::from(piece.bytes)),
                follow,
            )),
            Some(Err(_)) | None => None,
        }
    });
    Body::from_stream(pieces)
}
