//! The transport seam: JSON connections split into owned halves used from two tasks,
//! backpressure end to end, `done()`, `cancel_with`, and what dropping halves does.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bidi_core::{ActionContext, BoxError, CauseKind, Error, Inbound, Outbound, SendError};
use bidi_flow::{BidiFlow, JsonError, JsonRecvHalf, JsonSendHalf, Registry};
use futures_util::{FutureExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

/// For each input `n`, streams `0..n` and ends the turn; returns the sum of the inputs.
fn counter() -> BidiFlow<(), u32, u32, u32> {
    BidiFlow::new(
        "counter",
        |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
            let mut total = 0;
            while let Some(n) = inbound.recv().await {
                for i in 0..n {
                    out.send(i).await?;
                }
                out.end_turn().await?;
                total += n;
            }
            Ok::<_, BoxError>(total)
        },
    )
}

/// Reads turns until the connection ends; returns every chunk.
async fn read_all(recv: &mut JsonRecvHalf) -> Vec<Value> {
    let mut chunks = Vec::new();
    loop {
        let turn: Vec<_> = recv.responses().collect().await;
        if turn.is_empty() && recv.is_finished() {
            return chunks;
        }
        chunks.extend(turn.into_iter().map(Result::unwrap));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halves_work_from_two_tasks_and_the_input_closes_with_the_last_clone() {
    let (input, mut output) = split(counter());
    assert_eq!(input.id(), output.id());

    let reader = tokio::spawn(async move {
        let chunks = read_all(&mut output).await;
        (chunks, output.output().await)
    });
    let second = input.clone();
    let first_writer = tokio::spawn(async move {
        input.send(json!(2)).await.unwrap();
        // Dropped here: the clone still holds the input open.
    });
    first_writer.await.unwrap();
    let second_writer = tokio::spawn(async move {
        second.send(json!(3)).await.unwrap();
        // A refused input goes back to the caller and the connection goes on.
        assert!(matches!(
            second.send(json!("four")).await,
            Err(JsonError::InvalidInput { .. })
        ));
        second.send(json!(1)).await.unwrap();
    });
    second_writer.await.unwrap();

    // Every input half is gone: the input closed, the action returned.
    let (chunks, output) = reader.await.unwrap();
    assert_eq!(
        chunks,
        [json!(0), json!(1), json!(0), json!(1), json!(2), json!(0)]
    );
    assert_eq!(output.unwrap(), json!(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_slows_the_action() {
    let attempted = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let flow = {
        let (attempted, sent) = (Arc::clone(&attempted), Arc::clone(&sent));
        BidiFlow::new(
            "firehose",
            move |_: ActionContext, (), _: Inbound<()>, out: Outbound<u64>| {
                let (attempted, sent) = (Arc::clone(&attempted), Arc::clone(&sent));
                async move {
                    for i in 0..1000 {
                        attempted.fetch_add(1, Ordering::SeqCst);
                        out.send(i).await?;
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok::<_, BoxError>(())
                }
            },
        )
    };
    let (_input, mut output) = split(flow);

    let reader = tokio::spawn(async move {
        let mut turn = output.responses();
        for read in 1..=3 {
            assert_eq!(turn.next().await.unwrap().unwrap(), json!(read - 1));
            assert!(sent.load(Ordering::SeqCst) <= read);
        }
        drop(turn);
        // The reader stops. The action offers its next chunk, and it is not taken.
        while attempted.load(Ordering::SeqCst) < 4 {
            tokio::task::yield_now().await;
        }
        for _ in 0..1000 {
            tokio::task::yield_now().await;
        }
        assert_eq!(sent.load(Ordering::SeqCst), 3, "nothing is buffered");
        // Reading on takes the chunk that was waiting, in order.
        assert_eq!(output.responses().next().await.unwrap().unwrap(), json!(3));
        output.cancel();
    });
    reader.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_waits_for_the_action_to_take_it() {
    let gate = Arc::new(Notify::new());
    let flow = {
        let gate = Arc::clone(&gate);
        BidiFlow::new(
            "gated",
            move |_: ActionContext, (), mut inbound: Inbound<u32>, _: Outbound<()>| {
                let gate = Arc::clone(&gate);
                async move {
                    let mut taken = Vec::new();
                    while let Some(n) = inbound.recv().await {
                        taken.push(n);
                        gate.notified().await;
                    }
                    Ok::<_, BoxError>(taken)
                }
            },
        )
    };
    let (input, output) = split(flow);
    let writer = tokio::spawn(async move {
        input.send(json!(1)).await.unwrap();
        // The action holds the first input and does not read: the second waits.
        let mut second = std::pin::pin!(input.send(json!(2)));
        for _ in 0..1000 {
            assert!(
                (&mut second).now_or_never().is_none(),
                "sent while the action was busy"
            );
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        second.await.unwrap();
        gate.notify_one();
    });
    writer.await.unwrap();
    assert_eq!(output.output().await.unwrap(), json!([1, 2]));
}

/// Waits for its cancellation and reports where it came from; notes when its input closes.
fn waiter(
    causes: mpsc::UnboundedSender<(CauseKind, String)>,
    closed: Arc<AtomicBool>,
) -> BidiFlow<(), (), (), ()> {
    BidiFlow::new(
        "waiter",
        move |ctx: ActionContext, (), mut inbound: Inbound<()>, _: Outbound<()>| {
            let (causes, closed) = (causes.clone(), Arc::clone(&closed));
            async move {
                while inbound.recv().await.is_some() {}
                if !ctx.is_cancelled() {
                    closed.store(true, Ordering::SeqCst);
                }
                let cause = ctx.cancelled().await;
                causes.send((cause.kind(), cause.to_string())).unwrap();
                Ok::<_, BoxError>(())
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_every_half_cancels_with_dropped() {
    let (causes, mut cause) = mpsc::unbounded_channel();
    let closed = Arc::new(AtomicBool::new(false));
    let registry = Registry::new();
    registry
        .register(waiter(causes, Arc::clone(&closed)))
        .unwrap();

    // The input halves first: the input closes, nothing is cancelled yet.
    let (input, output) = registry
        .connect_json("/bidi-flow/waiter", json!(null))
        .unwrap()
        .into_split();
    let clone = input.clone();
    tokio::spawn(async move { drop(input) }).await.unwrap();
    tokio::spawn(async move { drop(clone) }).await.unwrap();
    while !closed.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    assert!(!output.is_finished(), "closing the input cancels nothing");
    tokio::spawn(async move { drop(output) }).await.unwrap();
    let (kind, _) = cause.recv().await.unwrap();
    assert_eq!(kind, CauseKind::Dropped);

    // The output half first, then the input half.
    let (input, output) = registry
        .connect_json("/bidi-flow/waiter", json!(null))
        .unwrap()
        .into_split();
    tokio::spawn(async move { drop(output) }).await.unwrap();
    tokio::spawn(async move { drop(input) }).await.unwrap();
    let (kind, _) = cause.recv().await.unwrap();
    assert_eq!(kind, CauseKind::Dropped);

    // A whole JSON connection.
    drop(
        registry
            .connect_json("/bidi-flow/waiter", json!(null))
            .unwrap(),
    );
    let (kind, _) = cause.recv().await.unwrap();
    assert_eq!(kind, CauseKind::Dropped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_with_reaches_the_action_and_done_waits_for_its_way_out() {
    let (causes, mut cause) = mpsc::unbounded_channel();
    let cleaned_up = Arc::new(AtomicBool::new(false));
    let flow = {
        let cleaned_up = Arc::clone(&cleaned_up);
        BidiFlow::new(
            "tidy",
            move |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
                let (causes, cleaned_up) = (causes.clone(), Arc::clone(&cleaned_up));
                async move {
                    let cause = ctx.cancelled().await;
                    causes.send((cause.kind(), cause.to_string())).unwrap();
                    // Some work on the way out, within the grace period.
                    for _ in 0..100 {
                        tokio::task::yield_now().await;
                    }
                    cleaned_up.store(true, Ordering::SeqCst);
                    Ok::<_, BoxError>(())
                }
            },
        )
    };
    let registry = Registry::new();
    registry.register(flow).unwrap();

    for how in ["connection", "input half", "output half"] {
        cleaned_up.store(false, Ordering::SeqCst);
        let conn = registry
            .connect_json("/bidi-flow/tidy", json!(null))
            .unwrap();
        let output = match how {
            "connection" => {
                conn.cancel_with("the peer went away");
                conn.done().await;
                conn.output().await
            }
            "input half" => {
                let (input, output) = conn.into_split();
                let waiter = tokio::spawn(async move { input.done().await });
                output.cancel_with("the peer went away");
                waiter.await.unwrap();
                output.output().await
            }
            _ => {
                let (input, output) = conn.into_split();
                input.cancel_with("the peer went away");
                // Waiting consumes nothing: the output is still there after.
                output.done().await;
                assert!(output.is_finished());
                output.output().await
            }
        };
        assert!(
            cleaned_up.load(Ordering::SeqCst),
            "{how}: done() returned early"
        );
        assert_eq!(
            cause.recv().await.unwrap(),
            (CauseKind::Requested, "the peer went away".to_owned()),
            "{how}"
        );
        match output {
            Err(JsonError::Connection(Error::Cancelled(cause))) => {
                assert_eq!(cause.to_string(), "the peer went away");
            }
            other => panic!("{how}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_resolves_when_the_action_completes() {
    let (input, mut output) = split(counter());
    let watcher = {
        let input = input.clone();
        tokio::spawn(async move { input.done().await })
    };
    input.send(json!(1)).await.unwrap();
    assert_eq!(read_all_turn(&mut output).await, [json!(0)]);
    // The watcher's clone is an input half too: close rather than wait for every drop.
    input.close();
    watcher.await.unwrap();
    assert!(output.is_finished());
    assert_eq!(output.output().await.unwrap(), json!(1));
}

async fn read_all_turn(recv: &mut JsonRecvHalf) -> Vec<Value> {
    recv.responses().map(Result::unwrap).collect().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_does_not_serialize_ends_the_split_connection() {
    let (causes, mut cause) = mpsc::unbounded_channel();
    // Its chunks are maps with non-string keys: JSON cannot hold them.
    let flow = BidiFlow::new(
        "unserializable",
        move |ctx: ActionContext,
              (),
              mut inbound: Inbound<u32>,
              out: Outbound<HashMap<(u32, u32), u32>>| {
            let causes = causes.clone();
            async move {
                while let Some(n) = inbound.recv().await {
                    if out.send(HashMap::from([((n, n), n)])).await.is_err() {
                        break;
                    }
                }
                let cause = ctx.cancelled().await;
                let serialize = matches!(
                    cause.downcast_ref::<JsonError>(),
                    Some(JsonError::Serialize { what: "chunk", .. })
                );
                causes.send(serialize).unwrap();
                Ok::<_, BoxError>(())
            }
        },
    );
    let (input, mut output) = split(flow);
    let reader = tokio::spawn(async move {
        let items: Vec<_> = output.responses().collect().await;
        assert!(
            matches!(
                &items[..],
                [Err(JsonError::Serialize { what: "chunk", .. })]
            ),
            "{items:?}"
        );
        assert!(output.responses().next().await.is_none());
        output.output().await
    });
    input.send(json!(1)).await.unwrap();
    assert!(
        cause.recv().await.unwrap(),
        "the action sees the serialize error"
    );
    assert!(matches!(
        input.send(json!(2)).await,
        Err(JsonError::Send(SendError::Cancelled(_)))
    ));
    assert!(matches!(
        reader.await.unwrap(),
        Err(JsonError::Serialize { what: "chunk", .. })
    ));
}

/// Registers `flow` and opens a split JSON connection to it (its init is `null`).
fn split<In, Out, S>(flow: BidiFlow<(), In, Out, S>) -> (JsonSendHalf, JsonRecvHalf)
where
    In: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
    Out: serde::Serialize + schemars::JsonSchema + Send + 'static,
    S: serde::Serialize + schemars::JsonSchema + Send + 'static,
{
    let key = format!("/bidi-flow/{}", flow.name());
    let registry = Registry::new();
    registry.register(flow).unwrap();
    registry
        .connect_json(&key, json!(null))
        .unwrap()
        .into_split()
}
