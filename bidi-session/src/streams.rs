//! [`Streams`]: what a running turn streams to its client, kept where other processes sharing
//! the store can follow it.

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::store::StoreError;

/// One piece of what a turn streams to its client: bytes in the client's wire format, in
/// order (`seq` from 0), the last one marked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Piece {
    /// Its place in the stream, from 0.
    pub seq: u64,
    /// The bytes, as the client reads them.
    pub bytes: Vec<u8>,
    /// Nothing follows it: the turn's stream is over.
    pub last: bool,
}

impl Piece {
    /// Piece `seq` of a stream, carrying `bytes`; `last` if nothing follows it.
    #[must_use]
    pub fn new(seq: u64, bytes: Vec<u8>, last: bool) -> Self {
        Self { seq, bytes, last }
    }
}

/// Streams that outlive their process: a store that several processes share keeps what a
/// running turn streams (by its pending snapshot's id), so that a client that reconnects to
/// another process reads the rest of it there. Offered by
/// [`SessionStore::streams`](crate::SessionStore::streams); `PostgresStore` has them (the
/// pieces in a table, readers woken by `LISTEN`/`NOTIFY`). Readers in the turn's own process
/// read it there, without the store.
#[async_trait]
pub trait Streams: Send + Sync {
    /// Keeps `piece` of what snapshot `snapshot_id`'s turn streams.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the piece was kept whole or not at all, and the
    /// caller is not told which. `PostgresStore` keeps it in one statement, and refuses the
    /// same `seq` again once it is kept (an error, never a piece kept twice).
    async fn publish(&self, snapshot_id: &str, piece: Piece) -> Result<(), StoreError>;

    /// What snapshot `snapshot_id`'s turn streamed so far, then the rest as it is published,
    /// up to its last piece, or until the turn is over without one (its process died). A
    /// publisher keeps piece 0 (its opening, perhaps empty) as soon as its turn starts: a
    /// running turn without one a few seconds after it started is not streamed, and its
    /// follow ends at once (`PostgresStore`: three seconds).
    ///
    /// # Errors
    ///
    /// The store's, before anything is read; later failures end the [`Follow`] with them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, nothing was read and no reader is left
    /// running (`PostgresStore` starts its reader as the call completes).
    async fn follow(&self, snapshot_id: &str) -> Result<Follow, StoreError>;
}

/// A reader of a turn's stream ([`Streams::follow`]): its pieces, in order.
#[derive(Debug)]
pub struct Follow {
    pieces: mpsc::Receiver<Result<Piece, StoreError>>,
}

impl Follow {
    /// A reader of what is sent to `pieces` (for stores of your own).
    #[must_use]
    pub fn new(pieces: mpsc::Receiver<Result<Piece, StoreError>>) -> Self {
        Self { pieces }
    }

    /// The next piece; `None` once the stream is over.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a piece not returned stays for the next call.
    pub async fn next(&mut self) -> Option<Result<Piece, StoreError>> {
        self.pieces.recv().await
    }
}
