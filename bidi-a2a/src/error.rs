//! A2A's errors: JSON-RPC error objects with the protocol's codes, and the server's refusals
//! put in those terms.
//!
//! JSON-RPC errors are answered with HTTP 200, as JSON-RPC over HTTP answers them (the Python
//! SDK's client reads no error body of another status). Messages quote only what the client
//! sent, capped, and name no Rust types.

use bidi_flow::text::{cap, untyped};
use serde_json::json;

use super::types::RpcError;
use bidi_http::codec::{Code, Failure};

/// The body is not JSON.
pub(crate) const PARSE_ERROR: i32 = -32700;
/// The body is JSON but no JSON-RPC request.
pub(crate) const INVALID_REQUEST: i32 = -32600;
/// No such method.
pub(crate) const METHOD_NOT_FOUND: i32 = -32601;
/// The params do not fit the method.
pub(crate) const INVALID_PARAMS: i32 = -32602;
/// The server failed.
pub(crate) const INTERNAL: i32 = -32603;
/// No task of that id (in the caller's scope).
pub(crate) const TASK_NOT_FOUND: i32 = -32001;
/// The task is over: nothing to cancel.
pub(crate) const TASK_NOT_CANCELABLE: i32 = -32002;
/// The agent sends no push notifications.
pub(crate) const PUSH_NOT_SUPPORTED: i32 = -32003;
/// The agent does not do that (here, or for that task).
pub(crate) const UNSUPPORTED: i32 = -32004;
/// The agent answers in none of the media types the client accepts.
pub(crate) const CONTENT_TYPE_NOT_SUPPORTED: i32 = -32005;
/// The agent has no extended card.
pub(crate) const NO_EXTENDED_CARD: i32 = -32007;
/// The request's `A2A-Version` is not the one the agent speaks.
pub(crate) const VERSION_NOT_SUPPORTED: i32 = -32009;

impl RpcError {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: untyped(&message.into()),
            data: None,
        }
    }

    /// Params wrong at `path` (a JSON Pointer into the request), for `reason`.
    pub(crate) fn invalid_params(path: &str, reason: impl Into<String>) -> Self {
        let at = if path.is_empty() { "/" } else { path };
        let mut error = Self::new(
            INVALID_PARAMS,
            format!("invalid params at `{}`: {}", cap(at), reason.into()),
        );
        error.data = Some(Box::new(json!({ "path": path })));
        error
    }

    pub(crate) fn task_not_found(id: &str) -> Self {
        Self::new(TASK_NOT_FOUND, format!("task `{}` not found", cap(id)))
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL, message)
    }

    /// A refusal of the server's, in A2A's terms: a session another task holds is busy, a
    /// session or snapshot that is not there is an unknown context or task, an input that
    /// does not fit is invalid params (at `input`, where the request carries it), anything
    /// else the server's failure.
    pub(crate) fn from_failure(failure: &Failure, input: &str) -> Self {
        match failure.code {
            Code::SessionRunning => Self::new(
                UNSUPPORTED,
                "the context is busy with another task: send the message once that task has \
                 ended, or cancel it",
            ),
            Code::InvalidInput | Code::InvalidInit | Code::FailedPrecondition => {
                let path = match &failure.path {
                    Some(path) if !path.is_empty() => format!("{input}{path}"),
                    _ => input.to_owned(),
                };
                Self::invalid_params(&path, untyped(&failure.message))
            }
            Code::NotFound => Self::new(TASK_NOT_FOUND, "task or context not found"),
            _ => Self::internal(failure.message.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn refusals_become_a2a_errors() {
        let running = Failure::new(StatusCode::CONFLICT, Code::SessionRunning, "held by x");
        let error = RpcError::from_failure(&running, "/params/message");
        assert_eq!(error.code, UNSUPPORTED);
        assert!(error.message.contains("busy"), "{}", error.message);
        assert!(!error.message.contains("held by x"), "no internal wording");

        let input = Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            "call `c9` is not pending",
        );
        let error = RpcError::from_failure(&input, "/params/message/parts");
        assert_eq!(error.code, INVALID_PARAMS);
        assert_eq!(
            error.message,
            "invalid params at `/params/message/parts`: call `c9` is not pending"
        );
        assert_eq!(
            error.data,
            Some(Box::new(json!({"path": "/params/message/parts"})))
        );

        let failed = Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::ConnectionFailed,
            "invalid type: string \"x\", expected struct LlmSession",
        );
        let error = RpcError::from_failure(&failed, "");
        assert_eq!(error.code, INTERNAL);
        assert!(!error.message.contains("LlmSession"), "{}", error.message);

        let missing = Failure::new(StatusCode::NOT_FOUND, Code::NotFound, "no 5:alice:x");
        let error = RpcError::from_failure(&missing, "");
        assert_eq!(error.code, TASK_NOT_FOUND);
        assert!(!error.message.contains("alice"), "no scoped id");
    }

    #[test]
    fn invalid_params_name_the_root_too() {
        let error = RpcError::invalid_params("", "the params are an object");
        assert_eq!(
            error.message,
            "invalid params at `/`: the params are an object"
        );
    }
}
