//! A2A's errors: JSON-RPC error objects with the protocol's codes, and the server's refusals
//! put in those terms.
//!
//! JSON-RPC errors are answered with HTTP 200, as JSON-RPC over HTTP answers them (the Python
//! SDK's client reads no error body of another status). Messages quote only what the client
//! sent, capped, and name no Rust types.
//!
//! `error.data` is what A2A 1.0 asks of it: an array of details, each naming its type in
//! `@type` (ProtoJSON's `Any`). Every A2A-specific error (-32001 to -32099) carries a
//! `google.rpc.ErrorInfo` whose `reason` is the error's name in A2A (`TASK_NOT_FOUND`) and
//! whose `domain` is `a2a-protocol.org`, so that a client tells apart errors that share a
//! code in other bindings; invalid params carry a `google.rpc.BadRequest` naming the field
//! (`message.parts[0].text`), and an `ErrorInfo` of reason `INVALID_PARAMS`, as the A2A SDKs
//! name it. JSON-RPC's other errors (-32700, -32600, -32601, -32603) carry none.

use bidi_flow::text::{cap, untyped};
use serde_json::{Value, json};

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

/// The `@type` of the detail every A2A-specific error carries.
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The `@type` of the detail of invalid params.
const BAD_REQUEST: &str = "type.googleapis.com/google.rpc.BadRequest";
/// The `domain` of A2A's `ErrorInfo`.
const DOMAIN: &str = "a2a-protocol.org";

/// The name A2A gives error `code`, in `ErrorInfo.reason`: one of its own errors', or `None`
/// for JSON-RPC's.
pub(crate) fn reason(code: i32) -> Option<&'static str> {
    Some(match code {
        TASK_NOT_FOUND => "TASK_NOT_FOUND",
        TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
        PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
        UNSUPPORTED => "UNSUPPORTED_OPERATION",
        CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
        -32006 => "INVALID_AGENT_RESPONSE",
        NO_EXTENDED_CARD => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        -32008 => "EXTENSION_SUPPORT_REQUIRED",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        _ => return None,
    })
}

impl RpcError {
    /// Error `code` saying `message`; an A2A-specific one with its `ErrorInfo`.
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        let data = reason(code).map(|reason| {
            Box::new(json!([{"@type": ERROR_INFO, "reason": reason, "domain": DOMAIN}]))
        });
        Self {
            code,
            message: untyped(&message.into()),
            data,
        }
    }

    /// The error with `key: value` in its `ErrorInfo`'s metadata (values are strings, as
    /// `ErrorInfo.metadata` is a map of strings); an error without one is left as it is.
    pub(crate) fn with(mut self, key: &str, value: &str) -> Self {
        let details = self.data.as_deref_mut().and_then(Value::as_array_mut);
        let info = details.and_then(|details| {
            details
                .iter_mut()
                .find(|detail| detail["@type"] == ERROR_INFO)
        });
        if let Some(Value::Object(info)) = info {
            let metadata = info.entry("metadata").or_insert_with(|| json!({}));
            metadata[key] = Value::String(value.to_owned());
        }
        self
    }

    /// Params wrong at `path` (a JSON Pointer into the request), for `reason`.
    pub(crate) fn invalid_params(path: &str, reason: impl Into<String>) -> Self {
        let at = if path.is_empty() { "/" } else { path };
        let reason = reason.into();
        let mut error = Self::new(
            INVALID_PARAMS,
            format!("invalid params at `{}`: {reason}", cap(at)),
        );
        let violation = json!({"field": field(path), "description": reason});
        // An `ErrorInfo` too, as the A2A SDKs name this error (`INVALID_PARAMS`): over
        // HTTP+JSON, where 400 is several errors, it is how their clients tell which.
        error.data = Some(Box::new(json!([
            {"@type": BAD_REQUEST, "fieldViolations": [violation]},
            {"@type": ERROR_INFO, "reason": "INVALID_PARAMS", "domain": DOMAIN},
        ])));
        error
    }

    /// The server sends no push notifications (they are disabled, or not built).
    pub(crate) fn no_push() -> Self {
        Self::new(PUSH_NOT_SUPPORTED, "this agent sends no push notifications")
    }

    pub(crate) fn task_not_found(id: &str) -> Self {
        Self::new(TASK_NOT_FOUND, format!("task `{}` not found", cap(id))).with("taskId", id)
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
impl RpcError {
    /// The field invalid params name.
    pub(crate) fn field(&self) -> Option<&str> {
        self.data.as_deref()?[0]["fieldViolations"][0]["field"].as_str()
    }
}

/// The field a JSON Pointer into a request names, as `BadRequest` names fields: from the
/// params, dotted, indices in brackets (`/params/message/parts/0/text` is
/// `message.parts[0].text`; the params themselves, ``).
fn field(path: &str) -> String {
    let within = path.strip_prefix("/params").unwrap_or(path);
    let mut field = String::with_capacity(within.len());
    for token in within.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if !token.is_empty() && token.bytes().all(|byte| byte.is_ascii_digit()) {
            field.push('[');
            field.push_str(&token);
            field.push(']');
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(&token);
        }
    }
    field
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
            Some(Box::new(json!([
                {
                    "@type": BAD_REQUEST,
                    "fieldViolations": [{"field": "message.parts",
                                         "description": "call `c9` is not pending"}],
                },
                {"@type": ERROR_INFO, "reason": "INVALID_PARAMS", "domain": DOMAIN},
            ])))
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

    /// JSONRPC-ERR-001..003: A2A's errors carry `ErrorInfo` (reason, domain) in a data array;
    /// JSON-RPC's carry no data.
    #[test]
    fn a2a_errors_carry_their_error_info() {
        let error = RpcError::task_not_found("t-1");
        assert_eq!(
            error.data,
            Some(Box::new(json!([{
                "@type": ERROR_INFO, "reason": "TASK_NOT_FOUND", "domain": DOMAIN,
                "metadata": {"taskId": "t-1"},
            }])))
        );
        for code in -32009..=-32001 {
            let error = RpcError::new(code, "x");
            let info = &error.data.as_deref().unwrap()[0];
            assert_eq!(info["@type"], ERROR_INFO, "{code}");
            assert_eq!(info["domain"], DOMAIN, "{code}");
            let reason = info["reason"].as_str().unwrap();
            assert!(
                reason.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{reason}"
            );
        }
        for code in [PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INTERNAL] {
            assert_eq!(RpcError::new(code, "x").data, None, "{code}");
        }
        assert_eq!(RpcError::new(INTERNAL, "x").with("taskId", "t").data, None);
    }

    #[test]
    fn fields_are_named_as_bad_request_names_them() {
        assert_eq!(
            field("/params/message/parts/0/text"),
            "message.parts[0].text"
        );
        assert_eq!(
            field("/params/configuration/historyLength"),
            "configuration.historyLength"
        );
        assert_eq!(field("/params/metadata/a~1b"), "metadata.a/b");
        assert_eq!(field("/params"), "");
        assert_eq!(field(""), "");
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
