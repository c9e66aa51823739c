//! An execution as OpenTelemetry spans in the GenAI conventions: `invoke_agent` in the
//! connection's turn, a `chat` span per model call and an `execute_tool` span per tool call,
//! with the conventions' attributes; what was said only when asked for.

use bidi_agent::AgentInit;
use bidi_core::ConnectOptions;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Usage, simple_tool};
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};

use crate::support::{confirm, run, user};

/// The value of `key` on `span`, as a string.
fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The span named `name` among `spans`.
fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|span| span.name == name)
        .unwrap_or_else(|| panic!("no span {name}: {:?}", names(spans)))
}

fn names(spans: &[SpanData]) -> Vec<&str> {
    spans.iter().map(|span| span.name.as_ref()).collect()
}

/// An agent `forecaster` whose model calls `weather` (local) and `confirm` (its client's) in
/// a first answer, then answers; traced into `exporter`.
fn agent(exporter: &InMemorySpanExporter, content: bool) -> LlmAgent {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tokens = Usage {
        input: 12,
        output: 5,
        ..Usage::default()
    };
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("w1", "weather", &json!({"city": "Rome"}))
            .usage(tokens),
        Scripted::new().text("Sunny in Rome.").usage(tokens),
    ]);
    let weather = simple_tool(
        "weather",
        "Weather",
        "The weather",
        |_id, args: Value| async move { Ok::<_, String>((format!("sunny in {}", args["city"]), None)) },
    );
    LlmAgent::builder("forecaster", model)
        .tool(weather)
        .tool(confirm())
        .tracer(BoxedTracer::new(Box::new(provider.tracer("test"))))
        .record_content(content)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_is_invoke_agent_over_its_model_and_tool_calls() {
    let exporter = InMemorySpanExporter::default();
    let agent = agent(&exporter, false);
    let init = AgentInit::new().session_id("s-1");
    let mut conn = agent.connect_with(init, ConnectOptions::new());
    let (_, result) = run(&mut conn, user("Weather in Rome?")).await;
    assert_eq!(result.status, bidi_llm::Status::Completed);
    conn.close();
    let _ = conn.output().await.unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let invoke = named(&spans, "invoke_agent forecaster");
    let turn = named(&spans, "turn 1");
    assert_eq!(invoke.parent_span_id, turn.span_context.span_id());
    assert_eq!(
        attr(invoke, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attr(invoke, "gen_ai.agent.name").as_deref(),
        Some("forecaster")
    );
    assert_eq!(
        attr(invoke, "gen_ai.conversation.id").as_deref(),
        Some("s-1")
    );
    assert_eq!(
        attr(invoke, "gen_ai.usage.input_tokens").as_deref(),
        Some("24")
    );
    assert_eq!(
        attr(invoke, "gen_ai.usage.output_tokens").as_deref(),
        Some("10")
    );
    assert_eq!(attr(invoke, "bidi.status").as_deref(), Some("completed"));

    let chats: Vec<_> = spans.iter().filter(|s| s.name == "chat scripted").collect();
    assert_eq!(chats.len(), 2, "{:?}", names(&spans));
    for chat in &chats {
        assert_eq!(chat.parent_span_id, invoke.span_context.span_id());
        assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(
            attr(chat, "gen_ai.provider.name").as_deref(),
            Some("_OTHER")
        );
        assert_eq!(
            attr(chat, "gen_ai.request.model").as_deref(),
            Some("scripted")
        );
        assert_eq!(
            attr(chat, "gen_ai.usage.input_tokens").as_deref(),
            Some("12")
        );
        // Nothing said is recorded unless asked for.
        assert_eq!(attr(chat, "gen_ai.input.messages"), None);
    }
    let finishes: Vec<_> = chats
        .iter()
        .map(|chat| attr(chat, "gen_ai.response.finish_reasons").unwrap())
        .collect();
    assert!(
        finishes.iter().any(|f| f.contains("tool_call")),
        "{finishes:?}"
    );

    let tool = named(&spans, "execute_tool weather");
    assert_eq!(tool.parent_span_id, invoke.span_context.span_id());
    assert_eq!(attr(tool, "gen_ai.tool.call.id").as_deref(), Some("w1"));
    assert_eq!(attr(tool, "gen_ai.tool.type").as_deref(), Some("extension"));
    assert_eq!(
        attr(tool, "bidi.tool.outcome").as_deref(),
        Some("completed")
    );
    assert_eq!(attr(tool, "gen_ai.tool.call.arguments"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_client_runs_is_told_and_content_is_recorded_when_asked() {
    let exporter = InMemorySpanExporter::default();
    let model =
        ScriptedModel::new([Scripted::new().tool_call("c1", "confirm", &json!({"city": "Oslo"}))]);
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let agent = LlmAgent::builder("asker", model)
        .tool(confirm())
        .tracer(BoxedTracer::new(Box::new(provider.tracer("test"))))
        .record_content(true)
        .build();
    let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new());
    let _ = run(&mut conn, user("Is Oslo cold?")).await;
    conn.close();
    let _ = conn.output().await.unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let invoke = named(&spans, "invoke_agent asker");
    assert_eq!(
        attr(invoke, "bidi.status").as_deref(),
        Some("awaiting_tool_execution")
    );
    let tool = named(&spans, "execute_tool confirm");
    assert_eq!(attr(tool, "gen_ai.tool.type").as_deref(), Some("function"));
    assert_eq!(
        attr(tool, "bidi.tool.outcome").as_deref(),
        Some("awaiting_client")
    );
    let arguments: Value =
        serde_json::from_str(&attr(tool, "gen_ai.tool.call.arguments").unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Oslo"}));
    let chat = named(&spans, "chat scripted");
    let input: Value = serde_json::from_str(&attr(chat, "gen_ai.input.messages").unwrap()).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": "Is Oslo cold?"}]}])
    );
    let output: Value =
        serde_json::from_str(&attr(chat, "gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(output[0]["parts"][0]["type"], "tool_call");
    assert_eq!(output[0]["parts"][0]["name"], "confirm");
}
