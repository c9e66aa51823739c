//! The server: one reader (the task running [`Server::serve`]), a task per prompt turn, and a
//! writer all of them share, one line at a time.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AGENT_METHOD_NAMES, AgentCapabilities, AuthenticateRequest, AvailableCommandsUpdate,
    CLIENT_METHOD_NAMES, CancelNotification, CloseSessionRequest, CloseSessionResponse,
    CurrentModeUpdate, Error, ErrorCode, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, LoadSessionResponse, McpCapabilities, McpServer, NewSessionRequest,
    NewSessionResponse, PermissionOptionKind, PromptCapabilities, PromptRequest, RequestId,
    SessionCapabilities, SessionCloseCapabilities, SessionId, SessionModeState,
    SessionNotification, SessionUpdate, SetSessionModeRequest, SetSessionModeResponse, ToolCall,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use bidi_agent::{Agent, MAX_SESSION_ID_BYTES, Scope};
use bidi_flow::lines::{Line, read_line};
use bidi_flow::text::cap;
use bidi_llm::{AssistantContent, AssistantMessage, Attachment, LlmAgent, LlmSession, Message};
use bidi_session::{Scoped, Session, SessionStore, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::bridge::{Bridge, Bridged, Turns};
use crate::codec::{self, Incoming};
use crate::content::{self, chunk};
use crate::mcp::Servers;
use crate::policy::{Command, Mode, Rules};
use crate::turn::{prompt, start};

/// The longest line read by default: 8 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 << 20;

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
    pub fn mcp_start_timeout(mut self, timeout: Duration) -> Self {
        self.rules.mcp_start_timeout = timeout;
        self
    }

    /// How long a call of an MCP server's tool may take before it fails (default 60 s).
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

    /// How long prompt turns still running when the client's input ends may go on before they
    /// are cancelled (default 30 s).
    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// Serves on stdin and stdout until stdin ends. Nothing but protocol lines is written to
    /// stdout; the few things the server logs (a notification it could not read, a write that
    /// failed) go to stderr.
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
    /// [`drain`](Self::drain) period before they are cancelled.
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
        shared.close_mcp().await;
        result
    }
}

async fn drain(turns: &mut JoinSet<()>) {
    while turns.join_next().await.is_some() {}
}

/// Why a prompt turn was cancelled: the client's `session/cancel`, or the client going away.
///
/// It is the cause of the agent connection's cancellation, so the agent's tools and the
/// connection's error can tell which by downcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The client sent `session/cancel`.
    ByClient,
    /// The client went away: its input ended and the turn did not finish within the drain
    /// period, or its output closed.
    ClientGone,
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ByClient => "the client cancelled the prompt turn (session/cancel)",
            Self::ClientGone => "the client went away",
        })
    }
}

impl std::error::Error for Cancelled {}

// ---------------------------------------------------------------------------------------------
// What the reader and the turns share.

type Sink = Pin<Box<dyn AsyncWrite + Send>>;

pub(crate) struct Shared {
    pub(crate) agent: Backend,
    info: Implementation,
    pub(crate) rules: Rules,
    out: Writer,
    sessions: Mutex<HashMap<Arc<str>, Slot>>,
    pub(crate) pending: Pending,
    /// The number of the last prompt turn started on the connection.
    pub(crate) turns: AtomicU64,
    /// Room for the request tasks running: see [`room`].
    requests: Arc<Semaphore>,
    /// Cancelled when the client is gone: every turn's token is a child of it.
    pub(crate) stop: CancellationToken,
}

/// A session open on this connection.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The running prompt turn's cancellation, if one runs.
    pub(crate) running: Option<CancellationToken>,
    /// The running (or last) prompt turn's number, unique on the connection: a turn that ends
    /// after its session was closed and opened again leaves the new one's turn alone.
    pub(crate) turn: u64,
    /// A `session/load` of it runs: no prompt turn may start.
    pub(crate) loading: bool,
    /// The current mode: an index into the server's modes.
    pub(crate) mode: usize,
    /// The session's working directory, which relative paths in tool arguments are against.
    pub(crate) cwd: PathBuf,
    /// The tools the user allowed (`true`) or rejected (`false`) for the rest of the session.
    pub(crate) always: HashMap<String, bool>,
    /// The MCP servers the client named for the session, running.
    pub(crate) mcp: Servers,
}

impl Slot {
    fn new(cwd: PathBuf, mode: usize) -> Self {
        Self {
            running: None,
            turn: 0,
            loading: false,
            mode,
            cwd,
            always: HashMap::new(),
            mcp: Servers::default(),
        }
    }
}

impl Shared {
    pub(crate) fn new(
        agent: Backend,
        info: Implementation,
        rules: Rules,
        sink: Sink,
    ) -> (Arc<Self>, CancellationToken) {
        let stop = CancellationToken::new();
        let shared = Arc::new(Self {
            agent,
            info,
            rules,
            out: Writer {
                inner: tokio::sync::Mutex::new((sink, Vec::new())),
                stop: stop.clone(),
            },
            sessions: Mutex::new(HashMap::new()),
            pending: Pending::default(),
            turns: AtomicU64::new(0),
            requests: Arc::new(Semaphore::new(MAX_REQUESTS)),
            stop: stop.clone(),
        });
        (shared, stop)
    }

    /// Stops every session's MCP servers and waits for them to exit.
    async fn close_mcp(&self) {
        let servers: Vec<Servers> = self
            .sessions()
            .values_mut()
            .map(|slot| std::mem::take(&mut slot.mcp))
            .collect();
        for mut servers in servers {
            servers.close().await;
        }
    }

    pub(crate) fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Slot>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the client is gone.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Where the server keeps what it knows of a session besides the agent's state: the
    /// agent's store, in a scope of the server's own.
    fn kept_store(&self) -> Arc<dyn SessionStore> {
        Arc::new(Scoped::new(Arc::clone(self.agent.store()), KEPT_SCOPE))
    }

    /// What the server keeps of session `id`, if anything.
    async fn kept(&self, id: &str) -> Result<Option<Kept>, StoreError> {
        Ok(Session::<Kept>::load(self.kept_store(), id)
            .await?
            .map(|session| session.state()))
    }

    /// Saves the session's mode and the answers that hold for the rest of it, so that a
    /// `session/load` (after a restart, say) finds them.
    pub(crate) async fn keep(&self, id: &Arc<str>) -> Result<(), StoreError> {
        let kept = {
            let sessions = self.sessions();
            let Some(slot) = sessions.get(id) else {
                return Ok(());
            };
            Kept {
                mode: self
                    .rules
                    .modes
                    .get(slot.mode)
                    .map(|mode| mode.id().to_owned()),
                always: slot.always.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            }
        };
        let session = Session::load_or_create(self.kept_store(), id, Kept::default).await?;
        session.update(|state| *state = kept.clone()).await
    }

    /// Announces the server's commands for a session just opened.
    async fn announce(&self, session_id: &SessionId) {
        if self.rules.commands.is_empty() {
            return;
        }
        let commands = self.rules.commands.iter().map(Command::wire).collect();
        let update = SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands));
        let _ = self.update(session_id, update).await;
    }

    pub(crate) async fn respond<R: Serialize>(&self, id: RequestId, result: Result<R, Error>) {
        // A failed write stops everything already (see `Writer::send`).
        let _ = self.out.send(&codec::response_message(id, result)).await;
    }

    pub(crate) async fn update(
        &self,
        session_id: &SessionId,
        update: SessionUpdate,
    ) -> io::Result<()> {
        let params = SessionNotification::new(session_id.clone(), update);
        self.out
            .send(&codec::notification(
                CLIENT_METHOD_NAMES.session_update,
                &params,
            ))
            .await
    }

    /// Sends a request to the client and waits for its answer.
    ///
    /// # Errors
    ///
    /// The client's error; or, when the client went away before answering, an internal error
    /// whose data says `{"reason": "incoming_transport_closed"}`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future forgets the request: a later answer is ignored.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, Error> {
        let (id, answer) = self.pending.register().ok_or_else(closed)?;
        let _forget = Forget(&self.pending, id.clone());
        if self
            .out
            .send(&codec::request(id.clone(), method, params))
            .await
            .is_err()
        {
            return Err(closed());
        }
        answer.await.unwrap_or_else(|_| Err(closed()))
    }

    /// The modes, as `session/new` and `session/load` answer them.
    fn modes(&self, current: usize) -> Option<SessionModeState> {
        let mode = self.rules.modes.get(current)?;
        Some(SessionModeState::new(
            mode.id().to_owned(),
            self.rules.modes.iter().map(Mode::wire).collect::<Vec<_>>(),
        ))
    }
}

/// The scope of the agent's store the server keeps its own records of sessions in.
const KEPT_SCOPE: &str = "bidi-acp";

/// The scope of the agent's store the sessions of ACP clients are in: an id a client names is
/// a session of this scope only, never a key of another scope's (the server's own records, say)
/// nor of the agent's unscoped sessions.
pub(crate) const SESSION_SCOPE: &str = "acp";

/// The sessions of ACP clients of agent `agent` in its `store`: where its connections, which
/// carry the scope, open them.
pub(crate) fn sessions(agent: &str, store: &Arc<dyn SessionStore>) -> Arc<dyn SessionStore> {
    Arc::new(Scope::new(SESSION_SCOPE).sessions(agent, Arc::clone(store)))
}

/// The error of a valid request on a session that cannot take it now (a prompt turn or a
/// `session/load` runs on it): the request was well formed, so it is no invalid request; it
/// did not run, and may be sent again once the session is free.
pub(crate) fn busy(session_id: &SessionId, why: &str) -> Error {
    Error::new(
        ErrorCode::InternalError.into(),
        format!("The session is busy: {why}"),
    )
    .data(json!({ "reason": "session_busy", "sessionId": session_id }))
}

/// What the server keeps of a session in the agent's store: its mode and the permission
/// answers that hold for the rest of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kept {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    always: BTreeMap<String, bool>,
}

/// Forgets a request of ours when its waiter is gone.
struct Forget<'a>(&'a Pending, RequestId);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(&self.1);
    }
}

/// The error of a request the client can no longer answer.
fn closed() -> Error {
    Error::internal_error().data(json!({ "reason": "incoming_transport_closed" }))
}

/// The writer all tasks share: one line at a time, into a buffer reused from line to line.
struct Writer {
    inner: tokio::sync::Mutex<(Sink, Vec<u8>)>,
    stop: CancellationToken,
}

impl Writer {
    /// Writes one message as a line. A failed write means nobody reads: everything stops.
    async fn send(&self, message: &impl Serialize) -> io::Result<()> {
        let mut inner = self.inner.lock().await;
        let (sink, buf) = &mut *inner;
        buf.clear();
        if let Err(error) = codec::encode(message, buf) {
            log!("a message could not be encoded, not sent: {error}");
            return Err(io::Error::new(io::ErrorKind::InvalidData, error));
        }
        let written = match sink.write_all(buf).await {
            Ok(()) => sink.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = &written {
            if !self.stop.is_cancelled() {
                log!("the client's input closed ({error}): stopping");
            }
            self.stop.cancel();
        }
        written
    }
}

/// Our own requests waiting for the client's answer. Closed (`None`) once the client is gone:
/// nothing can be answered any more.
pub(crate) struct Pending {
    next: AtomicU64,
    waiting: Mutex<Option<HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>>>,
}

impl Default for Pending {
    fn default() -> Self {
        Self {
            next: AtomicU64::new(0),
            waiting: Mutex::new(Some(HashMap::new())),
        }
    }
}

impl Pending {
    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>>>
    {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh id and where its answer will arrive; `None` once the client is gone.
    fn register(&self) -> Option<(RequestId, oneshot::Receiver<Result<Value, Error>>)> {
        let mut waiting = self.waiting();
        let waiting = waiting.as_mut()?;
        let id = RequestId::Str(format!(
            "bidi-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        waiting.insert(id.clone(), tx);
        Some((id, rx))
    }

    fn forget(&self, id: &RequestId) {
        if let Some(waiting) = self.waiting().as_mut() {
            waiting.remove(id);
        }
    }

    /// Hands the client's answer to whoever waits for it; `false` if nobody does.
    fn resolve(&self, id: &RequestId, result: Result<Value, Error>) -> bool {
        let sender = self
            .waiting()
            .as_mut()
            .and_then(|waiting| waiting.remove(id));
        match sender {
            Some(sender) => {
                // The requester may have stopped waiting: the answer is then dropped.
                let _ = sender.send(result);
                true
            }
            None => false,
        }
    }

    /// The client is gone: every request waiting fails, and so does every later one.
    pub(crate) fn fail_all(&self) {
        let waiting = self.waiting().take();
        for (_, sender) in waiting.into_iter().flatten() {
            let _ = sender.send(Err(closed()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reader.

pub(crate) async fn read_loop<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    reader: R,
    max_line_bytes: usize,
    turns: &mut JoinSet<()>,
) -> io::Result<()> {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        while turns.try_join_next().is_some() {}
        let line = tokio::select! {
            biased;
            () = shared.stop.cancelled() => return Ok(()),
            line = read_line(&mut reader, &mut buf, max_line_bytes) => line?,
        };
        let incoming = match line {
            None => return Ok(()),
            Some(Line::TooLarge(len)) => codec::oversized(len, max_line_bytes, &buf),
            Some(Line::Frame) if buf.iter().all(u8::is_ascii_whitespace) => continue,
            Some(Line::Frame) => codec::decode(&buf),
        };
        match incoming {
            Err(refusal) => {
                shared
                    .respond::<Value>(refusal.id, Err(*refusal.error))
                    .await;
            }
            Ok(Incoming::Request { id, method, params }) => {
                dispatch(shared, id, &method, params, turns).await;
            }
            Ok(Incoming::Notification { method, params }) => notify(shared, &method, params),
            Ok(Incoming::Response { id, result }) => {
                if !shared.pending.resolve(&id, result) {
                    log!(
                        "an answer to request {:?}, which is not waiting for one: ignored",
                        id.to_string()
                    );
                }
            }
        }
    }
}

async fn dispatch(
    shared: &Arc<Shared>,
    id: RequestId,
    method: &str,
    params: Value,
    turns: &mut JoinSet<()>,
) {
    let methods = &AGENT_METHOD_NAMES;
    if method == methods.initialize {
        let result = codec::params::<InitializeRequest>(params).map(|_| initialize(shared));
        shared.respond(id, result).await;
    } else if method == methods.authenticate {
        let result = codec::params::<AuthenticateRequest>(params).and_then(|request| {
            Err::<Value, _>(codec::invalid_params(
                "methodId",
                format!(
                    "unknown authentication method `{}`: this agent needs no authentication (authMethods is empty)",
                    cap(&request.method_id.0)
                ),
            ))
        });
        shared.respond(id, result).await;
    } else if method == methods.session_new {
        // Starting its MCP servers takes a while: the reader goes on meanwhile.
        match codec::params::<NewSessionRequest>(params) {
            Ok(request) => {
                let Some(room) = room(shared).await else {
                    return;
                };
                let shared = Arc::clone(shared);
                turns.spawn(async move {
                    let _room = room;
                    let result = tokio::select! {
                        () = shared.stop.cancelled() => return, // Nobody waits for it.
                        result = new_session(&shared, request) => result,
                    };
                    let opened = result.as_ref().ok().map(|new| new.session_id.clone());
                    shared.respond(id, result).await;
                    if let Some(session_id) = opened {
                        shared.announce(&session_id).await;
                    }
                });
            }
            Err(error) => shared.respond::<Value>(id, Err(error)).await,
        }
    } else if method == methods.session_load {
        match codec::params::<LoadSessionRequest>(params) {
            Ok(request) => {
                let Some(room) = room(shared).await else {
                    return;
                };
                let shared = Arc::clone(shared);
                turns.spawn(async move {
                    let _room = room;
                    let session_id = request.session_id.clone();
                    let result = tokio::select! {
                        () = shared.stop.cancelled() => return,
                        result = load_session(&shared, request) => result,
                    };
                    let loaded = result.is_ok();
                    shared.respond(id, result).await;
                    if loaded {
                        shared.announce(&session_id).await;
                    }
                });
            }
            Err(error) => shared.respond::<Value>(id, Err(error)).await,
        }
    } else if method == methods.session_close {
        match codec::params::<CloseSessionRequest>(params) {
            Ok(request) => {
                // Stopping its MCP servers takes a while: the reader goes on meanwhile.
                let Some(room) = room(shared).await else {
                    return;
                };
                let shared = Arc::clone(shared);
                turns.spawn(async move {
                    let _room = room;
                    let result = close_session(&shared, &request.session_id).await;
                    shared.respond(id, result).await;
                });
            }
            Err(error) => shared.respond::<Value>(id, Err(error)).await,
        }
    } else if method == methods.session_set_mode {
        let result = match codec::params::<SetSessionModeRequest>(params) {
            Ok(request) => set_mode(shared, request).await,
            Err(error) => Err(error),
        };
        shared.respond(id, result).await;
    } else if method == methods.session_prompt {
        match codec::params::<PromptRequest>(params).and_then(|request| start(shared, request)) {
            Ok(turn) => {
                turns.spawn(prompt(Arc::clone(shared), id, turn));
            }
            Err(error) => shared.respond::<Value>(id, Err(error)).await,
        }
    } else {
        let error = Error::method_not_found().data(Value::String(cap(method).into_owned()));
        shared.respond::<Value>(id, Err(error)).await;
    }
}

/// Waits for room for one more request task (`session/new`, `session/load`, `session/close`):
/// at most [`MAX_REQUESTS`] run at once, so that a client that does not read its answers
/// makes the reader wait (and stop reading) rather than queue answers without bound. `None`
/// once the client is gone.
async fn room(shared: &Shared) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        () = shared.stop.cancelled() => None,
        permit = Arc::clone(&shared.requests).acquire_owned() => permit.ok(),
    }
}

fn notify(shared: &Shared, method: &str, params: Value) {
    if method != AGENT_METHOD_NAMES.session_cancel {
        return; // Unknown notifications are ignored, as JSON-RPC says.
    }
    match codec::params::<CancelNotification>(params) {
        Ok(cancel) => {
            let sessions = shared.sessions();
            if let Some(token) = sessions
                .get(&cancel.session_id.0)
                .and_then(|slot| slot.running.as_ref())
            {
                token.cancel();
            }
        }
        Err(error) => log!("session/cancel ignored: {:?}", error.message),
    }
}

fn initialize(shared: &Shared) -> InitializeResponse {
    // The only version spoken: the client's if it is 1, else ours, which it may refuse.
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(
                    PromptCapabilities::new()
                        .image(true)
                        .audio(true)
                        .embedded_context(true),
                )
                // Stdio and streamable HTTP MCP servers; rmcp has no client for the old SSE transport.
                .mcp_capabilities(McpCapabilities::new().http(true).sse(false))
                .session_capabilities(
                    SessionCapabilities::new().close(SessionCloseCapabilities::new()),
                ),
        )
        .agent_info(shared.info.clone())
}

/// `cwd` must be absolute.
fn check_session_params(cwd: &std::path::Path) -> Result<(), Error> {
    if !cwd.is_absolute() {
        return Err(codec::invalid_params(
            "cwd",
            format!(
                "`{}` is not an absolute path",
                cap(&cwd.display().to_string())
            ),
        ));
    }
    Ok(())
}

async fn new_session(
    shared: &Shared,
    request: NewSessionRequest,
) -> Result<NewSessionResponse, Error> {
    check_session_params(&request.cwd)?;
    let mut mcp = start_mcp(shared, &request.mcp_servers).await?;
    let id: Arc<str> = Arc::from(uuid::Uuid::new_v4().to_string());
    let created = match &shared.agent {
        Backend::Llm(agent) => Session::create(
            sessions(agent.agent().name(), agent.agent().store()),
            &id,
            LlmSession::default(),
        )
        .await
        .map(drop),
        Backend::Bridged(turns) => turns.create(Arc::clone(&id)).await,
    };
    if let Err(error) = created {
        mcp.close().await;
        return Err(store_failed(&error));
    }
    let mode = shared.rules.default_mode;
    let mut slot = Slot::new(request.cwd, mode);
    slot.mcp = mcp;
    shared.sessions().insert(Arc::clone(&id), slot);
    Ok(NewSessionResponse::new(SessionId::new(id)).modes(shared.modes(mode)))
}

/// Starts the MCP servers the client named for a session.
async fn start_mcp(shared: &Shared, servers: &[McpServer]) -> Result<Servers, Error> {
    Servers::start(
        servers,
        shared.rules.mcp_start_timeout,
        shared.rules.mcp_call_timeout,
    )
    .await
}

async fn load_session(
    shared: &Shared,
    request: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    check_session_params(&request.cwd)?;
    let session_id = request.session_id;
    if session_id.0.len() > MAX_SESSION_ID_BYTES {
        return Err(codec::invalid_params(
            "sessionId",
            format!(
                "a session id is at most {MAX_SESSION_ID_BYTES} bytes long, not {}",
                session_id.0.len()
            ),
        ));
    }
    let id = Arc::clone(&session_id.0);
    // A session open here already stays open, its prompt turns refused until the load is done.
    let open = {
        let mut sessions = shared.sessions();
        match sessions.get_mut(&id) {
            Some(slot) if slot.running.is_some() || slot.loading => {
                return Err(busy(
                    &session_id,
                    "a prompt turn or another load runs on it; wait for its answer",
                ));
            }
            Some(slot) => {
                slot.loading = true;
                true
            }
            None => false,
        }
    };
    let loaded = load(shared, &session_id, request.cwd, &request.mcp_servers, open).await;
    if let Some(slot) = shared.sessions().get_mut(&id) {
        slot.loading = false;
    }
    loaded.map(|mode| LoadSessionResponse::new().modes(shared.modes(mode)))
}

/// Replays session `session_id` and opens it with its MCP servers; the session's mode.
async fn load(
    shared: &Shared,
    session_id: &SessionId,
    cwd: PathBuf,
    servers: &[McpServer],
    open: bool,
) -> Result<usize, Error> {
    let id = Arc::clone(&session_id.0);
    let replay = match &shared.agent {
        Backend::Llm(agent) => {
            let store = sessions(agent.agent().name(), agent.agent().store());
            Session::<LlmSession>::load(store, &id)
                .await
                .map(|session| {
                    session.map(|session| history(&session.state().messages, &shared.rules))
                })
        }
        Backend::Bridged(turns) => turns.replay(Arc::clone(&id)).await,
    };
    let updates = replay
        .map_err(|error| store_failed(&error))?
        .ok_or_else(|| Error::session_not_found(session_id.clone()))?;
    let kept = if open {
        None // This connection's own mode and answers are the latest.
    } else {
        shared
            .kept(&id)
            .await
            .map_err(|error| store_failed(&error))?
    };
    let mut mcp = start_mcp(shared, servers).await?;
    for update in updates {
        if shared.update(session_id, update).await.is_err() {
            mcp.close().await;
            return Err(closed());
        }
    }
    let (mode, mut previous) = {
        let mut sessions = shared.sessions();
        let slot =
            sessions.entry(Arc::clone(&id)).or_insert_with(|| {
                let mut slot = Slot::new(cwd.clone(), shared.rules.default_mode);
                if let Some(kept) = kept {
                    if let Some(mode) = kept.mode.as_deref().and_then(|kept| {
                        shared.rules.modes.iter().position(|mode| mode.id() == kept)
                    }) {
                        slot.mode = mode;
                    }
                    slot.always = kept.always.into_iter().collect();
                }
                slot
            });
        slot.cwd = cwd;
        (slot.mode, std::mem::replace(&mut slot.mcp, mcp))
    };
    previous.close().await;
    Ok(mode)
}

fn store_failed(error: &StoreError) -> Error {
    Error::internal_error().data(format!("the session store failed: {error}"))
}

/// Closes a session on this connection: its running prompt turn is cancelled (it answers
/// `cancelled`), its MCP servers are stopped, and it is forgotten here (not in the store: a
/// `session/load` opens it again).
async fn close_session(
    shared: &Shared,
    session_id: &SessionId,
) -> Result<CloseSessionResponse, Error> {
    let Some(mut slot) = shared.sessions().remove(&session_id.0) else {
        return Err(no_session(session_id));
    };
    if let Some(running) = &slot.running {
        running.cancel();
    }
    slot.mcp.close().await;
    Ok(CloseSessionResponse::new())
}

/// Switches a session's mode: its next prompt turn runs in it.
async fn set_mode(
    shared: &Shared,
    request: SetSessionModeRequest,
) -> Result<SetSessionModeResponse, Error> {
    let Some(mode) = shared
        .rules
        .modes
        .iter()
        .position(|mode| mode.id() == &*request.mode_id.0)
    else {
        let known: Vec<&str> = shared.rules.modes.iter().map(Mode::id).collect();
        return Err(codec::invalid_params(
            "modeId",
            format!(
                "unknown mode `{}`; this agent's modes: {}",
                cap(&request.mode_id.0),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        ));
    };
    {
        let mut sessions = shared.sessions();
        let Some(slot) = sessions.get_mut(&request.session_id.0) else {
            return Err(no_session(&request.session_id));
        };
        slot.mode = mode;
    }
    shared
        .keep(&request.session_id.0)
        .await
        .map_err(|error| store_failed(&error))?;
    let update = SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(request.mode_id));
    if shared.update(&request.session_id, update).await.is_err() {
        return Err(closed());
    }
    Ok(SetSessionModeResponse::new())
}

pub(crate) fn no_session(session_id: &SessionId) -> Error {
    Error::new(
        ErrorCode::ResourceNotFound.into(),
        "no such session on this connection: create it with session/new or open it with session/load",
    )
    .data(json!({ "sessionId": session_id }))
}

/// The conversation as the updates that tell it.
fn history(messages: &[Message], rules: &Rules) -> Vec<SessionUpdate> {
    let mut updates = Vec::new();
    let assistant = |updates: &mut Vec<SessionUpdate>, message: &AssistantMessage| {
        for block in &message.content {
            match block {
                AssistantContent::Text { text } => {
                    updates.push(SessionUpdate::AgentMessageChunk(chunk(text)));
                }
                AssistantContent::Thinking { thinking } => {
                    updates.push(SessionUpdate::AgentThoughtChunk(chunk(thinking)));
                }
                AssistantContent::ToolCall(call) => updates.push(SessionUpdate::ToolCall(
                    ToolCall::new(call.id.clone(), call.name.clone())
                        .kind(rules.kind(&call.name))
                        .raw_input(call.arguments.clone()),
                )),
                _ => {}
            }
        }
    };
    for message in messages {
        match message {
            Message::User(user) => updates.extend(
                content::user_chunks(user)
                    .into_iter()
                    .map(SessionUpdate::UserMessageChunk),
            ),
            Message::Assistant(message) => assistant(&mut updates, message),
            Message::Aborted(aborted) => assistant(&mut updates, &aborted.partial),
            Message::Error(error) => {
                if let Some(partial) = &error.partial {
                    assistant(&mut updates, partial);
                }
            }
            Message::ToolResult(result) => updates.push(tool_done(
                &result.tool_call_id,
                &result.content,
                &result.attachments,
                result.details.clone(),
                result.is_error,
            )),
            _ => {}
        }
    }
    updates
}

pub(crate) fn tool_done(
    id: &str,
    output: &str,
    attachments: &[Attachment],
    details: Option<Value>,
    is_error: bool,
) -> SessionUpdate {
    let status = if is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id.to_owned(),
        ToolCallUpdateFields::new()
            .status(status)
            .content(content::tool_content(output, attachments))
            .raw_output(details.unwrap_or_else(|| Value::String(output.to_owned()))),
    ))
}

/// The code of an error answer, for tests.
#[cfg(test)]
fn code(error: &Error) -> i32 {
    error.code.into()
}

#[cfg(test)]
mod tests {
    use bidi_llm::testing::{Scripted, ScriptedModel};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, DuplexStream};

    use super::*;

    fn agent(model: ScriptedModel) -> LlmAgent {
        LlmAgent::builder("test", model).build()
    }

    struct Client {
        input: DuplexStream,
        output: tokio::io::Lines<BufReader<DuplexStream>>,
    }

    impl Client {
        async fn send(&mut self, line: Value) {
            let mut text = line.to_string();
            text.push('\n');
            self.input.write_all(text.as_bytes()).await.unwrap();
        }

        async fn recv(&mut self) -> Value {
            let line = self.output.next_line().await.unwrap().expect("a line");
            serde_json::from_str(&line).unwrap()
        }
    }

    fn start_server(agent: LlmAgent) -> (Client, tokio::task::JoinHandle<io::Result<()>>) {
        let (client_in, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(Server::new(agent).serve(server_in, server_out));
        let client = Client {
            input: client_in,
            output: BufReader::new(client_out).lines(),
        };
        (client, server)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prompt_streams_chunks_then_ends_the_turn() {
        let model = ScriptedModel::new([Scripted::new().thinking("hmm").text("Hi there")]);
        let (mut client, server) = start_server(agent(model));
        client.send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}})).await;
        let init = client.recv().await;
        assert_eq!(init["result"]["protocolVersion"], 1);
        assert_eq!(init["result"]["agentCapabilities"]["loadSession"], true);
        assert_eq!(init["result"]["agentInfo"]["name"], "test");
        client.send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}})).await;
        let new = client.recv().await;
        let session = new["result"]["sessionId"].as_str().unwrap().to_owned();
        client.send(json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"hello"}]}})).await;
        let mut kinds = Vec::new();
        let mut text = String::new();
        let answer = loop {
            let line = client.recv().await;
            if line.get("id").is_some() {
                break line;
            }
            let update = &line["params"]["update"];
            kinds.push(update["sessionUpdate"].as_str().unwrap().to_owned());
            if update["sessionUpdate"] == "agent_message_chunk" {
                text.push_str(update["content"]["text"].as_str().unwrap());
            }
        };
        assert_eq!(
            answer,
            json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}})
        );
        assert_eq!(text, "Hi there");
        assert!(
            kinds.contains(&"agent_thought_chunk".to_owned()),
            "{kinds:?}"
        );
        drop(client);
        server.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn our_requests_are_answered_and_fail_when_the_client_goes() {
        let (client_in, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let (shared, _stop) = Shared::new(
            Backend::Llm(agent(ScriptedModel::new([]))),
            Implementation::new("t", "0"),
            Rules::default(),
            Box::pin(server_out),
        );
        let mut client = Client {
            input: client_in,
            output: BufReader::new(client_out).lines(),
        };
        let reader = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut turns = JoinSet::new();
                let result = read_loop(&shared, server_in, 1024, &mut turns).await;
                shared.pending.fail_all();
                result
            })
        };
        let first = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.request("x/ask", json!({"q": 1})).await })
        };
        let request = client.recv().await;
        assert_eq!(request["method"], "x/ask");
        let id = request["id"].clone();
        assert!(id.is_string(), "{request}");
        // A stray answer changes nothing; then the real one.
        client
            .send(json!({"jsonrpc":"2.0","id":"nobody","result":{}}))
            .await;
        client
            .send(json!({"jsonrpc":"2.0","id":id,"result":{"a":2}}))
            .await;
        assert_eq!(first.await.unwrap(), Ok(json!({"a": 2})));

        let second = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.request("x/ask", json!({})).await })
        };
        let request = client.recv().await;
        client
            .send(json!({"jsonrpc":"2.0","id":request["id"],"error":{"code":-32601,"message":"Method not found"}}))
            .await;
        let error = second.await.unwrap().unwrap_err();
        assert_eq!(code(&error), -32601);

        let third = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.request("x/ask", json!({})).await })
        };
        let _ = client.recv().await;
        drop(client.input); // EOF
        let error = third.await.unwrap().unwrap_err();
        assert_eq!(code(&error), -32603);
        assert_eq!(
            error.data,
            Some(json!({"reason": "incoming_transport_closed"}))
        );
        reader.await.unwrap().unwrap();
        // And every later request fails at once.
        let error = shared.request("x/ask", json!({})).await.unwrap_err();
        assert_eq!(
            error.data,
            Some(json!({"reason": "incoming_transport_closed"}))
        );
    }

    #[test]
    fn history_replays_messages_as_updates() {
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "let me look"},
                {"type": "toolCall", "id": "c1", "name": "grep", "arguments": {"q": "x"}},
            ]},
            {"role": "toolResult", "toolCallId": "c1", "toolName": "grep", "content": "3 hits", "isError": false},
            {"role": "assistant", "content": [{"type": "text", "text": "found 3"}]},
        ]))
        .unwrap();
        let updates: Vec<Value> = history(&messages, &Rules::default())
            .into_iter()
            .map(|update| serde_json::to_value(update).unwrap())
            .collect();
        let kinds: Vec<&str> = updates
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk"
            ]
        );
        assert_eq!(updates[3]["rawInput"], json!({"q": "x"}));
        assert_eq!(updates[4]["status"], "completed");
        assert_eq!(updates[4]["content"][0]["content"]["text"], "3 hits");
    }
}
