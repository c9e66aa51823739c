//! Server-sent events: the one home of the SSE record and of the headers every SSE answer
//! carries.
//!
//! A record is an optional `event: {name}` line, the data, and the blank line that ends it.
//! Every writer appends to the caller's buffer: JSON data is serialized straight into it, with
//! no copy. Compact JSON holds no line break, so its data is one `data:` line; text that may
//! hold line breaks ([`text`]) is split into one `data:` line per line, as SSE reads them.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The headers of every SSE answer: the content type, no caching, and no buffering by proxies
/// that honour `X-Accel-Buffering` (nginx holds a response back otherwise).
pub const HEADERS: [(HeaderName, HeaderValue); 3] = [
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
#[must_use]
pub fn response(body: Body) -> Response {
    (HEADERS, body).into_response()
}

/// Appends a record of JSON data: `data: {json}\n\n`.
#[inline]
pub fn data(buf: &mut Vec<u8>, data: &(impl Serialize + ?Sized)) {
    buf.extend_from_slice(b"data: ");
    json(buf, data);
    buf.extend_from_slice(b"\n\n");
}

/// Appends a named event: `event: {name}\ndata: {json}\n\n`.
#[inline]
pub fn event(buf: &mut Vec<u8>, name: &str, data: &(impl Serialize + ?Sized)) {
    buf.extend_from_slice(b"event: ");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\ndata: ");
    json(buf, data);
    buf.extend_from_slice(b"\n\n");
}

/// Appends a record whose data is a JSON object of one member: `data: {"key":json}\n\n`.
///
/// `key` is written as it is: a name of the wire's, which needs no escaping.
#[inline]
pub fn member(buf: &mut Vec<u8>, key: &str, value: &(impl Serialize + ?Sized)) {
    debug_assert!(!key.contains(['"', '\\']), "a key that needs escaping");
    buf.extend_from_slice(b"data: {\"");
    buf.extend_from_slice(key.as_bytes());
    buf.extend_from_slice(b"\":");
    json(buf, value);
    buf.extend_from_slice(b"}\n\n");
}

/// Appends a record of one field of JSON other than `data`: `{name}: {json}\n\n` (Genkit's
/// servers end a failed stream with an `error:` record, which readers of plain SSE ignore).
pub fn field(buf: &mut Vec<u8>, name: &str, value: &(impl Serialize + ?Sized)) {
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b": ");
    json(buf, value);
    buf.extend_from_slice(b"\n\n");
}

/// Appends the `[DONE]` sentinel that ends a stream (the AI SDK's UI message stream, OpenAI's): `data: [DONE]\n\n`.
#[inline]
pub fn done(buf: &mut Vec<u8>) {
    buf.extend_from_slice(b"data: [DONE]\n\n");
}

/// Appends a record whose data is `parts`, one after the other: one `data:` line per line of
/// the text (a line ends at `\n`, `\r\n` or `\r`, as SSE reads them, and a reader joins the
/// lines with `\n`).
pub fn text(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    buf.extend_from_slice(b"data: ");
    let mut after_cr = false;
    for part in parts {
        for &byte in *part {
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => buf.extend_from_slice(b"\ndata: "),
                byte => buf.push(byte),
            }
            after_cr = byte == b'\r';
        }
    }
    buf.extend_from_slice(b"\n\n");
}

#[inline]
fn json(buf: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    // What is written is plain data (events, chunks, JSON values): it always serializes.
    let _ = serde_json::to_writer(&mut *buf, value);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn written(write: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut buf = b"before\n\n".to_vec();
        write(&mut buf);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn data_is_one_line_of_json() {
        assert_eq!(
            written(|buf| data(buf, &json!({"text": "two\nlines"}))),
            "before\n\ndata: {\"text\":\"two\\nlines\"}\n\n"
        );
    }

    #[test]
    fn events_are_named() {
        assert_eq!(
            written(|buf| event(buf, "text_delta", &json!({"delta": "hi"}))),
            "before\n\nevent: text_delta\ndata: {\"delta\":\"hi\"}\n\n"
        );
    }

    #[test]
    fn members_wrap_their_value() {
        assert_eq!(
            written(|buf| member(buf, "message", &json!([1, "a"]))),
            "before\n\ndata: {\"message\":[1,\"a\"]}\n\n"
        );
    }

    #[test]
    fn other_fields_carry_json() {
        assert_eq!(
            written(|buf| field(buf, "error", &json!({"error": {"status": "INTERNAL"}}))),
            "before\n\nerror: {\"error\":{\"status\":\"INTERNAL\"}}\n\n"
        );
    }

    #[test]
    fn done_ends_the_stream() {
        assert_eq!(written(done), "before\n\ndata: [DONE]\n\n");
    }

    #[test]
    fn text_joins_its_parts() {
        assert_eq!(
            written(|buf| text(buf, &[b"{\"id\":", b"7", b"}"])),
            "before\n\ndata: {\"id\":7}\n\n"
        );
    }

    #[test]
    fn text_is_one_data_line_per_line() {
        assert_eq!(
            written(|buf| text(buf, &[b"a\nb\r\nc\r", b"\nd\re", b"\r", b""])),
            "before\n\ndata: a\ndata: b\ndata: c\ndata: d\ndata: e\ndata: \n\n"
        );
    }
}
