//! `PostgresStore` against a real PostgreSQL server: the conformance suite, retention, two
//! stores (two pools) racing on one session, and a server that goes away.
//!
//! The test starts a private server ([`PostgresServer`]: `initdb` + `postgres` from the
//! installed PostgreSQL, on a free port of 127.0.0.1) and stops it when done. With
//! `BIDI_POSTGRES_URL` set it uses that database instead (and skips the dead-server check).

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bidi_session::testing::{self, PostgresServer};
use bidi_session::{PostgresStore, Session, SessionStore, StoreError};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store() {
    let external = std::env::var("BIDI_POSTGRES_URL").ok();
    let server = match &external {
        Some(_) => None,
        None => Some(PostgresServer::start().await.unwrap()),
    };
    let url = external
        .clone()
        .unwrap_or_else(|| server.as_ref().unwrap().url().to_owned());

    // The conformance suite.
    let store = PostgresStore::connect(&url).await.unwrap();
    testing::conformance(Arc::new(store.clone())).await;

    // One version kept: the row moves in place, the CAS holds.
    let single = store.clone().with_retention(1);
    let id = format!("single-{}", std::process::id());
    single.save(&id, None, json!(1)).await.unwrap();
    for v in 1..5 {
        single.save(&id, Some(v), json!(v + 1)).await.unwrap();
    }
    assert!(single.load_version(&id, 4).await.unwrap().is_none());
    assert_eq!(single.load(&id).await.unwrap().unwrap().state, json!(5));
    match single.save(&id, Some(4), json!(0)).await {
        Err(StoreError::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (Some(4), Some(5))),
        other => panic!("expected a conflict, got {other:?}"),
    }

    // Retention: the latest three versions stay, the CAS still works at the head.
    let kept_store = store.clone().with_retention(3);
    let id = format!("retention-{}", std::process::id());
    kept_store.save(&id, None, json!(1)).await.unwrap();
    for v in 1..10 {
        kept_store.save(&id, Some(v), json!(v + 1)).await.unwrap();
    }
    let mut kept = Vec::new();
    for v in 1..=10 {
        if kept_store.load_version(&id, v).await.unwrap().is_some() {
            kept.push(v);
        }
    }
    assert_eq!(kept, [8, 9, 10]);
    kept_store.save(&id, Some(10), json!(11)).await.unwrap();
    assert!(
        kept_store
            .save(&id, Some(10), json!(0))
            .await
            .unwrap_err()
            .is_conflict()
    );

    // Two stores, each with its own pool (as two processes would be), racing on one session:
    // every update counts exactly once.
    let other: Arc<dyn SessionStore> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let one: Arc<dyn SessionStore> = Arc::new(store.clone());
    let id = format!("race-{}", std::process::id());
    Session::create(one.clone(), &id, 0u64).await.unwrap();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let store = if i % 2 == 0 {
                one.clone()
            } else {
                other.clone()
            };
            let id = id.clone();
            tokio::spawn(async move {
                let session = Session::<u64>::load(store, &id).await.unwrap().unwrap();
                for _ in 0..25 {
                    session.update(|n| *n += 1).await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let latest = other.load(&id).await.unwrap().unwrap();
    assert_eq!((latest.state, latest.version), (json!(200), 201));

    // Timestamps are the server's, and a load says what the save said.
    let id = format!("times-{}", std::process::id());
    let saved = store.save(&id, None, json!({"a": 1})).await.unwrap();
    let loaded = store.load(&id).await.unwrap().unwrap();
    assert_eq!(
        (saved.created_at, saved.updated_at),
        (loaded.created_at, loaded.updated_at)
    );
    let second = store.save(&id, Some(1), json!({"a": 2})).await.unwrap();
    assert_eq!(second.created_at, saved.created_at);
    assert!(second.updated_at >= saved.updated_at);

    // What PostgreSQL cannot hold is a clear backend error, and nothing is written.
    let id = format!("nul-{}", std::process::id());
    let refused = store.save(&id, None, json!({"text": "a\u{0}b"})).await;
    assert!(
        matches!(refused, Err(StoreError::Backend(_))),
        "{refused:?}"
    );
    assert!(store.load(&id).await.unwrap().is_none());

    // The server goes away: calls fail with a backend error instead of hanging.
    if let Some(server) = server {
        drop(server);
        let failed = tokio::time::timeout(Duration::from_secs(60), store.load("anything"))
            .await
            .expect("a dead server fails calls instead of hanging them");
        assert!(matches!(failed, Err(StoreError::Backend(_))), "{failed:?}");
        assert!(
            PostgresStore::connect(&url).await.is_err(),
            "nothing listens any more"
        );
    }
}

/// Over TLS: with the server's certificate trusted, `sslmode=require` works; with only the
/// system's roots, the connection is refused, so the store really speaks TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_over_tls() {
    let server = PostgresServer::start_with_tls().await.unwrap();
    let url = format!("{}?sslmode=require", server.url());
    let root = native_tls::Certificate::from_pem(server.certificate().unwrap()).unwrap();
    let tls = native_tls::TlsConnector::builder()
        .add_root_certificate(root)
        .build()
        .unwrap();
    let store = PostgresStore::connect_with_tls(&url, tls).await.unwrap();
    let saved = store.save("tls", None, json!({"secret": 1})).await.unwrap();
    assert_eq!(store.load("tls").await.unwrap().unwrap(), saved);

    let untrusted = PostgresStore::connect(&url).await;
    assert!(
        matches!(untrusted, Err(StoreError::Backend(_))),
        "{untrusted:?}"
    );
}
