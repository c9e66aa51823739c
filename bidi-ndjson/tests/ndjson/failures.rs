//! Agents that fail: silent, dying, flooding, garbled, deaf; and no zombies after any of it.

use std::time::Duration;

use bidi_ndjson::{Error, Message, Progress, Question};
use serde_json::Value;

use crate::support::{bash, dead, gone};

#[tokio::test(start_paused = true)]
async fn an_agent_that_never_answers_times_out_and_is_killed() {
    let mut child = bash("read prompt; sleep 1000")
        .message_timeout(Duration::from_secs(30))
        .spawn()
        .await
        .unwrap();
    let pid = child.id().unwrap();
    let error = child.listen("hello?").await.unwrap_err();
    assert!(
        matches!(error, Error::MessageTimeout(after) if after == Duration::from_secs(30)),
        "{error:?}"
    );
    assert!(
        gone(pid).await,
        "the silent agent was not killed and reaped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_round_over_its_session_timeout_fails_even_while_messages_come() {
    // Progress every second forever: the message timeout never fires, the session's does.
    let mut child = bash(
        r#"read prompt; while true; do echo '{"type":"progress","message":"still here"}'; sleep 1; done"#,
    )
    .message_timeout(Duration::from_secs(60))
    .session_timeout(Duration::from_secs(5))
    .spawn()
    .await
    .unwrap();
    let pid = child.id().unwrap();
    let error = child
        .listen("go")
        .on("progress", |_: Progress| async {})
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::SessionTimeout(after) if after == Duration::from_secs(5)),
        "{error:?}"
    );
    assert!(gone(pid).await);
}

#[tokio::test(start_paused = true)]
async fn a_slow_handler_counts_against_the_session_timeout() {
    let mut child = bash(r#"read prompt; echo '{"type":"question","question":"?"}'; read r"#)
        .session_timeout(Duration::from_secs(10))
        .spawn()
        .await
        .unwrap();
    let error = child
        .listen("go")
        .on("question", |_: Question| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Some("too late")
        })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::SessionTimeout(_)), "{error:?}");
}

#[tokio::test]
async fn an_agent_that_dies_mid_question_says_how_and_what_it_printed() {
    let mut child = bash(
        r#"read prompt
echo '{"type":"question","question":"RS256?"}'
echo 'panic: the upstream agent crashed' >&2
exit 3"#,
    )
    .spawn()
    .await
    .unwrap();
    let pid = child.id().unwrap();
    // Its question is answered (the write may find the agent gone), then the round fails.
    let error = child
        .listen("go")
        .on("question", |_: Question| async { Some("RS256") })
        .await
        .unwrap_err();
    let (status, stderr) = match &error {
        Error::Exited { status, stderr } | Error::Stdin { status, stderr, .. } => (status, stderr),
        other => panic!("{other:?}"),
    };
    assert_eq!(status.and_then(|s| s.code()), Some(3), "{error}");
    assert!(stderr.contains("upstream agent crashed"), "{error}");
    assert!(
        error.to_string().contains("upstream agent crashed"),
        "{error}"
    );
    assert!(gone(pid).await);
}

#[tokio::test]
async fn an_agent_that_exits_without_a_result() {
    let mut child = bash("read prompt; echo '{\"type\":\"progress\",\"message\":\"bye\"}'")
        .spawn()
        .await
        .unwrap();
    let error = child.listen("go").await.unwrap_err();
    assert!(
        matches!(&error, Error::Exited { status: Some(status), .. } if status.success()),
        "{error:?}"
    );
    assert!(error.to_string().contains("without a result"), "{error}");
}

#[tokio::test]
async fn an_agent_that_no_longer_reads_fails_the_write() {
    // It closes its stdin at once and lingers: the prompt cannot be written.
    let mut child = bash("exec 0<&-; echo 'closing my input' >&2; sleep 1000")
        .message_timeout(Duration::from_secs(60)) // a safety net: the test fails, never hangs
        .spawn()
        .await
        .unwrap();
    let pid = child.id().unwrap();
    // Once its stdin is closed, the agent has no fd 0.
    while std::path::Path::new(&format!("/proc/{pid}/fd/0")).exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let error = child.listen("anyone there?").await.unwrap_err();
    let Error::Stdin { source, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::BrokenPipe);
    // It would not exit: it was killed.
    assert!(gone(pid).await);
}

#[tokio::test]
async fn a_ten_mebibyte_line_is_refused_without_being_kept() {
    let mut child = bash(
        r#"read prompt; head -c 10485760 /dev/zero | tr '\0' 'x'; echo; echo '{"type":"result","text":"after"}'"#,
    )
    .max_line_bytes(64 * 1024)
    .spawn()
    .await
    .unwrap();
    let mut after = Vec::new();
    let error = child
        .listen("go")
        .on_unhandled(|message: &Message, _: Option<&Value>| after.push(message.clone()))
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
    // The line was skipped whole: the rest of the round is read intact (and set aside).
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].fields["text"], "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_faster_than_the_host_reads_arrives_whole_and_in_order() {
    // 100,000 messages as fast as the agent can write them; the handler yields on each, so the
    // pipe fills and the agent waits (backpressure): nothing is buffered without bound.
    let mut child = bash(
        r#"read prompt; for i in $(seq 1 100000); do echo "{\"type\":\"progress\",\"message\":\"$i\"}"; done; echo '{"type":"result"}'"#,
    )
    .spawn()
    .await
    .unwrap();
    let mut next = 1u64;
    let mut out_of_order = 0;
    child
        .listen("flood")
        .on("progress", |p: Progress| {
            if p.message != next.to_string() {
                out_of_order += 1;
            }
            next += 1;
            tokio::task::yield_now()
        })
        .await
        .unwrap();
    assert_eq!((next - 1, out_of_order), (100_000, 0));
}

#[tokio::test]
async fn garbage_is_plain_text_not_a_crash() {
    let mut child = bash(r#"read prompt; printf '\x00\xff{{{ not json ]]\n'"#)
        .spawn()
        .await
        .unwrap();
    let result = child.listen("go").await.unwrap();
    assert!(
        result["text"].as_str().unwrap().contains("not json"),
        "{result:?}"
    );
}

#[tokio::test]
async fn dropping_the_child_kills_its_whole_group_and_reaps_it() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!("sleep 1000 & echo $! > {}; wait", pids.display());
    let child = bash(&script).spawn().await.unwrap();
    let pid = child.id().unwrap();
    let grandchild = loop {
        if let Ok(text) = std::fs::read_to_string(&pids)
            && let Ok(pid) = text.trim().parse::<u32>()
        {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(child);
    assert!(gone(pid).await, "the agent is still there");
    assert!(
        dead(grandchild).await,
        "the agent's own child is still running"
    );
}

#[tokio::test]
async fn close_waits_for_the_agent_to_exit() {
    let child = bash("while read line; do :; done; exit 7")
        .spawn()
        .await
        .unwrap();
    let status = child.close(Duration::from_secs(10)).await.unwrap();
    assert_eq!(status.code(), Some(7));

    // One that ignores the end of its input is killed after the grace period.
    let child = bash("trap '' TERM; exec 0<&-; sleep 1000")
        .spawn()
        .await
        .unwrap();
    let pid = child.id().unwrap();
    let status = child.close(Duration::from_millis(300)).await.unwrap();
    assert!(!status.success());
    assert!(gone(pid).await);
}
