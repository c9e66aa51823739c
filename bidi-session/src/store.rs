//! The [`SessionStore`] trait, its [`Snapshot`]s and [`StoreError`].

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bidi_core::{BoxError, NotFound};
use serde_json::Value;

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
    /// The session does not exist (any more): a [`NotFound`] of kind `session`, naming its id.
    #[error(transparent)]
    NotFound(NotFound),
    /// An update kept losing to concurrent writers and gave up.
    #[error("session `{session_id}` is contended: gave up after {attempts} conflicting attempts")]
    Contended {
        /// The session.
        session_id: String,
        /// How many times the update was tried.
        attempts: u32,
    },
    /// The state could not be written as JSON (a map with keys that are not strings, say).
    #[error("the session state could not be written as JSON: {0}")]
    Serialization(#[source] serde_json::Error),
    /// The stored state does not fit the state type that reads it: another agent's session
    /// under the same id, or a state from before a change to the type. Nothing was changed.
    #[error(
        "session `{session_id}` holds a state this agent cannot read (another agent's, or an \
         older version's): {source}"
    )]
    InvalidState {
        /// The session.
        session_id: String,
        /// What does not fit, as serde says it.
        #[source]
        source: serde_json::Error,
    },
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

    /// Session `session_id` does not exist: a [`NotFound`] of kind `session`.
    ///
    /// ```
    /// use bidi_session::StoreError;
    ///
    /// let error = StoreError::not_found("chat-7");
    /// assert!(error.is_not_found());
    /// assert_eq!(error.to_string(), "no session `chat-7`");
    /// ```
    pub fn not_found(session_id: impl Into<String>) -> Self {
        Self::NotFound(NotFound::new("session", session_id))
    }

    /// Whether this is a [`Conflict`](Self::Conflict).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// Whether this is a [`NotFound`](Self::NotFound).
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }
}

/// Where sessions live: versioned JSON snapshots with compare-and-swap saves.
///
/// One dyn-compatible trait over JSON state, so one store serves agents of any state type and a
/// store of your own (Redis, DynamoDB, files) is one small impl. Every save is a compare-and-swap
/// on the version: a writer that read version `v` saves with `expected = Some(v)` and gets
/// [`StoreError::Conflict`] if anyone saved since. A lost update is impossible.
///
/// A missing session is not an error here: `load` and `load_version` answer `None`, `delete`
/// answers `false`, and a save expecting a version of it is a [`StoreError::Conflict`] with
/// `actual: None`. [`StoreError::NotFound`] is what [`Session`](crate::Session) and the agents
/// make of that.
///
/// `Arc<S>` and `Box<S>` are stores when `S` is, `dyn SessionStore` included, so a store shared
/// as `Arc<dyn SessionStore>` goes wherever an `impl SessionStore` does.
///
/// # Your own store
///
/// Write the methods as `async fn`s under [`#[async_trait]`](macro@async_trait) (re-exported
/// here, so you need no dependency of your own), then run the public conformance suite,
/// [`testing::conformance`](crate::testing::conformance) (feature `testing`), against it. A
/// complete store that keeps every version in a map:
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::{Arc, Mutex, PoisonError};
/// use std::time::SystemTime;
///
/// use bidi_session::{SessionStore, Snapshot, StoreError, async_trait};
/// use serde_json::Value;
///
/// /// Every version of every session, oldest first.
/// #[derive(Debug, Default)]
/// struct MapStore {
///     sessions: Mutex<BTreeMap<String, Vec<Snapshot>>>,
/// }
///
/// impl MapStore {
///     fn sessions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<Snapshot>>> {
///         self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
///     }
/// }
///
/// #[async_trait]
/// impl SessionStore for MapStore {
///     async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
///         Ok(self.sessions().get(session_id).and_then(|v| v.last().cloned()))
///     }
///
///     async fn load_version(
///         &self,
///         session_id: &str,
///         version: u64,
///     ) -> Result<Option<Snapshot>, StoreError> {
///         let sessions = self.sessions();
///         let versions = sessions.get(session_id);
///         Ok(versions.and_then(|v| v.iter().find(|s| s.version == version).cloned()))
///     }
///
///     async fn save(
///         &self,
///         session_id: &str,
///         expected: Option<u64>,
///         state: Value,
///     ) -> Result<Snapshot, StoreError> {
///         let mut sessions = self.sessions();
///         let latest = sessions.get(session_id).and_then(|v| v.last());
///         let actual = latest.map(|s| s.version);
///         // The compare-and-swap: under the lock, nobody saves between this check and the push.
///         if actual != expected {
///             let session_id = session_id.to_owned();
///             return Err(StoreError::Conflict { session_id, expected, actual });
///         }
///         let now = SystemTime::now();
///         let created_at = latest.map_or(now, |s| s.created_at);
///         let version = actual.map_or(1, |v| v + 1);
///         let snapshot = Snapshot::new(session_id, version, state, created_at, now);
///         sessions.entry(session_id.to_owned()).or_default().push(snapshot.clone());
///         Ok(snapshot)
///     }
///
///     async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
///         Ok(self.sessions().remove(session_id).is_some())
///     }
///
///     async fn list(&self) -> Result<Vec<String>, StoreError> {
///         Ok(self.sessions().keys().cloned().collect()) // a BTreeMap: sorted
///     }
/// }
///
/// # #[tokio::main]
/// # async fn main() {
/// // Panics naming what the store gets wrong, if anything.
/// bidi_session::testing::conformance(Arc::new(MapStore::default())).await;
/// # }
/// ```
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

macro_rules! forward {
    ($($store:tt)*) => {
        #[async_trait]
        impl<S: SessionStore + ?Sized> SessionStore for $($store)*<S> {
            async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
                (**self).load(session_id).await
            }

            async fn load_version(
                &self,
                session_id: &str,
                version: u64,
            ) -> Result<Option<Snapshot>, StoreError> {
                (**self).load_version(session_id, version).await
            }

            async fn save(
                &self,
                session_id: &str,
                expected: Option<u64>,
                state: Value,
            ) -> Result<Snapshot, StoreError> {
                (**self).save(session_id, expected, state).await
            }

            async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
                (**self).delete(session_id).await
            }

            async fn list(&self) -> Result<Vec<String>, StoreError> {
                (**self).list().await
            }
        }
    };
}

forward!(Arc);
forward!(Box);
