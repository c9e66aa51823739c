//! `SqliteStore` passes the conformance suite; SQLite specifics (one file shared by stores and
//! processes, the schema's migration, opening a new file from many openers at once).

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Barrier};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bidi_session::{
    Append, Change, Finish, Lease, Parent, Renewal, Session, SessionStore, SqliteStore, Status,
    testing,
};
use serde_json::json;

fn set(n: i64) -> Change {
    Change::new().set("", json!(n))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("sessions.db"))
        .await
        .unwrap();
    testing::conformance(Arc::new(store)).await;
}

/// A turn whose owner stopped renewing is taken over once, in a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_takes_turns_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("sessions.db"))
        .await
        .unwrap();
    testing::takeover(&store, "").await;
}

/// A file of schema 2 (before turns kept what another process needs to take them over) is
/// migrated as it opens: its sessions load, and its turns may be taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_schema_2_gains_what_a_takeover_needs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append("old", Append::create(json!({"n": 1})))
        .await
        .unwrap();
    drop(store);
    // Back to schema 2: no `lease_resume`, nor its index.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "DROP INDEX bidi_entries_resumable; ALTER TABLE bidi_entries DROP COLUMN lease_resume; \
         PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store.load("old").await.unwrap().unwrap().state,
        json!({"n": 1})
    );
    testing::takeover(&store, "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_in_memory_store_conforms() {
    testing::conformance(Arc::new(SqliteStore::in_memory().await.unwrap())).await;
}

/// Two stores on one file (as two processes would be) still compare and swap, and see each
/// other's turns and aborts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = SqliteStore::open(&path).await.unwrap();
    let b = SqliteStore::open(&path).await.unwrap();
    let first = a.append("s", Append::create(json!(1))).await.unwrap();
    b.append("s", Append::change(Parent::Head(first.id.clone()), set(2)))
        .await
        .unwrap();
    let stale = a
        .append("s", Append::change(Parent::Head(first.id.clone()), set(3)))
        .await;
    assert!(stale.unwrap_err().is_conflict());
    assert_eq!(a.load("s").await.unwrap().unwrap().state, json!(2));
    // A turn running through `a` is aborted through `b`.
    let head = a.load("s").await.unwrap().unwrap().entry.id;
    let lease = Lease::new("turn", Duration::from_secs(60));
    let pending = a
        .append("s", Append::pending(Parent::Head(head), lease))
        .await
        .unwrap();
    assert_eq!(b.abort(&pending.id).await.unwrap(), Some(Status::Pending));
    assert_eq!(
        a.renew(&pending.id, "turn", bidi_session::now_ms() + 60_000)
            .await
            .unwrap(),
        Renewal::Aborted
    );
    a.finish(&pending.id, Finish::new("turn", Status::Completed, set(4)))
        .await
        .unwrap();
    let ended = b.load("s").await.unwrap().unwrap();
    assert_eq!(
        (ended.entry.status, ended.state),
        (Status::Aborted, json!(4))
    );
    // Both run the concurrent-update check against the same session file at once.
    let (a, b): (Arc<dyn SessionStore>, Arc<dyn SessionStore>) = (Arc::new(a), Arc::new(b));
    Session::create(a.clone(), "counter", 0u64).await.unwrap();
    let bump = |store: Arc<dyn SessionStore>| async move {
        let session = Session::<u64>::load(store, "counter")
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

/// A file of schema 1 (every version of a session whole, in `bidi_snapshots`) opens migrated:
/// each version is a snapshot after the one before, the latest is the head, and the session
/// goes on from it.
#[tokio::test]
async fn a_file_of_schema_1_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE bidi_snapshots (session_id TEXT NOT NULL, version INTEGER NOT NULL,
                 state TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                 PRIMARY KEY (session_id, version)) WITHOUT ROWID;
             INSERT INTO bidi_snapshots VALUES ('s', 1, '{\"n\":1}', 1000, 1000);
             INSERT INTO bidi_snapshots VALUES ('s', 2, '{\"n\":2}', 1000, 2000);
             INSERT INTO bidi_snapshots VALUES ('s', 3, '{\"n\":3}', 1000, 3000);
             INSERT INTO bidi_snapshots VALUES ('t', 1, '\"only\"', 5000, 5000);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["s", "t"]);
    let head = store.load("s").await.unwrap().unwrap();
    assert_eq!((head.entry.version, &head.state), (3, &json!({"n": 3})));
    let mut at = head.entry.clone();
    for n in [2, 1] {
        let parent = at.parent_id.clone().expect("a parent");
        let snapshot = store.load_snapshot(&parent).await.unwrap().unwrap();
        assert_eq!(
            (snapshot.entry.version, snapshot.state),
            (n, json!({"n": n}))
        );
        at = snapshot.entry;
    }
    assert_eq!(at.parent_id, None);
    assert_eq!(store.load("t").await.unwrap().unwrap().state, json!("only"));
    store
        .append("s", Append::change(Parent::Head(head.entry.id), set(4)))
        .await
        .unwrap();
    drop(store);
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(reopened.load("s").await.unwrap().unwrap().state, json!(4));
}

#[tokio::test]
async fn the_file_is_plain_sqlite_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reopen.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .append("kept", Append::create(json!({"a": [1, 2]})))
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

/// Opens `path` from `threads` threads released at the same moment; each open must succeed.
fn open_at_once(path: &Path, threads: usize) -> Vec<Result<Vec<String>, String>> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    barrier.wait();
                    rt.block_on(async {
                        let store = SqliteStore::open(path).await?;
                        store.list().await
                    })
                    .map_err(|error| error.to_string())
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

/// Many stores (each on its own thread) open the same brand-new file at the same moment, round
/// after round: every open succeeds. Switching a new file to WAL refuses a contending opener at
/// once rather than after the busy timeout; before opening retried, a few opens in a thousand
/// failed here with "database is locked".
#[test]
fn many_stores_open_one_new_file_at_once() {
    const THREADS: usize = 12;
    const ROUNDS: usize = 150;
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let path = dir.path().join(format!("new-{round}.db"));
        failures.extend(
            open_at_once(&path, THREADS)
                .into_iter()
                .filter_map(Result::err),
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} opens failed, the first with: {:?}",
        failures.len(),
        THREADS * ROUNDS,
        failures.first()
    );
}

const OPEN_CHILD_ENV: &str = "BIDI_SESSION_OPEN_CHILD";
const CHILD_THREADS: usize = 4;

/// The child: at the moment the parent named (the same for every child), opens the file from
/// a few threads; prints how many opens succeeded and the first failure.
#[test]
#[ignore = "a child process of `processes_open_one_new_file_at_once`, which runs it"]
fn open_child() {
    let Ok(spec) = std::env::var(OPEN_CHILD_ENV) else {
        return;
    };
    let (path, at) = spec.split_once('|').unwrap();
    let at = UNIX_EPOCH + Duration::from_millis(at.parse().unwrap());
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        std::thread::sleep(wait);
    }
    let results = open_at_once(Path::new(path), CHILD_THREADS);
    let opened = results.iter().filter(|r| r.is_ok()).count();
    let failure = results.into_iter().find_map(Result::err);
    println!("\nopened={opened} failure={failure:?}");
}

/// Several processes, each with a few threads, open the same brand-new file at the same moment.
#[test]
fn processes_open_one_new_file_at_once() {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let path = dir.path().join(format!("new-{round}.db"));
        // Far enough ahead that every child has started and waits for it.
        let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_millis(400);
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                testing::child_test("open_child")
                    .env(
                        OPEN_CHILD_ENV,
                        format!("{}|{}", path.display(), at.as_millis()),
                    )
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                stdout.contains(&format!("opened={CHILD_THREADS} failure=None")),
                "round {round}: {stdout}"
            );
        }
    }
}
