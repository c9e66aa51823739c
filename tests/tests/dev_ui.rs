//! The Dev UI in a real browser: a headless Chromium, driven by puppeteer-core
//! (`tests/node/dev_ui.mjs`), opens `/dev/` on a server with a streaming flow and an agent
//! (an approval-gated local tool; the page's own `pick_color` tool), SQLite sessions and
//! traces installed. It runs the flow from its generated form turn by turn over the WebSocket,
//! watches that connection's trace grow while it runs, holds a three-turn conversation with a
//! tool call, an approval, a client tool and a denial, reloads and finds the conversation,
//! browses the session's snapshots and a diff, and reloads in the middle of an answer of a
//! second agent (`echo`, no tools) to find it answered, not stopped. The agent's init form
//! shows its fields' descriptions as prose, in the wire's field names. Screenshots of each step go to
//! `$CARGO_TARGET_TMPDIR/dev-ui/`.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use bidi_http::Server;
use bidi_http::traces::Traces;
use bidi_llm::testing::DemoModel;
use bidi_llm::{LlmAgent, simple_tool};
use bidi_session::SqliteStore;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a greeting is written.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Style {
    /// As is.
    Plain,
    /// In capitals.
    Loud,
}

/// What a connection of `greet` opens with.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct GreetInit {
    /// The greeting's first word.
    greeting: String,
    style: Style,
    /// Punctuation after each greeting (none: `!`).
    #[serde(default)]
    ending: Option<String>,
}

/// Who sent a line.
#[derive(Debug, Deserialize, JsonSchema)]
struct Sender {
    name: String,
    #[serde(default)]
    email: Option<String>,
}

/// One turn's input: whom to greet, how many times.
#[derive(Debug, Deserialize, JsonSchema)]
struct Line {
    /// Whom to greet.
    name: String,
    /// How many greetings to stream.
    times: u32,
    /// Whether to add the tags after the name.
    #[serde(default)]
    tagged: bool,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    sender: Option<Sender>,
}

/// What a connection did.
#[derive(Debug, Serialize, JsonSchema)]
struct Summary {
    turns: u32,
    greetings: u32,
}

/// Streams `times` greetings per input, then ends the turn; answers how many of each.
async fn greet(
    _: ActionContext,
    init: GreetInit,
    mut lines: Inbound<Line>,
    out: Outbound<String>,
) -> Result<Summary, BoxError> {
    let mut summary = Summary {
        turns: 0,
        greetings: 0,
    };
    let ending = init.ending.unwrap_or_else(|| "!".to_owned());
    while let Some(line) = lines.recv().await {
        let mut name = line.name;
        if line.tagged && !line.tags.is_empty() {
            name = format!("{name} ({})", line.tags.join(", "));
        }
        if let Some(sender) = line.sender {
            name = match sender.email {
                Some(email) => format!("{name}, from {} <{email}>", sender.name),
                None => format!("{name}, from {}", sender.name),
            };
        }
        for n in 1..=line.times {
            let text = format!("{} {name}{ending} #{n}", init.greeting);
            out.send(match init.style {
                Style::Plain => text,
                Style::Loud => text.to_uppercase(),
            })
            .await?;
            summary.greetings += 1;
        }
        out.end_turn().await?;
        summary.turns += 1;
    }
    Ok(summary)
}

/// `delete_file`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
struct Path {
    /// The file.
    path: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_ui_runs_flows_chats_traces_and_browses_sessions_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("sessions.db"))
        .await
        .unwrap();
    let deleted = Arc::new(AtomicUsize::new(0));
    let runs = Arc::clone(&deleted);
    let delete = simple_tool(
        "delete_file",
        "Delete a file",
        "Deletes a file",
        move |_id, args: Path| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>((format!("deleted {}", args.path), None)) }
        },
    )
    .needs_approval();
    let assistant = LlmAgent::builder("assistant", DemoModel)
        .tool(delete)
        .store(store.clone())
        .build();
    let echo = LlmAgent::builder("echo", DemoModel).store(store).build();
    let registry = Registry::new();
    registry
        .register(BidiFlow::new("greet", greet).with_description("Greets whom each input names"))
        .unwrap();
    registry
        .register(assistant.agent().clone().into_flow())
        .unwrap();
    // Flows trace into the global provider: this one keeps their spans for the page.
    let traces = Traces::new();
    let provider = traces.install();
    let server = Server::new(registry)
        .agent(&assistant)
        .agent(&echo)
        .protocol(bidi_devui::DevUi::new(traces));
    let addr = tests::http::serve(server).await;

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dev-ui");
    std::fs::create_dir_all(&shots).unwrap();
    println!("screenshots: {}", shots.display());
    let summary = tests::node::client(
        "dev_ui.mjs",
        vec![format!("http://{addr}"), shots.display().to_string()],
    )
    .await;
    println!("{summary}");
    summary.assert_passed(CHECKS);
    // The approved call ran once; the denied one never did.
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
    provider.shutdown().unwrap();
}

/// How many checks `dev_ui.mjs` runs.
const CHECKS: usize = 16;
