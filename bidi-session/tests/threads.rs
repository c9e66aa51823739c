//! Threads: a burst of concurrent calls on `SqliteStore` costs no thread per call. Alone in its
//! test binary, so that the process's thread count is this test's.

#![cfg(feature = "sqlite")]
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bidi_session::{SessionStore, SqliteStore};

/// The threads of this process, from `/proc/self/status`.
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .unwrap()
}

/// A thousand concurrent calls wait for the one connection without a thread each: the
/// blocking pool does not grow to hundreds of threads (each with its stack and allocator
/// arena) while they queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_queue_without_a_thread_each() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db")).await.unwrap());
    let before = threads();
    let calls: Vec<_> = (0..1_000)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .append(
                        &format!("s{n}"),
                        bidi_session::Append::create(serde_json::json!({"n": n})),
                    )
                    .await
                    .unwrap();
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
    // Idle blocking threads live on for ten seconds: they are all still counted here. A few
    // come and go as workers hand their cores over while they block (4 to 16 seen); a thread
    // per waiting call would be hundreds (516 before callers waited asynchronously).
    let after = threads();
    assert!(
        after <= before + 64,
        "{before} threads before, {after} after"
    );
}
