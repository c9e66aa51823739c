//! The agent loop, scripted: text, thinking, tools (concurrent, streaming, invalid, remote),
//! suspend and resume across connections, refused inputs, failures, aborts, the turn limit.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bidi_agent::AgentInit;
use bidi_llm::{
    AgentEvent, ExecuteResult, LlmAgent, LlmSession, Message, Model, ModelEvent, ModelRequest,
    Scripted, ScriptedModel, Status, Tool, ToolEvent, ToolResultMessage, TurnInput, Usage,
    UserMessage, execute, simple_tool,
};
use bidi_session::{SessionStore, SqliteStore};
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

type Conn = bidi_core::Connection<TurnInput, bidi_agent::AgentOutput<LlmSession, u32>, AgentEvent>;

async fn run(conn: &mut Conn, input: TurnInput) -> (Vec<AgentEvent>, ExecuteResult) {
    let mut stream = execute(conn, input).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    let result = stream.result().clone();
    (events, result)
}

fn user(text: &str) -> TurnInput {
    TurnInput::User(UserMessage::new(text))
}

fn kinds(events: &[AgentEvent]) -> Vec<&'static str> {
    events.iter().map(AgentEvent::kind).collect()
}

#[derive(Debug, Deserialize, JsonSchema)]
struct City {
    city: String,
}

/// A streaming local tool that takes longer for "Oslo" than for others.
fn weather() -> Tool {
    Tool::local("weather", "Weather", "Forecast", |_id, args: City| {
        let slow = args.city == "Oslo";
        let city = args.city.clone();
        stream::once(async move {
            tokio::time::sleep(Duration::from_millis(if slow { 40 } else { 1 })).await;
            ToolEvent::Delta(format!("checking {city}"))
        })
        .chain(stream::once(async move {
            ToolEvent::Complete {
                output: format!("sunny in {}", args.city),
                details: Some(json!({"city": args.city})),
            }
        }))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_only() {
    let usage = Usage {
        input: 5,
        output: 2,
        total_tokens: 7,
        ..Usage::default()
    };
    let agent = LlmAgent::builder(
        "a",
        ScriptedModel::new([Scripted::new().text("Hello there").usage(usage)]),
    )
    .build();
    let mut conn = agent.connect(AgentInit::new().session_id("s1"));
    let (events, result) = run(&mut conn, user("hi")).await;
    assert_eq!(
        kinds(&events),
        [
            "session_start",
            "message_start",
            "message_end",
            "message_start",
            "text_start",
            "text_delta",
            "text_delta",
            "text_end",
            "message_end",
            "session_end"
        ]
    );
    assert_eq!(result.status, Status::Completed);
    assert_eq!(result.messages.len(), 2);
    assert_eq!(result.cost, usage);
    let session = agent.agent().session("s1").await.unwrap().unwrap().state();
    assert_eq!(
        (session.status, session.messages.len(), session.usage),
        (Status::Completed, 2, usage)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_then_text() {
    let agent = LlmAgent::builder(
        "a",
        ScriptedModel::new([Scripted::new().thinking("let me see").text("ok")]),
    )
    .build();
    let mut conn = agent.connect(AgentInit::new());
    let (events, _) = run(&mut conn, user("hi")).await;
    assert!(events.contains(&AgentEvent::ThinkingEnd {
        thinking: "let me see".into()
    }));
    assert!(events.contains(&AgentEvent::TextEnd { text: "ok".into() }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_run_concurrently_and_report_in_call_order() {
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "weather", &json!({"city": "Oslo"}))
            .tool_call("c2", "weather", &json!({"city": "Rome"}))
            .tool_call("c3", "add", &json!([2, 40])),
        Scripted::new().text("Done."),
    ]);
    let add = simple_tool("add", "Add", "Adds", |_id, (a, b): (i64, i64)| async move {
        Ok::<_, String>(((a + b).to_string(), None))
    });
    let agent = LlmAgent::builder("a", model.clone())
        .tool(weather())
        .tool(add)
        .build();
    let mut conn = agent.connect(AgentInit::new());
    let (events, result) = run(&mut conn, user("weather?")).await;
    // Rome (fast) streams its delta before Oslo (slow): they ran concurrently...
    let deltas: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionDelta { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["c2", "c1"]);
    // ...but ends and results come in call order.
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ends, ["c1", "c2", "c3"]);
    let results: Vec<_> = result
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((r.tool_call_id.as_str(), r.content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("c1", "sunny in Oslo"),
            ("c2", "sunny in Rome"),
            ("c3", "42")
        ]
    );
    assert_eq!(result.status, Status::Completed);
    // The second model call saw the tool results.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages.len(), 5);
    assert_eq!(requests[0].tools.len(), 2);
}

#[tokio::test]
async fn invalid_arguments_become_an_error_result_and_the_loop_goes_on() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "weather", &json!({"town": "Oslo"})),
        Scripted::new().raw_tool_call("c2", "weather", "{not json"),
        Scripted::new().tool_call("c3", "nope", &json!({})),
        Scripted::new().text("Sorry."),
    ]);
    let agent = LlmAgent::builder("a", model).tool(weather()).build();
    let mut conn = agent.connect(AgentInit::new());
    let (_, result) = run(&mut conn, user("weather?")).await;
    let errors: Vec<_> = result
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((r.is_error, r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 3);
    assert!(errors.iter().all(|(is_error, _)| *is_error));
    assert!(errors[0].1.contains("missing field `city`"), "{errors:?}");
    assert!(errors[2].1.contains("no tool named `nope`"), "{errors:?}");
    assert_eq!(result.status, Status::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tools_suspend_and_resume_in_a_new_connection_from_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> =
        Arc::new(SqliteStore::open(dir.path().join("llm.db")).await.unwrap());
    let agent = trip_agent(store.clone(), trip_script());
    let mut conn = agent.connect(AgentInit::new().session_id("trip"));
    let (events, result) = run(&mut conn, user("book Rome")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution);
    assert_eq!(result.pending_tool_calls.len(), 1);
    assert_eq!(result.pending_tool_calls[0].id, "c2");
    assert!(kinds(&events).contains(&"awaiting_tool_execution"));
    // The local tool ran; its result is in before the suspension.
    assert!(
        result
            .messages
            .iter()
            .any(|m| matches!(m, Message::ToolResult(r) if r.tool_call_id == "c1"))
    );
    conn.close();
    conn.output().await.unwrap();
    let saved: LlmSession =
        serde_json::from_value(store.load("trip").await.unwrap().unwrap().state).unwrap();
    assert_eq!(saved.status, Status::AwaitingToolExecution);

    // Wrong inputs are refused and change nothing.
    let version = store.load("trip").await.unwrap().unwrap().version;
    let mut conn = agent.connect(AgentInit::new().session_id("trip"));
    let result_for = |id: &str| ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: "confirm".into(),
        content: "yes".into(),
        details: None,
        is_error: false,
    };
    for (input, expected) in [
        (user("hello?"), "awaits results"),
        (
            TurnInput::ToolResults(vec![result_for("forged")]),
            "not a pending tool call",
        ),
        (
            TurnInput::ToolResults(vec![result_for("c2"), result_for("c2")]),
            "two results",
        ),
        (TurnInput::ToolResults(vec![]), "missing results"),
        (
            TurnInput::ToolResults(vec![ToolResultMessage {
                tool_name: "weather".into(),
                ..result_for("c2")
            }]),
            "is a call of `confirm`, not `weather`",
        ),
    ] {
        let (events, result) = run(&mut conn, input).await;
        assert_eq!(kinds(&events), ["error"]);
        assert!(
            result.error.as_deref().unwrap().contains(expected),
            "{result:?}"
        );
    }
    assert_eq!(store.load("trip").await.unwrap().unwrap().version, version);

    // The right results resume the turn.
    let (_, result) = run(&mut conn, TurnInput::ToolResults(vec![result_for("c2")])).await;
    assert_eq!(result.status, Status::Completed);
    // The remote result, then the model's answer.
    assert!(
        matches!(&result.messages[..], [Message::ToolResult(r), Message::Assistant(a)]
        if r.tool_call_id == "c2" && a.text() == "Booked.")
    );
    let final_state: LlmSession =
        serde_json::from_value(store.load("trip").await.unwrap().unwrap().state).unwrap();
    assert_eq!(final_state.status, Status::Completed);
    assert!(final_state.pending_tool_calls.is_empty());
    // Tool results sent when nothing is pending are refused too.
    let (_, refused) = run(&mut conn, TurnInput::ToolResults(vec![result_for("c2")])).await;
    assert!(refused.error.unwrap().contains("no tool calls are pending"));
}

#[tokio::test]
async fn model_error_mid_stream_keeps_the_partial_output() {
    let model = ScriptedModel::new([Scripted::new().text("Half of it").fail("HTTP 503")]);
    let agent = LlmAgent::builder("a", model).build();
    let mut conn = agent.connect(AgentInit::new().session_id("e"));
    let (events, result) = run(&mut conn, user("hi")).await;
    assert_eq!(result.status, Status::Error);
    assert_eq!(result.error.as_deref(), Some("HTTP 503"));
    let Some(Message::Error(error)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(error.partial.as_ref().unwrap().text(), "Half of it");
    assert!(kinds(&events).ends_with(&["message_end", "error", "session_end"]));
}

#[tokio::test]
async fn max_turns_stops_the_loop() {
    let calls = (0..5)
        .map(|i| Scripted::new().tool_call(&format!("c{i}"), "weather", &json!({"city": "Rome"})));
    let agent = LlmAgent::builder("a", ScriptedModel::new(calls))
        .tool(weather())
        .max_turns(2)
        .build();
    let mut conn = agent.connect(AgentInit::new());
    let (_, result) = run(&mut conn, user("loop")).await;
    assert_eq!(result.status, Status::Error);
    assert!(result.error.unwrap().contains("max_turns"));
}

/// Streams words slowly, forever.
struct Slow;

impl Model for Slow {
    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        stream::once(async { ModelEvent::TextStart })
            .chain(stream::unfold(0, |n| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Some((ModelEvent::TextDelta(format!("w{n} ")), n + 1))
            }))
            .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_mid_stream_leaves_an_aborted_message_and_a_consistent_session() {
    let agent = LlmAgent::builder("a", Slow).build();
    let mut conn = agent.connect(AgentInit::new().session_id("ab"));
    let mut stream = execute(&mut conn, user("talk")).await.unwrap();
    let mut deltas = 0;
    while let Some(event) = stream.next().await {
        if let AgentEvent::TextDelta { .. } = event.unwrap() {
            deltas += 1;
            if deltas == 3 {
                break;
            }
        }
    }
    drop(stream);
    conn.cancel();
    assert!(conn.output().await.unwrap_err().is_cancelled());
    // The agent saves what it had once it sees the cancellation.
    let mut saved = None;
    for _ in 0..500 {
        let state = agent.agent().session("ab").await.unwrap().unwrap().state();
        if state.messages.len() == 2 {
            saved = Some(state);
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let saved = saved.expect("the aborted execution was saved");
    let Message::Aborted(aborted) = &saved.messages[1] else {
        panic!("{saved:?}")
    };
    assert!(
        aborted.partial.text().starts_with("w0 w1 w2"),
        "{}",
        aborted.partial.text()
    );
    assert_eq!(saved.status, Status::Completed);
}

/// Streams what the test feeds it.
struct Fed(std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<ModelEvent>>>);

impl Model for Fed {
    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let rx = self.0.lock().unwrap().take().expect("one answer");
        stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
        .boxed()
    }
}

/// Events go to the consumer in batches, but never wait for more: whatever the loop has is
/// handed over before it waits for the model. (The timeout only turns a hang into a failure.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_never_held_back_while_the_model_is_silent() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let agent = LlmAgent::builder("fed", Fed(std::sync::Mutex::new(Some(rx)))).build();
    let mut conn = agent.connect(AgentInit::new());
    let mut stream = execute(&mut conn, user("hi")).await.unwrap();
    let mut next = async || stream.next().await.unwrap().unwrap();
    let body = async {
        // Before the model says anything.
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(next().await.kind());
        }
        assert_eq!(
            seen,
            [
                "session_start",
                "message_start",
                "message_end",
                "message_start"
            ]
        );
        // Three events at once, then silence: all three arrive while the model is silent.
        for event in [
            ModelEvent::TextStart,
            ModelEvent::TextDelta("a".into()),
            ModelEvent::TextDelta("b".into()),
        ] {
            tx.send(event).unwrap();
        }
        assert_eq!(next().await.kind(), "text_start");
        assert_eq!(next().await, AgentEvent::TextDelta { delta: "a".into() });
        assert_eq!(next().await, AgentEvent::TextDelta { delta: "b".into() });
        tx.send(ModelEvent::TextEnd).unwrap();
        tx.send(ModelEvent::Done {
            stop_reason: bidi_llm::StopReason::Stop,
            usage: Usage::default(),
        })
        .unwrap();
        let mut rest = Vec::new();
        for _ in 0..3 {
            rest.push(next().await.kind());
        }
        assert_eq!(rest, ["text_end", "message_end", "session_end"]);
    };
    tokio::time::timeout(Duration::from_secs(30), body)
        .await
        .expect("an event was held back");
    assert!(stream.next().await.is_none());
    assert_eq!(stream.result().status, Status::Completed);
}

/// The model of the resume tests: calls `c1` (local) and `c2` (remote), then answers.
fn trip_script() -> ScriptedModel {
    ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "weather", &json!({"city": "Rome"}))
            .tool_call("c2", "confirm", &json!({"city": "Rome"})),
        Scripted::new().text("Booked."),
    ])
}

/// The trip agent: `weather` local, `confirm` remote.
fn trip_agent(store: Arc<dyn SessionStore>, model: ScriptedModel) -> LlmAgent {
    LlmAgent::builder("trip", model)
        .tool(weather())
        .tool(Tool::remote::<City>("confirm", "Confirm", "Asks the user"))
        .store(store)
        .build()
}

fn confirmed() -> TurnInput {
    TurnInput::ToolResults(vec![ToolResultMessage {
        tool_call_id: "c2".into(),
        tool_name: "confirm".into(),
        content: "yes".into(),
        details: Some(json!({"by": "user"})),
        is_error: false,
    }])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tools_resume_on_the_same_connection() {
    let agent = trip_agent(Arc::new(bidi_session::MemoryStore::new()), trip_script());
    let mut conn = agent.connect(AgentInit::new());
    let (_, suspended) = run(&mut conn, user("book Rome")).await;
    assert_eq!(suspended.status, Status::AwaitingToolExecution);
    let (_, resumed) = run(&mut conn, confirmed()).await;
    assert_eq!(resumed.status, Status::Completed);
    conn.close();
    let out = conn.output().await.unwrap();
    assert_eq!(out.output, 2, "two executions");
    assert_eq!(out.state.status, Status::Completed);
}

#[tokio::test]
async fn registers_as_an_agent() {
    let registry = bidi_flow::Registry::new();
    registry
        .register(
            trip_agent(Arc::new(bidi_session::MemoryStore::new()), trip_script())
                .agent()
                .clone()
                .into_flow(),
        )
        .unwrap();
    let desc = serde_json::to_value(registry.action("/agent/trip").unwrap()).unwrap();
    assert_eq!(
        desc["metadata"]["agent"]["stateSchema"]["title"],
        "LlmSession"
    );
    assert!(desc["streamSchema"]["oneOf"].as_array().unwrap().len() >= 18);
    // Over JSON: a user message in, events out.
    let mut conn = registry
        .connect_json("/agent/trip", json!({"sessionId": "j"}))
        .unwrap();
    conn.send(json!({"role": "user", "content": "book Rome"}))
        .await
        .unwrap();
    let events: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
    assert_eq!(events.first().unwrap()["type"], "session_start");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "awaiting_tool_execution")
    );
}

const CHILD_ENV: &str = "BIDI_LLM_RESUME_CHILD";

/// The child process: opens the SQLite file named in the environment and sends the remote
/// tool's result to the suspended session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&db).await.unwrap());
    // A new process: a model that continues where the first one stopped.
    let model = ScriptedModel::new([Scripted::new().text("Booked.")]);
    let mut conn = trip_agent(store, model).connect(AgentInit::new().session_id("trip"));
    let (_, result) = run(&mut conn, confirmed()).await;
    println!(
        "\nstatus={}",
        serde_json::to_string(&result.status).unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tools_resume_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("trip.db");
    {
        let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&db).await.unwrap());
        let mut conn =
            trip_agent(store, trip_script()).connect(AgentInit::new().session_id("trip"));
        let (_, result) = run(&mut conn, user("book Rome")).await;
        assert_eq!(result.status, Status::AwaitingToolExecution);
        conn.close();
        conn.output().await.unwrap();
    }
    let stdout = bidi_session::testing::run_child_test("resume_child", CHILD_ENV, &db);
    assert!(stdout.contains("status=\"completed\""), "{stdout}");
    let store = SqliteStore::open(&db).await.unwrap();
    let state: LlmSession =
        serde_json::from_value(store.load("trip").await.unwrap().unwrap().state).unwrap();
    assert_eq!(state.status, Status::Completed);
    let Some(Message::Assistant(last)) = state.messages.last() else {
        panic!("{state:?}")
    };
    assert_eq!(last.text(), "Booked.");
}
