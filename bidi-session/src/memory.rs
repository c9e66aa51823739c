//! [`MemoryStore`]: sessions in memory, with their history.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::Value;

use crate::store::{SessionStore, Snapshot, StoreError};

/// Sessions in memory. The reference the other stores are tested against, and (keeping only
/// the latest version of each session) the default store of agents. Nothing survives the
/// process.
///
/// Every version is kept unless [`with_retention`](Self::with_retention) says otherwise: a store
/// that lives as long as a server should keep a bounded number, or its memory grows with every
/// save.
#[derive(Debug, Default)]
pub struct MemoryStore {
    sessions: Mutex<BTreeMap<String, Vec<Snapshot>>>,
    retention: Option<usize>,
}

impl MemoryStore {
    /// An empty store.
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

    fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<String, Vec<Snapshot>>) -> R) -> R {
        f(&mut self.sessions.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.with(|sessions| sessions.get(session_id).and_then(|h| h.last().cloned())))
    }

    async fn load_version(
        &self,
        session_id: &str,
        version: u64,
    ) -> Result<Option<Snapshot>, StoreError> {
        Ok(self.with(|sessions| {
            let history = sessions.get(session_id)?;
            history.iter().find(|s| s.version == version).cloned()
        }))
    }

    async fn save(
        &self,
        session_id: &str,
        expected: Option<u64>,
        state: Value,
    ) -> Result<Snapshot, StoreError> {
        let now = SystemTime::now();
        self.with(|sessions| {
            let history = sessions.entry(session_id.to_owned()).or_default();
            let latest = history.last();
            let actual = latest.map(|s| s.version);
            if actual != expected {
                if history.is_empty() {
                    sessions.remove(session_id);
                }
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
            history.push(snapshot.clone());
            if let Some(keep) = self.retention
                && history.len() > keep
            {
                let excess = history.len() - keep;
                history.drain(..excess);
            }
            Ok(snapshot)
        })
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|sessions| sessions.remove(session_id).is_some()))
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|sessions| sessions.keys().cloned().collect()))
    }
}
