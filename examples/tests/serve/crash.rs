//! A `serve` process killed with SIGKILL mid-turn, another on the same PostgreSQL database:
//! an attached turn expires when its lease lapses; a detached one is taken over and run to its
//! end. Every wire reads the same status throughout.

use serde_json::json;

use super::{Serve, complete, conversation, events, pairs, postgres};

/// A process killed with SIGKILL mid-turn: while the turn's lease holds, every wire reads the
/// turn as running (the execute wire's session, A2A's task) and another process refuses the
/// session; once it lapses, the turn is over (A2A: failed, its process gone), the session is
/// what it was before the turn, and another process goes on with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_process_is_killed_expires_and_its_session_goes_on_elsewhere() {
    let (_server, url) = postgres().await;
    let a = Serve::postgres(&url).await;
    let b = Serve::postgres(&url).await;
    // A starts a slow turn (the model thinks for three seconds) and is killed in it.
    let (id, head, _slow) = a.slow_turn().await;
    let first = head.split("\n\n").next().unwrap();
    let (_, started) = &events(&format!("{first}\n\n"))[0];
    assert_eq!(started["type"], "session_start", "{head}");
    let task = started["snapshotId"].as_str().unwrap().to_owned();
    a.kill().await;

    // Its lease holds: running on both wires, and B refuses the session.
    let session = b.session(&id).await;
    assert_eq!(session["status"], "running", "{session}");
    assert_eq!(conversation(&session).last().unwrap().1, "answer slowly");
    assert_eq!(
        b.a2a_task(&task).await["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(genkit_snapshot(&b, &task).await["status"], "pending");
    let refused = b
        .execute(&json!({"sessionId": id, "input": {"content": "me too"}}))
        .await;
    assert_eq!(refused.status().as_u16(), 409, "{}", b.stderr());

    // The lease (30 s) lapses: the turn is over, and the session is as it was before it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(180);
    let session = loop {
        let session = b.session(&id).await;
        if session["status"] != "running" {
            break session;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running: {session}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(session["status"], "completed", "{session}");
    let before = [("user", "hello"), ("assistant", "You said: hello")];
    assert_eq!(conversation(&session), pairs(&before));
    let over = b.a2a_task(&task).await;
    assert_eq!(over["status"]["state"], "TASK_STATE_FAILED", "{over}");
    assert!(
        over["status"]["message"].to_string().contains("went away"),
        "{over}"
    );
    assert_eq!(genkit_snapshot(&b, &task).await["status"], "expired");

    // B goes on with the session.
    let next = b
        .execute(&json!({"sessionId": id, "input": {"content": "me too"}}))
        .await;
    assert_eq!(next.status().as_u16(), 200, "{}", b.stderr());
    assert_eq!(
        complete(&events(&next.text().await.unwrap()))["status"],
        "completed"
    );
    let after = [
        ("user", "hello"),
        ("assistant", "You said: hello"),
        ("user", "me too"),
        ("assistant", "You said: me too"),
    ];
    assert_eq!(conversation(&b.session(&id).await), pairs(&after));
}

/// A process killed with SIGKILL in a detached turn (`"detach": true`): the turn stays
/// `running` on every wire while another process waits for its owner's silence (two thirds of
/// the 30 s lease), then that process takes the turn over and runs it again from its start:
/// the same snapshot (the A2A task) ends `completed`, with the answer, and nothing is lost or
/// doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_turn_whose_process_is_killed_is_taken_over_and_finished_elsewhere() {
    let (_server, url) = postgres().await;
    let a = Serve::postgres(&url).await;
    let b = Serve::postgres(&url).await;
    let id = a.hello().await;
    let detached = a
        .execute(&json!({"sessionId": id, "input": {"content": "answer slowly"}, "detach": true}))
        .await;
    assert_eq!(detached.status().as_u16(), 202, "{}", a.stderr());
    let started: serde_json::Value = detached.json().await.unwrap();
    let task = started["snapshotId"].as_str().unwrap().to_owned();
    // The model thinks for three seconds: A dies in its turn.
    a.kill().await;

    // Running on every wire until B has taken it over and finished it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(180);
    let session = loop {
        let session = b.session(&id).await;
        let task_state = b.a2a_task(&task).await["status"]["state"].clone();
        let snapshot = genkit_snapshot(&b, &task).await["status"].clone();
        let running = [
            session["status"] == "running",
            task_state == "TASK_STATE_WORKING",
            snapshot == "pending",
        ];
        if running == [false; 3] {
            break session;
        }
        // Every wire reads it running, unless it ended between two of the reads.
        if running == [true; 3] {
            assert_eq!(conversation(&session).last().unwrap().1, "answer slowly");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never taken over: {session}, {task_state}, {snapshot}; B's stderr: {}",
            b.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(session["status"], "completed", "{session}");
    let after = [
        ("user", "hello"),
        ("assistant", "You said: hello"),
        ("user", "answer slowly"),
        ("assistant", "You said: answer slowly"),
    ];
    assert_eq!(conversation(&session), pairs(&after));
    let over = b.a2a_task(&task).await;
    assert_eq!(over["status"]["state"], "TASK_STATE_COMPLETED", "{over}");
    assert_eq!(genkit_snapshot(&b, &task).await["status"], "completed");

    // The session goes on, on B.
    let next = b
        .execute(&json!({"sessionId": id, "input": {"content": "thanks"}}))
        .await;
    assert_eq!(next.status().as_u16(), 200, "{}", b.stderr());
    assert_eq!(
        complete(&events(&next.text().await.unwrap()))["status"],
        "completed"
    );
}

/// Genkit's `getSnapshot` of snapshot `id` on `serve`: the snapshot.
async fn genkit_snapshot(serve: &Serve, id: &str) -> serde_json::Value {
    let response = reqwest::Client::new()
        .post(serve.url("/agent/assistant/genkit/getSnapshot"))
        .json(&json!({"data": {"snapshotId": id}}))
        .send()
        .await
        .unwrap();
    let mut answer: serde_json::Value = response.json().await.unwrap();
    answer["result"].take()
}
