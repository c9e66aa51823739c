//! The official A2A SDKs' clients against bidi-http's A2A wire: `@a2a-js/sdk` 1.3.0
//! (`tests/node/a2a_client.mjs`) and the Python `a2a-sdk` 1.3.0 (`tests/a2a/a2a_client.py`),
//! both speaking A2A 1.0 over JSON-RPC, each against a server of its own on a free port of
//! 127.0.0.1 whose agents answer from scripts.
//!
//! Each client script prints one JSON line per check, what it saw; the assertions are here.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use bidi_a2a::PushNotifications;
use bidi_flow::Registry;
use bidi_http::Server;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, ModelEvent, StopReason, Tool, Usage};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tests::node::{Summary, client};

/// `lookup`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // Read by the schema, not by the test.
struct Query {
    query: String,
}

/// An agent `name` answering `script`, with the client's `lookup` and the approval-gated
/// `wipe`.
fn lookup_and_wipe(name: &str, script: Vec<Scripted>) -> LlmAgent {
    LlmAgent::builder(name, ScriptedModel::new(script))
        .tool(Tool::remote::<Query>(
            "lookup",
            "Lookup",
            "Looks a file up on the client's disk",
        ))
        .tool(tests::tools::wipe(Arc::new(AtomicUsize::new(0))))
        .build()
}

/// What the clients talk to: `helper` and `tools` answer from `helper` and `tools`, `ask`
/// from `ask_script` (a task that asks for input again and again), `slow` answers once
/// `POST /finish` says so (or calls `lookup` once `POST /ask` says so), `memo` keeps no
/// sessions, `hooked` answers once (its task's state changes pushed to webhooks, on
/// 127.0.0.1 as this server allows).
async fn serve(helper: &[Scripted], tools: &[Scripted], memo: &[Scripted]) -> String {
    let helper = LlmAgent::builder("helper", ScriptedModel::new(helper.to_vec()))
        .tool(Tool::remote::<Query>(
            "lookup",
            "Lookup",
            "Looks a file up on the client's disk",
        ))
        .build();
    let tools = lookup_and_wipe("tools", tools.to_vec());
    let ask = lookup_and_wipe("ask", ask_script());
    let (model, say) = ChannelModel::new();
    // A short lease: a canceled task stops at its next renewal, a third of a term later.
    let slow = LlmAgent::builder("slow", model)
        .tool(Tool::remote::<Query>(
            "lookup",
            "Lookup",
            "Looks a file up on the client's disk",
        ))
        .lease(Duration::from_secs(1))
        .build();
    let asks = say.clone();
    let ask_route = axum::routing::post(move || {
        for event in [
            ModelEvent::ToolCallStart {
                id: "s1".into(),
                name: "lookup".into(),
            },
            ModelEvent::ToolCallDelta(r#"{"query":"slow"}"#.into()),
            ModelEvent::ToolCallEnd,
            ModelEvent::Done {
                stop_reason: StopReason::ToolCalls,
                usage: Usage::default(),
            },
        ] {
            let _ = asks.send(event);
        }
        async {}
    });
    let memo = LlmAgent::builder("memo", ScriptedModel::new(memo.to_vec()))
        .client_managed()
        .build();
    let hooked = LlmAgent::builder(
        "hooked",
        ScriptedModel::new([Scripted::new().text("Noted.")]),
    )
    .build();
    let push = PushNotifications::new()
        .allow_private_addresses()
        .backoff(Duration::from_millis(10));
    let finish = axum::routing::post(move || {
        for event in [
            ModelEvent::TextStart,
            ModelEvent::TextDelta("slow answer".into()),
            ModelEvent::TextEnd,
            ModelEvent::Done {
                stop_reason: StopReason::Stop,
                usage: Usage::default(),
            },
        ] {
            let _ = say.send(event);
        }
        async {}
    });
    let server = Server::new(Registry::new())
        .agent(&helper)
        .agent(&tools)
        .agent(&ask)
        .agent(&slow)
        .agent(&memo)
        .agent(&hooked)
        .protocol(bidi_a2a::A2a::new().push_notifications(push))
        .routes(
            axum::Router::new()
                .route("/finish", finish)
                .route("/ask", ask_route),
        );
    format!("http://{}", tests::http::serve(server).await)
}

/// The checks a script printed, by name; fails on a check that threw.
fn checks(summary: &Summary, expected: usize) -> HashMap<String, Value> {
    // Shown with `--nocapture`, or when the test fails.
    println!("{summary}");
    let checks: HashMap<String, Value> = summary
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|check| Some((check.get("check")?.as_str()?.to_owned(), check)))
        .collect();
    for (name, check) in &checks {
        assert!(
            check.get("error").is_none(),
            "check `{name}` threw:\n{summary}"
        );
    }
    assert_eq!(checks.len(), expected, "{summary}");
    assert!(summary.succeeded(), "{summary}");
    checks
}

/// Asserts that `actual` has every field of `expected` with its value.
#[track_caller]
fn has(actual: &Value, expected: &Value) {
    let Value::Object(fields) = expected else {
        assert_eq!(actual, expected);
        return;
    };
    for (key, value) in fields {
        let found = actual.get(key).unwrap_or(&Value::Null);
        if value.is_object() {
            has(found, value);
        } else {
            assert_eq!(found, value, "`{key}` in {actual:#}");
        }
    }
}

fn helper_script() -> Vec<Scripted> {
    vec![
        Scripted::new().text("Hello there!"),
        Scripted::new().text("Second answer"),
        Scripted::new().text_chunks(["Stream", "ing ", "answer"]),
        Scripted::new().text("Later answer"),
        Scripted::new().fail("the model is down"),
    ]
}

fn tools_script() -> Vec<Scripted> {
    vec![
        Scripted::new().tool_call("c1", "lookup", &json!({"query": "file"})),
        Scripted::new().text("Found it in /tmp/file"),
        Scripted::new().tool_call("c2", "wipe", &json!({"target": "disk"})),
        Scripted::new().text("Wiped."),
        Scripted::new().tool_call("c3", "lookup", &json!({"query": "file"})),
        Scripted::new().text("Found again"),
    ]
}

/// `ask`'s answers, the same for both clients, which run the same checks on it in order: a
/// task that asks for a result, then an approval, then completes; one answered with text; one
/// canceled while it waits, then a new task in its context.
fn ask_script() -> Vec<Scripted> {
    vec![
        Scripted::new().tool_call("k1", "lookup", &json!({"query": "file"})),
        Scripted::new()
            .text("Found it.")
            .tool_call("k2", "wipe", &json!({"target": "disk"})),
        Scripted::new().text("All done."),
        Scripted::new().tool_call("k3", "lookup", &json!({"query": "file"})),
        Scripted::new().text("Hi."),
        Scripted::new().tool_call("k4", "lookup", &json!({"query": "file"})),
        Scripted::new().text("Something else, then."),
    ]
}

/// What both clients saw of a task that lives across its inputs (`ask`'s script).
fn lives_across_its_inputs(checks: &HashMap<String, Value>) {
    let rounds = &checks["a task lives across its inputs"];
    has(
        rounds,
        &json!({
            "asked": {"state": "TASK_STATE_INPUT_REQUIRED",
                      "statusData": {"awaitingToolExecution": [
                          {"id": "k1", "name": "lookup", "arguments": {"query": "file"}}]}},
            "again": {"state": "TASK_STATE_INPUT_REQUIRED", "answer": "Found it.",
                      "statusData": {"awaitingApproval": [
                          {"id": "k2", "name": "wipe", "arguments": {"target": "disk"}}]}},
            "waiting": {"state": "TASK_STATE_INPUT_REQUIRED", "answer": "Found it."},
            "done": {"state": "TASK_STATE_COMPLETED", "answer": "Found it.|All done."},
            "got": {"state": "TASK_STATE_COMPLETED", "answer": "Found it.|All done."},
            "sameTask": [true, true, true, true],
        }),
    );
    let history = rounds["got"]["history"].as_array().unwrap();
    assert_eq!(history.first().unwrap(), "user:find the file", "{rounds}");
    assert_eq!(history.last().unwrap(), "agent:All done.", "{rounds}");

    let text = &checks["a task answered with text"];
    has(
        text,
        &json!({"asked": "TASK_STATE_INPUT_REQUIRED", "first": "task:TASK_STATE_WORKING",
                "last": "status:TASK_STATE_COMPLETED", "answer": "Hi.", "sameTask": true,
                "got": {"state": "TASK_STATE_COMPLETED", "answer": "Hi."}}),
    );
    // The call was set aside: its result says the user moved on.
    let said = text["got"]["history"].to_string();
    assert!(said.contains("moved on"), "{text}");

    has(
        &checks["cancel a task that waits for input"],
        &json!({
            "canceled": {"state": "TASK_STATE_CANCELED", "sameTask": true},
            "got": "TASK_STATE_CANCELED",
            "message": {"refused": true, "code": -32004},
            "again": {"refused": true, "code": -32002},
            "subscribe": {"refused": true, "code": -32004},
            "next": {"state": "TASK_STATE_COMPLETED", "answer": "Something else, then.",
                     "newTask": true, "sameContext": true},
        }),
    );
}

/// What both clients saw of a continuation of `slow`'s task, followed and canceled.
fn continuations_are_followed_and_canceled(checks: &HashMap<String, Value>) {
    let followed = &checks["subscribe to a continuation"];
    has(
        followed,
        &json!({"asked": "status:TASK_STATE_INPUT_REQUIRED", "first": "task",
                "sameTask": true, "answer": "slow answer",
                "last": "status:TASK_STATE_COMPLETED", "got": "TASK_STATE_COMPLETED"}),
    );
    has(
        &checks["cancel a running continuation"],
        &json!({"canceled": "TASK_STATE_CANCELED", "sameTask": true,
                "last": "status:TASK_STATE_CANCELED", "got": "TASK_STATE_CANCELED"}),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_js_sdk_client_drives_agents() {
    js_sdk_client("JSONRPC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_js_sdk_client_drives_agents_over_http_json() {
    js_sdk_client("HTTP+JSON").await;
}

/// What the JS SDK's client, speaking `binding`, saw of every check.
async fn js_sdk_client(binding: &str) {
    let memo = [Scripted::new().text("I keep nothing.")];
    let base = serve(&helper_script(), &tools_script(), &memo).await;
    let (hooks, hits) = tests::webhook::receiver().await;
    let args = vec![base.clone(), hooks, binding.to_owned()];
    let summary = client("a2a_client.mjs", args).await;
    let checks = checks(&summary, 20);
    pushed(&checks["push notifications"], &hits, "js").await;
    lives_across_its_inputs(&checks);
    continuations_are_followed_and_canceled(&checks);

    let card = &checks["card"];
    has(
        card,
        &json!({
            "name": "helper", "streaming": true, "url": format!("{base}/agent/helper/a2a"),
            "binding": "JSONRPC", "version": "1.0",
            "inputModes": ["text/plain", "application/json"],
            "outputModes": ["text/plain", "application/json"],
            "skills": ["helper", "helper.lookup"], "sameCardUnderTheEndpoint": true,
        }),
    );

    let send = &checks["send"];
    has(
        send,
        &json!({"state": "TASK_STATE_COMPLETED", "answer": "Hello there!",
                "artifacts": ["answer-1"], "history": ["user:hello", "agent:Hello there!"]}),
    );
    assert_ne!(
        send["id"], send["contextId"],
        "a task is a turn of its context"
    );
    has(
        &checks["send in the same context"],
        &json!({"state": "TASK_STATE_COMPLETED", "answer": "Second answer", "sameContext": true,
                "newTask": true, "history": ["user:again", "agent:Second answer"]}),
    );
    has(
        &checks["stream"],
        &json!({
            "kinds": [
                "task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING",
                "artifact:answer-1:new", "artifact:answer-1:append", "artifact:answer-1:append",
                "artifact:answer-1:append:last", "status:TASK_STATE_COMPLETED",
            ],
            "answer": "Streaming answer",
        }),
    );
    has(
        &checks["get"],
        &json!({"state": "TASK_STATE_COMPLETED", "answer": "Streaming answer",
                "history": ["agent:Streaming answer"]}),
    );
    has(
        &checks["send returning at once, then get"],
        &json!({"first": "TASK_STATE_WORKING", "sameTask": true,
                "state": "TASK_STATE_COMPLETED", "answer": "Later answer"}),
    );
    let failing = &checks["a failing turn"];
    has(failing, &json!({"state": "TASK_STATE_FAILED"}));
    let said = failing["statusText"].as_str().unwrap();
    assert!(said.contains("the model is down"), "{failing}");

    let remote = &checks["input required: a remote tool"];
    has(
        remote,
        &json!({
            "asked": {"state": "TASK_STATE_INPUT_REQUIRED", "statusData": {"awaitingToolExecution": [
                {"id": "c1", "name": "lookup", "arguments": {"query": "file"}}]}},
            "answered": {"state": "TASK_STATE_COMPLETED", "answer": "Found it in /tmp/file"},
            "sameContext": true, "sameTask": true,
        }),
    );
    let approval = &checks["input required: an approval, streamed"];
    has(
        approval,
        &json!({
            "pending": {"awaitingApproval": [{"id": "c2", "name": "wipe", "arguments": {"target": "disk"}}]},
            "answered": {"answer": "Wiped."}, "sameTask": true,
        }),
    );
    assert_eq!(
        approval["asked"].as_array().unwrap().last().unwrap(),
        "status:TASK_STATE_INPUT_REQUIRED"
    );
    assert_eq!(
        approval["answered"]["kinds"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        "status:TASK_STATE_COMPLETED"
    );
    let wrong = &checks["input required: an answer to no pending call"];
    has(
        wrong,
        &json!({"refused": {"refused": true, "code": -32602, "name": "RequestMalformedError"},
                "answered": "TASK_STATE_COMPLETED"}),
    );

    let canceled = &checks["cancel a running task"];
    has(
        canceled,
        &json!({"canceled": "TASK_STATE_CANCELED", "after": "TASK_STATE_CANCELED"}),
    );
    assert_eq!(
        canceled["stream"].as_array().unwrap().last().unwrap(),
        "status:TASK_STATE_CANCELED",
        "{canceled}"
    );
    let subscribed = &checks["subscribe to a running task"];
    has(
        subscribed,
        &json!({"first": "task", "sameTask": true, "answer": "slow answer"}),
    );
    assert_eq!(
        subscribed["kinds"].as_array().unwrap().last().unwrap(),
        "status:TASK_STATE_COMPLETED"
    );

    let errors = &checks["errors"];
    has(
        errors,
        &json!({
            "unknownTask": {"refused": true, "name": "TaskNotFoundError", "code": -32001},
            "finishedTask": {"refused": true, "name": "TaskNotCancelableError", "code": -32002},
            "subscribeFinished": {"refused": true, "name": "UnsupportedOperationError", "code": -32004},
            "messageOnFinishedTask": {"refused": true, "code": -32004},
            "unknownContext": {"refused": true, "code": -32602},
            "clientManagedTasks": {"refused": true, "code": -32004},
            "clientManagedSend": {"state": "TASK_STATE_COMPLETED", "answer": "I keep nothing."},
            "parse": -32700, "method": -32601, "legacy": -32601, "version": -32009,
            "noVersion": -32009, "extendedCard": -32004, "legacyWithVersion": -32601,
            "params": {"code": -32602},
            "notFoundInfo": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                              "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org",
                              "metadata": {"taskId": "no-such-task"}}],
            "push": {"refused": true, "code": -32602},
            "modes": {"refused": true, "code": -32005},
        }),
    );
    let violation = &errors["params"]["data"][0];
    assert_eq!(
        violation["@type"], "type.googleapis.com/google.rpc.BadRequest",
        "{errors}"
    );
    assert_eq!(
        violation["fieldViolations"][0]["field"], "message.parts[0].text",
        "{errors}"
    );

    has(
        &checks["list tasks"],
        &json!({
            "total": 5, "count": 5, "pageSize": 50, "lastPage": "", "newestFirst": true,
            "listsFirst": true, "noArtifacts": true, "pageOne": true, "pageTwo": true,
            "contextTasks": 2, "sameContext": true,
            "contextAnswers": ["Hello there!", "Second answer"], "noHistory": true,
            "completedOnly": true,
            "clientManaged": {"refused": true, "code": -32004},
        }),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_python_sdk_client_drives_agents() {
    python_sdk_client("JSONRPC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_python_sdk_client_drives_agents_over_http_json() {
    python_sdk_client("HTTP+JSON").await;
}

/// What the Python SDK's client, speaking `binding`, saw of every check.
async fn python_sdk_client(binding: &'static str) {
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("a2a");
    let memo = [Scripted::new().text("I keep nothing.")];
    let base = serve(&helper_script(), &tools_script(), &memo).await;
    let (hooks, hits) = tests::webhook::receiver().await;
    let summary = tokio::task::spawn_blocking(move || {
        let python = tests::python::venv(&peers.join("requirements.txt")).unwrap();
        let mut script = Command::new(python);
        let script_path = peers.join("a2a_client.py");
        script.arg(script_path).arg(base).arg(hooks).arg(binding);
        tests::node::run(script)
    })
    .await
    .unwrap();
    let checks = checks(&summary, 15);
    pushed(&checks["push notifications"], &hits, "py").await;
    lives_across_its_inputs(&checks);
    continuations_are_followed_and_canceled(&checks);
    has(
        &checks["card"],
        &json!({"name": "helper", "streaming": true, "binding": "JSONRPC", "version": "1.0"}),
    );
    has(
        &checks["send"],
        &json!({"state": "TASK_STATE_COMPLETED", "answer": "Hello there!",
                "history": ["user:hello", "agent:Hello there!"]}),
    );
    has(
        &checks["send in the same context"],
        &json!({"state": "TASK_STATE_COMPLETED", "answer": "Second answer", "sameContext": true}),
    );
    has(
        &checks["stream"],
        &json!({
            "kinds": [
                "task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING",
                "artifact:answer-1:new", "artifact:answer-1:append", "artifact:answer-1:append",
                "artifact:answer-1:append:last", "status:TASK_STATE_COMPLETED",
            ],
            "answer": "Streaming answer",
        }),
    );
    has(
        &checks["get"],
        &json!({"state": "TASK_STATE_COMPLETED", "answer": "Streaming answer",
                "history": ["agent:Streaming answer"]}),
    );
    has(
        &checks["input required: a remote tool"],
        &json!({
            "asked": {"state": "TASK_STATE_INPUT_REQUIRED", "statusData": {"awaitingToolExecution": [
                {"id": "c1", "name": "lookup", "arguments": {"query": "file"}}]}},
            "answered": {"state": "TASK_STATE_COMPLETED", "answer": "Found it in /tmp/file"},
        }),
    );
    has(
        &checks["input required: an approval"],
        &json!({
            "asked": {"state": "TASK_STATE_INPUT_REQUIRED", "statusData": {"awaitingApproval": [
                {"id": "c2", "name": "wipe", "arguments": {"target": "disk"}}]}},
            "answered": {"state": "TASK_STATE_COMPLETED", "answer": "Wiped."},
            "sameTask": true,
        }),
    );
    let canceled = &checks["cancel a running task and errors"];
    has(
        canceled,
        &json!({
            "canceled": "TASK_STATE_CANCELED", "last": "status:TASK_STATE_CANCELED",
            "unknownTask": "TaskNotFoundError", "finishedTask": "TaskNotCancelableError",
            "clientManaged": "UnsupportedOperationError",
        }),
    );
    has(
        &checks["list tasks"],
        &json!({
            "total": 3, "ids": 3, "lastPage": "", "newestFirst": true, "noArtifacts": true,
            "pages": true, "pageSize": 1, "contextAnswers": ["Hello there!", "Second answer"],
            "working": 0, "clientManaged": "UnsupportedOperationError",
        }),
    );
}

/// What a client saw of push notification configs on `hooked`'s task, and what the webhook
/// of its message's config (`hook/{who}`) got: each state change once, with the credentials.
async fn pushed(seen: &Value, hits: &tests::webhook::Hits, who: &str) {
    has(
        seen,
        &json!({"state": "TASK_STATE_COMPLETED", "made": format!("{who}-made"),
                "listed": [format!("{who}-inline"), format!("{who}-made")],
                "after": [format!("{who}-inline")]}),
    );
    let path = format!("hook/{who}");
    let got = hits.until(&path, "TASK_STATE_COMPLETED").await;
    let states: Vec<(&str, &str)> = got
        .iter()
        .map(|hit| (hit.path.as_str(), hit.state()))
        .collect();
    assert_eq!(
        states,
        [
            (&*path, "TASK_STATE_WORKING"),
            (&*path, "TASK_STATE_COMPLETED")
        ]
    );
    for hit in &got {
        assert_eq!(
            hit.authorization.as_deref(),
            Some(&*format!("Bearer {who}-secret"))
        );
        assert_eq!(hit.token.as_deref(), Some(&*format!("{who}-token")));
        assert_eq!(hit.body["statusUpdate"]["taskId"], seen["id"]);
    }
}

/// One JSON-RPC call to agent `name`'s A2A endpoint.
async fn rpc(http: &reqwest::Client, base: &str, name: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = http
        .post(format!("{base}/agent/{name}/a2a"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    response.json().await.unwrap()
}

/// A user message saying `text`, answered at once with the working task.
fn at_once(text: &str) -> Value {
    json!({
        "message": {"messageId": format!("m-{text}"), "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": true},
    })
}

/// `SubscribeToTask` on a task answered at once streams its events to the end, and
/// `CancelTask` cancels a running task once: a second cancel, like a cancel of a finished
/// task, is `TaskNotCancelableError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_answered_at_once_is_subscribed_to_and_canceled_once() {
    use futures_util::StreamExt as _;

    let base = serve(&helper_script(), &tools_script(), &[]).await;
    let http = reqwest::Client::new();
    let sent = rpc(&http, &base, "slow", "SendMessage", at_once("wait")).await;
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        sent["result"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );

    let subscribed = http
        .post(format!("{base}/agent/slow/a2a"))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": "sub", "method": "SubscribeToTask",
                      "params": {"id": task}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(subscribed.status(), 200);
    // The same task over HTTP+JSON: its events bare.
    let over_rest = http
        .post(format!("{base}/agent/slow/a2a/tasks/{task}:subscribe"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(over_rest.status(), 200);
    let mut body = subscribed.bytes_stream();
    let mut text = String::new();
    let mut finished = false;
    let mut events = Vec::<Value>::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !events
        .iter()
        .any(|event| event["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
    {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("the task's events in time")
            .expect("the stream goes on to the task's end")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let record: String = text.drain(..end + 2).collect();
            let data = record.trim().strip_prefix("data: ").unwrap();
            events.push(serde_json::from_str(data).unwrap());
        }
        // The subscriber has what was written so far: let the model answer.
        if !events.is_empty() && !finished {
            finished = true;
            http.post(format!("{base}/finish")).send().await.unwrap();
        }
    }
    assert!(
        events.iter().all(|event| event["id"] == "sub"),
        "{events:#?}"
    );
    let answer: String = events
        .iter()
        .filter_map(|event| {
            event["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str()
        })
        .collect();
    assert_eq!(answer, "slow answer", "{events:#?}");
    let bare = tokio::time::timeout(Duration::from_secs(120), over_rest.text())
        .await
        .expect("the HTTP+JSON stream ends with the task")
        .unwrap();
    let bare: Vec<Value> = bare
        .split("\n\n")
        .filter(|record| !record.trim().is_empty())
        .map(|record| serde_json::from_str(record.trim().strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    let results: Vec<&Value> = events.iter().map(|event| &event["result"]).collect();
    assert_eq!(
        bare.iter().collect::<Vec<_>>(),
        results,
        "the same events, bare"
    );

    let over = rpc(&http, &base, "slow", "CancelTask", json!({"id": task})).await;
    assert_eq!(over["error"]["code"], -32002, "{over}");

    let sent = rpc(&http, &base, "slow", "SendMessage", at_once("wait again")).await;
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_owned();
    let canceled = rpc(&http, &base, "slow", "CancelTask", json!({"id": task})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let again = rpc(&http, &base, "slow", "CancelTask", json!({"id": task})).await;
    assert_eq!(again["error"]["code"], -32002, "{again}");
}
