//! An MCP `tools/call` round trip against rmcp's own server, in the same run: the same tool
//! (upper-case a text, answered as `{"text": ...}` in text and `structuredContent`), once a
//! `#[tool]` method of an rmcp `ToolRouter` server (the raw baseline) and once a bidi flow
//! served by `bidi_mcp::McpServer`. rmcp's client calls both, one call at a time.
//!
//! ```sh
//! cargo bench -p benches --bench mcp                  # criterion's functions, then the interleaved rounds
//! cargo bench -p benches --bench mcp -- interleaved   # the interleaved rounds alone
//! ```
//!
//! Two transports: streamable HTTP on 127.0.0.1 (`http/*`: rmcp's `StreamableHttpService` under
//! `axum::serve`, against bidi's `McpServer` served by a `Server`, both with `TCP_NODELAY`; the
//! client is rmcp's reqwest transport, one session each), and an in-process byte pipe (`duplex/*`:
//! `tokio::io::duplex`, newline-delimited JSON-RPC as over stdio, no process boundary). Each
//! also times a bidi agent tool call (`LlmAgent` whose model answers one word, a new session
//! per call), and one answering a hundred words streamed as progress (`bidi_agent_100_words`,
//! criterion's functions only): no rmcp counterpart, shown for scale.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt as _;
use benches::{Words, in_task, interleave, median, on_worker, runtime};
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use bidi_llm::LlmAgent;
use bidi_mcp::{McpServer, StreamableHttpServerConfig, StreamableHttpService};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, ClientConfig, ServerCapabilities, ServerConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{Json, RoleClient, ServerHandler, ServiceExt as _, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The text every call upper-cases.
const TEXT: &str = "the quick brown fox jumps over the lazy dog";

/// What the tool takes.
#[derive(Deserialize, schemars::JsonSchema)]
struct Shout {
    /// The text to upper-case.
    text: String,
}

/// What the tool answers.
#[derive(Serialize, schemars::JsonSchema)]
struct Shouted {
    /// The text, upper-cased.
    text: String,
}

/// The raw baseline: the tool as rmcp's macros serve it.
#[derive(Clone)]
struct Raw {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Raw {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    /// Upper-cases a text.
    #[tool(name = "upper")]
    async fn upper(&self, Parameters(Shout { text }): Parameters<Shout>) -> Json<Shouted> {
        Json(Shouted {
            text: text.to_uppercase(),
        })
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Raw {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The same tool as a bidi flow.
async fn upper(
    _ctx: ActionContext,
    _init: (),
    mut inbound: Inbound<Shout>,
    _out: Outbound<String>,
) -> Result<Shouted, BoxError> {
    let Shout { text } = inbound.recv().await.ok_or("no input")?;
    Ok(Shouted {
        text: text.to_uppercase(),
    })
}

/// The flow `upper`, the agent `words` answering one word, and the agent `words100` answering
/// a hundred.
fn bidi() -> (Registry, [LlmAgent; 2]) {
    let registry = Registry::new();
    registry
        .register(BidiFlow::new("upper", upper).with_description("Upper-cases a text"))
        .expect("a new key");
    let agents = [
        LlmAgent::builder("words", Words(1)).build(),
        LlmAgent::builder("words100", Words(100)).build(),
    ];
    (registry, agents)
}

/// rmcp's streamable HTTP service over [`Raw`] at `/mcp`, under `axum::serve` on a free port
/// of 127.0.0.1, its sockets with `TCP_NODELAY` as bidi's server sets it.
async fn serve_raw() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let service: StreamableHttpService<Raw, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Raw::new()),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().route_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// bidi's server with `/mcp`, as a user mounts it.
async fn serve_bidi() -> SocketAddr {
    let (registry, [agent, long]) = bidi();
    let server = bidi_http::Server::new(registry.clone())
        .agent(&agent)
        .agent(&long)
        .protocol(bidi_mcp::McpServer::new(registry));
    benches::http::serve(server).await
}

type Client = RunningService<RoleClient, ClientConfig>;

/// rmcp's client of the MCP endpoint at `addr`, initialized.
async fn http_client(addr: SocketAddr) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(format!("http://{addr}/mcp"));
    ClientConfig::default()
        .serve(transport)
        .await
        .expect("initialized")
}

/// rmcp's client of `server` served on the other end of an in-process pipe, initialized.
async fn duplex_client<S: ServerHandler>(server: S) -> Client {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(theirs).await {
            let _ = running.waiting().await;
        }
    });
    ClientConfig::default()
        .serve(ours)
        .await
        .expect("initialized")
}

/// What a side calls.
#[derive(Clone, Copy)]
enum Tool {
    /// `upper`, on either side.
    Upper,
    /// bidi's agent `words`.
    Agent,
    /// bidi's agent `words100`: its text streams as progress (rmcp's client sends a
    /// `progressToken` with every call).
    Agent100,
}

/// One `tools/call`, its answer checked.
async fn call(client: &Client, tool: Tool) {
    let (name, arguments) = match tool {
        Tool::Upper => ("upper", json!({ "text": TEXT })),
        Tool::Agent => ("words", json!({ "message": "go" })),
        Tool::Agent100 => ("words100", json!({ "message": "go" })),
    };
    let Value::Object(arguments) = arguments else {
        unreachable!("an object")
    };
    let result = client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .expect("an answer");
    assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
    let structured = result.structured_content.unwrap_or_default();
    match tool {
        Tool::Upper => assert_eq!(structured["text"], TEXT.to_uppercase()),
        Tool::Agent => assert_eq!(structured["text"], "word "),
        Tool::Agent100 => assert_eq!(structured["text"], "word ".repeat(100)),
    }
}

/// The clients of one transport: rmcp's server, then bidi's (its flow and its agent share
/// one client).
async fn clients(transport: &str) -> (Client, Client) {
    match transport {
        "http" => (
            http_client(serve_raw().await).await,
            http_client(serve_bidi().await).await,
        ),
        _ => {
            let (registry, [agent, long]) = bidi();
            (
                duplex_client(Raw::new()).await,
                duplex_client(McpServer::new(registry).agent(&agent).agent(&long)).await,
            )
        }
    }
}

fn calls(c: &mut Criterion) {
    let rt = runtime();
    for transport in ["http", "duplex"] {
        let (raw, bidi) = on_worker(&rt, clients(transport));
        let (raw, bidi) = (Arc::new(raw), Arc::new(bidi));
        let mut group = c.benchmark_group(transport);
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(6));
        group.warm_up_time(Duration::from_secs(1));
        group.throughput(Throughput::Elements(1));
        for (name, client, tool) in [
            ("rmcp_tool", &raw, Tool::Upper),
            ("bidi_flow", &bidi, Tool::Upper),
            ("bidi_agent", &bidi, Tool::Agent),
            ("bidi_agent_100_words", &bidi, Tool::Agent100),
        ] {
            group.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let client = Arc::clone(client);
                    in_task(&rt, iters, move || {
                        let client = Arc::clone(&client);
                        async move { call(&client, tool).await }
                    })
                });
            });
        }
        group.finish();
    }
}

/// How many rounds the interleaved runs take, and the calls of each side in a round.
const ROUNDS: usize = 300;
const CALLS: u32 = 20;

/// rmcp's tool and bidi's flow (and agent) in turn, `CALLS` calls each a round, `ROUNDS`
/// rounds: the ratio of each round's rates, and their median. On a VM whose speed drifts by
/// ±20% over minutes, ratios from calls interleaved this way are steadier than those of
/// criterion's functions, measured one after another.
fn interleaved(_c: &mut Criterion) {
    let rt = runtime();
    for transport in ["http", "duplex"] {
        let (raw, bidi) = on_worker(&rt, clients(transport));
        let rounds = on_worker(&rt, async move {
            let sides = [
                (&raw, Tool::Upper),
                (&bidi, Tool::Upper),
                (&bidi, Tool::Agent),
            ];
            interleave(ROUNDS, |i| {
                let (client, tool) = sides[i];
                async move {
                    for _ in 0..CALLS {
                        call(client, tool).await;
                    }
                }
            })
            .await
        });
        report(transport, &rounds);
    }
}

/// Prints the median round's rates and the median of the rounds' ratios to rmcp's.
fn report(transport: &str, rounds: &[[Duration; 3]]) {
    let rate = |took: Duration| f64::from(CALLS) / took.as_secs_f64() / 1e3;
    let rates = |i: usize| median(rounds.iter().map(|took| rate(took[i])).collect());
    let ratio = |i: usize| {
        median(
            rounds
                .iter()
                .map(|took| took[0].as_secs_f64() / took[i].as_secs_f64())
                .collect(),
        )
    };
    let per_call = |i: usize| 1e3 / rates(i);
    println!(
        "mcp/interleaved/{transport} ({ROUNDS} rounds of {CALLS} calls): rmcp_tool {:.1} k/s ({:.1} µs), bidi_flow {:.1} k/s ({:.1} µs), bidi_agent {:.1} k/s ({:.1} µs); median ratio bidi_flow/rmcp_tool {:.2}, bidi_agent/rmcp_tool {:.2}",
        rates(0),
        per_call(0),
        rates(1),
        per_call(1),
        rates(2),
        per_call(2),
        ratio(1),
        ratio(2),
    );
}

criterion_group!(benches, calls, interleaved);
criterion_main!(benches);
