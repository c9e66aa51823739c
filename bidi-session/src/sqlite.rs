//! [`SqliteStore`]: sessions in one SQLite file, the embedded persistent default.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;
use tokio::runtime::RuntimeFlavor;

use crate::store::{SessionStore, Snapshot, StoreError};

/// The schema version this crate writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another connection's lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS bidi_snapshots (
    session_id TEXT NOT NULL,
    version    INTEGER NOT NULL,
    state      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, version)
) WITHOUT ROWID;
";

/// Creates version 1 unless the session has any snapshot.
const CREATE: &str = "
INSERT INTO bidi_snapshots (session_id, version, state, created_at, updated_at)
SELECT ?1, 1, ?2, ?3, ?3
WHERE NOT EXISTS (SELECT 1 FROM bidi_snapshots WHERE session_id = ?1)
";

/// The compare-and-swap: inserts version `v + 1` if version `v` exists and `v + 1` does not.
/// Versions are contiguous, so that is exactly "the session is at version `v`". One statement,
/// atomic under SQLite's write lock.
const ADVANCE: &str = "
INSERT OR IGNORE INTO bidi_snapshots (session_id, version, state, created_at, updated_at)
SELECT session_id, version + 1, ?3, created_at, ?4
FROM bidi_snapshots WHERE session_id = ?1 AND version = ?2
RETURNING created_at
";

/// The compare-and-swap when only the latest version is kept: moves the row to `v + 1` in place.
const REPLACE: &str = "
UPDATE bidi_snapshots SET version = version + 1, state = ?3, updated_at = ?4
WHERE session_id = ?1 AND version = ?2
RETURNING created_at
";

const LATEST: &str = "
SELECT version, state, created_at, updated_at FROM bidi_snapshots
WHERE session_id = ?1 ORDER BY version DESC LIMIT 1
";

const AT_VERSION: &str = "
SELECT version, state, created_at, updated_at FROM bidi_snapshots
WHERE session_id = ?1 AND version = ?2
";

const LATEST_VERSION: &str = "SELECT MAX(version) FROM bidi_snapshots WHERE session_id = ?1";

/// Sessions in one SQLite file (bundled SQLite, WAL journal): the embedded persistent default.
///
/// Every version is kept unless [`with_retention`](Self::with_retention) says otherwise. The file
/// can be read with any SQLite tool (table `bidi_snapshots`). Several stores, in one process or in
/// several, may share a file; saves stay compare-and-swap across all of them. A statement that
/// finds the file locked by another writer waits for it up to 5 seconds, then fails with
/// [`StoreError::Backend`]. SQLite calls run as blocking work that never stalls the async
/// workers.
///
/// ```
/// use bidi_session::{SessionStore, SqliteStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let dir = tempfile::tempdir().map_err(bidi_session::StoreError::backend)?;
/// let store = SqliteStore::open(dir.path().join("sessions.db")).await?;
/// let first = store.save("s1", None, json!({"turns": 1})).await?;
/// let second = store.save("s1", Some(first.version), json!({"turns": 2})).await?;
/// assert_eq!(second.version, 2);
/// // A stale writer is refused, never silently applied.
/// assert!(store.save("s1", Some(1), json!({"turns": 9})).await.unwrap_err().is_conflict());
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
    /// Keep at most this many versions per session.
    retention: Option<u64>,
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
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::start(Some(path.as_ref().to_owned())).await
    }

    /// A store in a private in-memory database, for tests.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if SQLite cannot open it.
    pub async fn in_memory() -> Result<Self, StoreError> {
        Self::start(None).await
    }

    async fn start(path: Option<PathBuf>) -> Result<Self, StoreError> {
        let opened = path.clone();
        let conn = blocking(move || connect(opened.as_deref())).await?;
        Ok(Self {
            conn: Arc::new(tokio::sync::Mutex::new(conn)),
            path: path.map(Arc::new),
            retention: None,
        })
    }

    /// Keeps only the latest `versions` snapshots of each session (at least 1); older ones are
    /// deleted as new ones are saved. With 1, each save replaces the row in place, the cheapest
    /// write SQLite has.
    #[must_use]
    pub fn with_retention(mut self, versions: u64) -> Self {
        self.retention = Some(versions.max(1));
        self
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

impl SqliteStore {
    /// Snapshot `version` of `session_id`, or its latest with `None`.
    async fn snapshot(
        &self,
        session_id: &str,
        version: Option<i64>,
    ) -> Result<Option<Snapshot>, StoreError> {
        let id = session_id.to_owned();
        let row = self
            .call(move |conn| {
                let found = match version {
                    None => conn
                        .prepare_cached(LATEST)?
                        .query_row(params![id], read_row),
                    Some(v) => conn
                        .prepare_cached(AT_VERSION)?
                        .query_row(params![id, v], read_row),
                };
                Ok(found.optional()?)
            })
            .await?;
        decode(session_id, row)
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
    if found >= 1 {
        return Ok(found);
    }
    // One writer creates the schema; the others find it created.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found = user_version(&tx)?;
    if found < 1 {
        tx.execute_batch(SCHEMA_V1)?;
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

fn millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn time(millis: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// A version read from SQL (`BIGINT`/`INTEGER`, never negative).
pub(crate) fn version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A version as SQL stores it.
pub(crate) fn sql_version(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(StoreError::backend)
}

/// `(version, state, created_at, updated_at)` of a snapshot row.
fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(u64, String, i64, i64)> {
    Ok((version(row.get(0)?), row.get(1)?, row.get(2)?, row.get(3)?))
}

fn decode(
    session_id: &str,
    row: Option<(u64, String, i64, i64)>,
) -> Result<Option<Snapshot>, StoreError> {
    row.map(|(version, state, created, updated)| {
        // Text this store wrote is JSON: anything else is a damaged file.
        let state = serde_json::from_str(&state).map_err(StoreError::backend)?;
        Ok(Snapshot::new(
            session_id,
            version,
            state,
            time(created),
            time(updated),
        ))
    })
    .transpose()
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.snapshot(session_id, None).await
    }

    async fn load_version(
        &self,
        session_id: &str,
        version: u64,
    ) -> Result<Option<Snapshot>, StoreError> {
        self.snapshot(session_id, Some(sql_version(version)?)).await
    }

    async fn save(
        &self,
        session_id: &str,
        expected: Option<u64>,
        state: Value,
    ) -> Result<Snapshot, StoreError> {
        let json = serde_json::to_string(&state).map_err(StoreError::Serialization)?;
        let id = session_id.to_owned();
        // Stored in milliseconds; the returned snapshot says what a later load will say.
        let at = millis(SystemTime::now());
        let retention = self.retention;
        let expected_sql = expected.map(sql_version).transpose()?;
        let (version, created) = self
            .call(move |conn| {
                let saved = match expected_sql {
                    None => {
                        let mut stmt = conn.prepare_cached(CREATE).map_err(StoreError::backend)?;
                        let inserted = stmt
                            .execute(params![id, json, at])
                            .map_err(StoreError::backend)?;
                        (inserted == 1).then_some((1, at))
                    }
                    Some(v) => {
                        let sql = if retention == Some(1) {
                            REPLACE
                        } else {
                            ADVANCE
                        };
                        let mut stmt = conn.prepare_cached(sql).map_err(StoreError::backend)?;
                        stmt.query_row(params![id, v, json, at], |row| row.get::<_, i64>(0))
                            .optional()
                            .map_err(StoreError::backend)?
                            .map(|created| (version(v) + 1, created))
                    }
                };
                let Some((new_version, created)) = saved else {
                    let actual: Option<i64> = conn
                        .prepare_cached(LATEST_VERSION)
                        .and_then(|mut stmt| stmt.query_row(params![id], |row| row.get(0)))
                        .map_err(StoreError::backend)?;
                    return Err(StoreError::Conflict {
                        session_id: id,
                        expected,
                        actual: actual.map(version),
                    });
                };
                // With one version kept, REPLACE moved the row: there is nothing to delete.
                if let Some(keep) = retention.filter(|keep| *keep > 1 && new_version > *keep) {
                    let oldest_kept = sql_version(new_version - keep + 1)?;
                    conn.prepare_cached(
                        "DELETE FROM bidi_snapshots WHERE session_id = ?1 AND version < ?2",
                    )
                    .and_then(|mut stmt| stmt.execute(params![id, oldest_kept]))
                    .map_err(StoreError::backend)?;
                }
                Ok((new_version, created))
            })
            .await?;
        Ok(Snapshot::new(
            session_id,
            version,
            state,
            time(created),
            time(at),
        ))
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let id = session_id.to_owned();
        self.call(move |conn| {
            conn.prepare_cached("DELETE FROM bidi_snapshots WHERE session_id = ?1")
                .and_then(|mut stmt| stmt.execute(params![id]))
                .map(|deleted| deleted > 0)
                .map_err(StoreError::backend)
        })
        .await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.call(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT DISTINCT session_id FROM bidi_snapshots ORDER BY session_id",
                )
                .map_err(StoreError::backend)?;
            let ids = stmt
                .query_map([], |row| row.get(0))
                .and_then(Iterator::collect)
                .map_err(StoreError::backend)?;
            Ok(ids)
        })
        .await
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}
