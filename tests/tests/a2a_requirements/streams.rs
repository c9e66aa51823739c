//! A2A 1.0's streaming requirements: subscriptions (STREAM-SUB-*) and the order of a task's
//! events across its streams (STREAM-ORDER-*).

use super::*;

/// STREAM-SUB-003, -004: `SubscribeToTask` refuses a task that is over, and an unknown one.
#[tokio::test]
async fn stream_sub_003_004_subscribe_refuses_tasks_over_or_unknown() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let task = alice.send("hi", None).await;
        let over = alice
            .stream("SubscribeToTask", json!({"id": task["id"]}))
            .await
            .unwrap_err();
        let missing = alice
            .stream("SubscribeToTask", json!({"id": "no-such-task"}))
            .await
            .unwrap_err();
        match bind {
            Bind::JsonRpc => {
                assert_eq!(over["code"], -32004, "{over}");
                assert_eq!(missing["code"], -32001, "{missing}");
            }
            Bind::Rest => {
                assert_eq!(over["status"], 400, "{over}");
                assert_eq!(missing["status"], 404, "{missing}");
            }
        }
    })
    .await;
}

/// CARD-DISC-001, CARD-PROTO-001, -002 and CARD-STRUCT-001: the card is served, with its
/// required fields, and declares each binding with its URL and version.
/// STREAM-SUB-001, -002: a subscription to a task begins with the task; one that waits for
/// input (an interrupted state) answers it as it stands and closes.
#[tokio::test]
async fn stream_sub_001_002_a_subscription_begins_with_the_task() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let params = json!({"message": message("find", &json!({}))});
        let asked = alice.call_on("asker", "SendMessage", params).await;
        let task = asked["result"]["task"].clone();
        let (_, events) = alice
            .stream_on("asker", "SubscribeToTask", json!({"id": task["id"]}))
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{bind:?}: {events:?}");
        assert_eq!(events[0]["task"]["id"], task["id"]);
        let state = &events[0]["task"]["status"]["state"];
        assert_eq!(state, "TASK_STATE_INPUT_REQUIRED", "{events:?}");
    })
    .await;
}

/// A model that says `one `, waits for its gate, then says `two three`.
struct Gated(Arc<Notify>);

impl Model for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn stream(&self, _: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let gate = Arc::clone(&self.0);
        let first = [ModelEvent::TextStart, ModelEvent::TextDelta("one ".into())];
        let rest = async move {
            gate.notified().await;
            stream::iter([
                ModelEvent::TextDelta("two ".into()),
                ModelEvent::TextDelta("three".into()),
                ModelEvent::TextEnd,
                ModelEvent::Done {
                    stop_reason: StopReason::Stop,
                    usage: Usage::default(),
                },
            ])
        };
        stream::iter(first)
            .chain(stream::once(rest).flatten())
            .boxed()
    }
}

/// How far a stream's events say the task is: its states, and its text as its artifact
/// updates add it.
fn progress(events: &[Value]) -> (Vec<String>, String) {
    let mut states = Vec::new();
    let mut text = String::new();
    for event in events {
        let status = event
            .get("statusUpdate")
            .or_else(|| event.get("task"))
            .map(|update| &update["status"]["state"]);
        if let Some(state) = status.and_then(Value::as_str) {
            states.push(state.to_owned());
        }
        for part in event["artifactUpdate"]["artifact"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            text.push_str(part["text"].as_str().unwrap_or_default());
        }
    }
    (states, text)
}

/// STREAM-ORDER-001 to -004: a task's events go to every stream open on it (the message's own
/// and two subscriptions, which begin with the task and then replay its events from its
/// start), each in the order they were made and the same for all; closing one subscription
/// leaves the others going.
#[tokio::test]
async fn stream_order_001_004_every_stream_gets_the_same_events_in_order() {
    for bind in BINDINGS {
        let gate = Arc::new(Notify::new());
        let gated = LlmAgent::builder("gated", Gated(Arc::clone(&gate))).build();
        let server = Server::new(Registry::new())
            .agent(&gated)
            .protocol(bidi_a2a::A2a::new());
        let base = format!(
            "http://{}",
            tests::http::serve(tests::http::by_bearer(server)).await
        );
        let alice = Caller::over(&base, "alice", bind);
        let params = json!({"message": message("count", &json!({}))});
        let mut own = alice.events("gated", "SendStreamingMessage", params).await;
        // The stream's first events, up to the text said before the gate.
        let mut before = Vec::new();
        while !progress(&before).1.contains("one") {
            before.push(own.next().await.expect("the first events"));
        }
        let id = before
            .iter()
            .find_map(|event| {
                event["task"]["id"]
                    .as_str()
                    .or(event["statusUpdate"]["taskId"].as_str())
            })
            .unwrap()
            .to_owned();
        let subscribe = json!({"id": id});
        let mut first = alice
            .events("gated", "SubscribeToTask", subscribe.clone())
            .await;
        let mut second = alice
            .events("gated", "SubscribeToTask", subscribe.clone())
            .await;
        let mut closed = alice.events("gated", "SubscribeToTask", subscribe).await;
        for subscription in [&mut first, &mut second, &mut closed] {
            let task = subscription.next().await.expect("the task first");
            assert_eq!(task["task"]["id"], id.as_str(), "{bind:?}: {task}");
        }
        // STREAM-ORDER-004: one subscription closes before the rest is said.
        drop(closed);
        gate.notify_one();
        let (own, first, second) = tokio::join!(own.rest(), first.rest(), second.rest());
        // STREAM-ORDER-002, -003: every subscription has the same events, in the same order:
        // the task's, from its start (after the task itself), which are the message's own
        // stream's.
        assert_eq!(first, second, "{bind:?}");
        let carried: Vec<Value> = before
            .iter()
            .filter(|event| event.get("task").is_none())
            .chain(&own)
            .cloned()
            .collect();
        assert_eq!(first, carried, "{bind:?}: the message's own stream");
        // STREAM-ORDER-001: in the order they were made, the terminal state last.
        let all: Vec<Value> = before.into_iter().chain(own).collect();
        let (states, text) = progress(&all);
        assert_eq!(text, "one two three", "{bind:?}: {all:?}");
        assert_eq!(
            states.last().map(String::as_str),
            Some("TASK_STATE_COMPLETED"),
            "{states:?}"
        );
        assert!(
            states.iter().all(|state| state == "TASK_STATE_SUBMITTED"
                || state == "TASK_STATE_WORKING"
                || state == "TASK_STATE_COMPLETED"),
            "{states:?}"
        );
        let completed = states
            .iter()
            .position(|s| s == "TASK_STATE_COMPLETED")
            .unwrap();
        assert_eq!(
            completed,
            states.len() - 1,
            "nothing after the terminal state: {states:?}"
        );
    }
}
