//! C2, C9: at most one task per connection, and no task outlives its connection.

use std::sync::Arc;

use bidi_core::{ActionContext, BidiAction, BoxError, ConnectOptions, Error, Inbound, Outbound};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::support::assert_no_tasks_left;

/// Where the action blocks when its connection is dropped.
#[derive(Clone, Copy)]
enum BlockedIn {
    Recv,
    Send,
    Cancelled,
}

fn blocking_action(reached: Arc<Notify>) -> BidiAction<BlockedIn, (), (), u32> {
    BidiAction::new(
        "blocks",
        move |ctx: ActionContext, at: BlockedIn, mut inbound: Inbound<()>, out: Outbound<u32>| {
            let reached = reached.clone();
            async move {
                reached.notify_one();
                match at {
                    BlockedIn::Recv => {
                        inbound.recv().await;
                    }
                    BlockedIn::Send => {
                        let _ = out.send(1).await;
                    }
                    BlockedIn::Cancelled => {
                        ctx.cancelled().await;
                    }
                }
                Ok::<_, BoxError>(())
            }
        },
    )
}

both_runtimes! {
    /// C2: a connection is at most one task: none while its action waits only on its caller,
    /// one once it has to run alone.
    async fn at_most_one_task_per_connection() {
        let reached = Arc::new(Notify::new());
        let action = blocking_action(reached.clone());
        let metrics = tokio::runtime::Handle::current().metrics();
        let conns: Vec<_> = (0..10).map(|_| action.connect(BlockedIn::Recv)).collect();
        assert_eq!(metrics.num_alive_tasks(), 0, "each waits for its input, in place");
        let release = Arc::new(Notify::new());
        let woken = BidiAction::new("woken", {
            let release = release.clone();
            move |_: ActionContext, (), mut inbound: Inbound<()>, _: Outbound<u32>| {
                let release = release.clone();
                async move {
                    release.notified().await;
                    inbound.recv().await;
                    Ok::<_, BoxError>(())
                }
            }
        });
        let alone: Vec<_> = (0..10).map(|_| woken.connect(())).collect();
        assert_eq!(metrics.num_alive_tasks(), 0);
        // Woken while nobody awaits their connections: each goes on in a task of its own.
        release.notify_waiters();
        for _ in 0..10_000 {
            if metrics.num_alive_tasks() == 10 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(metrics.num_alive_tasks(), 10);
        drop((conns, alone));
        assert_no_tasks_left().await;
    }

    /// C9: dropping the connection ends the task wherever the action is blocked.
    async fn dropping_the_connection_ends_the_task() {
        for at in [BlockedIn::Recv, BlockedIn::Send, BlockedIn::Cancelled] {
            let reached = Arc::new(Notify::new());
            let conn = blocking_action(reached.clone()).connect(at);
            reached.notified().await;
            drop(conn);
            assert_no_tasks_left().await;
        }
    }

    /// C9: dropping both halves of a split connection ends the task too.
    async fn dropping_both_halves_ends_the_task() {
        let reached = Arc::new(Notify::new());
        let (tx, rx) = blocking_action(reached.clone()).connect(BlockedIn::Cancelled).into_split();
        reached.notified().await;
        let tx2 = tx.clone();
        drop(tx);
        drop(rx);
        assert_eq!(tokio::runtime::Handle::current().metrics().num_alive_tasks(), 1);
        drop(tx2);
        assert_no_tasks_left().await;
    }

    /// C8: a parent token cancels the connection, with a cause saying so.
    async fn parent_token_cancels() {
        let parent = CancellationToken::new();
        let reached = Arc::new(Notify::new());
        let conn = blocking_action(reached.clone())
            .connect_with(BlockedIn::Cancelled, ConnectOptions::new().parent(parent.clone()));
        reached.notified().await;
        parent.cancel();
        match conn.output().await {
            Err(Error::Cancelled(cause)) => assert!(cause.to_string().contains("parent")),
            other => panic!("expected Cancelled, got {other:?}"),
        }
        assert_no_tasks_left().await;
    }

    /// A nested connection follows its parent action through `ActionContext::child_token`.
    async fn nested_connection_follows_its_parent() {
        let reached = Arc::new(Notify::new());
        let inner = blocking_action(reached.clone());
        let outer = BidiAction::new(
            "outer",
            move |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
                let inner = inner.clone();
                async move {
                    let nested = inner.connect_with(
                        BlockedIn::Cancelled,
                        ConnectOptions::new().parent(ctx.child_token()),
                    );
                    Ok::<_, BoxError>(nested.output().await.is_err_and(|e| e.is_cancelled()))
                }
            },
        );
        let conn = outer.connect(());
        reached.notified().await;
        conn.cancel();
        assert!(conn.output().await.unwrap_err().is_cancelled());
        assert_no_tasks_left().await;
    }
}
