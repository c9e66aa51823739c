//! The web channel: replies as the AI SDK's UI message stream, read by reqwest.

use std::sync::Arc;

use bidi_agent::{Agent, AgentResult, Responder};
use bidi_channel::MessageRouter;
use bidi_channel::web::Web;
use bidi_core::{ActionContext, BoxError, Inbound};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, simple_tool};
use bidi_session::Session;
use serde_json::{Value, json};
use tokio::sync::Notify;

async fn serve(web: Web) -> String {
    let web = Arc::new(web);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, web.routes()).await });
    format!("http://{addr}")
}

/// The stream's chunks, and whether it ended with `[DONE]`.
fn chunks(body: &str) -> (Vec<Value>, bool) {
    let mut chunks = Vec::new();
    let mut done = false;
    for record in body.split("\n\n").filter(|r| !r.is_empty()) {
        let data = record.strip_prefix("data: ").expect("a data record");
        if data == "[DONE]" {
            done = true;
        } else {
            assert!(!done, "nothing after [DONE]");
            chunks.push(serde_json::from_str(data).expect("a JSON chunk"));
        }
    }
    (chunks, done)
}

fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().expect("a delta"))
        .collect()
}

async fn post(base: &str, user: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/{user}/messages"))
        .json(body)
        .send()
        .await
        .expect("a response")
}

fn agent(script: Vec<Scripted>) -> LlmAgent {
    let search = simple_tool(
        "search",
        "Search",
        "Searches",
        |_id, _args: Value| async move { Ok::<_, String>(("found".to_owned(), None)) },
    );
    LlmAgent::builder("web", ScriptedModel::new(script))
        .tool(search)
        .build()
}

#[tokio::test]
async fn a_reply_streams_as_a_ui_message_stream() {
    let router = MessageRouter::new(agent(vec![
        Scripted::new().tool_call("c1", "search", &json!({})),
        Scripted::new().text("Here is what I found."),
    ]));
    let base = serve(Web::new(router)).await;
    let response = post(&base, "ada", &json!({"text": "find it"})).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-vercel-ai-ui-message-stream"], "v1");
    let (chunks, done) = chunks(&response.text().await.unwrap());
    assert!(done);
    let kinds: Vec<&str> = chunks.iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        ["start", "start-step", "text-start", "data-status"]
    );
    assert_eq!(chunks[3]["data"]["status"], "Using: search");
    assert_eq!(kinds.last(), Some(&"finish"));
    let end = kinds.iter().position(|k| *k == "text-end").unwrap();
    assert!(
        kinds[4..end].iter().all(|k| *k == "text-delta"),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().filter(|k| **k == "text-delta").count() > 1,
        "word by word"
    );
    assert_eq!(text_of(&chunks), "Here is what I found.");
}

#[tokio::test]
async fn an_agent_error_ends_the_text_with_the_error() {
    let router = MessageRouter::new(agent(vec![
        Scripted::new().text("Half of").fail("model gone"),
    ]));
    let base = serve(Web::new(router)).await;
    let body = post(&base, "ada", &json!({"text": "go"}))
        .await
        .text()
        .await
        .unwrap();
    let (chunks, done) = chunks(&body);
    assert!(done);
    let text = text_of(&chunks);
    assert!(text.starts_with("Half of\n\n(Error: "), "{text}");
    assert!(text.contains("model gone"), "{text}");
}

#[tokio::test]
async fn without_streaming_the_whole_reply_comes_in_one_delta() {
    let router = MessageRouter::new(agent(vec![Scripted::new().text("All of it at once.")]));
    let base = serve(Web::new(router).streaming(false)).await;
    let body = post(&base, "ada", &json!({"text": "go"}))
        .await
        .text()
        .await
        .unwrap();
    let (chunks, done) = chunks(&body);
    assert!(done);
    let deltas: Vec<_> = chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .collect();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0]["delta"], "All of it at once.");
}

/// Echoes each message; `wait` first waits for the gate.
fn gated(gate: Arc<Notify>) -> Agent<(), String, (), String> {
    Agent::builder("gated").build(
        move |_: ActionContext,
              _: Session<()>,
              mut inbound: Inbound<String>,
              out: Responder<String>| {
            let gate = Arc::clone(&gate);
            async move {
                while let Some(message) = inbound.recv().await {
                    out.send("… ".to_owned()).await?;
                    if message.starts_with("wait") {
                        gate.notified().await;
                    }
                    out.send(message).await?;
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>(AgentResult::new(()))
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_reply_per_user_at_a_time_and_users_apart() {
    let gate = Arc::new(Notify::new());
    let base = serve(Web::new(MessageRouter::new(gated(gate.clone())))).await;
    let mut first = post(&base, "ada", &json!({"text": "wait for it"})).await;
    // The reply has started streaming.
    let head = first.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&head).contains("\"start\""));

    let busy = post(&base, "ada", &json!({"text": "me again"})).await;
    assert_eq!(busy.status(), 409);
    let error: Value = busy.json().await.unwrap();
    assert!(error["error"].as_str().unwrap().contains("still streaming"));

    // Another user is answered meanwhile.
    let other = post(&base, "bob", &json!({"text": "hello"}))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&chunks(&other).0), "… hello");

    gate.notify_one();
    let mut rest = String::from_utf8_lossy(&head).into_owned();
    while let Some(bytes) = first.chunk().await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&bytes));
    }
    assert_eq!(text_of(&chunks(&rest).0), "… wait for it");
    // Ada may post again.
    let again = post(&base, "ada", &json!({"text": "again"}))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&chunks(&again).0), "… again");
}

#[tokio::test]
async fn bad_messages_are_refused() {
    let base = serve(Web::new(MessageRouter::new(gated(Arc::new(Notify::new()))))).await;
    for body in [json!({"text": "  "}), json!({"message": "hi"}), json!([1])] {
        let response = post(&base, "ada", &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert!(error["error"].is_string());
    }
}
