//! Hostile and careless clients: peers that stop reading, pages on other origins, proxies
//! that buffer. Every loop here is bounded in count and time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bidi_agent::{Agent, Scope};
use bidi_flow::Registry;
use bidi_http::{Cors, Server};
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_session::{MemoryStore, SessionStore};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::support::{Probe, registry, start, url};

/// How long a test waits for what must happen before it fails instead of hanging.
const BOUND: Duration = Duration::from_secs(30);

/// A server with an idle timeout of 300 ms, its probe, and how its connections ended.
async fn stalling() -> (Probe, mpsc::UnboundedReceiver<String>, SocketAddr) {
    let (ended, how) = mpsc::unbounded_channel();
    let probe = Probe {
        ended: Some(ended),
        ..Probe::default()
    };
    let server = Server::new(registry(&probe)).idle_timeout(Duration::from_millis(300));
    (probe, how, start(server).await)
}

/// A streaming request whose client never reads a byte of the answer: the socket's buffers
/// fill, and the server's write waits on it.
async fn never_reading(addr: SocketAddr) -> TcpStream {
    let body = r#"{"data":null,"init":65536}"#;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /bidi-flow/forever?stream=true HTTP/1.1\r\nhost: {addr}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cancelled_like_an_idle_one() {
    let (probe, mut how, addr) = stalling().await;
    let socket = never_reading(addr).await;
    let ended = tokio::time::timeout(BOUND, how.recv())
        .await
        .expect("a stalled writer kept its connection running");
    assert!(ended.unwrap().contains("nothing moved"));
    assert!(probe.sent() > 0);
    drop(socket);
}

/// The tasks alive on this test's runtime.
fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_has_its_connection_closed() {
    let (_probe, mut how, addr) = stalling().await;
    let serving = alive_tasks();
    let socket = never_reading(addr).await;
    let ended = tokio::time::timeout(BOUND, how.recv()).await.unwrap();
    assert!(ended.unwrap().contains("nothing moved"));
    // The flow is over, and the connection's task too, with what it buffered for the client,
    // though the client still holds its socket and reads nothing.
    let closed = tokio::time::timeout(BOUND, async {
        while alive_tasks() > serving {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the server kept the connection of a client that reads nothing"
    );
    drop(socket);
}

async fn preflight(addr: std::net::SocketAddr, origin: &str) -> reqwest::Response {
    reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, url(addr, "/agent/notes/execute"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,authorization",
        )
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_allowed_origins_pass_preflight_and_read_the_session_header() {
    let cors = Cors::origins(["http://localhost:3000"]).unwrap();
    let addr = start(Server::new(registry(&Probe::default())).cors(cors)).await;

    let allowed = preflight(addr, "http://localhost:3000").await;
    assert!(allowed.status().is_success(), "{}", allowed.status());
    let headers = allowed.headers();
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://localhost:3000"
    );
    let methods = headers["access-control-allow-methods"].to_str().unwrap();
    assert!(methods.contains("POST"), "{methods}");
    let asked = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        asked.contains("content-type") && asked.contains("authorization"),
        "{asked}"
    );

    let other = preflight(addr, "http://evil.example").await;
    assert!(other.headers().get("access-control-allow-origin").is_none());

    // The answer itself: allowed, with the headers a page must read exposed.
    let response = reqwest::Client::new()
        .post(url(addr, "/agent/notes"))
        .header("origin", "http://localhost:3000")
        .body(r#"{"data":"hi","init":{"sessionId":"s"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "http://localhost:3000"
    );
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("x-session-id"), "{exposed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cors_a_preflight_says_how_to_allow_it() {
    let addr = start(Server::new(registry(&Probe::default()))).await;
    let refused = preflight(addr, "http://localhost:3000").await;
    assert_eq!(refused.status(), 405);
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    let answer: Value = refused.json().await.unwrap();
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("CORS"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_answers_ask_proxies_not_to_buffer() {
    let addr = start(Server::new(registry(&Probe::default()))).await;
    let response = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/echo?stream=true"))
        .body(r#"{"data":"a b","init":""}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_data_runs_the_flow_with_no_input() {
    let addr = start(Server::new(registry(&Probe::default()))).await;
    let answer: Value = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/whoami"))
        .body("{}")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer, serde_json::json!({"result": "anonymous"}));
}

/// Reads what the server sends until it closes the connection, within [`BOUND`], as text.
async fn until_closed(socket: &mut TcpStream) -> String {
    String::from_utf8_lossy(&bytes_until_closed(socket).await).into_owned()
}

/// Reads what the server sends until it closes the connection, within [`BOUND`].
async fn bytes_until_closed(socket: &mut TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt as _;
    let mut seen = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buf = [0; 4096];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server kept the connection open");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_that_never_ends_is_cut_off() {
    let server =
        Server::new(registry(&Probe::default())).header_timeout(Duration::from_millis(300));
    let addr = start(server).await;
    // Slowloris: a head begun and never finished.
    let mut sockets = Vec::new();
    for _ in 0..20 {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(b"POST /bidi-flow/echo HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        sockets.push(socket);
    }
    for socket in &mut sockets {
        until_closed(socket).await;
    }
    // A silent connection is closed the same way.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    until_closed(&mut silent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed() {
    let server =
        Server::new(registry(&Probe::default())).header_timeout(Duration::from_millis(300));
    let addr = start(server).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let body = r#"{"data":"a","init":""}"#;
    let request = format!(
        "POST /bidi-flow/echo HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    // The answer comes, then the connection idles until the server closes it.
    let seen = until_closed(&mut socket).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.contains(r#"{"result":1}"#), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_is_answered_408() {
    let server = Server::new(registry(&Probe::default())).body_timeout(Duration::from_millis(300));
    let addr = start(server).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(
            b"POST /bidi-flow/echo HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
              content-length: 100\r\n\r\n{\"data\":",
        )
        .await
        .unwrap();
    let seen = until_closed(&mut socket).await;
    assert!(seen.starts_with("HTTP/1.1 408"), "{seen}");
    assert!(seen.contains("request_timeout"), "{seen}");
}

/// One store, two agents: `notes` (a list of lines) and `travel` (an LLM agent).
async fn two_agents_on_one_store() -> (std::net::SocketAddr, Arc<dyn SessionStore>) {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let registry = Registry::new();
    registry
        .register(
            Agent::builder("notes")
                .store(Arc::clone(&store))
                .build(crate::support::notes)
                .into_flow(),
        )
        .unwrap();
    let model = ScriptedModel::new([Scripted::new().text("Hi!")]);
    let travel = LlmAgent::builder("travel", model)
        .store(Arc::clone(&store))
        .build();
    (start(Server::new(registry).agent(&travel)).await, store)
}

async fn post(addr: std::net::SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url(addr, path))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_sharing_a_store_never_take_each_others_sessions() {
    let (addr, _) = two_agents_on_one_store().await;
    let note = |line: &str| json!({"data": line, "init": {"sessionId": "shared"}});
    assert_eq!(post(addr, "/agent/notes", note("first")).await.0, 200);

    // The same id names no session of `travel`: it needs a context to make its own.
    let (status, answer) = post(
        addr,
        "/agent/travel/execute",
        json!({"sessionId": "shared", "input": {"content": "hi"}}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["details"]["code"], "context_required");
    let (status, answer) = post(
        addr,
        "/agent/travel/execute",
        json!({"sessionId": "shared", "input": {"content": "hi"}, "context": {}}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // `notes` still has its own, untouched.
    let (status, answer) = post(addr, "/agent/notes", note("second")).await;
    assert_eq!(
        (status, &answer["result"]["state"]),
        (200, &json!(["first", "second"]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_state_the_agent_cannot_read_is_409_and_stays_as_it_was() {
    let (addr, store) = two_agents_on_one_store().await;
    let notes = Scope::new("").sessions("notes", Arc::clone(&store));
    notes
        .append(
            "old",
            bidi_session::Append::create(json!({"from": "an older version"})),
        )
        .await
        .unwrap();
    let (status, answer) = post(
        addr,
        "/agent/notes",
        json!({"data": "hi", "init": {"sessionId": "old"}}),
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["details"]["code"], "session_incompatible");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(!message.contains("serializ"), "{message}");
    let kept = notes.load("old").await.unwrap().unwrap();
    assert_eq!(kept.state, json!({"from": "an older version"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ids_are_capped_and_never_echoed_long() {
    let (addr, _) = two_agents_on_one_store().await;
    let long = "x".repeat(900_000);
    let response = reqwest::Client::new()
        .post(url(addr, "/agent/travel/execute"))
        .body(json!({"sessionId": long, "input": {"content": "hi"}, "context": {}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(response.headers().get("x-session-id").is_none());
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "invalid_init");
    assert!(answer.to_string().len() < 2_000, "the answer quotes the id");

    // A line break in an id would forge log lines and break headers.
    let (status, answer) = post(
        addr,
        "/agent/notes",
        json!({"data": "hi", "init": {"sessionId": "a\nb"}}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["details"]["code"], "invalid_init");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_init_field_is_refused_not_ignored() {
    let (addr, _) = two_agents_on_one_store().await;
    let (status, answer) = post(
        addr,
        "/agent/notes",
        json!({"data": "hi", "init": {"threadId": "s-1"}}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["details"]["code"], "invalid_init");
    assert_eq!(answer["error"]["details"]["path"], "/threadId");
    // A snapshot id is known, and one that names nothing is not found, never a fresh session.
    let (status, answer) = post(
        addr,
        "/agent/notes",
        json!({"data": "hi", "init": {"snapshotId": "s-1"}}),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["message"], "no snapshot `s-1`");
}

/// A raw WebSocket on `/bidi-flow/echo`, upgraded by hand so that it can break the protocol.
async fn raw_socket(addr: std::net::SocketAddr) -> TcpStream {
    use tokio::io::AsyncReadExt as _;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(
            b"GET /bidi-flow/echo HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n\
              connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
              sec-websocket-version: 13\r\n\r\n",
        )
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        socket.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    socket
}

/// The close code of the first close frame the server sends, within [`BOUND`].
async fn close_code(socket: &mut TcpStream) -> u16 {
    let seen = bytes_until_closed(socket).await;
    // The server's frames are unmasked: opcode byte, length byte, payload.
    let mut at = 0;
    while at + 1 < seen.len() {
        let (opcode, len) = (seen[at] & 0x0f, usize::from(seen[at + 1] & 0x7f));
        if opcode == 0x8 {
            return u16::from_be_bytes([seen[at + 2], seen[at + 3]]);
        }
        at += 2 + len;
    }
    panic!("no close frame in {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_protocol_violations_close_with_their_codes() {
    let addr = start(Server::new(registry(&Probe::default()))).await;
    // A text frame that is not UTF-8 (masked with a zero key): 1007.
    let mut socket = raw_socket(addr).await;
    socket
        .write_all(&[0x81, 0x82, 0, 0, 0, 0, 0xff, 0xfe])
        .await
        .unwrap();
    assert_eq!(close_code(&mut socket).await, 1007);
    // An unmasked frame from a client: 1002.
    let mut socket = raw_socket(addr).await;
    socket.write_all(&[0x81, 0x02, b'h', b'i']).await.unwrap();
    assert_eq!(close_code(&mut socket).await, 1002);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_not_utf8_is_refused_with_the_json_error_body() {
    let addr = start(Server::new(registry(&Probe::default()))).await;
    for path in [
        "/bidi-flow/%FF",
        "/agent/%C3%28/execute",
        "/agent/x/session/%FF",
    ] {
        let method = if path.contains("session") {
            "GET"
        } else {
            "POST"
        };
        let response = reqwest::Client::new()
            .request(method.parse().unwrap(), url(addr, path))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{path}"
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(
            answer["error"]["details"]["code"], "malformed_frame",
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_lists_and_deletes_its_own_sessions() {
    let (addr, _) = two_agents_on_one_store().await;
    for id in ["b", "a"] {
        let (status, answer) = post(
            addr,
            "/agent/travel/execute",
            json!({"sessionId": id, "input": {"content": "hi"}, "context": {}}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
    }
    let list = || async {
        reqwest::get(url(addr, "/agent/travel/sessions"))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    assert_eq!(list().await, json!({"sessions": ["a", "b"]}));
    let delete = |id: &'static str| async move {
        reqwest::Client::new()
            .delete(url(addr, &format!("/agent/travel/session/{id}")))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(delete("a").await, 204);
    assert_eq!(delete("a").await, 404);
    assert_eq!(list().await, json!({"sessions": ["b"]}));
}
