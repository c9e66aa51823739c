//! C2: a connection runs its action in the caller's task, wherever the caller awaits the
//! connection, until the action has to run while nobody does (then in a task of its own; opened
//! `in_place`, never), and keeps every rule of a spawned action: turns, the rendezvous,
//! cancellation with its grace, and an action left unfinished still finishes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bidi_core::{
    ActionContext, BidiAction, BoxError, ConnectOptions, Connection, Inbound, Outbound,
};
use futures_util::StreamExt as _;
use tokio::sync::Notify;

use crate::grace::slow_cleanup;
use crate::support::{assert_no_tasks_left, echo};

both_runtimes! {
    async fn a_default_connection_spawns_nothing_while_its_action_waits_on_its_caller() {
        let alive = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let mut conn = echo().connect(());
        for text in ["one", "two"] {
            conn.send(text.into()).await.unwrap();
            let turn: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
            assert_eq!(turn, [format!("echo: {text}")]);
            assert_eq!(alive(), 0, "the action ran in the caller's task");
        }
        conn.close();
        assert_eq!(conn.output().await.unwrap(), 2);
    }

    /// Woken by something else while nobody awaits its connection, the action goes on in a task
    /// of its own, as a spawned one would: it does not wait for its caller's next await.
    async fn an_action_woken_while_nobody_awaits_it_goes_on_alone() {
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let (told, done) = tokio::sync::oneshot::channel::<()>();
        let wait = std::sync::Mutex::new(Some((wait, told)));
        let action = BidiAction::new(
            "woken",
            move |_: ActionContext, (), mut inbound: Inbound<()>, _: Outbound<()>| {
                let pair = wait.lock().unwrap().take();
                async move {
                    let (wait, told) = pair.expect("one connection");
                    wait.await?;
                    let _ = told.send(());
                    inbound.recv().await;
                    Ok::<_, BoxError>(())
                }
            },
        );
        let conn = action.connect(());
        go.send(()).unwrap();
        // Only the test's own channel is awaited, never the connection.
        tokio::time::timeout(Duration::from_secs(60), done)
            .await
            .expect("the action ran without its caller")
            .unwrap();
        conn.close();
        conn.output().await.unwrap();
        assert_no_tasks_left().await;
    }

    /// Two tasks awaiting one connection at once: each is woken for its own future.
    async fn two_tasks_awaiting_one_connection_both_finish() {
        let counter = BidiAction::new(
            "count",
            |_: ActionContext, (), mut inbound: Inbound<u32>, _: Outbound<()>| async move {
                let mut sum = 0;
                while let Some(n) = inbound.recv().await {
                    sum += n;
                }
                Ok::<_, BoxError>(sum)
            },
        );
        let conn = Arc::new(counter.connect(()));
        let watcher = tokio::spawn({
            let conn = Arc::clone(&conn);
            async move { conn.done().await }
        });
        tokio::task::yield_now().await;
        for n in 1..=3 {
            conn.send(n).await.unwrap();
        }
        conn.close();
        tokio::time::timeout(Duration::from_secs(60), watcher)
            .await
            .expect("the watcher was woken")
            .unwrap();
        let conn = Arc::into_inner(conn).expect("the only handle left");
        assert_eq!(conn.output().await.unwrap(), 6);
    }

    /// An action that keeps waking itself is polled in place a while, then in a task of its
    /// own, and its turn arrives whole.
    async fn an_action_that_keeps_waking_itself_goes_on_alone() {
        let busy = BidiAction::new(
            "busy",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
                while let Some(rounds) = inbound.recv().await {
                    let mut left = rounds;
                    std::future::poll_fn(|cx| {
                        if left == 0 {
                            return std::task::Poll::Ready(());
                        }
                        left -= 1;
                        cx.waker().wake_by_ref();
                        std::task::Poll::Pending
                    })
                    .await;
                    out.send(rounds).await?;
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>(())
            },
        );
        let mut conn = busy.connect(());
        for rounds in [3, 1_000] {
            conn.send(rounds).await.unwrap();
            let turn: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
            assert_eq!(turn, [rounds]);
        }
        conn.close();
        conn.output().await.unwrap();
        assert_no_tasks_left().await;
    }

    async fn an_in_place_connection_spawns_nothing_and_streams_its_turns() {
        let alive = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let before = alive();
        let mut conn = echo().connect_with((), ConnectOptions::new().in_place());
        assert_eq!(alive(), before, "no task of its own");
        for text in ["one", "two"] {
            conn.send(text.into()).await.unwrap();
            let turn: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
            assert_eq!(turn, [format!("echo: {text}")]);
        }
        conn.close();
        assert_eq!(conn.output().await.unwrap(), 2);
        assert_no_tasks_left().await;
    }

    async fn an_in_place_send_completes_when_the_action_takes_it_and_a_chunk_when_read() {
        let sent = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&sent);
        let action = BidiAction::new(
            "two",
            move |_: ActionContext, (), mut inbound: Inbound<()>, out: Outbound<u32>| {
                let sent = Arc::clone(&count);
                async move {
                    while inbound.recv().await.is_some() {
                        for n in [1, 2] {
                            out.send(n).await?;
                            sent.fetch_add(1, Ordering::SeqCst);
                        }
                        out.end_turn().await?;
                    }
                    Ok::<_, BoxError>(())
                }
            },
        );
        let mut conn = action.connect_with((), ConnectOptions::new().in_place());
        conn.send(()).await.unwrap();
        assert_eq!(sent.load(Ordering::SeqCst), 0, "nobody read the first chunk yet");
        let mut turn = conn.responses();
        assert_eq!(turn.next().await.unwrap().unwrap(), 1);
        assert!(sent.load(Ordering::SeqCst) <= 1, "the second chunk waits for its reader");
        assert_eq!(turn.next().await.unwrap().unwrap(), 2);
        assert!(turn.next().await.is_none());
        assert!(turn.turn_ended());
        drop(turn);
        conn.close();
        conn.output().await.unwrap();
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    async fn a_split_in_place_connection_runs_its_action_in_a_task_of_its_own() {
        let conn = echo().connect_with((), ConnectOptions::new().in_place());
        let (tx, mut rx) = conn.into_split();
        let writer = tokio::spawn(async move {
            for text in ["a", "b", "c"] {
                tx.send(text.into()).await.unwrap();
            }
        });
        let mut read = Vec::new();
        for _ in 0..3 {
            read.extend(rx.responses().map(Result::unwrap).collect::<Vec<_>>().await);
        }
        writer.await.unwrap();
        assert_eq!(read, ["echo: a", "echo: b", "echo: c"]);
        assert_eq!(rx.output().await.unwrap(), 3);
    }

    async fn run_drives_an_in_place_action_to_its_output() {
        let conn = echo().connect_with((), ConnectOptions::new().in_place());
        assert_eq!(conn.run("once".into()).await.unwrap(), 1);
        assert_no_tasks_left().await;
    }
}

/// Drives `conn`'s action until it has started (and waits for its cancel).
async fn start(conn: &Connection<(), (), ()>, started: &Notify) {
    tokio::select! {
        () = conn.done() => panic!("the action waits for its cancel"),
        () = started.notified() => {}
    }
}

/// A cancelled in-place action gets its grace: `output` drives its clean-up to the end.
#[tokio::test(start_paused = true)]
async fn a_cancelled_in_place_action_finishes_its_clean_up_within_output() {
    let (cleaned, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = slow_cleanup(Duration::from_millis(300), cleaned.clone(), started.clone());
    let conn = action.connect_with((), ConnectOptions::new().in_place());
    start(&conn, &started).await;
    conn.cancel();
    let error = conn.output().await.unwrap_err();
    assert!(error.is_cancelled());
    assert!(cleaned.load(Ordering::SeqCst), "the clean-up ran");
}

/// Dropped unfinished, an in-place connection hands its action a task of its own: the action
/// still finishes its clean-up after the cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_in_place_connection_lets_its_action_finish() {
    let (cleaned, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = slow_cleanup(Duration::from_millis(20), cleaned.clone(), started.clone());
    let conn = action.connect_with((), ConnectOptions::new().in_place());
    start(&conn, &started).await;
    drop(conn);
    for _ in 0..10_000 {
        if cleaned.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        cleaned.load(Ordering::SeqCst),
        "the clean-up ran after the drop"
    );
    assert_no_tasks_left().await;
}

/// Cancelled while nobody awaits its connection, a default connection's action finishes its
/// clean-up in a task of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_action_cleans_up_with_nobody_awaiting_it() {
    let (cleaned, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = slow_cleanup(Duration::from_millis(20), cleaned.clone(), started.clone());
    let conn = action.connect(());
    start(&conn, &started).await;
    conn.cancel();
    for _ in 0..10_000 {
        if cleaned.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(cleaned.load(Ordering::SeqCst), "the clean-up ran");
    assert!(conn.output().await.unwrap_err().is_cancelled());
    assert_no_tasks_left().await;
}

/// A caller whose connections always have something for it (their actions run in its task and
/// wait on nothing else) never waits itself, yet it yields to the runtime now and then, as one
/// reading a tokio channel does: the actions of the connections it dropped, each ending in a
/// task of its own, end as it goes on instead of piling up until it stops.
#[tokio::test(flavor = "current_thread")]
async fn a_caller_that_never_waits_lets_the_actions_it_dropped_end() {
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let mut most = 0;
    for _ in 0..2_000 {
        let mut conn = echo().connect(());
        conn.send("hi".into()).await.unwrap();
        let echoed = conn.responses().next().await.transpose().unwrap();
        assert_eq!(echoed.as_deref(), Some("echo: hi"));
        // Its action waits for the next input: cancelled, it ends in a task of its own.
        drop(conn);
        most = most.max(alive());
    }
    assert!(most < 500, "{most} dropped actions waited to end at once");
    assert_no_tasks_left().await;
}
