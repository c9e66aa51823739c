//! The `acp-agent` example run as a real process: driven by the official ACP Rust SDK as a
//! client, and by raw lines written to its stdin, every stdout line parsed as JSON-RPC.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, CloseSessionRequest, ContentBlock, ImageContent, InitializeRequest,
    LoadSessionRequest, NewSessionRequest, PermissionOptionKind, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionId, SessionNotification, SessionUpdate,
    SetSessionModeRequest, StopReason, TextContent, ToolCallContent, ToolCallStatus, ToolKind,
};
use agent_client_protocol::{AcpAgent, Agent, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

const AGENT: &str = env!("CARGO_BIN_EXE_acp-agent");

fn text(prompt: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::Text(TextContent::new(prompt))]
}

/// The updates received so far.
fn drain(updates: &mut mpsc::UnboundedReceiver<SessionNotification>) -> Vec<SessionUpdate> {
    let mut seen = Vec::new();
    while let Ok(notification) = updates.try_recv() {
        seen.push(notification.update);
    }
    seen
}

/// The text of the agent's message chunks among `updates`.
fn said(updates: &[SessionUpdate]) -> String {
    updates
        .iter()
        .filter_map(|update| match update {
            SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
                ContentBlock::Text(text) => Some(text.text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// How the test's user answers a permission request: an option of this kind (`None`:
/// dismisses the dialog), once `release` says so when there is one.
#[derive(Clone)]
struct User {
    choice: Option<PermissionOptionKind>,
    asked: mpsc::UnboundedSender<RequestPermissionRequest>,
    release: Option<Arc<tokio::sync::Notify>>,
}

/// Runs `main` as an SDK client of a fresh `acp-agent` keeping sessions in `db`; the session
/// updates it receives arrive on the channel `main` is given. Permission requests are
/// dismissed.
async fn with_agent<R, F>(db: &Path, main: F) -> R
where
    R: Send + 'static,
    F: AsyncFnOnce(
            ConnectionTo<Agent>,
            mpsc::UnboundedReceiver<SessionNotification>,
        ) -> Result<R, agent_client_protocol::Error>
        + Send,
{
    let (asked, _) = mpsc::unbounded_channel();
    let user = User {
        choice: None,
        asked,
        release: None,
    };
    with_user(db, user, main).await
}

/// As [`with_agent`], with `user` answering permission requests.
async fn with_user<R, F>(db: &Path, user: User, main: F) -> R
where
    R: Send + 'static,
    F: AsyncFnOnce(
            ConnectionTo<Agent>,
            mpsc::UnboundedReceiver<SessionNotification>,
        ) -> Result<R, agent_client_protocol::Error>
        + Send,
{
    with_args(db, &[], user, main).await
}

/// As [`with_user`], the agent started with `args` too.
async fn with_args<R, F>(db: &Path, args: &[&str], user: User, main: F) -> R
where
    R: Send + 'static,
    F: AsyncFnOnce(
            ConnectionTo<Agent>,
            mpsc::UnboundedReceiver<SessionNotification>,
        ) -> Result<R, agent_client_protocol::Error>
        + Send,
{
    let notes = db.with_extension("notes");
    let mut command = vec![
        AGENT,
        "--db",
        db.to_str().unwrap(),
        "--notes",
        notes.to_str().unwrap(),
    ];
    command.extend_from_slice(args);
    let agent = AcpAgent::from_args(command).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    Client
        .v1()
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                let user = user.clone();
                let option = user.choice.and_then(|kind| {
                    request
                        .options
                        .iter()
                        .find(|option| option.kind == kind)
                        .map(|option| option.option_id.clone())
                });
                let _ = user.asked.send(request);
                // Answered from a task of its own: the client goes on reading meanwhile.
                tokio::spawn(async move {
                    if let Some(release) = &user.release {
                        release.notified().await;
                    }
                    let outcome = match option {
                        Some(id) => {
                            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
                        }
                        None => RequestPermissionOutcome::Cancelled,
                    };
                    let _ = responder.respond(RequestPermissionResponse::new(outcome));
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                let _ = tx.send(notification);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(agent, async move |cx: ConnectionTo<Agent>| {
            let init = cx
                .send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            assert_eq!(init.protocol_version, ProtocolVersion::V1);
            assert!(init.agent_capabilities.load_session);
            main(cx, rx).await
        })
        .await
        .unwrap()
}

async fn new_session(cx: &ConnectionTo<Agent>) -> Result<SessionId, agent_client_protocol::Error> {
    Ok(cx
        .send_request(NewSessionRequest::new("/tmp"))
        .block_task()
        .await?
        .session_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_a_prompt_streams_chunks_and_tool_calls_then_ends_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let updates = with_agent(&dir.path().join("s.sqlite3"), async |cx, mut updates| {
        let session = new_session(&cx).await?;
        let answer = cx
            .send_request(PromptRequest::new(session, text("count these four words")))
            .block_task()
            .await?;
        assert_eq!(answer.stop_reason, StopReason::EndTurn);
        Ok(drain(&mut updates))
    })
    .await;
    assert_eq!(said(&updates), "Let me use word_count.Done: 4 words");
    let chunks = updates
        .iter()
        .filter(|update| matches!(update, SessionUpdate::AgentMessageChunk(_)))
        .count();
    assert!(chunks > 2, "the answer streams in chunks: {updates:?}");
    let call = updates
        .iter()
        .find_map(|update| match update {
            SessionUpdate::ToolCall(call) => Some(call),
            _ => None,
        })
        .expect("a tool_call update");
    assert_eq!(call.title, "word_count");
    assert_eq!(call.status, ToolCallStatus::InProgress);
    assert_eq!(
        call.raw_input,
        Some(json!({"text": "count these four words"}))
    );
    let done = updates
        .iter()
        .find_map(|update| match update {
            SessionUpdate::ToolCallUpdate(done) => Some(done),
            _ => None,
        })
        .expect("a tool_call_update");
    assert_eq!(done.tool_call_id, call.tool_call_id);
    assert_eq!(done.fields.status, Some(ToolCallStatus::Completed));
    assert_eq!(done.fields.raw_output, Some(json!({"words": 4})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_cancel_answers_cancelled_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    with_agent(&dir.path().join("s.sqlite3"), async |cx, mut updates| {
        let session = new_session(&cx).await?;
        // The demo model thinks for three seconds on "slowly": the cancel comes meanwhile.
        let slow = cx.send_request(PromptRequest::new(session.clone(), text("answer slowly")));
        cx.send_notification(CancelNotification::new(session.clone()))?;
        assert_eq!(slow.block_task().await?.stop_reason, StopReason::Cancelled);
        drain(&mut updates);

        let next = cx
            .send_request(PromptRequest::new(session, text("and now?")))
            .block_task()
            .await?;
        assert_eq!(next.stop_reason, StopReason::EndTurn);
        assert_eq!(
            said(&drain(&mut updates)),
            "Let me use word_count.Done: 2 words"
        );
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_load_replays_the_history_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite3");
    let (session, live) = with_agent(&db, async |cx, mut updates| {
        let session = new_session(&cx).await?;
        cx.send_request(SetSessionModeRequest::new(session.clone(), "yolo"))
            .block_task()
            .await?;
        let mut prompt = text("remember me");
        prompt.push(ContentBlock::Image(ImageContent::new(
            "iVBORw0KGgo=",
            "image/png",
        )));
        cx.send_request(PromptRequest::new(session.clone(), prompt))
            .block_task()
            .await?;
        Ok((session, drain(&mut updates)))
    })
    .await;
    // The commands were announced when the session opened.
    let commands = live
        .iter()
        .find_map(|u| match u {
            SessionUpdate::AvailableCommandsUpdate(update) => Some(update),
            _ => None,
        })
        .expect("available_commands_update");
    let names: Vec<&str> = commands
        .available_commands
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["save_note", "word_count"]);

    // A new process on the same file.
    let replayed = with_agent(&db, async |cx, mut updates| {
        let loaded = cx
            .send_request(LoadSessionRequest::new(session.clone(), "/tmp"))
            .block_task()
            .await?;
        // The session's mode was kept with it.
        assert_eq!(&*loaded.modes.unwrap().current_mode_id.0, "yolo");
        let replayed = drain(&mut updates);
        let next = cx
            .send_request(PromptRequest::new(session.clone(), text("still there?")))
            .block_task()
            .await?;
        assert_eq!(next.stop_reason, StopReason::EndTurn);
        Ok(replayed)
    })
    .await;
    let Some(SessionUpdate::UserMessageChunk(first)) = replayed.first() else {
        panic!("the replay starts with the user's message: {replayed:?}");
    };
    assert_eq!(
        first.content,
        ContentBlock::Text(TextContent::new("remember me"))
    );
    let Some(SessionUpdate::UserMessageChunk(image)) = replayed.get(1) else {
        panic!("then its image: {replayed:?}");
    };
    assert_eq!(
        image.content,
        ContentBlock::Image(ImageContent::new("iVBORw0KGgo=", "image/png"))
    );
    assert_eq!(said(&live), "Let me use word_count.Done: 2 words");
    assert_eq!(said(&replayed), said(&live));
    assert!(
        replayed
            .iter()
            .any(|u| matches!(u, SessionUpdate::ToolCall(_)))
    );
    assert!(
        replayed
            .iter()
            .any(|u| matches!(u, SessionUpdate::ToolCallUpdate(_)))
    );
}

/// The status each `tool_call_update` among `updates` ends with, in order.
fn ends(updates: &[SessionUpdate]) -> Vec<ToolCallStatus> {
    updates
        .iter()
        .filter_map(|update| match update {
            SessionUpdate::ToolCallUpdate(update) => update.fields.status,
            _ => None,
        })
        .filter(|status| matches!(status, ToolCallStatus::Completed | ToolCallStatus::Failed))
        .collect()
}

fn user(
    choice: Option<PermissionOptionKind>,
) -> (User, mpsc::UnboundedReceiver<RequestPermissionRequest>) {
    let (asked, requests) = mpsc::unbounded_channel();
    (
        User {
            choice,
            asked,
            release: None,
        },
        requests,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_save_note_runs_once_allowed_and_allow_always_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite3");
    for (choice, asks) in [
        (PermissionOptionKind::AllowOnce, 2),
        (PermissionOptionKind::AllowAlways, 1),
    ] {
        let (user, mut requests) = user(Some(choice));
        let _ = std::fs::remove_file(db.with_extension("notes"));
        let updates = with_user(&db, user, async |cx, mut updates| {
            let session = new_session(&cx).await?;
            for note in ["save_note milk", "save_note eggs"] {
                let answer = cx
                    .send_request(PromptRequest::new(session.clone(), text(note)))
                    .block_task()
                    .await?;
                assert_eq!(answer.stop_reason, StopReason::EndTurn);
            }
            Ok(drain(&mut updates))
        })
        .await;
        let mut seen = Vec::new();
        while let Ok(request) = requests.try_recv() {
            seen.push(request);
        }
        assert_eq!(seen.len(), asks, "{choice:?}");
        assert_eq!(seen[0].tool_call.fields.kind, Some(ToolKind::Edit));
        assert_eq!(seen[0].options.len(), 4);
        assert_eq!(
            ends(&updates),
            [ToolCallStatus::Completed, ToolCallStatus::Completed]
        );
        let notes = std::fs::read_to_string(db.with_extension("notes")).unwrap();
        assert_eq!(notes, "save_note milk\nsave_note eggs\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_rejected_or_dismissed_save_note_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite3");
    for (choice, reason) in [
        (Some(PermissionOptionKind::RejectOnce), "rejected"),
        (None, "dismissed"),
    ] {
        let (user, mut requests) = user(choice);
        let updates = with_user(&db, user, async |cx, mut updates| {
            let session = new_session(&cx).await?;
            let answer = cx
                .send_request(PromptRequest::new(session, text("save_note secret")))
                .block_task()
                .await?;
            assert_eq!(answer.stop_reason, StopReason::EndTurn);
            Ok(drain(&mut updates))
        })
        .await;
        assert!(requests.try_recv().is_ok());
        assert_eq!(ends(&updates), [ToolCallStatus::Failed]);
        assert!(said(&updates).contains(reason), "{}", said(&updates));
        assert!(!db.with_extension("notes").exists(), "the tool never ran");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_cancel_while_asking_answers_cancelled_and_the_tool_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite3");
    let release = Arc::new(tokio::sync::Notify::new());
    let (mut user, mut requests) = user(Some(PermissionOptionKind::AllowOnce));
    user.release = Some(Arc::clone(&release));
    with_user(&db, user, async |cx, mut updates| {
        let session = new_session(&cx).await?;
        let pending = cx.send_request(PromptRequest::new(session.clone(), text("save_note later")));
        let asked = requests.recv().await.unwrap();
        assert_eq!(asked.session_id, session);
        cx.send_notification(CancelNotification::new(session.clone()))?;
        assert_eq!(
            pending.block_task().await?.stop_reason,
            StopReason::Cancelled
        );
        // The user answers after the cancel: too late.
        release.notify_one();
        assert_eq!(ends(&drain(&mut updates)), [ToolCallStatus::Failed]);

        // Modes: in yolo mode nothing is asked.
        cx.send_request(SetSessionModeRequest::new(session.clone(), "yolo"))
            .block_task()
            .await?;
        let next = cx
            .send_request(PromptRequest::new(session, text("save_note now")))
            .block_task()
            .await?;
        assert_eq!(next.stop_reason, StopReason::EndTurn);
        let after = drain(&mut updates);
        assert!(after.iter().any(
            |u| matches!(u, SessionUpdate::CurrentModeUpdate(m) if &*m.current_mode_id.0 == "yolo")
        ));
        assert_eq!(ends(&after), [ToolCallStatus::Completed]);
        Ok(())
    })
    .await;
    assert!(requests.try_recv().is_err(), "asked once only");
    let notes = std::fs::read_to_string(db.with_extension("notes")).unwrap();
    assert_eq!(notes, "save_note now\n", "the cancelled call never ran");
}

// ---------------------------------------------------------------------------------------------
// Raw lines.

/// The agent as a process, written to and read from line by line.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Raw {
    fn spawn(db: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(AGENT)
            .arg("--db")
            .arg(db)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            child,
            stdin,
            stdout,
        }
    }

    async fn write(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.write(&message.to_string()).await;
    }

    /// The next line, which must be a JSON-RPC 2.0 message.
    async fn recv(&mut self) -> Option<Value> {
        let line = self.stdout.next_line().await.unwrap()?;
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not JSON-RPC on stdout ({e}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "{line}");
        let request = message.get("method").is_some();
        let response = message.get("id").is_some()
            && (message.get("result").is_some() ^ message.get("error").is_some());
        assert!(request || response, "not a JSON-RPC message: {line}");
        Some(message)
    }

    /// Messages up to and including the answer to `id`.
    async fn until(&mut self, id: i64) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.recv().await.expect("the answer before the end");
            let done = message.get("method").is_none() && message["id"] == id;
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    async fn answer(&mut self, id: i64) -> Value {
        self.until(id).await.pop().unwrap()
    }

    /// Ends the input; every line written after is read, then the process exits cleanly.
    async fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let mut rest = Vec::new();
        while let Some(message) = self.recv().await {
            rest.push(message);
        }
        assert!(self.child.wait().await.unwrap().success());
        rest
    }
}

fn initialize() -> Value {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_bad_lines_are_answered_and_the_agent_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Raw::spawn(&dir.path().join("s.sqlite3"), &["--max-line-bytes", "4096"]);
    agent.send(initialize()).await;
    assert_eq!(agent.answer(0).await["result"]["protocolVersion"], 1);

    agent.write("{this is not json").await;
    let parse = agent.recv().await.unwrap();
    assert_eq!(parse["id"], Value::Null);
    assert_eq!(parse["error"]["code"], -32700);

    agent.send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"relative/dir","mcpServers":[]}})).await;
    let relative = agent.answer(1).await;
    assert_eq!(relative["error"]["code"], -32602);
    assert_eq!(relative["error"]["data"]["path"], "cwd");

    agent.send(json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[
        {"type":"sse","name":"fs","url":"http://127.0.0.1:9/sse","headers":[]}]}})).await;
    let mcp = agent.answer(2).await;
    assert_eq!(mcp["error"]["code"], -32602);
    assert_eq!(mcp["error"]["data"]["path"], "mcpServers[0]");

    agent.send(json!({"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}})).await;
    let session = agent.answer(3).await["result"]["sessionId"].clone();
    agent.send(json!({"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"bogus"}]}})).await;
    let bogus = agent.answer(4).await;
    assert_eq!(bogus["error"]["code"], -32602);
    assert!(
        bogus["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt[0]"),
        "{bogus}"
    );
    agent.send(json!({"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":session}})).await;
    let missing = agent.answer(5).await;
    assert_eq!(missing["error"]["code"], -32602);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`prompt`"),
        "{missing}"
    );

    agent
        .send(json!({"jsonrpc":"2.0","id":6,"method":"session/archive","params":{}}))
        .await;
    let unknown = agent.answer(6).await;
    assert_eq!(unknown["error"]["code"], -32601);
    assert_eq!(unknown["error"]["data"], "session/archive");
    // An unknown notification is not answered.
    agent
        .send(json!({"jsonrpc":"2.0","method":"_x/whatever","params":{}}))
        .await;

    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{{"sessionId":{session},"prompt":[{{"type":"text","text":"{}"}}]}}}}"#,
        "x".repeat(10_000)
    );
    agent.write(&huge).await;
    let refused = agent.recv().await.unwrap();
    assert_eq!(refused["error"]["code"], -32600);
    // Answered under the request's id, read from the line's first bytes.
    assert_eq!(refused["id"], 7, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4096"),
        "{refused}"
    );

    // Still serving.
    agent.send(json!({"jsonrpc":"2.0","id":8,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"ok then"}]}})).await;
    let turn = agent.until(8).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    assert!(turn.len() > 1, "updates came before the answer");
    assert!(
        agent.finish().await.is_empty(),
        "nothing after the last answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_cancel_answers_the_prompt_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Raw::spawn(&dir.path().join("s.sqlite3"), &[]);
    agent.send(initialize()).await;
    agent.answer(0).await;
    agent.send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}})).await;
    let session = agent.answer(1).await["result"]["sessionId"].clone();

    agent.send(json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"think slowly"}]}})).await;
    // A second prompt on a running session is refused; the first goes on.
    agent.send(json!({"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"me too"}]}})).await;
    // The request is valid; the session cannot take it now.
    let busy = agent.answer(3).await;
    assert_eq!(busy["error"]["code"], -32603, "{busy}");
    assert_eq!(busy["error"]["data"]["reason"], "session_busy", "{busy}");
    agent
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
        .await;
    agent
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
        .await;
    let cancelled = agent.answer(2).await;
    assert_eq!(cancelled["result"]["stopReason"], "cancelled");

    agent.send(json!({"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"again"}]}})).await;
    let turn = agent.until(4).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    let rest = agent.finish().await;
    let answers: Vec<&Value> = turn.iter().chain(&rest).filter(|m| m["id"] == 2).collect();
    assert!(
        answers.is_empty(),
        "prompt 2 was answered once: {answers:?}"
    );
    assert!(rest.is_empty(), "{rest:?}");
}

// MCP servers: the fixture `mcp-fixture` started by the agent for a session.

const MCP_FIXTURE: &str = env!("CARGO_BIN_EXE_mcp-fixture");

/// A stdio MCP server running the fixture, named `name`, writing its pid to `pids`.
fn fixture(name: &str, pids: &Path) -> agent_client_protocol::v1::schema::McpServer {
    use agent_client_protocol::v1::schema::{EnvVariable, McpServer, McpServerStdio};
    McpServer::Stdio(
        McpServerStdio::new(name, MCP_FIXTURE).env(vec![EnvVariable::new(
            "MCP_FIXTURE_PID_FILE",
            pids.to_str().unwrap(),
        )]),
    )
}

/// The tool calls' final `tool_call_update`s: (status, text content).
fn finished(updates: &[SessionUpdate]) -> Vec<(ToolCallStatus, String)> {
    updates
        .iter()
        .filter_map(|update| match update {
            SessionUpdate::ToolCallUpdate(update) => {
                let status = update.fields.status?;
                if status != ToolCallStatus::Completed && status != ToolCallStatus::Failed {
                    return None;
                }
                let content = serde_json::to_value(&update.fields.content).unwrap();
                let text = content[0]["content"]["text"].as_str().unwrap_or_default();
                Some((status, text.to_owned()))
            }
            _ => None,
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry: it must be reaped too.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_mcp_tools_are_offered_and_called_and_the_servers_exit_with_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let updates = with_agent(&dir.path().join("s.sqlite3"), async |cx, mut updates| {
        let session = cx
            .send_request(
                NewSessionRequest::new("/tmp")
                    .mcp_servers(vec![fixture("calc", &pids), fixture("other", &pids)]),
            )
            .block_task()
            .await?
            .session_id;
        let mut seen = Vec::new();
        for prompt in ["calc__add 2 and 3", "other__fail now"] {
            let answer = cx
                .send_request(PromptRequest::new(session.clone(), text(prompt)))
                .block_task()
                .await?;
            assert_eq!(answer.stop_reason, StopReason::EndTurn);
            seen.extend(drain(&mut updates));
        }
        let running: Vec<u32> = std::fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .map(|line| line.parse().unwrap())
            .collect();
        assert_eq!(running.len(), 2);
        assert!(running.iter().all(|pid| alive(*pid)));
        Ok(seen)
    })
    .await;
    assert_eq!(
        finished(&updates),
        [
            (ToolCallStatus::Completed, "sum 5".to_owned()),
            (ToolCallStatus::Failed, "no: other__fail now".to_owned()),
        ]
    );
    assert!(said(&updates).contains("Let me use calc__add.Done: sum 5"));
    // The agent has exited: its MCP servers are gone, reaped.
    let pids = std::fs::read_to_string(&pids).unwrap();
    for pid in pids.lines() {
        assert!(
            !alive(pid.parse().unwrap()),
            "MCP server {pid} outlived the agent"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_closing_a_session_stops_its_mcp_servers_and_the_agent_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    with_agent(&dir.path().join("s.sqlite3"), async |cx, _updates| {
        let session = cx
            .send_request(NewSessionRequest::new("/tmp").mcp_servers(vec![fixture("calc", &pids)]))
            .block_task()
            .await?
            .session_id;
        let pid: u32 = std::fs::read_to_string(&pids)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(alive(pid));
        cx.send_request(CloseSessionRequest::new(session.clone()))
            .block_task()
            .await?;
        // Closed and reaped before the answer, with the agent still serving.
        assert!(!alive(pid), "MCP server {pid} outlived its session");
        let closed = cx
            .send_request(PromptRequest::new(session.clone(), text("hi")))
            .block_task()
            .await;
        assert!(closed.is_err(), "a closed session takes no prompt");
        let other = new_session(&cx).await?;
        let answer = cx
            .send_request(PromptRequest::new(other, text("hello")))
            .block_task()
            .await?;
        assert_eq!(answer.stop_reason, StopReason::EndTurn);
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_an_mcp_call_that_never_answers_fails_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut agent = Raw::spawn(&dir.path().join("s.sqlite3"), &["--mcp-call-timeout", "1"]);
    agent.send(initialize()).await;
    let init = agent.answer(0).await;
    let mcp = &init["result"]["agentCapabilities"]["mcpCapabilities"];
    assert_eq!(mcp["http"], true, "{init}");
    assert_eq!(mcp["sse"], false, "{init}");
    let server = json!({"name": "slow", "command": MCP_FIXTURE, "args": [],
        "env": [{"name": "MCP_FIXTURE_PID_FILE", "value": pids.to_str().unwrap()}]});
    agent
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/new",
            "params":{"cwd":"/tmp","mcpServers":[server]}}))
        .await;
    let session = agent.answer(1).await["result"]["sessionId"].clone();
    agent
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/prompt",
            "params":{"sessionId":session,"prompt":[{"type":"text","text":"slow__sleep please"}]}}))
        .await;
    let seen = agent.until(2).await;
    assert_eq!(seen.last().unwrap()["result"]["stopReason"], "end_turn");
    let failed: Vec<&Value> = seen
        .iter()
        .map(|message| &message["params"]["update"])
        .filter(|update| {
            update["sessionUpdate"] == "tool_call_update" && update["status"] == "failed"
        })
        .collect();
    assert_eq!(failed.len(), 1, "{seen:#?}");
    let reason = failed[0]["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        reason.contains("`sleep` did not answer within 1s"),
        "{reason}"
    );
    agent.finish().await;
    let pid: u32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "MCP server {pid} outlived the agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_an_mcp_server_that_cannot_start_or_connect_fails_the_session_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Raw::spawn(&dir.path().join("s.sqlite3"), &[]);
    agent.send(initialize()).await;
    agent.answer(0).await;
    agent
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}))
        .await;
    let session = agent.answer(1).await["result"]["sessionId"].clone();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let unreachable = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let servers = [
        (
            json!({"name": "ghost", "command": "/nonexistent/mcp", "args": [], "env": []}),
            "`ghost` failed to start".to_owned(),
        ),
        // Starts, but is no MCP server: its stdout ends at once.
        (
            json!({"name": "liar", "command": "/bin/true", "args": [], "env": []}),
            "`liar` failed to start".to_owned(),
        ),
        (
            json!({"type": "http", "name": "web", "url": unreachable, "headers": []}),
            format!("`web` at {unreachable} failed to connect"),
        ),
    ];
    let twin = json!({"name": "twin", "command": MCP_FIXTURE, "args": [], "env": []});
    agent
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/new",
            "params":{"cwd":"/tmp","mcpServers":[twin.clone(), twin]}}))
        .await;
    let answer = agent.answer(2).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let data = answer["error"]["data"].to_string();
    assert!(
        data.contains("two MCP servers are named `twin`"),
        "{answer}"
    );
    let mut id = 2;
    for (server, expected) in servers {
        for method in ["session/new", "session/load"] {
            id += 1;
            agent
                .send(json!({"jsonrpc":"2.0","id":id,"method":method,
                    "params":{"cwd":"/tmp","sessionId":session,"mcpServers":[server.clone()]}}))
                .await;
            let answer = agent.answer(id).await;
            let data = answer["error"]["data"].to_string();
            assert!(data.contains(&expected), "{method}: {answer}");
        }
    }
    agent.finish().await;
}

/// The main script of the npm package `package` of `tests/acp`, after `npm ci` there.
fn peer_script(package: &str) -> String {
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/acp");
    tests::node::npm_ci(&peers).unwrap();
    let main = peers.join(format!("node_modules/{package}/dist/index.js"));
    main.to_str().unwrap().to_owned()
}

/// The reference MCP server of `tests/acp` (`@modelcontextprotocol/server-everything`).
fn everything() -> agent_client_protocol::v1::schema::McpServer {
    use agent_client_protocol::v1::schema::{EnvVariable, McpServer, McpServerStdio};
    let main = peer_script("@modelcontextprotocol/server-everything");
    McpServer::Stdio(
        McpServerStdio::new("everything", "node")
            .args(vec![main, "stdio".to_owned()])
            .env(vec![EnvVariable::new("BIDI_MARK", "marked-for-the-test")]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_the_reference_mcp_server_tools_run_and_fail_through_the_agent() {
    let server = everything();
    let dir = tempfile::tempdir().unwrap();
    let updates = with_agent(&dir.path().join("s.sqlite3"), async |cx, mut updates| {
        let session = cx
            .send_request(NewSessionRequest::new("/tmp").mcp_servers(vec![server]))
            .block_task()
            .await?
            .session_id;
        let mut seen = Vec::new();
        // `get-env` takes no arguments; `echo` needs a string `message`, which the prompt
        // gives as a number, so the server answers an error result; `get-tiny-image` answers
        // an image between two texts.
        for prompt in [
            "everything__get-env",
            r#"everything__echo {"message": 5}"#,
            "everything__get-tiny-image",
        ] {
            let answer = cx
                .send_request(PromptRequest::new(session.clone(), text(prompt)))
                .block_task()
                .await?;
            assert_eq!(answer.stop_reason, StopReason::EndTurn);
            seen.extend(drain(&mut updates));
        }
        Ok(seen)
    })
    .await;
    let finished = finished(&updates);
    assert_eq!(finished.len(), 3, "{finished:?}");
    assert_eq!(finished[0].0, ToolCallStatus::Completed);
    assert!(
        finished[0].1.contains("marked-for-the-test"),
        "{finished:?}"
    );
    assert_eq!(finished[1].0, ToolCallStatus::Failed);
    assert!(finished[1].1.contains("message"), "{finished:?}");
    // The image reaches the client as a block of the call's content, after its text.
    assert_eq!(finished[2].0, ToolCallStatus::Completed);
    assert!(finished[2].1.contains("The image above"), "{finished:?}");
    let image = updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::ToolCallUpdate(update) => update.fields.content.as_ref(),
            _ => None,
        })
        .flatten()
        .find_map(|content| match content {
            ToolCallContent::Content(content) => match &content.content {
                ContentBlock::Image(image) => Some(image),
                _ => None,
            },
            _ => None,
        })
        .expect("an image in the tool's content");
    assert_eq!(image.mime_type, "image/png");
    assert!(
        image.data.starts_with("iVBORw0KGgo"),
        "a PNG: {}",
        image.data
    );
}

/// `@modelcontextprotocol/server-everything` in its streamable HTTP mode on a free port of
/// 127.0.0.1, with `BIDI_MARK` in its environment; killed when dropped. Returns it and its
/// URL once it listens.
async fn everything_over_http() -> (Child, String) {
    let main =
        tokio::task::spawn_blocking(|| peer_script("@modelcontextprotocol/server-everything"))
            .await
            .unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let mut server = Command::new("node")
        .args([main.as_str(), "streamableHttp"])
        .env("PORT", port.to_string())
        .env("BIDI_MARK", "marked-over-http")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // It says so on stderr once it listens.
    let mut stderr = BufReader::new(server.stderr.take().unwrap()).lines();
    loop {
        let line = stderr.next_line().await.unwrap();
        let line = line.expect("server-everything exited before it listened");
        if line.contains(&format!("listening on port {port}")) {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_the_reference_mcp_server_over_http_runs_a_tool_through_the_agent() {
    use agent_client_protocol::v1::schema::{HttpHeader, McpServer, McpServerHttp};
    let (_server, url) = everything_over_http().await;
    let dir = tempfile::tempdir().unwrap();
    let http = McpServer::Http(
        McpServerHttp::new("web", url)
            .headers(vec![HttpHeader::new("Authorization", "Bearer test-token")]),
    );
    let updates = with_agent(&dir.path().join("s.sqlite3"), async |cx, mut updates| {
        let session = cx
            .send_request(NewSessionRequest::new("/tmp").mcp_servers(vec![http]))
            .block_task()
            .await?
            .session_id;
        let answer = cx
            .send_request(PromptRequest::new(session, text("web__get-env")))
            .block_task()
            .await?;
        assert_eq!(answer.stop_reason, StopReason::EndTurn);
        Ok(drain(&mut updates))
    })
    .await;
    let finished = finished(&updates);
    assert_eq!(finished.len(), 1, "{updates:?}");
    assert_eq!(finished[0].0, ToolCallStatus::Completed, "{finished:?}");
    // The environment of the HTTP server's process: the call went there.
    assert!(finished[0].1.contains("marked-over-http"), "{finished:?}");
    assert!(said(&updates).contains("Let me use web__get-env."));
}

/// `@modelcontextprotocol/server-filesystem` of `tests/acp` as the MCP server `fs`, allowed
/// into `root` only.
fn filesystem(root: &Path) -> agent_client_protocol::v1::schema::McpServer {
    use agent_client_protocol::v1::schema::{McpServer, McpServerStdio};
    let main = peer_script("@modelcontextprotocol/server-filesystem");
    McpServer::Stdio(
        McpServerStdio::new("fs", "node").args(vec![main, root.to_str().unwrap().to_owned()]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_the_filesystem_mcp_server_reads_a_file_shown_as_its_location() {
    let dir = tempfile::tempdir().unwrap();
    // The server resolves symbolic links in its allowed directory; so does the test.
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let file = root.join("hello.txt");
    std::fs::write(&file, "first line\nread through MCP\n").unwrap();
    let server = tokio::task::spawn_blocking({
        let root = root.clone();
        move || filesystem(&root)
    })
    .await
    .unwrap();
    let prompt = format!(
        "fs__read_text_file {}",
        json!({"path": file.to_str().unwrap()})
    );
    let updates = with_agent(&dir.path().join("s.sqlite3"), async |cx, mut updates| {
        let session = cx
            .send_request(NewSessionRequest::new("/tmp").mcp_servers(vec![server]))
            .block_task()
            .await?
            .session_id;
        let answer = cx
            .send_request(PromptRequest::new(session, text(&prompt)))
            .block_task()
            .await?;
        assert_eq!(answer.stop_reason, StopReason::EndTurn);
        Ok(drain(&mut updates))
    })
    .await;
    let call = updates
        .iter()
        .find_map(|update| match update {
            SessionUpdate::ToolCall(call) => Some(call),
            _ => None,
        })
        .expect("a tool_call update");
    assert_eq!(
        call.raw_input,
        Some(json!({"path": file.to_str().unwrap()}))
    );
    let paths: Vec<&Path> = call.locations.iter().map(|l| l.path.as_path()).collect();
    assert_eq!(paths, [file.as_path()], "{call:?}");
    assert_eq!(
        finished(&updates),
        [(
            ToolCallStatus::Completed,
            "first line\nread through MCP\n".to_owned()
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_an_mcp_tool_needing_permission_runs_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let root = root.canonicalize().unwrap();
    let file = root.join("written.txt");
    let server = tokio::task::spawn_blocking({
        let root = root.clone();
        move || filesystem(&root)
    })
    .await
    .unwrap();
    let prompt = format!(
        "fs__write_file {}",
        json!({"path": file.to_str().unwrap(), "content": "allowed\n"})
    );
    let db = dir.path().join("s.sqlite3");
    for choice in [
        PermissionOptionKind::RejectOnce,
        PermissionOptionKind::AllowOnce,
    ] {
        let (user, mut requests) = user(Some(choice));
        let server = server.clone();
        let prompt = prompt.clone();
        let updates = with_args(
            &db,
            &["--ask", "fs__write*"],
            user,
            async |cx, mut updates| {
                let session = cx
                    .send_request(NewSessionRequest::new("/tmp").mcp_servers(vec![server]))
                    .block_task()
                    .await?
                    .session_id;
                // Reading needs no permission.
                let answer = cx
                    .send_request(PromptRequest::new(
                        session.clone(),
                        text("fs__list_allowed_directories"),
                    ))
                    .block_task()
                    .await?;
                assert_eq!(answer.stop_reason, StopReason::EndTurn);
                let answer = cx
                    .send_request(PromptRequest::new(session, text(&prompt)))
                    .block_task()
                    .await?;
                assert_eq!(answer.stop_reason, StopReason::EndTurn);
                Ok(drain(&mut updates))
            },
        )
        .await;
        let asked = requests.try_recv().expect("the write was asked about");
        assert!(requests.try_recv().is_err(), "asked once only");
        let paths: Vec<&Path> = asked
            .tool_call
            .fields
            .locations
            .iter()
            .flatten()
            .map(|l| l.path.as_path())
            .collect();
        assert_eq!(paths, [file.as_path()], "{asked:?}");
        let finished = finished(&updates);
        assert_eq!(finished.len(), 2, "{finished:?}");
        assert_eq!(finished[0].0, ToolCallStatus::Completed, "{finished:?}");
        if choice == PermissionOptionKind::RejectOnce {
            assert_eq!(finished[1].0, ToolCallStatus::Failed, "{finished:?}");
            assert!(finished[1].1.contains("rejected"), "{finished:?}");
            // The MCP server never got the call.
            assert!(!file.exists(), "the rejected write ran");
        } else {
            assert_eq!(finished[1].0, ToolCallStatus::Completed, "{finished:?}");
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "allowed\n");
        }
    }
}

#[test]
fn raw_a_client_that_does_not_read_its_answers_is_not_read_either() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(AGENT)
        .arg("--db")
        .arg(dir.path().join("s.sqlite3"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let requests = 20_000;
    let lines = (0..requests)
        .map(|id| {
            json!({"jsonrpc":"2.0","id":id,"method":"session/load",
                "params":{"sessionId":"missing","cwd":"/tmp","mcpServers":[]}})
            .to_string()
        })
        .collect();
    let _deadline = tests::flood::deadline(child.id(), std::time::Duration::from_secs(300));
    let flood = tests::flood::flood(child.stdin.take().unwrap(), lines);
    // Nobody reads the answers: once they fill stdout, the agent reads no more requests.
    let stalled = flood
        .stalled()
        .expect("the agent read every request while nobody read its answers");
    assert!(stalled < requests / 4, "{stalled} requests read");
    // Read at last, every request is answered, and the agent ends with its input.
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answered = vec![false; requests];
    for line in std::io::BufRead::lines(stdout) {
        let answer: Value = serde_json::from_str(&line.unwrap()).unwrap();
        assert_eq!(answer["error"]["code"], -32002, "{answer}");
        let id = usize::try_from(answer["id"].as_u64().unwrap()).unwrap();
        assert!(!std::mem::replace(&mut answered[id], true), "{answer}");
    }
    assert!(answered.iter().all(|answered| *answered));
    flood.finish().unwrap();
    assert!(child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_ids_and_names_a_client_chose_are_escaped_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(AGENT)
        .arg("--db")
        .arg(dir.path().join("s.sqlite3"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let forged = "x\nforged line \u{1b}[31mred";
    let lines = [
        // An answer nobody waits for, and a cancel the server cannot read.
        json!({"jsonrpc":"2.0","id":forged,"result":{}}),
        json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":7,"x":forged}}),
        json!({"jsonrpc":"2.0","method":"session/cancel","params":{forged:1}}),
    ];
    for line in lines {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr
            .lines()
            .all(|line| line.starts_with("[bidi-acp] ") || line.starts_with("[acp-agent] ")),
        "{stderr}"
    );
    assert!(stderr.contains("forged line"), "the id is logged: {stderr}");
}

#[test]
fn a_client_that_does_not_read_stderr_still_gets_every_answer() {
    use std::io::{BufRead as _, BufReader};

    let dir = tempfile::tempdir().unwrap();
    // Stderr is piped and never read: the logs fill the pipe (64 KiB) long before the end.
    let mut child = std::process::Command::new(AGENT)
        .arg("--db")
        .arg(dir.path().join("s.sqlite3"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stderr = child.stderr.take().unwrap();
    // An agent stalled on its logs is killed, and the count below fails.
    let _deadline = tests::flood::deadline(child.id(), std::time::Duration::from_secs(120));
    let requests = 3_000;
    let stray = "x".repeat(200);
    // An answer to a request the agent never sent is logged, its id quoted (some 270 bytes of
    // log each); the request after it is answered.
    let lines = (0..requests)
        .flat_map(|n| {
            [
                json!({"jsonrpc": "2.0", "id": format!("{stray}{n}"), "result": {}}),
                json!({"jsonrpc": "2.0", "id": n, "method": "x/unknown"}),
            ]
        })
        .map(|message| message.to_string())
        .collect();
    let flood = tests::flood::flood(child.stdin.take().unwrap(), lines);
    let mut answered = 0;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let answer: Value = serde_json::from_str(&line.unwrap()).unwrap();
        assert_eq!(answer["id"], answered, "{answer}");
        assert_eq!(answer["error"]["code"], -32601, "{answer}");
        answered += 1;
    }
    assert_eq!(answered, requests, "every request answered");
    flood.finish().unwrap();
    assert!(child.wait().unwrap().success());
}
