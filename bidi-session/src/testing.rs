//! The conformance suite every [`SessionStore`] must pass: run [`conformance`] against yours.
//!
//! ```
//! use std::sync::Arc;
//! use bidi_session::MemoryStore;
//!
//! # #[tokio::main]
//! # async fn main() {
//! bidi_session::testing::conformance(Arc::new(MemoryStore::new())).await;
//! # }
//! ```
//!
//! Each check panics with a message naming what the store got wrong. The checks use session ids
//! of their own (with a per-run prefix), so they can run against a store that holds other data,
//! but they need every version of a session kept (no retention limit below 4), room for a dozen
//! sessions (no session limit below that), and a multi-thread tokio runtime for the concurrency check
//! to mean anything.
//!
//! [`child_test`] and [`run_child_test`] run a test of the running binary in a second process,
//! for tests that kill a writer or resume a session elsewhere.
//!
#![cfg_attr(
    feature = "postgres",
    doc = "With the `postgres` feature too, [`PostgresServer`] starts a private PostgreSQL server to run them against."
)]
#![cfg_attr(
    not(feature = "postgres"),
    doc = "With the `postgres` feature too, `PostgresServer` starts a private PostgreSQL server to run them against."
)]

use std::ffi::OsStr;
use std::process::Command;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(feature = "postgres")]
mod postgres_server;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres_server::PostgresServer;

use serde_json::{Value, json};

use crate::session::Session;
use crate::store::{SessionStore, StoreError};

/// Runs every check against `store`.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn conformance(store: Arc<dyn SessionStore>) {
    let prefix = prefix();
    create_load_and_versions(&*store, &prefix).await;
    compare_and_swap(&*store, &prefix).await;
    concurrent_updates(Arc::clone(&store), &prefix, 8, 25).await;
    large_state(&*store, &prefix).await;
    unicode_ids(&*store, &prefix).await;
    missing_ids(&*store, &prefix).await;
    listing(&*store, &prefix).await;
    delete(store, &prefix).await;
}

/// Test `name` of the running test binary, as a command for a new process (`--exact`,
/// `--include-ignored`, `--nocapture`, one test thread): how the crash and resume tests get a
/// second process. Set an environment variable on it so the child test knows it is the child.
///
/// Mark the child's entry `#[ignore]`, so that a normal run does not count it as a test of its
/// own (it runs only with `--ignored` or `--include-ignored`, as its parent runs it), and have
/// it return at once when the variable is not set:
///
/// ```no_run
/// # #![allow(unused)] // a doctest is no test binary: its `#[test]`s are left out
/// use bidi_session::testing;
///
/// const CHILD_ENV: &str = "MY_CRATE_RESUME_CHILD";
///
/// #[test]
/// #[ignore = "the second process of `resume_in_a_new_process`, which runs it"]
/// fn resume_child() {
///     let Ok(db) = std::env::var(CHILD_ENV) else {
///         return;
///     };
///     println!("resumed from {db}");
/// }
///
/// #[test]
/// fn resume_in_a_new_process() {
///     let stdout = testing::run_child_test("resume_child", CHILD_ENV, "/tmp/sessions.db");
///     assert!(stdout.contains("resumed from /tmp/sessions.db"));
/// }
/// ```
///
/// # Panics
///
/// If the test binary's path cannot be found.
#[must_use]
pub fn child_test(name: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command.args([
        "--exact",
        name,
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// Runs [`child_test`] `name` with the environment variable `key` set to `value`, to the end;
/// returns what it printed.
///
/// # Panics
///
/// If it cannot start, it fails (the panic shows its standard error), or the binary has no test
/// named `name`.
pub fn run_child_test(name: &str, key: &str, value: impl AsRef<OsStr>) -> String {
    let output = child_test(name)
        .env(key, value)
        .output()
        .expect("the child test starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child test {name} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // libtest's own line: a name that matches nothing runs nothing, and succeeds.
    assert!(
        stdout.contains("running 1 test"),
        "child test {name}: the binary ran no such test: {stdout}"
    );
    stdout
}

fn prefix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("conformance-{nanos}-")
}

fn expect_conflict(
    result: Result<crate::Snapshot, StoreError>,
    expected: Option<u64>,
    actual: Option<u64>,
    what: &str,
) {
    match result {
        Err(StoreError::Conflict {
            expected: e,
            actual: a,
            ..
        }) => {
            assert_eq!((e, a), (expected, actual), "{what}: conflict versions");
        }
        other => panic!("{what}: expected a conflict, got {other:?}"),
    }
}

fn expect_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, id: &str, what: &str) {
    match result {
        Err(StoreError::NotFound(missing)) => {
            assert_eq!(
                (missing.kind, missing.name.as_str()),
                ("session", id),
                "{what}"
            );
        }
        other => panic!("{what}: expected StoreError::NotFound, got {other:?}"),
    }
}

/// Create at version 1, save versions 2 and 3, load the latest and each version.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn create_load_and_versions(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}versions");
    let first = store
        .save(&id, None, json!({"n": 1}))
        .await
        .expect("create");
    assert_eq!(first.version, 1, "a new session starts at version 1");
    assert_eq!(first.session_id, id);
    let second = store
        .save(&id, Some(1), json!({"n": 2}))
        .await
        .expect("save v2");
    let third = store
        .save(&id, Some(2), json!({"n": 3}))
        .await
        .expect("save v3");
    assert_eq!((second.version, third.version), (2, 3));
    let latest = store
        .load(&id)
        .await
        .expect("load")
        .expect("the session exists");
    assert_eq!((latest.version, &latest.state), (3, &json!({"n": 3})));
    for v in 1..=3 {
        let snapshot = store
            .load_version(&id, v)
            .await
            .expect("load version")
            .expect("version kept");
        assert_eq!(snapshot.state, json!({"n": v}), "version {v}");
        assert_eq!(
            snapshot.created_at, first.created_at,
            "created_at is the session's"
        );
    }
    assert!(latest.updated_at >= first.updated_at);
    assert!(
        store
            .load_version(&id, 4)
            .await
            .expect("load version")
            .is_none()
    );
    assert!(store.list().await.expect("list").contains(&id));
}

/// Stale, early and create-only saves are refused and write nothing.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn compare_and_swap(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}cas");
    store.save(&id, None, json!("a")).await.expect("create");
    store.save(&id, Some(1), json!("b")).await.expect("v2");
    expect_conflict(
        store.save(&id, None, json!("x")).await,
        None,
        Some(2),
        "create over an existing session",
    );
    expect_conflict(
        store.save(&id, Some(1), json!("x")).await,
        Some(1),
        Some(2),
        "stale writer",
    );
    expect_conflict(
        store.save(&id, Some(7), json!("x")).await,
        Some(7),
        Some(2),
        "writer from the future",
    );
    let missing = format!("{prefix}cas-missing");
    expect_conflict(
        store.save(&missing, Some(1), json!("x")).await,
        Some(1),
        None,
        "update of a missing session",
    );
    let latest = store.load(&id).await.expect("load").expect("exists");
    assert_eq!(
        (latest.version, latest.state),
        (2, json!("b")),
        "a refused save wrote nothing"
    );
    assert!(
        store.load(&missing).await.expect("load").is_none(),
        "a refused save created nothing"
    );
}

/// `tasks` tasks each run `updates` [`Session::update`]s incrementing one counter: it must end at
/// exactly `tasks × updates`.
///
/// # Panics
///
/// When the store breaks the contract (a lost update, or a conflict that never resolves).
pub async fn concurrent_updates(
    store: Arc<dyn SessionStore>,
    prefix: &str,
    tasks: u64,
    updates: u64,
) {
    let id = format!("{prefix}counter");
    Session::create(Arc::clone(&store), &id, 0u64)
        .await
        .expect("create");
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let store = Arc::clone(&store);
            let id = id.clone();
            tokio::spawn(async move {
                let session = Session::<u64>::load(store, &id)
                    .await
                    .expect("load")
                    .expect("exists");
                for _ in 0..updates {
                    session.update(|n| *n += 1).await.expect("update");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker");
    }
    let latest = store.load(&id).await.expect("load").expect("exists");
    assert_eq!(
        latest.state,
        json!(tasks * updates),
        "every update counted exactly once"
    );
    assert_eq!(latest.version, tasks * updates + 1);
}

/// A 1 MiB state round-trips unchanged.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn large_state(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}large");
    let big: String = "0123456789abcdef".repeat(64 * 1024);
    let state = json!({"blob": big, "nested": {"list": (0..1000).collect::<Vec<u32>>()}});
    store
        .save(&id, None, state.clone())
        .await
        .expect("save 1 MiB");
    assert_eq!(
        store.load(&id).await.expect("load").expect("exists").state,
        state
    );
}

/// Ids with non-ASCII characters, quotes and spaces work like any other.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn unicode_ids(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}séance 🦀 会话 'quoted' \"double\"");
    store
        .save(&id, None, json!({"ok": true}))
        .await
        .expect("create");
    store.save(&id, Some(1), Value::Null).await.expect("v2");
    assert_eq!(
        store
            .load(&id)
            .await
            .expect("load")
            .expect("exists")
            .version,
        2
    );
    assert!(store.list().await.expect("list").contains(&id));
}

/// `list` is sorted by the ids' bytes (as Rust orders strings: `B` before `a`, `é` after
/// `z`), whatever the backend's collation.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn listing(store: &dyn SessionStore, prefix: &str) {
    let ids = [
        "list-b", "list-B", "list-é", "list-a", "list-z", "list-10", "list-9",
    ]
    .map(|id| format!("{prefix}{id}"));
    for id in &ids {
        store.save(id, None, json!(1)).await.expect("create");
    }
    let listed = store.list().await.expect("list");
    assert!(
        listed.windows(2).all(|pair| pair[0] < pair[1]),
        "list is not sorted: {listed:?}"
    );
    let mine: Vec<&String> = listed.iter().filter(|id| ids.contains(id)).collect();
    let mut sorted: Vec<&String> = ids.iter().collect();
    sorted.sort();
    assert_eq!(mine, sorted);
    for id in &ids {
        assert!(store.delete(id).await.expect("delete"));
    }
}

/// A missing id loads as `None` and deletes as `false`.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn missing_ids(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}never-saved");
    assert_absent(store, &id).await;
    assert!(!store.delete(&id).await.expect("delete"));
}

/// `id` loads as `None`, at its latest version and at version 1, and is not listed.
async fn assert_absent(store: &dyn SessionStore, id: &str) {
    assert!(store.load(id).await.expect("load").is_none(), "{id} loads");
    assert!(
        store
            .load_version(id, 1)
            .await
            .expect("load version")
            .is_none(),
        "{id} loads at version 1"
    );
    assert!(
        !store.list().await.expect("list").contains(&id.to_owned()),
        "{id} is listed"
    );
}

/// Delete removes every version; a [`Session`] still open on it then gets
/// [`StoreError::NotFound`] naming the session; the id can start over at version 1.
///
/// # Panics
///
/// When the store breaks the contract.
pub async fn delete(store: Arc<dyn SessionStore>, prefix: &str) {
    let id = format!("{prefix}deleted");
    store.save(&id, None, json!(1)).await.expect("create");
    store.save(&id, Some(1), json!(2)).await.expect("v2");
    let session = Session::<u64>::load(Arc::clone(&store), &id)
        .await
        .expect("load")
        .expect("exists");
    assert!(store.delete(&id).await.expect("delete"));
    assert_absent(&*store, &id).await;
    expect_not_found(session.reload().await, &id, "reload of a deleted session");
    expect_not_found(
        session.update(|n| *n += 1).await,
        &id,
        "update of a deleted session",
    );
    assert_absent(&*store, &id).await;
    let again = store
        .save(&id, None, json!("new"))
        .await
        .expect("re-create");
    assert_eq!(again.version, 1);
}
