//! 10,000 concurrent open SSE streams against `bidi-http`: memory per stream, errors, and the
//! server's tasks once the clients are gone.
//!
//! ```sh
//! cargo bench -p benches --bench http_streams
//! ```
//!
//! The server is `http-server` (this package's binary) in a child process, so its resident set
//! is its own; a fresh one for each side. Each stream is `POST /bidi-flow/hold?stream=true` with
//! `{"data":null}`: the `hold` flow sends one chunk and then waits until cancelled. The raw side
//! is `POST /raw/hold`, axum's `Sse` answering the same record and then pending forever. The client (`reqwest`, one connection
//! per stream, at most 500 opening at once) reads the first record of every stream, then the
//! server's `GET /stats` gives its alive tasks and `VmRSS`; then every stream is dropped and the
//! server's task count must come back to what it was before. Needs about 10,100 file
//! descriptors in each process (`ulimit -n`; `bash -c 'ulimit -n 65536; cargo bench …'` raises
//! it where the hard limit allows).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use benches::http::rss_bytes;
use benches::{on_worker, runtime};
use futures_util::StreamExt as _;
use serde_json::Value;

const STREAMS: usize = 10_000;
const OPENING: usize = 500;
const FIRST: &[u8] = b"data: {\"message\":\"open\"}\n\n";

/// Kills the server when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The soft limit on open files of this process.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The server's `(alive tasks, resident bytes)`.
async fn stats(client: &reqwest::Client, base: &str) -> (u64, u64) {
    let stats: Value = client
        .get(format!("{base}/stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("stats JSON");
    (
        stats["tasks"].as_u64().expect("tasks"),
        stats["rss"].as_u64().expect("rss"),
    )
}

/// Opens one stream and reads its first record; returns the response, still streaming.
async fn open(client: &reqwest::Client, url: &str) -> Result<reqwest::Response, String> {
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .body(r#"{"data":null}"#)
        .send()
        .await
        .map_err(|error| format!("{error:?}"))?;
    if response.status() != 200 {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut first = Vec::new();
    while !first.ends_with(b"\n\n") {
        match response.chunk().await {
            Ok(Some(bytes)) => first.extend_from_slice(&bytes),
            Ok(None) => return Err("the stream ended".to_owned()),
            Err(error) => return Err(format!("{error:?}")),
        }
    }
    if first != FIRST {
        return Err(format!(
            "first record {:?}",
            String::from_utf8_lossy(&first)
        ));
    }
    Ok(response)
}

/// Opens `count` streams, [`OPENING`] at a time; returns the open ones and the errors.
async fn open_all(
    client: &reqwest::Client,
    url: &str,
    count: usize,
) -> (Vec<reqwest::Response>, Vec<String>) {
    let results: Vec<_> = futures_util::stream::iter(0..count)
        .map(|_| open(client, url))
        .buffer_unordered(OPENING)
        .collect()
        .await;
    let mut open = Vec::with_capacity(count);
    let mut errors = Vec::new();
    for result in results {
        match result {
            Ok(response) => open.push(response),
            Err(error) => errors.push(error),
        }
    }
    (open, errors)
}

/// Waits until the server has at most `tasks` alive tasks; returns how long it took, or `None`
/// after 30 s.
async fn settle(client: &reqwest::Client, base: &str, tasks: u64) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if stats(client, base).await.0 <= tasks {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// What one server did with [`STREAMS`] open streams.
struct Outcome {
    errors: usize,
    per_stream: f64,
    ok: bool,
}

/// Starts `http-server`, opens [`STREAMS`] streams on `path`, reads the server's figures, drops
/// the streams and waits for its tasks to come back down; prints what it saw.
#[allow(clippy::cast_precision_loss)]
fn measure(name: &str, path: &str) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_http-server"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start http-server");
    let stdout = child.stdout.take().expect("stdout");
    let server = Server(child);
    let mut base = String::new();
    BufReader::new(stdout)
        .read_line(&mut base)
        .expect("the server's address");
    let base = base.trim().to_owned();
    assert!(base.starts_with("http://"), "http-server printed {base:?}");

    let rt = runtime();
    let url = format!("{base}{path}");
    let name = name.to_owned();
    let outcome = on_worker(&rt, async move {
        let control = reqwest::Client::new();
        // Warm the server's allocator and runtime, then take the baseline.
        let (warm, errors) = open_all(&reqwest::Client::new(), &url, 2 * OPENING).await;
        assert!(errors.is_empty(), "warm-up: {errors:?}");
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (tasks_before, rss_before) = stats(&control, &base).await;
        let client_before = rss_bytes();

        let client = reqwest::Client::new();
        let start = Instant::now();
        let (streams, errors) = open_all(&client, &url, STREAMS).await;
        let opened = start.elapsed();
        let (tasks_open, rss_open) = stats(&control, &base).await;
        let client_open = rss_bytes();
        let per_stream = rss_open.saturating_sub(rss_before) as f64 / STREAMS as f64;
        let tasks_per_stream =
            tasks_open.saturating_sub(tasks_before) as f64 / streams.len().max(1) as f64;

        drop(streams);
        drop(client);
        let drained = settle(&control, &base, tasks_before).await;
        let (tasks_after, rss_after) = stats(&control, &base).await;

        println!("{name}: {STREAMS} open SSE streams, {url}");
        println!(
            "  opened in {:.2} s, errors: {}",
            opened.as_secs_f64(),
            errors.len()
        );
        if let Some(error) = errors.first() {
            println!("  first error: {error}");
        }
        println!(
            "  server RSS: {:.1} MiB before, {:.1} MiB open, {:.1} MiB after drop",
            rss_before as f64 / 1_048_576.0,
            rss_open as f64 / 1_048_576.0,
            rss_after as f64 / 1_048_576.0
        );
        println!("  server memory per open stream: {per_stream:.0} B");
        println!(
            "  server tasks: {tasks_before} before, {tasks_open} open ({tasks_per_stream:.2} per \
             stream), {tasks_after} after drop"
        );
        println!(
            "  client memory per open stream (reqwest, this process): {:.0} B",
            client_open.saturating_sub(client_before) as f64 / STREAMS as f64
        );
        match drained {
            Some(took) => println!(
                "  tasks back to {tasks_before} {:.2} s after the streams were dropped",
                took.as_secs_f64()
            ),
            None => println!("  tasks NOT back to {tasks_before} after 30 s: {tasks_after}"),
        }
        Outcome {
            errors: errors.len(),
            per_stream,
            ok: errors.is_empty() && drained.is_some(),
        }
    });
    drop(server);
    outcome
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; this binary takes no arguments of its own.
    let needed = u64::try_from(STREAMS).unwrap_or(u64::MAX) + 100;
    match open_files_limit() {
        Some(limit) if limit >= needed => {}
        limit => {
            eprintln!(
                "http_streams needs {needed} open files per process, the limit is {limit:?}: run \
                 it under `bash -c 'ulimit -n 65536; cargo bench -p benches --bench http_streams'`"
            );
            return ExitCode::FAILURE;
        }
    }
    let bidi = measure("bidi_http", "/bidi-flow/hold?stream=true");
    let raw = measure("raw_axum", "/raw/hold");
    println!(
        "memory per open stream: bidi-http {:.0} B, raw axum {:.0} B ({:.2}x); errors {} / {}",
        bidi.per_stream,
        raw.per_stream,
        bidi.per_stream / raw.per_stream,
        bidi.errors,
        raw.errors
    );
    if bidi.ok && raw.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
