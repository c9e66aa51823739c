//! [`LogStore`]: the session store over any [`Storage`], each call one transaction that reads,
//! asks the rules, and writes.

use std::time::SystemTime;

use async_trait::async_trait;
use bidi_core::NotFound;
use serde_json::Value;

use super::{Body, Record, Storage, Transaction};
use crate::change::Change;
use crate::rules::{self, Node};
use crate::store::{
    Append, Entry, Finish, Lease, Parent, Renewal, Replay, SessionStore, Snapshot, Status,
    StoreError, epoch_ms, new_id, now_ms,
};
use crate::streams::Streams;

/// The [`SessionStore`] over storage `S`: see the [module](super).
#[derive(Debug, Default)]
pub struct LogStore<S> {
    storage: S,
}

impl<S: Storage> LogStore<S> {
    /// The session store over `storage`.
    pub fn new(storage: S) -> Self {
        Self { storage }
    }

    /// The storage under it.
    pub fn storage(&self) -> &S {
        &self.storage
    }
}

impl Record {
    /// The entry a reader sees: a pending record whose lease lapsed reads as expired.
    #[must_use]
    pub fn entry(&self) -> Entry {
        let entry = &self.entry;
        Entry::new(
            entry.id.clone(),
            entry.session_id.clone(),
            entry.parent_id.clone(),
            entry.version,
            entry.status,
            entry.lease.clone(),
            entry.error.clone(),
            entry.replay,
            entry.created_at,
            entry.updated_at,
        )
    }

    fn node(&self) -> Node<'_> {
        Node {
            session_id: &self.entry.session_id,
            status: self.entry.status,
            lease: self.entry.lease.as_ref(),
            has_children: self.has_children,
        }
    }
}

/// The body of a snapshot that adds `change` after a parent loaded at `parent` cost, carrying
/// `checkpoint` if given, and what loading it costs.
pub(crate) fn encode(
    parent: Option<Replay>,
    change: &Change,
    checkpoint: Option<&Value>,
) -> Result<(Body, Replay), StoreError> {
    let change = change.to_json();
    let checkpoint = checkpoint
        .map(serde_json::to_string)
        .transpose()
        .map_err(StoreError::Serialization)?;
    let replay = match &checkpoint {
        Some(whole) => Replay::checkpoint(whole.len() as u64),
        None => parent.unwrap_or_default().after(change.len() as u64),
    };
    Ok((Body { change, checkpoint }, replay))
}

/// The state at the end of a lineage, from its bodies oldest first (the first a checkpoint,
/// or a session's first snapshot).
pub(crate) fn replay(bodies: impl IntoIterator<Item = Body>) -> Result<Value, StoreError> {
    let mut state = Value::Null;
    for body in bodies {
        match body.checkpoint {
            Some(checkpoint) => {
                state = serde_json::from_str(&checkpoint).map_err(StoreError::backend)?;
            }
            None => Change::from_json(&body.change)
                .map_err(StoreError::backend)?
                .apply(&mut state)
                .map_err(StoreError::backend)?,
        }
    }
    Ok(state)
}

/// Snapshot `id` with its state, read in `tx`.
async fn snapshot(tx: &mut dyn Transaction, id: &str) -> Result<Option<Snapshot>, StoreError> {
    let Some(record) = tx.record(id).await? else {
        return Ok(None);
    };
    let state = replay(tx.lineage(id).await?)?;
    Ok(Some(Snapshot::new(record.entry(), state)))
}

#[async_trait]
impl<S: Storage> SessionStore for LogStore<S> {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let mut tx = self.storage.begin().await?;
        match tx.head(session_id).await? {
            Some(head) => snapshot(&mut *tx, &head).await,
            None => Ok(None),
        }
    }

    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        snapshot(&mut *self.storage.begin().await?, snapshot_id).await
    }

    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        let mut tx = self.storage.begin().await?;
        Ok(tx.record(snapshot_id).await?.as_ref().map(Record::entry))
    }

    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        let mut tx = self.storage.begin().await?;
        let head = tx.head(session_id).await?;
        let parent = match append.parent.id() {
            Some(id) => tx.record(id).await?,
            None => None,
        };
        if matches!(append.parent, Parent::Fork(_)) && append.checkpoint.is_none() {
            return Err(StoreError::backend(
                "a fork carries its state whole (`Append::fork`)",
            ));
        }
        let node = parent.as_ref().map(Record::node);
        rules::check_append(session_id, &append.parent, head.as_deref(), node)?;
        let (body, replay) = encode(
            parent.as_ref().map(|parent| parent.entry.replay),
            &append.change,
            append.checkpoint.as_ref(),
        )?;
        let now = SystemTime::now();
        let record = Record {
            entry: Entry {
                id: new_id(),
                session_id: session_id.to_owned(),
                parent_id: append.parent.id().map(str::to_owned),
                version: parent.as_ref().map_or(1, |parent| parent.entry.version + 1),
                status: append.status,
                lease: append.lease,
                error: None,
                replay,
                created_at: now,
                updated_at: now,
            },
            has_children: false,
        };
        let entry = record.entry();
        tx.put(record, Some(body)).await?;
        if let Some(mut parent) = parent.filter(|parent| !parent.has_children) {
            parent.has_children = true;
            tx.put(parent, None).await?;
        }
        tx.set_head(session_id, &entry.id).await?;
        tx.commit().await?;
        Ok(entry)
    }

    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        let mut tx = self.storage.begin().await?;
        let found = tx.record(snapshot_id).await?;
        let status = rules::check_finish(
            snapshot_id,
            &finish.owner,
            found.as_ref().map(Record::node),
            finish.status,
        )?;
        let Some(mut record) = found else {
            return Err(StoreError::NotFound(NotFound::new("snapshot", snapshot_id)));
        };
        let parent = match &record.entry.parent_id {
            Some(parent) => tx.record(parent).await?.map(|parent| parent.entry.replay),
            None => None,
        };
        let (body, replay) = encode(parent, &finish.change, finish.checkpoint.as_ref())?;
        let written = &mut record.entry;
        written.status = status;
        written.lease = None;
        written.error = finish.error;
        written.replay = replay;
        written.updated_at = SystemTime::now();
        let entry = record.entry();
        tx.put(record, Some(body)).await?;
        tx.commit().await?;
        Ok(entry)
    }

    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        let mut tx = self.storage.begin().await?;
        let found = tx.record(snapshot_id).await?;
        let renewal = rules::check_renew(snapshot_id, owner, found.as_ref().map(Record::node))?;
        if let (Renewal::Renewed, Some(mut record)) = (renewal, found) {
            if let Some(lease) = &mut record.entry.lease {
                lease.expires_at = expires_at;
            }
            record.entry.updated_at = SystemTime::now();
            tx.put(record, None).await?;
            tx.commit().await?;
        }
        Ok(renewal)
    }

    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        let mut tx = self.storage.begin().await?;
        let Some(mut record) = tx.record(snapshot_id).await? else {
            return Ok(None);
        };
        let (previous, new) = rules::abort(record.entry.status, record.entry.lease.as_ref());
        if let Some(status) = new {
            record.entry.status = status;
            record.entry.updated_at = SystemTime::now();
            tx.put(record, None).await?;
            tx.commit().await?;
        }
        Ok(Some(previous))
    }

    async fn stale(&self) -> Result<Vec<Entry>, StoreError> {
        let now = now_ms();
        let mut stale = Vec::new();
        for id in self.storage.resumable().await? {
            let mut tx = self.storage.begin().await?;
            let Some(record) = tx.record(&id).await? else {
                continue;
            };
            if rules::is_stale(record.node(), epoch_ms(record.entry.updated_at), now) {
                stale.push(record.entry());
            }
        }
        Ok(stale)
    }

    async fn take_over(
        &self,
        snapshot_id: &str,
        from: &str,
        to: Lease,
    ) -> Result<Entry, StoreError> {
        let mut tx = self.storage.begin().await?;
        let found = tx.record(snapshot_id).await?;
        let node = found.as_ref().map(Record::node);
        let renewed_at = found
            .as_ref()
            .map_or(0, |record| epoch_ms(record.entry.updated_at));
        rules::check_take_over(snapshot_id, from, node, renewed_at, now_ms())?;
        let Some(mut record) = found else {
            return Err(StoreError::NotFound(NotFound::new("snapshot", snapshot_id)));
        };
        rules::hand_over(record.entry.lease.as_mut(), to);
        record.entry.updated_at = SystemTime::now();
        let entry = record.entry();
        tx.put(record, None).await?;
        tx.commit().await?;
        Ok(entry)
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        self.storage.delete(session_id).await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.storage.list().await
    }

    fn streams(&self) -> Option<&dyn Streams> {
        self.storage.streams()
    }
}
