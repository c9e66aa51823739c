//! `SqliteStore` survives being killed: a child process appends snapshots and reports each one
//! the store acknowledged; the parent kills it with SIGKILL at a random moment, 20 times over, then
//! checks that every acknowledged snapshot is intact and that SQLite's integrity check passes.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bidi_session::{Append, Change, Parent, SessionStore, SqliteStore, testing};
use serde_json::{Value, json};

const CHILD_ENV: &str = "BIDI_SESSION_CRASH_CHILD_DB";
const SESSIONS: u64 = 4;
const ROUNDS: usize = 20;

/// The state saved as `version` of `session`: deterministic, so the parent can check it, and of
/// varying size so pages split and grow.
fn state(session: &str, version: u64) -> Value {
    let size = usize::try_from((version * 37) % 64).unwrap() * 128;
    json!({"session": session, "version": version, "payload": "x".repeat(size)})
}

/// The child: appends snapshots round-robin over a few sessions until it is killed, printing an
/// `ack` line after each append the store confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of `acknowledged_snapshots_survive_sigkill`, which runs it"]
async fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return; // Run with `--ignored` but not by its parent: nothing to do.
    };
    let store = SqliteStore::open(&path).await.unwrap();
    let mut stdout = std::io::stdout();
    let mut heads = BTreeMap::new();
    for s in 0..SESSIONS {
        let id = format!("crash-{s}");
        let head = store
            .load(&id)
            .await
            .unwrap()
            .map(|snapshot| (snapshot.entry.version, snapshot.entry.id));
        heads.insert(id, head);
    }
    loop {
        for (id, head) in &mut heads {
            let (version, append) = match head.take() {
                None => (1, Append::create(state(id, 1))),
                Some((version, head)) => {
                    // Every other turn appends a change, the others replace the state whole.
                    let change = if version % 2 == 0 {
                        Change::new()
                            .set("/version", json!(version + 1))
                            .set("/payload", state(id, version + 1)["payload"].clone())
                    } else {
                        Change::new().set("", state(id, version + 1))
                    };
                    (version + 1, Append::change(Parent::Head(head), change))
                }
            };
            let entry = store.append(id, append).await.unwrap();
            writeln!(stdout, "ack {id} {version} {} .", entry.id).unwrap();
            stdout.flush().unwrap();
            *head = Some((version, entry.id));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_snapshots_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let mut acked: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for round in 0..ROUNDS {
        let mut child = testing::child_test("crash_child")
            .env(CHILD_ENV, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let parts: Vec<&str> = line.split(' ').collect();
                if let ["ack", id, version, snapshot, "."] = parts[..] {
                    let version = version.parse::<u64>().unwrap();
                    acks.push((id.to_owned(), version, snapshot.to_owned()));
                }
            }
            acks
        });
        // Let it get going, then kill it at a random moment while it writes.
        let started = Instant::now();
        let delay = Duration::from_millis(20 + RandomState::new().hash_one(round) % 180);
        while started.elapsed() < delay {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        for (id, version, snapshot) in reader.join().unwrap() {
            acked.entry(id).or_default().push((version, snapshot));
        }
    }
    assert!(
        acked.values().any(|v| v.len() > 10),
        "the children wrote something: {acked:?}"
    );

    let store = SqliteStore::open(&db).await.unwrap();
    for (id, snapshots) in &acked {
        let last_acked = snapshots.iter().map(|(v, _)| *v).max().unwrap_or(0);
        let latest = store.load(id).await.unwrap().unwrap();
        assert!(
            latest.entry.version >= last_acked,
            "{id}: acknowledged {last_acked}, found {}",
            latest.entry.version
        );
        for (version, snapshot_id) in snapshots {
            let snapshot = store.load_snapshot(snapshot_id).await.unwrap();
            let snapshot = snapshot.unwrap_or_else(|| panic!("{id} version {version} lost"));
            assert_eq!(
                (snapshot.entry.version, snapshot.state),
                (*version, state(id, *version)),
                "{id} version {version} damaged"
            );
        }
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
}
