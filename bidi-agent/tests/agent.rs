//! A1–A4: sessions, turns, artifacts, concurrent writers, registration, resume across processes.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bidi_agent::{Agent, AgentInit, AgentResult, Artifact, Responder};
use bidi_core::{ActionContext, BoxError, Inbound};
use bidi_flow::Registry;
use bidi_session::{MemoryStore, Session, SessionStore, SqliteStore};
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
        .shared_store(store)
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
        desc["outputSchema"]["required"],
        json!(["sessionId", "output", "state", "artifacts"])
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
    store.save("broken", None, json!(42)).await.unwrap();
    let error = agent(store)
        .run(AgentInit::new().session_id("broken"), "x".into())
        .await
        .unwrap_err();
    let source = std::error::Error::source(&error).unwrap();
    assert!(source.to_string().contains("serialization"), "{source}");
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
