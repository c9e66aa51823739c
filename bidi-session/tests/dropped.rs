//! A `Session` whose write was dropped before the store answered does not know its head: its
//! next write reads the head again and answers a conflict, instead of writing a change found
//! against a state the store no longer has.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bidi_session::{
    Append, Change, Entry, Finish, Lease, MemoryStore, Renewal, Session, SessionStore, Snapshot,
    Status, StoreError, async_trait,
};
use serde_json::{Value, json};

/// A `MemoryStore` whose writes, while `hang` is set, happen and then never answer: as a
/// store whose answer is lost after it wrote, or a write dropped at that moment.
#[derive(Debug, Default)]
struct Hanging {
    store: MemoryStore,
    hang: AtomicBool,
}

impl Hanging {
    async fn after<T>(&self, written: Result<T, StoreError>) -> Result<T, StoreError> {
        if self.hang.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
        written
    }
}

#[async_trait]
impl SessionStore for Hanging {
    async fn load(&self, session_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.store.load(session_id).await
    }
    async fn load_snapshot(&self, snapshot_id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.store.load_snapshot(snapshot_id).await
    }
    async fn entry(&self, snapshot_id: &str) -> Result<Option<Entry>, StoreError> {
        self.store.entry(snapshot_id).await
    }
    async fn append(&self, session_id: &str, append: Append) -> Result<Entry, StoreError> {
        let written = self.store.append(session_id, append).await;
        self.after(written).await
    }
    async fn finish(&self, snapshot_id: &str, finish: Finish) -> Result<Entry, StoreError> {
        let written = self.store.finish(snapshot_id, finish).await;
        self.after(written).await
    }
    async fn renew(
        &self,
        snapshot_id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<Renewal, StoreError> {
        self.store.renew(snapshot_id, owner, expires_at).await
    }
    async fn abort(&self, snapshot_id: &str) -> Result<Option<Status>, StoreError> {
        self.store.abort(snapshot_id).await
    }
    async fn delete(&self, session_id: &str) -> Result<bool, StoreError> {
        self.store.delete(session_id).await
    }
    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.store.list().await
    }
}

/// Runs `write` until it is clearly waiting for the store's answer, then drops it.
async fn dropped<T>(write: impl Future<Output = T>) {
    let timed = tokio::time::timeout(Duration::from_millis(50), write).await;
    assert!(timed.is_err(), "the write answered");
}

/// A turn's finish dropped after the store wrote it: the session's next write is a conflict
/// that reads the turn's state, and the write after it goes on from there. Before, the
/// session kept its stale state: its writes were refused as running until the lease lapsed,
/// then a change found against that state was written (`["a", "c"]` over the turn's
/// `["a", "b"]` stored `["a", "c", "b"]`).
#[tokio::test]
async fn a_dropped_finish_is_read_again_before_the_next_write() {
    let store = Arc::new(Hanging::default());
    let shared: Arc<dyn SessionStore> = store.clone();
    let session = Session::create(shared, "s", json!(["a"])).await.unwrap();
    // A lease that holds through the test: the finish is never refused for a lapsed one.
    session
        .start(Lease::new("me", Duration::from_secs(60)))
        .await
        .unwrap();
    store.hang.store(true, Ordering::Relaxed);
    let change = Change::new().push("", json!("b"));
    dropped(session.finish(json!(["a", "b"]), change, Status::Completed, None)).await;
    store.hang.store(false, Ordering::Relaxed);
    assert_eq!(
        store.load("s").await.unwrap().unwrap().state,
        json!(["a", "b"])
    );

    let stale = session.update_state(json!(["a", "c"])).await.unwrap_err();
    assert!(stale.is_conflict(), "{stale:?}");
    assert_eq!(session.state(), json!(["a", "b"]));
    session
        .update(|state: &mut Value| state[1] = json!("c"))
        .await
        .unwrap();
    assert_eq!(
        store.load("s").await.unwrap().unwrap().state,
        json!(["a", "c"])
    );
}

/// The same for a plain write and for a turn's start: after either is dropped, the session
/// reads its head again before it writes.
#[tokio::test]
async fn a_dropped_write_or_start_is_read_again_before_the_next_write() {
    let store = Arc::new(Hanging::default());
    let shared: Arc<dyn SessionStore> = store.clone();
    let session = Session::create(shared, "s", json!(1)).await.unwrap();
    store.hang.store(true, Ordering::Relaxed);
    dropped(session.update_state(json!(2))).await;
    store.hang.store(false, Ordering::Relaxed);
    assert!(
        session
            .update_state(json!(3))
            .await
            .unwrap_err()
            .is_conflict()
    );
    assert_eq!(session.state(), json!(2));
    session.update_state(json!(3)).await.unwrap();

    store.hang.store(true, Ordering::Relaxed);
    dropped(session.start(Lease::new("me", Duration::from_secs(60)))).await;
    store.hang.store(false, Ordering::Relaxed);
    // The dropped start holds the session: the session learns it instead of writing past it.
    assert!(
        session
            .update_state(json!(4))
            .await
            .unwrap_err()
            .is_conflict()
    );
    let running = session.update_state(json!(4)).await.unwrap_err();
    assert!(matches!(running, StoreError::Running { .. }), "{running:?}");
}
