//! [`PostgresStore`]: sessions in PostgreSQL tables, for deployments on several machines.

mod relay;

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime,
};
use native_tls::TlsConnector;
use postgres_native_tls::MakeTlsConnector;

use crate::rows::{self, COLUMNS, Encoded, Row, millis, signed, time, unsigned};
use crate::rules;
use crate::store::{
    Append, Entry, Finish, Lease, Parent, Renewal, SessionStore, Snapshot, Status, StoreError,
    new_id, now_ms,
};
use crate::streams::Streams;
use relay::Relay;

/// The tables: one row a session (its head), one row a snapshot (its change, now and then a
/// checkpoint). The columns are SQLite's; JSON is kept as text, times as milliseconds since
/// the Unix epoch. The index of the turns another process may take over is keyed on `id` and
/// filtered on `lease_resume`, which renewals and finishes leave as they are for every other
/// turn: their updates of the lease's columns touch no index, and stay HOT updates.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bidi_sessions (
    session_id TEXT PRIMARY KEY,
    head       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS bidi_entries (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL,
    parent_id         TEXT,
    version           BIGINT NOT NULL,
    status            TEXT NOT NULL,
    lease_owner       TEXT,
    lease_started     BIGINT,
    lease_expires     BIGINT,
    error             TEXT,
    change            TEXT NOT NULL,
    checkpoint        TEXT,
    replay_checkpoint BIGINT NOT NULL,
    replay_changes    BIGINT NOT NULL,
    has_children      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    lease_resume      TEXT
);
CREATE INDEX IF NOT EXISTS bidi_entries_by_session ON bidi_entries (session_id);
ALTER TABLE bidi_entries ADD COLUMN IF NOT EXISTS lease_resume TEXT;
CREATE INDEX IF NOT EXISTS bidi_entries_resumable ON bidi_entries (id)
    WHERE lease_resume IS NOT NULL;
";

/// Serializes schema work across processes. The key is the one versions before the log of
/// snapshots took to create `bidi_snapshots`, so an old process creating it and a new one
/// migrating it never interleave either.
const SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('bidi_snapshots'))";

/// How many old versions one statement of the migration moves.
const MIGRATION_CHUNK: usize = 5_000;

/// Milliseconds since the Unix epoch of a `TIMESTAMPTZ`, as the tables keep times.
macro_rules! millis_of {
    ($column:literal) => {
        concat!("floor(extract(epoch FROM ", $column, ") * 1000)::bigint")
    };
}

/// The old versions to move: those of sessions the new tables do not hold yet (a process of
/// this version may have written some before an older one made `bidi_snapshots` again).
const MIGRATION_VERSIONS: &str = "
SELECT session_id, version FROM bidi_snapshots s
WHERE NOT EXISTS (SELECT 1 FROM bidi_sessions h WHERE h.session_id = s.session_id)
ORDER BY session_id, version";

/// Moves old versions `($1, $2)` as snapshots `$3` after `$4` (`$5`: whether one follows): each
/// carries its state whole (a checkpoint), with an empty change.
const MIGRATE_ENTRIES: &str = concat!(
    "
INSERT INTO bidi_entries (id, session_id, parent_id, version, status, change, checkpoint,
    replay_checkpoint, replay_changes, has_children, created_at, updated_at)
SELECT m.id, s.session_id, m.parent_id, s.version, 'completed', '[]', s.state::text,
    octet_length(s.state::text), 0, m.has_children, ",
    millis_of!("s.created_at"),
    ", ",
    millis_of!("s.updated_at"),
    "
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::boolean[])
    AS m(session_id, version, id, parent_id, has_children)
JOIN bidi_snapshots s ON s.session_id = m.session_id AND s.version = m.version"
);

/// Makes sessions `$1` with heads `$2`, created when their first snapshot was.
const MIGRATE_SESSIONS: &str = "
INSERT INTO bidi_sessions (session_id, head, created_at)
SELECT m.session_id, m.head,
    (SELECT min(e.created_at) FROM bidi_entries e WHERE e.session_id = m.session_id)
FROM unnest($1::text[], $2::text[]) AS m(session_id, head)";

/// The head of `$1`, locked until the transaction ends: the writers of one session queue here.
const LOCK_HEAD: &str = "SELECT head FROM bidi_sessions WHERE session_id = $1 FOR UPDATE";

const HEAD: &str = "SELECT head FROM bidi_sessions WHERE session_id = $1";

/// Starts session `$1` at `$2`, unless it exists: of two creators, the primary key lets one in
/// (the other waits for it, then inserts nothing).
const CREATE_SESSION: &str = "
INSERT INTO bidi_sessions (session_id, head, created_at) VALUES ($1, $2, $3)
ON CONFLICT (session_id) DO NOTHING";

/// The insert of a new snapshot; `$13` is both its times.
macro_rules! insert_entry {
    () => {
        "
INSERT INTO bidi_entries (id, session_id, parent_id, version, status, lease_owner, lease_started,
    lease_expires, change, checkpoint, replay_checkpoint, replay_changes, created_at, updated_at,
    lease_resume)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13, $14)"
    };
}

/// A session's first snapshot.
const INSERT: &str = insert_entry!();

/// A snapshot after `$3`, which gets a child, in one statement: the new row, the parent's mark,
/// the session's head.
const ADVANCE: &str = concat!(
    "
WITH parent AS (
    UPDATE bidi_entries SET has_children = TRUE WHERE id = $3 AND NOT has_children
), head AS (
    UPDATE bidi_sessions SET head = $1 WHERE session_id = $2
)",
    insert_entry!()
);

const FINISH: &str = "
UPDATE bidi_entries SET status = $2, lease_owner = NULL, lease_started = NULL,
    lease_expires = NULL, lease_resume = NULL, error = $3, change = $4, checkpoint = $5, replay_checkpoint = $6,
    replay_changes = $7, updated_at = $8
WHERE id = $1";

const RENEW: &str = "UPDATE bidi_entries SET lease_expires = $2, updated_at = $3 WHERE id = $1";

const TAKE_OVER: &str =
    "UPDATE bidi_entries SET lease_owner = $2, lease_expires = $3, updated_at = $4 WHERE id = $1";

const SET_STATUS: &str = "UPDATE bidi_entries SET status = $2, updated_at = $3 WHERE id = $1";

/// The statements built from [`COLUMNS`].
struct Sql {
    /// Snapshot `$1`'s row.
    row: String,
    /// Snapshot `$1`'s row, locked until the transaction ends.
    row_for_update: String,
    /// The head of session `$1` and its row, locked: the session's row first, then the
    /// head's, as every writer locks them.
    lock_head_row: String,
    /// Snapshot `$1`'s row, locked, then its parent's (`NULL`s if none).
    row_and_parent: String,
    /// Snapshot `$1` with its state: see [`lineage`].
    snapshot: String,
    /// The head of session `$1` with its state.
    head_snapshot: String,
    /// The rows of pending snapshots that may be taken over, and whose lease holds at `$1`.
    resumable: String,
    /// How many columns [`COLUMNS`] names.
    columns: usize,
}

static SQL: LazyLock<Sql> = LazyLock::new(|| Sql {
    row: format!("SELECT {COLUMNS} FROM bidi_entries WHERE id = $1"),
    row_for_update: format!("SELECT {COLUMNS} FROM bidi_entries WHERE id = $1 FOR UPDATE"),
    lock_head_row: format!(
        "SELECT s.head, {} FROM bidi_sessions s JOIN bidi_entries e ON e.id = s.head \
         WHERE s.session_id = $1 FOR UPDATE",
        prefixed("e")
    ),
    row_and_parent: format!(
        "SELECT {}, {} FROM bidi_entries e LEFT JOIN bidi_entries p ON p.id = e.parent_id \
         WHERE e.id = $1 FOR UPDATE OF e",
        prefixed("e"),
        prefixed("p")
    ),
    snapshot: lineage("$1"),
    head_snapshot: lineage("(SELECT head FROM bidi_sessions WHERE session_id = $1)"),
    resumable: format!(
        "SELECT {COLUMNS} FROM bidi_entries WHERE lease_resume IS NOT NULL \
         AND lease_expires > $1 AND status = 'pending' AND NOT has_children"
    ),
    columns: COLUMNS.split(',').count(),
});

/// [`COLUMNS`] of table alias `alias`.
fn prefixed(alias: &str) -> String {
    COLUMNS
        .split(',')
        .map(|column| format!("{alias}.{}", column.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The changes from snapshot `id` back to the nearest checkpoint, oldest first, as
/// `(checkpoint, change)`, the last row (the snapshot's own) followed by its [`COLUMNS`]. One
/// statement, so one view of the tables: a turn finishing meanwhile is in both the row and the
/// state, or in neither. (The snapshot's row is read once, in `target`, and joined to the
/// lineage's last row only: joined to the table, the planner may scan all of it.)
fn lineage(id: &str) -> String {
    format!(
        "
WITH RECURSIVE target AS (
    SELECT {COLUMNS} FROM bidi_entries WHERE id = {id}
), lineage(id, parent_id, checkpoint, change, depth) AS (
    SELECT id, parent_id, checkpoint, change, 0 FROM bidi_entries
    WHERE id = (SELECT id FROM target)
    UNION ALL
    SELECT e.id, e.parent_id, e.checkpoint, e.change, l.depth + 1
    FROM bidi_entries e JOIN lineage l ON e.id = l.parent_id
    WHERE l.checkpoint IS NULL
)
SELECT l.checkpoint, l.change, {} FROM lineage l LEFT JOIN target t ON l.depth = 0
ORDER BY l.depth DESC",
        prefixed("t")
    )
}

/// How long a call waits for a pooled connection, or to open a new one.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Sessions in PostgreSQL, shared by every process that connects to the same database: writes
/// stay compare-and-swap across all of them.
///
/// Every snapshot is kept as its change (table `bidi_entries`, one row a snapshot; the heads in
/// `bidi_sessions`), so a turn writes what it adds and the tables grow with what the sessions
/// hold, not with their turns. Each write is one transaction that locks the row it depends on
/// (the session's, or the snapshot's), so writers in any number of processes queue instead of
/// overwriting each other. A database written by an older version of this crate (every version
/// whole, in `bidi_snapshots`) is migrated as the first store connects.
///
/// Connections come from a pool (at most 16) and are re-opened when the server drops them; a
/// call that cannot get one within 10 seconds fails with [`StoreError::Backend`]. Times are the
/// writing process's clock, as for every store. PostgreSQL refuses NUL characters in text: a
/// session id containing `\0` fails with [`StoreError::Backend`] (states are stored as JSON
/// text, where NUL is escaped, so they hold any string).
///
/// TLS follows the configuration's `sslmode`: `prefer` (the default) encrypts when the server
/// offers it, `require` refuses a server that does not, `disable` never encrypts. Certificates
/// are checked against the system's roots, or against yours with
/// [`connect_with_tls`](Self::connect_with_tls).
///
/// ```no_run
/// use bidi_session::{Append, Change, Parent, PostgresStore, SessionStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let store = PostgresStore::connect("postgres://bidi@127.0.0.1:5432/sessions").await?;
/// let first = store.append("s1", Append::create(json!({"turns": 1}))).await?;
/// let turn = |n| Change::new().set("/turns", json!(n));
/// let second = store.append("s1", Append::change(Parent::Head(first.id.clone()), turn(2))).await?;
/// assert_eq!(second.version, 2);
/// // A stale writer is refused, never silently applied, whichever process it runs in.
/// let stale = store.append("s1", Append::change(Parent::Head(first.id), turn(9))).await;
/// assert!(stale.unwrap_err().is_conflict());
/// assert_eq!(store.load("s1").await?.unwrap().state, json!({"turns": 2}));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    relay: Arc<Relay>,
}

impl PostgresStore {
    /// Connects to the database `config` names (a URL such as
    /// `postgres://user:password@host:5432/db`, or `host=... user=... dbname=...`) and creates
    /// the tables if they are missing, or migrates those of an older version.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if `config` does not parse, the server cannot be reached, or the
    /// tables cannot be created or migrated.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it completes, the tables may have been created or migrated (whole: in one
    /// transaction); its connections are closed.
    pub async fn connect(config: &str) -> Result<Self, StoreError> {
        let tls = TlsConnector::new().map_err(StoreError::backend)?;
        Self::connect_with_tls(config, tls).await
    }

    /// As [`connect`](Self::connect), with TLS set up by `tls` (your root certificate, a client
    /// identity, ...).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); also when `sslmode=require` and the server's certificate
    /// is not trusted.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_with_tls(config: &str, tls: TlsConnector) -> Result<Self, StoreError> {
        let config: tokio_postgres::Config = config.parse().map_err(StoreError::backend)?;
        let tls = MakeTlsConnector::new(tls);
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(16)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(TIMEOUT))
            .create_timeout(Some(TIMEOUT))
            .build()
            .map_err(StoreError::backend)?;
        let relay = Arc::new(Relay::new(pool.clone(), config, tls));
        let store = Self { pool, relay };
        store.migrate().await?;
        Ok(store)
    }

    async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(StoreError::backend)
    }

    /// Creates the tables, or migrates those of an older version, in one transaction: once,
    /// even when several processes start together.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(SCHEMA_LOCK, &[]).await?;
        tx.batch_execute(SCHEMA).await?;
        tx.batch_execute(relay::SCHEMA).await?;
        let old = tx
            .query_one("SELECT to_regclass('bidi_snapshots') IS NOT NULL", &[])
            .await?
            .try_get::<_, bool>(0)?;
        if old {
            migrate_snapshots(&tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::backend(error)
    }
}

/// Moves the sessions of `bidi_snapshots` (every version whole) to the log of snapshots: each
/// version becomes a completed snapshot that carries its state as a checkpoint (and an empty
/// change), after the version before it, so every version stays loadable; the last is the head.
/// Versions keep their numbers (a session whose first versions an older retention deleted
/// starts at its first kept one). A session the new tables already hold keeps what they hold.
/// Then drops `bidi_snapshots`.
async fn migrate_snapshots(tx: &impl GenericClient) -> Result<(), StoreError> {
    let versions = tx.query(MIGRATION_VERSIONS, &[]).await?;
    // The snapshots to write, column by column, and the sessions with their heads.
    let mut sessions: Vec<String> = Vec::with_capacity(versions.len());
    let mut numbers: Vec<i64> = Vec::with_capacity(versions.len());
    let mut ids: Vec<String> = Vec::with_capacity(versions.len());
    let mut parents: Vec<Option<String>> = Vec::with_capacity(versions.len());
    let mut children: Vec<bool> = Vec::with_capacity(versions.len());
    let mut heads_of: Vec<String> = Vec::new();
    let mut heads: Vec<String> = Vec::new();
    for row in &versions {
        let session_id: String = row.try_get(0)?;
        let version: i64 = row.try_get(1)?;
        let id = new_id();
        // Rows come by session, then version: the one before, if of the same session, is the
        // parent, and the session's head so far.
        let same = sessions.last() == Some(&session_id);
        if same {
            if let Some(last) = children.last_mut() {
                *last = true;
            }
            parents.push(ids.last().cloned());
            if let Some(head) = heads.last_mut() {
                head.clone_from(&id);
            }
        } else {
            parents.push(None);
            heads_of.push(session_id.clone());
            heads.push(id.clone());
        }
        sessions.push(session_id);
        numbers.push(version);
        ids.push(id);
        children.push(false);
    }
    for start in (0..ids.len()).step_by(MIGRATION_CHUNK) {
        let end = (start + MIGRATION_CHUNK).min(ids.len());
        tx.execute(
            MIGRATE_ENTRIES,
            &[
                &&sessions[start..end],
                &&numbers[start..end],
                &&ids[start..end],
                &&parents[start..end],
                &&children[start..end],
            ],
        )
        .await?;
    }
    for start in (0..heads.len()).step_by(MIGRATION_CHUNK) {
        let end = (start + MIGRATION_CHUNK).min(heads.len());
        tx.execute(
            MIGRATE_SESSIONS,
            &[&&heads_of[start..end], &&heads[start..end]],
        )
        .await?;
    }
    tx.batch_execute("DROP TABLE bidi_snapshots").await?;
    Ok(())
}

/// A snapshot's row from `row`, its columns ([`COLUMNS`]) from `at` on.
fn read_row(row: &tokio_postgres::Row, at: usize) -> Result<Row, tokio_postgres::Error> {
    Ok(Row {
        id: row.try_get(at)?,
        session_id: row.try_get(at + 1)?,
        parent_id: row.try_get(at + 2)?,
        version: row.try_get(at + 3)?,
        status: row.try_get(at + 4)?,
        lease: rows::lease(
            row.try_get(at + 5)?,
            row.try_get(at + 6)?,
            row.try_get(at + 7)?,
            row.try_get(at + 14)?,
        ),
        error: row.try_get(at + 8)?,
        replay_checkpoint: row.try_get(at + 9)?,
        replay_changes: row.try_get(at + 10)?,
        has_children: row.try_get(at + 11)?,
        created_at: row.try_get(at + 12)?,
        updated_at: row.try_get(at + 13)?,
    })
}

/// A snapshot's row (`sql` selects [`COLUMNS`] of snapshot `$1`), or `None`.
async fn row(client: &impl GenericClient, sql: &str, id: &str) -> Result<Option<Row>, StoreError> {
    let stmt = client.prepare_cached(sql).await?;
    let found = client.query_opt(&stmt, &[&id]).await?;
    Ok(found.map(|found| read_row(&found, 0)).transpose()?)
}

/// The head of `session_id` (`sql` selects it), or `None`.
async fn head(
    client: &impl GenericClient,
    sql: &str,
    session_id: &str,
) -> Result<Option<String>, StoreError> {
    let stmt = client.prepare_cached(sql).await?;
    let found = client.query_opt(&stmt, &[&session_id]).await?;
    Ok(found.map(|found| found.try_get(0)).transpose()?)
}

/// The snapshot `sql` ([`lineage`]) finds for `key`, with its state, or `None`.
async fn snapshot(
    client: &impl GenericClient,
    sql: &str,
    key: &str,
) -> Result<Option<Snapshot>, StoreError> {
    let stmt = client.prepare_cached(sql).await?;
    let found = client.query(&stmt, &[&key]).await?;
    let Some(last) = found.last() else {
        return Ok(None);
    };
    let row = read_row(last, 2)?;
    let lineage = found
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<Vec<(Option<String>, String)>, tokio_postgres::Error>>()?;
    let state = rows::replay(lineage)?;
    Ok(Some(Snapshot::new(row.entry()?, state)))
}

/// The head of `session_id` and its row, both locked, or `None` if the session does not exist
/// or its head moved while this waited for the lock (PostgreSQL then checks the join again with
/// the session's new row and the old head's, which no longer match, and drops it).
async fn lock_head(
    client: &impl GenericClient,
    session_id: &str,
) -> Result<Option<(String, Row)>, StoreError> {
    let stmt = client.prepare_cached(&SQL.lock_head_row).await?;
    let Some(found) = client.query_opt(&stmt, &[&session_id]).await? else {
        return Ok(None);
    };
    Ok(Some((found.try_get(0)?, read_row(&found, 1)?)))
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let client = self.client().await?;
        snapshot(&client, &SQL.head_snapshot, session_id).await
    }

    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let client = self.client().await?;
        snapshot(&client, &SQL.snapshot, snapshot_id).await
    }

    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        let client = self.client().await?;
        row(&client, &SQL.row, snapshot_id)
            .await?
            .map(Row::entry)
            .transpose()
    }

    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The session's row, then the parent's, locked: writers of the session queue on the
        // first, and a finish or an abort of the parent waits for this append (or this append
        // sees what it wrote).
        let (head, parent) = match &append.parent {
            // The usual append, after the head: both rows in one statement.
            Parent::Head(expected) => match lock_head(&tx, session_id).await? {
                Some((head, row)) => {
                    let parent = (head == *expected).then_some(row);
                    (Some(head), parent)
                }
                None => {
                    // The session is gone, or its head moved while this waited for its row: a
                    // conflict either way. Let go of the locks before asking which head it has,
                    // so that the writers queued behind this one wait no longer.
                    drop(tx);
                    let actual = self::head(&client, HEAD, session_id).await?;
                    return Err(StoreError::Conflict {
                        session_id: session_id.to_owned(),
                        expected: Some(expected.clone()),
                        actual,
                    });
                }
            },
            parent => {
                let head = self::head(&tx, LOCK_HEAD, session_id).await?;
                let parent = match parent.id() {
                    Some(id) => row(&tx, &SQL.row_for_update, id).await?,
                    None => None,
                };
                (head, parent)
            }
        };
        let node = parent.as_ref().map(Row::node).transpose()?;
        rules::check_append(session_id, &append.parent, head.as_deref(), node)?;
        let Encoded {
            change,
            checkpoint,
            replay,
        } = rows::encode(parent.as_ref(), &append.change, append.checkpoint.as_ref())?;
        let at = millis(SystemTime::now());
        let id = new_id();
        let version = parent.as_ref().map_or(1, |p| p.version + 1);
        let parent_id = parent.as_ref().map(|p| p.id.as_str());
        // A session's first snapshot, or a fork's: the session's row first.
        if matches!(append.parent, Parent::None | Parent::Fork(_)) {
            let stmt = tx.prepare_cached(CREATE_SESSION).await?;
            if tx.execute(&stmt, &[&session_id, &id, &at]).await? == 0 {
                // Another creator got there first (it held the key until it committed).
                let actual = self::head(&tx, HEAD, session_id).await?;
                return Err(StoreError::Conflict {
                    session_id: session_id.to_owned(),
                    expected: None,
                    actual,
                });
            }
        }
        let lease = append.lease.as_ref();
        let stmt = tx
            .prepare_cached(if parent.is_some() { ADVANCE } else { INSERT })
            .await?;
        tx.execute(
            &stmt,
            &[
                &id,
                &session_id,
                &parent_id,
                &version,
                &append.status.as_str(),
                &lease.map(|l| l.owner.as_str()),
                &lease.map(|l| signed(l.started_at)),
                &lease.map(|l| signed(l.expires_at)),
                &change,
                &checkpoint,
                &signed(replay.checkpoint),
                &signed(replay.changes),
                &at,
                &rows::resume(lease),
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(Entry::new(
            id,
            session_id,
            parent_id.map(str::to_owned),
            unsigned(version),
            append.status,
            append.lease,
            None,
            replay,
            time(at),
            time(at),
        ))
    }

    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let stmt = tx.prepare_cached(&SQL.row_and_parent).await?;
        let (found, parent) = match tx.query_opt(&stmt, &[&snapshot_id]).await? {
            Some(found) => {
                // The parent's columns follow the snapshot's; all `NULL` without a parent.
                let at = SQL.columns;
                let parent = match found.try_get::<_, Option<String>>(at)? {
                    Some(_) => Some(read_row(&found, at)?),
                    None => None,
                };
                (Some(read_row(&found, 0)?), parent)
            }
            None => (None, None),
        };
        let node = found.as_ref().map(Row::node).transpose()?;
        let status = rules::check_finish(snapshot_id, &finish.owner, node, finish.status)?;
        let Some(row) = found else {
            return Err(StoreError::not_found(snapshot_id));
        };
        let Encoded {
            change,
            checkpoint,
            replay,
        } = rows::encode(parent.as_ref(), &finish.change, finish.checkpoint.as_ref())?;
        let error = rows::text(finish.error.as_ref())?;
        let at = millis(SystemTime::now());
        let stmt = tx.prepare_cached(FINISH).await?;
        tx.execute(
            &stmt,
            &[
                &snapshot_id,
                &status.as_str(),
                &error,
                &change,
                &checkpoint,
                &signed(replay.checkpoint),
                &signed(replay.changes),
                &at,
            ],
        )
        .await?;
        tx.commit().await?;
        row.finished(status, error, replay, at)
    }

    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let found = row(&tx, &SQL.row_for_update, snapshot_id).await?;
        let node = found.as_ref().map(Row::node).transpose()?;
        let renewal = rules::check_renew(snapshot_id, owner, node)?;
        if renewal == Renewal::Renewed {
            let stmt = tx.prepare_cached(RENEW).await?;
            let at = millis(SystemTime::now());
            tx.execute(&stmt, &[&snapshot_id, &signed(expires_at), &at])
                .await?;
        }
        tx.commit().await?;
        Ok(renewal)
    }

    async fn stale(&self) -> Result<Vec<Entry>, StoreError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(&SQL.resumable).await?;
        let now = now_ms();
        let mut stale = Vec::new();
        for found in client.query(&stmt, &[&signed(now)]).await? {
            let row = read_row(&found, 0)?;
            if row.is_stale(now)? {
                stale.push(row.entry()?);
            }
        }
        Ok(stale)
    }

    async fn take_over(
        &self,
        snapshot_id: &str,
        from: &str,
        to: Lease,
    ) -> Result<Entry, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let found = row(&tx, &SQL.row_for_update, snapshot_id).await?;
        Row::check_take_over(snapshot_id, from, found.as_ref())?;
        let Some(row) = found else {
            return Err(StoreError::not_found(snapshot_id));
        };
        let at = millis(SystemTime::now());
        let stmt = tx.prepare_cached(TAKE_OVER).await?;
        tx.execute(
            &stmt,
            &[&snapshot_id, &to.owner, &signed(to.expires_at), &at],
        )
        .await?;
        tx.commit().await?;
        row.taken_over(to, at)
    }

    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let Some(row) = row(&tx, &SQL.row_for_update, snapshot_id).await? else {
            return Ok(None);
        };
        let (previous, new) = rules::abort(row.status()?, row.lease.as_ref());
        if let Some(status) = new {
            let stmt = tx.prepare_cached(SET_STATUS).await?;
            let at = millis(SystemTime::now());
            tx.execute(&stmt, &[&snapshot_id, &status.as_str(), &at])
                .await?;
        }
        tx.commit().await?;
        Ok(Some(previous))
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        // The session's row first: an append holding it finishes before, and its snapshot is
        // then among those the second statement (a new view of the table) deletes.
        let stmt = tx
            .prepare_cached("DELETE FROM bidi_sessions WHERE session_id = $1")
            .await?;
        let deleted = tx.execute(&stmt, &[&session_id]).await?;
        let stmt = tx
            .prepare_cached("DELETE FROM bidi_entries WHERE session_id = $1")
            .await?;
        tx.execute(&stmt, &[&session_id]).await?;
        tx.commit().await?;
        Ok(deleted > 0)
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        // Byte order, as Rust sorts strings, whatever the database's collation.
        let stmt = client
            .prepare_cached(
                "SELECT session_id FROM bidi_sessions ORDER BY session_id COLLATE \"C\"",
            )
            .await?;
        let rows = client.query(&stmt, &[]).await?;
        Ok(rows
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?)
    }

    fn streams(&self) -> Option<&dyn Streams> {
        Some(&*self.relay)
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .finish()
    }
}
