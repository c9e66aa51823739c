//! The tools an [`McpServer`] lists: their names, schemas, and what each runs.

use std::collections::HashSet;
use std::sync::Arc;

use bidi_flow::ActionDesc;
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
use rmcp::model::{ErrorData, Tool};
use serde_json::{Map, Value, json};

use super::McpServer;

/// What a tool runs.
pub(super) enum Target {
    /// The flow under `key`, its arguments shaped so.
    Flow { key: String, shape: Shape },
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

impl Shape {
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

/// A flow's tool: its input schema as is when that is an object and the flow takes no init,
/// else wrapped as the `input` and `init` properties.
fn flow_tool(name: String, desc: &ActionDesc) -> (Tool, Shape) {
    let description = desc
        .description
        .clone()
        .unwrap_or_else(|| format!("Runs the flow {}", desc.key));
    let direct = desc.init_schema.is_none()
        && desc
            .input_schema
            .as_ref()
            .is_some_and(|schema| schema.get("type") == Some(&json!("object")));
    let (schema, shape) = match (&desc.input_schema, direct) {
        (Some(Value::Object(schema)), true) => (schema.clone(), Shape::Input),
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
            (schema, Shape::Wrapped)
        }
    };
    (Tool::new(name, description, Arc::new(schema)), shape)
}

impl McpServer {
    /// Every tool, in a stable order (agents by name, then flows by key), with what it runs.
    pub(super) fn tools(&self) -> Vec<(Tool, Target)> {
        let mut taken = HashSet::new();
        let mut tools = Vec::new();
        #[cfg(feature = "agents")]
        {
            let mut agents: Vec<_> = self.agents.iter().collect();
            agents.sort_by(|a, b| a.0.cmp(b.0));
            for (name, agent) in agents {
                let name = unique(
                    &mut taken,
                    tool_name(name),
                    &tool_name(&format!("agent_{name}")),
                );
                tools.push((
                    super::agent::tool(name, agent),
                    Target::Agent(agent.clone()),
                ));
            }
        }
        for desc in self.registry.actions() {
            #[cfg(feature = "agents")]
            if desc.action_type == "agent" && self.agents.contains_key(&desc.name) {
                // Served as its agent tool.
                continue;
            }
            let fallback = tool_name(&format!("{}_{}", desc.action_type, desc.name));
            let name = unique(&mut taken, tool_name(&desc.name), &fallback);
            let (tool, shape) = flow_tool(name, &desc);
            tools.push((
                tool,
                Target::Flow {
                    key: desc.key,
                    shape,
                },
            ));
        }
        tools
    }

    /// What the tool `name` runs, if there is one.
    pub(super) fn target(&self, name: &str) -> Option<Target> {
        self.tools()
            .into_iter()
            .find(|(tool, _)| tool.name == name)
            .map(|(_, target)| target)
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
        let (tool, shape) = flow_tool("greet".into(), &desc);
        assert_eq!(shape, Shape::Wrapped);
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(schema["properties"]["input"], json!({"type": "string"}));
        assert_eq!(schema["properties"]["init"], json!({"$ref": "#/$defs/Cfg"}));
        assert_eq!(schema["$defs"]["Cfg"], json!({"type": "object"}));
        assert_eq!(
            tool.description.as_deref(),
            Some("Runs the flow /bidi-flow/greet")
        );
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
