//! The server: one reader (the task running [`Server::serve`]), a task per prompt turn that
//! waits (one that does not ends in the reader), and a writer all of them share, one line at a
//! time.
//!
//! It serves an `LlmAgent`'s typed connection (`connect_with`, then `execute`, like bidi-http's
//! execute endpoint), not a registered action through a `JsonConnection`: ACP is about agents,
//! and a turn's events map onto `session/update`s one to one. It registers no action kind.
//! Any other `bidi_agent::Agent` is served through a `Bridge`; the server holds a `Backend`
//! (`Llm` or `Bridged`), the bridged side behind one private object-safe trait (`Turns`), so
//! that `Server` stays a plain type.
//!
//! # Who owns a session's state
//!
//! A session's state has one owner at a time, and the places it lives in are not copies:
//!
//! - **The store** holds the conversation, the truth every front end and process shares
//!   (`bidi-session`); nothing here caches it apart from the agent connection.
//! - **The slot** (`Slot`, in the connection's session table) holds what ACP adds for as
//!   long as the session is open here: its mode, working directory, "always" answers, MCP
//!   servers, which turn runs, whether a load runs. It is read and written under one
//!   `std::sync::Mutex`, never held across an `.await`.
//! - **The agent connection** (`Live`) is owned by the slot while no turn runs and moved to
//!   the running turn while one does (`take_agent`), then given back; it is never shared.
//! - **`Idle`** is not a session's state: it is the connection-wide order of the kept agent
//!   connections, so that at most `max_idle_agent_connections` stay open. It is locked after
//!   the session table, never before, and that is the one lock order.
//!
//! One task per session, the reader routing to it, was weighed and not taken. The bounds are
//! the connection's, not a session's (open sessions, kept connections, requests in flight,
//! the client's pending answers), so a shared owner would remain beside the session tasks. A
//! `session/cancel` must reach a turn while it runs, so a session task would select over its
//! inbox and the running turn: the concurrency the slot's short lock handles today, moved
//! inside the task. And every request (a prompt, a cancel, a mode change) would cross one more
//! channel and task before it starts, on the round trip the ACP benchmark measures. The
//! `impl Shared` blocks are split by concern: the line writer and our requests to the client
//! (`shared`), sessions opened, loaded and closed (`session`), the kept connections
//! (`turn::live`).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{Implementation, PermissionOptionKind, ToolKind};
use bidi_agent::{Agent, Scope};
use bidi_llm::LlmAgent;
use bidi_session::SessionStore;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;

use crate::bridge::{Bridge, Bridged, Turns};
use crate::policy::{Command, Mode, Rules};

mod config;
#[cfg(feature = "unstable_session_fork")]
mod fork;
mod history;
mod manage;
mod reader;
mod session;
mod shared;

pub(crate) use history::tool_done;
use reader::read_loop;
pub(crate) use session::{SESSION_SCOPE, busy, no_session, sessions};
pub(crate) use shared::{Shared, Slot};

/// The longest line read by default: 8 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 << 20;

/// How many sessions one connection may have open at once by default: 1,024.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// How many sessions of one connection keep their agent connection between prompt turns by
/// default: 64.
pub const DEFAULT_MAX_IDLE_AGENT_CONNECTIONS: usize = 64;

/// How many `session/new`, `session/load` and `session/close` requests run at once at most;
/// the reader reads nothing more while they all do (their answers not written, say).
const MAX_REQUESTS: usize = 32;

/// How long prompt turns may run on after the client's input ended, by default.
const DEFAULT_DRAIN: Duration = Duration::from_secs(30);

/// Serves an agent over ACP: build it, then [`serve_stdio`](Self::serve_stdio) (or
/// [`serve`](Self::serve) any reader and writer).
#[must_use]
pub struct Server {
    agent: Backend,
    info: Implementation,
    max_line_bytes: usize,
    drain: Duration,
    rules: Rules,
}

/// The agent a server serves.
#[derive(Clone)]
pub(crate) enum Backend {
    /// A bidi-llm agent: its events are the updates; tools, permissions, modes and MCP apply.
    Llm(LlmAgent),
    /// Your own agent, through its [`Bridge`].
    Bridged(Arc<dyn Turns>),
}

impl Backend {
    fn name(&self) -> &str {
        match self {
            Self::Llm(agent) => agent.agent().name(),
            Self::Bridged(turns) => turns.name(),
        }
    }

    fn store(&self) -> &Arc<dyn SessionStore> {
        match self {
            Self::Llm(agent) => agent.agent().store(),
            Self::Bridged(turns) => turns.store(),
        }
    }
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Llm(agent) => agent.fmt(f),
            Self::Bridged(turns) => f.debug_tuple("Bridged").field(&turns.name()).finish(),
        }
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("agent", &self.agent)
            .field("name", &self.info.name)
            .field("max_line_bytes", &self.max_line_bytes)
            .field("drain", &self.drain)
            .field("max_sessions", &self.rules.max_sessions)
            .field("max_idle_agents", &self.rules.max_idle_agents)
            .field("scope", &self.rules.scope.as_str())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server for `agent`; it names itself after the agent, with this crate's version. The
    /// agent's tools that [need approval](bidi_llm::Tool::needs_approval) need the user's
    /// permission (see [`require_permission`](Self::require_permission)): the client is asked
    /// while the prompt turn runs.
    pub fn new(agent: LlmAgent) -> Self {
        let approvals: Vec<String> = agent
            .tools()
            .iter()
            .filter(|tool| tool.requires_approval())
            .map(|tool| tool.name().to_owned())
            .collect();
        let mut server = Self::serving(Backend::Llm(agent));
        server.rules.ask.extend(approvals);
        server
    }

    /// A server for a bidi [`Agent`] of your own, which `bridge` turns into an ACP agent: the
    /// input a prompt makes, the updates its chunks show. The server's modes and commands
    /// apply (each turn's connection carries the session's [`Workspace`](crate::Workspace)); the permissions
    /// and the MCP servers' tools are the [`LlmAgent`]'s alone.
    pub fn bridge<B, Out>(agent: Agent<B::State, B::In, Out, B::Stream>, bridge: B) -> Self
    where
        B: Bridge,
        Out: Serialize + Send + 'static,
    {
        Self::serving(Backend::Bridged(Arc::new(Bridged::new(agent, bridge))))
    }

    fn serving(agent: Backend) -> Self {
        let info = Implementation::new(agent.name(), env!("CARGO_PKG_VERSION"));
        Self {
            agent,
            info,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            drain: DEFAULT_DRAIN,
            rules: Rules::default(),
        }
    }

    /// The agent's tools whose name matches `pattern` need the user's permission: before one
    /// runs, the client is sent `session/request_permission`, and the tool runs only if the
    /// user picks an `allow_*` option. A pattern is a name in which `*` stands for any run of
    /// characters (`write*`, `*`). An `allow_always` or `reject_always` answer holds for that
    /// tool for the rest of the session.
    pub fn require_permission(mut self, pattern: impl Into<String>) -> Self {
        self.rules.ask.push(pattern.into());
        self
    }

    /// The options a permission request offers, in order (default: allow once, allow always,
    /// reject once, reject always). Each kind is offered once; an empty list keeps the
    /// default.
    pub fn permission_options(
        mut self,
        options: impl IntoIterator<Item = PermissionOptionKind>,
    ) -> Self {
        let mut kinds: Vec<PermissionOptionKind> = Vec::new();
        for kind in options {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if !kinds.is_empty() {
            self.rules.options = kinds;
        }
        self
    }

    /// Whether an [`LlmAgent`]'s prompt turns are offered the editor's files and terminals as
    /// tools, when the client advertises them in `initialize` (default: yes): see
    /// [the editor's files and terminals](crate#the-editors-files-and-terminals).
    pub fn editor_tools(mut self, offer: bool) -> Self {
        self.rules.editor = offer;
        self
    }

    /// Shows the calls of the tool `name` with `kind`, rather than the kind its name suggests
    /// (`read_file` reads, `run_command` executes, a name that suggests nothing is `other`).
    pub fn tool_kind(mut self, name: impl Into<String>, kind: ToolKind) -> Self {
        self.rules.kinds.insert(name.into(), kind);
        self
    }

    /// Adds a session mode. With any, `session/new` and `session/load` answer the modes and
    /// the current one, and the client may switch with `session/set_mode`. Sessions start in
    /// the first mode added, unless [`default_mode`](Self::default_mode) says otherwise; a
    /// second mode with the id of an earlier one replaces it.
    pub fn mode(mut self, mode: Mode) -> Self {
        match self.rules.modes.iter_mut().find(|m| m.id() == mode.id()) {
            Some(existing) => *existing = mode,
            None => self.rules.modes.push(mode),
        }
        self
    }

    /// Announces `command` to the client (`/name`) in an `available_commands_update` when a
    /// session opens; the commands are announced in the order added.
    pub fn command(mut self, command: Command) -> Self {
        match self
            .rules
            .commands
            .iter_mut()
            .find(|c| c.name() == command.name())
        {
            Some(existing) => *existing = command,
            None => self.rules.commands.push(command),
        }
        self
    }

    /// The mode sessions start in; an id no mode has changes nothing.
    pub fn default_mode(mut self, id: &str) -> Self {
        if let Some(index) = self.rules.modes.iter().position(|mode| mode.id() == id) {
            self.rules.default_mode = index;
        }
        self
    }

    /// How long an MCP server a client names may take to start (or, over HTTP, to connect)
    /// and list its tools before `session/new` or `session/load` fails, naming it (default
    /// 30 s).
    #[cfg(feature = "mcp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
    pub fn mcp_start_timeout(mut self, timeout: Duration) -> Self {
        self.rules.mcp_start_timeout = timeout;
        self
    }

    /// How long a call of an MCP server's tool may take before it fails (default 60 s).
    #[cfg(feature = "mcp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
    pub fn mcp_call_timeout(mut self, timeout: Duration) -> Self {
        self.rules.mcp_call_timeout = timeout;
        self
    }

    /// The name and version `initialize` reports (`agentInfo`).
    pub fn info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info = Implementation::new(name, version);
        self
    }

    /// The longest line accepted, in bytes (default [`DEFAULT_MAX_LINE_BYTES`]). A longer line
    /// is answered with an invalid-request error without being read into memory, and the
    /// server goes on.
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max.max(1);
        self
    }

    /// How many sessions one connection may have open at once (default
    /// [`DEFAULT_MAX_SESSIONS`]). A session is open on the connection from its `session/new` or
    /// `session/load` until its `session/close` or the end of the connection; past the bound,
    /// a `session/new`, or a `session/load` of a session not open on the connection, is refused
    /// with `-32603` and the data `{"reason": "too_many_sessions", "maxSessions": ..}`, and the
    /// connection goes on. At least 1.
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.rules.max_sessions = max.max(1);
        self
    }

    /// How many sessions of one connection keep their [`LlmAgent`]'s connection between prompt
    /// turns, at most (default [`DEFAULT_MAX_IDLE_AGENT_CONNECTIONS`]): the sessions prompted
    /// most recently. A session's connection holds its state (its conversation) in memory, so
    /// its next prompt starts at once; another session's next prompt opens its connection
    /// again, reading the session from the store. 0 keeps none: every prompt reads its session.
    pub fn max_idle_agent_connections(mut self, max: usize) -> Self {
        self.rules.max_idle_agents = max;
        self
    }

    /// The scope of the agent's store the sessions of the server's clients are in (default
    /// `acp`, a scope of their own): a session id a client names, in `session/new`,
    /// `session/load` or `session/prompt`, is a session of this scope only.
    ///
    /// Give it the scope another front end keeps the agent's sessions in to share them:
    /// `Scope::new("")`, the scope of bidi-http's anonymous requests, lets an editor load and
    /// go on with a conversation a web client started on the same store (and the web client
    /// with what the editor added), in this process or another. Every client of the server
    /// then reaches every session of that scope: give it a scope only its user's sessions are
    /// in. The server's own records of the sessions (their mode, the answers that hold for the
    /// rest of them) are kept apart for each scope.
    ///
    /// ```
    /// use bidi_acp::Server;
    /// use bidi_agent::Scope;
    /// use bidi_llm::LlmAgent;
    /// use bidi_llm::testing::DemoModel;
    ///
    /// let agent = LlmAgent::builder("assistant", DemoModel).build();
    /// // The sessions bidi-http's anonymous requests open.
    /// let server = Server::new(agent).scope(Scope::new(""));
    /// # drop(server);
    /// ```
    pub fn scope(mut self, scope: Scope) -> Self {
        self.rules.scope = scope;
        self
    }

    /// How long prompt turns still running when the client's input ends may go on before they
    /// are cancelled (default 30 s).
    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// Serves on stdin and stdout until stdin ends. Nothing but protocol lines is written to
    /// stdout; the few things the server logs (a notification it could not read, a write that
    /// failed) go to stderr, without ever waiting for it: a line stderr has no room for is
    /// dropped (and counted) rather than stall the server.
    ///
    /// # Errors
    ///
    /// An I/O error reading stdin.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops reading; the prompt turns it started are cancelled with it.
    pub async fn serve_stdio(self) -> io::Result<()> {
        self.serve(tokio::io::stdin(), tokio::io::stdout()).await
    }

    /// Serves the client that writes to `reader` and reads `writer`, until `reader` ends (or
    /// `writer` fails: nobody reads). A read error cancels the running prompt turns at once.
    /// At the end of input, the requests the server sent and
    /// that are still unanswered fail, and the prompt turns still running may finish for the
    /// [`drain`](Self::drain) period before they are cancelled. Last, it waits up to a second
    /// for its log lines to reach stderr.
    ///
    /// # Errors
    ///
    /// An I/O error reading `reader`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops reading; the prompt turns it started are cancelled with it.
    pub async fn serve<R, W>(self, reader: R, writer: W) -> io::Result<()>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (shared, stop) = Shared::new(self.agent, self.info, self.rules, Box::pin(writer));
        let _cancel_on_drop = stop.clone().drop_guard();
        let mut turns = JoinSet::new();
        let result = read_loop(&shared, reader, self.max_line_bytes, &mut turns).await;
        shared.pending.fail_all();
        if result.is_err() {
            stop.cancel(); // The input broke: nobody is there to wait for.
        }
        if tokio::time::timeout(self.drain, drain(&mut turns))
            .await
            .is_err()
        {
            log!("cancelling the prompt turns still running after the client's input ended");
            stop.cancel();
            drain(&mut turns).await;
        }
        shared.close_sessions().await;
        // The last lines, written before the program exits (at most a second: stderr may be a
        // pipe nobody reads).
        let _ = tokio::task::spawn_blocking(|| bidi_flow::log::flush(Duration::from_secs(1))).await;
        result
    }
}

async fn drain(turns: &mut JoinSet<()>) {
    while turns.join_next().await.is_some() {}
}

/// Why a prompt turn was cancelled by its client: it sent `session/cancel`.
///
/// It is the cause of the agent connection's cancellation, so the agent's tools and the
/// connection's error can tell it by downcasting. A client that goes away instead (its input
/// ended and the turn did not finish within the drain period, or its output closed) cancels
/// the turn with [`bidi_core::PeerGone::Disconnected`], as every transport does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The client sent `session/cancel`.
    ByClient,
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ByClient => "the client cancelled the prompt turn (session/cancel)",
        })
    }
}

impl std::error::Error for Cancelled {}
