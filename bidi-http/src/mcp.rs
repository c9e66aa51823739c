//! A registry as an MCP server: every flow (and every `LlmAgent`) is a
//! tool that MCP hosts (Claude Desktop, Cursor, Zed, VS Code, the MCP SDKs' clients) list and
//! call, over stdio or streamable HTTP.
//!
//! - A **flow** registered as `/{type}/{name}` is the tool `{name}` (`{type}_{name}` when two
//!   flows share a name; characters MCP does not allow in a tool name become `_`). Its
//!   description is the flow's; its input schema is the flow's input schema when that is an
//!   object and the flow takes no init, else `{"input": <input schema>, "init": <init
//!   schema>}`. A call opens a connection, sends the input, closes it and answers the output.
//!   Each chunk the flow streams goes to the caller as a progress notification (when the call
//!   carries a `progressToken`), the chunk's JSON as its message.
//! - **Outputs.** A flow whose output schema is an object's (`"type": "object"` at its root,
//!   as MCP's `outputSchema` must be: a Rust struct, a map) advertises it as its tool's
//!   `outputSchema`, and every successful call answers the output as `structuredContent`, with
//!   its JSON as text for clients that read only the content (an output that is not an object
//!   after all, from a `Serialize` that disagrees with its schema, is the call's error). A flow
//!   with another output (a string, a number, a list, an `Option` of a struct, `()`) has no
//!   `outputSchema`: its result is the output's JSON as text, and `structuredContent` only when
//!   the output is an object all the same (a `serde_json::Value` output, say). Both schemas
//!   leave out the integer formats of Rust's types (`uint32`, `int8`: no JSON Schema format,
//!   which a strict validator such as the MCP SDKs' Ajv refuses), an unsigned one's
//!   `minimum: 0` kept.
//! - An **agent** (added with [`McpServer::agent`], or with
//!   [`Server::agent`](crate::Server::agent) for [`Server::mcp`](crate::Server::mcp)) is a tool
//!   taking `{"message": string, "sessionId"?: string}`: it answers `{"text": string,
//!   "sessionId": string}` as `structuredContent` (its `outputSchema`), the agent's text as
//!   the content, and the `sessionId` is to be sent with the next message to go on with the
//!   conversation; the text streams as progress notifications. The registry's flow of an
//!   agent served so is not listed a second time.
//! - A session calls its tools by the names its last `tools/list` gave them (a clone of an
//!   [`McpServer`] serves a session of its own); a flow registered since has its name, or
//!   `{type}_{name}` when the session's tools have that name already.
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
mod flow;
mod tools;

#[cfg(feature = "agents")]
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::Arc;

use bidi_flow::Registry;
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{RoleServer, ServerHandler, ServiceExt as _};

pub use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};

use crate::Identity;
use flow::FlowCall;
use tools::{Named, Target};

/// The cancel cause of a call its MCP client cancelled.
const CANCELLED: &str = "the MCP client cancelled the call";

/// An MCP server over a [`Registry`] (and agents): see the [module](self).
///
/// A clone serves a session of its own: it starts with no tool named.
pub struct McpServer {
    registry: Registry,
    #[cfg(feature = "agents")]
    agents: Arc<HashMap<String, LlmAgent>>,
    /// The session's tools by name.
    named: Named,
}

impl Clone for McpServer {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            #[cfg(feature = "agents")]
            agents: Arc::clone(&self.agents),
            named: Named::default(),
        }
    }
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
            named: Named::default(),
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
            named: Named::default(),
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
}

/// The identity the HTTP request of a call carries (set by [`Server::auth`](crate::Server::auth)
/// or a layer), if any; none over stdio.
fn identity(ctx: &RequestContext<RoleServer>) -> Option<Identity> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>())
        .cloned()
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
        Ok(ListToolsResult::with_all_items(self.list()))
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
            Target::Flow {
                key,
                shape,
                structured,
            } => {
                let call = FlowCall {
                    key: &key,
                    shape,
                    structured,
                };
                self.call_flow(call, arguments, ctx).await
            }
            #[cfg(feature = "agents")]
            Target::Agent(agent) => agent::call(&agent, arguments, ctx).await,
        };
        result.map(CallToolResponse::from)
    }
}
