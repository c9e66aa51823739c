//! A2A 1.0's `ListTasks` requirements (CORE-LIST-*).

use super::*;

/// The ids of a `ListTasks` answer's tasks.
fn ids(listed: &Value) -> Vec<String> {
    let tasks = listed["tasks"].as_array().unwrap();
    tasks
        .iter()
        .map(|task| task["id"].as_str().unwrap().to_owned())
        .collect()
}

/// CORE-LIST-001: `ListTasks` returns only the tasks the caller may see.
#[tokio::test]
async fn core_list_001_list_tasks_returns_only_the_callers_tasks() {
    for bind in BINDINGS {
        core_list_001_list_tasks_returns_only_the_callers_tasks_over(bind).await;
    }
}

async fn core_list_001_list_tasks_returns_only_the_callers_tasks_over(bind: Bind) {
    let base = serve().await;
    let (alice, bob) = (
        Caller::over(&base, "alice", bind),
        Caller::over(&base, "bob", bind),
    );
    let hers = alice.send("hi", None).await;
    let his = bob.send("hello", None).await;
    assert_eq!(
        ids(&alice.list(json!({})).await),
        [hers["id"].as_str().unwrap()]
    );
    assert_eq!(
        ids(&bob.list(json!({})).await),
        [his["id"].as_str().unwrap()]
    );
    // Another's context lists nothing.
    let context = his["contextId"].clone();
    let theirs = alice.list(json!({"contextId": context})).await;
    assert_eq!(
        (theirs["tasks"].clone(), theirs["totalSize"].clone()),
        (json!([]), json!(0))
    );
    // Nor does another's task read.
    let got = alice.call("GetTask", json!({"id": his["id"]})).await;
    assert_eq!(got["error"]["code"], -32001, "{got}");
}

/// CORE-LIST-002 and CORE-LIST-004: `ListTasks` pages with a cursor (`pageToken` /
/// `nextPageToken`), `nextPageToken` always present and empty on the last page.
#[tokio::test]
async fn core_list_002_004_list_tasks_pages_with_a_cursor_to_an_empty_token() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        let first = alice.send("one", None).await;
        let context = first["contextId"].as_str().unwrap();
        for text in ["two", "three", "four", "five"] {
            alice.send(text, Some(context)).await;
        }
        let other = alice.send("elsewhere", None).await;

        let all = alice.list(json!({"pageSize": 100})).await;
        assert_eq!(
            (all["totalSize"].clone(), all["nextPageToken"].clone()),
            (json!(6), json!(""))
        );
        let mut paged = Vec::new();
        let mut token = String::new();
        loop {
            let page = alice.list(json!({"pageSize": 2, "pageToken": token})).await;
            assert_eq!(
                (page["pageSize"].clone(), page["totalSize"].clone()),
                (json!(2), json!(6))
            );
            paged.extend(ids(&page));
            token = page["nextPageToken"].as_str().unwrap().to_owned();
            if token.is_empty() {
                break;
            }
            assert!(paged.len() < 6, "a page after the last: {page}");
        }
        assert_eq!(paged, ids(&all), "the pages are the list, in its order");
        // A context's tasks alone, paged the same way.
        let theirs = alice
            .list(json!({"contextId": context, "pageSize": 3}))
            .await;
        assert_eq!(
            (theirs["totalSize"].clone(), ids(&theirs).len()),
            (json!(5), 3)
        );
        assert!(!ids(&theirs).contains(&other["id"].as_str().unwrap().to_owned()));

        let bad = alice
            .call("ListTasks", json!({"pageToken": "not-one"}))
            .await;
        assert_eq!(bad["error"]["code"], -32602, "{bad}");
        let bad = alice.call("ListTasks", json!({"pageSize": -1})).await;
        assert_eq!(bad["error"]["code"], -32602, "{bad}");
    })
    .await;
}

/// CORE-LIST-003: tasks come sorted by their status timestamp, the latest first; a filter by
/// state and by time keeps to them.
#[tokio::test]
async fn core_list_003_list_tasks_sorts_by_status_timestamp_descending() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        let mut sent = Vec::new();
        for text in ["a", "b", "c"] {
            sent.push(
                alice.send(text, None).await["id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
            // Statuses a millisecond apart at least, so that the order is the sending's.
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let all = alice.list(json!({})).await;
        sent.reverse();
        assert_eq!(ids(&all), sent);
        let stamps: Vec<&str> = all["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|task| task["status"]["timestamp"].as_str().unwrap())
            .collect();
        assert!(
            stamps.windows(2).all(|pair| pair[0] >= pair[1]),
            "{stamps:?}"
        );

        let after = alice.list(json!({"statusTimestampAfter": stamps[1]})).await;
        assert_eq!(ids(&after), sent[..2]);
        let completed = alice.list(json!({"status": "TASK_STATE_COMPLETED"})).await;
        assert_eq!(ids(&completed), sent);
        let working = alice.list(json!({"status": "TASK_STATE_WORKING"})).await;
        assert_eq!(working["tasks"], json!([]));
        let bad = alice.call("ListTasks", json!({"status": "DONE"})).await;
        assert_eq!(bad["error"]["code"], -32602, "{bad}");
    })
    .await;
}

/// CORE-LIST-005: without `includeArtifacts`, a listed task has no `artifacts` field at all.
#[tokio::test]
async fn core_list_005_list_tasks_omits_artifacts_unless_asked() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        alice.send("hi", None).await;
        for params in [json!({}), json!({"includeArtifacts": false})] {
            let listed = alice.list(params).await;
            let task = &listed["tasks"][0];
            assert!(task.get("artifacts").is_none(), "{task}");
            assert!(task.get("history").is_some(), "{task}");
        }
        let listed = alice
            .list(json!({"includeArtifacts": true, "historyLength": 0}))
            .await;
        let task = &listed["tasks"][0];
        assert_eq!(
            task["artifacts"][0]["parts"][0]["text"], "answer-1",
            "{task}"
        );
        assert!(
            task.get("history").is_none(),
            "historyLength 0 omits it: {task}"
        );
        let memo = alice
            .raw(
                "memo",
                Some("1.0"),
                &json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}),
            )
            .await;
        assert_eq!(memo["error"]["code"], -32004, "{memo}");
    })
    .await;
}
