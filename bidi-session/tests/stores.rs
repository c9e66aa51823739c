//! Every store passes the conformance suite; SQLite specifics.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bidi_session::{MemoryStore, SessionStore, SqliteStore, testing};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    testing::conformance(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("sessions.db"))
        .await
        .unwrap();
    testing::conformance(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_store_conforms() {
    testing::conformance(Arc::new(SqliteStore::in_memory().await.unwrap())).await;
}

/// Two stores on one file (as two processes would be) still compare and swap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open(&path).await.unwrap();
    a.save("s", None, json!(1)).await.unwrap();
    b.save("s", Some(1), json!(2)).await.unwrap();
    assert!(
        a.save("s", Some(1), json!(3))
            .await
            .unwrap_err()
            .is_conflict()
    );
    assert_eq!(a.load("s").await.unwrap().unwrap().state, json!(2));
    // Both run the concurrent-update check against the same session file at once.
    let (a, b): (Arc<dyn SessionStore>, Arc<dyn SessionStore>) = (Arc::new(a), Arc::new(b));
    bidi_session::Session::create(a.clone(), "counter", 0u64)
        .await
        .unwrap();
    let bump = |store: Arc<dyn SessionStore>| async move {
        let session = bidi_session::Session::<u64>::load(store, "counter")
            .await
            .unwrap()
            .unwrap();
        for _ in 0..50 {
            session.update(|n| *n += 1).await.unwrap();
        }
    };
    tokio::join!(bump(a.clone()), bump(b.clone()));
    assert_eq!(b.load("counter").await.unwrap().unwrap().state, json!(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_latest_versions() {
    let stores: [Box<dyn SessionStore>; 2] = [
        Box::new(SqliteStore::in_memory().await.unwrap().with_retention(3)),
        Box::new(MemoryStore::new().with_retention(3)),
    ];
    for store in stores {
        store.save("s", None, json!(1)).await.unwrap();
        for v in 1..10 {
            store.save("s", Some(v), json!(v + 1)).await.unwrap();
        }
        let mut kept = Vec::new();
        for v in 1..=10 {
            if store.load_version("s", v).await.unwrap().is_some() {
                kept.push(v);
            }
        }
        assert_eq!(kept, [8, 9, 10], "{store:?}");
        assert_eq!(store.load("s").await.unwrap().unwrap().version, 10);
        // The CAS still works at the head.
        store.save("s", Some(10), json!(11)).await.unwrap();
        assert!(
            store
                .save("s", Some(10), json!(0))
                .await
                .unwrap_err()
                .is_conflict()
        );
    }
}

#[tokio::test]
async fn the_file_is_plain_sqlite_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reopen.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .save("kept", None, json!({"a": [1, 2]}))
            .await
            .unwrap();
        assert_eq!(store.path(), Some(path.as_path()));
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store.load("kept").await.unwrap().unwrap().state,
        json!({"a": [1, 2]})
    );
    // A file that is not a database is a clear backend error.
    let junk = dir.path().join("junk.db");
    std::fs::write(
        &junk,
        b"this is not a database, just some bytes that are long enough",
    )
    .unwrap();
    let error = SqliteStore::open(&junk).await.unwrap_err();
    assert!(error.to_string().contains("backend"), "{error}");
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let error = SqliteStore::open(&path).await.unwrap_err();
    assert!(error.to_string().contains("schema version 99"), "{error}");
}
