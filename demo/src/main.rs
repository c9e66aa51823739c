//! `bidi-demo`: serves bidi's flows and agents over every wire bidi-http speaks, sessions in a
//! SQLite file; with `--acp`, the assistant over ACP on stdio, for editors, on the same file.
//!
//! ```sh
//! cargo run -p bidi-demo                                # 127.0.0.1:8080
//! cargo run -p bidi-demo -- --addr 127.0.0.1:9000 --db demo.sqlite3
//! cargo run -p bidi-demo -- --acp --db demo.sqlite3     # ACP on stdin and stdout
//! ```
//!
//! It serves `echo` (a streaming flow), `chat` (a multi-turn agent) and `assistant`, an LLM
//! agent with a tool that runs once the user approves it (`save_note`), one that just runs
//! (`word_count`), and any tools its client declares and runs itself. The assistant's sessions
//! are one whichever wire takes their turns: execute (SSE), Genkit's agent and flow wires,
//! WebSocket, the AI SDK's UI message stream, AG-UI, A2A, MCP, and ACP from another process on
//! the same file. The model is an
//! OpenAI-compatible one when `OPENAI_BASE_URL` and `OPENAI_API_KEY` are set (`OPENAI_MODEL`,
//! default `gpt-4o-mini`), else a demo model that needs no service: it calls the tool a message
//! names (else the last one offered) and reports the result. The first line on stdout is
//! `listening on http://{addr}`; the address of each wire and commands to try follow. With
//! `--acp`, stdout carries protocol lines only, and what it serves is said on stderr.
//!
//! Spans go to the Dev UI, and over OTLP to a collector when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! names one (see `telemetry.rs`):
//!
//! ```sh
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=notes cargo run -p bidi-demo
//! ```

mod telemetry;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use bidi_http::Server;
use bidi_http::traces::Traces;
use bidi_llm::LlmAgent;
use bidi_llm::testing::DemoModel;
use bidi_session::{SessionStore, SqliteStore};
use clap::Parser;
use telemetry::Telemetry;

/// Serves bidi's flows and agents over HTTP, sessions in a SQLite file; or, with --acp, the
/// assistant over ACP on stdin and stdout, on the same sessions.
///
/// OPENAI_BASE_URL and OPENAI_API_KEY (and OPENAI_MODEL, default gpt-4o-mini) make the
/// assistant an OpenAI-compatible model instead of the demo model.
#[derive(Debug, Parser)]
#[command(name = "bidi-demo")]
struct Args {
    /// The address to listen on; anything but loopback serves other machines.
    #[arg(long, default_value_t = bidi_http::DEFAULT_ADDR)]
    addr: SocketAddr,
    /// The SQLite file sessions are kept in.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("bidi-demo.sqlite3"))]
    db: PathBuf,
    /// The file the assistant's save_note tool appends to.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("bidi-demo-notes.txt"))]
    notes: PathBuf,
    /// Serve the assistant over ACP (the Agent Client Protocol) on stdin and stdout instead,
    /// for an editor that starts it: its sessions are the HTTP server's (same --db).
    #[arg(long, conflicts_with = "addr")]
    acp: bool,
}

/// The assistant: on an OpenAI-compatible model when the environment names one, else on the
/// demo model.
fn assistant(store: Arc<dyn SessionStore>, notes: PathBuf) -> LlmAgent {
    let named = std::env::var("OPENAI_BASE_URL")
        .ok()
        .zip(std::env::var("OPENAI_API_KEY").ok());
    #[cfg(feature = "openai")]
    if let Some((base, key)) = named {
        let name = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        eprintln!("model: {name} at {base}");
        let model = bidi_llm::OpenAiModel::new(base, name).api_key(key);
        return bidi_demo::assistant(model, store, notes);
    }
    #[cfg(not(feature = "openai"))]
    if named.is_some() {
        eprintln!("model: demo (this build has no OpenAI support: build with feature `openai`)");
        return bidi_demo::assistant(DemoModel, store, notes);
    }
    eprintln!("model: demo (set OPENAI_BASE_URL and OPENAI_API_KEY for a real one)");
    bidi_demo::assistant(DemoModel, store, notes)
}

#[tokio::main]
async fn main() -> ExitCode {
    // A wrong command line exits with 2 and the reason.
    let args = Args::parse();
    let store: Arc<dyn SessionStore> = match SqliteStore::open(&args.db).await {
        Ok(store) => Arc::new(store),
        Err(error) => {
            eprintln!(
                "error: cannot open the sessions in {}: {error}",
                args.db.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let assistant = assistant(Arc::clone(&store), args.notes.clone());
    if args.acp {
        let telemetry = match Telemetry::install(None::<Traces>) {
            Ok(telemetry) => telemetry,
            Err(error) => return failed(&error),
        };
        let served = acp(assistant, &args.db).await;
        telemetry.shutdown();
        return served;
    }
    http(&args, store, assistant).await
}

/// Says `error`, and fails.
fn failed(error: &str) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// Serves the assistant over ACP on stdin and stdout until stdin ends.
async fn acp(assistant: LlmAgent, db: &Path) -> ExitCode {
    eprintln!(
        "serving the assistant over ACP on stdin and stdout; sessions: {} (bidi-demo --db {0} \
         serves them over HTTP)",
        db.display()
    );
    match bidi_demo::acp(assistant).serve_stdio().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: reading stdin failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Serves the flows and agents over HTTP until Ctrl-C.
async fn http(args: &Args, store: Arc<dyn SessionStore>, assistant: LlmAgent) -> ExitCode {
    let registry = match bidi_demo::registry(store, &assistant) {
        Ok(registry) => registry,
        Err(error) => return failed(&error.to_string()),
    };
    // The Dev UI at /dev/, with the spans of every connection kept for its traces.
    let traces = Traces::new();
    let telemetry = match Telemetry::install(Some(traces.clone())) {
        Ok(telemetry) => telemetry,
        Err(error) => return failed(&error),
    };
    if let Some(endpoint) = telemetry.exporting() {
        eprintln!("spans: {endpoint} (OTLP)");
    }
    let server = Server::new(registry.clone())
        .agent(&assistant)
        .protocol(bidi_devui::DevUi::new(traces.clone()))
        .protocol(bidi_agui::AgUi::new())
        .protocol(bidi_ai_sdk::Chat::new())
        .protocol(bidi_a2a::A2a::new())
        .protocol(bidi_genkit::agent::AgentWire::new())
        // Genkit's tools, under `genkit start` (GENKIT_ENV=dev), see the Dev UI's spans too.
        .protocol(bidi_genkit::reflection::Reflection::in_dev().traces(traces))
        .protocol(bidi_mcp::McpServer::new(registry))
        .addr(args.addr);
    let bound = match server.bind().await {
        Ok(bound) => bound,
        Err(error) => {
            eprintln!(
                "error: cannot listen on {}: {error} (another address: --addr)",
                args.addr
            );
            return ExitCode::FAILURE;
        }
    };
    let addr = match bound.local_addr() {
        Ok(addr) => addr,
        Err(error) => return failed(&error.to_string()),
    };
    println!("listening on http://{addr}");
    eprintln!("sessions: {}", args.db.display());
    eprintln!("notes: {}", args.notes.display());
    hints(addr, &args.db);
    let served = bound
        .serve_with_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    telemetry.shutdown();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: serving stopped: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Where each wire is, and what to try, for a person at a terminal: not worth dying for if
/// nobody reads stdout.
fn hints(addr: SocketAddr, db: &Path) {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("bidi-demo"));
    let (exe, db) = (exe.display(), db.display());
    let _ = writeln!(
        std::io::stdout(),
        r#"
The assistant over every wire, one conversation per session whichever wire takes its turns:
  Dev UI               http://{addr}/dev/
  execute (SSE)        POST http://{addr}/agent/assistant/execute
  Genkit agent wire    POST http://{addr}/agent/assistant/genkit   (remoteAgent, genkit/beta/client)
  Genkit flow wire     POST http://{addr}/agent/assistant          (runFlow, streamFlow; also /bidi-flow/echo, /agent/chat)
  WebSocket            ws://{addr}/agent/assistant                 (also /bidi-flow/echo, /agent/chat)
  AI SDK UI messages   POST http://{addr}/agent/assistant/chat     (useChat's DefaultChatTransport)
  AG-UI                POST http://{addr}/agent/assistant/ag-ui    (HttpAgent, CopilotKit)
  A2A                  http://{addr}/agent/assistant/a2a           (ClientFactory.createFromUrl)
  MCP                  http://{addr}/mcp                           (streamable HTTP: the flows and agents as tools)
  ACP                  {exe} --acp --db {db}   (stdio, for editors)

Open http://{addr}/dev/ in a browser to run the flows and agents, or try:

# a flow, streamed word by word
curl -sN 'http://{addr}/bidi-flow/echo?stream=true' -d '{{"data":"hello there","init":"> "}}'
# the assistant asks before it saves a note...
curl -sN http://{addr}/agent/assistant/execute -d '{{"sessionId":"notes","input":{{"content":"save_note buy milk"}},"context":{{}}}}'
# ...and saves it once approved (the call's id is in the awaiting_approval event)
curl -sN http://{addr}/agent/assistant/execute -d '{{"sessionId":"notes","input":{{"approvals":[{{"toolCallId":"call-1","approved":true}}]}}}}'"#
    );
}
