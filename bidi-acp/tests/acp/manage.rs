//! The sessions of the store beyond one connection: `session/list`, `session/resume`,
//! `session/delete`, and the unstable `session/status` and `session/set_title`.

use std::sync::Arc;

use bidi_acp::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_session::{MemoryStore, SessionStore};
use serde_json::{Value, json};

use crate::support::Client;

/// An agent answering `n` prompts, on `store`.
fn agent(store: &Arc<MemoryStore>, n: usize) -> LlmAgent {
    let script = (0..n).map(|i| Scripted::new().text(&format!("answer {i}")));
    LlmAgent::builder("a", ScriptedModel::new(script))
        .store(Arc::clone(store) as Arc<dyn SessionStore>)
        .build()
}

fn request(id: i64, method: &str, params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The sessions a `session/list` answer lists, by id.
fn listed(answer: &Value) -> Vec<String> {
    let sessions = answer["result"]["sessions"].as_array().unwrap();
    let mut ids: Vec<String> = sessions
        .iter()
        .map(|session| session["sessionId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_resumed_and_deleted_across_connections() {
    let store = Arc::new(MemoryStore::new());
    let mut first = Client::start(Server::new(agent(&store, 4)));
    let a = first.new_session().await["sessionId"].clone();
    first.prompt(1, &a, "hello").await;
    assert_eq!(first.answer(1).await["result"]["stopReason"], "end_turn");
    first
        .send(request(
            2,
            "session/new",
            &json!({"cwd": "/elsewhere", "mcpServers": []}),
        ))
        .await;
    let b = first.answer(2).await["result"]["sessionId"].clone();

    // Listed: both, each with its working directory here and its latest update.
    first.send(request(3, "session/list", &json!({}))).await;
    let all = first.answer(3).await;
    let mut both = vec![
        a.as_str().unwrap().to_owned(),
        b.as_str().unwrap().to_owned(),
    ];
    both.sort();
    assert_eq!(listed(&all), both, "{all}");
    let of_a = all["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|session| session["sessionId"] == a)
        .unwrap();
    assert_eq!(of_a["cwd"], "/project");
    assert!(of_a["updatedAt"].as_str().unwrap().ends_with('Z'), "{of_a}");
    first
        .send(request(4, "session/list", &json!({"cwd": "/elsewhere"})))
        .await;
    assert_eq!(listed(&first.answer(4).await), [b.as_str().unwrap()]);
    first
        .send(request(5, "session/list", &json!({"cwd": "relative"})))
        .await;
    assert_eq!(first.answer(5).await["error"]["code"], -32602);
    first
        .send(request(6, "session/list", &json!({"cursor": "not hex"})))
        .await;
    assert_eq!(first.answer(6).await["error"]["code"], -32602);
    assert!(first.finish().await.is_empty());

    // Another connection resumes `a` without a replay, and goes on with it.
    let mut second = Client::start(Server::new(agent(&store, 4)));
    second
        .send(request(
            1,
            "session/resume",
            &json!({"sessionId": a, "cwd": "/project", "mcpServers": []}),
        ))
        .await;
    let resumed = second.until(1).await;
    let answer = resumed.last().unwrap();
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(
        resumed
            .iter()
            .all(|message| message["method"] != "session/update"),
        "a resume replays nothing: {resumed:?}"
    );
    second.prompt(2, &a, "again").await;
    let turn = second.until(2).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    second
        .send(request(
            3,
            "session/resume",
            &json!({"sessionId": "no-such-session", "cwd": "/project"}),
        ))
        .await;
    assert_eq!(second.answer(3).await["error"]["code"], -32002);

    // Deleted: closed here, gone from the store and the list; a second delete finds nothing.
    second
        .send(request(4, "session/delete", &json!({"sessionId": a})))
        .await;
    assert_eq!(second.answer(4).await["result"], json!({}));
    second.prompt(5, &a, "still there?").await;
    assert_eq!(second.answer(5).await["error"]["code"], -32002);
    second
        .send(request(
            6,
            "session/load",
            &json!({"sessionId": a, "cwd": "/project", "mcpServers": []}),
        ))
        .await;
    assert_eq!(second.answer(6).await["error"]["code"], -32002);
    second
        .send(request(7, "session/delete", &json!({"sessionId": a})))
        .await;
    assert_eq!(second.answer(7).await["error"]["code"], -32002);
    second.send(request(8, "session/list", &json!({}))).await;
    assert_eq!(listed(&second.answer(8).await), [b.as_str().unwrap()]);
    assert!(second.finish().await.is_empty());
}

#[cfg(all(
    feature = "unstable_session_status",
    feature = "unstable_session_set_title"
))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_says_its_status_and_keeps_its_title() {
    let store = Arc::new(MemoryStore::new());
    let mut first = Client::start(Server::new(agent(&store, 1)));
    let a = first.new_session().await["sessionId"].clone();
    first
        .send(request(1, "session/status", &json!({"sessionId": a})))
        .await;
    assert_eq!(first.answer(1).await["result"]["status"], "open");
    first
        .send(request(
            2,
            "session/set_title",
            &json!({"sessionId": a, "title": "  Fix\n the build "}),
        ))
        .await;
    let titled = first.until(2).await;
    assert_eq!(titled.last().unwrap()["result"]["title"], "Fix the build");
    let update = titled
        .iter()
        .find(|message| message["method"] == "session/update")
        .expect("a session_info_update");
    assert_eq!(
        update["params"]["update"]["sessionUpdate"],
        "session_info_update"
    );
    assert_eq!(update["params"]["update"]["title"], "Fix the build");
    first
        .send(request(
            3,
            "session/set_title",
            &json!({"sessionId": a, "title": " "}),
        ))
        .await;
    assert_eq!(first.answer(3).await["error"]["code"], -32602);
    first
        .send(request(4, "session/status", &json!({"sessionId": "nope"})))
        .await;
    assert_eq!(first.answer(4).await["error"]["code"], -32002);
    assert!(first.finish().await.is_empty());

    // Another connection: saved, not open; the title listed.
    let mut second = Client::start(Server::new(agent(&store, 1)));
    second
        .send(request(1, "session/status", &json!({"sessionId": a})))
        .await;
    assert_eq!(second.answer(1).await["result"]["status"], "saved");
    second.send(request(2, "session/list", &json!({}))).await;
    let all = second.answer(2).await;
    assert_eq!(
        all["result"]["sessions"][0]["title"], "Fix the build",
        "{all}"
    );
    assert!(second.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_option_is_the_sessions_choice_and_bad_choices_are_refused() {
    let store = Arc::new(MemoryStore::new());
    let own = ScriptedModel::new([Scripted::new().text("own")]).recording();
    let big = ScriptedModel::new([Scripted::new().text("big")])
        .named("big")
        .recording();
    let agent = LlmAgent::builder("a", own.clone())
        .model_choice(big.clone())
        .store(Arc::clone(&store) as Arc<dyn SessionStore>)
        .build();
    let mut client = Client::start(Server::new(agent));
    let created = client.new_session().await;
    let session = created["sessionId"].clone();
    let option = &created["configOptions"][0];
    assert_eq!(
        (&option["id"], &option["currentValue"], &option["type"]),
        (&json!("model"), &json!("scripted"), &json!("select")),
        "{created}"
    );
    let set = |id: i64, config: &str, value: &str| {
        request(
            id,
            "session/set_config_option",
            &json!({"sessionId": session, "configId": config, "value": value}),
        )
    };
    for (id, config, value, field) in [
        (1, "temperature", "hot", "configId"),
        (2, "model", "huge", "value"),
    ] {
        client.send(set(id, config, value)).await;
        let refused = client.answer(id).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["error"]["data"]["path"], field, "{refused}");
    }
    client.send(set(3, "model", "big")).await;
    let chosen = client.answer(3).await;
    assert_eq!(chosen["result"]["configOptions"][0]["currentValue"], "big");
    client.prompt(4, &session, "hello").await;
    assert_eq!(client.answer(4).await["result"]["stopReason"], "end_turn");
    assert_eq!(big.requests().len(), 1, "the chosen model answered");
    assert!(own.requests().is_empty());

    // Another connection loading the session sees the choice.
    let agent = LlmAgent::builder("a", ScriptedModel::new([]))
        .model_choice(ScriptedModel::new([]).named("big"))
        .store(Arc::clone(&store) as Arc<dyn SessionStore>)
        .build();
    let mut other = Client::start(Server::new(agent));
    other
        .send(request(
            1,
            "session/load",
            &json!({"sessionId": session, "cwd": "/project", "mcpServers": []}),
        ))
        .await;
    let loaded = other.answer(1).await;
    assert_eq!(
        loaded["result"]["configOptions"][0]["currentValue"], "big",
        "{loaded}"
    );
    other
        .send(request(
            2,
            "session/set_config_option",
            &json!({"sessionId": "nope", "configId": "model", "value": "big"}),
        ))
        .await;
    assert_eq!(other.answer(2).await["error"]["code"], -32002);
}
