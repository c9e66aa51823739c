//! [`MemoryStore`]: sessions in memory, with their history.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::Value;

use crate::store::{SessionStore, Snapshot, StoreError};

/// Sessions in memory. The reference the other stores are tested against, and (bounded) the
/// default store of agents. Nothing survives the process.
///
/// Unbounded unless told otherwise: every version of every session is kept. A store that lives
/// as long as a server should bound both, or its memory grows with every save:
/// [`with_retention`](Self::with_retention) keeps the latest versions of each session,
/// [`with_max_sessions`](Self::with_max_sessions) the most recently used sessions.
///
/// ```
/// use bidi_session::{MemoryStore, SessionStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let store = MemoryStore::new().with_retention(1).with_max_sessions(2);
/// store.save("a", None, json!(1)).await?;
/// store.save("b", None, json!(2)).await?;
/// store.load("a").await?; // "a" is now used more recently than "b"
/// store.save("c", None, json!(3)).await?; // a third session: "b" goes
/// assert_eq!(store.list().await?, ["a", "c"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    retention: Option<usize>,
    max_sessions: Option<usize>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: BTreeMap<String, History>,
    /// With a session limit: the sessions by their last use (a tick), least recent first.
    by_use: BTreeMap<u64, String>,
    tick: u64,
}

#[derive(Debug, Default)]
struct History {
    snapshots: Vec<Snapshot>,
    /// The tick of its last use, with a session limit.
    used: u64,
}

impl MemoryStore {
    /// An empty store, unbounded.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps only the latest `versions` snapshots of each session (at least 1); older ones are
    /// dropped as new ones are saved.
    #[must_use]
    pub fn with_retention(mut self, versions: usize) -> Self {
        self.retention = Some(versions.max(1));
        self
    }

    /// Keeps at most `sessions` sessions (at least 1): creating one more drops the least
    /// recently used (loaded or saved) with all its versions, as if it had been deleted.
    ///
    /// A writer still holding a dropped session finds it gone: its next save is a
    /// [`StoreError::Conflict`] with `actual: None`, which
    /// [`Session::update`](crate::Session::update) reports as [`StoreError::NotFound`].
    #[must_use]
    pub fn with_max_sessions(mut self, sessions: usize) -> Self {
        self.max_sessions = Some(sessions.max(1));
        self
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Marks `session_id` used now, when the store has a session limit.
    fn touch(&self, inner: &mut Inner, session_id: &str) {
        if self.max_sessions.is_none() {
            return;
        }
        let Some(history) = inner.sessions.get_mut(session_id) else {
            return;
        };
        if history.used != 0 && history.used == inner.tick {
            return; // the most recently used already: a session saved turn after turn
        }
        // The id moves to its new place: no allocation per use.
        let id = inner
            .by_use
            .remove(&history.used)
            .unwrap_or_else(|| session_id.to_owned());
        inner.tick += 1;
        history.used = inner.tick;
        inner.by_use.insert(inner.tick, id);
    }
}

impl Inner {
    fn remove(&mut self, session_id: &str) -> bool {
        match self.sessions.remove(session_id) {
            Some(history) => {
                self.by_use.remove(&history.used);
                true
            }
            None => false,
        }
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.with(|inner| {
            self.touch(inner, session_id);
            let history = inner.sessions.get(session_id)?;
            history.snapshots.last().cloned()
        }))
    }

    async fn load_version(
        &self,
        session_id: &str,
        version: u64,
    ) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.with(|inner| {
            self.touch(inner, session_id);
            let history = inner.sessions.get(session_id)?;
            history
                .snapshots
                .iter()
                .find(|s| s.version == version)
                .cloned()
        }))
    }

    async fn save(
        &self,
        session_id: &str,
        expected: Option<u64>,
        state: Value,
    ) -> Result<Snapshot, StoreError> {
        let now = SystemTime::now();
        self.with(|inner| {
            let latest = inner
                .sessions
                .get(session_id)
                .and_then(|h| h.snapshots.last());
            let actual = latest.map(|s| s.version);
            if actual != expected {
                return Err(StoreError::Conflict {
                    session_id: session_id.to_owned(),
                    expected,
                    actual,
                });
            }
            let snapshot = Snapshot::new(
                session_id,
                actual.map_or(1, |v| v + 1),
                state,
                latest.map_or(now, |s| s.created_at),
                now,
            );
            let history = inner.sessions.entry(session_id.to_owned()).or_default();
            history.snapshots.push(snapshot.clone());
            if let Some(keep) = self.retention
                && history.snapshots.len() > keep
            {
                let excess = history.snapshots.len() - keep;
                history.snapshots.drain(..excess);
            }
            self.touch(inner, session_id);
            if let Some(max) = self.max_sessions {
                // The session just saved is the most recently used: never the one dropped.
                while inner.sessions.len() > max {
                    let Some((_, oldest)) = inner.by_use.pop_first() else {
                        break;
                    };
                    inner.sessions.remove(&oldest);
                }
            }
            Ok(snapshot)
        })
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|inner| inner.remove(session_id)))
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|inner| inner.sessions.keys().cloned().collect()))
    }
}
