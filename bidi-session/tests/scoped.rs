//! `Scoped`: a scope's sessions conform, and scopes never see each other's.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bidi_session::{
    Append, Change, Finish, Lease, MemoryStore, Parent, Scoped, Session, SessionStore, Status,
    StoreError, testing,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_memory_store_conforms() {
    let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    testing::conformance(Arc::new(Scoped::new(Arc::clone(&shared), "alice"))).await;
    // Beside it in the same store: a scope it prefixes, and the empty scope.
    testing::conformance(Arc::new(Scoped::new(Arc::clone(&shared), "alice:x"))).await;
    testing::conformance(Arc::new(Scoped::new(Arc::clone(&shared), ""))).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let shared: Arc<dyn SessionStore> = Arc::new(
        bidi_session::SqliteStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap(),
    );
    testing::conformance(Arc::new(Scoped::new(shared, "tenant 🦀"))).await;
}

/// The same id in two scopes names two sessions; each scope lists only its own.
#[tokio::test]
async fn two_scopes_never_see_each_other() {
    let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let alice = Scoped::new(Arc::clone(&shared), "alice");
    let bob = Scoped::new(Arc::clone(&shared), "bob");

    let created = alice
        .append("chat", Append::create(json!("a1")))
        .await
        .unwrap();
    assert_eq!((created.session_id.as_str(), created.version), ("chat", 1));
    assert!(bob.load("chat").await.unwrap().is_none());
    assert!(bob.load_snapshot(&created.id).await.unwrap().is_none());
    assert!(bob.entry(&created.id).await.unwrap().is_none());
    assert!(bob.list().await.unwrap().is_empty());
    // Bob cannot write after alice's snapshot: in his scope there is no such session...
    let after = |id: &str| {
        Append::change(
            Parent::Head(id.to_owned()),
            Change::new().set("", json!("b?")),
        )
    };
    match bob.append("chat", after(&created.id)).await {
        Err(StoreError::Conflict {
            session_id, actual, ..
        }) => assert_eq!((session_id.as_str(), actual), ("chat", None)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    // ...nor branch from it, nor abort it.
    let branch = Append::change(Parent::Branch(created.id.clone()), Change::new());
    assert!(bob.append("notes", branch).await.is_err());
    let pending = alice
        .append(
            "chat",
            Append::pending(
                Parent::Head(created.id.clone()),
                Lease::new("turn", Duration::from_secs(60)),
            ),
        )
        .await
        .unwrap();
    assert_eq!(bob.abort(&pending.id).await.unwrap(), None);
    assert_eq!(
        alice.entry(&pending.id).await.unwrap().unwrap().status,
        Status::Pending
    );
    alice
        .finish(
            &pending.id,
            Finish::new(
                "turn",
                Status::Completed,
                Change::new().set("", json!("a2")),
            ),
        )
        .await
        .unwrap();
    // His own "chat" is a second session, at version 1.
    assert_eq!(
        bob.append("chat", Append::create(json!("b1")))
            .await
            .unwrap()
            .version,
        1
    );
    alice
        .append("notes", Append::create(json!("n")))
        .await
        .unwrap();

    let mine = alice.load("chat").await.unwrap().unwrap();
    assert_eq!(
        (mine.session_id(), mine.version(), &mine.state),
        ("chat", 2, &json!("a2"))
    );
    let theirs = bob.load("chat").await.unwrap().unwrap();
    assert_eq!((theirs.version(), theirs.state), (1, json!("b1")));
    assert_eq!(alice.list().await.unwrap(), ["chat", "notes"]);
    assert_eq!(bob.list().await.unwrap(), ["chat"]);
    assert_eq!(
        shared.list().await.unwrap(),
        ["3:bob:chat", "5:alice:chat", "5:alice:notes"]
    );

    // Deleting bob's session leaves alice's.
    assert!(!bob.delete("notes").await.unwrap());
    assert!(bob.delete("chat").await.unwrap());
    assert!(bob.load("chat").await.unwrap().is_none());
    assert_eq!(alice.load("chat").await.unwrap().unwrap().version(), 2);
}

/// Scopes that prefix one another, or hold colons and digits, keep apart whatever the ids.
#[tokio::test]
async fn prefix_scopes_cannot_collide() {
    let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let pairs = [
        // (scope, id) pairs whose naive "scope:id" keys coincide.
        (("a", "b:c"), ("a:b", "c")),
        (("a:", "x"), ("a", ":x")),
        (("1", "x"), ("", "1:x")),
        (("", ""), ("0", "")),
    ];
    for ((s1, id1), (s2, id2)) in pairs {
        let one = Scoped::new(Arc::clone(&shared), s1);
        let two = Scoped::new(Arc::clone(&shared), s2);
        one.append(id1, Append::create(json!(s1))).await.unwrap();
        assert!(
            two.load(id2).await.unwrap().is_none(),
            "{s2:?}/{id2:?} sees {s1:?}/{id1:?}"
        );
        two.append(id2, Append::create(json!(s2))).await.unwrap();
        assert_eq!(one.load(id1).await.unwrap().unwrap().state, json!(s1));
        assert_eq!(two.load(id2).await.unwrap().unwrap().state, json!(s2));
        assert_eq!(one.list().await.unwrap(), [id1]);
        assert_eq!(two.list().await.unwrap(), [id2]);
        assert!(one.delete(id1).await.unwrap());
        assert!(two.delete(id2).await.unwrap());
    }
    assert!(shared.list().await.unwrap().is_empty());
}

/// Errors name the id the caller used, never the key in the shared store.
#[tokio::test]
async fn errors_name_the_unscoped_id() {
    let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let scoped: Arc<dyn SessionStore> = Arc::new(Scoped::new(shared, "alice"));
    let session = Session::create(Arc::clone(&scoped), "chat", 0u32)
        .await
        .unwrap();
    assert_eq!(session.id(), "chat");
    match scoped.append("chat", Append::create(json!(1))).await {
        Err(StoreError::Conflict { session_id, .. }) => assert_eq!(session_id, "chat"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(scoped.delete("chat").await.unwrap());
    let error = session.update(|n| *n += 1).await.unwrap_err();
    assert_eq!(error.to_string(), "no session `chat`");
}

/// A clone is the same scope of the same store.
#[tokio::test]
async fn clone_debug_and_scope() {
    let scoped = Scoped::new(Arc::new(MemoryStore::new()), "alice");
    let clone = scoped.clone();
    clone
        .append("chat", Append::create(json!(1)))
        .await
        .unwrap();
    assert_eq!(scoped.list().await.unwrap(), ["chat"]);
    assert_eq!(scoped.scope(), "alice");
    assert!(format!("{scoped:?}").contains("\"alice\""));
}
