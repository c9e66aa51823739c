//! C2: a connection opened with a `Driver` leaves its action's task to the caller, and keeps
//! every rule of a spawned action wherever that task is polled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bidi_core::{
    ActionContext, BidiAction, BoxError, ConnectOptions, DEFAULT_GRACE, Driver, Inbound, Outbound,
};
use tokio::sync::Notify;

use crate::grace::stubborn;
use crate::support::assert_no_tasks_left;

fn shout() -> BidiAction<(), String, usize, String> {
    BidiAction::new(
        "shout",
        |_: ActionContext, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
            let mut n = 0;
            while let Some(text) = inbound.recv().await {
                out.send(text.to_uppercase()).await?;
                out.end_turn().await?;
                n += 1;
            }
            Ok::<_, BoxError>(n)
        },
    )
}

both_runtimes! {
    async fn a_driven_action_runs_where_its_task_is_polled() {
    let driver = Driver::new();
    let mut conn = shout().connect_with((), ConnectOptions::new().driver(&driver));
    let task = driver.take().expect("the action's task");
    assert!(driver.take().is_none(), "taken once");
    let talk = async move {
        conn.send("hi".into()).await.unwrap();
        let chunks: Vec<_> = futures_util::StreamExt::collect::<Vec<_>>(conn.responses()).await;
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].as_deref().unwrap(), "HI");
        conn.close();
        conn.output().await
    };
    let ((), output) = tokio::join!(task, talk);
    assert_eq!(output.unwrap(), 1);
    assert_no_tasks_left().await;
    }
}

/// Once cancelled, an action that ignores it is dropped after its grace period, even when its
/// task was first polled in one task and then spawned: the cancel wakes the task it runs in now.
#[tokio::test(start_paused = true)]
async fn a_driven_action_spawned_later_still_gets_its_grace() {
    let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Notify::new()));
    let action = stubborn(dropped.clone(), started.clone());
    let driver = Driver::new();
    let conn = action.connect_with((), ConnectOptions::new().driver(&driver));
    let mut task = driver.take().expect("the action's task");
    // Polled here first (this task's waker), then handed to a task of its own.
    tokio::select! {
        () = &mut task => panic!("the action ignores its input"),
        () = started.notified() => {}
    }
    tokio::spawn(task);
    // The spawned task is polled (and waits) before the cancel.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    let before = tokio::time::Instant::now();
    conn.cancel_with("enough");
    tokio::time::timeout(Duration::from_secs(60), conn.done())
        .await
        .expect("the grace ran in the spawned task");
    assert_eq!(before.elapsed(), DEFAULT_GRACE);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the action's future was dropped"
    );
}
