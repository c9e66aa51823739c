//! The checks of a turn's lifecycle: a pending snapshot under a lease, its view while it runs,
//! aborts, and leases that lapse.

#[allow(clippy::wildcard_imports, reason = "the suite's own helpers")]
use super::*;

/// A turn: a pending snapshot under a lease holds the session (nothing may follow it), renews,
/// and finishes with its change; only its owner finishes it, once. A failed turn keeps its
/// error.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
///
/// Long by design: the lifecycle is checked step by step, each step's state from the last.
pub async fn turns(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}turns");
    let root = create(store, &id, json!({"n": 0})).await;
    let term = Duration::from_secs(60);
    let pending = store
        .append(
            &id,
            Append::pending(Parent::Head(root.id.clone()), lease("turn-1", term)),
        )
        .await
        .expect("start a turn");
    assert_eq!(pending.status, Status::Pending);
    assert_eq!(
        pending.lease.as_ref().map(|l| l.owner.as_str()),
        Some("turn-1")
    );
    let loaded = head(store, &id).await;
    assert_eq!(
        (loaded.entry.status, loaded.state),
        (Status::Pending, json!({"n": 0})),
        "a pending snapshot has its parent's state"
    );
    expect_running(
        set_n(store, &id, Parent::Head(pending.id.clone()), 9).await,
        "turn-1",
        "an append after a running turn",
    );
    expect_running(
        store
            .append(
                &id,
                Append::pending(Parent::Head(pending.id.clone()), lease("turn-2", term)),
            )
            .await,
        "turn-1",
        "a second turn",
    );
    let renewed = store.renew(&pending.id, "turn-1", now_ms() + 90_000).await;
    assert_eq!(renewed.expect("renew"), Renewal::Renewed);
    expect_not_held(
        &store
            .renew(&pending.id, "someone-else", now_ms() + 90_000)
            .await,
        "a renewal by another owner",
    );
    expect_not_held(
        &store
            .finish(
                &pending.id,
                Finish::new("someone-else", Status::Completed, Change::new()),
            )
            .await,
        "a finish by another owner",
    );
    let change = Change::new().set("/n", json!(1));
    let done = store
        .finish(
            &pending.id,
            Finish::new("turn-1", Status::Completed, change),
        )
        .await
        .expect("finish");
    assert_eq!(
        (done.status, done.lease.as_ref()),
        (Status::Completed, None)
    );
    assert_eq!((done.id.as_str(), done.version), (pending.id.as_str(), 2));
    assert_eq!(head(store, &id).await.state, json!({"n": 1}));
    expect_not_held(
        &store
            .finish(
                &pending.id,
                Finish::new("turn-1", Status::Completed, Change::new()),
            )
            .await,
        "a second finish",
    );
    expect_not_held(
        &store.renew(&pending.id, "turn-1", now_ms() + 90_000).await,
        "a renewal after the finish",
    );
    // A failed turn.
    let failing = store
        .append(
            &id,
            Append::pending(Parent::Head(done.id.clone()), lease("turn-3", term)),
        )
        .await
        .expect("start a turn");
    let error = json!({"message": "intentional failure"});
    let change = Change::new().set("/n", json!(2));
    let failed = store
        .finish(
            &failing.id,
            Finish::new("turn-3", Status::Failed, change).with_error(error.clone()),
        )
        .await
        .expect("finish failed");
    assert_eq!(
        (failed.status, failed.error.as_ref()),
        (Status::Failed, Some(&error))
    );
    let loaded = head(store, &id).await;
    assert_eq!(
        loaded.entry.error.as_ref(),
        Some(&error),
        "the error is kept"
    );
    assert_eq!(
        loaded.state,
        json!({"n": 2}),
        "what a failed turn did is kept"
    );
    assert_eq!(
        store.abort(&failing.id).await.expect("abort"),
        Some(Status::Failed)
    );
    assert_eq!(
        store.abort(&root.id).await.expect("abort"),
        Some(Status::Completed)
    );
    assert_eq!(
        head(store, &id).await.entry.status,
        Status::Failed,
        "terminal stays"
    );
    assert_eq!(store.abort("no-such-snapshot").await.expect("abort"), None);
}

/// A running turn's view: a pending snapshot appended with a change shows it while the turn
/// runs (read as the head and by id), its finish's change replaces it (made of the parent's
/// state, never on top of the view), also when the view was read in between; and a turn whose
/// lease lapsed keeps its view as its final state.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn running_views(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}running-views");
    let root = create(store, &id, json!({"messages": ["hi", "hello"]})).await;
    let term = Duration::from_secs(60);
    let asked = Change::new().push("/messages", json!("question"));
    let pending = store
        .append(
            &id,
            Append::pending(Parent::Head(root.id.clone()), lease("turn-1", term))
                .with_change(asked.clone()),
        )
        .await
        .expect("start a turn with a view");
    let view = json!({"messages": ["hi", "hello", "question"]});
    let loaded = head(store, &id).await;
    assert_eq!(
        (loaded.entry.status, &loaded.state),
        (Status::Pending, &view),
        "a running turn shows its view"
    );
    assert_eq!(state_at(store, &pending.id).await, view, "by id too");
    let answered = asked.push("/messages", json!("answer"));
    store
        .finish(
            &pending.id,
            Finish::new("turn-1", Status::Completed, answered),
        )
        .await
        .expect("finish");
    let after = json!({"messages": ["hi", "hello", "question", "answer"]});
    assert_eq!(
        head(store, &id).await.state,
        after,
        "the finish's change replaces the view"
    );
    assert_eq!(state_at(store, &pending.id).await, after);
    // A turn whose lease lapses keeps its view: its state is final.
    let mut lapsed_lease = lease("crashed", Duration::ZERO);
    lapsed_lease.expires_at = lapsed_lease.expires_at.saturating_sub(1);
    let lapsed = store
        .append(
            &id,
            Append::pending(Parent::Head(pending.id.clone()), lapsed_lease)
                .with_change(Change::new().push("/messages", json!("lost"))),
        )
        .await
        .expect("start a turn");
    let loaded = head(store, &id).await;
    assert_eq!(loaded.entry.id, lapsed.id);
    assert_eq!(
        loaded.state,
        json!({"messages": ["hi", "hello", "question", "answer", "lost"]}),
        "a lapsed turn's view is its state"
    );
    set_n(store, &id, Parent::Head(lapsed.id.clone()), 1)
        .await
        .expect("go on after it");
}

/// Aborting a running turn: the snapshot reads aborted at once, its turn learns it at its next
/// renewal, still holds the session until it finishes, and keeps what it did.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn aborts(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}aborts");
    let root = create(store, &id, json!({"n": 0})).await;
    let term = Duration::from_secs(60);
    let pending = store
        .append(
            &id,
            Append::pending(Parent::Head(root.id.clone()), lease("turn", term)),
        )
        .await
        .expect("start a turn");
    assert_eq!(
        store.abort(&pending.id).await.expect("abort"),
        Some(Status::Pending)
    );
    let entry = store
        .entry(&pending.id)
        .await
        .expect("entry")
        .expect("exists");
    assert_eq!(entry.status, Status::Aborted, "aborted at once");
    assert_eq!(
        store.abort(&pending.id).await.expect("abort"),
        Some(Status::Aborted)
    );
    let renewal = store.renew(&pending.id, "turn", now_ms() + 60_000).await;
    assert_eq!(renewal.expect("renew"), Renewal::Aborted);
    expect_running(
        set_n(store, &id, Parent::Head(pending.id.clone()), 9).await,
        "turn",
        "an append while the aborted turn winds down",
    );
    let change = Change::new().set("/n", json!(1));
    let ended = store
        .finish(&pending.id, Finish::new("turn", Status::Completed, change))
        .await
        .expect("finish");
    assert_eq!(
        ended.status,
        Status::Aborted,
        "an aborted turn stays aborted"
    );
    let loaded = head(store, &id).await;
    assert_eq!(
        (loaded.entry.status, loaded.state),
        (Status::Aborted, json!({"n": 1})),
        "what the aborted turn did is kept"
    );
    set_n(store, &id, Parent::Head(pending.id.clone()), 2)
        .await
        .expect("the session goes on after an aborted turn");
}

/// A turn whose lease lapsed reads as expired, and the next turn takes the session over; the
/// late turn cannot finish over it.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn expired_leases(store: &dyn SessionStore, prefix: &str) {
    let id = format!("{prefix}expired");
    let root = create(store, &id, json!({"n": 0})).await;
    let mut lapsed = lease("crashed", Duration::ZERO);
    lapsed.expires_at = lapsed.expires_at.saturating_sub(1);
    let pending = store
        .append(&id, Append::pending(Parent::Head(root.id.clone()), lapsed))
        .await
        .expect("start a turn");
    let entry = store
        .entry(&pending.id)
        .await
        .expect("entry")
        .expect("exists");
    assert_eq!(entry.status, Status::Expired);
    assert_eq!(head(store, &id).await.entry.status, Status::Expired);
    assert_eq!(
        store.abort(&pending.id).await.expect("abort"),
        Some(Status::Expired)
    );
    let next = store
        .append(
            &id,
            Append::pending(
                Parent::Head(pending.id.clone()),
                lease("next", Duration::from_secs(60)),
            ),
        )
        .await
        .expect("the next turn takes the session over");
    expect_not_held(
        &store
            .finish(
                &pending.id,
                Finish::new("crashed", Status::Completed, Change::new()),
            )
            .await,
        "a late finish after a takeover",
    );
    let change = Change::new().set("/n", json!(1));
    store
        .finish(&next.id, Finish::new("next", Status::Completed, change))
        .await
        .expect("finish");
    assert_eq!(head(store, &id).await.state, json!({"n": 1}));
}
