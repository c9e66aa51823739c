//! The checks of a turn taken over from a process that stopped renewing its lease.

#[allow(clippy::wildcard_imports, reason = "the suite's own helpers")]
use super::*;

/// The term of the leases the check writes: a turn is stale after two thirds of it, so the
/// check waits ten seconds, and has five to take the turn over before its lease lapses.
const TERM: Duration = Duration::from_secs(15);

/// A turn taken over (for stores that implement [`SessionStore::stale`] and
/// [`SessionStore::take_over`]; not part of [`conformance`], since a store no two processes
/// share need not): a resumable turn is not stale while its owner may still renew it, becomes
/// stale after two thirds of its term, is taken over once and only from its owner, keeps what
/// running it again takes, and then answers its new owner alone. A turn that is not to run
/// twice is never stale. Takes about ten seconds.
///
/// # Panics
///
/// When the store breaks the contract.
///
/// # Cancel safety
///
/// Dropping the future stops the check; the sessions it wrote stay in the store.
pub async fn takeover(store: &dyn SessionStore, prefix: &str) {
    let (id, once) = (
        format!("{prefix}takeover"),
        format!("{prefix}takeover-once"),
    );
    let root = create(store, &id, json!({"n": 0})).await;
    let resume = json!({"input": "again"});
    let resumable = lease("first", TERM).resumable(resume.clone());
    let pending = store
        .append(
            &id,
            Append::pending(Parent::Head(root.id.clone()), resumable),
        )
        .await
        .expect("start a resumable turn");
    let other = create(store, &once, json!({"n": 0})).await;
    let single = store
        .append(
            &once,
            Append::pending(Parent::Head(other.id), lease("only", TERM)),
        )
        .await
        .expect("start a turn not to run twice");
    let deadline = tokio::time::Instant::now() + TERM;
    expect_not_held(
        &store
            .take_over(&pending.id, "first", lease("second", TERM))
            .await,
        "a takeover while the owner may still renew",
    );

    // Not renewed for two thirds of its term, the turn is stale; the other never is.
    let stale = loop {
        let stale = store.stale().await.expect("stale turns");
        assert!(
            !stale.iter().any(|entry| entry.id == single.id),
            "a turn not to run twice is never stale"
        );
        if let Some(entry) = stale.into_iter().find(|entry| entry.id == pending.id) {
            break entry;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the turn never went stale within its lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(stale.session_id, id);
    assert_eq!(stale.status, Status::Pending);
    let held = stale.lease.as_ref().expect("a stale turn has its lease");
    assert_eq!(
        (held.owner.as_str(), held.resume.as_deref()),
        ("first", Some(&resume))
    );
    expect_not_held(
        &store
            .take_over(&pending.id, "somebody", lease("second", TERM))
            .await,
        "a takeover from a lease's non-owner",
    );
    expect_not_held(
        &store
            .take_over(&single.id, "only", lease("second", TERM))
            .await,
        "a takeover of a turn not to run twice",
    );

    // Taken over once: the new owner holds it, with what running it again takes.
    let taken = store
        .take_over(&pending.id, "first", lease("second", TERM))
        .await
        .expect("take the stale turn over");
    let new = taken.lease.as_ref().expect("the new lease");
    assert_eq!(
        (new.owner.as_str(), new.resume.as_deref(), taken.status),
        ("second", Some(&resume), Status::Pending)
    );
    assert!(
        !store
            .stale()
            .await
            .expect("stale")
            .iter()
            .any(|e| e.id == pending.id),
        "a turn just taken over is not stale"
    );
    expect_not_held(
        &store
            .take_over(&pending.id, "first", lease("third", TERM))
            .await,
        "a second takeover",
    );
    expect_not_held(
        &store.renew(&pending.id, "first", now_ms() + 60_000).await,
        "the old owner's renewal",
    );
    let renewed = store.renew(&pending.id, "second", now_ms() + 60_000).await;
    assert_eq!(renewed.expect("renew"), Renewal::Renewed);
    let finish =
        |owner: &str| Finish::new(owner, Status::Completed, Change::new().set("/n", json!(1)));
    expect_not_held(
        &store.finish(&pending.id, finish("first")).await,
        "the old owner's finish",
    );
    let done = store
        .finish(&pending.id, finish("second"))
        .await
        .expect("the new owner finishes");
    assert_eq!((done.status, done.lease), (Status::Completed, None));
    assert_eq!(head(store, &id).await.state, json!({"n": 1}));
}
