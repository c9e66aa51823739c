//! What a session keeps across connections (its mode, the answers that hold for it), the
//! commands announced when it opens, requests the reader answers while a session starts, and
//! an agent of one's own behind a bridge; content blocks both ways.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bidi_acp::schema::{ContentBlock, ContentChunk, Error, SessionUpdate, TextContent};
use bidi_acp::{Bridge, Cancelled, Command, Mode, Permission, Server, Workspace};
use bidi_agent::{Agent, AgentResult, Responder, Scope};
use bidi_core::{ActionContext, BoxError, Inbound};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{Attachment, LlmAgent, Tool, ToolEvent, simple_tool};
use bidi_session::{MemoryStore, Session, SessionStore};
use serde_json::{Value, json};

use crate::support::Client;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Nothing {}

/// `deploy`, which needs permission and counts its runs.
fn deploy(runs: &Arc<AtomicUsize>) -> Tool {
    let runs = Arc::clone(runs);
    simple_tool("deploy", "Deploy", "Deploys", move |_id, _: Nothing| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(("deployed".to_owned(), None))
        }
    })
}

fn deployer(store: &Arc<dyn SessionStore>, runs: &Arc<AtomicUsize>, turns: usize) -> Server {
    let model = ScriptedModel::new((0..turns).flat_map(|turn| {
        [
            Scripted::new().tool_call(&format!("c{turn}"), "deploy", &json!({})),
            Scripted::new().text("done"),
        ]
    }));
    let agent = LlmAgent::builder("ops", model)
        .tool(deploy(runs))
        .store(Arc::clone(store))
        .build();
    Server::new(agent)
        .require_permission("deploy")
        .mode(Mode::new("ask", "Ask"))
        .mode(Mode::new("careful", "Careful").permission(Permission::Ask))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mode_and_the_answers_that_hold_survive_the_connection() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));

    let mut client = Client::start(deployer(&store, &runs, 1));
    let session = client.new_session().await["sessionId"].clone();
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/set_mode","params":{"sessionId":session,"modeId":"careful"}}))
        .await;
    assert!(client.answer(1).await.get("result").is_some());
    client.prompt(2, &session, "deploy").await;
    let asked = client.until_asked().await;
    client
        .choose(
            asked.last().unwrap(),
            json!({"outcome": "selected", "optionId": "allow-always"}),
        )
        .await;
    assert_eq!(client.answer(2).await["result"]["stopReason"], "end_turn");
    assert!(client.finish().await.is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // A new connection (a restarted agent, say) loads the session in its mode, and the
    // answer still holds: the tool runs without asking.
    let mut client = Client::start(deployer(&store, &runs, 1));
    client
        .send(json!({"jsonrpc":"2.0","id":3,"method":"session/load","params":{"sessionId":session,"cwd":"/project","mcpServers":[]}}))
        .await;
    let load = client.answer(3).await;
    assert_eq!(
        load["result"]["modes"]["currentModeId"], "careful",
        "{load}"
    );
    client.prompt(4, &session, "deploy again").await;
    let turn = client.until(4).await;
    assert!(
        turn.iter()
            .all(|m| m["method"] != "session/request_permission"),
        "{turn:?}"
    );
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(client.finish().await.is_empty());

    // The server's record is its own: the agent's session (in the ACP clients' scope) is
    // untouched by it.
    let acp = Arc::new(Scope::new("acp").sessions("ops", Arc::clone(&store)));
    let agent_session = Session::<Value>::load(acp, session.as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(agent_session.state().get("mode").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_session_id_a_client_names_reaches_a_record_of_another_scope() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let mut client = Client::start(deployer(&store, &runs, 1));
    let session = client.new_session().await["sessionId"].clone();
    let session = session.as_str().unwrap();
    // The server keeps the session's mode in a record of its own.
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/set_mode","params":{"sessionId":session,"modeId":"careful"}}))
        .await;
    assert!(client.answer(1).await.get("result").is_some());
    // Another session of the agent's, opened without any scope (over HTTP, say).
    Session::create(Arc::clone(&store), "unscoped", Value::Null)
        .await
        .unwrap();
    let keys = store.list().await.unwrap();
    let record = keys
        .iter()
        .find(|key| key.starts_with("8:bidi-acp:"))
        .unwrap()
        .clone();

    // Neither the server's record nor the unscoped session is a session to the client.
    let mut id = 1;
    for crafted in [record.as_str(), "unscoped"] {
        id += 1;
        client
            .send(json!({"jsonrpc":"2.0","id":id,"method":"session/load","params":{"sessionId":crafted,"cwd":"/project","mcpServers":[]}}))
            .await;
        let answer = client.answer(id).await;
        assert_eq!(answer["error"]["code"], -32002, "{crafted}: {answer}");
        id += 1;
        client.prompt(id, &json!(crafted), "deploy").await;
        let answer = client.answer(id).await;
        assert_eq!(answer["error"]["code"], -32002, "{crafted}: {answer}");
    }
    // An absurdly long id is refused as invalid params.
    id += 1;
    let long = "x".repeat(257);
    client
        .send(json!({"jsonrpc":"2.0","id":id,"method":"session/load","params":{"sessionId":long,"cwd":"/project","mcpServers":[]}}))
        .await;
    let answer = client.answer(id).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(answer["error"]["data"]["path"], "sessionId", "{answer}");
    assert!(client.finish().await.is_empty());

    // The record still says what the server kept, and nothing else was written.
    let kept = Session::<Value>::load(Arc::clone(&store), &record)
        .await
        .unwrap()
        .unwrap();
    // (its mode, and the working directory `session/list` shows).
    assert_eq!(kept.state(), json!({"mode": "careful", "cwd": "/project"}));
    // The client's sessions are keys of a scope of their own.
    // The client's sessions are keys of a scope of their own, and of the agent's.
    assert!(keys.contains(&format!("9:3:acp:ops:{session}")), "{keys:?}");
    let mut after = store.list().await.unwrap();
    after.sort();
    let mut before = keys;
    before.sort();
    assert_eq!(after, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_announced_after_a_session_opens() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let server = Server::new(agent)
        .command(Command::new("test", "Run the tests").hint("which tests"))
        .command(Command::new("plan", "Make a plan"))
        .command(Command::new("test", "Run the tests").hint("test names"));
    let mut client = Client::start(server);
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/project","mcpServers":[]}}))
        .await;
    let answer = client.recv().await.unwrap();
    assert_eq!(answer["id"], 1, "the answer comes first: {answer}");
    let session = answer["result"]["sessionId"].clone();
    let update = client.recv().await.unwrap();
    assert_eq!(update["method"], "session/update");
    assert_eq!(update["params"]["sessionId"], session);
    assert_eq!(
        update["params"]["update"],
        json!({"sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "test", "description": "Run the tests", "input": {"hint": "test names"}},
            {"name": "plan", "description": "Make a plan"},
        ]})
    );
    client
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/load","params":{"sessionId":session,"cwd":"/project","mcpServers":[]}}))
        .await;
    assert_eq!(client.recv().await.unwrap()["id"], 2);
    assert_eq!(
        client.recv().await.unwrap()["params"]["update"]["sessionUpdate"],
        "available_commands_update"
    );
    assert!(client.finish().await.is_empty());
}

#[cfg(feature = "mcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_answers_while_an_mcp_server_starts() {
    use std::time::Duration;
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    // A "server" that never speaks: its session waits for the start-up timeout.
    let server = Server::new(agent)
        .mcp_start_timeout(Duration::from_secs(600))
        .drain(Duration::from_millis(50));
    let mut client = Client::start(server);
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/project","mcpServers":[
            {"name": "mute", "command": "sleep", "args": ["600"], "env": []}]}}))
        .await;
    client
        .send(json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":1}}))
        .await;
    let first = client.recv().await.unwrap();
    assert_eq!(first["id"], 2, "{first}");
    // The end of input stops the start-up: the server ends, with nothing more said.
    assert!(client.finish().await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// An agent of one's own.

/// Why the counter was cancelled, each time it was.
static CAUSES: std::sync::Mutex<Vec<Cancelled>> = std::sync::Mutex::new(Vec::new());

/// Counts a session's prompts; `wait` makes it wait until cancelled.
async fn counter(
    ctx: ActionContext,
    session: Session<u64>,
    mut inbound: Inbound<String>,
    out: Responder<String>,
) -> Result<AgentResult<()>, BoxError> {
    let workspace = ctx.extensions().get::<Workspace>().cloned();
    while let Some(prompt) = inbound.recv().await {
        if prompt == "wait" {
            out.send("waiting".to_owned()).await?;
            let cause = ctx.cancelled().await;
            if let Some(cause) = cause.downcast_ref::<Cancelled>() {
                CAUSES.lock().unwrap().push(*cause);
            }
            return Err(cause.to_string().into());
        }
        let count = session
            .update(|count| {
                *count += 1;
                *count
            })
            .await?;
        let cwd = workspace
            .as_ref()
            .map(|w| w.cwd().display().to_string())
            .unwrap_or_default();
        let mode = workspace.as_ref().and_then(Workspace::mode).unwrap_or("-");
        out.send(format!("prompt {count} in {cwd} ({mode}): "))
            .await?;
        out.send(prompt).await?;
        out.end_turn().await?;
    }
    Ok(AgentResult::new(()))
}

struct Text;

fn said(text: impl Into<String>) -> SessionUpdate {
    SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(
        text,
    ))))
}

impl Bridge for Text {
    type State = u64;
    type In = String;
    type Stream = String;

    fn input(&self, prompt: Vec<ContentBlock>) -> Result<String, Error> {
        prompt
            .into_iter()
            .map(|block| match block {
                ContentBlock::Text(text) => Ok(text.text),
                _ => Err(Error::invalid_params().data("text only")),
            })
            .collect()
    }

    fn updates(&self, chunk: String) -> Vec<SessionUpdate> {
        vec![said(chunk)]
    }

    fn replay(&self, count: &u64) -> Vec<SessionUpdate> {
        vec![said(format!("{count} prompts so far"))]
    }
}

fn text(messages: &[Value]) -> String {
    messages
        .iter()
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_of_ones_own_serves_through_a_bridge() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("counter")
        .store(Arc::clone(&store))
        .build(counter);
    let server = || {
        Server::bridge(agent.clone(), Text)
            .mode(Mode::new("plain", "Plain"))
            .mode(Mode::new("loud", "Loud"))
    };
    let mut client = Client::start(server());
    client
        .send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}))
        .await;
    assert_eq!(
        client.answer(0).await["result"]["agentInfo"]["name"],
        "counter"
    );
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "hello").await;
    let turn = client.until(1).await;
    assert_eq!(text(&turn), "prompt 1 in /project (plain): hello");
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");

    client
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":session,"modeId":"loud"}}))
        .await;
    client.answer(2).await;
    client.prompt(3, &session, "again").await;
    assert_eq!(
        text(&client.until(3).await),
        "prompt 2 in /project (loud): again"
    );

    // Cancelled while it waits: the turn answers `cancelled`, the agent saw why, and the
    // session goes on.
    client.prompt(4, &session, "wait").await;
    loop {
        let message = client.recv().await.unwrap();
        if text(std::slice::from_ref(&message)) == "waiting" {
            break;
        }
    }
    client
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
        .await;
    assert_eq!(client.answer(4).await["result"]["stopReason"], "cancelled");
    assert_eq!(*CAUSES.lock().unwrap(), [Cancelled::ByClient]);
    client.prompt(5, &session, "still there").await;
    assert_eq!(
        text(&client.until(5).await),
        "prompt 3 in /project (loud): still there"
    );

    // A prompt the bridge refuses is refused with its error.
    client
        .send(json!({"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{"sessionId":session,"prompt":[
            {"type":"resource_link","uri":"file:///a","name":"a"}]}}))
        .await;
    let refused = client.answer(6).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(client.finish().await.is_empty());

    // A new connection loads it: the bridge replays it, the mode is the one left.
    let mut client = Client::start(server());
    client
        .send(json!({"jsonrpc":"2.0","id":7,"method":"session/load","params":{"sessionId":session,"cwd":"/elsewhere","mcpServers":[]}}))
        .await;
    let load = client.until(7).await;
    assert_eq!(text(&load), "3 prompts so far");
    assert_eq!(
        load.last().unwrap()["result"]["modes"]["currentModeId"],
        "loud"
    );
    client.prompt(8, &session, "hi").await;
    assert_eq!(
        text(&client.until(8).await),
        "prompt 4 in /elsewhere (loud): hi"
    );
    assert!(client.finish().await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Content blocks both ways.

/// `snapshot`, a tool whose result carries an image.
fn snapshot() -> Tool {
    Tool::dynamic(
        "snapshot",
        "Snapshot",
        "Takes a screenshot",
        json!({"type": "object"}),
        |_id, _args| {
            futures_util::stream::iter([
                ToolEvent::Attachment(Attachment::image("iVBORw0KGgo=", "image/png")),
                ToolEvent::Complete {
                    output: "one screenshot".to_owned(),
                    details: None,
                },
            ])
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_audio_and_resources_go_both_ways() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "snapshot", &json!({})),
        Scripted::new().text("I see it"),
    ])
    .recording();
    let agent = LlmAgent::builder("eyes", model.clone())
        .tool(snapshot())
        .store(Arc::clone(&store))
        .build();
    let mut client = Client::start(Server::new(agent.clone()));
    let session = client.new_session().await["sessionId"].clone();
    let prompt = json!([
        {"type": "text", "text": "compare"},
        {"type": "image", "mimeType": "image/png", "data": "AAAA"},
        {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
        {"type": "resource", "resource": {"uri": "file:///project/a.rs", "text": "fn a() {}"}},
    ]);
    client
        .send(json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":session,"prompt":prompt}}))
        .await;
    let turn = client.until(1).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");

    // The model read the attachments with the text...
    let first = serde_json::to_value(&model.requests()[0].messages[0]).unwrap();
    assert_eq!(first["content"], "compare");
    assert_eq!(
        first["attachments"],
        json!([
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource", "uri": "file:///project/a.rs", "text": "fn a() {}"},
        ])
    );
    // ...and the client saw the tool's image in its result.
    let done = turn
        .iter()
        .find(|m| m["params"]["update"]["status"] == "completed")
        .unwrap();
    assert_eq!(
        done["params"]["update"]["content"],
        json!([
            {"type": "content", "content": {"type": "text", "text": "one screenshot"}},
            {"type": "content", "content": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}},
        ])
    );
    assert!(client.finish().await.is_empty());

    // Loaded again, the prompt's blocks and the tool's image are replayed as they came.
    let mut client = Client::start(Server::new(agent));
    client
        .send(json!({"jsonrpc":"2.0","id":2,"method":"session/load","params":{"sessionId":session,"cwd":"/project","mcpServers":[]}}))
        .await;
    let replay = client.until(2).await;
    let user: Vec<&Value> = replay
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .map(|m| &m["params"]["update"]["content"])
        .collect();
    assert_eq!(user.len(), 4, "{replay:?}");
    for (replayed, sent) in user.iter().zip(prompt.as_array().unwrap()) {
        assert_eq!(replayed["type"], sent["type"]);
    }
    assert_eq!(user[1]["data"], "AAAA");
    assert_eq!(user[3]["resource"]["text"], "fn a() {}");
    let tool = replay
        .iter()
        .find(|m| m["params"]["update"]["status"] == "completed")
        .unwrap();
    assert_eq!(
        tool["params"]["update"]["content"][1]["content"]["type"],
        "image"
    );
    assert!(client.finish().await.is_empty());
}

/// What `session/new` or `session/load` answered: the session id, or the error.
fn opened(answer: &Value) -> Result<(), &Value> {
    match answer.get("error") {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_at_most_1024_sessions_until_one_is_closed() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent));
    let new = |id: i64| json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd":"/project","mcpServers":[]}});
    let load = |id: i64, session: &Value| json!({"jsonrpc":"2.0","id":id,"method":"session/load","params":{"sessionId":session,"cwd":"/project","mcpServers":[]}});
    let close = |id: i64, session: &Value| json!({"jsonrpc":"2.0","id":id,"method":"session/close","params":{"sessionId":session}});

    let mut sessions = Vec::new();
    let mut refused = Vec::new();
    for id in 1..=1025 {
        client.send(new(id)).await;
        let answer = client.answer(id).await;
        match opened(&answer) {
            Ok(()) => sessions.push(answer["result"]["sessionId"].clone()),
            Err(error) => refused.push(error.clone()),
        }
    }
    assert_eq!(sessions.len(), 1024);
    assert_eq!(refused.len(), 1, "{refused:?}");
    let error = &refused[0];
    assert_eq!(error["code"], -32603, "{error}");
    assert_eq!(
        error["data"],
        json!({"reason": "too_many_sessions", "maxSessions": 1024})
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("1024"), "{message}");
    assert!(message.contains("session/close"), "{message}");

    // A session open here already loads at the bound: it is counted once.
    client.send(load(2000, &sessions[1])).await;
    assert_eq!(opened(&client.answer(2000).await), Ok(()));
    // A closed one frees its place; loading it takes it again, and then no other fits.
    client.send(close(2001, &sessions[0])).await;
    assert_eq!(client.answer(2001).await["result"], json!({}));
    client.send(load(2002, &sessions[0])).await;
    assert_eq!(opened(&client.answer(2002).await), Ok(()));
    client.send(new(2003)).await;
    let answer = client.answer(2003).await;
    assert_eq!(
        answer["error"]["data"]["reason"], "too_many_sessions",
        "{answer}"
    );
    client.send(close(2004, &sessions[0])).await;
    assert_eq!(client.answer(2004).await["result"], json!({}));
    client.send(new(2005)).await;
    assert_eq!(opened(&client.answer(2005).await), Ok(()));
    client.send(load(2006, &sessions[0])).await;
    let answer = client.answer(2006).await;
    assert_eq!(
        answer["error"]["data"]["reason"], "too_many_sessions",
        "{answer}"
    );
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_on_sessions_is_the_servers_to_set() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent).max_sessions(2));
    let mut answers = Vec::new();
    for id in 1..=3 {
        client
            .send(json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd":"/project","mcpServers":[]}}))
            .await;
        answers.push(client.answer(id).await);
    }
    assert_eq!(answers.iter().filter(|a| opened(a).is_ok()).count(), 2);
    assert_eq!(
        answers[2]["error"]["data"],
        json!({"reason": "too_many_sessions", "maxSessions": 2})
    );
    assert!(client.finish().await.is_empty());
}

/// A store whose loads wait, once it is [closed](Gate::close), until it opens again, saying
/// when one waits.
#[derive(Debug)]
struct Gate {
    store: MemoryStore,
    closed: std::sync::atomic::AtomicBool,
    waiting: tokio::sync::Notify,
    open: tokio::sync::Semaphore,
}

impl Gate {
    fn new() -> Self {
        Self {
            store: MemoryStore::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            waiting: tokio::sync::Notify::new(),
            open: tokio::sync::Semaphore::new(0),
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

#[bidi_session::async_trait]
impl SessionStore for Gate {
    async fn load(
        &self,
        id: &str,
    ) -> Result<Option<bidi_session::Snapshot>, bidi_session::StoreError> {
        if self.closed.load(Ordering::SeqCst) {
            self.waiting.notify_one();
            drop(self.open.acquire().await.unwrap());
        }
        self.store.load(id).await
    }

    async fn load_snapshot(
        &self,
        id: &str,
    ) -> Result<Option<bidi_session::Snapshot>, bidi_session::StoreError> {
        self.store.load_snapshot(id).await
    }

    async fn entry(
        &self,
        id: &str,
    ) -> Result<Option<bidi_session::Entry>, bidi_session::StoreError> {
        self.store.entry(id).await
    }

    async fn append(
        &self,
        id: &str,
        append: bidi_session::Append,
    ) -> Result<bidi_session::Entry, bidi_session::StoreError> {
        self.store.append(id, append).await
    }

    async fn finish(
        &self,
        id: &str,
        finish: bidi_session::Finish,
    ) -> Result<bidi_session::Entry, bidi_session::StoreError> {
        self.store.finish(id, finish).await
    }

    async fn renew(
        &self,
        id: &str,
        owner: &str,
        expires_at: u64,
    ) -> Result<bidi_session::Renewal, bidi_session::StoreError> {
        self.store.renew(id, owner, expires_at).await
    }

    async fn abort(
        &self,
        id: &str,
    ) -> Result<Option<bidi_session::Status>, bidi_session::StoreError> {
        self.store.abort(id).await
    }

    async fn delete(&self, id: &str) -> Result<bool, bidi_session::StoreError> {
        self.store.delete(id).await
    }

    async fn list(&self) -> Result<Vec<String>, bidi_session::StoreError> {
        self.store.list().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_closed_while_it_loads_needs_a_place_again() {
    let gate = Arc::new(Gate::new());
    let agent = LlmAgent::builder("a", ScriptedModel::new([]))
        .store(Arc::clone(&gate))
        .build();
    let mut client = Client::start(Server::new(agent).max_sessions(2));
    let new = |id: i64| json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd":"/project","mcpServers":[]}});
    client.send(new(1)).await;
    let a = client.answer(1).await["result"]["sessionId"].clone();
    client.send(new(2)).await;
    assert_eq!(opened(&client.answer(2).await), Ok(()));

    // Session `a`, open, loads (it waits in the store); meanwhile it is closed and another
    // session takes its place.
    gate.close();
    client
        .send(json!({"jsonrpc":"2.0","id":3,"method":"session/load","params":{"sessionId":a,"cwd":"/project","mcpServers":[]}}))
        .await;
    gate.waiting.notified().await;
    client
        .send(json!({"jsonrpc":"2.0","id":4,"method":"session/close","params":{"sessionId":a}}))
        .await;
    assert_eq!(client.answer(4).await["result"], json!({}));
    client.send(new(5)).await;
    assert_eq!(opened(&client.answer(5).await), Ok(()));
    gate.open.add_permits(1);
    let answer = client.answer(3).await;
    assert_eq!(
        answer["error"]["data"],
        json!({"reason": "too_many_sessions", "maxSessions": 2}),
        "{answer}"
    );
    assert!(client.finish().await.is_empty());
}
