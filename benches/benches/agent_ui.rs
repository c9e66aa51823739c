//! The front-end protocols against the agent's own SSE, in the same run: one `LlmAgent` whose
//! model streams a 10,000-delta answer, served by `bidi-http` on 127.0.0.1 in this process.
//!
//! ```sh
//! cargo bench -p benches --bench agent_ui
//! ```

//!
//! Each iteration is one request on a new session, its whole body read by `reqwest`:
//! `execute_sse` is `POST /agent/words/execute` (the agent's events as plain SSE JSON, one
//! record per event); `ag_ui` is `POST /agent/words/ag-ui` (AG-UI events); `ui_message_stream`
//! is `POST /agent/words/chat` (the AI SDK's UI message stream). The unit is the answer's
//! deltas.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use benches::{Words, on_worker, runtime};
use bidi_flow::Registry;
use bidi_llm::LlmAgent;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

const DELTAS: u64 = 10_000;

async fn serve() -> SocketAddr {
    let agent = LlmAgent::builder("words", Words(DELTAS)).build();
    let bound = bidi_http::Server::new(Registry::new())
        .agent(&agent)
        .protocol(bidi_agui::AgUi::new())
        .protocol(bidi_ai_sdk::Chat::new())
        .addr("127.0.0.1:0".parse().expect("an address"))
        .bind()
        .await
        .expect("bound");
    let addr = bound.local_addr().expect("its address");
    tokio::spawn(bound.serve());
    addr
}

/// The request each endpoint takes for a new session saying "go".
fn request(endpoint: &str, n: u64) -> Value {
    let id = format!("bench-{n}-{}", std::process::id());
    match endpoint {
        "execute" => json!({"sessionId": id, "input": {"content": "go"}, "context": {}}),
        "ag-ui" => json!({
            "threadId": id, "runId": "run-1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "u1", "role": "user", "content": "go"}],
        }),
        _ => json!({
            "id": id, "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
        }),
    }
}

/// Reads one response to its end; how many bytes it had.
async fn read(client: &reqwest::Client, url: &str, body: &Value) -> usize {
    let response = client
        .post(url)
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .expect("a response");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    let mut bytes = 0;
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        bytes += chunk.expect("a body").len();
    }
    // Every delta is in it: at least "word " each.
    assert!(bytes as u64 > DELTAS * 5, "{url}: {bytes} bytes");
    bytes
}

fn endpoints(c: &mut Criterion) {
    let rt = runtime();
    let addr = on_worker(&rt, serve());
    let client = reqwest::Client::new();
    let mut group = c.benchmark_group("agent_ui");
    // This VM's noise is ±20% between runs of a few seconds: more samples, longer.
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(DELTAS));
    let mut requests = 0u64;
    for (name, endpoint) in [
        ("ui_message_stream", "chat"),
        ("ag_ui", "ag-ui"),
        ("execute_sse", "execute"),
    ] {
        let url = format!("http://{addr}/agent/words/{endpoint}");
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let bodies: Vec<Value> = (0..iters)
                    .map(|_| {
                        requests += 1;
                        request(endpoint, requests)
                    })
                    .collect();
                let (client, url) = (client.clone(), url.clone());
                on_worker(&rt, async move {
                    let start = Instant::now();
                    for body in &bodies {
                        read(&client, &url, body).await;
                    }
                    start.elapsed()
                })
            });
        });
    }
    group.finish();
}

/// The three endpoints in turn, request after request, and the time each took in all: on a VM
/// whose speed drifts by ±20% over minutes, ratios from requests interleaved this way are
/// steadier than those of criterion's functions, measured one after another.
fn interleaved(_c: &mut Criterion) {
    const ROUNDS: u64 = 300;
    let rt = runtime();
    let addr = on_worker(&rt, serve());
    let client = reqwest::Client::new();
    let totals = on_worker(&rt, async move {
        let mut totals = [Duration::ZERO; 3];
        for round in 0..ROUNDS {
            for step in 0..3 {
                // Each round starts with another endpoint, so none always goes first.
                let i = (step + round as usize) % 3;
                let endpoint = ["execute", "ag-ui", "chat"][i];
                let url = format!("http://{addr}/agent/words/{endpoint}");
                let body = request(endpoint, 1_000_000 + round);
                let start = Instant::now();
                read(&client, &url, &body).await;
                totals[i] += start.elapsed();
            }
        }
        totals
    });
    let rate = |total: Duration| (ROUNDS * DELTAS) as f64 / total.as_secs_f64() / 1e6;
    let [execute, ag_ui, chat] = totals.map(rate);
    println!(
        "agent_ui/interleaved ({ROUNDS} rounds): execute_sse {execute:.2} M/s, ag_ui {ag_ui:.2} M/s ({:.2}), ui_message_stream {chat:.2} M/s ({:.2})",
        ag_ui / execute,
        chat / execute,
    );
}

criterion_group!(benches, endpoints, interleaved);
criterion_main!(benches);
