//! The router: both delivery paths, users, rotation, errors.

use std::sync::Arc;
use std::time::Duration;

use bidi_agent::{Agent, AgentResult, Responder};
use bidi_channel::testing::{Recorded, Recorder};
use bidi_channel::{Channel, Error, Event, MessageRouter, StreamingChannel};
use bidi_core::{ActionContext, BoxError, Inbound};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, simple_tool};
use bidi_session::Session;
use serde_json::json;
use tokio::sync::Notify;

/// An agent that answers each message with `{message} ({user})`... as the message's words,
/// one chunk each; `wait` first waits for `gate`.
fn echo(gate: Arc<Notify>) -> Agent<(), String, (), String> {
    Agent::builder("echo").build(
        move |_: ActionContext,
              _: Session<()>,
              mut inbound: Inbound<String>,
              out: Responder<String>| {
            let gate = Arc::clone(&gate);
            async move {
                while let Some(message) = inbound.recv().await {
                    if message.starts_with("wait") {
                        gate.notified().await;
                    }
                    for word in message.split_inclusive(' ') {
                        out.send(word.to_owned()).await?;
                        tokio::task::yield_now().await;
                    }
                    out.end_turn().await?;
                }
                Ok::<_, BoxError>(AgentResult::new(()))
            }
        },
    )
}

fn weather_agent(model: ScriptedModel) -> LlmAgent {
    let weather = simple_tool(
        "weather",
        "Weather",
        "The weather in a city",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("sunny".to_owned(), None)) },
    );
    LlmAgent::builder("helper", model).tool(weather).build()
}

fn script() -> Vec<Scripted> {
    vec![
        Scripted::new().tool_call("c1", "weather", &json!({"city": "Oslo"})),
        Scripted::new().text("It is sunny in Oslo today."),
    ]
}

fn chunks_of(calls: &[Recorded]) -> String {
    calls
        .iter()
        .filter_map(|c| match c {
            Recorded::Chunk(_, chunk) => Some(chunk.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn streaming_path_is_start_chunks_status_end() {
    let router = MessageRouter::new(weather_agent(ScriptedModel::new(script())));
    let channel = Arc::new(Recorder::streaming("rec"));
    let reply = router
        .handle(channel.clone(), "alice", "weather?")
        .await
        .unwrap();
    assert_eq!(reply.text, "It is sunny in Oslo today.");
    assert_eq!(reply.error, None);

    let calls = channel.calls();
    assert_eq!(calls[0], Recorded::Start("alice".into()));
    assert_eq!(
        calls[1],
        Recorded::Status("alice".into(), "Using: weather".into())
    );
    assert_eq!(chunks_of(&calls), "It is sunny in Oslo today.");
    assert!(
        calls
            .iter()
            .filter(|c| matches!(c, Recorded::Chunk(..)))
            .count()
            > 1,
        "word by word"
    );
    assert_eq!(
        calls.last(),
        Some(&Recorded::End(
            "alice".into(),
            "It is sunny in Oslo today.".into()
        ))
    );
    assert!(!calls.iter().any(|c| matches!(c, Recorded::Send(..))));
}

#[tokio::test]
async fn plain_path_gets_one_send_with_the_same_text_and_the_same_events() {
    let mut payloads = Vec::new();
    for channel in [Recorder::plain("rec"), Recorder::streaming("rec")] {
        let router = MessageRouter::new(weather_agent(ScriptedModel::new(script())));
        let mut events = router.subscribe();
        let channel = Arc::new(channel);
        let reply = router
            .handle(channel.clone(), "alice", "weather?")
            .await
            .unwrap();
        let calls = channel.calls();
        if channel.streaming().is_none() {
            assert_eq!(calls, [Recorded::Send("alice".into(), reply.text.clone())]);
        }
        let user = events.recv().await.unwrap();
        let Event::AgentResponse {
            text,
            user_id,
            channel_id,
            agent_id,
            ..
        } = events.recv().await.unwrap()
        else {
            panic!("an agent_response");
        };
        assert_eq!(text, reply.text);
        payloads.push((user, text, user_id, channel_id, agent_id));
    }
    assert_eq!(payloads[0], payloads[1]);
    assert_eq!(
        payloads[0].0,
        Event::UserMessage {
            text: "weather?".into(),
            user_id: "alice".into(),
            channel_id: "rec".into()
        }
    );
    assert_eq!(payloads[0].4, "helper");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_users_at_once_without_cross_talk() {
    let router = MessageRouter::new(echo(Arc::new(Notify::new())));
    let channel = Arc::new(Recorder::streaming("rec"));
    let mut tasks = Vec::new();
    for user in 0..40 {
        let (router, channel) = (router.clone(), channel.clone());
        tasks.push(tokio::spawn(async move {
            let mut texts = Vec::new();
            for round in 0..3 {
                let text = format!("user {user} says round {round} to everyone here");
                let reply = router
                    .handle(
                        channel.clone() as Arc<dyn Channel>,
                        &user.to_string(),
                        text.clone(),
                    )
                    .await
                    .unwrap();
                assert_eq!(reply.text, text);
                texts.push(text);
            }
            texts
        }));
    }
    let mut expected = Vec::new();
    for task in tasks {
        expected.push(task.await.unwrap());
    }
    let calls = channel.calls();
    for (user, texts) in expected.iter().enumerate() {
        let user = user.to_string();
        // This user's calls, in order: start, its chunks, end; three times.
        let mine: Vec<&Recorded> = calls
            .iter()
            .filter(|c| match c {
                Recorded::Start(u) | Recorded::Chunk(u, _) | Recorded::End(u, _) => *u == user,
                _ => false,
            })
            .collect();
        let mut replies = Vec::new();
        let mut current = None::<String>;
        for call in mine {
            match call {
                Recorded::Start(_) => {
                    assert!(current.is_none(), "a reply started inside another");
                    current = Some(String::new());
                }
                Recorded::Chunk(_, chunk) => current.as_mut().unwrap().push_str(chunk),
                Recorded::End(_, full) => {
                    let streamed = current.take().unwrap();
                    assert_eq!(&streamed, full);
                    replies.push(streamed);
                }
                _ => unreachable!(),
            }
        }
        assert_eq!(&replies, texts);
    }
}

#[tokio::test(start_paused = true)]
async fn users_do_not_wait_for_each_other() {
    let gate = Arc::new(Notify::new());
    let router = MessageRouter::new(echo(gate.clone()));
    let channel = Arc::new(Recorder::streaming("rec"));
    let slow = tokio::spawn({
        let (router, channel) = (router.clone(), channel.clone());
        async move { router.handle(channel, "slow", "wait for me").await }
    });
    // Another user is answered while the first one's turn waits.
    let fast = tokio::time::timeout(
        Duration::from_secs(60),
        router.handle(channel.clone(), "fast", "quick one"),
    )
    .await
    .expect("answered while the other user waits")
    .unwrap();
    assert_eq!(fast.text, "quick one");
    assert!(!slow.is_finished());
    gate.notify_one();
    assert_eq!(slow.await.unwrap().unwrap().text, "wait for me");
}

#[tokio::test(start_paused = true)]
async fn one_users_messages_are_answered_in_order() {
    let gate = Arc::new(Notify::new());
    let router = MessageRouter::new(echo(gate.clone()));
    let channel = Arc::new(Recorder::streaming("rec"));
    let first = tokio::spawn({
        let (router, channel) = (router.clone(), channel.clone());
        async move { router.handle(channel, "u", "wait first").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = tokio::spawn({
        let (router, channel) = (router.clone(), channel.clone());
        async move { router.handle(channel, "u", "second").await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The second message waits for the first reply.
    assert!(!second.is_finished());
    assert_eq!(channel.calls(), [Recorded::Start("u".into())]);
    gate.notify_one();
    assert_eq!(first.await.unwrap().unwrap().text, "wait first");
    assert_eq!(second.await.unwrap().unwrap().text, "second");
    let ends: Vec<_> = channel
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Recorded::End(_, text) => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(ends, ["wait first", "second"]);
}

#[tokio::test(start_paused = true)]
async fn sessions_rotate_after_the_idle_timeout() {
    let model = ScriptedModel::new([
        Scripted::new().text("one"),
        Scripted::new().text("two"),
        Scripted::new().text("three"),
    ])
    .recording();
    let router = MessageRouter::builder(LlmAgent::builder("helper", model.clone()).build())
        .idle_timeout(Duration::from_secs(60))
        .build();
    let channel = Arc::new(Recorder::plain("rec"));
    let first = router.handle(channel.clone(), "u", "a").await.unwrap();
    tokio::time::sleep(Duration::from_secs(59)).await;
    let second = router.handle(channel.clone(), "u", "b").await.unwrap();
    assert_eq!(second.session_id, first.session_id, "within the timeout");
    tokio::time::sleep(Duration::from_secs(61)).await;
    let third = router.handle(channel.clone(), "u", "c").await.unwrap();
    assert_ne!(third.session_id, first.session_id, "rotated");
    assert_eq!(third.text, "three");

    // The second turn saw the first; the third starts over.
    let requests = model.requests();
    assert_eq!(requests[1].messages.len(), 3);
    assert_eq!(requests[2].messages.len(), 1);
}

#[tokio::test]
async fn an_agent_error_mid_stream_ends_the_stream_with_the_partial_text() {
    let model = ScriptedModel::new([
        Scripted::new()
            .text("Here is the start of")
            .fail("connection reset"),
        Scripted::new().text("Fine again."),
    ]);
    let router = MessageRouter::new(LlmAgent::builder("helper", model).build());
    let mut events = router.subscribe();
    let channel = Arc::new(Recorder::streaming("rec"));
    let reply = router.handle(channel.clone(), "u", "go").await.unwrap();
    let error = reply.error.clone().expect("the agent failed");
    assert!(error.contains("connection reset"), "{error}");
    assert_eq!(
        reply.text,
        format!("Here is the start of\n\n(Error: {error})")
    );
    let calls = channel.calls();
    assert_eq!(chunks_of(&calls), "Here is the start of");
    assert_eq!(
        calls.last(),
        Some(&Recorded::End("u".into(), reply.text.clone()))
    );
    let _ = events.recv().await;
    assert!(
        matches!(events.recv().await, Ok(Event::AgentResponse { text, .. }) if text == reply.text)
    );

    // The conversation goes on.
    let next = router.handle(channel, "u", "again").await.unwrap();
    assert_eq!(next.text, "Fine again.");
}

#[tokio::test]
async fn the_turn_limit_is_reported_like_an_error() {
    let model = ScriptedModel::new([
        Scripted::new()
            .text("Let me look. ")
            .tool_call("c1", "weather", &json!({})),
        Scripted::new().text("never reached"),
    ]);
    let weather = simple_tool(
        "weather",
        "Weather",
        "The weather",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("sunny".to_owned(), None)) },
    );
    let agent = LlmAgent::builder("helper", model)
        .tool(weather)
        .max_turns(1)
        .build();
    let router = MessageRouter::new(agent);
    let channel = Arc::new(Recorder::plain("rec"));
    let reply = router.handle(channel.clone(), "u", "go").await.unwrap();
    assert!(reply.error.is_some());
    assert!(
        reply.text.starts_with("Let me look. \n\n(Error: "),
        "{}",
        reply.text
    );
    assert_eq!(channel.calls(), [Recorded::Send("u".into(), reply.text)]);
}

#[tokio::test]
async fn a_call_a_chat_cannot_answer_ends_the_reply_with_why() {
    let model = ScriptedModel::new([Scripted::new().text("I will wipe it. ").tool_call(
        "c1",
        "wipe",
        &json!({}),
    )]);
    let wipe = simple_tool(
        "wipe",
        "Wipe",
        "Wipes",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("wiped".to_owned(), None)) },
    )
    .needs_approval();
    let router = MessageRouter::new(LlmAgent::builder("helper", model).tool(wipe).build());
    let channel = Arc::new(Recorder::streaming("rec"));
    let reply = router.handle(channel.clone(), "u", "wipe").await.unwrap();
    let error = reply.error.unwrap();
    assert!(
        error.contains("approval") && error.contains("wipe"),
        "{error}"
    );
    assert!(
        reply.text.starts_with("I will wipe it. \n\n(Error: "),
        "{}",
        reply.text
    );
    assert_eq!(
        channel.calls().last(),
        Some(&Recorded::End("u".into(), reply.text))
    );
}

#[tokio::test]
async fn a_failing_channel_keeps_streaming_and_gets_the_final_text() {
    let router = MessageRouter::new(weather_agent(ScriptedModel::new(script())));
    let channel = Arc::new(Recorder::streaming("rec").failing_chunks());
    let reply = router
        .handle(channel.clone(), "u", "weather?")
        .await
        .unwrap();
    let calls = channel.calls();
    // Every chunk was tried although each failed, and the end has the whole text.
    assert_eq!(chunks_of(&calls), "It is sunny in Oslo today.");
    assert_eq!(calls.last(), Some(&Recorded::End("u".into(), reply.text)));
}

/// A channel whose final delivery fails.
struct Broken;

#[bidi_channel::async_trait]
impl Channel for Broken {
    fn id(&self) -> &str {
        "broken"
    }
    async fn send_to_user(&self, _: &str, _: &str) -> Result<(), BoxError> {
        Err("the line is down".into())
    }
}

#[tokio::test]
async fn a_failed_delivery_is_an_error_and_still_announced() {
    let model = ScriptedModel::new([Scripted::new().text("lost words")]);
    let router = MessageRouter::new(LlmAgent::builder("helper", model).build());
    let mut events = router.subscribe();
    let error = router
        .handle(Arc::new(Broken), "u", "hi")
        .await
        .unwrap_err();
    let Error::Delivery {
        text, channel_id, ..
    } = &error
    else {
        panic!("{error}");
    };
    assert_eq!(
        (text.as_str(), channel_id.as_str()),
        ("lost words", "broken")
    );
    assert!(error.to_string().contains("the line is down"));
    let _ = events.recv().await;
    assert!(
        matches!(events.recv().await, Ok(Event::AgentResponse { text, .. }) if text == "lost words")
    );
}

#[tokio::test(start_paused = true)]
async fn users_are_bounded() {
    let gate = Arc::new(Notify::new());
    let router = MessageRouter::builder(echo(gate.clone()))
        .max_users(1)
        .idle_timeout(Duration::from_secs(10))
        .build();
    let channel = Arc::new(Recorder::plain("rec"));
    router.handle(channel.clone(), "a", "hi").await.unwrap();
    let error = router.handle(channel.clone(), "b", "hi").await.unwrap_err();
    assert!(matches!(error, Error::TooManyUsers { limit: 1 }), "{error}");
    // Once the first conversation rotates away, there is room.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(router.handle(channel, "b", "hi").await.unwrap().text, "hi");
}

/// The streaming trait is object safe and a channel can hand out another object.
#[allow(dead_code)]
fn _object_safe(channel: &dyn Channel) -> Option<&dyn StreamingChannel> {
    channel.streaming()
}

#[tokio::test(start_paused = true)]
async fn dropping_the_router_closes_every_conversation_and_the_bus() {
    let model = ScriptedModel::new([Scripted::new().text("bye")]);
    let router = MessageRouter::new(LlmAgent::builder("helper", model).build());
    let mut events = router.subscribe();
    router
        .handle(Arc::new(Recorder::plain("rec")), "u", "hi")
        .await
        .unwrap();
    drop(router);
    let mut seen = 0;
    // Long before the 30-minute idle timeout.
    tokio::time::timeout(Duration::from_secs(60), async {
        while events.recv().await.is_ok() {
            seen += 1;
        }
    })
    .await
    .expect("the bus closes with the router");
    assert_eq!(seen, 2);
}
