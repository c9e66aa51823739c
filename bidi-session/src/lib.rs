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
//! Your own store is one `impl SessionStore` written with [`#[async_trait]`](macro@async_trait) (re-exported here);
//! the [`SessionStore`] docs show a complete one, and [`testing::conformance`] checks it.
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
