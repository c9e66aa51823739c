//! Agents: sessions, turns, artifacts, concurrent writers, registration, failing stores, resume
//! across processes.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bidi_agent::{Agent, AgentInit, AgentResult, Artifact, InitError, Responder, Scope};
use bidi_core::{ActionContext, BoxError, ConnectOptions, Error, Inbound, SendError};
use bidi_flow::Registry;
use bidi_session::{
    MemoryStore, Session, SessionStore, Snapshot, SqliteStore, StoreError, async_trait,
};
use futures_util::StreamExt;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The state of the test agent: every line it heard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Notes {
    lines: Vec<String>,
}

/// Per input: append the line (with `update`, so concurrent writers merge), stream the count,
/// publish an artifact, end the turn. `!raw` lines use `update_state` instead and report a
/// conflict as a chunk.
async fn notes(
    _ctx: ActionContext,
    session: Session<Notes>,
    mut inbound: Inbound<String>,
    out: Responder<String>,
) -> Result<AgentResult<usize>, BoxError> {
    let mut turns = 0;
    while let Some(line) = inbound.recv().await {
        if line == "!peek" {
            out.send(format!("{} lines", session.state().lines.len()))
                .await?;
        } else if let Some(raw) = line.strip_prefix("!raw ") {
            let mut next = session.state();
            next.lines.push(raw.to_owned());
            match session.update_state(next).await {
                Ok(()) => out.send("saved".into()).await?,
                Err(e) if e.is_conflict() => {
                    out.send("conflict".into()).await?;
                    session
                        .update(|notes| notes.lines.push(raw.to_owned()))
                        .await?;
                    out.send("merged".into()).await?;
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            let count = session
                .update(|notes| {
                    notes.lines.push(line.clone());
                    notes.lines.len()
                })
                .await?;
            out.send(format!("{count}: {line}")).await?;
        }
        out.artifact(Artifact::new("last", [json!(line)]));
        out.end_turn().await?;
        turns += 1;
    }
    Ok(AgentResult::new(turns).with_artifact(Artifact::new("summary", [json!(turns)])))
}

fn agent(store: Arc<dyn SessionStore>) -> Agent<Notes, String, usize, String> {
    Agent::builder("notes")
        .store(store)
        .description("Remembers lines")
        .build(notes)
}

async fn turn<Out: Send + 'static>(
    conn: &mut bidi_core::Connection<String, Out, String>,
    line: &str,
) -> Vec<String> {
    conn.send(line.to_owned()).await.unwrap();
    conn.responses().map(Result::unwrap).collect().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_turn_with_state_and_artifacts() {
    let agent = Agent::builder("notes").build(notes); // default MemoryStore
    let mut conn = agent.connect(AgentInit::new().init(Notes {
        lines: vec!["seed".into()],
    }));
    assert_eq!(turn(&mut conn, "a").await, ["2: a"]);
    assert_eq!(turn(&mut conn, "b").await, ["3: b"]);
    conn.close();
    let out = conn.output().await.unwrap();
    assert_eq!(out.output, 2);
    assert_eq!(out.state.lines, ["seed", "a", "b"]);
    assert!(
        uuid::Uuid::parse_str(&out.session_id).is_ok(),
        "a fresh UUID: {}",
        out.session_id
    );
    // "last" was replaced by name; "summary" came with the result.
    assert_eq!(
        out.artifacts,
        [
            Artifact::new("last", [json!("b")]),
            Artifact::new("summary", [json!(2)])
        ]
    );
    let json = serde_json::to_value(&out).unwrap();
    assert_eq!(json["sessionId"], json!(out.session_id));
    assert_eq!(json["state"], json!({"lines": ["seed", "a", "b"]}));
    // The session is in the store at the version of its last save.
    let saved = agent.session(&out.session_id).await.unwrap().unwrap();
    assert_eq!((saved.version(), saved.state()), (3, out.state));
}

#[tokio::test]
async fn session_id_rules() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone());
    // Unknown id: created under that id from the init state.
    let out = agent
        .run(
            AgentInit::new().session_id("fixed").init(Notes {
                lines: vec!["x".into()],
            }),
            "y".into(),
        )
        .await
        .unwrap();
    assert_eq!(
        (out.session_id.as_str(), out.state.lines.len()),
        ("fixed", 2)
    );
    // Existing id: resumed, the init state ignored.
    let out = agent
        .run(
            AgentInit::new().session_id("fixed").init(Notes::default()),
            "z".into(),
        )
        .await
        .unwrap();
    assert_eq!(out.state.lines, ["x", "y", "z"]);
    // No id: a new session each time.
    let a = agent.run(AgentInit::new(), "1".into()).await.unwrap();
    let b = agent.run(AgentInit::new(), "1".into()).await.unwrap();
    assert_ne!(a.session_id, b.session_id);
    assert_eq!(store.list().await.unwrap().len(), 3);
    // An empty id is refused, not turned into a session.
    let error = agent
        .run(AgentInit::new().session_id(""), "x".into())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("session id is empty"), "{error}");
    assert_eq!(store.list().await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_conflict_and_nothing_is_lost() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone());
    agent
        .run(AgentInit::new().session_id("shared"), "start".into())
        .await
        .unwrap();
    // Both connections read the session at version 2 (a turn proves the session is loaded).
    let mut a = agent.connect(AgentInit::new().session_id("shared"));
    let mut b = agent.connect(AgentInit::new().session_id("shared"));
    assert_eq!(turn(&mut a, "!peek").await, ["1 lines"]);
    assert_eq!(turn(&mut b, "!peek").await, ["1 lines"]);
    assert_eq!(turn(&mut a, "!raw from a").await, ["saved"]);
    // b's cached version is stale: its update_state is refused, then merged by update().
    assert_eq!(turn(&mut b, "!raw from b").await, ["conflict", "merged"]);
    a.close();
    b.close();
    a.output().await.unwrap();
    let out = b.output().await.unwrap();
    assert_eq!(out.state.lines, ["start", "from a", "from b"]);
    let latest = store.load("shared").await.unwrap().unwrap();
    assert_eq!(
        latest.state,
        json!({"lines": ["start", "from a", "from b"]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_as_an_agent_with_its_state_schema() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let agent = Agent::builder("notes")
        .tracer(BoxedTracer::new(Box::new(provider.tracer("test"))))
        .build(notes);
    let registry = Registry::new();
    registry.register(agent.clone().into_flow()).unwrap();
    let desc = serde_json::to_value(registry.action("/agent/notes").unwrap()).unwrap();
    assert_eq!(desc["type"], "agent");
    assert_eq!(desc["metadata"]["bidi"], json!(true));
    assert_eq!(desc["metadata"]["agent"]["stateSchema"]["title"], "Notes");
    assert_eq!(
        desc["initSchema"]["properties"]["sessionId"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(
        desc["initSchema"]["properties"]["resume"]["type"],
        json!("boolean")
    );
    assert_eq!(
        desc["outputSchema"]["required"],
        json!(["sessionId", "snapshotId", "output", "state", "artifacts"])
    );

    // Over JSON, as a transport would; the span carries the session id.
    let mut conn = registry
        .connect_json("/agent/notes", json!({"sessionId": "json-1"}))
        .unwrap();
    conn.send(json!("hello")).await.unwrap();
    let chunks: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
    assert_eq!(chunks, [json!("1: hello")]);
    conn.close();
    let out = conn.output().await.unwrap();
    assert_eq!(out["sessionId"], "json-1");
    assert_eq!(out["state"], json!({"lines": ["hello"]}));
    let spans = exporter.get_finished_spans().unwrap();
    let connection = spans.iter().find(|s| s.name == "notes").unwrap();
    let session = connection
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == "bidi.session_id");
    assert_eq!(
        session.map(|kv| kv.value.as_str().into_owned()).as_deref(),
        Some("json-1")
    );
}

#[tokio::test]
async fn a_store_failure_fails_the_connection() {
    // A session whose stored state is not a `Notes`.
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    store
        .append("broken", bidi_session::Append::create(json!(42)))
        .await
        .unwrap();
    let error = agent(store)
        .run(AgentInit::new().session_id("broken"), "x".into())
        .await
        .unwrap_err();
    let source = std::error::Error::source(&error).unwrap();
    assert!(
        matches!(
            source.downcast_ref::<StoreError>(),
            Some(StoreError::InvalidState { session_id, .. }) if session_id == "broken"
        ),
        "{source}"
    );
}

/// The first error of type `T` in `error`'s source chain (`error` included).
fn find<'a, T: std::error::Error + 'static>(
    mut error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    loop {
        if let Some(found) = error.downcast_ref::<T>() {
            return Some(found);
        }
        error = error.source()?;
    }
}

/// `resume` takes an existing session and never creates one: a missing session fails the
/// connection with `StoreError::NotFound`, also over JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_needs_an_existing_session() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone());
    let error = agent
        .run(AgentInit::new().resume("missing"), "x".into())
        .await
        .unwrap_err();
    match find::<StoreError>(&error) {
        Some(StoreError::NotFound(missing)) => {
            assert_eq!(
                (missing.kind, missing.name.as_str()),
                ("session", "missing")
            );
        }
        other => panic!("expected StoreError::NotFound, got {other:?} in {error:?}"),
    }
    assert!(
        store.list().await.unwrap().is_empty(),
        "nothing was created"
    );

    // The first send already says why: the session is opened before any input is taken.
    let conn = agent.connect(AgentInit::new().resume("missing"));
    match conn.send("x".into()).await {
        Err(SendError::Failed(input, error)) => {
            assert_eq!(input, "x");
            assert!(
                find::<StoreError>(&error).unwrap().is_not_found(),
                "{error}"
            );
        }
        other => panic!("expected SendError::Failed, got {other:?}"),
    }

    // An existing session is resumed as with `session_id`; the init state is ignored.
    agent
        .run(AgentInit::new().session_id("kept"), "first".into())
        .await
        .unwrap();
    let out = agent
        .run(
            AgentInit::new().resume("kept").init(Notes::default()),
            "second".into(),
        )
        .await
        .unwrap();
    assert_eq!(out.state.lines, ["first", "second"]);

    // Over JSON, as a transport sends it.
    let registry = Registry::new();
    registry.register(agent.clone().into_flow()).unwrap();
    let conn = registry
        .connect_json(
            "/agent/notes",
            json!({"sessionId": "also-missing", "resume": true}),
        )
        .unwrap();
    let error = conn.output().await.unwrap_err();
    assert!(
        find::<StoreError>(&error).unwrap().is_not_found(),
        "{error}"
    );
    let mut conn = registry
        .connect_json("/agent/notes", json!({"sessionId": "kept", "resume": true}))
        .unwrap();
    assert_eq!(turn_json(&mut conn, "third").await, [json!("3: third")]);

    // `resume` with no id, and an empty id, are refused with what is wrong.
    let refused = AgentInit {
        resume: true,
        ..AgentInit::new()
    };
    let error = agent.run(refused, "x".into()).await.unwrap_err();
    assert_eq!(
        find::<InitError>(&error),
        Some(&InitError::ResumeWithoutSessionId)
    );
    let error = agent
        .run(AgentInit::new().resume(""), "x".into())
        .await
        .unwrap_err();
    assert_eq!(find::<InitError>(&error), Some(&InitError::EmptySessionId));
    assert_eq!(store.list().await.unwrap(), ["kept"]);
}

async fn turn_json(conn: &mut bidi_flow::JsonConnection, line: &str) -> Vec<serde_json::Value> {
    conn.send(json!(line)).await.unwrap();
    conn.responses().map(Result::unwrap).collect().await
}

/// A store whose every call fails, as a database that went away does.
#[derive(Debug)]
struct DownStore;

fn down() -> StoreError {
    StoreError::backend(std::io::Error::other("the session database is down"))
}

#[async_trait]
impl SessionStore for DownStore {
    async fn load(&self, _: &str) -> Result<Option<Snapshot>, StoreError> {
        Err(down())
    }

    async fn load_snapshot(&self, _: &str) -> Result<Option<Snapshot>, StoreError> {
        Err(down())
    }

    async fn entry(&self, _: &str) -> Result<Option<bidi_session::Entry>, StoreError> {
        Err(down())
    }

    async fn append(
        &self,
        _: &str,
        _: bidi_session::Append,
    ) -> Result<bidi_session::Entry, StoreError> {
        Err(down())
    }

    async fn finish(
        &self,
        _: &str,
        _: bidi_session::Finish,
    ) -> Result<bidi_session::Entry, StoreError> {
        Err(down())
    }

    async fn renew(&self, _: &str, _: &str, _: u64) -> Result<bidi_session::Renewal, StoreError> {
        Err(down())
    }

    async fn abort(&self, _: &str) -> Result<Option<bidi_session::Status>, StoreError> {
        Err(down())
    }

    async fn delete(&self, _: &str) -> Result<bool, StoreError> {
        Err(down())
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Err(down())
    }
}

/// An agent whose store fails: the first send fails with the store's error (not just
/// "completed"), and `output()` returns the same error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_fails_the_first_send() {
    let agent = Agent::builder("notes").store(DownStore).build(notes);
    for init in [
        AgentInit::new(),
        AgentInit::new().session_id("s"),
        AgentInit::new().resume("s"),
    ] {
        let conn = agent.connect(init.clone());
        let sent = conn.send("hello".into()).await;
        let Err(SendError::Failed(input, sent)) = sent else {
            panic!("{init:?}: expected SendError::Failed, got {sent:?}");
        };
        assert_eq!(input, "hello");
        match find::<StoreError>(&sent) {
            Some(StoreError::Backend(cause)) => {
                assert_eq!(cause.to_string(), "the session database is down");
            }
            other => panic!("{init:?}: expected the store's error, got {other:?}"),
        }
        let output = conn.output().await.unwrap_err();
        match (&sent, &output) {
            (Error::Action(sent), Error::Action(output)) => {
                assert!(Arc::ptr_eq(sent, output), "{init:?}: the same error");
            }
            other => panic!("{init:?}: expected the action's error twice, got {other:?}"),
        }
    }
}

/// Without a store an agent keeps the latest version of at most 1024 sessions, dropping the
/// least recently used: memory stays bounded however many sessions come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_store_is_bounded() {
    let agent = Agent::builder("notes").build(notes);
    for i in 0..1024 {
        agent
            .run(AgentInit::new().session_id(format!("s-{i}")), "x".into())
            .await
            .unwrap();
    }
    // A second turn on s-0 makes it the most recently used; s-1 is now the least.
    agent
        .run(AgentInit::new().session_id("s-0"), "y".into())
        .await
        .unwrap();
    for i in 1024..1030 {
        agent
            .run(AgentInit::new().session_id(format!("s-{i}")), "x".into())
            .await
            .unwrap();
    }
    let ids = agent.store().list().await.unwrap();
    assert_eq!(ids.len(), 1024);
    for dropped in 1..=6 {
        assert!(!ids.contains(&format!("s-{dropped}")), "s-{dropped} kept");
    }
    let s0 = agent.session("s-0").await.unwrap().unwrap();
    // Every snapshot kept, each its change: version 3 (created, then one write per turn).
    assert_eq!(
        (s0.version(), s0.state().lines),
        (3, vec!["x".into(), "y".into()])
    );
    let parent = s0.head().parent_id.unwrap();
    let before = agent.store().load_snapshot(&parent).await.unwrap().unwrap();
    assert_eq!(before.state["lines"], json!(["x"]));
}

/// A store shared as `Arc<dyn SessionStore>` is used as it is, not wrapped again.
#[tokio::test]
async fn a_shared_store_is_not_wrapped_again() {
    let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(Arc::clone(&shared));
    assert!(Arc::ptr_eq(agent.store(), &shared));
    agent
        .run(AgentInit::new().session_id("seen"), "x".into())
        .await
        .unwrap();
    assert_eq!(shared.list().await.unwrap(), ["seen"]);
}

const CHILD_ENV: &str = "BIDI_AGENT_RESUME_CHILD";

/// The child process: connects to the session named in the environment, runs two turns, prints
/// the output's state, exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of `resume_across_processes`, which runs it"]
async fn resume_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (db, rest) = spec.split_once('|').unwrap();
    let (session, lines) = rest.split_once('|').unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(db).await.unwrap());
    let mut conn = agent(store).connect(AgentInit::new().session_id(session));
    for line in lines.split(',') {
        turn(&mut conn, line).await;
    }
    conn.close();
    let out = conn.output().await.unwrap();
    println!("state={}", serde_json::to_string(&out.state).unwrap());
}

#[test]
fn resume_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let run = |lines: &str| {
        let stdout = bidi_session::testing::run_child_test(
            "resume_child",
            CHILD_ENV,
            format!("{}|s-7|{lines}", db.display()),
        );
        let state = stdout
            .lines()
            // libtest may print its "test resume_child ... " on the same line.
            .find_map(|l| l.split_once("state="))
            .unwrap()
            .1
            .to_owned();
        serde_json::from_str::<Notes>(&state).unwrap()
    };
    assert_eq!(run("one,two").lines, ["one", "two"]);
    // A second process picks the session up from the SQLite file and continues.
    assert_eq!(run("three,four").lines, ["one", "two", "three", "four"]);
}

/// One turn of `line` on session `id`, within `scope` (or none): the output.
async fn scoped_turn(
    agent: &Agent<Notes, String, usize, String>,
    scope: Option<&str>,
    init: AgentInit<Notes>,
    line: &str,
) -> Result<bidi_agent::AgentOutput<Notes, usize>, Error> {
    let options = match scope {
        Some(scope) => ConnectOptions::new().extension(Scope::new(scope)),
        None => ConnectOptions::new(),
    };
    let mut conn = agent.connect_with(init, options);
    if conn.send(line.to_owned()).await.is_ok() {
        while conn.responses().next().await.is_some() {}
    }
    conn.close();
    conn.output().await
}

/// A connection with a `Scope` names sessions within it: two scopes using one id get two
/// sessions, an unscoped connection does not see either, and the output's id is unscoped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_keep_sessions_apart() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone());
    let chat = || AgentInit::new().session_id("chat");
    let alice = Some("alice");
    let bob = Some("bob");

    let out = scoped_turn(&agent, alice, chat(), "a1").await.unwrap();
    assert_eq!(
        (out.session_id.as_str(), out.state.lines.len()),
        ("chat", 1)
    );
    scoped_turn(&agent, alice, chat(), "a2").await.unwrap();
    let out = scoped_turn(&agent, bob, chat(), "b1").await.unwrap();
    assert_eq!(out.session_id, "chat");
    assert_eq!(
        out.state.lines,
        ["b1"],
        "bob's chat is a session of its own"
    );
    let out = scoped_turn(&agent, None, chat(), "u1").await.unwrap();
    assert_eq!(out.state.lines, ["u1"], "an unscoped chat is another one");
    let out = scoped_turn(&agent, alice, AgentInit::new().resume("chat"), "a3")
        .await
        .unwrap();
    assert_eq!(out.state.lines, ["a1", "a2", "a3"]);

    // A scope that another scope's name starts with is a scope of its own.
    let out = scoped_turn(&agent, Some("ali"), chat(), "x").await.unwrap();
    assert_eq!(out.state.lines, ["x"]);

    // A new session without an id gets a fresh UUID within the scope.
    let fresh = scoped_turn(&agent, bob, AgentInit::new(), "b2")
        .await
        .unwrap();
    assert!(uuid::Uuid::parse_str(&fresh.session_id).is_ok());
    let bobs = Scope::new("bob").sessions(agent.name(), store.clone());
    assert_eq!(bobs.list().await.unwrap(), {
        let mut ids = vec!["chat".to_owned(), fresh.session_id.clone()];
        ids.sort();
        ids
    });
    // The agent's own lookup is unscoped: it sees only the unscoped chat.
    assert_eq!(
        agent.session("chat").await.unwrap().unwrap().state().lines,
        ["u1"]
    );
    assert!(agent.session(&fresh.session_id).await.unwrap().is_none());
    let alices = Session::<Notes>::load(
        Arc::new(Scope::new("alice").sessions(agent.name(), store)),
        "chat",
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(alices.state().lines, ["a1", "a2", "a3"]);
}

/// `resume` of another scope's session, or of a scoped session without a scope, fails with
/// `NotFound` naming the id the connection used, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_of_another_scopes_session_is_not_found() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(store.clone());
    scoped_turn(
        &agent,
        Some("alice"),
        AgentInit::new().session_id("chat"),
        "a1",
    )
    .await
    .unwrap();
    for scope in [Some("bob"), Some("alice:"), Some(""), None] {
        let error = scoped_turn(&agent, scope, AgentInit::new().resume("chat"), "x")
            .await
            .unwrap_err();
        match find::<StoreError>(&error) {
            Some(StoreError::NotFound(missing)) => {
                assert_eq!((missing.kind, missing.name.as_str()), ("session", "chat"));
            }
            other => panic!("{scope:?}: expected StoreError::NotFound, got {other:?}"),
        }
    }
    assert_eq!(store.list().await.unwrap().len(), 1, "nothing was created");
}

#[test]
fn scope_is_a_name() {
    let scope = Scope::new("alice");
    assert_eq!(scope.as_str(), "alice");
    assert_eq!(scope, Scope::new(String::from("alice")));
    assert_ne!(scope, Scope::new("bob"));
    assert_eq!(format!("{scope:?}"), r#"Scope("alice")"#);
}

/// Every write is a snapshot: a connection resumed at an older one branches from it, becomes the
/// session's head and leaves the other leaf as it was; a snapshot of another session (named as
/// a guard) or none at all fails the connection.
#[tokio::test]
async fn a_connection_at_an_older_snapshot_branches_from_it() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = agent(Arc::clone(&store));
    let mut conn = agent.connect(AgentInit::new().session_id("s"));
    for line in ["root", "a"] {
        conn.send(line.into()).await.unwrap();
        conn.responses().collect::<Vec<_>>().await;
    }
    conn.close();
    let out = conn.output().await.unwrap();
    let leaf_a = out.snapshot_id.clone();
    let root = store.load_snapshot(&leaf_a).await.unwrap().unwrap();
    let root = root.entry.parent_id.unwrap();

    let mut branch = agent.connect(AgentInit::new().session_id("s").snapshot(root.clone()));
    branch.send("b".into()).await.unwrap();
    branch.responses().collect::<Vec<_>>().await;
    branch.close();
    let out = branch.output().await.unwrap();
    assert_eq!(out.state.lines, ["root", "b"]);
    let head = store.load("s").await.unwrap().unwrap();
    assert_eq!(
        (head.entry.id.as_str(), head.entry.parent_id.as_deref()),
        (out.snapshot_id.as_str(), Some(root.as_str()))
    );
    let a = store.load_snapshot(&leaf_a).await.unwrap().unwrap();
    assert_eq!(
        a.state["lines"],
        json!(["root", "a"]),
        "the other leaf is intact"
    );

    for (init, says) in [
        (
            AgentInit::new().session_id("other").snapshot(root.clone()),
            "does not belong to session `other`",
        ),
        (AgentInit::new().snapshot("no-such-snapshot"), "no snapshot"),
    ] {
        let refused = agent.connect(init);
        let error = refused.send("x".into()).await.unwrap_err();
        assert!(error.to_string().contains(says), "{error}");
    }
}

#[tokio::test]
async fn a_client_managed_agent_keeps_nothing_and_resumes_nothing() {
    let agent =
        Agent::builder("lines").client_managed().build(
            |_ctx,
             session: Session<Vec<String>>,
             mut inbound: Inbound<String>,
             _out: Responder<()>| async move {
                while let Some(line) = inbound.recv().await {
                    session.update(|lines| lines.push(line.clone())).await?;
                }
                Ok::<_, BoxError>(AgentResult::new(()))
            },
        );
    assert!(agent.is_client_managed());
    let first = agent.run(AgentInit::new(), "a".into()).await.unwrap();
    let init = AgentInit::new()
        .session_id(first.session_id.clone())
        .init(first.state);
    let second = agent.run(init, "b".into()).await.unwrap();
    assert_eq!(second.session_id, first.session_id);
    assert_eq!(second.state, ["a", "b"]);
    assert!(
        agent.store().list().await.unwrap().is_empty(),
        "nothing kept"
    );
    for init in [
        AgentInit::new().resume(first.session_id.clone()),
        AgentInit::new().snapshot(second.snapshot_id.clone()),
    ] {
        let error = agent.run(init, "c".into()).await.unwrap_err();
        assert!(error.to_string().contains("keeps no sessions"), "{error}");
    }
}
