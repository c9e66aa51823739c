//! The benchmarks' flows served by `bidi-http` in a process of their own, for load clients and
//! for the memory measure of `http_streams`.
//!
//! ```sh
//! cargo run --release -p benches --bin http-server -- [port]
//! ```
//!
//! Listens on 127.0.0.1:`port` (default 0: any free port), prints `http://127.0.0.1:<port>` and
//! serves until killed:
//!
//! - `POST /bidi-flow/{stream,echo,hold}`, `GET /bidi-flow/…` (WebSocket): the flows of
//!   `benches::http::registry`, served by `bidi_http::Server::router`;
//! - `POST /raw/stream`, `GET /raw/echo`: the raw axum baseline of the same wire;
//! - `GET /stats`: `{"tasks":alive tokio tasks,"rss":resident bytes}` of this process.
//!
//! Runs on the benchmarks' two-worker runtime (`W=<n>` sets another number of workers).

use std::net::SocketAddr;

use axum::Json;
use axum::routing::get;
use axum::serve::ListenerExt as _;
use benches::http::{raw_router, registry, rss_bytes};
use serde_json::{Value, json};

async fn stats() -> Json<Value> {
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    Json(json!({"tasks": tasks, "rss": rss_bytes()}))
}

fn main() -> std::io::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        None => 0,
        Some(arg) => arg.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("usage: http-server [port]; `{arg}` is not a port"),
            )
        })?,
    };
    let rt = benches::runtime();
    rt.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        println!("http://{}", listener.local_addr()?);
        // As `bidi_http::Bound::serve` does: small records and frames go out at once.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let app = bidi_http::Server::new(registry())
            .router()
            .merge(raw_router())
            .route("/stats", get(stats));
        axum::serve(listener, app).await
    })
}
