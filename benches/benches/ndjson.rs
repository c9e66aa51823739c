//! `bidi-ndjson` against raw tokio line reading of the same subprocess, in the same run.
//!
//! ```sh
//! cargo bench -p benches --bench ndjson
//! ```
//!
//! - `ndjson_listen`: one round of 100,000 `progress` messages then a `result`, from a process
//!   that reads the prompt and `cat`s a file of them (as fast as a pipe goes: the consumer is
//!   all that is measured). Each iteration spawns the process. `bidi_listen` is
//!   `Child::listen` with a no-op `Progress` handler; `raw_json` reads the lines with a
//!   `BufReader` and parses each with `serde_json` (what any NDJSON consumer does at least);
//!   `raw_lines` only splits the lines (the pipe's ceiling).
//! - `ndjson_round_trips`: 2,000 question → reply round trips with a Python agent that asks,
//!   reads the reply and asks again. `bidi_listen` answers with a `Question` handler; `raw` is
//!   a hand-written loop reading a line, parsing it and writing the reply line.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use benches::{on_worker, runtime};
use bidi_ndjson::{Command, Progress, Question};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

const MESSAGES: u64 = 100_000;
const ROUND_TRIPS: u64 = 2_000;

/// The agent that floods: reads the prompt, then prints the file.
const FLOOD: &str = r#"read -r prompt; cat "$0""#;

/// The agent that asks `$1` questions, each waiting for its reply.
const ASKER: &str = r#"
import json, sys
n = int(sys.argv[1])
sys.stdin.readline()
for i in range(n):
    sys.stdout.write(json.dumps({"type": "question", "id": i, "question": "go on?"}) + "\n")
    sys.stdout.flush()
    sys.stdin.readline()
sys.stdout.write('{"type":"result","text":"done"}\n')
sys.stdout.flush()
"#;

fn messages_file(dir: &Path) -> PathBuf {
    let path = dir.join("messages.ndjson");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).expect("a temp file"));
    for i in 0..MESSAGES {
        writeln!(
            file,
            "{}",
            json!({"type": "progress", "message": format!("step {i}"), "percent": i % 100})
        )
        .expect("written");
    }
    writeln!(file, r#"{{"type":"result","text":"done"}}"#).expect("written");
    file.flush().expect("flushed");
    path
}

/// How a raw consumer reads the flood.
#[derive(Clone, Copy)]
enum Raw {
    Json,
    Lines,
}

async fn raw_flood(file: &Path, raw: Raw) -> u64 {
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", FLOOD])
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("sh");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").await.expect("prompt");
    stdin.flush().await.expect("flushed");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = Vec::new();
    let mut count = 0;
    loop {
        line.clear();
        if stdout.read_until(b'\n', &mut line).await.expect("read") == 0 {
            panic!("no result");
        }
        let done = match raw {
            Raw::Json => {
                let message: Value = serde_json::from_slice(&line).expect("JSON");
                message["type"] == "result"
            }
            Raw::Lines => line.starts_with(br#"{"type":"result""#),
        };
        if done {
            break;
        }
        count += 1;
    }
    drop(stdin);
    child.wait().await.expect("exit");
    count
}

async fn bidi_flood(file: &Path) -> u64 {
    let mut child = Command::new("sh")
        .args(["-c", FLOOD])
        .arg(file)
        .spawn()
        .await
        .expect("sh");
    let mut count = 0;
    child
        .listen("go")
        .on("progress", |_: Progress| {
            count += 1;
            async {}
        })
        .await
        .expect("a result");
    child.close(Duration::from_secs(5)).await.expect("exit");
    count
}

fn listen(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = messages_file(dir.path());
    let mut group = c.benchmark_group("ndjson_listen");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(MESSAGES));
    for name in ["bidi_listen", "raw_json", "raw_lines"] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let file = file.clone();
                on_worker(&rt, async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let count = match name {
                            "bidi_listen" => bidi_flood(&file).await,
                            "raw_json" => raw_flood(&file, Raw::Json).await,
                            _ => raw_flood(&file, Raw::Lines).await,
                        };
                        assert_eq!(count, MESSAGES);
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

async fn raw_round_trips() -> u64 {
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", ASKER, &ROUND_TRIPS.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").await.expect("prompt");
    stdin.flush().await.expect("flushed");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = Vec::new();
    let mut out = Vec::new();
    let mut answered = 0;
    loop {
        line.clear();
        stdout.read_until(b'\n', &mut line).await.expect("read");
        let message: Value = serde_json::from_slice(&line).expect("JSON");
        if message["type"] == "result" {
            break;
        }
        out.clear();
        serde_json::to_writer(
            &mut out,
            &json!({"type": "response", "in_reply_to": "question", "in_reply_to_id": message["id"], "value": "yes"}),
        )
        .expect("JSON");
        out.push(b'\n');
        stdin.write_all(&out).await.expect("reply");
        stdin.flush().await.expect("flushed");
        answered += 1;
    }
    drop(stdin);
    child.wait().await.expect("exit");
    answered
}

async fn bidi_round_trips() -> u64 {
    let mut child = Command::new("python3")
        .args(["-c", ASKER, &ROUND_TRIPS.to_string()])
        .spawn()
        .await
        .expect("python3");
    let mut answered = 0;
    child
        .listen("go")
        .on("question", |_: Question| {
            answered += 1;
            async { Some("yes") }
        })
        .await
        .expect("a result");
    child.close(Duration::from_secs(5)).await.expect("exit");
    answered
}

fn round_trips(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("ndjson_round_trips");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(ROUND_TRIPS));
    for name in ["bidi_listen", "raw"] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                on_worker(&rt, async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let answered = match name {
                            "bidi_listen" => bidi_round_trips().await,
                            _ => raw_round_trips().await,
                        };
                        assert_eq!(answered, ROUND_TRIPS);
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, listen, round_trips);
criterion_main!(benches);
