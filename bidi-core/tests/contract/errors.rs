//! C4, C10, C15: failed sends hand the value back; failures and panics reach the caller.

use std::error::Error as _;

use bidi_core::{ActionContext, BidiAction, BoxError, Error, Inbound, Outbound, SendError};
use futures_util::StreamExt;

use crate::support::{Boom, echo};

both_runtimes! {
    /// C4: after `close`, the value comes back as `Closed`.
    async fn send_after_close() {
        let conn = echo().connect(());
        conn.close();
        match conn.send("late".into()).await {
            Err(SendError::Closed(value)) => assert_eq!(value, "late"),
            other => panic!("expected Closed, got {other:?}"),
        }
        assert_eq!(conn.output().await.unwrap(), 0);
    }

    /// C4: after the action completed, `Completed`, deterministically.
    async fn send_after_completion_is_deterministic() {
        let action = BidiAction::new(
            "quick",
            |_: ActionContext, (), _: Inbound<u32>, _: Outbound<()>| async { Ok::<_, BoxError>(()) },
        );
        for i in 0..1_000 {
            let mut conn = action.connect(());
            // The turn stream ends when the action returns.
            assert!(conn.responses().next().await.is_none());
            assert!(conn.is_finished());
            match conn.send(i).await {
                Err(SendError::Completed(value)) => assert_eq!(value, i),
                other => panic!("run {i}: expected Completed, got {other:?}"),
            }
            conn.output().await.unwrap();
        }
    }

    /// C4 for batches: after completion the whole batch comes back; an empty batch fails too.
    async fn batch_after_completion_comes_back_whole() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let tx = std::sync::Mutex::new(Some(tx));
        let action = BidiAction::new(
            "leaks-outbound",
            move |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| {
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send(out);
                }
                async { Ok::<_, BoxError>(()) }
            },
        );
        let conn = action.connect(());
        let out = rx.await.unwrap();
        conn.output().await.unwrap();
        match out.send_batch(vec![1, 2, 3]).await {
            Err(SendError::Completed(chunks)) => assert_eq!(chunks, [1, 2, 3]),
            other => panic!("expected Completed, got {other:?}"),
        }
        assert!(matches!(out.send_batch(Vec::new()).await, Err(SendError::Completed(_))));
    }

    /// C4: a send parked when the action completes fails with `Completed` too.
    async fn parked_send_fails_when_the_action_completes() {
        let action = BidiAction::new(
            "ignores-input",
            |_: ActionContext, (), _: Inbound<u32>, out: Outbound<()>| async move {
                out.end_turn().await?;
                Ok::<_, BoxError>(())
            },
        );
        let (tx, mut rx) = action.connect(()).into_split();
        // The send parks first (the action never reads); reading the turn lets the action return.
        let (sent, turn_ended) = tokio::join!(tx.send(5), async { rx.responses().next().await.is_none() });
        assert!(turn_ended);
        match sent {
            Err(SendError::Completed(5)) => {}
            other => panic!("expected Completed, got {other:?}"),
        }
        drop(tx);
        rx.output().await.unwrap();
    }

    /// C4: after cancel, `Cancelled`.
    async fn send_after_cancel() {
        let conn = echo().connect(());
        conn.cancel();
        assert!(matches!(conn.send("x".into()).await, Err(SendError::Cancelled(v)) if v == "x"));
        assert!(conn.output().await.unwrap_err().is_cancelled());
    }

    /// C6, C15: the action's error is the last item of `responses()`, once, and `output()`
    /// returns it with the original error as its source.
    async fn failing_action() {
        let action = BidiAction::new(
            "fails",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
                let n = inbound.recv().await.unwrap_or_default();
                out.send(n).await?;
                Err::<(), BoxError>(Boom(n).into())
            },
        );
        let mut conn = action.connect(());
        conn.send(7).await.unwrap();
        let items: Vec<_> = conn.responses().collect().await;
        assert_eq!(items.len(), 2);
        assert_eq!(*items[0].as_ref().unwrap(), 7);
        let Err(Error::Action(source)) = &items[1] else { panic!("expected the action's error") };
        assert_eq!(source.downcast_ref::<Boom>(), Some(&Boom(7)));
        // Yielded once per connection: later turns are empty.
        assert!(conn.responses().next().await.is_none());
        let error = conn.output().await.unwrap_err();
        assert!(matches!(error, Error::Action(_)));
        assert_eq!(error.to_string(), "action failed: boom 7");
        let source = error.source().expect("the action's error is the source");
        assert_eq!(source.downcast_ref::<Boom>(), Some(&Boom(7)));
    }

    /// C10: a panic becomes `Error::Panicked` through `responses()` and `output()`; the runtime
    /// keeps working.
    async fn panicking_action() {
        let action = BidiAction::new(
            "panics",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
                let n = inbound.recv().await.unwrap_or_default();
                out.send(n).await?;
                if n > 0 {
                    panic!("kaboom {n}");
                }
                Ok::<_, BoxError>(n)
            },
        );
        let mut conn = action.connect(());
        conn.send(3).await.unwrap();
        let mut responses = conn.responses();
        assert_eq!(responses.next().await.unwrap().unwrap(), 3);
        match responses.next().await {
            Some(Err(Error::Panicked(message))) => assert_eq!(message, "kaboom 3"),
            other => panic!("expected Panicked, got {other:?}"),
        }
        assert!(responses.next().await.is_none());
        drop(responses);
        assert!(conn.output().await.unwrap_err().is_panic());
        // The runtime is fine, and so is the next connection.
        assert_eq!(action.run((), 0).await.unwrap(), 0);
        assert!(matches!(
            action.run((), 1).await,
            Err(Error::Panicked(message)) if message == "kaboom 1"
        ));
    }

    /// C1: a panic while building the action's future is caught too.
    async fn panic_before_the_first_await() {
        let action: BidiAction<(), (), (), ()> = BidiAction::new(
            "eager-panic",
            |_: ActionContext, (), _: Inbound<()>, _: Outbound<()>| -> std::future::Ready<Result<(), BoxError>> {
                panic!("no future for you")
            },
        );
        assert!(action.connect(()).output().await.unwrap_err().is_panic());
    }
}
