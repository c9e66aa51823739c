//! The [`SessionStore`] trait, its [`Snapshot`]s and [`StoreError`].

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::Value;

/// A boxed error from a store's backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One saved version of a session's state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The session's id.
    pub session_id: String,
    /// This snapshot's version: 1 for the first save, then one more per save.
    pub version: u64,
    /// The state, as JSON.
    pub state: Value,
    /// When the session was created (its first snapshot was saved).
    pub created_at: SystemTime,
    /// When this snapshot was saved.
    pub updated_at: SystemTime,
}

impl Snapshot {
    /// A snapshot; for stores that build them from their rows.
    #[must_use]
    pub fn new(
        session_id: impl Into<String>,
        version: u64,
        state: Value,
        created_at: SystemTime,
        updated_at: SystemTime,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            version,
            state,
            created_at,
            updated_at,
        }
    }
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The compare-and-swap failed: the session is not at the expected version. Nothing was written.
    #[error(
        "session `{session_id}` changed underneath: expected {}, found {}",
        version_name(*expected),
        version_name(*actual)
    )]
    Conflict {
        /// The session.
        session_id: String,
        /// The version the writer expected (`None`: that the session did not exist).
        expected: Option<u64>,
        /// The version the store holds (`None`: the session does not exist).
        actual: Option<u64>,
    },
    /// The session does not exist (any more).
    #[error("session `{session_id}` not found")]
    NotFound {
        /// The session.
        session_id: String,
    },
    /// An update kept losing to concurrent writers and gave up.
    #[error("session `{session_id}` is contended: gave up after {attempts} conflicting attempts")]
    Contended {
        /// The session.
        session_id: String,
        /// How many times the update was tried.
        attempts: u32,
    },
    /// The state could not be converted to or from JSON.
    #[error("session state serialization failed: {0}")]
    Serialization(#[source] serde_json::Error),
    /// The backend failed (I/O, the database, the network).
    #[error("session store backend failed: {0}")]
    Backend(#[source] BoxError),
}

fn version_name(version: Option<u64>) -> String {
    version.map_or_else(|| "no session".to_owned(), |v| format!("version {v}"))
}

impl StoreError {
    /// A backend error from any error.
    pub fn backend(error: impl Into<BoxError>) -> Self {
        Self::Backend(error.into())
    }

    /// Whether this is a [`Conflict`](Self::Conflict).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }
}

/// Where sessions live: versioned JSON snapshots with compare-and-swap saves (S1, S2).
///
/// One dyn-compatible trait over JSON state, so one store serves agents of any state type and a
/// store of your own (Redis, DynamoDB, files) is one small impl; run
/// [`testing::conformance`](crate::testing) against it.
///
/// Every save is a compare-and-swap on the version: a writer that read version `v` saves with
/// `expected = Some(v)` and gets [`StoreError::Conflict`] if anyone saved since. A lost update
/// is impossible.
#[async_trait]
pub trait SessionStore: fmt::Debug + Send + Sync + 'static {
    /// The latest snapshot of `session_id`, or `None` if there is no such session.
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError>;

    /// Snapshot `version` of `session_id`, or `None` if it does not exist (or was not retained).
    async fn load_version(
        &self,
        session_id: &str,
        version: u64,
    ) -> Result<Option<Snapshot>, StoreError>;

    /// Saves `state` as the next version of `session_id`, if the session is at `expected`
    /// (`None`: only if the session does not exist, creating it at version 1). Returns the new
    /// snapshot.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] with the actual version when the session is not at `expected`;
    /// nothing is written then.
    async fn save(
        &self,
        session_id: &str,
        expected: Option<u64>,
        state: Value,
    ) -> Result<Snapshot, StoreError>;

    /// Deletes every snapshot of `session_id`; returns whether it existed.
    async fn delete(&self, session_id: &str) -> Result<bool, StoreError>;

    /// The ids of every stored session, sorted.
    async fn list(&self) -> Result<Vec<String>, StoreError>;
}
