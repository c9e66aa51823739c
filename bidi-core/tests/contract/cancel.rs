//! C8: cancellation with a cause.

use std::sync::{Arc, Mutex};

use bidi_core::{ActionContext, BidiAction, BoxError, Error, Inbound, Outbound, SendError};
use futures_util::StreamExt;
use tokio::sync::oneshot;

use crate::support::{Boom, assert_no_tasks_left};

/// An action that reports the cause it saw, then returns.
fn cause_reporter() -> (BidiAction<(), (), (), ()>, oneshot::Receiver<String>) {
    let (tx, rx) = oneshot::channel();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let action = BidiAction::new(
        "waits",
        move |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
            let tx = tx.clone();
            async move {
                let cause = ctx.cancelled().await;
                assert!(ctx.is_cancelled());
                assert_eq!(ctx.cause().map(|c| c.to_string()), Some(cause.to_string()));
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(cause.to_string());
                }
                Ok::<_, BoxError>(())
            }
        },
    );
    (action, rx)
}

both_runtimes! {
    /// The cause reaches the action and the caller; the action's result is discarded.
    async fn cause_reaches_the_action() {
        let (action, seen) = cause_reporter();
        let conn = action.connect(());
        conn.cancel_with(Boom(1));
        assert_eq!(seen.await.unwrap(), "boom 1");
        match conn.output().await {
            Err(Error::Cancelled(cause)) => assert_eq!(cause.downcast_ref::<Boom>(), Some(&Boom(1))),
            other => panic!("expected Cancelled, got {other:?}"),
        }
    }

    /// The first cause wins.
    async fn first_cause_wins() {
        let (action, seen) = cause_reporter();
        let conn = action.connect(());
        conn.cancel_with("first");
        conn.cancel_with("second");
        conn.cancel();
        assert_eq!(seen.await.unwrap(), "first");
        let error = conn.output().await.unwrap_err();
        assert_eq!(error.to_string(), "connection cancelled: first");
    }

    /// A completed result wins over a later cancel.
    async fn completed_result_wins_over_cancel() {
        let action = BidiAction::new(
            "answer",
            |_: ActionContext, (), _: Inbound<()>, _: Outbound<()>| async { Ok::<_, BoxError>(42) },
        );
        for _ in 0..1_000 {
            let mut conn = action.connect(());
            assert!(conn.responses().next().await.is_none());
            conn.cancel_with("too late");
            assert_eq!(conn.output().await.unwrap(), 42);
        }
    }

    /// Completion racing a cancel: the outcome is whichever came first, consistently in every
    /// place the caller can look.
    async fn completion_racing_cancel_is_consistent() {
        let action = BidiAction::new(
            "answer",
            |_: ActionContext, (), _: Inbound<()>, _: Outbound<()>| async { Ok::<_, BoxError>(42) },
        );
        let (mut completed, mut cancelled) = (0, 0);
        for _ in 0..1_000 {
            let (tx, mut rx) = action.connect(()).into_split();
            let canceller = tokio::spawn(async move { tx.cancel() });
            let last = rx.responses().next().await;
            canceller.await.unwrap();
            match (last, rx.output().await) {
                (None, Ok(42)) => completed += 1,
                (Some(Err(Error::Cancelled(_))), Err(Error::Cancelled(_))) => cancelled += 1,
                other => panic!("inconsistent outcome: {other:?}"),
            }
        }
        assert_eq!(completed + cancelled, 1_000);
    }

    /// An `Outbound::send` inside a cancelled action fails promptly, whether it was already
    /// waiting when the cancel landed or starts afterwards.
    async fn sends_fail_promptly_once_cancelled() {
        let (report_tx, report) = oneshot::channel();
        let report_tx = Arc::new(Mutex::new(Some(report_tx)));
        let action = BidiAction::new(
            "blocked",
            move |ctx: ActionContext, (), mut inbound: Inbound<()>, out: Outbound<u32>| {
                let report_tx = report_tx.clone();
                async move {
                    // Nobody reads: this send waits until the cancel lands.
                    let waiting = out.send(1).await;
                    let after = out.send(2).await;
                    let ended = out.end_turn().await;
                    let input = inbound.recv().await;
                    assert!(ctx.is_cancelled());
                    let report = (
                        matches!(waiting, Err(SendError::Cancelled(1))),
                        matches!(after, Err(SendError::Cancelled(2))),
                        matches!(ended, Err(SendError::Cancelled(()))),
                        input.is_none(),
                    );
                    if let Some(tx) = report_tx.lock().unwrap().take() {
                        let _ = tx.send(report);
                    }
                    Ok::<_, BoxError>(())
                }
            },
        );
        let conn = action.connect(());
        tokio::task::yield_now().await;
        conn.cancel();
        assert_eq!(report.await.unwrap(), (true, true, true, true));
        assert!(conn.output().await.unwrap_err().is_cancelled());
    }

    /// Once cancelled, the turn stream yields the cancellation once, then ends.
    async fn responses_report_the_cancel_once() {
        let (action, _seen) = cause_reporter();
        let mut conn = action.connect(());
        conn.cancel();
        let items: Vec<_> = conn.responses().collect().await;
        assert!(matches!(items.as_slice(), [Err(Error::Cancelled(_))]));
        assert!(conn.responses().next().await.is_none());
        assert!(conn.is_finished());
        drop(conn);
        assert_no_tasks_left().await;
    }
}
