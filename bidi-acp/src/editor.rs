//! The editor's own files and terminals, as tools of a session's prompt turns when the client
//! offers them in `initialize`: `read_text_file` reads through the editor (unsaved changes
//! included), `write_text_file` writes through it (the edit shown as a diff), and
//! `run_command` runs a program in one of the editor's terminals, shown live in the tool call.
//!
//! `initialize` records what the client offers on the connection. The tools are the agent
//! connection's own (`Policy::tool`, after the agent's, which hide them by name, and before the MCP
//! ones), each a request to the client through the connection's one request table, as permission
//! requests are. To the loop they are ordinary tools, so kinds, locations, modes and the permission
//! gate apply unchanged; the two that change something need permission unless a rule decides. A
//! running command is a guard: dropped unfinished (the turn cancelled), it sends `terminal/kill`
//! and `terminal/release` from a task of its own. `terminal/output` is not polled while a command
//! runs: the embedded terminal is ACP's live view, and the output is read once it exits.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    CLIENT_METHOD_NAMES, ClientCapabilities, CreateTerminalRequest, CreateTerminalResponse, Diff,
    KillTerminalRequest, ReadTextFileRequest, ReadTextFileResponse, ReleaseTerminalRequest,
    SessionId, Terminal, TerminalExitStatus, TerminalOutputRequest, TerminalOutputResponse,
    ToolCallContent, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use bidi_llm::{Tool, ToolEvent};
use futures_util::{Stream, StreamExt as _, stream};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::server::Shared;

/// The tool that reads a file through the editor.
pub(crate) const READ: &str = "read_text_file";
/// The tool that writes a file through the editor.
pub(crate) const WRITE: &str = "write_text_file";
/// The tool that runs a command in one of the editor's terminals.
pub(crate) const RUN: &str = "run_command";

/// The name of a tool's [`ToolEvent::Data`] that is shown in its tool call as is: an ACP
/// `ToolCallContent` (a terminal, a diff), kept before the call's output in every update.
pub(crate) const CONTENT: &str = "acp.content";

/// The most output of a command the editor keeps (the last bytes), and the model reads.
const OUTPUT_LIMIT: u64 = 64 * 1024;

/// How long a command may run when its call names no timeout.
const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// The longest timeout a call may name.
const MAX_TIMEOUT_SECS: u64 = 3600;

/// What the client offers: the methods it advertised in `initialize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offers {
    read: bool,
    write: bool,
    terminal: bool,
}

impl Offers {
    pub(crate) fn of(capabilities: &ClientCapabilities) -> Self {
        Self {
            read: capabilities.fs.read_text_file,
            write: capabilities.fs.write_text_file,
            terminal: capabilities.terminal,
        }
    }

    /// The tools offered, and whether each needs permission unless a mode decides.
    fn names(self) -> impl Iterator<Item = (&'static str, bool)> {
        [
            (READ, self.read, false),
            (WRITE, self.write, true),
            (RUN, self.terminal, true),
        ]
        .into_iter()
        .filter_map(|(name, offered, asks)| offered.then_some((name, asks)))
    }
}

/// The editor tools of one session.
#[derive(Debug, Default)]
pub(crate) struct Offered {
    pub(crate) tools: Vec<Tool>,
    /// The names of those that need permission.
    pub(crate) asks: Vec<&'static str>,
}

/// The editor tools `offers` makes for session `session_id` (relative paths against `cwd`),
/// but for those `hidden` (the agent has a tool of that name).
pub(crate) fn tools(
    offers: Offers,
    shared: &Arc<Shared>,
    session_id: &SessionId,
    cwd: &Path,
    hidden: impl Fn(&str) -> bool,
) -> Offered {
    let editor = Editor {
        shared: Arc::downgrade(shared),
        session_id: session_id.clone(),
        cwd: cwd.to_owned(),
        offers,
    };
    let mut offered = Offered::default();
    for (name, asks) in offers.names().filter(|(name, _)| !hidden(name)) {
        offered.tools.push(editor.tool(name));
        if asks {
            offered.asks.push(name);
        }
    }
    offered
}

/// What `read_text_file` takes.
#[derive(Debug, Deserialize, JsonSchema)]
struct Read {
    /// The file, absolute or relative to the project's directory.
    path: String,
    /// The first line to read, counting from 1 (default: the first).
    #[serde(default)]
    line: Option<u32>,
    /// How many lines to read at most (default: all).
    #[serde(default)]
    limit: Option<u32>,
}

/// What `write_text_file` takes.
#[derive(Debug, Deserialize, JsonSchema)]
struct Write {
    /// The file, absolute or relative to the project's directory.
    path: String,
    /// The file's whole new text.
    content: String,
}

/// What `run_command` takes.
#[derive(Debug, Deserialize, JsonSchema)]
struct Run {
    /// The program to run (no shell: for a pipeline, run `sh` with `-c` and the line).
    command: String,
    /// Its arguments.
    #[serde(default)]
    args: Vec<String>,
    /// The directory it runs in, absolute or relative to the project's (default: the project's).
    #[serde(default)]
    cwd: Option<String>,
    /// How long it may run, in seconds, before it is killed (default 300, at most 3600).
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

/// The client's side of one session: the requests its tools make.
#[derive(Debug, Clone)]
struct Editor {
    shared: Weak<Shared>,
    session_id: SessionId,
    cwd: PathBuf,
    offers: Offers,
}

impl Editor {
    fn tool(&self, name: &'static str) -> Tool {
        let editor = self.clone();
        match name {
            READ => Tool::local(
                READ,
                "Read a file",
                "Reads a text file as the editor has it (with its unsaved changes)",
                move |_id, args: Read| {
                    let editor = editor.clone();
                    events(|out| editor.read(args, out))
                },
            ),
            WRITE => Tool::local(
                WRITE,
                "Write a file",
                "Writes a text file through the editor: the whole file's new text",
                move |_id, args: Write| {
                    let editor = editor.clone();
                    events(|out| editor.write(args, out))
                },
            ),
            _ => Tool::local(
                RUN,
                "Run a command",
                "Runs a program in a terminal of the editor and answers its output and exit status",
                move |_id, args: Run| {
                    let editor = editor.clone();
                    events(|out| editor.run(args, out))
                },
            ),
        }
    }

    fn path(&self, path: &str) -> PathBuf {
        self.cwd.join(path)
    }

    /// Sends a request to the client and reads its answer as `R`; why not, in words the model
    /// and the user read.
    async fn request<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<R, String> {
        let shared = self.shared.upgrade().ok_or("the editor went away")?;
        let params = serde_json::to_value(params)
            .map_err(|error| format!("the request could not be made: {error}"))?;
        let answer = shared
            .request(method, params)
            .await
            .map_err(|error| match error.data {
                Some(Value::String(data)) => format!("{}: {data}", error.message),
                _ => error.message,
            })?;
        serde_json::from_value(answer)
            .map_err(|error| format!("the editor's answer to {method} is malformed: {error}"))
    }

    async fn read(self, args: Read, out: Events) {
        let path = self.path(&args.path);
        let request = ReadTextFileRequest::new(self.session_id.clone(), path.clone())
            .line(args.line)
            .limit(args.limit);
        let event = match self
            .request::<ReadTextFileResponse>(CLIENT_METHOD_NAMES.fs_read_text_file, request)
            .await
        {
            Ok(answer) => ToolEvent::Complete {
                output: answer.content,
                details: Some(json!({ "path": path })),
            },
            Err(why) => ToolEvent::Failed(format!(
                "the editor could not read {}: {why}",
                path.display()
            )),
        };
        out.send(event);
    }

    async fn write(self, args: Write, out: Events) {
        let path = self.path(&args.path);
        // The text before, for the diff the call shows: none for a new file (or one the editor
        // cannot or does not read).
        let old = if self.offers.read {
            self.request::<ReadTextFileResponse>(
                CLIENT_METHOD_NAMES.fs_read_text_file,
                ReadTextFileRequest::new(self.session_id.clone(), path.clone()),
            )
            .await
            .ok()
            .map(|answer| answer.content)
        } else {
            None
        };
        let request =
            WriteTextFileRequest::new(self.session_id.clone(), path.clone(), args.content.clone());
        if let Err(why) = self
            .request::<Value>(CLIENT_METHOD_NAMES.fs_write_text_file, request)
            .await
        {
            return out.send(ToolEvent::Failed(format!(
                "the editor could not write {}: {why}",
                path.display()
            )));
        }
        let bytes = args.content.len();
        out.show(ToolCallContent::Diff(
            Diff::new(path.clone(), args.content).old_text(old),
        ));
        out.send(ToolEvent::Complete {
            output: format!("wrote {bytes} bytes to {}", path.display()),
            details: Some(json!({ "path": path, "bytes": bytes })),
        });
    }

    async fn run(self, args: Run, out: Events) {
        let cwd = args
            .cwd
            .as_deref()
            .map_or_else(|| self.cwd.clone(), |cwd| self.path(cwd));
        let line = std::iter::once(args.command.as_str())
            .chain(args.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let request = CreateTerminalRequest::new(self.session_id.clone(), args.command)
            .args(args.args)
            .cwd(cwd)
            .output_byte_limit(OUTPUT_LIMIT);
        let created = self
            .request::<CreateTerminalResponse>(CLIENT_METHOD_NAMES.terminal_create, request)
            .await;
        let terminal = match created {
            Ok(created) => Running {
                editor: self.clone(),
                id: created.terminal_id.0.to_string(),
                done: false,
            },
            Err(why) => {
                return out.send(ToolEvent::Failed(format!(
                    "the editor could not run `{line}`: {why}"
                )));
            }
        };
        out.show(ToolCallContent::Terminal(Terminal::new(
            terminal.id.clone(),
        )));
        let timeout = args
            .timeout_seconds
            .unwrap_or(DEFAULT_TIMEOUT_SECS)
            .min(MAX_TIMEOUT_SECS);
        let event = terminal.finish(&line, Duration::from_secs(timeout)).await;
        out.send(event);
    }
}

/// A command running in one of the editor's terminals. Dropped before it finished (the turn
/// was cancelled), it kills the command and releases the terminal.
struct Running {
    editor: Editor,
    id: String,
    done: bool,
}

impl Running {
    /// Waits for the command to exit (killing it after `timeout`), reads its output and
    /// releases the terminal: what the model reads.
    async fn finish(mut self, line: &str, timeout: Duration) -> ToolEvent {
        let editor = &self.editor;
        let session = || editor.session_id.clone();
        let waited = tokio::time::timeout(
            timeout,
            editor.request::<TerminalExitStatus>(
                CLIENT_METHOD_NAMES.terminal_wait_for_exit,
                WaitForTerminalExitRequest::new(session(), self.id.clone()),
            ),
        )
        .await;
        let timed_out = waited.is_err();
        if timed_out {
            let kill = KillTerminalRequest::new(session(), self.id.clone());
            let _ = editor
                .request::<Value>(CLIENT_METHOD_NAMES.terminal_kill, kill)
                .await;
        }
        let output = editor
            .request::<TerminalOutputResponse>(
                CLIENT_METHOD_NAMES.terminal_output,
                TerminalOutputRequest::new(session(), self.id.clone()),
            )
            .await;
        let release = ReleaseTerminalRequest::new(session(), self.id.clone());
        let _ = editor
            .request::<Value>(CLIENT_METHOD_NAMES.terminal_release, release)
            .await;
        self.done = true;
        let output = match output {
            Ok(output) => output,
            Err(why) => {
                return ToolEvent::Failed(format!(
                    "the editor could not show the output of `{line}`: {why}"
                ));
            }
        };
        let status = match waited {
            Ok(Ok(status)) => Some(status),
            _ => output.exit_status.clone(),
        };
        outcome(line, &output, status.as_ref(), timed_out.then_some(timeout))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let editor = self.editor.clone();
        let id = std::mem::take(&mut self.id);
        runtime.spawn(async move {
            let session = editor.session_id.clone();
            let kill = KillTerminalRequest::new(session.clone(), id.clone());
            let _ = editor
                .request::<Value>(CLIENT_METHOD_NAMES.terminal_kill, kill)
                .await;
            let release = ReleaseTerminalRequest::new(session, id);
            let _ = editor
                .request::<Value>(CLIENT_METHOD_NAMES.terminal_release, release)
                .await;
        });
    }
}

/// What the model reads of a command that ran: its output, then how it ended. A command that
/// did not exit with 0 failed.
fn outcome(
    line: &str,
    output: &TerminalOutputResponse,
    status: Option<&TerminalExitStatus>,
    timed_out: Option<Duration>,
) -> ToolEvent {
    let mut text = String::new();
    if output.truncated {
        text.push_str(&format!(
            "(the first output was cut: the last {OUTPUT_LIMIT} bytes follow)\n"
        ));
    }
    text.push_str(&output.output);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let code = status.and_then(|status| status.exit_code);
    let signal = status.and_then(|status| status.signal.clone());
    let ended = match (timed_out, code, &signal) {
        (Some(timeout), ..) => format!("`{line}` did not end within {timeout:?}: it was killed"),
        (None, Some(code), _) => format!("`{line}` exited with code {code}"),
        (None, None, Some(signal)) => format!("`{line}` was ended by signal {signal}"),
        (None, None, None) => format!("`{line}` ended"),
    };
    text.push_str(&ended);
    if timed_out.is_some() || code.is_some_and(|code| code != 0) || signal.is_some() {
        return ToolEvent::Failed(text);
    }
    ToolEvent::Complete {
        output: text,
        details: Some(json!({
            "exitCode": code,
            "signal": signal,
            "truncated": output.truncated,
        })),
    }
}

/// Where a tool's events go as it makes them.
struct Events(mpsc::UnboundedSender<ToolEvent>);

impl Events {
    fn send(&self, event: ToolEvent) {
        // The receiver is the tool's stream: dropped, nobody reads any more.
        let _ = self.0.send(event);
    }

    /// Shows `content` in the tool call, before its output.
    fn show(&self, content: ToolCallContent) {
        if let Ok(data) = serde_json::to_value(content) {
            self.send(ToolEvent::Data {
                name: CONTENT.to_owned(),
                data,
            });
        }
    }
}

/// The events `run` makes, as a stream that runs it: dropping the stream drops `run`.
fn events<F>(run: impl FnOnce(Events) -> F) -> impl Stream<Item = ToolEvent> + Send + 'static
where
    F: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let work = run(Events(tx));
    let driven = stream::once(work).filter_map(|()| std::future::ready(None));
    let mut rx = rx;
    stream::select(stream::poll_fn(move |cx| rx.poll_recv(cx)), driven)
}
