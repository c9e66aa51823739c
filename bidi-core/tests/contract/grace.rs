//! C8, C9: after a cancel the action gets a bounded grace period, then its future is dropped;
//! `output()` and `done()` return only once nothing of the action runs; causes say where they
//! came from.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use bidi_core::{
    ActionContext, BidiAction, BoxError, CauseKind, ConnectOptions, DEFAULT_GRACE, Error, Inbound,
    Outbound, SendError,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::support::{Boom, assert_no_tasks_left};

/// Sets a flag when dropped: tells whether a future was dropped, not finished.
pub(crate) struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An action that, once cancelled, works for `cleanup` on the clock, then records that its
/// clean-up happened.
pub(crate) fn slow_cleanup(
    cleanup: Duration,
    cleaned: Arc<AtomicBool>,
    started: Arc<Notify>,
) -> BidiAction<(), (), (), ()> {
    BidiAction::new(
        "slow-cleanup",
        move |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
            let (cleaned, started) = (cleaned.clone(), started.clone());
            async move {
                started.notify_one();
                ctx.cancelled().await;
                tokio::time::sleep(cleanup).await; // saving a session, say
                cleaned.store(true, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        },
    )
}

/// An action that never looks at its cancellation and never returns.
pub(crate) fn stubborn(
    dropped: Arc<AtomicBool>,
    started: Arc<Notify>,
) -> BidiAction<(), (), (), ()> {
    BidiAction::new(
        "stubborn",
        move |_: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
            let (dropped, started) = (dropped.clone(), started.clone());
            async move {
                let _flag = DropFlag(dropped);
                started.notify_one();
                std::future::pending::<()>().await;
                Ok::<_, BoxError>(())
            }
        },
    )
}

#[tokio::test(start_paused = true)]
async fn output_waits_for_the_cancellation_path_within_the_grace() {
    let (cleaned, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = slow_cleanup(Duration::from_millis(300), cleaned.clone(), started.clone());
    let conn = action.connect(());
    started.notified().await;
    conn.cancel();
    assert!(conn.is_finished(), "the outcome is decided at the cancel");
    let error = conn.output().await.unwrap_err();
    assert!(error.is_cancelled());
    assert!(
        cleaned.load(Ordering::SeqCst),
        "output() returned before the action's clean-up ran"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cleanup_longer_than_the_grace_is_dropped_at_its_end() {
    let (cleaned, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = slow_cleanup(Duration::from_secs(3600), cleaned.clone(), started.clone());
    let grace = Duration::from_millis(250);
    let conn = action.connect_with((), ConnectOptions::new().grace(grace));
    started.notified().await;
    let before = tokio::time::Instant::now();
    conn.cancel();
    assert!(conn.output().await.unwrap_err().is_cancelled());
    assert_eq!(
        before.elapsed(),
        grace,
        "dropped exactly when the grace ran out"
    );
    assert!(!cleaned.load(Ordering::SeqCst));
    assert_no_tasks_left().await;
}

#[tokio::test(start_paused = true)]
async fn an_action_ignoring_its_cancel_is_dropped_after_the_default_grace() {
    let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let conn = stubborn(dropped.clone(), started.clone()).connect(());
    started.notified().await;
    let before = tokio::time::Instant::now();
    conn.cancel_with("enough");
    conn.done().await;
    assert_eq!(before.elapsed(), DEFAULT_GRACE);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the action's future was dropped"
    );
    match conn.output().await {
        Err(Error::Cancelled(cause)) => {
            assert_eq!(cause.kind(), CauseKind::Requested);
            assert_eq!(cause.to_string(), "enough");
        }
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_no_tasks_left().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_ends_a_stubborn_action_within_the_grace() {
    let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = stubborn(dropped.clone(), started.clone());
    let metrics = tokio::runtime::Handle::current().metrics();
    let (tx, rx) = action.connect(()).into_split();
    started.notified().await;
    let extra = tx.clone();
    drop(tx);
    drop(rx);
    assert_eq!(
        metrics.num_alive_tasks(),
        1,
        "a sending half still holds it"
    );
    drop(extra);
    tokio::time::sleep(DEFAULT_GRACE - Duration::from_millis(1)).await;
    assert!(
        !dropped.load(Ordering::SeqCst),
        "dropped before the grace ran out"
    );
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_no_tasks_left().await;
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_zero_grace_drops_the_action_at_the_cancel() {
    let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let conn = stubborn(dropped.clone(), started.clone())
        .connect_with((), ConnectOptions::new().grace(Duration::ZERO));
    started.notified().await;
    let before = tokio::time::Instant::now();
    conn.cancel();
    assert!(conn.output().await.unwrap_err().is_cancelled());
    assert_eq!(before.elapsed(), Duration::ZERO);
    assert!(dropped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_parent_cancel_gets_the_same_grace_and_says_so() {
    let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let parent = CancellationToken::new();
    let conn = stubborn(dropped.clone(), started.clone())
        .connect_with((), ConnectOptions::new().parent(parent.clone()));
    started.notified().await;
    let before = tokio::time::Instant::now();
    parent.cancel();
    match conn.output().await {
        Err(Error::Cancelled(cause)) => assert_eq!(cause.kind(), CauseKind::Parent),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    assert_eq!(before.elapsed(), DEFAULT_GRACE);
    assert!(dropped.load(Ordering::SeqCst));
}

both_runtimes! {
    /// `done()` on every handle resolves once the action returned, without consuming anything.
    async fn done_resolves_on_every_handle_when_the_action_returns() {
        let action = BidiAction::new(
            "two-chunks",
            |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
                out.send(1).await?;
                Ok::<_, BoxError>(7)
            },
        );
        let (tx, mut rx) = action.connect(()).into_split();
        let waiter = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.done().await })
        };
        let mut turn = rx.responses();
        assert_eq!(futures_util::StreamExt::next(&mut turn).await.unwrap().unwrap(), 1);
        drop(turn);
        rx.done().await;
        tx.done().await;
        waiter.await.unwrap();
        assert!(rx.is_finished());
        assert_eq!(rx.output().await.unwrap(), 7);
    }

    /// Causes say where they came from, without matching text.
    async fn cause_kinds() {
        let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
        let action = stubborn(dropped, started);

        let conn = action.connect_with((), ConnectOptions::new().grace(Duration::ZERO));
        conn.cancel();
        match conn.output().await {
            Err(Error::Cancelled(cause)) => assert_eq!(cause.kind(), CauseKind::Requested),
            other => panic!("{other:?}"),
        }

        // The action sees a dropped connection's cause.
        let (seen_tx, seen) = tokio::sync::oneshot::channel();
        let seen_tx = Arc::new(std::sync::Mutex::new(Some(seen_tx)));
        let watcher = BidiAction::new("watcher", move |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
            let seen_tx = seen_tx.clone();
            async move {
                let cause = ctx.cancelled().await;
                if let Some(tx) = seen_tx.lock().unwrap().take() {
                    let _ = tx.send(cause.kind());
                }
                Ok::<_, BoxError>(())
            }
        });
        let (tx, rx) = watcher.connect(()).into_split();
        drop(rx);
        drop(tx);
        assert_eq!(seen.await.unwrap(), CauseKind::Dropped);
        assert_no_tasks_left().await;
    }

    /// A send to an action that already failed carries its error, the same one `output()` gives.
    async fn a_send_after_the_action_failed_carries_the_error() {
        let action = BidiAction::new(
            "fails-first",
            |_: ActionContext, (), _: Inbound<u32>, _: Outbound<()>| async move {
                Err::<(), _>(Boom(3))
            },
        );
        let conn = action.connect(());
        match conn.send(1).await {
            Err(SendError::Failed(value, error)) => {
                assert_eq!(value, 1);
                let source = std::error::Error::source(&error).unwrap();
                assert_eq!(source.downcast_ref::<Boom>(), Some(&Boom(3)));
            }
            other => panic!("expected Failed, got {other:?}"),
        }
        // A send that fails that way is an error whose source chain reaches the action's error.
        let error = conn.send(2).await.unwrap_err();
        assert_eq!(error.to_string(), "send failed: action failed: boom 3");
        assert!(error.error().is_some());
        let output = conn.output().await.unwrap_err();
        assert_eq!(output.to_string(), "action failed: boom 3");
    }

    /// A send to an action that completed with an output is still `Completed`.
    async fn a_send_after_success_is_completed() {
        let calls = Arc::new(AtomicU32::new(0));
        let action = {
            let calls = calls.clone();
            BidiAction::new("done-at-once", move |_: ActionContext, (), _: Inbound<u32>, _: Outbound<()>| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, BoxError>(5) }
            })
        };
        let conn = action.connect(());
        assert!(matches!(conn.send(1).await, Err(SendError::Completed(1))));
        assert_eq!(conn.output().await.unwrap(), 5);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
