//! The [`SessionStore`] trait, its [`Snapshot`]s, and [`StoreError`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::streams::Streams;
use bidi_core::{BoxError, NotFound};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::change::Change;

/// Where a snapshot stands: `camelCase` on the wire, as Genkit names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Status {
    /// Its turn is running, under a [`Lease`]; its state is its parent's until it finishes.
    Pending,
    /// Settled: the turn finished.
    Completed,
    /// The turn failed; the snapshot's `error` says how.
    Failed,
    /// The turn was aborted ([`SessionStore::abort`]), by its client or any process sharing
    /// the store.
    Aborted,
    /// The turn's lease lapsed before it finished: the process running it died. Never stored:
    /// a `Pending` snapshot whose lease is past reads as this.
    Expired,
}

impl Status {
    /// The name on the wire: `pending`, `completed`, `failed`, `aborted` or `expired`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
            Self::Expired => "expired",
        }
    }

    /// The status named `name` (as [`as_str`](Self::as_str) writes it).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Completed,
            Self::Failed,
            Self::Aborted,
            Self::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == name)
    }

    /// Whether the turn is over (anything but `Pending`).
    #[must_use]
    pub fn is_terminal(self) -> bool {
        self != Self::Pending
    }
}

/// Who runs a pending snapshot's turn, since when, and until when that claim holds.
///
/// A turn takes the lease as it starts (the pending snapshot is written with it) and renews it
/// every third of its term while it runs ([`SessionStore::renew`], a write of a few bytes); the
/// snapshot's [`finish`](SessionStore::finish) gives it up. A lease that lapsed (its process
/// died) no longer holds: the snapshot reads as [`Status::Expired`] and the next turn takes the
/// session over. Times are the wall clocks of the processes involved, in milliseconds since the
/// Unix epoch, so keep the term well above the clock skew between them.
///
/// A turn that may run again elsewhere carries what it takes to run it ([`resume`](Self::resume),
/// set with [`resumable`](Self::resumable)): once its owner has not renewed the lease for two
/// thirds of its term, another process may [take the turn over](SessionStore::take_over) while
/// the lease still holds, so readers see it running throughout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Who runs the turn (a connection id, say).
    pub owner: String,
    /// When the turn started.
    pub started_at: u64,
    /// When the lease lapses unless renewed.
    pub expires_at: u64,
    /// What another process needs to run the turn again if this one's dies (its input, say):
    /// `None` for a turn that is not to run twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Box<Value>>,
}

impl Lease {
    /// A lease of `owner` from now for `term`.
    #[must_use]
    pub fn new(owner: impl Into<String>, term: Duration) -> Self {
        let now = now_ms();
        Self {
            owner: owner.into(),
            started_at: now,
            expires_at: now.saturating_add(millis(term)),
            resume: None,
        }
    }

    /// The lease of a turn another process may take over, with what running it again takes.
    #[must_use]
    pub fn resumable(mut self, resume: Value) -> Self {
        self.resume = Some(Box::new(resume));
        self
    }

    /// Whether its owner has been silent so long that the turn is taken to have lost its
    /// process: two thirds of the term since `renewed_at` (its last renewal, or its start),
    /// where an owner renews every third. Only a [resumable](Self::resumable) lease that still
    /// holds at `now` is ever stale.
    #[must_use]
    pub fn is_stale_at(&self, renewed_at: u64, now: u64) -> bool {
        let term = self.expires_at.saturating_sub(renewed_at);
        self.resume.is_some()
            && !self.is_expired_at(now)
            && now.saturating_sub(renewed_at).saturating_mul(3) >= term.saturating_mul(2)
    }

    /// Whether the lease no longer holds at `now` (milliseconds since the Unix epoch).
    #[must_use]
    pub fn is_expired_at(&self, now: u64) -> bool {
        self.expires_at <= now
    }

    /// Whether the lease no longer holds now, by this process's clock.
    #[must_use]
    pub fn is_expired(&self) -> bool {
        self.is_expired_at(now_ms())
    }
}

/// Milliseconds since the Unix epoch, by this process's clock.
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// `time` in milliseconds since the Unix epoch (0 before it).
pub(crate) fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, millis)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What it costs to load a snapshot: the bytes of the nearest checkpoint in its lineage and of
/// the changes after it, each change counted [`PER_CHANGE`](Self::PER_CHANGE) bytes more (what
/// replaying one costs however small it is). Stores keep it per snapshot; writers read it to
/// decide when a snapshot should carry a checkpoint ([`wants_checkpoint`](Self::wants_checkpoint)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replay {
    /// The bytes of the nearest checkpoint (the state written whole).
    pub checkpoint: u64,
    /// The bytes of the changes after it, this snapshot's included, each with
    /// [`PER_CHANGE`](Self::PER_CHANGE) more.
    pub changes: u64,
}

impl Replay {
    /// The changes a load replays past the checkpoint, relative to its size, before the next
    /// snapshot carries a checkpoint of its own.
    pub const RATIO: u64 = 4;
    /// Changes a load replays anyway, however small the checkpoint.
    pub const FLOOR: u64 = 4 * 1024;
    /// What a change costs to replay beyond its bytes, as bytes of a checkpoint to parse: each
    /// is parsed and its paths found in the state (about 2 µs, measured on a 1 MB state, what
    /// parsing a kilobyte or two costs). Counting it bounds the number of changes a load
    /// replays, not only their bytes: a large state saved often with small changes gets a
    /// checkpoint every few thousand of them.
    pub const PER_CHANGE: u64 = 1024;

    /// The replay cost of a snapshot that adds `change` bytes to one of this cost, without a
    /// checkpoint.
    #[must_use]
    pub fn after(self, change: u64) -> Self {
        Self {
            checkpoint: self.checkpoint,
            changes: self
                .changes
                .saturating_add(change.saturating_add(Self::PER_CHANGE)),
        }
    }

    /// The replay cost of a snapshot that carries a checkpoint of `bytes`.
    #[must_use]
    pub fn checkpoint(bytes: u64) -> Self {
        Self {
            checkpoint: bytes,
            changes: 0,
        }
    }

    /// Whether a snapshot that adds `change` bytes after one of this cost should carry a
    /// checkpoint: when the changes a load would replay (as [`after`](Self::after) counts
    /// them) pass four times the checkpoint (and 4 KiB). Checkpoints then grow geometrically,
    /// each about five times the one before: for a session that only grows (a conversation),
    /// they total at most 1.25 times its state, and a load reads a checkpoint and changes that
    /// cost at most four times as much to replay.
    #[must_use]
    pub fn wants_checkpoint(self, change: u64) -> bool {
        self.after(change).changes
            > self
                .checkpoint
                .saturating_mul(Self::RATIO)
                .saturating_add(Self::FLOOR)
    }
}

/// One snapshot of a session, without its state: what a store answers for a write.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Entry {
    /// The snapshot's id, unique in the store.
    pub id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// The snapshot it continues (`None`: the session's first, unless it is a fork).
    pub parent_id: Option<String>,
    /// Its place in its lineage: 1 for a session's first snapshot, its parent's plus one.
    pub version: u64,
    /// Where it stands ([`Status::Expired`] for a pending one whose lease lapsed).
    pub status: Status,
    /// Who runs its turn, while it is pending.
    pub lease: Option<Lease>,
    /// Why its turn failed, as JSON (`{"message": ..}` at least), when it did.
    pub error: Option<Value>,
    /// What loading it costs.
    pub replay: Replay,
    /// When it was written.
    pub created_at: SystemTime,
    /// When it was last written (its turn finished, its lease renewed).
    pub updated_at: SystemTime,
}

impl Entry {
    /// An entry; for stores that build them from their rows. The status is as stored: a
    /// pending entry whose lease lapsed is made [`Status::Expired`] here.
    #[must_use]
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: impl Into<String>,
        session_id: impl Into<String>,
        parent_id: Option<String>,
        version: u64,
        status: Status,
        lease: Option<Lease>,
        error: Option<Value>,
        replay: Replay,
        created_at: SystemTime,
        updated_at: SystemTime,
    ) -> Self {
        let status = match (&status, &lease) {
            (Status::Pending, Some(lease)) if lease.is_expired() => Status::Expired,
            _ => status,
        };
        Self {
            id: id.into(),
            session_id: session_id.into(),
            parent_id,
            version,
            status,
            lease,
            error,
            replay,
            created_at,
            updated_at,
        }
    }
}

/// One snapshot of a session with its state.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The snapshot.
    pub entry: Entry,
    /// The session's state at this snapshot, as JSON (its parent's, while it is pending).
    pub state: Value,
}

impl Snapshot {
    /// A snapshot; for stores that build them from their rows.
    #[must_use]
    pub fn new(entry: Entry, state: Value) -> Self {
        Self { entry, state }
    }

    /// The snapshot's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.entry.id
    }

    /// The session's id.
    #[must_use]
    pub fn session_id(&self) -> &str {
        &self.entry.session_id
    }

    /// Its place in its lineage: 1 for a session's first snapshot.
    #[must_use]
    pub fn version(&self) -> u64 {
        self.entry.version
    }

    /// Where it stands.
    #[must_use]
    pub fn status(&self) -> Status {
        self.entry.status
    }
}

/// What a new snapshot continues.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Parent {
    /// Nothing: the snapshot starts a new session, which must not exist.
    None,
    /// The session's head (its latest snapshot), which must be this one: the compare-and-swap
    /// of a writer that read the session at this snapshot.
    Head(String),
    /// Any snapshot of the session: a branch. The other snapshots are left as they are; the
    /// new one becomes the session's head.
    Branch(String),
    /// A snapshot of another session: the new snapshot starts a session (which must not
    /// exist) that goes on from it, a fork. Its state is written whole ([`Append::fork`]), so
    /// the new session reads nothing of the other; its entry names the snapshot as its parent,
    /// and the other session is left as it is.
    Fork(String),
}

impl Parent {
    /// The snapshot id it names, if any.
    #[must_use]
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::Head(id) | Self::Branch(id) | Self::Fork(id) => Some(id),
        }
    }
}

/// A new snapshot, for [`SessionStore::append`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Append {
    /// What it continues.
    pub parent: Parent,
    /// What it adds to its parent's state.
    pub change: Change,
    /// The state after the change, written whole, when the writer makes this snapshot a
    /// checkpoint ([`Replay::wants_checkpoint`]); a session's first snapshot always is one.
    pub checkpoint: Option<Value>,
    /// [`Status::Completed`], or [`Status::Pending`] with a lease for a turn that starts.
    pub status: Status,
    /// The lease of a pending snapshot.
    pub lease: Option<Lease>,
}

impl Append {
    /// A session's first snapshot, with `state`.
    #[must_use]
    pub fn create(state: Value) -> Self {
        Self {
            parent: Parent::None,
            change: Change::new(),
            checkpoint: Some(state),
            status: Status::Completed,
            lease: None,
        }
    }

    /// The first snapshot of a session forked from snapshot `from` of another session, with
    /// `state` (written whole): see [`Parent::Fork`].
    #[must_use]
    pub fn fork(from: impl Into<String>, state: Value) -> Self {
        Self {
            parent: Parent::Fork(from.into()),
            change: Change::new(),
            checkpoint: Some(state),
            status: Status::Completed,
            lease: None,
        }
    }

    /// A completed snapshot adding `change` to `parent`.
    #[must_use]
    pub fn change(parent: Parent, change: Change) -> Self {
        Self {
            parent,
            change,
            checkpoint: None,
            status: Status::Completed,
            lease: None,
        }
    }

    /// A pending snapshot after `parent` for a turn that starts under `lease`; its change
    /// comes with its [`Finish`].
    #[must_use]
    pub fn pending(parent: Parent, lease: Lease) -> Self {
        Self {
            parent,
            change: Change::new(),
            checkpoint: None,
            status: Status::Pending,
            lease: Some(lease),
        }
    }

    /// Gives the snapshot `change`. On a pending snapshot, it is what readers see of the turn
    /// while it runs (the message it answers, say): its finish's change replaces it, made of
    /// the parent's state as well. A snapshot whose lease lapsed keeps it, as its state is
    /// final then.
    #[must_use]
    pub fn with_change(mut self, change: Change) -> Self {
        self.change = change;
        self
    }

    /// Makes the snapshot a checkpoint: `state` is the state after its change.
    #[must_use]
    pub fn with_checkpoint(mut self, state: Value) -> Self {
        self.checkpoint = Some(state);
        self
    }
}

/// How a pending snapshot's turn ended, for [`SessionStore::finish`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Finish {
    /// The lease's owner: only the turn that holds the snapshot finishes it.
    pub owner: String,
    /// `Completed`, `Failed` or `Aborted`. A snapshot aborted while its turn ran stays
    /// `Aborted`, whatever this says, and still keeps the turn's change.
    pub status: Status,
    /// What the turn added to the state.
    pub change: Change,
    /// The state after the change, written whole, as [`Append::checkpoint`].
    pub checkpoint: Option<Value>,
    /// Why it failed.
    pub error: Option<Value>,
}

impl Finish {
    /// `owner`'s turn ended with `status`, having added `change`.
    #[must_use]
    pub fn new(owner: impl Into<String>, status: Status, change: Change) -> Self {
        Self {
            owner: owner.into(),
            status,
            change,
            checkpoint: None,
            error: None,
        }
    }

    /// Makes the snapshot a checkpoint: `state` is the state after its change.
    #[must_use]
    pub fn with_checkpoint(mut self, state: Value) -> Self {
        self.checkpoint = Some(state);
        self
    }

    /// Records why the turn failed.
    #[must_use]
    pub fn with_error(mut self, error: Value) -> Self {
        self.error = Some(error);
        self
    }
}

/// What renewing a lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// The lease holds until the new expiry.
    Renewed,
    /// The snapshot was aborted: the turn should stop, and finish.
    Aborted,
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The compare-and-swap failed: the session's head is not the snapshot the writer
    /// expected. Nothing was written.
    #[error(
        "session `{session_id}` changed underneath: expected {}, found {}",
        head_name(expected.as_deref()),
        head_name(actual.as_deref())
    )]
    Conflict {
        /// The session.
        session_id: String,
        /// The head the writer expected (`None`: that the session did not exist).
        expected: Option<String>,
        /// The head the store holds (`None`: the session does not exist).
        actual: Option<String>,
    },
    /// A turn runs on the session (its head is pending under a lease that holds): nothing may
    /// follow the head until it finishes, is aborted, or its lease lapses. Nothing was written.
    #[error("session `{session_id}` is running a turn")]
    Running {
        /// The session.
        session_id: String,
        /// The running turn's lease.
        lease: Lease,
    },
    /// The snapshot is not a pending one this owner holds (it finished, was taken over after
    /// its lease lapsed, or never existed). Nothing was written.
    #[error("the turn no longer holds snapshot `{snapshot_id}`: {reason}")]
    NotHeld {
        /// The snapshot.
        snapshot_id: String,
        /// Why, in words.
        reason: &'static str,
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

fn head_name(head: Option<&str>) -> String {
    head.map_or_else(|| "no session".to_owned(), |id| format!("snapshot `{id}`"))
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

/// Where sessions live: logs of snapshots, each adding a [`Change`] to its parent.
///
/// A session is a tree of snapshots. Each snapshot keeps what its turn added (its change), not
/// the whole state again, so a turn costs what it adds however long the conversation, and every
/// snapshot stays loadable without storing the conversation once per snapshot. Now and then a
/// snapshot also carries its state whole (a checkpoint, [`Replay`]), so a load reads a bounded
/// checkpoint plus the changes after it. The session's **head** is its latest snapshot: what
/// "the session" means when no snapshot is named.
///
/// Every write is a compare-and-swap. A writer that read the session at head `h` appends with
/// [`Parent::Head(h)`](Parent::Head) and gets [`StoreError::Conflict`] if anyone wrote since: a
/// lost turn is impossible. [`Parent::Branch`] continues any snapshot instead, leaving the
/// others as they are. A turn that runs a while writes a [`Status::Pending`] snapshot with a
/// [`Lease`] as it starts ([`Append::pending`]); nothing may follow it until it
/// [finishes](Self::finish), is [aborted](Self::abort) or its lease lapses
/// ([`StoreError::Running`]).
///
/// A missing session or snapshot is not an error here: loads answer `None`, `delete` answers
/// `false`, `abort` answers `None`, and an append after a head that is not there is a
/// [`StoreError::Conflict`] with `actual: None`. [`StoreError::NotFound`] is what
/// [`Session`](crate::Session) and the agents make of that.
///
/// `Arc<S>` and `Box<S>` are stores when `S` is, `dyn SessionStore` included, so a store shared
/// as `Arc<dyn SessionStore>` goes wherever an `impl SessionStore` does.
///
/// ```
/// use bidi_session::{Append, Change, MemoryStore, Parent, SessionStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let store = MemoryStore::new();
/// let first = store.append("chat", Append::create(json!({"messages": ["hi"]}))).await?;
/// let add = |text: &str| Change::new().push("/messages", json!(text));
/// let a = store.append("chat", Append::change(Parent::Head(first.id.clone()), add("a"))).await?;
/// // A writer still at the first snapshot is refused...
/// let stale = store.append("chat", Append::change(Parent::Head(first.id.clone()), add("x"))).await;
/// assert!(stale.unwrap_err().is_conflict());
/// // ...while a branch from it is a new head, and leaves `a` as it was.
/// let b = store.append("chat", Append::change(Parent::Branch(first.id.clone()), add("b"))).await?;
/// assert_eq!(store.load("chat").await?.unwrap().state, json!({"messages": ["hi", "b"]}));
/// assert_eq!(store.load_snapshot(&a.id).await?.unwrap().state, json!({"messages": ["hi", "a"]}));
/// assert_eq!(b.parent_id, Some(first.id));
/// # Ok(())
/// # }
/// ```
///
/// # Your own store
///
/// Most backends need write only storage: [`storage::Storage`](crate::storage::Storage),
/// under [`storage::LogStore`](crate::storage::LogStore), which keeps this trait's rules.
/// To write the trait itself, write the methods as `async fn`s under
/// [`#[async_trait]`](macro@async_trait) (re-exported here, so you need no dependency of your
/// own), keep each write atomic and the rules each method states, and run the public conformance suite,
/// [`testing::conformance`](crate::testing::conformance) (feature `testing`), against it.
/// [`stale`](Self::stale) and [`take_over`](Self::take_over) have defaults for a store no two
/// processes share (no turn is ever taken over); a shared store that implements them runs
/// [`testing::takeover`](crate::testing::takeover) too.
///
/// # Cancel safety
///
/// A caller may drop any call before it completes. A read loses nothing then. A write must be
/// atomic: dropped, it happened whole or not at all, and the caller is not told which. The
/// stores of this crate give that each its own way: `MemoryStore` completes every call at its
/// first poll; `SqliteStore` runs a call to its end once it has the connection, dropped or not
/// (a dropped write still happens, unanswered); `PostgresStore` writes in one transaction,
/// rolled back if the call is dropped before its commit is sent. `Scoped` is as atomic as the
/// store it wraps.
#[async_trait]
pub trait SessionStore: fmt::Debug + Send + Sync + 'static {
    /// The head of `session_id` (its latest snapshot) with its state, or `None` if there is no
    /// such session.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError>;

    /// Snapshot `snapshot_id`, of any session, with its state, or `None` if there is none.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError>;

    /// Snapshot `snapshot_id` without its state (cheap: nothing is replayed), or `None`.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError>;

    /// Appends a snapshot to `session_id` and makes it the session's head. Returns it,
    /// without its state.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] when the parent is not what [`Append::parent`] expects (the
    /// head for [`Parent::Head`], a snapshot of the session for [`Parent::Branch`], no session
    /// for [`Parent::None`]), [`StoreError::NotFound`] for a branch from a snapshot the session
    /// does not have; [`StoreError::Running`] when the parent is pending under a lease
    /// that holds. Nothing is written then.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the snapshot was appended whole or not at all, and
    /// the caller is not told which. If it was, a writer that goes on from the old head gets a
    /// [`StoreError::Conflict`].
    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError>;

    /// Ends pending snapshot `snapshot_id`: writes its change and its status, and gives up its
    /// lease.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotHeld`] if the snapshot is not pending under `finish.owner`'s lease (it
    /// finished, or another turn took the session over after the lease lapsed); nothing is
    /// written then.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the snapshot was finished whole or not at all. If
    /// it was, finishing it again is refused with [`StoreError::NotHeld`]; if not, it can be
    /// finished again while the lease holds.
    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError>;

    /// Extends the lease of pending snapshot `snapshot_id` to `expires_at` (milliseconds since
    /// the Unix epoch). Answers [`Renewal::Aborted`] (and extends nothing) if it was aborted.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotHeld`] if the snapshot is not pending under `owner`'s lease.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the lease was extended or not; renewing again does
    /// no harm.
    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError>;

    /// Aborts snapshot `snapshot_id` if it is pending (it reads as [`Status::Aborted`] at once;
    /// its turn learns it at its next [`renew`](Self::renew)). Answers the status it had
    /// before, or `None` if there is no such snapshot; a terminal status is left as it is.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the snapshot was aborted or not; aborting again does
    /// no harm (it answers [`Status::Aborted`] if the first did).
    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError>;

    /// Deletes every snapshot of `session_id`; returns whether it existed.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the session was deleted whole or not at all;
    /// deleting again answers `false` if it was.
    async fn delete(&self, session_id: &str) -> Result<bool, StoreError>;

    /// The ids of every stored session, sorted.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    async fn list(&self) -> Result<Vec<String>, StoreError>;

    /// The pending snapshots whose turns are [stale](Lease::is_stale_at): resumable, their
    /// lease still holding, their owner silent for two thirds of its term. A process that
    /// serves their agent may [take them over](Self::take_over). Empty by default: a store no
    /// two processes share has no turn to take over.
    ///
    /// # Errors
    ///
    /// The store's.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    async fn stale(&self) -> Result<Vec<Entry>, StoreError> {
        Ok(Vec::new())
    }

    /// Takes pending snapshot `snapshot_id` over from `from`, its lease's owner: if its turn
    /// is [stale](Lease::is_stale_at), the lease becomes `to.owner`'s until `to.expires_at`
    /// (when it started and its [`resume`](Lease::resume) stay) and the entry is answered. The
    /// new owner runs the turn again from the snapshot's parent, renews and finishes it; the
    /// old owner, should it still run, is refused at its next renewal.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotHeld`] if the turn is not stale under `from`'s lease (it was renewed,
    /// finished, aborted, taken over by another, or its lease lapsed), or the store takes no
    /// turn over (the default); nothing is written then.
    ///
    /// # Cancel safety
    ///
    /// Atomic: dropped before it completes, the lease was taken or not. If it was, nobody runs
    /// the turn until the new lease goes stale in turn.
    async fn take_over(
        &self,
        snapshot_id: &str,
        from: &str,
        to: Lease,
    ) -> Result<Entry, StoreError> {
        let _ = (from, to);
        Err(StoreError::NotHeld {
            snapshot_id: snapshot_id.to_owned(),
            reason: "this store takes no turn over",
        })
    }

    /// Where running turns keep what they stream for readers in other processes, if this store
    /// has such a place (`None` by default: a store processes do not share needs none).
    fn streams(&self) -> Option<&dyn Streams> {
        None
    }
}

macro_rules! forward {
    ($($store:tt)*) => {
        #[async_trait]
        impl<S: SessionStore + ?Sized> SessionStore for $($store)*<S> {
            async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
                (**self).load(session_id).await
            }

            async fn load_snapshot(
                &self,
                snapshot_id: &str,
            ) -> Result<Option<Snapshot>, StoreError> {
                (**self).load_snapshot(snapshot_id).await
            }

            async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
                (**self).entry(snapshot_id).await
            }

            async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
                (**self).append(session_id, append).await
            }

            async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
                (**self).finish(snapshot_id, finish).await
            }

            async fn renew(
                &self,
                snapshot_id: &str,
                owner: &str,
                expires_at: u64,
            ) -> Result<Renewal, StoreError> {
                (**self).renew(snapshot_id, owner, expires_at).await
            }

            async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
                (**self).abort(snapshot_id).await
            }

            async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
                (**self).delete(session_id).await
            }

            async fn list(&self) -> Result<Vec<String>, StoreError> {
                (**self).list().await
            }

            async fn stale(&self) -> Result<Vec<Entry>, StoreError> {
                (**self).stale().await
            }

            async fn take_over(
                &self,
                snapshot_id: &str,
                from: &str,
                to: Lease,
            ) -> Result<Entry, StoreError> {
                (**self).take_over(snapshot_id, from, to).await
            }

            fn streams(&self) -> Option<&dyn Streams> {
                (**self).streams()
            }
        }
    };
}

forward!(Arc);
forward!(Box);

/// A new id for a session or a snapshot: a random UUID, unique in any store. The one place
/// ids are minted, so every front end names sessions alike.
///
/// ```
/// let id = bidi_session::new_id();
/// assert_eq!(id.len(), 36);
/// assert_ne!(id, bidi_session::new_id());
/// ```
#[must_use]
pub fn new_id() -> String {
    // Written straight into a buffer, not through `Display`'s formatting machinery.
    let id = uuid::Uuid::new_v4();
    id.hyphenated()
        .encode_lower(&mut uuid::Uuid::encode_buffer())
        .to_owned()
}
