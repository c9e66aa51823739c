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

use std::task::Poll;

use axum::extract::Request;
use axum::http::HeaderMap;
use futures_util::future::Either;
use opentelemetry::Context;
use opentelemetry::context::{FutureExt as _, WithContext};
use opentelemetry::propagation::Extractor;
use tower_layer::Layer;
use tower_service::Service;

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

/// The layer that runs each request's route with the caller's context current, when the
/// request carries one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallerTrace;

impl<S> Layer<S> for CallerTrace {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Traced<S> {
        Traced(inner)
    }
}

/// A service whose requests run in their caller's trace ([`CallerTrace`]).
#[derive(Debug, Clone)]
pub(crate) struct Traced<S>(S);

impl<S: Service<Request>> Service<Request> for Traced<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<WithContext<S::Future>, S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match caller_context(request.headers()) {
            Some(caller) => {
                // Current from the route's first step: what it does as it is called, too.
                let future = {
                    let _current = caller.clone().attach();
                    self.0.call(request)
                };
                Either::Left(future.with_context(caller))
            }
            None => Either::Right(self.0.call(request)),
        }
    }
}
