//! bidi-channel's web channel read by the AI SDK's own reader (`ai@6`: `parseJsonEventStream`
//! with `uiMessageChunkSchema`, then `readUIMessageStream`, in `tests/node/vercel_streams.mjs`):
//! a plain answer, one with a tool call (a transient `data-status` part), one whose model fails
//! mid-answer, and the same without streaming.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bidi_channel::MessageRouter;
use bidi_channel::web::Web;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, simple_tool};
use serde_json::json;
use tests::node::client;

fn agent() -> LlmAgent {
    let weather = simple_tool(
        "weather",
        "Weather",
        "The weather in a city",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("sunny".to_owned(), None)) },
    );
    let model = ScriptedModel::new([
        Scripted::new().text("Hello there, browser."),
        Scripted::new()
            .text("Let me look. ")
            .tool_call("c1", "weather", &json!({"city": "Oslo"})),
        Scripted::new().text("Sunny in Oslo."),
        Scripted::new().text("Half an").fail("the model broke"),
    ]);
    LlmAgent::builder("web", model)
        .tool(weather)
        .max_turns(3)
        .build()
}

/// Posts `text` as `user` to the channel at `base`; the body, once complete.
async fn post(base: &str, user: &str, text: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{base}/{user}/messages"))
        .json(&json!({"text": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    response.text().await.unwrap()
}

async fn serve(web: Web) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let web = Arc::new(web);
    tokio::spawn(async move { axum::serve(listener, web.routes()).await });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_reader_reads_every_reply_of_the_web_channel() {
    let dir = tempfile::tempdir().unwrap();
    let streaming = serve(Web::new(MessageRouter::new(agent()))).await;
    let plain = serve(Web::new(MessageRouter::new(agent())).streaming(false)).await;
    let mut bodies = Vec::new();
    for base in [&streaming, &plain] {
        bodies.push(post(base, "ada", "hi").await);
        bodies.push(post(base, "ada", "weather in Oslo?").await);
        bodies.push(post(base, "bob", "go").await);
    }
    // What the reader must see: the tool's status, the failure's text.
    assert!(
        bodies[1].contains(r#""type":"data-status""#),
        "{}",
        bodies[1]
    );
    assert!(bodies[2].contains("the model broke"), "{}", bodies[2]);
    for (index, body) in bodies.iter().enumerate() {
        std::fs::write(dir.path().join(format!("{index}.sse")), body).unwrap();
    }
    let arg = dir.path().to_string_lossy().into_owned();
    client("vercel_streams.mjs", vec![arg])
        .await
        .assert_passed(bodies.len());
}
