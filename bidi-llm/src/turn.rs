//! The loop of one execution: model calls and local tools until the model stops, remote tools
//! are pending, the turn limit is hit, or the execution is interrupted; then the save that ends
//! it and its last events.

use std::collections::BTreeMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bidi_agent::Responder;
use bidi_core::{ActionContext, Cause};
use bidi_flow::log::{Level, Logger};
use bidi_session::{self as snapshot, Renewal, Session};
use futures_core::Stream;
use futures_util::stream::{BoxStream, SelectAll, StreamExt as _};
use opentelemetry::context::FutureExt as _;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::custom::{CustomFn, CustomTurn, Edit};
use crate::error::{Error, ModelError};
use crate::event::AgentEvent;
use crate::host::HostModel;
use crate::message::{
    AbortedMessage, AssistantContent, AssistantMessage, Attachment, ErrorMessage, Message, Role,
    StopReason, ToolCall, ToolResultMessage,
};
use crate::model::{Model, ModelRequest, ToolSpec};
use crate::policy::Policy;
use crate::retry::Retry;
use crate::session::{self, Approval, LlmSession, Status, TurnInput};
use crate::spans::{Outcome, Spans, ToolSpan, status_name};
use crate::tool::{Tool, ToolEvent};

mod call;

/// What every execution of an agent shares.
pub(crate) struct Config {
    /// The agent's name.
    pub(crate) name: String,
    /// The agent's own model.
    pub(crate) model: Arc<dyn Model>,
    /// The models a session may choose instead, by name.
    pub(crate) choices: Vec<Arc<dyn Model>>,
    /// What a failed model call is followed by, if anything.
    pub(crate) retry: Option<Retry>,
    /// The models that take over when the chosen one keeps failing, in order.
    pub(crate) fallbacks: Vec<Arc<dyn Model>>,
    /// A custom agent's function, which answers instead of the model.
    pub(crate) custom: Option<CustomFn>,
    pub(crate) tools: Vec<Tool>,
    /// The tools as the model sees them.
    pub(crate) specs: Vec<ToolSpec>,
    pub(crate) max_turns: u32,
    /// The term of an execution's lease.
    pub(crate) lease: Duration,
    /// Whether a detached execution whose process died expires rather than runs again.
    pub(crate) at_most_once: bool,
    /// Whether its spans record what was said.
    pub(crate) record_content: bool,
}

impl Config {
    /// The model named `chosen` among the agent's choices, else its own.
    pub(crate) fn model(&self, chosen: Option<&str>) -> &dyn Model {
        chosen
            .and_then(|name| self.choices.iter().find(|model| model.name() == name))
            .unwrap_or(&self.model)
            .as_ref()
    }
}

/// At most this many events wait in the outbox before they are handed over (22 KiB of them).
///
/// A batch is what a producer that never waits (a provider's buffered tokens, a scripted
/// answer) runs ahead of its consumer; each hand-off between the loop's task and the
/// consumer's is a task switch, often a wake-up of another worker thread, which costs more
/// than a hundred events. A model that streams as it thinks hands over what it has whenever it
/// waits, so the size never delays an event.
const BATCH: usize = 256;

/// The execution was cancelled, or nobody takes its events any more: it stops where it is.
struct Interrupted;

/// How an execution waits: for something, unless it is cancelled, renewing its lease meanwhile.
struct Watch<'a> {
    ctx: &'a ActionContext,
    session: &'a Session<LlmSession>,
    /// Made the first time the execution waits for the model or a tool; then kept.
    cancelled: Option<Pin<Box<dyn Future<Output = Cause> + Send + 'a>>>,
    renewal: Pin<Box<Sleep>>,
    term: Duration,
    /// The session's snapshot was aborted (by any process sharing the store): the execution
    /// stops as if cancelled.
    aborted: bool,
}

enum Step<T> {
    Ready(T),
    Cancelled,
    Renew,
}

/// What a wait is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum For {
    /// The model or a tool: only the cancellation ends the wait early.
    Work,
    /// A hand-off to the consumer, which ends by itself when the connection is cancelled.
    Consumer,
}

impl<'a> Watch<'a> {
    fn new(ctx: &'a ActionContext, session: &'a Session<LlmSession>, term: Duration) -> Self {
        Self {
            ctx,
            session,
            cancelled: None,
            renewal: Box::pin(tokio::time::sleep(term / 3)),
            term,
            aborted: false,
        }
    }

    /// `what`'s output, or [`Interrupted`] as soon as the execution is cancelled.
    async fn wait<F: Future>(&mut self, what: F, waiting: For) -> Result<F::Output, Interrupted> {
        let mut what = pin!(what);
        loop {
            // The cheap checks first; the cancellation's waiter only when it is needed.
            let step = poll_fn(|cx| {
                // An aborted execution stops working, but still hands its last events over.
                if self.ctx.is_cancelled() || (self.aborted && waiting == For::Work) {
                    return Poll::Ready(Step::Cancelled);
                }
                if let Poll::Ready(output) = what.as_mut().poll(cx) {
                    return Poll::Ready(Step::Ready(output));
                }
                if waiting == For::Work {
                    let ctx = self.ctx;
                    let cancelled = self
                        .cancelled
                        .get_or_insert_with(|| Box::pin(ctx.cancelled()));
                    if cancelled.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Step::Cancelled);
                    }
                }
                if self.renewal.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Step::Renew);
                }
                Poll::Pending
            })
            .await;
            match step {
                Step::Ready(output) => return Ok(output),
                Step::Cancelled => return Err(Interrupted),
                Step::Renew => {
                    // A failed renewal is tried again a third of a term later; if the lease is
                    // lost, the write that ends the execution says so. Boxed: it is rare, and
                    // it would make the future of every wait larger.
                    let renewal = Box::pin(session::renew(self.session, self.term)).await;
                    self.renewal.as_mut().reset(Instant::now() + self.term / 3);
                    // Aborted, or no longer this running execution's (taken over by
                    // another process after this one went silent): it stops.
                    let lost = matches!(renewal, Err(bidi_session::StoreError::NotHeld { .. }))
                        && self.session.head().lease.is_some();
                    if lost || matches!(renewal, Ok(Renewal::Aborted)) {
                        self.aborted = true;
                        return Err(Interrupted);
                    }
                }
            }
        }
    }

    fn is_cancelled(&self) -> bool {
        self.aborted || self.ctx.is_cancelled()
    }
}

/// One execution: its events, and the model calls and tools in between.
///
/// Events are not handed over one by one: they collect in an outbox that goes to the consumer
/// as one batch whenever the loop is about to wait (for the model, a tool or the store) or holds
/// [`BATCH`] of them. What is ready together (a provider's buffered tokens, a scripted answer)
/// costs one hand-off, and nothing waits longer than it would have.
pub(crate) struct Turn<'a> {
    config: &'a Config,
    out: &'a Responder<AgentEvent>,
    session: &'a Session<LlmSession>,
    watch: Watch<'a>,
    /// Events not handed over yet.
    outbox: Vec<AgentEvent>,
    /// What this execution's model calls cost.
    cost: f64,
    /// The connection's policy, if it has one.
    policy: Option<&'a Policy>,
    /// The model the connection's client lends, if it lends one.
    host: Option<&'a HostModel>,
    /// Where the connection's log records go, if anywhere.
    logger: Option<&'a Logger>,
    /// What the execution's last failure said, for its snapshot.
    error: Option<(String, bidi_flow::Code)>,
    /// Its spans, when its connection is traced.
    spans: Option<Spans>,
}

impl<'a> Turn<'a> {
    pub(crate) fn new(
        config: &'a Config,
        ctx: &'a ActionContext,
        session: &'a Session<LlmSession>,
        out: &'a Responder<AgentEvent>,
    ) -> Self {
        Self {
            config,
            out,
            session,
            watch: Watch::new(ctx, session, config.lease),
            outbox: Vec::with_capacity(4),
            cost: 0.0,
            policy: ctx.extensions().get::<Policy>(),
            host: ctx.extensions().get::<HostModel>(),
            logger: ctx.extensions().get::<Logger>(),
            error: None,
            spans: Spans::start(ctx, &config.name, session.id(), config.record_content),
        }
    }

    /// Runs the execution of `input` on `state` (as [`session::claim`] found it) to its end,
    /// writes what it added and how it ended, and hands over its last events, `session_end`
    /// and `execute_complete` (the turn is not ended). Returns whether the connection was
    /// cancelled (an abort of the session's snapshot ends the execution only).
    pub(crate) async fn run(mut self, mut state: LlmSession, input: TurnInput) -> bool {
        let session_id = self.session.id().to_owned();
        let before = session::head(&mut state);
        self.emit(AgentEvent::SessionStart {
            session_id: session_id.clone(),
            snapshot_id: Some(self.session.snapshot_id()),
        });
        let first = state.messages.len();
        // The pending calls of local tools waited for approval; the others were remote.
        let waiting: Vec<ToolCall> = std::mem::take(&mut state.pending_tool_calls)
            .into_iter()
            .filter(|call| self.tool(&call.name).is_some_and(Tool::is_local))
            .collect();
        let (messages, approvals, then) = input.into_parts();
        for message in messages {
            self.add(&mut state, message);
        }
        // The calls that waited for approval (`check` made sure each has a decision): the
        // approved run, the denied get their denial as an error result.
        let decided = waiting
            .into_iter()
            .map(|call| {
                let denial = approvals
                    .iter()
                    .find(|approval| approval.tool_call_id == call.id)
                    .filter(|approval| !approval.approved)
                    .map(Approval::denial);
                (call, denial)
            })
            .collect();
        let mut interrupted = if self.run_tools(&mut state, decided).await.is_err() {
            state.status = Status::Completed;
            true
        } else {
            // What the user said next comes after every answer, before the model reads them.
            if let Some(user) = then {
                self.add(&mut state, Message::User(user));
            }
            match self.config.custom.clone() {
                Some(custom) => self.custom(&mut state, &custom).await.is_err(),
                None => self.execute(&mut state).await.is_err(),
            }
        };
        // The consumer sees the answer before the store is written.
        if !interrupted {
            interrupted = self.flush().await.is_err();
        }
        debug_assert_ne!(state.status, Status::Running);
        let messages = state.messages[first..].to_vec();
        // The remote calls, and apart from them the local ones waiting for approval.
        let (pending_approvals, pending_tool_calls): (Vec<_>, Vec<_>) = state
            .pending_tool_calls
            .iter()
            .cloned()
            .partition(|call| self.tool(&call.name).is_some_and(Tool::is_local));
        let mut status = state.status;
        let change = session::change(&before, &mut state, first);
        let (ended, error) = match status {
            Status::Error => (
                snapshot::Status::Failed,
                self.error
                    .as_ref()
                    .map(|(message, code)| json!({ "message": message, "code": code })),
            ),
            _ if interrupted || self.watch.aborted => (snapshot::Status::Aborted, None),
            _ => (snapshot::Status::Completed, None),
        };
        let snapshot_id = match self.session.finish(state, change, ended, error).await {
            Ok(entry) => Some(entry.id),
            Err(error) => {
                self.fail(&Error::Store(error), None);
                status = Status::Error;
                // The session's cached state went to this execution: read it again.
                let _ = Box::pin(self.session.reload()).await;
                None
            }
        };
        if let Some(spans) = self.spans.take() {
            let failure = (status == Status::Error).then(|| {
                let error = self.error.as_ref();
                error.map_or("the execution failed", |(message, _)| message.as_str())
            });
            spans.end(status_name(status), failure);
        }
        self.emit(AgentEvent::SessionEnd {
            session_id,
            messages,
            snapshot_id,
        });
        self.emit(AgentEvent::ExecuteComplete {
            status,
            pending_tool_calls,
            pending_approvals,
            cost: self.cost,
        });
        // An abort ends the execution, not the connection: its client reads the end as usual.
        let cancelled = interrupted && !self.watch.aborted;
        self.flush().await.is_err() || cancelled
    }

    fn emit(&mut self, event: AgentEvent) {
        self.outbox.push(event);
    }

    /// Reports `error` (and the message it left) in an `error` event.
    fn fail(&mut self, error: &Error, message: Option<Message>) {
        if let Some(logger) = self.logger {
            logger.log(Level::Error, error.to_string());
        }
        self.error = Some((error.to_string(), error.code()));
        self.emit(error.event(message));
    }

    /// Hands the outbox to the consumer.
    async fn flush(&mut self) -> Result<(), Interrupted> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        // The next batch is likely the size of this one: a streaming model's events come a
        // few at a time, a fast producer's fill the batch.
        let capacity = self.outbox.len().clamp(4, BATCH);
        let batch = std::mem::replace(&mut self.outbox, Vec::with_capacity(capacity));
        let out = self.out;
        match self.watch.wait(out.send_batch(batch), For::Consumer).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) | Err(Interrupted) => Err(Interrupted),
        }
    }

    /// The next item of `stream`, once the outbox went to the consumer.
    async fn wait_from<T>(
        &mut self,
        stream: &mut (impl Stream<Item = T> + Unpin),
    ) -> Result<Option<T>, Interrupted> {
        self.flush().await?;
        self.watch.wait(stream.next(), For::Work).await
    }

    /// Appends `message`, with its start and end events.
    fn add(&mut self, state: &mut LlmSession, message: Message) {
        self.emit(AgentEvent::MessageStart {
            role: message.role(),
        });
        self.end(state, message);
    }

    /// Appends `message`, whose start event is out, with its end event.
    fn end(&mut self, state: &mut LlmSession, message: Message) {
        self.emit(AgentEvent::MessageEnd {
            message: Box::new(message.clone()),
        });
        state.messages.push(message);
    }

    /// Model calls and local tools until the model stops, remote tools are pending, the limit,
    /// or an interruption. Sets the status the execution ends with.
    async fn execute(&mut self, state: &mut LlmSession) -> Result<(), Interrupted> {
        for _ in 0..self.config.max_turns {
            if self.watch.is_cancelled() {
                state.status = Status::Completed;
                return Err(Interrupted);
            }
            let calls = match self.call_model(state).await {
                Ok(Some(calls)) => calls,
                Ok(None) => {
                    state.status = Status::Error;
                    return Ok(());
                }
                Err(Interrupted) => {
                    state.status = Status::Completed;
                    return Err(Interrupted);
                }
            };
            if calls.is_empty() {
                state.status = Status::Completed;
                return Ok(());
            }
            let session: &LlmSession = state;
            let (remote, local): (Vec<_>, Vec<_>) = calls
                .into_iter()
                .partition(|call| self.is_remote(session, &call.name));
            let (approvals, local): (Vec<_>, Vec<_>) = local
                .into_iter()
                .partition(|call| self.waits_for_approval(&call.name));
            let tools = self
                .run_tools(state, local.into_iter().map(|call| (call, None)).collect())
                .await;
            if !remote.is_empty() || !approvals.is_empty() {
                // Also after an interruption: the calls stay pending, for whoever resumes the
                // session.
                state.status = Status::AwaitingToolExecution;
                state.pending_tool_calls = remote.iter().chain(&approvals).cloned().collect();
                if let Some(spans) = &self.spans {
                    spans.stopped_at(&remote, false, Outcome::AwaitingClient);
                    spans.stopped_at(&approvals, true, Outcome::AwaitingApproval);
                }
                let session_id = self.session.id();
                if !remote.is_empty() {
                    self.emit(AgentEvent::AwaitingToolExecution {
                        session_id: session_id.to_owned(),
                        tool_calls: remote,
                    });
                }
                if !approvals.is_empty() {
                    self.emit(AgentEvent::AwaitingApproval {
                        session_id: session_id.to_owned(),
                        tool_calls: approvals,
                    });
                }
                return tools;
            }
            if tools.is_err() {
                state.status = Status::Completed;
                return tools;
            }
        }
        state.status = Status::Error;
        let max_turns = self.config.max_turns;
        self.fail(&Error::MaxTurns { max_turns }, None);
        Ok(())
    }

    /// A custom agent's answer: its function, with its edits applied and streamed as they
    /// come. Sets the status the execution ends with.
    async fn custom(
        &mut self,
        state: &mut LlmSession,
        custom: &CustomFn,
    ) -> Result<(), Interrupted> {
        self.emit(AgentEvent::MessageStart {
            role: Role::Assistant,
        });
        let (edits, mut made) = mpsc::unbounded_channel();
        let mut work = custom(CustomTurn::new(state, edits));
        let mut text: Option<String> = None;
        let outcome = loop {
            // Edits first: they come before what the function returns.
            let next = poll_fn(|cx| {
                if let Poll::Ready(Some(edit)) = made.poll_recv(cx) {
                    return Poll::Ready(Err(edit));
                }
                work.as_mut().poll(cx).map(Ok)
            });
            let step = match self.flush().await {
                Ok(()) => self.watch.wait(next, For::Work).await,
                Err(Interrupted) => Err(Interrupted),
            };
            match step {
                Ok(Err(edit)) => self.apply(state, edit, &mut text),
                Ok(Ok(outcome)) => break Ok(outcome),
                Err(Interrupted) => break Err(Interrupted),
            }
        };
        drop(work);
        // What it did before it returned.
        while let Ok(edit) = made.try_recv() {
            self.apply(state, edit, &mut text);
        }
        let outcome = match outcome {
            Ok(Ok(last)) if !last.is_empty() => {
                self.apply(state, Edit::Text(last), &mut text);
                Ok(Ok(()))
            }
            other => other.map(|outcome| outcome.map(drop)),
        };
        if let Some(text) = &text {
            self.emit(AgentEvent::TextEnd { text: text.clone() });
        }
        let content = text
            .map(|text| vec![AssistantContent::Text { text }])
            .unwrap_or_default();
        let mut partial = AssistantMessage {
            content,
            ..AssistantMessage::default()
        };
        state.status = Status::Completed;
        match outcome {
            Ok(Ok(())) => {
                self.end(state, Message::Assistant(partial));
                Ok(())
            }
            Ok(Err(error)) => {
                state.status = Status::Error;
                partial.stop_reason = StopReason::Error;
                let error = Error::Model(ModelError::other(error));
                let message = Message::Error(ErrorMessage {
                    error: error.to_string(),
                    partial: Some(partial),
                });
                self.fail(&error, Some(message.clone()));
                self.end(state, message);
                Ok(())
            }
            Err(Interrupted) => {
                partial.stop_reason = StopReason::Aborted;
                self.end(state, Message::Aborted(AbortedMessage { partial }));
                Err(Interrupted)
            }
        }
    }

    /// Applies one edit of a custom agent's to `state`, and streams it.
    fn apply(&mut self, state: &mut LlmSession, edit: Edit, text: &mut Option<String>) {
        match edit {
            Edit::Text(piece) => {
                if text.is_none() {
                    self.emit(AgentEvent::TextStart);
                }
                text.get_or_insert_with(String::new).push_str(&piece);
                self.emit(AgentEvent::TextDelta { delta: piece });
            }
            Edit::Custom(custom) => {
                state.custom.clone_from(&custom);
                self.emit(AgentEvent::CustomUpdate { custom });
            }
            Edit::Artifact(artifact) => {
                artifact.clone().put_in(&mut state.artifacts);
                self.emit(AgentEvent::ArtifactUpdate { artifact });
            }
        }
    }

    /// The agent's tool named `name`, else the policy's.
    fn tool(&self, name: &str) -> Option<&'a Tool> {
        tool(self.config, self.policy, name)
    }

    /// Whether a call of `name` is for the caller to run: a remote tool of the agent's, or else
    /// one of the session's own tools. Any other name is a local call, which fails as unknown.
    fn is_remote(&self, state: &LlmSession, name: &str) -> bool {
        match self.tool(name) {
            Some(tool) => !tool.is_local(),
            None => state.tools.iter().any(|tool| tool.name == name),
        }
    }

    /// Whether a local call of `name` waits for the caller's approval: its tool needs it, the
    /// connection offers it, and no gate of the connection's asks in the execution's course.
    fn waits_for_approval(&self, name: &str) -> bool {
        self.tool(name).is_some_and(Tool::requires_approval)
            && self
                .policy
                .is_none_or(|policy| policy.offers(name) && !policy.has_gate())
    }

    /// What the model is asked: the session's system prompt and conversation, the agent's tools
    /// and then the session's own (but for any an agent tool's name hides).
    fn request(&self, state: &LlmSession) -> ModelRequest {
        let mut tools = self.config.specs.clone();
        if let Some(policy) = self.policy {
            tools.extend(
                policy
                    .tools()
                    .iter()
                    .filter(|tool| {
                        !self
                            .config
                            .tools
                            .iter()
                            .any(|own| own.name() == tool.name())
                    })
                    .map(Tool::spec),
            );
            tools.retain(|spec| policy.offers(&spec.name));
        }
        tools.extend(
            state
                .tools
                .iter()
                .filter(|spec| self.tool(&spec.name).is_none())
                .cloned(),
        );
        // The conversation is shared, not copied: the model reads the session's own messages.
        let request = ModelRequest::new(state.messages.clone(), tools).with_options(state.options);
        let prompt = match self.policy {
            Some(policy) => policy.prompt(state.system_prompt.as_deref()),
            None => state.system_prompt.clone(),
        };
        match prompt {
            Some(prompt) => request.with_system_prompt(prompt),
            None => request,
        }
    }

    /// Runs the local calls concurrently, but for those refused up front (with the reason
    /// given); their deltas stream as they come, their ends and results in call order. Every
    /// call gets a result: one interrupted, or whose stream ended without one, an error result
    /// saying so.
    ///
    /// Long by design: one loop over the running calls, whose order rules (deltas as they come,
    /// ends in call order) need its whole state in view.
    async fn run_tools(
        &mut self,
        state: &mut LlmSession,
        calls: Vec<(ToolCall, Option<String>)>,
    ) -> Result<(), Interrupted> {
        if calls.is_empty() {
            return Ok(());
        }
        let mut running = SelectAll::new();
        let (calls, refusals): (Vec<_>, Vec<_>) = calls.into_iter().unzip();
        // Each call's span, and whether its approval was refused.
        let mut spans: Vec<Option<(ToolSpan, bool)>> = Vec::with_capacity(calls.len());
        for (index, (call, refusal)) in calls.iter().zip(refusals).enumerate() {
            spans
                .push((self.spans.as_ref()).map(|turn| (turn.tool(call, true), refusal.is_some())));
            self.emit(AgentEvent::ToolExecutionStart {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                args: Box::new(call.arguments.clone()),
            });
            let events = match (refusal, self.tool(&call.name)) {
                (Some(refusal), _) => {
                    futures_util::stream::once(async move { ToolEvent::Failed(refusal) }).boxed()
                }
                (None, Some(tool)) => match self.policy.and_then(|policy| policy.check(call)) {
                    None => tool.run(call.id.clone(), call.arguments.clone()),
                    Some(check) => gated(check, tool.clone(), call),
                },
                (None, None) => futures_util::stream::once({
                    let name = call.name.clone();
                    async move { ToolEvent::Failed(format!("there is no tool named `{name}`")) }
                })
                .boxed(),
            };
            // The tool runs in its span: what it asks of others (a client's tool) carries it.
            let events = match spans.last().and_then(Option::as_ref) {
                Some((span, _)) => events.with_context(span.context().clone()).boxed(),
                None => events,
            };
            running.push(UntilResult {
                index,
                events: Some(events),
            });
        }
        let mut done: BTreeMap<usize, ToolResultMessage> = BTreeMap::new();
        // What each call attached so far.
        let mut attached: Vec<Vec<Attachment>> = vec![Vec::new(); calls.len()];
        let mut next_end = 0;
        let outcome = loop {
            let room = self.outbox.len() < BATCH;
            let ready = poll_fn(|cx| ready_from(room, &mut running, cx)).await;
            let next = match ready {
                Some(next) => Ok(next),
                None => self.wait_from(&mut running).await,
            };
            let (index, event) = match next {
                Ok(Some(item)) => item,
                Ok(None) => break Ok(()),
                Err(Interrupted) => break Err(Interrupted),
            };
            let call = &calls[index];
            let (content, details, is_error, attachments) = match event {
                ToolEvent::Delta(delta) => {
                    self.emit(AgentEvent::ToolExecutionDelta {
                        tool_call_id: call.id.clone(),
                        delta,
                    });
                    continue;
                }
                ToolEvent::Data { name, data } => {
                    self.emit(AgentEvent::ToolExecutionData {
                        tool_call_id: call.id.clone(),
                        name,
                        data: Box::new(data),
                    });
                    continue;
                }
                ToolEvent::Attachment(attachment) => {
                    attached[index].push(attachment);
                    continue;
                }
                ToolEvent::Complete { output, details } => {
                    (output, details, false, std::mem::take(&mut attached[index]))
                }
                // A failed call's attachments are dropped with it.
                ToolEvent::Failed(error) => {
                    if let Some(logger) = self.logger {
                        let record = json!({"tool": call.name, "error": error});
                        logger.log(Level::Warning, record);
                    }
                    (error, None, true, Vec::new())
                }
            };
            if let Some((span, denied)) = spans[index].take() {
                let outcome = match (is_error, denied) {
                    (false, _) => Outcome::Completed,
                    (true, true) => Outcome::Denied,
                    (true, false) => Outcome::Failed,
                };
                span.end(outcome, Some(&content));
            }
            done.insert(
                index,
                ToolResultMessage {
                    tool_call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    content,
                    details,
                    is_error,
                    attachments,
                },
            );
            // Emit every result that is next in call order.
            while let Some(result) = done.get(&next_end) {
                self.emit(end_event(result));
                next_end += 1;
            }
        };
        // Stops the tools still running.
        drop(running);
        let (unfinished, ended) = if outcome.is_err() {
            (
                "the execution was cancelled before the tool finished",
                Outcome::Cancelled,
            )
        } else {
            ("the tool ended without a result", Outcome::Failed)
        };
        for (span, _) in spans.into_iter().flatten() {
            span.end(ended, Some(unfinished));
        }
        for (index, call) in calls.iter().enumerate() {
            done.entry(index).or_insert_with(|| ToolResultMessage {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: unfinished.to_owned(),
                details: None,
                is_error: true,
                attachments: Vec::new(),
            });
        }
        for result in done.range(next_end..).map(|(_, result)| result) {
            self.emit(end_event(result));
        }
        for result in done.into_values() {
            self.add(state, Message::ToolResult(result));
        }
        outcome
    }
}

/// The agent's tool named `name`, else the connection's `policy`'s.
pub(crate) fn tool<'a>(
    config: &'a Config,
    policy: Option<&'a Policy>,
    name: &str,
) -> Option<&'a Tool> {
    let policy = policy.map(Policy::tools).unwrap_or_default();
    config
        .tools
        .iter()
        .chain(policy)
        .find(|tool| tool.name() == name)
}

/// A local call's events once `check` lets it run; a refusal is its failure.
fn gated(
    check: futures_util::future::BoxFuture<'static, Result<(), String>>,
    tool: Tool,
    call: &ToolCall,
) -> BoxStream<'static, ToolEvent> {
    let (id, args) = (call.id.clone(), call.arguments.clone());
    futures_util::stream::once(async move {
        match check.await {
            Ok(()) => tool.run(id, args),
            Err(reason) => {
                futures_util::stream::once(async move { ToolEvent::Failed(reason) }).boxed()
            }
        }
    })
    .flatten()
    .boxed()
}

/// The next item of `stream` if the outbox has `room` and the item is ready now.
///
/// The loop asks this for every event, through a `poll_fn`, and calls the async
/// [`Turn::wait_from`] only when it says `None`: that future is large, and making one per event
/// would cost more than the event itself.
fn ready_from<T>(
    room: bool,
    stream: &mut (impl Stream<Item = T> + Unpin),
    cx: &mut Context<'_>,
) -> Poll<Option<Option<T>>> {
    if !room {
        return Poll::Ready(None);
    }
    Poll::Ready(match stream.poll_next_unpin(cx) {
        Poll::Ready(item) => Some(item),
        Poll::Pending => None,
    })
}

/// A local tool's events, tagged with its call's index, up to its result: its stream is dropped
/// there, and nothing it does after counts.
struct UntilResult {
    index: usize,
    events: Option<BoxStream<'static, ToolEvent>>,
}

impl Stream for UntilResult {
    type Item = (usize, ToolEvent);

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(events) = &mut self.events else {
            return Poll::Ready(None);
        };
        let event = ready!(events.poll_next_unpin(cx));
        if !matches!(
            event,
            Some(ToolEvent::Delta(_) | ToolEvent::Attachment(_) | ToolEvent::Data { .. })
        ) {
            self.events = None;
        }
        Poll::Ready(event.map(|event| (self.index, event)))
    }
}

/// The `tool_execution_end` event of a local call's result.
fn end_event(result: &ToolResultMessage) -> AgentEvent {
    AgentEvent::ToolExecutionEnd {
        tool_call_id: result.tool_call_id.clone(),
        output: result.content.clone(),
        details: result.details.clone().map(Box::new),
        is_error: result.is_error,
        attachments: result.attachments.clone(),
    }
}
