//! The MCP servers a client names in `session/new` and `session/load`: started as child
//! processes, their tools offered to the session's prompt turns as `{server}__{tool}`.

use std::fmt;
use std::time::Duration;

use agent_client_protocol_schema::v1::{Error, McpServer, McpServerStdio};
use bidi_flow::text::cap;
use bidi_llm::{Tool, ToolEvent};
use futures_util::stream;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;

use crate::codec;

/// How long an MCP server may take to start and list its tools, by default.
pub(crate) const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an MCP tool call may take, by default.
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a closing MCP server gets to exit before it is killed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The MCP servers of one session, running, and their tools.
#[derive(Default)]
pub(crate) struct Servers {
    running: Vec<RunningService<RoleClient, ()>>,
    tools: Vec<Tool>,
}

impl fmt::Debug for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Servers")
            .field("running", &self.running.len())
            .field("tools", &self.tools)
            .finish()
    }
}

impl Servers {
    /// Starts every server in `servers` and lists its tools; the first that fails stops the
    /// others and is the error, naming it. Two servers of one name are refused first.
    pub(crate) async fn start(
        servers: &[McpServer],
        start_timeout: Duration,
        call_timeout: Duration,
    ) -> Result<Self, Error> {
        for (index, server) in servers.iter().enumerate() {
            let name = name_of(server);
            if servers[..index].iter().any(|other| name_of(other) == name) {
                return Err(codec::invalid_params(
                    &format!("mcpServers[{index}]"),
                    format!(
                        "two MCP servers are named `{}`: their tools' names would clash",
                        cap(name)
                    ),
                ));
            }
        }
        let mut started = Self::default();
        for (index, server) in servers.iter().enumerate() {
            let McpServer::Stdio(stdio) = server else {
                started.close().await;
                return Err(codec::invalid_params(
                    &format!("mcpServers[{index}]"),
                    format!(
                        "MCP server `{}`: only stdio MCP servers are supported (no http, no sse)",
                        cap(name_of(server))
                    ),
                ));
            };
            match tokio::time::timeout(start_timeout, start(stdio, call_timeout)).await {
                Ok(Ok((service, tools))) => {
                    started.running.push(service);
                    started.tools.extend(tools);
                }
                Ok(Err(reason)) => {
                    started.close().await;
                    return Err(failed(stdio, &reason));
                }
                Err(_) => {
                    started.close().await;
                    let reason = format!("it did not start within {start_timeout:?}");
                    return Err(failed(stdio, &reason));
                }
            }
        }
        Ok(started)
    }

    /// The servers' tools.
    pub(crate) fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Stops the servers and waits for them to exit (killing those that do not in time).
    pub(crate) async fn close(&mut self) {
        self.tools.clear();
        for mut service in self.running.drain(..) {
            let _ = service.close_with_timeout(CLOSE_TIMEOUT).await;
        }
    }
}

fn name_of(server: &McpServer) -> &str {
    match server {
        McpServer::Stdio(stdio) => &stdio.name,
        McpServer::Http(http) => &http.name,
        McpServer::Sse(sse) => &sse.name,
        _ => "",
    }
}

fn failed(server: &McpServerStdio, reason: &str) -> Error {
    Error::internal_error().data(format!(
        "the MCP server `{}` failed to start: {}",
        cap(&server.name),
        cap(reason)
    ))
}

/// Starts one server in a process group of its own (so a terminal's signals reach the agent
/// only), its stderr on ours, and wraps its tools.
async fn start(
    server: &McpServerStdio,
    call_timeout: Duration,
) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), String> {
    let mut command = tokio::process::Command::new(&server.command);
    command.args(&server.args);
    for variable in &server.env {
        command.env(&variable.name, &variable.value);
    }
    command.process_group(0);
    let transport = TokioChildProcess::new(command).map_err(|error| error.to_string())?;
    let mut service = ().serve(transport).await.map_err(|error| error.to_string())?;
    let listed = match service.list_all_tools().await {
        Ok(listed) => listed,
        Err(error) => {
            let _ = service.close_with_timeout(CLOSE_TIMEOUT).await;
            return Err(format!("listing its tools failed: {error}"));
        }
    };
    let peer = service.peer().clone();
    let tools = listed
        .into_iter()
        .map(|tool| wrap(&server.name, &tool, peer.clone(), call_timeout))
        .collect();
    Ok((service, tools))
}

/// The MCP tool as a local tool named `{server}__{tool}` that calls it.
fn wrap(server: &str, tool: &rmcp::model::Tool, peer: Peer<RoleClient>, timeout: Duration) -> Tool {
    let name = format!("{server}__{}", tool.name);
    let description = tool.description.as_deref().unwrap_or_default().to_owned();
    let parameters = Value::Object((*tool.input_schema).clone());
    let label = tool.title.clone().unwrap_or_else(|| tool.name.to_string());
    let remote = tool.name.to_string();
    Tool::dynamic(&name, &label, &description, parameters, move |_id, args| {
        let peer = peer.clone();
        let remote = remote.clone();
        stream::once(async move { call(&peer, remote, args, timeout).await })
    })
}

async fn call(peer: &Peer<RoleClient>, name: String, args: Value, timeout: Duration) -> ToolEvent {
    let Value::Object(arguments) = args else {
        return ToolEvent::Failed("the arguments must be a JSON object".to_owned());
    };
    let params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
    match tokio::time::timeout(timeout, peer.call_tool(params)).await {
        Err(_) => ToolEvent::Failed(format!(
            "the MCP tool `{name}` did not answer within {timeout:?}"
        )),
        Ok(Err(error)) => ToolEvent::Failed(format!("the MCP tool `{name}` failed: {error}")),
        Ok(Ok(result)) => outcome(result),
    }
}

/// The result's text content is the output; `is_error` makes it a failure.
fn outcome(result: CallToolResult) -> ToolEvent {
    let CallToolResult {
        content,
        structured_content: details,
        is_error,
        ..
    } = result;
    let output = content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n");
    if is_error == Some(true) {
        return ToolEvent::Failed(output);
    }
    ToolEvent::Complete { output, details }
}
