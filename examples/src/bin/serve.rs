//! Serves the example flows and agents over HTTP with `bidi-http`: Genkit's flow wire (JSON and
//! SSE), WebSocket, the agent execute endpoints, AG-UI and the AI SDK's UI message stream, with
//! sessions in SQLite (or PostgreSQL); and a chat page at `/` that talks AG-UI or the UI message
//! stream from a browser (no build step: `examples/src/page.html`).
//!
//! ```sh
//! cargo run -p examples --bin serve                              # 127.0.0.1:8080, SQLite
//! cargo run -p examples --bin serve -- --addr 127.0.0.1:9000     # another port
//! cargo run -p examples --bin serve -- --postgres postgres://..  # sessions in PostgreSQL
//! cargo run -p examples --bin serve -- --cors http://localhost:3000  # pages of that origin may call it
//! ```
//!
//! It serves `/bidi-flow/echo` (init: a prefix; input: a line; a chunk per word), `/agent/chat`
//! (a multi-turn agent; init `{"sessionId": ".."}`) and `/agent/assistant`, an LLM agent loop:
//! an OpenAI-compatible model when `OPENAI_BASE_URL` and `OPENAI_API_KEY` are set
//! (`OPENAI_MODEL`, default `gpt-4o-mini`), else a demo model that calls the client's tools.
//! The first line on stdout is `listening on http://{addr}`; ready-to-paste `curl` commands
//! follow.
//!
//! Several processes on one PostgreSQL database serve the same sessions: start two on two ports
//! and resume on one a session started on the other.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bidi_agent::Agent;
use bidi_core::BoxError;
use bidi_flow::{BidiFlow, Registry};
use bidi_http::{Cors, Server};
use bidi_llm::{LlmAgent, OpenAiModel};
use bidi_session::{PostgresStore, SessionStore, SqliteStore};
use clap::Parser;
use examples::{DemoModel, chat, echo};

/// Serves the example flows over HTTP.
#[derive(Debug, Parser)]
struct Args {
    /// The address to listen on. Anything but loopback serves other machines.
    #[arg(long, default_value_t = bidi_http::DEFAULT_ADDR)]
    addr: SocketAddr,
    /// The SQLite file sessions are kept in.
    #[arg(long, env = "BIDI_SERVE_DB", default_value_os_t = std::env::temp_dir().join("bidi-serve.sqlite3"))]
    db: PathBuf,
    /// Keep sessions in this PostgreSQL database instead (a libpq URL or key=value string).
    #[arg(long, env = "BIDI_POSTGRES_URL")]
    postgres: Option<String>,
    /// Let pages of these origins call the server from a browser (CORS), like
    /// `--cors http://localhost:3000`; repeat it or separate origins with commas; `*` for any.
    #[arg(long, value_delimiter = ',')]
    cors: Vec<String>,
}

/// The LLM agent: a real model when the environment names one, else the demo model.
fn assistant(store: Arc<dyn SessionStore>) -> LlmAgent {
    if let (Ok(base), Ok(key)) = (
        std::env::var("OPENAI_BASE_URL"),
        std::env::var("OPENAI_API_KEY"),
    ) {
        let name = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        eprintln!("model: {name} at {base}");
        let model = OpenAiModel::new(base, name).api_key(key);
        return LlmAgent::builder("assistant", model).store(store).build();
    }
    eprintln!("model: demo (set OPENAI_BASE_URL and OPENAI_API_KEY for a real one)");
    LlmAgent::builder("assistant", DemoModel)
        .store(store)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let store: Arc<dyn SessionStore> = match &args.postgres {
        Some(url) => Arc::new(PostgresStore::connect(url).await?),
        None => Arc::new(SqliteStore::open(&args.db).await?),
    };
    let registry = Registry::new();
    registry.register(BidiFlow::new("echo", echo).with_description("Echoes each word"))?;
    registry.register(
        Agent::builder("chat")
            .description("Remembers what you said")
            .store(Arc::clone(&store))
            .build(chat)
            .into_flow(),
    )?;
    let assistant = assistant(store);
    registry.register(assistant.agent().clone().into_flow())?;

    // bidi's routes, and the page next to them.
    let mut server = Server::new(registry)
        .agent(&assistant)
        .protocol(bidi_agui::AgUi::new())
        .protocol(bidi_ai_sdk::Chat::new())
        .protocol(bidi_a2a::A2a::new())
        .protocol(bidi_genkit::agent::AgentWire::new())
        .routes(axum::Router::new().route("/", axum::routing::get(page)))
        .addr(args.addr);
    if !args.cors.is_empty() {
        server = server.cors(Cors::origins(&args.cors)?);
    }
    let bound = server.bind().await?;
    let addr = bound.local_addr()?;
    println!("listening on http://{addr}");
    match &args.postgres {
        Some(_) => eprintln!("sessions: PostgreSQL"),
        None => eprintln!("sessions: {}", args.db.display()),
    }
    // Help for a person at a terminal: not worth dying for if nobody reads stdout any more.
    let _ = writeln!(
        std::io::stdout(),
        r#"
# the actions
curl -s http://{addr}/actions
# one run, then the same streamed (Genkit's flow wire)
curl -s http://{addr}/bidi-flow/echo -d '{{"data":"hello there","init":"> "}}'
curl -sN 'http://{addr}/bidi-flow/echo?stream=true' -d '{{"data":"hello there","init":"> "}}'
# a multi-turn agent, one turn per request
curl -s http://{addr}/agent/chat -d '{{"data":"hi","init":{{"sessionId":"demo"}}}}'
# the LLM agent: a tool the client runs, then its result
curl -sN http://{addr}/agent/assistant/execute -d '{{"sessionId":"trip","input":{{"content":"Book Oslo"}},"context":{{"tools":[{{"name":"book","description":"Books a trip","parameters":{{"type":"object"}}}}]}}}}'
curl -sN http://{addr}/agent/assistant/execute -d '{{"sessionId":"trip","input":[{{"toolCallId":"call-1","toolName":"book","content":"booked","isError":false}}]}}'
curl -s http://{addr}/agent/assistant/session/trip
# full duplex: a WebSocket at ws://{addr}/bidi-flow/echo, frames {{"type":"init"|"send"|"close"|"cancel",..}}
# a chat page over AG-UI or the UI message stream: open http://{addr}/"#
    );
    bound
        .serve_with_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// The chat page.
async fn page() -> axum::response::Html<&'static str> {
    axum::response::Html(include_str!("../page.html"))
}
