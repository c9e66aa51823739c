//! A Rust load client for Genkit's streaming flow wire, the twin of
//! `benches/peers/genkit-http/load.mjs` (same arguments, same checks, same JSON line), so that a
//! server can be measured with a client that is not the limit.
//!
//! ```sh
//! cargo run --release -p benches --bin http-load -- <url> <requests> <concurrency> <chunksPerRequest> [--warmup=W]
//! ```
//!
//! Sends `<requests>` POSTs of `{"data":{"n":<chunksPerRequest>}}` with
//! `Accept: text/event-stream`, `<concurrency>` at a time (one keep-alive connection each, hyper's
//! own HTTP/1 client with `TCP_NODELAY` and no pool: a client that spends less than the server it
//! measures, on a machine whose cores they share), reads
//! every record of each body (split on `\n\n`, the `data: ` prefix dropped, the rest parsed as
//! JSON) and counts a request as an error unless it answered 200 with exactly n `message` records
//! `{"i":0}`, `{"i":1}`, … then `{"result":n}`. W requests (default: the concurrency) warm up
//! first, unmeasured. Prints
//! `{"requests","seconds","requestsPerSec","chunksPerSec","errors","concurrency","chunksPerRequest","warmup"}`
//! and exits 1 on any error (the first one goes to stderr). Runs on the benchmarks' two-worker
//! runtime (`W=<n>` sets another number of workers).

use std::future::poll_fn;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hyper::body::{Body as _, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

const USAGE: &str =
    "usage: http-load <url> <requests> <concurrency> <chunksPerRequest> [--warmup=W]";

#[derive(Deserialize)]
struct Index {
    i: u64,
}

/// One record: a chunk (`message`) or the output (`result`), exactly one of them.
#[derive(Deserialize)]
struct Record {
    message: Option<Index>,
    result: Option<u64>,
}

/// Where the load goes: the server's address and the request's target.
struct Target {
    /// `host:port`, also the `Host` header.
    authority: String,
    /// The path (and query) of the URL.
    path: String,
    /// The request body.
    body: String,
    /// The chunks each answer must stream.
    n: u64,
}

impl Target {
    fn parse(url: &str, n: u64) -> Option<Self> {
        let rest = url.strip_prefix("http://")?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        Some(Self {
            authority: authority.to_owned(),
            path: path.to_owned(),
            body: json!({"data": {"n": n}}).to_string(),
            n,
        })
    }
}

/// One keep-alive connection of the client: hyper's HTTP/1 client on a TCP stream with
/// `TCP_NODELAY`, no pool (each worker keeps its own), so that the client costs little beside
/// the server it measures.
async fn connect(target: &Target) -> Result<SendRequest<String>, String> {
    let stream = TcpStream::connect(&target.authority)
        .await
        .map_err(|error| error.to_string())?;
    stream
        .set_nodelay(true)
        .map_err(|error| error.to_string())?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| error.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One request: `Ok(())`, or what was wrong with it.
async fn one(sender: &mut SendRequest<String>, target: &Target) -> Result<(), String> {
    let request = hyper::Request::post(&target.path)
        .header("host", &target.authority)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(target.body.clone())
        .map_err(|error| error.to_string())?;
    sender.ready().await.map_err(|error| error.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| error.to_string())?;
    let status = response.status();
    let mut body = response.into_body();
    if status != 200 {
        let text = read_all(&mut body).await?;
        let text = String::from_utf8_lossy(&text[..text.len().min(300)]).into_owned();
        return Err(format!("HTTP {status}: {text}"));
    }
    let mut records = Records::default();
    let mut buffer: Vec<u8> = Vec::new();
    while let Some(data) = next_data(&mut body).await? {
        if buffer.is_empty() {
            let used = records.read(&data)?;
            buffer.extend_from_slice(&data[used..]);
        } else {
            buffer.extend_from_slice(&data);
            let used = records.read(&buffer)?;
            buffer.drain(..used);
        }
    }
    if !buffer.is_empty() {
        return Err(format!(
            "trailing bytes: {}",
            String::from_utf8_lossy(&buffer[..buffer.len().min(200)])
        ));
    }
    if records.next != target.n {
        return Err(format!("{} chunks, expected {}", records.next, target.n));
    }
    if records.result != Some(target.n) {
        return Err(format!(
            "result {:?}, expected {}",
            records.result, target.n
        ));
    }
    Ok(())
}

/// The records of one answer read so far.
#[derive(Default)]
struct Records {
    /// The index the next chunk must have.
    next: u64,
    /// The output, once read.
    result: Option<u64>,
}

impl Records {
    /// Reads the whole records (each ending in `\n\n`) at the start of `bytes`; returns how
    /// many bytes they took.
    fn read(&mut self, bytes: &[u8]) -> Result<usize, String> {
        let mut start = 0;
        while let Some(end) = memchr::memmem::find(&bytes[start..], b"\n\n") {
            let record = &bytes[start..start + end];
            start += end + 2;
            self.record(record)?;
        }
        Ok(start)
    }

    fn record(&mut self, record: &[u8]) -> Result<(), String> {
        let quote = || String::from_utf8_lossy(&record[..record.len().min(200)]).into_owned();
        if self.result.is_some() {
            return Err(format!("a record after the result: {}", quote()));
        }
        let Some(json) = record.strip_prefix(b"data: ") else {
            return Err(format!("not a data record: {}", quote()));
        };
        match serde_json::from_slice::<Record>(json) {
            Ok(Record {
                message: Some(message),
                result: None,
            }) if message.i == self.next => self.next += 1,
            Ok(Record {
                message: Some(message),
                result: None,
            }) => return Err(format!("chunk {}: {{\"i\":{}}}", self.next, message.i)),
            Ok(Record {
                message: None,
                result: Some(value),
            }) => self.result = Some(value),
            _ => return Err(format!("record {}", quote())),
        }
        Ok(())
    }
}

/// The next data frame of `body`, trailers skipped; `None` at its end.
async fn next_data(body: &mut Incoming) -> Result<Option<hyper::body::Bytes>, String> {
    loop {
        let frame = poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            None => return Ok(None),
            Some(Err(error)) => return Err(error.to_string()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// All of `body`.
async fn read_all(body: &mut Incoming) -> Result<Vec<u8>, String> {
    let mut all = Vec::new();
    while let Some(data) = next_data(body).await? {
        all.extend_from_slice(&data);
    }
    Ok(all)
}

/// Runs `total` requests, `concurrency` at a time, one connection each (opened by the first
/// batch, kept by the next; another opened after an error); returns the number of errors.
async fn batch(
    target: &Arc<Target>,
    connections: &mut Vec<Option<SendRequest<String>>>,
    total: u64,
    first_error: &Arc<Mutex<Option<String>>>,
) -> u64 {
    let started = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = connections
        .drain(..)
        .map(|mut connection| {
            let target = Arc::clone(target);
            let (started, errors, first_error) = (
                Arc::clone(&started),
                Arc::clone(&errors),
                Arc::clone(first_error),
            );
            tokio::spawn(async move {
                while started.fetch_add(1, Ordering::Relaxed) < total {
                    let outcome = match connection.as_mut() {
                        Some(sender) => one(sender, &target).await,
                        None => match connect(&target).await {
                            Ok(sender) => one(connection.insert(sender), &target).await,
                            Err(problem) => Err(problem),
                        },
                    };
                    if let Err(problem) = outcome {
                        connection = None;
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().await.get_or_insert(problem);
                    }
                }
                connection
            })
        })
        .collect();
    for worker in workers {
        match worker.await {
            Ok(connection) => connections.push(connection),
            Err(_) => {
                connections.push(None);
                errors.fetch_add(1, Ordering::Relaxed);
            }
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
    let Some(target) = Target::parse(url, n) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let target = Arc::new(target);
    let rt = benches::runtime();
    let (errors, seconds, first_error) = rt.block_on(async move {
        let first_error = Arc::new(Mutex::new(None));
        let mut connections: Vec<_> = (0..concurrency).map(|_| None).collect();
        batch(&target, &mut connections, warmup, &first_error).await;
        *first_error.lock().await = None;
        let begin = Instant::now();
        let errors = batch(&target, &mut connections, requests, &first_error).await;
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
