//! `POST /agent/{name}/chat`: the Vercel AI SDK's UI message stream, on real sockets.

#![allow(clippy::unwrap_used)]

#[allow(dead_code, reason = "the helpers of every HTTP test")]
#[path = "../../bidi-http/tests/http/support.rs"]
mod support;

use std::net::SocketAddr;

use bidi_ai_sdk::Chat;
use bidi_http::Server;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Message, Tool, ToolEvent};
use futures_util::stream;
use serde_json::{Value, json};

use crate::support::{Probe, registry, start, url};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

/// A local tool that streams its answer in two pieces.
fn weather() -> Tool {
    Tool::local(
        "weather",
        "Weather",
        "The weather in a city",
        |_id, args: City| {
            stream::iter([
                ToolEvent::Delta("sunny ".into()),
                ToolEvent::Complete {
                    output: format!("sunny in {}", args.city),
                    details: None,
                },
            ])
        },
    )
}

async fn server(model: ScriptedModel) -> SocketAddr {
    let agent = LlmAgent::builder("helper", model).tool(weather()).build();
    start(
        Server::new(registry(&Probe::default()))
            .agent(&agent)
            .protocol(Chat::new()),
    )
    .await
}

async fn chat(addr: SocketAddr, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url(addr, "/agent/helper/chat"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// The chunks of a UI message stream; checks the framing and the `[DONE]` at its end.
async fn chunks(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let mut records: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(records.pop(), Some("data: [DONE]"), "{text}");
    records
        .into_iter()
        .map(|record| serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap())
        .collect()
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

fn ask_tool() -> Value {
    json!({"name": "ask", "description": "Asks the user", "parameters": {"type": "object"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_answer_with_reasoning_has_the_sdk_headers_and_chunks() {
    let addr = server(ScriptedModel::new([Scripted::new()
        .thinking("Easy one.")
        .text("Hello there")]))
    .await;
    let body = json!({"id": "chat-1", "messages": [user("u1", "hi")], "trigger": "submit-message"});
    let response = chat(addr, &body).await;
    let headers = response.headers();
    for (name, value) in [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
        ("connection", "keep-alive"),
        ("x-vercel-ai-ui-message-stream", "v1"),
        ("x-accel-buffering", "no"),
    ] {
        assert_eq!(headers[name], value, "{name}");
    }
    let chunks = chunks(response).await;
    assert_eq!(
        types(&chunks),
        [
            "start",
            "start-step",
            "reasoning-start",
            "reasoning-delta",
            "reasoning-delta",
            "reasoning-end",
            "text-start",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish",
        ]
    );
    assert!(chunks[0]["messageId"].as_str().unwrap().starts_with("msg-"));
    assert_eq!(
        chunks[7],
        json!({"type": "text-delta", "id": "text-1", "delta": "Hello "})
    );
    assert_eq!(
        chunks[11],
        json!({"type": "finish", "finishReason": "stop"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_tool_runs_within_its_step() {
    let addr = server(ScriptedModel::new([
        Scripted::new().tool_call("w1", "weather", &json!({"city": "Oslo"})),
        Scripted::new().text("Sunny."),
    ]))
    .await;
    let body = json!({"id": "chat-2", "messages": [user("u1", "Weather in Oslo?")]});
    let chunks = chunks(chat(addr, &body).await).await;
    assert_eq!(
        types(&chunks),
        [
            "start",
            "start-step",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-delta",
            "tool-input-available",
            "tool-output-available",
            "tool-output-available",
            "finish-step",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish",
        ]
    );
    // The input streams in the pieces the model wrote it in.
    assert_eq!(
        [&chunks[3]["inputTextDelta"], &chunks[4]["inputTextDelta"]],
        [&json!("{\"city\""), &json!(":\"Oslo\"}")]
    );
    assert_eq!(
        chunks[5],
        json!({"type": "tool-input-available", "toolCallId": "w1", "toolName": "weather", "input": {"city": "Oslo"}})
    );
    assert_eq!(chunks[6]["preliminary"], true);
    assert_eq!(
        chunks[7],
        json!({"type": "tool-output-available", "toolCallId": "w1", "output": "sunny in Oslo"})
    );
}

/// The assistant message of a client tool call `k1` of `ask`, answered.
fn answered(message_id: &str) -> Value {
    json!({"id": message_id, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-ask", "toolCallId": "k1", "state": "output-available",
         "input": {"q": "Oslo?"}, "output": "yes"},
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_waits_and_the_next_request_resumes_the_stored_chat() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("k1", "ask", &json!({"q": "Oslo?"})),
        Scripted::new().text("Booked."),
    ])
    .recording();
    let addr = server(model.clone()).await;
    let first =
        json!({"id": "chat-3", "messages": [user("u1", "Book a trip")], "tools": [ask_tool()]});
    let chunks1 = chunks(chat(addr, &first).await).await;
    assert_eq!(
        types(&chunks1),
        [
            "start",
            "start-step",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-delta",
            "tool-input-available",
            "finish-step",
            "finish",
        ]
    );
    assert_eq!(chunks1[7]["finishReason"], "tool-calls");
    let message_id = chunks1[0]["messageId"].as_str().unwrap();

    // The client adds the output and sends the whole conversation again.
    let second =
        json!({"id": "chat-3", "messages": [user("u1", "Book a trip"), answered(message_id)]});
    let chunks2 = chunks(chat(addr, &second).await).await;
    assert_eq!(
        chunks2[0],
        json!({"type": "start", "messageId": message_id}),
        "the answer goes on in the same message"
    );
    assert_eq!(chunks2.last().unwrap()["finishReason"], "stop");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    match requests[1].messages.last().unwrap() {
        Message::ToolResult(result) => {
            assert_eq!(
                (result.tool_call_id.as_str(), result.content.as_str()),
                ("k1", "yes")
            );
        }
        other => panic!("{other:?}"),
    }
    // The session is the chat.
    let session: Value = reqwest::get(url(addr, "/agent/helper/session/chat-3"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["status"], "completed");
    assert_eq!(session["messages"].as_array().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_result_resumes_a_chat_the_server_never_saw() {
    let model = ScriptedModel::new([Scripted::new().text("Booked.")]).recording();
    let addr = server(model.clone()).await;
    let body = json!({
        "id": "chat-4", "tools": [ask_tool()], "system": "You book trips.",
        "messages": [user("u1", "Book a trip"), answered("a1")],
    });
    let chunks = chunks(chat(addr, &body).await).await;
    assert_eq!(chunks[0], json!({"type": "start", "messageId": "a1"}));
    assert_eq!(
        types(&chunks)[1..],
        [
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    let request = &model.requests()[0];
    assert_eq!(request.system_prompt.as_deref(), Some("You book trips."));
    assert!(request.tools.iter().any(|tool| tool.name == "ask"));
    let roles: Vec<_> = request.messages.iter().map(Message::role).collect();
    assert_eq!(
        serde_json::to_value(roles).unwrap(),
        json!(["user", "assistant", "toolResult"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_failure_mid_block_closes_it_then_reports_the_error() {
    let addr = server(ScriptedModel::new([Scripted::new()
        .text("Half an answer")
        .fail("the provider went away")]))
    .await;
    let body = json!({"id": "chat-5", "messages": [user("u1", "hi")]});
    let chunks = chunks(chat(addr, &body).await).await;
    let n = chunks.len();
    assert_eq!(
        types(&chunks)[n - 5..],
        ["text-delta", "text-end", "error", "finish-step", "finish"]
    );
    assert!(
        chunks[n - 3]["errorText"]
            .as_str()
            .unwrap()
            .contains("the provider went away")
    );
    assert_eq!(chunks[n - 1]["finishReason"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chat_requests_are_refused_before_the_stream() {
    let addr = server(ScriptedModel::new([Scripted::new().tool_call(
        "k1",
        "ask",
        &json!({}),
    )]))
    .await;
    let cases = [
        (json!("not an object"), 400, "malformed_frame", ""),
        (
            json!({"messages": [user("u1", "hi")]}),
            400,
            "malformed_frame",
            "",
        ),
        (
            json!({"id": "x", "messages": [], "extra": 1}),
            400,
            "malformed_frame",
            "",
        ),
        (
            json!({"id": "x", "messages": []}),
            400,
            "malformed_frame",
            "/messages",
        ),
        (
            json!({"id": "", "messages": [user("u1", "hi")]}),
            400,
            "malformed_frame",
            "/id",
        ),
        (
            json!({"id": "x", "messages": [user("u1", "hi")], "trigger": "retry"}),
            400,
            "malformed_frame",
            "/trigger",
        ),
        (
            json!({"id": "x", "messages": [{"id": "a", "role": "assistant", "parts": []}]}),
            400,
            "invalid_input",
            "/messages",
        ),
        (
            json!({"id": "x", "messages": [user("u1", "hi")], "tools": [{"name": "weather", "description": "", "parameters": {}}]}),
            400,
            "invalid_input",
            "/tools",
        ),
    ];
    for (body, status, code, path) in cases {
        let response = chat(addr, &body).await;
        assert_eq!(response.status().as_u16(), status, "{body}");
        assert_eq!(response.headers()["content-type"], "application/json");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["details"]["code"], code, "{body}: {error}");
        if !path.is_empty() {
            assert_eq!(error["error"]["details"]["path"], path, "{body}: {error}");
        }
    }
    let response = reqwest::Client::new()
        .post(url(addr, "/agent/nobody/chat"))
        .body(json!({"id": "x", "messages": [user("u1", "hi")]}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);

    // A chat waiting for a client tool's result does not take a new user message.
    let first = json!({"id": "chat-6", "messages": [user("u1", "go")], "tools": [ask_tool()]});
    let chunks = chunks(chat(addr, &first).await).await;
    assert_eq!(chunks.last().unwrap()["finishReason"], "tool-calls");
    let again = json!({"id": "chat-6", "messages": [user("u1", "go"), user("u2", "hello?")]});
    let response = chat(addr, &again).await;
    assert_eq!(response.status().as_u16(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        error["error"]["details"]["code"], "invalid_input",
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerating_replaces_the_stored_conversation_with_the_clients() {
    let model = ScriptedModel::new([
        Scripted::new().text("First."),
        Scripted::new().text("Second."),
    ])
    .recording();
    let addr = server(model.clone()).await;
    let body = json!({"id": "chat-7", "messages": [user("u1", "hi")]});
    let first = chunks(chat(addr, &body).await).await;
    let message_id = first[0]["messageId"].as_str().unwrap();
    // `regenerate` drops the answer and sends the conversation before it, naming the message.
    let again = json!({"id": "chat-7", "messages": [user("u1", "hi again")],
                       "trigger": "regenerate-message", "messageId": message_id});
    let second = chunks(chat(addr, &again).await).await;
    assert_eq!(second[0], json!({"type": "start", "messageId": message_id}));
    assert_eq!(second[3]["delta"], "Second.");
    let requests = model.requests();
    assert_eq!(requests[1].messages.len(), 1, "{:?}", requests[1].messages);
    let session: Value = reqwest::get(url(addr, "/agent/helper/session/chat-7"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let messages = session["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["content"], "hi again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_of_one_identity_are_not_anothers() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("k1", "ask", &json!({})),
        Scripted::new().text("Hello Bob."),
    ])
    .recording();
    let agent = LlmAgent::builder("helper", model.clone()).build();
    let server = Server::new(registry(&Probe::default()))
        .agent(&agent)
        .protocol(Chat::new())
        .auth(|headers| async move {
            match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                Some("Bearer alice") => Ok(bidi_http::Identity::new("alice")),
                Some("Bearer bob") => Ok(bidi_http::Identity::new("bob")),
                _ => Err(bidi_http::Unauthorized::new("a bearer token is required")),
            }
        });
    let addr = start(server).await;
    let post = |who: &'static str, body: Value| async move {
        reqwest::Client::new()
            .post(url(addr, "/agent/helper/chat"))
            .header("authorization", format!("Bearer {who}"))
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    };
    // Alice's chat waits for her client tool.
    let alice = json!({"id": "shared", "messages": [user("u1", "hi")], "tools": [ask_tool()]});
    let chunks_alice = chunks(post("alice", alice).await).await;
    assert_eq!(chunks_alice.last().unwrap()["finishReason"], "tool-calls");
    // Bob's chat of the same id is a new one: his user message is answered.
    let bob = json!({"id": "shared", "messages": [user("u1", "I am Bob")]});
    let chunks_bob = chunks(post("bob", bob).await).await;
    assert_eq!(chunks_bob.last().unwrap()["finishReason"], "stop");
    match &model.requests()[1].messages[..] {
        [Message::User(first)] => assert_eq!(first.content, "I am Bob"),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Resuming a chat's stream: `GET /agent/{name}/chat/{id}/stream`.

mod resume {
    use std::net::SocketAddr;

    use bidi_http::{Identity, Server, Unauthorized};
    use bidi_llm::testing::ChannelModel;
    use bidi_llm::{LlmAgent, ModelEvent};
    use futures_util::StreamExt as _;
    use serde_json::{Value, json};
    use tokio::sync::mpsc::UnboundedSender;

    use super::{types, user};
    use crate::support::{Probe, registry, start, url};

    /// A server whose `helper` answers what the test sends its model, with identities `alice`
    /// and `bob` (and anonymous requests).
    async fn held() -> (SocketAddr, UnboundedSender<ModelEvent>) {
        let (model, answer) = ChannelModel::new();
        let agent = LlmAgent::builder("helper", model).build();
        let server = Server::new(registry(&Probe::default()))
            .agent(&agent)
            .protocol(bidi_ai_sdk::Chat::new())
            .auth(|headers| async move {
                match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                    Some("Bearer alice") => Ok(Identity::new("alice")),
                    Some("Bearer bob") => Ok(Identity::new("bob")),
                    None => Ok(Identity::new("anonymous")),
                    _ => Err(Unauthorized::new("who?")),
                }
            });
        (start(server).await, answer)
    }

    async fn post(addr: SocketAddr, who: &str, chat: &str) -> reqwest::Response {
        let body = json!({"id": chat, "messages": [user("u1", "hi")]});
        let response = reqwest::Client::new()
            .post(url(addr, "/agent/helper/chat"))
            .header("authorization", format!("Bearer {who}"))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response
    }

    async fn resume(addr: SocketAddr, who: &str, chat: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(url(addr, &format!("/agent/helper/chat/{chat}/stream")))
            .header("authorization", format!("Bearer {who}"))
            .send()
            .await
            .unwrap()
    }

    /// The stored chat as `useChat({ messages })` reads it after a reload: the roles of its
    /// messages and the first one's text.
    async fn history(addr: SocketAddr, who: &str, chat: &str) -> (Vec<String>, Value) {
        let response = reqwest::Client::new()
            .get(url(addr, &format!("/agent/helper/chat/{chat}")))
            .header("authorization", format!("Bearer {who}"))
            .send()
            .await
            .unwrap();
        let messages: Vec<Value> = response.json().await.unwrap();
        let roles = messages
            .iter()
            .map(|message| message["role"].as_str().unwrap().to_owned())
            .collect();
        (roles, messages[0]["parts"][0]["text"].clone())
    }

    /// Asserts `response` is 204 with no body.
    async fn nothing(response: reqwest::Response) {
        assert_eq!(response.status().as_u16(), 204);
        assert!(response.bytes().await.unwrap().is_empty());
    }

    /// A body read so far, and the rest of it.
    struct Reading {
        text: String,
        rest: futures_util::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    }

    impl Reading {
        fn new(response: reqwest::Response) -> Self {
            Self {
                text: String::new(),
                rest: response.bytes_stream().boxed(),
            }
        }

        /// Reads until the text contains `needle`.
        async fn until(&mut self, needle: &str) {
            while !self.text.contains(needle) {
                let bytes = self.rest.next().await.unwrap().unwrap();
                self.text.push_str(std::str::from_utf8(&bytes).unwrap());
            }
        }

        /// Reads to the end.
        async fn all(mut self) -> String {
            while let Some(bytes) = self.rest.next().await {
                self.text
                    .push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
            }
            self.text
        }
    }

    fn chunks(text: &str) -> Vec<Value> {
        let mut records: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(records.pop(), Some("data: [DONE]"), "{text}");
        records
            .into_iter()
            .map(|record| serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    fn finish(answer: &UnboundedSender<ModelEvent>) {
        bidi_llm::testing::finish_text(answer, "lo!");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn resuming_mid_answer_gives_the_stream_so_far_then_the_rest_to_each_client() {
        let (addr, answer) = held().await;
        nothing(resume(addr, "alice", "c1").await).await;
        let mut first = Reading::new(post(addr, "alice", "c1").await);
        answer.send(ModelEvent::TextStart).unwrap();
        answer.send(ModelEvent::TextDelta("Hel".into())).unwrap();
        first.until("\"Hel\"").await;
        // A page that reloads now reads the question its answer is for.
        assert_eq!(
            history(addr, "alice", "c1").await,
            (vec!["user".into()], json!("hi"))
        );

        // Another identity's chat of that id is not this one.
        nothing(resume(addr, "bob", "c1").await).await;
        nothing(resume(addr, "alice", "c2").await).await;

        let second = resume(addr, "alice", "c1").await;
        let third = resume(addr, "alice", "c1").await;
        for response in [&second, &third] {
            assert_eq!(response.status().as_u16(), 200);
            let headers = response.headers();
            for (name, value) in [
                ("content-type", "text/event-stream"),
                ("cache-control", "no-cache"),
                ("connection", "keep-alive"),
                ("x-vercel-ai-ui-message-stream", "v1"),
                ("x-accel-buffering", "no"),
            ] {
                assert_eq!(headers[name], value, "{name}");
            }
        }
        let mut second = Reading::new(second);
        let mut third = Reading::new(third);
        // What was written before they came, at once.
        second.until("\"Hel\"").await;
        third.until("\"Hel\"").await;
        finish(&answer);
        let first = first.all().await;
        let second = second.all().await;
        let third = third.all().await;
        let chunks = chunks(&first);
        assert_eq!(
            types(&chunks),
            [
                "start",
                "start-step",
                "text-start",
                "text-delta",
                "text-delta",
                "text-end",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!(chunks[4]["delta"], "lo!");
        assert_eq!(second, first, "the whole stream");
        assert_eq!(third, first, "the whole stream");
        let (roles, question) = history(addr, "alice", "c1").await;
        assert_eq!(
            (roles, question),
            (vec!["user".into(), "assistant".into()], json!("hi"))
        );

        // The answer is over: nothing to resume.
        nothing(resume(addr, "alice", "c1").await).await;
        let other = reqwest::Client::new()
            .get(url(addr, "/agent/nobody/chat/c1/stream"))
            .send()
            .await
            .unwrap();
        assert_eq!(other.status().as_u16(), 404);
    }

    /// Polls the chat's session until it no longer runs; returns it.
    async fn settled(addr: SocketAddr, who: &str, chat: &str) -> Value {
        for _ in 0..500 {
            let session: Value = reqwest::Client::new()
                .get(url(addr, &format!("/agent/helper/session/{chat}")))
                .header("authorization", format!("Bearer {who}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if session["status"] != "running" {
                return session;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("chat `{chat}` still runs");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_whose_client_left_runs_on_for_a_resuming_client() {
        let (addr, answer) = held().await;
        let mut first = Reading::new(post(addr, "alice", "c3").await);
        answer.send(ModelEvent::TextStart).unwrap();
        answer.send(ModelEvent::TextDelta("Hel".into())).unwrap();
        first.until("\"Hel\"").await;
        let mut second = Reading::new(resume(addr, "alice", "c3").await);
        second.until("\"Hel\"").await;
        drop(first);
        finish(&answer);
        let chunks = chunks(&second.all().await);
        assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
        let session = settled(addr, "alice", "c3").await;
        assert_eq!(session["status"], "completed");
        let messages = session["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["role"], "assistant", "{session}");
        nothing(resume(addr, "alice", "c3").await).await;
    }

    /// A page that reloads mid-answer (every reader gone, then the AI SDK's `resume: true`)
    /// gets what was written, then the rest: the answer ran on without anybody reading it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_nobody_reads_any_more_runs_on_for_a_reloaded_page() {
        let (addr, answer) = held().await;
        let mut first = Reading::new(post(addr, "alice", "c4").await);
        answer.send(ModelEvent::TextStart).unwrap();
        answer.send(ModelEvent::TextDelta("Hel".into())).unwrap();
        first.until("\"Hel\"").await;
        let mut second = Reading::new(resume(addr, "alice", "c4").await);
        second.until("\"Hel\"").await;
        drop(first);
        drop(second);
        // The page is gone; the model goes on, and the page comes back.
        answer.send(ModelEvent::TextDelta("lo".into())).unwrap();
        let mut reloaded = Reading::new(resume(addr, "alice", "c4").await);
        reloaded.until("\"Hel\"").await;
        finish(&answer);
        let chunks = chunks(&reloaded.all().await);
        assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
        let session = settled(addr, "alice", "c4").await;
        let messages = session["messages"].as_array().unwrap();
        assert_eq!(messages.last().unwrap()["role"], "assistant", "{session}");
        nothing(resume(addr, "alice", "c4").await).await;
    }
}

/// A user message while a client tool waits: refused by default, as the AI SDK's own server
/// code refuses a call without a result; with `WaitingCalls::SetAside` the call is answered
/// as set aside and the message answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_message_while_a_client_tool_waits_is_refused_or_sets_it_aside() {
    for waiting in [None, Some(bidi_http::agent::WaitingCalls::SetAside)] {
        let model = ScriptedModel::new([
            Scripted::new().tool_call("k1", "ask", &json!({"q": "Oslo?"})),
            Scripted::new().text("Rome, then."),
        ]);
        let agent = LlmAgent::builder("helper", model).build();
        let protocol = match waiting {
            Some(waiting) => Chat::new().waiting_calls(waiting),
            None => Chat::new(),
        };
        let server = Server::new(registry(&Probe::default()))
            .agent(&agent)
            .protocol(protocol);
        let addr = start(server).await;
        let first = json!({"id": "c-w", "messages": [user("u1", "Book a trip")],
                           "tools": [ask_tool()]});
        let first = chunks(chat(addr, &first).await).await;
        assert!(types(&first).contains(&"tool-input-available"));
        let asked = json!({"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-ask", "toolCallId": "k1", "state": "input-available",
             "input": {"q": "Oslo?"}}]});
        let next = json!({"id": "c-w", "messages": [user("u1", "Book a trip"), asked,
                                                      user("u2", "Rome instead")]});
        let response = chat(addr, &next).await;
        if waiting.is_none() {
            assert_eq!(response.status().as_u16(), 400);
            let answer: Value = response.json().await.unwrap();
            assert_eq!(answer["error"]["details"]["code"], "invalid_input");
        } else {
            let answered = chunks(response).await;
            let text: String = answered
                .iter()
                .filter(|chunk| chunk["type"] == "text-delta")
                .map(|chunk| chunk["delta"].as_str().unwrap())
                .collect();
            assert_eq!(text, "Rome, then.");
        }
    }
}
