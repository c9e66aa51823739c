//! [`PostgresStore`]: sessions in a PostgreSQL table, for deployments on several machines.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use native_tls::TlsConnector;
use postgres_native_tls::MakeTlsConnector;
use serde_json::Value;

use crate::sqlite::{sql_version, version};
use crate::store::{SessionStore, Snapshot, StoreError};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS bidi_snapshots (
    session_id TEXT NOT NULL,
    version    BIGINT NOT NULL,
    state      JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, version)
)";

/// Creates version 1 unless the session has any snapshot. Two creates racing both pass the
/// `NOT EXISTS`; the primary key lets one insert and turns the other into no row.
const CREATE: &str = "
INSERT INTO bidi_snapshots (session_id, version, state, created_at, updated_at)
SELECT $1::text, 1, $2::jsonb, now(), now()
WHERE NOT EXISTS (SELECT 1 FROM bidi_snapshots WHERE session_id = $1::text)
ON CONFLICT DO NOTHING
RETURNING created_at, updated_at";

/// The compare-and-swap: inserts version `v + 1` if version `v` exists and `v + 1` does not.
/// Versions are contiguous, so that is exactly "the session is at version `v`"; of two writers
/// racing from `v`, the primary key lets one insert.
const ADVANCE: &str = "
INSERT INTO bidi_snapshots (session_id, version, state, created_at, updated_at)
SELECT session_id, version + 1, $3::jsonb, created_at, now()
FROM bidi_snapshots WHERE session_id = $1::text AND version = $2::bigint
ON CONFLICT DO NOTHING
RETURNING created_at, updated_at";

/// The compare-and-swap when only the latest version is kept: moves the row to `v + 1` in place.
/// A writer racing on the same row waits for the first, then finds `version` moved on.
const REPLACE: &str = "
UPDATE bidi_snapshots SET version = version + 1, state = $3::jsonb, updated_at = now()
WHERE session_id = $1::text AND version = $2::bigint
RETURNING created_at, updated_at";

const PRUNE: &str =
    "DELETE FROM bidi_snapshots WHERE session_id = $1::text AND version < $2::bigint";

const LATEST: &str = "
SELECT version, state, created_at, updated_at FROM bidi_snapshots
WHERE session_id = $1::text ORDER BY version DESC LIMIT 1";

const AT_VERSION: &str = "
SELECT version, state, created_at, updated_at FROM bidi_snapshots
WHERE session_id = $1::text AND version = $2::bigint";

const LATEST_VERSION: &str = "SELECT MAX(version) FROM bidi_snapshots WHERE session_id = $1::text";

/// How long a call waits for a pooled connection, or to open a new one.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Sessions in a PostgreSQL table (`bidi_snapshots`, state as `JSONB`), shared by every process
/// that connects to the same database: saves stay compare-and-swap across all of them.
///
/// Connections come from a pool (at most 16) and are re-opened when the server drops them; a
/// call that cannot get one within 10 seconds fails with [`StoreError::Backend`]. Every version
/// is kept unless [`with_retention`](Self::with_retention) says otherwise. Timestamps are the
/// server's clock. PostgreSQL refuses NUL characters in text and JSONB: a session id or state
/// string containing `\0` fails with [`StoreError::Backend`].
///
/// TLS follows the configuration's `sslmode`: `prefer` (the default) encrypts when the server
/// offers it, `require` refuses a server that does not, `disable` never encrypts. Certificates
/// are checked against the system's roots, or against yours with
/// [`connect_with_tls`](Self::connect_with_tls).
///
/// ```no_run
/// use bidi_session::{PostgresStore, SessionStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let store = PostgresStore::connect("postgres://bidi@127.0.0.1:5432/sessions").await?;
/// let first = store.save("s1", None, json!({"turns": 1})).await?;
/// store.save("s1", Some(first.version), json!({"turns": 2})).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    retention: Option<u64>,
}

impl PostgresStore {
    /// Connects to the database `config` names (a URL such as
    /// `postgres://user:password@host:5432/db`, or `host=... user=... dbname=...`) and creates
    /// the table if it is missing.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if `config` does not parse, the server cannot be reached, or the
    /// table cannot be created.
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
    pub async fn connect_with_tls(config: &str, tls: TlsConnector) -> Result<Self, StoreError> {
        let config: tokio_postgres::Config = config.parse().map_err(StoreError::backend)?;
        let manager = Manager::from_config(
            config,
            MakeTlsConnector::new(tls),
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
        let store = Self {
            pool,
            retention: None,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Keeps only the latest `versions` snapshots of each session (at least 1); older ones are
    /// deleted as new ones are saved. With 1, each save updates the row in place.
    #[must_use]
    pub fn with_retention(mut self, versions: u64) -> Self {
        self.retention = Some(versions.max(1));
        self
    }

    async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(StoreError::backend)
    }

    /// Creates the table, once even when several processes start together.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(StoreError::backend)?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext('bidi_snapshots'))",
            &[],
        )
        .await
        .map_err(StoreError::backend)?;
        tx.execute(SCHEMA, &[]).await.map_err(StoreError::backend)?;
        tx.commit().await.map_err(StoreError::backend)
    }

    /// Snapshot `version` of `session_id`, or its latest with `None`.
    async fn snapshot(
        &self,
        session_id: &str,
        version_wanted: Option<u64>,
    ) -> Result<Option<Snapshot>, StoreError> {
        let client = self.client().await?;
        let row = match version_wanted {
            None => {
                let stmt = client
                    .prepare_cached(LATEST)
                    .await
                    .map_err(StoreError::backend)?;
                client.query_opt(&stmt, &[&session_id]).await
            }
            Some(v) => {
                let stmt = client
                    .prepare_cached(AT_VERSION)
                    .await
                    .map_err(StoreError::backend)?;
                client
                    .query_opt(&stmt, &[&session_id, &sql_version(v)?])
                    .await
            }
        }
        .map_err(StoreError::backend)?;
        row.map(|row| {
            Ok(Snapshot::new(
                session_id,
                version(row.try_get(0).map_err(StoreError::backend)?),
                row.try_get::<_, Value>(1).map_err(StoreError::backend)?,
                row.try_get::<_, SystemTime>(2)
                    .map_err(StoreError::backend)?,
                row.try_get::<_, SystemTime>(3)
                    .map_err(StoreError::backend)?,
            ))
        })
        .transpose()
    }
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.snapshot(session_id, None).await
    }

    async fn load_version(
        &self,
        session_id: &str,
        version: u64,
    ) -> Result<Option<Snapshot>, StoreError> {
        self.snapshot(session_id, Some(version)).await
    }

    async fn save(
        &self,
        session_id: &str,
        expected: Option<u64>,
        state: Value,
    ) -> Result<Snapshot, StoreError> {
        let client = self.client().await?;
        let (new_version, row) = match expected {
            None => {
                let stmt = client
                    .prepare_cached(CREATE)
                    .await
                    .map_err(StoreError::backend)?;
                let row = client.query_opt(&stmt, &[&session_id, &state]).await;
                (1, row)
            }
            Some(v) => {
                let sql = if self.retention == Some(1) {
                    REPLACE
                } else {
                    ADVANCE
                };
                let stmt = client
                    .prepare_cached(sql)
                    .await
                    .map_err(StoreError::backend)?;
                let row = client
                    .query_opt(&stmt, &[&session_id, &sql_version(v)?, &state])
                    .await;
                (v + 1, row)
            }
        };
        let Some(row) = row.map_err(StoreError::backend)? else {
            let stmt = client
                .prepare_cached(LATEST_VERSION)
                .await
                .map_err(StoreError::backend)?;
            let actual: Option<i64> = client
                .query_one(&stmt, &[&session_id])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(StoreError::backend)?;
            return Err(StoreError::Conflict {
                session_id: session_id.to_owned(),
                expected,
                actual: actual.map(version),
            });
        };
        let created_at: SystemTime = row.try_get(0).map_err(StoreError::backend)?;
        let updated_at: SystemTime = row.try_get(1).map_err(StoreError::backend)?;
        // With one version kept, REPLACE moved the row: there is nothing to delete.
        if let Some(keep) = self
            .retention
            .filter(|keep| *keep > 1 && new_version > *keep)
        {
            let stmt = client
                .prepare_cached(PRUNE)
                .await
                .map_err(StoreError::backend)?;
            client
                .execute(&stmt, &[&session_id, &sql_version(new_version - keep + 1)?])
                .await
                .map_err(StoreError::backend)?;
        }
        Ok(Snapshot::new(
            session_id,
            new_version,
            state,
            created_at,
            updated_at,
        ))
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM bidi_snapshots WHERE session_id = $1::text",
                &[&session_id],
            )
            .await
            .map(|deleted| deleted > 0)
            .map_err(StoreError::backend)
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT DISTINCT session_id FROM bidi_snapshots ORDER BY session_id",
                &[],
            )
            .await
            .map_err(StoreError::backend)?;
        rows.iter()
            .map(|row| row.try_get(0).map_err(StoreError::backend))
            .collect()
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .field("retention", &self.retention)
            .finish()
    }
}
