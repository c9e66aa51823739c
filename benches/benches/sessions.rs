//! One session's turn as the session grows: at 10, 100 and 1,000 turns, on every store.
//!
//! ```sh
//! cargo bench -p benches --bench sessions
//! ```
//!
//! An `LlmAgent` whose model answers 2 KB without copying its request (it reads the
//! conversation it is handed, as a provider serializing it would, and keeps nothing) runs one
//! session on `MemoryStore`, `SqliteStore` (a file) and `PostgresStore` (a private server). The
//! session is built to 1,000 turns once; each measurement resumes it at the snapshot of turn
//! 10, 100 or 1,000 (a branch: every measurement starts at the same place), runs one turn (which
//! loads the session) and times the turns that follow. A turn should cost the same at 1,000 as
//! at 10.
//!
//! - `sessions/turn/{store}/{n}`: criterion's figure for a turn at `n` (at most 50 turns a
//!   sample, scaled to criterion's iteration count).
//! - `sessions/interleaved`: the ratio of a turn at 1,000 to a turn at 10 on each store, from
//!   rounds that alternate the three depths (this VM drifts ±20 % over minutes); the bytes a
//!   turn writes at each depth (SQLite), and the SQLite file of the 1,000-turn session against
//!   its messages as JSON.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::{on_worker, runtime};
use bidi_agent::AgentInit;
use bidi_llm::{LlmAgent, Model, ModelEvent, ModelRequest, TurnInput, UserMessage, execute};
use bidi_session::testing::PostgresServer;
use bidi_session::{MemoryStore, PostgresStore, SessionStore, SqliteStore};
use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::stream::{self, BoxStream};
use tokio::runtime::Runtime;

/// The depths measured.
const DEPTHS: [usize; 3] = [10, 100, 1_000];
/// Turns a measurement runs at most.
const TURNS: u64 = 50;

/// Answers 2 KB of text, reading (not copying) the conversation it is handed.
struct Answers {
    text: Arc<str>,
}

impl Model for Answers {
    fn name(&self) -> &str {
        "answers"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        // What a provider does with the conversation: it reads every message (to serialize
        // it); the request is dropped before the answer streams.
        let read: usize = request.messages.iter().map(|m| m.role() as usize).sum();
        std::hint::black_box(read);
        drop(request);
        let events = [
            ModelEvent::TextStart,
            ModelEvent::TextDelta(self.text.to_string()),
            ModelEvent::TextEnd,
            ModelEvent::Done {
                stop_reason: bidi_llm::StopReason::Stop,
                usage: bidi_llm::Usage::default(),
            },
        ];
        Box::pin(stream::iter(events))
    }
}

/// One store's agent and the snapshots of its session at each depth.
struct Bench {
    name: &'static str,
    agent: LlmAgent,
    at: Vec<(usize, String)>,
    /// What the SQLite file holds once the session is built.
    report: Option<String>,
}

fn agent(store: Arc<dyn SessionStore>) -> LlmAgent {
    let text: Arc<str> = Arc::from("lorem ipsum dolor sit amet ".repeat(76).as_str());
    LlmAgent::builder("bench", Answers { text })
        .store(store)
        .build()
}

fn input(n: u64) -> TurnInput {
    TurnInput::User(UserMessage::new(format!(
        "question number {n}, please answer"
    )))
}

/// Runs `turns` turns on a connection at `snapshot` (a branch from it); returns their time.
/// The connection's first turn, which loads the session (a cost of opening a session, not of a
/// turn), runs before and is not counted.
async fn turns(agent: &LlmAgent, snapshot: &str, turns: u64) -> Duration {
    let mut conn = agent.connect(AgentInit::new().snapshot(snapshot));
    execute(&mut conn, input(0))
        .await
        .expect("a turn starts")
        .result()
        .await
        .expect("a turn ends");
    let mut spent = Duration::ZERO;
    for n in 0..turns {
        let started = Instant::now();
        let result = execute(&mut conn, input(n))
            .await
            .expect("a turn starts")
            .result()
            .await
            .expect("a turn ends");
        spent += started.elapsed();
        assert!(result.error.is_none(), "{result:?}");
    }
    conn.close();
    spent
}

/// Builds one session to the deepest depth, keeping the snapshot of each depth.
async fn build(name: &'static str, store: Arc<dyn SessionStore>) -> Bench {
    let agent = agent(store);
    let mut conn = agent.connect(AgentInit::new().session_id(format!("bench-{name}")));
    let mut at = Vec::new();
    for n in 1..=*DEPTHS.last().unwrap_or(&0) {
        execute(&mut conn, input(n as u64))
            .await
            .expect("a turn starts")
            .result()
            .await
            .expect("a turn ends");
        if DEPTHS.contains(&n) {
            let session = agent.agent().session(&format!("bench-{name}")).await;
            let snapshot = session.expect("loads").expect("exists").snapshot_id();
            at.push((n, snapshot));
        }
    }
    conn.close();
    Bench {
        name,
        agent,
        at,
        report: None,
    }
}

fn benches(rt: &Runtime) -> (Vec<Bench>, PostgresServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let server = rt
        .block_on(PostgresServer::start())
        .expect("a private PostgreSQL server");
    let path = dir.path().join("sessions.db");
    let url = server.url().to_owned();
    let benches = on_worker(rt, async move {
        let sqlite = SqliteStore::open(&path).await.expect("opens");
        let postgres = PostgresStore::connect(&url).await.expect("connects");
        let mut sqlite = build("sqlite", Arc::new(sqlite)).await;
        sqlite.report = Some(report_file(&path).await);
        vec![
            build("memory", Arc::new(MemoryStore::new())).await,
            sqlite,
            build("postgres", Arc::new(postgres)).await,
        ]
    });
    (benches, server, dir)
}

fn turn(c: &mut Criterion) {
    let rt = runtime();
    let (benches, _server, _dir) = benches(&rt);
    let mut group = c.benchmark_group("sessions/turn");
    group.sample_size(10);
    for bench in &benches {
        for (n, snapshot) in &bench.at {
            group.bench_function(format!("{}/{n}", bench.name), |b| {
                b.iter_custom(|iters| {
                    if iters == 0 {
                        return Duration::ZERO;
                    }
                    let ran = iters.min(TURNS);
                    let (agent, snapshot) = (bench.agent.clone(), snapshot.clone());
                    let spent = on_worker(&rt, async move { turns(&agent, &snapshot, ran).await });
                    spent.mul_f64(iters as f64 / ran as f64)
                });
            });
        }
    }
    group.finish();
    interleaved(&rt, &benches);
}

/// The ratios, from rounds that alternate the depths; then what the SQLite file holds.
fn interleaved(rt: &Runtime, benches: &[Bench]) {
    const ROUNDS: usize = 6;
    for bench in benches {
        let mut spent = vec![Duration::ZERO; bench.at.len()];
        for _ in 0..ROUNDS {
            for (slot, (_, snapshot)) in bench.at.iter().enumerate() {
                let (agent, snapshot) = (bench.agent.clone(), snapshot.clone());
                spent[slot] += on_worker(rt, async move { turns(&agent, &snapshot, 20).await });
            }
        }
        let per_turn: Vec<f64> = spent
            .iter()
            .map(|d| d.as_secs_f64() * 1e6 / (ROUNDS * 20) as f64)
            .collect();
        println!(
            "sessions/interleaved {}: {:.0} µs a turn at 10, {:.0} at 100 ({:.2}×), {:.0} at 1000 ({:.2}×)",
            bench.name,
            per_turn[0],
            per_turn[1],
            per_turn[1] / per_turn[0],
            per_turn[2],
            per_turn[2] / per_turn[0],
        );
    }
    for report in benches.iter().filter_map(|b| b.report.as_ref()) {
        println!("{report}");
    }
}

/// The bytes a turn wrote at each depth, and the file against the messages it holds.
async fn report_file(file: &PathBuf) -> String {
    let store = SqliteStore::open(file).await.expect("opens");
    let head = store
        .load("bench-sqlite")
        .await
        .expect("loads")
        .expect("exists");
    let messages = serde_json::to_string(&head.state["messages"]).map_or(0, |json| json.len());
    drop(store);
    sql_report(file, messages)
}

fn sql_report(file: &PathBuf, messages: usize) -> String {
    let conn = rusqlite::Connection::open(file).expect("opens");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoints the WAL");
    let written = |version: usize| -> i64 {
        conn.query_row(
            "SELECT AVG(length(change) + IFNULL(length(checkpoint), 0) + length(id) + \
             IFNULL(length(parent_id), 0) + length(session_id)) FROM bidi_entries \
             WHERE session_id = 'bench-sqlite' AND version BETWEEN ?1 AND ?2 \
             AND checkpoint IS NULL",
            [version as i64 - 4, version as i64],
            |row| row.get::<_, f64>(0),
        )
        .map(|bytes| bytes as i64)
        .unwrap_or(0)
    };
    let (at_10, at_100, at_1000) = (written(10), written(100), written(1000));
    let checkpoints: i64 = conn
        .query_row(
            "SELECT IFNULL(SUM(length(checkpoint)), 0) FROM bidi_entries",
            [],
            |row| row.get(0),
        )
        .unwrap_or(0);
    drop(conn);
    let size = std::fs::metadata(file).map_or(0, |m| m.len());
    format!(
        "sessions/interleaved sqlite: a turn writes {at_10} B at 10, {at_100} B at 100, \
         {at_1000} B at 1000 (row data); checkpoints {} KiB in all; the file of the \
         1,000-turn session {} KiB for {} KiB of messages as JSON ({:.2}×)",
        checkpoints / 1024,
        size / 1024,
        messages / 1024,
        size as f64 / messages as f64,
    )
}

criterion_group!(sessions, turn);
criterion_main!(sessions);
