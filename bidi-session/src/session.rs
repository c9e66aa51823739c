//! [`Session`]: a typed view of one session in a store, saved with compare-and-swap.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::store::{SessionStore, Snapshot, StoreError};

/// How many times [`Session::update`] tries before giving up.
pub const MAX_UPDATE_ATTEMPTS: u32 = 32;

/// Waits before retry `attempt` (0-based) of a conflicting update: exponential from 50 µs, capped
/// at 12.8 ms, with ±50% jitter so writers that collided do not collide again in step.
async fn backoff(attempt: u32) {
    let base = 50u64 << attempt.min(8);
    let jitter = RandomState::new().hash_one((attempt, Instant::now())) % base;
    tokio::time::sleep(Duration::from_micros(base / 2 + jitter)).await;
}

/// One session's state, typed, backed by a [`SessionStore`].
///
/// It caches the state and the version it was read at. [`update_state`](Self::update_state)
/// saves at once with compare-and-swap on that version, so a writer that lost a race gets
/// [`StoreError::Conflict`] instead of overwriting; [`update`](Self::update) re-reads and
/// retries a pure mutator instead. Clones share the cached state.
pub struct Session<State> {
    id: Arc<str>,
    store: Arc<dyn SessionStore>,
    cached: Arc<Mutex<Cached<State>>>,
}

struct Cached<State> {
    state: State,
    version: u64,
}

impl<State> Clone for Session<State> {
    fn clone(&self) -> Self {
        Self {
            id: Arc::clone(&self.id),
            store: Arc::clone(&self.store),
            cached: Arc::clone(&self.cached),
        }
    }
}

impl<State> Session<State>
where
    State: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// Loads the latest snapshot of `id`, or `None` if there is no such session.
    ///
    /// # Errors
    ///
    /// The store's error, or [`StoreError::InvalidState`] if the stored state is not a `State`.
    pub async fn load(store: Arc<dyn SessionStore>, id: &str) -> Result<Option<Self>, StoreError> {
        let Some(snapshot) = store.load(id).await? else {
            return Ok(None);
        };
        Ok(Some(Self::from_snapshot(store, snapshot)?))
    }

    /// Creates session `id` at version 1 with `state`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if it exists already; the store's error otherwise.
    pub async fn create(
        store: Arc<dyn SessionStore>,
        id: &str,
        state: State,
    ) -> Result<Self, StoreError> {
        let json = serde_json::to_value(&state).map_err(StoreError::Serialization)?;
        let snapshot = store.save(id, None, json).await?;
        Ok(Self::new(store, id, state, snapshot.version))
    }

    /// Loads session `id`, creating it with `init()` if it does not exist (also when another
    /// writer creates it at the same moment: then that one's state is loaded).
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn load_or_create(
        store: Arc<dyn SessionStore>,
        id: &str,
        init: impl FnOnce() -> State,
    ) -> Result<Self, StoreError> {
        if let Some(session) = Self::load(Arc::clone(&store), id).await? {
            return Ok(session);
        }
        match Self::create(Arc::clone(&store), id, init()).await {
            Err(StoreError::Conflict { .. }) => Self::load(store, id)
                .await?
                .ok_or_else(|| StoreError::not_found(id)),
            other => other,
        }
    }

    fn new(store: Arc<dyn SessionStore>, id: &str, state: State, version: u64) -> Self {
        Self {
            id: Arc::from(id),
            store,
            cached: Arc::new(Mutex::new(Cached { state, version })),
        }
    }

    fn from_snapshot(store: Arc<dyn SessionStore>, snapshot: Snapshot) -> Result<Self, StoreError> {
        let state = decode(&snapshot.session_id, snapshot.state)?;
        Ok(Self::new(
            store,
            &snapshot.session_id,
            state,
            snapshot.version,
        ))
    }

    /// The session id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The version the cached state was read or saved at.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// A copy of the cached state.
    #[must_use]
    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    /// Saves `state` now, as the version after the cached one.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if the session changed since it was read (another connection
    /// wrote it): nothing is written and the cached state is unchanged; call
    /// [`reload`](Self::reload) or use [`update`](Self::update). The store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the save may or may not have happened; the cached state is
    /// updated only if it was observed. A later save then fails with a conflict rather than
    /// overwrite.
    pub async fn update_state(&self, state: State) -> Result<(), StoreError> {
        let json = serde_json::to_value(&state).map_err(StoreError::Serialization)?;
        let expected = self.version();
        let snapshot = self.store.save(&self.id, Some(expected), json).await?;
        *self.lock() = Cached {
            state,
            version: snapshot.version,
        };
        Ok(())
    }

    /// Applies `mutate` to a copy of the state and saves it; on a conflict, waits a little
    /// (exponential backoff with jitter), re-reads the latest state and applies `mutate` again,
    /// up to [`MAX_UPDATE_ATTEMPTS`] times in all. `mutate` must be pure: it may run more than
    /// once. Returns what its last run returned.
    ///
    /// # Errors
    ///
    /// [`StoreError::Contended`] after too many conflicts, [`StoreError::NotFound`] if the
    /// session was deleted, the store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// As [`update_state`](Self::update_state).
    pub async fn update<R>(
        &self,
        mut mutate: impl FnMut(&mut State) -> R,
    ) -> Result<R, StoreError> {
        for attempt in 0..MAX_UPDATE_ATTEMPTS {
            let mut state = self.state();
            let result = mutate(&mut state);
            match self.update_state(state).await {
                Ok(()) => return Ok(result),
                Err(StoreError::Conflict { .. }) => {
                    backoff(attempt).await;
                    self.reload().await?;
                }
                Err(error) => return Err(error),
            }
        }
        Err(StoreError::Contended {
            session_id: self.id.to_string(),
            attempts: MAX_UPDATE_ATTEMPTS,
        })
    }

    /// Re-reads the latest state from the store.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] if the session was deleted; the store's error otherwise.
    pub async fn reload(&self) -> Result<(), StoreError> {
        let snapshot = self
            .store
            .load(&self.id)
            .await?
            .ok_or_else(|| StoreError::not_found(&*self.id))?;
        let state = decode(&self.id, snapshot.state)?;
        *self.lock() = Cached {
            state,
            version: snapshot.version,
        };
        Ok(())
    }

    /// The store the session lives in.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached<State>> {
        self.cached.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<State> fmt::Debug for Session<State> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// The stored `state` of session `id` as a `State`.
fn decode<State: DeserializeOwned>(id: &str, state: Value) -> Result<State, StoreError> {
    serde_json::from_value(state).map_err(|source| StoreError::InvalidState {
        session_id: id.to_owned(),
        source,
    })
}
