//! The terminal channel: what a user at a terminal (or reading a pipe) sees.

use std::sync::Arc;

use bidi_channel::{MessageRouter, Terminal};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, simple_tool};
use serde_json::json;
use tokio::io::AsyncReadExt as _;

fn agent(script: Vec<Scripted>) -> LlmAgent {
    let search = simple_tool(
        "search",
        "Search",
        "Searches",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("found".to_owned(), None)) },
    );
    LlmAgent::builder("helper", ScriptedModel::new(script))
        .tool(search)
        .build()
}

#[tokio::test]
async fn prints_tokens_a_status_line_and_a_line_break() {
    let router = MessageRouter::new(agent(vec![
        Scripted::new()
            .text("Looking it up. ")
            .tool_call("c1", "search", &json!({"q": "rust"})),
        Scripted::new().text("Rust is a language."),
    ]));
    let terminal = Arc::new(Terminal::new(Vec::new()));
    router
        .handle(terminal.clone(), "me", "what is rust?")
        .await
        .unwrap();
    let printed = String::from_utf8(terminal.written().await).unwrap();
    assert_eq!(
        printed,
        "Looking it up. \n  [Using: search]\nRust is a language.\n"
    );
}

#[tokio::test]
async fn an_error_is_printed_after_the_text() {
    let router = MessageRouter::new(agent(vec![
        Scripted::new().text("Half of it").fail("model gone"),
    ]));
    let terminal = Arc::new(Terminal::new(Vec::new()));
    let reply = router.handle(terminal.clone(), "me", "go").await.unwrap();
    let printed = String::from_utf8(terminal.written().await).unwrap();
    assert_eq!(printed, format!("{}\n", reply.text));
    assert!(printed.starts_with("Half of it\n\n(Error: "), "{printed}");
}

#[tokio::test]
async fn without_streaming_the_reply_is_printed_whole() {
    let router = MessageRouter::new(agent(vec![Scripted::new().text("All at once.")]));
    let terminal = Arc::new(Terminal::new(Vec::new()).streaming(false));
    router.handle(terminal.clone(), "me", "go").await.unwrap();
    assert_eq!(terminal.written().await, b"All at once.\n");
}

#[tokio::test]
async fn writes_to_a_pipe() {
    // A pipe, not a tty: each token arrives as it is written.
    let (writer, mut reader) = tokio::io::duplex(4096);
    let router = MessageRouter::new(agent(vec![Scripted::new().text("through the pipe")]));
    let terminal = Arc::new(Terminal::new(writer));
    router.handle(terminal.clone(), "me", "go").await.unwrap();
    drop(terminal);
    drop(router);
    let mut printed = String::new();
    reader.read_to_string(&mut printed).await.unwrap();
    assert_eq!(printed, "through the pipe\n");
}
