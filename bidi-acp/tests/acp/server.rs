//! The server driven through in-memory pipes: stop reasons, cancellation, errors, the end of
//! input.

use std::time::Duration;

use bidi_acp::Server;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, ModelEvent, StopReason, Tool, Usage, simple_tool};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use crate::support::Client;

fn text_of(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["params"]["update"]["content"]["text"].as_str().unwrap())
        .collect()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Nothing {}

fn tick() -> Tool {
    simple_tool("tick", "Tick", "Does nothing", |_id, _: Nothing| async {
        Ok::<_, String>(("tock".to_owned(), None))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_limit_ends_the_turn_with_max_turn_requests() {
    let model = ScriptedModel::new([Scripted::new().tool_call("c1", "tick", &json!({}))]);
    let agent = LlmAgent::builder("a", model)
        .tool(tick())
        .max_turns(1)
        .build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "go").await;
    let turn = client.until(1).await;
    assert_eq!(
        turn.last().unwrap()["result"]["stopReason"],
        "max_turn_requests"
    );
    let kinds: Vec<&str> = turn[..turn.len() - 1]
        .iter()
        .map(|u| u["params"]["update"]["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_call", "tool_call_update"]);
    assert_eq!(turn[1]["params"]["update"]["status"], "completed");
    assert_eq!(turn[1]["params"]["update"]["rawOutput"], "tock");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_and_refused_answers_end_with_their_reasons_and_a_failed_model_call_is_an_error()
{
    let (model, events) = ChannelModel::new();
    let mut client = Client::start(Server::new(LlmAgent::builder("a", model).build()));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "write a lot").await;
    send_text(&events, "and so on", StopReason::Length);
    let turn = client.until(1).await;
    assert_eq!(text_of(&turn), "and so on");
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "max_tokens");

    client.prompt(3, &session, "something forbidden").await;
    send_text(&events, "I can't help with that.", StopReason::Refusal);
    let turn = client.until(3).await;
    assert_eq!(text_of(&turn), "I can't help with that.");
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "refusal");

    client.prompt(2, &session, "again").await;
    events
        .send(ModelEvent::Error(bidi_llm::ModelError::other(
            "the provider is down".to_owned(),
        )))
        .unwrap();
    let failed = client.answer(2).await;
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert_eq!(failed["error"]["data"]["code"], "model", "{failed}");
    assert!(client.finish().await.is_empty());
}

fn send_text(events: &UnboundedSender<ModelEvent>, text: &str, stop_reason: StopReason) {
    events.send(ModelEvent::TextStart).unwrap();
    events.send(ModelEvent::TextDelta(text.to_owned())).unwrap();
    events.send(ModelEvent::TextEnd).unwrap();
    events
        .send(ModelEvent::Done {
            stop_reason,
            usage: Usage::default(),
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_stream_answers_cancelled_once_and_the_session_goes_on() {
    let (model, events) = ChannelModel::new();
    let mut client = Client::start(Server::new(LlmAgent::builder("a", model).build()));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "go on and on").await;
    events.send(ModelEvent::TextStart).unwrap();
    events
        .send(ModelEvent::TextDelta("partial".to_owned()))
        .unwrap();
    let chunk = client.recv().await.unwrap();
    assert_eq!(chunk["params"]["update"]["content"]["text"], "partial");
    // The model is mid-answer: cancel it (twice: the second finds nothing running).
    for _ in 0..2 {
        client
            .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
            .await;
    }
    let answer = client.answer(1).await;
    assert_eq!(
        answer,
        json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}})
    );

    client.prompt(2, &session, "next").await;
    send_text(&events, "fine", StopReason::Stop);
    let turn = client.until(2).await;
    assert_eq!(text_of(&turn), "fine");
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    let rest = client.finish().await;
    assert!(
        rest.is_empty(),
        "no second answer to the cancelled prompt: {rest:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn turns_still_running_at_the_end_of_input_are_cancelled_after_the_drain() {
    let (model, _events) = ChannelModel::new();
    let server = Server::new(LlmAgent::builder("a", model).build()).drain(Duration::from_secs(5));
    let mut client = Client::start(server);
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "never answered").await;
    // The model never answers; the input ends; after the drain the turn is cancelled.
    let ended = tokio::time::Instant::now();
    let rest = client.finish().await;
    assert!(
        ended.elapsed() >= Duration::from_secs(5),
        "the turn had its drain period"
    );
    assert_eq!(
        rest,
        [json!({"jsonrpc":"2.0","id":1,"result":{"stopReason":"cancelled"}})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_sessions_and_authentication_are_refused() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent).info("my-agent", "9.9.9"));
    client
        .send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":7,"clientCapabilities":{}}}))
        .await;
    let init = client.answer(0).await;
    assert_eq!(
        init["result"]["protocolVersion"], 1,
        "ours, not the client's 7"
    );
    assert_eq!(
        init["result"]["agentInfo"],
        json!({"name": "my-agent", "version": "9.9.9"})
    );
    assert_eq!(init["result"]["authMethods"], json!([]));
    assert_eq!(
        init["result"]["agentCapabilities"]["promptCapabilities"],
        json!({"image": true, "audio": true, "embeddedContext": true})
    );

    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"authenticate","params":{"methodId":"oauth"}}))
        .await;
    let auth = client.answer(1).await;
    assert_eq!(auth["error"]["code"], -32602);
    assert_eq!(auth["error"]["data"]["path"], "methodId");

    client.prompt(2, &json!("nope"), "hi").await;
    let prompt = client.answer(2).await;
    assert_eq!(prompt["error"]["code"], -32002);
    assert_eq!(prompt["error"]["data"]["sessionId"], "nope");

    client
        .send(json!({"jsonrpc":"2.0","id":3,"method":"session/load","params":{"sessionId":"nope","cwd":"/","mcpServers":[]}}))
        .await;
    let load = client.answer(3).await;
    assert_eq!(load["error"]["code"], -32002);

    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_cancels_the_running_turn_and_forgets_the_session_until_it_is_loaded() {
    let (model, events) = ChannelModel::new();
    let mut client = Client::start(Server::new(LlmAgent::builder("a", model).build()));
    client
        .send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}))
        .await;
    assert_eq!(
        client.answer(0).await["result"]["agentCapabilities"]["sessionCapabilities"],
        session_capabilities()
    );
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "go on and on").await;
    events.send(ModelEvent::TextStart).unwrap();
    events
        .send(ModelEvent::TextDelta("partial".to_owned()))
        .unwrap();
    assert_eq!(
        client.recv().await.unwrap()["params"]["update"]["content"]["text"],
        "partial"
    );
    client
        .send(
            json!({"jsonrpc":"2.0","id":2,"method":"session/close","params":{"sessionId":session}}),
        )
        .await;
    // The turn answers cancelled, and the close answers.
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let message = client.recv().await.unwrap();
        if message.get("method").is_none() {
            answers.push(message);
        }
    }
    answers.sort_by_key(|a| a["id"].as_i64());
    assert_eq!(
        answers[0]["result"]["stopReason"], "cancelled",
        "{answers:?}"
    );
    assert_eq!(answers[1]["result"], json!({}), "{answers:?}");

    // Closed: unknown here, until loaded again.
    client.prompt(3, &session, "still there?").await;
    assert_eq!(client.answer(3).await["error"]["code"], -32002);
    client
        .send(
            json!({"jsonrpc":"2.0","id":4,"method":"session/close","params":{"sessionId":session}}),
        )
        .await;
    assert_eq!(client.answer(4).await["error"]["code"], -32002);
    client
        .send(json!({"jsonrpc":"2.0","id":5,"method":"session/load","params":{"sessionId":session,"cwd":"/project","mcpServers":[]}}))
        .await;
    let replay = client.until(5).await;
    assert!(replay.last().unwrap().get("result").is_some(), "{replay:?}");
    assert_eq!(text_of(&replay), "partial");
    client.prompt(6, &session, "again").await;
    send_text(&events, "back", StopReason::Stop);
    assert_eq!(text_of(&client.until(6).await), "back");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_line_is_answered_under_the_id_its_first_bytes_name() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "tick", &json!({})),
        Scripted::new().text("done"),
    ]);
    let agent = LlmAgent::builder("a", model).tool(tick()).build();
    let server = Server::new(agent)
        .require_permission("tick")
        .max_line_bytes(2048);
    let mut client = Client::start(server);
    let session = client.new_session().await["sessionId"].clone();
    let image = "A".repeat(4096);
    // A prompt with a large image, as the SDKs write it: `jsonrpc`, `id`, `method`, `params`.
    for id in [json!(5), json!("req-9")] {
        client
            .send(
                json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{
                "sessionId": session,
                "prompt": [{"type": "image", "data": image, "mimeType": "image/png"}]}}),
            )
            .await;
        let refused = client.recv().await.unwrap();
        assert_eq!(refused["id"], id, "{refused}");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("2048"),
            "{refused}"
        );
    }
    // An answer of the client's too long to read fails the request it answers: the tool
    // does not run, and the turn ends.
    client.prompt(6, &session, "tick").await;
    let asked = client.until_asked().await;
    let request = asked.last().unwrap();
    client
        .send(json!({"jsonrpc":"2.0","id":request["id"],"result":{
            "outcome": {"outcome": "selected", "optionId": "allow-once"},
            "_meta": {"pad": image}}}))
        .await;
    let turn = tokio::time::timeout(Duration::from_secs(30), client.until(6))
        .await
        .expect("the turn ends");
    let failed = turn
        .iter()
        .find(|m| m["params"]["update"]["status"] == "failed")
        .expect("the call failed");
    let output = failed["params"]["update"]["rawOutput"].as_str().unwrap();
    assert!(output.contains("could not be asked"), "{output}");
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    assert!(client.finish().await.is_empty());
}

/// The session methods the server says it serves beyond new, load and prompt: the stable ones,
/// and the unstable ones of the features built.
fn session_capabilities() -> Value {
    let mut capabilities = json!({"close": {}, "list": {}, "delete": {}, "resume": {}});
    if cfg!(feature = "unstable_session_status") {
        capabilities["status"] = json!({});
    }
    if cfg!(feature = "unstable_session_set_title") {
        capabilities["title"] = json!({});
    }
    if cfg!(feature = "unstable_session_fork") {
        capabilities["fork"] = json!({});
    }
    capabilities
}
