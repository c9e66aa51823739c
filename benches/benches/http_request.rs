//! One HTTP request's cost in the server, without a socket: the router called as a service
//! (`tower_service::Service::call`) and its answer read whole, `bidi-http`'s flow wire against
//! the raw axum handler of the same wire, in one run.
//!
//! ```sh
//! cargo bench -p benches --bench http_request                  # criterion's functions, then interleaved rounds
//! cargo bench -p benches --bench http_request -- interleaved   # the interleaved rounds alone
//! ```
//!
//! `POST /bidi-flow/stream` with `{"data":{"n":1}}` and `Accept: text/event-stream` (one chunk,
//! then the result, as SSE) against axum's `Sse` at `/raw/stream`: what a request costs beyond
//! hyper and the kernel (which `http-load` measures with them), that is, the routing, the
//! layers, the handler and the body.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use benches::http::{raw_router, registry};
use benches::{in_task, interleave, median, on_worker, runtime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tower_service::Service as _;

/// The request body: one chunk.
const BODY: &str = r#"{"data":{"n":1}}"#;

/// One request to `router` at `path`, its body read whole and checked.
async fn request(router: &mut Router, path: &'static str) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(Body::from(BODY))
        .expect("a request");
    let response = router.call(request).await.expect("infallible");
    assert_eq!(response.status(), 200);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    assert!(body.ends_with(b"data: {\"result\":1}\n\n"), "{body:?}");
}

/// The two sides: bidi's flow and the raw axum handler.
fn sides() -> [(&'static str, Router, &'static str); 2] {
    [
        (
            "bidi_http",
            bidi_http::Server::new(registry()).router(),
            "/bidi-flow/stream",
        ),
        ("raw_axum", raw_router(), "/raw/stream"),
    ]
}

fn requests(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("http_request");
    group.throughput(Throughput::Elements(1));
    for (name, router, path) in sides() {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let router = router.clone();
                in_task(&rt, iters, move || {
                    let mut router = router.clone();
                    async move { request(&mut router, path).await }
                })
            });
        });
    }
    group.finish();
}

/// How many rounds the interleaved run takes, and the requests of each side in a round.
const ROUNDS: usize = 200;
const REQUESTS: u32 = 2_000;

/// Both sides in turn, `REQUESTS` requests each a round, `ROUNDS` rounds: the median of the
/// rounds' ratios (raw axum's time over bidi's), steadier on a drifting VM than criterion's
/// functions, measured one after another.
fn interleaved(_c: &mut Criterion) {
    let rt = runtime();
    let took: Vec<[Duration; 2]> = on_worker(&rt, async move {
        let sides = sides();
        interleave(ROUNDS, |i| {
            // A clone of the router a round (an `Arc`), as a service is called.
            let (_, mut router, path) = sides[i].clone();
            async move {
                for _ in 0..REQUESTS {
                    request(&mut router, path).await;
                }
            }
        })
        .await
    });
    let per_request = |i: usize| {
        median(
            took.iter()
                .map(|t| t[i].as_secs_f64() * 1e6 / f64::from(REQUESTS))
                .collect(),
        )
    };
    let ratio = median(
        took.iter()
            .map(|t| t[1].as_secs_f64() / t[0].as_secs_f64())
            .collect(),
    );
    println!(
        "http_request/interleaved ({ROUNDS} rounds of {REQUESTS}): bidi_http {:.2} µs, raw_axum {:.2} µs; median ratio raw_axum/bidi_http {ratio:.2}",
        per_request(0),
        per_request(1),
    );
}

criterion_group!(benches, requests, interleaved);
criterion_main!(benches);
