//! The agent as a flow: registered, connected through JSON, a round a turn.

use bidi_flow::Registry;
use bidi_ndjson::{Command, Exit, Input, Message};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::support::{agent, bash, gone};

async fn turn(conn: &mut bidi_flow::JsonConnection) -> Vec<Value> {
    let mut chunks = Vec::new();
    let mut responses = conn.responses();
    while let Some(chunk) = responses.next().await {
        chunks.push(chunk.unwrap());
    }
    chunks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_are_turns_and_replies_are_inputs() {
    let registry = Registry::new();
    registry
        .register(agent("supervised.sh").flow("supervised"))
        .unwrap();
    let key = "/ndjson/supervised";
    assert!(registry.actions().iter().any(|action| action.key == key));

    let (input, mut output) = registry
        .connect_json(key, json!(null))
        .unwrap()
        .into_split();
    input
        .send(json!({"type": "prompt", "prompt": "feature 1"}))
        .await
        .unwrap();
    // A second prompt waits for the first round.
    input
        .send(json!({"type": "prompt", "prompt": "feature 2"}))
        .await
        .unwrap();
    for (round, approve) in [(1, "yes"), (2, "no")] {
        let mut kinds = Vec::new();
        let mut responses = output.responses();
        while let Some(chunk) = responses.next().await {
            let message: Message = serde_json::from_value(chunk.unwrap()).unwrap();
            kinds.push(message.kind.clone());
            let value = match message.kind.as_str() {
                "question" => json!("safe"),
                "approval" => json!(approve),
                _ => continue,
            };
            let reply = json!({"type": "response", "in_reply_to": message.kind, "in_reply_to_id": message.fields["id"], "value": value});
            input.send(reply).await.unwrap();
        }
        let last = if round == 1 { "result" } else { "error" };
        assert_eq!(
            kinds,
            ["progress", "question", "approval", last],
            "round {round}"
        );
    }
    input.close();
    let exit: Exit = serde_json::from_value(output.output().await.unwrap()).unwrap();
    assert_eq!((exit.rounds, exit.code), (2, Some(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_are_refused_and_the_connection_goes_on() {
    let registry = Registry::new();
    registry
        .register(bash("while read line; do echo \"$line\"; done").flow("echo"))
        .unwrap();
    let mut conn = registry.connect_json("/ndjson/echo", json!(null)).unwrap();
    let refused = conn
        .send(json!({"type": "shout", "prompt": "x"}))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("shout"), "{refused}");
    conn.send(json!({"type": "prompt", "prompt": "hello"}))
        .await
        .unwrap();
    let chunks = turn(&mut conn).await;
    assert_eq!(chunks, [json!({"type": "result", "text": "hello"})]);
    conn.close();
    assert_eq!(conn.output().await.unwrap()["rounds"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_fails_the_connection_and_a_cancel_kills_it() {
    let registry = Registry::new();
    registry
        .register(bash("read p; echo 'dying' >&2; exit 9").flow("dies"))
        .unwrap();
    let mut conn = registry.connect_json("/ndjson/dies", json!(null)).unwrap();
    conn.send(json!({"type": "prompt", "prompt": "x"}))
        .await
        .unwrap();
    // The turn ends with the connection's failure, which says how the agent went.
    let chunks: Vec<_> = conn.responses().collect().await;
    let [Err(error)] = &chunks[..] else {
        panic!("{chunks:?}");
    };
    assert!(
        error.to_string().contains("exited without a result"),
        "{error}"
    );
    assert!(error.to_string().contains("dying"), "{error}");
    assert!(conn.output().await.is_err());

    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    registry
        .register(
            bash(&format!(
                "echo $$ > {}; read p; sleep 1000",
                pidfile.display()
            ))
            .flow("sleeps"),
        )
        .unwrap();
    let conn = registry
        .connect_json("/ndjson/sleeps", json!(null))
        .unwrap();
    conn.send(json!({"type": "prompt", "prompt": "x"}))
        .await
        .unwrap();
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pidfile)
            && let Ok(pid) = text.trim().parse::<u32>()
        {
            break pid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    conn.cancel();
    assert!(conn.output().await.is_err());
    assert!(
        gone(pid).await,
        "the cancelled connection's agent is still there"
    );
}

#[test]
fn inputs_are_the_wire_the_agent_reads() {
    let input: Input = serde_json::from_value(
        json!({"type": "response", "in_reply_to": "approval", "value": "yes"}),
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(&input).unwrap(),
        json!({"type": "response", "in_reply_to": "approval", "value": "yes"})
    );
    let _ = Command::new("true");
}
