//! A registry as an MCP server: every flow (and every `LlmAgent`) is a
//! tool that MCP hosts (Claude Desktop, Cursor, Zed, VS Code, the MCP SDKs' clients) list and
//! call, over stdio or streamable HTTP.
//!
//! - A **flow** registered as `/{type}/{name}` is the tool `{name}` (`{type}_{name}` when two
//!   flows share a name; characters MCP does not allow in a tool name become `_`). Its
//!   description is the flow's; its input schema is the flow's input schema when that is an
//!   object and the flow takes no init, else `{"input": <input schema>, "init": <init
//!   schema>}`. A call opens a connection, sends the input, closes it and answers the output
//!   as text (its JSON), with `structuredContent` when the output is an object. Each chunk
//!   the flow streams goes to the caller as a progress notification (when the call carries a
//!   `progressToken`), the chunk's JSON as its message.
//! - An **agent** (added with [`McpServer::agent`], or with
//!   [`Server::agent`](crate::Server::agent) for [`Server::mcp`](crate::Server::mcp)) is a tool
//!   taking `{"message": string, "sessionId"?: string}`: it answers the agent's text and the
//!   `sessionId` to send with the next message to go on with the conversation; the text
//!   streams as progress notifications. The registry's flow of an agent served so is not
//!   listed a second time.
//! - MCP's cancellation (`notifications/cancelled`) cancels the call's connection, and so does
//!   a client that goes away.
//! - A flow or agent that fails answers a tool result with `isError: true` and its message;
//!   arguments the flow refuses are the JSON-RPC error `-32602` (invalid params) naming where,
//!   and so is an unknown tool.
//!
//! Over stdio, as a program an MCP host starts:
//!
//! ```no_run
//! use bidi_flow::{BidiFlow, Registry};
//! use bidi_http::mcp::McpServer;
//!
//! # async fn echo(_: bidi_core::ActionContext, _: (), mut inbound: bidi_core::Inbound<String>, _: bidi_core::Outbound<String>) -> Result<String, bidi_core::BoxError> { Ok(inbound.recv().await.unwrap_or_default()) }
//! #[tokio::main]
//! async fn main() -> std::io::Result<()> {
//!     let registry = Registry::new();
//!     registry.register(BidiFlow::new("echo", echo)).expect("a new name");
//!     McpServer::new(registry).serve_stdio().await
//! }
//! ```
//!
//! Over streamable HTTP, at `/mcp` of a [`Server`](crate::Server), beside its other wires:
//!
//! ```no_run
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! bidi_http::Server::new(bidi_flow::Registry::new())
//!     .mcp()
//!     .bind()
//!     .await?
//!     .serve()
//!     .await
//! # }
//! ```
//!
//! The HTTP endpoint answers requests whose `Host` is a loopback name (`localhost`,
//! `127.0.0.1`, `::1`), which keeps web pages from reaching a local server by DNS rebinding;
//! a server others reach by its own name mounts [`McpServer::http_with`] with a
//! [`StreamableHttpServerConfig`] listing its hosts.

#[cfg(feature = "agents")]
mod agent;
mod tools;

#[cfg(feature = "agents")]
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::Arc;

use bidi_flow::{JsonError, Registry};
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
use futures_util::StreamExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Map, Value};

pub use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};

use crate::flow::CancelOnDrop;
use crate::{Identity, Shared};
use tools::{Shape, Target};

/// The cancel cause of a call its MCP client cancelled.
const CANCELLED: &str = "the MCP client cancelled the call";

/// How many chunks a flow may stream ahead of the progress notifications.
const OUTPUT_BUFFER: usize = 16;

/// An MCP server over a [`Registry`] (and agents): see the [module](self).
#[derive(Clone)]
pub struct McpServer {
    registry: Registry,
    #[cfg(feature = "agents")]
    agents: Arc<HashMap<String, LlmAgent>>,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("McpServer");
        debug.field("registry", &self.registry);
        #[cfg(feature = "agents")]
        debug.field("agents", &self.agents.keys().collect::<Vec<_>>());
        debug.finish()
    }
}

impl McpServer {
    /// A server whose tools are `registry`'s flows.
    #[must_use]
    pub fn new(registry: Registry) -> Self {
        Self {
            registry,
            #[cfg(feature = "agents")]
            agents: Arc::default(),
        }
    }

    /// Serves `agent` as the tool of its name, taking a message and a session.
    #[cfg(feature = "agents")]
    #[must_use]
    pub fn agent(mut self, agent: &LlmAgent) -> Self {
        Arc::make_mut(&mut self.agents).insert(agent.agent().name().to_owned(), agent.clone());
        self
    }

    #[cfg(feature = "agents")]
    pub(crate) fn with_agents(registry: Registry, agents: HashMap<String, LlmAgent>) -> Self {
        Self {
            registry,
            agents: Arc::new(agents),
        }
    }

    /// Serves one MCP client on this process's stdin and stdout until it goes away.
    ///
    /// # Errors
    ///
    /// The client's `initialize` failing (a broken pipe, a message that is not MCP), or the
    /// session ending on an I/O error.
    ///
    /// # Cancel safety
    ///
    /// Dropped, it stops serving; the calls under way are cancelled.
    pub async fn serve_stdio(self) -> io::Result<()> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(io::Error::other)?;
        running.waiting().await.map_err(io::Error::other)?;
        Ok(())
    }

    /// The streamable HTTP endpoint, a tower service to mount on a route (as
    /// [`Server::mcp`](crate::Server::mcp) does at `/mcp`), with rmcp's defaults: sessions
    /// kept in memory, loopback hosts only.
    #[must_use]
    pub fn http(self) -> StreamableHttpService<Self, LocalSessionManager> {
        self.http_with(StreamableHttpServerConfig::default())
    }

    /// [`http`](Self::http) with `config`: the hosts and origins it answers, keep-alives,
    /// sessions.
    #[must_use]
    pub fn http_with(
        self,
        config: StreamableHttpServerConfig,
    ) -> StreamableHttpService<Self, LocalSessionManager> {
        StreamableHttpService::new(move || Ok(self.clone()), Arc::default(), config)
    }

    /// Runs the flow `key` on the arguments of a call.
    async fn call_flow(
        &self,
        key: &str,
        shape: Shape,
        arguments: Map<String, Value>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let (init, input) = shape.split(arguments)?;
        let options = Shared::options(identity(&ctx).as_ref())
            .input_buffer(1)
            .output_buffer(OUTPUT_BUFFER);
        let conn = self
            .registry
            .connect_json_with(key, init, options)
            .map_err(|error| refused(&error, shape))?;
        let (input_half, mut output) = conn.into_split();
        // Dropped with the call: a client that goes away cancels the connection.
        let guard = CancelOnDrop(Some(input_half.clone()));
        if let Err(error @ JsonError::InvalidInput { .. }) = input_half.send(input).await {
            input_half.cancel_with("the call's input was refused");
            guard.disarm();
            return Err(refused(&error, shape));
        }
        // Any other failure to send: the flow ended without taking it, and its output says how.
        input_half.close();
        drop(input_half);
        let mut progress = Progress::new(&ctx);
        let mut stopped = false;
        loop {
            let mut turn = output.responses();
            loop {
                let next = tokio::select! {
                    biased;
                    () = ctx.ct.cancelled(), if !stopped => {
                        turn.cancel_with(CANCELLED);
                        stopped = true;
                        continue;
                    }
                    next = turn.next() => next,
                };
                match next {
                    Some(Ok(chunk)) => progress.send(chunk.to_string()).await,
                    Some(Err(_)) | None => break,
                }
            }
            if !turn.turn_ended() {
                break;
            }
        }
        guard.disarm();
        Ok(match output.output().await {
            Ok(value) => answer(value),
            Err(error) => failed(&error),
        })
    }
}

/// The identity the HTTP request of a call carries (set by [`Server::auth`](crate::Server::auth)
/// or a layer), if any; none over stdio.
fn identity(ctx: &RequestContext<RoleServer>) -> Option<Identity> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>())
        .cloned()
}

/// A flow's output as a tool result: its JSON as text, and as `structuredContent` when it is
/// an object.
fn answer(value: Value) -> CallToolResult {
    let text = ContentBlock::text(value.to_string());
    let mut result = CallToolResult::success(vec![text]);
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

/// A flow that failed, as a tool result with `isError` and the failure's message.
fn failed(error: &JsonError) -> CallToolResult {
    let message = match error {
        JsonError::Connection(error) => bidi_agent::Refusal::of(error).into_message(),
        JsonError::Send(send) => match send.error() {
            Some(error) => bidi_agent::Refusal::of(error).into_message(),
            None => error.to_string(),
        },
        _ => error.to_string(),
    };
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// The registry's refusal of a call's arguments, as `-32602` naming the argument.
fn refused(error: &JsonError, shape: Shape) -> ErrorData {
    let (path, reason, prefix) = match error {
        JsonError::InvalidInit { path, reason } => (path, reason, "/init"),
        JsonError::InvalidInput { path, reason, .. } => (path, reason, shape.input_prefix()),
        JsonError::NotFound(missing) => {
            return ErrorData::invalid_params(format!("no such tool: {missing}"), None);
        }
        other => return ErrorData::internal_error(other.to_string(), None),
    };
    tools::invalid_argument(&format!("{prefix}{path}"), reason)
}

/// The progress notifications of one call: none unless the call carries a `progressToken`.
struct Progress {
    to: Option<(ProgressToken, Peer<RoleServer>)>,
    count: u32,
}

impl Progress {
    fn new(ctx: &RequestContext<RoleServer>) -> Self {
        Self {
            to: ctx
                .meta
                .get_progress_token()
                .map(|token| (token, ctx.peer.clone())),
            count: 0,
        }
    }

    /// Notifies `message` as the next step, if the caller asked for progress. A client that
    /// is gone is noticed by the call's cancellation, not here.
    async fn send(&mut self, message: String) {
        let Some((token, peer)) = &self.to else {
            return;
        };
        self.count += 1;
        let param = ProgressNotificationParam::new(token.clone(), f64::from(self.count))
            .with_message(message);
        let _ = peer.notify_progress(param).await;
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("bidi", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools().into_iter().map(|(tool, _)| tool).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(target) = self.target(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "no tool `{}`: tools/list lists them",
                    bidi_flow::text::cap(&request.name)
                ),
                None,
            ));
        };
        let arguments = request.arguments.unwrap_or_default();
        let result = match target {
            Target::Flow { key, shape } => self.call_flow(&key, shape, arguments, ctx).await,
            #[cfg(feature = "agents")]
            Target::Agent(agent) => agent::call(&agent, arguments, ctx).await,
        };
        result.map(CallToolResponse::from)
    }
}
