//! A round that fails mid-way leaves the process in step for the next round, or says it
//! cannot.

use std::time::Duration;

use bidi_ndjson::{Error, Log, Message, Question, Reply};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{bash, gone};

/// Per prompt: a question (with a line too long to read first when the prompt is `flood`),
/// then the result naming the prompt and the reply's value.
const FLOODING: &str = r#"while read -r prompt; do
  if [ "$prompt" = flood ]; then head -c 10485760 /dev/zero | tr '\0' x; echo; fi
  echo '{"type":"question","question":"which?"}'
  read -r reply
  echo '{"type":"result","text":"after '"$prompt"'","reply":'"$reply"'}'
done"#;

#[tokio::test]
async fn a_line_too_long_fails_its_round_and_the_next_round_is_good() {
    let mut child = bash(FLOODING)
        .max_line_bytes(64 * 1024)
        .spawn()
        .await
        .unwrap();
    let mut drained = Vec::new();
    let error = child
        .listen("flood")
        .on("question", |_: Question| async { Some("mine") })
        .on_unhandled(|message: &Message, reply: Option<&Value>| {
            drained.push((message.clone(), reply.cloned()));
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::LineTooLong {
                len: 10_485_760,
                limit: 65_536
            }
        ),
        "{error:?}"
    );
    // The long line was skipped whole; the rest of the round was read to its end, its
    // question answered with the default reply, its result set aside, not lost.
    assert_eq!(drained.len(), 2, "{drained:?}");
    assert_eq!(drained[0].0.kind, "question");
    assert_eq!(drained[0].1, Some(json!("")));
    assert_eq!(drained[1].0.fields["text"], "after flood");

    let result = child
        .listen("calm")
        .on("question", |_: Question| async { Some("mine") })
        .await
        .unwrap();
    assert_eq!(result["text"], "after calm");
    assert_eq!(result["reply"]["value"], "mine");
}

#[derive(Debug, Deserialize)]
struct Note {
    #[allow(dead_code)]
    author: String,
}

#[tokio::test]
async fn a_plain_line_its_handler_refuses_fails_its_round_and_the_next_round_is_good() {
    let mut child = bash(
        r#"while read -r prompt; do
  echo "thinking about $prompt"
  echo '{"type":"result","text":"done with '"$prompt"'"}'
done"#,
    )
    .plain_text_as("note")
    .spawn()
    .await
    .unwrap();
    let error = child
        .listen("one")
        .on("note", |_: Note| async {})
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::InvalidMessage { kind, .. } if kind == "note"),
        "{error:?}"
    );
    let result = child.listen("two").await.unwrap();
    assert_eq!(result["text"], "done with two");
}

#[tokio::test]
async fn plain_lines_taken_as_logs_fit_the_log_type_round_after_round() {
    let mut child = bash(
        r#"while read -r prompt; do
  echo "starting $prompt..."
  echo '{"type":"result","text":"done with '"$prompt"'"}'
done"#,
    )
    .plain_text_as("log")
    .spawn()
    .await
    .unwrap();
    for prompt in ["one", "two"] {
        let mut logs = Vec::new();
        let result = child
            .listen(prompt)
            .on("log", |log: Log| {
                logs.push((log.level, log.message));
                async {}
            })
            .await
            .unwrap();
        assert_eq!(logs, [(None, format!("starting {prompt}..."))]);
        assert_eq!(result["text"], format!("done with {prompt}"));
    }
}

#[tokio::test]
async fn a_failed_round_the_agent_never_ends_is_killed_at_the_session_timeout() {
    let mut child = bash(
        r#"read -r prompt; echo '{"type":"question","question":"?","options":"not a list"}'; read -r reply; sleep 1000"#,
    )
    // Real time: long enough for the agent to ask, however slow the machine.
    .session_timeout(Duration::from_secs(5))
    .spawn()
    .await
    .unwrap();
    let pid = child.id().unwrap();
    let error = child
        .listen("go")
        .on("question", |_: Question| async { Some("a") })
        .await
        .unwrap_err();
    // The round's own error, not the timeout's: the round failed first.
    assert!(
        matches!(&error, Error::InvalidMessage { path, .. } if path == "/options"),
        "{error:?}"
    );
    assert!(
        gone(pid).await,
        "the agent stuck in its failed round lives on"
    );
}

#[tokio::test]
async fn a_round_dropped_mid_way_leaves_no_next_round_to_fall_out_of_step() {
    let mut child = bash(
        r#"while read -r prompt; do
  echo '{"type":"question","id":"q","question":"?"}'
  read -r reply
  echo '{"type":"result","prompt":"'"$prompt"'","reply":'"$reply"'}'
done"#,
    )
    .spawn()
    .await
    .unwrap();
    // The caller gives up on the round once the question is asked (its handler never answers).
    let (asked, on_asked) = tokio::sync::oneshot::channel();
    let mut asked = Some(asked);
    let round = child.listen("one").on("question", move |_: Question| {
        if let Some(asked) = asked.take() {
            let _ = asked.send(());
        }
        std::future::pending::<Option<String>>()
    });
    tokio::select! {
        ended = round => panic!("the round cannot end: {ended:?}"),
        _ = on_asked => {}
    }
    // The agent still waits for its answer: a new round is refused, its prompt not written
    // (it would be taken as the answer).
    let refused = child.listen("two").await;
    assert!(matches!(refused, Err(Error::OutOfStep)), "{refused:?}");
    assert!(refused.unwrap_err().to_string().contains("new process"));

    // The old round can still be read to its end by hand; then rounds go on.
    let answer = Reply {
        in_reply_to: "question".to_owned(),
        in_reply_to_id: Some(json!("q")),
        value: json!("late"),
    };
    child.reply(&answer).await.unwrap();
    let ended = child.next().await.unwrap();
    assert_eq!(ended.kind, "result");
    assert_eq!(
        (&ended.fields["prompt"], &ended.fields["reply"]["value"]),
        (&json!("one"), &json!("late"))
    );
    let result = child
        .listen("three")
        .on("question", |_: Question| async { Some("now") })
        .await
        .unwrap();
    assert_eq!(
        (&result["prompt"], &result["reply"]["value"]),
        (&json!("three"), &json!("now"))
    );
}
