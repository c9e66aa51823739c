//! [`Agent`]: a [`BidiFlow`] over a [`Session`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use bidi_core::{
    ActionContext, ActionFn, ActionFuture, BoxError, ConnectOptions, Connection, Error, Inbound,
    Outbound,
};
use bidi_flow::{ActionType, BidiFlow};
use bidi_session::{MemoryStore, Session, SessionStore, StoreError};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TraceContextExt as _;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::responder::{Artifact, Responder};
use crate::scope::Scope;

/// How a connection to an agent picks its session.
///
/// - no session id: a new session under a fresh UUID, starting from [`init`](Self::init)
///   (or `State::default()`);
/// - [`session_id`](Self::session_id): that session if it exists (the init state is ignored),
///   else a new one under this id;
/// - [`resume`](Self::resume): that session, which must exist: if it does not, the connection
///   fails with [`StoreError::NotFound`] and nothing is created.
///
/// A transport sends it as camelCase JSON, the init of a JSON connection:
///
/// ```
/// use bidi_agent::AgentInit;
///
/// let fresh = AgentInit::new().init(vec!["system: be brief".to_owned()]);
/// let open = AgentInit::<Vec<String>>::new().session_id("chat-42");
/// let resume = AgentInit::<Vec<String>>::new().resume("chat-42");
/// assert_eq!(serde_json::to_string(&fresh).unwrap(), r#"{"state":["system: be brief"]}"#);
/// assert_eq!(serde_json::to_string(&open).unwrap(), r#"{"sessionId":"chat-42"}"#);
/// assert_eq!(
///     serde_json::to_string(&resume).unwrap(),
///     r#"{"sessionId":"chat-42","resume":true}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(
    rename = "AgentInit_for_{State}",
    description = "Which session the connection works on: a new one (no sessionId), the one \
                   sessionId names (made under that id if there is none yet), or, with resume, \
                   only an existing one."
)]
pub struct AgentInit<State> {
    /// The session to resume, or to create under this id if it does not exist (unless
    /// `resume`).
    #[schemars(
        description = "The session to go on with, or to create under this id if there is none \
                       (unless resume is set)."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The state a new session starts with (ignored when resuming); `State::default()` if absent.
    #[schemars(
        description = "The state a new session starts with (ignored when the session exists); \
                       without it, the agent's empty state."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
    /// Only resume: the session `session_id` names must exist; if it does not, the connection
    /// fails with [`StoreError::NotFound`] instead of creating it.
    #[schemars(
        description = "Only go on with an existing session: if sessionId names none, the \
                       connection fails (not found) instead of creating it."
    )]
    #[serde(default, skip_serializing_if = "is_false")]
    pub resume: bool,
    /// Resume the session at this snapshot: its first write branches from it, leaving the
    /// snapshots that followed it as they are. With `session_id` too, the snapshot must be
    /// one of that session's.
    #[schemars(
        description = "Go on from this snapshot of the session: its first write branches from \
                       it, and the snapshots after it stay as they are. With sessionId too, the \
                       snapshot must be one of that session's."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

// `skip_serializing_if` takes a path to a fn of `&T`.
fn is_false(value: &bool) -> bool {
    !*value
}

impl<State> Default for AgentInit<State> {
    fn default() -> Self {
        Self {
            session_id: None,
            state: None,
            resume: false,
            snapshot_id: None,
        }
    }
}

impl<State> AgentInit<State> {
    /// A new session with a fresh UUID and the default state.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Resumes session `id`, or creates it under this id if it does not exist.
    #[must_use]
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self.resume = false;
        self
    }

    /// Resumes session `id`, which must exist: if it does not, the connection fails with
    /// [`StoreError::NotFound`] (before it takes any input) and nothing is created.
    #[must_use]
    pub fn resume(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self.resume = true;
        self
    }

    /// Resumes the session at snapshot `id`, which must exist: the connection's first write
    /// branches from it, and the snapshots that followed it stay as they are.
    #[must_use]
    pub fn snapshot(mut self, id: impl Into<String>) -> Self {
        self.snapshot_id = Some(id.into());
        self
    }

    /// The state a new session starts with; ignored when the session exists.
    #[must_use]
    pub fn init(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }
}

/// An [`AgentInit`] an agent refuses: the connection fails with it before it takes any input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// The session id is the empty string.
    #[error("the session id is empty")]
    EmptySessionId,
    /// `resume` without a session id: there is no session to resume.
    #[error("`resume` needs a session id: there is no session to resume")]
    ResumeWithoutSessionId,
    /// The session id is longer than [`MAX_SESSION_ID_BYTES`].
    #[error("the session id is {len} bytes long; at most {MAX_SESSION_ID_BYTES} are allowed")]
    SessionIdTooLong {
        /// How long it is, in bytes.
        len: usize,
    },
    /// The session id has a control character (a line break, an escape): ids travel in
    /// headers and log lines, where those forge or break what follows.
    #[error("the session id has a control character")]
    ControlInSessionId,
    /// A snapshot to resume at, with the id of another session than its own.
    #[error("snapshot `{snapshot_id}` does not belong to session `{session_id}`")]
    SnapshotOfAnotherSession {
        /// The snapshot.
        snapshot_id: String,
        /// The session the init named.
        session_id: String,
    },
    /// A session or a snapshot to resume, on an agent whose clients keep their sessions
    /// ([`AgentBuilder::client_managed`]): it has none to resume.
    #[error(
        "this agent keeps no sessions (its client sends the state each time): there is no \
         session or snapshot to resume"
    )]
    ClientManaged,
}

/// The longest session id an agent takes, in bytes: ids travel in headers (which proxies
/// limit), URLs and log lines.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// What an agent function returns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AgentResult<Out> {
    /// The output.
    pub output: Out,
    /// Artifacts, added to (or replacing by name) those published through the [`Responder`].
    pub artifacts: Vec<Artifact>,
}

impl<Out> AgentResult<Out> {
    /// A result with `output` and no artifacts.
    pub fn new(output: Out) -> Self {
        Self {
            output,
            artifacts: Vec::new(),
        }
    }

    /// Adds an artifact.
    #[must_use]
    pub fn with_artifact(mut self, artifact: Artifact) -> Self {
        artifact.put_in(&mut self.artifacts);
        self
    }
}

/// What a connection to an agent ends with: camelCase JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AgentOutput_for_{State}_and_{Out}")]
#[non_exhaustive]
pub struct AgentOutput<State, Out> {
    /// The session the connection used.
    pub session_id: String,
    /// The session's latest snapshot when the function returned.
    pub snapshot_id: String,
    /// The agent function's output.
    pub output: Out,
    /// The session's state when the function returned.
    pub state: State,
    /// Every artifact published, by name.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

/// A turn-aware agent: a [`BidiFlow`] (registered as `/agent/{name}`, its spans carrying
/// `bidi.session_id`) whose function works on a [`Session`] and answers through a [`Responder`].
///
/// Build one with [`Agent::builder`]. Cheap to clone.
pub struct Agent<State, In, Out, Stream> {
    flow: BidiFlow<AgentInit<State>, In, AgentOutput<State, Out>, Stream>,
    store: Arc<dyn SessionStore>,
    client_managed: bool,
}

/// Builds an [`Agent`]: the store, the description, then the function.
#[derive(Debug)]
#[must_use]
pub struct AgentBuilder {
    name: String,
    store: Option<Arc<dyn SessionStore>>,
    client_managed: bool,
    description: Option<String>,
    tracer: Option<BoxedTracer>,
}

// On one concrete type so that `Agent::builder(..)` needs no type annotations: the agent's
// types come from the function given to `build`.
impl Agent<(), (), (), ()> {
    /// Starts building an agent named `name`.
    pub fn builder(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder {
            name: name.into(),
            store: None,
            client_managed: false,
            description: None,
            tracer: None,
        }
    }
}

impl AgentBuilder {
    /// Keeps sessions in `store`: a store of its own, or one shared with others as an
    /// `Arc<dyn SessionStore>` (used as it is, not wrapped again).
    ///
    /// Without a store, sessions live in a [`MemoryStore`] of the agent's own, bounded: at most
    /// 1024 sessions, and the latest 256 snapshots of each (`MemoryStore::new()
    /// .with_max_sessions(1024).with_max_snapshots(256)`). Creating one more session drops the
    /// least recently used (loaded or written), so memory stays bounded however many sessions
    /// come and go; a connection still
    /// open on a dropped session fails its next [`Session::update`] with
    /// [`StoreError::NotFound`]. Nothing survives the process: give a `bidi_session::SqliteStore`
    /// (bidi-session's feature `sqlite`, on by default) or another persistent store to keep
    /// sessions.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use bidi_agent::{Agent, AgentResult, Responder};
    /// use bidi_core::{ActionContext, BoxError, Inbound};
    /// use bidi_session::{MemoryStore, Session, SessionStore};
    ///
    /// async fn quiet(
    ///     _ctx: ActionContext,
    ///     _session: Session<u32>,
    ///     _inbound: Inbound<String>,
    ///     _out: Responder<String>,
    /// ) -> Result<AgentResult<()>, BoxError> {
    ///     Ok(AgentResult::new(()))
    /// }
    ///
    /// let shared: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    /// let agent = Agent::builder("quiet").store(Arc::clone(&shared)).build(quiet);
    /// assert!(Arc::ptr_eq(agent.store(), &shared));
    /// ```
    pub fn store(mut self, store: impl SessionStore) -> Self {
        self.store = Some(shared(store));
        self
    }

    /// Keeps no sessions: each connection's client holds its session's state and sends it
    /// with the init ([`AgentInit::init`], under its [`session_id`](AgentInit::session_id) or
    /// a fresh one), and takes the state back from the connection's [`AgentOutput`]. Nothing is
    /// stored between connections (a connection's snapshots live in memory until it ends), and
    /// an init that names a session to [`resume`](AgentInit::resume) or a
    /// [`snapshot`](AgentInit::snapshot) is refused with [`InitError::ClientManaged`]. Genkit
    /// calls such an agent's state *client-managed*; a [`store`](Self::store) is not used.
    ///
    /// ```
    /// use bidi_agent::{Agent, AgentInit, AgentResult, Responder};
    /// use bidi_core::{ActionContext, BoxError, Inbound};
    /// use bidi_session::Session;
    ///
    /// async fn count(
    ///     _ctx: ActionContext,
    ///     session: Session<u32>,
    ///     _inbound: Inbound<()>,
    ///     _out: Responder<()>,
    /// ) -> Result<AgentResult<()>, BoxError> {
    ///     session.update(|n| *n += 1).await?;
    ///     Ok(AgentResult::new(()))
    /// }
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let agent = Agent::builder("count").client_managed().build(count);
    /// let first = agent.run(AgentInit::new(), ()).await?;
    /// let second = agent.run(AgentInit::new().init(first.state), ()).await?;
    /// assert_eq!(second.state, 2);
    /// assert!(agent.session(&second.session_id).await?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client_managed(mut self) -> Self {
        self.client_managed = true;
        self
    }

    /// Sets the description shown in the registry.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Traces with `tracer` instead of the global provider's.
    pub fn tracer(mut self, tracer: BoxedTracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// Builds the agent around `f`, which runs once per connection with the connection's
    /// session, its inputs and a [`Responder`].
    pub fn build<State, In, Out, Stream, F, Fut>(self, f: F) -> Agent<State, In, Out, Stream>
    where
        State: Serialize + DeserializeOwned + JsonSchema + Default + Clone + Send + Sync + 'static,
        In: Send + 'static,
        Out: Serialize + Send + 'static,
        Stream: Send + 'static,
        F: ActionFn<Session<State>, In, Responder<Stream>, Fut>,
        Fut: ActionFuture<AgentResult<Out>>,
    {
        let store = self.store.unwrap_or_else(|| {
            let store = MemoryStore::new()
                .with_max_sessions(DEFAULT_SESSIONS)
                .with_max_snapshots(DEFAULT_SNAPSHOTS);
            Arc::new(store)
        });
        let sessions = Arc::clone(&store);
        let client_managed = self.client_managed;
        let f = Arc::new(f);
        let flow = BidiFlow::new(
            self.name,
            move |ctx: ActionContext,
                  init: AgentInit<State>,
                  inbound: Inbound<In>,
                  out: Outbound<Stream>| {
                let (store, f) = (Arc::clone(&sessions), Arc::clone(&f));
                async move {
                    // Before any input is taken: a session that cannot be opened fails the
                    // first send with the error, not just with "completed".
                    let scope = ctx.extensions().get::<Scope>();
                    let session = if client_managed {
                        open_client_session(init).await?
                    } else {
                        open_session(store, scope, ctx.name(), init).await?
                    };
                    let id = session.id().to_owned();
                    let responder = Responder::new(out);
                    let result = f(ctx, session.clone(), inbound, responder.clone())
                        .await
                        .map_err(Into::into)?;
                    let mut artifacts = responder.artifacts();
                    for artifact in result.artifacts {
                        artifact.put_in(&mut artifacts);
                    }
                    Ok::<_, BoxError>(AgentOutput {
                        session_id: id,
                        snapshot_id: session.snapshot_id(),
                        output: result.output,
                        state: session.state(),
                        artifacts,
                    })
                }
            },
        )
        .with_action_type(ActionType::AGENT)
        .with_metadata("agent", json!({ "stateSchema": state_schema::<State>() }));
        let flow = match self.description {
            Some(description) => flow.with_description(description),
            None => flow,
        };
        let flow = match self.tracer {
            Some(tracer) => flow.with_tracer(tracer),
            None => flow,
        };
        Agent {
            flow,
            store,
            client_managed,
        }
    }
}

/// `store` as an `Arc<dyn SessionStore>`: an `Arc<dyn SessionStore>` as it is, so the agent
/// shares it with whoever else holds it; anything else in an `Arc` of its own.
fn shared<S: SessionStore>(store: S) -> Arc<dyn SessionStore> {
    let store = Arc::new(store);
    match (&*store as &dyn Any).downcast_ref::<Arc<dyn SessionStore>>() {
        Some(shared) => Arc::clone(shared),
        None => store,
    }
}

/// The agents' default store: at most this many sessions...
const DEFAULT_SESSIONS: usize = 1024;

/// ...and this many snapshots of each.
const DEFAULT_SNAPSHOTS: usize = 256;

/// Opens the session `init` names (within `scope`, if the connection has one): resumes it,
/// creates it, or fails as [`AgentInit`] says.
async fn open_session<State>(
    store: Arc<dyn SessionStore>,
    scope: Option<&Scope>,
    agent: &str,
    init: AgentInit<State>,
) -> Result<Session<State>, BoxError>
where
    State: Serialize + DeserializeOwned + Default + Clone + Send + 'static,
{
    let AgentInit {
        session_id,
        state,
        resume,
        snapshot_id,
    } = init;
    if let Some(snapshot_id) = snapshot_id {
        return open_snapshot(store, scope, agent, session_id.as_deref(), &snapshot_id).await;
    }
    let id = match session_id {
        None if resume => return Err(InitError::ResumeWithoutSessionId.into()),
        id => checked_id(id)?,
    };
    let store = match scope {
        Some(scope) => Arc::new(scope.sessions(agent, store)),
        None => store,
    };
    if resume {
        return Session::load(store, &id)
            .await?
            .ok_or_else(|| StoreError::not_found(id).into());
    }
    Ok(Session::load_or_create(store, &id, || state.unwrap_or_default()).await?)
}

/// A session id from an init, checked, or a fresh UUID; the connection's span records it.
fn checked_id(id: Option<String>) -> Result<String, InitError> {
    let id = match id {
        Some(id) if id.is_empty() => return Err(InitError::EmptySessionId),
        Some(id) if id.len() > MAX_SESSION_ID_BYTES => {
            return Err(InitError::SessionIdTooLong { len: id.len() });
        }
        Some(id) if id.chars().any(char::is_control) => {
            return Err(InitError::ControlInSessionId);
        }
        Some(id) => id,
        None => bidi_session::new_id(),
    };
    opentelemetry::Context::current()
        .span()
        .set_attribute(KeyValue::new("bidi.session_id", id.clone()));
    Ok(id)
}

/// Opens the session of a client-managed agent's connection: the init's state, under its
/// session id (or a fresh one), in a store of the connection's own.
async fn open_client_session<State>(init: AgentInit<State>) -> Result<Session<State>, BoxError>
where
    State: Serialize + DeserializeOwned + Default + Clone + Send + 'static,
{
    if init.resume || init.snapshot_id.is_some() {
        return Err(InitError::ClientManaged.into());
    }
    let id = checked_id(init.session_id)?;
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let state = init.state.unwrap_or_default();
    Ok(Session::load_or_create(store, &id, || state).await?)
}

/// Opens the session at snapshot `snapshot_id` (within `scope`), which must be one of session
/// `session_id`'s if that is given.
async fn open_snapshot<State>(
    store: Arc<dyn SessionStore>,
    scope: Option<&Scope>,
    agent: &str,
    session_id: Option<&str>,
    snapshot_id: &str,
) -> Result<Session<State>, BoxError>
where
    State: Serialize + DeserializeOwned + Default + Clone + Send + 'static,
{
    let store = match scope {
        Some(scope) => Arc::new(scope.sessions(agent, store)),
        None => store,
    };
    let missing = || StoreError::NotFound(bidi_core::NotFound::new("snapshot", snapshot_id));
    let session = Session::load_snapshot(store, snapshot_id)
        .await?
        .ok_or_else(missing)?;
    if let Some(session_id) = session_id.filter(|id| *id != session.id()) {
        return Err(InitError::SnapshotOfAnotherSession {
            snapshot_id: snapshot_id.to_owned(),
            session_id: session_id.to_owned(),
        }
        .into());
    }
    opentelemetry::Context::current()
        .span()
        .set_attribute(KeyValue::new("bidi.session_id", session.id().to_owned()));
    Ok(session)
}

fn state_schema<State: JsonSchema>() -> serde_json::Value {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<State>()
        .to_value()
}

impl<State, In, Out, Stream> Agent<State, In, Out, Stream>
where
    State: Serialize + DeserializeOwned + Clone + Send + 'static,
    In: Send + 'static,
    Out: Serialize + Send + 'static,
    Stream: Send + 'static,
{
    /// The agent's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.flow.name()
    }

    /// Connects: the session is resumed or created as `init` says.
    ///
    /// The session is opened before the connection takes any input. If it cannot be (the store
    /// fails, a session to [`resume`](AgentInit::resume) is missing, the init is refused with
    /// an [`InitError`]), the first [`send`](Connection::send) fails with
    /// [`SendError::Failed`](bidi_core::SendError::Failed) carrying that error, and
    /// [`output`](Connection::output) returns it: [`Error::Action`], whose source is the
    /// [`StoreError`] or the [`InitError`].
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect(
        &self,
        init: AgentInit<State>,
    ) -> Connection<In, AgentOutput<State, Out>, Stream> {
        self.flow.connect(init)
    }

    /// Connects with options (buffers, a parent token, extensions), as [`connect`](Self::connect).
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect_with(
        &self,
        init: AgentInit<State>,
        options: ConnectOptions,
    ) -> Connection<In, AgentOutput<State, Out>, Stream> {
        self.flow.connect_with(init, options)
    }

    /// One turn on a connection of its own: `input` is the only input.
    ///
    /// # Errors
    ///
    /// As [`Connection::output`]: a session that cannot be opened is [`Error::Action`] with
    /// the [`StoreError`] (or the [`InitError`]) as source.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the agent.
    pub async fn run(
        &self,
        init: AgentInit<State>,
        input: In,
    ) -> Result<AgentOutput<State, Out>, Error> {
        self.flow.run(init, input).await
    }

    /// Loads a session of this agent's store, by its unscoped id: a session of a
    /// connection with a [`Scope`] is loaded through [`Scope::sessions`] instead,
    /// `Session::load(Arc::new(scope.sessions(agent.name(), agent.store().clone())), id)`.
    ///
    /// # Errors
    ///
    /// The store's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it loses nothing.
    pub async fn session(&self, id: &str) -> Result<Option<Session<State>>, StoreError> {
        Session::load(Arc::clone(&self.store), id).await
    }

    /// Whether the agent's clients keep their sessions ([`AgentBuilder::client_managed`]).
    #[must_use]
    pub fn is_client_managed(&self) -> bool {
        self.client_managed
    }

    /// The store sessions live in.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The flow underneath, to register or trace differently.
    #[must_use]
    pub fn flow(&self) -> &BidiFlow<AgentInit<State>, In, AgentOutput<State, Out>, Stream> {
        &self.flow
    }

    /// The flow underneath, for [`Registry::register`](bidi_flow::Registry::register).
    #[must_use]
    pub fn into_flow(self) -> BidiFlow<AgentInit<State>, In, AgentOutput<State, Out>, Stream> {
        self.flow
    }
}

impl<State, In, Out, Stream> Clone for Agent<State, In, Out, Stream> {
    fn clone(&self) -> Self {
        Self {
            flow: self.flow.clone(),
            store: Arc::clone(&self.store),
            client_managed: self.client_managed,
        }
    }
}

impl<State, In, Out, Stream> fmt::Debug for Agent<State, In, Out, Stream> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("flow", &self.flow)
            .field("store", &self.store)
            .finish()
    }
}
