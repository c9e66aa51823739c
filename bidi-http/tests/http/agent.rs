//! The agent execute endpoints: SSE of agent events, remote tools the client declares, sessions.

use std::net::SocketAddr;

use bidi_http::Server;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, ModelEvent, ModelOptions, StopReason, Usage};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::support::{Probe, registry, start, url};

/// The events of an SSE answer: (event name, data).
fn parse(text: &str) -> Vec<(String, Value)> {
    text.split_terminator("\n\n")
        .map(|record| {
            let mut lines = record.lines();
            let name = lines
                .next()
                .unwrap()
                .strip_prefix("event: ")
                .unwrap()
                .to_owned();
            let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(
                data["type"],
                name.as_str(),
                "the event is named by its kind"
            );
            (name, data)
        })
        .collect()
}

/// Tool results for the call `id` of `book`.
fn booked(session_id: &str, id: &str) -> Value {
    json!({"sessionId": session_id, "input": [{
        "toolCallId": id, "toolName": "book", "content": "booked Oslo", "isError": false
    }]})
}

/// `GET /agent/travel/session/{id}`.
async fn get_session(addr: SocketAddr, id: &str) -> Value {
    let path = format!("/agent/travel/session/{id}");
    reqwest::get(url(addr, &path))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn execute(addr: SocketAddr, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url(addr, "/agent/travel/execute"))
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

fn book_tool() -> Value {
    json!({
        "name": "book",
        "description": "Books a trip",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
    })
}

async fn travel_server() -> SocketAddr {
    travel_server_with(ScriptedModel::new([
        Scripted::new().tool_call("call-1", "book", &json!({"city": "Oslo"})),
        Scripted::new().text("Booked!"),
    ]))
    .await
}

async fn travel_server_with(model: ScriptedModel) -> SocketAddr {
    let agent = LlmAgent::builder("travel", model).build();
    start(Server::new(registry(&Probe::default())).agent(&agent)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tools_suspend_the_execution_and_their_results_resume_it() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("call-1", "book", &json!({"city": "Oslo"})),
        Scripted::new().text("Booked!"),
    ])
    .recording();
    let addr = travel_server_with(model.clone()).await;
    let response = execute(
        addr,
        json!({
            "sessionId": "trip-1",
            "input": {"content": "Oslo, please"},
            "context": {"systemPrompt": "You book trips.", "tools": [book_tool()]},
            "options": {"temperature": 0.5, "maxTokens": 64}
        }),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["x-session-id"], "trip-1");
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = parse(&response.text().await.unwrap());
    assert_eq!(events[0].0, "session_start");
    assert!(events.iter().any(|(name, _)| name == "toolcall_end"));
    let (last, complete) = events.last().unwrap();
    assert_eq!(last, "execute_complete");
    assert_eq!(complete["status"], "awaiting_tool_execution");
    assert_eq!(complete["pendingToolCalls"][0]["id"], "call-1");
    assert_eq!(complete["pendingToolCalls"][0]["name"], "book");

    let session = get_session(addr, "trip-1").await;
    assert_eq!(session["status"], "awaiting_tool_execution");
    assert_eq!(session["pendingToolCalls"][0]["id"], "call-1");
    assert!(session.get("pendingApprovals").is_none(), "{session}");

    // Results for a call that is not pending are refused before anything runs.
    let wrong = execute(addr, booked("trip-1", "call-9")).await;
    assert_eq!(wrong.status().as_u16(), 400);
    let answer: Value = wrong.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "invalid_input");

    let resumed = execute(addr, booked("trip-1", "call-1")).await;
    assert_eq!(resumed.status().as_u16(), 200);
    let events = parse(&resumed.text().await.unwrap());
    let deltas: String = events
        .iter()
        .filter(|(name, _)| name == "text_delta")
        .map(|(_, data)| data["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Booked!");
    assert_eq!(events.last().unwrap().1["status"], "completed");

    let session = get_session(addr, "trip-1").await;
    assert_eq!(session["status"], "completed");
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "toolResult", "assistant"]);

    // What the model was asked, both times: the context and options of the session.
    for request in model.requests() {
        assert_eq!(request.system_prompt.as_deref(), Some("You book trips."));
        assert_eq!(request.tools[0].name, "book");
        assert_eq!(
            request.options,
            ModelOptions::new().temperature(0.5).max_tokens(64)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_gets_an_id_and_needs_a_context() {
    let addr = travel_server().await;
    let refused = execute(addr, json!({"input": {"content": "hi"}})).await;
    assert_eq!(refused.status().as_u16(), 400);
    let answer: Value = refused.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "context_required");
    assert_eq!(answer["error"]["details"]["path"], "/context");

    // A session that is not there, named without a context, would be a new one without one.
    let missing = execute(
        addr,
        json!({"sessionId": "nope", "input": {"content": "hi"}}),
    )
    .await;
    assert_eq!(missing.status().as_u16(), 400);
    let answer: Value = missing.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "context_required");

    let bad_context = execute(
        addr,
        json!({"input": {"content": "hi"}, "context": {"tools": [book_tool(), book_tool()]}}),
    )
    .await;
    assert_eq!(bad_context.status().as_u16(), 400);
    let answer: Value = bad_context.json().await.unwrap();
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("book"),
        "{answer}"
    );

    let unknown = execute(
        addr,
        json!({"input": {"content": "hi"}, "context": {}, "extra": 1}),
    )
    .await;
    assert_eq!(unknown.status().as_u16(), 400);

    let stray = execute(
        addr,
        json!({"sessionId": "x", "input": {"content": "hi"}, "options": {"temperature": 0.1}}),
    )
    .await;
    assert_eq!(stray.status().as_u16(), 400);
    let answer: Value = stray.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["path"], "/options");
    let unknown_option = execute(
        addr,
        json!({"input": {"content": "hi"}, "context": {}, "options": {"model": "gpt-9"}}),
    )
    .await;
    assert_eq!(unknown_option.status().as_u16(), 400);

    let created = execute(addr, json!({"input": {"content": "hi"}, "context": {}})).await;
    assert_eq!(created.status().as_u16(), 200);
    let id = created.headers()["x-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 36, "a fresh UUID: {id}");
    let events = parse(&created.text().await.unwrap());
    assert_eq!(events[0].1["sessionId"], id.as_str());

    let gone = reqwest::get(url(addr, "/agent/travel/session/nope"))
        .await
        .unwrap();
    assert_eq!(gone.status().as_u16(), 404);
    let other = reqwest::get(url(addr, "/agent/nobody/session/x"))
        .await
        .unwrap();
    assert_eq!(other.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_running_elsewhere_is_409() {
    let (model, answer) = ChannelModel::new();
    let agent = LlmAgent::builder("travel", model).build();
    let addr = start(Server::new(registry(&Probe::default())).agent(&agent)).await;
    let first = execute(
        addr,
        json!({"sessionId": "busy", "input": {"content": "think"}, "context": {}}),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let mut first = first.bytes_stream();
    // The execution has started: its first events are out, the model has not answered.
    let head = String::from_utf8(first.next().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(head.starts_with("event: session_start"), "{head}");

    let second = execute(
        addr,
        json!({"sessionId": "busy", "input": {"content": "me too"}}),
    )
    .await;
    assert_eq!(second.status().as_u16(), 409);
    let refused: Value = second.json().await.unwrap();
    assert_eq!(refused["error"]["details"]["code"], "session_running");
    assert_eq!(refused["error"]["status"], "ABORTED");
    // Read mid-answer, the session runs and shows the message it answers.
    let session = |addr| async move {
        let response = reqwest::get(url(addr, "/agent/travel/session/busy")).await;
        response.unwrap().json::<Value>().await.unwrap()
    };
    let running = session(addr).await;
    assert_eq!(running["status"], "running", "{running}");
    assert_eq!(
        running["messages"].as_array().unwrap().len(),
        1,
        "{running}"
    );
    assert_eq!(running["messages"][0]["content"], "think", "{running}");

    answer.send(ModelEvent::TextStart).unwrap();
    bidi_llm::testing::finish_text(&answer, "done");
    let mut rest = String::new();
    while let Some(bytes) = first.next().await {
        rest.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
    }
    let events = parse(&rest);
    assert_eq!(events.last().unwrap().1["status"], "completed");
    // Once answered, the question is there once, with its answer.
    let done = session(addr).await;
    assert_eq!(done["status"], "completed", "{done}");
    let roles: Vec<&str> = done["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant"], "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_needs_approval_waits_for_the_decision_in_the_next_input() {
    let wipe = bidi_llm::Tool::dynamic(
        "wipe",
        "Wipe",
        "Wipes a target",
        json!({"type": "object"}),
        |_id, args: Value| {
            futures_util::stream::iter([bidi_llm::ToolEvent::Complete {
                output: format!("wiped {}", args["target"]),
                details: None,
            }])
        },
    )
    .needs_approval();
    let model = ScriptedModel::new([
        Scripted::new().tool_call("call-1", "wipe", &json!({"target": "db"})),
        Scripted::new().text("Wiped."),
    ]);
    let agent = LlmAgent::builder("travel", model).tool(wipe).build();
    let addr = start(Server::new(registry(&Probe::default())).agent(&agent)).await;

    let first = execute(
        addr,
        json!({"sessionId": "w", "input": {"content": "wipe db"}, "context": {}}),
    )
    .await;
    let text = first.text().await.unwrap();
    assert!(text.starts_with("event: "), "{text}");
    let events = parse(&text);
    let waiting = events
        .iter()
        .find(|(name, _)| name == "awaiting_approval")
        .map(|(_, data)| data)
        .unwrap();
    assert_eq!(waiting["toolCalls"][0]["id"], "call-1");
    let complete = &events.last().unwrap().1;
    assert_eq!(complete["status"], "awaiting_tool_execution");
    assert_eq!(
        complete["pendingToolCalls"],
        json!([]),
        "no call for the client to run"
    );
    assert!(
        !events
            .iter()
            .any(|(name, _)| name == "tool_execution_start")
    );
    assert_eq!(complete["pendingApprovals"][0]["id"], "call-1");
    // The stored session names the same waiting call, under the same name.
    let session = get_session(addr, "w").await;
    assert_eq!(session["status"], "awaiting_tool_execution");
    assert_eq!(session["pendingToolCalls"], json!([]), "{session}");
    assert_eq!(session["pendingApprovals"], complete["pendingApprovals"]);

    // A user message while the call waits is refused before anything runs.
    let refused = execute(
        addr,
        json!({"sessionId": "w", "input": {"content": "hello?"}}),
    )
    .await;
    assert_eq!(refused.status().as_u16(), 400);
    let answer: Value = refused.json().await.unwrap();
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wait for approval"),
        "{answer}"
    );

    let approved = json!({"sessionId": "w", "input": {"approvals": [{"toolCallId": "call-1", "approved": true}]}});
    let events = parse(&execute(addr, approved).await.text().await.unwrap());
    let ended = events
        .iter()
        .find(|(name, _)| name == "tool_execution_end")
        .map(|(_, data)| data)
        .unwrap();
    assert_eq!(ended["output"], "wiped \"db\"");
    assert_eq!(events.last().unwrap().1["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_execution_answers_at_once_and_runs_to_its_end() {
    let (model, answer) = ChannelModel::new();
    let agent = LlmAgent::builder("travel", model).build();
    let addr = start(Server::new(registry(&Probe::default())).agent(&agent)).await;
    let detached = execute(
        addr,
        json!({"sessionId": "bg", "input": {"content": "think"}, "context": {}, "detach": true}),
    )
    .await;
    assert_eq!(detached.status().as_u16(), 202);
    assert_eq!(detached.headers()["x-session-id"], "bg");
    let started: Value = detached.json().await.unwrap();
    assert_eq!(started["sessionId"], "bg");
    let snapshot_id = started["snapshotId"].as_str().unwrap().to_owned();
    let pending = agent.agent().store().entry(&snapshot_id).await.unwrap();
    assert_eq!(pending.unwrap().status, bidi_session::Status::Pending);

    // Nobody reads it, and it still finishes.
    for event in [
        ModelEvent::TextStart,
        ModelEvent::TextDelta("done".into()),
        ModelEvent::TextEnd,
        ModelEvent::Done {
            stop_reason: StopReason::Stop,
            usage: Usage::default(),
        },
    ] {
        answer.send(event).unwrap();
    }
    for _ in 0..400 {
        let entry = agent.agent().store().entry(&snapshot_id).await.unwrap();
        if entry.unwrap().status == bidi_session::Status::Completed {
            let session = get_session(addr, "bg").await;
            assert_eq!(session["messages"][1]["content"][0]["text"], "done");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the detached execution did not complete");
}
