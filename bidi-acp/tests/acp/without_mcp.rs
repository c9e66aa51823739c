//! Built without the `mcp` feature (`cargo test -p bidi-acp --no-default-features`): no MCP
//! capability is advertised, and sessions that name MCP servers are refused, never served
//! without them.

use bidi_acp::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use serde_json::{Value, json};

use crate::support::Client;

fn stdio_server() -> Value {
    json!({"name": "fs", "command": "mcp-server-filesystem", "args": ["/project"], "env": []})
}

fn http_server() -> Value {
    json!({"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": []})
}

/// Asserts `answer` is the refusal of a session's MCP servers by an agent without MCP support.
fn assert_refused(answer: &Value, servers: usize) {
    let error = &answer["error"];
    assert_eq!(error["code"], -32602, "{answer}");
    assert_eq!(error["data"]["path"], "mcpServers", "{answer}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("`mcpServers`"), "{message}");
    assert!(message.contains("without MCP support"), "{message}");
    assert!(
        message.contains(&format!("the {servers} MCP server(s)")),
        "{message}"
    );
    assert!(answer.get("result").is_none(), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_advertises_no_mcp_transport() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent));
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}))
        .await;
    let init = client.answer(1).await;
    let capabilities = &init["result"]["agentCapabilities"];
    assert_eq!(capabilities["loadSession"], true, "{init}");
    assert_eq!(capabilities["mcpCapabilities"]["http"], false, "{init}");
    assert_eq!(capabilities["mcpCapabilities"]["sse"], false, "{init}");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_naming_mcp_servers_is_refused_naming_them() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent));
    client
        .send(
            json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{
            "cwd": "/project", "mcpServers": [stdio_server()]}}),
        )
        .await;
    assert_refused(&client.answer(1).await, 1);
    client
        .send(
            json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{
            "cwd": "/project", "mcpServers": [stdio_server(), http_server()]}}),
        )
        .await;
    assert_refused(&client.answer(2).await, 2);
    // Without MCP servers, a session opens as ever.
    let session = client.new_session().await;
    assert!(session["sessionId"].is_string(), "{session}");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_naming_mcp_servers_is_refused_before_any_replay() {
    let model = ScriptedModel::new([Scripted::new().text("Hi")]);
    let agent = LlmAgent::builder("a", model).build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "hello").await;
    let turn = client.until(1).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");

    client
        .send(
            json!({"jsonrpc":"2.0","id":2,"method":"session/load","params":{
            "sessionId": session, "cwd": "/project", "mcpServers": [http_server()]}}),
        )
        .await;
    let refused = client.until(2).await;
    assert_eq!(
        refused.len(),
        1,
        "no update before the refusal: {refused:?}"
    );
    assert_refused(&refused[0], 1);

    // The same load without servers replays the conversation.
    client
        .send(
            json!({"jsonrpc":"2.0","id":3,"method":"session/load","params":{
            "sessionId": session, "cwd": "/project", "mcpServers": []}}),
        )
        .await;
    let loaded = client.until(3).await;
    assert!(loaded.last().unwrap().get("result").is_some(), "{loaded:?}");
    assert!(loaded.len() > 1, "the conversation is replayed: {loaded:?}");
    assert!(client.finish().await.is_empty());
}
