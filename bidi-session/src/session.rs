//! [`Session`]: a typed view of one session in a store, written with compare-and-swap.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::change::Change;
use crate::store::{
    Append, Entry, Finish, Lease, Parent, Renewal, SessionStore, Snapshot, Status, StoreError,
};

/// How many times [`Session::update`] tries before giving up.
pub const MAX_UPDATE_ATTEMPTS: u32 = 64;

/// Waits before retry `attempt` (0-based) of a conflicting update: exponential from 50 µs, capped
/// at 12.8 ms, with ±50% jitter so writers that collided do not collide again in step.
async fn backoff(attempt: u32) {
    let base = 50u64 << attempt.min(8);
    let jitter = RandomState::new().hash_one((attempt, Instant::now())) % base;
    tokio::time::sleep(Duration::from_micros(base / 2 + jitter)).await;
}

/// One session's state, typed, backed by a [`SessionStore`].
///
/// It caches the state and the snapshot it was read at (its head). Every write appends a
/// snapshot after that head with compare-and-swap, so a writer that lost a race gets
/// [`StoreError::Conflict`] instead of overwriting; [`update`](Self::update) re-reads and
/// retries a pure mutator instead. A write stores what changed, not the state again:
/// [`commit`](Self::commit) takes the change from a writer that knows it (an agent appending
/// messages), [`update_state`](Self::update_state) finds it. Clones share the cached state.
///
/// A turn that runs a while writes a pending snapshot as it starts ([`start`](Self::start)),
/// renews its lease while it runs ([`renew`](Self::renew)) and writes what it added as it ends
/// ([`finish`](Self::finish)): other writers are refused with [`StoreError::Running`] meanwhile,
/// and any process sharing the store may [abort](SessionStore::abort) it.
pub struct Session<State> {
    id: Arc<str>,
    store: Arc<dyn SessionStore>,
    cached: Arc<Mutex<Cached<State>>>,
}

struct Cached<State> {
    state: State,
    /// In debug builds, what [`Session::take_state`] took: what `finish` checks the turn's
    /// change against.
    #[cfg(debug_assertions)]
    taken: Option<State>,
    head: Entry,
    /// The next write branches from the head instead of requiring it to be the session's: the
    /// session was loaded at a snapshot the caller named.
    branch: bool,
    /// A write was dropped before the store answered: the store may hold it or not, so the
    /// head is not known. The next write reads it again first.
    unsure: bool,
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
    /// Loads the head of `id` (its latest snapshot), or `None` if there is no such session.
    /// A head whose turn's process died (its lease lapsed) is skipped: the session is loaded
    /// at the snapshot before it, and its next write goes on from there, a branch.
    ///
    /// # Errors
    ///
    /// The store's error, or [`StoreError::InvalidState`] if the stored state is not a `State`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    pub async fn load(store: Arc<dyn SessionStore>, id: &str) -> Result<Option<Self>, StoreError> {
        let Some((snapshot, branch)) = current(&*store, id).await? else {
            return Ok(None);
        };
        Ok(Some(Self::from_snapshot(store, snapshot, branch)?))
    }

    /// Loads the session at snapshot `snapshot_id`, or `None` if there is no such snapshot.
    /// Its first write branches from that snapshot: it becomes the session's head, and the
    /// snapshots that followed it stay as they are.
    ///
    /// # Errors
    ///
    /// The store's error, or [`StoreError::InvalidState`] if the stored state is not a `State`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    pub async fn load_snapshot(
        store: Arc<dyn SessionStore>,
        snapshot_id: &str,
    ) -> Result<Option<Self>, StoreError> {
        let Some(snapshot) = (*store).load_snapshot(snapshot_id).await? else {
            return Ok(None);
        };
        Ok(Some(Self::from_snapshot(store, snapshot, true)?))
    }

    /// Creates session `id` with `state`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if it exists already; the store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the store wrote, the session exists but no `Session` is
    /// returned, and creating it again is a conflict. Load it then, or use
    /// [`load_or_create`](Self::load_or_create).
    pub async fn create(
        store: Arc<dyn SessionStore>,
        id: &str,
        state: State,
    ) -> Result<Self, StoreError> {
        let json = serde_json::to_value(&state).map_err(StoreError::Serialization)?;
        let head = (*store).append(id, Append::create(json)).await?;
        Ok(Self::new(store, id, state, head, false))
    }

    /// Creates session `id` as a fork of snapshot `from`, another session's: a branch of that
    /// conversation that goes its own way, starting with `state` (`from`'s own, or what the
    /// writer makes of it). Its first snapshot names `from` as its parent, so whoever reads
    /// lineage (Genkit's `getSnapshot`) sees where it came from; the other session is left as
    /// it is ([`Parent::Fork`](crate::Parent::Fork)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bidi_session::{MemoryStore, Session, SessionStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), bidi_session::StoreError> {
    /// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    /// let chat = Session::create(Arc::clone(&store), "chat", vec!["hi".to_owned()]).await?;
    /// let at = chat.head().id.clone();
    /// let fork = Session::fork(Arc::clone(&store), "chat-2", &at, chat.state()).await?;
    /// assert_eq!(fork.head().parent_id.as_deref(), Some(at.as_str()));
    /// fork.update(|lines| lines.push("only here".to_owned())).await?;
    /// assert_eq!(fork.state(), ["hi", "only here"]);
    /// let chat = Session::<Vec<String>>::load(store, "chat").await?.expect("still there");
    /// assert_eq!(chat.state(), ["hi"]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if session `id` exists; [`StoreError::NotFound`] if there is
    /// no snapshot `from`; [`StoreError::Running`] if a turn holds it; the store's error
    /// otherwise.
    ///
    /// # Cancel safety
    ///
    /// As [`create`](Self::create).
    pub async fn fork(
        store: Arc<dyn SessionStore>,
        id: &str,
        from: &str,
        state: State,
    ) -> Result<Self, StoreError> {
        let json = serde_json::to_value(&state).map_err(StoreError::Serialization)?;
        let head = (*store).append(id, Append::fork(from, json)).await?;
        Ok(Self::new(store, id, state, head, false))
    }

    /// Loads session `id`, creating it with `init()` if it does not exist (also when another
    /// writer creates it at the same moment: then that one's state is loaded).
    ///
    /// # Errors
    ///
    /// The store's error.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it completes, the session may have been created with `init()`'s state;
    /// calling again loads it.
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

    fn new(
        store: Arc<dyn SessionStore>,
        id: &str,
        state: State,
        head: Entry,
        branch: bool,
    ) -> Self {
        Self {
            id: Arc::from(id),
            store,
            cached: Arc::new(Mutex::new(Cached {
                state,
                #[cfg(debug_assertions)]
                taken: None,
                head,
                branch,
                unsure: false,
            })),
        }
    }

    fn from_snapshot(
        store: Arc<dyn SessionStore>,
        snapshot: Snapshot,
        branch: bool,
    ) -> Result<Self, StoreError> {
        let Snapshot { entry, state } = snapshot;
        let state = decode(&entry.session_id, state)?;
        let id = entry.session_id.clone();
        Ok(Self::new(store, &id, state, entry, branch))
    }

    /// The session id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The place in its lineage of the snapshot the cached state was read or written at.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.lock().head.version
    }

    /// The snapshot the cached state was read or written at.
    #[must_use]
    pub fn head(&self) -> Entry {
        self.lock().head.clone()
    }

    /// The id of the snapshot the cached state was read or written at.
    #[must_use]
    pub fn snapshot_id(&self) -> String {
        self.lock().head.id.clone()
    }

    /// A copy of the cached state.
    #[must_use]
    pub fn state(&self) -> State {
        self.lock().state.clone()
    }

    /// Runs `f` on the cached state, without copying it.
    pub fn with_state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock().state)
    }

    /// Saves `state` now, as a snapshot after the cached one. A state of at most 128 bytes of
    /// JSON is written whole (a change that replaces it: a diff would hardly be shorter); a
    /// larger one's change is found by comparing the two states as JSON, which costs their
    /// size: a writer that knows what it changed says so with [`commit`](Self::commit).
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if the session changed since it was read (another connection
    /// wrote it): nothing is written and the cached state is unchanged; call
    /// [`reload`](Self::reload) or use [`update`](Self::update). [`StoreError::Running`] if a
    /// turn runs on it. The store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before the store answers, the save may or may not have
    /// happened. The session then does not know its head: its next write reads the head again
    /// and answers [`StoreError::Conflict`] (which [`update`](Self::update) retries), so
    /// nothing is written against a state the store no longer has.
    pub async fn update_state(&self, state: State) -> Result<(), StoreError> {
        let new = serde_json::to_string(&state).map_err(StoreError::Serialization)?;
        if new.len() <= WHOLE_STATE_BYTES {
            // The old state is not serialized, nor compared. Written again from its `Value`,
            // the state is at most twice its text (a number's form may change), and the
            // operation around it 33 bytes.
            let max_len = 33 + 2 * new.len() as u64;
            let value = serde_json::from_str(&new).map_err(StoreError::Serialization)?;
            return (self.append_change(state, Change::whole(value), Some(max_len))).await;
        }
        let old = self.with_state(serde_json::to_string);
        let old = old.map_err(StoreError::Serialization)?;
        let change = Change::diff_json(&old, &new).map_err(StoreError::Serialization)?;
        self.append_change(state, change, None).await
    }

    /// Saves `state`, which `change` makes of the cached state, as a snapshot after the cached
    /// one: the store writes the change, not the state. Now and then (as
    /// [`Replay::wants_checkpoint`](crate::Replay::wants_checkpoint) says) the state is written whole as well, so that loads stay
    /// bounded.
    ///
    /// `change` must make `state` of the cached state: the store keeps only the change, and
    /// a wrong one is a wrong session on the next load (debug builds check it).
    ///
    /// # Errors
    ///
    /// As [`update_state`](Self::update_state).
    ///
    /// # Cancel safety
    ///
    /// As [`update_state`](Self::update_state).
    pub async fn commit(&self, state: State, change: Change) -> Result<(), StoreError> {
        self.append_change(state, change, None).await
    }

    /// [`commit`](Self::commit), with what the caller may know already: `max_len`, at least
    /// the change's [encoded length](Change::encoded_len).
    async fn append_change(
        &self,
        state: State,
        change: Change,
        max_len: Option<u64>,
    ) -> Result<(), StoreError> {
        let prepared = {
            let mut cached = self.lock();
            match unsure(&cached).or_else(|| lapsed(&cached.head)) {
                Some(expected) => Err(expected),
                None => {
                    running(&self.id, &cached.head)?;
                    self.debug_check(&cached.state, &state, &change);
                    cached.unsure = true; // until the store answers
                    Ok((self.parent(&cached), cached.head.replay))
                }
            }
        };
        let (parent, replay) = match prepared {
            Ok(prepared) => prepared,
            Err(expected) => return Err(self.reread(expected).await),
        };
        let mut append = Append::change(parent, change);
        // A change known to be short enough is not measured.
        let short = max_len.is_some_and(|max| !replay.wants_checkpoint(max));
        if !short && replay.wants_checkpoint(append.change.encoded_len()) {
            let json = serde_json::to_value(&state).map_err(StoreError::Serialization);
            append.checkpoint = Some(self.settle(json)?);
        }
        let head = self.settle(self.backend().append(&self.id, append).await)?;
        *self.lock() = Cached {
            state,
            #[cfg(debug_assertions)]
            taken: None,
            head,
            branch: false,
            unsure: false,
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

    /// Starts a turn: writes a pending snapshot after the cached one, under `lease`. Until the
    /// turn [finishes](Self::finish), other writers are refused with [`StoreError::Running`];
    /// [`renew`](Self::renew) the lease every third of its term.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if the session changed since it was read,
    /// [`StoreError::Running`] if another turn runs on it; nothing is written then.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the store wrote, the pending snapshot stays with no turn
    /// to renew or finish it, and holds the session (writers after it get
    /// [`StoreError::Running`]) until its lease lapses or it is [aborted](SessionStore::abort).
    /// This session's next write reads the head again first, as after a dropped
    /// [`update_state`](Self::update_state).
    pub async fn start(&self, lease: Lease) -> Result<Entry, StoreError> {
        self.start_with(lease, Change::new()).await
    }

    /// [`start`](Self::start), the pending snapshot showing readers `change` while the turn
    /// runs (the message it answers, say: a change of the cached state). The turn's
    /// [`finish`](Self::finish) replaces it with the whole turn's change; the cached state
    /// stays the one the turn starts from.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    ///
    /// # Cancel safety
    ///
    /// As [`start`](Self::start).
    pub async fn start_with(&self, lease: Lease, change: Change) -> Result<Entry, StoreError> {
        let prepared = {
            let mut cached = self.lock();
            match unsure(&cached).or_else(|| lapsed(&cached.head)) {
                Some(expected) => Err(expected),
                None => {
                    running(&self.id, &cached.head)?;
                    cached.unsure = true; // until the store answers
                    Ok(self.parent(&cached))
                }
            }
        };
        let parent = match prepared {
            Ok(parent) => parent,
            Err(expected) => return Err(self.reread(expected).await),
        };
        let pending = Append::pending(parent, lease).with_change(change);
        let head = self.settle(self.backend().append(&self.id, pending).await)?;
        let mut cached = self.lock();
        cached.head = head.clone();
        cached.branch = false;
        cached.unsure = false;
        Ok(head)
    }

    /// Takes pending snapshot `snapshot_id` of this session over from `from`, the owner of its
    /// stale lease ([`SessionStore::take_over`]), under `lease`, and goes back to the state
    /// before it: the turn runs again from its start, then [renews](Self::renew) and
    /// [finishes](Self::finish) the snapshot as the turn that started it would have.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotHeld`] if the turn is not stale under `from`'s lease (another process
    /// took it over first, say), [`StoreError::Conflict`] if the snapshot is not this
    /// session's; the store's error otherwise. The cached state is unchanged then.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after the store wrote, the lease is this session's but nobody
    /// runs the turn, until the lease goes stale again and another process takes it over.
    pub async fn take_over(
        &self,
        snapshot_id: &str,
        from: &str,
        lease: Lease,
    ) -> Result<Entry, StoreError> {
        let store = self.backend();
        let head = store.take_over(snapshot_id, from, lease).await?;
        let parent = match (&head.parent_id, head.session_id == *self.id) {
            (Some(parent), true) => store.load_snapshot(parent).await?,
            _ => None,
        };
        let Some(before) = parent else {
            return Err(StoreError::Conflict {
                session_id: self.id.to_string(),
                expected: Some(snapshot_id.to_owned()),
                actual: None,
            });
        };
        let state = decode(&self.id, before.state)?;
        *self.lock() = Cached {
            state,
            #[cfg(debug_assertions)]
            taken: None,
            head: head.clone(),
            branch: false,
            unsure: false,
        };
        Ok(head)
    }

    /// Moves the cached state out for the turn that [started](Self::start), leaving
    /// `State::default()` in its place until [`finish`](Self::finish) puts the turn's state
    /// back. A state whose parts are shared when cloned (a conversation behind an `Arc`) is
    /// then the turn's alone and grows in place, where a clone would be copied at its first
    /// change. If the turn never finishes, [`reload`](Self::reload) the session.
    #[must_use]
    pub fn take_state(&self) -> State
    where
        State: Default,
    {
        let mut cached = self.lock();
        let state = std::mem::take(&mut cached.state);
        #[cfg(debug_assertions)]
        {
            cached.taken = Some(state.clone());
        }
        state
    }

    /// Extends the running turn's lease to `expires_at` (milliseconds since the Unix epoch).
    /// Answers [`Renewal::Aborted`] if the turn was aborted: it should stop, and finish.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotHeld`] if no turn of this session runs under the cached lease.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped, the lease may or may not have been extended; renewing again does
    /// no harm.
    pub async fn renew(&self, expires_at: u64) -> Result<Renewal, StoreError> {
        let (id, owner) = self.holder()?;
        self.backend().renew(&id, &owner, expires_at).await
    }

    /// Ends the running turn: saves `state`, which `change` makes of the state the turn started
    /// from, with `status` (and `error`, for a failed turn), and gives up the lease.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotHeld`] if the turn no longer holds its snapshot (its lease lapsed and
    /// another turn went on); the store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// Dropped before the store answers, the turn may be over in the store or still running.
    /// The session's next write reads the head again and answers [`StoreError::Conflict`], as
    /// after a dropped [`update_state`](Self::update_state); it never writes a change found
    /// against the state the turn started from.
    pub async fn finish(
        &self,
        state: State,
        change: Change,
        status: Status,
        error: Option<Value>,
    ) -> Result<Entry, StoreError> {
        let prepared = {
            let mut cached = self.lock();
            match unsure(&cached) {
                Some(expected) => Err(expected),
                None => {
                    let (id, owner) = holder(&cached)?;
                    #[cfg(debug_assertions)]
                    self.debug_check(
                        cached.taken.as_ref().unwrap_or(&cached.state),
                        &state,
                        &change,
                    );
                    cached.unsure = true; // until the store answers
                    Ok((id, owner, cached.head.replay))
                }
            }
        };
        let (id, owner, replay) = match prepared {
            Ok(prepared) => prepared,
            Err(expected) => return Err(self.reread(expected).await),
        };
        let mut finish = Finish::new(owner, status, change);
        finish.error = error;
        if replay.wants_checkpoint(finish.change.encoded_len()) {
            let json = serde_json::to_value(&state).map_err(StoreError::Serialization);
            finish.checkpoint = Some(self.settle(json)?);
        }
        let head = self.settle(self.backend().finish(&id, finish).await)?;
        let mut cached = self.lock();
        cached.state = state;
        cached.head = head.clone();
        cached.unsure = false;
        #[cfg(debug_assertions)]
        {
            cached.taken = None;
        }
        Ok(head)
    }

    /// Re-reads the session's head from the store.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] if the session was deleted; the store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the cached state changes only once the head is read.
    pub async fn reload(&self) -> Result<(), StoreError> {
        let (snapshot, branch) = current(self.backend(), &self.id)
            .await?
            .ok_or_else(|| StoreError::not_found(&*self.id))?;
        let Snapshot { entry, state } = snapshot;
        let state = decode(&self.id, state)?;
        *self.lock() = Cached {
            state,
            #[cfg(debug_assertions)]
            taken: None,
            head: entry,
            branch,
            unsure: false,
        };
        Ok(())
    }

    /// The store the session lives in.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The store itself: a call through the `Arc` would box its future twice, the second time
    /// in the `Arc`'s forwarding impl.
    fn backend(&self) -> &dyn SessionStore {
        &*self.store
    }

    /// What the next write continues.
    fn parent(&self, cached: &Cached<State>) -> Parent {
        if cached.branch {
            Parent::Branch(cached.head.id.clone())
        } else {
            Parent::Head(cached.head.id.clone())
        }
    }

    /// The running turn's snapshot and its lease's owner.
    fn holder(&self) -> Result<(String, String), StoreError> {
        holder(&self.lock())
    }

    /// In debug builds, panics if `change` does not make `new` of `old`.
    #[allow(clippy::unused_self)]
    fn debug_check(&self, old: &State, new: &State, change: &Change) {
        if cfg!(debug_assertions)
            && let (Ok(mut old), Ok(new)) = (serde_json::to_value(old), serde_json::to_value(new))
        {
            let applied = change.apply(&mut old);
            assert!(
                applied.is_ok() && old == new,
                "session `{}`: the change does not make the new state of the old one \
                 ({change:?})",
                self.id
            );
        }
    }

    /// A write's outcome, once the store answered: an error means nothing was written, so
    /// the session knows its head again (a success is recorded with the new head).
    fn settle<T>(&self, written: Result<T, StoreError>) -> Result<T, StoreError> {
        if written.is_err() {
            self.lock().unsure = false;
        }
        written
    }

    /// After a write that was dropped before the store answered: reads the head again and
    /// answers a conflict naming it (the store may hold the dropped write or not, and a write
    /// found against the state before it would be wrong after it). The next write goes on from
    /// the head read.
    async fn reread(&self, expected: String) -> StoreError {
        if let Err(error) = self.reload().await {
            return error;
        }
        StoreError::Conflict {
            session_id: self.id.to_string(),
            expected: Some(expected),
            actual: Some(self.lock().head.id.clone()),
        }
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

/// The snapshot session `id` goes on from, and whether its next write branches: its head; or,
/// when the head is a turn whose process died (its lease lapsed: [`Status::Expired`]), the
/// snapshot before it, so that the session is taken over from the state before that turn
/// (whose pending snapshot may show what it was answering, never how it ended).
async fn current(
    store: &dyn SessionStore,
    id: &str,
) -> Result<Option<(Snapshot, bool)>, StoreError> {
    let Some(head) = store.load(id).await? else {
        return Ok(None);
    };
    if head.entry.status == Status::Expired
        && let Some(parent) = &head.entry.parent_id
        && let Some(before) = store.load_snapshot(parent).await?
    {
        return Ok(Some((before, true)));
    }
    Ok(Some((head, false)))
}

/// The head the session knew before a write of it was dropped unanswered, if one was.
fn unsure<State>(cached: &Cached<State>) -> Option<String> {
    cached.unsure.then(|| cached.head.id.clone())
}

/// `head`, if it was read while a turn ran on it and that turn's lease has lapsed since: its
/// process died, and the cached state is that turn's view. A write re-reads the session
/// first, and goes on from the state before the turn (see [`Session::load`]).
fn lapsed(head: &Entry) -> Option<String> {
    head.lease
        .as_ref()
        .filter(|lease| lease.is_expired())
        .map(|_| head.id.clone())
}

/// The running turn's snapshot and its lease's owner.
fn holder<State>(cached: &Cached<State>) -> Result<(String, String), StoreError> {
    match &cached.head.lease {
        Some(lease) => Ok((cached.head.id.clone(), lease.owner.clone())),
        None => Err(StoreError::NotHeld {
            snapshot_id: cached.head.id.clone(),
            reason: "no turn of this session runs",
        }),
    }
}

/// [`StoreError::Running`] if `head` was read while a turn ran on it: that turn's finish
/// changes the state under the same snapshot, so the cached state is stale by then and a write
/// after it must re-read first.
fn running(session_id: &str, head: &Entry) -> Result<(), StoreError> {
    match &head.lease {
        Some(lease) if !lease.is_expired() => Err(StoreError::Running {
            session_id: session_id.to_owned(),
            lease: lease.clone(),
        }),
        _ => Ok(()),
    }
}

/// The JSON states [`Session::update_state`] writes whole, in bytes.
const WHOLE_STATE_BYTES: usize = 128;

/// The stored `state` of session `id` as a `State`.
fn decode<State: DeserializeOwned>(id: &str, state: Value) -> Result<State, StoreError> {
    serde_json::from_value(state).map_err(|source| StoreError::InvalidState {
        session_id: id.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A state small enough to be written whole is written in at most the bytes
    /// `update_state` counts on, escapes and all.
    #[test]
    fn a_state_written_whole_takes_the_bytes_counted() {
        let states = [
            json!(null),
            json!(u64::MAX),
            json!(-1.234_567_890_123_456_7e-300),
            json!(1e300),
            json!("\u{1}\u{2}\"\\\n"),
            json!({"\u{1}": [true, "\u{7f}é", {"": null}]}),
            json!(vec!["\u{0}"; 10]),
        ];
        for state in states {
            let text = serde_json::to_string(&state).unwrap();
            assert!(text.len() <= WHOLE_STATE_BYTES, "{state}");
            let max_len = 33 + 2 * text.len() as u64;
            assert!(
                Change::whole(state.clone()).encoded_len() <= max_len,
                "{state}"
            );
        }
    }
}
