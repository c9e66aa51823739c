//! `PostgresStore` against a real PostgreSQL server: the conformance suite, two stores (two
//! pools, as two processes would have) racing on one session and seeing each other's aborts,
//! the migration of a database written by an older version, and a server that goes away.
//!
//! The tests start private servers ([`PostgresServer`]: `initdb` + `postgres` from the
//! installed PostgreSQL, on a free port of 127.0.0.1) and stop them when done. With
//! `BIDI_POSTGRES_URL` set, the main test uses that database instead (and skips the
//! dead-server check); the migration test always makes databases of its own.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bidi_session::testing::{self, PostgresServer};
use bidi_session::{
    Append, Change, Entry, Finish, Lease, Parent, Piece, PostgresStore, Renewal, Session,
    SessionStore, Status, StoreError,
};
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// Held by each test: one at a time, so that no test's timing (the concurrency checks of the
/// conformance suite) suffers from the others starting servers on the same cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store() {
    let _one = ONE_AT_A_TIME.lock().await;
    let external = std::env::var("BIDI_POSTGRES_URL").ok();
    let server = match &external {
        Some(_) => None,
        None => Some(PostgresServer::start().await.unwrap()),
    };
    let url = external
        .clone()
        .unwrap_or_else(|| server.as_ref().unwrap().url().to_owned());
    let run = std::process::id();

    // The conformance suite.
    let store = PostgresStore::connect(&url).await.unwrap();
    testing::conformance(Arc::new(store.clone())).await;
    testing::takeover(&store, &format!("{run}-")).await;

    // Two stores, each with its own pool, as two processes would be.
    let one: Arc<dyn SessionStore> = Arc::new(store.clone());
    let other: Arc<dyn SessionStore> = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let stores = [Arc::clone(&one), Arc::clone(&other)];

    // Appends racing on one head through both: exactly one wins, the others are told its id.
    for round in 0..5 {
        let id = format!("race-{run}-{round}");
        let root = one
            .append(&id, Append::create(json!({"n": 0})))
            .await
            .unwrap();
        let racers: Vec<_> = (0..8)
            .map(|n| {
                let store = Arc::clone(&stores[n % 2]);
                let (id, root) = (id.clone(), root.id.clone());
                tokio::spawn(async move {
                    let change = Change::new().set("/n", json!(n));
                    store
                        .append(&id, Append::change(Parent::Head(root), change))
                        .await
                })
            })
            .collect();
        let (winners, losers) = outcomes(racers).await;
        let [winner] = &winners[..] else {
            panic!("exactly one append wins: {winners:?}");
        };
        assert_eq!(losers.len(), 7);
        for loser in losers {
            match loser {
                StoreError::Conflict {
                    expected, actual, ..
                } => assert_eq!(
                    (expected.as_deref(), actual.as_deref()),
                    (Some(root.id.as_str()), Some(winner.id.as_str()))
                ),
                other => panic!("a losing append: {other:?}"),
            }
        }
        assert_eq!(other.load(&id).await.unwrap().unwrap().entry.id, winner.id);
    }

    // Creates racing on a new id through both: the primary key lets exactly one in.
    for round in 0..5 {
        let id = format!("create-race-{run}-{round}");
        let racers: Vec<_> = (0..4)
            .map(|n| {
                let (store, id) = (Arc::clone(&stores[n % 2]), id.clone());
                tokio::spawn(async move { store.append(&id, Append::create(json!(n))).await })
            })
            .collect();
        let (winners, losers) = outcomes(racers).await;
        let [winner] = &winners[..] else {
            panic!("exactly one create wins: {winners:?}");
        };
        for loser in losers {
            match loser {
                StoreError::Conflict {
                    expected, actual, ..
                } => assert_eq!(
                    (expected, actual.as_deref()),
                    (None, Some(winner.id.as_str()))
                ),
                other => panic!("a losing create: {other:?}"),
            }
        }
    }

    // A session updated through both stores: every update counts exactly once. (A writer that
    // keeps losing to the others gives up, `Contended`, having written nothing: it tries again.
    // Here its reload replays the lineage while the writer that won appends from its cache, so
    // on a busy machine that happens.)
    let id = format!("counter-{run}");
    Session::create(Arc::clone(&one), &id, 0u64).await.unwrap();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let (store, id) = (Arc::clone(&stores[i % 2]), id.clone());
            tokio::spawn(async move {
                let session = Session::<u64>::load(store, &id).await.unwrap().unwrap();
                let mut counted = 0;
                while counted < 25 {
                    match session.update(|n| *n += 1).await {
                        Ok(()) => counted += 1,
                        Err(StoreError::Contended { .. }) => {}
                        Err(other) => panic!("an update failed: {other}"),
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let latest = other.load(&id).await.unwrap().unwrap();
    assert_eq!((latest.version(), latest.state), (201, json!(200)));

    // A turn in one store, renewed there, aborted from the other.
    let id = format!("turn-{run}");
    let root = one
        .append(&id, Append::create(json!({"log": []})))
        .await
        .unwrap();
    let pending = one
        .append(
            &id,
            Append::pending(
                Parent::Head(root.id.clone()),
                Lease::new("turn-a", Duration::from_secs(30)),
            ),
        )
        .await
        .unwrap();
    let until = pending.lease.as_ref().unwrap().expires_at + 60_000;
    assert_eq!(
        one.renew(&pending.id, "turn-a", until).await.unwrap(),
        Renewal::Renewed
    );
    let seen = other.entry(&pending.id).await.unwrap().unwrap();
    assert_eq!(
        (seen.status, seen.lease.map(|lease| lease.expires_at)),
        (Status::Pending, Some(until)),
        "the other store sees the renewal"
    );
    let refused = other
        .append(
            &id,
            Append::change(Parent::Head(pending.id.clone()), Change::new()),
        )
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Running { lease, .. }) if lease.owner == "turn-a"),
        "{refused:?}"
    );
    assert!(matches!(
        other.renew(&pending.id, "turn-b", until).await,
        Err(StoreError::NotHeld { .. })
    ));
    assert_eq!(
        other.abort(&pending.id).await.unwrap(),
        Some(Status::Pending)
    );
    assert_eq!(
        one.entry(&pending.id).await.unwrap().unwrap().status,
        Status::Aborted,
        "the abort is seen by the store running the turn"
    );
    assert_eq!(
        one.renew(&pending.id, "turn-a", until).await.unwrap(),
        Renewal::Aborted
    );
    let change = Change::new().push("/log", json!("partial"));
    let finished = one
        .finish(
            &pending.id,
            Finish::new("turn-a", Status::Completed, change),
        )
        .await
        .unwrap();
    assert_eq!((finished.status, &finished.lease), (Status::Aborted, &None));
    let head = other.load(&id).await.unwrap().unwrap();
    assert_eq!(
        (head.entry, head.state),
        (finished, json!({"log": ["partial"]})),
        "the aborted turn keeps its change; a load says what the finish said"
    );
    assert_eq!(
        other.abort(&pending.id).await.unwrap(),
        Some(Status::Aborted)
    );
    assert_eq!(other.abort("no-such-snapshot").await.unwrap(), None);

    streams_across_stores(&one, &other, run).await;

    // States are JSON text: a NUL in a string is stored (escaped) like any character. A NUL
    // in a session id PostgreSQL refuses: a clear backend error, and nothing is written.
    let id = format!("nul-{run}");
    store
        .append(&id, Append::create(json!({"text": "a\u{0}b"})))
        .await
        .unwrap();
    assert_eq!(
        store.load(&id).await.unwrap().unwrap().state,
        json!({"text": "a\u{0}b"})
    );
    let id = format!("nul-\u{0}-{run}");
    let refused = store.append(&id, Append::create(json!(1))).await;
    assert!(
        matches!(refused, Err(StoreError::Backend(_))),
        "{refused:?}"
    );
    assert!(!store.list().await.unwrap().contains(&id));

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

/// The entries and the errors of racing appends.
/// A turn's stream published through one store and followed through the other, as a client
/// reconnecting to another process would; and a stream whose writer died, which ends.
async fn streams_across_stores(
    one: &Arc<dyn SessionStore>,
    other: &Arc<dyn SessionStore>,
    run: u32,
) {
    let turn = |id: String, term: Duration| {
        let one = Arc::clone(one);
        async move {
            let root = one.append(&id, Append::create(json!({}))).await.unwrap();
            let lease = Lease::new("turn-s", term);
            one.append(&id, Append::pending(Parent::Head(root.id), lease))
                .await
                .unwrap()
                .id
        }
    };
    let snapshot = turn(format!("stream-{run}"), Duration::from_secs(30)).await;
    let (writer, id) = (Arc::clone(one), snapshot.clone());
    let publish = move |seq: u64, bytes: &[u8], last: bool| {
        let (one, snapshot) = (Arc::clone(&writer), id.clone());
        let piece = Piece::new(seq, bytes.to_vec(), last);
        async move {
            one.streams()
                .unwrap()
                .publish(&snapshot, piece)
                .await
                .unwrap();
        }
    };
    publish(0, b"data: a\n\n", false).await;
    let mut follow = other.streams().unwrap().follow(&snapshot).await.unwrap();
    let next = follow.next().await.unwrap().unwrap();
    assert_eq!((next.seq, next.bytes.as_slice()), (0, &b"data: a\n\n"[..]));
    // The rest comes as it is published, woken by the notification.
    let later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        publish(1, b"data: b\n\n", false).await;
        publish(2, b"", true).await;
    });
    let next = follow.next().await.unwrap().unwrap();
    assert_eq!((next.seq, next.bytes.as_slice()), (1, &b"data: b\n\n"[..]));
    assert!(follow.next().await.unwrap().unwrap().last);
    assert!(
        follow.next().await.is_none(),
        "nothing after the last piece"
    );
    later.await.unwrap();

    // A writer that died mid-stream: its lease lapses, and its reader ends after what it wrote.
    let dead = turn(format!("stream-dead-{run}"), Duration::from_millis(200)).await;
    let piece = Piece::new(0, b"half".to_vec(), false);
    one.streams().unwrap().publish(&dead, piece).await.unwrap();
    let mut follow = other.streams().unwrap().follow(&dead).await.unwrap();
    assert_eq!(follow.next().await.unwrap().unwrap().bytes, b"half");
    let end = tokio::time::timeout(Duration::from_secs(20), follow.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");

    // A running turn that is not streamed (no opening piece a few seconds after it started):
    // its reader ends at once, not when the turn does, ten minutes on.
    let quiet = turn(format!("stream-quiet-{run}"), Duration::from_secs(600)).await;
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let mut follow = other.streams().unwrap().follow(&quiet).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(120), follow.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

async fn outcomes(
    racers: Vec<tokio::task::JoinHandle<Result<Entry, StoreError>>>,
) -> (Vec<Entry>, Vec<StoreError>) {
    let (mut winners, mut losers) = (Vec::new(), Vec::new());
    for racer in racers {
        match racer.await.unwrap() {
            Ok(entry) => winners.push(entry),
            Err(error) => losers.push(error),
        }
    }
    (winners, losers)
}

/// Over TLS: with the server's certificate trusted, `sslmode=require` works; with only the
/// system's roots, the connection is refused, so the store really speaks TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_over_tls() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = PostgresServer::start_with_tls().await.unwrap();
    let url = format!("{}?sslmode=require", server.url());
    let root = native_tls::Certificate::from_pem(server.certificate().unwrap()).unwrap();
    let tls = native_tls::TlsConnector::builder()
        .add_root_certificate(root)
        .build()
        .unwrap();
    let store = PostgresStore::connect_with_tls(&url, tls).await.unwrap();
    let created = store
        .append("tls", Append::create(json!({"secret": 1})))
        .await
        .unwrap();
    let loaded = store.load("tls").await.unwrap().unwrap();
    assert_eq!(
        (loaded.entry, loaded.state),
        (created, json!({"secret": 1}))
    );

    let untrusted = PostgresStore::connect(&url).await;
    assert!(
        matches!(untrusted, Err(StoreError::Backend(_))),
        "{untrusted:?}"
    );
}

/// The table versions before the log of snapshots wrote, every version whole.
const OLD_SCHEMA: &str = "
CREATE TABLE bidi_snapshots (
    session_id TEXT NOT NULL,
    version    BIGINT NOT NULL,
    state      JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (session_id, version)
);
INSERT INTO bidi_snapshots VALUES
    ('chat', 1, '{\"messages\": [\"hi\"]}', '2024-01-02 03:04:05.678+00', '2024-01-02 03:04:05.678+00'),
    ('chat', 2, '{\"messages\": [\"hi\", \"hello\"]}', '2024-01-02 03:04:05.678+00', '2024-01-02 03:05:00+00'),
    ('chat', 3, '{\"messages\": [\"hi\", \"hello\", \"bye\"]}', '2024-01-02 03:04:05.678+00', '2024-01-02 03:06:00+00'),
    ('single', 1, '[1, \"é 🦀\", null]', '2024-02-01 00:00:00+00', '2024-02-01 00:00:00+00'),
    ('pruned', 8, '{\"n\": 8}', '2024-03-01 00:00:00+00', '2024-03-01 00:00:08+00'),
    ('pruned', 9, '{\"n\": 9}', '2024-03-01 00:00:00+00', '2024-03-01 00:00:09+00');
";

/// A database of `server` made for the test: its URL, and a client of it.
async fn database(server: &PostgresServer, name: &str) -> (String, tokio_postgres::Client) {
    let admin = client(server.url()).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let base = server.url().strip_suffix("/postgres").unwrap();
    let url = format!("{base}/{name}");
    let client = client(&url).await;
    (url, client)
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// A database written by an older version (`bidi_snapshots`, every version whole) is migrated
/// as stores connect to it, once though two connect at once: each old version is a snapshot
/// (a checkpoint of its state) after the one before, the last is the head, and the sessions go
/// on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_migrates_the_old_table() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = PostgresServer::start().await.unwrap();
    let (url, sql) = database(&server, "bidi_old").await;
    sql.batch_execute(OLD_SCHEMA).await.unwrap();

    let (a, b) = tokio::join!(PostgresStore::connect(&url), PostgresStore::connect(&url));
    let (store, again) = (a.unwrap(), b.unwrap());
    assert_eq!(count(&sql, "SELECT count(*) FROM bidi_entries").await, 6);
    assert_eq!(
        count(
            &sql,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'bidi_snapshots'"
        )
        .await,
        0,
        "the old table is gone"
    );
    assert_eq!(store.list().await.unwrap(), ["chat", "pruned", "single"]);

    // The head is the last version, each version is loadable by walking the parents.
    let head = again.load("chat").await.unwrap().unwrap();
    assert_eq!(head.state, json!({"messages": ["hi", "hello", "bye"]}));
    let at = |millis| UNIX_EPOCH + Duration::from_millis(millis);
    let mut walked = Vec::new();
    let mut next = Some(head.entry.id.clone());
    while let Some(id) = next {
        let snapshot = store.load_snapshot(&id).await.unwrap().unwrap();
        let entry = store.entry(&id).await.unwrap().unwrap();
        assert_eq!(entry, snapshot.entry);
        assert_eq!(
            (
                entry.session_id.as_str(),
                entry.status,
                &entry.lease,
                &entry.error
            ),
            ("chat", Status::Completed, &None, &None)
        );
        assert_eq!(
            entry.created_at,
            at(1_704_164_645_678),
            "the old times, to the ms"
        );
        let state_bytes = snapshot.state.to_string().len() as u64;
        assert!(
            entry.replay.changes == 0 && entry.replay.checkpoint >= state_bytes,
            "a checkpoint: {:?}",
            entry.replay
        );
        walked.push((entry.version, snapshot.state, entry.updated_at));
        next = entry.parent_id;
    }
    walked.reverse();
    assert_eq!(
        walked,
        [
            (1, json!({"messages": ["hi"]}), at(1_704_164_645_678)),
            (
                2,
                json!({"messages": ["hi", "hello"]}),
                at(1_704_164_700_000)
            ),
            (
                3,
                json!({"messages": ["hi", "hello", "bye"]}),
                at(1_704_164_760_000)
            ),
        ]
    );
    let single = store.load("single").await.unwrap().unwrap();
    assert_eq!(
        (single.version(), single.entry.parent_id, single.state),
        (1, None, json!([1, "é 🦀", null]))
    );
    // Versions an older retention deleted stay missing: the lineage starts at the first kept.
    let pruned = store.load("pruned").await.unwrap().unwrap();
    assert_eq!((pruned.version(), &pruned.state), (9, &json!({"n": 9})));
    let first = store
        .load_snapshot(pruned.entry.parent_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.version(), first.entry.parent_id, first.state),
        (8, None, json!({"n": 8}))
    );

    // The sessions go on after their heads, compare-and-swap included.
    let change = Change::new().push("/messages", json!("again"));
    let next = again
        .append(
            "chat",
            Append::change(Parent::Head(head.entry.id.clone()), change),
        )
        .await
        .unwrap();
    assert_eq!(
        (next.version, next.parent_id.as_deref()),
        (4, Some(head.entry.id.as_str()))
    );
    assert_eq!(
        store.load("chat").await.unwrap().unwrap().state,
        json!({"messages": ["hi", "hello", "bye", "again"]})
    );
    let stale = store
        .append(
            "chat",
            Append::change(Parent::Head(head.entry.id.clone()), Change::new()),
        )
        .await;
    assert!(stale.unwrap_err().is_conflict());
    let session = Session::<Value>::load(Arc::new(store.clone()), "single")
        .await
        .unwrap()
        .unwrap();
    session.update(|state| state[0] = json!(2)).await.unwrap();
    assert_eq!(
        again.load("single").await.unwrap().unwrap().state,
        json!([2, "é 🦀", null])
    );

    // Connecting again migrates nothing more.
    drop(PostgresStore::connect(&url).await.unwrap());
    assert_eq!(count(&sql, "SELECT count(*) FROM bidi_entries").await, 8);
}

/// An old table next to the new ones (an older process made it again after the migration, or
/// its rows were loaded into a database a new store had set up) is migrated too, except the
/// sessions the new tables already hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_migrates_an_old_table_next_to_new_ones() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = PostgresServer::start().await.unwrap();
    let (url, sql) = database(&server, "bidi_mixed").await;
    let store = PostgresStore::connect(&url).await.unwrap();
    store
        .append("chat", Append::create(json!({"new": true})))
        .await
        .unwrap();
    sql.batch_execute(OLD_SCHEMA).await.unwrap();

    let store = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["chat", "pruned", "single"]);
    assert_eq!(
        store.load("chat").await.unwrap().unwrap().state,
        json!({"new": true}),
        "the session the new tables hold is kept"
    );
    assert_eq!(
        store.load("pruned").await.unwrap().unwrap().state,
        json!({"n": 9})
    );
    assert_eq!(
        count(
            &sql,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'bidi_snapshots'"
        )
        .await,
        0
    );
}
