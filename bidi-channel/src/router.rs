//! [`MessageRouter`]: one agent connection per user, replies streamed to channels.
//!
//! It drives typed agent connections (`Connection<In, Out, Chunk>`), not a `JsonConnection`,
//! like bidi-acp: the protocol is about agents. It registers no action kind, and has no `codec`
//! module of frames: a channel's wire is the channel's (the Bot API's is frankenstein's types).
//!
//! - One task per user holds that user's connection, on a session id of its own
//!   (`bidi_session::new_id`), and takes the user's messages from a queue of 8: one user's turns
//!   are serialized by construction, and users run concurrently. After the idle timeout (30
//!   minutes) the task leaves the map and closes its queue under the map's lock (a message
//!   queued just before is still answered; a sender that finds the queue closed starts a new
//!   task), then closes its connection, so the agent saves its session: the next message
//!   starts a new task on a new session, which is session rotation. At most `max_users`
//!   (10,000) tasks exist; one more user is refused with `Error::TooManyUsers`. Dropping every
//!   router handle drops the queues: every task ends after its current reply, and the bus
//!   closes.
//! - A turn: `user_message` on the bus (`tokio::sync::broadcast`), then the reply, a wire on
//!   the wire seam (`bidi_flow::wire`) whose sink makes the channel's streaming calls one piece at a time, then
//!   `agent_response` with the same text on both paths. `Chunk::piece` says what a chunk is:
//!   `text_delta` is text, `toolcall_end` a tool (`status`), and an `error` event (a model
//!   failure, the turn limit) or `awaiting_tool_execution` / `awaiting_approval` (calls a chat
//!   can neither run nor approve; the reply says which) a failure. A broken connection is
//!   opened again on the same session for the next message. `handle` is cancel safe once the
//!   message is queued: the reply is still delivered.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bidi_agent::{Agent, AgentInit, AgentOutput};
use bidi_core::Connection;
use bidi_flow::wire::{Closed, Frames, Sink, Wire};
use bidi_llm::{AgentEvent, LlmAgent, LlmSession, TurnInput, UserMessage};
use serde::{Serialize, de::DeserializeOwned};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::channel::{Channel, StreamingChannel};
use crate::error::Error;

/// What one chunk of an agent's reply means to a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Piece<'a> {
    /// More of the reply's text.
    Text(&'a str),
    /// The agent calls a tool: the channel is told `Using: {name}`.
    Tool(&'a str),
    /// The agent stopped with an error (a failed model call, its turn limit): the reply ends
    /// with the text so far and this.
    Failed(Cow<'a, str>),
}

/// A chunk an agent streams, as a channel sees it: text, a tool call, a failure, or nothing a
/// user needs to see.
///
/// Implemented for `bidi-llm`'s [`AgentEvent`] and for `String` (all text); implement it for the
/// chunks of your own [`Agent`] to route it.
pub trait Chunk: Send + 'static {
    /// What this chunk means to a channel; `None` for chunks users do not see.
    fn piece(&self) -> Option<Piece<'_>>;

    /// The text of a text chunk, owned: what a streaming channel is handed. By default a copy
    /// of [`piece`](Self::piece)'s text; a chunk that owns its text gives it up instead.
    fn into_text(self) -> Option<String>
    where
        Self: Sized,
    {
        match self.piece() {
            Some(Piece::Text(text)) => Some(text.to_owned()),
            _ => None,
        }
    }
}

impl Chunk for String {
    fn piece(&self) -> Option<Piece<'_>> {
        Some(Piece::Text(self))
    }

    fn into_text(self) -> Option<String> {
        Some(self)
    }
}

impl Chunk for AgentEvent {
    #[inline]
    fn piece(&self) -> Option<Piece<'_>> {
        match self {
            Self::TextDelta { delta } => Some(Piece::Text(delta)),
            Self::ToolcallEnd { tool_call, .. } => Some(Piece::Tool(&tool_call.name)),
            Self::Error { error, .. } => Some(Piece::Failed(Cow::Borrowed(error))),
            Self::AwaitingToolExecution { tool_calls, .. } => {
                Some(Piece::Failed(Cow::Owned(format!(
                    "the agent waits for the results of tools a chat cannot run: {}",
                    names(tool_calls)
                ))))
            }
            Self::AwaitingApproval { tool_calls, .. } => Some(Piece::Failed(Cow::Owned(format!(
                "the agent waits for approval of tool calls a chat cannot approve: {}",
                names(tool_calls)
            )))),
            _ => None,
        }
    }

    #[inline]
    fn into_text(self) -> Option<String> {
        match self {
            Self::TextDelta { delta } => Some(delta),
            _ => None,
        }
    }
}

/// The tools of `calls`, for a user to read.
fn names(calls: &[bidi_llm::ToolCall]) -> String {
    calls
        .iter()
        .map(|call| call.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An agent the router can hold conversations with: it opens a connection on a session and
/// makes a turn's input from a user's text.
///
/// Implemented for [`LlmAgent`] and for any [`Agent`] whose input is made from a `String` and
/// whose chunks are [`Chunk`]s.
pub trait Backend: Send + Sync + 'static {
    /// A turn's input.
    type In: Send + 'static;
    /// The connection's output.
    type Out: Send + 'static;
    /// The chunks of a turn.
    type Chunk: Chunk;

    /// The agent's name, as `agent_response` events carry it.
    fn name(&self) -> &str;

    /// Opens a connection on the session `session_id`: resumed if it exists, created if not.
    fn connect(&self, session_id: &str) -> Connection<Self::In, Self::Out, Self::Chunk>;

    /// The input of a turn for a user's `text`.
    fn input(&self, text: String) -> Self::In;
}

impl Backend for LlmAgent {
    type In = TurnInput;
    type Out = AgentOutput<LlmSession, u32>;
    type Chunk = AgentEvent;

    fn name(&self) -> &str {
        self.agent().name()
    }

    fn connect(&self, session_id: &str) -> Connection<TurnInput, Self::Out, AgentEvent> {
        Self::connect(self, AgentInit::new().session_id(session_id))
    }

    fn input(&self, text: String) -> TurnInput {
        TurnInput::User(UserMessage::new(text))
    }
}

impl<State, In, Out, Stream> Backend for Agent<State, In, Out, Stream>
where
    State: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static,
    In: From<String> + Send + 'static,
    Out: Serialize + Send + 'static,
    Stream: Chunk,
{
    type In = In;
    type Out = AgentOutput<State, Out>;
    type Chunk = Stream;

    fn name(&self) -> &str {
        Self::name(self)
    }

    fn connect(&self, session_id: &str) -> Connection<In, Self::Out, Stream> {
        Self::connect(self, AgentInit::new().session_id(session_id))
    }

    fn input(&self, text: String) -> In {
        In::from(text)
    }
}

/// What the router announces on its bus ([`MessageRouter::subscribe`]): every message a user
/// sent and every complete reply, whether the channel streamed it or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A user's message, before the agent sees it.
    UserMessage {
        /// The message.
        text: String,
        /// Who sent it.
        user_id: String,
        /// Where from ([`Channel::id`]).
        channel_id: String,
    },
    /// The agent's whole reply, once it is complete (with the error, if the agent failed).
    AgentResponse {
        /// The reply.
        text: String,
        /// To whom.
        user_id: String,
        /// Where ([`Channel::id`]).
        channel_id: String,
        /// The agent session the reply belongs to.
        session_id: String,
        /// The agent ([`Backend::name`]).
        agent_id: String,
    },
}

/// A complete reply, as [`MessageRouter::handle`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reply {
    /// What the user got: the agent's text, followed by `(Error: ..)` if the agent failed.
    pub text: String,
    /// The agent session the reply belongs to.
    pub session_id: String,
    /// Why the agent stopped before it finished, if it did.
    pub error: Option<String>,
}

/// The defaults of a [`MessageRouter`].
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const DEFAULT_MAX_USERS: usize = 10_000;
const DEFAULT_BUS_CAPACITY: usize = 256;
/// Messages of one user that may wait behind the reply being written.
const USER_QUEUE: usize = 8;

/// Routes users' messages to an agent and its replies back to the users' channels.
///
/// Each user has one connection to the agent, on a session of their own, held by a task of its
/// own: one user's messages are answered one at a time, in order, while other users' are
/// answered at the same time. A user who is quiet for the idle timeout (30 minutes by default)
/// has their connection closed; their next message starts a new session. Dropping every
/// handle of the router (it is cheap to clone) closes every user's connection once the reply
/// being written is delivered; the bus closes after that.
///
/// For each message the router announces [`Event::UserMessage`], runs a turn, and delivers the
/// reply: chunk by chunk to a channel that [streams](Channel::streaming) (tool calls become
/// `Using: {tool}` statuses), whole through [`Channel::send_to_user`] to one that does not; then
/// it announces [`Event::AgentResponse`] with the whole text. If the agent fails midway, the
/// reply is the text so far followed by `(Error: ..)`.
///
/// ```
/// use std::sync::Arc;
///
/// use bidi_channel::{Event, MessageRouter, Terminal};
/// use bidi_llm::LlmAgent;
/// use bidi_llm::testing::{Scripted, ScriptedModel};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_channel::Error> {
/// let model = ScriptedModel::new([Scripted::new().text("Hello there!")]);
/// let router = MessageRouter::new(LlmAgent::builder("helper", model).build());
/// let mut events = router.subscribe();
///
/// // Prints "Hello there!" word by word.
/// let terminal = Arc::new(Terminal::stdout());
/// let reply = router.handle(terminal, "me", "hi").await?;
/// assert_eq!(reply.text, "Hello there!");
///
/// assert!(matches!(events.recv().await, Ok(Event::UserMessage { text, .. }) if text == "hi"));
/// assert!(matches!(events.recv().await, Ok(Event::AgentResponse { text, .. }) if text == "Hello there!"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MessageRouter {
    shared: Arc<Shared>,
    _owner: Arc<Owner>,
}

/// Dropped with the last router handle: lets every user's task go.
struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        let queues = std::mem::take(
            &mut self
                .0
                .users
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .map,
        );
        drop(queues);
    }
}

impl fmt::Debug for MessageRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageRouter")
            .field("agent", &self.shared.agent_id)
            .field("idle_timeout", &self.shared.idle_timeout)
            .field("max_users", &self.shared.max_users)
            .finish_non_exhaustive()
    }
}

/// Builds a [`MessageRouter`].
#[must_use]
pub struct MessageRouterBuilder<B> {
    backend: B,
    idle_timeout: Duration,
    max_users: usize,
    bus_capacity: usize,
}

impl<B> fmt::Debug for MessageRouterBuilder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageRouterBuilder")
            .field("idle_timeout", &self.idle_timeout)
            .field("max_users", &self.max_users)
            .field("bus_capacity", &self.bus_capacity)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> MessageRouterBuilder<B> {
    /// How long a user may be quiet before their session is rotated (30 minutes by default):
    /// their connection is closed, and their next message starts a new session.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How many users may have a conversation open at once (10,000 by default); a message from
    /// one more is refused with [`Error::TooManyUsers`] until another user's session rotates.
    pub fn max_users(mut self, max: usize) -> Self {
        self.max_users = max;
        self
    }

    /// How many events the bus keeps for a slow subscriber (256 by default); one that falls
    /// further behind misses the oldest (tokio's broadcast `Lagged`).
    pub fn bus_capacity(mut self, capacity: usize) -> Self {
        self.bus_capacity = capacity.max(1);
        self
    }

    /// The router.
    #[must_use]
    pub fn build(self) -> MessageRouter {
        let backend = Arc::new(self.backend);
        let agent_id = backend.name().to_owned();
        let spawn: SpawnWorker = Box::new(move |worker| {
            tokio::spawn(run_worker(Arc::clone(&backend), worker));
        });
        let shared = Arc::new(Shared {
            users: Mutex::new(Users::default()),
            events: broadcast::channel(self.bus_capacity).0,
            agent_id,
            idle_timeout: self.idle_timeout,
            max_users: self.max_users,
            spawn,
        });
        MessageRouter {
            _owner: Arc::new(Owner(Arc::clone(&shared))),
            shared,
        }
    }
}

type SpawnWorker = Box<dyn Fn(Worker) + Send + Sync>;

struct Shared {
    users: Mutex<Users>,
    events: broadcast::Sender<Event>,
    agent_id: String,
    idle_timeout: Duration,
    max_users: usize,
    spawn: SpawnWorker,
}

#[derive(Default)]
struct Users {
    map: HashMap<String, (u64, mpsc::Sender<Job>)>,
    generation: u64,
}

struct Job {
    text: String,
    channel: Arc<dyn Channel>,
    reply: oneshot::Sender<Result<Reply, Error>>,
}

/// What a user's task is given.
struct Worker {
    shared: Arc<Shared>,
    user_id: String,
    generation: u64,
    jobs: mpsc::Receiver<Job>,
}

impl MessageRouter {
    /// A router over `backend` with the default settings.
    pub fn new(backend: impl Backend) -> Self {
        Self::builder(backend).build()
    }

    /// Builds a router over `backend`.
    pub fn builder<B: Backend>(backend: B) -> MessageRouterBuilder<B> {
        MessageRouterBuilder {
            backend,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_users: DEFAULT_MAX_USERS,
            bus_capacity: DEFAULT_BUS_CAPACITY,
        }
    }

    /// The event bus: every [`Event`] from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// Answers `text` from `user_id` on `channel`: waits for the user's earlier messages to be
    /// answered, runs the agent's turn, delivers the reply to the channel (streamed, if the
    /// channel streams) and returns it.
    ///
    /// # Errors
    ///
    /// [`Error::TooManyUsers`] if the router already holds as many conversations as it may;
    /// [`Error::Delivery`] if the channel could not deliver the whole reply (the reply was still
    /// announced on the bus); [`Error::Interrupted`] if the user's task stopped before the reply
    /// (a channel panicked). An agent that fails is not an error here: its reply says so.
    ///
    /// # Cancel safety
    ///
    /// Once the message is queued, dropping the future does not withdraw it: the reply is still
    /// delivered to the channel and announced on the bus. Dropped before (while the user's
    /// queue is full), the message is not sent.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (the user's task is spawned).
    pub async fn handle(
        &self,
        channel: Arc<dyn Channel>,
        user_id: &str,
        text: impl Into<String>,
    ) -> Result<Reply, Error> {
        let (reply, answer) = oneshot::channel();
        let mut job = Job {
            text: text.into(),
            channel,
            reply,
        };
        // A user's task that is just quitting (idle) drops its queue: try once more with a new
        // one.
        loop {
            let queue = self.queue(user_id)?;
            match queue.send(job).await {
                Ok(()) => break,
                Err(mpsc::error::SendError(back)) => job = back,
            }
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::Interrupted {
                user_id: user_id.to_owned(),
            })
        })
    }

    /// The queue of `user_id`'s task, started if it is not running.
    fn queue(&self, user_id: &str) -> Result<mpsc::Sender<Job>, Error> {
        let mut users = self
            .shared
            .users
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, queue)) = users.map.get(user_id)
            && !queue.is_closed()
        {
            return Ok(queue.clone());
        }
        users.map.remove(user_id);
        if users.map.len() >= self.shared.max_users {
            return Err(Error::TooManyUsers {
                limit: self.shared.max_users,
            });
        }
        users.generation += 1;
        let generation = users.generation;
        let (queue, jobs) = mpsc::channel(USER_QUEUE);
        users
            .map
            .insert(user_id.to_owned(), (generation, queue.clone()));
        drop(users);
        (self.shared.spawn)(Worker {
            shared: Arc::clone(&self.shared),
            user_id: user_id.to_owned(),
            generation,
            jobs,
        });
        Ok(queue)
    }
}

impl Shared {
    fn emit(&self, event: Event) {
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    /// Takes the user's task out of the map (if it is still this one) and closes its queue: a
    /// message sent from now on goes to a new task, one already queued is still answered here.
    fn retire(&self, worker: &mut Worker) {
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        if users
            .map
            .get(&worker.user_id)
            .is_some_and(|(generation, _)| *generation == worker.generation)
        {
            users.map.remove(&worker.user_id);
        }
        worker.jobs.close();
    }
}

/// One user's task: their connection, one message at a time, until they are idle.
async fn run_worker<B: Backend>(backend: Arc<B>, mut worker: Worker) {
    let session_id = bidi_session::new_id();
    let mut conn: Option<Connection<B::In, B::Out, B::Chunk>> = None;
    loop {
        let job = match tokio::time::timeout(worker.shared.idle_timeout, worker.jobs.recv()).await {
            Ok(Some(job)) => job,
            Ok(None) => break,
            Err(_idle) => {
                // What was queued meanwhile is still answered; then `recv` says `None`.
                let shared = Arc::clone(&worker.shared);
                shared.retire(&mut worker);
                continue;
            }
        };
        let live = conn.get_or_insert_with(|| backend.connect(&session_id));
        let (result, broken) = turn(
            &*backend,
            live,
            &worker,
            &session_id,
            job.text,
            &*job.channel,
        )
        .await;
        if broken {
            // The next message reconnects to the same session.
            conn = None;
        }
        let _ = job.reply.send(result);
    }
    if let Some(conn) = conn {
        // Let the agent finish and save its session.
        conn.close();
        let _ = conn.output().await;
    }
}

/// One message and its reply. Returns the reply and whether the connection is over.
async fn turn<B: Backend>(
    backend: &B,
    conn: &mut Connection<B::In, B::Out, B::Chunk>,
    worker: &Worker,
    session_id: &str,
    text: String,
    channel: &dyn Channel,
) -> (Result<Reply, Error>, bool) {
    let user_id = worker.user_id.as_str();
    let shared = &worker.shared;
    shared.emit(Event::UserMessage {
        text: text.clone(),
        user_id: user_id.to_owned(),
        channel_id: channel.id().to_owned(),
    });
    let streaming = channel.streaming();
    if let Some(stream) = streaming
        && let Err(error) = stream.start(user_id).await
    {
        log(channel, user_id, "start", &*error);
    }
    let mut wire = Replying::<B::Chunk>::new(streaming.is_some());
    let mut broken = false;
    match conn.send(backend.input(text)).await {
        Err(error) => {
            wire.failure = Some(error.to_string());
            broken = true;
        }
        Ok(()) => {
            let mut responses = conn.responses();
            let sink = Calls {
                stream: streaming,
                channel,
                user_id,
            };
            bidi_flow::wire::pump(&mut responses, None, &mut wire, &sink, None).await;
            if !responses.turn_ended() {
                broken = true;
                wire.failure
                    .get_or_insert_with(|| "the agent ended the conversation".to_owned());
            }
        }
    }
    let Replying {
        text: reply,
        failure,
        ..
    } = wire;
    let full = match &failure {
        None => reply,
        Some(error) if reply.is_empty() => format!("(Error: {error})"),
        Some(error) => format!("{reply}\n\n(Error: {error})"),
    };
    let delivered = match streaming {
        Some(stream) => stream.end(user_id, &full).await,
        None => channel.send_to_user(user_id, &full).await,
    };
    shared.emit(Event::AgentResponse {
        text: full.clone(),
        user_id: user_id.to_owned(),
        channel_id: channel.id().to_owned(),
        session_id: session_id.to_owned(),
        agent_id: shared.agent_id.clone(),
    });
    let result = match delivered {
        Ok(()) => Ok(Reply {
            text: full,
            session_id: session_id.to_owned(),
            error: failure,
        }),
        Err(source) => Err(Error::Delivery {
            user_id: user_id.to_owned(),
            channel_id: channel.id().to_owned(),
            text: full,
            source,
        }),
    };
    (result, broken)
}

/// A reply as a wire: its text and failure kept, and with a streaming channel, each piece
/// as the streaming call that shows it.
struct Replying<C> {
    text: String,
    failure: Option<String>,
    streaming: bool,
    chunks: PhantomData<fn(C)>,
}

impl<C> Replying<C> {
    fn new(streaming: bool) -> Self {
        Self {
            text: String::new(),
            failure: None,
            streaming,
            chunks: PhantomData,
        }
    }
}

impl<C: Chunk> Wire for Replying<C> {
    type Event = C;
    type Output = ();
    type Frames = Shown;

    #[inline]
    fn event(&mut self, chunk: C, out: &mut Shown) {
        let text = match chunk.piece() {
            Some(Piece::Text(text)) => {
                self.text.push_str(text);
                true
            }
            Some(Piece::Tool(name)) if self.streaming => {
                out.0 = Some(Show::Status(format!("Using: {name}")));
                false
            }
            Some(Piece::Failed(error)) => {
                self.failure.get_or_insert_with(|| error.into_owned());
                false
            }
            Some(Piece::Tool(_)) | None => false,
        };
        if text && self.streaming {
            out.0 = chunk.into_text().map(Show::Chunk);
        }
    }

    fn failed(&mut self, message: &str, _: &mut Shown) {
        self.failure.get_or_insert_with(|| message.to_owned());
    }
}

/// The streaming call a piece of a reply makes: one at a time, as the agent streams them.
#[derive(Debug, Default)]
struct Shown(Option<Show>);

#[derive(Debug)]
enum Show {
    Chunk(String),
    Status(String),
}

impl Frames for Shown {
    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Each piece goes as it comes: a channel shows the reply as the agent streams it.
    fn is_full(&self) -> bool {
        self.0.is_some()
    }
}

/// The streaming calls of one user's reply. A call that fails is logged and the reply goes
/// on: its end carries the whole text.
struct Calls<'a> {
    stream: Option<&'a dyn StreamingChannel>,
    channel: &'a dyn Channel,
    user_id: &'a str,
}

impl Sink<Shown> for Calls<'_> {
    async fn send(&self, shown: Shown) -> Result<(), Closed> {
        let Some(stream) = self.stream else {
            return Ok(());
        };
        let (call, result) = match shown.0 {
            Some(Show::Chunk(text)) => ("chunk", stream.chunk(self.user_id, &text).await),
            Some(Show::Status(status)) => ("status", stream.status(self.user_id, &status).await),
            None => return Ok(()),
        };
        if let Err(error) = result {
            log(self.channel, self.user_id, call, &*error);
        }
        Ok(())
    }
}

fn log(
    channel: &dyn Channel,
    user_id: &str,
    call: &str,
    error: &(dyn std::error::Error + Send + Sync),
) {
    tracing::warn!(channel = channel.id(), user_id, call, %error, "channel error; the reply goes on");
}
