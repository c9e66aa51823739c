//! [`LlmAgent`]: the agent loop served as a `bidi-agent` [`Agent`], one execution per input.

use std::sync::Arc;
use std::time::Duration;

use bidi_agent::{Agent, AgentBuilder, AgentInit, AgentOutput, AgentResult, Responder};
use bidi_core::{ActionContext, BoxError, ConnectOptions, Connection, Inbound};
use bidi_session::{Session, SessionStore};

use crate::custom::{CustomFn, CustomTurn};
use crate::error::Error;
use crate::event::AgentEvent;
use crate::message::{ToolResultMessage, UserMessage};
use crate::model::{Model, ModelEvent, ModelRequest};
use crate::policy::Policy;
use crate::retry::Retry;
use crate::session::{self, Approval, Context, LlmSession, Resume, Status, TurnInput};
use crate::state::TurnState;
use crate::takeover::{self, TakeOver};
use crate::tool::Tool;
use crate::turn::{self, Config, Turn};

/// An LLM agent: a model, tools, and a turn limit, served as a `bidi-agent` [`Agent`]
/// (registered as `/agent/{name}`) whose turn input is a [`TurnInput`] and whose chunks are
/// [`AgentEvent`]s, one turn per execution.
///
/// An execution holds its session for its whole run: as it starts it writes a pending snapshot
/// with a [`Lease`](crate::Lease) (compare-and-swap on the session's head), renews the lease
/// while it runs, and as it ends writes what it added and how it ended (`completed`, `failed`
/// with the error, `aborted`), also when it fails or is cancelled; `session_start` and
/// `session_end` name that snapshot. An input for a session another execution holds, in this
/// process or another one sharing the store, is refused with an `error` event (code
/// `session_running`) and leaves the session unchanged. An execution whose snapshot is aborted
/// ([`SessionStore::abort`](bidi_session::SessionStore::abort), from any process sharing the
/// store) stops at its next renewal, as a cancelled one does, and its connection goes on.
///
/// A cancelled execution stops at once: the model's answer so far is kept as an aborted
/// message, the local tools still running are dropped and get error results saying so, and the
/// session is written.
///
/// Events that are ready together (a provider's buffered tokens, a tool's burst of output)
/// reach the consumer in one hand-off ([`Outbound::send_batch`](bidi_core::Outbound::send_batch)),
/// and the loop hands over what it has before it waits for anything, so no event waits for
/// company.
#[derive(Clone)]
pub struct LlmAgent {
    agent: Agent<LlmSession, TurnInput, u32, AgentEvent>,
    config: Arc<Config>,
}

impl std::fmt::Debug for LlmAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmAgent")
            .field("agent", &self.agent)
            .finish()
    }
}

/// Builds an [`LlmAgent`].
#[must_use]
pub struct LlmAgentBuilder {
    agent: AgentBuilder,
    name: String,
    model: Arc<dyn Model>,
    choices: Vec<Arc<dyn Model>>,
    retry: Option<Retry>,
    fallbacks: Vec<Arc<dyn Model>>,
    custom: Option<CustomFn>,
    tools: Vec<Tool>,
    max_turns: u32,
    lease: Duration,
    at_most_once: bool,
    record_content: bool,
}

impl std::fmt::Debug for LlmAgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmAgentBuilder")
            .field("agent", &self.agent)
            .field("model", &self.model.name())
            .field("tools", &self.tools)
            .field("max_turns", &self.max_turns)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// The shortest lease term.
const MIN_LEASE: Duration = Duration::from_secs(1);

impl LlmAgent {
    /// An agent named `name` calling `model`.
    pub fn builder(name: impl Into<String>, model: impl Model) -> LlmAgentBuilder {
        let name = name.into();
        LlmAgentBuilder {
            agent: Agent::builder(name.clone()).description("An LLM agent loop with tools"),
            name,
            model: Arc::new(model),
            choices: Vec::new(),
            retry: None,
            fallbacks: Vec::new(),
            custom: None,
            tools: Vec::new(),
            max_turns: 10,
            lease: Duration::from_secs(30),
            at_most_once: false,
            record_content: false,
        }
    }

    /// An agent whose executions answer with `f` instead of a model: Genkit's *custom agent*.
    /// `f` runs once per execution with a [`CustomTurn`]: the conversation (the user's message
    /// last), the session's custom state and artifacts to read and change, and the answer to
    /// stream; the text it returns ends the answer. Everything else is an agent's: the
    /// execution's snapshot and lease, its events (`custom_update` and `artifact_update` for
    /// what it changes), cancellation and abort (the function's future is dropped), and every
    /// wire that serves an agent. An error from `f` fails the execution with its message.
    ///
    /// ```
    /// use bidi_agent::{AgentInit, Artifact};
    /// use bidi_llm::{CustomTurn, LlmAgent, TurnInput, UserMessage, execute};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let counter = LlmAgent::custom("counter", |mut turn: CustomTurn| async move {
    ///     let count = turn.custom()["count"].as_u64().unwrap_or(0) + 1;
    ///     turn.set_custom(json!({ "count": count }));
    ///     turn.artifact(Artifact::new("tally", [json!({ "text": count.to_string() })]));
    ///     Ok(format!("{count} so far"))
    /// })
    /// .build();
    /// let mut conn = counter.connect(AgentInit::new());
    /// for _ in 0..2 {
    ///     execute(&mut conn, TurnInput::User(UserMessage::new("again"))).await?.result().await?;
    /// }
    /// conn.close();
    /// let state = conn.output().await?.state;
    /// assert_eq!(state.custom, json!({ "count": 2 }));
    /// assert_eq!(state.artifacts[0].parts, [json!({ "text": "2" })]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn custom<F, Fut>(name: impl Into<String>, f: F) -> LlmAgentBuilder
    where
        F: Fn(CustomTurn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, BoxError>> + Send + 'static,
    {
        let f: CustomFn = Arc::new(move |turn| Box::pin(f(turn)));
        let mut builder = Self::builder(name, Custom);
        builder.custom = Some(f);
        builder.agent = builder.agent.description("A custom agent");
        builder
    }

    /// How it was built.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The agent underneath (register it, inspect sessions, its store).
    #[must_use]
    pub fn agent(&self) -> &Agent<LlmSession, TurnInput, u32, AgentEvent> {
        &self.agent
    }

    /// The agent's own tools, local and remote, in the order they were added: what a front end
    /// that resends the whole conversation needs to tell the calls the agent ran (local tools)
    /// from those its client runs.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.config.tools
    }

    /// The names of the models a session may call: the agent's own first, then its
    /// [choices](LlmAgentBuilder::model_choice).
    #[must_use]
    pub fn models(&self) -> Vec<&str> {
        let own = std::iter::once(self.config.model.name());
        own.chain(self.config.choices.iter().map(|model| model.name()))
            .collect()
    }

    /// The name of the model the turns of `state` call: the one it chose, else the agent's own
    /// (a connection may still lend one of its own: [`HostModel`](crate::HostModel)).
    #[must_use]
    pub fn model_of(&self, state: &LlmSession) -> &str {
        self.config.model(state.chosen_model.as_deref()).name()
    }

    /// Makes `state`'s turns call the agent's model named `name` from its next model call.
    ///
    /// ```
    /// use bidi_llm::testing::ScriptedModel;
    /// use bidi_llm::{Context, LlmAgent};
    ///
    /// let agent = LlmAgent::builder("writer", ScriptedModel::new([]))
    ///     .model_choice(ScriptedModel::new([]).named("big"))
    ///     .build();
    /// let mut state = agent.new_session(Context::default())?;
    /// agent.choose_model(&mut state, "big")?;
    /// assert_eq!(agent.model_of(&state), "big");
    /// assert!(agent.choose_model(&mut state, "huge").is_err());
    /// # Ok::<(), bidi_llm::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::UnknownModel`]: the agent offers no model of that name; `state` is unchanged.
    pub fn choose_model(&self, state: &mut LlmSession, name: &str) -> Result<(), Error> {
        let models = self.models();
        if !models.contains(&name) {
            return Err(Error::UnknownModel {
                name: name.to_owned(),
                offered: models.into_iter().map(str::to_owned).collect(),
            });
        }
        state.chosen_model = (name != self.config.model.name()).then(|| name.to_owned());
        Ok(())
    }

    /// Where the last turn of `session` stands, as it was read: running, waiting for the
    /// client's results or for approvals (the calls of this agent's own tools), completed,
    /// failed, aborted or expired. What every wire that reads a stored session shows, each in
    /// its own terms.
    #[must_use]
    pub fn turn_state(&self, session: &Session<LlmSession>) -> TurnState {
        let head = session.head();
        let is_local = |name: &str| {
            let tool = self.config.tools.iter().find(|tool| tool.name() == name);
            tool.is_some_and(Tool::is_local)
        };
        session.with_state(|state| {
            TurnState::stored(head.status, head.error.as_ref(), state, is_local)
        })
    }

    /// Opens a connection: the session is resumed or created as `init` says. Send it
    /// [`TurnInput`]s with [`execute`](crate::execute).
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (with its timers enabled).
    pub fn connect(
        &self,
        init: AgentInit<LlmSession>,
    ) -> Connection<TurnInput, AgentOutput<LlmSession, u32>, AgentEvent> {
        self.agent.connect(init)
    }

    /// Opens a connection with options, as [`connect`](Self::connect): buffers, a parent
    /// token, extensions such as the [`Scope`](bidi_agent::Scope) its session ids are names in.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (with its timers enabled).
    pub fn connect_with(
        &self,
        init: AgentInit<LlmSession>,
        options: ConnectOptions,
    ) -> Connection<TurnInput, AgentOutput<LlmSession, u32>, AgentEvent> {
        self.agent.connect_with(init, options)
    }

    /// The state a new session starts from with a client's `context`: its system prompt, its
    /// conversation so far, and its tools, which become the session's own remote tools. Give it
    /// to [`AgentInit::init`].
    ///
    /// ```
    /// use bidi_agent::AgentInit;
    /// use bidi_llm::testing::{Scripted, ScriptedModel};
    /// use bidi_llm::{Context, LlmAgent, Status, TurnInput, UserMessage, execute};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let model = ScriptedModel::new([Scripted::new().tool_call("c1", "pick_file", &json!({}))]).recording();
    /// let agent = LlmAgent::builder("files", model.clone()).build();
    ///
    /// let context: Context = serde_json::from_value(json!({
    ///     "systemPrompt": "You help with files.",
    ///     "tools": [{"name": "pick_file", "description": "Asks the user", "parameters": {}}],
    /// }))?;
    /// let state = agent.new_session(context)?;
    /// let mut conn = agent.connect(AgentInit::new().session_id("files-1").init(state));
    /// let run = execute(&mut conn, TurnInput::User(UserMessage::new("Open one"))).await?;
    /// let result = run.result().await?;
    ///
    /// // The model saw the prompt and the client's tool; its call waits for the client.
    /// let request = &model.requests()[0];
    /// assert_eq!(request.system_prompt.as_deref(), Some("You help with files."));
    /// assert_eq!(request.tools[0].name, "pick_file");
    /// assert_eq!(result.status, Status::AwaitingToolExecution);
    /// assert_eq!(result.pending_tool_calls[0].name, "pick_file");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidContext`] (code `invalid_input`), saying why, when a tool has an empty
    /// name, two tools have one name, a tool is named like one of the agent's own, or a tool's
    /// `parameters` is not a JSON object.
    pub fn new_session(&self, context: Context) -> Result<LlmSession, Error> {
        context.into_session(&self.config.tools)
    }

    /// The input that goes on with `message` although calls of `state` are still open: each
    /// remote call gets an error result, each call waiting for approval is denied, both saying
    /// the user moved on instead, and then the model reads `message`. For a front end whose
    /// user may ignore a tool's prompt and type something else.
    ///
    /// ```
    /// use bidi_llm::testing::DemoModel;
    /// use bidi_llm::{LlmAgent, LlmSession, ToolCall, TurnInput, UserMessage};
    /// use serde_json::json;
    ///
    /// let agent = LlmAgent::builder("demo", DemoModel).build();
    /// let mut state = LlmSession::default();
    /// state.pending_tool_calls.push(ToolCall {
    ///     id: "c1".into(),
    ///     name: "ask_user".into(),
    ///     arguments: json!({}),
    /// });
    /// let TurnInput::Resume(resume) = agent.set_aside(&state, UserMessage::new("never mind"))
    /// else {
    ///     unreachable!()
    /// };
    /// assert!(resume.results[0].is_error);
    /// assert_eq!(resume.message, Some(UserMessage::new("never mind")));
    /// ```
    #[must_use]
    pub fn set_aside(&self, state: &LlmSession, message: UserMessage) -> TurnInput {
        const REASON: &str = "the user moved on without answering this call";
        const DENIAL: &str = "they moved on without answering";
        let mut resume = Resume::new().message(message);
        for call in &state.pending_tool_calls {
            let local = self
                .config
                .tools
                .iter()
                .any(|tool| tool.name() == call.name && tool.is_local());
            resume = if local {
                resume.approval(Approval::deny(&call.id, DENIAL))
            } else {
                resume.result(ToolResultMessage {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    content: REASON.to_owned(),
                    details: None,
                    is_error: true,
                    attachments: Vec::new(),
                })
            };
        }
        TurnInput::Resume(resume)
    }
}

impl LlmAgentBuilder {
    /// Adds `model` to the models a session may choose instead of the agent's own, by its
    /// [name](Model::name) ([`LlmAgent::choose_model`]): what an editor's model selector offers
    /// (ACP's `model` option). A name the agent's own model or an earlier choice has is not
    /// added again.
    ///
    /// ```
    /// use bidi_llm::LlmAgent;
    /// use bidi_llm::testing::{Scripted, ScriptedModel};
    ///
    /// let agent = LlmAgent::builder("writer", ScriptedModel::new([Scripted::new().text("hi")]))
    ///     .model_choice(ScriptedModel::new([]).named("big"))
    ///     .build();
    /// assert_eq!(agent.models(), ["scripted", "big"]);
    /// ```
    pub fn model_choice(mut self, model: impl Model) -> Self {
        let name = model.name();
        let taken = self.model.name() == name || self.choices.iter().any(|c| c.name() == name);
        if !taken {
            self.choices.push(Arc::new(model));
        }
        self
    }

    /// Calls a model again when a call fails, as `retry` says ([the `retry`
    /// module](crate::retry)). Without a policy a failed call fails the execution at once,
    /// and no fallback model takes over.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Adds `model` to the models that take over, in the order added, when a session's model
    /// keeps failing: its [`Retry`] attempts spent, or a failure retrying cannot fix. Each is
    /// tried with the same attempts; a `model_retry` event names it. Needs a
    /// [`retry`](Self::retry) policy; a model a client lends (MCP's sampling) has none.
    pub fn fallback(mut self, model: impl Model) -> Self {
        self.fallbacks.push(Arc::new(model));
        self
    }

    /// Adds a tool (local or remote).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// How many model calls one execution may make (default 10, at least 1).
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns.max(1);
        self
    }

    /// The term of an execution's [`Lease`](crate::Lease) on its session (default 30 s, at
    /// least 1 s): how long a session stays locked after the process running an execution on
    /// it died. A running execution renews its lease every third of the term.
    pub fn lease(mut self, term: Duration) -> Self {
        self.lease = term.max(MIN_LEASE);
        self
    }

    /// Says that a turn of this agent must not run twice: a detached turn whose process dies
    /// ends `expired` when its lease lapses, instead of being taken over and run again from its
    /// start by another process ([`takeover`](crate::takeover) says what would run twice: its
    /// model calls and its local tools' calls). For agents whose tools act on the world.
    pub fn at_most_once(mut self) -> Self {
        self.at_most_once = true;
        self
    }

    /// Keeps sessions in `store` (default: a `MemoryStore` keeping the latest 256 snapshots of
    /// each of 1,024 sessions). Agents in several processes that share a store never run one session at once.
    pub fn store(mut self, store: impl SessionStore) -> Self {
        self.agent = self.agent.store(store);
        self
    }

    /// Traces its connections with `tracer` instead of the global provider's (see
    /// [`spans`](crate::spans) for the spans of its executions).
    pub fn tracer(mut self, tracer: opentelemetry::global::BoxedTracer) -> Self {
        self.agent = self.agent.tracer(tracer);
        self
    }

    /// Whether the spans of its executions record what was said (default off; on for every
    /// agent with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`): the messages a
    /// model call reads and answers, and a tool call's arguments and result, each text cut
    /// at a bound (see [`spans`](crate::spans)). Turn it on where traces may hold what users
    /// say.
    pub fn record_content(mut self, on: bool) -> Self {
        self.record_content = on;
        self
    }

    /// Keeps no sessions: each connection starts from the conversation its client sends as
    /// the init's state, and the client takes the conversation back from the output (see
    /// [`AgentBuilder::client_managed`]). Genkit calls this *client-managed* state.
    pub fn client_managed(mut self) -> Self {
        self.agent = self.agent.client_managed();
        self
    }

    /// Builds the agent.
    #[must_use]
    pub fn build(self) -> LlmAgent {
        let config = Arc::new(Config {
            name: self.name,
            model: self.model,
            choices: self.choices,
            retry: self.retry,
            fallbacks: self.fallbacks,
            custom: self.custom,
            specs: self.tools.iter().map(Tool::spec).collect(),
            tools: self.tools,
            max_turns: self.max_turns,
            lease: self.lease,
            at_most_once: self.at_most_once,
            record_content: self.record_content,
        });
        let serving = Arc::clone(&config);
        let agent = self.agent.build(move |ctx, session, inbound, out| {
            serve(Arc::clone(&serving), ctx, session, inbound, out)
        });
        LlmAgent { agent, config }
    }
}

/// One connection: an execution per input, each ended by `execute_complete` and the end of the
/// turn.
async fn serve(
    config: Arc<Config>,
    ctx: ActionContext,
    session: Session<LlmSession>,
    mut inbound: Inbound<TurnInput>,
    out: Responder<AgentEvent>,
) -> Result<AgentResult<u32>, BoxError> {
    let owner = ctx.connection_id().to_string();
    let policy = ctx.extensions().get::<Policy>();
    let local = |name: &str| turn::tool(&config, policy, name).is_some_and(Tool::is_local);
    let mut executions = 0;
    // A connection that takes a stale turn over runs that turn first.
    let mut taken = ctx.extensions().get::<TakeOver>();
    while let Some(input) = inbound.recv().await {
        let claimed = match taken.take() {
            Some(turn) => session::take_over(&session, turn, &owner, config.lease).await,
            None => {
                let resume = takeover::resume(&config, &ctx, &input);
                let lease = (owner.as_str(), config.lease, resume);
                session::claim(&session, &input, lease, &local).await
            }
        };
        let state = match claimed {
            Ok(state) => state,
            Err(error) => {
                if refuse(&out, &error).await.is_err() {
                    break;
                }
                continue;
            }
        };
        executions += 1;
        let interrupted = Turn::new(&config, &ctx, &session, &out)
            .run(state, input)
            .await;
        if interrupted || out.end_turn().await.is_err() {
            break;
        }
    }
    Ok(AgentResult::new(executions))
}

/// An input that could not start an execution: its error and `execute_complete`, nothing saved.
async fn refuse(out: &Responder<AgentEvent>, error: &Error) -> Result<(), BoxError> {
    out.send_batch(vec![
        error.event(None),
        AgentEvent::ExecuteComplete {
            status: Status::Error,
            pending_tool_calls: Vec::new(),
            pending_approvals: Vec::new(),
            cost: 0.0,
        },
    ])
    .await?;
    out.end_turn().await?;
    Ok(())
}

/// The model of a custom agent, which its executions never call: its function answers.
struct Custom;

impl Model for Custom {
    fn name(&self) -> &str {
        "custom"
    }

    fn stream(
        &self,
        _request: ModelRequest,
    ) -> futures_util::stream::BoxStream<'static, ModelEvent> {
        let error = crate::error::ModelError::other("a custom agent calls no model");
        Box::pin(futures_util::stream::iter([ModelEvent::Error(error)]))
    }
}
