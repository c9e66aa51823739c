//! Permissions, modes and richer tool calls, driven through in-memory pipes: the client answers
//! `session/request_permission` as a user would, and the tools count their runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bidi_acp::{Mode, Permission, Server, ToolKind};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Tool, ToolEvent, simple_tool};
use futures_util::stream;
use serde_json::{Value, json};

use crate::support::Client;

fn selected(option: &str) -> Value {
    json!({"outcome": "selected", "optionId": option})
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Path {
    #[allow(dead_code)]
    path: String,
}

/// `write_file`, which counts its runs.
fn write_file(runs: &Arc<AtomicUsize>) -> Tool {
    let runs = Arc::clone(runs);
    simple_tool(
        "write_file",
        "Write",
        "Writes a file",
        move |_id, _: Path| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(("written".to_owned(), None))
            }
        },
    )
}

/// A model that calls `write_file` then says done, `turns` times.
fn writer(turns: usize) -> ScriptedModel {
    ScriptedModel::new((0..turns).flat_map(|turn| {
        [
            Scripted::new().tool_call(
                &format!("c{turn}"),
                "write_file",
                &json!({"path": "notes.txt"}),
            ),
            Scripted::new().text("done"),
        ]
    }))
    .recording()
}

fn updates<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == kind)
        .map(|m| &m["params"]["update"])
        .collect()
}

fn asked(messages: &[Value]) -> usize {
    messages
        .iter()
        .filter(|m| m["method"] == "session/request_permission")
        .count()
}

/// The tool result the model was given last.
fn last_tool_result(model: &ScriptedModel) -> Value {
    let request = model.requests().pop().unwrap();
    let message = request.messages.last().unwrap();
    serde_json::to_value(message).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_once_runs_the_tool_and_the_next_call_asks_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = writer(2);
    let agent = LlmAgent::builder("a", model)
        .tool(write_file(&runs))
        .build();
    let mut client = Client::start(Server::new(agent).require_permission("write*"));
    let session = client.new_session().await["sessionId"].clone();
    for turn in 0..2 {
        client.prompt(turn, &session, "write").await;
        let before = client.until_asked().await;
        let request = before.last().unwrap();
        let params = &request["params"];
        assert_eq!(params["sessionId"], session);
        assert_eq!(params["toolCall"]["toolCallId"], format!("c{turn}"));
        assert_eq!(params["toolCall"]["kind"], "edit");
        assert_eq!(
            params["toolCall"]["locations"],
            json!([{"path": "/project/notes.txt"}])
        );
        assert_eq!(params["toolCall"]["rawInput"], json!({"path": "notes.txt"}));
        let kinds: Vec<&Value> = params["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| &o["kind"])
            .collect();
        assert_eq!(
            kinds,
            ["allow_once", "allow_always", "reject_once", "reject_always"]
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            turn as usize,
            "not before the answer"
        );
        client.choose(request, selected("allow-once")).await;
        let rest = client.until(turn).await;
        assert_eq!(rest.last().unwrap()["result"]["stopReason"], "end_turn");
        let statuses: Vec<&Value> = before
            .iter()
            .chain(&rest)
            .filter_map(|m| m["params"]["update"].get("status"))
            .collect();
        assert_eq!(statuses.last().unwrap().as_str(), Some("completed"));
        assert!(statuses.contains(&&json!("in_progress")), "{statuses:?}");
        assert_eq!(
            updates(&before, "tool_call").len(),
            1,
            "shown before the request"
        );
        assert!(updates(&rest, "tool_call").is_empty(), "and once");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_always_is_remembered_for_the_session_only() {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = LlmAgent::builder("a", writer(3))
        .tool(write_file(&runs))
        .build();
    let mut client = Client::start(Server::new(agent).require_permission("write_file"));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "write").await;
    let request = client.until_asked().await.pop().unwrap();
    client.choose(&request, selected("allow-always")).await;
    client.until(1).await;

    client.prompt(2, &session, "write again").await;
    let second = client.until(2).await;
    assert_eq!(asked(&second), 0, "not asked again: {second:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // Another session is asked.
    let other = client.new_session().await["sessionId"].clone();
    client.prompt(3, &other, "write").await;
    let request = client.until_asked().await.pop().unwrap();
    assert_eq!(request["params"]["sessionId"], other);
    client.choose(&request, selected("allow-once")).await;
    client.until(3).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_or_dismissed_call_fails_and_the_model_is_told_why() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = writer(4);
    let agent = LlmAgent::builder("a", model.clone())
        .tool(write_file(&runs))
        .build();
    let mut client = Client::start(Server::new(agent).require_permission("*"));
    let session = client.new_session().await["sessionId"].clone();
    let cases = [
        (selected("reject-once"), "the user rejected `write_file`"),
        (
            json!({"outcome": "cancelled"}),
            "the user dismissed the permission request",
        ),
        (selected("maybe"), "an option it was not offered"),
        (selected("reject-always"), "for the rest of the session"),
    ];
    for (turn, (outcome, reason)) in cases.into_iter().enumerate() {
        let turn = i64::try_from(turn).unwrap();
        client.prompt(turn, &session, "write").await;
        let request = client.until_asked().await.pop().unwrap();
        client.choose(&request, outcome).await;
        let rest = client.until(turn).await;
        assert_eq!(rest.last().unwrap()["result"]["stopReason"], "end_turn");
        let failed = updates(&rest, "tool_call_update")[0];
        assert_eq!(failed["status"], "failed");
        let text = failed["content"][0]["content"]["text"].as_str().unwrap();
        assert!(text.contains(reason), "{text}");
        let result = last_tool_result(&model);
        assert_eq!(result["isError"], true);
        assert!(
            result["content"].as_str().unwrap().contains(reason),
            "{result}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "never ran");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_always_is_remembered_without_asking() {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = LlmAgent::builder("a", writer(2))
        .tool(write_file(&runs))
        .build();
    let mut client = Client::start(Server::new(agent).require_permission("write*"));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "write").await;
    let request = client.until_asked().await.pop().unwrap();
    client.choose(&request, selected("reject-always")).await;
    client.until(1).await;
    client.prompt(2, &session, "write").await;
    let second = client.until(2).await;
    assert_eq!(asked(&second), 0);
    assert_eq!(updates(&second, "tool_call_update")[0]["status"], "failed");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_waiting_answers_cancelled_once_and_the_tool_never_runs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c0", "write_file", &json!({"path": "a"})),
        Scripted::new().tool_call("c1", "write_file", &json!({"path": "b"})),
        Scripted::new().text("done"),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model)
        .tool(write_file(&runs))
        .build();
    let mut client = Client::start(
        Server::new(agent)
            .require_permission("write*")
            .permission_options([bidi_acp::PermissionOptionKind::AllowOnce]),
    );
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "write").await;
    let request = client.until_asked().await.pop().unwrap();
    assert_eq!(request["params"]["options"].as_array().unwrap().len(), 1);
    client
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
        .await;
    let turn = client.until(1).await;
    assert_eq!(
        turn.last().unwrap()["result"],
        json!({"stopReason": "cancelled"})
    );
    let failed = updates(&turn, "tool_call_update");
    assert_eq!(failed[0]["status"], "failed", "{turn:?}");
    // The client answers the dismissed dialog late, as the protocol says: nothing happens.
    client
        .choose(&request, json!({"outcome": "cancelled"}))
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // The session goes on.
    client.prompt(2, &session, "write").await;
    let request = client.until_asked().await.pop().unwrap();
    client.choose(&request, selected("allow-once")).await;
    let next = client.until(2).await;
    assert_eq!(next.last().unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let rest = client.finish().await;
    assert!(
        rest.is_empty(),
        "no second answer to the cancelled prompt: {rest:?}"
    );
}

fn modes(server: Server) -> Server {
    server
        .require_permission("write*")
        .mode(Mode::new("ask", "Ask").description("Asks before it writes"))
        .mode(
            Mode::new("read-only", "Read only")
                .system_prompt("Never change anything.")
                .tools(["read*"])
                .permission(Permission::Reject),
        )
        .mode(Mode::new("yolo", "Yolo").permission(Permission::Allow))
}

fn read_file() -> Tool {
    simple_tool("read_file", "Read", "Reads a file", |_id, _: Path| async {
        Ok::<_, String>(("contents".to_owned(), None))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_change_the_prompt_the_tools_and_the_permissions() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = writer(3);
    let agent = LlmAgent::builder("a", model.clone())
        .tool(write_file(&runs))
        .tool(read_file())
        .build();
    let mut client = Client::start(modes(Server::new(agent)).default_mode("ask"));
    let new = client.new_session().await;
    let session = new["sessionId"].clone();
    assert_eq!(new["modes"]["currentModeId"], "ask");
    let ids: Vec<&Value> = new["modes"]["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["id"])
        .collect();
    assert_eq!(ids, ["ask", "read-only", "yolo"]);
    assert_eq!(
        new["modes"]["availableModes"][0]["description"],
        "Asks before it writes"
    );

    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/set_mode","params":{"sessionId":session,"modeId":"chaos"}}))
        .await;
    let unknown = client.until(1).await.pop().unwrap();
    assert_eq!(unknown["error"]["code"], -32602);
    assert_eq!(unknown["error"]["data"]["path"], "modeId");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ask, read-only, yolo")
    );

    client
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":session,"modeId":"yolo"}}))
        .await;
    let set = client.until(2).await;
    assert_eq!(
        set[0]["params"]["update"],
        json!({"sessionUpdate": "current_mode_update", "currentModeId": "yolo"})
    );
    assert_eq!(set[1]["result"], json!({}));
    client.prompt(3, &session, "write").await;
    let yolo = client.until(3).await;
    assert_eq!(asked(&yolo), 0);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "ran without asking");
    assert_eq!(model.requests()[0].system_prompt, None);

    client
        .send(json!({"jsonrpc":"2.0","id":4,"method":"session/set_mode","params":{"sessionId":session,"modeId":"read-only"}}))
        .await;
    client.until(4).await;
    client.prompt(5, &session, "write").await;
    let read_only = client.until(5).await;
    assert_eq!(asked(&read_only), 0);
    assert_eq!(
        updates(&read_only, "tool_call_update")[0]["status"],
        "failed"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "refused");
    let request = &model.requests()[2];
    assert_eq!(
        request.system_prompt.as_deref(),
        Some("Never change anything.")
    );
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["read_file"]);

    // Back to asking.
    client
        .send(json!({"jsonrpc":"2.0","id":6,"method":"session/set_mode","params":{"sessionId":session,"modeId":"ask"}}))
        .await;
    client.until(6).await;
    client.prompt(7, &session, "write").await;
    let request = client.until_asked().await.pop().unwrap();
    client.choose(&request, selected("allow-once")).await;
    client.until(7).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A session loaded again keeps its mode on this connection.
    client
        .send(json!({"jsonrpc":"2.0","id":8,"method":"session/load","params":{"sessionId":session,"cwd":"/project","mcpServers":[]}}))
        .await;
    let load = client.until(8).await.pop().unwrap();
    assert_eq!(load["result"]["modes"]["currentModeId"], "ask");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_modes_none_are_answered_and_set_mode_is_refused() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent));
    let new = client.new_session().await;
    assert!(new.get("modes").is_none(), "{new}");
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/set_mode","params":{"sessionId":new["sessionId"],"modeId":"x"}}))
        .await;
    let refused = client.until(1).await.pop().unwrap();
    assert_eq!(refused["error"]["data"]["path"], "modeId");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_carry_kinds_locations_and_streamed_output() {
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call(
                "c1",
                "tail",
                &json!({"file": "/var/log/app.log", "line": 3}),
            )
            .tool_call("c2", "word_count", &json!({"path": "a.txt"})),
        Scripted::new().text("ok"),
    ])
    .recording();
    let tail = Tool::local(
        "tail",
        "Tail",
        "Streams a file",
        |_id, _: serde_json::Value| {
            stream::iter([
                ToolEvent::Delta("one\n".into()),
                ToolEvent::Delta("two\n".into()),
                ToolEvent::Complete {
                    output: "one\ntwo\n".into(),
                    details: None,
                },
            ])
        },
    );
    let count = simple_tool("word_count", "Count", "Counts", |_id, _: Path| async {
        Ok::<_, String>(("2".to_owned(), None))
    });
    let agent = LlmAgent::builder("a", model).tool(tail).tool(count).build();
    let mut client = Client::start(Server::new(agent).tool_kind("tail", ToolKind::Read));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "go").await;
    let turn = client.until(1).await;
    let calls = updates(&turn, "tool_call");
    assert_eq!(calls[0]["kind"], "read", "overridden");
    assert_eq!(
        calls[0]["locations"],
        json!([{"path": "/var/log/app.log", "line": 3}])
    );
    assert!(
        calls[1].get("kind").is_none(),
        "other is the default: {}",
        calls[1]
    );
    assert_eq!(calls[1]["locations"], json!([{"path": "/project/a.txt"}]));
    let tail_updates: Vec<&Value> = updates(&turn, "tool_call_update")
        .into_iter()
        .filter(|u| u["toolCallId"] == "c1")
        .collect();
    let texts: Vec<&str> = tail_updates
        .iter()
        .map(|u| u["content"][0]["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["one\n", "one\ntwo\n", "one\ntwo\n"]);
    assert!(tail_updates[0].get("status").is_none());
    assert_eq!(tail_updates[2]["status"], "completed");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_tool_calls_are_shown_as_plan_updates() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call(
            "p1",
            bidi_acp::PLAN_TOOL,
            &json!({"entries": [
                {"content": "look", "priority": "high", "status": "in_progress"},
                {"content": "fix"},
            ]}),
        ),
        Scripted::new().tool_call(
            "p2",
            bidi_acp::PLAN_TOOL,
            &json!({"entries": [{"content": "look", "status": "completed"}, {"content": "fix", "status": "wrong"}]}),
        ),
        Scripted::new().text("planned"),
    ]).recording();
    let agent = LlmAgent::builder("a", model.clone())
        .tool(bidi_acp::plan_tool())
        .build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "plan").await;
    let turn = client.until(1).await;
    let plans = updates(&turn, "plan");
    assert_eq!(
        plans,
        [&json!({"sessionUpdate": "plan", "entries": [
            {"content": "look", "priority": "high", "status": "in_progress"},
            {"content": "fix", "priority": "medium", "status": "pending"},
        ]})]
    );
    // The second call's arguments are no plan: it is an ordinary call, which fails.
    let calls = updates(&turn, "tool_call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["toolCallId"], "p2");
    assert_eq!(updates(&turn, "tool_call_update")[0]["status"], "failed");
    let first = serde_json::to_value(&model.requests()[1].messages[2]).unwrap();
    assert_eq!(first["content"], "plan updated (2 entries)");
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_needs_approval_asks_without_a_rule() {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = LlmAgent::builder("a", writer(1))
        .tool(write_file(&runs).needs_approval())
        .build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(0, &session, "write").await;
    let before = client.until_asked().await;
    let request = before.last().unwrap();
    assert_eq!(request["params"]["toolCall"]["toolCallId"], "c0");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "not before the answer");
    client.choose(request, selected("reject-once")).await;
    let rest = client.until(0).await;
    assert_eq!(rest.last().unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "rejected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_keep_the_order_the_model_streamed_them_in() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new()
            .text("Let me write the notes now")
            .tool_call("c0", "write_file", &json!({"path": "notes.txt"})),
        Scripted::new().text("done"),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model)
        .tool(write_file(&runs))
        .build();
    let mut client = Client::start(Server::new(agent).require_permission("write*"));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "write").await;
    let before = client.until_asked().await;
    client
        .choose(before.last().unwrap(), selected("allow-once"))
        .await;
    let after = client.until(1).await;
    // What the client saw, in order: a text chunk as its text, anything else as its kind.
    let seen: Vec<String> = before
        .iter()
        .chain(&after)
        .map(|m| {
            let update = &m["params"]["update"];
            match update["sessionUpdate"].as_str() {
                Some("agent_message_chunk") => {
                    update["content"]["text"].as_str().unwrap().to_owned()
                }
                // `pending` is the default status, which may be left out.
                Some("tool_call") => format!(
                    "tool_call {}",
                    update["status"].as_str().unwrap_or("pending")
                ),
                Some("tool_call_update") => format!(
                    "tool_call_update {}",
                    update["status"].as_str().unwrap_or("-")
                ),
                Some(other) => other.to_owned(),
                None => m["method"].as_str().unwrap_or("answer").to_owned(),
            }
        })
        .collect();
    assert_eq!(
        seen,
        [
            "Let ",
            "me ",
            "write ",
            "the ",
            "notes ",
            "now",
            "tool_call pending",
            "session/request_permission",
            "tool_call_update in_progress",
            "tool_call_update completed",
            "done",
            "answer",
        ],
        "{before:#?} {after:#?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(client.finish().await.is_empty());
}
