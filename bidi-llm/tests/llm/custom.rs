//! Custom agents: a function answers in the model's place, with the session's custom state and
//! artifacts; the execution around it is an agent's (events, snapshot, cancellation, failure).

use bidi_agent::{AgentInit, Artifact};
use bidi_llm::{AgentEvent, Code, CustomTurn, LlmAgent, Message, Status, StopReason, execute};
use bidi_session::Status as SnapshotStatus;
use futures_util::StreamExt;
use serde_json::json;

use crate::support::{kinds, run, saved, user};

#[tokio::test]
async fn a_custom_turn_streams_its_edits_in_order_and_keeps_them() {
    let agent = LlmAgent::custom("c", |mut turn: CustomTurn| async move {
        assert_eq!(turn.text(), "go");
        turn.say("thinking… ");
        turn.set_custom(json!({"step": 1}));
        turn.artifact(Artifact::new("doc", [json!({"text": "v1"})]));
        turn.update_custom(|custom| custom["step"] = json!(2));
        Ok("done".to_owned())
    })
    .build();
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("s"));
    let (events, result) = run(&mut conn, user("go")).await;
    assert_eq!(result.status, Status::Completed);
    assert_eq!(
        kinds(&events),
        [
            "session_start",
            "message_start",
            "message_end",
            "message_start",
            "text_start",
            "text_delta",
            "custom_update",
            "artifact_update",
            "custom_update",
            "text_delta",
            "text_end",
            "message_end",
            "session_end",
            "execute_complete",
        ]
    );
    let (state, entry) = saved(&*store, "s").await;
    assert_eq!(entry.status, SnapshotStatus::Completed);
    assert_eq!(state.custom, json!({"step": 2}));
    assert_eq!(
        state.artifacts,
        [Artifact::new("doc", [json!({"text": "v1"})])]
    );
    let [Message::User(_), Message::Assistant(answer)] = &state.messages[..] else {
        panic!("{state:?}")
    };
    assert_eq!(answer.text(), "thinking… done");
}

#[tokio::test]
async fn a_failing_custom_turn_fails_the_execution_with_its_message() {
    let agent = LlmAgent::custom("c", |mut turn: CustomTurn| async move {
        turn.set_custom(json!({"kept": true}));
        turn.say("half");
        Err("intentional failure".into())
    })
    .build();
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("s"));
    let (events, result) = run(&mut conn, user("go")).await;
    assert_eq!(result.status, Status::Error);
    let failure = result.error.unwrap();
    assert_eq!(failure.code, Code::Model);
    assert_eq!(failure.error, "intentional failure");
    assert!(kinds(&events).contains(&"error"));
    let (state, entry) = saved(&*store, "s").await;
    assert_eq!(entry.status, SnapshotStatus::Failed);
    assert_eq!(entry.error.unwrap()["message"], "intentional failure");
    // What it changed before it failed is kept, as a model's partial answer is.
    assert_eq!(state.custom, json!({"kept": true}));
    let Some(Message::Error(failed)) = state.messages.last() else {
        panic!("{state:?}")
    };
    let partial = failed.partial.as_ref().unwrap();
    assert_eq!(
        (partial.text().as_str(), partial.stop_reason),
        ("half", StopReason::Error)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_custom_turn_drops_its_function_and_keeps_what_it_said() {
    let agent = LlmAgent::custom("c", |turn: CustomTurn| async move {
        turn.say("so far");
        std::future::pending::<()>().await;
        Ok(String::new())
    })
    .build();
    let store = agent.agent().store().clone();
    let mut conn = agent.connect(AgentInit::new().session_id("s"));
    let mut stream = execute(&mut conn, user("go")).await.unwrap();
    while let Some(Ok(event)) = stream.next().await {
        if matches!(event, AgentEvent::TextDelta { .. }) {
            break;
        }
    }
    stream.cancel_with("stop");
    let _ = stream.collect::<Vec<_>>().await;
    let _ = conn.output().await;
    let (state, entry) = saved(&*store, "s").await;
    assert_eq!(entry.status, SnapshotStatus::Aborted);
    let Some(Message::Aborted(aborted)) = state.messages.last() else {
        panic!("{state:?}")
    };
    assert_eq!(aborted.partial.text(), "so far");
    assert_eq!(aborted.partial.stop_reason, StopReason::Aborted);
}
