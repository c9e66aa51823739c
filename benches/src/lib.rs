//! Shared pieces of the benchmarks: the runtime and the raw baselines built on the bare channel
//! under `bidi_core` connections.

pub mod http;

use bidi_llm::testing::Scripted;
use bidi_llm::{Model, ModelEvent, ModelRequest};
use futures_util::stream::{self, BoxStream};

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bidi_core::__bench::{Chan, Reason};
use bidi_core::Connection;
use futures_util::StreamExt;
use tokio::task::JoinHandle;

/// The median of `values` (the upper one of an even count): how the interleaved runs read
/// their rounds.
///
/// # Panics
///
/// Panics if `values` is empty.
#[must_use]
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The runtime every benchmark uses: two workers, like the machines the figures come from
/// (`W=<n>` sets another number).
///
/// # Panics
///
/// Panics if the runtime cannot be built.
#[must_use]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::env::var("W")
                .ok()
                .and_then(|w| w.parse().ok())
                .unwrap_or(2),
        )
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Runs `fut` in a task on one of `rt`'s workers (not on the `block_on` thread, where every
/// unbuffered hand-off would be a thread park) and returns its result.
///
/// # Panics
///
/// Panics if the task panics.
pub fn on_worker<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    fut: impl Future<Output = T> + Send + 'static,
) -> T {
    rt.block_on(async move { tokio::spawn(fut).await.expect("benchmark task") })
}

/// The times of `rounds` rounds in each of which every one of `N` sides runs once, in turn
/// (`run(i)` is side `i`'s run); each round starts with the next side, so that none always
/// goes first. On a VM whose speed drifts by ±20% over minutes, ratios of sides interleaved
/// this way are steadier than those of criterion's functions, measured one after another.
pub async fn interleave<const N: usize, Fut: Future<Output = ()>>(
    rounds: usize,
    mut run: impl FnMut(usize) -> Fut,
) -> Vec<[Duration; N]> {
    let mut took = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mut round_took = [Duration::ZERO; N];
        for step in 0..N {
            let i = (step + round) % N;
            let start = Instant::now();
            run(i).await;
            round_took[i] = start.elapsed();
        }
        took.push(round_took);
    }
    took
}

/// Times `iters` runs of `work`, one after another, awaited in a task on one of `rt`'s workers
/// (as [`on_worker`]): the body of a criterion `iter_custom`.
///
/// # Panics
///
/// Panics if the task panics.
pub fn in_task<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, work: F) -> Duration
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    on_worker(rt, async move {
        let start = Instant::now();
        for _ in 0..iters {
            work().await;
        }
        start.elapsed()
    })
}

/// Reads the current turn of `conn` to its end; returns how many chunks it had.
///
/// # Panics
///
/// Panics if the connection fails.
pub async fn read_turn<In, Out, S>(conn: &mut Connection<In, Out, S>) -> u64
where
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
{
    let mut responses = conn.responses();
    let mut n = 0;
    while let Some(chunk) = responses.next().await {
        chunk.expect("chunk");
        n += 1;
    }
    n
}

/// What a raw baseline sends: a chunk, or the end of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// One chunk.
    Item(u64),
    /// The end of a turn.
    End,
}

/// A task streaming `n` chunks and an end marker through a bare channel.
#[must_use]
pub fn raw_stream(n: u64, buffer: usize) -> (Arc<Chan<Marker>>, JoinHandle<()>) {
    let chan = Arc::new(Chan::new(buffer));
    let tx = Arc::clone(&chan);
    let producer = tokio::spawn(async move {
        for i in 0..n {
            if tx.send(Marker::Item(i)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Marker::End).await;
    });
    (chan, producer)
}

/// A task echoing each input as a chunk and an end marker, over two bare channels: what a
/// connection to an echo action is, minus the framework.
#[must_use]
pub fn raw_echo(buffer: usize) -> (Arc<Chan<u64>>, Arc<Chan<Marker>>, JoinHandle<()>) {
    let input = Arc::new(Chan::new(buffer));
    let output = Arc::new(Chan::new(buffer));
    let (rx, tx) = (Arc::clone(&input), Arc::clone(&output));
    let task = tokio::spawn(async move {
        while let Some(n) = poll_fn(|cx| rx.poll_recv(cx)).await {
            if tx.send(Marker::Item(n)).await.is_err() || tx.send(Marker::End).await.is_err() {
                break;
            }
        }
        tx.close(Reason::Completed);
    });
    (input, output, task)
}

/// A model whose answer streams `n` text deltas of `"word "`: the agent benchmarks' load.
#[derive(Debug, Clone, Copy)]
pub struct Words(pub u64);

impl Model for Words {
    fn name(&self) -> &str {
        "words"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        // The frame of a one-word answer (start, delta, end, done), with `n` deltas inside.
        let mut frame = Scripted::new().text("x").events().into_iter();
        let start = frame.next().into_iter();
        let _delta = frame.next();
        let deltas = (0..self.0).map(|_| ModelEvent::TextDelta("word ".to_owned()));
        stream::iter(start.chain(deltas).chain(frame)).boxed()
    }
}

/// One execution of `agent` on a new session (connected with `options`), answering "go",
/// every event read: how many text deltas it streamed, and its session (for the caller to
/// delete: a store that only grew would measure the allocator).
///
/// # Panics
///
/// Panics if the execution fails.
pub async fn execute_once(
    agent: &bidi_llm::LlmAgent,
    options: bidi_core::ConnectOptions,
) -> (usize, String) {
    use bidi_llm::{AgentEvent, TurnInput, UserMessage};
    let mut conn = agent
        .agent()
        .connect_with(bidi_agent::AgentInit::new(), options);
    let mut run = bidi_llm::execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .expect("send");
    let mut deltas = 0;
    while let Some(event) = run.next().await {
        if matches!(event.expect("event"), AgentEvent::TextDelta { .. }) {
            deltas += 1;
        }
    }
    run.result().await.expect("result");
    conn.close();
    let output = conn.output().await.expect("output");
    (deltas, output.session_id)
}
