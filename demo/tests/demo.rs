//! The main command run as a real process on a free port with its own SQLite file: one
//! conversation over HTTP (a flow, the assistant's tool that waits for approval, a client's
//! tool, the chat agent), then the same file read back by a second process; one conversation
//! across the wires, the real clients of each taking its turns (the AI SDK's on the UI message
//! stream, the ACP TypeScript SDK's on `bidi-demo --acp`, another process on the file), read
//! back over AG-UI and the session endpoint; and the command lines and places it refuses, with
//! the reason.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tests::node::{Summary, npm_ci, run_node};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::task::JoinHandle;

/// A running `bidi-demo`, killed when dropped (also when a test panics).
struct Demo {
    addr: SocketAddr,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    child: Child,
    client: reqwest::Client,
}

/// `bidi-demo` with `args`, nothing of the environment choosing for it, its stderr collected.
fn spawn(args: &[&str]) -> (Child, Arc<Mutex<String>>, JoinHandle<()>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bidi-demo"))
        .args(args)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run bidi-demo");
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().unwrap();
    let collected = Arc::clone(&stderr);
    let reading = tokio::spawn(async move {
        let mut buf = [0; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buf).await {
            collected
                .lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (child, stderr, reading)
}

impl Demo {
    /// Starts `bidi-demo` on a free port with sessions in `db` and notes in `notes`, and waits
    /// for its first line, `listening on http://{addr}`.
    async fn start(db: &Path, notes: &Path) -> Self {
        let (db, notes) = (db.to_str().unwrap(), notes.to_str().unwrap());
        let (mut child, stderr, reading) =
            spawn(&["--addr", "127.0.0.1:0", "--db", db, "--notes", notes]);
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = stdout.next_line().await.unwrap();
        let Some(addr) = first
            .as_deref()
            .and_then(|line| line.strip_prefix("listening on http://"))
        else {
            let _ = child.wait().await;
            let _ = reading.await;
            panic!(
                "the first line is {first:?}, not `listening on http://..`; stderr:\n{}",
                stderr.lock().unwrap()
            );
        };
        let addr: SocketAddr = addr.parse().unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_ne!(addr.port(), 0, "the port the system picked");
        Self {
            addr,
            stdout,
            stderr,
            child,
            client: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// `POST path` with a JSON `body`; answers the status and the body's text.
    async fn post(&self, path: &str, body: &Value) -> (u16, String) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// `GET path` as JSON, which must answer 200.
    async fn get(&self, path: &str) -> Value {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{}", self.stderr());
        response.json().await.unwrap()
    }

    /// One execution of the assistant on session `id`: its events.
    async fn execute(&self, id: &str, input: &Value) -> Vec<(String, Value)> {
        let (status, text) = self
            .post(
                "/agent/assistant/execute",
                &json!({"sessionId": id, "input": input}),
            )
            .await;
        assert_eq!(status, 200, "{text}\n{}", self.stderr());
        events(&text)
    }

    /// One turn of the chat agent on session `id`: its output.
    async fn chat(&self, id: &str, line: &str) -> Value {
        let (status, text) = self
            .post(
                "/agent/chat",
                &json!({"data": line, "init": {"sessionId": id}}),
            )
            .await;
        assert_eq!(status, 200, "{text}\n{}", self.stderr());
        let mut answer: Value = serde_json::from_str(&text).unwrap();
        answer["result"].take()
    }

    /// Stops it the way a person at its terminal does (Ctrl-C): it must exit cleanly.
    async fn stop(mut self) {
        let pid = self.child.id().unwrap().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .await
            .unwrap();
        assert!(sent.success());
        let status = self.child.wait().await.unwrap();
        assert!(status.success(), "{status}; stderr:\n{}", self.stderr());
    }
}

/// The events of an agent's SSE answer: (event name, data).
fn events(text: &str) -> Vec<(String, Value)> {
    text.split_terminator("\n\n")
        .map(|record| {
            let (event, data) = record
                .split_once('\n')
                .unwrap_or_else(|| panic!("not an SSE event: {record:?}"));
            let name = event.strip_prefix("event: ").unwrap().to_owned();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name.as_str(), "{record}");
            (name, data)
        })
        .collect()
}

/// The data of the first event named `name`.
fn event<'a>(events: &'a [(String, Value)], name: &str) -> &'a Value {
    events
        .iter()
        .find(|(event, _)| event == name)
        .map(|(_, data)| data)
        .unwrap_or_else(|| panic!("no {name} in {events:?}"))
}

/// The `execute_complete` event, which must be the last.
fn complete(events: &[(String, Value)]) -> &Value {
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "execute_complete", "{events:?}");
    data
}

/// What the assistant said: its `text_end` events' text.
fn said(events: &[(String, Value)]) -> Vec<&str> {
    events
        .iter()
        .filter(|(name, _)| name == "text_end")
        .map(|(_, data)| data["text"].as_str().unwrap())
        .collect()
}

/// Each message's role, and its text: a user's content, an assistant's text blocks, a tool
/// result's content.
fn conversation(session: &Value) -> Vec<(String, String)> {
    session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| {
            let text = match message["content"].as_array() {
                Some(blocks) => blocks
                    .iter()
                    .filter_map(|block| block["text"].as_str())
                    .collect(),
                None => message["content"].as_str().unwrap().to_owned(),
            };
            (message["role"].as_str().unwrap().to_owned(), text)
        })
        .collect()
}

/// The note file's text; empty while there is none.
fn notes(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// It prints the Dev UI's address and commands to try after its first line.
async fn hints(demo: &mut Demo) {
    let mut printed = String::new();
    while let Some(line) = demo.stdout.next_line().await.unwrap() {
        printed.push_str(&line);
        printed.push('\n');
        if line.contains("approved\":true") {
            break;
        }
    }
    let base = format!("http://{}", demo.addr);
    assert!(printed.contains(&format!("{base}/dev/")), "{printed}");
    assert!(
        printed.contains(&format!("curl -sN '{base}/bidi-flow/echo?stream=true'")),
        "{printed}"
    );
}

/// The chunks of a streamed flow answer, one after the other (they are text).
fn streamed(text: &str) -> String {
    records(text)
        .iter()
        .filter_map(|record| record["message"].as_str())
        .collect()
}

/// The `data:` records of a streamed flow answer.
fn records(text: &str) -> Vec<Value> {
    text.split_terminator("\n\n")
        .map(|record| serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

/// A flow run: one answer, then the same streamed as a record per word.
async fn echo(demo: &Demo) {
    let run = json!({"data": "hello there", "init": "> "});
    let (status, text) = demo.post("/bidi-flow/echo", &run).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"result": 1})
    );
    let (status, text) = demo.post("/bidi-flow/echo?stream=true", &run).await;
    assert_eq!(status, 200);
    assert_eq!(
        records(&text),
        [
            json!({"message": "> hello"}),
            json!({"message": "> there"}),
            json!({"result": 1})
        ]
    );
}

/// The Dev UI is served, and its traces hold the echo runs just made.
async fn dev_ui(demo: &Demo) {
    let page = demo.client.get(demo.url("/dev/")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("Dev UI"));
    let traces = demo.get("/dev/api/traces").await;
    let echoes = traces["traces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|trace| trace["name"] == "echo")
        .count();
    assert_eq!(echoes, 2, "{traces}");
}

/// The assistant's `save_note` waits for the user's decision: approved, it runs and the
/// answer reports it; denied, it does not run and the model reads why.
async fn approvals(demo: &Demo, id: &str, path: &Path) {
    let book =
        json!({"name": "book", "description": "Books a trip", "parameters": {"type": "object"}});
    let (status, text) = demo
        .post(
            "/agent/assistant/execute",
            &json!({
                "sessionId": id,
                "input": {"content": "save_note buy milk"},
                "context": {"tools": [book]}
            }),
        )
        .await;
    assert_eq!(status, 200, "{text}\n{}", demo.stderr());
    let first = events(&text);
    let waiting = event(&first, "awaiting_approval");
    assert_eq!(waiting["toolCalls"][0]["name"], "save_note", "{waiting}");
    let call = waiting["toolCalls"][0]["id"].as_str().unwrap().to_owned();
    let done = complete(&first);
    assert_eq!(done["status"], "awaiting_tool_execution", "{done}");
    assert_eq!(
        done["pendingToolCalls"],
        json!([]),
        "nothing for the client to run"
    );
    assert!(!first.iter().any(|(name, _)| name == "tool_execution_start"));
    assert_eq!(notes(path), "", "nothing saved before the approval");

    // Another message while the call waits is refused, and runs nothing.
    let (status, text) = demo
        .post(
            "/agent/assistant/execute",
            &json!({"sessionId": id, "input": {"content": "hello?"}}),
        )
        .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("approval"), "{text}");

    let approved = demo
        .execute(
            id,
            &json!({"approvals": [{"toolCallId": call, "approved": true}]}),
        )
        .await;
    let saved = format!("saved to {}", path.display());
    assert_eq!(
        event(&approved, "tool_execution_end")["output"],
        saved.as_str()
    );
    assert_eq!(said(&approved), [format!("Done: {saved}")]);
    assert_eq!(complete(&approved)["status"], "completed");
    assert_eq!(notes(path), "save_note buy milk\n");

    let second = demo
        .execute(id, &json!({"content": "save_note call mom"}))
        .await;
    let call = event(&second, "awaiting_approval")["toolCalls"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let denied = demo
        .execute(
            id,
            &json!({"approvals": [{"toolCallId": call, "approved": false, "reason": "not now"}]}),
        )
        .await;
    assert_eq!(said(&denied), ["Done: the user denied this call: not now"]);
    assert_eq!(complete(&denied)["status"], "completed");
    assert_eq!(
        notes(path),
        "save_note buy milk\n",
        "a denied call does not run"
    );
}

/// A tool the client declared: the execution stops for its result, which the client sends.
async fn client_tool(demo: &Demo, id: &str) {
    let asked = demo
        .execute(id, &json!({"content": "book a trip to Oslo"}))
        .await;
    let done = complete(&asked);
    assert_eq!(done["status"], "awaiting_tool_execution", "{done}");
    let pending = &done["pendingToolCalls"];
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(pending[0]["name"], "book");
    assert_eq!(
        pending[0]["arguments"],
        json!({"request": "book a trip to Oslo"})
    );
    let call = pending[0]["id"].as_str().unwrap();
    let answered = demo
        .execute(
            id,
            &json!([{
                "toolCallId": call, "toolName": "book", "content": "booked: flight 42",
                "isError": false
            }]),
        )
        .await;
    assert_eq!(said(&answered), ["Done: booked: flight 42"]);
    assert_eq!(complete(&answered)["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_served_and_read_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (db, path) = (
        dir.path().join("demo.sqlite3"),
        dir.path().join("notes.txt"),
    );
    let mut demo = Demo::start(&db, &path).await;
    hints(&mut demo).await;

    let actions = demo.get("/actions").await;
    let mut keys: Vec<&str> = actions
        .as_array()
        .unwrap()
        .iter()
        .map(|action| action["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["/agent/assistant", "/agent/chat", "/bidi-flow/echo"]);

    echo(&demo).await;
    dev_ui(&demo).await;
    approvals(&demo, "trip", &path).await;
    client_tool(&demo, "trip").await;
    let output = demo.chat("c", "hi").await;
    assert_eq!(
        (&output["sessionId"], &output["output"]),
        (&json!("c"), &json!(1))
    );
    demo.stop().await;

    // Another process on the same file: the conversation is there, and goes on.
    let demo = Demo::start(&db, &path).await;
    let session = demo.get("/agent/assistant/session/trip").await;
    assert_eq!(session["status"], "completed", "{session}");
    let saved = format!("saved to {}", path.display());
    let denial = "the user denied this call: not now";
    let expected = [
        ("user", "save_note buy milk"),
        ("assistant", "Let me use save_note."),
        ("toolResult", saved.as_str()),
        ("assistant", &format!("Done: {saved}")),
        ("user", "save_note call mom"),
        ("assistant", "Let me use save_note."),
        ("toolResult", denial),
        ("assistant", &format!("Done: {denial}")),
        ("user", "book a trip to Oslo"),
        ("assistant", "Let me use book."),
        ("toolResult", "booked: flight 42"),
        ("assistant", "Done: booked: flight 42"),
    ]
    .map(|(role, text)| (role.to_owned(), text.to_owned()));
    assert_eq!(conversation(&session), expected);
    let (status, text) = demo
        .post(
            "/agent/chat?stream=true",
            &json!({"data": "bye", "init": {"sessionId": "c"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        streamed(&text),
        "Message 2 of this session. You first said \"hi\", and last \"hi\"."
    );
    demo.stop().await;
}

/// The ACP TypeScript SDK's script `tests/acp/{script}` run with `args`, after `npm ci` there.
async fn editor(script: &str, args: Vec<String>) -> Summary {
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/acp");
    let script = peers.join(script);
    tokio::task::spawn_blocking(move || {
        npm_ci(&peers).unwrap();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_node(&script, &args)
    })
    .await
    .unwrap()
}

/// What a message of the demo model's turn on `said` is: the user's words, its call of
/// `word_count`, the count, and the answer telling it.
fn turn(said: &str) -> [(String, String); 4] {
    let words = said.split_whitespace().count();
    [
        ("user", said.to_owned()),
        ("assistant", "Let me use word_count.".to_owned()),
        ("toolResult", format!("{words} words")),
        ("assistant", format!("Done: {words} words")),
    ]
    .map(|(role, text)| (role.to_owned(), text))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_conversation_crosses_the_wires_and_the_processes() {
    const CHAT: &str = "one-conversation";
    let dir = tempfile::tempdir().unwrap();
    let (db, notes) = (
        dir.path().join("demo.sqlite3"),
        dir.path().join("notes.txt"),
    );
    let demo = Demo::start(&db, &notes).await;
    let base = demo.url("");
    let said = [
        "hello from the web",
        "hello from the editor",
        "the web again",
        "the editor again",
    ];

    // The arguments of the scripts.
    let strings = |args: &[&str]| args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
    let web = |step: &str, said: &[&str]| strings(&[&[base.as_str(), step, CHAT], said].concat());

    // The AI SDK's client starts it on the UI message stream.
    let started = tests::node::client("one_conversation.mjs", web("start", &[])).await;
    started.assert_passed(1);

    // An editor loads it over ACP, from `bidi-demo --acp` on the same file, and prompts; the
    // web takes a turn (execute SSE) while the editor keeps it open; the editor prompts again.
    let bin = env!("CARGO_BIN_EXE_bidi-demo");
    let (scratch, db) = (dir.path().to_str().unwrap(), db.to_str().unwrap());
    let loaded = editor(
        "one_conversation.mjs",
        strings(&[bin, scratch, db, CHAT, &base]),
    )
    .await;
    loaded.assert_passed(6);

    // The AI SDK's client reloads it, finds every turn in order, and goes on.
    let resumed = tests::node::client("one_conversation.mjs", web("resume", &said)).await;
    resumed.assert_passed(1);

    // Read over the session endpoint and AG-UI: one conversation, every turn in order.
    let session = demo.get(&format!("/agent/assistant/session/{CHAT}")).await;
    assert_eq!(session["status"], "completed", "{session}");
    let all: Vec<_> = said
        .iter()
        .chain(&["back on the web"])
        .flat_map(|said| turn(said))
        .collect();
    assert_eq!(conversation(&session), all);
    let thread = demo.get(&format!("/agent/assistant/ag-ui/{CHAT}")).await;
    let asked_and_answered: Vec<(String, String)> = thread
        .as_array()
        .unwrap()
        .iter()
        .map(|message| {
            let role = message["role"].as_str().unwrap().to_owned();
            (
                role,
                message["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .filter(|(role, text)| role == "user" || text.starts_with("Done: "))
        .collect();
    let expected: Vec<_> = all
        .into_iter()
        .filter(|(role, text)| role == "user" || text.starts_with("Done: "))
        .collect();
    assert_eq!(asked_and_answered, expected, "{thread}");
    demo.stop().await;
}

/// Runs `bidi-demo` with `args` to its end: its exit status and stderr.
async fn refused(args: &[&str]) -> (ExitStatus, String) {
    let (mut child, stderr, reading) = spawn(args);
    let status = child.wait().await.unwrap();
    reading.await.unwrap();
    let stderr = stderr.lock().unwrap().clone();
    (status, stderr)
}

#[tokio::test]
async fn a_wrong_command_line_is_refused_with_the_reason() {
    let (status, stderr) = refused(&["--addr", "localhost"]).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'localhost' for '--addr <ADDR>'"),
        "{stderr}"
    );
    let (status, stderr) = refused(&["--db"]).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("a value is required for '--db <DB>'"),
        "{stderr}"
    );
    let (status, stderr) = refused(&["--acp", "--addr", "127.0.0.1:0"]).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the argument '--acp' cannot be used with '--addr <ADDR>'"),
        "{stderr}"
    );
    let (status, stderr) = refused(&["--verbose"]).await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unexpected argument '--verbose'"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_taken_port_or_an_unusable_file_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.sqlite3");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (status, stderr) = refused(&["--addr", &addr, "--db", db.to_str().unwrap()]).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );

    let missing = dir.path().join("no such dir").join("demo.sqlite3");
    let (status, stderr) = refused(&["--db", missing.to_str().unwrap()]).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot open the sessions in {}",
            missing.display()
        )),
        "{stderr}"
    );
}
