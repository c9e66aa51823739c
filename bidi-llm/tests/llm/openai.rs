//! `OpenAiModel` against a local fake server on 127.0.0.1 that replays the Chat Completions
//! wire format (SSE `data:` lines, `[DONE]`), through the agent loop.

use std::sync::{Arc, Mutex};

use bidi_agent::AgentInit;
use bidi_llm::{
    AgentEvent, Attachment, Code, Context, ExecuteResult, LlmAgent, Message, Model, ModelOptions,
    OpenAiModel, Status, StopReason, Tool, ToolEvent, TurnInput, UserMessage, execute,
};
use futures_util::StreamExt;
use futures_util::stream;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the fake server answers one request with.
pub(crate) enum Reply {
    /// SSE data payloads, then `[DONE]` unless `done` is false (the connection just closes).
    Sse { data: Vec<String>, done: bool },
    /// An HTTP error.
    Status(u16, &'static str),
    /// 429, asking to wait `Retry-After` (seconds or an HTTP date).
    Throttled(&'static str),
}

pub(crate) fn chunk(delta: &Value) -> String {
    json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        .to_string()
}

pub(crate) fn finish(reason: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}).to_string()
}

fn usage(input: u64, output: u64) -> String {
    json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
        .to_string()
}

/// Serves `replies` in order, one per request; returns the base URL and the request bodies.
/// Serves `replies`, one a request: the base URL, and the bodies and heads of the requests.
pub(crate) async fn serve(
    replies: Vec<Reply>,
) -> (String, Arc<Mutex<Vec<Value>>>, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (seen, seen_heads) = (bodies.clone(), heads.clone());
    tokio::spawn(async move {
        for reply in replies {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            let (head_end, length) = loop {
                let n = socket.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
                if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&request[..end]).to_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                    break (end + 4, length);
                }
            };
            while request.len() < head_end + length {
                let n = socket.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&request[..head_end]).to_string();
            assert!(head.starts_with("POST /v1/chat/completions"), "{head}");
            let body: Value =
                serde_json::from_slice(&request[head_end..head_end + length]).unwrap();
            seen.lock().unwrap().push(body);
            seen_heads.lock().unwrap().push(head.to_lowercase());
            let response = match reply {
                Reply::Status(code, body) => format!(
                    "HTTP/1.1 {code} Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                ),
                Reply::Throttled(after) => format!(
                    "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {after}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
                ),
                Reply::Sse { data, done } => {
                    let mut out = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n: keep-alive comment\n\n".to_owned();
                    for line in data {
                        out.push_str(&format!("data: {line}\n\n"));
                    }
                    if done {
                        out.push_str("data: [DONE]\n\n");
                    }
                    out
                }
            };
            socket.write_all(response.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        }
    });
    (base, bodies, heads)
}

async fn run(agent: &LlmAgent, text: &str) -> (Vec<AgentEvent>, ExecuteResult) {
    run_message(agent, UserMessage::new(text)).await
}

async fn run_message(agent: &LlmAgent, message: UserMessage) -> (Vec<AgentEvent>, ExecuteResult) {
    let mut conn = agent.connect(AgentInit::new());
    let mut stream = execute(&mut conn, TurnInput::User(message)).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    let result = stream.result().await.unwrap();
    (events, result)
}

#[derive(Debug, Deserialize, JsonSchema)]
struct City {
    city: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_text_thinking_and_usage() {
    let (base, bodies, _) = serve(vec![Reply::Sse {
        data: vec![
            chunk(&json!({"role": "assistant", "reasoning_content": "hmm"})),
            chunk(&json!({"content": "Hel"})),
            chunk(&json!({"content": "lo"})),
            finish("stop"),
            usage(12, 3),
        ],
        done: true,
    }])
    .await;
    let model = OpenAiModel::new(base, "test-model").api_key("sk-test");
    assert_eq!(model.name(), "test-model");
    let agent = LlmAgent::builder("a", model).build();
    let (events, result) = run(&agent, "hi").await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let Some(Message::Assistant(answer)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(answer.text(), "Hello");
    assert_eq!(
        (
            answer.usage.input,
            answer.usage.output,
            answer.usage.total_tokens
        ),
        (12, 3, 15)
    );
    assert!(events.contains(&AgentEvent::ThinkingEnd {
        thinking: "hmm".into()
    }));
    assert_eq!(answer.stop_reason, StopReason::Stop);
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    assert!(body.get("tools").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_tool_call_arguments_and_sends_results_back() {
    let (base, bodies, _) = serve(vec![
        Reply::Sse {
            data: vec![
                chunk(&json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "weather", "arguments": ""}}]})),
                chunk(&json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]})),
                chunk(&json!({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Oslo\"}"}}]})),
                finish("tool_calls"),
            ],
            done: true,
        },
        Reply::Sse { data: vec![chunk(&json!({"content": "Sunny."})), finish("stop")], done: true },
    ])
    .await;
    let weather = Tool::local("weather", "Weather", "Forecast", |_id, args: City| {
        stream::iter([ToolEvent::Complete {
            output: format!("sunny in {}", args.city),
            details: None,
        }])
    });
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .tool(weather)
        .build();
    let (events, result) = run(&agent, "weather in Oslo?").await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolcallDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "{\"city\":\"Oslo\"}");
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies[0]["tools"][0]["function"]["name"], "weather");
    assert_eq!(
        bodies[0]["tools"][0]["function"]["parameters"]["required"],
        json!(["city"])
    );
    let second = &bodies[1]["messages"];
    assert_eq!(second[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        second[1]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Oslo\"}"
    );
    assert_eq!(
        second[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny in Oslo"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_end_the_turn_with_the_partial_output() {
    let (base, _, _) = serve(vec![
        Reply::Status(503, r#"{"error": {"message": "overloaded"}}"#),
        Reply::Sse {
            data: vec![chunk(&json!({"content": "Hel"})), "{not json".to_owned()],
            done: true,
        },
        Reply::Sse {
            data: vec![chunk(&json!({"content": "Half"}))],
            done: false,
        },
    ])
    .await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m")).build();
    let expectations = [
        ("HTTP 503", ""),
        ("malformed SSE data line", "Hel"),
        ("ended before", "Half"),
    ];
    for (error, partial) in expectations {
        let (_, result) = run(&agent, "hi").await;
        assert_eq!(result.status, Status::Error);
        let failure = result.error.clone().unwrap();
        assert_eq!(failure.code, Code::Model);
        assert!(failure.error.contains(error), "{result:?}");
        let Some(Message::Error(message)) = result.messages.last() else {
            panic!("{result:?}")
        };
        assert_eq!(message.partial.as_ref().unwrap().text(), partial);
    }
}

/// A provider that leaves out a tool call's `index` or `id` gets a clear error, not a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_without_index_or_id_are_errors() {
    let call = |fields: Value| chunk(&json!({"tool_calls": [fields]}));
    let (base, _, _) = serve(vec![
        Reply::Sse {
            data: vec![call(
                json!({"id": "call_1", "function": {"name": "weather", "arguments": "{}"}}),
            )],
            done: true,
        },
        Reply::Sse {
            data: vec![call(
                json!({"index": 0, "function": {"name": "weather", "arguments": "{}"}}),
            )],
            done: true,
        },
        Reply::Sse {
            data: vec![
                call(json!({"index": 0, "id": "call_1", "function": {"name": "weather"}})),
                call(json!({"index": 1, "id": "call_2", "function": {"name": "weather"}})),
                call(json!({"index": 0, "function": {"arguments": "{}"}})),
            ],
            done: true,
        },
    ])
    .await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m")).build();
    for expected in [
        "without an `index`",
        "tool call 0 starts without an `id`",
        "arguments for tool call 0 after it ended",
    ] {
        let (_, result) = run(&agent, "weather?").await;
        let failure = result.error.clone().unwrap();
        assert_eq!(failure.code, Code::Model);
        assert!(failure.error.contains(expected), "{failure:?}");
        assert!(
            matches!(result.messages.last(), Some(Message::Error(_))),
            "{result:?}"
        );
    }
}

/// A session's system prompt goes first as a `system` message and its options are sent; its
/// client tools follow the agent's, their schemas as the client gave them; a call of one ends the execution awaiting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_the_system_prompt_and_the_client_tools() {
    let (base, bodies, _) = serve(vec![Reply::Sse {
        data: vec![
            chunk(
                &json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "pick", "arguments": "{}"}}]}),
            ),
            finish("tool_calls"),
        ],
        done: true,
    }])
    .await;
    let weather = Tool::remote::<City>("weather", "Weather", "Forecast");
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .tool(weather)
        .build();
    let parameters = json!({"type": "object", "properties": {"glob": {"type": "string"}}});
    let context: Context = serde_json::from_value(json!({
        "systemPrompt": "Be brief.",
        "tools": [{"name": "pick", "description": "Picks a file", "parameters": parameters}],
    }))
    .unwrap();
    let mut state = agent.new_session(context).unwrap();
    state.options = ModelOptions::new().temperature(0.25).max_tokens(300);
    let mut conn = agent.connect(AgentInit::new().init(state));
    let mut stream = execute(&mut conn, TurnInput::User(UserMessage::new("hi")))
        .await
        .unwrap();
    while stream.next().await.is_some() {}
    let result = stream.result().await.unwrap();
    assert_eq!(result.status, Status::AwaitingToolExecution, "{result:?}");
    assert_eq!(result.pending_tool_calls[0].name, "pick");
    let body = bodies.lock().unwrap()[0].clone();
    assert_eq!(
        (&body["temperature"], &body["max_tokens"]),
        (&json!(0.25), &json!(300))
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ])
    );
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["weather", "pick"]);
    assert_eq!(
        body["tools"][1]["function"],
        json!({"name": "pick", "description": "Picks a file", "parameters": parameters})
    );
}

/// A user message's attachments go as content parts after its text; a tool's follow its
/// results in a user message, the tool message staying text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_attachments_as_content_parts() {
    let (base, bodies, _) = serve(vec![
        Reply::Sse {
            data: vec![
                chunk(
                    &json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "shot", "arguments": "{\"city\":\"Oslo\"}"}}]}),
                ),
                chunk(
                    &json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                    "function": {"name": "shot", "arguments": "{\"city\":\"Bergen\"}"}}]}),
                ),
                finish("tool_calls"),
            ],
            done: true,
        },
        Reply::Sse {
            data: vec![chunk(&json!({"content": "Nice."})), finish("stop")],
            done: true,
        },
    ])
    .await;
    let shot = Tool::local("shot", "Shot", "Photographs a city", |_id, args: City| {
        let events = if args.city == "Oslo" {
            vec![
                ToolEvent::Attachment(Attachment::image("T1NMTw==", "image/jpeg")),
                ToolEvent::Complete {
                    output: "a photo of Oslo".into(),
                    details: None,
                },
            ]
        } else {
            vec![ToolEvent::Complete {
                output: "too foggy".into(),
                details: None,
            }]
        };
        stream::iter(events)
    });
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m"))
        .tool(shot)
        .build();
    let message = UserMessage::new("look").attachments([
        Attachment::image("iVBORw0K", "image/png"),
        Attachment::Image {
            data: String::new(),
            mime_type: "image/jpeg".into(),
            uri: Some("https://example.com/cat.jpg".into()),
        },
        Attachment::audio("UklGRg==", "audio/wav"),
        Attachment::audio("SUQz", "audio/mpeg"),
        Attachment::audio("T2dnUw==", "audio/ogg"),
        Attachment::text_resource("file:///project/notes.md", "# Notes"),
        Attachment::blob_resource(
            "file:///project/docs/report.pdf?v=2",
            "JVBERi0x",
            "application/pdf",
        ),
        Attachment::Resource {
            uri: "file:///project/big.bin".into(),
            mime_type: None,
            text: None,
            blob: None,
        },
    ]);
    let (_, result) = run_message(&agent, message).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let bodies = bodies.lock().unwrap();
    let user = json!({"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
        {"type": "text", "text": "[an audio clip of type audio/ogg was left out: only wav and mp3 can be sent]"},
        {"type": "text", "text": "file:///project/notes.md\n# Notes"},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0x", "filename": "report.pdf"}},
        {"type": "text", "text": "file:///project/big.bin"},
    ]});
    assert_eq!(bodies[0]["messages"], json!([user]));
    let second = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(second.len(), 5, "{second:#?}");
    assert_eq!(second[0], user);
    assert_eq!(
        second[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "a photo of Oslo"})
    );
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "call_2", "content": "too foggy"})
    );
    assert_eq!(
        second[4],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Attached to the result of tool call call_1 (shot):"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,T1NMTw=="}},
        ]})
    );
}

/// The content filter's stop, and a streamed `refusal`, are refusals; the turn completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_filter_and_refusals_stop_with_refusal() {
    let (base, _, _) = serve(vec![
        Reply::Sse {
            data: vec![chunk(&json!({"content": "Well"})), finish("content_filter")],
            done: true,
        },
        Reply::Sse {
            data: vec![
                chunk(&json!({"refusal": "I can't help with that."})),
                finish("stop"),
            ],
            done: true,
        },
    ])
    .await;
    let agent = LlmAgent::builder("a", OpenAiModel::new(base, "m")).build();
    for text in ["Well", "I can't help with that."] {
        let (_, result) = run(&agent, "something bad").await;
        assert_eq!(result.status, Status::Completed, "{result:?}");
        assert_eq!(result.error, None);
        let Some(Message::Assistant(answer)) = result.messages.last() else {
            panic!("{result:?}")
        };
        assert_eq!(answer.stop_reason, StopReason::Refusal);
        assert_eq!(answer.text(), text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_model_call_sends_its_trace_context() {
    use opentelemetry::global::BoxedTracer;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    // As an application does: W3C trace context on the wire, spans into memory.
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let (base, _, heads) = serve(vec![Reply::Sse {
        data: vec![chunk(&json!({"content": "Hi"})), finish("stop")],
        done: true,
    }])
    .await;
    let agent = LlmAgent::builder("traced", OpenAiModel::new(base, "test-model"))
        .tracer(BoxedTracer::new(Box::new(provider.tracer("test"))))
        .build();
    let (_, result) = run(&agent, "hi").await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let chat = spans
        .iter()
        .find(|span| span.name == "chat test-model")
        .unwrap();
    let expected = format!(
        "traceparent: 00-{}-{}-01",
        chat.span_context.trace_id(),
        chat.span_context.span_id()
    );
    let head = heads.lock().unwrap()[0].clone();
    assert!(head.contains(&expected), "{expected} not in {head}");
}
