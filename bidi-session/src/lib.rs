//! Sessions in pluggable stores: logs of JSON snapshots, appended with compare-and-swap.
//!
//! A [`SessionStore`] keeps each session as a tree of [`Snapshot`]s over JSON state, each one
//! storing only its [`Change`] (a JSON Patch) to the one before, so a turn costs what it adds
//! however long the session. Every append names the snapshot it expects to follow, so a stale
//! writer gets [`StoreError::Conflict`] instead of silently overwriting; any snapshot can be
//! loaded, branched from, or (while its turn runs) aborted by its id.
//! [`Session<State>`](Session) is the typed view an agent works with.
//!
//! ```
//! use std::sync::Arc;
//! use bidi_session::{MemoryStore, Session, SessionStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), bidi_session::StoreError> {
//! let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
//! let session = Session::create(store.clone(), "chat-1", vec!["hello".to_owned()]).await?;
//! let other = Session::<Vec<String>>::load(store.clone(), "chat-1").await?.unwrap();
//!
//! session.update(|lines| lines.push("from the first writer".into())).await?;
//! // `other` read version 1: its save is refused, not applied over the first writer's.
//! assert!(other.update_state(vec![]).await.unwrap_err().is_conflict());
//! // `update` re-reads and retries instead.
//! other.update(|lines| lines.push("from the second".into())).await?;
//! assert_eq!(other.state().len(), 3);
//! # Ok(())
//! # }
//! ```
//!
//! # Stores
//!
//! | store | where | notes |
//! |---|---|---|
//! | [`MemoryStore`] | process memory | every snapshot; every session, or the n most recently used |
#![cfg_attr(
    feature = "sqlite",
    doc = "| [`SqliteStore`] | one SQLite file | feature `sqlite` (default): the embedded persistent store, bundled SQLite, WAL |"
)]
#![cfg_attr(
    not(feature = "sqlite"),
    doc = "| `SqliteStore` | one SQLite file | feature `sqlite` (default): the embedded persistent store, bundled SQLite, WAL |"
)]
//! | `PostgresStore` | PostgreSQL tables | feature `postgres`: one store shared by processes on several machines |
//!
//! Your own store is storage: a [`storage::Storage`] reads and writes a snapshot's row in
//! transactions, and [`storage::LogStore`] over it is the [`SessionStore`], keeping the rules
//! and the replay (the module's docs show a complete one, a map behind a lock, in some 90
//! lines). [`testing::conformance`] checks any store. A store that wants its own plumbing (the
//! in-tree ones: one SQLite call or a few PostgreSQL round trips a write) implements
//! [`SessionStore`] itself, written with [`#[async_trait]`](macro@async_trait) (re-exported).
//!
//! [`Scoped`] wraps any store to hold the sessions of one scope (a user, a tenant): the same id in
//! two scopes names two sessions, and no scope can reach another's.
//!
//! A missing session is [`StoreError::NotFound`], which holds the workspace's one "not found",
//! [`bidi_core::NotFound`] (kind `session`).
//!
//! # Tokio
//!
//! The crate needs a tokio runtime with its time driver (`#[tokio::main]`, or a runtime built
//! with `enable_all()`): [`Session::update`] waits between retries, and `PostgresStore` times
//! out its calls. `SqliteStore` runs its SQLite calls in place on a multi-thread runtime and on
//! the blocking pool on a current-thread one. For `#[tokio::main]` as in the examples, your
//! `Cargo.toml` needs:
//!
//! ```toml
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]
//!
//! Without `sqlite` (`default-features = false`), nothing of SQLite is built. The workspace's
//! crates above this one (`bidi-agent`, `bidi-http`, `bidi-acp`, ...) depend on it that way, so
//! an application compiles SQLite only when it asks for `SqliteStore` itself.
//!
//! # Contract
//!
//! The rules this crate keeps, for the crates built on it, for authors of stores of their own,
//! and for anyone extending it. They are numbered so that reviews and other crates' docs can
//! point at them; a change to the crate keeps every one, or says here which it changes.
//!
//! - **S1** [`SessionStore`] is one dyn-compatible async trait over JSON state, so one store
//!   serves agents of any state type, and a custom store is one small impl (an `Arc` or a
//!   `Box` of a store is a store). A session is a **log of snapshots**: each keeps its
//!   [`Change`] (a JSON Patch, RFC 6902, applied to its parent's state), never the whole
//!   state again, so a turn writes what it adds whatever the session's length. A value a
//!   writer has as a Rust type is pushed as JSON text ([`Change::push_json`]): serialized
//!   once, as stores keep it, never built as a `serde_json::Value` (an `LlmAgent` turn's
//!   messages). Every write is **compare-and-swap on the head** ([`Parent::Head`]: the
//!   session's latest snapshot must be the one the writer read), so a lost update is
//!   impossible: a stale writer gets [`StoreError::Conflict`] naming the two heads.
//!   [`Parent::Branch`] continues any snapshot of the session instead (a branch: the new
//!   snapshot becomes the head, the other leaves stay). A missing session is
//!   [`StoreError::NotFound`], a missing snapshot a `NotFound` of kind `snapshot`. The rules
//!   every store keeps (what may follow a snapshot, who finishes or renews a pending one, what
//!   an abort changes) live in one place, the crate's private `rules` module: stores read the
//!   rows involved under their lock or transaction and ask it before they write. A store
//!   outside the crate gets them through [`storage::LogStore`], writing only storage.
//! - **S2** A [`Snapshot`] is `{id, sessionId, parentId, version (its depth, 1 for a session's
//!   first), status, lease, error, createdAt, updatedAt}` plus its state. Any snapshot loads by
//!   id (`load_snapshot`), the session's head by session id (`load`), and `entry` reads one
//!   without replaying its state. Statuses ([`Status`]) are Genkit's: `pending` while its turn
//!   runs, under a [`Lease`] `{owner, startedAt, expiresAt}` (the running mark, outside the
//!   conversation: claiming it is the pending snapshot's write, renewing it a write of a few
//!   bytes), then `completed`, `failed` (with `error: {message}`) or `aborted`; `expired` is a
//!   pending snapshot whose lease lapsed, computed on read. A pending snapshot's state is its
//!   parent's with the change it was appended with ([`Append::with_change`]): the running
//!   turn's view (an agent shows the message it answers), which its finish's change replaces.
//!   Nothing may follow a pending snapshot whose lease holds ([`StoreError::Running`]); a
//!   lapsed lease is over for good (no late renewal or finish: a reader may have gone on from
//!   the snapshot's state), and the next turn takes the session over: [`Session`] goes on from
//!   the state before the dead turn, a branch from its parent. `abort(snapshot_id)` marks a pending snapshot `aborted` at
//!   once, for any process sharing the store; its turn learns it at its next renewal, stops,
//!   and still writes what it did. Now and then a snapshot also carries its state whole (a
//!   checkpoint: when the changes a load would replay pass four times the last checkpoint and
//!   4 KiB, [`Replay::wants_checkpoint`]), so a load reads a bounded checkpoint plus the
//!   changes after it; checkpoints grow about fivefold each, so for a conversation they total
//!   at most 1.25 times its state (measured: 0.37× at 1,000 turns, a 2.16× file in all).
//! - **S3** The stores. [`MemoryStore`] keeps every snapshot's change as it was written, and
//!   one state per session (the head's, or an ancestor's to which the changes written since
//!   apply when the state is next read), so a write never copies what it adds; it is
//!   optionally bounded in sessions ([`MemoryStore::with_max_sessions`]) and in snapshots
//!   ([`MemoryStore::with_max_snapshots`]: past it a session keeps its head alone).
//!   `SqliteStore` (feature `sqlite`) is the embedded persistent store: one file, WAL, bundled
//!   SQLite, the tables `bidi_sessions` (heads) and `bidi_entries` (a row a snapshot); opening
//!   waits and retries while another opener holds the file. `PostgresStore` (feature
//!   `postgres`) is for deployments on several machines: the same tables, writers of one
//!   session serialized by a row lock. [`Scoped`] is any store seen from one scope (by session
//!   id and by snapshot id). One public conformance suite, [`testing`], runs against every
//!   store, users' own included: lineage, compare-and-swap, branches, racing appends (one wins,
//!   the others are told the winner), racing updates, turns, aborts, expired leases,
//!   checkpoints; a test kills a SQLite writer mid-append 20 times with SIGKILL and finds every
//!   acknowledged snapshot. What a version stored stays readable: schema 1 (every version of a
//!   session whole, `bidi_snapshots`) migrates on open, each old version a snapshot carrying
//!   its state as a checkpoint. The repository's `examples/tests/fixtures` hold a SQLite file
//!   and a PostgreSQL dump of sessions written by the `serve` example of 0.1.0 (a pending tool
//!   call, a finished conversation, a custom agent's state, a UI message stream chat), and
//!   `examples/tests/serve.rs` opens them with today's code and goes on with every session. A
//!   change of the stored format keeps those passing (a migration on open) and adds fixtures
//!   of its own.
//! - **S4** [`Session<State>`](Session): `id()`, `state()` (a copy), `head()` (the snapshot it
//!   was read or written at), `commit(state, change)` (appends the change the writer knows,
//!   compare-and-swap on the head; debug builds check that it makes `state`),
//!   `update_state(new)` (finds the change by comparing the two states as JSON; a state of at
//!   most about 128 bytes of JSON is written whole instead, which costs less than the diff),
//!   `update(|state| ..)`, which retries a pure mutator on conflict, and a turn's lifecycle:
//!   `start(lease)` (the pending snapshot; `start_with(lease, view)` with the turn's view),
//!   `renew(expires_at)` (answers whether the turn was
//!   aborted), `finish(state, change, status, error)`. [`Session::load_snapshot`] opens a
//!   session at a snapshot; its first write branches from it. A session read while a turn ran
//!   on it (its cached head pending under a live lease) refuses to write until reloaded: that
//!   turn's finish changes the state under the same snapshot; one whose lease has lapsed since
//!   reads the session again first. A write dropped before the store
//!   answered (any of them) leaves the session unsure of its head: its next write reads the
//!   head again and answers a conflict, so no change is found against a state the store may no
//!   longer have. A store's write, dropped, happened whole or not at all.
//! - **S5** Streams that outlive their process: [`SessionStore::streams`] offers a store's
//!   [`Streams`] (`None` by default, for stores that processes do not share).
//!   [`publish`](Streams::publish)`(snapshot_id, Piece {seq, bytes, last})` keeps a piece of
//!   what a running turn streams, in its client's wire format; [`follow`](Streams::follow)
//!   reads the pieces so far, then each as it is published, to the last piece, or until no turn
//!   holds the snapshot any more and nothing new comes (its process died), or at once for a
//!   running turn that kept no opening piece (piece 0, kept as the turn starts) within a few
//!   seconds of its start: it is not streamed. `PostgresStore`
//!   keeps the pieces in `bidi_stream_pieces` and wakes readers with `NOTIFY bidi_stream` on
//!   one listening connection per store, looking anyway every 500 ms should a notification be
//!   missed; a stream's pieces go a minute after its last one (a day, for a stream that never
//!   ended). Snapshot ids are the store's, so a reader finds the snapshot through its scope
//!   first. They are the stream ids of Genkit's agent wire too (`x-genkit-stream-id`): a
//!   Genkit stream is followed by the id its client holds.

#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod change;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rows;
mod rules;
mod scoped;
mod session;
#[cfg(feature = "sqlite")]
mod sqlite;
pub mod storage;
mod store;
mod streams;
#[cfg(any(feature = "testing", doc))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use change::{ApplyError, Change};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PostgresStore;
pub use scoped::Scoped;
pub use session::{MAX_UPDATE_ATTEMPTS, Session};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::SqliteStore;
pub use store::{
    Append, Entry, Finish, Lease, Parent, Renewal, Replay, SessionStore, Snapshot, Status,
    StoreError, new_id, now_ms,
};
pub use streams::{Follow, Piece, Streams};

/// The attribute a [`SessionStore`] impl is written under: `async fn`s in the trait, boxed.
pub use async_trait::async_trait;
