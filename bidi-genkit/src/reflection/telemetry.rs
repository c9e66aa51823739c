//! Spans forwarded to the telemetry server of Genkit's tools: every span start and end of a
//! [`Traces`](bidi_http::traces::Traces) store, as Genkit's `TraceData` with `genkit:*` attributes,
//! posted to `{telemetryServerUrl}/api/traces`. An agent's execution (the GenAI conventions'
//! `invoke_agent`, `chat` and `execute_tool` spans) becomes Genkit's own steps: a `generate`
//! util over the model's and the tools' actions, with what was said as their input and output
//! when the agent records it.
//!
//! The store is the one the `Reflection` was given (the Dev UI's, say), else one installed as
//! the global tracer provider once per process. Posts go one at a time from one task: a dead or
//! hanging telemetry server costs that task two seconds a post, never a run, and what the
//! store's channel drops meanwhile is counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, Uri, header};
use bidi_flow::Registry;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Map, Value, json};

use bidi_http::traces::{Span, Status, Update, Updates};

/// How long one post may take before it counts as dropped: a telemetry server that hangs
/// costs the forwarder this much a span, and never a run anything.
const POST_TIMEOUT: Duration = Duration::from_secs(2);

/// How many runs' inputs are kept for their spans at most, and how many running spans' paths.
const KEPT: usize = 4_096;

/// Where spans go, and what runs told about them.
#[derive(Debug)]
pub(crate) struct Telemetry {
    /// Set from `GENKIT_TELEMETRY_SERVER`: notices do not change it, as Genkit's runtimes
    /// keep it.
    fixed: bool,
    /// `{telemetryServerUrl}/api/traces`, once known.
    target: RwLock<Option<Uri>>,
    /// The input of each run, by its connection span's id, for `genkit:input`.
    inputs: Mutex<HashMap<String, String>>,
    dropped: AtomicU64,
}

/// `{url}/api/traces`, for a telemetry server at `url` (`http://host:port`).
pub(crate) fn traces_uri(url: &str) -> Result<Uri, String> {
    let uri: Uri = format!("{}/api/traces", url.trim_end_matches('/'))
        .parse()
        .map_err(|_| format!("`{}` is not a URL", bidi_flow::text::cap(url)))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!(
            "the telemetry server is reached over plain http (http://host:port), not `{}`",
            bidi_flow::text::cap(url)
        ));
    }
    Ok(uri)
}

impl Telemetry {
    /// Spans go to `server` (from `GENKIT_TELEMETRY_SERVER`), or where a notice says.
    pub(crate) fn new(server: Option<Uri>) -> Self {
        Self {
            fixed: server.is_some(),
            target: RwLock::new(server),
            inputs: Mutex::default(),
            dropped: AtomicU64::new(0),
        }
    }

    /// The tools' notice of their telemetry server's URL.
    pub(crate) fn notify(&self, url: &str) -> Result<(), String> {
        let uri = traces_uri(url)?;
        if !self.fixed {
            *self.target.write().unwrap_or_else(PoisonError::into_inner) = Some(uri);
        }
        Ok(())
    }

    fn target(&self) -> Option<Uri> {
        self.target
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the input of the run whose connection span is `span_id`.
    pub(crate) fn input(&self, span_id: &str, input: &Value) {
        let mut inputs = self.inputs.lock().unwrap_or_else(PoisonError::into_inner);
        if inputs.len() >= KEPT {
            // Spans the forwarder never saw end (it fell behind): forget them.
            inputs.clear();
        }
        inputs.insert(span_id.to_owned(), bidi_flow::json_attribute(input));
    }

    /// How many span updates were not delivered: missed while the forwarder was behind, or
    /// refused by the telemetry server, or not answered in time.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Posts every update to the telemetry server, once one is known; runs until aborted.
    pub(crate) async fn forward(self: Arc<Self>, mut updates: Updates, registry: Registry) {
        let client: Client<HttpConnector, Body> =
            Client::builder(TokioExecutor::new()).build_http();
        let mut mapper = Mapper::new(registry);
        loop {
            let update = match updates.recv().await {
                Ok(update) => update,
                Err(lagged) => {
                    self.dropped.fetch_add(lagged.0, Ordering::Relaxed);
                    continue;
                }
            };
            let input = {
                let mut inputs = self.inputs.lock().unwrap_or_else(PoisonError::into_inner);
                match &update {
                    Update::SpanStart(span) => inputs.get(&span.span_id).cloned(),
                    Update::SpanEnd(span) => inputs.remove(&span.span_id),
                }
            };
            let trace = mapper.trace_data(&update, input);
            let Some(target) = self.target() else {
                continue;
            };
            let posted = tokio::time::timeout(POST_TIMEOUT, post(&client, target, &trace)).await;
            if !matches!(posted, Ok(true)) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Posts `trace`; whether the server took it.
async fn post(client: &Client<HttpConnector, Body>, target: Uri, trace: &Value) -> bool {
    let Ok(body) = serde_json::to_vec(trace) else {
        return false;
    };
    let Ok(request) = Request::builder()
        .method(Method::POST)
        .uri(target)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
    else {
        return false;
    };
    match client.request(request).await {
        Ok(response) => {
            let ok = response.status().is_success();
            // Read to its end, so that the connection is kept for the next post.
            let _ = axum::body::to_bytes(Body::new(response.into_body()), 64 * 1024).await;
            ok
        }
        Err(_) => false,
    }
}

/// What a flow's connection span is in Genkit's terms: its action's type and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionRef {
    pub(crate) kind: String,
    pub(crate) key: String,
}

/// Turns spans into Genkit's `TraceData`, keeping what that needs across updates: the path of
/// each running span (its children's paths extend it), and the registry's actions by name.
pub(crate) struct Mapper {
    registry: Registry,
    actions: HashMap<String, ActionRef>,
    paths: HashMap<String, String>,
}

impl Mapper {
    pub(crate) fn new(registry: Registry) -> Self {
        Self {
            registry,
            actions: HashMap::new(),
            paths: HashMap::new(),
        }
    }

    /// The action a flow's connection span is of, looked up by the flow's name.
    fn action(&mut self, flow: &str) -> Option<ActionRef> {
        if !self.actions.contains_key(flow) {
            // Registered since the last look: read the registry again.
            self.actions = self
                .registry
                .actions()
                .into_iter()
                .map(|desc| {
                    let action = ActionRef {
                        kind: desc.action_type,
                        key: desc.key,
                    };
                    (desc.name, action)
                })
                .collect();
        }
        self.actions.get(flow).cloned()
    }

    /// The `TraceData` of one update: its one span, and, for a root, the trace's name and
    /// times. `input` is the run's input, when the span is a run's connection.
    pub(crate) fn trace_data(&mut self, update: &Update, input: Option<String>) -> Value {
        let span = update.span();
        let flow = span
            .attributes
            .get("bidi.flow")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let action = flow.as_deref().and_then(|flow| self.action(flow));
        let path = match update {
            Update::SpanStart(_) => self.start_path(span, flow.is_some(), action.as_ref()),
            Update::SpanEnd(_) => self
                .paths
                .remove(&span.span_id)
                .unwrap_or_else(|| self.path(span, flow.is_some(), action.as_ref())),
        };
        let data = genkit_span(span, &path, flow.as_deref(), action.as_ref(), input);
        let mut trace = json!({"traceId": span.trace_id, "spans": {&span.span_id: data}});
        if span.parent_span_id.is_none() {
            trace["displayName"] = json!(span.name);
            trace["startTime"] = json!(span.start_time);
            trace["endTime"] = json!(span.end_time.unwrap_or(0));
        }
        trace
    }

    fn start_path(&mut self, span: &Span, flow: bool, action: Option<&ActionRef>) -> String {
        let path = self.path(span, flow, action);
        if self.paths.len() >= KEPT {
            // Spans whose end was missed: forget them.
            self.paths.clear();
        }
        self.paths.insert(span.span_id.clone(), path.clone());
        path
    }

    /// `genkit:path`: the parent's path and `/{name,t:type}`.
    fn path(&self, span: &Span, flow: bool, action: Option<&ActionRef>) -> String {
        let parent = span
            .parent_span_id
            .as_ref()
            .and_then(|parent| self.paths.get(parent))
            .map_or("", String::as_str);
        // Genkit writes a flow's type as `flow`, any other action's as `action`.
        let step = match (flow, action) {
            (true, Some(action)) if action.kind == "flow" => Some("flow"),
            (true, _) => Some("action"),
            (false, _) if span.scope == "bidi-flow" => Some("flowStep"),
            (false, _) => None,
        };
        if !flow && let Some(step) = GenAiStep::of(span) {
            return format!("{parent}/{}", step.segment());
        }
        match step {
            Some(step) => format!("{parent}/{{{},t:{step}}}", span.name),
            None => format!("{parent}/{{{}}}", span.name),
        }
    }
}

/// A span of an agent's execution (OpenTelemetry's GenAI conventions) as the step Genkit makes
/// of the same work: the execution is `generate` (a util), a model call the model's action, a
/// tool call the tool's action, so that Genkit's tools show a bidi turn as a Genkit one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GenAiStep<'a> {
    Generate,
    Model(&'a str),
    Tool(&'a str),
}

impl<'a> GenAiStep<'a> {
    fn of(span: &'a Span) -> Option<Self> {
        let text = |key: &str| span.attributes.get(key).and_then(Value::as_str);
        match text("gen_ai.operation.name")? {
            "invoke_agent" => Some(Self::Generate),
            "chat" => Some(Self::Model(
                text("gen_ai.request.model").unwrap_or(&span.name),
            )),
            "execute_tool" => Some(Self::Tool(text("gen_ai.tool.name").unwrap_or(&span.name))),
            _ => None,
        }
    }

    /// Its `genkit:path` segment: `{generate,t:util}`, `{name,t:action,s:model|tool}`.
    fn segment(self) -> String {
        match self {
            Self::Generate => "{generate,t:util}".to_owned(),
            Self::Model(name) => format!("{{{name},t:action,s:model}}"),
            Self::Tool(name) => format!("{{{name},t:action,s:tool}}"),
        }
    }

    /// Its `genkit:*` attributes: type, name, subtype, and the input and output recorded (a
    /// model call's messages and a tool call's arguments and result, when the agent records
    /// what was said).
    fn attributes(self, span: &Span, set: &mut impl FnMut(&str, Value)) {
        let (kind, name, subtype, input, output) = match self {
            Self::Generate => ("util", "generate", None, None, None),
            Self::Model(name) => (
                "action",
                name,
                Some("model"),
                Some("gen_ai.input.messages"),
                Some("gen_ai.output.messages"),
            ),
            Self::Tool(name) => (
                "action",
                name,
                Some("tool"),
                Some("gen_ai.tool.call.arguments"),
                Some("gen_ai.tool.call.result"),
            ),
        };
        set("genkit:type", json!(kind));
        set("genkit:name", json!(name));
        if let Some(subtype) = subtype {
            set("genkit:metadata:subtype", json!(subtype));
        }
        for (key, genkit) in [(input, "genkit:input"), (output, "genkit:output")] {
            if let Some(value) = key.and_then(|key| span.attributes.get(key)) {
                set(genkit, value.clone());
            }
        }
    }
}

/// One span as Genkit's `SpanData`, with the `genkit:*` attributes its tools read beside
/// bidi's own.
fn genkit_span(
    span: &Span,
    path: &str,
    flow: Option<&str>,
    action: Option<&ActionRef>,
    input: Option<String>,
) -> Value {
    let mut attributes = span.attributes.clone();
    let mut set = |key: &str, value: Value| {
        attributes.insert(key.to_owned(), value);
    };
    set("genkit:path", json!(path));
    match flow {
        Some(flow) => {
            set("genkit:type", json!("action"));
            set("genkit:name", json!(flow));
            if let Some(action) = action {
                set("genkit:metadata:subtype", json!(action.kind));
                set("genkit:key", json!(action.key));
            }
            let init = span.attributes.get("bidi.init").and_then(Value::as_str);
            if let Some(init) = init.filter(|init| *init != "null") {
                set("genkit:init", json!(init));
            }
            if let Some(output) = span.attributes.get("bidi.output") {
                set("genkit:output", output.clone());
            }
            if let Some(input) = input {
                set("genkit:input", json!(input));
            }
        }
        None => match GenAiStep::of(span) {
            Some(step) => step.attributes(span, &mut set),
            None => {
                if span.scope == "bidi-flow" {
                    set("genkit:type", json!("flowStep"));
                }
                set("genkit:name", json!(span.name));
            }
        },
    }
    if span.parent_span_id.is_none() {
        set("genkit:isRoot", json!(true));
    }
    let failed = matches!(span.status, Status::Error { .. });
    if span.end_time.is_some() {
        set(
            "genkit:state",
            json!(if failed { "error" } else { "success" }),
        );
    }
    if failed {
        set("genkit:isFailureSource", json!(true));
    }
    let status = match &span.status {
        Status::Unset => json!({"code": 0}),
        Status::Ok => json!({"code": 1}),
        Status::Error { message } => json!({"code": 2, "message": message}),
    };
    let events: Vec<Value> = span
        .events
        .iter()
        .map(|event| {
            json!({"time": event.time,
                   "annotation": {"attributes": event.attributes, "description": event.name}})
        })
        .collect();
    let mut data = Map::new();
    data.insert("spanId".into(), json!(span.span_id));
    data.insert("traceId".into(), json!(span.trace_id));
    // A root has no parent field at all: `null` fails the tools' schema.
    if let Some(parent) = &span.parent_span_id {
        data.insert("parentSpanId".into(), json!(parent));
    }
    data.insert("startTime".into(), json!(span.start_time));
    data.insert("endTime".into(), json!(span.end_time.unwrap_or(0)));
    data.insert("attributes".into(), Value::Object(attributes));
    data.insert("displayName".into(), json!(span.name));
    data.insert("instrumentationLibrary".into(), json!({"name": span.scope}));
    data.insert("spanKind".into(), json!(span.kind.to_ascii_uppercase()));
    data.insert("status".into(), status);
    data.insert("timeEvents".into(), json!({"timeEvent": events}));
    Value::Object(data)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
    use bidi_flow::{ActionType, BidiFlow};

    use super::*;

    fn span(id: &str, parent: Option<&str>, name: &str, attributes: Value) -> Span {
        let mut span = Span::new("0af7651916cd43dd8448eb211c80319c", id, name, 1_000);
        span.parent_span_id = parent.map(str::to_owned);
        if let Value::Object(attributes) = attributes {
            span.attributes = attributes;
        }
        span
    }

    fn mapper() -> Mapper {
        let registry = Registry::new();
        let count = |_: ActionContext, (): (), _: Inbound<u32>, _: Outbound<u32>| async {
            Ok::<_, BoxError>(())
        };
        registry
            .register(
                BidiFlow::new("count", count).with_action_type(ActionType::new("flow").unwrap()),
            )
            .unwrap();
        registry.register(BidiFlow::new("echo", count)).unwrap();
        Mapper::new(registry)
    }

    #[test]
    fn a_connection_is_an_action_and_its_turns_are_steps() {
        let mut mapper = mapper();
        let root = span(
            "b7ad6b7169203331",
            None,
            "echo",
            json!({"bidi.flow": "echo", "bidi.init": "null"}),
        );
        let started = mapper.trace_data(&Update::SpanStart(root.clone()), Some("3".into()));
        assert_eq!(
            started,
            json!({
                "traceId": "0af7651916cd43dd8448eb211c80319c",
                "displayName": "echo", "startTime": 1000, "endTime": 0,
                "spans": {"b7ad6b7169203331": {
                    "spanId": "b7ad6b7169203331",
                    "traceId": "0af7651916cd43dd8448eb211c80319c",
                    "startTime": 1000, "endTime": 0,
                    "attributes": {
                        "bidi.flow": "echo", "bidi.init": "null",
                        "genkit:type": "action", "genkit:name": "echo",
                        "genkit:metadata:subtype": "bidi-flow", "genkit:key": "/bidi-flow/echo",
                        "genkit:path": "/{echo,t:action}", "genkit:isRoot": true,
                        "genkit:input": "3"
                    },
                    "displayName": "echo",
                    "instrumentationLibrary": {"name": "bidi-flow"},
                    "spanKind": "INTERNAL",
                    "status": {"code": 0},
                    "timeEvents": {"timeEvent": []}
                }}
            })
        );

        let mut turn = span(
            "00f067aa0ba902b7",
            Some("b7ad6b7169203331"),
            "turn 1",
            json!({"bidi.turn": 1}),
        );
        let started = mapper.trace_data(&Update::SpanStart(turn.clone()), None);
        assert!(
            started.get("displayName").is_none(),
            "only a root names its trace"
        );
        let data = &started["spans"]["00f067aa0ba902b7"];
        assert_eq!(data["parentSpanId"], "b7ad6b7169203331");
        assert_eq!(data["attributes"]["genkit:type"], "flowStep");
        assert_eq!(data["attributes"]["genkit:name"], "turn 1");
        assert_eq!(
            data["attributes"]["genkit:path"],
            "/{echo,t:action}/{turn 1,t:flowStep}"
        );
        assert!(data["attributes"].get("genkit:isRoot").is_none());
        assert!(data["attributes"].get("genkit:state").is_none());

        turn.end_time = Some(1_500);
        let ended = mapper.trace_data(&Update::SpanEnd(turn), None);
        let data = &ended["spans"]["00f067aa0ba902b7"];
        assert_eq!(data["endTime"], 1_500);
        assert_eq!(data["attributes"]["genkit:state"], "success");
        assert_eq!(
            data["attributes"]["genkit:path"],
            "/{echo,t:action}/{turn 1,t:flowStep}"
        );

        let mut root = root;
        root.end_time = Some(2_000);
        root.status = Status::Error {
            message: "connection cancelled: cancelled from Genkit's tools".into(),
        };
        let ended = mapper.trace_data(&Update::SpanEnd(root), Some("3".into()));
        assert_eq!(ended["endTime"], 2_000);
        let data = &ended["spans"]["b7ad6b7169203331"];
        assert_eq!(data["attributes"]["genkit:state"], "error");
        assert_eq!(data["attributes"]["genkit:isFailureSource"], true);
        assert_eq!(
            data["status"],
            json!({"code": 2, "message": "connection cancelled: cancelled from Genkit's tools"})
        );
        assert!(mapper.paths.is_empty(), "ended spans' paths are forgotten");
    }

    #[test]
    fn an_agents_execution_is_generate_over_model_and_tool_actions() {
        let mut mapper = mapper();
        let root = span("a1", None, "echo", json!({"bidi.flow": "echo"}));
        mapper.trace_data(&Update::SpanStart(root), None);
        let turn = span("a2", Some("a1"), "turn 1", json!({"bidi.turn": 1}));
        mapper.trace_data(&Update::SpanStart(turn), None);
        let agent = span(
            "a3",
            Some("a2"),
            "invoke_agent echo",
            json!({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "echo"}),
        );
        let data = mapper.trace_data(&Update::SpanStart(agent), None);
        let attributes = &data["spans"]["a3"]["attributes"];
        assert_eq!(attributes["genkit:type"], "util");
        assert_eq!(attributes["genkit:name"], "generate");
        let generate = "/{echo,t:action}/{turn 1,t:flowStep}/{generate,t:util}";
        assert_eq!(attributes["genkit:path"], generate);

        let mut chat = span(
            "a4",
            Some("a3"),
            "chat demo",
            json!({"gen_ai.operation.name": "chat", "gen_ai.request.model": "demo",
                   "gen_ai.input.messages": "[{\"role\":\"user\"}]",
                   "gen_ai.output.messages": "[{\"role\":\"assistant\"}]"}),
        );
        chat.end_time = Some(2_000);
        let data = mapper.trace_data(&Update::SpanEnd(chat), None);
        let attributes = &data["spans"]["a4"]["attributes"];
        assert_eq!(attributes["genkit:type"], "action");
        assert_eq!(attributes["genkit:metadata:subtype"], "model");
        assert_eq!(attributes["genkit:name"], "demo");
        assert_eq!(
            attributes["genkit:path"],
            format!("{generate}/{{demo,t:action,s:model}}")
        );
        assert_eq!(attributes["genkit:input"], "[{\"role\":\"user\"}]");
        assert_eq!(attributes["genkit:output"], "[{\"role\":\"assistant\"}]");
        assert_eq!(attributes["genkit:state"], "success");

        let tool = span(
            "a5",
            Some("a3"),
            "execute_tool word_count",
            json!({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "word_count"}),
        );
        let data = mapper.trace_data(&Update::SpanStart(tool), None);
        let attributes = &data["spans"]["a5"]["attributes"];
        assert_eq!(attributes["genkit:metadata:subtype"], "tool");
        assert_eq!(attributes["genkit:name"], "word_count");
        assert_eq!(
            attributes["genkit:path"],
            format!("{generate}/{{word_count,t:action,s:tool}}")
        );
        // Nothing recorded of what was said: no input or output.
        assert!(attributes.get("genkit:input").is_none());
    }

    #[test]
    fn a_flow_has_its_own_step_type_and_json_attributes_carry_over() {
        let mut mapper = mapper();
        let mut root = span(
            "b7ad6b7169203331",
            None,
            "count",
            json!({"bidi.flow": "count", "bidi.init": "{\"from\":3}", "bidi.output": "\"done\""}),
        );
        root.end_time = Some(3_000);
        root.status = Status::Ok;
        let ended = mapper.trace_data(&Update::SpanEnd(root), None);
        let attributes = &ended["spans"]["b7ad6b7169203331"]["attributes"];
        assert_eq!(attributes["genkit:path"], "/{count,t:flow}");
        assert_eq!(attributes["genkit:metadata:subtype"], "flow");
        assert_eq!(attributes["genkit:init"], "{\"from\":3}");
        assert_eq!(attributes["genkit:output"], "\"done\"");
        assert_eq!(attributes["genkit:state"], "success");
        assert!(attributes.get("genkit:input").is_none());
        assert_eq!(
            ended["spans"]["b7ad6b7169203331"]["status"],
            json!({"code": 1})
        );

        // A span of another library, under a step of no known parent: named, not typed.
        let mut other = span(
            "1111111111111111",
            Some("2222222222222222"),
            "query",
            json!({}),
        );
        other.scope = "sqlx".into();
        let started = mapper.trace_data(&Update::SpanStart(other), None);
        let attributes = &started["spans"]["1111111111111111"]["attributes"];
        assert_eq!(attributes["genkit:path"], "/{query}");
        assert!(attributes.get("genkit:type").is_none());
    }

    #[test]
    fn telemetry_urls_are_plain_http() {
        assert_eq!(
            traces_uri("http://localhost:4033/").unwrap().to_string(),
            "http://localhost:4033/api/traces"
        );
        assert!(traces_uri("https://localhost:4033").is_err());
        assert!(traces_uri("localhost:4033").is_err());
        assert!(traces_uri("http://").is_err());
        let fixed = Telemetry::new(Some(traces_uri("http://127.0.0.1:9").unwrap()));
        fixed.notify("http://localhost:4033").unwrap();
        assert_eq!(
            fixed.target().unwrap().to_string(),
            "http://127.0.0.1:9/api/traces"
        );
        let told = Telemetry::new(None);
        assert!(told.notify("ftp://x").is_err());
        assert!(told.target().is_none());
        told.notify("http://localhost:4033").unwrap();
        assert_eq!(
            told.target().unwrap().to_string(),
            "http://localhost:4033/api/traces"
        );
    }
}
