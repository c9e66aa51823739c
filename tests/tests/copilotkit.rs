//! CopilotKit's React client against a bidi server's AG-UI endpoint, in a headless Chromium.
//!
//! The page (`tests/node/browser/copilotkit.jsx`, bundled by esbuild) is a CopilotKit 1.74 app
//! on `@copilotkit/react-core/v2`: `useFrontendTool`, `useHumanInTheLoop` and `useInterrupt`
//! over an `HttpAgent` on `/agent/{name}/ag-ui`. It runs once with CopilotKit's own
//! `HttpAgent` (the `@ag-ui/client` 0.0.59 it pins, which sends no `protocolVersion` and refuses
//! event keys it does not know) and once with `@ag-ui/client` 1.0's. Each tool's answer must
//! reach the agent: the stored thread, read back in AG-UI's own messages, holds it.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::header;
use axum::response::Html;
use axum::routing::get;
use bidi_flow::Registry;
use bidi_http::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use serde_json::{Value, json};
use tests::browser::{browse, bundle};
use tests::tools::wipe;

const PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"></head>
<body><div id="root"></div><script type="module" src="/copilotkit.js"></script></body></html>"#;

/// The three agents and the page, on a free port of 127.0.0.1; `wipes` counts the runs of
/// `guarded`'s tool.
async fn serve(script: PathBuf, wipes: Arc<AtomicUsize>) -> SocketAddr {
    // Calls a frontend tool, then answers once its result is in.
    let deployer = LlmAgent::builder(
        "deployer",
        ScriptedModel::new([
            Scripted::new().text("Asking").tool_call(
                "call-1",
                "confirm",
                &json!({"action": "deploy"}),
            ),
            Scripted::new().text("Deployed"),
        ]),
    )
    .build();
    // Asks the user through a human-in-the-loop tool.
    let asker = LlmAgent::builder(
        "asker",
        ScriptedModel::new([
            Scripted::new().text("Let me ask").tool_call(
                "call-2",
                "ask_user",
                &json!({"question": "Go ahead?"}),
            ),
            Scripted::new().text("Going ahead"),
        ]),
    )
    .build();
    // Calls a tool of its own that needs the user's approval: the run ends with an interrupt.
    let guarded = LlmAgent::builder(
        "guarded",
        ScriptedModel::new([
            Scripted::new()
                .text("Checking")
                .tool_call("call-3", "wipe", &json!({"target": "db"})),
            Scripted::new().text("Wiped"),
        ]),
    )
    .tool(wipe(wipes))
    .build();
    let page = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/copilotkit.js",
            get(move || {
                let script = script.clone();
                async move {
                    let script = tokio::fs::read(&script).await.unwrap();
                    ([(header::CONTENT_TYPE, "text/javascript")], script)
                }
            }),
        );
    tests::http::serve(
        Server::new(Registry::new())
            .agent(&deployer)
            .agent(&asker)
            .agent(&guarded)
            .protocol(bidi_agui::AgUi::new())
            .routes(page),
    )
    .await
}

/// The page's DOM once `agent` answered `prompt` on `thread`, through `client`'s `HttpAgent`.
async fn run_page(addr: SocketAddr, client: &str, agent: &str, thread: &str) -> String {
    let url =
        format!("http://{addr}/?client={client}&agent={agent}&thread={thread}&prompt=please%20do");
    let dom = tokio::task::spawn_blocking(move || browse(&url, r#"body[data-done="1"]"#, None))
        .await
        .unwrap();
    assert!(
        dom.contains(r#"data-done="1""#),
        "{client} {agent}: the page did not finish:\n{dom}"
    );
    assert!(
        !dom.contains(r#"class="error""#),
        "{client} {agent}: an error:\n{dom}"
    );
    dom
}

/// The stored thread as AG-UI messages: the tool message answering `call`.
async fn tool_answer(addr: SocketAddr, agent: &str, thread: &str, call: &str) -> Value {
    let messages: Vec<Value> = reqwest::get(format!("http://{addr}/agent/{agent}/ag-ui/{thread}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    messages
        .into_iter()
        .find(|message| message["role"] == "tool" && message["toolCallId"] == call)
        .map_or(Value::Null, |message| message["content"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilotkit_runs_frontend_tools_human_in_the_loop_and_interrupts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let script = tokio::task::spawn_blocking(move || bundle("copilotkit", &path))
        .await
        .unwrap();
    for client in ["copilotkit", "ag-ui-1"] {
        let wipes = Arc::new(AtomicUsize::new(0));
        let addr = serve(script.clone(), Arc::clone(&wipes)).await;

        // useFrontendTool: the browser's answer goes back, and the agent goes on.
        let dom = run_page(addr, client, "deployer", "ck-tool").await;
        assert!(dom.contains(">Deployed<"), "{client}:\n{dom}");
        assert_eq!(
            tool_answer(addr, "deployer", "ck-tool", "call-1").await,
            "confirmed deploy",
            "{client}"
        );

        // useHumanInTheLoop: the user's answer, given in the tool's own UI.
        let dom = run_page(addr, client, "asker", "ck-hitl").await;
        assert!(
            dom.contains(">asked: Go ahead?<"),
            "{client}: no question:\n{dom}"
        );
        assert!(dom.contains(">Going ahead<"), "{client}:\n{dom}");
        assert_eq!(
            tool_answer(addr, "asker", "ck-hitl", "call-2").await,
            "yes, go",
            "{client}"
        );

        // useInterrupt: the approval the run stopped for, given, and the tool ran once.
        let dom = run_page(addr, client, "guarded", "ck-interrupt").await;
        assert!(
            dom.contains(">interrupted: tool_approval<"),
            "{client}: no interrupt shown:\n{dom}"
        );
        assert!(dom.contains(">Wiped<"), "{client}:\n{dom}");
        assert_eq!(
            tool_answer(addr, "guarded", "ck-interrupt", "call-3").await,
            "wiped db",
            "{client}"
        );
        assert_eq!(wipes.load(Ordering::SeqCst), 1, "{client}");
    }
}
