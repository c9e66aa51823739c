//! The agent process: [`Command`] says how to start it, [`Child`] talks to it one line at a time.
//!
//! `Command` is cloneable, so that a flow starts one process per connection. `Child` is the one
//! driver of a process: `listen` and the flow both use its reader and writer halves. It knows
//! whether a round is open (a prompt written, its `result` or `error` not yet read), which is
//! what keeps rounds in step. Two timeouts bound a round, per message (silence) and per round;
//! either kills the process group. An oversized line fails the round while its bytes are read
//! and dropped, never kept, and the process stays usable. The agent runs in a process group of
//! its own: `Drop` sends SIGKILL to the group (`nix`), so its children go too (init reaps
//! them), and tokio's `kill_on_drop` reaps the agent.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bidi_core::BoxError;
use bidi_flow::lines::{Line, read_line};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::codec::{self, ERROR, INIT_ACK, Message, Prompt, PromptFormat, Reply};
use crate::listen::Listen;

/// The longest line read from an agent by default: 1 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// How much of an agent's stderr is kept, to say why it failed.
const STDERR_TAIL: usize = 4096;

/// How long an agent that closed its stdout, or whose stdin is closed, may take to exit before
/// it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How to start an NDJSON agent: the program, its arguments, environment and working
/// directory (as [`tokio::process::Command`]), and how to talk to it.
///
/// ```no_run
/// use std::time::Duration;
/// use bidi_ndjson::Command;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_ndjson::Error> {
/// let mut child = Command::new("python3")
///     .arg("agent.py")
///     .current_dir("/srv/project")
///     .init(json!({"model": "opus", "allowed_tools": ["read", "write"]}))
///     .message_timeout(Duration::from_secs(60))
///     .session_timeout(Duration::from_secs(600))
///     .spawn()
///     .await?;
/// let result = child.listen("Refactor the auth module").await?;
/// println!("{}", result["text"]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct Command {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
    env_clear: bool,
    cwd: Option<PathBuf>,
    pub(crate) settings: Settings,
}

/// How the host talks to an agent.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) init: Option<Value>,
    pub(crate) prompt_format: PromptFormat,
    pub(crate) plain: String,
    pub(crate) max_line_bytes: usize,
    pub(crate) message_timeout: Option<Duration>,
    pub(crate) session_timeout: Option<Duration>,
    /// The replies to messages no handler takes, by type.
    pub(crate) replies: HashMap<String, Value>,
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Command {
    /// Runs `program` (looked up in `PATH` as [`std::process::Command`] does).
    pub fn new(program: impl Into<OsString>) -> Self {
        let replies = HashMap::from([
            ("question".to_owned(), Value::String(String::new())),
            ("approval".to_owned(), Value::String("no".to_owned())),
        ]);
        Self {
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            env_clear: false,
            cwd: None,
            settings: Settings {
                init: None,
                prompt_format: PromptFormat::Text,
                plain: codec::RESULT.to_owned(),
                max_line_bytes: DEFAULT_MAX_LINE_BYTES,
                message_timeout: None,
                session_timeout: None,
                replies,
            },
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), Some(value.into())));
        self
    }

    /// Removes an environment variable.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), None));
        self
    }

    /// Starts from an empty environment rather than this process's.
    pub fn env_clear(mut self) -> Self {
        self.env_clear = true;
        self.envs.clear();
        self
    }

    /// The working directory.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Starts with the handshake: `{"type":"init","params":<params>}` is written first, and
    /// the agent must answer `{"type":"init_ack"}` (an `{"type":"error","message":..}` fails
    /// [`spawn`](Self::spawn) with its message).
    pub fn init(mut self, params: Value) -> Self {
        self.settings.init = Some(params);
        self
    }

    /// How prompts are written (default [`PromptFormat::Text`]).
    pub fn prompt_format(mut self, format: PromptFormat) -> Self {
        self.settings.prompt_format = format;
        self
    }

    /// The type a line that is not a JSON message becomes: `result` by default (an agent that
    /// just prints its answer), or `log`, `partial`, ... for an agent that prints other things
    /// too. The line is put in the field the crate's type for that message reads: `message`
    /// for `log` ([`Log`](crate::Log)), `progress` and `error`; `chunk` for `partial`;
    /// `question` for `question`; `description` for `approval`; `text` for `result` and any
    /// other type.
    ///
    /// With the default, the first plain line ends the round: an agent that prints anything
    /// in plain text before its JSON `result` (a banner, a warning) needs another type here,
    /// or its next messages would be taken for the next round's.
    pub fn plain_text_as(mut self, kind: impl Into<String>) -> Self {
        self.settings.plain = kind.into();
        self
    }

    /// The longest line read from the agent, in bytes (default [`DEFAULT_MAX_LINE_BYTES`]).
    /// A longer line is never held whole in memory: it ends the round with
    /// [`Error::LineTooLong`].
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.settings.max_line_bytes = max.max(1);
        self
    }

    /// How long to wait for each message (default: no limit). An agent silent for longer is
    /// killed and the round fails with [`Error::MessageTimeout`].
    pub fn message_timeout(mut self, timeout: Duration) -> Self {
        self.settings.message_timeout = Some(timeout);
        self
    }

    /// How long a round (a prompt to its result) may take in all, handlers included (default:
    /// no limit). A longer one kills the agent and fails with [`Error::SessionTimeout`].
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.settings.session_timeout = Some(timeout);
        self
    }

    /// The reply a message of type `kind` gets when no handler takes it, so that an agent
    /// waiting for an answer is not left waiting. By default an unhandled `question` is
    /// answered `""` and an unhandled `approval` `"no"`; other types get no reply.
    pub fn default_reply(mut self, kind: impl Into<String>, value: Value) -> Self {
        self.settings.replies.insert(kind.into(), value);
        self
    }

    /// Messages of type `kind` no handler takes get no reply.
    pub fn no_default_reply(mut self, kind: &str) -> Self {
        self.settings.replies.remove(kind);
        self
    }

    /// Starts the agent, in a process group of its own with its stdin, stdout and stderr
    /// piped, and makes the handshake if [`init`](Self::init) asks for one.
    ///
    /// # Errors
    ///
    /// [`Error::Spawn`] if the program cannot be started; [`Error::Init`] if the agent refuses
    /// the handshake or answers something else; the errors of [`Child::next`] while waiting
    /// for its answer.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the agent.
    pub async fn spawn(&self) -> Result<Child, Error> {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if self.env_clear {
            command.env_clear();
        }
        for (key, value) in &self.envs {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        #[cfg(unix)]
        command.process_group(0);
        let program = self.program.to_string_lossy().into_owned();
        let mut process = command.spawn().map_err(|source| Error::Spawn {
            program: program.clone(),
            source,
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            return Err(Error::Spawn {
                program,
                source: io::Error::other("the child's pipes are missing"),
            });
        };
        let tail = Arc::new(Mutex::new(Tail::default()));
        let reader = tokio::spawn(keep_tail(stderr, Arc::clone(&tail)));
        let settings = Arc::new(self.settings.clone());
        let mut child = Child {
            pid: process.id(),
            process,
            reader: Some(Reader {
                stdout: BufReader::new(stdout),
                line: Vec::new(),
                settings: Arc::clone(&settings),
            }),
            writer: Writer {
                stdin: Some(stdin),
                out: Vec::new(),
            },
            tail,
            stderr: reader,
            settings,
            status: None,
            in_round: false,
        };
        if let Some(params) = &self.settings.init {
            child.handshake(params).await?;
        }
        Ok(child)
    }
}

/// The last bytes an agent wrote to stderr.
#[derive(Debug, Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > STDERR_TAIL {
            let cut = self.0.len() - STDERR_TAIL;
            self.0.drain(..cut);
        }
    }
}

async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Tail>>) {
    let mut buf = [0u8; 4096];
    while let Ok(read @ 1..) = stderr.read(&mut buf).await {
        tail.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(&buf[..read]);
    }
}

/// A running NDJSON agent. Dropping it kills the agent (and its process group); the runtime
/// reaps it.
///
/// [`listen`](Self::listen) runs one round with handlers; [`prompt`](Self::prompt),
/// [`next`](Self::next) and [`reply`](Self::reply) are the steps it is made of, for a loop of
/// your own.
pub struct Child {
    process: tokio::process::Child,
    pid: Option<u32>,
    /// `None` while a flow's reading task has it.
    reader: Option<Reader>,
    pub(crate) writer: Writer,
    tail: Arc<Mutex<Tail>>,
    stderr: JoinHandle<()>,
    pub(crate) settings: Arc<Settings>,
    /// How the agent exited, once it has.
    status: Option<ExitStatus>,
    /// Whether a prompt was written whose round has not ended (with its `result` or `error`,
    /// or read to its end after it failed).
    pub(crate) in_round: bool,
}

impl fmt::Debug for Child {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Child")
            .field("pid", &self.pid)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill_group();
        }
        // `kill_on_drop` kills the agent itself, and the runtime reaps it.
        self.stderr.abort();
    }
}

impl Child {
    /// The agent's process id (also its process group's), until it has been reaped.
    #[must_use]
    pub fn id(&self) -> Option<u32> {
        self.pid
    }

    /// Runs one round: writes `prompt`, then reads the agent's messages, hands each to the
    /// handler of its type and writes back the replies, until the agent sends its `result`
    /// (the round's value) or its `error`.
    ///
    /// # Errors
    ///
    /// When awaited: [`Error::Agent`] if the agent ends the round with an `error`;
    /// [`Error::InvalidMessage`], [`Error::Handler`] or [`Error::LineTooLong`] if a message
    /// cannot be handled (the rest of the round is read to its end first, so the next round
    /// starts in step); [`Error::OutOfStep`] if the round before did not end (nothing is
    /// written); the errors of [`prompt`](Self::prompt), [`next`](Self::next) and
    /// [`reply`](Self::reply).
    ///
    /// # Cancel safety
    ///
    /// Dropping the round before it ends leaves the agent in it: the next round fails with
    /// [`Error::OutOfStep`] until the old one is read to its end with [`next`](Self::next).
    ///
    /// ```no_run
    /// use bidi_ndjson::{Command, Progress, Question};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), bidi_ndjson::Error> {
    /// let mut child = Command::new("./agent.sh").spawn().await?;
    /// let result = child
    ///     .listen("Implement OAuth2 login")
    ///     .on("progress", |progress: Progress| async move {
    ///         eprintln!("{}", progress.message);
    ///     })
    ///     .on("question", |question: Question| async move {
    ///         Some(if question.question.contains("RS256") { "RS256" } else { "the simplest" })
    ///     })
    ///     .await?;
    /// println!("{}", result["text"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn listen(&mut self, prompt: impl Into<Prompt>) -> Listen<'_> {
        Listen::new(self, prompt.into())
    }

    /// Writes a prompt line, which starts a round: it ends when [`next`](Self::next) returns
    /// the agent's `result` or `error`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfStep`] if the round before has not ended (nothing is written then);
    /// [`Error::InvalidPrompt`] if the text format cannot carry it; [`Error::Stdin`] if the
    /// agent no longer reads.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn prompt(&mut self, prompt: &Prompt) -> Result<(), Error> {
        // An agent that is gone says so when the prompt cannot be written.
        if self.in_round && self.status.is_none() {
            return Err(Error::OutOfStep);
        }
        let written = self
            .writer
            .prompt(prompt, self.settings.prompt_format)
            .await;
        self.written(written).await?;
        self.in_round = true;
        Ok(())
    }

    /// Writes a reply.
    ///
    /// # Errors
    ///
    /// [`Error::Stdin`] if the agent no longer reads.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn reply(&mut self, reply: &Reply) -> Result<(), Error> {
        self.send(reply).await
    }

    /// Writes any message as a line.
    pub(crate) async fn send(&mut self, message: &impl Serialize) -> Result<(), Error> {
        let written = self.writer.send(message).await;
        self.written(written).await
    }

    /// A write's outcome: a closed stdin says how the agent exited.
    pub(crate) async fn written(&mut self, written: Result<(), Error>) -> Result<(), Error> {
        match written {
            Err(Error::Stdin { source, .. }) => {
                let status = self.exit_status(EXIT_GRACE).await;
                Err(Error::Stdin {
                    source,
                    status,
                    stderr: self.stderr_tail().await,
                })
            }
            other => other,
        }
    }

    /// The next message the agent writes (blank lines skipped), waiting at most the message
    /// timeout. A `result` or an `error` ends the round.
    ///
    /// # Errors
    ///
    /// [`Error::Exited`] when the agent's stdout ends (with its exit status and the tail of its
    /// stderr); [`Error::LineTooLong`]; [`Error::MessageTimeout`] (the agent is killed);
    /// [`Error::Io`] if reading fails.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped read may lose part of a line.
    pub async fn next(&mut self) -> Result<Message, Error> {
        self.next_line_before(None).await?;
        let message = Message::decode(self.line(), &self.settings.plain);
        if message.is_terminal() {
            self.in_round = false;
        }
        Ok(message)
    }

    /// Reads the next line into [`line`](Self::line), waiting at most the message timeout
    /// and `deadline` (the round's limit, `limit` long).
    pub(crate) async fn next_line_before(
        &mut self,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<(), Error> {
        let Some(reader) = self.reader.as_mut() else {
            return Err(Error::Io(io::Error::other(
                "the agent's output is being read elsewhere",
            )));
        };
        let message_deadline = self
            .settings
            .message_timeout
            .map(|timeout| (Instant::now() + timeout, Error::MessageTimeout(timeout)));
        let round_deadline = deadline.map(|(at, limit)| (at, Error::SessionTimeout(limit)));
        let at = match (message_deadline, round_deadline) {
            (Some(message), Some(round)) => {
                Some(if message.0 <= round.0 { message } else { round })
            }
            (message, round) => message.or(round),
        };
        let read = reader.next_line(at).await.map(|more| more.then_some(()));
        self.read(read).await
    }

    /// The line last read by [`next_line_before`](Self::next_line_before).
    pub(crate) fn line(&self) -> &[u8] {
        self.reader.as_ref().map_or(&[], Reader::line)
    }

    /// The agent's output, for a task that reads it.
    pub(crate) fn take_reader(&mut self) -> Option<Reader> {
        self.reader.take()
    }

    /// A read's outcome: the end of the agent's output says how it exited; a timeout kills
    /// it.
    pub(crate) async fn read<T>(&mut self, read: Result<Option<T>, Error>) -> Result<T, Error> {
        match read {
            Ok(Some(message)) => Ok(message),
            Ok(None) => {
                let status = self.exit_status(EXIT_GRACE).await;
                Err(Error::Exited {
                    status,
                    stderr: self.stderr_tail().await,
                })
            }
            Err(error @ (Error::MessageTimeout(_) | Error::SessionTimeout(_))) => {
                self.kill().await;
                Err(error)
            }
            Err(error) => Err(error),
        }
    }

    /// Closes the agent's stdin, waits up to `grace` for it to exit, then kills it (and its
    /// process group) if it has not.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if waiting for it fails.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future kills the agent, as dropping the `Child` does.
    pub async fn close(mut self, grace: Duration) -> Result<ExitStatus, Error> {
        self.writer.stdin = None;
        if let Some(status) = self.exit_status(grace).await {
            return Ok(status);
        }
        self.kill().await;
        match self.status {
            Some(status) => Ok(status),
            None => Ok(self.process.wait().await?),
        }
    }

    /// Kills the agent and its process group and reaps it.
    pub(crate) async fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.kill_group();
        let _ = self.process.start_kill();
        if let Ok(status) = self.process.wait().await {
            self.status = Some(status);
            self.pid = None;
        }
    }

    fn kill_group(&self) {
        #[cfg(unix)]
        if let Some(pid) = self.pid.and_then(|pid| i32::try_from(pid).ok()) {
            // The group may be gone already; nothing to do then.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// How the agent exited, waiting up to `grace` for it (killed after that: `None`).
    async fn exit_status(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            match tokio::time::timeout(grace, self.process.wait()).await {
                Ok(Ok(status)) => {
                    self.status = Some(status);
                    self.pid = None;
                }
                _ => self.kill().await,
            }
        }
        self.status
    }

    /// The last few KiB the agent wrote to stderr: once it has exited, all it wrote (waiting a
    /// moment for the pipe to drain, unless a process it left behind holds it open); what it
    /// wrote until now otherwise.
    async fn stderr_tail(&mut self) -> String {
        if self.status.is_some() && !self.stderr.is_finished() {
            let _ = tokio::time::timeout(EXIT_GRACE, &mut self.stderr).await;
        }
        let tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&tail.0).trim().to_owned()
    }

    async fn handshake(&mut self, params: &Value) -> Result<(), Error> {
        self.send(&codec::init(params)).await?;
        let answer = self.next().await?;
        match answer.kind.as_str() {
            INIT_ACK => Ok(()),
            ERROR => Err(Error::Init {
                message: error_message(&answer.fields),
            }),
            other => Err(Error::Init {
                message: format!("it answered `{other}`, not `init_ack`"),
            }),
        }
    }
}

/// The agent's stdout, read one line at a time.
pub(crate) struct Reader {
    stdout: BufReader<ChildStdout>,
    /// The line being read, reused from line to line.
    line: Vec<u8>,
    settings: Arc<Settings>,
}

impl Reader {
    /// The next message (blank lines skipped), `None` at the end of the output; past
    /// `deadline`, its error.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped read may lose part of a line. Keep the future until it
    /// ends.
    pub(crate) async fn read(
        &mut self,
        deadline: Option<(Instant, Error)>,
    ) -> Result<Option<Message>, Error> {
        Ok(self
            .next_line(deadline)
            .await?
            .then(|| Message::decode(&self.line, &self.settings.plain)))
    }

    /// Reads the next line that is not blank into [`line`](Self::line): `false` at the end of
    /// the output; past `deadline`, its error.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, as [`read`](Self::read).
    pub(crate) async fn next_line(
        &mut self,
        mut deadline: Option<(Instant, Error)>,
    ) -> Result<bool, Error> {
        loop {
            let at = deadline.take();
            let max = self.settings.max_line_bytes;
            let read = read_line(&mut self.stdout, &mut self.line, max);
            let line = match at {
                Some((at, error)) => match tokio::time::timeout_at(at, read).await {
                    Ok(line) => {
                        deadline = Some((at, error));
                        line?
                    }
                    Err(_) => return Err(error),
                },
                None => read.await?,
            };
            match line {
                None => return Ok(false),
                Some(Line::TooLarge(len)) => return Err(Error::LineTooLong { len, limit: max }),
                Some(Line::Frame) if self.line.iter().all(u8::is_ascii_whitespace) => {}
                Some(Line::Frame) => return Ok(true),
            }
        }
    }

    /// The line last read.
    pub(crate) fn line(&self) -> &[u8] {
        &self.line
    }
}

/// The agent's stdin, written one line at a time.
pub(crate) struct Writer {
    /// `None` once closed.
    stdin: Option<ChildStdin>,
    /// The line being written, reused from line to line.
    out: Vec<u8>,
}

impl Writer {
    pub(crate) async fn prompt(
        &mut self,
        prompt: &Prompt,
        format: PromptFormat,
    ) -> Result<(), Error> {
        codec::encode_prompt(prompt, format, &mut self.out).map_err(Error::InvalidPrompt)?;
        self.flush().await
    }

    pub(crate) async fn send(&mut self, message: &impl Serialize) -> Result<(), Error> {
        codec::encode(message, &mut self.out)
            .map_err(|error| Error::Io(io::Error::new(io::ErrorKind::InvalidData, error)))?;
        self.flush().await
    }

    /// Writes the line in `out`. A failure closes stdin: the agent is gone.
    async fn flush(&mut self) -> Result<(), Error> {
        let closed = |source| Error::Stdin {
            source,
            status: None,
            stderr: String::new(),
        };
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(closed(io::ErrorKind::BrokenPipe.into()));
        };
        let written = match stdin.write_all(&self.out).await {
            Ok(()) => stdin.flush().await,
            Err(error) => Err(error),
        };
        written.map_err(|error| {
            self.stdin = None;
            closed(error)
        })
    }
}

/// What an `error` message says: its `message`, else all its fields.
pub(crate) fn error_message(fields: &Map<String, Value>) -> String {
    match fields.get("message") {
        Some(Value::String(message)) => message.clone(),
        _ => Value::Object(fields.clone()).to_string(),
    }
}

/// What can go wrong talking to an NDJSON agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The program could not be started.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The agent refused the `init` handshake, or answered something else.
    #[error("the agent refused the init handshake: {message}")]
    Init {
        /// What it said.
        message: String,
    },
    /// The agent ended the round with an `error` message.
    #[error("the agent failed: {message}")]
    Agent {
        /// Its `message`.
        message: String,
        /// All its fields.
        fields: Map<String, Value>,
    },
    /// The agent's stdout ended before it sent a `result` or an `error`.
    #[error("the agent exited without a result ({}){}", exit(.status.as_ref()), said(.stderr))]
    Exited {
        /// How it exited (`None` if it had to be killed).
        status: Option<ExitStatus>,
        /// The last few KiB of its stderr.
        stderr: String,
    },
    /// Writing to the agent failed: it no longer reads its stdin, most likely because it
    /// exited.
    #[error("the agent no longer reads its input ({}): {source}{}", exit(.status.as_ref()), said(.stderr))]
    Stdin {
        /// The write's error.
        #[source]
        source: io::Error,
        /// How it exited, if it has.
        status: Option<ExitStatus>,
        /// The last few KiB of its stderr.
        stderr: String,
    },
    /// The agent wrote a line longer than the limit; it was not kept.
    #[error("the agent wrote a line of {len} bytes, over the limit of {limit}")]
    LineTooLong {
        /// The line's length (so far).
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The agent sent nothing for the message timeout; it was killed.
    #[error("the agent sent nothing for {0:?}: it was killed")]
    MessageTimeout(Duration),
    /// The round took longer than the session timeout; the agent was killed.
    #[error("the round took longer than {0:?}: the agent was killed")]
    SessionTimeout(Duration),
    /// A message's fields do not fit its handler's type.
    #[error("the agent's `{kind}` message does not fit{}: {reason}", at(.path))]
    InvalidMessage {
        /// The message's type.
        kind: String,
        /// The JSON Pointer of the field that does not fit: empty when it is the message as
        /// a whole (a field missing, say).
        path: String,
        /// Why.
        reason: String,
    },
    /// The prompt cannot be written in the prompt format.
    #[error("the prompt cannot be written: {0}")]
    InvalidPrompt(&'static str),
    /// A handler failed: the round ends with its error.
    #[error("the `{kind}` handler failed: {source}")]
    Handler {
        /// The type of the message it handled.
        kind: String,
        /// Its error.
        #[source]
        source: BoxError,
    },
    /// Reading the agent's stdout failed.
    #[error("reading the agent's output failed: {0}")]
    Io(#[from] io::Error),
    /// A round was started while the agent is still in the one before, which was dropped
    /// before it ended, or failed and could not be read to its end: its prompt would be taken
    /// as an answer to the old round. Nothing was written. Read the old round to its end with
    /// [`Child::next`] (answering what waits for an answer with [`Child::reply`]), or start a
    /// new process.
    #[error(
        "the agent is still in a round that did not end (it was dropped or failed): read it to \
         its end, or start a new process"
    )]
    OutOfStep,
}

fn exit(status: Option<&ExitStatus>) -> String {
    match status {
        Some(status) => status.to_string(),
        None => "killed".to_owned(),
    }
}

fn at(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" at `{path}`")
    }
}

fn said(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends: {stderr}")
    }
}
