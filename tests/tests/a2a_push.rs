//! A2A push notifications from bidi's A2A wire to webhook receivers on 127.0.0.1: each state
//! change of a task POSTed once, in order, with the config's credentials; a failing receiver
//! tried a bounded number of times; configs made, read, listed and deleted per task and per
//! identity; addresses refused as the server says.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bidi_a2a::{A2a, PushNotifications};
use bidi_flow::Registry;
use bidi_http::Server;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tests::webhook::{Hit, receiver as receivers};

/// `lookup`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // Read by the schema, not by the test.
struct Query {
    query: String,
}

/// A server of `ask`, which calls the client's `lookup` and then answers `script`'s text, for
/// callers who authenticate with `Bearer {name}`; its push notifications as `push` says.
async fn serve(script: Vec<Scripted>, push: PushNotifications) -> String {
    let ask = LlmAgent::builder("ask", ScriptedModel::new(script))
        .tool(Tool::remote::<Query>("lookup", "Lookup", "Looks a file up"))
        .build();
    let server = Server::new(Registry::new())
        .agent(&ask)
        .protocol(A2a::new().push_notifications(push));
    format!(
        "http://{}",
        tests::http::serve(tests::http::by_bearer(server)).await
    )
}

/// Push notifications to the test's receivers, retried quickly.
fn local() -> PushNotifications {
    PushNotifications::new()
        .allow_private_addresses()
        .attempts(3)
        .backoff(Duration::from_millis(10))
}

/// A lookup, then an answer; twice.
fn asks() -> Vec<Scripted> {
    let mut script = Vec::new();
    for n in 1..=3 {
        script.push(Scripted::new().tool_call(&format!("k{n}"), "lookup", &json!({"query": "f"})));
        script.push(Scripted::new().text(&format!("found {n}")));
    }
    script
}

/// JSON-RPC `method` with `params` to `ask`, as `who`, at A2A 1.0.
async fn call(base: &str, who: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = reqwest::Client::new()
        .post(format!("{base}/agent/ask/a2a"))
        .header("A2A-Version", "1.0")
        .bearer_auth(who)
        .json(&body)
        .send()
        .await
        .unwrap();
    response.json().await.unwrap()
}

fn message(text: &str, task: Option<&str>) -> Value {
    let mut message = json!({"messageId": format!("m-{text}"), "role": "ROLE_USER",
                             "parts": [{"text": text}]});
    if let Some(task) = task {
        message["taskId"] = json!(task);
    }
    message
}

/// The answer to the lookup task `task` waits on.
fn results(task: &str, call: &str) -> Value {
    json!({"messageId": format!("r-{call}"), "role": "ROLE_USER", "taskId": task,
           "parts": [{"data": {"results": [{"toolCallId": call, "output": "here"}]}}]})
}

/// Answers the lookup `k1` task `task` waits on, as `who`: the task completes.
async fn answer(base: &str, who: &str, task: &str) {
    let params = json!({"message": results(task, "k1")});
    let sent = call(base, who, "SendMessage", params).await;
    let state = &sent["result"]["task"]["status"]["state"];
    assert_eq!(state, "TASK_STATE_COMPLETED", "{sent}");
}

/// A task asking for input, sent by `who` with `configuration`: its id.
async fn waiting(base: &str, who: &str, configuration: Value) -> String {
    let params = json!({"message": message("look", None), "configuration": configuration});
    let sent = call(base, who, "SendMessage", params).await;
    let task = &sent["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{sent}"
    );
    task["id"].as_str().unwrap().to_owned()
}

/// A webhook gets each state change of its task once, in order, across the task's turns, as
/// A2A's `StreamResponse` with the config's credentials; configs are read back and deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_gets_each_state_change_once_with_its_credentials() {
    let (hooks, hits) = receivers().await;
    let base = serve(asks(), local()).await;
    let config = json!({"url": format!("{hooks}/hook/a"), "token": "tok-1",
                        "authentication": {"scheme": "Bearer", "credentials": "s3cret"}});
    let task = waiting(
        &base,
        "alice",
        json!({"taskPushNotificationConfig": config}),
    )
    .await;
    answer(&base, "alice", &task).await;

    let got = hits.until("hook/a", "TASK_STATE_COMPLETED").await;
    let states: Vec<&str> = got.iter().map(Hit::state).collect();
    assert_eq!(
        states,
        [
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
        ]
    );
    for hit in &got {
        assert_eq!(hit.path, "hook/a");
        assert_eq!(hit.authorization.as_deref(), Some("Bearer s3cret"));
        assert_eq!(hit.token.as_deref(), Some("tok-1"));
        assert_eq!(hit.content_type.as_deref(), Some("application/a2a+json"));
        assert_eq!(hit.body["statusUpdate"]["taskId"], task.as_str());
        assert!(hit.body["statusUpdate"]["status"]["timestamp"].is_string());
    }
    let waits = &got[1].body["statusUpdate"]["status"]["message"]["parts"][0]["data"];
    assert_eq!(waits["awaitingToolExecution"][0]["id"], "k1", "{waits}");

    // The message's config is the task's, read back and deleted.
    let listed = call(
        &base,
        "alice",
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await;
    let configs = listed["result"]["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 1, "{listed}");
    assert_eq!(listed["result"]["nextPageToken"], "");
    let id = configs[0]["id"].as_str().unwrap();
    assert_eq!(configs[0]["taskId"], task.as_str());
    assert_eq!(configs[0]["url"], format!("{hooks}/hook/a"));
    let named = json!({"taskId": task, "id": id});
    let got = call(
        &base,
        "alice",
        "GetTaskPushNotificationConfig",
        named.clone(),
    )
    .await;
    assert_eq!(got["result"], configs[0], "{got}");
    let deleted = call(
        &base,
        "alice",
        "DeleteTaskPushNotificationConfig",
        named.clone(),
    )
    .await;
    assert_eq!(deleted["result"], json!({}), "{deleted}");
    let gone = call(&base, "alice", "GetTaskPushNotificationConfig", named).await;
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    assert!(hits.none_left().await, "each state change once");
}

/// Configs are made on a task of the caller's only, and seen by the caller only; a task
/// canceled while it waits for input tells its webhooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_are_per_task_and_identity_and_a_cancel_is_pushed() {
    let (hooks, hits) = receivers().await;
    let base = serve(asks(), local()).await;
    let task = waiting(&base, "alice", json!({})).await;
    let config = json!({"taskId": task, "id": "mine", "url": format!("{hooks}/hook/b")});
    let made = call(
        &base,
        "alice",
        "CreateTaskPushNotificationConfig",
        config.clone(),
    )
    .await;
    assert_eq!(made["result"]["id"], "mine", "{made}");

    for (who, method, params) in [
        ("bob", "CreateTaskPushNotificationConfig", config.clone()),
        (
            "bob",
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "mine"}),
        ),
        (
            "bob",
            "ListTaskPushNotificationConfigs",
            json!({"taskId": task}),
        ),
        (
            "bob",
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task, "id": "mine"}),
        ),
        (
            "alice",
            "GetTaskPushNotificationConfig",
            json!({"taskId": task, "id": "other"}),
        ),
        (
            "alice",
            "ListTaskPushNotificationConfigs",
            json!({"taskId": "no-such-task"}),
        ),
    ] {
        let refused = call(&base, who, method, params).await;
        assert_eq!(
            refused["error"]["code"], -32001,
            "{who} {method}: {refused}"
        );
    }
    let no_task = json!({"url": format!("{hooks}/hook/b")});
    let refused = call(&base, "alice", "CreateTaskPushNotificationConfig", no_task).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let canceled = call(&base, "alice", "CancelTask", json!({"id": task})).await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    let hit = hits.next().await;
    assert_eq!(
        (hit.path.as_str(), hit.state()),
        ("hook/b", "TASK_STATE_CANCELED")
    );
    assert_eq!(hit.body["statusUpdate"]["taskId"], task.as_str());
    assert!(hits.none_left().await);
}

/// A webhook that fails is tried a bounded number of times per notification (a 5xx three
/// times, a 410 once), and the task's other webhooks still get theirs, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_is_retried_a_bounded_number_of_times() {
    let (hooks, hits) = receivers().await;
    let base = serve(asks(), local()).await;
    let task = waiting(&base, "alice", json!({})).await;
    for url in ["down", "gone", "hook/after"] {
        let config = json!({"taskId": task, "url": format!("{hooks}/{url}")});
        let made = call(&base, "alice", "CreateTaskPushNotificationConfig", config).await;
        assert!(made.get("result").is_some(), "{made}");
    }
    answer(&base, "alice", &task).await;

    // A task's webhooks are told in the order their configs were made, so once `after` has
    // the completion, every attempt at the others was made.
    let got = hits.until("hook/after", "TASK_STATE_COMPLETED").await;
    let seen: Vec<(&str, &str)> = got
        .iter()
        .map(|hit| (hit.path.as_str(), hit.state()))
        .collect();
    let mut expected = Vec::new();
    for state in ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"] {
        expected.extend([("down", state); 3]);
        expected.extend([("gone", state), ("hook/after", state)]);
    }
    assert_eq!(seen, expected);
    assert!(hits.none_left().await);
}

/// By default a webhook on a private address is refused, and a server without push
/// notifications says so in its card and refuses configs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addresses_and_capability_are_as_the_server_says() {
    let base = serve(asks(), PushNotifications::new()).await;
    let task = waiting(&base, "alice", json!({})).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.0.0.1/",
        "ftp://x/",
    ] {
        let config = json!({"taskId": task, "url": url});
        let refused = call(&base, "alice", "CreateTaskPushNotificationConfig", config).await;
        assert_eq!(refused["error"]["code"], -32602, "{url}: {refused}");
        let field = &refused["error"]["data"][0]["fieldViolations"][0]["field"];
        assert_eq!(field, "url", "{refused}");
    }
    let inline = json!({"taskPushNotificationConfig": {"url": "http://192.168.0.1/"}});
    let params = json!({"message": message("again", None), "configuration": inline});
    let refused = call(&base, "alice", "SendMessage", params).await;
    let field = &refused["error"]["data"][0]["fieldViolations"][0]["field"];
    assert_eq!(
        field, "configuration.taskPushNotificationConfig.url",
        "{refused}"
    );
    let read = card(&base).await;
    assert_eq!(read["capabilities"]["pushNotifications"], true, "{read}");

    let off = serve(asks(), PushNotifications::disabled()).await;
    let read = card(&off).await;
    assert_eq!(read["capabilities"]["pushNotifications"], false, "{read}");
    let task = waiting(&off, "alice", json!({})).await;
    let config = json!({"taskId": task, "url": "http://example.com/hook"});
    let refused = call(&off, "alice", "CreateTaskPushNotificationConfig", config).await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
}

async fn card(base: &str) -> Value {
    let card = reqwest::Client::new()
        .get(format!("{base}/agent/ask/.well-known/agent-card.json"))
        .bearer_auth("alice")
        .send();
    card.await.unwrap().json().await.unwrap()
}
