//! The agent loop, scripted: text, thinking, tools (concurrent, streaming, invalid, remote),
//! suspend and resume across connections and processes, refused inputs, failures, the turn
//! limit, the final event and the result.

use std::time::Duration;

use bidi_agent::AgentInit;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, Code, Cost, ExecuteError, LlmAgent, Message, ModelEvent, Status, StopReason, Tool,
    ToolEvent, TurnInput, Usage, execute, simple_tool,
};
use bidi_session::{MemoryStore, SqliteStore};
use futures_util::StreamExt;
use serde_json::json;

use crate::support::{confirm, kinds, result_for, run, saved, user, weather};

fn usage(tokens: u64, cost: f64) -> Usage {
    Usage {
        input: tokens,
        total_tokens: tokens,
        cost: Cost {
            total: cost,
            ..Cost::default()
        },
        ..Usage::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_only() {
    let agent = LlmAgent::builder(
        "a",
        ScriptedModel::new([Scripted::new().text("Hello there").usage(usage(7, 0.25))]),
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
            "session_end",
            "execute_complete"
        ]
    );
    assert_eq!(result.status, Status::Completed);
    assert_eq!(result.messages.len(), 2);
    assert_eq!(result.cost, 0.25);
    assert_eq!(result.error, None);
    let session = agent.agent().session("s1").await.unwrap().unwrap().state();
    assert_eq!(
        (session.status, session.messages.len()),
        (Status::Completed, 2)
    );
    assert_eq!(session.model.as_deref(), Some("scripted"));
    assert_eq!(session.total_cost, 0.25);
    let Message::Assistant(answer) = &session.messages[1] else {
        panic!("{session:?}")
    };
    assert_eq!(answer.stop_reason, StopReason::Stop);
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
    ])
    .recording();
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

/// A tool whose stream goes on after its result: the result counts, the rest is dropped, and
/// the loop does not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_stream_is_dropped_at_its_result() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "lingers", &json!({})),
        Scripted::new().text("ok"),
    ]);
    let lingers = bidi_llm::Tool::local(
        "lingers",
        "Lingers",
        "Answers, then never ends",
        |_id, _args: serde_json::Value| {
            futures_util::stream::iter([bidi_llm::ToolEvent::Complete {
                output: "first".into(),
                details: None,
            }])
            .chain(futures_util::stream::pending())
        },
    );
    let agent = LlmAgent::builder("a", model).tool(lingers).build();
    let mut conn = agent.connect(AgentInit::new());
    let (_, result) = run(&mut conn, user("go")).await;
    assert_eq!(result.status, Status::Completed);
    assert!(
        matches!(&result.messages[2], Message::ToolResult(r) if r.content == "first" && !r.is_error)
    );
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
fn trip_agent(store: impl bidi_session::SessionStore, model: ScriptedModel) -> LlmAgent {
    LlmAgent::builder("trip", model)
        .tool(weather())
        .tool(confirm())
        .store(store)
        .build()
}

fn confirmed() -> TurnInput {
    TurnInput::ToolResults(vec![result_for("c2", "confirm")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tools_suspend_and_resume_in_a_new_connection_from_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("llm.db")).await.unwrap();
    let agent = trip_agent(sqlite, trip_script());
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("trip"));
    let (events, result) = run(&mut conn, user("book Rome")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution);
    assert_eq!(result.pending_tool_calls.len(), 1);
    assert_eq!(result.pending_tool_calls[0].id, "c2");
    assert_eq!(
        events.last(),
        Some(&AgentEvent::ExecuteComplete {
            status: Status::AwaitingToolExecution,
            pending_tool_calls: result.pending_tool_calls.clone(),
            pending_approvals: Vec::new(),
            cost: 0.0,
        })
    );
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
    let (state, version) = saved(&*store, "trip").await;
    assert_eq!(state.status, Status::AwaitingToolExecution);

    // Wrong inputs are refused with a typed code and change nothing.
    let mut conn = agent.connect(AgentInit::new().session_id("trip"));
    for (input, expected) in [
        (user("hello?"), "awaits results"),
        (
            TurnInput::ToolResults(vec![result_for("forged", "confirm")]),
            "not found in session history",
        ),
        (
            TurnInput::ToolResults(vec![
                result_for("c2", "confirm"),
                result_for("c2", "confirm"),
            ]),
            "two results",
        ),
        (TurnInput::ToolResults(vec![]), "missing results"),
        (
            TurnInput::ToolResults(vec![result_for("c2", "weather")]),
            "is a call of `confirm`, not `weather`",
        ),
    ] {
        let (events, result) = run(&mut conn, input).await;
        assert_eq!(kinds(&events), ["error", "execute_complete"]);
        assert_eq!(result.status, Status::Error);
        let error = result.error.unwrap();
        assert_eq!(error.code, Code::InvalidInput);
        assert!(error.error.contains(expected), "{error:?}");
    }
    assert_eq!(saved(&*store, "trip").await.1, version);

    // The right results resume the turn.
    let (_, result) = run(&mut conn, confirmed()).await;
    assert_eq!(result.status, Status::Completed);
    // The remote result, then the model's answer.
    assert!(
        matches!(&result.messages[..], [Message::ToolResult(r), Message::Assistant(a)]
        if r.tool_call_id == "c2" && a.text() == "Booked.")
    );
    let (final_state, _) = saved(&*store, "trip").await;
    assert_eq!(final_state.status, Status::Completed);
    assert!(final_state.pending_tool_calls.is_empty());
    // Tool results sent when nothing is pending are refused too.
    let (_, refused) = run(&mut conn, confirmed()).await;
    assert!(
        refused
            .error
            .unwrap()
            .error
            .contains("no tool calls are pending")
    );
}

#[tokio::test]
async fn model_error_mid_stream_keeps_the_partial_output() {
    let model = ScriptedModel::new([Scripted::new().text("Half of it").fail("HTTP 503")]);
    let agent = LlmAgent::builder("a", model).build();
    let mut conn = agent.connect(AgentInit::new().session_id("e"));
    let (events, result) = run(&mut conn, user("hi")).await;
    assert_eq!(result.status, Status::Error);
    let error = result.error.clone().unwrap();
    assert_eq!(
        (error.code, error.error.as_str()),
        (Code::Model, "HTTP 503")
    );
    let Some(Message::Error(message)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(message.partial.as_ref().unwrap().text(), "Half of it");
    assert_eq!(
        message.partial.as_ref().unwrap().stop_reason,
        StopReason::Error
    );
    assert!(kinds(&events).ends_with(&["message_end", "error", "session_end", "execute_complete"]));
    let saved = agent.agent().session("e").await.unwrap().unwrap().state();
    assert_eq!(saved.status, Status::Error);
    // A failed session takes the next user message.
    let (_, again) = run(&mut conn, user("again?")).await;
    assert_eq!(again.error.unwrap().code, Code::Model, "the script ran out");
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
    let error = result.error.unwrap();
    assert_eq!(error.code, Code::MaxTurns);
    assert!(error.error.contains("max_turns"));
}

/// `result()` reads the execution to its end by itself, and gives the connection back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_awaits_the_end_of_the_execution() {
    let (model, tx) = ChannelModel::new();
    let agent = LlmAgent::builder("a", model).build();
    let mut conn = agent.connect(AgentInit::new().session_id("r"));
    let stream = execute(&mut conn, user("hi")).await.unwrap();
    // Nothing reads the events: `result()` waits for the model, which answers meanwhile.
    let feed = async {
        for event in [
            ModelEvent::TextStart,
            ModelEvent::TextDelta("late".into()),
            ModelEvent::TextEnd,
            ModelEvent::Done {
                stop_reason: StopReason::Stop,
                usage: usage(3, 0.5),
            },
        ] {
            tokio::task::yield_now().await;
            tx.send(event).unwrap();
        }
    };
    let (result, ()) = tokio::join!(stream.result(), feed);
    let result = result.unwrap();
    assert_eq!((result.status, result.cost), (Status::Completed, 0.5));
    let Some(Message::Assistant(answer)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(answer.text(), "late");
    // The next execution starts clean: the first one was read to its end.
    let stream = execute(&mut conn, user("again")).await.unwrap();
    drop(tx);
    let failed = stream.result().await.unwrap();
    assert_eq!(failed.error.unwrap().code, Code::Model);
    conn.close();
    assert_eq!(conn.output().await.unwrap().output, 2);
}

/// A turn without `execute_complete` (not an agent loop's connection) has no result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_result_without_execute_complete() {
    let action = bidi_core::BidiAction::new(
        "not-a-loop",
        |_ctx,
         (),
         mut inbound: bidi_core::Inbound<TurnInput>,
         out: bidi_core::Outbound<AgentEvent>| async move {
            while inbound.recv().await.is_some() {
                out.send(AgentEvent::TextStart).await?;
                out.end_turn().await?;
            }
            Ok::<_, bidi_core::BoxError>(())
        },
    );
    let mut conn = action.connect(());
    let stream = execute(&mut conn, user("hi")).await.unwrap();
    assert!(matches!(
        stream.result().await,
        Err(ExecuteError::Unfinished)
    ));
}

/// An execution whose connection is cancelled has no result: `result()` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_execution_has_no_result() {
    let (model, _tx) = ChannelModel::new();
    let agent = LlmAgent::builder("a", model).build();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let options = bidi_core::ConnectOptions::new().parent(shutdown.clone());
    let mut conn = agent.agent().connect_with(AgentInit::new(), options);
    let mut stream = execute(&mut conn, user("hi")).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap().kind(),
        "session_start"
    );
    shutdown.cancel();
    match stream.result().await {
        Err(ExecuteError::Connection(error)) => assert!(error.is_cancelled(), "{error}"),
        other => panic!("{other:?}"),
    }
}

/// Events go to the consumer in batches, but never wait for more: whatever the loop has is
/// handed over before it waits for the model. (The timeout only turns a hang into a failure.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_never_held_back_while_the_model_is_silent() {
    let (model, tx) = ChannelModel::new();
    let agent = LlmAgent::builder("fed", model).build();
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
            stop_reason: StopReason::Stop,
            usage: Usage::default(),
        })
        .unwrap();
        let mut rest = Vec::new();
        for _ in 0..4 {
            rest.push(next().await.kind());
        }
        assert_eq!(
            rest,
            ["text_end", "message_end", "session_end", "execute_complete"]
        );
    };
    tokio::time::timeout(Duration::from_secs(30), body)
        .await
        .expect("an event was held back");
    assert!(stream.next().await.is_none());
    assert_eq!(stream.result().await.unwrap().status, Status::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_tools_resume_on_the_same_connection() {
    let agent = trip_agent(MemoryStore::new(), trip_script());
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
            trip_agent(MemoryStore::new(), trip_script())
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
    assert!(desc["streamSchema"]["oneOf"].as_array().unwrap().len() >= 19);
    // Over JSON: a user message in, events out, the last one the result.
    let mut conn = registry
        .connect_json("/agent/trip", json!({"sessionId": "j"}))
        .unwrap();
    conn.send(json!({"role": "user", "content": "book Rome"}))
        .await
        .unwrap();
    let events: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
    assert_eq!(events.first().unwrap()["type"], "session_start");
    assert_eq!(
        events.last().unwrap(),
        &json!({"type": "execute_complete", "status": "awaiting_tool_execution",
                "pendingToolCalls": [{"id": "c2", "name": "confirm", "arguments": {"city": "Rome"}}],
                "cost": 0.0})
    );
}

const CHILD_ENV: &str = "BIDI_LLM_RESUME_CHILD";

/// The child process: opens the SQLite file named in the environment and sends the remote
/// tool's result to the suspended session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of `remote_tools_resume_in_a_new_process`, which runs it"]
async fn resume_child() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return; // Run with `--ignored` but not by its parent: nothing to do.
    };
    let store = SqliteStore::open(&db).await.unwrap();
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
        let store = SqliteStore::open(&db).await.unwrap();
        let mut conn =
            trip_agent(store, trip_script()).connect(AgentInit::new().session_id("trip"));
        let (_, result) = run(&mut conn, user("book Rome")).await;
        assert_eq!(result.status, Status::AwaitingToolExecution);
        conn.close();
        conn.output().await.unwrap();
    }
    let stdout = bidi_session::testing::run_child_test("agent_loop::resume_child", CHILD_ENV, &db);
    assert!(stdout.contains("status=\"completed\""), "{stdout}");
    let store = SqliteStore::open(&db).await.unwrap();
    let (state, _) = saved(&store, "trip").await;
    assert_eq!(state.status, Status::Completed);
    let Some(Message::Assistant(last)) = state.messages.last() else {
        panic!("{state:?}")
    };
    assert_eq!(last.text(), "Booked.");
}

#[tokio::test]
async fn a_tools_data_streams_to_the_caller_and_stays_out_of_the_conversation() {
    let copy = Tool::local("copy", "Copy", "Copies", |_id, _: serde_json::Value| {
        futures_util::stream::iter([
            ToolEvent::Data {
                name: "progress".into(),
                data: json!({"done": 1}),
            },
            ToolEvent::Complete {
                output: "copied".into(),
                details: None,
            },
        ])
    });
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "copy", &json!({})),
        Scripted::new().text("Done."),
    ])
    .recording();
    let agent = LlmAgent::builder("files", model.clone()).tool(copy).build();
    let mut conn = agent.connect(AgentInit::new());
    let (events, result) = run(&mut conn, user("copy")).await;
    let kinds = kinds(&events);
    let data = kinds
        .iter()
        .position(|k| *k == "tool_execution_data")
        .unwrap();
    let start = kinds
        .iter()
        .position(|k| *k == "tool_execution_start")
        .unwrap();
    let end = kinds
        .iter()
        .position(|k| *k == "tool_execution_end")
        .unwrap();
    assert!(start < data && data < end, "{kinds:?}");
    assert_eq!(
        serde_json::to_value(&events[data]).unwrap(),
        json!({"type": "tool_execution_data", "toolCallId": "c1", "name": "progress", "data": {"done": 1}})
    );
    assert_eq!(result.status, Status::Completed);
    let conversation = serde_json::to_string(&model.requests()[1].messages).unwrap();
    assert!(!conversation.contains("progress"), "{conversation}");
}
