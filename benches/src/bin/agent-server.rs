//! An LLM agent (`assistant`, on the demo model) served by `bidi-http` with its sessions in
//! PostgreSQL, in a process of its own: what `benches --bench scale_out` starts one, two or
//! four of on one database.
//!
//! ```sh
//! cargo run --release -p benches --bin agent-server -- <postgres-url> [port]
//! ```
//!
//! Listens on 127.0.0.1:`port` (default 0: any free port), prints `http://127.0.0.1:<port>` and
//! serves `POST /agent/assistant/execute` until killed. Runs on the benchmarks' two-worker
//! runtime (`W=<n>` sets another number of workers).

use std::net::SocketAddr;
use std::sync::Arc;

use bidi_flow::Registry;
use bidi_llm::LlmAgent;
use bidi_llm::testing::DemoModel;
use bidi_session::{PostgresStore, SessionStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: agent-server <postgres-url> [port]";
    let url = args.next().ok_or(usage)?;
    let port: u16 = match args.next() {
        None => 0,
        Some(port) => port.parse().map_err(|_| usage)?,
    };
    benches::runtime().block_on(async move {
        let store: Arc<dyn SessionStore> = Arc::new(PostgresStore::connect(&url).await?);
        let assistant = LlmAgent::builder("assistant", DemoModel)
            .store(store)
            .build();
        let bound = bidi_http::Server::new(Registry::new())
            .agent(&assistant)
            .addr(SocketAddr::from(([127, 0, 0, 1], port)))
            .bind()
            .await?;
        println!("http://{}", bound.local_addr()?);
        bound.serve().await?;
        Ok(())
    })
}
