//! [`Scoped`]: the sessions of one scope (a user, a tenant) in a shared store.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bidi_core::NotFound;

use crate::store::{
    Append, Entry, Finish, Parent, Renewal, SessionStore, Snapshot, Status, StoreError,
};
use crate::streams::Streams;

/// The sessions of one scope, an identity such as a user or a tenant, in a store shared with
/// other scopes.
///
/// A `Scoped` store is a [`SessionStore`] whose ids name sessions only within its scope: session
/// `chat` of scope `alice` and session `chat` of scope `bob` are two sessions, and neither scope
/// can load, append to, abort, delete or list the other's, by session id or by snapshot id.
/// Snapshots, lists and errors carry the session ids the caller used; the scope never shows.
///
/// ```
/// use std::sync::Arc;
/// use bidi_session::{Append, MemoryStore, Scoped, SessionStore};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_session::StoreError> {
/// let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
/// let alice = Scoped::new(shared.clone(), "alice");
/// let bob = Scoped::new(shared.clone(), "bob");
///
/// let first = alice.append("chat", Append::create(json!("alice's"))).await?;
/// assert!(bob.load("chat").await?.is_none()); // bob cannot see it
/// assert!(bob.load_snapshot(&first.id).await?.is_none()); // not even by snapshot id
/// bob.append("chat", Append::create(json!("bob's"))).await?; // his own "chat" is another session
///
/// let snapshot = alice.load("chat").await?.unwrap();
/// assert_eq!((snapshot.session_id(), &snapshot.state), ("chat", &json!("alice's")));
/// assert_eq!(bob.list().await?, ["chat"]);
/// assert_eq!(shared.list().await?.len(), 2);
/// # Ok(())
/// # }
/// ```
///
/// # Keys in the shared store
///
/// Session `id` of scope `scope` is stored under `{n}:{scope}:{id}`, where `n` is the scope's
/// length in bytes: `5:alice:chat`. The length makes the keys of two scopes distinct even when one
/// scope is a prefix of the other (`a` and `a:b`), so no scope can reach another's sessions
/// whatever ids it uses.
///
/// The shared store itself sees those keys, and so does anyone using it unscoped: an unscoped id
/// `5:alice:chat` *is* alice's session. Give every untrusted caller a scope, or keep unscoped use
/// of the store to code you trust. [`list`](SessionStore::list) reads the whole shared store's
/// list and keeps this scope's ids, so it costs as much as listing every scope.
#[derive(Clone)]
pub struct Scoped {
    store: Arc<dyn SessionStore>,
    scope: Arc<str>,
    /// `{n}:{scope}:`, what every key of this scope starts with.
    prefix: Arc<str>,
}

impl Scoped {
    /// The sessions of `scope` in `store`.
    #[must_use]
    pub fn new(store: Arc<dyn SessionStore>, scope: impl Into<Arc<str>>) -> Self {
        let scope = scope.into();
        let prefix = Arc::from(format!("{}:{}:", scope.len(), scope));
        Self {
            store,
            scope,
            prefix,
        }
    }

    /// The scope.
    #[must_use]
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The shared store itself: a call through the `Arc` would box its future twice, the
    /// second time in the `Arc`'s forwarding impl.
    fn backend(&self) -> &dyn SessionStore {
        &*self.store
    }

    /// The key of session `id` in the shared store.
    fn key(&self, id: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + id.len());
        key.push_str(&self.prefix);
        key.push_str(id);
        key
    }

    /// `snapshot`, named by the caller's `id` instead of its key.
    /// `entry` with the caller's session id, if it is one of this scope's.
    fn unscoped(&self, mut entry: Entry) -> Option<Entry> {
        let id = entry.session_id.strip_prefix(&*self.prefix)?.to_owned();
        entry.session_id = id;
        Some(entry)
    }

    fn unscoped_snapshot(&self, snapshot: Snapshot) -> Option<Snapshot> {
        let Snapshot { entry, state } = snapshot;
        Some(Snapshot::new(self.unscoped(entry)?, state))
    }

    fn unscoped_error(&self, error: StoreError, id: &str) -> StoreError {
        match error {
            StoreError::Conflict {
                expected, actual, ..
            } => StoreError::Conflict {
                session_id: id.to_owned(),
                expected,
                actual,
            },
            StoreError::Contended { attempts, .. } => StoreError::Contended {
                session_id: id.to_owned(),
                attempts,
            },
            StoreError::NotFound(mut missing) => {
                id.clone_into(&mut missing.name);
                // A suggestion is kept only if it is one of this scope's sessions.
                missing.suggestion = missing
                    .suggestion
                    .as_deref()
                    .and_then(|key| key.strip_prefix(&*self.prefix))
                    .map(str::to_owned);
                StoreError::NotFound(missing)
            }
            other => other,
        }
    }
}

impl fmt::Debug for Scoped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoped")
            .field("scope", &self.scope)
            .field("store", &self.store)
            .finish()
    }
}

#[async_trait]
impl SessionStore for Scoped {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        match self.backend().load(&self.key(session_id)).await {
            Ok(snapshot) => Ok(snapshot.and_then(|s| self.unscoped_snapshot(s))),
            Err(error) => Err(self.unscoped_error(error, session_id)),
        }
    }

    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let snapshot = self.backend().load_snapshot(snapshot_id).await?;
        Ok(snapshot.and_then(|s| self.unscoped_snapshot(s)))
    }

    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        let entry = self.backend().entry(snapshot_id).await?;
        Ok(entry.and_then(|e| self.unscoped(e)))
    }

    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        // A fork goes on from a snapshot of this scope only.
        if let Parent::Fork(from) = &append.parent
            && self.entry(from).await?.is_none()
        {
            return Err(StoreError::NotFound(NotFound::new(
                "snapshot",
                from.clone(),
            )));
        }
        match self.backend().append(&self.key(session_id), append).await {
            // The store wrote under this scope's key: the entry is this scope's.
            Ok(entry) => self.unscoped(entry).ok_or_else(|| {
                StoreError::backend("the store wrote a snapshot under another session's key")
            }),
            Err(error) => Err(self.unscoped_error(error, session_id)),
        }
    }

    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        // Only the turn holding the snapshot finishes it, and its owner names it.
        let entry = self.backend().finish(snapshot_id, finish).await?;
        self.unscoped(entry)
            .ok_or_else(|| StoreError::not_found(snapshot_id))
    }

    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        // Only a turn of this scope holds a lease it could renew: the owner names it.
        self.backend().renew(snapshot_id, owner, expires_at).await
    }

    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        if self.entry(snapshot_id).await?.is_none() {
            return Ok(None);
        }
        self.backend().abort(snapshot_id).await
    }

    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        self.backend()
            .delete(&self.key(session_id))
            .await
            .map_err(|error| self.unscoped_error(error, session_id))
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self
            .backend()
            .list()
            .await?
            .into_iter()
            .filter_map(|key| key.strip_prefix(&*self.prefix).map(str::to_owned))
            .collect();
        // Sorted as the caller's ids, whatever order the shared store lists its keys in.
        ids.sort_unstable();
        Ok(ids)
    }

    /// The shared store's: snapshot ids are the store's, and a reader finds the snapshot it
    /// follows through this scope first.
    fn streams(&self) -> Option<&dyn Streams> {
        self.store.streams()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scope's keys start with its prefix, and no other scope's key does, when one scope's
    /// name is a prefix of the other's or contains colons and digits.
    #[test]
    fn keys_of_two_scopes_never_share_a_prefix() {
        let scopes = [
            "", "a", "a:", "a:b", "1", "1:a", "2:a:", "ab", "b", "10", "a:b:c",
        ];
        let store: Arc<dyn SessionStore> = Arc::new(crate::MemoryStore::new());
        for one in scopes {
            let one = Scoped::new(Arc::clone(&store), one);
            for other in scopes {
                let other = Scoped::new(Arc::clone(&store), other);
                for id in ["", "b", ":b", "b:c", "1:x"] {
                    let key = other.key(id);
                    assert_eq!(
                        key.strip_prefix(&*one.prefix).is_some(),
                        one.scope == other.scope,
                        "scope {:?} and key {key:?} of scope {:?}",
                        one.scope,
                        other.scope
                    );
                }
            }
        }
    }
}
