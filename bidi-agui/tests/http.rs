//! The AG-UI endpoint: `RunAgentInput` in, SSE of AG-UI events out, threads as sessions,
//! frontend tools pending across runs.

#![allow(clippy::unwrap_used)]

#[allow(dead_code, reason = "the helpers of every HTTP test")]
#[path = "../../bidi-http/tests/http/support.rs"]
mod support;

use std::net::SocketAddr;

use bidi_agui::AgUi;
use bidi_http::Server;
use bidi_http::agent::WaitingCalls;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Tool, ToolEvent};
use serde_json::{Value, json};

use crate::support::{Probe, alice_and_bob, registry, start, url};

/// The events of an AG-UI answer: every record is one `data: {json}` line.
fn parse(text: &str) -> Vec<Value> {
    text.split_terminator("\n\n")
        .map(|record| {
            let data = record.strip_prefix("data: ").unwrap();
            assert!(!data.contains('\n'), "{record}");
            serde_json::from_str(data).unwrap()
        })
        .collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect()
}

/// A `RunAgentInput` as `HttpAgent` sends it.
fn input(thread: &str, run: &str, messages: Value, tools: Value) -> Value {
    let mut input = json!({
        "threadId": thread, "runId": run, "protocolVersion": "1.0", "state": {},
        "context": [], "forwardedProps": {}
    });
    input["messages"] = messages;
    input["tools"] = tools;
    input
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

async fn post(addr: SocketAddr, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url(addr, "/agent/helper/ag-ui"))
        .header("accept", "text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// A run that must stream: its events.
async fn run(addr: SocketAddr, body: &Value) -> Vec<Value> {
    let response = post(addr, body).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    parse(&response.text().await.unwrap())
}

/// The client's tool `confirm`.
fn confirm_tool() -> Value {
    json!([{"name": "confirm", "description": "asks the user",
            "parameters": {"type": "object", "properties": {"action": {"type": "string"}}}}])
}

async fn serve(agent: &LlmAgent) -> SocketAddr {
    start(
        Server::new(registry(&Probe::default()))
            .agent(agent)
            .protocol(AgUi::new()),
    )
    .await
}

fn text_of(events: &[Value], kind: &str) -> String {
    events
        .iter()
        .filter(|event| event["type"] == kind)
        .map(|event| event["delta"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_run_streams_one_message_and_echoes_the_state() {
    let model = ScriptedModel::new([Scripted::new().text("Hello world")]).recording();
    let agent = LlmAgent::builder("helper", model.clone()).build();
    let addr = serve(&agent).await;
    let mut body = input(
        "thread-1",
        "run-1",
        json!([{"id": "s", "role": "system", "content": "Be kind."}, user("u1", "hi")]),
        json!([]),
    );
    body["state"] = json!({"count": 1});
    let events = run(addr, &body).await;
    assert_eq!(
        kinds(&events),
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(
        events[0],
        json!({"type": "RUN_STARTED", "threadId": "thread-1", "runId": "run-1"})
    );
    assert_eq!(events[1]["snapshot"], json!({"count": 1}));
    assert_eq!(text_of(&events, "TEXT_MESSAGE_CONTENT"), "Hello world");
    assert_eq!(events[6]["outcome"], json!({"type": "success"}));
    let request = &model.requests()[0];
    assert_eq!(request.system_prompt.as_deref(), Some("Be kind."));

    // The thread is the session: the next run goes on with it.
    let session: Value = reqwest::get(url(addr, "/agent/helper/session/thread-1"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["status"], "completed");
    assert_eq!(session["messages"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_streams_as_a_reasoning_message_before_the_text() {
    let model = ScriptedModel::new([Scripted::new().thinking("let me see").text("Yes")]);
    let agent = LlmAgent::builder("helper", model).build();
    let addr = serve(&agent).await;
    let events = run(
        addr,
        &input("t-r", "r1", json!([user("u", "well?")]), json!([])),
    )
    .await;
    assert_eq!(
        kinds(&events),
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(text_of(&events, "REASONING_MESSAGE_CONTENT"), "let me see");
    assert_eq!(events[3]["role"], "reasoning");
    assert_ne!(events[3]["messageId"], events[9]["messageId"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_tool_runs_and_its_result_streams() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("call-1", "add", &json!({"a": 2, "b": 3})),
        Scripted::new().text("5"),
    ]);
    let add = Tool::dynamic(
        "add",
        "Add",
        "Adds",
        json!({"type": "object"}),
        |_id, args: Value| {
            let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
            futures_util::stream::iter([
                ToolEvent::Delta("adding".into()),
                ToolEvent::Complete {
                    output: sum.to_string(),
                    details: None,
                },
            ])
        },
    );
    let agent = LlmAgent::builder("helper", model).tool(add).build();
    let addr = serve(&agent).await;
    let events = run(
        addr,
        &input("t-l", "r1", json!([user("u", "2+3?")]), json!([])),
    )
    .await;
    assert_eq!(
        kinds(&events),
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(events[2]["toolCallId"], "call-1");
    assert_eq!(events[2]["toolCallName"], "add");
    // The arguments stream in the pieces the model wrote them in.
    let streamed = format!(
        "{}{}",
        events[3]["delta"].as_str().unwrap(),
        events[4]["delta"].as_str().unwrap()
    );
    let args: Value = serde_json::from_str(&streamed).unwrap();
    assert_eq!(args, json!({"a": 2, "b": 3}));
    assert_eq!(events[6]["toolCallId"], "call-1");
    assert_eq!(events[6]["content"], "5");
    assert_ne!(events[6]["messageId"], events[2]["parentMessageId"]);
    assert_eq!(events[10]["outcome"], json!({"type": "success"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_tool_leaves_the_run_pending_and_the_next_run_resumes_it() {
    let model = ScriptedModel::new([
        Scripted::new()
            .text("Asking")
            .tool_call("call-1", "confirm", &json!({"action": "deploy"})),
        Scripted::new().text("Deployed"),
    ])
    .recording();
    let agent = LlmAgent::builder("helper", model.clone()).build();
    // Refusing a user message while a call waits, which is not AG-UI's default.
    let server = Server::new(registry(&Probe::default()))
        .agent(&agent)
        .protocol(AgUi::new().waiting_calls(WaitingCalls::Refuse));
    let addr = start(server).await;
    let tools = confirm_tool();
    let first = run(
        addr,
        &input("t-f", "r1", json!([user("u1", "deploy")]), tools.clone()),
    )
    .await;
    let start = first
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START")
        .unwrap();
    let text = first
        .iter()
        .find(|e| e["type"] == "TEXT_MESSAGE_START")
        .unwrap();
    assert_eq!(
        start["parentMessageId"], text["messageId"],
        "one assistant message"
    );
    assert!(!first.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"));
    assert_eq!(
        first.last().unwrap()["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["call-1"]})
    );
    assert_eq!(model.requests()[0].tools[0].name, "confirm");

    // A user message while the call waits is refused, with the calls it waits for.
    let early = post(
        addr,
        &input(
            "t-f",
            "r2",
            json!([user("u1", "deploy"), user("u2", "well?")]),
            tools.clone(),
        ),
    )
    .await;
    assert_eq!(early.status().as_u16(), 400);
    let answer: Value = early.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "invalid_input");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call-1")
    );

    // The next run carries the client's messages, the tool's answer last.
    let messages = json!([
        user("u1", "deploy"),
        {"id": text["messageId"], "role": "assistant", "content": "Asking",
         "toolCalls": [{"id": "call-1", "type": "function",
                        "function": {"name": "confirm", "arguments": "{\"action\":\"deploy\"}"}}]},
        {"id": "r1", "role": "tool", "toolCallId": "call-1", "content": "true"}
    ]);
    let second = run(addr, &input("t-f", "r2", messages, tools)).await;
    assert_eq!(text_of(&second, "TEXT_MESSAGE_CONTENT"), "Deployed");
    assert_eq!(
        second.last().unwrap()["outcome"],
        json!({"type": "success"})
    );
    assert_eq!(second.last().unwrap()["runId"], "r2");
    let request = &model.requests()[1];
    let last = serde_json::to_value(request.messages.last().unwrap()).unwrap();
    assert_eq!(last["role"], "toolResult");
    assert_eq!(last["toolName"], "confirm");
    assert_eq!(last["content"], "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_failure_mid_text_ends_the_text_then_the_run_with_run_error() {
    let model = ScriptedModel::new([Scripted::new()
        .text("Half an answer")
        .fail("the model broke")]);
    let agent = LlmAgent::builder("helper", model).build();
    let addr = serve(&agent).await;
    let events = run(
        addr,
        &input("t-e", "r1", json!([user("u", "go")]), json!([])),
    )
    .await;
    let kinds = kinds(&events);
    assert_eq!(
        kinds[..3],
        ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START"]
    );
    assert_eq!(kinds[kinds.len() - 2..], ["TEXT_MESSAGE_END", "RUN_ERROR"]);
    let error = events.last().unwrap();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("the model broke"),
        "{error}"
    );
    assert_eq!(error["code"], "model");
    assert!(!kinds.contains(&"RUN_FINISHED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_before_the_stream_with_a_json_error() {
    let agent = LlmAgent::builder("helper", ScriptedModel::new([])).build();
    let addr = serve(&agent).await;
    let refused = |body: Value| async move {
        let response = post(addr, &body).await;
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap();
        (status, answer["error"]["details"].clone(), answer)
    };

    let response = reqwest::Client::new()
        .post(url(addr, "/agent/helper/ag-ui"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "malformed_frame");

    let (status, details, _) = refused(json!({"threadId": "t", "messages": []})).await;
    assert_eq!(
        (status, details["code"].as_str()),
        (400, Some("malformed_frame"))
    );

    let (status, details, _) =
        refused(json!({"threadId": "t", "runId": "r", "messages": [{"id": "x", "role": "robot"}]}))
            .await;
    assert_eq!(status, 400, "{details}");
    assert_eq!(details["path"], "/messages/0/role");

    let (status, details, _) = refused(input("t", "r", json!([]), json!([]))).await;
    assert_eq!(
        (status, details["code"].as_str()),
        (400, Some("invalid_input"))
    );
    assert_eq!(details["path"], "/messages");

    let (status, details, _) = refused(input(
        "t",
        "r",
        json!([user("u", "hi"), {"id": "a", "role": "assistant", "content": "hello"}]),
        json!([]),
    ))
    .await;
    assert_eq!(
        (status, details["path"].as_str()),
        (400, Some("/messages/1"))
    );

    // A resume on a new thread: there is no interrupt to answer, and the run says so.
    let mut resume = input("t", "r", json!([user("u", "hi")]), json!([]));
    resume["resume"] = json!([{"interruptId": "i1", "status": "resolved"}]);
    let events = run(addr, &resume).await;
    assert_eq!(kinds(&events), ["RUN_ERROR"]);
    assert_eq!(events[0]["code"], "no_interrupt");
    // A resume entry of an unknown status is not AG-UI.
    resume["resume"] = json!([{"interruptId": "i1", "status": "maybe"}]);
    let (status, details, _) = refused(resume).await;
    assert_eq!(
        (status, details["code"].as_str()),
        (400, Some("malformed_frame"))
    );

    let (status, details, _) = refused(input("", "r", json!([user("u", "hi")]), json!([]))).await;
    assert_eq!((status, details["path"].as_str()), (400, Some("/threadId")));

    let (status, details, answer) = refused(input(
        "t",
        "r",
        json!([user("u", "hi")]),
        json!([{"name": "x", "description": "", "parameters": {"type": "object"}},
               {"name": "x", "description": "", "parameters": {"type": "object"}}]),
    ))
    .await;
    assert_eq!(
        (status, details["path"].as_str()),
        (400, Some("/tools")),
        "{answer}"
    );

    let response = reqwest::Client::new()
        .post(url(addr, "/agent/nobody/ag-ui"))
        .body(input("t", "r", json!([user("u", "hi")]), json!([])).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_kept_apart_by_identity() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("call-1", "confirm", &json!({})),
        Scripted::new().text("Hello Bob"),
    ])
    .recording();
    let agent = LlmAgent::builder("helper", model.clone()).build();
    let server = alice_and_bob(
        Server::new(registry(&Probe::default()))
            .agent(&agent)
            .protocol(AgUi::new()),
    );
    let addr = start(server).await;
    let post_as = |who: &'static str, body: Value| async move {
        let response = reqwest::Client::new()
            .post(url(addr, "/agent/helper/ag-ui"))
            .header("authorization", format!("Bearer {who}"))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        parse(&response.text().await.unwrap())
    };
    let tools = json!([{"name": "confirm", "description": "asks"}]);
    // Alice's thread waits for a frontend tool...
    let alice = post_as(
        "alice",
        input("shared", "r1", json!([user("u", "hi")]), tools),
    )
    .await;
    assert_eq!(
        alice.last().unwrap()["outcome"]["pendingToolCallIds"],
        json!(["call-1"])
    );
    // ...and Bob's thread of the same id is another, new one: his message is answered.
    let bob = post_as(
        "bob",
        input("shared", "r1", json!([user("u", "hi")]), json!([])),
    )
    .await;
    assert_eq!(text_of(&bob, "TEXT_MESSAGE_CONTENT"), "Hello Bob");
    assert_eq!(
        model.requests()[1].messages.len(),
        1,
        "Bob's thread has only his message"
    );
}

/// A thread another run holds refuses the next one: as the run's `RUN_ERROR` for a client that
/// asks for events (as `HttpAgent` does, whose users would see an HTTP error's raw body), as 409
/// with the JSON error for any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_that_runs_refuses_another_run() {
    use bidi_llm::testing::ChannelModel;
    use bidi_llm::{ModelEvent, StopReason, Usage};

    let (model, tx) = ChannelModel::new();
    let agent = LlmAgent::builder("helper", model).build();
    let addr = serve(&agent).await;
    // The first run has started once its answer's head is in; the model has not answered.
    let first = post(
        addr,
        &input("busy", "r1", json!([user("u", "hi")]), json!([])),
    )
    .await;
    assert_eq!(first.status().as_u16(), 200);
    let again = input(
        "busy",
        "r2",
        json!([user("u", "hi"), user("u2", "again")]),
        json!([]),
    );
    let events = run(addr, &again).await;
    assert_eq!(kinds(&events), ["RUN_ERROR"]);
    assert_eq!(events[0]["code"], "session_running");
    let message = events[0]["message"].as_str().unwrap();
    assert!(message.contains("busy with another answer"), "{message}");

    let second = reqwest::Client::new()
        .post(url(addr, "/agent/helper/ag-ui"))
        .body(again.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(second.status().as_u16(), 409);
    let answer: Value = second.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "session_running");

    tx.send(ModelEvent::TextStart).unwrap();
    tx.send(ModelEvent::TextDelta("done".into())).unwrap();
    tx.send(ModelEvent::Done {
        stop_reason: StopReason::Stop,
        usage: Usage::default(),
    })
    .unwrap();
    let events = parse(&first.text().await.unwrap());
    assert_eq!(text_of(&events, "TEXT_MESSAGE_CONTENT"), "done");
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}

/// By default a user who types something else while a frontend tool waits moves on: the call
/// is answered as set aside, and the model answers the new message in the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_message_while_a_frontend_tool_waits_sets_the_call_aside() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("call-1", "confirm", &json!({"action": "deploy"})),
        Scripted::new().text("Something else, then."),
    ])
    .recording();
    let agent = LlmAgent::builder("helper", model.clone()).build();
    let addr = serve(&agent).await;
    let first = run(
        addr,
        &input("t-a", "r1", json!([user("u1", "deploy")]), confirm_tool()),
    )
    .await;
    assert_eq!(
        first.last().unwrap()["outcome"]["pendingToolCallIds"],
        json!(["call-1"])
    );
    let messages = json!([
        user("u1", "deploy"),
        user("u2", "never mind, what time is it?")
    ]);
    let second = run(addr, &input("t-a", "r2", messages, confirm_tool())).await;
    assert_eq!(
        text_of(&second, "TEXT_MESSAGE_CONTENT"),
        "Something else, then."
    );
    assert_eq!(
        second.last().unwrap()["outcome"],
        json!({"type": "success"})
    );
    // The model read the call set aside, then the new message.
    let request = &model.requests()[1];
    let tail: Vec<Value> = request.messages[request.messages.len() - 2..]
        .iter()
        .map(|message| serde_json::to_value(message).unwrap())
        .collect();
    assert_eq!(tail[0]["role"], "toolResult");
    assert_eq!(tail[0]["isError"], true);
    assert_eq!(tail[1]["role"], "user");
    assert_eq!(tail[1]["content"], "never mind, what time is it?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_read_mid_run_shows_the_message_the_run_answers() {
    use bidi_llm::ModelEvent;
    use bidi_llm::testing::ChannelModel;
    use futures_util::StreamExt as _;

    let (model, answer) = ChannelModel::new();
    let agent = LlmAgent::builder("helper", model).build();
    let addr = serve(&agent).await;
    let response = post(
        addr,
        &input("t-mid", "r1", json!([user("u1", "hello")]), json!([])),
    )
    .await;
    answer.send(ModelEvent::TextStart).unwrap();
    answer.send(ModelEvent::TextDelta("Hel".into())).unwrap();
    let mut stream = response.bytes_stream();
    let mut read = String::new();
    while !read.contains("\"Hel\"") {
        read.push_str(std::str::from_utf8(&stream.next().await.unwrap().unwrap()).unwrap());
    }
    let thread = |addr| async move {
        let response = reqwest::get(url(addr, "/agent/helper/ag-ui/t-mid")).await;
        response.unwrap().json::<Vec<Value>>().await.unwrap()
    };
    // A client that reloads now reads the question the running answer is for.
    let mid = thread(addr).await;
    assert_eq!(mid.len(), 1, "{mid:?}");
    assert_eq!(
        (&mid[0]["role"], &mid[0]["content"]),
        (&json!("user"), &json!("hello"))
    );
    bidi_llm::testing::finish_text(&answer, "lo");
    while let Some(bytes) = stream.next().await {
        read.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
    }
    assert!(read.contains("RUN_FINISHED"), "{read}");
    let after = thread(addr).await;
    let roles: Vec<&Value> = after.iter().map(|message| &message["role"]).collect();
    assert_eq!(roles, [&json!("user"), &json!("assistant")], "{after:?}");
}
