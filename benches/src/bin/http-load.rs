//! A Rust load client for Genkit's streaming flow wire, the twin of
//! `benches/peers/genkit-http/load.mjs` (same arguments, same checks, same JSON line), so that a
//! server can be measured with a client that is not the limit.
//!
//! ```sh
//! cargo run --release -p benches --bin http-load -- <url> <requests> <concurrency> <chunksPerRequest> [--warmup=W]
//! ```
//!
//! Sends `<requests>` POSTs of `{"data":{"n":<chunksPerRequest>}}` with
//! `Accept: text/event-stream`, `<concurrency>` at a time (one keep-alive connection each), reads
//! every record of each body (split on `\n\n`, the `data: ` prefix dropped, the rest parsed as
//! JSON) and counts a request as an error unless it answered 200 with exactly n `message` records
//! `{"i":0}`, `{"i":1}`, … then `{"result":n}`. W requests (default: the concurrency) warm up
//! first, unmeasured. Prints
//! `{"requests","seconds","requestsPerSec","chunksPerSec","errors","concurrency","chunksPerRequest","warmup"}`
//! and exits 1 on any error (the first one goes to stderr). Runs on the benchmarks' two-worker
//! runtime (`W=<n>` sets another number of workers).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Deserialize;
use serde_json::json;
use tokio::sync::Mutex;

const USAGE: &str =
    "usage: http-load <url> <requests> <concurrency> <chunksPerRequest> [--warmup=W]";

#[derive(Deserialize)]
struct Index {
    i: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Record {
    Message { message: Index },
    Result { result: u64 },
}

/// One request: `Ok(())`, or what was wrong with it.
async fn one(client: &reqwest::Client, url: &str, body: &str, n: u64) -> Result<(), String> {
    let mut response = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(body.to_owned())
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if response.status() != 200 {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {}", &text[..text.len().min(300)]));
    }
    let mut buffer: Vec<u8> = Vec::new();
    let mut next = 0;
    let mut result = None;
    while let Some(bytes) = response.chunk().await.map_err(|error| error.to_string())? {
        buffer.extend_from_slice(&bytes);
        let mut start = 0;
        while let Some(end) = buffer[start..].windows(2).position(|w| w == b"\n\n") {
            let record = &buffer[start..start + end];
            start += end + 2;
            let quote = || String::from_utf8_lossy(&record[..record.len().min(200)]).into_owned();
            if result.is_some() {
                return Err(format!("a record after the result: {}", quote()));
            }
            let Some(json) = record.strip_prefix(b"data: ") else {
                return Err(format!("not a data record: {}", quote()));
            };
            match serde_json::from_slice::<Record>(json) {
                Ok(Record::Message { message }) if message.i == next => next += 1,
                Ok(Record::Message { message }) => {
                    return Err(format!("chunk {next}: {{\"i\":{}}}", message.i));
                }
                Ok(Record::Result { result: value }) => result = Some(value),
                Err(_) => return Err(format!("record {}", quote())),
            }
        }
        buffer.drain(..start);
    }
    if !buffer.is_empty() {
        return Err(format!(
            "trailing bytes: {}",
            String::from_utf8_lossy(&buffer[..buffer.len().min(200)])
        ));
    }
    if next != n {
        return Err(format!("{next} chunks, expected {n}"));
    }
    if result != Some(n) {
        return Err(format!("result {result:?}, expected {n}"));
    }
    Ok(())
}

/// Runs `total` requests, `concurrency` at a time; returns the number of errors.
async fn batch(
    client: &reqwest::Client,
    url: &Arc<str>,
    body: &Arc<str>,
    n: u64,
    total: u64,
    concurrency: u64,
    first_error: &Arc<Mutex<Option<String>>>,
) -> u64 {
    let started = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..concurrency.min(total.max(1)))
        .map(|_| {
            let (client, url, body) = (client.clone(), Arc::clone(url), Arc::clone(body));
            let (started, errors, first_error) = (
                Arc::clone(&started),
                Arc::clone(&errors),
                Arc::clone(first_error),
            );
            tokio::spawn(async move {
                while started.fetch_add(1, Ordering::Relaxed) < total {
                    if let Err(problem) = one(&client, &url, &body, n).await {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().await.get_or_insert(problem);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        if worker.await.is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    errors.load(Ordering::Relaxed)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let warmup_flag = args.iter().find_map(|arg| arg.strip_prefix("--warmup="));
    let positional: Vec<&String> = args.iter().filter(|arg| !arg.starts_with("--")).collect();
    let counts: Option<Vec<u64>> = positional
        .get(1..4)
        .map(|counts| counts.iter().filter_map(|c| c.parse().ok()).collect());
    let (Some(url), Some(counts)) = (positional.first(), counts) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let (&[requests, concurrency, n], Ok(warmup)) = (
        counts.as_slice(),
        warmup_flag.map_or(Ok(concurrency_or(&counts)), str::parse::<u64>),
    ) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if concurrency < 1 || !(url.starts_with("http://")) {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let url: Arc<str> = Arc::from(url.as_str());
    let body: Arc<str> = Arc::from(json!({"data": {"n": n}}).to_string());
    let rt = benches::runtime();
    let (errors, seconds, first_error) = rt.block_on(async move {
        let client = reqwest::Client::new();
        let first_error = Arc::new(Mutex::new(None));
        batch(&client, &url, &body, n, warmup, concurrency, &first_error).await;
        *first_error.lock().await = None;
        let begin = Instant::now();
        let errors = batch(&client, &url, &body, n, requests, concurrency, &first_error).await;
        let seconds = begin.elapsed().as_secs_f64();
        let first_error = first_error.lock().await.take();
        (errors, seconds, first_error)
    });
    if let Some(problem) = first_error {
        eprintln!("first error: {problem}");
    }
    let round = |x: f64| (x * 10.0).round() / 10.0;
    #[allow(clippy::cast_precision_loss)]
    let line = json!({
        "requests": requests,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "requestsPerSec": round(requests as f64 / seconds),
        "chunksPerSec": round(((requests - errors) * n) as f64 / seconds),
        "errors": errors,
        "concurrency": concurrency,
        "chunksPerRequest": n,
        "warmup": warmup,
    });
    println!("{line}");
    if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The default warm-up: the concurrency, when the counts parsed.
fn concurrency_or(counts: &[u64]) -> u64 {
    counts.get(1).copied().unwrap_or(0)
}
