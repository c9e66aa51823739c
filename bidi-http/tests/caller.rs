//! A request's `traceparent` continues its caller's trace: the connection it makes is the
//! caller's span's child, over a POST and over a WebSocket's upgrade; without a propagator, or
//! with no `traceparent`, the connection's span is a root. Its own process: it installs the
//! global tracer provider and propagator.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "http/support.rs"]
mod support;

use std::net::SocketAddr;
use std::time::Duration;

use bidi_flow::{BidiFlow, Registry};
use bidi_http::traces::{Span, Traces};
use futures_util::{SinkExt as _, StreamExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

/// A server of `echo` (a word a chunk, its init the prefix).
async fn serve() -> SocketAddr {
    let registry = Registry::new();
    registry
        .register(BidiFlow::new("echo", support::echo))
        .unwrap();
    support::serve(registry).await
}

/// The connection spans of `echo` kept so far, once there are `count`.
async fn connections(traces: &Traces, count: usize) -> Vec<Span> {
    for _ in 0..1_000 {
        let spans: Vec<Span> = traces
            .list()
            .iter()
            .flat_map(|summary| traces.trace(&summary.trace_id).unwrap_or_default())
            .filter(|span| span.name == "echo" && span.end_time.is_some())
            .collect();
        if spans.len() >= count {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("fewer than {count} connections ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_makes_the_connection_the_callers_child() {
    let traces = Traces::new();
    let _provider = traces.install();
    let addr = serve().await;
    let client = reqwest::Client::new();
    let traceparent = format!("00-{TRACE}-{CALLER}-01");
    let post = |traceparent: Option<&str>| {
        let mut request = client
            .post(format!("http://{addr}/bidi-flow/echo"))
            .body(r#"{"data": "hi", "init": ""}"#);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        request.send()
    };

    // No propagator installed: the header is not read.
    assert_eq!(post(Some(&traceparent)).await.unwrap().status(), 200);
    let first = connections(&traces, 1).await;
    assert_eq!(first[0].parent_span_id, None, "{first:?}");

    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    assert_eq!(post(Some(&traceparent)).await.unwrap().status(), 200);
    assert_eq!(post(None).await.unwrap().status(), 200);
    let mut request = format!("ws://{addr}/bidi-flow/echo")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let frames = [
        r#"{"type": "init", "init": ""}"#,
        r#"{"type": "send", "data": "hi"}"#,
        r#"{"type": "close"}"#,
    ];
    for frame in frames {
        socket.send(Message::text(frame)).await.unwrap();
    }
    while let Some(Ok(message)) = socket.next().await {
        if message.to_text().unwrap_or_default().contains("\"output\"") {
            break;
        }
    }

    let spans = connections(&traces, 4).await;
    let children: Vec<&Span> = spans
        .iter()
        .filter(|span| span.parent_span_id.as_deref() == Some(CALLER))
        .collect();
    // The POST with a traceparent and the WebSocket: in the caller's trace.
    assert_eq!(children.len(), 2, "{spans:#?}");
    assert!(children.iter().all(|span| span.trace_id == TRACE));
    // The two without: roots of traces of their own.
    let roots = spans.iter().filter(|span| span.parent_span_id.is_none());
    assert_eq!(roots.count(), 2, "{spans:#?}");
}
