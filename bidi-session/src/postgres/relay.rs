//! [`Streams`] in PostgreSQL: the pieces of a turn's stream in `bidi_stream_pieces`, readers
//! woken by `NOTIFY bidi_stream` (and polling, should a notification be missed).

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use postgres_native_tls::MakeTlsConnector;
use tokio::sync::{OnceCell, broadcast, mpsc};
use tokio_postgres::AsyncMessage;

use crate::store::{StoreError, now_ms};
use crate::streams::{Follow, Piece, Streams};

/// The table; created with the others.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bidi_stream_pieces (
    snapshot_id TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    bytes       BYTEA NOT NULL,
    last        BOOLEAN NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (snapshot_id, seq)
);
";

const CHANNEL: &str = "bidi_stream";

const PUBLISH: &str = "
WITH kept AS (
    INSERT INTO bidi_stream_pieces (snapshot_id, seq, bytes, last, created_at)
    VALUES ($1, $2, $3, $4, $5)
    RETURNING 1
)
SELECT pg_notify('bidi_stream', $1) FROM kept";

/// Streams over for a minute, and any piece a day old (a stream whose process died), go once
/// a stream ends.
const FORGET: &str = "
DELETE FROM bidi_stream_pieces
WHERE created_at < $2
   OR snapshot_id IN (
        SELECT snapshot_id FROM bidi_stream_pieces WHERE last AND created_at < $1
   )";

const PIECES: &str = "
SELECT seq, bytes, last FROM bidi_stream_pieces
WHERE snapshot_id = $1 AND seq >= $2
ORDER BY seq";

/// Whether a turn still holds the snapshot (pending, or aborted and still stopping, under a
/// lease that holds), and whether it started before `$3`.
const HELD: &str = "
SELECT count(*) FILTER (WHERE status IN ('pending', 'aborted') AND lease_expires > $2),
       count(*) FILTER (WHERE created_at < $3)
FROM bidi_entries WHERE id = $1";

/// How long after its turn started a streamed snapshot has its opening piece: its publisher
/// keeps piece 0 as soon as it knows the snapshot. A running turn without one by then is not
/// streamed, and its reader ends at once rather than waiting for the turn to end.
const OPENING: Duration = Duration::from_secs(3);

/// How long a reader waits for a notification before it looks anyway.
const POLL: Duration = Duration::from_millis(500);

/// How many looks in a row may find nothing new once no turn holds the snapshot, before the
/// reader gives up on a last piece (its writer may still be flushing the end).
const QUIET_LOOKS: u32 = 4;

/// How many pieces a reader holds for its client.
const WINDOW: usize = 16;

/// A store's streams: its pool, and one connection listening for the store's notifications,
/// opened by the first reader.
pub(super) struct Relay {
    pub(super) pool: Pool,
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: MakeTlsConnector,
    listener: OnceCell<Listener>,
}

impl Relay {
    pub(super) fn new(pool: Pool, config: tokio_postgres::Config, tls: MakeTlsConnector) -> Self {
        Self {
            pool,
            config,
            tls,
            listener: OnceCell::new(),
        }
    }

    /// The snapshot ids of published pieces, as they are notified.
    async fn wakeups(&self) -> Result<broadcast::Receiver<String>, StoreError> {
        let listener = self.listener.get_or_try_init(|| self.listen()).await?;
        Ok(listener.sender.subscribe())
    }

    /// Opens the connection that listens: its task forwards each notification.
    async fn listen(&self) -> Result<Listener, StoreError> {
        let (client, mut connection) = self.config.connect(self.tls.clone()).await?;
        let (sender, _) = broadcast::channel(256);
        let notified = sender.clone();
        tokio::spawn(async move {
            while let Some(Ok(message)) =
                std::future::poll_fn(|cx| connection.poll_message(cx)).await
            {
                if let AsyncMessage::Notification(note) = message
                    && note.channel() == CHANNEL
                {
                    let _ = notified.send(note.payload().to_owned());
                }
            }
        });
        client.batch_execute("LISTEN bidi_stream").await?;
        Ok(Listener {
            sender,
            _client: client,
        })
    }
}

/// The listening connection's client (its connection lives while it does) and where its
/// notifications go.
struct Listener {
    sender: broadcast::Sender<String>,
    _client: tokio_postgres::Client,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("listening", &self.listener.initialized())
            .finish_non_exhaustive()
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl Streams for Relay {
    async fn publish(&self, snapshot_id: &str, piece: Piece) -> Result<(), StoreError> {
        let client = self.pool.get().await.map_err(StoreError::backend)?;
        let now = signed(now_ms());
        let seq = signed(piece.seq);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&snapshot_id, &seq, &piece.bytes, &piece.last, &now];
        client.query(PUBLISH, &params).await?;
        if piece.last {
            let (minute, day) = (now - 60_000, now - 86_400_000);
            client.execute(FORGET, &[&minute, &day]).await?;
        }
        Ok(())
    }

    async fn follow(&self, snapshot_id: &str) -> Result<Follow, StoreError> {
        // Listening first: a piece published between the first look and the wait wakes it.
        let wakeups = self.wakeups().await?;
        let (sender, pieces) = mpsc::channel(WINDOW);
        let reader = Reader {
            pool: self.pool.clone(),
            snapshot_id: snapshot_id.to_owned(),
            sender,
            wakeups,
        };
        tokio::spawn(reader.run());
        Ok(Follow::new(pieces))
    }
}

/// One reader's task: looks for new pieces whenever one is notified (or [`POLL`] passed).
struct Reader {
    pool: Pool,
    snapshot_id: String,
    sender: mpsc::Sender<Result<Piece, StoreError>>,
    wakeups: broadcast::Receiver<String>,
}

impl Reader {
    async fn run(mut self) {
        let (mut next, mut quiet) = (0_u64, 0);
        while !self.sender.is_closed() {
            let found = match self.look(next).await {
                Ok(found) => found,
                Err(error) => {
                    let _ = self.sender.send(Err(error)).await;
                    return;
                }
            };
            if found.is_empty() {
                match self.held().await {
                    // Held, nothing kept a while after the turn started: it is not streamed.
                    Ok((true, started_before)) if next == 0 && started_before => return,
                    Ok((true, _)) => quiet = 0,
                    Ok((false, _)) => quiet += 1,
                    Err(error) => {
                        let _ = self.sender.send(Err(error)).await;
                        return;
                    }
                }
                if quiet >= QUIET_LOOKS {
                    return; // Over without a last piece: its process died.
                }
            }
            for piece in found {
                next = piece.seq + 1;
                let last = piece.last;
                if self.sender.send(Ok(piece)).await.is_err() || last {
                    return;
                }
            }
            let _ = tokio::time::timeout(POLL, self.woken()).await;
        }
    }

    /// The pieces from `next` on.
    async fn look(&self, next: u64) -> Result<Vec<Piece>, StoreError> {
        let client = self.pool.get().await.map_err(StoreError::backend)?;
        let rows = client
            .query(PIECES, &[&self.snapshot_id, &signed(next)])
            .await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get(0)?;
                Ok(Piece::new(
                    u64::try_from(seq).unwrap_or_default(),
                    row.try_get(1)?,
                    row.try_get(2)?,
                ))
            })
            .collect()
    }

    /// Whether a turn holds the snapshot, and whether it started more than [`OPENING`] ago.
    async fn held(&self) -> Result<(bool, bool), StoreError> {
        let client = self.pool.get().await.map_err(StoreError::backend)?;
        let now = now_ms();
        let opened = now.saturating_sub(u64::try_from(OPENING.as_millis()).unwrap_or(0));
        let row = client
            .query_one(HELD, &[&self.snapshot_id, &signed(now), &signed(opened)])
            .await?;
        Ok((row.try_get::<_, i64>(0)? > 0, row.try_get::<_, i64>(1)? > 0))
    }

    /// Completes once a piece of this snapshot is notified (or notifications were lost).
    async fn woken(&mut self) {
        loop {
            match self.wakeups.recv().await {
                Ok(id) if id == self.snapshot_id => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}
