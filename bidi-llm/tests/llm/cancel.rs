//! Cancelling an execution: during a model answer (also while the consumer is not reading) or
//! a local tool that never ends, and by dropping the connection. The execution ends, running
//! tools are dropped, and the saved session is consistent: the aborted message, the tool
//! results that exist (and error results for the others), remote calls still pending, never
//! `running`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bidi_agent::AgentInit;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, LlmAgent, Message, ModelEvent, Status, StopReason, Tool, ToolEvent, TurnInput,
    execute,
};
use futures_util::StreamExt;
use futures_util::stream;
use serde_json::json;

use crate::support::{confirm, result_for, run, saved, settled, user};

/// Sets its flag when dropped: whether a tool's stream was dropped.
struct DropProbe(Arc<AtomicBool>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A local tool that says it started, then never ends; `dropped` tells when its stream is gone.
fn forever(dropped: &Arc<AtomicBool>) -> Tool {
    let dropped = Arc::clone(dropped);
    Tool::local(
        "forever",
        "Forever",
        "Never ends",
        move |_id, _args: serde_json::Value| {
            let probe = DropProbe(Arc::clone(&dropped));
            stream::once(async { ToolEvent::Delta("started".into()) }).chain(stream::unfold(
                probe,
                |probe| async move {
                    std::future::pending::<()>().await;
                    Some((ToolEvent::Delta("never".into()), probe))
                },
            ))
        },
    )
}

/// A local tool that answers at once.
fn quick() -> Tool {
    bidi_llm::simple_tool(
        "quick",
        "Quick",
        "Answers at once",
        |_id, _args: serde_json::Value| async {
            Ok::<_, String>(("quick result".to_owned(), None))
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_model_answer_keeps_what_it_said() {
    let (model, tx) = ChannelModel::new();
    let agent = LlmAgent::builder("a", model).build();
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("ab"));
    let mut stream = execute(&mut conn, user("talk")).await.unwrap();
    // A burst the consumer does not read to its end: the loop waits to hand it over.
    tx.send(ModelEvent::TextStart).unwrap();
    for n in 0..200 {
        tx.send(ModelEvent::TextDelta(format!("w{n} "))).unwrap();
    }
    let mut deltas = 0;
    while deltas < 3 {
        if let AgentEvent::TextDelta { .. } = stream.next().await.unwrap().unwrap() {
            deltas += 1;
        }
    }
    stream.cancel_with("the user pressed stop");
    let rest: Vec<_> = stream.collect().await;
    assert!(
        matches!(rest.last(), Some(Err(error)) if error.is_cancelled()),
        "{rest:?}"
    );
    // `output` returns once the agent's future has finished or, after the grace period, been
    // dropped: the execution had ended and saved by then.
    assert!(conn.output().await.unwrap_err().is_cancelled());
    let (saved, _) = saved(&*store, "ab").await;
    assert_eq!(saved.status, Status::Completed);
    let [Message::User(_), Message::Aborted(aborted)] = &saved.messages[..] else {
        panic!("{saved:?}")
    };
    assert!(
        aborted.partial.text().starts_with("w0 w1 w2 "),
        "{}",
        aborted.partial.text()
    );
    assert_eq!(aborted.partial.stop_reason, StopReason::Aborted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_tool_drops_it_and_keeps_the_results_that_exist() {
    let dropped = Arc::new(AtomicBool::new(false));
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "quick", &json!({}))
            .tool_call("c2", "forever", &json!({})),
        Scripted::new().text("after the cancel"),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model.clone())
        .tool(quick())
        .tool(forever(&dropped))
        .build();
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("tools"));
    let mut stream = execute(&mut conn, user("go")).await.unwrap();
    let (mut quick_done, mut forever_started) = (false, false);
    while !(quick_done && forever_started) {
        match stream.next().await.unwrap().unwrap() {
            AgentEvent::ToolExecutionEnd { tool_call_id, .. } if tool_call_id == "c1" => {
                quick_done = true;
            }
            AgentEvent::ToolExecutionDelta { tool_call_id, .. } if tool_call_id == "c2" => {
                forever_started = true;
            }
            _ => {}
        }
    }
    assert!(!dropped.load(Ordering::SeqCst));
    drop(stream);
    conn.cancel();
    assert!(conn.output().await.unwrap_err().is_cancelled());
    let (saved, _) = saved(&*store, "tools").await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the running tool was dropped"
    );
    assert_eq!(saved.status, Status::Completed);
    let [
        Message::User(_),
        Message::Assistant(_),
        Message::ToolResult(first),
        Message::ToolResult(second),
    ] = &saved.messages[..]
    else {
        panic!("{saved:?}")
    };
    assert_eq!(
        (
            first.tool_call_id.as_str(),
            first.content.as_str(),
            first.is_error
        ),
        ("c1", "quick result", false)
    );
    assert_eq!(second.tool_call_id, "c2");
    assert!(second.is_error);
    assert!(second.content.contains("cancelled"), "{second:?}");

    // The session goes on from there, every call answered.
    let mut conn = agent.connect(AgentInit::new().session_id("tools"));
    let (_, result) = run(&mut conn, user("and now?")).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    assert_eq!(model.requests()[1].messages.len(), 5);
}

/// Remote calls of an interrupted execution stay pending: whoever resumes the session sends
/// their results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_leaves_remote_calls_pending() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cancel.db");
    let dropped = Arc::new(AtomicBool::new(false));
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "forever", &json!({}))
            .tool_call("c2", "confirm", &json!({"city": "Rome"})),
        Scripted::new().text("Confirmed."),
    ]);
    let agent = LlmAgent::builder("a", model)
        .tool(forever(&dropped))
        .tool(confirm())
        .store(bidi_session::SqliteStore::open(&db).await.unwrap())
        .build();
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("remote"));
    let mut stream = execute(&mut conn, user("go")).await.unwrap();
    while stream.next().await.unwrap().unwrap().kind() != "tool_execution_delta" {}
    drop(stream);
    drop(conn); // dropping the connection cancels it
    let saved = settled(&*store, "remote").await;
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(saved.status, Status::AwaitingToolExecution);
    assert_eq!(saved.pending_tool_calls.len(), 1);
    assert_eq!(saved.pending_tool_calls[0].id, "c2");
    assert!(
        matches!(saved.messages.last(), Some(Message::ToolResult(r)) if r.tool_call_id == "c1" && r.is_error)
    );

    // Resumed on a new connection with the remote result.
    let mut conn = agent.connect(AgentInit::new().session_id("remote"));
    let (_, result) = run(
        &mut conn,
        TurnInput::ToolResults(vec![result_for("c2", "confirm")]),
    )
    .await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let Some(Message::Assistant(last)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(last.text(), "Confirmed.");
}
