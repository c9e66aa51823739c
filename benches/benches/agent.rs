//! Sessions and agents against their raw baselines, in the same run.
//!
//! ```sh
//! cargo bench -p benches --bench agent
//! ```
//!
//! - `sqlite_cas`: one compare-and-swap append through `SqliteStore` (async, on tokio's blocking
//!   threads), its change the state written whole, against the raw rusqlite
//!   `UPDATE … WHERE id = ? AND version = ?` on a file with the same settings (WAL,
//!   `synchronous = NORMAL`), called directly.
//! - `postgres_cas`: the same appends through `PostgresStore`, on a private PostgreSQL server
//!   (`bidi_session::testing::PostgresServer`), against the raw tokio-postgres
//!   `UPDATE … WHERE id = $1 AND version = $2` on one connection to the same server.
//! - `agent_turn`: a turn of an agent with a `MemoryStore` that saves its state once per turn
//!   (`update_state`) against the same turn of a bare `BidiAction`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use benches::{on_worker, read_turn, runtime};
use bidi_agent::{Agent, AgentInit, AgentResult, Responder};
use bidi_core::{ActionContext, BidiAction, BoxError, Inbound, Outbound};
use bidi_session::testing::PostgresServer;
use bidi_session::{
    Append, Change, MemoryStore, Parent, PostgresStore, Session, SessionStore, SqliteStore,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

/// Numbers the sessions of successive samples.
static SAMPLES: AtomicU64 = AtomicU64::new(0);

/// A state of about 700 bytes of JSON.
fn state(n: u64) -> Value {
    json!({"turn": n, "history": (0..20).map(|i| format!("message number {i} of the session")).collect::<Vec<_>>()})
}

/// Compare-and-swap saves through `store`, on a new session each sample.
fn saves<S: SessionStore + Clone>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &Runtime,
    name: &str,
    store: &S,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let store = store.clone();
            on_worker(rt, async move {
                let id = format!("bench-{}", SAMPLES.fetch_add(1, Ordering::Relaxed));
                let mut head = store
                    .append(&id, Append::create(state(0)))
                    .await
                    .expect("create")
                    .id;
                let start = Instant::now();
                for n in 0..iters {
                    // The state written whole, as the raw baseline writes it.
                    let change = Change::new().set("", state(n));
                    head = store
                        .append(&id, Append::change(Parent::Head(head), change))
                        .await
                        .expect("append")
                        .id;
                }
                start.elapsed()
            })
        });
    });
}

fn sqlite_cas(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("sqlite_cas");
    group.throughput(Throughput::Elements(1));

    let store = rt
        .block_on(SqliteStore::open(dir.path().join("store.db")))
        .expect("open store");
    saves(&mut group, &rt, "store_append", &store);

    let raw = Connection::open(dir.path().join("raw.db")).expect("open raw");
    raw.pragma_update(None, "journal_mode", "WAL").expect("wal");
    raw.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    raw.execute_batch("CREATE TABLE sessions (id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL)")
        .expect("schema");
    raw.execute(
        "INSERT INTO sessions VALUES ('s', 1, ?1)",
        params![state(0).to_string()],
    )
    .expect("seed");
    let mut version = 1i64;
    group.bench_function("raw_rusqlite", |b| {
        b.iter_custom(|iters| {
            let mut update = raw
                .prepare_cached("UPDATE sessions SET state = ?1, version = version + 1 WHERE id = 's' AND version = ?2")
                .expect("prepare");
            let start = Instant::now();
            for n in 0..iters {
                // The same work as the store: serialize the state, then the CAS.
                let json = serde_json::to_string(&state(n)).expect("json");
                assert_eq!(update.execute(params![json, version]).expect("update"), 1);
                version += 1;
            }
            start.elapsed()
        });
    });
    // What async code gets from raw rusqlite without a connection thread: one `spawn_blocking`
    // per statement.
    let raw = Arc::new(std::sync::Mutex::new(raw));
    group.bench_function("raw_rusqlite_spawn_blocking", |b| {
        b.iter_custom(|iters| {
            let raw = Arc::clone(&raw);
            on_worker(&rt, async move {
                let start = Instant::now();
                for n in 0..iters {
                    let raw = Arc::clone(&raw);
                    tokio::task::spawn_blocking(move || {
                        let conn = raw.lock().expect("lock");
                        let json = serde_json::to_string(&state(n)).expect("json");
                        let mut update = conn
                            .prepare_cached("UPDATE sessions SET state = ?1, version = version + 1 WHERE id = 's'")
                            .expect("prepare");
                        assert_eq!(update.execute(params![json]).expect("update"), 1);
                    })
                    .await
                    .expect("blocking task");
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

fn postgres_cas(c: &mut Criterion) {
    let rt = runtime();
    let server = rt
        .block_on(PostgresServer::start())
        .expect("a PostgreSQL server");
    let mut group = c.benchmark_group("postgres_cas");
    group.throughput(Throughput::Elements(1));

    let store = rt
        .block_on(PostgresStore::connect(server.url()))
        .expect("connect");
    saves(&mut group, &rt, "store_append", &store);

    let url = server.url().to_owned();
    let raw = rt.block_on(async move {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect raw");
        tokio::spawn(connection);
        client
            .batch_execute(
                "CREATE TABLE sessions (id TEXT PRIMARY KEY, version BIGINT NOT NULL, state JSONB NOT NULL);
                 INSERT INTO sessions VALUES ('s', 1, '{}')",
            )
            .await
            .expect("schema");
        Arc::new(client)
    });
    let version = Arc::new(AtomicU64::new(1));
    group.bench_function("raw_tokio_postgres", |b| {
        b.iter_custom(|iters| {
            let (raw, version) = (Arc::clone(&raw), Arc::clone(&version));
            on_worker(&rt, async move {
                let update = raw
                    .prepare("UPDATE sessions SET state = $1, version = version + 1 WHERE id = 's' AND version = $2")
                    .await
                    .expect("prepare");
                let start = Instant::now();
                for n in 0..iters {
                    let v = i64::try_from(version.fetch_add(1, Ordering::Relaxed)).expect("version");
                    // The same work as the store: the state goes as JSONB, then the CAS.
                    let updated = raw.execute(&update, &[&state(n), &v]).await.expect("update");
                    assert_eq!(updated, 1);
                }
                start.elapsed()
            })
        });
    });
    group.finish();
    drop(server);
}

async fn echo(
    _: ActionContext,
    (): (),
    mut inbound: Inbound<u64>,
    out: Outbound<u64>,
) -> Result<(), BoxError> {
    while let Some(n) = inbound.recv().await {
        out.send(n).await?;
        out.end_turn().await?;
    }
    Ok(())
}

async fn saving_echo(
    _: ActionContext,
    session: Session<u64>,
    mut inbound: Inbound<u64>,
    out: Responder<u64>,
) -> Result<AgentResult<()>, BoxError> {
    while let Some(n) = inbound.recv().await {
        session.update_state(n).await?;
        out.send(n).await?;
        out.end_turn().await?;
    }
    Ok(AgentResult::new(()))
}

fn agent_turn(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("agent_turn");
    group.throughput(Throughput::Elements(1));

    let action = BidiAction::new("echo", echo);
    group.bench_function("action", |b| {
        b.iter_custom(|iters| {
            let action = action.clone();
            on_worker(&rt, async move {
                let mut conn = action.connect(());
                let start = Instant::now();
                for n in 0..iters {
                    conn.send(n).await.expect("send");
                    assert_eq!(read_turn(&mut conn).await, 1);
                }
                start.elapsed()
            })
        });
    });

    let agent = Agent::builder("echo").build(saving_echo);
    group.bench_function("agent_memory_store", |b| {
        b.iter_custom(|iters| {
            let agent = agent.clone();
            on_worker(&rt, async move {
                let mut conn = agent.connect(AgentInit::new());
                let start = Instant::now();
                for n in 0..iters {
                    conn.send(n).await.expect("send");
                    assert_eq!(read_turn(&mut conn).await, 1);
                }
                let elapsed = start.elapsed();
                conn.close();
                let out = conn.output().await.expect("output");
                let store: &Arc<dyn SessionStore> = agent.store();
                // Every turn was saved, so history grows; drop it between samples.
                store.delete(&out.session_id).await.expect("delete");
                elapsed
            })
        });
    });
    group.finish();
}

/// The write of an agent turn alone: `update_state` of a `u64` on the agents' default store,
/// without a connection around it.
fn session_write(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("agent_turn");
    group.throughput(Throughput::Elements(1));
    group.bench_function("update_state_alone", |b| {
        b.iter_custom(|iters| {
            on_worker(&rt, async move {
                let store = MemoryStore::new()
                    .with_max_sessions(1024)
                    .with_max_snapshots(256);
                let session = Session::create(Arc::new(store), "s", 0_u64)
                    .await
                    .expect("create");
                let start = Instant::now();
                for n in 0..iters {
                    session.update_state(n).await.expect("update");
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

/// The bare action's turns and the agent's in turn, a thousand at a time, and the time each
/// took in all: on a VM whose speed drifts by ±20% over minutes, ratios from turns interleaved
/// this way are steadier than those of criterion's functions, measured one after another.
fn agent_turn_interleaved(_c: &mut Criterion) {
    const ROUNDS: u64 = 400;
    const TURNS: u64 = 1_000;
    let rt = runtime();
    let action = BidiAction::new("echo", echo);
    let agent = Agent::builder("echo").build(saving_echo);
    let [action, agent] = on_worker(&rt, async move {
        let mut action = action.connect(());
        let mut agent = agent.connect(AgentInit::new());
        let mut totals = [Duration::ZERO; 2];
        for round in 0..ROUNDS {
            for step in 0..2 {
                // Each round starts with the other side, so neither always goes first.
                let i = (step + round as usize) % 2;
                let start = Instant::now();
                for n in 0..TURNS {
                    if i == 0 {
                        action.send(n).await.expect("send");
                        assert_eq!(read_turn(&mut action).await, 1);
                    } else {
                        agent.send(n).await.expect("send");
                        assert_eq!(read_turn(&mut agent).await, 1);
                    }
                }
                totals[i] += start.elapsed();
            }
        }
        totals
    })
    .map(|total| total.as_secs_f64() * 1e9 / (ROUNDS * TURNS) as f64);
    println!(
        "agent_turn/interleaved ({ROUNDS} rounds of {TURNS} turns): action {action:.0} ns, \
         agent_memory_store {agent:.0} ns ({:.2} of the action's rate)",
        action / agent,
    );
}

criterion_group!(
    benches,
    sqlite_cas,
    postgres_cas,
    agent_turn,
    session_write,
    agent_turn_interleaved
);
criterion_main!(benches);
