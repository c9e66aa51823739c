//! A session store of your own, whole: a map behind a lock under `bidi_session::storage`,
//! which keeps the rules and the replay. It passes the conformance suite (`tests/own_store.rs`).

use std::collections::{BTreeMap, HashMap};

use bidi_session::storage::{Body, LogStore, Record, Storage, Transaction};
use bidi_session::{StoreError, async_trait};
use tokio::sync::{Mutex, MutexGuard};

/// The session store: `LogStore` over the map.
#[must_use]
pub fn map_store() -> LogStore<MapStorage> {
    LogStore::new(MapStorage::default())
}

/// Every session's head and every snapshot's record and body, behind one lock.
#[derive(Debug, Default)]
pub struct MapStorage(Mutex<Tables>);

#[derive(Debug, Default)]
struct Tables {
    heads: BTreeMap<String, String>,
    records: HashMap<String, (Record, Body)>,
}

/// The lock, held to the commit, and the writes, applied there (dropped before: none).
struct Tx<'a> {
    tables: MutexGuard<'a, Tables>,
    records: Vec<(Record, Option<Body>)>,
    heads: Vec<(String, String)>,
}

#[async_trait]
impl Storage for MapStorage {
    async fn begin(&self) -> Result<Box<dyn Transaction + '_>, StoreError> {
        let (tables, records, heads) = (self.0.lock().await, Vec::new(), Vec::new());
        Ok(Box::new(Tx {
            tables,
            records,
            heads,
        }))
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        let mut tables = self.0.lock().await;
        tables
            .records
            .retain(|_, row| row.0.entry.session_id != session_id);
        Ok(tables.heads.remove(session_id).is_some())
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.0.lock().await.heads.keys().cloned().collect())
    }
}

#[async_trait]
impl Transaction for Tx<'_> {
    async fn head(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
        Ok(self.tables.heads.get(session_id).cloned())
    }

    async fn record(&mut self, id: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.tables.records.get(id).map(|row| row.0.clone()))
    }

    async fn body(&mut self, id: &str) -> Result<Option<Body>, StoreError> {
        Ok(self.tables.records.get(id).map(|row| row.1.clone()))
    }

    async fn put(&mut self, record: Record, body: Option<Body>) -> Result<(), StoreError> {
        self.records.push((record, body));
        Ok(())
    }

    async fn set_head(&mut self, session_id: &str, id: &str) -> Result<(), StoreError> {
        self.heads.push((session_id.to_owned(), id.to_owned()));
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        let tables = &mut *self.tables;
        for (record, body) in std::mem::take(&mut self.records) {
            let id = record.entry.id.clone();
            let kept = tables.records.remove(&id).map(|row| row.1);
            tables
                .records
                .insert(id, (record, body.or(kept).unwrap_or_default()));
        }
        for (session_id, id) in std::mem::take(&mut self.heads) {
            tables.heads.insert(session_id, id);
        }
        Ok(())
    }
}
