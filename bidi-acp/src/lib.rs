//! Serve a bidi [`LlmAgent`](bidi_llm::LlmAgent), or an agent of your own, over the
//! [Agent Client Protocol](https://agentclientprotocol.com) (ACP): JSON-RPC 2.0 as
//! newline-delimited JSON on the agent's stdin and stdout, the way code editors (Zed, JetBrains
//! IDEs, Neovim plugins, command-line clients) talk to agents.
//!
//! An ACP prompt turn is one execution of the agent: its text deltas stream as
//! `agent_message_chunk` updates, its thinking as `agent_thought_chunk`, the tools it runs as
//! `tool_call` and `tool_call_update`, and the turn is answered with its real stop reason.
//! Sessions live in the agent's session store, so `session/load` replays a conversation after
//! the agent process restarted (keep them in SQLite, say). They are kept in a scope of their
//! own, [`Scope::new("acp")`](bidi_agent::Scope): a session id a client names is a session of
//! that scope only, so no id reaches the agent's other sessions or the server's own records,
//! whatever it spells. [`Server::scope`] puts them in another front end's scope instead, to
//! share them: an editor then loads and goes on with a conversation a web client started.
//!
//! A session keeps its agent connection from one prompt turn to the next: the agent reads the
//! session from the store when the session's first prompt comes, and each prompt is one more
//! input on that connection, so a prompt costs the same on a session's hundredth turn as on its
//! first. The next prompt opens another connection after a `session/set_mode` (a mode is the
//! connection's policy), a `session/load`, a cancelled turn (cancelling the execution cancels
//! its connection), a connection that failed, or when the session was left out of the
//! [`Server::max_idle_agent_connections`] prompted last; `session/close` and the end of the
//! client's connection stop it.
//!
//! ```no_run
//! use bidi_acp::Server;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let model = ScriptedModel::new([Scripted::new().text("Hello from bidi!")]);
//! let agent = LlmAgent::builder("assistant", model).build();
//! Server::new(agent).serve_stdio().await
//! # }
//! ```
//!
//! A test drives the same server through any reader and writer:
//!
//! ```
//! use bidi_acp::Server;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let agent = LlmAgent::builder("assistant", ScriptedModel::new([Scripted::new().text("Hi")])).build();
//! let (mut client, server_in) = tokio::io::duplex(4096);
//! let (server_out, client_out) = tokio::io::duplex(4096);
//! let server = tokio::spawn(Server::new(agent).serve(server_in, server_out));
//!
//! client
//!     .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n")
//!     .await?;
//! let mut lines = BufReader::new(client_out).lines();
//! let answer: serde_json::Value = serde_json::from_str(&lines.next_line().await?.unwrap_or_default())?;
//! assert_eq!(answer["result"]["protocolVersion"], 1);
//! assert_eq!(answer["result"]["agentCapabilities"]["loadSession"], true);
//!
//! drop(client); // the end of input ends the server
//! server.await??;
//! # Ok(())
//! # }
//! ```
//!
//! # What is served
//!
//! | method | what it does |
//! |---|---|
//! | `initialize` | protocol version 1; capabilities: `loadSession`, prompts with images, audio and embedded resources, MCP servers over stdio and HTTP (feature `mcp`), `sessionCapabilities` `close`, `list`, `delete`, `resume` (and `status`, `title`, `fork` with their features; `fork` for an `LlmAgent` only) |
//! | `authenticate` | refused with invalid params: the agent needs no authentication (`authMethods` is empty) |
//! | `session/new` | a new session in the agent's store, with its [MCP servers](#mcp-servers) started; `cwd` must be absolute; answers the modes, if any, and the `model` option when the agent offers models to choose from ([`model_choice`](bidi_llm::LlmAgentBuilder::model_choice)) |
//! | `session/load` | starts its MCP servers, replays the stored conversation as `session/update`s, then answers (with the session's mode) |
//! | `session/prompt` | one agent turn; answers `end_turn`, `max_tokens`, `max_turn_requests`, `refusal` or `cancelled` |
//! | `session/cancel` | the running turn stops and answers `cancelled`, once; the session stays usable |
//! | `session/close` | the session's running turn is cancelled (it answers `cancelled`), its agent connection and MCP servers stopped, and it is forgotten on this connection (a `session/load` opens it again) |
//! | `session/set_mode` | switches the session's [`Mode`] from its next prompt turn on; sends `current_mode_update` |
//! | `session/list` | the stored sessions of the clients' scope, whichever connection or process made them, a page of 100 at a time (`cwd` filters them): each with its working directory (its own here, or the server's record of it, else the server's working directory), its title and its latest update |
//! | `session/resume` | opens a stored session as `session/load` does, without replaying its conversation |
//! | `session/delete` | closes the session here if it is open, then removes it and the server's record of it from the store |
//! | `session/status` | (feature `unstable_session_status`) `open` on this connection, or `saved` in the store |
//! | `session/set_title` | (feature `unstable_session_set_title`) keeps the session's title (one line, trimmed, at most 200 characters; listed by `session/list`) and sends `session_info_update` where it is open |
//! | `session/set_config_option` | `model`: the model the session's turns call from now on, whichever front end runs them (kept in the session); answers every option, and sends `config_option_update` where it is open; another option or value is `-32602` |
//! | `session/fork` | (feature `unstable_session_fork`) a new session, open here, with the source's conversation so far, its mode and "always" answers: a branch in the store whose first snapshot names the source's as its parent (Genkit's `getSnapshot` reads it); the two go their own ways |
//!
//! And the server sends:
//!
//! | method / update | when |
//! |---|---|
//! | `available_commands_update` | a session opened, and the server has [`Command`]s |
//! | `agent_message_chunk`, `agent_thought_chunk` | the model's text and thinking, as they stream |
//! | `tool_call` | a tool starts: its kind (from its name, or [`Server::tool_kind`]), the files its arguments name as `locations`, `rawInput` |
//! | `tool_call_update` | its output so far as it streams, then `completed` or `failed` with its output (and the images, audio and resources its result carries) and `rawOutput` |
//! | `plan` | the agent calls [`plan_tool`] |
//! | `session/request_permission` | a tool that [`Server::require_permission`] names (or an editor tool that changes something) is about to run |
//! | `fs/read_text_file`, `fs/write_text_file`, `terminal/*` | the agent runs one of [the editor's tools](#the-editors-files-and-terminals) |
//!
//! # MCP servers
//!
//! With the feature `mcp` (on by default), the MCP servers a client lists in `session/new` or
//! `session/load` are started or connected to for that session:
//!
//! - stdio servers (`command`, `args`, `env`) are started each in a process group of its own,
//!   with its stderr on the agent's;
//! - HTTP servers (`url`, `headers`) are connected to with MCP's streamable HTTP transport,
//!   their `headers` (`Authorization`, say) sent with every request. The URL must be `http` or
//!   `https` (https needs a TLS backend enabled on `reqwest` by the program, as `bidi-llm`'s
//!   `native-tls` feature does); a malformed URL or header is refused with invalid params
//!   naming it (`mcpServers[0].url`), and header values are never quoted in errors.
//!
//! Their tools are offered to the session's prompt turns next to the
//! agent's own, named `{server}__{tool}` (an agent tool of the same name hides one), and run
//! like them: `tool_call` and `tool_call_update`s, permission when
//! [`Server::require_permission`] names them (`fs__*`, say), a mode's tool list. A call's
//! text content is the tool's output, and an `isError` result fails it; a call that takes
//! longer than `Server::mcp_call_timeout` fails. A server that fails to start, connect or
//! list its tools within `Server::mcp_start_timeout` fails the `session/new` or
//! `session/load` with invalid params naming it (`mcpServers[1]`), since it is the client's
//! configuration, and its URL with the user name, password and query values shown as `***`.
//! `initialize` advertises `mcpCapabilities.http`;
//! SSE servers (the deprecated HTTP+SSE transport) are refused with invalid params naming
//! `mcpServers[i]`. A session's servers are stopped (their HTTP sessions ended) when a
//! `session/load` replaces them, when the session is closed (`session/close`) and when the
//! client's input ends, and the server waits for them to exit.
//!
//! Without the feature `mcp` (`default-features = false`), no MCP client is built (neither
//! rmcp nor reqwest): `initialize` advertises no MCP transport (`mcpCapabilities` `http` and
//! `sse` false), and a `session/new` or `session/load` that names any MCP server (stdio ones
//! too) is refused with invalid params (`-32602`) naming `mcpServers`, saying the agent was
//! built without MCP support, rather than served without its tools. An empty `mcpServers` is
//! served as with the feature.
//!
//! # The editor's files and terminals
//!
//! When the client advertises them in `initialize` (`clientCapabilities.fs.readTextFile`,
//! `fs.writeTextFile`, `terminal`), an [`LlmAgent`](bidi_llm::LlmAgent)'s prompt turns are
//! offered tools that work through the editor, so that the user sees what the agent does
//! where they work:
//!
//! | tool | arguments | what it does |
//! |---|---|---|
//! | `read_text_file` | `path`, `line` (from 1), `limit` | `fs/read_text_file`: the file as the editor has it, unsaved changes included |
//! | `write_text_file` | `path`, `content` | `fs/write_text_file`: the whole file's new text; the call shows the edit as a `diff` (the old text read through the editor first, when it offers reads) |
//! | `run_command` | `command`, `args`, `cwd`, `timeout_seconds` | `terminal/create` (no shell: `sh -c` for a pipeline), the terminal embedded in the call while it runs, `terminal/wait_for_exit`, `terminal/output` (the last 64 KiB), `terminal/release`; the model reads the output and the exit status, and a command that does not exit with 0 fails |
//!
//! Relative paths are against the session's `cwd`. They run like the agent's own tools: a
//! `tool_call` with their kind (`read`, `edit`, `execute`) and the file as its `location`, the
//! mode's tool list, and permissions: `write_text_file` and `run_command` need the user's
//! permission unless the mode allows or refuses without asking, so a rejected write or
//! command never reaches the editor. A command that runs longer than its `timeout_seconds`
//! (300 by default, at most 3,600) is killed (`terminal/kill`); a turn cancelled while one runs
//! kills it and releases its terminal. An error the editor answers is the tool's error
//! result, which the model reads. An agent tool of the same name hides the editor's, and
//! [`Server::editor_tools`]`(false)` offers none. Agents served through a [`Bridge`] are not
//! offered them.
//!
//! A tool of your own can show content in its tool call the same way: a
//! [`ToolEvent::Data`](bidi_llm::ToolEvent::Data) named `acp.content` whose data is a
//! [`ToolCallContent`](schema::ToolCallContent) (a `diff`, a `terminal`) is kept before the
//! call's output in every update of the call.
//!
//! # Content
//!
//! A prompt's text blocks, and its resource links as Markdown links, make the text of the user
//! message the agent reads, one block a line; its images, audio and embedded resources are the
//! message's [attachments](bidi_llm::Attachment), which the model reads with the text. The
//! attachments a tool's result carries are shown in its `tool_call_update` after its text, and
//! `session/load` replays both as the blocks they came as.
//!
//! Not supported: `session/resume`, `fork` and `list`; `$/cancel_request`.
//!
//! # Permissions and modes
//!
//! ```
//! use bidi_acp::{Mode, Permission, Server};
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::ScriptedModel;
//!
//! let agent = LlmAgent::builder("coder", ScriptedModel::new([])).build();
//! let server = Server::new(agent)
//!     .require_permission("write*")
//!     .require_permission("run_command")
//!     .mode(Mode::new("ask", "Ask").description("Asks before it changes anything"))
//!     .mode(
//!         Mode::new("read-only", "Read only")
//!             .system_prompt("Never change anything.")
//!             .tools(["read*", "list*", "search*"])
//!             .permission(Permission::Reject),
//!     )
//!     .mode(Mode::new("auto", "Auto").permission(Permission::Allow));
//! # drop(server);
//! ```
//!
//! - A tool that needs permission never runs without an `allow_*` answer. Before it runs the
//!   client is asked with `session/request_permission` (the call shown as a `tool_call` first),
//!   while the server goes on reading. A rejection, a dismissed dialog (`cancelled`), an
//!   option that was not offered, or a `session/cancel` while waiting: the tool does not run,
//!   its `tool_call_update` is `failed` with the reason, and the model reads the reason as the
//!   tool's error result. `allow_always` and `reject_always` hold for that tool for the rest of
//!   the session.
//! - A mode puts its system prompt before the session's, offers the model only its tools (a
//!   call of another one is refused), and may allow or refuse the tools that need permission
//!   without asking. A session starts in the first mode (or [`Server::default_mode`]).
//! - A session's mode and its `allow_always` / `reject_always` answers are kept in the agent's
//!   store, in a scope of the server's own next to the agent's sessions: `session/load` in a
//!   later process finds them.
//! - Permissions and modes are a [`bidi_llm::Policy`] on the session's agent connection:
//!   they apply to the agent's local tools.
//!
//! # Your own agent
//!
//! Any bidi [`Agent`](bidi_agent::Agent) can be served: a [`Bridge`] says which input a
//! prompt makes and which updates its chunks show, and [`Server::bridge`] serves it. Each
//! prompt turn is a connection on the session that ends with the agent's turn; modes and
//! commands apply, and the connection carries the session's [`Workspace`].
//!
//! # Rules
//!
//! - A prompt turn runs in a task of its own once it waits (for the model, a tool, the
//!   client): the server goes on reading while it runs, so a `session/cancel` reaches it. A
//!   turn that waits for nothing is answered before the next line is read. One turn runs per
//!   session at a time. `session/new` and `session/load` run in tasks of their own too,
//!   since starting MCP servers takes a while.
//!   A prompt on a session whose turn runs or which is being loaded, or a load of a session
//!   whose turn runs, is valid but cannot run now: it is answered with `-32603` and the data
//!   `{"reason": "session_busy", "sessionId": ..}`, and may be sent again once the session
//!   answered.
//! - A turn's updates are in the order the agent made them: a tool call that needs permission
//!   is shown (`tool_call`, `pending`) and asked about after the text the model streamed
//!   before it.
//! - Stdout carries protocol lines only, one message per line; the few things the server logs
//!   go to stderr, with the ids and names a client chose escaped (`{:?}`), so that line breaks
//!   or terminal escapes in them cannot forge log lines. Logging never waits for stderr: the
//!   lines queue (up to 1,024) for a thread that writes them, so a client that never reads
//!   the agent's stderr does not stall it once the pipe is full; lines that find the queue
//!   full are dropped, and `log: N lines dropped: stderr was not read` is written once stderr is read
//!   again.
//! - Malformed JSON is answered with `-32700`, a message that is not a JSON-RPC request with
//!   `-32600`, bad params with `-32602` naming the field (`prompt[0]`, `cwd`, ...), an unknown
//!   method with `-32601`; the server goes on. Unknown notifications are ignored.
//! - A `session/set_mode` with a mode id the server does not have is refused with `-32602`
//!   naming `modeId`.
//! - A line over [`Server::max_line_bytes`] is refused with `-32600` without being read into
//!   memory, under the request's id when the line's first bytes name it (clients write
//!   `{"jsonrpc":"2.0","id":..,"method":..` first, so an editor's request with a large image
//!   gets its answer); an oversized answer to one of the server's own requests (a permission
//!   answer) fails that request.
//! - A session id is at most 256 bytes; a longer one is refused with `-32602` naming
//!   `sessionId`.
//! - At the end of input, the requests the server sent that are still unanswered fail, and
//!   the turns still running may finish for [`Server::drain`] before they are cancelled.
//!
//! # Bounds
//!
//! What one client connection may make the server hold:
//!
//! - the reader keeps at most one line of [`Server::max_line_bytes`] (8 MiB) in memory;
//! - at most 32 `session/new`, `session/load` and `session/close` requests run at once: with
//!   32 running (their answers not read by the client, say), the server reads nothing more
//!   until one ends, so a client that stops reading stdout is not read either
//!   (backpressure), and every answer is written once it reads again;
//! - at most [`Server::max_sessions`] (1,024) sessions open at once: a session is open from
//!   its `session/new` or `session/load` until its `session/close` or the end of the
//!   connection (a `session/load` of a session open already counts once). Past the bound, a
//!   `session/new`, or a `session/load` of a session not open on the connection, is refused
//!   with `-32603` and the data `{"reason": "too_many_sessions", "maxSessions": 1024}`, and
//!   the connection goes on; closing a session makes room for another;
//! - one prompt turn per session, and every message is written through one writer, a line at
//!   a time, which waits while the client does not read;
//! - at most [`Server::max_idle_agent_connections`] (64) agent connections kept between
//!   prompt turns, those of the sessions prompted last: each a task waiting for the next
//!   prompt, and its session's state (its conversation) in memory;
//! - MCP servers start within `Server::mcp_start_timeout` (30 s) and their calls end within
//!   `Server::mcp_call_timeout` (60 s); at the end of input, turns run on for at most
//!   [`Server::drain`] (30 s);
//! - at most 1,024 log lines wait for stderr (the process's, shared by every connection);
//!   past that, lines are dropped and counted.
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]
//!
//! `bidi-acp` depends on `bidi-session` without its default feature `sqlite`: a program that keeps
//! sessions in `bidi_session::SqliteStore` depends on `bidi-session` itself (default features), and
//! one that does not compiles no SQLite.

#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Logs a line to stderr, never waiting for it (see `bidi_flow::log`). Whatever the client or
/// a model chose (ids, names) is written escaped (`{:?}`), so that it cannot forge log lines
/// with line breaks or terminal escapes.
macro_rules! log {
    ($($arg:tt)*) => { bidi_flow::log::line(format!("[bidi-acp] {}", format_args!($($arg)*))) };
}

mod bridge;
mod codec;
mod content;
mod editor;
#[cfg(feature = "mcp")]
mod mcp;
#[cfg(not(feature = "mcp"))]
mod no_mcp;
#[cfg(not(feature = "mcp"))]
use no_mcp as mcp;
mod plan;
mod policy;
mod server;
mod turn;

/// The ACP wire types (protocol version 1) this crate speaks, from
/// [`agent-client-protocol-schema`](https://docs.rs/agent-client-protocol-schema).
pub use agent_client_protocol_schema::v1 as schema;
pub use agent_client_protocol_schema::v1::{PermissionOptionKind, ToolKind};
pub use bridge::{Bridge, Workspace};
pub use plan::{PLAN_TOOL, plan_tool};
pub use policy::{Command, Mode, Permission};
pub use server::{
    Cancelled, DEFAULT_MAX_IDLE_AGENT_CONNECTIONS, DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_SESSIONS,
    Server,
};
