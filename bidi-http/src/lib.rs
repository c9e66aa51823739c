//! Serves every flow of a bidi [`Registry`] over HTTP from one [`axum::Router`]: one request per
//! run on [Genkit's flow wire](https://genkit.dev/docs/deploy-node/) (JSON or SSE), full duplex
//! over WebSocket, and the agent execute endpoints of [`LlmAgent`]s (SSE of agent events,
//! remote tools the client runs, sessions shared by every server process on one store); and
//! every agent protocol, each a crate of its own (AG-UI, the AI SDK, A2A, Genkit, MCP, the Dev
//! UI), beside them.
//!
//! ```no_run
//! use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
//! use bidi_flow::{BidiFlow, Registry};
//! use bidi_http::Server;
//!
//! async fn shout(_: ActionContext, _: (), mut lines: Inbound<String>, out: Outbound<String>)
//!     -> Result<u32, BoxError>
//! {
//!     let mut n = 0;
//!     while let Some(line) = lines.recv().await {
//!         out.send(line.to_uppercase()).await?;
//!         out.end_turn().await?;
//!         n += 1;
//!     }
//!     Ok(n)
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let registry = Registry::new();
//! registry.register(BidiFlow::new("shout", shout)).expect("a new key");
//! // Binds 127.0.0.1:8080; `.addr(..)` picks another address.
//! Server::new(registry).bind().await?.serve().await
//! # }
//! ```
//!
//! ```sh
//! curl -s localhost:8080/bidi-flow/shout -d '{"data":"hi"}'
//! # {"result":1}
//! curl -sN localhost:8080/bidi-flow/shout?stream=true -d '{"data":"hi"}'
//! # data: {"message":"HI"}
//! #
//! # data: {"result":1}
//! ```
//!
//! # Routes
//!
//! | route | what it does |
//! |---|---|
//! | `GET /actions` | the registry's action descriptors: key, type, schemas, metadata |
//! | `POST /{type}/{name}` | runs the action on one input (Genkit's flow wire) |
//! | `GET /{type}/{name}` with a WebSocket upgrade | one socket, one connection, full duplex |
//! | `POST /agent/{name}/execute` | one execution of an `LlmAgent` added with [`Server::agent`]: SSE of its events |
//! | `GET /agent/{name}/session/{id}` | that agent's session: status, messages, pending tool calls |
//! | `DELETE /agent/{name}/session/{id}` | deletes it: 204; 409 while an answer runs on it |
//! | `GET /agent/{name}/sessions` | the ids of the caller's sessions of that agent, sorted: `{"sessions": [..]}` |
//!
//! Serve it with [`Server::bind`] (which sets the timeouts below), or mount the router where you
//! like with [`Router::nest`](axum::Router::nest) or [`Router::merge`](axum::Router::merge);
//! the paths above are relative to it. [`Server::routes`] adds routes of your own and
//! [`Server::layer`] any tower layer, so that `bind` still serves them; [`Server::cors`] lets
//! pages of other origins call the server from a browser. The crate re-exports [`axum`].
//!
//! ## Protocols
//!
//! Each agent protocol is a crate of its own, served beside these routes with
//! [`Server::protocol`]: a program compiles the protocols it serves.
//!
//! | crate | protocol | routes |
//! |---|---|---|
//! | `bidi-agui` | `AgUi`: [AG-UI](https://docs.ag-ui.com) 1.0 | `POST /agent/{name}/ag-ui`, `GET /agent/{name}/ag-ui/{threadId}` |
//! | `bidi-ai-sdk` | `Chat`: the Vercel AI SDK's UI message stream (`useChat`), resumable | `POST /agent/{name}/chat`, `GET /agent/{name}/chat/{id}`, `GET /agent/{name}/chat/{id}/stream` |
//! | `bidi-a2a` | `A2a`: A2A 1.0 over JSON-RPC, with agent cards | `POST /agent/{name}/a2a`, `GET /agent/{name}/a2a/.well-known/agent-card.json` |
//! | `bidi-genkit` | `AgentWire`: Genkit's agent wire (`remoteAgent`); `Reflection`: Genkit's reflection API, on a listener of its own | `POST /agent/{name}/genkit`, `.../genkit/getSnapshot`, `.../genkit/abort` |
//! | `bidi-mcp` | `McpServer`: the flows and agents as MCP tools, over streamable HTTP (and stdio) | `POST`/`GET`/`DELETE /mcp` |
//! | `bidi-devui` | `DevUi`: a page to run actions, chat with agents, watch traces, browse sessions | `GET /dev/`, `/dev/api/..` |
//!
//! ```no_run
//! use bidi_flow::Registry;
//! use bidi_http::axum::{Router, routing::get};
//! use bidi_http::{Host, Protocol, Server};
//!
//! /// A protocol of your own: `GET /hello` answers how many actions the server serves.
//! struct Hello;
//!
//! impl Protocol for Hello {
//!     fn routes(&self, host: &Host) -> Router {
//!         let host = host.clone();
//!         let count = move || async move { host.registry().actions().len().to_string() };
//!         Router::new().route("/hello", get(count))
//!     }
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! Server::new(Registry::new()).protocol(Hello).bind().await?.serve().await
//! # }
//! ```
//!
//! A protocol's routes run under the server's auth, limits, layers and CORS, and build with
//! this crate's kit: [`codec::Failure`] (refusals), [`sse`] (the SSE writer), [`body`]
//! (writes as a response body), [`extract`], [`agent`] (executions of the server's agents),
//! [`tee`] (answers read again), [`turns`].
//!
//! ## Genkit's flow wire
//!
//! `POST /{type}/{name}` with `{"data": input, "init": init}` sends the one input, closes the
//! input, and answers `{"result": output}`. Both fields may be left out: they are then `null`,
//! which an action whose input (or init) is `()` or an `Option` takes, and any other refuses
//! with 400. An agent thus runs one turn per request; its `init` names the session
//! (`{"sessionId": ".."}`) or carries a new one's state. With `Accept: text/event-stream` or
//! `?stream=true` the answer is a stream of SSE records, one per chunk, then the output, or the
//! error that ended the run, as an `error:` record whose `details` is text (the code, and
//! where in the request, when known):
//!
//! ```text
//! data: {"message":chunk}
//!
//! data: {"result":output}
//!
//! error: {"error":{"status":"INTERNAL","message":"..","details":"connection_failed"}}
//! ```
//!
//! Genkit's JavaScript client (`runFlow` / `streamFlow` from `genkit/beta/client`) speaks it.
//!
//! ## WebSocket
//!
//! `GET /{type}/{name}` with an upgrade opens one connection per socket. Frames are JSON text,
//! one object each: [`bidi_flow::frame`]'s socket wire. The socket's task runs the action as
//! well as its reads and writes, so a turn crosses no task boundary. From the client:
//!
//! | frame | what it does |
//! |---|---|
//! | `{"type":"init","init":..}` | opens the connection (`init` defaults to `null`); the first frame |
//! | `{"type":"send","input":..}` | sends one input |
//! | `{"type":"close"}` | no more input: the action finishes and its output follows |
//! | `{"type":"cancel","reason":".."}` | cancels the connection (`reason` optional) |
//!
//! From the server:
//!
//! | frame | what it says |
//! |---|---|
//! | `{"type":"chunk","chunk":..}` | one chunk of the current turn |
//! | `{"type":"turn_end"}` | the action ended the turn |
//! | `{"type":"output","output":..}` | the output: the last frame, then the server closes the socket |
//! | `{"type":"error","code":"..","message":"..","path":".."}` | a refused frame; the socket goes on. With code `connection_failed` (the action failed), `cancelled` (a `cancel`, its `message` the reason) or `idle_timeout`, the last frame |
//!
//! As a JSON Schema, the client's frames are:
//!
//! ```json
//! {
//!   "$schema": "https://json-schema.org/draft/2020-12/schema",
//!   "oneOf": [
//!     {"type": "object", "properties": {"type": {"const": "init"}, "init": {}},
//!      "required": ["type"], "additionalProperties": false},
//!     {"type": "object", "properties": {"type": {"const": "send"}, "input": {}},
//!      "required": ["type"], "additionalProperties": false},
//!     {"type": "object", "properties": {"type": {"const": "close"}},
//!      "required": ["type"], "additionalProperties": false},
//!     {"type": "object", "properties": {"type": {"const": "cancel"}, "reason": {"type": "string"}},
//!      "required": ["type"], "additionalProperties": false}
//!   ]
//! }
//! ```
//!
//! and the server's:
//!
//! ```json
//! {
//!   "$schema": "https://json-schema.org/draft/2020-12/schema",
//!   "oneOf": [
//!     {"type": "object", "properties": {"type": {"const": "chunk"}, "chunk": {}},
//!      "required": ["type", "chunk"]},
//!     {"type": "object", "properties": {"type": {"const": "turn_end"}}, "required": ["type"]},
//!     {"type": "object", "properties": {"type": {"const": "output"}, "output": {}},
//!      "required": ["type", "output"]},
//!     {"type": "object", "properties": {
//!        "type": {"const": "error"},
//!        "code": {"enum": ["frame_too_large", "malformed_frame", "unknown_frame_type",
//!                          "duplicate_connection", "unknown_connection", "not_found",
//!                          "invalid_init", "invalid_input", "send_failed",
//!                          "connection_failed", "cancelled", "idle_timeout"]},
//!        "message": {"type": "string"},
//!        "path": {"type": "string", "description": "a JSON Pointer into the refused value"},
//!        "suggestion": {"type": "string", "description": "a registered key like the one asked for"}},
//!      "required": ["type", "code", "message"]}
//!   ]
//! }
//! ```
//!
//! Backpressure holds end to end: the server reads the next frame only once the action has
//! taken the last input (or it fits in the connection's window of 1 input), and takes the next
//! chunk only once the last one is written to the socket. Frames sent ahead wait in order,
//! never dropped; a `cancel` is seen even while an input waits. A socket that closes or fails
//! cancels its connection.
//!
//! ## Agent execute endpoints
//!
//! For each `LlmAgent` given to [`Server::agent`], `POST /agent/{name}/execute` runs one
//! execution:
//!
//! ```json
//! {"sessionId": "s-1", "input": {"role": "user", "content": "Book Oslo"},
//!  "context": {"systemPrompt": "..", "messages": [],
//!              "tools": [{"name": "book", "description": "..", "parameters": {"type": "object"}}]}}
//! ```
//!
//! `input` is a user message, the results of the pending tool calls, or the decisions on the
//! calls waiting for approval (with the results of any remote calls pending beside them):
//!
//! ```json
//! {"sessionId": "s-1", "input": {"approvals": [{"toolCallId": "call-1", "approved": true},
//!                                             {"toolCallId": "call-2", "approved": false,
//!                                              "reason": "not this file"}],
//!                                "message": {"role": "user", "content": ".."}}}
//! ```
//!
//! Every waiting call needs a decision (400 `invalid_input` otherwise, the session unchanged);
//! an approved call runs, a denied one answers the model with the denial (and its `reason`);
//! `results` answers remote calls pending beside them, and `message`, optional, is what the user
//! says next, which the model reads after them ([`Resume`](bidi_llm::Resume)).
//!
//! `context` (and `options`:
//! `temperature`, `maxTokens`) are read when the request creates the session: a request without
//! `sessionId` creates one with a fresh id, one whose `sessionId` names no session yet creates
//! that one, and either needs a `context` (400 `context_required` without one). Tools in
//! `context.tools` are the session's **remote tools**: when the model calls one, the execution
//! stops with `awaiting_tool_execution`, and the next request's tool results resume it, on any
//! server process sharing the store.
//!
//! The answer is SSE, one event per [`AgentEvent`](bidi_llm::AgentEvent) named by its kind
//! (`event: text_delta`), with the session's id in the `X-Session-Id` header; the last event is
//! `execute_complete` with `status`, `pendingToolCalls` (the remote calls the client runs;
//! empty unless it awaits them) and, when calls of the agent's own tools wait for approval,
//! `pendingApprovals` (those calls, also in the `awaiting_approval` event before it): `status`
//! is `awaiting_tool_execution` while either waits. A session another execution runs
//! (in this process or another) answers **409** `session_running` at once instead of waiting: an
//! HTTP request that waits on another execution of unknown length would hold a connection and a
//! client that can retry knows better when. Results that do not answer the pending calls are 400
//! `invalid_input`. With `"detach": true` the answer is **202** at once,
//! `{"sessionId", "snapshotId"}` (the running turn's snapshot, `pending` until it ends), and
//! the execution runs to its end without a client; read the session, or abort the snapshot
//! through the store, from any process sharing it.
//!
//! ## Approvals, wire by wire
//!
//! A call of a tool that needs approval ([`Tool::needs_approval`](bidi_llm::Tool::needs_approval))
//! stops the turn before the tool runs, and the session waits for a decision on every such
//! call; the decision may come over any wire, from any process sharing the store. Each wire
//! says what waits, and takes the answer, in its own terms:
//!
//! | wire | what says a call waits | how the client answers |
//! |---|---|---|
//! | execute | `awaiting_approval {toolCalls}`, then `execute_complete` with `status: awaiting_tool_execution` and `pendingApprovals`; the session (`GET /agent/{name}/session/{id}`) names them as `pendingApprovals` too | `input: {"approvals": [{toolCallId, approved, reason?}]}` |
//! | UI message stream | a `tool-approval-request` part; the answer finishes | the next request's `approval-responded` part |
//! | AG-UI | `RUN_FINISHED` with outcome `interrupt`, one interrupt (`tool_approval`) per call | the next run's `resume` entries: `resolved` approves, `cancelled` denies |
//! | Genkit's agent wire | `turnEnd` and the output with `finishReason: "interrupted"`, the calls in the message | `resume.restart`: the approved calls |
//! | A2A | the task `TASK_STATE_INPUT_REQUIRED`, the status data part's `awaitingApproval` | a message on the task with the data part `{"approvals": [..]}`: the same task runs on (text alone denies the calls, as the user moving on) |
//! | WebSocket, Genkit's flow wire | the agent's events as chunks (`awaiting_approval`) | an input `{"approvals": [..]}` |
//! | ACP (bidi-acp) | `session/request_permission` to the editor | the editor's choice (once or always) |
//! | MCP (bidi-mcp) | an `elicitation/create` per call, `{approved, reason?}`, inside the tool call; without the client's elicitation capability, the result's text and its `pendingApprovals` | the elicitation's answer (`accept` with `approved`; `decline` and `cancel` deny), the call going on; or a next call with `sessionId` and `approvals: [{toolCallId, approved, reason?}]` |
//!
//! # Deploying several processes
//!
//! Give the agents a shared store (`bidi_session::PostgresStore`, feature `postgres`) and any number
//! of server processes behind a load balancer serve the same sessions: no sticky routing is
//! needed. Every execution takes a lease on its session by compare-and-swap, so two processes
//! never run one session at once (the second request gets 409), and a session whose process died
//! mid-execution is taken over once its lease expires. WebSocket and streaming requests hold
//! their connection for their whole run: give the balancer an idle timeout above this server's.
//!
//! # Limits and safety
//!
//! Every bound below holds per peer, whatever it sends or fails to read; the timeouts apply
//! when the server is served with [`Bound::serve`] (mounting [`Server::router`] yourself, set
//! your own).
//!
//! **Per connection**
//!
//! - A client has [`Server::header_timeout`] (15 s) to send a request's head, and as long for
//!   the next request on a connection it keeps alive; then its connection is closed, so that
//!   silent or trickling clients do not hold connections and file descriptors. A head is at
//!   most hyper's read buffer (about 400 KiB).
//! - Request bodies over [`Server::max_body_bytes`] (1 MiB) are refused with 413, and bodies
//!   that do not arrive whole within [`Server::body_timeout`] (30 s) with 408. A body is read
//!   whole before its route runs: at most 1 MiB per request in memory.
//! - A connection on which nothing moves for [`Server::idle_timeout`] (5 minutes) is cancelled:
//!   504 before an answer started, an `error` record or frame with code `idle_timeout` after.
//!   A write the client does not take counts as nothing moving: a client that stops reading
//!   its answer has its execution cancelled (and its session freed) after the idle timeout,
//!   and its connection closed one second later, with what was buffered for it.
//! - An answer runs at most one write (16 KiB) ahead of its client, plus what hyper buffers for
//!   the socket (up to about 400 KiB) and the kernel's socket buffers: a client that reads
//!   slowly slows its execution down instead of piling its answer up in the server.
//! - A WebSocket connection takes one input ahead of its action, and reads at most 16 frames,
//!   and at most [`Server::max_message_bytes`], ahead of an input its action has not taken
//!   (or a write its client has not taken).
//!   Messages over [`Server::max_message_bytes`] (1 MiB) are refused with a `frame_too_large`
//!   frame and the socket goes on; one over twice that is not read at all: the socket closes
//!   with 1009 (message too big). A frame that breaks the protocol closes the socket with
//!   1002, text that is not UTF-8 with 1007. Its writes are bounded as an answer's are: a
//!   client that sends 512 KiB messages and reads nothing holds about 3.5 MB of the server
//!   until the idle timeout closes its socket.
//!
//! **Per execution**
//!
//! - A client that goes away (a closed socket, an aborted request) cancels its connection with
//!   [`PeerGone::Disconnected`](bidi_core::PeerGone) as the cause (an idle
//!   one with `PeerGone::Idle`); nothing of it keeps running (but a chat's answer, and a
//!   Genkit agent turn the client detached). What it leaves behind is its session, as the agent saved
//!   it (with the part of the answer given so far).
//! - A turn that runs without its client (detached, or through a tee) is taken over by another
//!   process serving its agent on the same store, should this one die in it: the server runs
//!   [`LlmAgent::supervise`](bidi_llm::LlmAgent::supervise) for each agent that keeps
//!   sessions (see `bidi_llm::takeover`).
//! - A chat's answer (`POST /agent/{name}/chat`) is kept for resuming clients while it
//!   streams: up to 8 MiB an answer, and up to 64 MiB for all the answers a server streams at
//!   once (an answer past either streams on unkept; new resuming clients are refused with
//!   410). It is dropped when the answer ends. This is the one part of an execution's memory
//!   that grows with its answer.
//!
//! **Per reader**
//!
//! - A chat's answer read by several clients goes at the pace of the fastest, one write ahead
//!   of it; a reader 64 writes (at most 1 MiB) behind it is dropped rather than hold the others
//!   back, and a resuming client that attaches gets a copy of what was kept (up to 8 MiB).
//!
//! **Per process**
//!
//! - `bidi-http` runs no blocking work and starts no thread of its own: a server's threads are
//!   its runtime's (the workers, and tokio's blocking pool, which grows up to
//!   `max_blocking_threads`, 512 by default, each with its own stack, if something calls
//!   `spawn_blocking` that many times at once). `bidi_session::SqliteStore` runs its calls one
//!   at a time, in place; 1,000 executions at once run on a dozen threads.
//! - Memory an attack's burst of executions used is freed when they end, but the allocator
//!   (glibc's malloc) keeps much of it for reuse instead of returning it to the system: the
//!   resident size after a burst stays near its peak, and levels off over later bursts of the
//!   same size, beyond what the session store keeps (`bidi_session::MemoryStore` keeps every
//!   session in memory, a cancelled one with the part of its answer given). With 1,000 chat
//!   clients vanishing mid-answer at once, a server keeps about 0.2–0.3 MB per execution after
//!   the first burst, and about 0.1 MB more per later burst with the `MemoryStore`.
//!
//! **Identities and sessions**
//!
//! - Session ids are at most 256 bytes, with no control characters (400 `invalid_init`
//!   otherwise): they travel in the `X-Session-Id` header and in logs.
//! - [`Server::auth`] turns each request into an [`Identity`] or refuses it with 401. Actions read
//!   the identity from their context (`ctx.extensions().get::<Identity>()`), and agents keep each
//!   identity's sessions apart: another identity's session ids name nothing (404). Requests
//!   without an identity share the anonymous scope, the empty string. Agents sharing a store
//!   keep their sessions apart too: the same id under two agents is two sessions, and a stored
//!   state an agent cannot read (from before a change to its state type) is 409
//!   `session_incompatible`, never overwritten.
//!
//! # Tokio
//!
//! The server runs on a tokio runtime with its I/O and time drivers (`#[tokio::main]`).
//!
//! # Feature flags
//!
//! The agent endpoints, and the kit the agent protocol crates build on, are the feature
//! `agents`, on by default; without it `bidi-http` serves flows (the flow wire with SSE, and
//! WebSocket) and compiles no agent loop.
//!
#![doc = document_features::document_features!()]
//!
//! `bidi-http` depends on `bidi-session` without its default feature `sqlite`: a program that keeps
//! sessions in `bidi_session::SqliteStore` depends on `bidi-session` itself (default features), and
//! one that does not compiles no SQLite.
//!
//! [`Registry`]: bidi_flow::Registry
//! [`LlmAgent`]: bidi_llm::LlmAgent

#![doc(test(attr(deny(warnings))))]

#[cfg(feature = "agents")]
pub mod agent;
mod auth;
pub mod body;
mod caller;
pub mod codec;
mod cors;
pub mod extract;
pub mod flow;
mod host;
pub mod serve;
mod server;
pub mod sse;
#[cfg(feature = "agents")]
pub mod tee;
/// Times on the wire (the home is `bidi_flow::time`, beside the other wire helpers).
pub use bidi_flow::time;
#[cfg(feature = "traces")]
pub mod traces;
#[cfg(feature = "agents")]
pub mod turns;
#[cfg(feature = "ws")]
mod ws;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The axum this crate serves with, for the layers and routes you add to a [`Server`] or its
/// [`router`](Server::router).
pub use axum;

pub use auth::{Identity, Unauthorized};
pub use caller::caller_context;
pub use cors::{Cors, InvalidOrigin};
pub use host::{Beside, BoxFuture, Host, Protocol};
pub use serve::Bound;
pub use server::Server;

/// What a server takes from one peer at most: see the [`Server`] options that set each.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Limits {
    /// [`Server::max_body_bytes`].
    pub max_body_bytes: usize,
    /// [`Server::max_message_bytes`].
    pub max_message_bytes: usize,
    /// [`Server::idle_timeout`].
    pub idle_timeout: Duration,
    /// [`Server::header_timeout`].
    pub header_timeout: Duration,
    /// [`Server::body_timeout`].
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 1 << 20,
            max_message_bytes: bidi_flow::frame::MAX_FRAME_BYTES,
            idle_timeout: Duration::from_secs(300),
            header_timeout: Duration::from_secs(15),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The address [`Server::bind`] binds unless told otherwise: `127.0.0.1:8080`.
pub const DEFAULT_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);

/// How many inputs a WebSocket connection takes ahead of its action: one. Inputs sent ahead
/// wait in the socket reader's read-ahead, which is bounded in bytes as well as in frames, so
/// a client sending large inputs an action does not take holds about one limit's worth of
/// them, not a window of eight.
#[cfg(feature = "ws")]
pub(crate) const INPUT_WINDOW: usize = 1;

/// The scope of a request's agent sessions: its identity's, or the anonymous scope (never the
/// bare store, where a crafted id could name a scoped session).
pub fn scope(identity: Option<&Identity>) -> bidi_agent::Scope {
    static ANONYMOUS: std::sync::LazyLock<bidi_agent::Scope> =
        std::sync::LazyLock::new(|| bidi_agent::Scope::new(""));
    match identity {
        Some(identity) => bidi_agent::Scope::new(identity.id()),
        // Made once: a request without an identity allocates no scope of its own.
        None => ANONYMOUS.clone(),
    }
}
