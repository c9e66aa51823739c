//! C3: unbuffered means a real rendezvous, both ways. On a paused clock, so the waits are exact.

use std::time::Duration;

use bidi_core::{ActionContext, BidiAction, BoxError, Inbound, Outbound};
use futures_util::StreamExt;
use tokio::time::{Instant, sleep, timeout};

/// A caller's `send` is pending until the action receives; a send dropped after a timeout is
/// never delivered.
#[tokio::test(start_paused = true)]
async fn input_send_waits_for_the_action() {
    let action = BidiAction::new(
        "sleepy",
        |_: ActionContext, (), mut inbound: Inbound<u32>, _: Outbound<()>| async move {
            sleep(Duration::from_secs(10)).await;
            let first = inbound.recv().await;
            Ok::<_, BoxError>((first, Instant::now()))
        },
    );
    let start = Instant::now();
    let conn = action.connect(());
    assert!(
        timeout(Duration::from_secs(5), conn.send(1)).await.is_err(),
        "nobody receives for 10 s, so the send cannot complete within 5 s"
    );
    conn.send(2).await.unwrap();
    let completed = Instant::now();
    assert!(completed - start >= Duration::from_secs(10));
    let (first, received) = conn.output().await.unwrap();
    assert_eq!(first, Some(2), "the timed-out send delivered nothing");
    assert_eq!(received, completed);
}

/// An `Outbound::send` is pending until the consumer takes the chunk; a chunk send dropped
/// after a timeout is never delivered.
#[tokio::test(start_paused = true)]
async fn chunk_send_waits_for_the_consumer() {
    let action = BidiAction::new(
        "eager",
        |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
            let start = Instant::now();
            let timed_out = timeout(Duration::from_secs(5), out.send(1)).await.is_err();
            out.send(2).await?;
            Ok::<_, BoxError>((timed_out, Instant::now() - start))
        },
    );
    let mut conn = action.connect(());
    sleep(Duration::from_secs(10)).await;
    let mut responses = conn.responses();
    assert_eq!(responses.next().await.unwrap().unwrap(), 2);
    assert!(responses.next().await.is_none());
    drop(responses);
    let (timed_out, waited) = conn.output().await.unwrap();
    assert!(timed_out, "nobody read for 10 s");
    assert!(waited >= Duration::from_secs(10));
}

/// `end_turn` is a rendezvous too: it completes when the consumer reaches the end of the turn.
#[tokio::test(start_paused = true)]
async fn end_turn_waits_for_the_consumer() {
    let action = BidiAction::new(
        "turns",
        |_: ActionContext, (), _: Inbound<()>, out: Outbound<()>| async move {
            let start = Instant::now();
            out.end_turn().await?;
            Ok::<_, BoxError>(Instant::now() - start)
        },
    );
    let mut conn = action.connect(());
    sleep(Duration::from_secs(3)).await;
    assert!(conn.responses().next().await.is_none());
    assert!(conn.output().await.unwrap() >= Duration::from_secs(3));
}

/// A batch is one hand-off: its send is pending until the consumer takes it (reads its first
/// chunk), then the consumer reads the rest without the action; a batch send dropped after a
/// timeout delivers none of its chunks.
#[tokio::test(start_paused = true)]
async fn batch_send_waits_for_the_consumer_once() {
    let action = BidiAction::new(
        "batches",
        |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
            let start = Instant::now();
            let timed_out = timeout(Duration::from_secs(5), out.send_batch(vec![1, 2]))
                .await
                .is_err();
            out.send_batch(vec![3, 4, 5]).await?;
            Ok::<_, BoxError>((timed_out, Instant::now() - start))
        },
    );
    let mut conn = action.connect(());
    sleep(Duration::from_secs(10)).await;
    let mut responses = conn.responses();
    assert_eq!(responses.next().await.unwrap().unwrap(), 3);
    // The action is not waiting for these.
    sleep(Duration::from_secs(20)).await;
    assert_eq!(responses.next().await.unwrap().unwrap(), 4);
    assert_eq!(responses.next().await.unwrap().unwrap(), 5);
    assert!(responses.next().await.is_none());
    drop(responses);
    let (timed_out, waited) = conn.output().await.unwrap();
    assert!(timed_out, "nobody read for 10 s");
    assert_eq!(waited, Duration::from_secs(10));
}
