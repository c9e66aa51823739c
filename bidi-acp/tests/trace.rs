//! A prompt's trace goes where its turn goes: the prompt's `_meta.traceparent` makes its turn
//! the caller's span's child, and the requests the turn makes of the editor (a file read for a
//! tool call) carry the tool call's span in their `_meta`. Its own process: it installs the
//! global tracer provider and propagator.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "acp/support.rs"]
mod support;

use bidi_acp::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use opentelemetry::global;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use serde_json::{Value, json};

use support::Client;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompts_trace_reaches_the_editors_requests() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_tracer_provider(provider.clone());
    global::set_text_map_propagator(TraceContextPropagator::new());

    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "read_text_file", &json!({"path": "a.txt"})),
        Scripted::new().text("done"),
    ]);
    let agent = LlmAgent::builder("a", model).build();
    let mut client = Client::start(Server::new(agent));
    client
        .send(
            json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true}}}}),
        )
        .await;
    client.answer(0).await;
    let session = client.new_session().await["sessionId"].clone();
    client
        .send(
            json!({"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{
            "sessionId": session, "prompt": [{"type": "text", "text": "read"}],
            "_meta": {"traceparent": format!("00-{TRACE}-{CALLER}-01")}}}),
        )
        .await;
    let mut read: Option<Value> = None;
    loop {
        let message = client.recv().await.expect("an answer");
        if message["method"] == "fs/read_text_file" {
            client
                .send(json!({"jsonrpc":"2.0","id":message["id"],"result":{"content":"hi"}}))
                .await;
            read = Some(message);
        } else if message["id"] == 1 && message.get("method").is_none() {
            assert_eq!(message["result"]["stopReason"], "end_turn", "{message}");
            break;
        }
    }
    client.finish().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let tool = spans
        .iter()
        .find(|span| span.name == "execute_tool read_text_file")
        .unwrap_or_else(|| panic!("no tool span: {spans:#?}"));
    // The tool call is in the caller's trace...
    assert_eq!(tool.span_context.trace_id().to_string(), TRACE);
    let connection = spans.iter().find(|span| span.name == "a").unwrap();
    assert_eq!(connection.parent_span_id.to_string(), CALLER);
    // ...and the editor's request names it.
    let read = read.expect("the editor was asked to read");
    let traceparent = read["params"]["_meta"]["traceparent"].as_str().unwrap();
    assert_eq!(
        traceparent,
        format!("00-{TRACE}-{}-01", tool.span_context.span_id())
    );
}
