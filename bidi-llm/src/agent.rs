//! The agent loop as an [`Agent`]: each turn takes a user message or tool results, calls the
//! model, runs local tools, and streams [`AgentEvent`]s until the model stops, remote tools are
//! pending, or the turn limit is hit.

use std::collections::{BTreeMap, HashSet};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use bidi_agent::{Agent, AgentInit, AgentResult, Responder};
use bidi_core::{ActionContext, BoxError, Connection, Inbound};
use bidi_session::{Session, SessionStore};
use futures_core::Stream;
use futures_util::future::{Either, select};
use futures_util::stream::{SelectAll, StreamExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::event::AgentEvent;
use crate::message::{
    AbortedMessage, ErrorMessage, Message, Role, ToolCall, ToolResultMessage, Usage, UserMessage,
};
use crate::model::{Assembled, Assembler, Model, ModelRequest};
use crate::tool::{Tool, ToolEvent};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// No execution yet, or one is running.
    #[default]
    Running,
    /// Remote tool calls are pending; the next input must be their results.
    AwaitingToolExecution,
    /// The last execution finished.
    Completed,
    /// The last execution failed (the model errored or the turn limit was hit).
    Error,
}

/// An agent session's persisted state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LlmSession {
    /// The whole conversation.
    pub messages: Vec<Message>,
    /// Where the session stands.
    pub status: Status,
    /// The calls waiting for remote results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<ToolCall>,
    /// Usage and cost accumulated over the session.
    #[serde(default)]
    pub usage: Usage,
}

/// The input of one execution: a user message, or the results of the pending remote tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum TurnInput {
    /// Results for exactly the pending tool calls.
    ToolResults(Vec<ToolResultMessage>),
    /// A user message.
    User(UserMessage),
}

/// How an execution ended: the seed's `ExecuteResult`, derived from the turn's events.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteResult {
    /// Completed, awaiting remote tools, or failed.
    pub status: Status,
    /// The messages this execution added.
    pub messages: Vec<Message>,
    /// The remote calls to execute, when awaiting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<ToolCall>,
    /// Usage and cost of this execution.
    pub cost: Usage,
    /// Why the input was refused or the execution failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An LLM agent: a model, tools, and a turn limit, served as a `bidi-agent` [`Agent`]
/// (registered as `/agent/{name}`) whose chunks are [`AgentEvent`]s.
///
/// Events that are ready together (a provider's buffered tokens, a tool's burst of output)
/// reach the consumer in one hand-off ([`Outbound::send_batch`](bidi_core::Outbound::send_batch)),
/// and the loop hands over what it has before it waits for anything, so no event waits for
/// company.
#[derive(Clone)]
pub struct LlmAgent {
    agent: Agent<LlmSession, TurnInput, u32, AgentEvent>,
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
    name: String,
    model: Arc<dyn Model>,
    tools: Vec<Tool>,
    max_turns: u32,
    store: Option<Arc<dyn SessionStore>>,
}

impl std::fmt::Debug for LlmAgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmAgentBuilder")
            .field("name", &self.name)
            .field("tools", &self.tools)
            .field("max_turns", &self.max_turns)
            .finish_non_exhaustive()
    }
}

impl LlmAgent {
    /// An agent named `name` calling `model`.
    pub fn builder(name: impl Into<String>, model: impl Model) -> LlmAgentBuilder {
        LlmAgentBuilder {
            name: name.into(),
            model: Arc::new(model),
            tools: Vec::new(),
            max_turns: 10,
            store: None,
        }
    }

    /// The agent underneath (connect, register, inspect sessions).
    #[must_use]
    pub fn agent(&self) -> &Agent<LlmSession, TurnInput, u32, AgentEvent> {
        &self.agent
    }

    /// Opens a connection: the session is resumed or created as `init` says.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect(
        &self,
        init: AgentInit<LlmSession>,
    ) -> Connection<TurnInput, bidi_agent::AgentOutput<LlmSession, u32>, AgentEvent> {
        self.agent.connect(init)
    }
}

impl LlmAgentBuilder {
    /// Adds a tool (local or remote).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// How many model calls one execution may make (default 10).
    pub fn max_turns(mut self, max_turns: u32) -> Self {
        self.max_turns = max_turns.max(1);
        self
    }

    /// Keeps sessions in `store` (default: a `MemoryStore`).
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Builds the agent.
    #[must_use]
    pub fn build(self) -> LlmAgent {
        let config = Arc::new(Config {
            model: self.model,
            tools: self.tools,
            max_turns: self.max_turns,
        });
        let builder = Agent::builder(self.name).description("An LLM agent loop with tools");
        let builder = match self.store {
            Some(store) => builder.store(store),
            None => builder,
        };
        let agent = builder.build(move |ctx, session, inbound, out| {
            run(Arc::clone(&config), ctx, session, inbound, out)
        });
        LlmAgent { agent }
    }
}

struct Config {
    model: Arc<dyn Model>,
    tools: Vec<Tool>,
    max_turns: u32,
}

async fn run(
    config: Arc<Config>,
    ctx: ActionContext,
    session: Session<LlmSession>,
    mut inbound: Inbound<TurnInput>,
    out: Responder<AgentEvent>,
) -> Result<AgentResult<u32>, BoxError> {
    let mut executions = 0;
    while let Some(input) = inbound.recv().await {
        let mut state = session.state();
        if let Err(error) = check(&state, &input) {
            // Refused: the session is unchanged.
            out.send(AgentEvent::Error {
                error,
                message: None,
            })
            .await?;
            out.end_turn().await?;
            continue;
        }
        let mut turn = Turn::new(&config, &ctx, &out, session.id());
        turn.emit(AgentEvent::SessionStart {
            session_id: session.id().to_owned(),
        });
        let inputs: Vec<Message> = match input {
            TurnInput::User(user) => vec![Message::User(user)],
            TurnInput::ToolResults(results) => {
                results.into_iter().map(Message::ToolResult).collect()
            }
        };
        for message in inputs {
            turn.add(&mut state, message);
        }
        state.pending_tool_calls.clear();
        state.status = Status::Running;
        let outcome = turn.execute(&mut state).await;
        // The consumer sees the answer before the store is written.
        let flushed = match outcome {
            Ok(()) => turn.flush().await,
            Err(error) => Err(error),
        };
        session.update_state(state).await?;
        executions += 1;
        flushed?;
        let messages = std::mem::take(&mut turn.new);
        turn.emit(AgentEvent::SessionEnd {
            session_id: session.id().to_owned(),
            messages,
        });
        turn.flush().await?;
        out.end_turn().await?;
        if ctx.is_cancelled() {
            break;
        }
    }
    Ok(AgentResult::new(executions))
}

/// Whether `input` fits where the session stands.
fn check(state: &LlmSession, input: &TurnInput) -> Result<(), String> {
    match (state.status, input) {
        (Status::AwaitingToolExecution, TurnInput::User(_)) => Err(format!(
            "the session awaits results for tool calls {}; send those first",
            ids(state.pending_tool_calls.iter().map(|c| c.id.as_str()))
        )),
        (Status::AwaitingToolExecution, TurnInput::ToolResults(results)) => {
            let mut seen = HashSet::new();
            for result in results {
                let Some(call) = state
                    .pending_tool_calls
                    .iter()
                    .find(|c| c.id == result.tool_call_id)
                else {
                    return Err(format!(
                        "`{}` is not a pending tool call",
                        result.tool_call_id
                    ));
                };
                if call.name != result.tool_name {
                    return Err(format!(
                        "tool call `{}` is a call of `{}`, not `{}`",
                        call.id, call.name, result.tool_name
                    ));
                }
                if !seen.insert(result.tool_call_id.as_str()) {
                    return Err(format!(
                        "two results for tool call `{}`",
                        result.tool_call_id
                    ));
                }
            }
            let missing: Vec<&str> = state
                .pending_tool_calls
                .iter()
                .map(|c| c.id.as_str())
                .filter(|id| !seen.contains(id))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "missing results for tool calls {}",
                    ids(missing.into_iter())
                ))
            }
        }
        (_, TurnInput::ToolResults(_)) => {
            Err("no tool calls are pending; send a user message".to_owned())
        }
        (_, TurnInput::User(_)) => Ok(()),
    }
}

/// The `tool_execution_end` event of a local call's result.
fn end_event(result: &ToolResultMessage) -> AgentEvent {
    AgentEvent::ToolExecutionEnd {
        tool_call_id: result.tool_call_id.clone(),
        output: result.content.clone(),
        details: result.details.clone(),
        is_error: result.is_error,
    }
}

fn ids<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    ids.map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// At most this many events wait in a turn's outbox before they are handed over.
const BATCH: usize = 64;

/// One execution: its events, the messages it adds, and the model calls and tools in between.
///
/// Events are not handed over one by one: they collect in an outbox that goes to the consumer
/// as one batch whenever the loop is about to wait (for the model, a tool or the store) or holds
/// [`BATCH`] of them. What is ready together (a provider's buffered tokens, a scripted answer)
/// costs one hand-off, and nothing waits longer than it would have.
struct Turn<'a> {
    config: &'a Config,
    ctx: &'a ActionContext,
    out: &'a Responder<AgentEvent>,
    session_id: String,
    /// The messages this execution added.
    new: Vec<Message>,
    /// Events not handed over yet.
    outbox: Vec<AgentEvent>,
}

impl<'a> Turn<'a> {
    fn new(
        config: &'a Config,
        ctx: &'a ActionContext,
        out: &'a Responder<AgentEvent>,
        session_id: &str,
    ) -> Self {
        Self {
            config,
            ctx,
            out,
            session_id: session_id.to_owned(),
            new: Vec::new(),
            outbox: Vec::with_capacity(4),
        }
    }
}

impl Turn<'_> {
    fn emit(&mut self, event: AgentEvent) {
        self.outbox.push(event);
    }

    /// Hands the outbox to the consumer.
    async fn flush(&mut self) -> Result<(), BoxError> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        // The next batch is likely the size of this one: a streaming model's events come a
        // few at a time, a fast producer's fill the batch.
        let capacity = self.outbox.len().clamp(4, BATCH);
        let batch = std::mem::replace(&mut self.outbox, Vec::with_capacity(capacity));
        self.out.send_batch(batch).await.map_err(Into::into)
    }

    /// The next item of `stream`; if it is not ready yet, the outbox goes first.
    async fn next_from<T>(
        &mut self,
        stream: &mut (impl Stream<Item = T> + Unpin),
    ) -> Result<Option<T>, BoxError> {
        if self.outbox.len() < BATCH
            && let Poll::Ready(item) = poll_fn(|cx| Poll::Ready(stream.poll_next_unpin(cx))).await
        {
            return Ok(item);
        }
        self.flush().await?;
        Ok(stream.next().await)
    }

    /// Appends `message`, with its start and end events.
    fn add(&mut self, state: &mut LlmSession, message: Message) {
        self.emit(AgentEvent::MessageStart {
            role: message.role(),
        });
        self.emit(AgentEvent::MessageEnd {
            message: Box::new(message.clone()),
        });
        state.messages.push(message.clone());
        self.new.push(message);
    }

    /// Model calls and local tools until the model stops, remote tools are pending, or the limit.
    async fn execute(&mut self, state: &mut LlmSession) -> Result<(), BoxError> {
        let specs: Vec<_> = self.config.tools.iter().map(Tool::spec).collect();
        for _ in 0..self.config.max_turns {
            let Some(calls) = self.call_model(state, specs.clone()).await? else {
                return Ok(());
            };
            if calls.is_empty() {
                state.status = Status::Completed;
                return Ok(());
            }
            let (local, remote): (Vec<_>, Vec<_>) = calls
                .into_iter()
                .partition(|call| self.tool(&call.name).is_none_or(Tool::is_local));
            self.run_tools(state, local).await?;
            if !remote.is_empty() {
                state.status = Status::AwaitingToolExecution;
                state.pending_tool_calls.clone_from(&remote);
                self.emit(AgentEvent::AwaitingToolExecution {
                    session_id: self.session_id.clone(),
                    tool_calls: remote,
                });
                return Ok(());
            }
            if self.ctx.is_cancelled() {
                return Ok(());
            }
        }
        state.status = Status::Error;
        self.emit(AgentEvent::Error {
            error: format!(
                "stopped after {} model calls (max_turns)",
                self.config.max_turns
            ),
            message: None,
        });
        Ok(())
    }

    fn tool(&self, name: &str) -> Option<&Tool> {
        self.config.tools.iter().find(|tool| tool.name() == name)
    }

    /// One model call, streamed: the tool calls of its answer, or `None` when it failed or was
    /// cancelled (recorded in the state).
    async fn call_model(
        &mut self,
        state: &mut LlmSession,
        specs: Vec<crate::model::ToolSpec>,
    ) -> Result<Option<Vec<ToolCall>>, BoxError> {
        self.emit(AgentEvent::MessageStart {
            role: Role::Assistant,
        });
        let mut stream = self
            .config
            .model
            .stream(ModelRequest::new(state.messages.clone(), specs));
        let mut assembler = Assembler::new();
        // One cancellation waiter for the whole answer, not one per event.
        let ctx = self.ctx;
        let mut cancelled = std::pin::pin!(ctx.cancelled());
        loop {
            let ready = if self.outbox.len() < BATCH {
                poll_fn(|cx| Poll::Ready(stream.poll_next_unpin(cx))).await
            } else {
                Poll::Pending
            };
            let next = match ready {
                Poll::Ready(next) => next,
                Poll::Pending => {
                    // About to wait: what the consumer has not seen goes first. A failed
                    // hand-off because of a cancel is an abort like any other.
                    if let Err(error) = self.flush().await {
                        if self.ctx.is_cancelled() {
                            self.abort(state, &assembler);
                            return Ok(None);
                        }
                        return Err(error);
                    }
                    match select(stream.next(), cancelled.as_mut()).await {
                        Either::Left((next, _)) => next,
                        Either::Right(_) => {
                            self.abort(state, &assembler);
                            return Ok(None);
                        }
                    }
                }
            };
            let assembled = match next {
                Some(event) => assembler.apply(event, &mut self.outbox),
                None => assembler.ended(),
            };
            let (message, calls) = match assembled {
                Assembled::Streaming => continue,
                Assembled::Done(assistant) => {
                    state.usage += assistant.usage;
                    let calls = assistant.tool_calls().cloned().collect();
                    (Message::Assistant(assistant), Some(calls))
                }
                Assembled::Failed { error, partial } => {
                    let message = Message::Error(ErrorMessage {
                        error: error.clone(),
                        partial: Some(partial),
                    });
                    self.emit(AgentEvent::MessageEnd {
                        message: Box::new(message.clone()),
                    });
                    self.emit(AgentEvent::Error {
                        error,
                        message: Some(Box::new(message.clone())),
                    });
                    state.status = Status::Error;
                    state.messages.push(message.clone());
                    self.new.push(message);
                    return Ok(None);
                }
            };
            self.emit(AgentEvent::MessageEnd {
                message: Box::new(message.clone()),
            });
            state.messages.push(message.clone());
            self.new.push(message);
            return Ok(calls);
        }
    }

    /// Cancelled mid-stream: records what the model had produced; the session stays consistent
    /// (it is saved, and the next user message continues from it).
    fn abort(&mut self, state: &mut LlmSession, assembler: &Assembler) {
        let message = Message::Aborted(AbortedMessage {
            partial: assembler.partial(),
        });
        state.messages.push(message.clone());
        self.new.push(message);
        state.status = Status::Completed;
    }

    /// Runs the local calls concurrently; their deltas stream as they come, their ends and
    /// results in call order.
    async fn run_tools(
        &mut self,
        state: &mut LlmSession,
        calls: Vec<ToolCall>,
    ) -> Result<(), BoxError> {
        let mut running = SelectAll::new();
        for (index, call) in calls.iter().enumerate() {
            self.emit(AgentEvent::ToolExecutionStart {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: call.arguments.clone(),
            });
            let events = match self.tool(&call.name) {
                Some(tool) => tool.run(call.id.clone(), call.arguments.clone()),
                None => futures_util::stream::once({
                    let name = call.name.clone();
                    async move { ToolEvent::Failed(format!("there is no tool named `{name}`")) }
                })
                .boxed(),
            };
            running.push(events.map(move |event| (index, event)));
        }
        let mut done: BTreeMap<usize, ToolResultMessage> = BTreeMap::new();
        let mut next_end = 0;
        while let Some((index, event)) = self.next_from(&mut running).await? {
            let call = &calls[index];
            let finished = match event {
                ToolEvent::Delta(delta) => {
                    self.emit(AgentEvent::ToolExecutionDelta {
                        tool_call_id: call.id.clone(),
                        delta,
                    });
                    None
                }
                ToolEvent::Complete { output, details } => Some((output, details, false)),
                ToolEvent::Failed(error) => Some((error, None, true)),
            };
            if let Some((content, details, is_error)) = finished
                && !done.contains_key(&index)
            {
                done.insert(
                    index,
                    ToolResultMessage {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        content,
                        details,
                        is_error,
                    },
                );
            }
            // Emit every result that is next in call order.
            while let Some(result) = done.get(&next_end) {
                self.emit(end_event(result));
                next_end += 1;
            }
        }
        // A tool whose stream ended without completing is a failure.
        for (index, call) in calls.iter().enumerate() {
            done.entry(index).or_insert_with(|| ToolResultMessage {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: "the tool ended without a result".to_owned(),
                details: None,
                is_error: true,
            });
        }
        for result in done.range(next_end..).map(|(_, result)| result) {
            self.emit(end_event(result));
        }
        for result in done.into_values() {
            self.add(state, Message::ToolResult(result));
        }
        Ok(())
    }
}

/// One execution on an open connection, as the seed's `ExecuteStream`: a stream of the turn's
/// events, then [`result`](Self::result).
///
/// ```
/// use bidi_agent::AgentInit;
/// use bidi_llm::{LlmAgent, Scripted, ScriptedModel, Status, TurnInput, UserMessage, execute};
/// use futures_util::StreamExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let agent = LlmAgent::builder("helper", ScriptedModel::new([Scripted::new().text("Hi!")])).build();
/// let mut conn = agent.connect(AgentInit::new());
/// let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("hello"))).await?;
/// while let Some(event) = run.next().await {
///     println!("{}", serde_json::to_string(&event?)?);
/// }
/// assert_eq!(run.result().status, Status::Completed);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ExecuteStream<'a> {
    responses: bidi_core::Responses<'a, AgentEvent>,
    result: ExecuteResult,
    started: bool,
}

/// Sends `input` on `conn` and returns the execution's event stream.
///
/// # Errors
///
/// The input back, if the connection no longer takes inputs.
///
/// # Cancel safety
///
/// If the future is dropped before it completes, the input is not delivered.
pub async fn execute<Out: Send + 'static>(
    conn: &mut Connection<TurnInput, Out, AgentEvent>,
    input: TurnInput,
) -> Result<ExecuteStream<'_>, bidi_core::SendError<TurnInput>> {
    conn.send(input).await?;
    Ok(ExecuteStream {
        responses: conn.responses(),
        result: ExecuteResult {
            status: Status::Completed,
            ..ExecuteResult::default()
        },
        started: false,
    })
}

impl ExecuteStream<'_> {
    /// How the execution ended, as far as its events have been read: complete once the stream
    /// has ended.
    #[must_use]
    pub fn result(&self) -> &ExecuteResult {
        &self.result
    }

    fn observe(&mut self, event: &AgentEvent) {
        let result = &mut self.result;
        match event {
            AgentEvent::SessionStart { .. } => self.started = true,
            AgentEvent::SessionEnd { messages, .. } => result.messages.clone_from(messages),
            AgentEvent::AwaitingToolExecution { tool_calls, .. } => {
                result.status = Status::AwaitingToolExecution;
                result.pending_tool_calls.clone_from(tool_calls);
            }
            AgentEvent::MessageEnd { message } => {
                if let Message::Assistant(message) = &**message {
                    result.cost += message.usage;
                }
            }
            AgentEvent::Error { error, .. } => {
                result.status = Status::Error;
                result.error = Some(error.clone());
            }
            _ => {}
        }
    }
}

impl futures_core::Stream for ExecuteStream<'_> {
    type Item = Result<AgentEvent, bidi_core::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.responses.poll_next_unpin(cx));
        if let Some(Ok(event)) = &item {
            self.observe(event);
        }
        if let Some(Err(error)) = &item {
            self.result.status = Status::Error;
            self.result.error = Some(error.to_string());
        }
        std::task::Poll::Ready(item)
    }
}
