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
//! but they need room for two dozen sessions (no session limit below that), and a multi-thread
//! tokio runtime for the concurrency checks to mean anything.
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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(feature = "postgres")]
mod postgres_server;
mod takeover;
mod turns;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres_server::PostgresServer;
pub use takeover::takeover;
pub use turns::{aborts, expired_leases, running_views, turns};

use serde_json::{Value, json};

use crate::change::Change;
use crate::session::Session;
use crate::store::{
    Append, Entry, Finish, Lease, Parent, Renewal, SessionStore, Snapshot, Status, StoreError,
    now_ms,
};

/// Runs every check against `store`.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the suite: the sessions it wrote stay in the store, and the
/// tasks of a concurrency check run to their end.
pub async fn conformance(store: Arc<dyn SessionStore>) {
    let prefix = prefix();
    create_load_and_lineage(&*store, &prefix).await;
    compare_and_swap(&*store, &prefix).await;
    branches(&*store, &prefix).await;
    forks(&*store, &prefix).await;
    concurrent_appends(Arc::clone(&store), &prefix, 8).await;
    concurrent_updates(Arc::clone(&store), &prefix, 8, 25).await;
    turns(&*store, &prefix).await;
    running_views(&*store, &prefix).await;
    aborts(&*store, &prefix).await;
    expired_leases(&*store, &prefix).await;
    checkpoints(&*store, &prefix).await;
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
    result: Result<Entry, StoreError>,
    expected: Option<&str>,
    actual: Option<&str>,
    what: &str,
) {
    match result {
        Err(StoreError::Conflict {
            expected: e,
            actual: a,
            ..
        }) => {
            assert_eq!(
                (e.as_deref(), a.as_deref()),
                (expected, actual),
                "{what}: the conflict's heads"
            );
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

fn expect_not_held<T: std::fmt::Debug>(result: &Result<T, StoreError>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::NotHeld { .. })),
        "{what}: expected StoreError::NotHeld, got {result:?}"
    );
}

fn expect_running(result: Result<Entry, StoreError>, owner: &str, what: &str) {
    match result {
        Err(StoreError::Running { lease, .. }) => assert_eq!(lease.owner, owner, "{what}"),
        other => panic!("{what}: expected StoreError::Running, got {other:?}"),
    }
}

async fn create(store: &dyn SessionStore, id: &str, state: Value) -> Entry {
    store
        .append(id, Append::create(state))
        .await
        .expect("create")
}

/// Appends a completed snapshot setting `/n` to `n` after head `head`.
async fn set_n(
    store: &dyn SessionStore,
    id: &str,
    parent: Parent,
    n: i64,
) -> Result<Entry, StoreError> {
    let change = Change::new().set("/n", json!(n));
    store.append(id, Append::change(parent, change)).await
}

async fn state_at(store: &dyn SessionStore, snapshot_id: &str) -> Value {
    store
        .load_snapshot(snapshot_id)
        .await
        .expect("load snapshot")
        .expect("the snapshot exists")
        .state
}

async fn head(store: &dyn SessionStore, id: &str) -> Snapshot {
    store
        .load(id)
        .await
        .expect("load")
        .expect("the session exists")
}

fn lease(owner: &str, term: Duration) -> Lease {
    Lease::new(owner, term)
}

/// Create, append two snapshots after the head, load the head and each snapshot by id; the
/// snapshots chain by parent and count their versions from 1.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn create_load_and_lineage(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}lineage");
    let first = create(store, &id, json!({"n": 1, "log": []})).await;
    assert_eq!(first.version, 1, "a new session starts at version 1");
    assert_eq!(
        (first.session_id.as_str(), first.parent_id.as_deref()),
        (id.as_str(), None)
    );
    assert_eq!(first.status, Status::Completed);
    let second = set_n(store, &id, Parent::Head(first.id.clone()), 2)
        .await
        .expect("append 2");
    let change = Change::new()
        .set("/n", json!(3))
        .push("/log", json!("three"));
    let third = store
        .append(&id, Append::change(Parent::Head(second.id.clone()), change))
        .await
        .expect("append 3");
    assert_eq!((second.version, third.version), (2, 3));
    assert_eq!(second.parent_id.as_deref(), Some(first.id.as_str()));
    assert_eq!(third.parent_id.as_deref(), Some(second.id.as_str()));
    let ids = [&first.id, &second.id, &third.id];
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "ids are unique"
    );
    let latest = head(store, &id).await;
    assert_eq!(latest.entry, third, "the head loads as it was written");
    assert_eq!(latest.state, json!({"n": 3, "log": ["three"]}));
    assert_eq!(state_at(store, &first.id).await, json!({"n": 1, "log": []}));
    assert_eq!(
        state_at(store, &second.id).await,
        json!({"n": 2, "log": []})
    );
    let entry = store
        .entry(&second.id)
        .await
        .expect("entry")
        .expect("exists");
    assert_eq!(entry, second, "an entry reads as it was written");
    assert!(latest.entry.updated_at >= first.updated_at);
    assert!(store.list().await.expect("list").contains(&id));
}

/// Appends after a head that is not the session's, and creates of a session that exists, are
/// refused and write nothing.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn compare_and_swap(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}cas");
    let first = create(store, &id, json!({"n": 1})).await;
    let second = set_n(store, &id, Parent::Head(first.id.clone()), 2)
        .await
        .expect("append");
    expect_conflict(
        store.append(&id, Append::create(json!("x"))).await,
        None,
        Some(&second.id),
        "create over an existing session",
    );
    expect_conflict(
        set_n(store, &id, Parent::Head(first.id.clone()), 9).await,
        Some(&first.id),
        Some(&second.id),
        "stale writer",
    );
    expect_conflict(
        set_n(store, &id, Parent::Head("no-such-snapshot".into()), 9).await,
        Some("no-such-snapshot"),
        Some(&second.id),
        "writer after a snapshot that does not exist",
    );
    let missing = format!("{prefix}cas-missing");
    expect_conflict(
        set_n(store, &missing, Parent::Head(first.id.clone()), 9).await,
        Some(&first.id),
        None,
        "append to a missing session",
    );
    let latest = head(store, &id).await;
    assert_eq!(
        (latest.entry.id.as_str(), latest.state),
        (second.id.as_str(), json!({"n": 2})),
        "a refused append wrote nothing"
    );
    assert!(
        store.load(&missing).await.expect("load").is_none(),
        "a refused append created nothing"
    );
}

/// A branch from an older snapshot becomes the head and leaves the other leaf as it was; a
/// branch from another session's snapshot is refused.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn branches(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}branches");
    let root = create(store, &id, json!({"n": 0})).await;
    let a = set_n(store, &id, Parent::Head(root.id.clone()), 1)
        .await
        .expect("a");
    let b = set_n(store, &id, Parent::Branch(root.id.clone()), 2)
        .await
        .expect("branch b from the root");
    assert_eq!(b.parent_id.as_deref(), Some(root.id.as_str()));
    assert_eq!(b.version, 2);
    assert_eq!(
        head(store, &id).await.entry.id,
        b.id,
        "the branch is the head"
    );
    assert_eq!(
        state_at(store, &a.id).await,
        json!({"n": 1}),
        "the other leaf is intact"
    );
    let c = set_n(store, &id, Parent::Branch(a.id.clone()), 3)
        .await
        .expect("branch c from the other leaf");
    assert_eq!(
        (c.version, head(store, &id).await.state),
        (3, json!({"n": 3}))
    );
    let other = format!("{prefix}branches-other");
    create(store, &other, json!({"n": 9})).await;
    let refused = set_n(store, &other, Parent::Branch(a.id.clone()), 4).await;
    assert!(
        matches!(&refused, Err(StoreError::NotFound(missing)) if missing.kind == "snapshot"),
        "a branch from another session's snapshot: {refused:?}"
    );
    assert_eq!(head(store, &other).await.state, json!({"n": 9}));
}

/// A fork starts a new session from another's snapshot: its first snapshot names that one as
/// its parent and has the state it was given, the two sessions go their own ways, and a fork
/// into a session that exists, or from a snapshot that does not, is refused.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn forks(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}forks");
    let root = create(store, &id, json!({"n": 0})).await;
    let at = set_n(store, &id, Parent::Head(root.id.clone()), 1)
        .await
        .expect("the source's second snapshot");
    let fork = format!("{prefix}forks-fork");
    let first = store
        .append(
            &fork,
            Append::fork(at.id.clone(), json!({"n": 1, "forked": true})),
        )
        .await
        .expect("a fork");
    assert_eq!(
        first.parent_id.as_deref(),
        Some(at.id.as_str()),
        "the fork names its source"
    );
    assert_eq!(first.session_id, fork);
    assert_eq!(
        first.version,
        at.version + 1,
        "its depth goes on from its source's"
    );
    let entry = store
        .entry(&first.id)
        .await
        .expect("entry")
        .expect("the fork's first");
    assert_eq!(
        entry.parent_id.as_deref(),
        Some(at.id.as_str()),
        "read back"
    );
    assert_eq!(
        head(store, &fork).await.state,
        json!({"n": 1, "forked": true})
    );
    let on = set_n(store, &fork, Parent::Head(first.id.clone()), 5)
        .await
        .expect("the fork goes on");
    assert_eq!(
        state_at(store, &on.id).await,
        json!({"n": 5, "forked": true})
    );
    let source = set_n(store, &id, Parent::Head(at.id.clone()), 2)
        .await
        .expect("the source goes on as it was");
    assert_eq!(head(store, &id).await.entry.id, source.id);
    assert_eq!(head(store, &id).await.state, json!({"n": 2}));
    let again = store
        .append(&fork, Append::fork(at.id.clone(), json!({})))
        .await;
    assert!(
        matches!(&again, Err(StoreError::Conflict { expected: None, .. })),
        "a fork into a session that exists: {again:?}"
    );
    let missing = format!("{prefix}forks-missing");
    let nowhere = store
        .append(&missing, Append::fork("no-such-snapshot", json!({})))
        .await;
    assert!(
        matches!(&nowhere, Err(StoreError::NotFound(missing)) if missing.kind == "snapshot"),
        "a fork from nowhere: {nowhere:?}"
    );
    assert!(store.load(&missing).await.expect("load").is_none());
}

/// `tasks` tasks append after the same head at once: exactly one wins, every other gets a
/// conflict naming the winner.
///
/// # Panics
///
/// When the store breaks the contract (two winners, a lost append, another error).
///
/// # Cancel safety
///
/// Dropping the future stops the check, not the tasks it spawned: they run to their end.
/// The sessions it wrote stay in the store.
pub async fn concurrent_appends(store: Arc<dyn SessionStore>, prefix: &str, tasks: i64) {
    let id = format!("{prefix}race");
    let root = create(&*store, &id, json!({"n": 0})).await;
    let racers: Vec<_> = (1..=tasks)
        .map(|n| {
            let (store, id, root) = (Arc::clone(&store), id.clone(), root.id.clone());
            tokio::spawn(async move { set_n(&*store, &id, Parent::Head(root), n).await })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for racer in racers {
        match racer.await.expect("racer") {
            Ok(entry) => winners.push(entry),
            Err(StoreError::Conflict { actual, .. }) => losers.push(actual),
            Err(other) => panic!("a racing append failed: {other}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one append wins: {winners:?}");
    let winner = &winners[0];
    assert!(
        losers
            .iter()
            .all(|actual| actual.as_deref() == Some(winner.id.as_str())),
        "every loser is told the winner's snapshot: {losers:?}"
    );
    assert_eq!(head(&*store, &id).await.entry.id, winner.id);
}

/// `tasks` tasks each run `updates` [`Session::update`]s incrementing one counter: it must end at
/// exactly `tasks × updates`.
///
/// # Panics
///
/// When the store breaks the contract (a lost update, or a conflict that never resolves).
///
/// # Cancel safety
///
/// Dropping the future stops the check, not the tasks it spawned: they run to their end.
/// The sessions it wrote stay in the store.
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
    let latest = head(&*store, &id).await;
    assert_eq!(
        latest.state,
        json!(tasks * updates),
        "every update counted exactly once"
    );
    assert_eq!(latest.entry.version, tasks * updates + 1);
}

/// Snapshots that carry their state whole load the same as those that replay changes, before
/// and after them.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn checkpoints(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}checkpoints");
    let mut parent = create(store, &id, json!({"log": []})).await;
    let mut ids = vec![parent.id.clone()];
    for n in 1..=6 {
        let change = Change::new().push("/log", json!(n));
        let mut append = Append::change(Parent::Head(parent.id.clone()), change);
        if n % 3 == 0 {
            let whole: Vec<i64> = (1..=n).collect();
            append = append.with_checkpoint(json!({"log": whole}));
        }
        parent = store.append(&id, append).await.expect("append");
        ids.push(parent.id.clone());
    }
    for (n, snapshot_id) in ids.iter().enumerate() {
        let whole: Vec<usize> = (1..=n).collect();
        assert_eq!(
            state_at(store, snapshot_id).await,
            json!({"log": whole}),
            "snapshot {n}"
        );
    }
}

/// A 1 MiB state round-trips unchanged.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn large_state(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}large");
    let big: String = "0123456789abcdef".repeat(64 * 1024);
    let state = json!({"blob": big, "nested": {"list": (0..1000).collect::<Vec<u32>>()}});
    let first = create(store, &id, state.clone()).await;
    assert_eq!(head(store, &id).await.state, state);
    let change = Change::new().set("/blob2", json!(big));
    store
        .append(&id, Append::change(Parent::Head(first.id), change))
        .await
        .expect("a 1 MiB change");
    assert_eq!(head(store, &id).await.state["blob2"], json!(big));
}

/// Ids with non-ASCII characters, quotes and spaces work like any other.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn unicode_ids(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}séance 🦀 会话 'quoted' \"double\"");
    let first = create(store, &id, json!({"ok": true})).await;
    set_n(store, &id, Parent::Head(first.id), 2)
        .await
        .expect("v2");
    assert_eq!(head(store, &id).await.entry.version, 2);
    assert!(store.list().await.expect("list").contains(&id));
}

/// `list` is sorted by the ids' bytes (as Rust orders strings: `B` before `a`, `é` after
/// `z`), whatever the backend's collation.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn listing(store: &dyn SessionStore, prefix: &str) {
    let ids = [
        "list-b", "list-B", "list-é", "list-a", "list-z", "list-10", "list-9",
    ]
    .map(|id| format!("{prefix}{id}"));
    for id in &ids {
        create(store, id, json!(1)).await;
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
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn missing_ids(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}never-saved");
    assert_absent(store, &id).await;
    assert!(!store.delete(&id).await.expect("delete"));
}

/// `id` loads as `None` and is not listed.
async fn assert_absent(store: &dyn SessionStore, id: &str) {
    assert!(store.load(id).await.expect("load").is_none(), "{id} loads");
    assert!(
        !store.list().await.expect("list").contains(&id.to_owned()),
        "{id} is listed"
    );
}

/// Delete removes every snapshot; a [`Session`] still open on it then gets
/// [`StoreError::NotFound`] naming the session; the id can start over at version 1.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn delete(store: Arc<dyn SessionStore>, prefix: &str) {
    let id = format!("{prefix}deleted");
    let first = create(&*store, &id, json!(1)).await;
    let change = Change::new().set("", json!(2));
    let second = store
        .append(&id, Append::change(Parent::Head(first.id.clone()), change))
        .await
        .expect("v2");
    let session = Session::<u64>::load(Arc::clone(&store), &id)
        .await
        .expect("load")
        .expect("exists");
    assert!(store.delete(&id).await.expect("delete"));
    assert_absent(&*store, &id).await;
    for snapshot in [&first.id, &second.id] {
        assert!(store.load_snapshot(snapshot).await.expect("load").is_none());
        assert!(store.entry(snapshot).await.expect("entry").is_none());
    }
    expect_not_found(session.reload().await, &id, "reload of a deleted session");
    expect_not_found(
        session.update(|n| *n += 1).await,
        &id,
        "update of a deleted session",
    );
    assert_absent(&*store, &id).await;
    let again = create(&*store, &id, json!("new")).await;
    assert_eq!(again.version, 1);
}
