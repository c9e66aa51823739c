//! OpenTelemetry spans for flows: one per connection, one child per turn, and [`run`] steps.

use std::borrow::Cow;
use std::fmt::{self, Display};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bidi_core::{ActionContext, BoxError, Observer};
use opentelemetry::context::FutureExt as _;
use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use serde::Serialize;

/// The instrumentation scope of every span this crate makes.
pub(crate) const SCOPE: &str = "bidi-flow";

/// The cap on a JSON attribute (`bidi.init`, `bidi.output`), in bytes.
pub const JSON_ATTRIBUTE_LIMIT: usize = 4096;

/// The tracer a flow uses: the global provider's unless one was given.
#[derive(Clone, Default)]
pub(crate) struct FlowTracer(Option<Arc<BoxedTracer>>);

impl FlowTracer {
    pub(crate) fn new(tracer: BoxedTracer) -> Self {
        Self(Some(Arc::new(tracer)))
    }

    /// The tracer: the flow's own, or the global provider's as it is now.
    fn get(&self) -> Tracer<'_> {
        match &self.0 {
            Some(tracer) => Tracer::Own(tracer),
            None => Tracer::Global(global::tracer(SCOPE)),
        }
    }
}

/// A connection's tracer, shared only once its span records: a connection the global
/// provider does not trace (none installed) allocates no `Arc` for it.
enum Tracer<'a> {
    Own(&'a Arc<BoxedTracer>),
    Global(BoxedTracer),
}

impl Tracer<'_> {
    fn as_ref(&self) -> &BoxedTracer {
        match self {
            Self::Own(tracer) => tracer,
            Self::Global(tracer) => tracer,
        }
    }

    fn shared(self) -> Arc<BoxedTracer> {
        match self {
            Self::Own(tracer) => Arc::clone(tracer),
            Self::Global(tracer) => Arc::new(tracer),
        }
    }
}

impl fmt::Debug for FlowTracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "FlowTracer(custom)"
        } else {
            "FlowTracer(global)"
        })
    }
}

/// Carried in the connection's context so [`run`] steps use the flow's tracer.
#[derive(Clone)]
struct ActiveTracer(Arc<BoxedTracer>);

/// `value` as JSON, capped at [`JSON_ATTRIBUTE_LIMIT`] bytes with a truncation marker: how a
/// flow's spans record their init and output (`bidi.init`, `bidi.output`), for a transport
/// that records other values beside them the same way.
///
/// ```
/// assert_eq!(bidi_flow::json_attribute(&serde_json::json!({"n": 1})), r#"{"n":1}"#);
/// let long = bidi_flow::json_attribute(&"x".repeat(10_000));
/// assert!(long.len() <= bidi_flow::JSON_ATTRIBUTE_LIMIT);
/// assert!(long.ends_with("…[truncated, 10002 bytes]"));
/// ```
pub fn json_attribute<T: Serialize + ?Sized>(value: &T) -> String {
    match serde_json::to_string(value) {
        Ok(json) if json.len() <= JSON_ATTRIBUTE_LIMIT => json,
        Ok(json) => {
            let marker = format!("…[truncated, {} bytes]", json.len());
            let mut end = JSON_ATTRIBUTE_LIMIT - marker.len();
            while !json.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}{marker}", &json[..end])
        }
        Err(error) => format!("<not serializable: {error}>"),
    }
}

/// The spans of one traced connection. Attached to the connection as its [`Observer`] (turns
/// and counts) and as an extension (so the action's task can finish the connection span).
pub(crate) struct ConnectionTrace {
    /// The connection span's context (plus the tracer, for `run` steps).
    cx: Context,
    tracer: Arc<BoxedTracer>,
    inputs: AtomicU64,
    chunks: AtomicU64,
    turns: AtomicU64,
    turn_open: AtomicBool,
    turn_chunks: AtomicU64,
    turn: Mutex<Option<Context>>,
    finished: AtomicBool,
}

impl ConnectionTrace {
    /// Starts the connection span under the caller's current context; `None` when the tracer
    /// does not record (no provider installed), so untraced connections cost nothing more.
    pub(crate) fn start(
        tracer: &FlowTracer,
        flow: &str,
        init: &impl Serialize,
    ) -> Option<Arc<Self>> {
        let tracer = tracer.get();
        let parent = Context::current();
        // The flow's name is there from the start, for span processors that show running
        // spans (`on_start`); the init is serialized only for a span that records.
        let span = tracer
            .as_ref()
            .span_builder(flow.to_owned())
            .with_kind(SpanKind::Internal)
            .with_attributes([KeyValue::new("bidi.flow", flow.to_owned())])
            .start_with_context(tracer.as_ref(), &parent);
        if !span.is_recording() {
            return None;
        }
        let tracer = tracer.shared();
        let cx = parent
            .with_span(span)
            .with_value(ActiveTracer(Arc::clone(&tracer)));
        cx.span()
            .set_attribute(KeyValue::new("bidi.init", json_attribute(init)));
        Some(Arc::new(Self {
            cx,
            tracer,
            inputs: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            turns: AtomicU64::new(0),
            turn_open: AtomicBool::new(false),
            turn_chunks: AtomicU64::new(0),
            turn: Mutex::new(None),
            finished: AtomicBool::new(false),
        }))
    }

    pub(crate) fn context(&self) -> &Context {
        &self.cx
    }

    /// Records an attribute on the connection span.
    pub(crate) fn set_attribute(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    fn open_turn(&self) {
        if self.turn_open.load(Ordering::Acquire) {
            return;
        }
        let mut turn = self.turn.lock().unwrap_or_else(PoisonError::into_inner);
        if turn.is_some() {
            return;
        }
        let n = self.turns.load(Ordering::Relaxed) + 1;
        let span = self
            .tracer
            .span_builder(format!("turn {n}"))
            .with_kind(SpanKind::Internal)
            .with_attributes([KeyValue::new("bidi.turn", n as i64)])
            .start_with_context(&*self.tracer, &self.cx);
        *turn = Some(self.cx.with_span(span));
        self.turn_chunks.store(0, Ordering::Relaxed);
        self.turn_open.store(true, Ordering::Release);
    }

    fn close_turn(&self) {
        let mut turn = self.turn.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cx) = turn.take() {
            let span = cx.span();
            span.set_attribute(KeyValue::new(
                "bidi.chunks",
                self.turn_chunks.load(Ordering::Relaxed) as i64,
            ));
            span.end();
            self.turns.fetch_add(1, Ordering::Relaxed);
            self.turn_open.store(false, Ordering::Release);
        }
    }

    /// Ends the connection: closes an open turn, records the counts, the output or the error,
    /// and ends the span. Only the first call does anything.
    pub(crate) fn finish(&self, outcome: Outcome) {
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        self.close_turn();
        let span = self.cx.span();
        span.set_attributes([
            KeyValue::new(
                "bidi.messages_in",
                self.inputs.load(Ordering::Relaxed) as i64,
            ),
            KeyValue::new(
                "bidi.messages_out",
                self.chunks.load(Ordering::Relaxed) as i64,
            ),
            KeyValue::new("bidi.turns", self.turns.load(Ordering::Relaxed) as i64),
        ]);
        match outcome {
            Outcome::Output(json) => {
                span.set_attribute(KeyValue::new("bidi.output", json));
                span.set_status(Status::Ok);
            }
            Outcome::Failed(message) => span.set_status(Status::error(message)),
        }
        span.end();
    }
}

/// How a traced connection ended.
pub(crate) enum Outcome {
    /// The output, as a capped JSON attribute.
    Output(String),
    /// The error status message.
    Failed(String),
}

impl Observer for ConnectionTrace {
    fn on_input(&self) {
        self.inputs.fetch_add(1, Ordering::Relaxed);
        self.open_turn();
    }

    fn on_chunks(&self, count: usize) {
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        self.chunks.fetch_add(count, Ordering::Relaxed);
        self.open_turn();
        self.turn_chunks.fetch_add(count, Ordering::Relaxed);
    }

    fn on_end_turn(&self) {
        self.open_turn();
        self.close_turn();
    }
}

/// Runs the traced action's future with the connection span current, and finishes the span
/// when it ends, however it ends.
pub(crate) async fn traced<Out, F>(
    trace: Arc<ConnectionTrace>,
    ctx: ActionContext,
    fut: F,
) -> Result<Out, BoxError>
where
    Out: Serialize,
    F: Future<Output = Result<Out, BoxError>>,
{
    /// Finishes the span if the future is dropped (a panic unwinding, a cancel whose grace ran
    /// out, or the runtime shutting down).
    struct Guard(Arc<ConnectionTrace>, ActionContext);
    impl Drop for Guard {
        fn drop(&mut self) {
            let message = if std::thread::panicking() {
                "action panicked".to_owned()
            } else if let Some(cause) = self.1.cause() {
                format!("connection cancelled: {cause}")
            } else {
                "action dropped".to_owned()
            };
            self.0.finish(Outcome::Failed(message));
        }
    }
    let guard = Guard(trace, ctx.clone());
    let result = fut.with_context(guard.0.context().clone()).await;
    let outcome = match (&result, ctx.cause()) {
        (_, Some(cause)) => Outcome::Failed(format!("connection cancelled: {cause}")),
        (Ok(out), None) => Outcome::Output(json_attribute(out)),
        (Err(error), None) => Outcome::Failed(format!("action failed: {error}")),
    };
    guard.0.finish(outcome);
    result
}

/// Starts a span of `builder` in the current turn of `ctx`'s connection (in its connection
/// span between turns), with the flow's tracer: a span of the action's own, for what traces
/// inside an action (an agent's loop: `invoke_agent`, its model and tool calls). The context
/// it answers carries the span, and the tracer for [`child_span`] and [`run`] steps under it.
///
/// `None` when the connection is not traced, or its span is not recorded (no provider
/// installed, or sampled out): a caller then builds nothing more, and an untraced connection
/// costs an extension lookup.
#[must_use]
pub fn turn_span(ctx: &ActionContext, builder: SpanBuilder) -> Option<Context> {
    let trace = ctx.extensions().get::<Arc<ConnectionTrace>>()?;
    let parent = trace
        .turn
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_else(|| trace.cx.clone());
    let span = builder.start_with_context(&*trace.tracer, &parent);
    if !span.is_recording() {
        return None;
    }
    Some(
        parent
            .with_span(span)
            .with_value(ActiveTracer(Arc::clone(&trace.tracer))),
    )
}

/// The caller's trace context, as the application's propagator reads it from `carrier` (an
/// HTTP request's headers, a JSON-RPC request's `_meta`): with OpenTelemetry's W3C propagator
/// installed (`global::set_text_map_propagator`), its `traceparent` and `tracestate`.
///
/// `None` when nothing names a valid span, and always without a propagator installed
/// (OpenTelemetry's default reads nothing). A flow connected while the answer is current
/// (attached, or a future run [`with_context`](opentelemetry::context::FutureExt::with_context))
/// has its connection span as the caller's span's child, so its turns land in the caller's
/// trace.
///
/// ```
/// use opentelemetry::global;
/// use opentelemetry::trace::TraceContextExt as _;
/// use opentelemetry_sdk::propagation::TraceContextPropagator;
/// use serde_json::json;
///
/// global::set_text_map_propagator(TraceContextPropagator::new());
/// let meta = json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"});
/// let caller = bidi_flow::caller_context(&bidi_flow::JsonCarrier(meta.as_object().unwrap()));
/// let caller = caller.expect("a valid traceparent");
/// assert_eq!(
///     caller.span().span_context().trace_id().to_string(),
///     "4bf92f3577b34da6a3ce929d0e0e4736"
/// );
/// assert!(bidi_flow::caller_context(&bidi_flow::JsonCarrier(&Default::default())).is_none());
/// ```
#[must_use]
pub fn caller_context(carrier: &dyn Extractor) -> Option<Context> {
    let cx = global::get_text_map_propagator(|propagator| propagator.extract(carrier));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Writes the current context into `meta` (a JSON-RPC request's `_meta`) as the application's
/// propagator writes it: `traceparent` and `tracestate` with the W3C one; nothing without a
/// propagator or a current span. What `meta` holds already stays. The other side of
/// [`caller_context`], for a request that runs something for this side's span (a tool call the
/// client runs, say).
///
/// ```
/// use opentelemetry::global;
/// use opentelemetry::trace::{Tracer as _, TracerProvider as _};
/// use opentelemetry_sdk::propagation::TraceContextPropagator;
/// use opentelemetry_sdk::trace::SdkTracerProvider;
///
/// global::set_text_map_propagator(TraceContextPropagator::new());
/// let tracer = SdkTracerProvider::builder().build().tracer("example");
/// let mut meta = serde_json::Map::new();
/// tracer.in_span("tool call", |_cx| bidi_flow::inject_context(&mut meta));
/// assert!(meta["traceparent"].as_str().is_some_and(|value| value.starts_with("00-")));
/// ```
pub fn inject_context(meta: &mut serde_json::Map<String, serde_json::Value>) {
    struct Meta<'a>(&'a mut serde_json::Map<String, serde_json::Value>);
    impl opentelemetry::propagation::Injector for Meta<'_> {
        fn set(&mut self, key: &str, value: String) {
            self.0
                .entry(key.to_owned())
                .or_insert(serde_json::Value::String(value));
        }
    }
    let cx = Context::current();
    if cx.span().span_context().is_valid() {
        global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&cx, &mut Meta(meta));
        });
    }
}

/// A JSON object's string members as a propagator's carrier: the `_meta` of an MCP or ACP
/// request, whose `traceparent`, `tracestate` and `baggage` keys both protocols keep for W3C
/// trace context. See [`caller_context`].
#[derive(Debug, Clone, Copy)]
pub struct JsonCarrier<'a>(pub &'a serde_json::Map<String, serde_json::Value>);

impl Extractor for JsonCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Starts a span of `builder` as a child of the span of `parent`, with the tracer `parent`
/// carries (a flow's, from [`turn_span`]; else the global provider's).
#[must_use]
pub fn child_span(parent: &Context, builder: SpanBuilder) -> Context {
    let tracer = parent.get::<ActiveTracer>().map_or_else(
        || Arc::new(global::tracer(SCOPE)),
        |active| Arc::clone(&active.0),
    );
    let span = builder.start_with_context(&*tracer, parent);
    parent.with_span(span)
}

/// Runs `fut` as a step of the current flow: in a child span named `name` of the current
/// OpenTelemetry context (inside an action, the connection span), like Genkit's `core.Run`.
///
/// The span's status is the step's: an `Err` sets an error status with its message.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), std::io::Error> {
/// let rows = bidi_flow::run("load rows", async { Ok::<_, std::io::Error>(vec![1, 2, 3]) }).await?;
/// assert_eq!(rows.len(), 3);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// The step's own error, unchanged.
///
/// # Cancel safety
///
/// Dropping the future drops `fut`; the span ends with an unset status.
pub async fn run<T, E, F>(name: impl Into<Cow<'static, str>>, fut: F) -> Result<T, E>
where
    E: Display,
    F: Future<Output = Result<T, E>>,
{
    let step = SpanBuilder::from_name(name).with_kind(SpanKind::Internal);
    let cx = child_span(&Context::current(), step);
    let result = fut.with_context(cx.clone()).await;
    let span = cx.span();
    match &result {
        Ok(_) => span.set_status(Status::Ok),
        Err(error) => span.set_status(Status::error(error.to_string())),
    }
    span.end();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_attributes_are_capped_on_a_char_boundary() {
        assert_eq!(json_attribute(&serde_json::json!({"a": 1})), r#"{"a":1}"#);
        let long = "é".repeat(5000);
        let capped = json_attribute(&long);
        assert!(capped.len() <= JSON_ATTRIBUTE_LIMIT);
        assert!(
            capped.ends_with("…[truncated, 10002 bytes]"),
            "{}",
            &capped[capped.len() - 40..]
        );
    }
}
