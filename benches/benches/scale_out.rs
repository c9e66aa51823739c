//! Many processes on one PostgreSQL database: 1, 2 and 4 `agent-server` processes (an LLM agent
//! on the demo model, sessions in PostgreSQL) and 1,000 sessions, each a client that runs turn
//! after turn over the execute wire, spread over the processes. What a team that outgrows one
//! machine asks: turns per second and their ratio to one process, a turn's p50 and p99, the
//! database connections, each process's memory, and the share of the CPU time the database
//! takes (to project past this machine's two cores, where the servers, the database and this
//! client share two cores).
//!
//! ```sh
//! cargo bench -p benches --bench scale_out
//! # fewer sessions, a longer window, other process counts:
//! SESSIONS=200 SECONDS=20 PROCESSES=1,2 cargo bench -p benches --bench scale_out
//! ```

use std::process::Stdio;
use std::time::{Duration, Instant};

use bidi_session::testing::PostgresServer;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// CPU time (user and system, in clock ticks) of the processes `filter` keeps, given each
/// one's pid and `comm`.
fn ticks(filter: &dyn Fn(u32, &str) -> bool) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the fields after the comm's closing parenthesis.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !filter(pid, &stat[open + 1..close]) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the comm.
        let (Some(user), Some(system)) = (fields.get(11), fields.get(12)) else {
            continue;
        };
        total += user.parse::<u64>().unwrap_or(0) + system.parse::<u64>().unwrap_or(0);
    }
    total
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Starts an `agent-server` on `url`; its base URL.
async fn server(url: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-server"))
        .arg(url)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start agent-server");
    let stdout = child.stdout.take().expect("stdout");
    let line = BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .expect("read")
        .expect("the server's address");
    (child, line)
}

/// One session's client: turns until `until`, each turn's latency sent to `done` if it ended
/// after `from`.
async fn client(
    http: reqwest::Client,
    base: String,
    from: Instant,
    until: Instant,
    done: mpsc::UnboundedSender<Duration>,
) {
    let mut session: Option<String> = None;
    while Instant::now() < until {
        let mut body = json!({"input": {"role": "user", "content": "hello there"}});
        match &session {
            Some(id) => body["sessionId"] = json!(id),
            None => body["context"] = json!({}),
        }
        let started = Instant::now();
        let response = http
            .post(format!("{base}/agent/assistant/execute"))
            .json(&body)
            .send()
            .await
            .expect("execute");
        if !response.status().is_success() {
            let status = response.status();
            panic!("{status}: {}", response.text().await.unwrap_or_default());
        }
        session = response
            .headers()
            .get("x-session-id")
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.expect("body");
        assert!(text.contains("execute_complete"), "{text}");
        if started >= from {
            let _ = done.send(started.elapsed());
        }
    }
}

/// The transactions the database has run so far (committed and rolled back), all databases.
async fn transactions(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT sum(xact_commit + xact_rollback)::bigint FROM pg_stat_database",
        &[],
    )
    .await
    .map_or(0, |row| row.get(0))
}

/// The database's client connections now.
async fn connections(db: &tokio_postgres::Client) -> i64 {
    db.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
        &[],
    )
    .await
    .map_or(0, |row| row.get(0))
}

#[allow(clippy::too_many_lines)]
async fn run() {
    let sessions: usize = env("SESSIONS", 1_000);
    let seconds: u64 = env("SECONDS", 10);
    let counts: Vec<usize> = std::env::var("PROCESSES")
        .unwrap_or_else(|_| "1,2,4".to_owned())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let postgres = PostgresServer::start().await.expect("PostgreSQL");
    let (db, connection) = tokio_postgres::connect(postgres.url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    println!(
        "{sessions} sessions, {seconds} s a run (after 2 s of warm-up), {} cores",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "| processes | turns/s | × one process | p50 ms | p99 ms | DB connections | DB transactions a turn | RSS per process (MB) | CPU: database / servers / client |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut one = None;
    for processes in counts {
        let mut servers = Vec::new();
        for _ in 0..processes {
            servers.push(server(postgres.url()).await);
        }
        let pids: Vec<u32> = servers.iter().filter_map(|(child, _)| child.id()).collect();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(sessions)
            .build()
            .expect("client");
        let (done, mut latencies) = mpsc::unbounded_channel();
        let from = Instant::now() + Duration::from_secs(2);
        let until = from + Duration::from_secs(seconds);
        let clients: Vec<_> = (0..sessions)
            .map(|n| {
                let base = servers[n % processes].1.clone();
                tokio::spawn(client(http.clone(), base, from, until, done.clone()))
            })
            .collect();
        drop(done);
        tokio::time::sleep_until(from.into()).await;
        let me = std::process::id();
        let transactions_before = transactions(&db).await;
        let before = (
            ticks(&|_, comm| comm == "postgres"),
            ticks(&|pid, _| pids.contains(&pid)),
            ticks(&|pid, _| pid == me),
        );
        tokio::time::sleep(Duration::from_secs(seconds / 2)).await;
        let held = connections(&db).await;
        tokio::time::sleep_until(until.into()).await;
        let after = (
            ticks(&|_, comm| comm == "postgres"),
            ticks(&|pid, _| pids.contains(&pid)),
            ticks(&|pid, _| pid == me),
        );
        let transactions_after = transactions(&db).await;
        let rss: Vec<u64> = pids.iter().map(|pid| rss_kb(*pid) / 1024).collect();
        for client in clients {
            client.await.expect("client");
        }
        let mut times = Vec::new();
        while let Some(time) = latencies.recv().await {
            times.push(time);
        }
        times.sort();
        let rate = times.len() as f64 / seconds as f64;
        let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
        let cpu = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
        let all = (cpu.0 + cpu.1 + cpu.2).max(1) as f64;
        let one_rate = *one.get_or_insert(rate);
        println!(
            "| {processes} | {rate:.0} | {:.2} | {:.1} | {:.1} | {held} | {:.1} | {} | {:.0} % / {:.0} % / {:.0} % |",
            rate / one_rate,
            at(0.5).as_secs_f64() * 1e3,
            at(0.99).as_secs_f64() * 1e3,
            // The window's transactions over its turns (the turns that started in it).
            (transactions_after - transactions_before) as f64 / times.len().max(1) as f64,
            rss.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            100.0 * cpu.0 as f64 / all,
            100.0 * cpu.1 as f64 / all,
            100.0 * cpu.2 as f64 / all,
        );
        drop(servers);
    }
}

fn main() {
    benches::runtime().block_on(async {
        tokio::spawn(run()).await.expect("benchmark");
    });
}
