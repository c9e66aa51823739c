//! A page reloaded mid-conversation gets it back: a React page on the AI SDK's `useChat`
//! (`@ai-sdk/react`, bundled by esbuild from `tests/node/browser/chat.jsx`) fetches the stored
//! chat as `UIMessage[]` from `GET /agent/assistant/chat/{id}`, hands it to
//! `useChat({ messages })`, and goes on with the same chat, in a headless Chromium.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::Router;
use axum::http::header;
use axum::response::Html;
use axum::routing::get;
use bidi_flow::Registry;
use bidi_http::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::DemoModel;
use serde_json::json;
use tests::browser::{browse, bundle};

const PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"></head>
<body><div id="root"></div><script type="module" src="/chat.js"></script></body></html>"#;

/// The demo assistant and the page, on a free port of 127.0.0.1.
async fn serve(script: Vec<u8>) -> SocketAddr {
    let assistant = LlmAgent::builder("assistant", DemoModel).build();
    let page = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/chat.js",
            get(move || {
                let script = script.clone();
                async move { ([(header::CONTENT_TYPE, "text/javascript")], script) }
            }),
        );
    tests::http::serve(
        Server::new(Registry::new())
            .agent(&assistant)
            .protocol(bidi_ai_sdk::Chat::new())
            .routes(page),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_chat_restores_a_stored_conversation_and_goes_on_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let script = tokio::task::spawn_blocking(move || std::fs::read(bundle("chat", &path)).unwrap())
        .await
        .unwrap();
    let addr = serve(script).await;

    // The conversation so far, as a first page had it.
    let first = json!({"id": "reload-1", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]}]});
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/agent/assistant/chat"))
        .body(first.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(answer.ends_with("data: [DONE]\n\n"), "{answer}");

    // The reloaded page.
    let url = format!("http://{addr}/?chat=reload-1&prompt=and%20again");
    let dom = tokio::task::spawn_blocking(move || browse(&url, r#"body[data-done="1"]"#, None))
        .await
        .unwrap();
    assert!(
        dom.contains(r#"data-done="1""#),
        "the page did not finish:\n{dom}"
    );
    assert!(!dom.contains(r#"class="error""#), "{dom}");
    let order = [
        r#"class="user" data-id="u0">hello there<"#,
        r#"class="assistant" data-id="a1">You said: hello there<"#,
        ">and again<",
        ">You said: and again<",
    ];
    let mut from = 0;
    for piece in order {
        let at = dom[from..]
            .find(piece)
            .unwrap_or_else(|| panic!("no {piece} after the earlier messages in:\n{dom}"));
        from += at + piece.len();
    }
}
