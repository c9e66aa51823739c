//! Server-sent event responses: one home for the headers every SSE answer carries, and for
//! named events (`event: {name}` and a JSON `data:` line).

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The headers of every SSE answer: the content type, no caching, and no buffering by proxies
/// that honour `X-Accel-Buffering` (nginx holds a response back otherwise).
pub(crate) const HEADERS: [(HeaderName, HeaderValue); 3] = [
    (
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    ),
    (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    (
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    ),
];

/// An SSE answer of `body`.
pub(crate) fn response(body: Body) -> Response {
    (HEADERS, body).into_response()
}

/// Appends a named event: `event: {name}\ndata: {json}\n\n`.
#[cfg(any(feature = "agents", feature = "dev-ui"))]
pub(crate) fn event(buf: &mut Vec<u8>, name: &str, data: &impl serde::Serialize) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    // What is written is plain data (events, spans): it always serializes.
    let _ = serde_json::to_writer(&mut *buf, data);
    buf.extend_from_slice(b"\n\n");
}
