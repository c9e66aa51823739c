//! The MCP endpoint (an `McpServer` served by a `bidi_http::Server`) over JSON-RPC on real
//! sockets: sessions bound to the identity that opened them, the session cap, the refusals in
//! JSON-RPC's terms, a string output answered as its text, progress with its total, and a flow
//! registered later told to the sessions open, an agent's sessions as its caller's resources
//! (read and subscribed), and an agent's call as a task whose approvals are its input requests.

#![allow(clippy::unwrap_used)]

#[allow(dead_code, reason = "the helpers of every HTTP test")]
#[path = "../../bidi-http/tests/http/support.rs"]
mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Progress, Registry};
use bidi_http::Server;
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
#[cfg(feature = "agents")]
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_mcp::McpServer;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::support::{Probe, alice_and_bob, registry, start, url};

/// The flow `gate`: says it started, then answers "opened" once the test opens it; a cancel
/// ends it with the cancel's cause.
#[derive(Clone)]
struct Gate {
    started: mpsc::UnboundedSender<()>,
    open: Arc<Notify>,
}

/// The test flows (`whoami` answers its caller's identity, a string) and `gate`.
fn flows(gate: &Gate) -> Registry {
    let registry = registry(&Probe::default());
    let gate = gate.clone();
    registry
        .register(BidiFlow::new(
            "gate",
            move |ctx: ActionContext, _init: (), _inbound: Inbound<()>, _out: Outbound<()>| {
                let gate = gate.clone();
                async move {
                    let _ = gate.started.send(());
                    tokio::select! {
                        () = gate.open.notified() => Ok::<_, BoxError>("opened".to_owned()),
                        cause = ctx.cancelled() => Err(cause.to_string().into()),
                    }
                }
            },
        ))
        .unwrap();
    registry
}

/// A request of one MCP client, as `who`, on `session` (if any).
fn request(
    addr: SocketAddr,
    method: reqwest::Method,
    who: &str,
    session: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = reqwest::Client::new()
        .request(method, url(addr, "/mcp"))
        .header("authorization", format!("Bearer {who}"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    match session {
        Some(id) => request.header("mcp-session-id", id),
        None => request,
    }
}

/// POSTs `body` (JSON text) as `who` on `session`.
async fn post(addr: SocketAddr, who: &str, session: Option<&str>, body: &str) -> reqwest::Response {
    request(addr, reqwest::Method::POST, who, session)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// The JSON-RPC messages of a response: its body when it is JSON, its events' data when it
/// is an SSE stream (read to its end).
async fn messages(response: reqwest::Response) -> Vec<Value> {
    let text = response.text().await.unwrap();
    if let Ok(message) = serde_json::from_str(&text) {
        return vec![message];
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

/// The answer to the request `id` among a response's messages.
async fn answer(response: reqwest::Response, id: u64) -> Value {
    let all = messages(response).await;
    all.iter()
        .find(|message| message["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no answer to {id} in {all:?}"))
}

/// Opens a session as `who`: its id.
async fn initialize(addr: SocketAddr, who: &str) -> String {
    let response = post(addr, who, None, &initialize_body()).await;
    assert_eq!(response.status().as_u16(), 200);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answered = answer(response, 0).await;
    assert!(
        answered["result"]["capabilities"]["tools"].is_object(),
        "{answered}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = post(addr, who, Some(&id), &initialized.to_string()).await;
    assert_eq!(response.status().as_u16(), 202);
    id
}

fn initialize_body() -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}
        }
    })
    .to_string()
}

/// A JSON-RPC request's text.
fn call(id: u64, method: &str, params: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// Asserts `response` is the 404 of a session the server does not know.
async fn not_found(response: reqwest::Response) -> Value {
    assert_eq!(response.status().as_u16(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32001, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_unknown_to_another_identity() {
    let (started, mut running) = mpsc::unbounded_channel();
    let gate = Gate {
        started,
        open: Arc::new(Notify::new()),
    };
    let registry = flows(&gate);
    let addr = start(alice_and_bob(
        Server::new(registry.clone()).protocol(McpServer::new(registry)),
    ))
    .await;
    let alice = initialize(addr, "alice").await;

    // Alice's call runs as alice, its string output as its text.
    let whoami = call(1, "tools/call", &json!({"name": "whoami", "arguments": {}}));
    let answered = answer(post(addr, "alice", Some(&alice), &whoami).await, 1).await;
    assert_eq!(
        answered["result"]["content"],
        json!([{"type": "text", "text": "alice"}]),
        "{answered}"
    );

    // A call of alice's under way.
    let gated = call(2, "tools/call", &json!({"name": "gate", "arguments": {}}));
    let session = alice.clone();
    let pending =
        tokio::spawn(
            async move { answer(post(addr, "alice", Some(&session), &gated).await, 2).await },
        );
    running.recv().await.unwrap();

    // Bob, naming alice's session: not served, his cancel of her call and his DELETE refused,
    // each as for a session the server does not know.
    let unknown = not_found(post(addr, "bob", Some("no-such-session"), &whoami).await).await;
    let listed = call(3, "tools/list", &json!({}));
    assert_eq!(
        not_found(post(addr, "bob", Some(&alice), &listed).await).await,
        unknown
    );
    assert_eq!(
        not_found(post(addr, "bob", Some(&alice), &whoami).await).await,
        unknown
    );
    let cancel = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "bob"}
    });
    let cancelled = post(addr, "bob", Some(&alice), &cancel.to_string()).await;
    assert_eq!(not_found(cancelled).await, unknown);
    let stream = request(addr, reqwest::Method::GET, "bob", Some(&alice))
        .send()
        .await
        .unwrap();
    assert_eq!(not_found(stream).await, unknown);
    let deleted = request(addr, reqwest::Method::DELETE, "bob", Some(&alice))
        .send()
        .await
        .unwrap();
    assert_eq!(not_found(deleted).await, unknown);

    // Alice's call was not cancelled, and her session still serves her.
    gate.open.notify_one();
    let answered = pending.await.unwrap();
    assert_eq!(
        answered["result"]["content"],
        json!([{"type": "text", "text": "opened"}]),
        "{answered}"
    );
    let answered = answer(post(addr, "alice", Some(&alice), &listed).await, 3).await;
    assert!(answered["result"]["tools"].is_array(), "{answered}");

    // Her own DELETE ends it.
    let deleted = request(addr, reqwest::Method::DELETE, "alice", Some(&alice))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    not_found(post(addr, "alice", Some(&alice), &listed).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_past_the_cap_are_refused_until_one_ends() {
    let registry = registry(&Probe::default());
    let mcp = McpServer::new(registry.clone()).max_sessions(2);
    let addr = start(alice_and_bob(Server::new(registry).protocol(mcp))).await;
    let first = initialize(addr, "alice").await;
    let _second = initialize(addr, "bob").await;

    let refused = post(addr, "alice", None, &initialize_body()).await;
    assert_eq!(refused.status().as_u16(), 503);
    assert!(refused.headers().get("mcp-session-id").is_none());
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry > 0);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], 0);
    assert_eq!(body["error"]["code"], -32000, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("as many MCP sessions open as it allows (2)"),
        "{message}"
    );

    let deleted = request(addr, reqwest::Method::DELETE, "alice", Some(&first))
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let third = initialize(addr, "alice").await;
    let listed = call(1, "tools/list", &json!({}));
    let answered = answer(post(addr, "alice", Some(&third), &listed).await, 1).await;
    assert!(answered["result"]["tools"].is_array(), "{answered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_json_rpc_are_json_rpc_errors() {
    let registry = registry(&Probe::default());
    let addr = start(alice_and_bob(
        Server::new(registry.clone()).protocol(McpServer::new(registry)),
    ))
    .await;
    for (body, code) in [
        (r#"{"hello": "world"}"#, -32600),
        (r#"{"jsonrpc": "2.0", "id": 7}"#, -32600),
        ("[1, 2]", -32600),
        ("{not json", -32700),
    ] {
        let response = post(addr, "alice", None, body).await;
        assert_eq!(response.status().as_u16(), 400, "{body}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{body}"
        );
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["jsonrpc"], "2.0", "{body}");
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
    // On a session too.
    let session = initialize(addr, "alice").await;
    let response = post(addr, "alice", Some(&session), r#"{"hello": "world"}"#).await;
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_of_the_wrong_type_are_invalid_params_and_other_methods_are_not_found() {
    let registry = registry(&Probe::default());
    let addr = start(alice_and_bob(
        Server::new(registry.clone()).protocol(McpServer::new(registry)),
    ))
    .await;
    let session = initialize(addr, "alice").await;
    let wrong = [
        (
            json!({"name": "whoami", "arguments": "three"}),
            "/arguments",
        ),
        (json!({"name": 3, "arguments": {}}), "/name"),
    ];
    for (id, (params, path)) in (1..).zip(wrong) {
        let body = call(id, "tools/call", &params);
        let answered = answer(post(addr, "alice", Some(&session), &body).await, id).await;
        assert_eq!(answered["error"]["code"], -32602, "{params}: {answered}");
        let message = answered["error"]["message"].as_str().unwrap();
        assert!(message.contains(path), "{message}");
        assert_eq!(answered["error"]["data"]["path"], path, "{answered}");
    }
    let served_elsewhere = [
        ("prompts/list", json!({})),
        (
            "completion/complete",
            json!({
                "ref": {"type": "ref/prompt", "name": "p"},
                "argument": {"name": "a", "value": "b"}
            }),
        ),
        ("no/such/method", json!({})),
    ];
    for (id, (method, params)) in (10..).zip(served_elsewhere) {
        let body = call(id, method, &params);
        let answered = answer(post(addr, "alice", Some(&session), &body).await, id).await;
        assert_eq!(answered["error"]["code"], -32601, "{method}: {answered}");
        let message = answered["error"]["message"].as_str().unwrap();
        assert!(message.contains(method), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends_and_gives_its_place_back() {
    let registry = registry(&Probe::default());
    let mcp = McpServer::new(registry.clone())
        .max_sessions(1)
        .session_idle_timeout(std::time::Duration::from_millis(300));
    let addr = start(alice_and_bob(Server::new(registry).protocol(mcp))).await;
    // Opened, and left idle from then on (however long the test takes to go on).
    let opened = post(addr, "alice", None, &initialize_body()).await;
    assert_eq!(opened.status().as_u16(), 200);
    let idle = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    answer(opened, 0).await;
    // Its place comes back once it ended idle: wait for that, however loaded the machine.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let response = post(addr, "bob", None, &initialize_body()).await;
        if response.status().as_u16() == 200 {
            break;
        }
        assert_eq!(response.status().as_u16(), 503);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle session never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let listed = call(1, "tools/list", &json!({}));
    not_found(post(addr, "alice", Some(&idle), &listed).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_that_knows_its_total_reports_it_with_its_progress() {
    let registry = registry(&Probe::default());
    registry
        .register(BidiFlow::new(
            "index",
            |_: ActionContext, _: (), _: Inbound<Value>, out: Outbound<Value>| async move {
                out.send(serde_json::to_value(
                    Progress::new(1.0).total(2.0).message("a.rs"),
                )?)
                .await?;
                out.send(json!("a chunk of no progress")).await?;
                out.send(serde_json::to_value(Progress::new(3.0).total(3.0))?)
                    .await?;
                Ok::<_, BoxError>(3)
            },
        ))
        .unwrap();
    let addr = start(alice_and_bob(
        Server::new(registry.clone()).protocol(McpServer::new(registry)),
    ))
    .await;
    let session = initialize(addr, "alice").await;
    let params = json!({"name": "index", "arguments": {}, "_meta": {"progressToken": "p"}});
    let response = post(
        addr,
        "alice",
        Some(&session),
        &call(1, "tools/call", &params),
    )
    .await;
    let notified: Vec<Value> = messages(response)
        .await
        .into_iter()
        .filter(|message| message["method"] == "notifications/progress")
        .map(|message| message["params"].clone())
        .collect();
    assert_eq!(
        notified,
        [
            json!({"progressToken": "p", "progress": 1.0, "total": 2.0, "message": "a.rs"}),
            json!({"progressToken": "p", "progress": 2.0, "message": "\"a chunk of no progress\""}),
            json!({"progressToken": "p", "progress": 3.0, "total": 3.0}),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_registered_later_is_told_to_the_sessions_open() {
    let registry = registry(&Probe::default());
    let addr = start(alice_and_bob(
        Server::new(registry.clone()).protocol(McpServer::new(registry.clone())),
    ))
    .await;
    let session = initialize(addr, "alice").await;
    // The session's own stream, where what answers no request goes.
    let mut stream = request(addr, reqwest::Method::GET, "alice", Some(&session))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    registry
        .register(BidiFlow::new(
            "later",
            |_: ActionContext, _: (), _: Inbound<()>, _: Outbound<()>| async {
                Ok::<_, BoxError>(())
            },
        ))
        .unwrap();
    let mut seen = String::new();
    while !seen.contains("notifications/tools/list_changed") {
        let chunk = stream.chunk().await.unwrap().expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let tools = call(2, "tools/list", &json!({}));
    let listed = answer(post(addr, "alice", Some(&session), &tools).await, 2).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(names.contains(&"later"), "{names:?}");
}

#[cfg(feature = "agents")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_resources_are_its_callers_only() {
    let registry = registry(&Probe::default());
    let answers = (0..4).map(|n| Scripted::new().text(&format!("answer {n}")));
    let agent = LlmAgent::builder("chat", ScriptedModel::new(answers)).build();
    let addr = start(alice_and_bob(
        Server::new(registry.clone())
            .agent(&agent)
            .protocol(McpServer::new(registry)),
    ))
    .await;
    let alice = initialize(addr, "alice").await;
    let said = call(
        1,
        "tools/call",
        &json!({"name": "chat", "arguments": {"message": "hi"}}),
    );
    let answered = answer(post(addr, "alice", Some(&alice), &said).await, 1).await;
    let session = answered["result"]["structuredContent"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let uri = format!("bidi://agent/chat/session/{session}");

    let listed = call(2, "resources/list", &json!({}));
    let listed = answer(post(addr, "alice", Some(&alice), &listed).await, 2).await;
    assert_eq!(
        listed["result"]["resources"][0]["uri"],
        uri.as_str(),
        "{listed}"
    );
    let read = call(3, "resources/read", &json!({"uri": uri}));
    let read = answer(post(addr, "alice", Some(&alice), &read).await, 3).await;
    let text = read["result"]["contents"][0]["text"].as_str().unwrap();
    let messages: Value = serde_json::from_str(text).unwrap();
    assert_eq!(messages[0]["content"], "hi", "{read}");

    // Bob lists none of it, and cannot read it.
    let bob = initialize(addr, "bob").await;
    let listed = call(4, "resources/list", &json!({}));
    let listed = answer(post(addr, "bob", Some(&bob), &listed).await, 4).await;
    assert_eq!(listed["result"]["resources"], json!([]), "{listed}");
    let read = call(5, "resources/read", &json!({"uri": uri}));
    let read = answer(post(addr, "bob", Some(&bob), &read).await, 5).await;
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let cursor = call(6, "resources/list", &json!({"cursor": "not hex"}));
    let refused = answer(post(addr, "bob", Some(&bob), &cursor).await, 6).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // Bob cannot subscribe to it; Alice hears of each turn on it, in any session of hers.
    let subscribe = call(7, "resources/subscribe", &json!({"uri": uri}));
    let refused = answer(post(addr, "bob", Some(&bob), &subscribe).await, 7).await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    let watching = initialize(addr, "alice").await;
    let mut stream = request(addr, reqwest::Method::GET, "alice", Some(&watching))
        .send()
        .await
        .unwrap();
    let subscribed = answer(post(addr, "alice", Some(&watching), &subscribe).await, 7).await;
    assert!(subscribed["result"].is_object(), "{subscribed}");
    let again = call(
        8,
        "tools/call",
        &json!({"name": "chat", "arguments": {"message": "more", "sessionId": session}}),
    );
    answer(post(addr, "alice", Some(&alice), &again).await, 8).await;
    let mut seen = String::new();
    while !seen.contains("notifications/resources/updated") {
        let chunk = stream.chunk().await.unwrap().expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains(&uri), "{seen}");
    let unsubscribe = call(9, "resources/unsubscribe", &json!({"uri": uri}));
    let done = answer(post(addr, "alice", Some(&watching), &unsubscribe).await, 9).await;
    assert!(done["result"].is_object(), "{done}");
    let unknown = call(10, "resources/subscribe", &json!({"uri": "test://watched"}));
    let refused = answer(post(addr, "alice", Some(&watching), &unknown).await, 10).await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
}

/// What `transfer` takes.
#[cfg(feature = "agents")]
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Transfer {
    /// To whom.
    to: String,
}

/// The agent `bank`, whose `transfer` needs approval: each message asks to transfer, and
/// the answer after it says what the transfer said.
#[cfg(feature = "agents")]
fn bank() -> LlmAgent {
    let transfer = bidi_llm::simple_tool(
        "transfer",
        "transfer",
        "Sends money",
        |_id, Transfer { to }| async move { Ok::<_, String>((format!("sent to {to}"), None)) },
    )
    .needs_approval();
    let script = (0..4).flat_map(|n| {
        [
            Scripted::new().tool_call(&format!("call-{n}"), "transfer", &json!({"to": "bob"})),
            Scripted::new().text("transferred"),
        ]
    });
    LlmAgent::builder("bank", ScriptedModel::new(script))
        .tool(transfer)
        .build()
}

/// Opens a session as `who`, declaring the tasks extension: its id.
#[cfg(feature = "agents")]
async fn initialize_with_tasks(addr: SocketAddr, who: &str) -> String {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "clientInfo": {"name": "test", "version": "0"}
        }
    });
    let response = post(addr, who, None, &body.to_string()).await;
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answered = answer(response, 0).await;
    let extensions = &answered["result"]["capabilities"]["extensions"];
    assert!(
        extensions["io.modelcontextprotocol/tasks"].is_object(),
        "{answered}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(addr, who, Some(&id), &initialized.to_string()).await;
    id
}

/// Polls the task `task` as `who` on `session` until its status is `status`: the task then.
#[cfg(feature = "agents")]
async fn poll(addr: SocketAddr, who: &str, session: &str, task: &str, status: &str) -> Value {
    for n in 0.. {
        let get = call(100 + n, "tasks/get", &json!({"taskId": task}));
        let got = answer(post(addr, who, Some(session), &get).await, 100 + n).await;
        if got["result"]["status"] == status {
            return got["result"].clone();
        }
        assert!(n < 600, "the task never got to {status}: {got}");
        assert!(got["result"]["status"].is_string(), "{got}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    unreachable!()
}

#[cfg(feature = "agents")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_call_runs_as_a_task_asking_its_approvals_as_input_requests() {
    let registry = registry(&Probe::default());
    let addr = start(alice_and_bob(
        Server::new(registry.clone())
            .agent(&bank())
            .protocol(McpServer::new(registry)),
    ))
    .await;
    let alice = initialize_with_tasks(addr, "alice").await;
    let pay = call(
        1,
        "tools/call",
        &json!({"name": "bank", "arguments": {"message": "pay bob"}}),
    );
    let created = answer(post(addr, "alice", Some(&alice), &pay).await, 1).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();

    let asked = poll(addr, "alice", &alice, &task, "input_required").await;
    let requests = asked["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{asked}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    let message = question["params"]["message"].as_str().unwrap();
    assert!(message.contains("transfer"), "{message}");

    // Bob knows no such task, and cannot answer it.
    let bob = initialize_with_tasks(addr, "bob").await;
    let get = call(2, "tasks/get", &json!({"taskId": task}));
    let refused = answer(post(addr, "bob", Some(&bob), &get).await, 2).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    let approve = json!({key.as_str(): {"action": "accept", "content": {"approved": true}}});
    let update = call(
        3,
        "tasks/update",
        &json!({"taskId": task, "inputResponses": approve}),
    );
    let acked = answer(post(addr, "alice", Some(&alice), &update).await, 3).await;
    assert!(acked["result"].is_object(), "{acked}");
    let done = poll(addr, "alice", &alice, &task, "completed").await;
    let structured = &done["result"]["structuredContent"];
    assert_eq!(structured["text"], "transferred", "{done}");
    assert!(structured.get("pendingApprovals").is_none(), "{done}");

    // A task cancelled while it asks is cancelled, and its session still waits for the
    // answer: a call with approvals goes on with it.
    let session = structured["sessionId"].as_str().unwrap();
    let again = call(
        4,
        "tools/call",
        &json!({"name": "bank", "arguments": {"message": "again", "sessionId": session}}),
    );
    let created = answer(post(addr, "alice", Some(&alice), &again).await, 4).await;
    let task = created["result"]["taskId"].as_str().unwrap().to_owned();
    poll(addr, "alice", &alice, &task, "input_required").await;
    let cancel = call(5, "tasks/cancel", &json!({"taskId": task}));
    let acked = answer(post(addr, "alice", Some(&alice), &cancel).await, 5).await;
    assert!(acked["result"].is_object(), "{acked}");
    let cancelled = poll(addr, "alice", &alice, &task, "cancelled").await;
    assert!(cancelled.get("result").is_none(), "{cancelled}");
    let plain = initialize(addr, "alice").await;
    let answers = json!({
        "sessionId": session,
        "approvals": [{"toolCallId": "call-1", "approved": true}]
    });
    let answered = call(
        6,
        "tools/call",
        &json!({"name": "bank", "arguments": answers}),
    );
    let answered = answer(post(addr, "alice", Some(&plain), &answered).await, 6).await;
    assert_eq!(
        answered["result"]["structuredContent"]["text"], "transferred",
        "{answered}"
    );
}
