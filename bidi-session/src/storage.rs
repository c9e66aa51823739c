//! A [`SessionStore`](crate::SessionStore) over storage of your own: write rows, the crate
//! keeps the rules.
//!
//! A backend implements [`Storage`]: transactions that read and write [`Record`]s (a snapshot's
//! row) and their [`Body`]s (what the snapshot adds to its parent's state), and a session's
//! head. [`LogStore`] is the [`SessionStore`](crate::SessionStore) over it: it checks every
//! write against the rules all stores keep (what may follow a snapshot, who finishes or renews
//! a pending one, what an abort changes), encodes changes and checkpoints, replays a lineage
//! into a state, and passes [`testing::conformance`](crate::testing::conformance) whatever the
//! backend, as long as its transactions are what [`Storage::begin`] asks.
//!
//! A transaction is a few calls, each an `await`: fine for a lock or an embedded database. The
//! in-tree stores implement [`SessionStore`](crate::SessionStore) themselves, asking the same
//! rules, so that a write is one SQLite call (`SqliteStore`) or a few PostgreSQL round trips
//! (`PostgresStore`, which reads a lineage in one query), and `MemoryStore` never copies what a
//! write adds.
//!
//! A complete backend: sessions in a map behind a lock, every write of a transaction applied
//! at its commit. It passes the conformance suite as it is, and the takeover check
//! ([`testing::takeover`](crate::testing::takeover)) with [`Storage::resumable`], which a
//! storage that processes do not share leaves out.
//!
//! ```
//! use std::collections::{BTreeMap, HashMap};
//!
//! use bidi_session::storage::{Body, LogStore, Record, Storage, Transaction};
//! use bidi_session::{StoreError, async_trait};
//! use tokio::sync::{Mutex, MutexGuard};
//!
//! /// The session store: `LogStore` over the map.
//! #[must_use]
//! pub fn map_store() -> LogStore<MapStorage> {
//!     LogStore::new(MapStorage::default())
//! }
//!
//! /// Every session's head and every snapshot's record and body, behind one lock.
//! #[derive(Debug, Default)]
//! pub struct MapStorage(Mutex<Tables>);
//!
//! #[derive(Debug, Default)]
//! struct Tables {
//!     heads: BTreeMap<String, String>,
//!     records: HashMap<String, (Record, Body)>,
//! }
//!
//! /// The lock, held to the commit, and the writes, applied there (dropped before: none).
//! struct Tx<'a> {
//!     tables: MutexGuard<'a, Tables>,
//!     records: Vec<(Record, Option<Body>)>,
//!     heads: Vec<(String, String)>,
//! }
//!
//! #[async_trait]
//! impl Storage for MapStorage {
//!     async fn begin(&self) -> Result<Box<dyn Transaction + '_>, StoreError> {
//!         let (tables, records, heads) = (self.0.lock().await, Vec::new(), Vec::new());
//!         Ok(Box::new(Tx {
//!             tables,
//!             records,
//!             heads,
//!         }))
//!     }
//!
//!     async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
//!         let mut tables = self.0.lock().await;
//!         tables
//!             .records
//!             .retain(|_, row| row.0.entry.session_id != session_id);
//!         Ok(tables.heads.remove(session_id).is_some())
//!     }
//!
//!     async fn list(&self) -> Result<Vec<String>, StoreError> {
//!         Ok(self.0.lock().await.heads.keys().cloned().collect())
//!     }
//!
//!     // The turns another process may take over: a scan, fine for a map this size.
//!     async fn resumable(&self) -> Result<Vec<String>, StoreError> {
//!         let tables = self.0.lock().await;
//!         let entries = tables.records.values().map(|row| &row.0.entry);
//!         let resumable = entries.filter(|e| e.lease.as_ref().is_some_and(|l| l.resume.is_some()));
//!         Ok(resumable.map(|entry| entry.id.clone()).collect())
//!     }
//! }
//!
//! #[async_trait]
//! impl Transaction for Tx<'_> {
//!     async fn head(&mut self, session_id: &str) -> Result<Option<String>, StoreError> {
//!         Ok(self.tables.heads.get(session_id).cloned())
//!     }
//!
//!     async fn record(&mut self, id: &str) -> Result<Option<Record>, StoreError> {
//!         Ok(self.tables.records.get(id).map(|row| row.0.clone()))
//!     }
//!
//!     async fn body(&mut self, id: &str) -> Result<Option<Body>, StoreError> {
//!         Ok(self.tables.records.get(id).map(|row| row.1.clone()))
//!     }
//!
//!     async fn put(&mut self, record: Record, body: Option<Body>) -> Result<(), StoreError> {
//!         self.records.push((record, body));
//!         Ok(())
//!     }
//!
//!     async fn set_head(&mut self, session_id: &str, id: &str) -> Result<(), StoreError> {
//!         self.heads.push((session_id.to_owned(), id.to_owned()));
//!         Ok(())
//!     }
//!
//!     async fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
//!         let tables = &mut *self.tables;
//!         for (record, body) in std::mem::take(&mut self.records) {
//!             let id = record.entry.id.clone();
//!             let kept = tables.records.remove(&id).map(|row| row.1);
//!             tables
//!                 .records
//!                 .insert(id, (record, body.or(kept).unwrap_or_default()));
//!         }
//!         for (session_id, id) in std::mem::take(&mut self.heads) {
//!             tables.heads.insert(session_id, id);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() {
//! let store = std::sync::Arc::new(map_store());
//! # #[cfg(feature = "testing")]
//! bidi_session::testing::conformance(store.clone()).await;
//! # #[cfg(feature = "testing")]
//! bidi_session::testing::takeover(&*store, "").await;
//! # }
//! ```

use std::fmt;

use crate::store::{Entry, StoreError};
use crate::streams::Streams;
use async_trait::async_trait;

pub(crate) mod log_store;

pub use log_store::LogStore;

/// A snapshot as a [`Storage`] keeps it: one row, without what it adds to the state (its
/// [`Body`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The snapshot as readers see it, but for its status, which is as written: never
    /// [`Status::Expired`](crate::Status::Expired) (computed on read, by
    /// [`Record::entry`]).
    pub entry: Entry,
    /// Whether any snapshot continues it (in its session, or a fork of it in another).
    pub has_children: bool,
}

/// What a snapshot adds to its parent's state: its change, and, when it is a checkpoint, the
/// state after it, whole. JSON text both, as the store is given them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Body {
    /// The change (a JSON Patch, as [`Change::to_json`](crate::Change::to_json) writes it).
    pub change: String,
    /// The state after the change, if the snapshot carries it whole.
    pub checkpoint: Option<String>,
}

/// Where a [`LogStore`] keeps its rows: see the [module](self).
///
/// # Cancel safety
///
/// A caller may drop any call before it completes; a dropped [`Transaction`] wrote nothing.
#[async_trait]
pub trait Storage: fmt::Debug + Send + Sync + 'static {
    /// Starts a transaction. Between its first read and its commit no other transaction may
    /// write what it read (a lock held to the commit, a database's serializable transaction,
    /// `SELECT … FOR UPDATE`), and its writes happen at its commit, all of them or none: a
    /// transaction dropped uncommitted wrote nothing. [`LogStore`] reads before it writes in
    /// every transaction, so a transaction never needs to read its own writes.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn begin(&self) -> Result<Box<dyn Transaction + '_>, StoreError>;

    /// Deletes session `session_id`, its head and every record of it, at once; answers whether
    /// it had a head.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn delete(&self, session_id: &str) -> Result<bool, StoreError>;

    /// The ids of the sessions that have a head, sorted.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn list(&self) -> Result<Vec<String>, StoreError>;

    /// The ids of the records written `pending` with a [resumable](crate::Lease::resumable)
    /// lease and not finished since: those whose turns another process may
    /// [take over](crate::SessionStore::take_over) should their own die. Keep them apart (an
    /// index, a set updated as [`Transaction::put`] writes) for this to stay cheap; a record
    /// answered that is not such a turn any more is passed over. Empty by default: no turn
    /// of this storage is ever taken over.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn resumable(&self) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    /// Where running turns keep what they stream for other processes, if anywhere: see
    /// [`SessionStore::streams`](crate::SessionStore::streams).
    fn streams(&self) -> Option<&dyn Streams> {
        None
    }
}

/// One transaction of a [`Storage`]: see [`Storage::begin`].
#[async_trait]
pub trait Transaction: Send {
    /// The id of the head of session `session_id`, or `None` if there is no such session.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn head(&mut self, session_id: &str) -> Result<Option<String>, StoreError>;

    /// Record `id`, or `None`.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn record(&mut self, id: &str) -> Result<Option<Record>, StoreError>;

    /// What record `id` adds to the state, or `None`.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn body(&mut self, id: &str) -> Result<Option<Body>, StoreError>;

    /// The bodies of `id` and of its ancestors back to the nearest checkpoint (or the first
    /// snapshot), that one first: what its state is replayed from. By default,
    /// [`record`](Self::record) and [`body`](Self::body) up the lineage; a database does it
    /// in one query.
    ///
    /// # Errors
    ///
    /// The storage's, or a backend error for a lineage with a record missing.
    async fn lineage(&mut self, id: &str) -> Result<Vec<Body>, StoreError> {
        let mut bodies = Vec::new();
        let mut next = Some(id.to_owned());
        while let Some(id) = next {
            let body = self.body(&id).await?.ok_or_else(|| missing(&id))?;
            next = match body.checkpoint {
                Some(_) => None,
                None => {
                    let record = self.record(&id).await?.ok_or_else(|| missing(&id))?;
                    record.entry.parent_id
                }
            };
            bodies.push(body);
        }
        bodies.reverse();
        Ok(bodies)
    }

    /// Writes `record`, new or over the one of its id, with `body`; `None` keeps the body it
    /// has.
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn put(&mut self, record: Record, body: Option<Body>) -> Result<(), StoreError>;

    /// Makes `id` the head of session `session_id` (which has a head from then on).
    ///
    /// # Errors
    ///
    /// The storage's.
    async fn set_head(&mut self, session_id: &str, id: &str) -> Result<(), StoreError>;

    /// Writes what the transaction wrote, all of it.
    ///
    /// # Errors
    ///
    /// The storage's; nothing was written then.
    async fn commit(self: Box<Self>) -> Result<(), StoreError>;
}

fn missing(id: &str) -> StoreError {
    StoreError::backend(format!(
        "snapshot {id} of a lineage is missing from the storage"
    ))
}
