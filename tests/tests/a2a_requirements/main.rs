//! A2A 1.0's requirements of a server, one test each, named after the requirement (the ids of
//! the A2A project's compatibility kit, `a2a-tck`), over the JSON-RPC binding with raw HTTP
//! requests on 127.0.0.1: what the SDK clients of `a2a_clients.rs` never send, and the
//! details of what the server answers.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;

use bidi_a2a::PushNotifications;
use bidi_flow::Registry;
use bidi_http::Server;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Model, ModelEvent, ModelRequest, StopReason, Tool, Usage};
use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::Notify;

mod list;
mod streams;

/// A server of agent `helper`, which answers every message with `answer-N`, and of `memo`,
/// which keeps no sessions; callers authenticate with `Bearer {name}`.
async fn serve() -> String {
    serve_with(PushNotifications::new()).await
}

/// `lookup`'s input.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // Read by the schema, not by the test.
struct Lookup {
    query: Option<String>,
}

/// [`serve`], its push notifications as `push` says.
async fn serve_with(push: PushNotifications) -> String {
    let script = (1..=40).map(|n| Scripted::new().text(&format!("answer-{n}")));
    let helper = LlmAgent::builder("helper", ScriptedModel::new(script)).build();
    let memo = LlmAgent::builder("memo", ScriptedModel::new(Vec::<Scripted>::new()))
        .client_managed()
        .build();
    // A task of `asker` waits for the client's `lookup`, again and again.
    let asks = (1..=40).map(|n| Scripted::new().tool_call(&format!("k{n}"), "lookup", &json!({})));
    let asker = LlmAgent::builder("asker", ScriptedModel::new(asks))
        .tool(Tool::remote::<Lookup>(
            "lookup",
            "Lookup",
            "Looks a file up",
        ))
        .build();
    let server = Server::new(Registry::new())
        .agent(&helper)
        .agent(&memo)
        .agent(&asker)
        .protocol(bidi_a2a::A2a::new().push_notifications(push));
    format!(
        "http://{}",
        tests::http::serve(tests::http::by_bearer(server)).await
    )
}

/// The bindings a caller speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bind {
    JsonRpc,
    Rest,
}

impl Bind {
    /// A stream record's data as its `StreamResponse`: JSON-RPC's `result`, or as it is.
    fn event(self, data: &str) -> Value {
        let value: Value = serde_json::from_str(data).unwrap();
        match self {
            Self::JsonRpc => value["result"].clone(),
            Self::Rest => value,
        }
    }
}

/// A stream's events, read as they come.
struct Events {
    response: reqwest::Response,
    buffer: String,
    bind: Bind,
}

impl Events {
    /// The next event, or `None` at the stream's end.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let record: String = self.buffer.drain(..end + 2).collect();
                if let Some(data) = record.trim().strip_prefix("data: ") {
                    return Some(self.bind.event(data));
                }
                continue;
            }
            let chunk = self.response.chunk().await.unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The events left, to the stream's end.
    async fn rest(mut self) -> Vec<Value> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

/// Both bindings, for the requirements that hold over each.
const BINDINGS: [Bind; 2] = [Bind::JsonRpc, Bind::Rest];

/// The `ErrorInfo` reasons of A2A's errors, their JSON-RPC codes and HTTP statuses.
const REASONS: [(&str, i64, u16); 8] = [
    ("INVALID_PARAMS", -32602, 400),
    ("TASK_NOT_FOUND", -32001, 404),
    ("TASK_NOT_CANCELABLE", -32002, 400),
    ("PUSH_NOTIFICATION_NOT_SUPPORTED", -32003, 400),
    ("UNSUPPORTED_OPERATION", -32004, 400),
    ("CONTENT_TYPE_NOT_SUPPORTED", -32005, 400),
    ("EXTENDED_AGENT_CARD_NOT_CONFIGURED", -32007, 400),
    ("VERSION_NOT_SUPPORTED", -32009, 400),
];

/// A caller of the server at `base`.
struct Caller {
    http: reqwest::Client,
    base: String,
    name: &'static str,
    bind: Bind,
}

impl Caller {
    fn new(base: &str, name: &'static str) -> Self {
        Self::over(base, name, Bind::JsonRpc)
    }

    fn over(base: &str, name: &'static str, bind: Bind) -> Self {
        Self {
            http: reqwest::Client::new(),
            base: base.to_owned(),
            name,
            bind,
        }
    }

    /// Operation `method` with `params` on `helper`, at A2A 1.0, over the caller's binding:
    /// the answer as a JSON-RPC response (`result` or `error`; an HTTP+JSON error read back
    /// into its JSON-RPC code, having checked its status).
    async fn call(&self, method: &str, params: Value) -> Value {
        self.call_on("helper", method, params).await
    }

    /// [`call`](Self::call) on `agent`.
    async fn call_on(&self, agent: &str, method: &str, params: Value) -> Value {
        match self.bind {
            Bind::JsonRpc => {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
                self.raw(agent, Some("1.0"), &body).await
            }
            Bind::Rest => self.rest(agent, method, params).await,
        }
    }

    /// A streaming operation (`SendStreamingMessage`, `SubscribeToTask`) on `helper`: the
    /// response's content type, and its events (each record's `StreamResponse`), or the error.
    async fn stream(&self, method: &str, params: Value) -> Result<(String, Vec<Value>), Value> {
        self.stream_on("helper", method, params).await
    }

    /// A streaming operation on `agent` whose events are read as they come.
    async fn events(&self, agent: &str, method: &str, params: Value) -> Events {
        let request = self.stream_request(agent, method, &params);
        let response = self.streaming(request).await;
        let kind = response.headers()["content-type"].to_str().unwrap();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Events {
            response,
            buffer: String::new(),
            bind: self.bind,
        }
    }

    /// Sends a streaming request as the caller, at A2A 1.0.
    async fn streaming(&self, request: reqwest::RequestBuilder) -> reqwest::Response {
        request
            .bearer_auth(self.name)
            .header("A2A-Version", "1.0")
            .send()
            .await
            .unwrap()
    }

    /// [`stream`](Self::stream) on `agent`.
    async fn stream_on(
        &self,
        agent: &str,
        method: &str,
        params: Value,
    ) -> Result<(String, Vec<Value>), Value> {
        let request = self.stream_request(agent, method, &params);
        let response = self.streaming(request).await;
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        if !kind.starts_with("text/event-stream") {
            let body: Value = serde_json::from_str(&text).unwrap();
            return Err(match self.bind {
                Bind::JsonRpc => body["error"].clone(),
                Bind::Rest => json!({"status": status, "error": body["error"]}),
            });
        }
        let events = text
            .split("\n\n")
            .filter_map(|record| record.trim().strip_prefix("data: "))
            .map(|data| self.bind.event(data))
            .collect();
        Ok((kind, events))
    }

    /// The request of streaming operation `method` on `agent`, over the caller's binding.
    fn stream_request(&self, agent: &str, method: &str, params: &Value) -> reqwest::RequestBuilder {
        let base = format!("{}/agent/{agent}/a2a", self.base);
        match self.bind {
            Bind::JsonRpc => self
                .http
                .post(base)
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})),
            Bind::Rest => match method {
                "SendStreamingMessage" => self
                    .http
                    .post(format!("{base}/message:stream"))
                    .json(params),
                _ => {
                    let id = params["id"].as_str().unwrap();
                    self.http.post(format!("{base}/tasks/{id}:subscribe"))
                }
            },
        }
    }

    /// `method` with `params` as HTTP+JSON's resource request to `agent`.
    async fn rest(&self, agent: &str, method: &str, mut params: Value) -> Value {
        let base = format!("{}/agent/{agent}/a2a", self.base);
        let mut take = |field: &str| {
            let value = params[field].take();
            value.as_str().map(str::to_owned).unwrap_or_default()
        };
        let (verb, url, body) = match method {
            "SendMessage" => ("POST", format!("{base}/message:send"), Some(params)),
            "SendStreamingMessage" => ("POST", format!("{base}/message:stream"), Some(params)),
            "GetTask" => {
                let id = take("id");
                ("GET", format!("{base}/tasks/{id}{}", query(&params)), None)
            }
            "ListTasks" => ("GET", format!("{base}/tasks{}", query(&params)), None),
            "CancelTask" => ("POST", format!("{base}/tasks/{}:cancel", take("id")), None),
            "SubscribeToTask" => (
                "POST",
                format!("{base}/tasks/{}:subscribe", take("id")),
                None,
            ),
            "GetExtendedAgentCard" => ("GET", format!("{base}/extendedAgentCard"), None),
            "CreateTaskPushNotificationConfig" => {
                let task = take("taskId");
                let url = format!("{base}/tasks/{task}/pushNotificationConfigs");
                ("POST", url, Some(params))
            }
            "ListTaskPushNotificationConfigs" => {
                let url = format!("{base}/tasks/{}/pushNotificationConfigs", take("taskId"));
                ("GET", url, None)
            }
            "GetTaskPushNotificationConfig" | "DeleteTaskPushNotificationConfig" => {
                let (task, id) = (take("taskId"), take("id"));
                let url = format!("{base}/tasks/{task}/pushNotificationConfigs/{id}");
                let verb = if method.starts_with("Get") {
                    "GET"
                } else {
                    "DELETE"
                };
                (verb, url, None)
            }
            other => panic!("no HTTP+JSON request for {other}"),
        };
        let verb = reqwest::Method::from_bytes(verb.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(verb, url)
            .bearer_auth(self.name)
            .header("A2A-Version", "1.0");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        if status < 300 {
            return json!({ "result": body });
        }
        let error = &body["error"];
        assert_eq!(error["code"], status, "{body}");
        let details = error["details"].clone();
        let reason = details
            .as_array()
            .unwrap()
            .iter()
            .find(|detail| detail["@type"] == "type.googleapis.com/google.rpc.ErrorInfo")
            .map(|info| info["reason"].as_str().unwrap().to_owned());
        let code = match reason {
            Some(reason) => {
                let (_, code, expected) = REASONS
                    .iter()
                    .find(|(known, ..)| *known == reason)
                    .expect("a reason of A2A's");
                assert_eq!(status, *expected, "{reason}: {body}");
                *code
            }
            None => match (status, error["status"].as_str().unwrap()) {
                (400, "INVALID_ARGUMENT") => -32602,
                (404, "NOT_FOUND") => -32601,
                (500, "INTERNAL") => -32603,
                other => panic!("{other:?}: {body}"),
            },
        };
        json!({"error": {"code": code, "message": error["message"], "data": details}})
    }

    /// `body` to `agent`'s endpoint, with `version` as its `A2A-Version` header.
    async fn raw(&self, agent: &str, version: Option<&str>, body: &Value) -> Value {
        let mut request = self
            .http
            .post(format!("{}/agent/{agent}/a2a", self.base))
            .bearer_auth(self.name)
            .json(body);
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/json");
        response.json().await.unwrap()
    }

    /// Sends `text` (in `context`, if given): the task the turn made.
    async fn send(&self, text: &str, context: Option<&str>) -> Value {
        let mut message = json!({"messageId": format!("m-{text}"), "role": "ROLE_USER",
                                 "parts": [{"text": text}]});
        if let Some(context) = context {
            message["contextId"] = json!(context);
        }
        let sent = self.call("SendMessage", json!({"message": message})).await;
        let task = sent["result"]["task"].clone();
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
        task
    }

    /// The card at `/agent/{path}`, as the caller reads it.
    async fn card(&self, path: &str) -> Value {
        let card = self.http.get(format!("{}/agent/{path}", self.base));
        let card = card.bearer_auth(self.name).send().await.unwrap();
        card.json().await.unwrap()
    }

    async fn list(&self, params: Value) -> Value {
        let listed = self.call("ListTasks", params).await;
        assert!(listed.get("error").is_none(), "{listed}");
        listed["result"].clone()
    }
}

/// `params` as a query string, `?name=value&..` (empty if there are none).
fn query(params: &Value) -> String {
    let pairs: Vec<String> = params
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, value)| !value.is_null())
        .map(|(name, value)| {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let encoded: String = text
                .bytes()
                .map(|byte| match byte {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                        char::from(byte).to_string()
                    }
                    other => format!("%{other:02X}"),
                })
                .collect();
            format!("{name}={encoded}")
        })
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    }
}

/// Runs `test` over each binding: a new server each time, at `base`, and `alice` its caller.
async fn over_both(test: impl AsyncFn(&Caller, &str, Bind)) {
    for bind in BINDINGS {
        let base = serve().await;
        test(&Caller::over(&base, "alice", bind), &base, bind).await;
    }
}

/// The `ErrorInfo` of an A2A error response.
#[track_caller]
fn error_info(response: &Value) -> &Value {
    let data = response["error"]["data"].as_array().expect("a data array");
    let info = data
        .iter()
        .find(|detail| detail["@type"] == "type.googleapis.com/google.rpc.ErrorInfo")
        .expect("an ErrorInfo");
    assert_eq!(info["domain"], "a2a-protocol.org");
    info
}

/// JSONRPC-ERR-001 to -003 and HTTP+JSON's errors (section 11.6): errors are JSON-RPC error
/// objects, or `google.rpc.Status` with the HTTP status A2A maps each to; A2A's own (-32001
/// to -32099) carry a `google.rpc.ErrorInfo` in a `data` (`details`) array, named in
/// UPPER_SNAKE_CASE.
#[tokio::test]
async fn jsonrpc_err_003_http_err_a2a_errors_include_error_info() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let done = alice.send("hi", None).await;
        let cases = [
            ("GetTask", json!({"id": "nope"}), -32001, "TASK_NOT_FOUND"),
            (
                "CancelTask",
                json!({"id": done["id"]}),
                -32002,
                "TASK_NOT_CANCELABLE",
            ),
            (
                "SubscribeToTask",
                json!({"id": done["id"]}),
                -32004,
                "UNSUPPORTED_OPERATION",
            ),
            (
                "GetExtendedAgentCard",
                json!({}),
                -32004,
                "UNSUPPORTED_OPERATION",
            ),
        ];
        for (method, params, code, reason) in cases {
            let answered = alice.call(method, params).await;
            assert_eq!(answered["error"]["code"], code, "{method}: {answered}");
            assert_eq!(error_info(&answered)["reason"], reason, "{method}");
        }
        let version = alice
            .raw(
                "helper",
                Some("0.3"),
                &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                                "params": {"id": "x"}}),
            )
            .await;
        assert_eq!(error_info(&version)["reason"], "VERSION_NOT_SUPPORTED");
        let not_found = alice.call("GetTask", json!({"id": "nope"})).await;
        assert_eq!(
            error_info(&not_found)["metadata"],
            json!({"taskId": "nope"})
        );
        // JSON-RPC's own errors: no A2A details.
        if bind == Bind::JsonRpc {
            let unknown = alice.call("tasks/get", json!({"id": "x"})).await;
            assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
            assert!(unknown["error"].get("data").is_none(), "{unknown}");
        }
    })
    .await;
}

/// CORE-CAP-001: a server whose card says `pushNotifications: false` refuses every push
/// notification method with `PushNotificationNotSupportedError`.
#[tokio::test]
async fn core_cap_001_push_methods_are_refused_where_the_card_says_no() {
    for bind in BINDINGS {
        core_cap_001_push_methods_are_refused_where_the_card_says_no_over(bind).await;
    }
}

async fn core_cap_001_push_methods_are_refused_where_the_card_says_no_over(bind: Bind) {
    let base = serve_with(PushNotifications::disabled()).await;
    let alice = Caller::over(&base, "alice", bind);
    let card = alice.card("helper/.well-known/agent-card.json").await;
    assert_eq!(card["capabilities"]["pushNotifications"], false, "{card}");
    let task = alice.send("hi", None).await;
    let named = json!({"taskId": task["id"], "id": "p"});
    let config = json!({"taskId": task["id"], "url": "http://example.com/hook"});
    for (method, params) in [
        ("CreateTaskPushNotificationConfig", config.clone()),
        ("GetTaskPushNotificationConfig", named.clone()),
        (
            "ListTaskPushNotificationConfigs",
            json!({"taskId": task["id"]}),
        ),
        ("DeleteTaskPushNotificationConfig", named),
    ] {
        let refused = alice.call(method, params).await;
        assert_eq!(refused["error"]["code"], -32003, "{method}: {refused}");
        assert_eq!(
            error_info(&refused)["reason"],
            "PUSH_NOTIFICATION_NOT_SUPPORTED"
        );
    }
    let inline = json!({"message": {"messageId": "p", "role": "ROLE_USER",
                                    "parts": [{"text": "hi"}]},
                        "configuration": {"taskPushNotificationConfig": config}});
    let refused = alice.call("SendMessage", inline).await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
}

/// CORE-ERR-002 and JSON-RPC 2.0: invalid params name the field (`google.rpc.BadRequest`),
/// an unknown method is -32601 whatever its name.
#[tokio::test]
async fn core_err_002_invalid_params_name_the_field_and_unknown_methods_are_32601() {
    let base = serve().await;
    let alice = Caller::new(&base, "alice");
    let wrong = alice
        .call(
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER",
                                                "parts": [{"text": 7}]}}),
        )
        .await;
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    let detail = &wrong["error"]["data"][0];
    assert_eq!(detail["@type"], "type.googleapis.com/google.rpc.BadRequest");
    assert_eq!(
        detail["fieldViolations"][0]["field"],
        "message.parts[0].text"
    );
    for method in ["Dance", "message/send", "a/b/c"] {
        let unknown = alice.call(method, json!({})).await;
        assert_eq!(unknown["error"]["code"], -32601, "{method}: {unknown}");
    }
}

/// DM-MSG-001: a message carries `messageId`; one without is invalid params.
#[tokio::test]
async fn dm_msg_001_a_message_without_message_id_is_refused() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        for message in [
            json!({"role": "ROLE_USER", "parts": [{"text": "hi"}]}),
            json!({"messageId": "", "role": "ROLE_USER", "parts": [{"text": "hi"}]}),
        ] {
            let refused = alice.call("SendMessage", json!({"message": message})).await;
            assert_eq!(refused["error"]["code"], -32602, "{refused}");
            let field = &refused["error"]["data"][0]["fieldViolations"][0]["field"];
            assert_eq!(field, "message.messageId", "{refused}");
        }
        assert_eq!(alice.list(json!({})).await["totalSize"], 0, "nothing ran");
    })
    .await;
}

/// DM-PART-001 and the card's input modes: a part is one of text, file and data; JSON the card
/// says it takes (`application/json`) is read as the user's.
#[tokio::test]
async fn dm_part_001_a_part_is_one_kind_and_json_parts_are_taken() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        let card = alice.card("helper/a2a/.well-known/agent-card.json").await;
        assert!(
            card["defaultInputModes"]
                .as_array()
                .unwrap()
                .contains(&json!("application/json"))
        );
        let json_part = json!({"messageId": "j", "role": "ROLE_USER",
                               "parts": [{"data": {"k": 1}, "mediaType": "application/json"}]});
        let sent = alice
            .call("SendMessage", json!({"message": json_part}))
            .await;
        let task = &sent["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
        assert_eq!(
            task["history"][0]["parts"][0]["text"], r#"{"k":1}"#,
            "{sent}"
        );

        let two = json!({"messageId": "t", "role": "ROLE_USER",
                         "parts": [{"text": "a", "data": {"k": 1}}]});
        let refused = alice.call("SendMessage", json!({"message": two})).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
    })
    .await;
}

/// VER-SERVER-002 and -003: a request that names no version is A2A 0.3's, and another
/// version is refused with `VersionNotSupportedError`; the version may come as a query
/// parameter.
#[tokio::test]
async fn ver_server_003_a_request_without_a_version_is_a2a_0_3() {
    let base = serve().await;
    let alice = Caller::new(&base, "alice");
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "ListTasks"});
    for version in [None, Some(""), Some("0.3"), Some("2.0")] {
        let refused = alice.raw("helper", version, &body).await;
        assert_eq!(refused["error"]["code"], -32009, "{version:?}: {refused}");
        assert_eq!(refused["id"], 9);
    }
    for version in ["1.0", "1.0.2"] {
        let listed = alice.raw("helper", Some(version), &body).await;
        assert!(listed.get("result").is_some(), "{version}: {listed}");
    }
    let by_query = alice
        .http
        .post(format!("{base}/agent/helper/a2a?A2A-Version=1.0"))
        .bearer_auth("alice")
        .json(&body)
        .send()
        .await
        .unwrap();
    let listed: Value = by_query.json().await.unwrap();
    assert!(listed.get("result").is_some(), "{listed}");
}

/// CARD-CACHE-001 and -002: the card carries `Cache-Control` with `max-age` and an `ETag`; a
/// client that has it asks with `If-None-Match` and is answered 304.
#[tokio::test]
async fn card_cache_001_002_the_card_is_cached_with_max_age_and_an_etag() {
    let base = serve().await;
    let http = reqwest::Client::new();
    let get = |url: String| http.get(url).bearer_auth("alice");
    let url = format!("{base}/agent/helper/.well-known/agent-card.json");
    let card = get(url.clone()).send().await.unwrap();
    assert_eq!(card.status(), 200);
    let cache = card.headers()["cache-control"].to_str().unwrap().to_owned();
    assert!(cache.contains("max-age="), "{cache}");
    let tag = card.headers()["etag"].clone();
    let again = get(url)
        .header("if-none-match", tag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"], tag);
    let tags: HashSet<_> = [
        tag,
        get(format!("{base}/agent/memo/.well-known/agent-card.json"))
            .send()
            .await
            .unwrap()
            .headers()["etag"]
            .clone(),
    ]
    .into();
    assert_eq!(tags.len(), 2, "each card its own tag");
}

/// A user message saying `text`, with `ids` (`taskId`, `contextId`) merged in.
fn message(text: &str, ids: &Value) -> Value {
    let mut message = json!({"messageId": format!("m-{text}"), "role": "ROLE_USER",
                             "parts": [{"text": text}]});
    if let Some(ids) = ids.as_object() {
        for (key, value) in ids {
            message[key] = value.clone();
        }
    }
    message
}

/// CORE-SEND-001..003 and DM-TASK-001, DM-STATUS-001, DM-SERIAL-001..003: `SendMessage`
/// answers a task (camelCase, its state a `TASK_STATE_*` name, its timestamp ISO 8601 in
/// UTC); a message on a task that is over is refused; output modes the agent does not answer
/// are refused.
#[tokio::test]
async fn core_send_001_003_a_message_is_answered_with_a_task_as_a2a_writes_one() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let task = alice.send("hi", None).await;
        for field in ["id", "contextId", "status", "artifacts", "history"] {
            assert!(task.get(field).is_some(), "{field}: {task}");
        }
        let stamp = task["status"]["timestamp"].as_str().unwrap();
        assert!(bidi_http::time::parse_rfc3339(stamp).is_some() && stamp.ends_with('Z'));
        assert_eq!(task["artifacts"][0]["artifactId"], "answer-1", "{task}");
        assert_eq!(task["history"][1]["role"], "ROLE_AGENT", "{task}");

        let params = json!({"message": message("more", &json!({"taskId": task["id"]}))});
        let over = alice.call("SendMessage", params).await;
        assert_eq!(over["error"]["code"], -32004, "{bind:?}: {over}");
        let modes = json!({"message": message("img", &json!({})),
                           "configuration": {"acceptedOutputModes": ["image/png"]}});
        let refused = alice.call("SendMessage", modes).await;
        assert_eq!(refused["error"]["code"], -32005, "{bind:?}: {refused}");
    })
    .await;
}

/// CORE-STREAM-001, -003 and JSONRPC-SSE-001: `SendStreamingMessage` answers SSE
/// (`text/event-stream`) that begins with the task and ends at its terminal state.
#[tokio::test]
async fn core_stream_001_003_a_stream_is_sse_from_the_task_to_its_end() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let params = json!({"message": message("stream", &json!({}))});
        let (kind, events) = alice.stream("SendStreamingMessage", params).await.unwrap();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        assert_eq!(events[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED");
        let last = events.last().unwrap();
        let state = &last["statusUpdate"]["status"]["state"];
        assert_eq!(state, "TASK_STATE_COMPLETED", "{bind:?}: {events:?}");
        let task = events[0]["task"]["id"].clone();
        assert!(events.iter().skip(1).all(|event| {
            let update = event.as_object().unwrap().values().next().unwrap();
            update["taskId"] == task
        }));
    })
    .await;
}

/// CORE-GET-001, -002 and CORE-HIST-002: `GetTask` answers the task as it stands, its history
/// no longer than asked; an unknown task is `TaskNotFoundError`.
#[tokio::test]
async fn core_get_001_002_get_task_answers_the_task_or_task_not_found() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let task = alice.send("hi", None).await;
        let context = task["contextId"].as_str().unwrap().to_owned();
        alice.send("again", Some(&context)).await;
        let got = alice.call("GetTask", json!({"id": task["id"]})).await;
        assert_eq!(got["result"]["id"], task["id"], "{got}");
        assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED");
        for limit in [0, 1, 3] {
            let params = json!({"id": task["id"], "historyLength": limit});
            let got = alice.call("GetTask", params).await;
            let history = got["result"]["history"].as_array().map_or(0, Vec::len);
            assert!(history <= limit, "{bind:?} {limit}: {got}");
        }
        let missing = alice.call("GetTask", json!({"id": "no-such-task"})).await;
        assert_eq!(missing["error"]["code"], -32001, "{missing}");
    })
    .await;
}

/// CORE-CANCEL-001..003: a task waiting for input is canceled, and answers canceled; a task
/// that is over is `TaskNotCancelableError`; an unknown one `TaskNotFoundError`.
#[tokio::test]
async fn core_cancel_001_003_cancel_task_cancels_or_says_why_not() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let params = json!({"message": message("find it", &json!({}))});
        let asked = alice.call_on("asker", "SendMessage", params).await;
        let task = &asked["result"]["task"];
        assert_eq!(
            task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{asked}"
        );
        let canceled = alice
            .call_on("asker", "CancelTask", json!({"id": task["id"]}))
            .await;
        assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
        assert_eq!(canceled["result"]["id"], task["id"]);
        let again = alice
            .call_on("asker", "CancelTask", json!({"id": task["id"]}))
            .await;
        assert_eq!(again["error"]["code"], -32002, "{bind:?}: {again}");
        let missing = alice
            .call("CancelTask", json!({"id": "no-such-task"}))
            .await;
        assert_eq!(missing["error"]["code"], -32001, "{missing}");
    })
    .await;
}

/// CORE-EXECUTION-MODE-001, -002: a blocking `SendMessage` answers once the task is over or
/// waits for input; `returnImmediately` answers at once, and the task goes on to its end.
#[tokio::test]
async fn core_execution_mode_001_002_blocking_waits_and_return_immediately_does_not() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        let asked = alice
            .call_on(
                "asker",
                "SendMessage",
                json!({"message": message("find", &json!({}))}),
            )
            .await;
        let state = &asked["result"]["task"]["status"]["state"];
        assert_eq!(state, "TASK_STATE_INPUT_REQUIRED", "interrupted: {asked}");
        let params = json!({"message": message("later", &json!({})),
                            "configuration": {"returnImmediately": true}});
        let at_once = alice.call("SendMessage", params).await;
        let task = at_once["result"]["task"].clone();
        assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{at_once}");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let got = alice.call("GetTask", json!({"id": task["id"]})).await;
            if got["result"]["status"]["state"] == "TASK_STATE_COMPLETED" {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never completed: {got}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// CORE-MULTI-001a, -002a, -003..-006: a generated context is in the answer; an unknown
/// context is refused; every task has an id of its own; an unknown task is
/// `TaskNotFoundError`; a message naming only its task goes on in the task's context; a
/// context that is not the task's is refused.
#[tokio::test]
async fn core_multi_001a_006_contexts_and_tasks_are_named_as_a2a_says() {
    over_both(async |alice: &Caller, _base: &str, bind: Bind| {
        let first = alice.send("one", None).await;
        let second = alice.send("two", None).await;
        assert!(first["contextId"].as_str().is_some_and(|id| !id.is_empty()));
        assert_ne!(first["id"], second["id"]);
        assert_ne!(first["contextId"], second["contextId"]);

        let unknown = json!({"message": message("x", &json!({"contextId": "no-such-context"}))});
        let refused = alice.call("SendMessage", unknown).await;
        assert_eq!(refused["error"]["code"], -32602, "{bind:?}: {refused}");
        let unknown = json!({"message": message("x", &json!({"taskId": "no-such-task"}))});
        let refused = alice.call("SendMessage", unknown).await;
        assert_eq!(refused["error"]["code"], -32001, "{bind:?}: {refused}");

        // A task that waits for input, answered naming the task alone, and then naming
        // another context.
        let asked = alice
            .call_on(
                "asker",
                "SendMessage",
                json!({"message": message("find", &json!({}))}),
            )
            .await;
        let task = asked["result"]["task"].clone();
        let wrong = json!({"taskId": task["id"], "contextId": first["contextId"]});
        let params = json!({"message": message("this one", &wrong)});
        let mismatch = alice.call_on("asker", "SendMessage", params).await;
        assert_eq!(mismatch["error"]["code"], -32602, "{bind:?}: {mismatch}");
        let only_task = json!({"message": message("go on", &json!({"taskId": task["id"]}))});
        let went_on = alice.call_on("asker", "SendMessage", only_task).await;
        let on = &went_on["result"]["task"];
        assert_eq!(on["id"], task["id"], "{went_on}");
        assert_eq!(on["contextId"], task["contextId"], "{went_on}");
    })
    .await;
}

#[tokio::test]
async fn card_disc_001_struct_001_the_card_declares_both_bindings() {
    let base = serve().await;
    let card = Caller::new(&base, "alice")
        .card("helper/a2a/.well-known/agent-card.json")
        .await;
    for field in [
        "name",
        "description",
        "supportedInterfaces",
        "version",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ] {
        assert!(card.get(field).is_some(), "{field}: {card}");
    }
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    let bindings: Vec<&str> = interfaces
        .iter()
        .map(|interface| interface["protocolBinding"].as_str().unwrap())
        .collect();
    assert_eq!(bindings, ["JSONRPC", "HTTP+JSON"]);
    for interface in interfaces {
        assert_eq!(interface["url"], format!("{base}/agent/helper/a2a"));
        assert_eq!(interface["protocolVersion"], "1.0");
    }
}

/// DM-MSG-002, DM-ART-001 and DM-SERIAL-004: roles are `ROLE_USER` and `ROLE_AGENT` (another
/// is refused naming the field), an artifact has its id and parts, and a message without its
/// required fields is refused.
#[tokio::test]
async fn dm_msg_002_art_001_serial_004_roles_artifacts_and_required_fields() {
    over_both(async |alice: &Caller, _base: &str, _bind: Bind| {
        let task = alice.send("hi", None).await;
        let roles: Vec<&str> = task["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| message["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["ROLE_USER", "ROLE_AGENT"], "{task}");
        let artifact = &task["artifacts"][0];
        assert!(artifact["artifactId"].is_string(), "{artifact}");
        assert!(
            !artifact["parts"].as_array().unwrap().is_empty(),
            "{artifact}"
        );

        let mut bot = message("beep", &json!({}));
        bot["role"] = json!("ROLE_BOT");
        let refused = alice.call("SendMessage", json!({"message": bot})).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let field = &refused["error"]["data"][0]["fieldViolations"][0]["field"];
        assert_eq!(field, "message.role", "{refused}");
        for missing in ["role", "parts"] {
            let mut message = message("x", &json!({}));
            message.as_object_mut().unwrap().remove(missing);
            let refused = alice.call("SendMessage", json!({"message": message})).await;
            assert_eq!(refused["error"]["code"], -32602, "{missing}: {refused}");
        }
    })
    .await;
}
