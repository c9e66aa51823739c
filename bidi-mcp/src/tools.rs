//! The tools an [`McpServer`] lists: their names, schemas, and what each runs.
//!
//! Names come from the registry on every `tools/list` (a flow's name, `{type}_{name}` on a
//! clash, then a count). Each session (a clone of the `McpServer`: rmcp's HTTP service makes
//! one per session) keeps the names of its last listing in a map that a call looks up, so
//! that a call does not list the registry, which clones every descriptor. A name the map lacks
//! (a flow registered since, a call before any listing) is resolved against the tools the
//! session has not named yet, with names it has not given.
//!
//! A session's client hears of each flow registered after it initialized
//! (`notifications/tools/list_changed`, the capability `tools.listChanged`) from a task that
//! watches the registry ([`Registry::changes`](bidi_flow::Registry::changes)) until the
//! session's handler is dropped, which cancels it; a burst of registrations is told once.
//!
//! rmcp's request types are an untagged union, so params it cannot read as their method's
//! reach `on_custom_request`: `tools/call` and `tools/list` are then `-32602` naming where
//! (`serde_path_to_error`, `bidi_flow::text::pointer`), any other method `-32601`, as are
//! the resource, prompt and completion methods, which rmcp would answer with empty results.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bidi_flow::{ActionDesc, Registry};
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
use rmcp::RoleServer;
use rmcp::model::{ErrorData, Tool};
use rmcp::service::Peer;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::McpServer;

/// Cancelled when dropped: a session's handler holds it, and what watches for the session
/// ends with it.
#[derive(Default)]
pub(super) struct Ended(CancellationToken);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Tells `peer` of each change of `registry` until `ended`.
pub(super) fn tell_changes(registry: &Registry, peer: Peer<RoleServer>, ended: &Ended) {
    let mut changes = registry.changes();
    changes.mark_unchanged();
    let ended = ended.0.clone();
    drop(tokio::spawn(async move {
        loop {
            tokio::select! {
                () = ended.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            if peer.notify_tool_list_changed().await.is_err() {
                return;
            }
        }
    }));
}

/// What a tool runs.
#[derive(Clone)]
pub(super) enum Target {
    /// The flow under `key`, its arguments shaped so; `structured`: its tool has an
    /// `outputSchema`.
    Flow {
        key: String,
        shape: Shape,
        structured: bool,
    },
    /// An agent.
    #[cfg(feature = "agents")]
    Agent(LlmAgent),
}

/// How a flow tool's arguments carry the flow's init and input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// The arguments are the input (an object), and the flow takes no init.
    Input,
    /// The input is the argument `input` (none: `null`), the init the argument `init`.
    Wrapped,
}

impl Target {
    /// What it runs, as no other target: a flow's key (`/{type}/{name}`), an agent's name.
    pub(super) fn id(&self) -> &str {
        match self {
            Self::Flow { key, .. } => key,
            #[cfg(feature = "agents")]
            Self::Agent(agent) => agent.agent().name(),
        }
    }
}

impl Shape {
    /// How the arguments of `desc`'s tool carry its init and input: as they are when its input
    /// is an object and it takes no init.
    fn of(desc: &ActionDesc) -> Self {
        let object = desc.input_schema.as_ref().is_some_and(is_object);
        if object && desc.init_schema.is_none() {
            Self::Input
        } else {
            Self::Wrapped
        }
    }

    /// Where the input sits in the arguments, as a JSON Pointer prefix.
    pub(super) fn input_prefix(self) -> &'static str {
        match self {
            Self::Input => "",
            Self::Wrapped => "/input",
        }
    }

    /// The init and the input of a call's `arguments`.
    ///
    /// # Errors
    ///
    /// An argument the wrapped shape does not have, as `-32602`.
    pub(super) fn split(
        self,
        mut arguments: Map<String, Value>,
    ) -> Result<(Value, Value), ErrorData> {
        match self {
            Self::Input => Ok((Value::Null, Value::Object(arguments))),
            Self::Wrapped => {
                let init = arguments.remove("init").unwrap_or(Value::Null);
                let input = arguments.remove("input").unwrap_or(Value::Null);
                match arguments.keys().next() {
                    Some(unknown) => Err(invalid_argument(
                        &format!("/{}", bidi_flow::text::cap(unknown)),
                        "unknown argument: this tool takes `input` and `init`",
                    )),
                    None => Ok((init, input)),
                }
            }
        }
    }
}

/// `-32602` (invalid params): the argument at `path` (a JSON Pointer into the arguments) is
/// wrong for `reason`; the data names the path.
pub(super) fn invalid_argument(path: &str, reason: &str) -> ErrorData {
    let message = if path.is_empty() {
        format!("invalid arguments: {reason}")
    } else {
        format!("invalid argument at `{path}`: {reason}")
    };
    ErrorData::invalid_params(message, Some(json!({ "path": path })))
}

/// `-32602` (invalid params) for the params of a request that do not fit its method's `T`,
/// naming where (a JSON Pointer into the params) and why; the data names the path.
pub(super) fn invalid_params<T: serde::de::DeserializeOwned>(params: Value) -> ErrorData {
    let (path, reason) = match serde_path_to_error::deserialize::<_, T>(params) {
        Ok(_) => (String::new(), "the params do not fit the method".to_owned()),
        Err(error) => (
            bidi_flow::text::pointer(error.path()),
            bidi_flow::text::reason(&error.into_inner().to_string()),
        ),
    };
    let message = if path.is_empty() {
        format!("invalid params: {reason}")
    } else {
        format!("invalid params at `{path}`: {reason}")
    };
    ErrorData::invalid_params(message, Some(json!({ "path": path })))
}

/// An MCP tool name from `name`: what MCP allows (`A-Z a-z 0-9 _ - .`), anything else `_`.
fn tool_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-' | '.' => c,
            _ => '_',
        })
        .collect()
}

/// `name`, or, when `taken` has it, `fallback`, or `fallback_2`, `fallback_3`… : the first
/// that is free, now taken.
fn unique(taken: &mut HashSet<String>, name: String, fallback: &str) -> String {
    if taken.insert(name.clone()) {
        return name;
    }
    if taken.insert(fallback.to_owned()) {
        return fallback.to_owned();
    }
    let mut n = 2;
    loop {
        let candidate = format!("{fallback}_{n}");
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        n += 1;
    }
}

/// A schema of the root kind without what belongs at a root (`$schema`), its `$defs` moved
/// into `defs`.
fn nested(mut schema: Value, defs: &mut Map<String, Value>) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        if let Some(Value::Object(own)) = object.remove("$defs") {
            defs.extend(own);
        }
    }
    schema
}

/// Whether `schema` is of objects: `"type": "object"` at its root.
fn is_object(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// A flow's output schema as its tool's `outputSchema`: when it is of objects, as MCP's
/// `outputSchema` is; a flow with another output has none.
fn output_schema(desc: &ActionDesc) -> Option<&Map<String, Value>> {
    desc.output_schema
        .as_ref()
        .filter(|schema| is_object(schema))
        .and_then(Value::as_object)
}

/// `schema` as the hosts' validators read it: without the integer formats Rust's schemas carry
/// (`uint32`, `int8`, `uint`: no JSON Schema format, which a strict validator such as Ajv's
/// refuses), an unsigned one's `minimum: 0` kept or added. The formats every validator knows
/// (`int32`, `int64`, `date-time`, ...) stay.
fn portable(mut schema: Map<String, Value>) -> Map<String, Value> {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(object) => strip(object),
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    fn strip(object: &mut Map<String, Value>) {
        let rust = object
            .get("format")
            .and_then(Value::as_str)
            .and_then(|format| {
                let (unsigned, bits) = match format.strip_prefix('u') {
                    Some(rest) => (true, rest.strip_prefix("int")?),
                    None => (false, format.strip_prefix("int")?),
                };
                let rust = bits.is_empty() || bits.parse::<u8>().is_ok();
                let standard = !unsigned && matches!(bits, "32" | "64");
                (rust && !standard).then_some(unsigned)
            });
        if let Some(unsigned) = rust {
            object.remove("format");
            if unsigned && !object.contains_key("minimum") {
                object.insert("minimum".to_owned(), json!(0));
            }
        }
        object.values_mut().for_each(walk);
    }
    strip(&mut schema);
    schema
}

/// A flow's tool: its input schema as is when that is an object and the flow takes no init,
/// else wrapped as the `input` and `init` properties; its output schema when that is an object.
fn flow_tool(name: String, desc: &ActionDesc) -> Tool {
    let description = desc
        .description
        .clone()
        .unwrap_or_else(|| format!("Runs the flow {}", desc.key));
    let schema = match (Shape::of(desc), &desc.input_schema) {
        (Shape::Input, Some(Value::Object(schema))) => schema.clone(),
        _ => {
            let mut defs = Map::new();
            let mut properties = Map::new();
            if let Some(input) = &desc.input_schema {
                properties.insert("input".to_owned(), nested(input.clone(), &mut defs));
            }
            if let Some(init) = &desc.init_schema {
                properties.insert("init".to_owned(), nested(init.clone(), &mut defs));
            }
            let mut schema = Map::new();
            schema.insert("type".to_owned(), json!("object"));
            schema.insert("properties".to_owned(), Value::Object(properties));
            schema.insert("additionalProperties".to_owned(), json!(false));
            if !defs.is_empty() {
                schema.insert("$defs".to_owned(), Value::Object(defs));
            }
            schema
        }
    };
    let tool = Tool::new(name, description, Arc::new(portable(schema)));
    match output_schema(desc) {
        Some(output) => tool.with_raw_output_schema(Arc::new(portable(output.clone()))),
        None => tool,
    }
}

/// Where a tool comes from.
enum Source {
    #[cfg(feature = "agents")]
    Agent(LlmAgent),
    Flow(Box<ActionDesc>),
}

impl McpServer {
    /// The name and source of every tool `named` does not have, in a stable order (agents by
    /// name, then flows by key), each named so as not to take a name of `named`'s.
    fn sources(&self, named: &HashMap<String, Target>) -> Vec<(String, Source)> {
        let mut taken: HashSet<String> = named.keys().cloned().collect();
        let known: HashSet<&str> = named.values().map(Target::id).collect();
        let mut sources = Vec::new();
        #[cfg(feature = "agents")]
        {
            let mut agents: Vec<_> = self.agents.iter().collect();
            agents.sort_by(|a, b| a.0.cmp(b.0));
            for (name, agent) in agents {
                if known.contains(name.as_str()) {
                    continue;
                }
                let name = unique(
                    &mut taken,
                    tool_name(name),
                    &tool_name(&format!("agent_{name}")),
                );
                sources.push((name, Source::Agent(agent.clone())));
            }
        }
        for desc in self.registry.actions() {
            #[cfg(feature = "agents")]
            if desc.action_type == "agent" && self.agents.contains_key(&desc.name) {
                // Served as its agent tool.
                continue;
            }
            if known.contains(desc.key.as_str()) {
                continue;
            }
            let fallback = tool_name(&format!("{}_{}", desc.action_type, desc.name));
            let name = unique(&mut taken, tool_name(&desc.name), &fallback);
            sources.push((name, Source::Flow(Box::new(desc))));
        }
        sources
    }

    /// Every tool, in a stable order (agents by name, then flows by key); the session calls
    /// its tools by these names from now on.
    pub(super) fn list(&self) -> Vec<Tool> {
        let sources = self.sources(&HashMap::new());
        let mut named = HashMap::with_capacity(sources.len());
        let tools = sources.into_iter().map(|(name, source)| {
            let tool = source.tool(name.clone());
            named.insert(name, source.into_target());
            tool
        });
        let tools = tools.collect();
        *self.named.lock() = named;
        tools
    }

    /// What the tool `name` runs, if there is one: the session's tool of that name. Tools the
    /// session has no name for yet (all of them before its first listing, flows registered
    /// since) are named first, with names the session's other tools do not have.
    pub(super) fn target(&self, name: &str) -> Option<Target> {
        let mut named = self.named.lock();
        if let Some(target) = named.get(name) {
            return Some(target.clone());
        }
        for (tool, source) in self.sources(&named) {
            named.insert(tool, source.into_target());
        }
        named.get(name).cloned()
    }
}

impl Source {
    /// The tool named `name`.
    fn tool(&self, name: String) -> Tool {
        match self {
            #[cfg(feature = "agents")]
            Self::Agent(agent) => super::agent::tool(name, agent),
            Self::Flow(desc) => flow_tool(name, desc),
        }
    }

    /// What its tool runs.
    fn into_target(self) -> Target {
        match self {
            #[cfg(feature = "agents")]
            Self::Agent(agent) => Target::Agent(agent),
            Self::Flow(desc) => Target::Flow {
                shape: Shape::of(&desc),
                structured: output_schema(&desc).is_some(),
                key: desc.key,
            },
        }
    }
}

/// The tools of one session by name: as its last `tools/list` named them, with those a call
/// found since. Looked up on every call, so that a call does not list the registry.
#[derive(Default)]
pub(super) struct Named(Mutex<HashMap<String, Target>>);

impl Named {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Target>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_what_mcp_allows() {
        assert_eq!(tool_name("echo"), "echo");
        assert_eq!(tool_name("my flow/v2:x"), "my_flow_v2_x");
        assert_eq!(tool_name("a.b-c_D9"), "a.b-c_D9");
    }

    #[test]
    fn clashing_names_fall_back_then_count() {
        let mut taken = HashSet::new();
        assert_eq!(unique(&mut taken, "echo".into(), "bidi-flow_echo"), "echo");
        assert_eq!(
            unique(&mut taken, "echo".into(), "custom_echo"),
            "custom_echo"
        );
        assert_eq!(
            unique(&mut taken, "echo".into(), "custom_echo"),
            "custom_echo_2"
        );
    }

    #[test]
    fn a_string_input_with_init_is_wrapped_with_defs_at_the_root() {
        let desc: ActionDesc = serde_json::from_value(json!({
            "key": "/bidi-flow/greet",
            "name": "greet",
            "type": "bidi-flow",
            "inputSchema": {"$schema": "x", "type": "string"},
            "initSchema": {"$schema": "x", "$ref": "#/$defs/Cfg", "$defs": {"Cfg": {"type": "object"}}},
            "metadata": {}
        }))
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(Shape::of(&desc), Shape::Wrapped);
        let tool = flow_tool("greet".into(), &desc);
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["properties"]["input"], json!({"type": "string"}));
        assert_eq!(schema["properties"]["init"], json!({"$ref": "#/$defs/Cfg"}));
        assert_eq!(schema["$defs"]["Cfg"], json!({"type": "object"}));
        assert_eq!(
            tool.description.as_deref(),
            Some("Runs the flow /bidi-flow/greet")
        );
    }

    /// The descriptor of a flow `f` taking an object and answering by `output`.
    fn desc(output: &Value) -> ActionDesc {
        serde_json::from_value(json!({
            "key": "/bidi-flow/f",
            "name": "f",
            "type": "bidi-flow",
            "inputSchema": {"type": "object"},
            "outputSchema": output,
            "metadata": {}
        }))
        .unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn rust_integer_formats_are_left_out_of_the_schemas_hosts_read() {
        let schema = json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "format": "uint32", "minimum": 0},
                "small": {"type": "integer", "format": "uint8"},
                "delta": {"type": "integer", "format": "int8"},
                "big": {"type": "integer", "format": "int64"},
                "list": {"type": "array", "items": {"type": "integer", "format": "uint"}},
                "when": {"type": "string", "format": "date-time"},
                "maybe": {"anyOf": [{"type": "integer", "format": "uint16"}, {"type": "null"}]},
            },
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let portable = Value::Object(portable(schema));
        let properties = &portable["properties"];
        assert_eq!(
            properties["count"],
            json!({"type": "integer", "minimum": 0})
        );
        assert_eq!(
            properties["small"],
            json!({"type": "integer", "minimum": 0})
        );
        assert_eq!(properties["delta"], json!({"type": "integer"}));
        assert_eq!(properties["big"]["format"], "int64");
        assert_eq!(
            properties["list"]["items"],
            json!({"type": "integer", "minimum": 0})
        );
        assert_eq!(properties["when"]["format"], "date-time");
        assert_eq!(
            properties["maybe"]["anyOf"][0],
            json!({"type": "integer", "minimum": 0})
        );
    }

    #[test]
    fn an_object_output_schema_is_the_tools_output_schema() {
        let output = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Total",
            "type": "object",
            "properties": {"total": {"type": "integer"}},
            "required": ["total"]
        });
        let desc = desc(&output);
        let tool = flow_tool("f".into(), &desc);
        let advertised = tool
            .output_schema
            .map(|schema| Value::Object((*schema).clone()));
        assert_eq!(advertised, Some(output));
        assert!(output_schema(&desc).is_some());
    }

    #[test]
    fn other_output_schemas_are_not_advertised() {
        let others = [
            json!({"type": "string"}),
            json!({"type": ["object", "null"]}),
            json!({"anyOf": [{"type": "object"}, {"type": "null"}]}),
            json!(true),
        ];
        for output in others {
            let desc = desc(&output);
            assert!(
                flow_tool("f".into(), &desc).output_schema.is_none(),
                "{output}"
            );
            assert!(output_schema(&desc).is_none(), "{output}");
        }
        // A flow without an output (`()`) has no schema at all.
        let desc = desc(&Value::Null);
        assert!(flow_tool("f".into(), &desc).output_schema.is_none());
    }

    async fn echo(
        _ctx: bidi_core::ActionContext,
        _init: (),
        mut inbound: bidi_core::Inbound<String>,
        _out: bidi_core::Outbound<String>,
    ) -> Result<String, bidi_core::BoxError> {
        Ok(inbound.recv().await.unwrap_or_default())
    }

    /// The key of the flow tool `name` runs for `server`'s session.
    fn key_of(server: &McpServer, name: &str) -> Option<String> {
        match server.target(name)? {
            Target::Flow { key, .. } => Some(key),
            #[cfg(feature = "agents")]
            Target::Agent(_) => None,
        }
    }

    #[test]
    fn a_session_keeps_its_names_and_finds_flows_registered_since() {
        use bidi_flow::{ActionType, BidiFlow, Registry};

        let registry = Registry::new();
        let register = |flow| registry.register(flow).unwrap_or_else(|e| panic!("{e}"));
        register(BidiFlow::new("echo", echo));
        let server = McpServer::new(registry.clone());
        let listed: Vec<_> = server.list().into_iter().map(|tool| tool.name).collect();
        assert_eq!(listed, ["echo"]);
        // Another `echo` whose key sorts first: a listing now names it `echo`, and the first
        // `bidi-flow_echo`. The session calls by the names it was given, and finds the new one.
        register(BidiFlow::new("echo", echo).with_action_type(ActionType::from_static("a")));
        assert_eq!(key_of(&server, "echo").as_deref(), Some("/bidi-flow/echo"));
        assert_eq!(key_of(&server, "a_echo").as_deref(), Some("/a/echo"));
        assert_eq!(key_of(&server, "nope"), None);
        // A new session (a clone) and a new listing name them as the registry does now.
        let fresh = server.clone();
        assert_eq!(key_of(&fresh, "echo").as_deref(), Some("/a/echo"));
        let listed: Vec<_> = server.list().into_iter().map(|tool| tool.name).collect();
        assert_eq!(listed, ["echo", "bidi-flow_echo"]);
        assert_eq!(key_of(&server, "echo").as_deref(), Some("/a/echo"));
        assert_eq!(
            key_of(&server, "bidi-flow_echo").as_deref(),
            Some("/bidi-flow/echo")
        );
    }

    #[test]
    fn params_that_do_not_fit_name_where() {
        let error = invalid_params::<rmcp::model::CallToolRequestParams>(
            json!({"name": "count", "arguments": "three"}),
        );
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert_eq!(
            error.message,
            "invalid params at `/arguments`: invalid type: string \"three\", expected a map"
        );
        assert_eq!(error.data, Some(json!({"path": "/arguments"})));
    }

    #[test]
    fn wrapped_arguments_refuse_unknown_names() {
        let arguments = json!({"input": 1, "nope": 2});
        let Value::Object(arguments) = arguments else {
            unreachable!()
        };
        let error = Shape::Wrapped
            .split(arguments)
            .err()
            .map(|e| e.message.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "invalid argument at `/nope`: unknown argument: this tool takes `input` and `init`"
            )
        );
    }
}
