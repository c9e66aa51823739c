//! Events per second through the agent loop against consuming the model's own event stream
//! directly, same run: one execution answering with a 1,000-word streamed text.
//!
//! ```sh
//! cargo bench -p benches --bench llm
//! # a longer answer, one worker:
//! BIDI_BENCH_WORDS=10000 W=1 cargo bench -p benches --bench llm
//! ```

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use benches::{execute_once, on_worker, runtime};
use bidi_core::{ActionContext, BidiAction, BoxError, ConnectOptions, Inbound, Outbound};
use bidi_llm::testing::Scripted;
use bidi_llm::{AgentEvent, Assembler, LlmAgent, Model, ModelEvent, ModelRequest};
use bidi_session::MemoryStore;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};

/// As many events as the agent loop hands over at once.
const BATCH: usize = 64;

/// Words in the answer: 1,000, or `BIDI_BENCH_WORDS`.
static WORDS: LazyLock<usize> = LazyLock::new(|| {
    std::env::var("BIDI_BENCH_WORDS")
        .ok()
        .and_then(|words| words.parse().ok())
        .unwrap_or(1_000)
});

/// Answers every request with the same scripted text.
#[derive(Clone)]
struct Repeat(Vec<ModelEvent>);

impl Model for Repeat {
    fn name(&self) -> &str {
        "repeat"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        stream::iter(self.0.clone()).boxed()
    }
}

fn model() -> Repeat {
    let text = vec!["word"; *WORDS].join(" ");
    Repeat(Scripted::new().text(&text).events())
}

fn llm(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("llm_events");
    group.throughput(Throughput::Elements(*WORDS as u64));
    group.sample_size(30);

    let raw = model();
    let direct = raw.clone();
    group.bench_function("model_stream", |b| {
        b.iter_custom(|iters| {
            let raw = direct.clone();
            on_worker(&rt, async move {
                let start = Instant::now();
                for _ in 0..iters {
                    let mut events = raw.stream(ModelRequest::new(Vec::new(), Vec::new()));
                    let mut n = 0;
                    while let Some(event) = events.next().await {
                        if matches!(event, ModelEvent::TextDelta(_)) {
                            n += 1;
                        }
                    }
                    assert_eq!(n, *WORDS);
                }
                start.elapsed()
            })
        });
    });

    // The loop's own work on each event, in the consumer's task: the `Assembler` turning model
    // events into agent events, batched as the loop batches them, then read. No hand-off, no
    // session: the floor under any loop that streams `AgentEvent`s.
    let assemble = direct.clone();
    group.bench_function("assembler_in_task", |b| {
        b.iter_custom(|iters| {
            let raw = assemble.clone();
            on_worker(&rt, async move {
                let start = Instant::now();
                for _ in 0..iters {
                    let mut events = raw.stream(ModelRequest::new(Vec::new(), Vec::new()));
                    let mut assembler = Assembler::new();
                    let mut batch = Vec::with_capacity(BATCH);
                    let mut n = 0;
                    let mut read = |batch: Vec<AgentEvent>| {
                        n += batch
                            .into_iter()
                            .filter(|event| matches!(event, AgentEvent::TextDelta { .. }))
                            .count();
                    };
                    while let Some(event) = events.next().await {
                        assembler.apply(event, &mut batch);
                        if batch.len() >= BATCH {
                            read(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
                        }
                    }
                    read(batch);
                    assert_eq!(n, *WORDS);
                }
                start.elapsed()
            })
        });
    });

    // The same model events through a bare connection: what crossing to the consumer's task
    // costs by itself.
    let relay = BidiAction::new(
        "relay",
        move |_: ActionContext, (), mut inbound: Inbound<()>, out: Outbound<ModelEvent>| {
            let raw = raw.clone();
            async move {
                while inbound.recv().await.is_some() {
                    let mut events = raw.stream(ModelRequest::new(Vec::new(), Vec::new()));
                    while let Some(event) = events.next().await {
                        out.send(event).await?;
                    }
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>(())
            }
        },
    );
    group.bench_function("model_stream_through_connection", |b| {
        b.iter_custom(|iters| {
            let relay = relay.clone();
            on_worker(&rt, async move {
                let mut conn = relay.connect(());
                let start = Instant::now();
                for _ in 0..iters {
                    conn.send(()).await.expect("send");
                    let mut responses = conn.responses();
                    let mut n = 0;
                    while let Some(event) = responses.next().await {
                        if matches!(event.expect("event"), ModelEvent::TextDelta(_)) {
                            n += 1;
                        }
                    }
                    assert_eq!(n, *WORDS);
                }
                start.elapsed()
            })
        });
    });

    // Each execution opens a connection on a new session, reads every event, ends the
    // connection and deletes the session (a store that only grew would measure the allocator).
    let agent = LlmAgent::builder("bench", model())
        .store(MemoryStore::new())
        .build();
    let store = Arc::clone(agent.agent().store());
    // The same, with the agent run in the consumer's task (`ConnectOptions::in_place`), and
    // with a buffer of 64 batches between the two tasks.
    let options: [(&str, fn() -> ConnectOptions); 3] = [
        ("agent_loop", ConnectOptions::new),
        ("agent_loop_in_place", || ConnectOptions::new().in_place()),
        ("agent_loop_buffered_64", || {
            ConnectOptions::new().output_buffer(64)
        }),
    ];
    for (name, options) in options {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let (agent, store) = (agent.clone(), store.clone());
                on_worker(&rt, async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let (deltas, session_id) = execute_once(&agent, options()).await;
                        assert_eq!(deltas, *WORDS);
                        store.delete(&session_id).await.expect("delete");
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, llm);
criterion_main!(benches);
