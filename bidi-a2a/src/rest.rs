//! The HTTP+JSON binding: A2A's operations as resources under the same base URL as the
//! JSON-RPC endpoint (`/agent/{name}/a2a`), each request made into its operation's params and
//! run by `binding::dispatch`, as a JSON-RPC request is.
//!
//! - `POST /message:send`, `POST /message:stream` (SSE): the body is `SendMessageRequest`.
//! - `GET /tasks/{id}?historyLength=`, `GET /tasks?contextId=&status=&pageSize=&..`,
//!   `POST /tasks/{id}:cancel`, `POST /tasks/{id}:subscribe` (SSE).
//! - `POST /tasks/{id}/pushNotificationConfigs` (the body is the config),
//!   `GET /tasks/{id}/pushNotificationConfigs`,
//!   `GET|DELETE /tasks/{id}/pushNotificationConfigs/{configId}`.
//! - `GET /extendedAgentCard`.
//!
//! Query parameters are named as the params' JSON fields; numbers and booleans are read as
//! such. A request names its A2A version as a JSON-RPC one does.

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::Method;
use axum::response::Response;
use axum::routing::{get, post};
use bidi_flow::text::{cap, reason};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::binding::{Binding, Incoming, dispatch, version_refusal};
use super::error::{METHOD_NOT_FOUND, PARSE_ERROR};
use super::types::RpcError;
use bidi_http::Host;
use bidi_http::extract::Limited;

/// The HTTP+JSON routes, beside the JSON-RPC endpoint at `/{kind}/{name}/a2a`.
pub(crate) fn routes(router: Router<Host>) -> Router<Host> {
    router
        .route("/{kind}/{name}/a2a/{operation}", post(message).get(top))
        .route("/{kind}/{name}/a2a/tasks/{task}", get(task).post(task))
        .route(
            "/{kind}/{name}/a2a/tasks/{task}/pushNotificationConfigs",
            get(configs).post(configs),
        )
        .route(
            "/{kind}/{name}/a2a/tasks/{task}/pushNotificationConfigs/{config}",
            get(config).delete(config),
        )
}

/// The path of a request on a task.
#[derive(Debug, Deserialize)]
struct OnTask {
    task: String,
    #[serde(default)]
    config: String,
}

/// The path of a request on the agent.
#[derive(Debug, Deserialize)]
struct Operation {
    operation: String,
}

/// Runs `method` with `params`, unless the request's version is refused.
async fn run(incoming: Incoming, method: &str, params: Result<Value, RpcError>) -> Response {
    if let Some(refused) = version_refusal(incoming.version.as_deref()) {
        return Binding::Rest.refuse(&refused);
    }
    match params {
        Ok(params) => dispatch(incoming, Binding::Rest, method, Some(params)).await,
        Err(error) => Binding::Rest.refuse(&error),
    }
}

/// `POST /message:send` and `POST /message:stream`.
async fn message(
    incoming: Incoming,
    Path(Operation { operation }): Path<Operation>,
    Limited(bytes): Limited,
) -> Response {
    let method = match operation.as_str() {
        "message:send" => "SendMessage",
        "message:stream" => "SendStreamingMessage",
        other => return Binding::Rest.refuse(&no_route(other)),
    };
    run(incoming, method, body(&bytes)).await
}

/// `GET /tasks` (`ListTasks`) and `GET /extendedAgentCard`.
async fn top(
    incoming: Incoming,
    Path(Operation { operation }): Path<Operation>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    match operation.as_str() {
        "tasks" => {
            let params = fields(query, &["pageSize", "historyLength"], &["includeArtifacts"]);
            run(incoming, "ListTasks", params).await
        }
        "extendedAgentCard" => run(incoming, "GetExtendedAgentCard", Ok(Value::Null)).await,
        other => Binding::Rest.refuse(&no_route(other)),
    }
}

/// `GET /tasks/{id}`, `POST /tasks/{id}:cancel` and `POST /tasks/{id}:subscribe`.
async fn task(
    incoming: Incoming,
    method: Method,
    Path(OnTask { task, .. }): Path<OnTask>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    if method == Method::GET {
        let params = fields(query, &["historyLength"], &[]).map(|mut params| {
            params["id"] = Value::String(task);
            params
        });
        return run(incoming, "GetTask", params).await;
    }
    let (id, verb) = task.rsplit_once(':').unwrap_or((&task, ""));
    let method = match verb {
        "cancel" => "CancelTask",
        "subscribe" => "SubscribeToTask",
        _ => return Binding::Rest.refuse(&no_route(&format!("tasks/{task}"))),
    };
    run(incoming, method, Ok(serde_json::json!({ "id": id }))).await
}

/// `POST` and `GET /tasks/{id}/pushNotificationConfigs`.
async fn configs(
    incoming: Incoming,
    method: Method,
    Path(OnTask { task, .. }): Path<OnTask>,
    Limited(bytes): Limited,
) -> Response {
    if method == Method::GET {
        let params = serde_json::json!({ "taskId": task });
        return run(incoming, "ListTaskPushNotificationConfigs", Ok(params)).await;
    }
    let params = body(&bytes).map(|mut params| {
        params["taskId"] = Value::String(task);
        params
    });
    run(incoming, "CreateTaskPushNotificationConfig", params).await
}

/// `GET` and `DELETE /tasks/{id}/pushNotificationConfigs/{configId}`.
async fn config(
    incoming: Incoming,
    method: Method,
    Path(OnTask { task, config }): Path<OnTask>,
) -> Response {
    let params = serde_json::json!({ "taskId": task, "id": config });
    let method = if method == Method::DELETE {
        "DeleteTaskPushNotificationConfig"
    } else {
        "GetTaskPushNotificationConfig"
    };
    run(incoming, method, Ok(params)).await
}

/// A request's body, a JSON object.
fn body(bytes: &[u8]) -> Result<Value, RpcError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(_) => Err(RpcError::invalid_params(
            "/params",
            "the body is a JSON object",
        )),
        Err(error) => Err(RpcError::new(
            PARSE_ERROR,
            format!("the body is not JSON ({})", reason(&error.to_string())),
        )),
    }
}

/// Query parameters as the params' JSON fields: those named in `numbers` and `booleans` read
/// as such, the others as text; `A2A-Version` is the request's version, not a param.
fn fields(
    query: Vec<(String, String)>,
    numbers: &[&str],
    booleans: &[&str],
) -> Result<Value, RpcError> {
    let mut params = Map::new();
    for (name, text) in query {
        if name.eq_ignore_ascii_case("a2a-version") {
            continue;
        }
        let value = if numbers.contains(&name.as_str()) {
            let number = text.parse::<i64>().map_err(|_| {
                let path = format!("/params/{name}");
                RpcError::invalid_params(&path, format!("`{}` is no whole number", cap(&text)))
            })?;
            Value::from(number)
        } else if booleans.contains(&name.as_str()) {
            match text.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => {
                    let path = format!("/params/{name}");
                    return Err(RpcError::invalid_params(&path, "`true` or `false`"));
                }
            }
        } else {
            Value::String(text)
        };
        params.insert(name, value);
    }
    Ok(Value::Object(params))
}

/// A path that names no operation.
fn no_route(path: &str) -> RpcError {
    RpcError::new(
        METHOD_NOT_FOUND,
        format!("no A2A operation at `{}`", cap(path)),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::INVALID_PARAMS;

    fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn query_parameters_are_the_params_fields() {
        let params = fields(
            query(&[
                ("contextId", "c"),
                ("pageSize", "2"),
                ("includeArtifacts", "true"),
                ("A2A-Version", "1.0"),
            ]),
            &["pageSize"],
            &["includeArtifacts"],
        )
        .unwrap();
        assert_eq!(
            params,
            json!({"contextId": "c", "pageSize": 2, "includeArtifacts": true})
        );
        let wrong = fields(query(&[("pageSize", "two")]), &["pageSize"], &[]).unwrap_err();
        assert_eq!(
            (wrong.code, wrong.field()),
            (INVALID_PARAMS, Some("pageSize"))
        );
        let wrong = fields(
            query(&[("includeArtifacts", "1")]),
            &[],
            &["includeArtifacts"],
        );
        assert_eq!(wrong.unwrap_err().field(), Some("includeArtifacts"));
    }

    #[test]
    fn bodies_are_json_objects() {
        assert_eq!(body(b"{\"a\":1}").unwrap(), json!({"a": 1}));
        assert_eq!(body(b"[1]").unwrap_err().code, INVALID_PARAMS);
        assert_eq!(body(b"{nope").unwrap_err().code, PARSE_ERROR);
    }
}
