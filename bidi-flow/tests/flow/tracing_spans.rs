//! F1, F2: one span per connection, a child per turn, `run` steps and `tracing` spans under it.

use std::collections::HashSet;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::BidiFlow;
use futures_util::StreamExt;
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry_sdk::trace::SpanData;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::support::{Prefix, Spans, attr, words};

fn by_name<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_span_per_connection_and_one_per_turn() {
    let spans = Spans::new();
    let flow = words().with_tracer(spans.tracer());
    let mut conn = flow.connect(Prefix {
        prefix: "> ".into(),
    });
    let id = conn.id();
    for text in ["one two three", "", "four"] {
        conn.send(text.into()).await.unwrap();
        while let Some(chunk) = conn.responses().next().await {
            chunk.unwrap();
        }
    }
    conn.close();
    assert_eq!(conn.output().await.unwrap(), 3);

    let finished = spans.finished();
    assert_eq!(finished.len(), 4, "{finished:#?}");
    let [connection] = by_name(&finished, "words")[..] else {
        panic!("one connection span")
    };
    assert_eq!(attr(connection, "bidi.flow").as_deref(), Some("words"));
    assert_eq!(attr(connection, "bidi.connection_id"), Some(id.to_string()));
    assert_eq!(
        attr(connection, "bidi.init").as_deref(),
        Some(r#"{"prefix":"> "}"#)
    );
    assert_eq!(attr(connection, "bidi.output").as_deref(), Some("3"));
    assert_eq!(attr(connection, "bidi.messages_in").as_deref(), Some("3"));
    assert_eq!(attr(connection, "bidi.messages_out").as_deref(), Some("4"));
    assert_eq!(attr(connection, "bidi.turns").as_deref(), Some("3"));
    assert_eq!(connection.status, Status::Ok);
    let connection_id = connection.span_context.span_id();
    for (n, chunks) in [(1, "3"), (2, "0"), (3, "1")] {
        let [turn] = by_name(&finished, &format!("turn {n}"))[..] else {
            panic!("turn {n}")
        };
        assert_eq!(turn.parent_span_id, connection_id);
        assert_eq!(
            turn.span_context.trace_id(),
            connection.span_context.trace_id()
        );
        assert_eq!(
            attr(turn, "bidi.chunks").as_deref(),
            Some(chunks),
            "turn {n}"
        );
        assert_eq!(attr(turn, "bidi.turn"), Some(n.to_string()));
    }
    // Nothing is exported twice.
    let ids: HashSet<_> = finished.iter().map(|s| s.span_context.span_id()).collect();
    assert_eq!(ids.len(), finished.len());
}

#[tokio::test]
async fn zero_turn_connection_emits_only_its_span() {
    let spans = Spans::new();
    let flow = words().with_tracer(spans.tracer());
    let conn = flow.connect(Prefix {
        prefix: String::new(),
    });
    conn.close();
    assert_eq!(conn.output().await.unwrap(), 0);
    let finished = spans.finished();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].name, "words");
    assert_eq!(attr(&finished[0], "bidi.turns").as_deref(), Some("0"));
}

#[tokio::test]
async fn failure_cancel_and_panic_set_error_status() {
    let spans = Spans::new();
    let failing = BidiFlow::new(
        "fails",
        |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
            let n = inbound.recv().await.unwrap_or_default();
            out.send(n).await?;
            if n == 2 {
                panic!("kaboom");
            }
            Err::<(), BoxError>(format!("no good: {n}").into())
        },
    )
    .with_tracer(spans.tracer());
    assert!(failing.run((), 1).await.is_err());
    assert!(failing.run((), 2).await.unwrap_err().is_panic());
    let waits = BidiFlow::new(
        "waits",
        |ctx: ActionContext, (), _: Inbound<()>, _: Outbound<()>| async move {
            ctx.cancelled().await;
            Ok::<_, BoxError>(())
        },
    )
    .with_tracer(spans.tracer());
    let conn = waits.connect(());
    conn.cancel_with("enough");
    assert!(conn.output().await.unwrap_err().is_cancelled());
    // The cancelled action's span ends once its task has returned.
    for _ in 0..1000 {
        if spans.finished().iter().any(|s| s.name == "waits") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }

    let finished = spans.finished();
    let status = |name: &str| {
        by_name(&finished, name)
            .iter()
            .map(|s| s.status.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        status("fails"),
        [
            Status::error("action failed: no good: 1"),
            Status::error("action panicked"),
        ]
    );
    assert_eq!(
        status("waits"),
        [Status::error("connection cancelled: enough")]
    );
    // The open turn of the failed connections was closed with them.
    assert_eq!(by_name(&finished, "turn 1").len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn run_steps_and_tracing_spans_nest_under_the_connection() {
    let spans = Spans::new();
    let layer = tracing_opentelemetry::layer().with_tracer(spans.provider.tracer("tracing"));
    let subscriber = tracing_subscriber::registry().with(layer);
    let _default = tracing::subscriber::set_default(subscriber);

    let flow = BidiFlow::new(
        "steps",
        |_: ActionContext, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
            while let Some(n) = inbound.recv().await {
                let doubled = bidi_flow::run("double", async move {
                    // A tracing span inside a step nests under the step.
                    let _inner = tracing::info_span!("inside-step").entered();
                    Ok::<_, BoxError>(n * 2)
                })
                .await?;
                // Spawned tasks keep the context when they ask to.
                let otel_task = tokio::spawn(
                    async { bidi_flow::run("spawned-otel", async { Ok::<_, BoxError>(()) }).await }
                        .with_current_context(),
                );
                let tracing_task = tokio::spawn(
                    async {
                        tracing::info_span!("spawned-tracing-child").in_scope(|| {});
                    }
                    .instrument(tracing::info_span!("spawned-tracing")),
                );
                otel_task.await??;
                tracing_task.await?;
                out.send(doubled).await?;
                out.end_turn().await?;
            }
            Ok::<_, BoxError>(())
        },
    )
    .with_tracer(spans.tracer());
    let mut conn = flow.connect(());
    conn.send(21).await.unwrap();
    assert_eq!(conn.responses().next().await.unwrap().unwrap(), 42);
    conn.close();
    conn.output().await.unwrap();

    let finished = spans.finished();
    let one = |name: &str| {
        let found = by_name(&finished, name);
        assert_eq!(found.len(), 1, "{name}: {finished:#?}");
        found[0].clone()
    };
    let connection = one("steps").span_context.span_id();
    assert_eq!(one("double").parent_span_id, connection);
    assert_eq!(
        one("inside-step").parent_span_id,
        one("double").span_context.span_id()
    );
    assert_eq!(one("spawned-otel").parent_span_id, connection);
    assert_eq!(one("spawned-tracing").parent_span_id, connection);
    assert_eq!(
        one("spawned-tracing-child").parent_span_id,
        one("spawned-tracing").span_context.span_id()
    );
    let trace = one("steps").span_context.trace_id();
    assert!(finished.iter().all(|s| s.span_context.trace_id() == trace));
}

#[tokio::test]
async fn connection_span_is_a_child_of_the_callers_context() {
    use opentelemetry::trace::{TraceContextExt as _, Tracer as _};
    let spans = Spans::new();
    let flow = words().with_tracer(spans.tracer());
    let tracer = spans.provider.tracer("caller");
    let caller = tracer.start("request");
    let cx = opentelemetry::Context::current_with_span(caller);
    async {
        let conn = flow.connect(Prefix {
            prefix: String::new(),
        });
        conn.close();
        conn.output().await.unwrap();
    }
    .with_context(cx.clone())
    .await;
    cx.span().end();
    let finished = spans.finished();
    let request = by_name(&finished, "request")[0].span_context.span_id();
    assert_eq!(by_name(&finished, "words")[0].parent_span_id, request);
}

#[tokio::test]
async fn untraced_flow_is_a_plain_action() {
    // No provider installed: the global tracer records nothing and the flow still works.
    let flow = words();
    let mut conn = flow.connect(Prefix { prefix: "-".into() });
    conn.send("a b".into()).await.unwrap();
    let chunks: Vec<_> = conn.responses().map(Result::unwrap).collect().await;
    assert_eq!(chunks, ["-a", "-b"]);
    conn.close();
    assert_eq!(conn.output().await.unwrap(), 1);
}

#[tokio::test]
async fn a_json_connection_names_its_span() {
    let spans = Spans::new();
    let registry = bidi_flow::Registry::new();
    registry
        .register(words().with_tracer(spans.tracer()))
        .unwrap();
    let conn = registry
        .connect_json("/bidi-flow/words", serde_json::json!({"prefix": ""}))
        .unwrap();
    let span = conn.span_context().cloned().expect("traced");
    conn.close();
    conn.output().await.unwrap();
    let finished = spans.finished();
    let [connection] = by_name(&finished, "words")[..] else {
        panic!("one connection span")
    };
    assert_eq!(span.trace_id(), connection.span_context.trace_id());
    assert_eq!(span.span_id(), connection.span_context.span_id());

    // Untraced: no span to name.
    registry
        .register(words().with_action_type(bidi_flow::ActionType::AGENT))
        .unwrap();
    let conn = registry
        .connect_json("/agent/words", serde_json::json!({"prefix": ""}))
        .unwrap();
    assert!(conn.span_context().is_none());
}

/// Records the attributes each span has when it starts.
#[derive(Debug, Clone, Default)]
struct Starts(std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<opentelemetry::KeyValue>)>>>);

impl opentelemetry_sdk::trace::SpanProcessor for Starts {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {
        if let Some(data) = span.exported_data() {
            self.0
                .lock()
                .unwrap()
                .push((data.name.to_string(), data.attributes));
        }
    }

    fn on_end(&self, _: SpanData) {}

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(
        &self,
        _: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

#[tokio::test]
async fn a_connection_span_names_its_flow_from_the_start() {
    let starts = Starts::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(starts.clone())
        .build();
    let tracer = opentelemetry::global::BoxedTracer::new(Box::new(provider.tracer("starts")));
    let conn = words().with_tracer(tracer).connect(Prefix {
        prefix: String::new(),
    });
    conn.close();
    conn.output().await.unwrap();
    let starts = starts.0.lock().unwrap();
    let (name, attributes) = &starts[0];
    assert_eq!(name, "words");
    assert!(
        attributes
            .iter()
            .any(|kv| kv.key.as_str() == "bidi.flow" && kv.value.as_str() == "words"),
        "{attributes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_action_dropped_after_its_grace_says_it_was_cancelled() {
    let spans = Spans::new();
    let deaf = BidiFlow::new(
        "deaf",
        |_: ActionContext, (), _: Inbound<()>, _: Outbound<()>| async move {
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(())
        },
    )
    .with_tracer(spans.tracer());
    let conn = deaf.connect(());
    conn.cancel_with("enough");
    // The action never looks: it is dropped when the grace runs out.
    assert!(conn.output().await.unwrap_err().is_cancelled());
    for _ in 0..1000 {
        if spans.finished().iter().any(|s| s.name == "deaf") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let finished = spans.finished();
    assert_eq!(
        by_name(&finished, "deaf")[0].status,
        Status::error("connection cancelled: enough")
    );
}
