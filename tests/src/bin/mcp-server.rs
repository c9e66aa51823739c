//! A registry served as an MCP server, for `tests/mcp`'s clients: `mcp-server stdio` serves it
//! on stdin and stdout, `mcp-server http` on a free port of 127.0.0.1 at `/mcp` (printing
//! `http://127.0.0.1:{port}` as its first line).
//!
//! Its tools: `count` streams the numbers up to `upTo` and answers `{"total": upTo, "parity":
//! "even" | "odd"}` (an object, so its tool has an `outputSchema`, the parity's schema in its
//! `$defs`); `greet` takes a name and an init with a greeting, and answers a string (no
//! `outputSchema`); `slow` waits until it is cancelled, then writes the file `$MCP_MARKER`
//! (when set) with the cancel's cause; `chat` is an `LlmAgent` whose model says what it heard,
//! and what it heard before in the session; `bank`'s model calls `transfer`, which needs
//! approval; `atlas` has no model of its own (it answers with the client's, through sampling)
//! and a tool `capital`. `count` logs an `info` record as it starts.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::log::{self, Level};
use bidi_flow::{BidiFlow, Registry};
use bidi_llm::testing::Scripted;
use bidi_llm::{
    HostModel, LlmAgent, Message, Model, ModelEvent, ModelRequest, StopReason, Tool, Usage,
    simple_tool,
};
use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde::{Deserialize, Serialize};

/// What `count` takes.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Count {
    /// How far to count.
    up_to: u32,
}

/// What `count` answers.
#[derive(Serialize, schemars::JsonSchema)]
struct Total {
    total: u32,
    parity: Parity,
}

/// Whether a number is even.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Parity {
    Even,
    Odd,
}

/// Streams 1 to `upTo`, then answers the total.
async fn count(
    ctx: ActionContext,
    _init: (),
    mut inbound: Inbound<Count>,
    out: Outbound<u32>,
) -> Result<Total, BoxError> {
    let Count { up_to } = inbound.recv().await.ok_or("no input")?;
    log::record(
        &ctx,
        Level::Info,
        serde_json::json!({ "countingTo": up_to }),
    );
    if up_to > 1000 {
        return Err("counting past 1000 takes too long".into());
    }
    for n in 1..=up_to {
        out.send(n).await?;
    }
    let parity = if up_to % 2 == 0 {
        Parity::Even
    } else {
        Parity::Odd
    };
    Ok(Total {
        total: up_to,
        parity,
    })
}

/// `greet`'s init.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Greeting {
    /// The greeting word.
    greeting: String,
}

/// `{greeting}, {name}`.
async fn greet(
    _ctx: ActionContext,
    init: Greeting,
    mut inbound: Inbound<String>,
    _out: Outbound<String>,
) -> Result<String, BoxError> {
    let name = inbound.recv().await.ok_or("no input")?;
    Ok(format!("{}, {name}", init.greeting))
}

/// Waits for its cancellation and records its cause in `$MCP_MARKER`.
async fn slow(
    ctx: ActionContext,
    _init: (),
    _inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<String, BoxError> {
    out.send("started".to_owned()).await?;
    let cause = tokio::select! {
        cause = ctx.cancelled() => cause,
        () = tokio::time::sleep(Duration::from_secs(120)) => return Ok("slept".to_owned()),
    };
    if let Some(path) = std::env::var_os("MCP_MARKER") {
        std::fs::write(path, cause.to_string())?;
    }
    Err("cancelled".into())
}

/// Says what it heard last, and the user message before it in the session.
struct Echoing;

impl Model for Echoing {
    fn name(&self) -> &str {
        "echoing"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let heard: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|message| match message {
                Message::User(user) => Some(user.content.as_str()),
                _ => None,
            })
            .collect();
        let text = match heard.as_slice() {
            [.., before, last] => format!("You said: {last} (before: {before})"),
            [last] => format!("You said: {last}"),
            [] => "Hello!".to_owned(),
        };
        let mut events = vec![ModelEvent::TextStart];
        events.extend(
            text.split_inclusive(' ')
                .map(|word| ModelEvent::TextDelta(word.to_owned())),
        );
        events.push(ModelEvent::TextEnd);
        events.push(ModelEvent::Done {
            stop_reason: StopReason::Stop,
            usage: Usage::default(),
        });
        stream::iter(events).boxed()
    }
}

/// Scripted by what it reads: a user message is answered by a call of `transfer`, a tool's
/// result by what it said.
#[derive(Default)]
struct Banker {
    /// Calls made so far, for their ids.
    calls: AtomicU32,
}

impl Model for Banker {
    fn name(&self) -> &str {
        "banker"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let answer = match request.messages.last() {
            Some(Message::ToolResult(result)) => {
                Scripted::new().text(&format!("transfer said: {}", result.content))
            }
            _ => {
                let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
                let arguments = serde_json::json!({"to": "bob", "amount": 5});
                Scripted::new().text("Let me use transfer.").tool_call(
                    &format!("call-{n}"),
                    "transfer",
                    &arguments,
                )
            }
        };
        stream::iter(answer.events()).boxed()
    }
}

/// What `transfer` takes.
#[derive(Deserialize, schemars::JsonSchema)]
struct Transfer {
    /// To whom.
    to: String,
    /// How much.
    amount: u32,
}

/// Sends money, once approved.
fn transfer() -> Tool {
    simple_tool(
        "transfer",
        "transfer",
        "Sends money to someone",
        |_id, Transfer { to, amount }| async move {
            Ok::<_, String>((format!("sent {amount} to {to}"), None))
        },
    )
    .needs_approval()
}

/// What `capital` takes.
#[derive(Deserialize, schemars::JsonSchema)]
struct Country {
    /// The country.
    country: String,
}

/// A country's capital, for the countries it knows.
fn capital() -> Tool {
    simple_tool(
        "capital",
        "capital",
        "The capital of a country",
        |_id, Country { country }| async move {
            match country.as_str() {
                "France" => Ok(("Paris".to_owned(), None)),
                "Peru" => Ok(("Lima".to_owned(), None)),
                _ => Err(format!("no capital known for {country}")),
            }
        },
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let registry = Registry::new();
    registry.register(BidiFlow::new("count", count).with_description("Counts up to a number"))?;
    registry.register(BidiFlow::new("greet", greet))?;
    registry.register(BidiFlow::new("slow", slow).with_description("Waits to be cancelled"))?;
    let agent = LlmAgent::builder("chat", Echoing).build();
    let bank = LlmAgent::builder("bank", Banker::default())
        .tool(transfer())
        .build();
    let atlas = LlmAgent::builder("atlas", HostModel::required())
        .tool(capital())
        .build();
    match std::env::args().nth(1).as_deref() {
        Some("stdio") => {
            bidi_mcp::McpServer::new(registry)
                .agent(&agent)
                .agent(&bank)
                .agent(&atlas)
                .sampling(true)
                .serve_stdio()
                .await?;
        }
        Some("http") => {
            let bound = bidi_http::Server::new(registry.clone())
                .agent(&agent)
                .agent(&bank)
                .agent(&atlas)
                .protocol(bidi_mcp::McpServer::new(registry).sampling(true))
                .addr(([127, 0, 0, 1], 0).into())
                .bind()
                .await?;
            println!("http://{}", bound.local_addr()?);
            bound.serve().await?;
        }
        _ => return Err("usage: mcp-server stdio|http".into()),
    }
    Ok(())
}
