//! Tools that need approval: the execution ends with their calls waiting, the next input decides
//! on each; approved calls run, denied ones give the model the denial; wrong inputs change
//! nothing; a connection's gate decides instead, in the execution's course.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bidi_agent::AgentInit;
use bidi_core::ConnectOptions;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, Approval, Code, Error, LlmAgent, Message, Policy, Resume, Status, Tool, ToolCall,
    TurnInput, simple_tool,
};
use bidi_session::SqliteStore;
use serde_json::json;

use crate::support::{confirm, kinds, result_for, run, saved, user};

/// `delete` runs only once approved, and counts its runs.
fn delete(runs: &Arc<AtomicUsize>) -> Tool {
    let runs = Arc::clone(runs);
    simple_tool(
        "delete",
        "Delete",
        "Deletes a file",
        move |_id, args: serde_json::Value| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>((format!("deleted {}", args["path"]), None))
            }
        },
    )
    .needs_approval()
}

/// Calls `delete` twice (`d1`, `d2`) and the remote `confirm` (`c1`) in one answer, then
/// answers.
fn model() -> ScriptedModel {
    ScriptedModel::new([
        Scripted::new()
            .tool_call("d1", "delete", &json!({"path": "a"}))
            .tool_call("c1", "confirm", &json!({"city": "Rome"}))
            .tool_call("d2", "delete", &json!({"path": "b"})),
        Scripted::new().text("Done."),
    ])
    .recording()
}

fn agent(model: ScriptedModel, runs: &Arc<AtomicUsize>, store: SqliteStore) -> LlmAgent {
    LlmAgent::builder("files", model)
        .tool(delete(runs))
        .tool(confirm())
        .store(store)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_wait_for_a_decision_across_connections_then_run_or_are_denied() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("a.db")).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = model();
    let agent = agent(model.clone(), &runs, store);

    let mut conn = agent.connect(AgentInit::new().session_id("s"));
    let (events, result) = run(&mut conn, user("clean up")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing runs before approval"
    );
    let waiting: Vec<_> = result
        .pending_approvals
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(waiting, ["d1", "d2"]);
    assert_eq!(result.pending_tool_calls[0].id, "c1");
    let kinds = kinds(&events);
    let remote = kinds.iter().position(|k| *k == "awaiting_tool_execution");
    let approval = kinds.iter().position(|k| *k == "awaiting_approval");
    assert!(remote.unwrap() < approval.unwrap(), "{kinds:?}");
    assert!(!kinds.contains(&"tool_execution_start"), "{kinds:?}");
    // `execute_complete` names both: what the client runs, what it approves.
    let Some(AgentEvent::ExecuteComplete {
        pending_tool_calls,
        pending_approvals,
        ..
    }) = events.last()
    else {
        panic!("the last event completes: {kinds:?}")
    };
    let ids = |calls: &[ToolCall]| calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        (ids(pending_tool_calls), ids(pending_approvals)),
        (
            vec!["c1".to_owned()],
            vec!["d1".to_owned(), "d2".to_owned()]
        )
    );
    let wire = serde_json::to_value(events.last().unwrap()).unwrap();
    assert_eq!(wire["pendingApprovals"][1]["id"], "d2", "{wire}");
    conn.close();
    conn.output().await.unwrap();

    // The wait is in the store: a new connection reads it.
    let (state, _) = saved(&**agent.agent().store(), "s").await;
    let pending: Vec<_> = state
        .pending_tool_calls
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(pending, ["c1", "d1", "d2"]);

    let mut conn = agent.connect(AgentInit::new().resume("s"));
    // Inputs that do not decide on every waiting call are refused, and change nothing.
    for (input, wanted) in [
        (user("hello?"), "tool_results"),
        (
            TurnInput::ToolResults(vec![result_for("c1", "confirm")]),
            "approval",
        ),
        (
            TurnInput::Resume(
                Resume::new()
                    .result(result_for("c1", "confirm"))
                    .approval(Approval::approve("d1")),
            ),
            "approval",
        ),
        (
            TurnInput::Resume(
                Resume::new()
                    .approval(Approval::approve("d1"))
                    .approval(Approval::approve("d2")),
            ),
            "results",
        ),
        (
            TurnInput::Resume(
                Resume::new()
                    .result(result_for("c1", "confirm"))
                    .approval(Approval::approve("d1"))
                    .approval(Approval::approve("d1"))
                    .approval(Approval::approve("d2")),
            ),
            "two decisions",
        ),
        (
            TurnInput::Resume(
                Resume::new()
                    .result(result_for("c1", "confirm"))
                    .approval(Approval::approve("d1"))
                    .approval(Approval::approve("c1")),
            ),
            "not found in session history",
        ),
        (
            TurnInput::Resume(
                Resume::new()
                    .result(result_for("c1", "confirm"))
                    .approval(Approval::approve("d1").with_arguments(json!({"path": "/etc"})))
                    .approval(Approval::approve("d2")),
            ),
            "modified inputs",
        ),
    ] {
        let (_, refused) = run(&mut conn, input).await;
        assert_eq!(refused.status, Status::Error);
        let failure = refused.error.unwrap();
        assert_eq!(failure.code, Code::InvalidInput);
        let expected = match wanted {
            "tool_results" => "awaits results",
            "approval" => "wait for approval",
            "results" => "missing results",
            other => other,
        };
        assert!(failure.error.contains(expected), "{}", failure.error);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(model.requests().len(), 1);

    let input = TurnInput::Resume(
        Resume::new()
            .result(result_for("c1", "confirm"))
            .approval(Approval::deny("d2", "keep b"))
            .approval(Approval::approve("d1")),
    );
    let (events, result) = run(&mut conn, input).await;
    assert_eq!(result.status, Status::Completed, "{:?}", result.error);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the approved call ran");
    let ends: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                output,
                is_error,
                ..
            } => Some((tool_call_id.as_str(), output.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("d1", "deleted \"a\"", false),
            ("d2", "the user denied this call: keep b", true)
        ]
    );
    // The model read every call's result: the remote one, then the decided ones in call order.
    let request = &model.requests()[1];
    let answered: Vec<_> = request
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::ToolResult(result) => Some(result.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["c1", "d1", "d2"]);
    let (state, _) = saved(&**agent.agent().store(), "s").await;
    assert!(state.pending_tool_calls.is_empty());
    assert_eq!(state.status, Status::Completed);
}

#[tokio::test]
async fn a_connections_gate_decides_instead_and_the_execution_goes_on() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("d1", "delete", &json!({"path": "a"}))
            .tool_call("d2", "delete", &json!({"path": "b"})),
        Scripted::new().text("Done."),
    ])
    .recording();
    let agent = LlmAgent::builder("files", model.clone())
        .tool(delete(&runs))
        .build();
    let asked = Arc::new(AtomicUsize::new(0));
    let policy = Policy::new().gate({
        let asked = Arc::clone(&asked);
        move |call| {
            asked.fetch_add(1, Ordering::SeqCst);
            let allowed = call.arguments["path"] == "a";
            async move {
                if allowed {
                    Ok(())
                } else {
                    Err("no".to_owned())
                }
            }
        }
    });
    let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new().extension(policy));
    let (events, result) = run(&mut conn, user("clean up")).await;
    assert_eq!(result.status, Status::Completed);
    assert!(result.pending_approvals.is_empty());
    assert!(!kinds(&events).contains(&"awaiting_approval"));
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_tool_the_connection_does_not_offer_is_refused_without_waiting() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new().tool_call("d1", "delete", &json!({"path": "a"})),
        Scripted::new().text("Done."),
    ])
    .recording();
    let agent = LlmAgent::builder("files", model)
        .tool(delete(&runs))
        .build();
    let policy = Policy::new().offer(|name| name != "delete");
    let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new().extension(policy));
    let (_, result) = run(&mut conn, user("clean up")).await;
    assert_eq!(result.status, Status::Completed);
    assert!(result.pending_approvals.is_empty());
    let Message::ToolResult(refused) = &result.messages[2] else {
        panic!("{:?}", result.messages)
    };
    assert!(refused.is_error);
    assert!(
        refused.content.contains("not available"),
        "{}",
        refused.content
    );
}

#[test]
fn resume_json_is_told_from_a_user_message_and_unknown_fields_are_refused() {
    let input: TurnInput = serde_json::from_value(json!({"content": "hi"})).unwrap();
    assert!(matches!(input, TurnInput::User(_)));
    let input: TurnInput = serde_json::from_value(json!({
        "results": [{"toolCallId": "c1", "toolName": "confirm", "content": "yes", "isError": false}],
        "approvals": [{"toolCallId": "d1", "approved": true}],
    }))
    .unwrap();
    let TurnInput::Resume(resume) = input else {
        panic!("{input:?}")
    };
    assert_eq!(resume.approvals, [Approval::approve("d1")]);
    assert_eq!(resume.results[0].tool_call_id, "c1");
    assert!(
        serde_json::from_value::<TurnInput>(json!({"approvals": [{"toolCallId": "d1"}]})).is_err()
    );
    assert!(serde_json::from_value::<TurnInput>(json!({"approvals": [], "extra": 1})).is_err());
    let error = Error::AwaitingApproval {
        pending: vec!["d1".into()],
    };
    assert_eq!(error.code(), Code::InvalidInput);
}

/// A user who moves on instead of answering: every open call (remote or waiting for approval)
/// is answered as set aside, then the model reads the new message and answers once; nothing
/// that waited runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_moves_on_sets_the_open_calls_aside_and_is_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("a.db")).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = model();
    let agent = agent(model.clone(), &runs, store);
    let mut conn = agent.connect(AgentInit::new().session_id("s"));
    let (_, result) = run(&mut conn, user("clean up")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution);

    // A plain user message is still refused: the session waits for answers.
    let (_, refused) = run(&mut conn, user("something else")).await;
    assert_eq!(refused.error.unwrap().code, Code::InvalidInput);

    let state = conn_state(&agent).await;
    let input = agent.set_aside(&state, bidi_llm::UserMessage::new("something else"));
    let (_, result) = run(&mut conn, input).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a call set aside never runs"
    );
    let state = conn_state(&agent).await;
    let tail: Vec<String> = state.messages[1..]
        .iter()
        .map(|message| match message {
            Message::Assistant(_) => "assistant".to_owned(),
            Message::ToolResult(result) => {
                assert!(result.is_error && result.content.contains("moved on"));
                format!("result {}", result.tool_call_id)
            }
            Message::User(said) => format!("user {}", said.content),
            other => format!("{other:?}"),
        })
        .collect();
    // The calls' answers, in the model's order, then the new message, then one answer.
    assert_eq!(
        tail,
        [
            "assistant",
            "result c1",
            "result d1",
            "result d2",
            "user something else",
            "assistant"
        ]
    );
    assert_eq!(model.requests().len(), 2);
}

/// The session `s` of `agent`, as stored.
async fn conn_state(agent: &LlmAgent) -> bidi_llm::LlmSession {
    agent.agent().session("s").await.unwrap().unwrap().state()
}
