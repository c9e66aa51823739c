//! C1, C5, C6, C7, C11, C12, C13, C14: turns, half-close, output, one-shot runs, splitting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bidi_core::{
    ActionContext, BidiAction, BoxError, ConnectOptions, Inbound, Observer, Outbound, SendError,
};
use futures_util::StreamExt;

use crate::support::{assert_no_tasks_left, echo};

async fn turn<In, Out, S>(conn: &mut bidi_core::Connection<In, Out, S>) -> Vec<S>
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    let mut chunks = Vec::new();
    let mut responses = conn.responses();
    while let Some(chunk) = responses.next().await {
        chunks.push(chunk.expect("no error"));
    }
    chunks
}

both_runtimes! {
    /// C6: each `responses()` yields exactly that turn's chunks; an empty turn yields nothing.
    async fn multi_turn_echo() {
        let mut conn = echo().connect(());
        for (input, expected) in [("a", vec!["echo: a"]), ("", vec![]), ("b", vec!["echo: b"])] {
            conn.send(input.to_owned()).await.unwrap();
            assert_eq!(turn(&mut conn).await, expected);
        }
        conn.close();
        assert_eq!(conn.output().await.unwrap(), 3);
    }

    /// C6: a turn of several chunks; the stream is fused after its end.
    async fn turn_with_many_chunks_is_fused() {
        let action = BidiAction::new(
            "count",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
                while let Some(n) = inbound.recv().await {
                    for i in 0..n {
                        out.send(i).await?;
                    }
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>(())
            },
        );
        let mut conn = action.connect(());
        for n in [5, 0, 3] {
            conn.send(n).await.unwrap();
            let mut responses = conn.responses();
            let mut got = Vec::new();
            while let Some(chunk) = responses.next().await {
                got.push(chunk.unwrap());
            }
            assert!(futures_util::stream::FusedStream::is_terminated(&responses));
            assert!(responses.next().await.is_none());
            assert_eq!(got, (0..n).collect::<Vec<_>>());
        }
        conn.close();
        conn.output().await.unwrap();
    }

    /// C6: dropping a `Responses` mid-turn cancels nothing; the next call continues.
    async fn dropped_responses_continue_with_the_next_chunk() {
        let go = Arc::new(tokio::sync::Notify::new());
        let sent = Arc::new(tokio::sync::Notify::new());
        let (action_go, action_sent) = (go.clone(), sent.clone());
        let action = BidiAction::new(
            "three",
            move |_: ActionContext, (), mut inbound: Inbound<()>, out: Outbound<u32>| {
                let (go, sent) = (action_go.clone(), action_sent.clone());
                async move {
                    inbound.recv().await;
                    out.send(1).await?;
                    go.notified().await;
                    out.send(2).await?;
                    sent.notify_one();
                    out.send(3).await?;
                    out.end_turn().await?;
                    Ok::<_, BoxError>(())
                }
            },
        );
        let mut conn = action.connect(());
        conn.send(()).await.unwrap();
        {
            let mut responses = conn.responses();
            assert_eq!(responses.next().await.unwrap().unwrap(), 1);
        }
        {
            // A poll that waits, a chunk handed to it meanwhile, then the stream is dropped:
            // the chunk is not lost.
            let mut responses = conn.responses();
            assert!(futures_util::poll!(responses.next()).is_pending());
            go.notify_one();
            sent.notified().await;
        }
        assert_eq!(turn(&mut conn).await, [2, 3]);
        conn.output().await.unwrap();
    }

    /// `send_batch`: the consumer sees every chunk of a batch, in order with single sends, turn
    /// by turn; an empty batch sends nothing.
    async fn batches_read_like_single_sends() {
        let action = BidiAction::new(
            "batches",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
                while let Some(n) = inbound.recv().await {
                    out.send(n).await?;
                    out.send_batch((n + 1..n + 4).collect()).await?;
                    out.send_batch(Vec::new()).await?;
                    out.send_batch(vec![n + 4]).await?;
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>(())
            },
        );
        let mut conn = action.connect(());
        for n in [0, 10, 20] {
            conn.send(n).await.unwrap();
            assert_eq!(turn(&mut conn).await, (n..n + 5).collect::<Vec<_>>());
        }
        conn.close();
        conn.output().await.unwrap();
    }

    /// `send_batch`: a `Responses` dropped in the middle of a batch loses nothing; `output()`
    /// discards a half-read batch.
    async fn half_read_batch_survives_a_dropped_responses() {
        let action = BidiAction::new(
            "batch",
            |_: ActionContext, (), mut inbound: Inbound<()>, out: Outbound<u32>| async move {
                while inbound.recv().await.is_some() {
                    out.send_batch(vec![1, 2, 3, 4]).await?;
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>("done")
            },
        );
        let mut conn = action.connect(());
        conn.send(()).await.unwrap();
        {
            let mut responses = conn.responses();
            assert_eq!(responses.next().await.unwrap().unwrap(), 1);
        }
        assert_eq!(turn(&mut conn).await, [2, 3, 4]);
        conn.send(()).await.unwrap();
        assert_eq!(conn.responses().next().await.unwrap().unwrap(), 1);
        conn.close();
        assert_eq!(conn.output().await.unwrap(), "done");
    }

    /// C5: `close` is idempotent and only half-closes; chunks sent afterwards are still read.
    async fn close_half_closes() {
        let action = BidiAction::new(
            "sum",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<String>| async move {
                let mut sum = 0;
                while let Some(n) = inbound.recv().await {
                    sum += n;
                }
                out.send(format!("sum {sum}")).await?;
                Ok::<_, BoxError>(sum)
            },
        );
        let mut conn = action.connect(());
        conn.send(1).await.unwrap();
        conn.send(2).await.unwrap();
        conn.close();
        conn.close();
        assert!(matches!(conn.send(3).await, Err(SendError::Closed(3))));
        assert_eq!(turn(&mut conn).await, ["sum 3"]);
        assert_eq!(conn.output().await.unwrap(), 3);
    }

    /// C7: `output()` on a streaming action with unread chunks returns instead of deadlocking.
    async fn output_discards_unread_chunks() {
        let action = BidiAction::new(
            "chatty",
            |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
                for turn in 0..10 {
                    for i in 0..100 {
                        out.send(turn * 100 + i).await?;
                    }
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>("done")
            },
        );
        assert_eq!(action.connect(()).output().await.unwrap(), "done");
    }

    /// C11: returning ends the stream even while clones of `Outbound` live on; their sends fail.
    async fn the_framework_owns_the_end_of_the_stream() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
        let action = BidiAction::new(
            "leaky",
            move |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| {
                let tx = tx.clone();
                async move {
                    out.send(1).await?;
                    let stray = out.clone();
                    let tx = tx.lock().unwrap().take().unwrap();
                    tokio::spawn(async move {
                        // Give the action time to return, then try to keep streaming.
                        tokio::task::yield_now().await;
                        let result = loop {
                            match stray.send(2).await {
                                Err(SendError::Completed(2)) => break true,
                                Err(_) => break false,
                                Ok(()) => {}
                            }
                        };
                        let _ = tx.send(result);
                    });
                    Ok::<_, BoxError>(())
                }
            },
        );
        let mut conn = action.connect(());
        assert_eq!(turn(&mut conn).await, [1]);
        conn.output().await.unwrap();
        assert!(rx.await.unwrap(), "a stray Outbound must fail with Completed");
        assert_no_tasks_left().await;
    }

    /// C12: the one-shot path, including an action that streams before it reads.
    async fn run_one_shot() {
        let action = BidiAction::new(
            "double",
            |_: ActionContext, scale: u32, mut inbound: Inbound<u32>, out: Outbound<String>| async move {
                out.send("started".into()).await?;
                let n = inbound.recv().await.ok_or("no input")?;
                assert!(inbound.recv().await.is_none(), "the input is closed after one value");
                out.send(format!("got {n}")).await?;
                Ok::<_, BoxError>(n * scale)
            },
        );
        assert_eq!(action.run(2, 21).await.unwrap(), 42);
        assert_eq!(action.clone().run(3, 1).await.unwrap(), 3);
    }

    /// C12: dropping a `run` future midway leaks no task.
    async fn dropped_run_leaks_no_task() {
        let started = Arc::new(tokio::sync::Notify::new());
        let notify = started.clone();
        let action = BidiAction::new(
            "forever",
            move |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| {
                let notify = notify.clone();
                async move {
                    notify.notify_one();
                    ctx.cancelled().await;
                    Ok::<_, BoxError>(())
                }
            },
        );
        let run = action.run((), ());
        tokio::select! {
            _ = run => panic!("the action never returns by itself"),
            () = started.notified() => {}
        }
        assert_no_tasks_left().await;
    }

    /// C13: full duplex from two tasks, 10,000 messages, order preserved.
    async fn split_full_duplex() {
        let action = BidiAction::new(
            "relay",
            |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
                let mut n = 0;
                while let Some(x) = inbound.recv().await {
                    out.send(x).await?;
                    n += 1;
                }
                Ok::<_, BoxError>(n)
            },
        );
        let (tx, mut rx) = action.connect(()).into_split();
        let producer = tokio::spawn(async move {
            for i in 0..10_000 {
                tx.send(i).await.unwrap();
            }
        });
        let consumer = tokio::spawn(async move {
            let mut expected = 0;
            let mut responses = rx.responses();
            while let Some(x) = responses.next().await {
                assert_eq!(x.unwrap(), expected);
                expected += 1;
            }
            drop(responses);
            (expected, rx.output().await.unwrap())
        });
        producer.await.unwrap();
        assert_eq!(consumer.await.unwrap(), (10_000, 10_000));
        assert_no_tasks_left().await;
    }

    /// C13: clones of the sending half keep the input open until the last one is dropped.
    async fn sending_half_clones() {
        let action = BidiAction::new(
            "count",
            |_: ActionContext, (), inbound: Inbound<u32>, _: Outbound<()>| async move {
                Ok::<_, BoxError>(inbound.count().await)
            },
        );
        let (tx, rx) = action.connect(()).into_split();
        let tx2 = tx.clone();
        tx.send(1).await.unwrap();
        drop(tx);
        tx2.send(2).await.unwrap();
        drop(tx2);
        assert_eq!(rx.output().await.unwrap(), 2);
    }

    /// C14: the context carries the name, the connection id and the caller's extensions.
    async fn context_carries_name_id_and_extensions() {
        #[derive(Debug, Clone, PartialEq)]
        struct Auth(&'static str);
        let action = BidiAction::new(
            "ctx",
            |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| async move {
                Ok::<_, BoxError>((
                    ctx.name().to_owned(),
                    ctx.connection_id(),
                    ctx.extensions().get::<Auth>().cloned(),
                ))
            },
        );
        let conn = action.connect_with((), ConnectOptions::new().extension(Auth("token")));
        let id = conn.id();
        let (name, seen_id, auth) = conn.output().await.unwrap();
        assert_eq!(name, "ctx");
        assert_eq!(seen_id, id);
        assert_eq!(auth, Some(Auth("token")));
        let other = action.connect(());
        assert_ne!(other.id(), id);
        assert_eq!(other.output().await.unwrap().2, None);
    }

    /// C3: buffered options let sends complete ahead of the other side.
    async fn buffers_are_options() {
        let reached = Arc::new(AtomicBool::new(false));
        let flag = reached.clone();
        let action = BidiAction::new(
            "burst",
            move |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| {
                let flag = flag.clone();
                async move {
                    for i in 0..4 {
                        out.send(i).await?;
                    }
                    flag.store(true, Ordering::SeqCst);
                    out.send(4).await?;
                    Ok::<_, BoxError>(())
                }
            },
        );
        let mut conn = action.connect_with((), ConnectOptions::new().output_buffer(4).input_buffer(2));
        while !reached.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        // Buffered input: two sends complete although the action never reads.
        conn.send(()).await.unwrap();
        conn.send(()).await.unwrap();
        assert_eq!(turn(&mut conn).await, [0, 1, 2, 3, 4]);
        conn.output().await.unwrap();
    }

    /// An observer sees every input taken, chunk delivered and turn ended.
    async fn observer_sees_the_traffic() {
        #[derive(Default)]
        struct Counts([AtomicUsize; 3]);
        impl Observer for Counts {
            fn on_input(&self) {
                self.0[0].fetch_add(1, Ordering::Relaxed);
            }
            fn on_chunks(&self, count: usize) {
                self.0[1].fetch_add(count, Ordering::Relaxed);
            }
            fn on_end_turn(&self) {
                self.0[2].fetch_add(1, Ordering::Relaxed);
            }
        }
        let counts = Arc::new(Counts::default());
        let mut conn = echo().connect_with((), ConnectOptions::new().observer(counts.clone()));
        for input in ["a", "", "b"] {
            conn.send(input.to_owned()).await.unwrap();
            turn(&mut conn).await;
        }
        conn.close();
        conn.output().await.unwrap();
        let seen: Vec<_> = counts.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(seen, [3, 2, 3]);

        // A batch counts all its chunks.
        let batch = BidiAction::new(
            "batch",
            |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
                out.send_batch(vec![1, 2, 3]).await?;
                out.end_turn().await?;
                Ok::<_, BoxError>(())
            },
        );
        let counts = Arc::new(Counts::default());
        let mut conn = batch.connect_with((), ConnectOptions::new().observer(counts.clone()));
        assert_eq!(turn(&mut conn).await, [1, 2, 3]);
        conn.output().await.unwrap();
        let seen: Vec<_> = counts.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!(seen, [0, 3, 1]);
    }
}

both_runtimes! {
    /// A transport tells the end of a turn from the end of the connection.
    async fn responses_say_whether_a_turn_ended() {
        let action = BidiAction::new(
            "one-turn-then-more",
            |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
                out.send(1).await?;
                out.end_turn().await?;
                out.send(2).await?; // returns mid-turn
                Ok::<_, BoxError>(())
            },
        );
        let mut conn = action.connect(());
        let mut turn = conn.responses();
        assert!(!turn.turn_ended());
        assert_eq!(turn.next().await.unwrap().unwrap(), 1);
        assert!(!turn.turn_ended(), "still streaming");
        assert!(turn.next().await.is_none());
        assert!(turn.turn_ended());
        drop(turn);
        let mut turn = conn.responses();
        assert_eq!(turn.next().await.unwrap().unwrap(), 2);
        assert!(turn.next().await.is_none());
        assert!(!turn.turn_ended(), "the connection ended, not the turn");
        drop(turn);
        conn.output().await.unwrap();
    }

    /// A consumer cancels from the stream it reads.
    async fn responses_cancel_with_a_cause() {
        let action = BidiAction::new(
            "streams",
            |_: ActionContext, (), _: Inbound<()>, out: Outbound<u32>| async move {
                for i in 0.. {
                    out.send(i).await?;
                }
                Ok::<_, BoxError>(())
            },
        );
        let mut conn = action.connect(());
        let mut turn = conn.responses();
        assert_eq!(turn.next().await.unwrap().unwrap(), 0);
        turn.cancel_with("cannot encode");
        drop(turn);
        match conn.output().await {
            Err(bidi_core::Error::Cancelled(cause)) => assert_eq!(cause.to_string(), "cannot encode"),
            other => panic!("{other:?}"),
        }
    }
}
