//! Agents that behave as Concerto's own: its example middleware agent (a bash script that reads
//! a reply's value with a regex) and its Claude Code middleware in mock mode (Python), each
//! through several rounds on one process, a failed round among them.

use std::sync::{Arc, Mutex};

use bidi_ndjson::{Approval, Error, Message, Partial, Progress, Prompt, PromptFormat, Question};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{agent, python_agent};

#[tokio::test]
async fn the_concerto_example_agent_runs_two_sessions_on_one_process() {
    // As Concerto's example program does: two rounds, the second one rejected.
    let mut child = agent("concerto_mock.sh").spawn().await.unwrap();
    let mut progress = Vec::new();
    for (session, approve) in [(1, "yes"), (2, "no")] {
        let listened = child
            .listen(format!("feature {session}"))
            .on("progress", |p: Progress| {
                progress.push(p.message);
                async {}
            })
            .on("question", move |q: Question| async move {
                // The handler sees which question it answers.
                assert_eq!(q.id, Some(json!(format!("session-{session}-q1"))));
                assert_eq!(q.kind.as_deref(), Some("design"));
                Some(q.options[0].clone())
            })
            .on("approval", move |a: Approval| async move {
                assert_eq!(a.id, Some(json!(format!("session-{session}-a1"))));
                assert!(a.description.contains("safe"), "{}", a.description);
                Some(approve)
            })
            .await;
        if session == 1 {
            let result = listened.unwrap();
            // The agent read the replies' values with its regex: they are plain strings on
            // the wire, whatever else the reply carries.
            assert_eq!(result["text"], "session 1 complete");
            assert_eq!(result["decision"], "safe");
            assert_eq!(result["prompt"], "feature 1");
        } else {
            let Err(Error::Agent { message, .. }) = listened else {
                panic!("{listened:?}");
            };
            assert_eq!(message, "session 2 rejected by supervisor");
        }
    }
    assert_eq!(
        progress,
        ["session 1: prompt received", "session 2: prompt received"]
    );
}

/// A handler's view of a question that does not fit what the agent sends (its options are
/// words, not numbers).
#[derive(Debug, Deserialize)]
struct NumberedPlan {
    #[allow(dead_code)]
    options: Vec<u32>,
}

#[tokio::test]
async fn a_question_that_does_not_fit_fails_its_round_and_the_next_round_is_good() {
    let mut child = agent("concerto_mock.sh").spawn().await.unwrap();
    let mut drained = Vec::new();
    let failed = child
        .listen("feature 1")
        .on("question", |_: NumberedPlan| async { Some("1") })
        .on_unhandled(|message: &Message, reply: Option<&Value>| {
            drained.push((message.kind.clone(), reply.cloned()));
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&failed, Error::InvalidMessage { kind, path, .. } if kind == "question" && path == "/options/0"),
        "{failed:?}"
    );
    // The rest of the failed round was read to its end: the question got the default answer,
    // so the approval came (and got its default "no"), then the agent's error.
    assert_eq!(
        drained,
        [
            ("progress".to_owned(), None),
            ("approval".to_owned(), Some(json!("no"))),
            ("error".to_owned(), None),
        ],
        "the progress before the failure is unhandled too; after it, all is drained"
    );

    let result = child
        .listen("feature 2")
        .on("question", |q: Question| async move {
            Some(q.options[0].clone())
        })
        .on("approval", |_: Approval| async { Some("yes") })
        .await
        .unwrap();
    assert_eq!(result["text"], "session 2 complete");
    assert_eq!(result["prompt"], "feature 2");
    assert_eq!(result["decision"], "safe");
}

#[tokio::test]
async fn the_claude_code_middleware_mock_through_a_failed_approval_and_on() {
    let mut child = python_agent("claude_code_mock.py")
        .prompt_format(PromptFormat::Json)
        .spawn()
        .await
        .unwrap();
    let stages = Arc::new(Mutex::new(Vec::new()));
    let chunks = Arc::new(Mutex::new(Vec::new()));

    // A round with a JSON prompt and a context; the question's answer is the guidance.
    let result = child
        .listen(Prompt::new("Add a health endpoint").context(json!({"branch": "main"})))
        .on("progress", {
            let stages = Arc::clone(&stages);
            move |p: Progress| {
                stages.lock().unwrap().push(p.stage.unwrap_or_default());
                async {}
            }
        })
        .on("question", |q: Question| async move {
            assert_eq!(q.id, Some(json!("session-1-question")));
            assert_eq!(q.options.len(), 3);
            Some(q.options[1].clone())
        })
        .on("partial", {
            let chunks = Arc::clone(&chunks);
            move |p: Partial| {
                chunks.lock().unwrap().push(p.chunk);
                async {}
            }
        })
        .await
        .unwrap();
    assert_eq!(result["session"], 1);
    assert_eq!(result["command"], "claude");
    let text = result["text"].as_str().unwrap();
    assert!(
        text.contains("Following guidance: Prioritize safety"),
        "{text}"
    );
    assert!(
        text.contains(r#"With context: {"branch": "main"}"#),
        "{text}"
    );
    assert_eq!(chunks.lock().unwrap().join("\n"), text);
    assert_eq!(
        *stages.lock().unwrap(),
        ["received_prompt", "supervisor_guidance", "invoke_claude"]
    );

    // A risky task: the approval's handler fails, so the round fails; the approval still gets
    // its default "no", and the agent ends its session with an error, read and set aside.
    let mut drained = Vec::new();
    let failed = child
        .listen("Delete the staging data")
        .on("question", |_: Question| async { Some("") })
        .on("approval", |_: Approval| async {
            Err::<Option<&str>, _>("the approver is offline")
        })
        .on_unhandled(|message: &Message, _: Option<&Value>| {
            drained.push((message.kind.clone(), message.fields.get("message").cloned()));
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&failed, Error::Handler { kind, .. } if kind == "approval"),
        "{failed:?}"
    );
    assert_eq!(
        drained.last(),
        Some(&(
            "error".to_owned(),
            Some(json!("Task rejected by supervisor approval handler"))
        ))
    );

    // The next round is the agent's next session, in step.
    let result = child
        .listen("Rename the config module")
        .on("question", |_: Question| async { Some("Proceed as-is") })
        .await
        .unwrap();
    assert_eq!(result["session"], 3);
    let text = result["text"].as_str().unwrap();
    assert!(text.contains("Rename the config module"), "{text}");
    assert!(text.contains("Following guidance: Proceed as-is"), "{text}");
}
