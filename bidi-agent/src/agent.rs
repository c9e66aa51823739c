//! [`Agent`]: a [`BidiFlow`] over a [`Session`] (A1–A4).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use bidi_core::{ActionContext, BoxError, ConnectOptions, Connection, Error, Inbound, Outbound};
use bidi_flow::{ActionType, BidiFlow};
use bidi_session::{MemoryStore, Session, SessionStore};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TraceContextExt as _;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::responder::{Artifact, Responder, put};

/// How a connection to an agent picks its session (A2).
///
/// ```
/// use bidi_agent::AgentInit;
///
/// let resume = AgentInit::<Vec<String>>::new().session_id("chat-42");
/// let fresh = AgentInit::new().init(vec!["system: be brief".to_owned()]);
/// // What a transport sends as the init of a JSON connection:
/// assert_eq!(serde_json::to_string(&resume).unwrap(), r#"{"sessionId":"chat-42"}"#);
/// assert_eq!(serde_json::to_string(&fresh).unwrap(), r#"{"state":["system: be brief"]}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AgentInit_for_{State}")]
pub struct AgentInit<State> {
    /// The session to resume, or to create under this id if it does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The state a new session starts with (ignored when resuming); `State::default()` if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

impl<State> Default for AgentInit<State> {
    fn default() -> Self {
        Self {
            session_id: None,
            state: None,
        }
    }
}

impl<State> AgentInit<State> {
    /// A new session with a fresh UUID and the default state.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Resumes session `id`, or creates it under this id.
    #[must_use]
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }

    /// The state a new session starts with; ignored when the session exists.
    #[must_use]
    pub fn init(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }
}

/// What an agent function returns (A1).
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
        put(&mut self.artifacts, artifact);
        self
    }
}

/// What a connection to an agent ends with (A2): camelCase JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AgentOutput_for_{State}_and_{Out}")]
#[non_exhaustive]
pub struct AgentOutput<State, Out> {
    /// The session the connection used.
    pub session_id: String,
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
}

/// Builds an [`Agent`]: the store, the description, then the function.
#[derive(Debug)]
#[must_use]
pub struct AgentBuilder {
    name: String,
    store: Option<Arc<dyn SessionStore>>,
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
            description: None,
            tracer: None,
        }
    }
}

impl AgentBuilder {
    /// Keeps sessions in `store` (default: a new [`MemoryStore`] keeping the latest version of
    /// each session).
    pub fn store(mut self, store: impl SessionStore) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Keeps sessions in a store shared with others.
    pub fn shared_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
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
    pub fn build<State, In, Out, Stream, F, Fut, E>(self, f: F) -> Agent<State, In, Out, Stream>
    where
        State: Serialize + DeserializeOwned + JsonSchema + Default + Clone + Send + Sync + 'static,
        In: Send + 'static,
        Out: Serialize + Send + 'static,
        Stream: Send + 'static,
        F: Fn(ActionContext, Session<State>, Inbound<In>, Responder<Stream>) -> Fut
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = Result<AgentResult<Out>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(MemoryStore::new().with_retention(1)));
        let sessions = Arc::clone(&store);
        let f = Arc::new(f);
        let flow = BidiFlow::new(
            self.name,
            move |ctx: ActionContext,
                  init: AgentInit<State>,
                  inbound: Inbound<In>,
                  out: Outbound<Stream>| {
                let (store, f) = (Arc::clone(&sessions), Arc::clone(&f));
                async move {
                    let AgentInit { session_id, state } = init;
                    let id = match session_id {
                        Some(id) if id.is_empty() => return Err("the session id is empty".into()),
                        Some(id) => id,
                        None => uuid::Uuid::new_v4().to_string(),
                    };
                    opentelemetry::Context::current()
                        .span()
                        .set_attribute(KeyValue::new("bidi.session_id", id.clone()));
                    let session =
                        Session::load_or_create(store, &id, || state.unwrap_or_default()).await?;
                    let responder = Responder::new(out);
                    let result = f(ctx, session.clone(), inbound, responder.clone())
                        .await
                        .map_err(Into::into)?;
                    let mut artifacts = responder.artifacts();
                    for artifact in result.artifacts {
                        put(&mut artifacts, artifact);
                    }
                    Ok::<_, BoxError>(AgentOutput {
                        session_id: id,
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
        Agent { flow, store }
    }
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

    /// Connects: the session is resumed or created as `init` says (A2).
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

    /// Connects with options (buffers, a parent token, extensions).
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
    /// As [`Connection::output`]: a store failure while opening the session is
    /// [`Error::Action`] with the [`StoreError`](bidi_session::StoreError) as source.
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

    /// Loads a session of this agent's store.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn session(
        &self,
        id: &str,
    ) -> Result<Option<Session<State>>, bidi_session::StoreError> {
        Session::load(Arc::clone(&self.store), id).await
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
