//! The scope the clients' sessions are in (`Server::scope`): a session another front end of the
//! agent started in its scope (bidi-http's anonymous one, `""`) is an ACP session with the
//! option and none without it; turns of the other front end between two prompts are neither
//! lost nor overwritten by the session's kept agent connection; the server's own records are
//! kept apart for each scope; an agent of one's own, behind a bridge, keeps its sessions in the
//! scope as well.

use std::sync::Arc;

use bidi_acp::schema::{ContentBlock, ContentChunk, Error, SessionUpdate, TextContent};
use bidi_acp::{Bridge, Mode, Server};
use bidi_agent::{Agent, AgentInit, AgentResult, Responder, Scope};
use bidi_core::{ActionContext, BoxError, ConnectOptions, Inbound};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, LlmSession, Message, Status, TurnInput, UserMessage, execute};
use bidi_session::{MemoryStore, Session, SessionStore};
use serde_json::{Value, json};

use crate::support::Client;

/// The agent's name.
const AGENT: &str = "assistant";

/// One turn of `agent` on session `id` of the anonymous scope, as bidi-http runs an anonymous
/// request's: a connection of its own, in scope `""`.
async fn web_turn(agent: &LlmAgent, id: &str, text: &str) {
    let options = ConnectOptions::new().extension(Scope::new(""));
    let mut conn = agent.connect_with(AgentInit::new().session_id(id), options);
    let input = TurnInput::User(UserMessage::new(text));
    let run = execute(&mut conn, input).await.unwrap();
    assert_eq!(run.result().await.unwrap().status, Status::Completed);
    conn.close();
    conn.output().await.unwrap();
}

/// The texts of `messages`, in order.
fn texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|message| match message {
            Message::User(user) => user.content.clone(),
            Message::Assistant(assistant) => assistant.text(),
            other => format!("{other:?}"),
        })
        .collect()
}

/// The conversation of session `id` of `scope`, as the store holds it.
async fn stored(store: &Arc<dyn SessionStore>, scope: &str, id: &str) -> Vec<String> {
    let sessions = Arc::new(Scope::new(scope).sessions(AGENT, Arc::clone(store)));
    let session = Session::<LlmSession>::load(sessions, id)
        .await
        .unwrap()
        .unwrap();
    texts(&session.state().messages)
}

/// Sends `session/load` of `session` as request `id`: the messages up to its answer.
async fn load(client: &mut Client, id: i64, session: &str) -> Vec<Value> {
    client
        .send(
            json!({"jsonrpc":"2.0","id":id,"method":"session/load","params":{
            "sessionId": session, "cwd": "/project", "mcpServers": []}}),
        )
        .await;
    client.until(id).await
}

/// The text of each `user_message_chunk` and `agent_message_chunk` in `messages`.
fn replayed(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter(|message| message["method"] == "session/update")
        .map(|message| &message["params"]["update"])
        .filter(|update| update["content"]["type"] == "text")
        .map(|update| {
            let kind = update["sessionUpdate"].as_str().unwrap_or_default();
            let text = update["content"]["text"].as_str().unwrap_or_default();
            (kind.to_owned(), text.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_another_scope_is_an_acp_session_with_the_scope_option_only() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let model = ScriptedModel::new(
        [
            "web answer 1",
            "editor answer 1",
            "web answer 2",
            "editor answer 2",
        ]
        .map(|text| Scripted::new().text(text)),
    )
    .recording();
    let agent = LlmAgent::builder(AGENT, model.clone())
        .store(Arc::clone(&store))
        .build();
    web_turn(&agent, "chat-1", "web question 1").await;

    // In the ACP clients' own scope, there is no such session.
    let mut client = Client::start(Server::new(agent.clone()));
    let answer = load(&mut client, 1, "chat-1").await.pop().unwrap();
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    assert!(client.finish().await.is_empty());

    // In the web's scope, it replays, and goes on.
    let mut client = Client::start(Server::new(agent.clone()).scope(Scope::new("")));
    let loaded = load(&mut client, 1, "chat-1").await;
    assert!(loaded.last().unwrap().get("result").is_some(), "{loaded:?}");
    assert_eq!(
        replayed(&loaded),
        [
            ("user_message_chunk".to_owned(), "web question 1".to_owned()),
            ("agent_message_chunk".to_owned(), "web answer 1".to_owned()),
        ]
    );
    let session = json!("chat-1");
    client.prompt(2, &session, "editor question 1").await;
    let turn = client.until(2).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");

    // The web takes a turn while the editor keeps the session open (and its agent
    // connection, with the conversation it last saw): the editor's next turn starts from the
    // web's, and keeps it.
    web_turn(&agent, "chat-1", "web question 2").await;
    client.prompt(3, &session, "editor question 2").await;
    let turn = client.until(3).await;
    assert_eq!(
        turn.last().unwrap()["result"]["stopReason"],
        "end_turn",
        "{turn:?}"
    );
    assert!(client.finish().await.is_empty());

    let conversation = [
        "web question 1",
        "web answer 1",
        "editor question 1",
        "editor answer 1",
        "web question 2",
        "web answer 2",
        "editor question 2",
        "editor answer 2",
    ];
    let requests = model.requests();
    assert_eq!(
        texts(&requests[3].messages),
        conversation[..7],
        "the editor's second turn saw the web's"
    );
    assert_eq!(stored(&store, "", "chat-1").await, conversation);
    // Nothing of it went to the ACP clients' own scope.
    assert!(
        store
            .list()
            .await
            .unwrap()
            .iter()
            .all(|key| !key.contains(":acp:")),
        "{:?}",
        store.list().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_records_are_kept_apart_for_each_scope() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = LlmAgent::builder(AGENT, ScriptedModel::new([]))
        .store(Arc::clone(&store))
        .build();
    let server = |scope: &str| {
        Server::new(agent.clone())
            .scope(Scope::new(scope))
            .mode(Mode::new("ask", "Ask"))
            .mode(Mode::new("careful", "Careful"))
    };
    // One id, two sessions: one in the ACP clients' default scope, one in the web's.
    for scope in ["acp", ""] {
        let sessions = Arc::new(Scope::new(scope).sessions(AGENT, Arc::clone(&store)));
        Session::create(sessions, "same", LlmSession::default())
            .await
            .unwrap();
    }

    // The default scope's session switches to `careful`...
    let mut client = Client::start(server("acp"));
    let loaded = load(&mut client, 1, "same").await.pop().unwrap();
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "ask",
        "{loaded}"
    );
    client
        .send(
            json!({"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{
            "sessionId": "same", "modeId": "careful"}}),
        )
        .await;
    assert_eq!(client.answer(2).await["result"], json!({}));
    assert!(client.finish().await.is_empty());

    // ...which the web's session of the same id is not.
    let mut client = Client::start(server(""));
    let loaded = load(&mut client, 1, "same").await.pop().unwrap();
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "ask",
        "{loaded}"
    );
    client
        .send(
            json!({"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{
            "sessionId": "same", "modeId": "ask"}}),
        )
        .await;
    assert_eq!(client.answer(2).await["result"], json!({}));
    assert!(client.finish().await.is_empty());

    let mut client = Client::start(server("acp"));
    let loaded = load(&mut client, 1, "same").await.pop().unwrap();
    assert_eq!(
        loaded["result"]["modes"]["currentModeId"], "careful",
        "{loaded}"
    );
    assert!(client.finish().await.is_empty());

    // Two records: the default scope's where it always was, the other scope's apart.
    let mut keys = store.list().await.unwrap();
    keys.retain(|key| key.contains("bidi-acp"));
    keys.sort();
    assert_eq!(keys, ["11:bidi-acp:0::same", "8:bidi-acp:same"]);
}

/// Counts a session's prompts, and says how many there were.
async fn tally(
    _ctx: ActionContext,
    session: Session<u64>,
    mut inbound: Inbound<()>,
    out: Responder<String>,
) -> Result<AgentResult<()>, BoxError> {
    while inbound.recv().await.is_some() {
        let count = session
            .update(|count| {
                *count += 1;
                *count
            })
            .await?;
        out.send(count.to_string()).await?;
        out.end_turn().await?;
    }
    Ok(AgentResult::new(()))
}

/// Any prompt is one more; a chunk, or a replayed count, is said as it is.
struct Count;

fn said(text: String) -> SessionUpdate {
    let text = ContentBlock::Text(TextContent::new(text));
    SessionUpdate::AgentMessageChunk(ContentChunk::new(text))
}

impl Bridge for Count {
    type State = u64;
    type In = ();
    type Stream = String;

    fn input(&self, _prompt: Vec<ContentBlock>) -> Result<(), Error> {
        Ok(())
    }

    fn updates(&self, chunk: String) -> Vec<SessionUpdate> {
        vec![said(chunk)]
    }

    fn replay(&self, count: &u64) -> Vec<SessionUpdate> {
        vec![said(count.to_string())]
    }
}

/// The texts of the updates in `messages`.
fn said_in(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|message| message["params"]["update"]["content"]["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_of_ones_own_keeps_its_sessions_in_the_scope_too() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("tally")
        .store(Arc::clone(&store))
        .build(tally);
    let team = || Arc::new(Scope::new("team").sessions("tally", Arc::clone(&store)));
    Session::create(team(), "t", 2_u64).await.unwrap();

    let mut client = Client::start(Server::bridge(agent.clone(), Count));
    let answer = load(&mut client, 1, "t").await.pop().unwrap();
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    assert!(client.finish().await.is_empty());

    let mut client = Client::start(Server::bridge(agent, Count).scope(Scope::new("team")));
    assert_eq!(said_in(&load(&mut client, 1, "t").await), ["2"]);
    client.prompt(2, &json!("t"), "one more").await;
    assert_eq!(said_in(&client.until(2).await), ["3"]);
    let created = client.new_session().await["sessionId"].clone();
    client.prompt(3, &created, "a first").await;
    assert_eq!(said_in(&client.until(3).await), ["1"]);
    assert!(client.finish().await.is_empty());

    let count = |id: String| async move {
        Session::<u64>::load(team(), &id)
            .await
            .unwrap()
            .map(|session| session.state())
    };
    assert_eq!(count("t".to_owned()).await, Some(3));
    assert_eq!(count(created.as_str().unwrap().to_owned()).await, Some(1));
}
