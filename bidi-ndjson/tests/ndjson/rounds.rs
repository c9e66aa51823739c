//! Rounds with handlers against real agents.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bidi_ndjson::{Approval, Command, Error, Message, Progress, Prompt, PromptFormat, Question};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::support::{agent, bash};

#[tokio::test]
async fn the_origins_shape_a_question_answered_then_the_result() {
    // The origin's own integration agent: read the prompt, ask, read the reply, finish.
    let mut child = bash(
        r#"read prompt; echo '{"type":"question","question":"Approve?"}'; read response; echo '{"type":"result","text":"completed","prompt":"'"$prompt"'","response":'"$response"'}'"#,
    )
    .spawn()
    .await
    .unwrap();
    let result = child
        .listen("ship it")
        .on("question", |q: Question| async move {
            assert_eq!(q.question, "Approve?");
            assert_eq!(q.id, None, "the origin's questions have no id");
            Some("yes")
        })
        .await
        .unwrap();
    assert_eq!(result["text"], "completed");
    assert_eq!(result["prompt"], "ship it");
    // Without an id, the reply names the message by its type only.
    assert_eq!(
        result["response"],
        json!({"type": "response", "in_reply_to": "question", "value": "yes"})
    );
}

#[derive(Debug, Deserialize)]
struct Ingest {
    phase: String,
    turn: u64,
}

#[tokio::test]
async fn two_rounds_on_one_process_with_typed_untyped_and_id_correlated_replies() {
    let mut child = agent("supervised.sh").spawn().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    for (round, approve) in [(1, "yes"), (2, "no")] {
        let log = Arc::clone(&seen);
        let listened = child
            .listen(format!("feature {round}"))
            .on("progress", move |progress: Ingest| {
                log.lock()
                    .unwrap()
                    .push(format!("{}:{}", progress.phase, progress.turn));
                async {}
            })
            .on("question", |question: Map<String, Value>| async move {
                assert_eq!(question["id"], format!("session-{round}-q1"));
                assert_eq!(question["kind"], "design");
                Some(json!("safe"))
            })
            .on("approval", move |approval: Approval| async move {
                assert_eq!(approval.risk_level.as_deref(), Some("medium"));
                Ok::<_, std::io::Error>(Some(approve))
            })
            .await;
        if round == 1 {
            let result = listened.unwrap();
            assert_eq!(result["text"], "session 1 complete");
            // The agent echoes the reply it read: it names the question by its id too.
            assert_eq!(
                result["answer"],
                json!({"type": "response", "in_reply_to": "question", "in_reply_to_id": "session-1-q1", "value": "safe"})
            );
        } else {
            let Err(Error::Agent { message, fields }) = listened else {
                panic!("a rejected round is the agent's error: {listened:?}");
            };
            assert_eq!(message, "session 2 rejected by supervisor");
            assert_eq!(fields["message"], message);
        }
    }
    assert_eq!(*seen.lock().unwrap(), ["ingest:1", "ingest:2"]);
    let status = child.close(Duration::from_secs(5)).await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn unhandled_messages_are_reported_and_questions_still_answered() {
    let mut child = agent("supervised.sh")
        .default_reply("approval", json!("yes"))
        .spawn()
        .await
        .unwrap();
    let mut unhandled = Vec::new();
    let result = child
        .listen("anything")
        .on_unhandled(|message: &Message, reply: Option<&Value>| {
            unhandled.push((message.kind.clone(), reply.cloned()));
        })
        .await
        .unwrap();
    // Nobody handles anything, and nothing deadlocks: the question got the default "" and
    // the approval the "yes" configured.
    assert_eq!(result["text"], "session 1 complete");
    assert_eq!(result["answer"]["value"], "");
    assert_eq!(
        unhandled,
        [
            ("progress".to_owned(), None),
            ("question".to_owned(), Some(json!(""))),
            ("approval".to_owned(), Some(json!("yes"))),
        ]
    );
}

#[tokio::test]
async fn custom_types_are_dispatched_by_name_and_plain_lines_are_results() {
    let mut child = bash(
        r#"read prompt
echo '{"type":"diff","file":"a.rs","lines":3}'
echo
echo 'all done, no JSON here'"#,
    )
    .spawn()
    .await
    .unwrap();
    #[derive(Deserialize)]
    struct Diff {
        file: String,
        lines: u32,
    }
    let mut diffs = Vec::new();
    let result = child
        .listen("go")
        .on("diff", |diff: Diff| {
            diffs.push((diff.file, diff.lines));
            async {}
        })
        .await
        .unwrap();
    assert_eq!(diffs, [("a.rs".to_owned(), 3)]);
    assert_eq!(
        result,
        *json!({"text": "all done, no JSON here"})
            .as_object()
            .unwrap()
    );
}

#[tokio::test]
async fn plain_lines_can_be_logs_instead() {
    let mut child = bash(
        r#"read prompt
echo 'starting up...'
echo '{"type":"result","text":"ok"}'"#,
    )
    .plain_text_as("log")
    .spawn()
    .await
    .unwrap();
    let mut logs = Vec::new();
    let result = child
        .listen("go")
        .on("log", |log: Map<String, Value>| {
            logs.push(log["message"].clone());
            async {}
        })
        .await
        .unwrap();
    assert_eq!(logs, [json!("starting up...")]);
    assert_eq!(result["text"], "ok");
}

#[tokio::test]
async fn a_handler_error_or_a_message_that_does_not_fit_ends_the_round() {
    let script = r#"read prompt
echo '{"type":"question","question":"?"}'
read reply
echo '{"type":"result"}'"#;
    let mut child = bash(script).spawn().await.unwrap();
    let failed = child
        .listen("go")
        .on("question", |_: Question| async {
            Err::<Option<String>, _>("the model is down")
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&failed, Error::Handler { kind, source } if kind == "question" && source.to_string() == "the model is down"),
        "{failed:?}"
    );

    let mut child =
        bash(r#"read prompt; echo '{"type":"progress","message":"m","percent":"lots"}'"#)
            .spawn()
            .await
            .unwrap();
    let failed = child
        .listen("go")
        .on("progress", |_: Progress| async {})
        .await
        .unwrap_err();
    let Error::InvalidMessage { kind, path, reason } = &failed else {
        panic!("{failed:?}");
    };
    assert_eq!((kind.as_str(), path.as_str()), ("progress", "/percent"));
    assert!(reason.contains("f64"), "{reason}");
    assert!(failed.to_string().contains("progress"), "{failed}");
}

#[tokio::test]
async fn the_handshake_and_json_prompts() {
    let script = r#"read -r init
echo '{"type":"init_ack"}'
read -r prompt
echo '{"type":"result","init":'"$init"',"prompt":'"$prompt"'}'"#;
    let mut child = bash(script)
        .init(json!({"work_dir": "/project", "allowed_tools": ["read"]}))
        .prompt_format(PromptFormat::Json)
        .spawn()
        .await
        .unwrap();
    let result = child
        .listen(Prompt::new("two\nlines").context(json!({"branch": "main"})))
        .await
        .unwrap();
    assert_eq!(
        result["init"],
        json!({"type": "init", "params": {"work_dir": "/project", "allowed_tools": ["read"]}})
    );
    assert_eq!(
        result["prompt"],
        json!({"prompt": "two\nlines", "context": {"branch": "main"}})
    );

    let refused = bash(r#"read init; echo '{"type":"error","message":"unknown model"}'"#)
        .init(json!({"model": "x"}))
        .spawn()
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::Init { message } if message == "unknown model"),
        "{refused:?}"
    );

    // A text prompt cannot carry a line break: refused before anything is written.
    let mut child = bash("read prompt; echo \"$prompt\"").spawn().await.unwrap();
    let refused = child.listen("two\nlines").await.unwrap_err();
    assert!(matches!(refused, Error::InvalidPrompt(_)), "{refused:?}");
    assert_eq!(child.listen("one line").await.unwrap()["text"], "one line");
}

#[tokio::test]
async fn a_python_agent_with_ids_and_its_own_types() {
    let script = r#"
import json, sys
prompt = sys.stdin.readline().strip()
def send(message):
    print(json.dumps(message), flush=True)
send({"type": "progress", "message": "planning " + prompt, "percent": 5})
send({"type": "question", "id": "q-1", "question": "Which database?", "options": ["sqlite", "postgres"]})
reply = json.loads(sys.stdin.readline())
send({"type": "metrics", "tokens": 1234})
send({"type": "result", "text": "chose " + reply["value"], "reply_to": reply.get("in_reply_to_id")})
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .spawn()
        .await
        .unwrap();
    let mut tokens = 0;
    let result = child
        .listen("a blog")
        .on("question", |q: Question| async move {
            Some(q.options[1].clone())
        })
        .on("metrics", |m: Map<String, Value>| {
            tokens = m["tokens"].as_u64().unwrap();
            async {}
        })
        .await
        .unwrap();
    assert_eq!(tokens, 1234);
    assert_eq!(result["text"], "chose postgres");
    assert_eq!(result["reply_to"], "q-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_at_once_keep_to_their_own_answers() {
    let script = r#"read prompt
echo '{"type":"question","id":"q","question":"'"$prompt"'"}'
read reply
echo '{"type":"result","reply":'"$reply"'}'"#;
    let rounds = (0..24).map(|n| {
        tokio::spawn(async move {
            let mut child = bash(script).spawn().await.unwrap();
            let result = child
                .listen(format!("agent-{n}"))
                .on("question", |q: Question| async move {
                    // Each answer is made from the question its own agent asked.
                    Some(format!("answer for {}", q.question))
                })
                .await
                .unwrap();
            (n, result["reply"]["value"].clone())
        })
    });
    for round in futures_util::future::join_all(rounds).await {
        let (n, value) = round.unwrap();
        assert_eq!(value, format!("answer for agent-{n}"));
    }
}

#[tokio::test]
async fn a_round_records_its_events_on_the_current_span() {
    use opentelemetry::trace::{
        FutureExt as _, TraceContextExt as _, Tracer as _, TracerProvider as _,
    };
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let cx = opentelemetry::Context::current_with_span(provider.tracer("test").start("supervise"));
    let mut child = agent("supervised.sh").spawn().await.unwrap();
    child
        .listen("x")
        .on("approval", |_: Approval| async { Some("yes") })
        .await
        .unwrap();
    let failed = async { child.listen("y").await }
        .with_context(cx.clone())
        .await;
    assert!(failed.is_err(), "the default approval is no");
    cx.span().end();
    let spans = exporter.get_finished_spans().unwrap();
    let events: Vec<String> = spans[0]
        .events
        .iter()
        .map(|event| {
            let kind = event
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == "ndjson.type")
                .map(|kv| format!(" {}", kv.value))
                .unwrap_or_default();
            format!("{}{kind}", event.name)
        })
        .collect();
    // Only the second round ran under the span.
    assert_eq!(
        events,
        [
            "listen:start",
            "listen:unhandled progress",
            "listen:unhandled question",
            "listen:unhandled approval",
            "listen:error"
        ]
    );
}

#[tokio::test]
async fn a_message_that_does_not_fit_as_a_whole_names_no_empty_path() {
    let mut child = bash(r#"read prompt; echo '{"type":"log","level":"info"}'"#)
        .spawn()
        .await
        .unwrap();
    let failed = child
        .listen("go")
        .on("log", |_: bidi_ndjson::Log| async {})
        .await
        .unwrap_err();
    let Error::InvalidMessage { kind, path, reason } = &failed else {
        panic!("{failed:?}");
    };
    // The pointer of the whole message is the empty one; the text says "the message".
    assert_eq!((kind.as_str(), path.as_str()), ("log", ""));
    assert!(reason.contains("missing field `message`"), "{reason}");
    let text = failed.to_string();
    assert!(
        text.starts_with("the agent's `log` message does not fit: missing field `message`"),
        "{text}"
    );
}
