//! An agent's executions for a peer: the session each runs on or its refusal, answered
//! before the first byte, then its events pumped through a protocol's wire.
//!
//! A front end of an agent (HTTP execute, AG-UI, the UI message stream, Genkit's agent wire,
//! A2A, MCP's agent tools, ACP's session updates, chat channels) does three things for each
//! execution its peer asks for:
//!
//! - **Start** ([`Execution`]): open a connection on the session the peer names (new,
//!   resumed, or made from the peer's transcript, in its scope), send the input, and answer
//!   the session it runs on, or a typed [`Refusal`], before a byte is written, so the front
//!   end answers with its protocol's head or its protocol's error.
//! - **Pump** and **wire**: the execution's events through the protocol's
//!   [`Wire`] to a [`Sink`], by the one seam flows use too
//!   ([`bidi_flow::wire`]).
//! - **Blocks** ([`Blocks`](crate::Blocks)): a wire that streams blocks (text, reasoning, a tool
//!   call's input) closes the open one before anything else.
//!
//! A new protocol is one more [`Wire`] (and the route or method that hands it to
//! [`Execution::start`]); everything else is shared.
//!
//! ```
//! use bidi_agent::AgentInit;
//! use bidi_flow::Code;
//! use bidi_flow::wire::Wire;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use bidi_llm::peer::{self, Execution};
//! use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage};
//!
//! /// Each event's kind, a line each.
//! struct Kinds;
//!
//! impl Wire for Kinds {
//!     type Event = AgentEvent;
//!     type Output = peer::Output;
//!     type Frames = Vec<u8>;
//!
//!     fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
//!         out.extend_from_slice(event.kind().as_bytes());
//!         out.push(b'\n');
//!     }
//!
//!     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
//!         out.extend_from_slice(format!("failed: {message}\n").as_bytes());
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let agent = LlmAgent::builder("helper", ScriptedModel::new([Scripted::new().text("Hi!")])).build();
//! let hello = || TurnInput::User(UserMessage::new("hello"));
//!
//! // A session that does not exist, resumed: refused before anything is written.
//! let conn = agent.connect(AgentInit::new().resume("nobody"));
//! let (body, _frames) = tokio::sync::mpsc::channel(1);
//! let refused = Execution::new(conn, hello()).start(Kinds, body).await.unwrap_err();
//! assert_eq!(refused.code(), Code::NotFound);
//!
//! // A new one: started, then its events.
//! let conn = agent.connect(AgentInit::new());
//! let (body, mut frames) = tokio::sync::mpsc::channel(1);
//! let started = Execution::new(conn, hello()).start(Kinds, body).await?;
//! let mut kinds = Vec::new();
//! while let Some(batch) = frames.recv().await {
//!     kinds.extend(batch);
//! }
//! let kinds = String::from_utf8(kinds)?;
//! assert!(kinds.starts_with("session_start\n"));
//! assert!(kinds.ends_with("execute_complete\n"));
//! # let _ = started;
//! # Ok(())
//! # }
//! ```
//!
//! # Contract
//!
//! - **A1 Start.** `Execution::new(conn, input).idle_timeout(t).start(wire, sink)` opens the
//!   execution in a task of its own and answers [`Started`] `{session_id, snapshot_id}` or a
//!   typed [`Refusal`] (its stable [`Code`]; a cancel on purpose is `Cancelled`, never a failure)
//!   before the wire writes a byte, so the front end answers with its head (a session header,
//!   a 202) or its protocol's error (an HTTP status, a one-event `RUN_ERROR` stream, a
//!   JSON-RPC error). A requester that goes away before the answer cancels the execution as
//!   `PeerGone`. [`Refusal::of`] (in `bidi-agent`) is the one classification of a
//!   connection's errors.
//! - **A2 Pump, wire and sink** are `bidi_flow::wire`'s (W1–W4): what the last events wrote
//!   goes out in one write with the wire's end (and its output, for a wire that shows it).
//! - **A3 One home for ids.** Session and snapshot ids are minted by `bidi_session::new_id`
//!   (an agent names a new session itself when its init has no id; ACP and the chat channels
//!   mint theirs there too).

use std::time::Duration;

use bidi_agent::{AgentOutput, Refusal};
use bidi_core::{ActionTask, BoxError, Connection, Error, InPlace, PeerGone};
use bidi_flow::Code;
use bidi_flow::idle::{Activity, Idle};
use bidi_flow::wire::{Ended, Events, Frames as _, Sink, Wire, pump_held, stop};
use futures_util::StreamExt as _;
use tokio::sync::oneshot;

use crate::{AgentEvent, ExecuteStream, LlmSession, TurnInput, execute};

impl Events<AgentEvent> for ExecuteStream<'_> {
    type Error = Error;

    fn cancel_with(&self, cause: BoxError) {
        ExecuteStream::cancel_with(self, cause);
    }
}

/// A connection of an [`LlmAgent`](crate::LlmAgent): what [`Execution`] runs on.
pub type AgentConnection = Connection<TurnInput, Output, AgentEvent>;

/// The output of an [`LlmAgent`](crate::LlmAgent)'s connection: its session's state and
/// how many executions it ran. What a [`Wire`] that shows it reads.
pub type Output = AgentOutput<LlmSession, u32>;

/// What an execution that started says: its session, and the snapshot it writes (pending
/// while it runs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Started {
    /// The session the execution runs on: the one asked for, or a new one's id.
    pub session_id: String,
    /// The snapshot the execution writes, for an agent that keeps its sessions.
    pub snapshot_id: Option<String>,
}

/// One execution of an agent for a peer: a connection (on the session the peer asked for,
/// in its scope) and the input, started with a [`Wire`] and a [`Sink`].
///
/// [`start`](Self::start) answers once the execution has started (its session) or was
/// refused (another execution holds the session, the session does not exist, the input does
/// not fit), before a byte is written; the peer's protocol then answers with its head or its
/// error. The execution runs in a task of its own, its events pumped through the wire to the
/// sink, until it ends, its peer goes away, or nothing moves for the idle timeout.
///
/// ```
/// use bidi_agent::AgentInit;
/// use bidi_flow::wire::Wire;
/// use bidi_llm::peer::{self, Execution};
/// use bidi_llm::testing::{Scripted, ScriptedModel};
/// use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage};
///
/// /// The answer's text.
/// struct Text;
///
/// impl Wire for Text {
///     type Event = AgentEvent;
///     type Output = peer::Output;
///     type Frames = Vec<u8>;
///
///     fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
///         if let AgentEvent::TextDelta { delta } = event {
///             out.extend_from_slice(delta.as_bytes());
///         }
///     }
///
///     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
///         out.extend_from_slice(message.as_bytes());
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let agent = LlmAgent::builder("helper", ScriptedModel::new([Scripted::new().text("Hi!")])).build();
/// let conn = agent.connect(AgentInit::new().session_id("chat-1"));
/// let input = TurnInput::User(UserMessage::new("hello"));
/// let (body, mut frames) = tokio::sync::mpsc::channel(1);
/// let started = Execution::new(conn, input).start(Text, body).await?;
/// assert_eq!(started.session_id, "chat-1");
/// let mut text = Vec::new();
/// while let Some(batch) = frames.recv().await {
///     text.extend(batch);
/// }
/// assert_eq!(text, b"Hi!");
/// # Ok(())
/// # }
/// ```
pub struct Execution {
    conn: AgentConnection,
    input: TurnInput,
    idle: Option<Duration>,
    /// The connection's action, when it runs beside the execution rather than in a task of
    /// its own.
    action: Option<ActionTask>,
}

impl std::fmt::Debug for Execution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Execution")
            .field("conn", &self.conn)
            .field("input", &self.input)
            .field("idle", &self.idle)
            .field("action", &self.action.is_some())
            .finish()
    }
}

impl Execution {
    /// An execution of `input` on `conn`.
    #[must_use]
    pub fn new(conn: AgentConnection, input: TurnInput) -> Self {
        Self {
            conn,
            input,
            idle: None,
            action: None,
        }
    }

    /// Runs the connection's action (its task, from the [`Driver`](bidi_core::Driver) the
    /// connection was opened with) beside the execution, in the execution's task: here, as
    /// far as the two go without waiting, then in a task of their own
    /// ([`InPlace::spawn_beside`]).
    /// An execution that needs nothing from outside (a scripted or cached answer) then runs
    /// whole before [`start`](Self::start) answers, with no task spawned and no other worker
    /// woken; one that waits (a model, a slow peer) goes on in its task, its action polled
    /// with it, timers and all.
    #[must_use]
    pub fn action(mut self, task: Option<ActionTask>) -> Self {
        self.action = task;
        self
    }

    /// Cancels the execution with [`PeerGone::Idle`] once nothing moves between it and its
    /// peer for `timeout` (no limit by default).
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle = Some(timeout);
        self
    }

    /// Starts the execution, its events written through `wire` to `sink` by a task of its
    /// own; `sink` is dropped once it is over.
    ///
    /// # Errors
    ///
    /// The execution's [`Refusal`]: another execution holds the session, the session does not
    /// exist, the init or the input does not fit, or the connection failed before it started.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it answers, the execution is cancelled with
    /// [`PeerGone::Disconnected`] as it starts.
    pub async fn start<W, S>(self, wire: W, sink: S) -> Result<Started, Refusal>
    where
        W: Wire<Event = AgentEvent, Output = Output> + 'static,
        S: Sink<W::Frames> + 'static,
    {
        let (head, answer) = oneshot::channel();
        let idle = self.idle.map(|timeout| Idle::new(Activity::new(), timeout));
        let run = run(self.conn, self.input, head, wire, sink, idle);
        match self.action {
            Some(action) => InPlace::spawn_beside(Some(action), run),
            None => drop(tokio::spawn(run)),
        }
        answer.await.unwrap_or_else(|_| {
            Err(Refusal::new(
                Code::ConnectionFailed,
                "the execution ended before it started",
            ))
        })
    }
}

type Head = oneshot::Sender<Result<Started, Refusal>>;

/// Runs the execution: reports its start or its refusal through `head`, then pumps its events.
///
/// A function returning a block, not an `async fn`, which would keep each of its arguments
/// twice in the future: the future is boxed for every execution.
fn run<W, S>(
    conn: AgentConnection,
    input: TurnInput,
    head: Head,
    wire: W,
    sink: S,
    idle: Option<Idle>,
) -> impl Future<Output = ()>
where
    W: Wire<Event = AgentEvent, Output = Output>,
    S: Sink<W::Frames>,
{
    let (mut conn, mut wire, mut idle) = (conn, wire, idle);
    async move {
        let mut run = match execute(&mut conn, input).await {
            Ok(run) => run,
            Err(error) => {
                let refusal = match error.error() {
                    Some(error) => Refusal::of(error),
                    None => Refusal::new(Code::SendFailed, error.to_string()),
                };
                let _ = head.send(Err(refusal));
                return;
            }
        };
        let Some(first) = first(&mut run, head, idle.as_mut()).await else {
            drop(run);
            conn.close();
            let _ = conn.output().await;
            return;
        };
        let mut frames = W::Frames::default();
        let ended = pump_held(
            &mut run,
            Some(first),
            &mut wire,
            &sink,
            idle.as_mut(),
            &mut frames,
        )
        .await;
        drop(run);
        conn.close();
        if matches!(ended, Ended::Stopped) {
            let _ = conn.output().await;
            return;
        }
        // The output first, if the wire shows it; else the stream ends at once. The output's
        // future is made only where it is awaited: kept across the writes, it would be kept in
        // this future whole, whatever it waits on.
        let rest = if W::OUTPUT {
            let output = match idle.as_mut() {
                Some(idle) => idle.within(conn.output()).await,
                None => Some(conn.output().await),
            };
            if let Some(Ok(output)) = output {
                wire.output(&output);
            }
            None
        } else {
            Some(conn)
        };
        // What the last events wrote goes out with the end, in one write.
        wire.end(&mut frames);
        if !frames.is_empty() {
            match idle.as_mut() {
                Some(idle) => drop(idle.within(sink.send(frames)).await),
                None => drop(sink.send(frames).await),
            }
        }
        if let Some(conn) = rest {
            let _ = conn.output().await;
        }
    }
}

/// Completes with the timeout once `idle` expired; never without one.
async fn expired(idle: Option<&mut Idle>) -> Duration {
    match idle {
        Some(idle) => {
            idle.expired().await;
            idle.timeout()
        }
        None => std::future::pending().await,
    }
}

/// The execution's first event, once it says the execution started (answered through
/// `head`); `None` if it was refused (answered too), or the requester went away first.
async fn first(
    run: &mut ExecuteStream<'_>,
    mut head: Head,
    idle: Option<&mut Idle>,
) -> Option<AgentEvent> {
    let next = tokio::select! {
        biased;
        next = run.next() => next,
        () = head.closed() => {
            stop(run, Box::new(PeerGone::Disconnected)).await;
            return None;
        }
        timeout = expired(idle) => {
            stop(run, Box::new(PeerGone::Idle(timeout))).await;
            return None;
        }
    };
    let answer = match &next {
        Some(Ok(AgentEvent::SessionStart {
            session_id,
            snapshot_id,
        })) => Ok(Started {
            session_id: session_id.clone(),
            snapshot_id: snapshot_id.clone(),
        }),
        Some(Ok(AgentEvent::Error { code, error, .. })) => {
            let refusal = refused(*code, error);
            let _ = head.send(Err(refusal));
            // The refusal's `execute_complete` and turn end: read and dropped.
            while run.next().await.is_some() {}
            return None;
        }
        Some(Ok(event)) => Err(Refusal::new(
            Code::ConnectionFailed,
            format!("the execution began with `{}`", event.kind()),
        )),
        Some(Err(error)) => Err(Refusal::of(error)),
        None => Err(Refusal::new(
            Code::ConnectionFailed,
            "the execution ended before it started",
        )),
    };
    let started = answer.is_ok();
    if head.send(answer).is_err() && started {
        // The requester went away as it started.
        stop(run, Box::new(PeerGone::Disconnected)).await;
        return None;
    }
    match next {
        Some(Ok(event)) if started => Some(event),
        _ => None,
    }
}

/// An execution's refusal as its first event says it (`error` before `session_start`): a
/// session another execution holds, or an input that does not fit; any other the agent's
/// failure.
fn refused(code: Code, error: &str) -> Refusal {
    let code = match code {
        Code::SessionRunning | Code::InvalidInput => code,
        _ => Code::ConnectionFailed,
    };
    Refusal::new(code, error)
}
