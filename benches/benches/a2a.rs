//! An A2A `SendMessage` round trip over JSON-RPC against the A2A JS SDK's own server, in the
//! same run: the SDK's `DefaultRequestHandler` with an in-memory task store on Express
//! (`benches/peers/a2a-js`, an executor answering one word as a completed task) and bidi's
//! `A2a` wire serving an `LlmAgent` whose model answers one word (each message a new task of a
//! new context, stored in the agent's memory store, push notifications on as by default). One
//! reqwest client, keeping its connections, calls each in turn; the calls are the same JSON.
//! A third side, bidi with push notifications disabled, says what they cost a message that
//! configures none (a notifier per turn, which reads the task's configs at each change).
//!
//! The rounds alternate the sides (each round's first side is the other's next time), and the
//! figure is the median of the rounds' ratios: on a VM whose speed drifts by ±20% over minutes,
//! that is steadier than two runs one after the other.
//!
//! ```sh
//! cd benches/peers/a2a-js && npm ci && cd -   # once; the bench runs `npm ci` itself otherwise
//! cargo bench -p benches --bench a2a
//! ```

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use benches::{Words, median, on_worker, runtime};
use bidi_a2a::PushNotifications;
use bidi_flow::Registry;
use bidi_llm::LlmAgent;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

/// How many rounds, and the calls of each side in a round.
const ROUNDS: usize = 100;
const CALLS: u32 = 20;

/// bidi's server of the one-word agent, with A2A as `a2a` serves it, on a free port of
/// 127.0.0.1: its endpoint.
async fn serve_bidi(a2a: bidi_a2a::A2a) -> String {
    let agent = LlmAgent::builder("words", Words(1)).build();
    let server = bidi_http::Server::new(Registry::new())
        .agent(&agent)
        .protocol(a2a);
    let addr = benches::http::serve(server).await;
    format!("http://{addr}/agent/words/a2a")
}

/// The A2A JS SDK's server (`benches/peers/a2a-js/server.mjs`), its packages installed with
/// `npm ci` if they are not: the process, and its endpoint.
async fn serve_sdk() -> (Child, String) {
    let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/a2a-js");
    if !peer.join("node_modules/@a2a-js/sdk").exists() {
        let installed = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&peer)
            .status()
            .expect("npm");
        assert!(installed.success(), "npm ci in {}", peer.display());
    }
    let mut child = Command::new("node")
        .arg("server.mjs")
        .current_dir(&peer)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    let stdout = child.stdout.take().expect("its stdout");
    let mut lines = BufReader::new(stdout).lines();
    let url = lines
        .next_line()
        .await
        .expect("the server's first line")
        .expect("its address");
    (child, url)
}

/// One `SendMessage` to `url`, answered with a completed task.
async fn send(http: &reqwest::Client, url: &str, n: u64) {
    let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {
        "message": {"messageId": format!("m-{n}"), "role": "ROLE_USER",
                    "parts": [{"text": "hello"}]}}});
    let answer: Value = http
        .post(url)
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
}

/// The SDK's server and bidi's in turn, `CALLS` calls each a round: the median round's rates
/// and the median of the rounds' ratios.
fn interleaved(_c: &mut Criterion) {
    let rt = runtime();
    let rounds = on_worker(&rt, async {
        let (_sdk, sdk) = serve_sdk().await;
        let bidi = serve_bidi(bidi_a2a::A2a::new()).await;
        let no_push = bidi_a2a::A2a::new().push_notifications(PushNotifications::disabled());
        let quiet = serve_bidi(no_push).await;
        let http = reqwest::Client::new();
        let sides = [sdk, bidi, quiet];
        // Warm both up: connections open, JIT compiled.
        let mut n = 0;
        for _ in 0..200 {
            for url in &sides {
                n += 1;
                send(&http, url, n).await;
            }
        }
        let mut rounds = Vec::with_capacity(ROUNDS);
        for round in 0..ROUNDS {
            let mut took = [Duration::ZERO; 3];
            for step in 0..3 {
                let i = (step + round) % 3;
                let start = Instant::now();
                for _ in 0..CALLS {
                    n += 1;
                    send(&http, &sides[i], n).await;
                }
                took[i] = start.elapsed();
            }
            rounds.push(took);
        }
        rounds
    });
    let per_call = |i: usize| {
        median(
            rounds
                .iter()
                .map(|took| took[i].as_secs_f64() * 1e6 / f64::from(CALLS))
                .collect(),
        )
    };
    let ratio = |i: usize| {
        median(
            rounds
                .iter()
                .map(|took| took[0].as_secs_f64() / took[i].as_secs_f64())
                .collect(),
        )
    };
    println!(
        "a2a/interleaved ({ROUNDS} rounds of {CALLS} SendMessage calls): a2a_js_sdk {:.1} µs, \
         bidi_a2a {:.1} µs, bidi_a2a without push {:.1} µs; median ratio to the SDK (rates) \
         {:.2}, without push {:.2}",
        per_call(0),
        per_call(1),
        per_call(2),
        ratio(1),
        ratio(2),
    );
}

criterion_group!(benches, interleaved);
criterion_main!(benches);
