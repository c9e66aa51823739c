//! bidi-core against the bare channels underneath it, in the same run.
//!
//! ```sh
//! cargo bench -p benches --bench core
//! ```
//!
//! Every measurement drives the work from a task spawned on a two-worker runtime, as users
//! should: the `block_on` thread is not a worker, and every unbuffered hand-off with it would
//! be a thread park/unpark.

use std::future::poll_fn;
use std::time::Instant;

use benches::{Marker, in_task, on_worker, raw_echo, raw_stream, read_turn, runtime};
use bidi_core::__bench::Reason;
use bidi_core::{ActionContext, BidiAction, BoxError, ConnectOptions, Inbound, Outbound};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;

const CHUNKS: u64 = 100_000;

fn streamer() -> BidiAction<(), u64, (), u64> {
    BidiAction::new(
        "stream",
        |_: ActionContext, (), mut inbound: Inbound<u64>, out: Outbound<u64>| async move {
            while let Some(n) = inbound.recv().await {
                for i in 0..n {
                    out.send(i).await?;
                }
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(())
        },
    )
}

fn echo() -> BidiAction<(), u64, (), u64> {
    BidiAction::new(
        "echo",
        |_: ActionContext, (), mut inbound: Inbound<u64>, out: Outbound<u64>| async move {
            while let Some(n) = inbound.recv().await {
                out.send(n).await?;
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(())
        },
    )
}

/// One turn of 100,000 chunks, unbuffered (the default) and with a 64-chunk output buffer.
fn chunks(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("chunks");
    group.throughput(Throughput::Elements(CHUNKS));
    group.sample_size(20);

    for buffer in [0usize, 64] {
        group.bench_with_input(
            BenchmarkId::new("connection", buffer),
            &buffer,
            |b, &buffer| {
                let action = streamer();
                b.iter_custom(|iters| {
                    let action = action.clone();
                    in_task(&rt, iters, move || {
                        let action = action.clone();
                        async move {
                            let options = ConnectOptions::new().output_buffer(buffer);
                            let mut conn = action.connect_with((), options);
                            conn.send(CHUNKS).await.expect("send");
                            assert_eq!(read_turn(&mut conn).await, CHUNKS);
                        }
                    })
                });
            },
        );
        group.bench_with_input(
            BenchmarkId::new("raw_chan", buffer),
            &buffer,
            |b, &buffer| {
                b.iter_custom(|iters| {
                    in_task(&rt, iters, move || async move {
                        let (chan, producer) = raw_stream(CHUNKS, buffer);
                        let mut n = 0;
                        while let Some(Marker::Item(_)) = poll_fn(|cx| chan.poll_recv(cx)).await {
                            n += 1;
                        }
                        assert_eq!(n, CHUNKS);
                        producer.await.expect("producer");
                    })
                });
            },
        );
    }

    group.bench_function("flume_rendezvous", |b| {
        b.iter_custom(|iters| {
            in_task(&rt, iters, || async {
                let (tx, rx) = flume::bounded::<u64>(0);
                let producer = tokio::spawn(async move {
                    for i in 0..CHUNKS {
                        tx.send_async(i).await.expect("send");
                    }
                });
                let mut n = 0;
                while rx.recv_async().await.is_ok() {
                    n += 1;
                }
                assert_eq!(n, CHUNKS);
                producer.await.expect("producer");
            })
        });
    });

    group.bench_function("tokio_mpsc_1", |b| {
        b.iter_custom(|iters| {
            in_task(&rt, iters, || async {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1);
                let producer = tokio::spawn(async move {
                    for i in 0..CHUNKS {
                        tx.send(i).await.expect("send");
                    }
                });
                let mut n = 0;
                while rx.recv().await.is_some() {
                    n += 1;
                }
                assert_eq!(n, CHUNKS);
                producer.await.expect("producer");
            })
        });
    });
    group.finish();
}

/// A turn round trip: send one input, read one chunk, reach the end of the turn.
fn turns(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("turns");
    group.throughput(Throughput::Elements(1));

    group.bench_function("connection", |b| {
        let action = echo();
        b.iter_custom(|iters| {
            let action = action.clone();
            on_worker(&rt, async move {
                let mut conn = action.connect(());
                let start = Instant::now();
                for i in 0..iters {
                    conn.send(i).await.expect("send");
                    let mut responses = conn.responses();
                    assert_eq!(responses.next().await.expect("chunk").expect("ok"), i);
                    assert!(responses.next().await.is_none());
                }
                let elapsed = start.elapsed();
                conn.close();
                conn.output().await.expect("output");
                elapsed
            })
        });
    });

    group.bench_function("raw_chan", |b| {
        b.iter_custom(|iters| {
            on_worker(&rt, async move {
                let (input, output, task) = raw_echo(0);
                let start = Instant::now();
                for i in 0..iters {
                    input.send(i).await.expect("send");
                    let got = poll_fn(|cx| output.poll_recv(cx)).await;
                    assert!(matches!(got, Some(Marker::Item(n)) if n == i));
                    let end = poll_fn(|cx| output.poll_recv(cx)).await;
                    assert!(matches!(end, Some(Marker::End)));
                }
                let elapsed = start.elapsed();
                input.close(Reason::Closed);
                task.await.expect("echo task");
                elapsed
            })
        });
    });
    group.finish();
}

/// Connection set-up and tear-down: connect, send one input, close, drain, output.
fn connections(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("connections");
    group.throughput(Throughput::Elements(1));

    group.bench_function("connection", |b| {
        let action = echo();
        b.iter_custom(|iters| {
            let action = action.clone();
            in_task(&rt, iters, move || {
                let action = action.clone();
                async move {
                    let mut conn = action.connect(());
                    conn.send(1).await.expect("send");
                    conn.close();
                    assert_eq!(
                        conn.responses().next().await.expect("chunk").expect("ok"),
                        1
                    );
                    conn.output().await.expect("output");
                }
            })
        });
    });

    group.bench_function("raw_chan", |b| {
        b.iter_custom(|iters| {
            in_task(&rt, iters, || async {
                let (input, output, task) = raw_echo(0);
                input.send(1).await.expect("send");
                input.close(Reason::Closed);
                let got = poll_fn(|cx| output.poll_recv(cx)).await;
                assert!(matches!(got, Some(Marker::Item(1))));
                while poll_fn(|cx| output.poll_recv(cx)).await.is_some() {}
                task.await.expect("echo task");
            })
        });
    });
    group.finish();
}

criterion_group!(benches, chunks, turns, connections);
criterion_main!(benches);
