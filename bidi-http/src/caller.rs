//! The caller's trace, continued: a request's `traceparent` and `tracestate` (as the
//! application's OpenTelemetry propagator reads them) make every flow or agent it connects a
//! child of the caller's span, on every route of a [`Server`](crate::Server) — the flows',
//! the agents', each protocol's, and a WebSocket's, whose connection keeps its upgrade's
//! context.
//!
//! Nothing is read until the application installs a propagator (OpenTelemetry's default reads
//! nothing), as the W3C one:
//!
//! ```
//! opentelemetry::global::set_text_map_propagator(
//!     opentelemetry_sdk::propagation::TraceContextPropagator::new(),
//! );
//! ```

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use opentelemetry::propagation::Extractor;

/// The caller's trace context in `headers`, as the application's propagator reads it; `None`
/// when nothing names a valid span (always, without a propagator). See
/// [`bidi_flow::caller_context`].
#[must_use]
pub fn caller_context(headers: &HeaderMap) -> Option<Context> {
    bidi_flow::caller_context(&Headers(headers))
}

/// A request's headers as a propagator's carrier.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// Runs the request's handler with the caller's context current, when it sent one.
pub(crate) async fn layer(request: Request, next: Next) -> Response {
    match caller_context(request.headers()) {
        Some(caller) => next.run(request).with_context(caller).await,
        None => next.run(request).await,
    }
}
