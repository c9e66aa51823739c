//! The wire, without I/O: request bodies decoded into requests (or refusals), chunks and
//! outputs encoded into SSE records, the JSON error body every refusal is answered with, and
//! refusals as WebSocket `error` frames (the WebSocket's frames are `bidi_flow::frame`).
//!
//! A [`Failure`] is the one refusal of every HTTP wire: made from a [`Refusal`] (the one
//! classification of a connection's errors, which flows share) under its stable [`Code`]
//! (`bidi_flow::Code`, the one vocabulary of every wire), with the HTTP status this module
//! gives each code; it maps into each protocol's own error shape at one place in that
//! protocol's crate. Messages name JSON, never Rust types
//! (`bidi_flow::text::untyped`), and quote what the client sent capped.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bidi_agent::Refusal;
use bidi_core::{Error, NotFound};
pub use bidi_flow::Code;
use bidi_flow::JsonError;
use bidi_flow::frame::{self, Frame, FrameError, Undecoded};
use bidi_flow::text::cap;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A refused request or frame: the HTTP status, and the code, message, JSON Pointer and
/// suggestion of its error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The HTTP status it is answered with.
    pub status: StatusCode,
    /// Its code, the same on every wire.
    pub code: Code,
    /// What a user reads: it names no internal id.
    pub message: String,
    /// A JSON Pointer into what the peer sent, when the failure is there.
    pub path: Option<String>,
    /// A registered key like the one asked for, when the failure is a missing one.
    pub suggestion: Option<String>,
}

impl Failure {
    /// A failure answered with `status`, its `code` and `message`.
    #[must_use]
    pub fn new(status: StatusCode, code: Code, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            path: None,
            suggestion: None,
        }
    }

    /// A request or frame that cannot be read: 400 `malformed_frame`.
    #[must_use]
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Code::MalformedFrame, message)
    }

    /// The same failure, pointing at `path` (a JSON Pointer into what the peer sent).
    #[must_use]
    pub fn at(mut self, path: &str) -> Self {
        self.path = Some(path.to_owned());
        self
    }

    /// A key the registry does not have: 404, with a key like it as the suggestion.
    #[must_use]
    pub fn not_found(missing: &NotFound) -> Self {
        let mut failure = Self::new(StatusCode::NOT_FOUND, Code::NotFound, missing.to_string());
        failure.suggestion.clone_from(&missing.suggestion);
        failure
    }

    /// A JSON connection's error, as HTTP.
    #[must_use]
    pub fn from_json(error: &JsonError) -> Self {
        match error {
            JsonError::NotFound(missing) => Self::not_found(missing),
            JsonError::InvalidInit { path, .. } => Self::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInit,
                error.to_string(),
            )
            .at(path),
            JsonError::InvalidInput { path, .. } => Self::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                error.to_string(),
            )
            .at(path),
            JsonError::Send(send) => match send.error() {
                Some(error) => Self::from_connection(error),
                None => Self::new(StatusCode::CONFLICT, Code::SendFailed, error.to_string()),
            },
            JsonError::Connection(error) => Self::from_connection(error),
            _ => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                Code::ConnectionFailed,
                error.to_string(),
            ),
        }
    }

    /// A connection's end, as HTTP: a session that is not there is 404, a bad session id 400,
    /// an idle connection 504, any other failure 500.
    #[must_use]
    pub fn from_connection(error: &Error) -> Self {
        Refusal::of(error).into()
    }

    /// The JSON error body: `{"error":{"status","message","details":{"code","path"?,"suggestion"?}}}`.
    #[must_use]
    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: Status {
                status: status_name(self.status, self.code),
                message: &self.message,
                details: Details {
                    code: self.code,
                    path: self.path.as_deref(),
                    suggestion: self.suggestion.as_deref(),
                },
            },
        }
    }
}

/// A refusal as HTTP: a session another execution holds is 409, one that is not there 404,
/// an init or input that does not fit 400, an idle connection 504, a departed client 499,
/// any other failure 500.
impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Self {
        let (status, code) = match refusal.code() {
            Code::NotFound => {
                if let Some(missing) = refusal.missing() {
                    return Self::not_found(missing);
                }
                (StatusCode::NOT_FOUND, Code::NotFound)
            }
            Code::SessionRunning => (StatusCode::CONFLICT, Code::SessionRunning),
            Code::SessionIncompatible => (StatusCode::CONFLICT, Code::SessionIncompatible),
            Code::InvalidInit => (StatusCode::BAD_REQUEST, Code::InvalidInit),
            Code::InvalidInput => (StatusCode::BAD_REQUEST, Code::InvalidInput),
            Code::IdleTimeout => (StatusCode::GATEWAY_TIMEOUT, Code::IdleTimeout),
            // Nobody reads this answer; 499 is what proxies log for it.
            Code::PeerGone => (client_closed(), Code::ConnectionFailed),
            Code::Cancelled => (client_closed(), Code::Cancelled),
            Code::SendFailed => (StatusCode::CONFLICT, Code::SendFailed),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, Code::ConnectionFailed),
        };
        Self::new(status, code, refusal.into_message())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// 499, "client closed request".
fn client_closed() -> StatusCode {
    StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
}

/// The callable status Genkit clients expect for an HTTP status and what was wrong.
fn status_name(status: StatusCode, code: Code) -> &'static str {
    if code == Code::FailedPrecondition {
        return "FAILED_PRECONDITION";
    }
    match status.as_u16() {
        400 | 405 | 426 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        408 => "DEADLINE_EXCEEDED",
        409 => "ABORTED",
        413 | 429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

/// The numeric gRPC code of a failure, as Genkit's reflection API answers it: its status name's
/// number (`INVALID_ARGUMENT` 3, `INTERNAL` 13, ...).
#[must_use]
pub fn grpc_code(failure: &Failure) -> u16 {
    match status_name(failure.status, failure.code) {
        "CANCELLED" => 1,
        "INVALID_ARGUMENT" => 3,
        "DEADLINE_EXCEEDED" => 4,
        "NOT_FOUND" => 5,
        "PERMISSION_DENIED" => 7,
        "RESOURCE_EXHAUSTED" => 8,
        "FAILED_PRECONDITION" => 9,
        "ABORTED" => 10,
        "UNIMPLEMENTED" => 12,
        "UNAVAILABLE" => 14,
        "UNAUTHENTICATED" => 16,
        _ => 13,
    }
}

/// A failure's JSON error body (see [`Failure::body`]).
#[derive(Debug, Serialize)]
pub struct ErrorBody<'a> {
    error: Status<'a>,
}

#[derive(Debug, Serialize)]
struct Status<'a> {
    status: &'static str,
    message: &'a str,
    details: Details<'a>,
}

#[derive(Debug, Serialize)]
struct Details<'a> {
    code: Code,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suggestion: Option<&'a str>,
}

/// Decodes a JSON object of type `T` from `bytes`, naming the JSON Pointer of the first
/// problem: [`frame::decode_object`], said in a request's terms.
pub fn decode_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Failure> {
    frame::decode_object(bytes, true).map_err(|undecoded| match undecoded {
        Undecoded::NotJson(error) => Failure::malformed(format!("not JSON: {error}")),
        Undecoded::NotObject => Failure::malformed("the body is a JSON object"),
        Undecoded::Bad { path, reason } => {
            let path = path.unwrap_or_default();
            Failure::malformed(format!("bad request {}: {reason}", location(&path))).at(&path)
        }
    })
}

fn location(path: &str) -> String {
    if path.is_empty() {
        "at the root".to_owned()
    } else {
        format!("at `{}`", cap(path))
    }
}

// ---------------------------------------------------------------------------------------------
// Genkit's flow wire.

/// `POST /{type}/{name}`: `{"data": input, "init": init}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowRequest {
    /// The one input; absent is `null`, as Genkit's servers run a flow with no input.
    #[serde(default)]
    pub data: Value,
    /// The init; absent is `null`.
    #[serde(default)]
    pub init: Option<Value>,
}

/// Appends the SSE record of one chunk: `data: {"message":chunk}\n\n`.
pub fn message_record(chunk: &(impl Serialize + ?Sized), buf: &mut Vec<u8>) {
    crate::sse::member(buf, "message", chunk);
}

/// The SSE record of the output: `data: {"result":output}\n\n`.
pub fn result_record(output: &Value, buf: &mut Vec<u8>) {
    crate::sse::member(buf, "result", output);
}

/// The SSE record of a failure, as Genkit's servers write it: an `error:` record,
/// `error: {"error":{"status","message","details"}}\n\n`, whose `details` is text (Genkit's
/// client prints it after the message): the code, then where and what was meant, if known.
pub fn error_record(failure: &Failure, buf: &mut Vec<u8>) {
    let mut details = serde_json::to_value(failure.code)
        .ok()
        .and_then(|code| code.as_str().map(str::to_owned))
        .unwrap_or_default();
    if let Some(path) = &failure.path {
        details.push_str(" at ");
        details.push_str(if path.is_empty() { "the root" } else { path });
    }
    if let Some(suggestion) = &failure.suggestion {
        details.push_str("; did you mean ");
        details.push_str(suggestion);
    }
    let record = StreamError {
        error: StreamStatus {
            status: status_name(failure.status, failure.code),
            message: &failure.message,
            details,
        },
    };
    crate::sse::field(buf, "error", &record);
}

#[derive(Serialize)]
struct StreamError<'a> {
    error: StreamStatus<'a>,
}

#[derive(Serialize)]
struct StreamStatus<'a> {
    status: &'static str,
    message: &'a str,
    details: String,
}

/// The body of a non-streaming answer: `{"result":output}`.
#[must_use]
pub fn result_body(output: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(64);
    buf.extend_from_slice(b"{\"result\":");
    let _ = serde_json::to_writer(&mut buf, output);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

// ---------------------------------------------------------------------------------------------
// WebSocket frames: `bidi_flow::frame`, the flow frames' one codec, on its socket wire.

impl Failure {
    /// A frame the client got wrong (`frame_too_large`, `malformed_frame`, `unknown_frame_type`).
    #[must_use]
    pub fn from_frame(error: &FrameError) -> Self {
        let status = match error {
            FrameError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        let mut failure = Self::new(status, error.code(), error.to_string());
        if let FrameError::Malformed {
            path: Some(path), ..
        } = error
        {
            failure.path = Some(path.clone());
        }
        failure
    }

    /// The failure as a WebSocket `error` frame.
    #[must_use]
    pub fn frame(&self) -> Frame<'_> {
        Frame::Error {
            id: None,
            code: self.code,
            message: &self.message,
            path: self.path.as_deref(),
            suggestion: self.suggestion.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn flow_requests_without_data_have_a_null_input() {
        let request: FlowRequest = decode_object(br#"{"data":null}"#).unwrap();
        assert_eq!(request.data, Value::Null);
        let request: FlowRequest = decode_object(br#"{"init":{"a":1}}"#).unwrap();
        assert_eq!(request.data, Value::Null);
        assert_eq!(request.init, Some(json!({"a": 1})));
    }

    #[test]
    fn unknown_keys_and_non_objects_are_refused_with_a_path() {
        let failure = decode_object::<FlowRequest>(br#"{"data":1,"extra":2}"#).unwrap_err();
        assert_eq!(failure.code, Code::MalformedFrame);
        assert!(failure.message.contains("extra"), "{}", failure.message);
        let failure = decode_object::<FlowRequest>(b"[1]").unwrap_err();
        assert_eq!(failure.message, "the body is a JSON object");
        let failure = decode_object::<FlowRequest>(b"{nope").unwrap_err();
        assert!(
            failure.message.starts_with("not JSON"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn bodies_are_read_once_and_again_only_when_refused() {
        // Read once: whitespace before the object, nested values kept whole.
        let request: FlowRequest =
            decode_object(b" \n{\"data\":{\"b\":[1,2],\"a\":\"x\"}}").unwrap();
        assert_eq!(request.data, serde_json::json!({"b": [1, 2], "a": "x"}));
        // A key twice is refused, as in a frame: which one was meant is not known.
        let failure = decode_object::<FlowRequest>(br#"{"data":1,"data":2}"#).unwrap_err();
        assert!(failure.message.contains("duplicate"), "{}", failure.message);
        // Refused on the second reading, with the path of the problem.
        let failure = decode_object::<Count>(br#"{"n":"x"}"#).unwrap_err();
        assert_eq!(failure.path.as_deref(), Some("/n"), "{}", failure.message);
        let failure = decode_object::<FlowRequest>(b"  [1]").unwrap_err();
        assert_eq!(failure.message, "the body is a JSON object");
    }

    #[derive(Debug, serde::Deserialize)]
    struct Count {
        #[expect(dead_code, reason = "only its refusal is read")]
        n: u32,
    }

    #[test]
    fn records_are_genkit_sse() {
        let mut buf = Vec::new();
        message_record(&json!("a"), &mut buf);
        result_record(&json!({"n": 1}), &mut buf);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "data: {\"message\":\"a\"}\n\ndata: {\"result\":{\"n\":1}}\n\n"
        );
        let mut buf = Vec::new();
        let failure = Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::ConnectionFailed,
            "boom",
        );
        error_record(&failure, &mut buf);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "error: {\"error\":{\"status\":\"INTERNAL\",\"message\":\"boom\",\"details\":\"connection_failed\"}}\n\n"
        );
        let mut buf = Vec::new();
        let failure = Failure::malformed("bad").at("/x");
        error_record(&failure, &mut buf);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "error: {\"error\":{\"status\":\"INVALID_ARGUMENT\",\"message\":\"bad\",\"details\":\"malformed_frame at /x\"}}\n\n"
        );
    }

    #[test]
    fn refused_frames_keep_their_code_and_path() {
        let error = bidi_flow::frame::decode(br#"{"type":"send","inptu":1}"#).unwrap_err();
        let failure = Failure::from_frame(&error);
        assert_eq!(
            (failure.code, failure.path.as_deref()),
            (Code::MalformedFrame, Some("/inptu"))
        );
        let error = bidi_flow::frame::decode(br#"{"type":"dance"}"#).unwrap_err();
        assert_eq!(Failure::from_frame(&error).code, Code::UnknownFrameType);
        let error = FrameError::check_size(2, 1).unwrap_err();
        let failure = Failure::from_frame(&error);
        assert_eq!(
            (failure.code, failure.status),
            (Code::FrameTooLarge, StatusCode::PAYLOAD_TOO_LARGE)
        );
        assert_eq!(
            failure.frame().to_text(),
            r#"{"type":"error","code":"frame_too_large","message":"a frame of 2 bytes is over the limit of 1 bytes"}"#
        );
        let failure = Failure::new(StatusCode::GATEWAY_TIMEOUT, Code::IdleTimeout, "idle");
        assert_eq!(
            failure.frame().to_text(),
            r#"{"type":"error","code":"idle_timeout","message":"idle"}"#
        );
    }

    #[test]
    fn long_quotes_are_capped() {
        let long = "x".repeat(10_000);
        assert!(cap(&long).len() < 300);
    }
}
