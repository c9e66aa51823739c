//! The editor's files and terminals as tools: the client advertises `fs` and `terminal` in
//! `initialize` and answers `fs/*` and `terminal/*` as an editor would, through in-memory
//! pipes.

use bidi_acp::{Mode, Permission, Server};
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use serde_json::{Value, json};

use crate::support::Client;

/// A client that offers its files and terminals, with a session open in `/project`.
async fn editor(server: Server, offers: Value) -> (Client, Value) {
    let mut client = Client::start(server);
    client
        .send(
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion": 1, "clientCapabilities": offers}}),
        )
        .await;
    client.answer(0).await;
    let session = client.new_session().await["sessionId"].clone();
    (client, session)
}

fn everything() -> Value {
    json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true})
}

/// Reads up to the answer to `id`, answering the server's requests with `answer` (a result,
/// or `Err` an error object): everything read, in order.
async fn drive(
    client: &mut Client,
    id: i64,
    mut answer: impl FnMut(&str, &Value) -> Result<Value, Value>,
) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let message = client.recv().await.expect("an answer");
        let request = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let done = request.is_none() && message["id"] == id;
        if let (Some(method), Some(at)) = (request, message.get("id")) {
            let reply = match answer(&method, &message["params"]) {
                Ok(result) => json!({"jsonrpc":"2.0","id":at,"result":result}),
                Err(error) => json!({"jsonrpc":"2.0","id":at,"error":error}),
            };
            client.send(reply).await;
        }
        seen.push(message);
        if done {
            return seen;
        }
    }
}

fn allow() -> Value {
    json!({"outcome": {"outcome": "selected", "optionId": "allow-once"}})
}

fn reject() -> Value {
    json!({"outcome": {"outcome": "selected", "optionId": "reject-once"}})
}

/// The methods of the server's requests, in order.
fn asked(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .filter(|m| m.get("id").is_some())
        .filter_map(|m| m["method"].as_str())
        .collect()
}

/// The last update of tool call `id`.
fn last_update<'a>(messages: &'a [Value], id: &str) -> &'a Value {
    messages
        .iter()
        .map(|m| &m["params"]["update"])
        .rfind(|u| u["toolCallId"] == id)
        .expect("an update of the call")
}

/// The tool result the model was given last.
fn last_tool_result(model: &ScriptedModel) -> Value {
    let request = model.requests().pop().unwrap();
    serde_json::to_value(request.messages.last().unwrap()).unwrap()
}

fn calls(name: &str, args: &Value) -> ScriptedModel {
    ScriptedModel::new([
        Scripted::new().tool_call("c1", name, args),
        Scripted::new().text("done"),
    ])
    .recording()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_offered_are_those_the_client_advertised() {
    for (offers, expected) in [
        (json!({}), vec![]),
        (
            json!({"fs": {"readTextFile": true}}),
            vec!["read_text_file"],
        ),
        (
            everything(),
            vec!["read_text_file", "write_text_file", "run_command"],
        ),
    ] {
        let model = ScriptedModel::new([Scripted::new().text("hi")]).recording();
        let agent = LlmAgent::builder("a", model.clone()).build();
        let (mut client, session) = editor(Server::new(agent), offers).await;
        client.prompt(1, &session, "hi").await;
        client.answer(1).await;
        let tools: Vec<String> = model.requests()[0]
            .tools
            .iter()
            .map(|tool| tool.name.clone())
            .collect();
        assert_eq!(tools, expected);
        assert!(client.finish().await.is_empty());
    }
    // Not when the server says so.
    let model = ScriptedModel::new([Scripted::new().text("hi")]).recording();
    let agent = LlmAgent::builder("a", model.clone()).build();
    let (mut client, session) = editor(Server::new(agent).editor_tools(false), everything()).await;
    client.prompt(1, &session, "hi").await;
    client.answer(1).await;
    assert!(model.requests()[0].tools.is_empty());
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_goes_through_the_editor_without_asking() {
    let model = calls(
        "read_text_file",
        &json!({"path": "src/lib.rs", "line": 3, "limit": 2}),
    );
    let agent = LlmAgent::builder("a", model.clone()).build();
    let (mut client, session) = editor(Server::new(agent), everything()).await;
    client.prompt(1, &session, "read").await;
    let seen = drive(&mut client, 1, |method, params| {
        assert_eq!(method, "fs/read_text_file");
        assert_eq!(params["sessionId"], session);
        assert_eq!(params["path"], "/project/src/lib.rs");
        assert_eq!(
            (params["line"].clone(), params["limit"].clone()),
            (json!(3), json!(2))
        );
        Ok(json!({"content": "line three\nline four\n"}))
    })
    .await;
    assert_eq!(asked(&seen), ["fs/read_text_file"]);
    let call = seen
        .iter()
        .find(|m| m["params"]["update"]["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(call["params"]["update"]["kind"], "read");
    assert_eq!(
        call["params"]["update"]["locations"],
        json!([{"path": "/project/src/lib.rs", "line": 3}])
    );
    assert_eq!(last_update(&seen, "c1")["status"], "completed");
    assert_eq!(
        last_tool_result(&model)["content"],
        "line three\nline four\n"
    );
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_write_lands_through_the_editor_and_shows_its_diff() {
    let model = calls(
        "write_text_file",
        &json!({"path": "notes.md", "content": "new\n"}),
    );
    let agent = LlmAgent::builder("a", model.clone()).build();
    let (mut client, session) = editor(Server::new(agent), everything()).await;
    client.prompt(1, &session, "write").await;
    let mut written = Vec::new();
    let seen = drive(&mut client, 1, |method, params| match method {
        "session/request_permission" => {
            assert_eq!(params["toolCall"]["kind"], "edit");
            assert_eq!(
                params["toolCall"]["locations"],
                json!([{"path": "/project/notes.md"}])
            );
            Ok(allow())
        }
        "fs/read_text_file" => Ok(json!({"content": "old\n"})),
        "fs/write_text_file" => {
            written.push(params.clone());
            Ok(Value::Null)
        }
        other => panic!("unexpected {other}"),
    })
    .await;
    assert_eq!(
        asked(&seen),
        [
            "session/request_permission",
            "fs/read_text_file",
            "fs/write_text_file"
        ]
    );
    assert_eq!(
        written,
        [json!({"sessionId": session, "path": "/project/notes.md", "content": "new\n"})]
    );
    let done = last_update(&seen, "c1");
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["content"][0],
        json!({"type": "diff", "path": "/project/notes.md", "oldText": "old\n", "newText": "new\n"})
    );
    assert_eq!(
        last_tool_result(&model)["content"],
        "wrote 4 bytes to /project/notes.md"
    );
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_only_writes_is_not_asked_to_read() {
    let model = calls("write_text_file", &json!({"path": "a.txt", "content": "x"}));
    let agent = LlmAgent::builder("a", model.clone()).build();
    let server = Server::new(agent).mode(Mode::new("auto", "Auto").permission(Permission::Allow));
    let (mut client, session) = editor(server, json!({"fs": {"writeTextFile": true}})).await;
    client.prompt(1, &session, "go").await;
    let seen = drive(&mut client, 1, |method, _| match method {
        "fs/write_text_file" => Ok(Value::Null),
        other => panic!("unexpected {other}"),
    })
    .await;
    assert_eq!(asked(&seen), ["fs/write_text_file"]);
    assert_eq!(last_update(&seen, "c1")["status"], "completed");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_write_or_command_never_reaches_the_editor() {
    for (tool, args) in [
        ("write_text_file", json!({"path": "a.txt", "content": "x"})),
        (
            "run_command",
            json!({"command": "rm", "args": ["-rf", "/"]}),
        ),
    ] {
        let model = calls(tool, &args);
        let agent = LlmAgent::builder("a", model.clone()).build();
        let (mut client, session) = editor(Server::new(agent), everything()).await;
        client.prompt(1, &session, "go").await;
        let seen = drive(&mut client, 1, |method, _| match method {
            "session/request_permission" => Ok(reject()),
            other => panic!("{other} after a rejection"),
        })
        .await;
        assert_eq!(asked(&seen), ["session/request_permission"], "{tool}");
        assert_eq!(last_update(&seen, "c1")["status"], "failed");
        assert_eq!(last_tool_result(&model)["isError"], true);
        client.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_that_allows_runs_them_without_asking() {
    let model = calls("write_text_file", &json!({"path": "a.txt", "content": "x"}));
    let agent = LlmAgent::builder("a", model.clone()).build();
    let server = Server::new(agent).mode(Mode::new("auto", "Auto").permission(Permission::Allow));
    let (mut client, session) = editor(server, everything()).await;
    client.prompt(1, &session, "go").await;
    let seen = drive(&mut client, 1, |method, _| match method {
        "fs/read_text_file" => Err(json!({"code": -32002, "message": "Resource not found"})),
        "fs/write_text_file" => Ok(Value::Null),
        other => panic!("unexpected {other}"),
    })
    .await;
    assert_eq!(asked(&seen), ["fs/read_text_file", "fs/write_text_file"]);
    // A new file: its diff has no old text.
    let done = last_update(&seen, "c1");
    assert_eq!(done["content"][0]["type"], "diff");
    assert!(done["content"][0].get("oldText").is_none_or(Value::is_null));
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_in_an_editor_terminal_shown_in_the_call() {
    let model = calls(
        "run_command",
        &json!({"command": "cargo", "args": ["test"], "cwd": "crates/a"}),
    );
    let agent = LlmAgent::builder("a", model.clone()).build();
    let (mut client, session) = editor(Server::new(agent), everything()).await;
    client.prompt(1, &session, "test").await;
    let seen = drive(&mut client, 1, |method, params| match method {
        "session/request_permission" => {
            assert_eq!(params["toolCall"]["kind"], "execute");
            Ok(allow())
        }
        "terminal/create" => {
            assert_eq!(params["sessionId"], session);
            assert_eq!(params["command"], "cargo");
            assert_eq!(params["args"], json!(["test"]));
            assert_eq!(params["cwd"], "/project/crates/a");
            assert!(params["outputByteLimit"].as_u64().is_some());
            Ok(json!({"terminalId": "term-1"}))
        }
        "terminal/wait_for_exit" | "terminal/output" | "terminal/release" => {
            assert_eq!(params["terminalId"], "term-1");
            Ok(match method {
                "terminal/wait_for_exit" => json!({"exitCode": 0, "signal": null}),
                "terminal/output" => json!({"output": "test result: ok", "truncated": false}),
                _ => json!({}),
            })
        }
        other => panic!("unexpected {other}"),
    })
    .await;
    assert_eq!(
        asked(&seen),
        [
            "session/request_permission",
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/output",
            "terminal/release"
        ]
    );
    // The terminal is shown in the call while the command runs, and stays when it ends.
    let terminal = json!({"type": "terminal", "terminalId": "term-1"});
    let shown = seen
        .iter()
        .map(|m| &m["params"]["update"])
        .find(|u| u["toolCallId"] == "c1" && u["content"][0] == terminal);
    assert!(shown.is_some_and(|u| u.get("status").is_none()), "{seen:?}");
    let done = last_update(&seen, "c1");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["content"][0], terminal);
    let result = last_tool_result(&model);
    assert_eq!(
        result["content"],
        "test result: ok\n`cargo test` exited with code 0"
    );
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_fails_and_an_editor_error_is_the_result() {
    let model = calls("run_command", &json!({"command": "false"}));
    let agent = LlmAgent::builder("a", model.clone()).build();
    let server = Server::new(agent).mode(Mode::new("auto", "Auto").permission(Permission::Allow));
    let (mut client, session) = editor(server, everything()).await;
    client.prompt(1, &session, "go").await;
    drive(&mut client, 1, |method, _| {
        Ok(match method {
            "terminal/create" => json!({"terminalId": "t"}),
            "terminal/wait_for_exit" => json!({"exitCode": 1}),
            "terminal/output" => json!({"output": "", "truncated": false}),
            _ => json!({}),
        })
    })
    .await;
    let result = last_tool_result(&model);
    assert_eq!(result["isError"], true);
    assert_eq!(result["content"], "`false` exited with code 1");

    let model = calls("run_command", &json!({"command": "make"}));
    let agent = LlmAgent::builder("a", model.clone()).build();
    let server = Server::new(agent).mode(Mode::new("auto", "Auto").permission(Permission::Allow));
    let (mut client2, session) = editor(server, everything()).await;
    client2.prompt(1, &session, "go").await;
    let seen = drive(&mut client2, 1, |_, _| {
        Err(json!({"code": -32603, "message": "Internal error", "data": "no shell here"}))
    })
    .await;
    assert_eq!(asked(&seen), ["terminal/create"]);
    let result = last_tool_result(&model);
    assert_eq!(result["isError"], true);
    assert_eq!(
        result["content"],
        "the editor could not run `make`: Internal error: no shell here"
    );
    client.finish().await;
    client2.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_kills_the_command_and_releases_its_terminal() {
    let model = calls("run_command", &json!({"command": "sleep", "args": ["600"]}));
    let agent = LlmAgent::builder("a", model.clone()).build();
    let server = Server::new(agent).mode(Mode::new("auto", "Auto").permission(Permission::Allow));
    let (mut client, session) = editor(server, everything()).await;
    client.prompt(1, &session, "wait").await;
    // Up to the wait, which the editor does not answer.
    let mut waiting = None;
    while waiting.is_none() {
        let message = client.recv().await.unwrap();
        match message["method"].as_str() {
            Some("terminal/create") => {
                client
                    .send(json!({"jsonrpc":"2.0","id":message["id"],"result":{"terminalId":"t9"}}))
                    .await;
            }
            Some("terminal/wait_for_exit") => waiting = Some(message["id"].clone()),
            _ => {}
        }
    }
    client
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
        .await;
    let mut ended = Vec::new();
    let mut answer = None;
    while ended.len() < 2 || answer.is_none() {
        let message = client.recv().await.unwrap();
        match message["method"].as_str() {
            Some(method @ ("terminal/kill" | "terminal/release")) => {
                assert_eq!(message["params"]["terminalId"], "t9");
                ended.push(method.to_owned());
                client
                    .send(json!({"jsonrpc":"2.0","id":message["id"],"result":{}}))
                    .await;
            }
            None if message["id"] == 1 => answer = Some(message),
            _ => {}
        }
    }
    assert_eq!(ended, ["terminal/kill", "terminal/release"]);
    assert_eq!(answer.unwrap()["result"]["stopReason"], "cancelled");
    client.finish().await;
}
