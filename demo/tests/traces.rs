//! The main command's spans in a collector people use: Arize Phoenix (pinned in
//! `tests/phoenix/requirements.txt`) takes them over OTLP (http/protobuf), and its own REST API
//! answers what it stored. One tool-calling turn is `invoke_agent` over its `chat` and
//! `execute_tool` spans with the GenAI conventions' attributes and the session's id, and a
//! request sent with a `traceparent` lands in its caller's trace, whichever wire carried it:
//! execute, AG-UI, A2A, MCP over HTTP (the header, or the call's `_meta`), and ACP over stdio
//! (the prompt's `_meta`), whose process sends what it batched when it exits.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::genkit::{Group, free_port};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

/// A running Phoenix, its REST API at `base`.
struct Phoenix {
    _group: Group,
    _dir: tempfile::TempDir,
    base: String,
    client: reqwest::Client,
}

impl Phoenix {
    /// Installs (once) and starts Phoenix on free ports, its data in a directory of its own;
    /// blocks until it serves.
    fn start() -> Self {
        let requirements =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/phoenix/requirements.txt");
        let python = tests::python::venv(&requirements).unwrap();
        let phoenix = python.with_file_name("phoenix");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut command = std::process::Command::new(phoenix);
        command
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false");
        let mut group = Group::spawn(command, dir.path()).unwrap();
        group
            .wait_for(Duration::from_secs(600), |out| {
                out.contains("Application startup complete")
            })
            .unwrap();
        Self {
            _group: group,
            _dir: dir,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        }
    }

    /// Every span of the default project, all pages.
    async fn spans(&self) -> Vec<Value> {
        let mut spans = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{}/v1/projects/default/spans?limit=1000", self.base);
            if let Some(cursor) = &cursor {
                url.push_str(&format!("&cursor={cursor}"));
            }
            let response = self.client.get(url).send().await.unwrap();
            if response.status() == 404 {
                // No span yet: the project is made by the first.
                return spans;
            }
            let page: Value = response.json().await.unwrap();
            spans.extend(page["data"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return spans,
            }
        }
    }

    /// The spans of trace `trace`, once `done` accepts them.
    async fn trace(&self, trace: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let spans: Vec<Value> = self
                .spans()
                .await
                .into_iter()
                .filter(|span| span["context"]["trace_id"] == trace)
                .collect();
            if done(&spans) {
                return spans;
            }
            assert!(Instant::now() < deadline, "trace {trace}: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The caller's span on wire number `n`: its trace id, its span id, and the `traceparent`
/// naming it.
fn caller(n: u64) -> (String, String, String) {
    let (trace, span) = (
        format!("{:032x}", 0xb1d1_0000 + n),
        format!("{:016x}", 0xca11 + n),
    );
    let traceparent = format!("00-{trace}-{span}-01");
    (trace, span, traceparent)
}

/// The environment that sends a process's spans to `phoenix`, batched briefly.
fn otlp(phoenix: &Phoenix) -> [(&'static str, String); 3] {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.base.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_SERVICE_NAME", "bidi-demo-traces".to_owned()),
    ]
}

/// `bidi-demo` with `args` and `env`, the model's variables removed.
fn demo(args: &[&str], env: &[(&'static str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bidi-demo"));
    command
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .envs(env.iter().map(|(name, value)| (*name, value)))
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The span of `spans` named `name`.
fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|span| span["name"] == name)
        .unwrap_or_else(|| panic!("no span {name}: {spans:#?}"))
}

/// Whether `spans` hold a turn of the agent that ended: `invoke_agent` and the connection's.
fn turned(spans: &[Value]) -> bool {
    spans
        .iter()
        .any(|span| span["name"] == "invoke_agent assistant")
        && spans.iter().any(|span| span["name"] == "assistant")
}

/// The connection's span of a request sent with caller `n` is the caller's span's child, and
/// its turn's `invoke_agent` is in the trace: the spans.
async fn in_callers_trace(phoenix: &Phoenix, n: u64) -> Vec<Value> {
    let (trace, span, _) = caller(n);
    let spans = phoenix.trace(&trace, turned).await;
    let connection = named(&spans, "assistant");
    assert_eq!(connection["parent_id"], span.as_str(), "{spans:#?}");
    spans
}

/// `POST url` with `body` and `headers`, and caller `n`'s `traceparent`, answered 200: the
/// spans of the caller's trace, as [`in_callers_trace`] checks them.
async fn traced(
    phoenix: &Phoenix,
    n: u64,
    url: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Vec<Value> {
    let (_, _, traceparent) = caller(n);
    let mut headers = headers.to_vec();
    headers.push(("traceparent", &traceparent));
    let (status, text) = post(url, body, &headers).await;
    assert_eq!(status, 200, "{url}: {text}");
    in_callers_trace(phoenix, n).await
}

/// One tool-calling turn over execute, as a tree in the conventions.
fn a_turn_is_a_tree(spans: &[Value], session: &str) {
    let agent = named(spans, "invoke_agent assistant");
    let attributes = &agent["attributes"];
    assert_eq!(attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(attributes["gen_ai.agent.name"], "assistant");
    assert_eq!(attributes["gen_ai.conversation.id"], session);
    let turn = named(spans, "turn 1");
    assert_eq!(agent["parent_id"], turn["context"]["span_id"]);
    let id = &agent["context"]["span_id"];
    let children: Vec<&Value> = spans
        .iter()
        .filter(|span| span["parent_id"] == *id)
        .collect();
    let chats: Vec<&&Value> = children
        .iter()
        .filter(|span| span["name"] == "chat demo")
        .collect();
    // The model asks for the tool, then answers with its result.
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for chat in chats {
        let attributes = &chat["attributes"];
        assert_eq!(attributes["gen_ai.operation.name"], "chat");
        assert_eq!(attributes["gen_ai.request.model"], "demo");
        assert!(attributes["gen_ai.provider.name"].is_string(), "{chat:#}");
    }
    let tool = children
        .iter()
        .find(|span| span["name"] == "execute_tool word_count")
        .unwrap_or_else(|| panic!("no tool call under the agent: {spans:#?}"));
    let attributes = &tool["attributes"];
    assert_eq!(attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(attributes["gen_ai.tool.name"], "word_count");
    assert!(attributes["gen_ai.tool.call.id"].is_string(), "{tool:#}");
    assert_eq!(attributes["bidi.tool.outcome"], "completed");
}

/// `POST url` with `body` and `headers`: the status and the whole body.
async fn post(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// An MCP session over streamable HTTP at `url`: its id.
async fn mcp_session(url: &str) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "traces", "version": "1"}}});
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize.to_string())
        .send()
        .await
        .unwrap();
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = response.text().await.unwrap();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let (status, _) = post(url, &initialized, &headers).await;
    assert_eq!(status, 202);
    session
}

/// The main command over ACP on stdio, sessions in `db`: a prompt whose `_meta` names caller
/// `traceparent`, answered; then stdin ends, and the process exits (sending its spans).
async fn acp(db: &Path, env: &[(&'static str, String)], traceparent: &str) {
    let mut child: Child = demo(&["--acp", "--db", db.to_str().unwrap()], env)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let cwd = std::env::temp_dir();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
               "params": {"cwd": cwd, "mcpServers": []}}),
    ];
    let mut session = Value::Null;
    for request in requests {
        stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
        let answer = answer(&mut lines, &request["id"]).await;
        if request["id"] == 2 {
            session = answer["result"]["sessionId"].clone();
        }
    }
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {
        "sessionId": session, "prompt": [{"type": "text", "text": "word_count over stdio"}],
        "_meta": {"traceparent": traceparent}}});
    stdin
        .write_all(format!("{prompt}\n").as_bytes())
        .await
        .unwrap();
    let answered = answer(&mut lines, &json!(3)).await;
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
}

/// The answer to request `id` among the lines, past the notifications.
async fn answer(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    id: &Value,
) -> Value {
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("an answer before the end");
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == *id && message.get("method").is_none() {
            assert!(message.get("error").is_none(), "{message}");
            return message;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wire_continues_its_callers_trace_in_phoenix() {
    let phoenix = tokio::task::spawn_blocking(Phoenix::start).await.unwrap();
    let env = otlp(&phoenix);
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("demo.sqlite3");
    let notes = dir.path().join("notes.txt");
    let mut server = demo(
        &[
            "--addr",
            "127.0.0.1:0",
            "--db",
            db.to_str().unwrap(),
            "--notes",
            notes.to_str().unwrap(),
        ],
        &env,
    )
    .spawn()
    .unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let first = stdout.next_line().await.unwrap().unwrap();
    let base = first.strip_prefix("listening on ").unwrap().to_owned();
    let agent = format!("{base}/agent/assistant");

    // execute: the turn's tree, in the caller's trace.
    let execute = json!({"sessionId": "traced", "context": {},
        "input": {"content": "word_count hello there"}});
    let spans = traced(&phoenix, 1, &format!("{agent}/execute"), &execute, &[]).await;
    a_turn_is_a_tree(&spans, "traced");

    // AG-UI.
    let run = json!({"threadId": "traced-ag-ui", "runId": "run-1", "state": {}, "tools": [],
        "context": [], "forwardedProps": {},
        "messages": [{"id": "m1", "role": "user", "content": "word_count from AG-UI"}]});
    traced(&phoenix, 2, &format!("{agent}/ag-ui"), &run, &[]).await;

    // A2A 1.0.
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "word_count from A2A"}]}}});
    let a2a = [("a2a-version", "1.0")];
    traced(&phoenix, 3, &format!("{agent}/a2a"), &send, &a2a).await;

    // MCP over HTTP: the request's header, then the call's `_meta`.
    let mcp = format!("{base}/mcp");
    let session = mcp_session(&mcp).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "assistant", "arguments": {"message": "word_count from MCP"}}});
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    traced(&phoenix, 4, &mcp, &call, &headers).await;
    let (_, _, traceparent) = caller(5);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "assistant", "arguments": {"message": "word_count from MCP's _meta"},
        "_meta": {"traceparent": traceparent}}});
    let (status, text) = post(&mcp, &call, &headers).await;
    assert_eq!(status, 200, "{text}");
    in_callers_trace(&phoenix, 5).await;

    // ACP over stdio, another process on the same file.
    let (_, _, traceparent) = caller(6);
    acp(&db, &env, &traceparent).await;
    in_callers_trace(&phoenix, 6).await;

    server.kill().await.unwrap();
}
