//! [`SqliteStore`]: sessions in one SQLite file, the embedded persistent default.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tokio::runtime::RuntimeFlavor;

use crate::rows::{self, COLUMNS, Encoded, Row, millis, signed, time, unsigned};
use crate::rules;
use crate::store::{
    Append, Entry, Finish, Lease, Renewal, SessionStore, Snapshot, Status, StoreError, new_id,
    now_ms,
};

/// The schema version this crate writes (`PRAGMA user_version`): 1 kept every version of a
/// session whole (`bidi_snapshots`); 2 keeps each snapshot's change; 3 keeps what a turn
/// another process may take over needs (`lease_resume`).
const SCHEMA_VERSION: i64 = 3;

/// How long a statement waits for another connection's lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bidi_sessions (
    session_id TEXT PRIMARY KEY,
    head       TEXT NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS bidi_entries (
    id                TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL,
    parent_id         TEXT,
    version           INTEGER NOT NULL,
    status            TEXT NOT NULL,
    lease_owner       TEXT,
    lease_started     INTEGER,
    lease_expires     INTEGER,
    error             TEXT,
    change            TEXT NOT NULL,
    checkpoint        TEXT,
    replay_checkpoint INTEGER NOT NULL,
    replay_changes    INTEGER NOT NULL,
    has_children      INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    lease_resume      TEXT
);
CREATE INDEX IF NOT EXISTS bidi_entries_by_session ON bidi_entries (session_id);
";

/// The index of the turns another process may take over, once `lease_resume` is there.
const RESUMABLE_INDEX: &str = "
CREATE INDEX IF NOT EXISTS bidi_entries_resumable ON bidi_entries (id)
    WHERE lease_resume IS NOT NULL;
";

/// The changes from snapshot `?1` back to the nearest checkpoint, oldest first.
const LINEAGE: &str = "
WITH RECURSIVE lineage(id, parent_id, checkpoint, change, depth) AS (
    SELECT id, parent_id, checkpoint, change, 0 FROM bidi_entries WHERE id = ?1
    UNION ALL
    SELECT e.id, e.parent_id, e.checkpoint, e.change, l.depth + 1
    FROM bidi_entries e JOIN lineage l ON e.id = l.parent_id
    WHERE l.checkpoint IS NULL
)
SELECT checkpoint, change FROM lineage ORDER BY depth DESC
";

const INSERT: &str = "
INSERT INTO bidi_entries (id, session_id, parent_id, version, status, lease_owner, lease_started,
    lease_expires, change, checkpoint, replay_checkpoint, replay_changes, created_at, updated_at,
    lease_resume)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14)
";

const SET_HEAD: &str = "
INSERT INTO bidi_sessions (session_id, head, created_at) VALUES (?1, ?2, ?3)
ON CONFLICT (session_id) DO UPDATE SET head = excluded.head
";

const FINISH: &str = "
UPDATE bidi_entries SET status = ?2, lease_owner = NULL, lease_started = NULL,
    lease_expires = NULL, lease_resume = NULL, error = ?3, change = ?4, checkpoint = ?5, replay_checkpoint = ?6,
    replay_changes = ?7, updated_at = ?8
WHERE id = ?1
";

/// Sessions in one SQLite file (bundled SQLite, WAL journal): the embedded persistent default.
///
/// Every snapshot is kept as its change (table `bidi_entries`, one row a snapshot; the heads in
/// `bidi_sessions`), so a turn writes what it adds and the file grows with what the sessions
/// hold, not with their turns. The file can be read with any SQLite tool. Several stores, in one
/// process or in several, may share a file; writes stay compare-and-swap across all of them. A
/// statement that finds the file locked by another writer waits for it up to 5 seconds, then
/// fails with [`StoreError::Backend`]. SQLite calls run as blocking work that never stalls the
/// async workers. A file written by an older version of this crate is migrated as it opens.
///
/// ```
/// use bidi_session::{Append, Change, Parent, SessionStore, SqliteStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let dir = tempfile::tempdir().map_err(bidi_session::StoreError::backend)?;
/// let store = SqliteStore::open(dir.path().join("sessions.db")).await?;
/// let first = store.append("s1", Append::create(json!({"turns": 1}))).await?;
/// let turn = |n| Change::new().set("/turns", json!(n));
/// let second = store.append("s1", Append::change(Parent::Head(first.id.clone()), turn(2))).await?;
/// assert_eq!(second.version, 2);
/// // A stale writer is refused, never silently applied.
/// let stale = store.append("s1", Append::change(Parent::Head(first.id), turn(9))).await;
/// assert!(stale.unwrap_err().is_conflict());
/// assert_eq!(store.load("s1").await?.unwrap().state, json!({"turns": 2}));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    /// The one connection. Taken asynchronously before any blocking work: waiting callers hold
    /// no thread, so a thousand concurrent calls cost a thousand small futures, not a
    /// thousand blocked threads.
    conn: Arc<tokio::sync::Mutex<Connection>>,
    path: Option<Arc<PathBuf>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in the SQLite file at `path`, creating or migrating
    /// its schema.
    ///
    /// Any number of stores, in threads or processes, may open one file at once, a new one too:
    /// an open that finds the file locked waits and retries, as every statement does, for up to
    /// 5 seconds.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the file cannot be opened, is not a SQLite database, or has a
    /// schema newer than this crate knows.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not stop an open under way: the file may still be created and
    /// its schema created or migrated; the connection is then closed.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::start(Some(path.as_ref().to_owned())).await
    }

    /// A store in a private in-memory database, for tests.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if SQLite cannot open it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the database is gone with it.
    pub async fn in_memory() -> Result<Self, StoreError> {
        Self::start(None).await
    }

    async fn start(path: Option<PathBuf>) -> Result<Self, StoreError> {
        let opened = path.clone();
        let conn = blocking(move || connect(opened.as_deref())).await?;
        Ok(Self {
            conn: Arc::new(tokio::sync::Mutex::new(conn)),
            path: path.map(Arc::new),
        })
    }

    /// The file the store lives in (`None` in memory).
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref().map(PathBuf::as_path)
    }

    /// Runs `f` on the connection, as blocking work (see [`blocking`]).
    async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let mut conn = Arc::clone(&self.conn).lock_owned().await;
        blocking(move || f(&mut conn)).await
    }
}

/// Runs blocking SQLite work without stalling the async workers. On a multi-thread runtime it
/// runs in place (`block_in_place` hands the worker's other tasks to another thread), so no
/// thread hand-off sits on the critical path: on small writes that hand-off costs more than the
/// write. On a current-thread runtime it goes to the blocking pool; outside tokio it runs inline.
async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        Ok(_) => tokio::task::spawn_blocking(f)
            .await
            .map_err(|error| StoreError::backend(format!("a SQLite call failed: {error}")))?,
        Err(_) => f(),
    }
}

/// Opens the connection (the file at `path`, or a private in-memory database), switches the file
/// to WAL and creates or migrates the schema; refuses a newer one.
///
/// Several stores opening one new file at once contend for it: switching the journal to WAL and
/// creating the schema take locks that SQLite may refuse with "database is locked" at once,
/// without waiting for the busy timeout. Those steps are retried with backoff, like every other
/// statement waits, until [`BUSY_TIMEOUT`] has passed.
fn connect(path: Option<&Path>) -> Result<Connection, StoreError> {
    let mut conn = match path {
        Some(path) => Connection::open(path)?,
        None => Connection::open_in_memory()?,
    };
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut attempt = 0;
    let found = loop {
        match set_up(&mut conn, path.is_some()) {
            Err(error) if is_busy(&error) && Instant::now() < deadline => {
                std::thread::sleep(open_backoff(attempt));
                attempt += 1;
            }
            result => break result?,
        }
    };
    if found > SCHEMA_VERSION {
        return Err(StoreError::backend(format!(
            "the session database has schema version {found}; this bidi-session knows up to {SCHEMA_VERSION}"
        )));
    }
    Ok(conn)
}

/// The connection's settings and the schema; returns the schema version found. Idempotent, so
/// it can be retried as a whole.
fn set_up(conn: &mut Connection, wal: bool) -> rusqlite::Result<i64> {
    if wal {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let found = user_version(conn)?;
    if found >= SCHEMA_VERSION {
        return Ok(found);
    }
    // One writer creates or migrates the schema; the others find it done.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = user_version(&tx)?;
    if found < SCHEMA_VERSION {
        tx.execute_batch(SCHEMA)?;
        if found == 1 {
            migrate_v1(&tx)?;
        }
        if found == 2 {
            tx.execute_batch("ALTER TABLE bidi_entries ADD COLUMN lease_resume TEXT")?;
        }
        tx.execute_batch(RESUMABLE_INDEX)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    Ok(found)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Whether SQLite refused for a lock another connection holds.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The wait before retry `attempt` (0-based) of a busy open: exponential from 1 ms, capped at
/// 64 ms, with jitter so openers that collided do not collide again in step.
fn open_backoff(attempt: u32) -> Duration {
    let base = 1000u64 << attempt.min(6);
    let jitter = RandomState::new().hash_one((attempt, Instant::now())) % base;
    Duration::from_micros(base / 2 + jitter)
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        Self::backend(error)
    }
}

/// Moves the sessions of schema 1 (every version whole, in `bidi_snapshots`) to schema 2:
/// each version becomes a snapshot that carries its state as a checkpoint, after the version
/// before it, so every version stays loadable.
fn migrate_v1(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let mut previous: Option<(String, String)> = None;
    {
        let mut select = tx.prepare(
            "SELECT session_id, version, state, created_at, updated_at FROM bidi_snapshots \
             ORDER BY session_id, version",
        )?;
        let mut rows = select.query([])?;
        let mut insert = tx.prepare(INSERT)?;
        let mut head = tx.prepare(SET_HEAD)?;
        let mut children = tx.prepare("UPDATE bidi_entries SET has_children = 1 WHERE id = ?1")?;
        while let Some(row) = rows.next()? {
            let (session_id, version, state, created, updated): (String, i64, String, i64, i64) = (
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            );
            let parent = match &previous {
                Some((session, id)) if *session == session_id => {
                    children.execute(params![id])?;
                    Some(id.clone())
                }
                _ => None,
            };
            let id = new_id();
            let bytes = signed(state.len() as u64);
            insert.execute(params![
                id,
                session_id,
                parent,
                version,
                Status::Completed.as_str(),
                None::<String>,
                None::<i64>,
                None::<i64>,
                "[]",
                state,
                bytes,
                0,
                created,
                None::<String>,
            ])?;
            tx.execute(
                "UPDATE bidi_entries SET updated_at = ?2 WHERE id = ?1",
                params![id, updated],
            )?;
            head.execute(params![session_id, id, created])?;
            previous = Some((session_id, id));
        }
    }
    tx.execute_batch("DROP TABLE bidi_snapshots")
}

/// A snapshot's row, or `None`.
fn row(conn: &Connection, id: &str) -> Result<Option<Row>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM bidi_entries WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    Ok(stmt.query_row(params![id], read_row).optional()?)
}

fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: row.get(0)?,
        session_id: row.get(1)?,
        parent_id: row.get(2)?,
        version: row.get(3)?,
        status: row.get(4)?,
        lease: rows::lease(row.get(5)?, row.get(6)?, row.get(7)?, row.get(14)?),
        error: row.get(8)?,
        replay_checkpoint: row.get(9)?,
        replay_changes: row.get(10)?,
        has_children: row.get(11)?,
        created_at: row.get(12)?,
        updated_at: row.get(13)?,
    })
}

/// The head of `session_id`, or `None`.
fn head(conn: &Connection, session_id: &str) -> Result<Option<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT head FROM bidi_sessions WHERE session_id = ?1")?;
    Ok(stmt
        .query_row(params![session_id], |row| row.get(0))
        .optional()?)
}

/// Snapshot `id` with its state, or `None`.
fn snapshot(conn: &Connection, id: &str) -> Result<Option<Snapshot>, StoreError> {
    let Some(row) = row(conn, id)? else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(LINEAGE)?;
    let lineage: Vec<(Option<String>, String)> = stmt
        .query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let state = rows::replay(lineage)?;
    Ok(Some(Snapshot::new(row.entry()?, state)))
}

fn append(conn: &mut Connection, session_id: &str, append: Append) -> Result<Entry, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let head = head(&tx, session_id)?;
    let parent = match append.parent.id() {
        Some(id) => row(&tx, id)?,
        None => None,
    };
    let node = parent.as_ref().map(Row::node).transpose()?;
    rules::check_append(session_id, &append.parent, head.as_deref(), node)?;
    let Encoded {
        change,
        checkpoint,
        replay,
    } = rows::encode(parent.as_ref(), &append.change, append.checkpoint.as_ref())?;
    let now = SystemTime::now();
    let at = millis(now);
    let id = new_id();
    let version = parent.as_ref().map_or(1, |p| p.version + 1);
    let lease = append.lease.as_ref();
    tx.prepare_cached(INSERT)?.execute(params![
        id,
        session_id,
        append.parent.id(),
        version,
        append.status.as_str(),
        lease.map(|l| l.owner.as_str()),
        lease.map(|l| signed(l.started_at)),
        lease.map(|l| signed(l.expires_at)),
        change,
        checkpoint,
        signed(replay.checkpoint),
        signed(replay.changes),
        at,
        rows::resume(lease),
    ])?;
    if let Some(parent) = &parent {
        tx.prepare_cached("UPDATE bidi_entries SET has_children = 1 WHERE id = ?1")?
            .execute(params![parent.id])?;
    }
    tx.prepare_cached(SET_HEAD)?
        .execute(params![session_id, id, at])?;
    tx.commit()?;
    Ok(Entry::new(
        id,
        session_id,
        append.parent.id().map(str::to_owned),
        unsigned(version),
        append.status,
        append.lease,
        None,
        replay,
        time(at),
        time(at),
    ))
}

fn finish(conn: &mut Connection, id: &str, finish: &Finish) -> Result<Entry, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = row(&tx, id)?;
    let node = found.as_ref().map(Row::node).transpose()?;
    let status = rules::check_finish(id, &finish.owner, node, finish.status)?;
    let Some(row) = found else {
        return Err(StoreError::not_found(id));
    };
    let parent = match &row.parent_id {
        Some(parent) => self::row(&tx, parent)?,
        None => None,
    };
    let Encoded {
        change,
        checkpoint,
        replay,
    } = rows::encode(parent.as_ref(), &finish.change, finish.checkpoint.as_ref())?;
    let error = rows::text(finish.error.as_ref())?;
    let at = millis(SystemTime::now());
    tx.prepare_cached(FINISH)?.execute(params![
        id,
        status.as_str(),
        error,
        change,
        checkpoint,
        signed(replay.checkpoint),
        signed(replay.changes),
        at,
    ])?;
    tx.commit()?;
    row.finished(status, error, replay, at)
}

fn renew(
    conn: &mut Connection,
    id: &str,
    owner: &str,
    expires_at: u64,
) -> Result<Renewal, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = row(&tx, id)?;
    let node = found.as_ref().map(Row::node).transpose()?;
    let renewal = rules::check_renew(id, owner, node)?;
    if renewal == Renewal::Renewed {
        tx.prepare_cached(
            "UPDATE bidi_entries SET lease_expires = ?2, updated_at = ?3 WHERE id = ?1",
        )?
        .execute(params![id, signed(expires_at), millis(SystemTime::now())])?;
    }
    tx.commit()?;
    Ok(renewal)
}

/// The pending snapshots whose turns are stale now.
fn stale(conn: &Connection) -> Result<Vec<Entry>, StoreError> {
    let now = now_ms();
    let sql = format!(
        "SELECT {COLUMNS} FROM bidi_entries WHERE lease_resume IS NOT NULL \
         AND lease_expires > ?1 AND status = 'pending' AND has_children = 0"
    );
    let mut select = conn.prepare_cached(&sql)?;
    let rows = select.query_map(params![signed(now)], read_row)?;
    let mut stale = Vec::new();
    for row in rows {
        let row = row?;
        if row.is_stale(now)? {
            stale.push(row.entry()?);
        }
    }
    Ok(stale)
}

fn take_over(conn: &mut Connection, id: &str, from: &str, to: Lease) -> Result<Entry, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = row(&tx, id)?;
    Row::check_take_over(id, from, found.as_ref())?;
    let Some(row) = found else {
        return Err(StoreError::not_found(id));
    };
    let at = millis(SystemTime::now());
    tx.prepare_cached(
        "UPDATE bidi_entries SET lease_owner = ?2, lease_expires = ?3, updated_at = ?4 \
         WHERE id = ?1",
    )?
    .execute(params![id, to.owner, signed(to.expires_at), at])?;
    tx.commit()?;
    row.taken_over(to, at)
}

fn abort(conn: &mut Connection, id: &str) -> Result<Option<Status>, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let Some(row) = row(&tx, id)? else {
        return Ok(None);
    };
    let (previous, new) = rules::abort(row.status()?, row.lease.as_ref());
    if let Some(status) = new {
        tx.prepare_cached("UPDATE bidi_entries SET status = ?2, updated_at = ?3 WHERE id = ?1")?
            .execute(params![id, status.as_str(), millis(SystemTime::now())])?;
    }
    tx.commit()?;
    Ok(Some(previous))
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let session_id = session_id.to_owned();
        self.call(move |conn| match head(conn, &session_id)? {
            Some(id) => snapshot(conn, &id),
            None => Ok(None),
        })
        .await
    }

    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let id = snapshot_id.to_owned();
        self.call(move |conn| snapshot(conn, &id)).await
    }

    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        let id = snapshot_id.to_owned();
        self.call(move |conn| row(conn, &id)?.map(Row::entry).transpose())
            .await
    }

    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        let session_id = session_id.to_owned();
        self.call(move |conn| self::append(conn, &session_id, append))
            .await
    }

    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        let id = snapshot_id.to_owned();
        self.call(move |conn| self::finish(conn, &id, &finish))
            .await
    }

    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        let (id, owner) = (snapshot_id.to_owned(), owner.to_owned());
        self.call(move |conn| self::renew(conn, &id, &owner, expires_at))
            .await
    }

    async fn stale(&self) -> Result<Vec<Entry>, StoreError> {
        self.call(|conn| self::stale(conn)).await
    }

    async fn take_over(
        &self,
        snapshot_id: &str,
        from: &str,
        to: Lease,
    ) -> Result<Entry, StoreError> {
        let (id, from) = (snapshot_id.to_owned(), from.to_owned());
        self.call(move |conn| self::take_over(conn, &id, &from, to))
            .await
    }

    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        let id = snapshot_id.to_owned();
        self.call(move |conn| self::abort(conn, &id)).await
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let id = session_id.to_owned();
        self.call(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.prepare_cached("DELETE FROM bidi_entries WHERE session_id = ?1")?
                .execute(params![id])?;
            let deleted = tx
                .prepare_cached("DELETE FROM bidi_sessions WHERE session_id = ?1")?
                .execute(params![id])?;
            tx.commit()?;
            Ok(deleted > 0)
        })
        .await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.call(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT session_id FROM bidi_sessions ORDER BY session_id")?;
            let ids = stmt
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            Ok(ids)
        })
        .await
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
