//! The MCP servers a client names in `session/new` and `session/load`: stdio ones started as
//! child processes, HTTP ones connected to with the streamable HTTP transport; their tools
//! offered to the session's prompt turns as `{server}__{tool}`.
//!
//! They are rmcp's clients: stdio servers in process groups of their own, closed and reaped
//! when input ends; HTTP servers over rmcp's streamable HTTP client (reqwest, with no TLS stack
//! of our own: a program that wants https enables one). SSE servers are refused, since rmcp has
//! no client for that deprecated transport. Each tool is the connection's own
//! (`Policy::tool`, a `Tool::dynamic` over a raw JSON Schema) with a call timeout; a result's
//! images, audio and embedded resources become `ToolEvent::Attachment`s. Servers start in the
//! `session/new` or `session/load` task, within a start timeout. A server that fails is the
//! client's configuration: `-32602` naming `mcpServers[i]`, the URL's user info and query
//! values redacted (also in the HTTP client's error text, which quotes the URL).

use std::collections::HashMap;
use std::error::Error as _;
use std::fmt;
use std::time::Duration;

use agent_client_protocol_schema::v1::{Error, McpServer, McpServerHttp, McpServerStdio};
use bidi_flow::text::cap;
use bidi_llm::{Attachment, Tool, ToolEvent};
use futures_util::{StreamExt as _, stream};
use reqwest::Url;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use rmcp::service::ClientInitializeError;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;

use crate::codec;

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
    /// Starts (stdio) or connects to (http) every server in `servers` and lists its tools; the
    /// first that fails stops the others and is the error, naming it. Two servers of one name
    /// are refused first.
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
            let connecting = match server {
                McpServer::Stdio(stdio) => Connecting::Stdio(stdio),
                McpServer::Http(http) => match http_config(http, index) {
                    Ok(config) => Connecting::Http(http, config),
                    Err(error) => {
                        started.close().await;
                        return Err(error);
                    }
                },
                _ => {
                    started.close().await;
                    return Err(codec::invalid_params(
                        &format!("mcpServers[{index}]"),
                        format!(
                            "MCP server `{}`: only stdio and http MCP servers are supported (no sse)",
                            cap(name_of(server))
                        ),
                    ));
                }
            };
            let failed = |reason: &str| connecting.failed(index, reason);
            match tokio::time::timeout(start_timeout, connecting.start(call_timeout)).await {
                Ok(Ok((service, tools))) => {
                    started.running.push(service);
                    started.tools.extend(tools);
                }
                Ok(Err(reason)) => {
                    started.close().await;
                    return Err(failed(&reason));
                }
                Err(_) => {
                    started.close().await;
                    let what = match connecting {
                        Connecting::Stdio(_) => "start",
                        Connecting::Http(..) => "answer",
                    };
                    return Err(failed(&format!(
                        "it did not {what} within {start_timeout:?}"
                    )));
                }
            }
        }
        Ok(started)
    }

    /// The servers' tools.
    pub(crate) fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Stops the servers and waits for them to exit (killing those that do not in time); ends
    /// the HTTP servers' sessions.
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

/// One server being started or connected to.
enum Connecting<'a> {
    Stdio(&'a McpServerStdio),
    Http(&'a McpServerHttp, StreamableHttpClientTransportConfig),
}

impl Connecting<'_> {
    /// Starts or connects to the server, lists its tools and wraps them.
    async fn start(
        &self,
        call_timeout: Duration,
    ) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), String> {
        let (name, service) = match self {
            Self::Stdio(server) => (&server.name, spawn(server).await?),
            Self::Http(server, config) => {
                let transport = StreamableHttpClientTransport::from_config(config.clone());
                let service = ().serve(transport).await.map_err(|e| reason(&e))?;
                (&server.name, service)
            }
        };
        tools_of(name, service, call_timeout).await
    }

    /// The error of server `index` that failed to start or connect, naming it (and its URL,
    /// without the secrets a URL may carry): the client's configuration, so invalid params.
    fn failed(&self, index: usize, reason: &str) -> Error {
        let (what, reason) = match self {
            Self::Stdio(server) => (
                format!("the MCP server `{}` failed to start", cap(&server.name)),
                reason.to_owned(),
            ),
            Self::Http(server, _) => (
                format!(
                    "the MCP server `{}` at {} failed to connect",
                    cap(&server.name),
                    cap(&redacted(&server.url))
                ),
                scrubbed(reason, &server.url),
            ),
        };
        codec::invalid_params(
            &format!("mcpServers[{index}]"),
            format!("{what}: {}", cap(&reason)),
        )
    }
}

/// The transport's configuration for `server`: its URL, which must be an absolute http or
/// https one, and its headers (sent with every request).
fn http_config(
    server: &McpServerHttp,
    index: usize,
) -> Result<StreamableHttpClientTransportConfig, Error> {
    let field = format!("mcpServers[{index}]");
    let refuse = |field: &str, reason: String| {
        codec::invalid_params(
            field,
            format!("MCP server `{}`: {reason}", cap(&server.name)),
        )
    };
    match Url::parse(&server.url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => {}
        Ok(url) => {
            return Err(refuse(
                &format!("{field}.url"),
                format!("the URL must be http or https, not `{}`", cap(url.scheme())),
            ));
        }
        Err(error) => {
            return Err(refuse(
                &format!("{field}.url"),
                format!("`{}` is no URL: {error}", cap(&server.url)),
            ));
        }
    }
    let mut headers = HashMap::new();
    for (at, header) in server.headers.iter().enumerate() {
        let field = format!("{field}.headers[{at}]");
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| {
            refuse(
                &field,
                format!("`{}` is no HTTP header name", cap(&header.name)),
            )
        })?;
        // The value may be a secret: it is never quoted.
        let value = HeaderValue::from_str(&header.value).map_err(|_| {
            refuse(
                &field,
                format!("the value of `{name}` is no HTTP header value"),
            )
        })?;
        headers.insert(name, value);
    }
    Ok(StreamableHttpClientTransportConfig::with_uri(server.url.as_str()).custom_headers(headers))
}

/// What is written for a secret taken out of a URL.
const REDACTED: &str = "***";

/// The shortest secret scrubbed from a message wherever it appears: a shorter one would
/// garble the message more than it hides.
const MIN_SECRET: usize = 4;

/// `url` as a message may show it: its user name and password, and the values of its query
/// (tokens, keys), are `***`; its fragment is left out.
fn redacted(url: &str) -> String {
    let Ok(mut parsed) = Url::parse(url) else {
        return REDACTED.to_owned();
    };
    let secret = !parsed.username().is_empty()
        || parsed.password().is_some()
        || parsed.query().is_some()
        || parsed.fragment().is_some();
    if !secret {
        return url.to_owned();
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        let _ = parsed.set_username(REDACTED);
        let _ = parsed.set_password(None);
    }
    if parsed.query().is_some() {
        let keys: Vec<String> = parsed
            .query_pairs()
            .map(|(key, _)| key.into_owned())
            .collect();
        parsed
            .query_pairs_mut()
            .clear()
            .extend_pairs(keys.iter().map(|key| (key, REDACTED)));
    }
    parsed.set_fragment(None);
    parsed.to_string()
}

/// `reason` (an HTTP client's error, which may quote the URL) without the secrets of `url`.
fn scrubbed(reason: &str, url: &str) -> String {
    let mut reason = reason.replace(url, &redacted(url));
    let Ok(parsed) = Url::parse(url) else {
        return reason;
    };
    reason = reason.replace(parsed.as_str(), &redacted(url));
    let mut secrets: Vec<String> = parsed.password().map(str::to_owned).into_iter().collect();
    secrets.extend(parsed.query_pairs().map(|(_, value)| value.into_owned()));
    if let Some(query) = parsed.query() {
        secrets.extend(
            query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .map(|(_, v)| v.to_owned()),
        );
    }
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets.iter().filter(|secret| secret.len() >= MIN_SECRET) {
        reason = reason.replace(secret.as_str(), REDACTED);
    }
    reason
}

/// Starts one server in a process group of its own (so a terminal's signals reach the agent
/// only), its stderr on ours.
async fn spawn(server: &McpServerStdio) -> Result<RunningService<RoleClient, ()>, String> {
    let mut command = tokio::process::Command::new(&server.command);
    command.args(&server.args);
    for variable in &server.env {
        command.env(&variable.name, &variable.value);
    }
    command.process_group(0);
    let transport = TokioChildProcess::new(command).map_err(|error| error.to_string())?;
    ().serve(transport).await.map_err(|e| reason(&e))
}

/// Why the MCP handshake failed: for a transport's failure, its error and their causes (a
/// refused connection, an HTTP status), without the transport's type names.
fn reason(error: &ClientInitializeError) -> String {
    let ClientInitializeError::TransportError { error, .. } = error else {
        return error.to_string();
    };
    let mut reason = error.error.to_string();
    let mut source = error.error.source();
    if let Some(StreamableHttpError::Client(client)) = error
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        // The HTTP client's error is no `source` of rmcp's: its causes are walked from it.
        source = client.source();
    }
    while let Some(cause) = source {
        let text = cause.to_string();
        if !reason.contains(&text) {
            reason = format!("{reason}: {text}");
        }
        source = cause.source();
    }
    reason
}

/// Lists the tools of the server `name` and wraps them; a failure closes it.
async fn tools_of(
    name: &str,
    mut service: RunningService<RoleClient, ()>,
    call_timeout: Duration,
) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), String> {
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
        .map(|tool| wrap(name, &tool, peer.clone(), call_timeout))
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
        stream::once(async move { call(&peer, remote, args, timeout).await }).flat_map(stream::iter)
    })
}

async fn call(
    peer: &Peer<RoleClient>,
    name: String,
    args: Value,
    timeout: Duration,
) -> Vec<ToolEvent> {
    let Value::Object(arguments) = args else {
        return vec![ToolEvent::Failed(
            "the arguments must be a JSON object".to_owned(),
        )];
    };
    let params = CallToolRequestParams::new(name.clone()).with_arguments(arguments);
    match tokio::time::timeout(timeout, peer.call_tool(params)).await {
        Err(_) => vec![ToolEvent::Failed(format!(
            "the MCP tool `{name}` did not answer within {timeout:?}"
        ))],
        Ok(Err(error)) => vec![ToolEvent::Failed(format!(
            "the MCP tool `{name}` failed: {error}"
        ))],
        Ok(Ok(result)) => outcome(result),
    }
}

/// The result's text content (and its resource links, as Markdown links) is the output; its
/// images, audio and embedded resources are attachments; `is_error` makes it a failure.
fn outcome(result: CallToolResult) -> Vec<ToolEvent> {
    let CallToolResult {
        content,
        structured_content: details,
        is_error,
        ..
    } = result;
    let mut lines = Vec::new();
    let mut events = Vec::new();
    for block in content {
        match block {
            ContentBlock::Text(text) => lines.push(text.text),
            ContentBlock::ResourceLink(link) => {
                lines.push(format!("[{}]({})", link.name, link.uri));
            }
            ContentBlock::Image(image) => {
                events.push(ToolEvent::Attachment(Attachment::image(
                    image.data,
                    image.mime_type,
                )));
            }
            ContentBlock::Audio(audio) => {
                events.push(ToolEvent::Attachment(Attachment::audio(
                    audio.data,
                    audio.mime_type,
                )));
            }
            ContentBlock::Resource(embedded) => {
                let attachment = match embedded.resource {
                    ResourceContents::TextResourceContents {
                        uri,
                        mime_type,
                        text,
                        ..
                    } => {
                        let mut attachment = Attachment::text_resource(uri, text);
                        if let Attachment::Resource {
                            mime_type: kept, ..
                        } = &mut attachment
                        {
                            *kept = mime_type;
                        }
                        attachment
                    }
                    ResourceContents::BlobResourceContents {
                        uri,
                        mime_type,
                        blob,
                        ..
                    } => Attachment::blob_resource(
                        uri,
                        blob,
                        mime_type.unwrap_or_else(|| "application/octet-stream".to_owned()),
                    ),
                    _ => continue,
                };
                events.push(ToolEvent::Attachment(attachment));
            }
            _ => {}
        }
    }
    let output = lines.join("\n");
    if is_error == Some(true) {
        return vec![ToolEvent::Failed(output)];
    }
    events.push(ToolEvent::Complete { output, details });
    events
}
