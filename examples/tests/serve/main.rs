//! The serve example run as real processes: two on one PostgreSQL database serving the same
//! sessions (resumed on the other process, and never run by both at once), and one on its own
//! SQLite file answering the `curl` commands it prints.
//!
//! The PostgreSQL tests start a private server ([`PostgresServer`]: `initdb` + `postgres` from
//! the installed PostgreSQL, on a free port of 127.0.0.1) and stop it when done. With
//! `BIDI_POSTGRES_URL` set they use that database instead (every session id is fresh).

#![allow(clippy::unwrap_used)]

mod crash;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use bidi_session::testing::PostgresServer;
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// A running `serve` process, killed when dropped (also when a test panics).
struct Serve {
    addr: SocketAddr,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    _child: Child,
}

impl Serve {
    /// Starts `serve` with `args` and waits for its first line, `listening on http://{addr}`.
    async fn start(args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_serve"));
        command
            .args(args)
            // What the environment could choose instead of the arguments: a database, a model.
            .env_remove("BIDI_POSTGRES_URL")
            .env_remove("BIDI_SERVE_DB")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("run the serve example");
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
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = stdout.next_line().await.unwrap();
        let Some(addr) = first
            .as_deref()
            .and_then(|line| line.strip_prefix("listening on http://"))
        else {
            // Let it finish saying why.
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
            _child: child,
        }
    }

    /// Starts `serve` on a free port with sessions in PostgreSQL at `url`.
    async fn postgres(url: &str) -> Self {
        Self::start(&["--addr", "127.0.0.1:0", "--postgres", url]).await
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// `POST /agent/assistant/execute`.
    async fn execute(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(self.url("/agent/assistant/execute"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    /// A session made here with one turn (`hello`): its id.
    async fn hello(&self) -> String {
        let created = self
            .execute(&json!({"input": {"content": "hello"}, "context": {}}))
            .await;
        assert_eq!(created.status().as_u16(), 200, "{}", self.stderr());
        let id = created.headers()["x-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let created = events(&created.text().await.unwrap());
        assert_eq!(complete(&created)["status"], "completed");
        id
    }

    /// A session made here with one turn (`hello`), and a slow turn started on it (`answer
    /// slowly`: the model thinks for three seconds first), which holds the session's lease once
    /// its first events are out: the session's id, those events, and the rest of the body.
    async fn slow_turn(
        &self,
    ) -> (
        String,
        String,
        impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin + use<>,
    ) {
        let id = self.hello().await;
        let slow = self
            .execute(&json!({"sessionId": id, "input": {"content": "answer slowly"}}))
            .await;
        assert_eq!(slow.status().as_u16(), 200, "{}", self.stderr());
        let mut slow = slow.bytes_stream();
        let head = String::from_utf8(slow.next().await.unwrap().unwrap().to_vec()).unwrap();
        assert!(head.starts_with("event: session_start\n"), "{head}");
        (id, head, slow)
    }

    /// Kills the process with SIGKILL, as a crash would, and waits for it to be gone.
    async fn kill(mut self) {
        self._child.start_kill().unwrap();
        self._child.wait().await.unwrap();
    }

    /// A2A's `GetTask` of task `id`: the task.
    async fn a2a_task(&self, id: &str) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
        let response = reqwest::Client::new()
            .post(self.url("/agent/assistant/a2a"))
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await
            .unwrap();
        let answer: Value = response.json().await.unwrap();
        let result = answer.get("result").unwrap_or_else(|| panic!("{answer}"));
        result.get("task").unwrap_or(result).clone()
    }

    /// `GET /agent/assistant/session/{id}`.
    async fn session(&self, id: &str) -> Value {
        let response = reqwest::get(self.url(&format!("/agent/assistant/session/{id}")))
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{}", self.stderr());
        response.json().await.unwrap()
    }

    /// `POST /agent/chat` on Genkit's flow wire: one turn; answers the agent's output.
    async fn chat(&self, line: &str, init: &Value) -> Value {
        let response = reqwest::Client::new()
            .post(self.url("/agent/chat"))
            .body(json!({"data": line, "init": init}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{}", self.stderr());
        let mut answer: Value = response.json().await.unwrap();
        answer["result"].take()
    }
}

/// A PostgreSQL database: `BIDI_POSTGRES_URL`, or a private server (kept alive by the first
/// value).
async fn postgres() -> (Option<PostgresServer>, String) {
    match std::env::var("BIDI_POSTGRES_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = PostgresServer::start().await.unwrap();
            let url = server.url().to_owned();
            (Some(server), url)
        }
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

/// The `data:` records of a streamed flow answer.
fn records(text: &str) -> Vec<Value> {
    text.split_terminator("\n\n")
        .map(|record| serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

/// The text of the `text_delta` events.
fn text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(name, _)| name == "text_delta")
        .map(|(_, data)| data["delta"].as_str().unwrap())
        .collect()
}

/// The `execute_complete` event, which must be the last.
fn complete(events: &[(String, Value)]) -> &Value {
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "execute_complete", "{events:?}");
    data
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

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(role, text)| ((*role).to_owned(), (*text).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_started_on_one_process_is_resumed_on_another() {
    let (_server, url) = postgres().await;
    let a = Serve::postgres(&url).await;
    let b = Serve::postgres(&url).await;

    // On A: the model calls the client's tool; the execution stops for its result.
    let started = a
        .execute(&json!({
            "input": {"role": "user", "content": "Book Oslo"},
            "context": {"tools": [{
                "name": "book", "description": "Books a trip", "parameters": {"type": "object"}
            }]}
        }))
        .await;
    assert_eq!(started.status().as_u16(), 200, "{}", a.stderr());
    let id = started.headers()["x-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let first = events(&started.text().await.unwrap());
    assert_eq!(
        (&first[0].1["type"], &first[0].1["sessionId"]),
        (&json!("session_start"), &json!(id))
    );
    let done = complete(&first);
    assert_eq!(done["status"], "awaiting_tool_execution", "{first:?}");
    assert_eq!(
        done["pendingToolCalls"],
        json!([{"id": "call-1", "name": "book", "arguments": {"request": "Book Oslo"}}])
    );

    // On B: the tool's result resumes it.
    let resumed = b
        .execute(&json!({
            "sessionId": id,
            "input": [{
                "toolCallId": "call-1", "toolName": "book", "content": "booked", "isError": false
            }]
        }))
        .await;
    assert_eq!(resumed.status().as_u16(), 200, "{}", b.stderr());
    assert_eq!(resumed.headers()["x-session-id"], id.as_str());
    let second = events(&resumed.text().await.unwrap());
    assert_eq!(text(&second), "Done: booked");
    let done = complete(&second);
    assert_eq!(done["status"], "completed", "{second:?}");
    assert_eq!(done["pendingToolCalls"], json!([]), "{done}");

    // A sees the whole conversation.
    let session = a.session(&id).await;
    assert_eq!(session["sessionId"], id.as_str());
    assert_eq!(session["status"], "completed");
    assert_eq!(session["pendingToolCalls"], json!([]), "{session}");
    assert_eq!(
        conversation(&session),
        pairs(&[
            ("user", "Book Oslo"),
            ("assistant", "Let me use book."),
            ("toolResult", "booked"),
            ("assistant", "Done: booked"),
        ])
    );
    assert_eq!(session["messages"][1]["content"][1]["id"], "call-1");

    // The chat agent on Genkit's flow wire: a turn on A, the next on B, another on A.
    let first = a.chat("hello", &json!({})).await;
    let chat_id = first["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(first["state"], json!({"heard": ["hello"]}));
    let streamed = reqwest::Client::new()
        .post(b.url("/agent/chat?stream=true"))
        .body(json!({"data": "again", "init": {"sessionId": chat_id}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status().as_u16(), 200, "{}", b.stderr());
    let records = records(&streamed.text().await.unwrap());
    let (result, chunks) = records.split_last().unwrap();
    let said: String = chunks
        .iter()
        .map(|record| record["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        said,
        "Message 2 of this session. You first said \"hello\", and last \"hello\"."
    );
    assert_eq!(result["result"]["sessionId"], chat_id.as_str());
    assert_eq!(
        result["result"]["state"],
        json!({"heard": ["hello", "again"]})
    );
    let third = a.chat("once more", &json!({"sessionId": chat_id})).await;
    assert_eq!(
        third["state"],
        json!({"heard": ["hello", "again", "once more"]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_runs_on_one_process_at_a_time() {
    let (_server, url) = postgres().await;
    let a = Serve::postgres(&url).await;
    let b = Serve::postgres(&url).await;

    // A runs a slow execution: once its first events are out, it holds the session's lease.
    let (id, mut head, mut slow) = a.slow_turn().await;

    // B refuses a message to the same session at once.
    let refused = b
        .execute(&json!({"sessionId": id, "input": {"content": "me too"}}))
        .await;
    assert_eq!(refused.status().as_u16(), 409, "{}", b.stderr());
    let answer: Value = refused.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "session_running");

    // A's execution completes as if nothing happened.
    while let Some(bytes) = slow.next().await {
        head.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
    }
    let slow = events(&head);
    assert_eq!(text(&slow), "You said: answer slowly");
    assert_eq!(complete(&slow)["status"], "completed");

    // The session holds exactly A's messages: B's refused one was never added, nothing lost.
    let session = b.session(&id).await;
    assert_eq!(session["status"], "completed");
    assert_eq!(
        conversation(&session),
        pairs(&[
            ("user", "hello"),
            ("assistant", "You said: hello"),
            ("user", "answer slowly"),
            ("assistant", "You said: answer slowly"),
        ])
    );

    // With A done, B runs the session.
    let next = b
        .execute(&json!({"sessionId": id, "input": {"content": "me too"}}))
        .await;
    assert_eq!(next.status().as_u16(), 200, "{}", b.stderr());
    let next = events(&next.text().await.unwrap());
    assert_eq!(text(&next), "You said: me too");
    assert_eq!(complete(&next)["status"], "completed");
    let session = a.session(&id).await;
    assert_eq!(
        session["messages"].as_array().unwrap().len(),
        6,
        "{session}"
    );
    assert_eq!(
        session["messages"][4],
        json!({"role": "user", "content": "me too"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_outlives_its_process_s_clients_across_processes() {
    let (_server, url) = postgres().await;
    let a = Serve::postgres(&url).await;
    let b = Serve::postgres(&url).await;

    // A turn detached on A (Genkit's wire) is aborted from B.
    let post = |serve: &Serve, path: &str, body: Value| {
        let request = reqwest::Client::new()
            .post(serve.url(path))
            .body(body.to_string());
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 200);
            let mut body: Value = response.json().await.unwrap();
            body["result"].take()
        }
    };
    let genkit = "/agent/assistant/genkit";
    let detached = post(
        &a,
        genkit,
        json!({"data": {"message": {"role": "user", "content": [{"text": "answer slowly"}]}, "detach": true}}),
    )
    .await;
    let snapshot = detached["snapshotId"].as_str().unwrap().to_owned();
    let lookup = json!({"data": {"snapshotId": snapshot}});
    let aborted = post(&b, &format!("{genkit}/abort"), lookup.clone()).await;
    assert_eq!(aborted["status"], "pending", "{}", b.stderr());
    let seen = post(&a, &format!("{genkit}/getSnapshot"), lookup.clone()).await;
    assert_eq!(seen["status"], "aborted", "A sees B's abort");
    // The turn on A ends as aborted, whatever it managed to say.
    let mut ended = Value::Null;
    for _ in 0..200 {
        ended = post(&b, &format!("{genkit}/getSnapshot"), lookup.clone()).await;
        if ended.get("state").is_some() && ended["updatedAt"] != seen["updatedAt"] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(ended["status"], "aborted", "{ended}");
    // It still wrote what it did.
    let said: Vec<&str> = ended["state"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["content"][0]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        said,
        ["answer slowly", "You said: answer slowly"],
        "{ended}"
    );

    // The AI SDK reconnects to B and reads the rest of the answer A streams.
    tests::node::client("vercel_reconnect.mjs", vec![a.url(""), b.url("")])
        .await
        .assert_passed(2);
}

/// A Genkit client's streamed turn on A, whose connection is lost at once, is read whole on B
/// with the turn's stream id: B follows it from the store's streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_genkit_stream_started_on_one_process_is_read_with_its_stream_id_on_another() {
    let (_server, url) = postgres().await;
    let a = Serve::postgres(&url).await;
    let b = Serve::postgres(&url).await;
    let genkit = "/agent/assistant/genkit";
    let stream = |serve: &Serve, id: Option<&str>, body: &Value| {
        let mut request = reqwest::Client::new()
            .post(serve.url(genkit))
            .header("accept", "text/event-stream")
            .body(body.to_string());
        if let Some(id) = id {
            request = request.header("x-genkit-stream-id", id);
        }
        request.send()
    };
    let turn = json!({
        "data": {"message": {"role": "user", "content": [{"text": "answer slowly"}]}},
        "init": {},
    });
    let started = stream(&a, None, &turn).await.unwrap();
    assert_eq!(started.status().as_u16(), 200, "{}", a.stderr());
    let id = started.headers()["x-genkit-stream-id"]
        .to_str()
        .unwrap()
        .to_owned();
    // A's client goes away while the model thinks; the turn runs on.
    drop(started);

    // Genkit's client reconnects with the id (and `{}` for a body, streamFlow without input).
    let followed = stream(&b, Some(&id), &json!({})).await.unwrap();
    assert_eq!(followed.status().as_u16(), 200, "{}", b.stderr());
    assert_eq!(followed.headers()["x-genkit-stream-id"], id.as_str());
    let records = records(&followed.text().await.unwrap());
    let said: String = records
        .iter()
        .filter_map(|record| record["message"]["modelChunk"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(said, "You said: answer slowly", "{records:?}");
    let result = &records.last().unwrap()["result"];
    assert_eq!(result["finishReason"], "stop", "{records:?}");
    assert_eq!(
        result["snapshotId"],
        id.as_str(),
        "the stream id is the turn's snapshot"
    );

    // A stream neither process knows: 204, Genkit's `NOT_FOUND: Stream not found.`.
    let unknown = stream(&b, Some("no-such-stream"), &json!({}))
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 204);
}

/// The words of a line of shell: bare words and single-quoted strings.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            ' ' if !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(!quoted, "an unclosed quote: {line}");
    words.extend(word);
    words
}

/// A `curl` command the example prints: `curl -s[N] URL [-d BODY]`.
#[derive(Debug)]
struct Curl {
    url: String,
    data: Option<String>,
}

impl Curl {
    fn parse(line: &str) -> Self {
        let words = shell_words(line);
        let mut words = words.iter().map(String::as_str);
        assert_eq!(words.next(), Some("curl"), "{line}");
        let (mut url, mut data) = (None, None);
        while let Some(word) = words.next() {
            match word {
                "-s" | "-sN" => {}
                "-d" => data = Some(words.next().unwrap().to_owned()),
                url_word if url_word.starts_with("http://") && url.is_none() => {
                    url = Some(url_word.to_owned());
                }
                other => panic!("an option these tests do not know: {other} in {line}"),
            }
        }
        Self {
            url: url.unwrap_or_else(|| panic!("no URL: {line}")),
            data,
        }
    }

    /// Sends what curl sends (`-d` POSTs the body as a form), answers the status and body.
    async fn run(&self) -> (u16, String) {
        let client = reqwest::Client::new();
        let request = match &self.data {
            Some(data) => client
                .post(&self.url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(data.clone()),
            None => client.get(&self.url),
        };
        let response = request.header("accept", "*/*").send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_curl_commands_work_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.sqlite3");
    let mut serve = Serve::start(&["--addr", "127.0.0.1:0", "--db", db.to_str().unwrap()]).await;
    let base = serve.url("/");
    assert!(db.exists(), "the sessions' file {}", db.display());

    // The banner after the first line, up to its WebSocket line.
    let mut commands = Vec::new();
    loop {
        let line = serve.stdout.next_line().await.unwrap().unwrap();
        if let Some(ws) = line.strip_prefix("# full duplex: a WebSocket at ") {
            assert!(
                ws.starts_with(&format!("ws://{}/bidi-flow/echo,", serve.addr)),
                "{line}"
            );
            break;
        }
        if line.starts_with("curl ") {
            let curl = Curl::parse(&line);
            assert!(curl.url.starts_with(&base), "{line} is not for {base}");
            commands.push((line, curl));
        } else {
            assert!(line.is_empty() || line.starts_with("# "), "{line}");
        }
    }
    let [
        actions,
        echo,
        echo_stream,
        chat,
        assistant,
        results,
        session,
    ] = <[_; 7]>::try_from(commands).unwrap();

    let (status, body) = actions.1.run().await;
    assert_eq!(status, 200, "{}: {body}", actions.0);
    let listed: Value = serde_json::from_str(&body).unwrap();
    let mut keys: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|action| action["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["/agent/assistant", "/agent/chat", "/bidi-flow/echo"]);

    let (status, body) = echo.1.run().await;
    assert_eq!(status, 200, "{}: {body}", echo.0);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"result": 1})
    );

    let (status, body) = echo_stream.1.run().await;
    assert_eq!(status, 200, "{}: {body}", echo_stream.0);
    assert_eq!(
        records(&body),
        [
            json!({"message": "> hello"}),
            json!({"message": "> there"}),
            json!({"result": 1}),
        ]
    );

    let (status, body) = chat.1.run().await;
    assert_eq!(status, 200, "{}: {body}", chat.0);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["result"]["sessionId"], "demo");
    assert_eq!(answer["result"]["state"], json!({"heard": ["hi"]}));

    let (status, body) = assistant.1.run().await;
    assert_eq!(status, 200, "{}: {body}", assistant.0);
    let first = events(&body);
    let done = complete(&first);
    assert_eq!(done["status"], "awaiting_tool_execution");
    // The call the next command answers.
    assert_eq!(done["pendingToolCalls"][0]["id"], "call-1");
    assert_eq!(done["pendingToolCalls"][0]["name"], "book");

    let (status, body) = results.1.run().await;
    assert_eq!(status, 200, "{}: {body}", results.0);
    let second = events(&body);
    assert_eq!(text(&second), "Done: booked");
    assert_eq!(complete(&second)["status"], "completed");

    let (status, body) = session.1.run().await;
    assert_eq!(status, 200, "{}: {body}", session.0);
    let trip: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(trip["sessionId"], "trip");
    assert_eq!(trip["status"], "completed");
    assert_eq!(
        conversation(&trip),
        pairs(&[
            ("user", "Book Oslo"),
            ("assistant", "Let me use book."),
            ("toolResult", "booked"),
            ("assistant", "Done: booked"),
        ])
    );
    assert!(serve.stderr().contains("model: demo"), "{}", serve.stderr());
}

// ---------------------------------------------------------------------------------------------
// Stores written by an earlier version: they open and their sessions go on.

/// The fixtures of the stored format: sessions `serve` 0.1.0 wrote, in SQLite and PostgreSQL.
fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

const PSQL: &str = "psql is needed: Debian's `postgresql` package installs it with the server";

const BOOK: &str =
    r#"{"name": "book", "description": "Books a trip", "parameters": {"type": "object"}}"#;

impl Serve {
    /// Stops `serve` as Ctrl-C does, so that its store is closed (SQLite's log folded in).
    async fn stop(mut self) {
        let pid = self._child.id().unwrap().to_string();
        let status = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        let exit = self._child.wait().await.unwrap();
        assert!(exit.success(), "{exit}: {}", self.stderr());
    }

    /// Writes the fixtures' sessions: `trip` waits for its `book` result, `talk` has two turns,
    /// `genkit` is the chat agent's (its own state), `page` is a UI message stream chat.
    async fn write_sessions(&self) {
        let tools: Value = serde_json::from_str(BOOK).unwrap();
        let trip = json!({"sessionId": "trip", "input": {"role": "user", "content": "Book Oslo"},
                          "context": {"tools": [tools]}});
        let answer = self.execute(&trip).await.text().await.unwrap();
        assert_eq!(
            complete(&events(&answer))["status"],
            "awaiting_tool_execution"
        );
        for (n, line) in ["hello", "and again"].into_iter().enumerate() {
            let mut talk = json!({"sessionId": "talk", "input": {"role": "user", "content": line}});
            if n == 0 {
                talk["context"] = json!({});
            }
            let answer = self.execute(&talk).await.text().await.unwrap();
            assert_eq!(
                complete(&events(&answer))["status"],
                "completed",
                "{answer}"
            );
        }
        self.chat("hello", &json!({"sessionId": "genkit"})).await;
        self.chat("again", &json!({"sessionId": "genkit"})).await;
        let page = json!({"id": "page", "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]}]});
        let answer = reqwest::Client::new()
            .post(self.url("/agent/assistant/chat"))
            .body(page.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200, "{}", self.stderr());
        answer.text().await.unwrap();
    }

    /// Goes on with the sessions of [`Serve::write_sessions`].
    async fn resume_sessions(&self) {
        let results = json!({"sessionId": "trip", "input": [{
            "toolCallId": "call-1", "toolName": "book", "content": "booked", "isError": false}]});
        let answer = self.execute(&results).await;
        assert_eq!(answer.status().as_u16(), 200, "{}", self.stderr());
        assert_eq!(text(&events(&answer.text().await.unwrap())), "Done: booked");
        assert_eq!(
            conversation(&self.session("trip").await),
            pairs(&[
                ("user", "Book Oslo"),
                ("assistant", "Let me use book."),
                ("toolResult", "booked"),
                ("assistant", "Done: booked"),
            ])
        );

        let talk = json!({"sessionId": "talk", "input": {"role": "user", "content": "third"}});
        let answer = self.execute(&talk).await;
        assert_eq!(answer.status().as_u16(), 200, "{}", self.stderr());
        answer.text().await.unwrap();
        let said: Vec<String> = conversation(&self.session("talk").await)
            .into_iter()
            .filter(|(role, _)| role == "user")
            .map(|(_, text)| text)
            .collect();
        assert_eq!(said, ["hello", "and again", "third"]);

        let third = self
            .chat("once more", &json!({"sessionId": "genkit"}))
            .await;
        assert_eq!(
            third["state"],
            json!({"heard": ["hello", "again", "once more"]})
        );

        let page: Value = reqwest::get(self.url("/agent/assistant/chat/page"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(page[0]["parts"][0]["text"], "hello there", "{page}");
        assert_eq!(page[1]["role"], "assistant", "{page}");
    }
}

/// The rows of `bidi_snapshots` at `url`, as SQL that makes them again (the table as 0.1.0
/// made it, then the rows), through `psql`.
async fn dump(url: &str) -> String {
    let query = "SELECT session_id, version, state::text, created_at::text, updated_at::text \
                 FROM bidi_snapshots ORDER BY session_id, version";
    let output = Command::new("psql")
        .args([
            url, "-X", "-A", "-t", "-F", "\u{1f}", "-R", "\u{1e}", "-c", query,
        ])
        .output()
        .await
        .expect(PSQL);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = String::from_utf8(output.stdout).unwrap();
    let mut sql = String::from(
        "-- Sessions written by the `serve` example of bidi 0.1.0 (PostgresStore), made by\n\
         -- `cargo test -p examples --test serve -- --ignored write_the_stored_format_fixtures`.\n\
         CREATE TABLE IF NOT EXISTS bidi_snapshots (\n    session_id TEXT NOT NULL,\n    \
         version    BIGINT NOT NULL,\n    state      JSONB NOT NULL,\n    \
         created_at TIMESTAMPTZ NOT NULL,\n    updated_at TIMESTAMPTZ NOT NULL,\n    \
         PRIMARY KEY (session_id, version)\n);\n",
    );
    for row in rows.trim_end_matches(['\n', '\u{1e}']).split('\u{1e}') {
        let fields: Vec<&str> = row.trim_start_matches('\n').split('\u{1f}').collect();
        let [id, version, state, created, updated] = fields[..] else {
            panic!("a row of {} fields: {row:?}", fields.len());
        };
        assert!(!state.contains("$bidi$"), "{state}");
        sql.push_str(&format!(
            "INSERT INTO bidi_snapshots VALUES ($bidi${id}$bidi$, {version}, $bidi${state}$bidi$, \
             '{created}', '{updated}');\n"
        ));
    }
    sql
}

/// Rewrites the fixtures with this version of `serve`: run it only when the stored format's
/// fixtures must be made again (they pin what earlier versions wrote; a new format must still
/// read them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the committed fixtures"]
async fn write_the_stored_format_fixtures() {
    let dir = fixtures();
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("sessions-0.1.0.sqlite3");
    let _ = std::fs::remove_file(&db);
    let serve = Serve::start(&["--addr", "127.0.0.1:0", "--db", db.to_str().unwrap()]).await;
    serve.write_sessions().await;
    serve.stop().await;
    assert!(!dir.join("sessions-0.1.0.sqlite3-wal").exists());

    let server = PostgresServer::start().await.unwrap();
    let serve = Serve::postgres(server.url()).await;
    serve.write_sessions().await;
    serve.stop().await;
    let sql = dump(server.url()).await;
    std::fs::write(dir.join("sessions-0.1.0.postgres.sql"), sql).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_of_bidi_0_1_opens_and_its_sessions_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.sqlite3");
    std::fs::copy(fixtures().join("sessions-0.1.0.sqlite3"), &db).unwrap();
    let serve = Serve::start(&["--addr", "127.0.0.1:0", "--db", db.to_str().unwrap()]).await;
    serve.resume_sessions().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_of_bidi_0_1_opens_and_its_sessions_go_on() {
    let server = PostgresServer::start().await.unwrap();
    let fixture = fixtures().join("sessions-0.1.0.postgres.sql");
    let loaded = Command::new("psql")
        .args([server.url(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&fixture)
        .output()
        .await
        .expect(PSQL);
    assert!(
        loaded.status.success(),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    let serve = Serve::postgres(server.url()).await;
    serve.resume_sessions().await;
}
