//! The JSON-RPC binding: `POST /agent/{name}/a2a`, one JSON-RPC 2.0 request a POST, its
//! method one of A2A's operations (`binding::dispatch`).

use axum::response::Response;
use bidi_flow::text::reason;
use serde_json::Value;

use super::binding::{Binding, Incoming, dispatch, version_refusal};
use super::error::{INVALID_REQUEST, PARSE_ERROR};
use super::types::RpcError;
use bidi_http::extract::Limited;

/// `POST /agent/{name}/a2a`: one JSON-RPC request.
pub(crate) async fn rpc(incoming: Incoming, Limited(bytes): Limited) -> Response {
    match request(&bytes, incoming.version.as_deref()) {
        Ok((id, method, params)) => dispatch(incoming, Binding::JsonRpc(id), &method, params).await,
        Err((id, error)) => Binding::JsonRpc(id).refuse(&error),
    }
}

/// The request's id, method and params, at A2A `version` (the one the request asks for; none
/// is A2A 0.3, as A2A 1.0 reads a request without one).
///
/// # Errors
///
/// What to answer instead, under the id to answer it with: not JSON, no JSON-RPC 2.0
/// request, another version of A2A.
fn request(
    bytes: &[u8],
    version: Option<&str>,
) -> Result<(Value, String, Option<Value>), (Value, RpcError)> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        let message = format!(
            "parse error: the body is not JSON ({})",
            reason(&error.to_string())
        );
        (Value::Null, RpcError::new(PARSE_ERROR, message))
    })?;
    let Value::Object(mut request) = value else {
        let error = RpcError::new(
            INVALID_REQUEST,
            "invalid request: the body is a JSON object",
        );
        return Err((Value::Null, error));
    };
    let invalid =
        |message: &str| RpcError::new(INVALID_REQUEST, format!("invalid request: {message}"));
    let id = match request.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id,
        Some(Value::Null) | None => {
            return Err((
                Value::Null,
                invalid("a request carries an `id` (a string or a number)"),
            ));
        }
        Some(_) => return Err((Value::Null, invalid("`id` is a string or a number"))),
    };
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, invalid("`jsonrpc` is \"2.0\"")));
    }
    let Some(Value::String(method)) = request.remove("method") else {
        return Err((id, invalid("`method` is a string")));
    };
    match version_refusal(version) {
        Some(refused) => Err((id, refused)),
        None => Ok((id, method, request.remove("params"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::VERSION_NOT_SUPPORTED;

    fn refused(body: &[u8]) -> (Value, i32) {
        let (id, error) = request(body, Some("1.0")).unwrap_err();
        (id, error.code)
    }

    #[test]
    fn requests_that_are_not_json_rpc_are_refused_in_its_codes() {
        assert_eq!(refused(b"{nope"), (Value::Null, PARSE_ERROR));
        assert_eq!(refused(b"[1]"), (Value::Null, INVALID_REQUEST));
        assert_eq!(
            refused(br#"{"jsonrpc":"2.0","method":"GetTask"}"#),
            (Value::Null, INVALID_REQUEST)
        );
        assert_eq!(
            refused(br#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#),
            (Value::Null, INVALID_REQUEST)
        );
        assert_eq!(
            refused(br#"{"jsonrpc":"1.0","id":3,"method":"GetTask"}"#),
            (json!(3), INVALID_REQUEST)
        );
        assert_eq!(
            refused(br#"{"jsonrpc":"2.0","id":"a","method":7}"#),
            (json!("a"), INVALID_REQUEST)
        );
        let (id, method, params) = request(
            br#"{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":"t"}}"#,
            Some("1.0"),
        )
        .unwrap();
        assert_eq!(
            (id, method.as_str(), params),
            (json!("a"), "GetTask", Some(json!({"id": "t"})))
        );
    }

    /// VER-SERVER-002 and -003: a version refused is answered under the request's id.
    #[test]
    fn another_a2a_version_is_refused_under_the_request_s_id() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"GetTask"}"#;
        assert!(request(body, Some("1.0.3")).is_ok());
        for version in [Some("0.3"), None] {
            let (id, error) = request(body, version).unwrap_err();
            assert_eq!(
                (id, error.code),
                (json!(1), VERSION_NOT_SUPPORTED),
                "{version:?}"
            );
        }
    }
}
