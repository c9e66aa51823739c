//! `BidiFlow` (traced) against the bare `BidiAction` it wraps, in the same run: one turn of 100
//! chunks per iteration on an open connection.
//!
//! ```sh
//! cargo bench -p benches --bench flow
//! ```
//!
//! - `no_provider`: no tracer provider installed (the global no-op), as in an application that
//!   does not export traces.
//! - `sdk_batch`: the OpenTelemetry SDK recording every span, with a batch processor exporting
//!   to a sink that discards.

use std::time::Instant;

use benches::{on_worker, read_turn, runtime};
use bidi_core::{ActionContext, BidiAction, BoxError, Connection, Inbound, Outbound};
use bidi_flow::BidiFlow;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

const CHUNKS: u64 = 100;

/// An exporter that drops every batch.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

async fn streamer(
    _: ActionContext,
    (): (),
    mut inbound: Inbound<u64>,
    out: Outbound<u64>,
) -> Result<(), BoxError> {
    while let Some(n) = inbound.recv().await {
        for i in 0..n {
            out.send(i).await?;
        }
        out.end_turn().await?;
    }
    Ok(())
}

/// Times `iters` turns of 100 chunks on one connection, driven from a runtime worker.
fn turns(
    rt: &tokio::runtime::Runtime,
    iters: u64,
    connect: impl FnOnce() -> Connection<u64, (), u64> + Send + 'static,
) -> std::time::Duration {
    on_worker(rt, async move {
        let mut conn = connect();
        let start = Instant::now();
        for _ in 0..iters {
            conn.send(CHUNKS).await.expect("send");
            assert_eq!(read_turn(&mut conn).await, CHUNKS);
        }
        let elapsed = start.elapsed();
        conn.close();
        conn.output().await.expect("output");
        elapsed
    })
}

fn flow(c: &mut Criterion) {
    let rt = runtime();
    let action = BidiAction::new("stream", streamer);
    let untraced = BidiFlow::from_action(action.clone());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let traced = BidiFlow::from_action(action.clone())
        .with_tracer(BoxedTracer::new(Box::new(provider.tracer("bench"))));

    let mut group = c.benchmark_group("flow_turns");
    group.throughput(Throughput::Elements(CHUNKS));
    group.bench_function("action", |b| {
        b.iter_custom(|iters| {
            let action = action.clone();
            turns(&rt, iters, move || action.connect(()))
        });
    });
    group.bench_function("no_provider", |b| {
        b.iter_custom(|iters| {
            let flow = untraced.clone();
            turns(&rt, iters, move || flow.connect(()))
        });
    });
    group.bench_function("sdk_batch", |b| {
        b.iter_custom(|iters| {
            let flow = traced.clone();
            turns(&rt, iters, move || flow.connect(()))
        });
    });
    group.finish();
    provider.shutdown().expect("shutdown");
}

criterion_group!(benches, flow);
criterion_main!(benches);
