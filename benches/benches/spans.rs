//! The agent loop's deltas per second with its spans: no tracer provider at all (the
//! baseline), a provider that samples nothing (tracing off), one that records every span
//! (on), and one that records what was said too (on with content), interleaved execution by
//! execution. One execution answers with a 1,000-word streamed text; each traced one makes
//! four spans (the connection, its turn, `invoke_agent`, `chat`), batched (as an application
//! installs a provider) to an exporter that drops them.
//!
//! ```sh
//! cargo bench -p benches --bench spans
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::{Words, execute_once, median, on_worker, runtime};
use bidi_core::ConnectOptions;
use bidi_llm::LlmAgent;
use bidi_session::{MemoryStore, SessionStore};
use criterion::{Criterion, criterion_group, criterion_main};
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};

/// Words in each answer.
const WORDS: usize = 1_000;

/// Rounds of one execution a side.
const ROUNDS: usize = 400;

/// An exporter that drops what it is given.
#[derive(Debug)]
struct Sink;

impl SpanExporter for Sink {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// The bench's agent, traced by `provider` (none: the global provider, which is not set).
fn agent(provider: Option<&SdkTracerProvider>, content: bool) -> LlmAgent {
    let builder = LlmAgent::builder("bench", Words(WORDS as u64))
        .store(MemoryStore::new())
        .record_content(content);
    match provider {
        Some(provider) => builder
            .tracer(BoxedTracer::new(Box::new(provider.tracer("bench"))))
            .build(),
        None => builder.build(),
    }
}

/// One execution on a new session, every event read, the session deleted: how long it took.
async fn once(agent: &LlmAgent, store: &Arc<dyn SessionStore>) -> Duration {
    let start = Instant::now();
    let (deltas, session_id) = execute_once(agent, ConnectOptions::new()).await;
    let took = start.elapsed();
    assert_eq!(deltas, WORDS);
    store.delete(&session_id).await.expect("delete");
    took
}

fn interleaved(_c: &mut Criterion) {
    let rt = runtime();
    // As an application installs one: spans batched, exported by a thread of their own.
    let off = SdkTracerProvider::builder()
        .with_sampler(Sampler::AlwaysOff)
        .with_batch_exporter(Sink)
        .build();
    let on = SdkTracerProvider::builder()
        .with_batch_exporter(Sink)
        .build();
    let agents = [
        agent(None, false),
        agent(Some(&off), false),
        agent(Some(&on), false),
        agent(Some(&on), true),
    ];
    let sides = ["no provider", "off", "on", "on with content"];
    let per_round = on_worker(&rt, async move {
        let stores: Vec<_> = agents
            .iter()
            .map(|agent| Arc::clone(agent.agent().store()))
            .collect();
        let mut per_round = vec![[Duration::ZERO; 4]; ROUNDS];
        for (round, took) in per_round.iter_mut().enumerate() {
            for step in 0..4 {
                // Each round starts with another side, so none always goes first.
                let i = (step + round) % 4;
                took[i] = once(&agents[i], &stores[i]).await;
            }
        }
        per_round
    });
    let rate = |took: Duration| WORDS as f64 / took.as_secs_f64() / 1e6;
    let rates: Vec<f64> = (0..4)
        .map(|i| median(per_round.iter().map(|took| rate(took[i])).collect()))
        .collect();
    let ratios: Vec<f64> = (1..4)
        .map(|i| {
            median(
                per_round
                    .iter()
                    .map(|took| took[0].as_secs_f64() / took[i].as_secs_f64())
                    .collect(),
            )
        })
        .collect();
    println!(
        "spans/interleaved ({ROUNDS} rounds of one execution a side): {} {:.2} M/s; {} {:.2} M/s ({:.3}); {} {:.2} M/s ({:.3}); {} {:.2} M/s ({:.3})",
        sides[0],
        rates[0],
        sides[1],
        rates[1],
        ratios[0],
        sides[2],
        rates[2],
        ratios[1],
        sides[3],
        rates[3],
        ratios[2],
    );
}

criterion_group!(benches, interleaved);
criterion_main!(benches);
