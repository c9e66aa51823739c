//! [`MemoryStore`]: sessions in memory, with every snapshot.

use std::collections::{BTreeMap, HashMap};

/// Snapshot ids are the store's own random UUIDs: a fast hash serves them.
type Ids<V> = HashMap<String, V, foldhash::fast::RandomState>;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use serde_json::Value;

use crate::change::Change;
use crate::rules::{self, Node};
use crate::store::{
    Append, Entry, Finish, Parent, Renewal, Replay, SessionStore, Snapshot, Status, StoreError,
    new_snapshot_id,
};

/// Sessions in memory. The reference the other stores are tested against, and (bounded) the
/// default store of agents. Nothing survives the process.
///
/// Every snapshot is kept as its change, and each session's head as its state, so a turn costs
/// what it adds and a session's memory grows with what it holds, not with its turns. Unbounded
/// in sessions unless told otherwise: a store that lives as long as a server should bound them
/// ([`with_max_sessions`](Self::with_max_sessions)).
///
/// ```
/// use bidi_session::{Append, MemoryStore, SessionStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let store = MemoryStore::new().with_max_sessions(2);
/// store.append("a", Append::create(json!(1))).await?;
/// store.append("b", Append::create(json!(2))).await?;
/// store.load("a").await?; // "a" is now used more recently than "b"
/// store.append("c", Append::create(json!(3))).await?; // a third session: "b" goes
/// assert_eq!(store.list().await?, ["a", "c"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_sessions: Option<usize>,
    max_snapshots: Option<usize>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: BTreeMap<String, Log>,
    /// Which session each snapshot belongs to.
    owners: Ids<String>,
    /// With a session limit: the sessions by their last use (a tick), least recent first.
    by_use: BTreeMap<u64, String>,
    tick: u64,
}

/// One session: its snapshots in the order they were written, and its head's state.
#[derive(Debug)]
struct Log {
    nodes: Vec<Stored>,
    index: Ids<usize>,
    head: usize,
    head_state: Value,
    /// The tick of its last use, with a session limit.
    used: u64,
}

#[derive(Debug)]
struct Stored {
    entry: Entry,
    parent: Option<usize>,
    change: Change,
    /// The state whole: kept for a session's first snapshot only (the head's state is kept
    /// apart, and older snapshots replay their changes from the first).
    checkpoint: Option<Value>,
    has_children: bool,
}

impl Stored {
    fn node(&self) -> Node<'_> {
        Node {
            session_id: &self.entry.session_id,
            status: self.entry.status,
            lease: self.entry.lease.as_ref(),
            has_children: self.has_children,
        }
    }

    /// The entry as a reader sees it (a pending one whose lease lapsed is expired).
    fn read(&self) -> Entry {
        let e = &self.entry;
        Entry::new(
            e.id.clone(),
            e.session_id.clone(),
            e.parent_id.clone(),
            e.version,
            e.status,
            e.lease.clone(),
            e.error.clone(),
            e.replay,
            e.created_at,
            e.updated_at,
        )
    }
}

impl Log {
    /// The state at snapshot `at`: the head's as kept, any other's replayed from the first.
    fn state_at(&self, at: usize) -> Result<Value, StoreError> {
        if at == self.head {
            return Ok(self.head_state.clone());
        }
        let mut lineage = vec![at];
        let mut cursor = at;
        while self.nodes[cursor].checkpoint.is_none() {
            let Some(parent) = self.nodes[cursor].parent else {
                break;
            };
            lineage.push(parent);
            cursor = parent;
        }
        let mut state = Value::Null;
        for &i in lineage.iter().rev() {
            let node = &self.nodes[i];
            match &node.checkpoint {
                Some(checkpoint) => state.clone_from(checkpoint),
                None => node.change.apply(&mut state).map_err(StoreError::backend)?,
            }
        }
        Ok(state)
    }

    fn snapshot(&self, at: usize) -> Result<Snapshot, StoreError> {
        Ok(Snapshot::new(self.nodes[at].read(), self.state_at(at)?))
    }
}

impl MemoryStore {
    /// An empty store, unbounded.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps at most `sessions` sessions (at least 1): creating one more drops the least
    /// recently used (loaded or written) with all its snapshots, as if it had been deleted.
    ///
    /// A writer still holding a dropped session finds it gone: its next append is a
    /// [`StoreError::Conflict`] with `actual: None`, which
    /// [`Session::update`](crate::Session::update) reports as [`StoreError::NotFound`].
    #[must_use]
    pub fn with_max_sessions(mut self, sessions: usize) -> Self {
        self.max_sessions = Some(sessions.max(1));
        self
    }

    /// Keeps at most `snapshots` snapshots of each session (at least 1): when a session holds
    /// more, only its head is kept, as its first snapshot (its state written whole). Older
    /// snapshots then load as `None` and cannot be branched from. Memory stays bounded however
    /// many turns a session takes, at the cost of copying the head's state once every
    /// `snapshots` turns.
    #[must_use]
    pub fn with_max_snapshots(mut self, snapshots: usize) -> Self {
        self.max_snapshots = Some(snapshots.max(1));
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
        let Some(log) = inner.sessions.get_mut(session_id) else {
            return;
        };
        if log.used != 0 && log.used == inner.tick {
            return; // the most recently used already: a session written turn after turn
        }
        // The id moves to its new place: no allocation per use.
        let id = inner
            .by_use
            .remove(&log.used)
            .unwrap_or_else(|| session_id.to_owned());
        inner.tick += 1;
        log.used = inner.tick;
        inner.by_use.insert(inner.tick, id);
    }

    /// Drops the least recently used sessions past the limit.
    fn bound(&self, inner: &mut Inner) {
        let Some(max) = self.max_sessions else {
            return;
        };
        // The session just written is the most recently used: never the one dropped.
        while inner.sessions.len() > max {
            let Some((_, oldest)) = inner.by_use.pop_first() else {
                break;
            };
            inner.remove(&oldest);
        }
    }
}

impl Inner {
    fn remove(&mut self, session_id: &str) -> bool {
        match self.sessions.remove(session_id) {
            Some(log) => {
                self.by_use.remove(&log.used);
                for node in &log.nodes {
                    self.owners.remove(&node.entry.id);
                }
                true
            }
            None => false,
        }
    }

    /// Keeps only the head of `session_id` if it holds more than `max` snapshots: the head
    /// becomes its first snapshot, with its state whole. Never while the head is pending (its
    /// state is not final).
    fn compact(&mut self, session_id: &str, max: Option<usize>) {
        let Some(max) = max else { return };
        let Some(log) = self.sessions.get_mut(session_id) else {
            return;
        };
        if log.nodes.len() <= max || log.nodes[log.head].entry.lease.is_some() {
            return;
        }
        let mut head = log.nodes.swap_remove(log.head);
        for node in log.nodes.drain(..) {
            self.owners.remove(&node.entry.id);
        }
        head.parent = None;
        head.has_children = false;
        head.checkpoint = Some(log.head_state.clone());
        log.index.clear();
        log.index.insert(head.entry.id.clone(), 0);
        log.head = 0;
        log.nodes.push(head);
    }

    /// Snapshot `snapshot_id`: its session's log and its place in it.
    fn find_mut(&mut self, snapshot_id: &str) -> Option<(&mut Log, usize)> {
        let session_id = self.owners.get(snapshot_id)?;
        let log = self.sessions.get_mut(session_id)?;
        let at = *log.index.get(snapshot_id)?;
        Some((log, at))
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.with(|inner| {
            self.touch(inner, session_id);
            let Some(log) = inner.sessions.get(session_id) else {
                return Ok(None);
            };
            log.snapshot(log.head).map(Some)
        })
    }

    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.with(|inner| {
            let Some(session_id) = inner.owners.get(snapshot_id).cloned() else {
                return Ok(None);
            };
            self.touch(inner, &session_id);
            let Some(log) = inner.sessions.get(&session_id) else {
                return Ok(None);
            };
            let Some(&at) = log.index.get(snapshot_id) else {
                return Ok(None);
            };
            log.snapshot(at).map(Some)
        })
    }

    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        Ok(self.with(|inner| {
            let (log, at) = inner.find_mut(snapshot_id)?;
            Some(log.nodes[at].read())
        }))
    }

    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        let now = SystemTime::now();
        self.with(|inner| {
            let log = inner.sessions.get(session_id);
            let head = log.map(|log| log.nodes[log.head].entry.id.as_str());
            let parent_at = append
                .parent
                .id()
                .and_then(|id| log.and_then(|log| log.index.get(id).copied()));
            let parent_node = parent_at.and_then(|at| log.map(|log| log.nodes[at].node()));
            rules::check_append(session_id, &append.parent, head, parent_node)?;
            let Append {
                parent,
                change,
                checkpoint,
                status,
                lease,
            } = append;
            let id = new_snapshot_id();
            let (parent_id, version) = match (parent_at, log) {
                (Some(at), Some(log)) => (
                    Some(log.nodes[at].entry.id.clone()),
                    log.nodes[at].entry.version + 1,
                ),
                _ => (None, 1),
            };
            // The new head's state: the checkpoint if given, else the parent's with the change;
            // after the head, the change applies in place (a turn costs what it adds).
            let state = match (checkpoint, parent_at, log) {
                (Some(state), _, _) => Some(state),
                (None, Some(at), Some(log)) if at == log.head => None,
                (None, Some(at), Some(log)) => {
                    let mut state = log.state_at(at)?;
                    change.apply(&mut state).map_err(StoreError::backend)?;
                    Some(state)
                }
                (None, _, _) => {
                    let mut state = Value::Null;
                    change.apply(&mut state).map_err(StoreError::backend)?;
                    Some(state)
                }
            };
            let entry = Entry::new(
                id.clone(),
                session_id,
                parent_id,
                version,
                status,
                lease,
                None,
                Replay::default(),
                now,
                now,
            );
            let log = inner
                .sessions
                .entry(session_id.to_owned())
                .or_insert_with(|| Log {
                    nodes: Vec::new(),
                    index: Ids::default(),
                    head: 0,
                    head_state: Value::Null,
                    used: 0,
                });
            match state {
                Some(state) => log.head_state = state,
                // Atomic: on an error the head's state is as it was.
                None => change
                    .apply(&mut log.head_state)
                    .map_err(StoreError::backend)?,
            }
            if let Some(at) = parent_at {
                log.nodes[at].has_children = true;
            }
            let stored = Stored {
                entry: entry.clone(),
                parent: parent_at,
                checkpoint: matches!(parent, Parent::None).then(|| log.head_state.clone()),
                change,
                has_children: false,
            };
            log.index.insert(id.clone(), log.nodes.len());
            log.head = log.nodes.len();
            log.nodes.push(stored);
            inner.owners.insert(id, session_id.to_owned());
            if status != Status::Pending {
                inner.compact(session_id, self.max_snapshots);
            }
            self.touch(inner, session_id);
            self.bound(inner);
            Ok(entry)
        })
    }

    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        let now = SystemTime::now();
        self.with(|inner| {
            let found = inner.find_mut(snapshot_id);
            let node = found.as_ref().map(|(log, at)| log.nodes[*at].node());
            let status = rules::check_finish(snapshot_id, &finish.owner, node, finish.status)?;
            let Some((log, at)) = found else {
                return Err(StoreError::not_found(snapshot_id));
            };
            // Nothing follows a held snapshot: it is the head.
            match finish.checkpoint {
                Some(state) => log.head_state = state,
                None => finish
                    .change
                    .apply(&mut log.head_state)
                    .map_err(StoreError::backend)?,
            }
            let stored = &mut log.nodes[at];
            stored.change = finish.change;
            stored.entry.status = status;
            stored.entry.lease = None;
            stored.entry.error = finish.error;
            stored.entry.updated_at = now;
            let read = stored.read();
            inner.compact(&read.session_id, self.max_snapshots);
            Ok(read)
        })
    }

    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        self.with(|inner| {
            let found = inner.find_mut(snapshot_id);
            let node = found.as_ref().map(|(log, at)| log.nodes[*at].node());
            let renewal = rules::check_renew(snapshot_id, owner, node)?;
            if let (Renewal::Renewed, Some((log, at))) = (renewal, found) {
                let stored = &mut log.nodes[at];
                if let Some(lease) = &mut stored.entry.lease {
                    lease.expires_at = expires_at;
                }
                stored.entry.updated_at = SystemTime::now();
            }
            Ok(renewal)
        })
    }

    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        Ok(self.with(|inner| {
            let (log, at) = inner.find_mut(snapshot_id)?;
            let stored = &mut log.nodes[at];
            let (previous, new) = rules::abort(stored.entry.status, stored.entry.lease.as_ref());
            if let Some(status) = new {
                stored.entry.status = status;
                stored.entry.updated_at = SystemTime::now();
            }
            Some(previous)
        }))
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|inner| inner.remove(session_id)))
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|inner| inner.sessions.keys().cloned().collect()))
    }
}
