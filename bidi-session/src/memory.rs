//! [`MemoryStore`]: sessions in memory, with every snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use bidi_core::NotFound;
use serde_json::Value;
use uuid::Uuid;

use crate::change::Change;
use crate::rules::{self, Node};
use crate::store::{
    Append, Entry, Finish, Lease, Parent, Renewal, Replay, SessionStore, Snapshot, Status,
    StoreError, epoch_ms, now_ms,
};

/// Snapshot ids are the store's own random UUIDs, kept as numbers: a fast hash serves them.
type Ids<V> = HashMap<u128, V, foldhash::fast::RandomState>;

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
    index: Index,
    uses: Uses,
    /// The sessions whose head may be a turn another may take over (a pending snapshot
    /// written with a resumable lease): what [`SessionStore::stale`] looks at.
    resumable: BTreeSet<Arc<str>>,
}

/// Where snapshots are, for the calls that name one by its id. A session's snapshots are
/// indexed at the first such call after they were written, not as they are written: most are
/// never named (a session written turn after turn names only its head, which its log knows).
#[derive(Debug, Default)]
struct Index {
    places: Ids<Place>,
    /// The sessions with snapshots not indexed yet.
    behind: BTreeSet<Arc<str>>,
}

impl Index {
    /// Snapshot `snapshot_id`: its session's log (in `sessions`) and its place in it.
    fn find<'a>(
        &mut self,
        sessions: &'a mut BTreeMap<String, Log>,
        snapshot_id: &str,
    ) -> Option<(&'a mut Log, usize)> {
        let id = parse_id(snapshot_id)?;
        if !self.places.contains_key(&id) {
            for name in std::mem::take(&mut self.behind) {
                if let Some(log) = sessions.get_mut(&*name) {
                    log.index_into(&mut self.places);
                }
            }
        }
        let place = self.places.get(&id)?;
        Some((sessions.get_mut(&*place.session)?, place.at))
    }
}

/// With a session limit: the sessions by their last use.
#[derive(Debug, Default)]
struct Uses {
    /// The sessions by the tick of their last use, least recent first.
    by_tick: BTreeMap<u64, String>,
    tick: u64,
}

impl Uses {
    /// Marks `log` used now.
    fn touch(&mut self, log: &mut Log) {
        if log.used != 0 && log.used == self.tick {
            return; // the most recently used already: a session written turn after turn
        }
        // The id moves to its new place: no allocation per use.
        let id = self
            .by_tick
            .remove(&log.used)
            .unwrap_or_else(|| log.name.to_string());
        self.tick += 1;
        log.used = self.tick;
        self.by_tick.insert(self.tick, id);
    }
}

/// Where a snapshot is: its session, and its place in the session's log.
#[derive(Debug)]
struct Place {
    session: Arc<str>,
    at: usize,
}

/// One session: its snapshots in the order they were written, and the state of one of them.
#[derive(Debug)]
struct Log {
    /// The session id, shared with the [`Place`]s of its snapshots.
    name: Arc<str>,
    nodes: Vec<Stored>,
    /// How many of the first `nodes` are in the [`Index`].
    indexed: usize,
    head: usize,
    /// The head's id as written: what the next append names, compared without parsing it.
    head_id: String,
    /// The state at snapshot `kept_at`: the head's, or an ancestor's when the snapshots after
    /// it were written as changes not applied yet. A write stores its change as it comes (a
    /// turn costs what it adds); the state catches up when it is read.
    kept: Value,
    kept_at: usize,
    /// The state at the first snapshot, the root of the tree, from which the others replay
    /// their changes; `None` while the root's state is `kept` (`kept_at` is the root).
    root_state: Option<Value>,
    /// The root's parent, once the root is a head kept alone past the snapshot limit: its
    /// entry names it still.
    root_parent: Option<u128>,
    /// The tick of its last use, with a session limit.
    used: u64,
}

/// One snapshot. Its entry is built when it is read: a write keeps no strings but its
/// change's (and a pending one's lease), in two cache lines.
#[derive(Debug)]
struct Stored {
    id: u128,
    /// Where its parent is in the log: `None` for the root alone.
    parent: Option<usize>,
    version: u64,
    status: Status,
    lease: Option<Box<Lease>>,
    error: Option<Box<Value>>,
    created_at: SystemTime,
    updated_at: SystemTime,
    change: Change,
    has_children: bool,
}

/// Snapshot id `id` as the store writes it: a hyphenated lowercase UUID.
fn format_id(id: u128) -> String {
    let mut text = String::with_capacity(36);
    write_id(id, &mut text);
    text
}

/// Writes snapshot id `id` over `text`, in its allocation.
fn write_id(id: u128, text: &mut String) {
    let mut buffer = Uuid::encode_buffer();
    text.clear();
    text.push_str(Uuid::from_u128(id).hyphenated().encode_lower(&mut buffer));
}

/// The snapshot id `id` names, if it is spelled as the store writes them: another spelling of
/// the same UUID names no snapshot, as with any other string.
fn parse_id(id: &str) -> Option<u128> {
    let bytes: &[u8; 36] = id.as_bytes().try_into().ok()?;
    if [8, 13, 18, 23].into_iter().any(|i| bytes[i] != b'-') {
        return None;
    }
    // Without a branch per digit: ids are random, so such a branch would be mispredicted.
    let mut value = 0u128;
    let mut invalid = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        if !matches!(i, 8 | 13 | 18 | 23) {
            let digit = HEX_DIGITS[usize::from(byte)];
            invalid |= digit;
            value = value << 4 | u128::from(digit & 0x0f);
        }
    }
    (invalid & 0xf0 == 0).then_some(value)
}

/// The value of each lowercase hexadecimal digit; `0xff` for any other byte.
const HEX_DIGITS: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut digit = 0;
    while digit < 16 {
        table[b"0123456789abcdef"[digit as usize] as usize] = digit;
        digit += 1;
    }
    table
};

impl Log {
    fn new(name: &str) -> Self {
        Self {
            name: Arc::from(name),
            nodes: Vec::new(),
            indexed: 0,
            head: 0,
            head_id: String::with_capacity(36),
            kept: Value::Null,
            kept_at: 0,
            root_state: None,
            root_parent: None,
            used: 0,
        }
    }

    fn node(&self, at: usize) -> Node<'_> {
        let stored = &self.nodes[at];
        Node {
            session_id: &self.name,
            status: stored.status,
            lease: stored.lease.as_deref(),
            has_children: stored.has_children,
        }
    }

    /// Snapshot `at` as a reader sees it (a pending one whose lease lapsed is expired).
    fn entry(&self, at: usize) -> Entry {
        let stored = &self.nodes[at];
        let parent_id = match stored.parent {
            Some(parent) => Some(self.nodes[parent].id),
            None => self.root_parent,
        };
        self.entry_named(at, format_id(stored.id), parent_id.map(format_id))
    }

    /// [`entry`](Self::entry), with its id and its parent's spelled out already.
    fn entry_named(&self, at: usize, id: String, parent_id: Option<String>) -> Entry {
        let stored = &self.nodes[at];
        Entry::new(
            id,
            &*self.name,
            parent_id,
            stored.version,
            stored.status,
            stored.lease.as_deref().cloned(),
            stored.error.as_deref().cloned(),
            Replay::default(),
            stored.created_at,
            stored.updated_at,
        )
    }

    /// The state at snapshot `at`: the head's caught up, any other's replayed from the root.
    fn state_at(&mut self, at: usize) -> Result<Value, StoreError> {
        if at == self.head {
            self.catch_up()?;
            return Ok(self.kept.clone());
        }
        self.replayed(at)
    }

    /// The state at snapshot `at`, replayed from the root (or the kept state, if it is `at`'s).
    fn replayed(&self, at: usize) -> Result<Value, StoreError> {
        if at == self.kept_at {
            return Ok(self.kept.clone());
        }
        let root = self.root_state.as_ref().unwrap_or(&self.kept);
        let mut state = root.clone();
        // The root's own change is in the root's state already.
        for i in self.lineage(at, 0)? {
            self.nodes[i]
                .change
                .replay(&mut state)
                .map_err(StoreError::backend)?;
        }
        Ok(state)
    }

    /// The snapshots after `ancestor` down to `at`, in the order they were written.
    fn lineage(&self, at: usize, ancestor: usize) -> Result<Vec<usize>, StoreError> {
        let mut lineage = Vec::new();
        let mut cursor = at;
        while cursor != ancestor {
            lineage.push(cursor);
            cursor = self.nodes[cursor]
                .parent
                .ok_or_else(|| StoreError::backend("a snapshot's lineage is broken"))?;
        }
        lineage.reverse();
        Ok(lineage)
    }

    /// Brings the kept state to the head's, applying the changes written since.
    fn catch_up(&mut self) -> Result<(), StoreError> {
        if self.kept_at == self.head {
            return Ok(());
        }
        if self.root_state.is_none() {
            self.root_state = Some(self.kept.clone()); // the root's, about to move on
        }
        for at in self.lineage(self.head, self.kept_at)? {
            if let Err(error) = self.nodes[at].change.replay(&mut self.kept) {
                // Partly applied: start again from the root at the next read.
                self.kept = self.root_state.clone().unwrap_or_default();
                self.kept_at = 0;
                return Err(StoreError::backend(error));
            }
            self.kept_at = at;
        }
        Ok(())
    }

    /// Keeps `state` as snapshot `at`'s (the root's stays where it is).
    fn keep(&mut self, at: usize, state: Value) {
        if self.root_state.is_none() && at != 0 {
            self.root_state = Some(std::mem::take(&mut self.kept));
        }
        self.kept = state;
        self.kept_at = at;
    }

    fn snapshot(&mut self, at: usize) -> Result<Snapshot, StoreError> {
        let state = self.state_at(at)?;
        Ok(Snapshot::new(self.entry(at), state))
    }

    /// The state after `change` at `parent_at` (or `checkpoint`, the state written whole), or
    /// `None` when the parent is the head: the change is then stored as it is, and the state
    /// catches up when it is read (a turn costs what it adds).
    fn state_after(
        log: Option<&Self>,
        parent_at: Option<usize>,
        checkpoint: Option<Value>,
        change: &Change,
    ) -> Result<Option<Value>, StoreError> {
        let mut state = match (checkpoint, parent_at, log) {
            (Some(state), _, _) => return Ok(Some(state)),
            (None, Some(at), Some(log)) if at == log.head => return Ok(None),
            (None, Some(at), Some(log)) => log.replayed(at)?,
            (None, _, _) => Value::Null,
        };
        change.apply(&mut state).map_err(StoreError::backend)?;
        Ok(Some(state))
    }

    /// Makes `stored` the head, with `state` (or its parent's with its change, if `None`).
    fn push(&mut self, stored: Stored, state: Option<Value>) {
        let at = self.nodes.len();
        if let Some(state) = state {
            self.keep(at, state);
        }
        if let Some(parent) = stored.parent {
            self.nodes[parent].has_children = true;
        }
        self.head = at;
        write_id(stored.id, &mut self.head_id);
        self.nodes.push(stored);
    }

    /// Adds the snapshots not indexed yet to `places`.
    fn index_into(&mut self, places: &mut Ids<Place>) {
        for (at, node) in self.nodes.iter().enumerate().skip(self.indexed) {
            let session = Arc::clone(&self.name);
            places.insert(node.id, Place { session, at });
        }
        self.indexed = self.nodes.len();
    }

    /// Takes the log's indexed snapshots out of `places`.
    fn unindex(&self, places: &mut Ids<Place>) {
        for node in &self.nodes[..self.indexed] {
            places.remove(&node.id);
        }
    }

    /// Keeps only the head if the log holds more than `max` snapshots: the head becomes its
    /// first snapshot, with its state whole. Never while the head is pending (its state is not
    /// final).
    fn compact(&mut self, max: Option<usize>, places: &mut Ids<Place>) {
        let Some(max) = max else { return };
        if self.nodes.len() <= max || self.nodes[self.head].lease.is_some() {
            return;
        }
        if self.catch_up().is_err() {
            return; // a change that does not apply: kept as written, reads fail on it
        }
        // A log whose head is not indexed is behind (in `Index::behind`) already.
        let head_indexed = self.head < self.indexed;
        self.unindex(places);
        let parent = self.nodes[self.head].parent;
        self.root_parent = parent.map(|parent| self.nodes[parent].id);
        let mut head = self.nodes.swap_remove(self.head);
        self.nodes.clear();
        head.parent = None;
        head.has_children = false;
        self.root_state = None; // the kept state, the head's, is the new root's
        self.kept_at = 0;
        self.head = 0;
        self.nodes.push(head);
        self.indexed = 0;
        if head_indexed {
            self.index_into(places);
        }
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
        if self.max_sessions.is_some()
            && let Some(log) = inner.sessions.get_mut(session_id)
        {
            inner.uses.touch(log);
        }
    }

    /// Drops the least recently used sessions past the limit.
    fn bound(&self, inner: &mut Inner) {
        let Some(max) = self.max_sessions else {
            return;
        };
        // The session just written is the most recently used: never the one dropped.
        while inner.sessions.len() > max {
            let Some((_, oldest)) = inner.uses.by_tick.pop_first() else {
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
                self.uses.by_tick.remove(&log.used);
                log.unindex(&mut self.index.places);
                self.index.behind.remove(session_id);
                true
            }
            None => false,
        }
    }

    /// Snapshot `snapshot_id`: its session's log and its place in it.
    fn find(&mut self, snapshot_id: &str) -> Option<(&mut Log, usize)> {
        let (log, at) = self.index.find(&mut self.sessions, snapshot_id)?;
        Some((log, at))
    }
}

/// Where snapshot `id` is in `log`. An append names the head, found without a lookup; any
/// other snapshot is looked up once the log is indexed.
fn position(log: &mut Log, places: &mut Ids<Place>, id: &str) -> Option<usize> {
    if id == log.head_id {
        return Some(log.head);
    }
    log.index_into(places);
    let place = places.get(&parse_id(id)?)?;
    (*place.session == *log.name).then_some(place.at)
}

/// Checks a fork of snapshot `from` into new session `session_id` against the rules, and
/// marks `from` as followed: its id and version.
fn forked(
    inner: &mut Inner,
    session_id: &str,
    from: &str,
    append: &Append,
) -> Result<(u128, u64), StoreError> {
    let head = inner
        .sessions
        .get(session_id)
        .map(|log| log.head_id.clone());
    if append.checkpoint.is_none() {
        return Err(StoreError::backend(
            "a fork carries its state whole (`Append::fork`)",
        ));
    }
    let found = inner.find(from);
    let node = found.as_ref().map(|(log, at)| log.node(*at));
    rules::check_append(session_id, &append.parent, head.as_deref(), node)?;
    let Some((log, at)) = found else {
        return Err(StoreError::NotFound(NotFound::new("snapshot", from)));
    };
    let stored = &mut log.nodes[at];
    stored.has_children = true;
    Ok((stored.id, stored.version))
}

/// Checks `append` to `log` (`None`: a new session) against the rules: where its parent is in
/// the log, if it has one.
fn check(
    log: Option<&mut Log>,
    places: &mut Ids<Place>,
    session_id: &str,
    append: &Append,
) -> Result<Option<usize>, StoreError> {
    // A fork names another session's snapshot: checked by `forked`.
    if matches!(append.parent, Parent::Fork(_)) {
        return Ok(None);
    }
    let (log, parent_at) = match (log, append.parent.id()) {
        (Some(log), Some(id)) => {
            let at = position(log, places, id);
            (Some(&*log), at)
        }
        (log, _) => (log.map(|log| &*log), None),
    };
    let head = log.map(|log| log.head_id.as_str());
    let parent_node = parent_at.and_then(|at| log.map(|log| log.node(at)));
    rules::check_append(session_id, &append.parent, head, parent_node)?;
    Ok(parent_at)
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.with(|inner| {
            self.touch(inner, session_id);
            let Some(log) = inner.sessions.get_mut(session_id) else {
                return Ok(None);
            };
            log.snapshot(log.head).map(Some)
        })
    }

    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.with(|inner| {
            let Some((log, at)) = inner.find(snapshot_id) else {
                return Ok(None);
            };
            let (session_id, snapshot) = (Arc::clone(&log.name), log.snapshot(at));
            self.touch(inner, &session_id);
            snapshot.map(Some)
        })
    }

    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        Ok(self.with(|inner| {
            let (log, at) = inner.find(snapshot_id)?;
            Some(log.entry(at))
        }))
    }

    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        let now = SystemTime::now();
        self.with(|inner| {
            let fork = match &append.parent {
                Parent::Fork(from) => Some(forked(inner, session_id, from, &append)?),
                _ => None,
            };
            let mut log = inner.sessions.get_mut(session_id);
            let places = &mut inner.index.places;
            let parent_at = check(log.as_deref_mut(), places, session_id, &append)?;
            let Append {
                parent,
                change,
                checkpoint,
                status,
                lease,
            } = append;
            let state = Log::state_after(log.as_deref(), parent_at, checkpoint, &change)?;
            let parent_node = parent_at.and_then(|at| Some(&log.as_deref()?.nodes[at]));
            let stored = Stored {
                id: Uuid::new_v4().as_u128(),
                parent: parent_at,
                version: match (parent_node, fork) {
                    (Some(node), _) => node.version + 1,
                    (None, Some((_, version))) => version + 1,
                    (None, None) => 1,
                },
                status,
                lease: lease.map(Box::new),
                error: None,
                created_at: now,
                updated_at: now,
                change,
                has_children: false,
            };
            let log = match log {
                Some(log) => log,
                None => inner
                    .sessions
                    .entry(session_id.to_owned())
                    .or_insert_with(|| Log::new(session_id)),
            };
            if stored
                .lease
                .as_ref()
                .is_some_and(|lease| lease.resume.is_some())
            {
                inner.resumable.insert(Arc::clone(&log.name));
            }
            log.push(stored, state);
            if let Some((from, _)) = fork {
                log.root_parent = Some(from);
            }
            if log.indexed + 1 == log.nodes.len() {
                inner.index.behind.insert(Arc::clone(&log.name));
            }
            // The parent's id as the writer named it: ids match only as the store spells them.
            let parent_id = match parent {
                Parent::None => None,
                Parent::Head(id) | Parent::Branch(id) | Parent::Fork(id) => Some(id),
            };
            let entry = log.entry_named(log.head, log.head_id.clone(), parent_id);
            if status != Status::Pending {
                log.compact(self.max_snapshots, &mut inner.index.places);
            }
            if self.max_sessions.is_some() {
                inner.uses.touch(log);
            }
            self.bound(inner);
            Ok(entry)
        })
    }

    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        let now = SystemTime::now();
        self.with(|inner| {
            let found = inner.index.find(&mut inner.sessions, snapshot_id);
            let node = found.as_ref().map(|(log, at)| log.node(*at));
            let status = rules::check_finish(snapshot_id, &finish.owner, node, finish.status)?;
            let Some((log, at)) = found else {
                return Err(StoreError::not_found(snapshot_id));
            };
            // Nothing follows a held snapshot: it is the head.
            match finish.checkpoint {
                Some(state) => log.keep(at, state),
                // The pending snapshot's state was read, and it is its parent's: it goes on
                // with the change.
                None if log.kept_at == at && log.nodes[at].change.is_empty() => finish
                    .change
                    .apply(&mut log.kept)
                    .map_err(StoreError::backend)?,
                // The state read was the running turn's own view (its change at the start):
                // the finish's change is made of the parent's state.
                None if log.kept_at == at => {
                    let parent = log.nodes[at].parent;
                    let mut state = match parent {
                        Some(parent) => log.replayed(parent)?,
                        None => Value::Null,
                    };
                    finish
                        .change
                        .apply(&mut state)
                        .map_err(StoreError::backend)?;
                    log.keep(at, state);
                }
                // Its parent's state is kept: the change is applied when it is read.
                None => {}
            }
            let stored = &mut log.nodes[at];
            stored.change = finish.change;
            stored.status = status;
            stored.lease = None;
            stored.error = finish.error.map(Box::new);
            stored.updated_at = now;
            let entry = log.entry(at);
            log.compact(self.max_snapshots, &mut inner.index.places);
            Ok(entry)
        })
    }

    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        self.with(|inner| {
            let found = inner.index.find(&mut inner.sessions, snapshot_id);
            let node = found.as_ref().map(|(log, at)| log.node(*at));
            let renewal = rules::check_renew(snapshot_id, owner, node)?;
            if let (Renewal::Renewed, Some((log, at))) = (renewal, found) {
                let stored = &mut log.nodes[at];
                if let Some(lease) = &mut stored.lease {
                    lease.expires_at = expires_at;
                }
                stored.updated_at = SystemTime::now();
            }
            Ok(renewal)
        })
    }

    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        Ok(self.with(|inner| {
            let (log, at) = inner.index.find(&mut inner.sessions, snapshot_id)?;
            let stored = &mut log.nodes[at];
            let (previous, new) = rules::abort(stored.status, stored.lease.as_deref());
            if let Some(status) = new {
                stored.status = status;
                stored.updated_at = SystemTime::now();
            }
            Some(previous)
        }))
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        Ok(self.with(|inner| inner.remove(session_id)))
    }

    async fn stale(&self) -> Result<Vec<Entry>, StoreError> {
        let now = now_ms();
        // Nothing follows a pending snapshot: a stale one is its session's head. Sessions
        // whose head is not a resumable turn any more are forgotten.
        Ok(self.with(|inner| {
            let mut stale = Vec::new();
            let sessions = &inner.sessions;
            inner.resumable.retain(|name| {
                let Some(log) = sessions.get(&**name) else {
                    return false;
                };
                let head = &log.nodes[log.head];
                let resumable = head.lease.as_ref().is_some_and(|l| l.resume.is_some());
                if rules::is_stale(log.node(log.head), epoch_ms(head.updated_at), now) {
                    stale.push(log.entry(log.head));
                }
                resumable && head.status == Status::Pending
            });
            stale
        }))
    }

    async fn take_over(
        &self,
        snapshot_id: &str,
        from: &str,
        to: Lease,
    ) -> Result<Entry, StoreError> {
        let now = SystemTime::now();
        self.with(|inner| {
            let found = inner.index.find(&mut inner.sessions, snapshot_id);
            let node = found.as_ref().map(|(log, at)| log.node(*at));
            let renewed_at = found
                .as_ref()
                .map_or(0, |(log, at)| epoch_ms(log.nodes[*at].updated_at));
            rules::check_take_over(snapshot_id, from, node, renewed_at, epoch_ms(now))?;
            let Some((log, at)) = found else {
                return Err(StoreError::not_found(snapshot_id));
            };
            let stored = &mut log.nodes[at];
            rules::hand_over(stored.lease.as_deref_mut(), to);
            stored.updated_at = now;
            Ok(log.entry(at))
        })
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.with(|inner| inner.sessions.keys().cloned().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot written turn after turn takes two cache lines of the log, no more, with
    /// serde_json's `Value` of 32 bytes (a change may hold one); features of serde_json that
    /// grow it (`preserve_order`, which another crate of a build may turn on) grow it by as much.
    #[test]
    fn a_snapshot_fits_in_two_cache_lines() {
        let bound = 128 + size_of::<Value>().saturating_sub(32).next_multiple_of(16);
        assert!(
            size_of::<Stored>() <= bound,
            "{} bytes: change {}, value {}, patch {}, time {}",
            size_of::<Stored>(),
            size_of::<Change>(),
            size_of::<Value>(),
            size_of::<json_patch::Patch>(),
            size_of::<SystemTime>()
        );
    }
}
