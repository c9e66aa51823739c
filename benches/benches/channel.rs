//! The message router against reading the agent's connection directly, in the same run: one
//! `LlmAgent` whose model streams a 10,000-delta answer; and how many edits the Telegram channel
//! sends for a long streamed reply.
//!
//! ```sh
//! cargo bench -p benches --bench channel
//! ```
//!
//! Each iteration is one message on a new session: `direct` connects to the agent, sends the
//! message and reads the execution's events to its end; `router` hands the message to a
//! `MessageRouter` (a new user each time), which forwards every text delta to a streaming
//! channel that only counts them. The unit is the answer's deltas.
//!
//! `edits` streams a reply of 1,500 tokens at 50 a second (30 s, on tokio's paused clock) to
//! the Telegram channel (500 ms edit interval, 20 new characters at least) against the fake Bot
//! API server, once without a rate limit and once with Telegram's one edit per second per chat,
//! and prints how many edits were sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use benches::{Words, on_worker, runtime};
use bidi_agent::{Agent, AgentInit, AgentResult, Responder};
use bidi_channel::telegram::Telegram;
use bidi_channel::testing::FakeBotApi;
use bidi_channel::{Channel, MessageRouter, StreamingChannel};
use bidi_core::{ActionContext, BoxError, Inbound};
use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage, execute};
use bidi_session::Session;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt as _;

const DELTAS: u64 = 10_000;

/// A streaming channel that counts the chunks it gets and shows nothing.
#[derive(Default)]
struct Counter(AtomicU64);

#[bidi_channel::async_trait]
impl Channel for Counter {
    fn id(&self) -> &str {
        "counter"
    }
    async fn send_to_user(&self, _: &str, _: &str) -> Result<(), BoxError> {
        Ok(())
    }
    fn streaming(&self) -> Option<&dyn StreamingChannel> {
        Some(self)
    }
}

#[bidi_channel::async_trait]
impl StreamingChannel for Counter {
    async fn start(&self, _: &str) -> Result<(), BoxError> {
        Ok(())
    }
    async fn chunk(&self, _: &str, _: &str) -> Result<(), BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    async fn status(&self, _: &str, _: &str) -> Result<(), BoxError> {
        Ok(())
    }
    async fn end(&self, _: &str, _: &str) -> Result<(), BoxError> {
        Ok(())
    }
}

fn agent() -> LlmAgent {
    LlmAgent::builder("words", Words(DELTAS)).build()
}

fn router() -> MessageRouter {
    MessageRouter::builder(agent())
        .max_users(usize::MAX)
        .idle_timeout(Duration::from_millis(100))
        .build()
}

/// One message read straight from a new connection; how many text deltas it had.
async fn direct(agent: &LlmAgent) -> u64 {
    let mut conn = agent.connect(AgentInit::new());
    let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .expect("an execution");
    let mut deltas = 0;
    while let Some(event) = run.next().await {
        if let AgentEvent::TextDelta { .. } = event.expect("an event") {
            deltas += 1;
        }
    }
    drop(run);
    conn.close();
    let _ = conn.output().await;
    deltas
}

/// One message through the router, from a new user; checks every delta reached the channel.
async fn routed(router: &MessageRouter, channel: &Arc<Counter>, user: u64) {
    let before = channel.0.load(Ordering::Relaxed);
    router
        .handle(channel.clone(), &user.to_string(), "go")
        .await
        .expect("a reply");
    assert_eq!(channel.0.load(Ordering::Relaxed) - before, DELTAS);
}

fn throughput(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("channel");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(DELTAS));
    group.bench_function("direct", |b| {
        b.iter_custom(|iters| {
            on_worker(&rt, async move {
                let agent = agent();
                let start = Instant::now();
                for _ in 0..iters {
                    assert_eq!(direct(&agent).await, DELTAS);
                }
                start.elapsed()
            })
        });
    });
    let mut users = 0;
    group.bench_function("router", |b| {
        b.iter_custom(|iters| {
            let first = users;
            users += iters;
            on_worker(&rt, async move {
                let (router, channel) = (router(), Arc::new(Counter::default()));
                let start = Instant::now();
                for user in first..first + iters {
                    routed(&router, &channel, user).await;
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

/// Direct reads and routed messages in turn, and the time each took in all: steadier ratios on
/// a VM whose speed drifts than criterion's functions measured one after the other.
fn interleaved(_c: &mut Criterion) {
    const ROUNDS: u64 = 300;
    let rt = runtime();
    let totals = on_worker(&rt, async move {
        let (agent, router, channel) = (agent(), router(), Arc::new(Counter::default()));
        let mut totals = [Duration::ZERO; 2];
        for round in 0..ROUNDS {
            for step in 0..2 {
                let i = (step + round as usize) % 2;
                let start = Instant::now();
                if i == 0 {
                    assert_eq!(direct(&agent).await, DELTAS);
                } else {
                    routed(&router, &channel, round).await;
                }
                totals[i] += start.elapsed();
            }
        }
        totals
    });
    let rate = |total: Duration| (ROUNDS * DELTAS) as f64 / total.as_secs_f64() / 1e6;
    let [direct, router] = totals.map(rate);
    println!(
        "channel/interleaved ({ROUNDS} rounds): direct {direct:.2} M/s, router {router:.2} M/s ({:.2})",
        router / direct,
    );
}

/// Streams `n` tokens of two characters (the message), one every 20 ms: 50 tokens a second,
/// 3,000 characters in 30 s (one Telegram message).
fn ticker() -> Agent<(), String, (), String> {
    Agent::builder("ticker").build(
        |_: ActionContext, _: Session<()>, mut inbound: Inbound<String>, out: Responder<String>| async move {
            while let Some(message) = inbound.recv().await {
                let n: usize = message.parse().unwrap_or(0);
                for _ in 0..n {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    out.send("x ".to_owned()).await?;
                }
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(AgentResult::new(()))
        },
    )
}

/// Edits the Telegram channel sends for one 30-second reply: `(edits tried, edits shown)`.
async fn edits(limit: Duration) -> (usize, usize) {
    let api = FakeBotApi::with_edit_interval(limit)
        .await
        .expect("a fake Bot API");
    let telegram = Telegram::builder(api.url())
        .client(reqwest::Client::new())
        .build()
        .expect("a channel");
    let router = MessageRouter::new(ticker());
    let reply = router
        .handle(Arc::new(telegram), "42", "1500")
        .await
        .expect("a reply");
    assert_eq!(api.messages(42), [reply.text]);
    let calls = api.calls();
    let tried = calls
        .iter()
        .filter(|c| c.method == "editMessageText")
        .count();
    let shown = calls
        .iter()
        .filter(|c| c.method == "editMessageText" && c.error_code.is_none())
        .count();
    (tried, shown)
}

fn edit_rate(_c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    for (name, limit) in [
        ("no rate limit", Duration::ZERO),
        ("1 edit/s per chat", Duration::from_secs(1)),
    ] {
        let (tried, shown) = rt.block_on(edits(limit));
        println!(
            "channel/edits ({name}): 1,500 tokens at 50/s (30 s), 500 ms interval: {tried} edits sent, {shown} shown ({:.2} per interval)",
            tried as f64 / 60.0,
        );
    }
}

criterion_group!(benches, throughput, interleaved, edit_rate);
criterion_main!(benches);
