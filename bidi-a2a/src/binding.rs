//! The two bindings of A2A 1.0 the wire speaks, JSON-RPC and HTTP+JSON, over one
//! implementation of its operations: a request of either becomes an operation's name and
//! params ([`dispatch`], the one place that says which operation runs what), and its
//! [`Binding`] frames what the operation answers.
//!
//! JSON-RPC wraps every answer and every stream record in a response envelope under the
//! request's id, and answers errors with HTTP 200, as JSON-RPC over HTTP does. HTTP+JSON
//! answers the bare objects (`application/a2a+json`), and errors as `google.rpc.Status`
//! (`{"error": {"code", "status", "message", "details"}}`) with the HTTP status A2A maps each
//! error to; `details` are the JSON-RPC error's `data`. A stream written for a request of one
//! binding is read again by subscribers of either (`tasks::reframe`).

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use bidi_flow::text::cap;
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{
    CONTENT_TYPE_NOT_SUPPORTED, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    TASK_NOT_FOUND, UNSUPPORTED, VERSION_NOT_SUPPORTED,
};
use super::types::{self, Event, Response as Rpc, RpcError};
use super::{Call, Shared, list, send, tasks};
use bidi_http::codec::Failure;
use bidi_http::extract::Served;
use bidi_http::{Host, Identity};

/// How a request reached the wire, and so how it is answered.
#[derive(Debug, Clone)]
pub(crate) enum Binding {
    /// JSON-RPC 2.0, the request's id.
    JsonRpc(Value),
    /// HTTP+JSON.
    Rest,
}

impl Binding {
    /// The content type of its answers.
    pub(crate) fn content_type(&self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Self::JsonRpc(_) => "application/json",
            Self::Rest => "application/a2a+json",
        })
    }

    /// The text of an answer of `result`.
    pub(crate) fn frame(&self, result: &impl Serialize) -> Vec<u8> {
        match self {
            Self::JsonRpc(id) => Rpc::result(id, result).to_vec(),
            // Plain data: it always serializes.
            Self::Rest => serde_json::to_vec(result).unwrap_or_default(),
        }
    }

    /// The answer of `result`.
    pub(crate) fn answer(&self, result: &impl Serialize) -> Response {
        self.body(self.frame(result))
    }

    /// An answer of `body`, JSON already framed.
    pub(crate) fn body(&self, body: impl Into<Body>) -> Response {
        ([(header::CONTENT_TYPE, self.content_type())], body.into()).into_response()
    }

    /// Appends the SSE record of stream event `event`.
    pub(crate) fn record(&self, event: &Event, out: &mut Vec<u8>) {
        match self {
            Self::JsonRpc(id) => bidi_http::sse::data(out, &Rpc::result(id, event)),
            Self::Rest => bidi_http::sse::data(out, event),
        }
    }

    /// The answer of `error`.
    pub(crate) fn refuse(&self, error: &RpcError) -> Response {
        match self {
            Self::JsonRpc(id) => self.body(Rpc::error(id, error).to_vec()),
            Self::Rest => {
                let (status, name) = status_of(error.code);
                let details = error.data.as_deref().cloned().unwrap_or_else(|| json!([]));
                let body = json!({"error": {
                    "code": status.as_u16(), "status": name, "message": error.message,
                    "details": details,
                }});
                // Plain data: it always serializes.
                let body = serde_json::to_vec(&body).unwrap_or_default();
                (status, self.body(body)).into_response()
            }
        }
    }
}

/// The HTTP status and `google.rpc.Code` name A2A maps error `code` to over HTTP+JSON.
fn status_of(code: i32) -> (StatusCode, &'static str) {
    match code {
        PARSE_ERROR | INVALID_REQUEST | INVALID_PARAMS | CONTENT_TYPE_NOT_SUPPORTED => {
            (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
        }
        METHOD_NOT_FOUND | TASK_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        -32099..=-32001 if code != -32006 => (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
    }
}

/// The A2A version a request asks for: its `A2A-Version` header, or else its `A2A-Version`
/// query parameter; `None` if it names none (or an empty one).
pub(crate) fn requested_version<'a>(
    headers: &'a axum::http::HeaderMap,
    query: Option<&'a str>,
) -> Option<&'a str> {
    let header = headers
        .get("a2a-version")
        .map(|value| value.to_str().unwrap_or("?").trim());
    let param = || {
        query?.split('&').find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            name.eq_ignore_ascii_case("a2a-version")
                .then(|| value.trim())
        })
    };
    header.or_else(param).filter(|version| !version.is_empty())
}

/// Why a request at A2A `version` (the one it asks for; none is A2A 0.3, as A2A 1.0 reads a
/// request without one) is refused, if it is: another version than the wire's.
pub(crate) fn version_refusal(version: Option<&str>) -> Option<RpcError> {
    let message = match version {
        Some(version) if speaks(version) => return None,
        Some(version) => format!(
            "A2A version `{}` is not supported: this agent speaks {}",
            cap(version),
            types::VERSION
        ),
        None => format!(
            "the request names no A2A version, which A2A reads as 0.3: this agent speaks {0}; \
             send the header `A2A-Version: {0}`",
            types::VERSION
        ),
    };
    Some(RpcError::new(VERSION_NOT_SUPPORTED, message))
}

/// Whether `version` (`1.0`, `1.0.2`) is the one the wire speaks.
fn speaks(version: &str) -> bool {
    version == types::VERSION
        || version
            .strip_prefix(types::VERSION)
            .is_some_and(|patch| patch.starts_with('.'))
}

/// What every request of either binding brings: the server, the agent it names, who sent it
/// and the A2A version it asks for.
pub(crate) struct Incoming {
    host: Host,
    shared: Shared,
    served: Served,
    identity: Option<Identity>,
    /// The version the request asks for.
    pub(crate) version: Option<String>,
}

impl FromRequestParts<Host> for Incoming {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, host: &Host) -> Result<Self, Failure> {
        let served = Served::from_request_parts(parts, host).await?;
        let shared = parts.extensions.get::<Shared>().cloned().ok_or_else(|| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                bidi_http::codec::Code::ConnectionFailed,
                "the A2A routes are served without their state",
            )
        })?;
        let version = requested_version(&parts.headers, parts.uri.query()).map(str::to_owned);
        Ok(Self {
            host: host.clone(),
            shared,
            served,
            identity: parts.extensions.get::<Identity>().cloned(),
            version,
        })
    }
}

/// Runs operation `method` with `params` for `incoming`, answering as `binding` frames it.
pub(crate) async fn dispatch(
    incoming: Incoming,
    binding: Binding,
    method: &str,
    params: Option<Value>,
) -> Response {
    let Incoming {
        host,
        shared,
        served,
        identity,
        ..
    } = incoming;
    let call = Call {
        host: &host,
        streams: &shared.streams,
        #[cfg(feature = "push")]
        pushing: &shared.pushing,
        agent: &served.agent,
        name: &served.name,
        identity: identity.as_ref(),
        binding,
    };
    #[cfg(feature = "push")]
    let pushing = shared.pushing.enabled();
    let answered = match method {
        "SendMessage" => send(&call, params, false).await,
        "SendStreamingMessage" => send(&call, params, true).await,
        "GetTask" => tasks::get(&call, params).await,
        "CancelTask" => tasks::cancel(&call, params).await,
        "SubscribeToTask" => tasks::subscribe(&call, params).await,
        "ListTasks" => list::list(&call, params).await,
        #[cfg(feature = "push")]
        "CreateTaskPushNotificationConfig" if pushing => super::push::create(&call, params).await,
        #[cfg(feature = "push")]
        "GetTaskPushNotificationConfig" if pushing => super::push::get(&call, params).await,
        #[cfg(feature = "push")]
        "ListTaskPushNotificationConfigs" if pushing => super::push::list(&call, params).await,
        #[cfg(feature = "push")]
        "DeleteTaskPushNotificationConfig" if pushing => super::push::delete(&call, params).await,
        other => Err(not_run(other)),
    };
    answered.unwrap_or_else(|error| call.binding.refuse(&error))
}

/// What an operation the wire does not run answers: the A2A error that says why. An
/// operation whose capability the card does not claim is refused as A2A says (push
/// notifications with -32003, the extended card with -32004); any other name is -32601, with
/// the method's A2A 1.0 name for one of A2A 0.3's.
fn not_run(method: &str) -> RpcError {
    match method {
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => RpcError::no_push(),
        "GetExtendedAgentCard" => RpcError::new(
            UNSUPPORTED,
            "this agent has no extended card (its card says `extendedAgentCard: false`)",
        ),
        other => {
            let renamed = LEGACY
                .iter()
                .find(|(legacy, _)| *legacy == other)
                .map_or(String::new(), |(_, now)| {
                    format!(": `{other}` is A2A 0.3's name, A2A 1.0 calls it `{now}`")
                });
            RpcError::new(
                METHOD_NOT_FOUND,
                format!("method not found: `{}`{renamed}", cap(other)),
            )
        }
    }
}

/// A2A 0.3's methods, and their names in A2A 1.0.
const LEGACY: [(&str, &str); 10] = [
    ("message/send", "SendMessage"),
    ("message/stream", "SendStreamingMessage"),
    ("tasks/get", "GetTask"),
    ("tasks/list", "ListTasks"),
    ("tasks/cancel", "CancelTask"),
    ("tasks/resubscribe", "SubscribeToTask"),
    (
        "tasks/pushNotificationConfig/set",
        "CreateTaskPushNotificationConfig",
    ),
    (
        "tasks/pushNotificationConfig/get",
        "GetTaskPushNotificationConfig",
    ),
    (
        "tasks/pushNotificationConfig/list",
        "ListTaskPushNotificationConfigs",
    ),
    (
        "tasks/pushNotificationConfig/delete",
        "DeleteTaskPushNotificationConfig",
    ),
];

#[cfg(test)]
mod tests {
    use axum::http::HeaderMap;

    use super::*;
    use crate::error::{INTERNAL, PUSH_NOT_SUPPORTED};

    #[test]
    fn methods_the_wire_does_not_run_say_why_in_a2a_codes() {
        for (method, code) in [
            ("CreateTaskPushNotificationConfig", PUSH_NOT_SUPPORTED),
            ("DeleteTaskPushNotificationConfig", PUSH_NOT_SUPPORTED),
            // CORE-CAP-003: the card claims no extended card.
            ("GetExtendedAgentCard", UNSUPPORTED),
            ("message/send", METHOD_NOT_FOUND),
            ("tasks/resubscribe", METHOD_NOT_FOUND),
            ("a/b", METHOD_NOT_FOUND),
            ("Dance", METHOD_NOT_FOUND),
        ] {
            assert_eq!(not_run(method).code, code, "{method}");
        }
        let renamed = not_run("tasks/get").message;
        assert!(renamed.contains("`GetTask`"), "{renamed}");
        let long = "x".repeat(10_000);
        assert!(
            not_run(&long).message.len() < 400,
            "the method is quoted capped"
        );
    }

    /// VER-SERVER-002, -003 and VER-CLIENT-002: another version is refused, a patch version
    /// is not looked at, a request that names none is A2A 0.3's; the version is read from
    /// the header, or else the query.
    #[test]
    fn versions_are_read_and_checked() {
        for version in ["1.0", "1.0.3"] {
            assert!(version_refusal(Some(version)).is_none(), "{version}");
        }
        for version in [Some("0.3"), Some("1.1"), Some("10"), None] {
            let refused = version_refusal(version).unwrap();
            assert_eq!(refused.code, VERSION_NOT_SUPPORTED, "{version:?}");
        }
        let message = version_refusal(None).unwrap().message;
        assert!(message.contains("A2A-Version: 1.0"), "{message}");

        let mut headers = HeaderMap::new();
        assert_eq!(requested_version(&headers, None), None);
        let query = Some("a=1&A2A-Version=1.0");
        assert_eq!(requested_version(&headers, query), Some("1.0"));
        assert_eq!(requested_version(&headers, Some("a2a-version=")), None);
        headers.insert("a2a-version", HeaderValue::from_static(" 1.0 "));
        let query = Some("A2A-Version=0.3");
        assert_eq!(requested_version(&headers, query), Some("1.0"));
        headers.insert("a2a-version", HeaderValue::from_static(""));
        assert_eq!(requested_version(&headers, None), None);
    }

    /// HTTP+JSON errors: the status A2A maps each error to, and `google.rpc.Status` with the
    /// error's details.
    #[tokio::test]
    async fn rest_errors_are_statuses_with_details() {
        for (code, status, name) in [
            (TASK_NOT_FOUND, 404, "NOT_FOUND"),
            (INVALID_PARAMS, 400, "INVALID_ARGUMENT"),
            (UNSUPPORTED, 400, "FAILED_PRECONDITION"),
            (VERSION_NOT_SUPPORTED, 400, "FAILED_PRECONDITION"),
            (INTERNAL, 500, "INTERNAL"),
        ] {
            let refused = Binding::Rest.refuse(&RpcError::new(code, "why"));
            assert_eq!(refused.status().as_u16(), status, "{code}");
            let body = axum::body::to_bytes(refused.into_body(), usize::MAX)
                .await
                .unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error"]["code"], status, "{body}");
            assert_eq!(body["error"]["status"], name, "{body}");
            assert_eq!(body["error"]["message"], "why", "{body}");
            assert!(body["error"]["details"].is_array(), "{body}");
        }
        let json_rpc = Binding::JsonRpc(json!(3)).refuse(&RpcError::task_not_found("t"));
        assert_eq!(json_rpc.status(), StatusCode::OK);
    }
}
