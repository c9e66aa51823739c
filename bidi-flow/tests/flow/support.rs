//! Flows and types shared by the tests.

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::BidiFlow;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A tracer exporting synchronously into memory, per test.
pub(crate) struct Spans {
    pub(crate) provider: SdkTracerProvider,
    pub(crate) exporter: InMemorySpanExporter,
}

impl Spans {
    pub(crate) fn new() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        Self { provider, exporter }
    }

    pub(crate) fn tracer(&self) -> BoxedTracer {
        BoxedTracer::new(Box::new(self.provider.tracer("bidi-flow-tests")))
    }

    pub(crate) fn finished(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap()
    }
}

/// The value of attribute `key` on `span`, as a string.
pub(crate) fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// Echoes each input as one chunk per word and ends the turn; returns the number of turns.
pub(crate) fn words() -> BidiFlow<Prefix, String, u32, String> {
    BidiFlow::new(
        "words",
        |_: ActionContext, init: Prefix, mut inbound: Inbound<String>, out: Outbound<String>| async move {
            let mut turns = 0;
            while let Some(text) = inbound.recv().await {
                for word in text.split_whitespace() {
                    out.send(format!("{}{word}", init.prefix)).await?;
                }
                out.end_turn().await?;
                turns += 1;
            }
            Ok::<_, BoxError>(turns)
        },
    )
}

/// An init value.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Prefix {
    /// Put before every word.
    pub(crate) prefix: String,
}
