//! Every store passes the conformance suite (SQLite's specifics are in `sqlite.rs`).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bidi_session::{
    Append, Change, Finish, Lease, MemoryStore, Parent, Renewal, Session, SessionStore, Status,
    StoreError, testing,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    testing::conformance(Arc::new(MemoryStore::new())).await;
}

/// A turn whose owner stopped renewing is taken over once (`MemoryStore` shared in one
/// process, as two agents sharing it are).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_takes_turns_over() {
    testing::takeover(&MemoryStore::new(), "").await;
}

/// A session limit well above what the suite creates changes nothing the suite can see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_memory_store_conforms() {
    testing::conformance(Arc::new(MemoryStore::new().with_max_sessions(64))).await;
}

/// A snapshot limit above what a check needs changes nothing the suite can see but old
/// snapshots of the long sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_with_a_snapshot_limit_conforms() {
    testing::conformance(Arc::new(MemoryStore::new().with_max_snapshots(64))).await;
}

/// Past its snapshot limit a session keeps its head alone: it loads and goes on, its older
/// snapshots are gone, and a branch from one of them is refused.
#[tokio::test]
async fn a_session_past_its_snapshot_limit_keeps_its_head() {
    let store = MemoryStore::new().with_max_snapshots(3);
    let mut heads = vec![store.append("s", Append::create(json!(0))).await.unwrap()];
    for n in 1..=4 {
        let parent = Parent::Head(heads.last().unwrap().id.clone());
        heads.push(
            store
                .append("s", Append::change(parent, set(n)))
                .await
                .unwrap(),
        );
    }
    let head = store.load("s").await.unwrap().unwrap();
    assert_eq!((head.entry.version, head.state), (5, json!(4)));
    assert!(store.load_snapshot(&heads[0].id).await.unwrap().is_none());
    let branch = Append::change(Parent::Branch(heads[0].id.clone()), set(9));
    assert!(store.append("s", branch).await.unwrap_err().is_not_found());
    let next = Append::change(Parent::Head(head.entry.id), set(5));
    store.append("s", next).await.unwrap();
    assert_eq!(store.load("s").await.unwrap().unwrap().state, json!(5));
}

/// A `MemoryStore` finds every snapshot it keeps by its id, however it was written and whatever
/// was looked up before (its index of snapshot ids catches up when one is named): turns
/// finished past the snapshot limit, branches from snapshots never named, a session written
/// again under the id of a deleted one.
#[tokio::test]
async fn a_memory_store_finds_every_snapshot_it_keeps() {
    let store = MemoryStore::new().with_max_snapshots(3);
    let mut head = store.append("s", Append::create(json!(0))).await.unwrap();
    for n in 1..=8 {
        // A turn: its pending snapshot named (renewed) before it finishes, past the limit.
        let lease = Lease::new("me", Duration::from_secs(60));
        let pending = Append::pending(Parent::Head(head.id.clone()), lease);
        let pending = store.append("s", pending).await.unwrap();
        let renewal = store.renew(&pending.id, "me", u64::MAX).await.unwrap();
        assert_eq!(renewal, Renewal::Renewed);
        let finish = Finish::new("me", Status::Completed, set(n));
        head = store.finish(&pending.id, finish).await.unwrap();
        let loaded = store.load_snapshot(&head.id).await.unwrap().unwrap();
        assert_eq!(loaded.state, json!(n), "turn {n}");
    }
    for n in 9..=16 {
        let previous = head.id.clone();
        let next = Append::change(Parent::Head(head.id.clone()), set(n));
        head = store.append("s", next).await.unwrap();
        // The snapshot before, while it is kept, is found and branched from.
        if n % 2 == 1 && store.entry(&previous).await.unwrap().is_some() {
            let branch = Append::change(Parent::Branch(previous), set(-n));
            head = store.append("s", branch).await.unwrap();
        }
        let loaded = store.load_snapshot(&head.id).await.unwrap().unwrap();
        assert_eq!(loaded.state, store.load("s").await.unwrap().unwrap().state);
    }
    let old = head.id.clone();
    assert!(store.delete("s").await.unwrap());
    let again = store
        .append("s", Append::create(json!("again")))
        .await
        .unwrap();
    assert!(store.entry(&old).await.unwrap().is_none());
    assert_eq!(
        store.abort(&again.id).await.unwrap(),
        Some(Status::Completed)
    );
    // A session whose first snapshot is a turn: that snapshot loads as the turn left it.
    let lease = Lease::new("me", Duration::from_secs(60));
    let first = store
        .append("t", Append::pending(Parent::None, lease))
        .await
        .unwrap();
    let finish = Finish::new("me", Status::Completed, set(1));
    store.finish(&first.id, finish).await.unwrap();
    let next = Append::change(Parent::Head(first.id.clone()), set(2));
    store.append("t", next).await.unwrap();
    let loaded = store.load_snapshot(&first.id).await.unwrap().unwrap();
    assert_eq!(loaded.state, json!(1));
}

/// A store shared as `Arc<dyn SessionStore>`, or boxed, is a store: it goes where any does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_and_boxed_stores_conform() {
    let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    testing::conformance(Arc::new(Arc::clone(&shared))).await;
    #[cfg(feature = "sqlite")]
    let boxed: Box<dyn SessionStore> =
        Box::new(bidi_session::SqliteStore::in_memory().await.unwrap());
    #[cfg(not(feature = "sqlite"))]
    let boxed: Box<dyn SessionStore> = Box::new(MemoryStore::new());
    testing::conformance(Arc::new(boxed)).await;
    assert!(
        !shared.list().await.unwrap().is_empty(),
        "the Arc forwarded to the store"
    );
}

fn set(n: i64) -> Change {
    Change::new().set("", json!(n))
}

/// With a session limit, creating one session too many drops the least recently used one (loads
/// and appends count as uses); a deleted session frees its place.
#[tokio::test]
async fn memory_store_limit_drops_the_least_recently_used() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new().with_max_sessions(3));
    let mut heads = std::collections::HashMap::new();
    for id in ["a", "b", "c"] {
        heads.insert(
            id,
            store.append(id, Append::create(json!(id))).await.unwrap(),
        );
    }
    let c = Session::<String>::load(store.clone(), "c")
        .await
        .unwrap()
        .unwrap();
    store.load("a").await.unwrap();
    store.load_snapshot(&heads["b"].id).await.unwrap();
    store.append("d", Append::create(json!("d"))).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["a", "b", "d"]);
    // Appending to an existing session drops nothing.
    let a2 = Append::change(
        Parent::Head(heads["a"].id.clone()),
        Change::new().set("", json!("a2")),
    );
    store.append("a", a2).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["a", "b", "d"]);
    // The dropped session is gone as if deleted: an append on it is a conflict with no
    // session, its snapshots are gone, and a Session still open on it reports it not found.
    match store
        .append(
            "c",
            Append::change(Parent::Head(heads["c"].id.clone()), set(2)),
        )
        .await
    {
        Err(StoreError::Conflict { actual, .. }) => assert_eq!(actual, None),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(store.load_snapshot(&heads["c"].id).await.unwrap().is_none());
    match c.update(|s| s.push('!')).await {
        Err(StoreError::NotFound(missing)) => {
            assert_eq!((missing.kind, missing.name.as_str()), ("session", "c"));
        }
        other => panic!("expected not found, got {other:?}"),
    }
    assert!(store.delete("b").await.unwrap());
    store.append("e", Append::create(json!("e"))).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["a", "d", "e"]);
    // Least recently used now: d (a was written after it).
    store.append("f", Append::create(json!("f"))).await.unwrap();
    assert_eq!(store.list().await.unwrap(), ["a", "e", "f"]);
    assert_eq!(store.load("a").await.unwrap().unwrap().state, json!("a2"));
}

/// A `MemoryStore` writes a change as it comes and applies it when the state is read: every
/// snapshot it keeps reads as its changes make it, however writes (to the head, as branches,
/// as turns, past the snapshot limit) and reads interleave.
#[tokio::test]
async fn a_memory_store_reads_every_snapshot_as_its_changes_make_it() {
    for limit in [None, Some(4)] {
        let store = match limit {
            Some(limit) => MemoryStore::new().with_max_snapshots(limit),
            None => MemoryStore::new(),
        };
        let first = json!({"messages": [], "n": 0});
        let head = store.append("s", Append::create(first.clone())).await;
        let mut written = vec![(head.unwrap().id, first)];
        // A fixed sequence of steps, chosen by a small linear congruential generator.
        let mut seed = 7_u64;
        for step in 0..120_u64 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let (head_id, head_state) = written.last().unwrap().clone();
            let raw = serde_json::value::to_raw_value(&json!({"step": step})).unwrap();
            let change = Change::new()
                .push_json("/messages", raw)
                .set("/n", json!(step));
            let mut state = head_state.clone();
            change.apply(&mut state).unwrap();
            match seed >> 60 {
                // A turn: a pending snapshot, finished with the change.
                0..=5 => {
                    let lease = Lease::new("me", Duration::from_secs(60));
                    let pending = Append::pending(Parent::Head(head_id), lease);
                    let pending = store.append("s", pending).await.unwrap();
                    if seed >> 59 & 1 == 1 {
                        let read = store.load("s").await.unwrap().unwrap().state;
                        assert_eq!(read, head_state, "the pending head at step {step}");
                    }
                    let finish = Finish::new("me", Status::Completed, change);
                    let id = store.finish(&pending.id, finish).await.unwrap().id;
                    written.push((id, state));
                }
                // A change appended to the head.
                6..=10 => {
                    let append = Append::change(Parent::Head(head_id), change);
                    let id = store.append("s", append).await.unwrap().id;
                    written.push((id, state));
                }
                // A read of the head, then of an older snapshot if it is still kept.
                11..=13 => {
                    let read = store.load("s").await.unwrap().unwrap().state;
                    assert_eq!(read, head_state, "the head at step {step}");
                    let (old_id, old_state) = &written[(seed >> 40) as usize % written.len()];
                    if let Some(old) = store.load_snapshot(old_id).await.unwrap() {
                        assert_eq!(&old.state, old_state, "an old snapshot at step {step}");
                    }
                }
                // A branch from an older snapshot still kept: it becomes the head.
                _ => {
                    let (old_id, old_state) =
                        written[(seed >> 40) as usize % written.len()].clone();
                    if store.entry(&old_id).await.unwrap().is_none() {
                        continue;
                    }
                    let mut state = old_state;
                    change.apply(&mut state).unwrap();
                    let append = Append::change(Parent::Branch(old_id), change);
                    let id = store.append("s", append).await.unwrap().id;
                    written.push((id, state));
                }
            }
        }
        let (_, head_state) = written.last().unwrap();
        let read = store.load("s").await.unwrap().unwrap().state;
        assert_eq!(&read, head_state, "the head at the end, limit {limit:?}");
        for (id, state) in &written {
            if let Some(snapshot) = store.load_snapshot(id).await.unwrap() {
                assert_eq!(&snapshot.state, state, "limit {limit:?}");
            }
        }
    }
}
