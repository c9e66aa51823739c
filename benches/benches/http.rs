//! `bidi-http` against raw axum handlers on the same wire, in the same run: both servers on
//! 127.0.0.1 in this process, on the benchmarks' two-worker runtime, with the client.
//!
//! ```sh
//! cargo bench -p benches --bench http
//! ```
//!
//! - `http_sse`: one `POST ?stream=true` streaming 100,000 chunks `{"i":k}` then the result,
//!   read to its end by `reqwest` counting records. `bidi_http` is the `stream` flow at
//!   `/bidi-flow/stream`; `raw_axum` is axum's `Sse` over the same chunks (no task, no channel,
//!   one body frame per record); `raw_axum_batched` gathers the same records into 16 KiB body
//!   frames, as `bidi-http` does: the wire's ceiling.
//! - `http_ws`: round trips on one open WebSocket: send `{"type":"send","input":"x"}`, read the
//!   `chunk` frame and then `turn_end`. `bidi_http` is the `echo` flow; `raw_axum` an axum
//!   WebSocket handler answering each message with the same two frames; `raw_axum_writer_task`
//!   the same handler with a writer task of its own: what one task hop costs per round trip
//!   (bidi-http had this layout, plus the action's task, until its socket's task came to run
//!   the action, read and write in one `select!`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use benches::http::{read_stream, serve_bidi, serve_raw};
use benches::{in_task, on_worker, runtime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_tungstenite::tungstenite::Message;

const CHUNKS: u64 = 100_000;

fn sse(c: &mut Criterion) {
    let rt = runtime();
    let (bidi, raw) = on_worker(&rt, async { (serve_bidi().await, serve_raw().await) });
    let client = reqwest::Client::new();
    let mut group = c.benchmark_group("http_sse");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(CHUNKS));
    for (name, url) in [
        ("bidi_http", format!("http://{bidi}/bidi-flow/stream")),
        ("raw_axum", format!("http://{raw}/raw/stream")),
        (
            "raw_axum_batched",
            format!("http://{raw}/raw/stream-batched"),
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let (client, url) = (client.clone(), url.clone());
                in_task(&rt, iters, move || {
                    let (client, url) = (client.clone(), url.clone());
                    async move {
                        read_stream(&client, &url, CHUNKS).await;
                    }
                })
            });
        });
    }
    group.finish();
}

/// Times `iters` round trips on a fresh socket to `url` (`init` first for bidi-http, `close`
/// after); the connecting and closing are not timed.
async fn round_trips(url: String, bidi: bool, iters: u64) -> Duration {
    let (mut socket, _) = tokio_tungstenite::connect_async_with_config(url.as_str(), None, true)
        .await
        .expect("connect");
    if bidi {
        socket
            .send(Message::text(r#"{"type":"init"}"#))
            .await
            .expect("init");
    }
    let send = Message::text(r#"{"type":"send","input":"x"}"#);
    let start = Instant::now();
    for _ in 0..iters {
        socket.send(send.clone()).await.expect("send");
        let mut chunks = 0;
        loop {
            let message = socket.next().await.expect("a frame").expect("a frame");
            let text = message.to_text().expect("text");
            if text == r#"{"type":"turn_end"}"# {
                break;
            }
            assert_eq!(text, r#"{"type":"chunk","chunk":"x"}"#);
            chunks += 1;
        }
        assert_eq!(chunks, 1);
    }
    let elapsed = start.elapsed();
    if bidi {
        socket
            .send(Message::text(r#"{"type":"close"}"#))
            .await
            .expect("close");
        let output = socket.next().await.expect("output").expect("output");
        assert_eq!(
            output.to_text().expect("text"),
            format!(r#"{{"type":"output","output":{iters}}}"#)
        );
    }
    let _ = socket.close(None).await;
    elapsed
}

fn ws(c: &mut Criterion) {
    let rt = runtime();
    let (bidi, raw): (SocketAddr, SocketAddr) =
        on_worker(&rt, async { (serve_bidi().await, serve_raw().await) });
    let mut group = c.benchmark_group("http_ws");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(1));
    for (name, url, is_bidi) in [
        ("bidi_http", format!("ws://{bidi}/bidi-flow/echo"), true),
        ("raw_axum", format!("ws://{raw}/raw/echo"), false),
        (
            "raw_axum_writer_task",
            format!("ws://{raw}/raw/echo-task"),
            false,
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| on_worker(&rt, round_trips(url.clone(), is_bidi, iters)));
        });
    }
    group.finish();
}

criterion_group!(benches, sse, ws);
criterion_main!(benches);
