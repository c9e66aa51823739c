//! Spans kept in memory as they start and end: what the Dev UI shows live, and what Genkit's
//! tools read.
//!
//! [`Traces`] is an OpenTelemetry span processor: every span a flow makes (one per connection,
//! one per turn, its steps) is recorded when it starts and again when it ends, and announced to
//! every [`Updates`] subscriber. It keeps the last traces only (200 unless told), so a
//! long-running development server does not grow. It is the one home of the spans seen in
//! process: development tools read it, and nothing else in the workspace keeps spans.
//!
//! ```
//! use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
//! use bidi_flow::BidiFlow;
//! use bidi_http::traces::{Traces, Update};
//!
//! async fn shout(_: ActionContext, _: (), mut lines: Inbound<String>, out: Outbound<String>)
//!     -> Result<(), BoxError>
//! {
//!     while let Some(line) = lines.recv().await {
//!         out.send(line.to_uppercase()).await?;
//!         out.end_turn().await?;
//!     }
//!     Ok(())
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), BoxError> {
//! let traces = Traces::new();
//! let provider = traces.install();
//! let mut updates = traces.subscribe();
//!
//! let flow = BidiFlow::new("shout", shout);
//! let conn = flow.connect(());
//! conn.send("hi".into()).await?;
//! conn.close();
//! conn.output().await?;
//!
//! // The connection's span started first; its trace has the turn's span too.
//! let first = updates.recv().await?;
//! assert!(matches!(&first, Update::SpanStart(span) if span.name == "shout"));
//! let trace = traces.trace(&first.span().trace_id).expect("kept");
//! assert!(trace.iter().any(|span| span.name == "turn 1"));
//! provider.shutdown()?;
//! # Ok(())
//! # }
//! ```
//!
//! # Beside an exporter
//!
//! To send the same spans to a collector (Jaeger, Arize Phoenix, Langfuse, any OTLP
//! endpoint), build the provider yourself with both: the store, and a batch exporter (from
//! `opentelemetry-otlp`, say, whose HTTP exporter reads the standard `OTEL_EXPORTER_OTLP_*`
//! variables). Install the W3C propagator too, so that every request's `traceparent`
//! continues its caller's trace ([`caller_context`](crate::caller_context)):
//!
//! ```ignore
//! use opentelemetry::global;
//! use opentelemetry_sdk::propagation::TraceContextPropagator;
//! use opentelemetry_sdk::trace::SdkTracerProvider;
//!
//! let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
//! let provider = SdkTracerProvider::builder()
//!     .with_span_processor(traces.clone())
//!     .with_batch_exporter(exporter)
//!     .build();
//! global::set_tracer_provider(provider.clone());
//! global::set_text_map_propagator(TraceContextPropagator::new());
//! // … serve; then send what is still batched:
//! provider.shutdown()?;
//! ```
//!
//! The main command (`bidi-demo`) does this when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::{Array, Context, KeyValue, Value as OtelValue};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

/// How many traces [`Traces::new`] keeps.
const DEFAULT_CAPACITY: usize = 200;

/// How many spans one trace keeps; later ones are counted, not kept.
const SPANS_PER_TRACE: usize = 2_000;

/// How many updates a subscriber may fall behind before it misses some.
const UPDATES: usize = 1_024;

/// Spans kept in memory as they start and end, for the Dev UI and Genkit's tools.
///
/// Cheap to clone: clones share one store. Add it to a tracer provider of your own with
/// `SdkTracerProvider::builder().with_span_processor(traces.clone())`, or let
/// [`install`](Self::install) make one and set it as the global provider (the one flows trace
/// into unless given a tracer).
#[derive(Clone)]
pub struct Traces {
    inner: Arc<Inner>,
}

struct Inner {
    store: Mutex<Store>,
    updates: broadcast::Sender<Update>,
}

/// The traces kept, oldest first.
struct Store {
    capacity: usize,
    order: VecDeque<TraceId>,
    traces: HashMap<TraceId, Kept>,
}

/// One trace's spans, in start order.
#[derive(Default)]
struct Kept {
    spans: Vec<Span>,
    index: HashMap<SpanId, usize>,
}

impl Traces {
    /// A store that keeps the last 200 traces.
    #[must_use]
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }

    /// A store that keeps the last `traces` traces (at least one).
    #[must_use]
    pub fn with_capacity(traces: usize) -> Self {
        let (updates, _) = broadcast::channel(UPDATES);
        Self {
            inner: Arc::new(Inner {
                store: Mutex::new(Store {
                    capacity: traces.max(1),
                    order: VecDeque::new(),
                    traces: HashMap::new(),
                }),
                updates,
            }),
        }
    }

    /// A tracer provider with this store as its span processor, set as the global provider.
    /// Keep it: [`SdkTracerProvider::shutdown`] ends it.
    #[must_use = "keep the provider to shut it down"]
    pub fn install(&self) -> SdkTracerProvider {
        let provider = SdkTracerProvider::builder()
            .with_span_processor(self.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        provider
    }

    /// The traces kept, newest first.
    #[must_use]
    pub fn list(&self) -> Vec<TraceSummary> {
        let store = self.lock();
        store
            .order
            .iter()
            .rev()
            .filter_map(|id| store.traces.get(id).map(Kept::summary))
            .collect()
    }

    /// The spans of the trace `trace_id` (32 hex digits), in start order; `None` if it is not
    /// kept (never seen, or one of the oldest, dropped).
    #[must_use]
    pub fn trace(&self, trace_id: &str) -> Option<Vec<Span>> {
        let id = TraceId::from_hex(trace_id).ok()?;
        self.lock().traces.get(&id).map(|kept| kept.spans.clone())
    }

    /// Every span start and end from now on.
    #[must_use]
    pub fn subscribe(&self) -> Updates {
        Updates(self.inner.updates.subscribe())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.inner
            .store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `span` (replacing its start when it ends) and announces it.
    fn record(&self, span: Span, update: fn(Span) -> Update) {
        let Ok(trace_id) = TraceId::from_hex(&span.trace_id) else {
            return;
        };
        let Ok(span_id) = SpanId::from_hex(&span.span_id) else {
            return;
        };
        self.lock().keep(trace_id, span_id, span.clone());
        // Nobody listening is fine.
        let _ = self.inner.updates.send(update(span));
    }
}

impl Default for Traces {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Traces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.lock();
        f.debug_struct("Traces")
            .field("kept", &store.order.len())
            .field("capacity", &store.capacity)
            .finish()
    }
}

impl Store {
    fn keep(&mut self, trace_id: TraceId, span_id: SpanId, span: Span) {
        if !self.traces.contains_key(&trace_id) {
            while self.order.len() >= self.capacity {
                if let Some(oldest) = self.order.pop_front() {
                    self.traces.remove(&oldest);
                }
            }
            self.order.push_back(trace_id);
        }
        let kept = self.traces.entry(trace_id).or_default();
        match kept.index.get(&span_id) {
            Some(&at) => kept.spans[at] = span,
            None if kept.spans.len() < SPANS_PER_TRACE => {
                kept.index.insert(span_id, kept.spans.len());
                kept.spans.push(span);
            }
            None => {}
        }
    }
}

impl Kept {
    fn summary(&self) -> TraceSummary {
        let root = self
            .spans
            .iter()
            .find(|span| span.parent_span_id.is_none())
            .or_else(|| self.spans.first());
        TraceSummary {
            trace_id: root.map(|span| span.trace_id.clone()).unwrap_or_default(),
            name: root.map(|span| span.name.clone()).unwrap_or_default(),
            start_time: root.map_or(0, |span| span.start_time),
            end_time: root.and_then(|span| span.end_time),
            spans: self.spans.len(),
            failed: self
                .spans
                .iter()
                .any(|span| matches!(span.status, Status::Error { .. })),
        }
    }
}

impl SpanProcessor for Traces {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, _cx: &Context) {
        if let Some(data) = span.exported_data() {
            self.record(Span::started(&data), Update::SpanStart);
        }
    }

    fn on_end(&self, span: SpanData) {
        self.record(Span::ended(&span), Update::SpanEnd);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// One span: as it started, or as it ended.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Span {
    /// The trace's id: 32 hex digits.
    pub trace_id: String,
    /// The span's id: 16 hex digits.
    pub span_id: String,
    /// The parent's id; `None` for a trace's root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// The span's name: a flow's name for a connection, `turn {n}` for a turn.
    pub name: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub start_time: u64,
    /// When it ended; `None` while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<u64>,
    /// Its attributes, OpenTelemetry's values as JSON.
    pub attributes: Map<String, Value>,
    /// How it ended, so far.
    pub status: Status,
    /// The events recorded on it.
    pub events: Vec<Event>,
    /// The instrumentation scope that made it (`bidi-flow` for flows).
    pub scope: String,
    /// Its kind: `internal`, `server`, `client`, `producer` or `consumer`.
    pub kind: &'static str,
}

impl Span {
    /// A running span of the scope `bidi-flow`, kind `internal`, that started at
    /// `start_time` (milliseconds since the Unix epoch), with no parent, attributes or events:
    /// to build the spans a consumer of [`Updates`] is tested with.
    #[must_use]
    pub fn new(
        trace_id: impl Into<String>,
        span_id: impl Into<String>,
        name: impl Into<String>,
        start_time: u64,
    ) -> Self {
        Self {
            trace_id: trace_id.into(),
            span_id: span_id.into(),
            parent_span_id: None,
            name: name.into(),
            start_time,
            end_time: None,
            attributes: Map::new(),
            status: Status::Unset,
            events: Vec::new(),
            scope: "bidi-flow".to_owned(),
            kind: "internal",
        }
    }

    fn started(data: &SpanData) -> Self {
        let mut span = Self::ended(data);
        span.end_time = None;
        span
    }

    fn ended(data: &SpanData) -> Self {
        let context = &data.span_context;
        Self {
            trace_id: context.trace_id().to_string(),
            span_id: context.span_id().to_string(),
            parent_span_id: (data.parent_span_id != SpanId::INVALID)
                .then(|| data.parent_span_id.to_string()),
            name: data.name.to_string(),
            start_time: crate::time::unix_millis(data.start_time),
            end_time: Some(crate::time::unix_millis(data.end_time)),
            attributes: attributes(&data.attributes),
            status: Status::from(&data.status),
            events: data
                .events
                .iter()
                .map(|event| Event {
                    name: event.name.to_string(),
                    time: crate::time::unix_millis(event.timestamp),
                    attributes: attributes(&event.attributes),
                })
                .collect(),
            scope: data.instrumentation_scope.name().to_owned(),
            kind: kind(&data.span_kind),
        }
    }
}

/// How a span ended, so far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Status {
    /// Not set: still running, or ended without saying.
    Unset,
    /// Ended well.
    Ok,
    /// Failed.
    Error {
        /// Why.
        message: String,
    },
}

impl From<&opentelemetry::trace::Status> for Status {
    fn from(status: &opentelemetry::trace::Status) -> Self {
        match status {
            opentelemetry::trace::Status::Unset => Self::Unset,
            opentelemetry::trace::Status::Ok => Self::Ok,
            opentelemetry::trace::Status::Error { description } => Self::Error {
                message: description.to_string(),
            },
        }
    }
}

/// An event recorded on a span.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Event {
    /// Its name.
    pub name: String,
    /// When, in milliseconds since the Unix epoch.
    pub time: u64,
    /// Its attributes.
    pub attributes: Map<String, Value>,
}

/// A kept trace, for a list.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TraceSummary {
    /// The trace's id: 32 hex digits.
    pub trace_id: String,
    /// Its root span's name.
    pub name: String,
    /// When its root started, in milliseconds since the Unix epoch.
    pub start_time: u64,
    /// When its root ended; `None` while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<u64>,
    /// How many spans it has.
    pub spans: usize,
    /// Whether any of them failed.
    pub failed: bool,
}

/// A span started or ended: `{"type": "span_start", ...the span}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Update {
    /// A span started: it has no end time yet.
    SpanStart(Span),
    /// A span ended.
    SpanEnd(Span),
}

impl Update {
    /// The span.
    #[must_use]
    pub fn span(&self) -> &Span {
        match self {
            Self::SpanStart(span) | Self::SpanEnd(span) => span,
        }
    }
}

/// Every span start and end since [`Traces::subscribe`].
#[derive(Debug)]
pub struct Updates(broadcast::Receiver<Update>);

impl Updates {
    /// The next update.
    ///
    /// # Errors
    ///
    /// [`Lagged`] when this subscriber fell more than 1,024 updates behind: it missed that
    /// many, and goes on with the oldest it still has ([`Traces::trace`] has the spans whole).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an update not returned stays for the next call.
    pub async fn recv(&mut self) -> Result<Update, Lagged> {
        loop {
            match self.0.recv().await {
                Ok(update) => return Ok(update),
                Err(broadcast::error::RecvError::Lagged(missed)) => return Err(Lagged(missed)),
                // The store outlives every subscriber's sender: it cannot close, but a closed
                // channel has nothing more to say either.
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}

/// A subscriber fell behind and missed this many updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("missed {0} span updates")]
pub struct Lagged(pub u64);

fn kind(kind: &SpanKind) -> &'static str {
    match kind {
        SpanKind::Internal => "internal",
        SpanKind::Server => "server",
        SpanKind::Client => "client",
        SpanKind::Producer => "producer",
        SpanKind::Consumer => "consumer",
    }
}

fn attributes(attributes: &[KeyValue]) -> Map<String, Value> {
    attributes
        .iter()
        .map(|kv| (kv.key.to_string(), json(&kv.value)))
        .collect()
}

fn json(value: &OtelValue) -> Value {
    match value {
        OtelValue::Bool(b) => Value::Bool(*b),
        OtelValue::I64(n) => Value::from(*n),
        OtelValue::F64(x) => Value::from(*x),
        OtelValue::String(s) => Value::String(s.to_string()),
        OtelValue::Array(Array::Bool(items)) => items.iter().copied().map(Value::Bool).collect(),
        OtelValue::Array(Array::I64(items)) => items.iter().copied().map(Value::from).collect(),
        OtelValue::Array(Array::F64(items)) => items.iter().copied().map(Value::from).collect(),
        OtelValue::Array(Array::String(items)) => {
            items.iter().map(|s| Value::String(s.to_string())).collect()
        }
        // Values added to OpenTelemetry later: their text.
        other => Value::String(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
    use bidi_flow::BidiFlow;
    use futures_util::StreamExt as _;
    use opentelemetry::global::BoxedTracer;
    use opentelemetry::trace::TracerProvider as _;

    use super::*;

    async fn fail_on_boom(
        _: ActionContext,
        (): (),
        mut lines: Inbound<String>,
        out: Outbound<String>,
    ) -> Result<(), BoxError> {
        while let Some(line) = lines.recv().await {
            if line == "boom" {
                return Err("it blew up".into());
            }
            out.send(line).await?;
            out.end_turn().await?;
        }
        Ok(())
    }

    /// A flow traced into `traces` through a provider of its own (not the global one).
    fn traced(traces: &Traces) -> (SdkTracerProvider, BidiFlow<(), String, (), String>) {
        let provider = SdkTracerProvider::builder()
            .with_span_processor(traces.clone())
            .build();
        let tracer = BoxedTracer::new(Box::new(provider.tracer("bidi-flow")));
        let flow = BidiFlow::new("boom", fail_on_boom).with_tracer(tracer);
        (provider, flow)
    }

    /// Sends each line and reads its turn, as a client would.
    async fn run(flow: &BidiFlow<(), String, (), String>, lines: &[&str]) {
        let mut conn = flow.connect(());
        for line in lines {
            if conn.send((*line).to_owned()).await.is_err() {
                break;
            }
            let mut turn = conn.responses();
            while let Some(Ok(_)) = turn.next().await {}
        }
        conn.close();
        let _ = conn.output().await;
    }

    #[tokio::test]
    async fn spans_are_kept_as_they_start_and_end_and_announced() {
        let traces = Traces::new();
        let (_provider, flow) = traced(&traces);
        let mut updates = traces.subscribe();
        run(&flow, &["a", "boom"]).await;

        let Update::SpanStart(root) = updates.recv().await.unwrap() else {
            panic!("the connection's span starts first");
        };
        assert_eq!(root.name, "boom");
        assert!(root.end_time.is_none() && root.parent_span_id.is_none());
        let spans = traces.trace(&root.trace_id).unwrap();
        assert_eq!(spans[0].span_id, root.span_id, "in start order");
        let turn = spans.iter().find(|span| span.name == "turn 1").unwrap();
        assert_eq!(turn.parent_span_id.as_deref(), Some(root.span_id.as_str()));
        assert!(turn.end_time.is_some(), "the start replaced by the end");
        let ended = spans
            .iter()
            .find(|span| span.span_id == root.span_id)
            .unwrap();
        assert!(
            matches!(&ended.status, Status::Error { message } if message.contains("it blew up"))
        );

        let summary = &traces.list()[0];
        assert_eq!(summary.trace_id, root.trace_id);
        assert_eq!(summary.name, "boom");
        assert!(summary.failed && summary.end_time.is_some() && summary.spans >= 2);

        let json = serde_json::to_value(Update::SpanEnd(ended.clone())).unwrap();
        assert_eq!(json["type"], "span_end");
        assert_eq!(json["status"]["code"], "error");
        assert!(json.get("parentSpanId").is_none());
    }

    #[tokio::test]
    async fn only_the_last_traces_are_kept() {
        let traces = Traces::with_capacity(2);
        let (_provider, flow) = traced(&traces);
        for _ in 0..3 {
            run(&flow, &["a"]).await;
        }
        let listed = traces.list();
        assert_eq!(listed.len(), 2);
        assert!(listed[0].start_time >= listed[1].start_time, "newest first");
        assert!(traces.trace("not hex").is_none());
        assert!(traces.trace(&"0".repeat(32)).is_none());
    }

    #[tokio::test]
    async fn a_slow_subscriber_learns_what_it_missed() {
        let traces = Traces::new();
        let (_provider, flow) = traced(&traces);
        let mut updates = traces.subscribe();
        for _ in 0..300 {
            run(&flow, &["a", "b"]).await;
        }
        assert!(matches!(updates.recv().await, Err(Lagged(n)) if n > 0));
        assert!(updates.recv().await.is_ok(), "then goes on");
    }

    #[test]
    fn attribute_values_become_json() {
        let kvs = [
            KeyValue::new("s", "text"),
            KeyValue::new("n", 3_i64),
            KeyValue::new("b", true),
            KeyValue::new("list", OtelValue::Array(Array::I64(vec![1, 2]))),
        ];
        let map = attributes(&kvs);
        assert_eq!(
            Value::Object(map),
            serde_json::json!({"s": "text", "n": 3, "b": true, "list": [1, 2]})
        );
    }
}
