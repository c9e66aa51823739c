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
//!   carries a `progressToken`): a [`bidi_flow::Progress`] as the progress it says, with its
//!   `total` and message; any other chunk as the next step, its JSON as the message.
//! - **Outputs.** A flow whose output schema is an object's (`"type": "object"` at its root,
//!   as MCP's `outputSchema` must be: a Rust struct, a map) advertises it as its tool's
//!   `outputSchema`, and every successful call answers the output as `structuredContent`, with
//!   its JSON as text for clients that read only the content (an output that is not an object
//!   after all, from a `Serialize` that disagrees with its schema, is the call's error). A flow
//!   with another output (a string, a number, a list, an `Option` of a struct, `()`) has no
//!   `outputSchema`: its result is text, a string output as it is (no JSON quotes), any other
//!   as its JSON, and `structuredContent` only when the output is an object all the same (a
//!   `serde_json::Value` output, say). Both schemas leave out the integer formats of Rust's
//!   types (`uint32`, `int8`: no JSON Schema format, which a strict validator such as the MCP
//!   SDKs' Ajv refuses), an unsigned one's `minimum: 0` kept.
//! - An **agent** (added with [`McpServer::agent`], or with
//!   [`Server::agent`](bidi_http::Server::agent) for an `McpServer` served by that server) is a tool
//!   taking `{"message": string, "sessionId"?: string}`: it answers `{"text": string,
//!   "sessionId": string}` as `structuredContent` (its `outputSchema`), the agent's text as
//!   the content, and the `sessionId` is to be sent with the next message to go on with the
//!   conversation; the text streams as progress notifications. The registry's flow of an
//!   agent served so is not listed a second time.
//! - **Approvals.** When the agent's model calls a tool that
//!   [needs approval](bidi_llm::Tool::needs_approval), the turn stops before the tool runs.
//!   A client that declared the `elicitation` capability is asked, in the same call, one
//!   `elicitation/create` per waiting call: a message naming the tool and its arguments, and a
//!   form `{"approved": boolean, "reason"?: string}`. `accept` with `approved: true` approves
//!   the call as it was shown; `approved: false`, `decline` and `cancel` deny it, and the model
//!   reads the `reason`. The call then goes on with the session, its text streaming on, until
//!   the turn completes (or asks again); its result is the whole answer's text. Cancelling the
//!   call (`notifications/cancelled`) cancels the question too.
//! - A client **without elicitation** gets the result as the turn stopped: the text so far,
//!   then a text naming each waiting call (its `toolCallId`, tool and arguments) and how to
//!   answer, and `pendingApprovals: [{toolCallId, name, arguments}]` in its
//!   `structuredContent`. It answers by calling the tool again with the `sessionId` and
//!   `approvals: [{toolCallId, approved, reason?}]`, a decision on each waiting call (a
//!   `message` may come with them, read after the decisions; without approvals, `message` is
//!   required). Approvals that do not answer exactly what waits (a call that does not wait, a
//!   second decision on one, a call left undecided, no `sessionId`), and a message sent while
//!   calls wait, are `-32602` naming the argument. Calls of tools the agent's client runs
//!   (remote tools) cannot be answered over MCP: the result's text names them.
//! - A session calls its tools by the names its last `tools/list` gave them (a clone of an
//!   [`McpServer`] serves a session of its own); a flow registered since has its name, or
//!   `{type}_{name}` when the session's tools have that name already. A flow registered
//!   while a session is open is told to its client (`notifications/tools/list_changed`;
//!   over HTTP on the session's own stream, the client's `GET`).
//! - MCP's cancellation (`notifications/cancelled`) cancels the call's connection, and so does
//!   a client that goes away.
//! - A flow or agent that fails answers a tool result with `isError: true` and its message;
//!   arguments the flow refuses are the JSON-RPC error `-32602` (invalid params) naming where,
//!   and so is an unknown tool, and so are params that do not fit `tools/call` or `tools/list`
//!   (`arguments` that are not an object, say: the error names `/arguments`). The server
//!   serves tools, tasks, logging and (with agents) resources: any other method
//!   (`prompts/list`, `completion/complete`...) is `-32601` (method not found).
//! - **Questions.** A flow asks the person behind its client with [`bidi_flow::ask`]: a
//!   message and a form (a JSON Schema of flat fields), as `elicitation/create` when the
//!   client declared form elicitation, or as an input request of the task the call runs as;
//!   a client that cannot be asked answers `AskError::NotOffered`.
//!
//! ## Resources
//!
//! The sessions of the agents served are resources, in the caller's scope:
//! `bidi://agent/{agent}/session/{sessionId}` is a session's conversation (the JSON of its
//! messages) and `.../artifact/{name}` one of its artifacts (the JSON of its parts); names
//! and ids are percent-encoded. `resources/list` lists the conversations, a page of
//! [`RESOURCES_PAGE`] at a time; `resources/templates/list` answers both templates; a URI of
//! nothing the caller may read is `-32002` (resource not found). `resources/subscribe` to one
//! tells the client `notifications/resources/updated` each time a turn starts or ends on its
//! session, in this process or another on the same store (the session's head is read every
//! [`WATCH_EVERY`]), until `resources/unsubscribe` or the end of the MCP session.
//!
//! ## Tasks
//!
//! A call that outlives its request runs as an MCP task (the tasks extension,
//! `io.modelcontextprotocol/tasks`, which the server declares) when its tool supports tasks
//! ([`McpServer::task_support`]: an agent's do unless told otherwise, a flow's when told) and
//! its client declared the extension, at `initialize` or in the request's `_meta`. The call is
//! answered at once with the task (`resultType: "task"`, its `taskId`); `tasks/get` answers
//! how it stands (`working`, `input_required` with the questions it waits on, `completed` with
//! the tool's result, `failed` with the JSON-RPC error of arguments the tool refused,
//! `cancelled`); `tasks/update` answers its questions by their keys (an agent's approvals,
//! one question per waiting call, all at once; a flow's [questions](bidi_flow::ask)), and the
//! call goes on once each is answered; `tasks/cancel` cancels the call (an agent's turn is
//! aborted). A task belongs to the identity that created it, is kept for
//! [`DEFAULT_TASK_RETENTION`] after its client last heard of it
//! ([`McpServer::task_retention`]), and a server keeps at most [`DEFAULT_MAX_TASKS`]
//! ([`McpServer::max_tasks`]). A tool that needs a task ([`TaskSupport::Required`]) refuses
//! a client that did not declare the extension (`-32021`). Tasks are kept in the server's
//! memory: they do not outlive its process (an agent's session does, in its store).
//!
//! ## Logging
//!
//! What a flow logs with [`bidi_flow::log::record`] (and what an `LlmAgent` logs: a failed
//! model call as `error`, a failed tool and a model call tried again as `warning`) goes to the client that called it as
//! `notifications/message`, the tool's name as its `logger`, when at or above the level the
//! client set with `logging/setLevel` (`info` until it sets one). The records of a session
//! go out in order, never holding up the call; a client that does not read them loses the
//! excess, and is told how many. Over HTTP they travel on the session's own stream (the
//! client's `GET`).
//!
//! ## Sampling
//!
//! With [`McpServer::sampling`] on, an agent answers with the model of a client that declared
//! `sampling` (an MCP host's), through `sampling/createMessage`, instead of its own: an
//! agent built on [`HostModel::required`](bidi_llm::HostModel::required) has no model or API
//! key of its own. A model request becomes one sampling request: the system prompt,
//! temperature and most tokens (`maxTokens`, [`DEFAULT_MAX_TOKENS`] by default); the
//! conversation (text, images and audio; tool calls and results as `tool_use` and
//! `tool_result` when the client samples with tools, else as text); and the agent's tools when
//! the client samples with tools. Its answer's text and tool calls are the model's answer,
//! its `stopReason` the model's; the agent runs the tools it calls and asks again, as with any
//! model. A client's refusal fails the turn with the client's words. A flow reaches the
//! client's model the same way, as the [`HostModel`](bidi_llm::HostModel) in its context's
//! extensions.
//!
//! Over stdio, as a program an MCP host starts:
//!
//! ```no_run
//! use bidi_flow::{BidiFlow, Registry};
//! use bidi_mcp::McpServer;
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
//! Over streamable HTTP, at `/mcp` of a [`Server`](bidi_http::Server), beside its other wires
//! (an `McpServer` is a [`Protocol`]):
//!
//! ```no_run
//! use bidi_mcp::McpServer;
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let registry = bidi_flow::Registry::new();
//! bidi_http::Server::new(registry.clone())
//!     .protocol(McpServer::new(registry))
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
//!
//! ## Sessions over HTTP
//!
//! An `initialize` opens a session (its `Mcp-Session-Id`), kept in the server's memory:
//!
//! - **It belongs to the identity that opened it** (the request's [`Identity`], set by
//!   [`Server::auth`](bidi_http::Server::auth) or a layer; none on a server without identities).
//!   A request naming a session of another identity is answered as one naming a session the
//!   server does not know: HTTP 404 with the JSON-RPC error `-32001` (`session not found`),
//!   whatever it is (a call, a cancellation, the SSE stream of a `GET`, a `DELETE`). It is
//!   never served, cancels nothing and deletes nothing; the calls of a session run as its
//!   identity.
//! - **They are capped**: a server keeps at most [`McpServer::max_sessions`] open (default
//!   [`DEFAULT_MAX_SESSIONS`]; each holds about 60 KiB). Past it, an `initialize` is answered
//!   HTTP 503 with a `Retry-After` (seconds) and the JSON-RPC error `-32000` saying so, until
//!   a session ends.
//! - **A session ends** when its client deletes it (an HTTP `DELETE` naming it), or when no
//!   message has gone either way for [`McpServer::session_idle_timeout`] (default
//!   [`DEFAULT_SESSION_IDLE_TIMEOUT`], five minutes; an open SSE stream alone does not keep it
//!   alive). A request naming it after that is answered 404, and the client initializes
//!   again.
//!
//! Requests it cannot read are answered in JSON-RPC's terms, HTTP 400 with an error body: a
//! body that is not JSON is `-32700` (parse error), JSON that is not a JSON-RPC message (an
//! object without `jsonrpc` and `method`, a batch) is `-32600` (invalid request). A body
//! larger than the endpoint takes is answered 413.
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]

#[cfg(feature = "agents")]
mod agent;
#[cfg(feature = "agents")]
mod approval;
mod asking;
mod flow;
mod http;
mod logging;
#[cfg(feature = "agents")]
mod resources;
#[cfg(feature = "agents")]
mod sampling;
mod tasks;
mod tools;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bidi_flow::Registry;
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
use opentelemetry::context::FutureExt as _;
#[expect(deprecated, reason = "MCP 2025-11-25's logging, which clients speak")]
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, ErrorCode, ErrorData, GetTaskParams,
    GetTaskResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
#[cfg(feature = "agents")]
use rmcp::model::{
    ReadResourceRequestParams, ReadResourceResponse, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler, ServiceExt as _};
use tokio_util::sync::CancellationToken;

pub use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService,
};

use asking::Asking;
use bidi_core::ConnectOptions;
use bidi_flow::ask::Asker;
use bidi_flow::log::Logger;
use bidi_http::{Host, Identity, Protocol};
#[cfg(feature = "agents")]
use bidi_llm::HostModel;
use flow::FlowCall;
pub use http::McpHttpService;
use logging::Logging;
#[cfg(feature = "agents")]
pub use resources::{MAX_SUBSCRIPTIONS, PAGE as RESOURCES_PAGE, WATCH_EVERY};
#[cfg(feature = "agents")]
pub use sampling::DEFAULT_MAX_TOKENS;
use tasks::Tasks;
pub use tasks::{DEFAULT_MAX_TASKS, DEFAULT_TASK_RETENTION, TaskSupport};
use tools::{Named, Target};

/// The cancel cause of a call its MCP client cancelled.
const CANCELLED: &str = "the MCP client cancelled the call";

/// How many MCP sessions a server keeps open at once, unless told otherwise
/// ([`McpServer::max_sessions`]).
pub const DEFAULT_MAX_SESSIONS: usize = 1_000;

/// How long an MCP session lives with no message either way, unless told otherwise
/// ([`McpServer::session_idle_timeout`]): five minutes.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// An MCP server over a [`Registry`] (and agents): see the [module](self).
///
/// A clone serves a session of its own: it starts with no tool named.
pub struct McpServer {
    registry: Registry,
    #[cfg(feature = "agents")]
    agents: Arc<HashMap<String, LlmAgent>>,
    /// The session's tools by name.
    named: Named,
    /// The session's logging level and queue.
    logging: Arc<Logging>,
    /// Cancelled when the session's handler is gone: ends what watches for it.
    ended: Arc<tools::Ended>,
    /// The session's subscriptions to resources, ended with it.
    #[cfg(feature = "agents")]
    subscriptions: Arc<resources::Subscriptions>,
    /// Whether calls use the client's model when it lends one.
    #[cfg(feature = "agents")]
    sampling: bool,
    /// The cap and the idle lifetime of the HTTP endpoint's sessions.
    sessions: SessionLimits,
    /// The tasks of every session.
    tasks: Arc<Tasks>,
    /// Whether the calls of a tool, by what it runs (a flow's key, an agent's name), may run
    /// as tasks, where not as by default.
    task_support: Arc<HashMap<String, TaskSupport>>,
}

/// The cap and the idle lifetime of an HTTP endpoint's sessions.
#[derive(Debug, Clone, Copy)]
struct SessionLimits {
    max: usize,
    idle_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max: DEFAULT_MAX_SESSIONS,
            idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
        }
    }
}

impl Clone for McpServer {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            #[cfg(feature = "agents")]
            agents: Arc::clone(&self.agents),
            named: Named::default(),
            logging: Arc::default(),
            ended: Arc::default(),
            #[cfg(feature = "agents")]
            subscriptions: Arc::default(),
            #[cfg(feature = "agents")]
            sampling: self.sampling,
            sessions: self.sessions,
            tasks: Arc::clone(&self.tasks),
            task_support: Arc::clone(&self.task_support),
        }
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("McpServer");
        debug.field("registry", &self.registry);
        #[cfg(feature = "agents")]
        debug.field("agents", &self.agents.keys().collect::<Vec<_>>());
        #[cfg(feature = "agents")]
        debug.field("sampling", &self.sampling);
        debug
            .field("max_sessions", &self.sessions.max)
            .field("session_idle_timeout", &self.sessions.idle_timeout)
            .finish()
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
            logging: Arc::default(),
            ended: Arc::default(),
            #[cfg(feature = "agents")]
            subscriptions: Arc::default(),
            #[cfg(feature = "agents")]
            sampling: false,
            sessions: SessionLimits::default(),
            tasks: Arc::default(),
            task_support: Arc::default(),
        }
    }

    /// Serves `agent` as the tool of its name, taking a message and a session.
    #[cfg(feature = "agents")]
    #[must_use]
    pub fn agent(mut self, agent: &LlmAgent) -> Self {
        Arc::make_mut(&mut self.agents).insert(agent.agent().name().to_owned(), agent.clone());
        self
    }

    /// Whether a call answers with the MCP client's model, when the client lends it (default
    /// off).
    ///
    /// With it on, a call from a client that declared `sampling` runs with the client's model
    /// as its [`HostModel`]: an agent's turns ask the client (`sampling/createMessage`)
    /// instead of the agent's own model, and a flow may ask it too (from its context's
    /// extensions). A client that declared no `sampling` gets the agent's own model. An agent
    /// built on [`HostModel::required`] has no model of its own and answers only clients that
    /// sample: inside an MCP host it needs no API key. See how a model request becomes a
    /// sampling request in the [crate docs](self#sampling).
    #[cfg(feature = "agents")]
    #[must_use]
    pub fn sampling(mut self, on: bool) -> Self {
        self.sampling = on;
        self
    }

    /// What a call of the tool `tool` carries into its connection.
    fn env(&self, tool: &str, ctx: &RequestContext<RoleServer>) -> CallEnv {
        CallEnv {
            identity: identity(ctx),
            logger: self.logging.logger(tool, &ctx.peer),
            asker: None,
            #[cfg(feature = "agents")]
            host: self.sampling.then(|| sampling::host_model(ctx)).flatten(),
        }
    }

    /// Serves `agents` too, beside those it has (an agent of the same name stays).
    #[cfg(feature = "agents")]
    fn with_agents(mut self, agents: &HashMap<String, LlmAgent>) -> Self {
        let own = Arc::make_mut(&mut self.agents);
        for (name, agent) in agents {
            own.entry(name.clone()).or_insert_with(|| agent.clone());
        }
        self
    }

    /// How many sessions the HTTP endpoint keeps open at once (default
    /// [`DEFAULT_MAX_SESSIONS`]): past it, an `initialize` is refused with HTTP 503, a
    /// `Retry-After` and a JSON-RPC error (`-32000`), until a session ends (its client deletes
    /// it, or it stays idle for the [idle timeout](Self::session_idle_timeout)). Each open
    /// session holds about 60 KiB.
    #[must_use]
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.sessions.max = max;
        self
    }

    /// How long a session of the HTTP endpoint lives with no message either way (default
    /// [`DEFAULT_SESSION_IDLE_TIMEOUT`], five minutes); then it ends, and a request naming it
    /// is answered 404, as for any session the server does not know.
    #[must_use]
    pub fn session_idle_timeout(mut self, timeout: Duration) -> Self {
        self.sessions.idle_timeout = timeout;
        self
    }

    /// Whether the calls of a tool may run as MCP tasks: `target` names what it runs, a flow
    /// by its key (`/bidi-flow/report`), an agent by its name. By default an agent's calls may
    /// ([`TaskSupport::Optional`]) and a flow's may not ([`TaskSupport::Forbidden`]). See
    /// the [crate docs](self#tasks).
    #[must_use]
    pub fn task_support(mut self, target: impl Into<String>, support: TaskSupport) -> Self {
        Arc::make_mut(&mut self.task_support).insert(target.into(), support);
        self
    }

    /// How long a task is kept after its client last heard of it or it last changed (default
    /// [`DEFAULT_TASK_RETENTION`], an hour); a task forgotten while running is cancelled.
    #[must_use]
    pub fn task_retention(self, retention: Duration) -> Self {
        let limits = self.tasks.limits();
        self.tasks.set_limits(tasks::Limits {
            retention,
            ..limits
        });
        self
    }

    /// How many tasks the server keeps at once (default [`DEFAULT_MAX_TASKS`]): past them, a
    /// call that may run either way runs in its request, and one that needs a task is
    /// refused (`-32000`) until a task is forgotten.
    #[must_use]
    pub fn max_tasks(self, max: usize) -> Self {
        let limits = self.tasks.limits();
        self.tasks.set_limits(tasks::Limits { max, ..limits });
        self
    }

    /// Whether the calls of `target`'s tool may run as tasks.
    fn support(&self, target: &Target) -> TaskSupport {
        if let Some(support) = self.task_support.get(target.id()) {
            return *support;
        }
        match target {
            Target::Flow { .. } => TaskSupport::Forbidden,
            #[cfg(feature = "agents")]
            Target::Agent(_) => TaskSupport::Optional,
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
    /// its [`Protocol`] does at `/mcp`), with rmcp's defaults: sessions
    /// kept in memory, loopback hosts only.
    #[must_use]
    pub fn http(self) -> McpHttpService {
        self.http_with(StreamableHttpServerConfig::default())
    }

    /// [`http`](Self::http) with `config`: the hosts and origins it answers, SSE keep-alives,
    /// the largest body. Sessions are kept in this process's memory: a
    /// [`session_store`](StreamableHttpServerConfig::session_store) is not used, since a
    /// session restored from it would belong to no identity here.
    #[must_use]
    pub fn http_with(self, config: StreamableHttpServerConfig) -> McpHttpService {
        McpHttpService::new(self, config)
    }
}

/// Serves the streamable HTTP endpoint at `/mcp` of a [`bidi_http::Server`], with the
/// server's agents as tools beside this server's own (an agent of the same name stays),
/// behind the server's auth and layers: each session belongs to the identity that opened it.
/// It answers requests whose `Host` is a loopback name; to serve others, mount
/// [`McpServer::http_with`] on a route of your own.
impl Protocol for McpServer {
    fn routes(&self, host: &Host) -> axum::Router {
        #[cfg(feature = "agents")]
        let server = self.clone().with_agents(host.agents());
        #[cfg(not(feature = "agents"))]
        let (server, _) = (self.clone(), host);
        axum::Router::new().route_service("/mcp", server.http())
    }
}

/// The identity the HTTP request of a call carries (set by [`Server::auth`](bidi_http::Server::auth)
/// or a layer), if any; none over stdio.
fn identity(ctx: &RequestContext<RoleServer>) -> Option<Identity> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Identity>())
        .cloned()
}

/// The trace a call continues: its request's `_meta` (`traceparent`, `tracestate`), else its
/// HTTP request's headers, as the application's propagator reads them. A call runs with it
/// current, so the connection it makes is the caller's span's child.
fn caller_context(ctx: &RequestContext<RoleServer>) -> Option<opentelemetry::Context> {
    bidi_flow::caller_context(&bidi_flow::JsonCarrier(&ctx.meta.0.0)).or_else(|| {
        let parts = ctx.extensions.get::<axum::http::request::Parts>()?;
        bidi_http::caller_context(&parts.headers)
    })
}

/// Puts the current trace context (the span asking: a model call's, a tool call's) in the
/// `_meta` of a request to the client (`traceparent`, `tracestate`), as the application's
/// propagator writes it.
fn traced(params: &mut impl rmcp::model::RequestParamsMeta) {
    let mut trace = serde_json::Map::new();
    bidi_flow::inject_context(&mut trace);
    if trace.is_empty() {
        return;
    }
    let meta = params.meta_mut().get_or_insert_with(Default::default);
    for (key, value) in trace {
        meta.0.0.entry(key).or_insert(value);
    }
}

/// What a call's connection carries: its caller's identity, a logger of its records for the
/// client, and the client's model when it lends one.
struct CallEnv {
    identity: Option<Identity>,
    logger: Logger,
    /// Asks the client what a flow asks, when it can be asked.
    asker: Option<Asker>,
    #[cfg(feature = "agents")]
    host: Option<HostModel>,
}

impl CallEnv {
    /// The options of a connection of the call.
    fn options(&self) -> ConnectOptions {
        let mut options =
            Host::connect_options(self.identity.as_ref()).extension(self.logger.clone());
        if let Some(asker) = &self.asker {
            options = options.extension(asker.clone());
        }
        #[cfg(feature = "agents")]
        if let Some(host) = &self.host {
            return options.extension(host.clone());
        }
        options
    }
}

/// The progress notifications of one call: none unless the call carries a `progressToken`.
struct CallProgress {
    to: Option<(ProgressToken, Peer<RoleServer>)>,
    /// The last progress notified, as `f64` bits.
    last: AtomicU64,
}

/// One step of a call's progress.
enum Step {
    /// A chunk's text, one more than the last step.
    Text(String),
    /// What the flow says of its progress.
    Known(bidi_flow::Progress),
}

impl CallProgress {
    fn new(ctx: &RequestContext<RoleServer>) -> Self {
        Self {
            to: ctx
                .meta
                .get_progress_token()
                .map(|token| (token, ctx.peer.clone())),
            last: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// No progress notifications: the call's request has been answered.
    fn none() -> Self {
        Self {
            to: None,
            last: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Whether the caller asked for progress.
    fn wanted(&self) -> bool {
        self.to.is_some()
    }

    /// Notifies `step`, if the caller asked for progress: a text as the message of the next
    /// step (one more than the last), a flow's own progress as it says. A client that is
    /// gone is noticed by the call's cancellation, not here.
    async fn send(&self, step: Step) {
        let Some((token, peer)) = &self.to else {
            return;
        };
        let last = f64::from_bits(self.last.load(Ordering::Relaxed));
        let (progress, total, message) = match step {
            Step::Text(message) => (last.floor() + 1.0, None, Some(message)),
            Step::Known(known) => (known.progress, known.total, known.message),
        };
        self.last.store(progress.to_bits(), Ordering::Relaxed);
        let mut param = ProgressNotificationParam::new(token.clone(), progress);
        param.total = total;
        param.message = message;
        let _ = peer.notify_progress(param).await;
    }
}

/// Whom a call answers: the client of its request, or the task it runs as.
struct Caller {
    /// Its progress notifications (none for a task: its request has been answered).
    progress: CallProgress,
    /// Whom it asks, and its cancellation: its client cancelled the request, or the task.
    asking: Asking,
}

impl Caller {
    /// The client of the request `ctx`.
    fn request(ctx: &RequestContext<RoleServer>) -> Self {
        Self {
            progress: CallProgress::new(ctx),
            asking: Asking {
                peer: ctx.peer.clone(),
                task: None,
                cancelled: ctx.ct.clone(),
            },
        }
    }

    /// The task `task`, created by the request `ctx`.
    fn task(ctx: &RequestContext<RoleServer>, task: Arc<tasks::Task>) -> Self {
        Self {
            progress: CallProgress::none(),
            asking: Asking {
                peer: ctx.peer.clone(),
                cancelled: task.cancellation(),
                task: Some(task),
            },
        }
    }

    /// Cancelled with the call.
    fn cancelled(&self) -> &CancellationToken {
        &self.asking.cancelled
    }
}

/// `-32601` (method not found): `method` is not one this server serves.
fn not_served(method: &str) -> ErrorData {
    let message = format!(
        "method not found: `{}`; this server serves tools (`tools/list`, `tools/call`), \
         logging and resources",
        bidi_flow::text::cap(method)
    );
    ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None)
}

impl ServerHandler for McpServer {
    #[expect(deprecated, reason = "MCP 2025-11-25's logging, which clients speak")]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        // Without agents there are no sessions to read.
        #[cfg(not(feature = "agents"))]
        let mut capabilities = capabilities;
        #[cfg(not(feature = "agents"))]
        {
            capabilities.resources = None;
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("bidi", env!("CARGO_PKG_VERSION")))
    }

    /// Tells the client of each flow registered from now on, for as long as its session lasts.
    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        tools::tell_changes(&self.registry, ctx.peer, &self.ended);
    }

    #[expect(deprecated, reason = "MCP 2025-11-25's logging, which clients speak")]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.logging.set_level(request.level);
        Ok(())
    }

    // The server has tools only: the other lists are methods it does not serve.

    #[cfg(feature = "agents")]
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.list_sessions(request, identity(&ctx).as_ref()).await
    }

    #[cfg(feature = "agents")]
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(Self::resource_templates())
    }

    #[cfg(feature = "agents")]
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let read = self
            .read_session(&request.uri, identity(&ctx).as_ref())
            .await;
        read.map(ReadResourceResponse::from)
    }

    #[cfg(feature = "agents")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = identity(&ctx);
        self.watch(&request.uri, caller.as_ref(), ctx.peer).await
    }

    #[cfg(feature = "agents")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.unwatch(&request.uri);
        Ok(())
    }

    #[cfg(not(feature = "agents"))]
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Err(not_served("resources/list"))
    }

    #[cfg(not(feature = "agents"))]
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Err(not_served("resources/templates/list"))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Err(not_served("prompts/list"))
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Err(not_served("completion/complete"))
    }

    /// A request of no method MCP knows, or of a method MCP knows whose params do not fit
    /// it: `tools/call` or `tools/list` with such params is `-32602` naming where; any other,
    /// `-32601`.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let params = request.params.unwrap_or(serde_json::Value::Null);
        Err(match request.method.as_str() {
            "tools/call" => tools::invalid_params::<CallToolRequestParams>(params),
            "tools/list" => tools::invalid_params::<Option<PaginatedRequestParams>>(params),
            method => not_served(method),
        })
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
        let env = self.env(&request.name, &ctx);
        let support = self.support(&target);
        let declared = tasks::declared(ctx.client_capabilities().as_ref());
        if support == TaskSupport::Required && !declared {
            return Err(tasks::required());
        }
        let task = (support != TaskSupport::Forbidden && declared)
            .then(|| self.tasks.create(env.identity.clone()))
            .flatten();
        let trace = caller_context(&ctx).unwrap_or_else(opentelemetry::Context::current);
        match task {
            Some(task) => {
                let created = task.created();
                let caller = Caller::task(&ctx, Arc::clone(&task));
                let call = run(self.registry.clone(), target, arguments, env, caller);
                let call = call.with_context(trace);
                drop(tokio::spawn(async move { task.finish(call.await) }));
                Ok(CallToolResponse::Task(created))
            }
            None if support == TaskSupport::Required => Err(tasks::full()),
            None => {
                let caller = Caller::request(&ctx);
                let call = run(self.registry.clone(), target, arguments, env, caller);
                call.with_context(trace).await.map(CallToolResponse::from)
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks.get(&request.task_id, identity(&ctx).as_ref())
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = identity(&ctx);
        self.tasks
            .update(&request.task_id, caller.as_ref(), request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel(&request.task_id, identity(&ctx).as_ref())
    }
}

/// Runs `target` on a call's `arguments`, for `caller`.
///
/// # Errors
///
/// Arguments the tool refuses, as `-32602` naming where.
async fn run(
    registry: Registry,
    target: Target,
    arguments: serde_json::Map<String, serde_json::Value>,
    mut env: CallEnv,
    caller: Caller,
) -> Result<rmcp::model::CallToolResult, ErrorData> {
    env.asker = caller.asking.asker();
    match target {
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
            flow::call(&registry, call, arguments, &env, &caller).await
        }
        #[cfg(feature = "agents")]
        Target::Agent(agent) => agent::call(&agent, arguments, env, &caller).await,
    }
}
