//! A session's agent connection is kept from one prompt turn to the next: the session is loaded
//! from the store when it opens, not at every prompt; a mode switch, a `session/load`, a
//! cancelled turn or a failed connection make the next prompt open another.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bidi_acp::{Mode, Server};
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Model, ModelEvent, ModelRequest, StopReason, Usage};
use bidi_session::{
    Append, Entry, Finish, MemoryStore, Renewal, SessionStore, Snapshot, Status, StoreError,
};
use futures_util::stream::BoxStream;
use serde_json::{Value, json};

use crate::support::Client;

/// A [`MemoryStore`] that counts the agent's sessions and snapshots read from it (not the
/// server's own records of a session's mode, in a scope of its own).
#[derive(Debug, Default)]
struct Counting {
    store: MemoryStore,
    loads: AtomicUsize,
}

impl Counting {
    fn loads(&self) -> usize {
        self.loads.load(Ordering::SeqCst)
    }

    fn count(&self, id: &str) {
        if !id.contains(":bidi-acp:") {
            self.loads.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[bidi_session::async_trait]
impl SessionStore for Counting {
    async fn load(&self, id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.count(id);
        self.store.load(id).await
    }

    async fn load_snapshot(&self, id: &str) -> Result<Option<Snapshot>, StoreError> {
        self.count(id);
        self.store.load_snapshot(id).await
    }

    async fn entry(&self, id: &str) -> Result<Option<Entry>, StoreError> {
        self.store.entry(id).await
    }

    async fn append(&self, id: &str, append: Append) -> Result<Entry, StoreError> {
        self.store.append(id, append).await
    }

    async fn finish(&self, id: &str, finish: Finish) -> Result<Entry, StoreError> {
        self.store.finish(id, finish).await
    }

    async fn renew(&self, id: &str, owner: &str, expires_at: u64) -> Result<Renewal, StoreError> {
        self.store.renew(id, owner, expires_at).await
    }

    async fn abort(&self, id: &str) -> Result<Option<Status>, StoreError> {
        self.store.abort(id).await
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        self.store.delete(id).await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.store.list().await
    }
}

/// Sends `method` with `params` as request `id`; its answer.
async fn request(client: &mut Client, id: i64, method: &str, params: Value) -> Value {
    client
        .send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
        .await;
    client.answer(id).await
}

/// Prompts `session` as request `id`; the answer's stop reason, or its error.
async fn prompt(client: &mut Client, id: i64, session: &Value) -> Value {
    client.prompt(id, session, "hi").await;
    let answer = client.answer(id).await;
    match answer.get("result") {
        Some(result) => result["stopReason"].clone(),
        None => answer["error"].clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_on_a_session_load_it_once() {
    let store = Arc::new(Counting::default());
    let model = ScriptedModel::new((0..9).map(|_| Scripted::new().text("ok"))).recording();
    let agent = LlmAgent::builder("a", model.clone())
        .store(Arc::clone(&store))
        .build();
    let server = Server::new(agent)
        .mode(Mode::new("ask", "Ask"))
        .mode(Mode::new("terse", "Terse").system_prompt("Be terse."));
    let mut client = Client::start(server);
    let session = client.new_session().await["sessionId"].clone();
    let created = store.loads();

    // Five prompts, one connection: the session is read from the store once.
    for id in 1..=5 {
        assert_eq!(prompt(&mut client, id, &session).await, "end_turn");
    }
    assert_eq!(store.loads() - created, 1, "one load for five prompts");
    assert_eq!(
        model.requests()[4].messages.len(),
        9,
        "the whole conversation"
    );

    // Another mode is another policy: the next prompt opens another connection, once.
    let set = json!({"sessionId": session, "modeId": "terse"});
    let set = request(&mut client, 6, "session/set_mode", set).await;
    assert_eq!(set["result"], json!({}), "{set}");
    assert_eq!(prompt(&mut client, 7, &session).await, "end_turn");
    assert_eq!(prompt(&mut client, 8, &session).await, "end_turn");
    assert_eq!(store.loads() - created, 2);
    let request_of = |turn: usize| model.requests()[turn].clone();
    assert_eq!(request_of(5).system_prompt.as_deref(), Some("Be terse."));
    assert_eq!(
        request_of(6).messages.len(),
        13,
        "the mode's turns see the rest"
    );

    // A session loaded again is replayed (one load), and its next prompt opens a connection on
    // what was loaded (another).
    let load = json!({"sessionId": session, "cwd": "/elsewhere", "mcpServers": []});
    let load = request(&mut client, 9, "session/load", load).await;
    assert!(load.get("result").is_some(), "{load}");
    assert_eq!(store.loads() - created, 3);
    assert_eq!(prompt(&mut client, 10, &session).await, "end_turn");
    assert_eq!(store.loads() - created, 4);
    assert!(client.finish().await.is_empty());
}

/// A model whose first call panics (the agent's connection fails), then answers as `model`.
struct PanicsOnce {
    model: ScriptedModel,
    calls: AtomicUsize,
}

impl Model for PanicsOnce {
    fn name(&self) -> &str {
        "panics-once"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        assert_ne!(
            self.calls.fetch_add(1, Ordering::SeqCst),
            0,
            "the first call"
        );
        self.model.stream(request)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_connection_is_opened_again_at_the_next_prompt() {
    let store = Arc::new(Counting::default());
    let model = PanicsOnce {
        model: ScriptedModel::new((0..2).map(|_| Scripted::new().text("ok"))),
        calls: AtomicUsize::new(0),
    };
    let agent = LlmAgent::builder("a", model)
        .store(Arc::clone(&store))
        .lease(Duration::from_secs(1))
        .build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    let created = store.loads();

    // The connection fails mid-turn: the prompt is answered with the error...
    let failed = prompt(&mut client, 1, &session).await;
    assert_eq!(failed["code"], -32603, "{failed}");
    // ...and, once the dead execution's lease lapsed, the next prompts run on a new one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(prompt(&mut client, 2, &session).await, "end_turn");
    assert_eq!(prompt(&mut client, 3, &session).await, "end_turn");
    // The failed connection, then a new one, which reads the session and, its head being the
    // dead execution's snapshot, the snapshot before it, to go on from there.
    assert_eq!(
        store.loads() - created,
        3,
        "the failed connection, then a new one"
    );
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_turn_ends_its_connection_and_the_next_prompt_opens_another() {
    let store = Arc::new(Counting::default());
    let (model, events) = ChannelModel::new();
    let agent = LlmAgent::builder("a", model)
        .store(Arc::clone(&store))
        .build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    let created = store.loads();

    client.prompt(1, &session, "go on and on").await;
    events.send(ModelEvent::TextStart).unwrap();
    events
        .send(ModelEvent::TextDelta("partial".to_owned()))
        .unwrap();
    let chunk = client.recv().await.unwrap();
    assert_eq!(chunk["params"]["update"]["content"]["text"], "partial");
    client
        .send(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":session}}))
        .await;
    let cancelled = client.answer(1).await;
    assert_eq!(
        cancelled["result"]["stopReason"], "cancelled",
        "{cancelled}"
    );

    client.prompt(2, &session, "next").await;
    events.send(ModelEvent::TextStart).unwrap();
    events
        .send(ModelEvent::TextDelta("fine".to_owned()))
        .unwrap();
    events.send(ModelEvent::TextEnd).unwrap();
    let done = ModelEvent::Done {
        stop_reason: StopReason::Stop,
        usage: Usage::default(),
    };
    events.send(done).unwrap();
    assert_eq!(client.answer(2).await["result"]["stopReason"], "end_turn");
    assert_eq!(
        store.loads() - created,
        2,
        "a new connection after the cancel"
    );
    assert!(client.finish().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_sessions_prompted_last_keep_their_connection() {
    let store = Arc::new(Counting::default());
    let model = ScriptedModel::new((0..9).map(|_| Scripted::new().text("ok")));
    let agent = LlmAgent::builder("a", model)
        .store(Arc::clone(&store))
        .build();
    let mut client = Client::start(Server::new(agent).max_idle_agent_connections(1));
    let a = client.new_session().await["sessionId"].clone();
    let b = client.new_session().await["sessionId"].clone();
    let created = store.loads();

    assert_eq!(prompt(&mut client, 1, &a).await, "end_turn");
    assert_eq!(prompt(&mut client, 2, &a).await, "end_turn");
    assert_eq!(store.loads() - created, 1);
    // `b`'s connection is kept: `a`'s is dropped, and its next prompt opens it again.
    assert_eq!(prompt(&mut client, 3, &b).await, "end_turn");
    assert_eq!(prompt(&mut client, 4, &a).await, "end_turn");
    assert_eq!(prompt(&mut client, 5, &a).await, "end_turn");
    assert_eq!(store.loads() - created, 3);
    // None kept: every prompt reads its session.
    let store = Arc::new(Counting::default());
    let model = ScriptedModel::new((0..2).map(|_| Scripted::new().text("ok")));
    let agent = LlmAgent::builder("a", model)
        .store(Arc::clone(&store))
        .build();
    let mut none = Client::start(Server::new(agent).max_idle_agent_connections(0));
    let c = none.new_session().await["sessionId"].clone();
    assert_eq!(prompt(&mut none, 1, &c).await, "end_turn");
    assert_eq!(prompt(&mut none, 2, &c).await, "end_turn");
    assert_eq!(store.loads(), 2);
    assert!(none.finish().await.is_empty());
    assert!(client.finish().await.is_empty());
}
