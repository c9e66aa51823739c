//! The Telegram channel against a fake Bot API server speaking the real wire.

use std::sync::Arc;
use std::time::Duration;

use bidi_agent::{Agent, AgentResult, Responder};
use bidi_channel::telegram::{MAX_MESSAGE_CHARS, PLACEHOLDER, Telegram};
use bidi_channel::testing::{Call, FakeBotApi};
use bidi_channel::{Channel, MessageRouter};
use bidi_core::{ActionContext, BoxError, Inbound};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, simple_tool};
use bidi_session::Session;
use serde_json::json;

/// Streams the words `w0 w1 ..` of each message's count, one every `every`.
fn ticker(every: Duration) -> Agent<(), String, (), String> {
    Agent::builder("ticker").build(
        move |_: ActionContext,
              _: Session<()>,
              mut inbound: Inbound<String>,
              out: Responder<String>| async move {
            while let Some(message) = inbound.recv().await {
                let n: usize = message.parse().unwrap_or(0);
                for i in 0..n {
                    tokio::time::sleep(every).await;
                    out.send(format!("w{i} ")).await?;
                }
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(AgentResult::new(()))
        },
    )
}

fn telegram(api: &FakeBotApi) -> Telegram {
    Telegram::builder(api.url())
        .client(reqwest::Client::new())
        .build()
        .expect("a local API URL")
}

fn edits(calls: &[Call]) -> Vec<&Call> {
    calls
        .iter()
        .filter(|c| c.method == "editMessageText")
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_streamed_reply_is_edited_in_debounced_steps_within_the_rate_limit() {
    let api = FakeBotApi::start().await.unwrap();
    let router = MessageRouter::new(ticker(Duration::from_millis(20)));
    let channel = Arc::new(telegram(&api));
    // 500 words at 50 a second: 10 seconds.
    let reply = router.handle(channel, "42", "500").await.unwrap();

    assert_eq!(api.messages(42), std::slice::from_ref(&reply.text));
    let calls = api.calls();
    assert_eq!(calls[0].method, "sendMessage");
    assert_eq!(calls[0].text.as_deref(), Some(PLACEHOLDER));
    let edits = edits(&calls);
    let shown = edits.iter().filter(|c| c.error_code.is_none()).count();
    let limited = edits.iter().filter(|c| c.error_code == Some(429)).count();
    // Progress was shown along the way, about once a second (the server's limit) ...
    assert!(shown >= 5, "{shown} edits shown");
    // ... the channel tried no more than once per 500 ms ...
    assert!(
        edits.len() <= 10_000 / 500 + 2,
        "{} edits tried",
        edits.len()
    );
    // ... and the server's 429s were honoured: no edit before its retry_after had passed, and
    // after the first the channel kept to the chat's pace.
    assert_eq!(limited, 1, "the 500 ms interval meets the 1 s limit once");
    assert_eq!(api.early_calls(), 0);
    // Edits came at least 20 characters apart.
    let mut last = 0;
    for edit in edits.iter().filter(|c| c.error_code.is_none()) {
        let len = edit.text.as_ref().unwrap().chars().count();
        assert!(
            len >= last + 20 || len == reply.text.chars().count(),
            "{last} -> {len}"
        );
        last = len;
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_on_the_last_edit_is_waited_out() {
    let api = FakeBotApi::start().await.unwrap();
    let channel = Arc::new(
        Telegram::builder(api.url())
            .client(reqwest::Client::new())
            .edit_interval(Duration::ZERO)
            .min_chars(1)
            .build()
            .unwrap(),
    );
    let router = MessageRouter::new(ticker(Duration::from_millis(10)));
    let reply = router.handle(channel, "7", "5").await.unwrap();
    assert_eq!(api.messages(7), [reply.text]);
    let calls = api.calls();
    let edits = edits(&calls);
    assert!(edits.iter().any(|c| c.error_code == Some(429)));
    assert_eq!(
        edits.last().unwrap().error_code,
        None,
        "the last edit went through"
    );
    assert_eq!(api.early_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_last_edit_falls_back_to_a_new_message() {
    let api = FakeBotApi::start().await.unwrap();
    api.fail_edits(usize::MAX);
    let router = MessageRouter::new(ticker(Duration::from_millis(20)));
    let reply = router
        .handle(Arc::new(telegram(&api)), "42", "100")
        .await
        .unwrap();
    assert_eq!(api.messages(42), [PLACEHOLDER.to_owned(), reply.text]);
    assert!(
        edits(&api.calls())
            .iter()
            .all(|c| c.error_code == Some(400))
    );
}

#[tokio::test(start_paused = true)]
async fn tool_calls_show_typing() {
    let api = FakeBotApi::start().await.unwrap();
    let search = simple_tool(
        "search",
        "Search",
        "Searches",
        |_id, _args: serde_json::Value| async move { Ok::<_, String>(("found".to_owned(), None)) },
    );
    let model = ScriptedModel::new([
        Scripted::new()
            .text("Let me look.")
            .tool_call("c1", "search", &json!({})),
        Scripted::new().text(" Found it."),
    ]);
    let router = MessageRouter::new(LlmAgent::builder("bot", model).tool(search).build());
    router
        .handle(Arc::new(telegram(&api)), "42", "find")
        .await
        .unwrap();
    let calls = api.calls();
    let actions: Vec<_> = calls
        .iter()
        .filter(|c| c.method == "sendChatAction")
        .collect();
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0].action.as_deref(), Some("typing"));
    // The text before the tool call, under the 20 characters an edit waits for, is shown
    // before the tool runs.
    let methods: Vec<(&str, Option<&str>)> = calls
        .iter()
        .map(|c| (c.method.as_str(), c.text.as_deref()))
        .collect();
    let shown = methods
        .iter()
        .position(|m| *m == ("editMessageText", Some("Let me look.")))
        .expect("the text before the tool was shown");
    let typing = methods
        .iter()
        .position(|(method, _)| *method == "sendChatAction")
        .unwrap();
    assert!(shown < typing, "{methods:?}");
    assert_eq!(api.messages(42), ["Let me look. Found it."]);
}

#[tokio::test(start_paused = true)]
async fn long_replies_are_split_at_4096_characters() {
    let api = FakeBotApi::start().await.unwrap();
    // 2,500 words of 5 or 6 characters: over 12,000 characters.
    let router = MessageRouter::new(ticker(Duration::from_millis(1)));
    let reply = router
        .handle(Arc::new(telegram(&api)), "42", "2500")
        .await
        .unwrap();
    let messages = api.messages(42);
    assert_eq!(
        messages.len(),
        reply.text.len().div_ceil(MAX_MESSAGE_CHARS).max(3)
    );
    assert!(
        messages
            .iter()
            .all(|m| m.chars().count() <= MAX_MESSAGE_CHARS)
    );
    assert_eq!(messages.concat(), reply.text);
}

#[tokio::test(start_paused = true)]
async fn streams_of_several_chats_do_not_mix() {
    let api = FakeBotApi::start().await.unwrap();
    let router = MessageRouter::new(ticker(Duration::from_millis(20)));
    let channel = Arc::new(telegram(&api));
    let mut tasks = Vec::new();
    for (chat, words) in [("1", "60"), ("2", "90"), ("3", "120")] {
        let (router, channel) = (router.clone(), channel.clone());
        tasks.push(tokio::spawn(async move {
            router
                .handle(channel as Arc<dyn Channel>, chat, words)
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    for (chat, words) in [(1, 60), (2, 90), (3, 120)] {
        let text: String = (0..words).map(|i| format!("w{i} ")).collect();
        assert_eq!(api.messages(chat), [text]);
    }
    assert_eq!(api.early_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn without_streaming_one_message_is_sent() {
    let api = FakeBotApi::start().await.unwrap();
    let channel = Telegram::builder(api.url())
        .client(reqwest::Client::new())
        .streaming(false)
        .build()
        .unwrap();
    let router = MessageRouter::new(ticker(Duration::from_millis(20)));
    let reply = router.handle(Arc::new(channel), "42", "30").await.unwrap();
    let calls = api.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].method, "sendMessage");
    assert_eq!(calls[0].text.as_deref(), Some(reply.text.as_str()));
}

#[tokio::test]
async fn a_user_id_that_is_no_chat_is_refused() {
    let api = FakeBotApi::start().await.unwrap();
    let channel = telegram(&api);
    let error = channel.send_to_user("alice", "hi").await.unwrap_err();
    assert!(
        error.to_string().contains("not a Telegram chat id"),
        "{error}"
    );
    assert!(api.calls().is_empty());
}

#[tokio::test]
async fn api_errors_are_typed() {
    let api = FakeBotApi::start().await.unwrap();
    let channel = telegram(&api);
    let error = channel.send_to_user("42", " ").await;
    // An empty reply is sent as "(empty reply)", never as an empty message.
    assert!(error.is_ok());
    assert_eq!(api.messages(42), ["(empty reply)"]);

    let wrong = Telegram::builder(format!("{}/../nobot", api.url()))
        .client(reqwest::Client::new())
        .build()
        .unwrap();
    let error = wrong.send_to_user("42", "hi").await.unwrap_err();
    let error = error.downcast::<bidi_channel::telegram::Error>().unwrap();
    assert!(
        matches!(*error, bidi_channel::telegram::Error::Api { code: 404, .. }),
        "{error}"
    );
}
