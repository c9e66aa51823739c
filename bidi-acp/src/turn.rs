//! Prompt turns: each runs in a task of its own once it waits, its events shown as
//! `session/update`s in the order the agent made them, and the tools that need permission
//! asked of the client first.
//!
//! An [`LlmAgent`]'s turns run on their session's agent connection, kept from one turn to the
//! next ([`Live`]): each prompt is one more input on it. The agent's task (the connection is
//! opened with a `bidi_core::Driver`) runs in the turn's own task, polled beside the turn's
//! pump whatever the pump waits on ([`Live::beside`]): an event crosses no task and wakes no
//! other thread (a long session's round trip went from 0.76 to 0.98 of the ACP SDK's bare
//! agent), and the agent still runs, timers and all, while the pump waits for the client's
//! writer, which the agent's own requests to the editor share. (A connection run in place,
//! `ConnectOptions::in_place`, runs its action only while its reader awaits it: an editor
//! request the agent was writing when the pump took its turn at the writer never finished.)
//!
//! A turn is a wire on the wire seam (`bidi_flow::wire`): `Updates` makes the `session/update`s (and the markers
//! of the calls the turn reached, for the permission gate), the client is the sink (it writes
//! them in order, marks each reached call after what precedes it, and is closed by
//! `session/cancel`, with `Cancelled::ByClient`, or by the client going away, with
//! `PeerGone::Disconnected`), and `bidi_flow::wire::pump` drives them. A bridged agent's turn is the
//! same pump with the bridge's updates as the wire: the crate has no turn loop of its own.
//!
//! The permission gate runs in the execution, ahead of the events the pump has still to write,
//! so it waits until everything up to its call's `tool_call` (shown `pending` when the gate
//! will ask) is written before it sends `session/request_permission`. A cancelled turn's
//! pending permission request does not refuse the call (that would race the cancellation: the
//! loop could read the refusal and call the model again); the cancellation drops it with the
//! tool. The provider's `content_filter` (`StopReason::Refusal`) is ACP's `refusal`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol_schema::v1::{
    CLIENT_METHOD_NAMES, ContentBlock, Error, PermissionOptionKind, PromptRequest, PromptResponse,
    RequestId, RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SessionId, SessionUpdate, StopReason, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields,
};
use bidi_core::{BoxError, PeerGone};
use bidi_flow::text::cap;
use bidi_flow::wire::{Closed, Ended, Frames, Sink, Wire};
use bidi_llm::{
    AgentEvent, Code as LlmCode, ExecuteResult, LlmAgent, Message, Policy, TurnInput, TurnState,
    execute,
};
use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::bridge::{Turns, Workspace};
use crate::content::{self, chunk};
use crate::editor;
use crate::plan::{PLAN_TOOL, plan};
use crate::policy::{Mode, Permission, Rules, locations};
use crate::server::{Backend, Cancelled, Shared, busy, no_session, tool_done};

mod live;

use live::Gate;
pub(crate) use live::{Idle, Live};

/// Checks a prompt and marks its session running: the session, the user message, the turn's
/// cancellation, and the session's agent connection, which the turn holds while it runs.
pub(crate) fn start(shared: &Shared, request: PromptRequest) -> Result<Turn, Error> {
    let mut sessions = shared.sessions();
    let Some(slot) = sessions.get_mut(&request.session_id.0) else {
        return Err(no_session(&request.session_id));
    };
    if slot.loading {
        return Err(busy(
            &request.session_id,
            "it is being loaded; wait for the answer to session/load",
        ));
    }
    if slot.running.is_some() {
        return Err(busy(
            &request.session_id,
            "a prompt turn runs on it; cancel it (session/cancel) or wait for its answer",
        ));
    }
    let token = shared.stop.child_token();
    slot.running = Some(token.clone());
    slot.turn = shared.turns.fetch_add(1, Ordering::Relaxed) + 1;
    // The caller's trace, when its `_meta` carries one (`traceparent`, `tracestate`).
    let caller = request
        .meta
        .as_ref()
        .and_then(|meta| bidi_flow::caller_context(&bidi_flow::JsonCarrier(meta)));
    Ok(Turn {
        session_id: request.session_id,
        prompt: request.prompt,
        token,
        number: slot.turn,
        live: shared.take_agent(slot),
        caller,
    })
}

/// A prompt turn about to run.
pub(crate) struct Turn {
    session_id: SessionId,
    prompt: Vec<ContentBlock>,
    token: CancellationToken,
    /// Its number on the connection.
    number: u64,
    /// The session's agent connection, if one was kept from its last turn.
    live: Option<Live>,
    /// The trace context of the prompt's caller, from its `_meta`.
    caller: Option<opentelemetry::Context>,
}

/// One prompt turn (in a task of its own once it waits): its updates, then its one answer. A
/// prompt whose `_meta` names its caller's trace runs in it: on a connection opened in that
/// trace (the session's kept one if it was), so that its turn is a child of the caller's
/// span.
pub(crate) async fn prompt(shared: Arc<Shared>, id: RequestId, mut started: Turn) {
    match started.caller.take() {
        Some(caller) => run(shared, id, started).with_context(caller).await,
        None => run(shared, id, started).await,
    }
}

/// [`prompt`]'s turn, in the caller's context.
async fn run(shared: Arc<Shared>, id: RequestId, started: Turn) {
    let Turn {
        session_id,
        prompt,
        token,
        number,
        live,
        caller: _,
    } = started;
    let (mut result, live) = match &shared.agent {
        Backend::Llm(agent) => turn(&shared, agent, &session_id, &prompt, &token, live).await,
        Backend::Bridged(turns) => {
            let result = bridged(&shared, turns, &session_id, prompt, &token).await;
            (result, None)
        }
    };
    if token.is_cancelled() && result.is_ok() {
        result = Ok(StopReason::Cancelled);
    }
    let unwanted = end(&shared, &session_id, number, live);
    shared.respond(id, result.map(PromptResponse::new)).await;
    // A connection no session keeps (its session closed, or left out of those kept) ends here.
    drop(unwanted);
}

/// Marks turn `number` of the session over and gives the session its connection `live` back.
/// Answers the connection no session keeps any more, to drop: `live` if the session is gone
/// or is not the turn's any more, or the one the bound on idle connections leaves out.
fn end(shared: &Shared, session_id: &SessionId, number: u64, live: Option<Live>) -> Option<Live> {
    let mut sessions = shared.sessions();
    match sessions.get_mut(&session_id.0) {
        Some(slot) if slot.turn == number => {
            slot.running = None;
            let live = live?;
            shared.keep_agent(&mut sessions, &session_id.0, live)
        }
        _ => live,
    }
}

/// A turn of an agent of one's own, through its bridge.
async fn bridged(
    shared: &Arc<Shared>,
    turns: &Arc<dyn Turns>,
    session_id: &SessionId,
    prompt: Vec<ContentBlock>,
    token: &CancellationToken,
) -> Result<StopReason, Error> {
    let workspace = shared.sessions().get(&session_id.0).map(|slot| {
        let mode = shared.rules.modes.get(slot.mode);
        Workspace::new(slot.cwd.clone(), mode.map(|mode| mode.id().to_owned()))
    });
    let Some(workspace) = workspace else {
        return Err(no_session(session_id));
    };
    let run = turns.turn(
        Arc::clone(shared),
        session_id.clone(),
        prompt,
        workspace,
        token.clone(),
    );
    run.await
}

/// One prompt turn of an [`LlmAgent`] on the session's connection: `live`, if it fits the
/// session's mode, else a new one. Its answer, and the connection if it may take the next
/// prompt (not after a cancellation, nor once it failed).
async fn turn(
    shared: &Arc<Shared>,
    agent: &LlmAgent,
    session_id: &SessionId,
    prompt: &[ContentBlock],
    token: &CancellationToken,
    live: Option<Live>,
) -> (Result<StopReason, Error>, Option<Live>) {
    let message = match content::user_message(prompt) {
        Ok(message) => message,
        Err(error) => return (Err(error), live),
    };
    let Some(mut live) = connection(shared, agent, session_id, live) else {
        // Closed since the prompt came: its turn was cancelled.
        return (Ok(StopReason::Cancelled), None);
    };
    let open = Arc::new(Open::default());
    live.begin(token.clone(), Arc::clone(&open));
    let asker = live.gate.bind(Arc::clone(shared));
    let input = TurnInput::User(message);
    let (result, kept) = live
        .beside(|conn| async move {
            let mut run = match execute(conn, input).await {
                Ok(run) => run,
                Err(error) => {
                    let error = Error::internal_error()
                        .data(format!("the agent refused the turn: {error}"));
                    return (Err(error), false);
                }
            };
            let mut updates = Updates::new(&shared.rules, &asker, open);
            let sink = Client {
                shared,
                session_id,
                token,
            };
            let ended = bidi_flow::wire::pump(&mut run, None, &mut updates, &sink, None).await;
            // A gate still waiting for its call to be shown waits no more.
            updates.open.close();
            if matches!(ended, Ended::Stopped) {
                drop(run);
                // A client still there learns that the tool calls still running failed.
                if token.is_cancelled() && !shared.is_stopped() {
                    for update in updates.unfinished() {
                        if shared.update(session_id, update).await.is_err() {
                            break;
                        }
                    }
                }
                // The execution saves the session as it stops: the next turn, on a new
                // connection, finds it idle.
                conn.done().await;
                return (Ok(StopReason::Cancelled), false);
            }
            match run.result().await {
                Ok(result) => (stop_reason(&result), true),
                Err(error) => (Err(Error::internal_error().data(error.to_string())), false),
            }
        })
        .await;
    (result, kept.then_some(live))
}

/// The connection a turn of session `session_id` runs on: `live` if it fits the session's
/// mode, else a new one with the session's mode, MCP tools and directory. `None` if the
/// session is not open here any more.
fn connection(
    shared: &Arc<Shared>,
    agent: &LlmAgent,
    session_id: &SessionId,
    mut live: Option<Live>,
) -> Option<Live> {
    // The caller's trace (none without one): a kept connection serves only its own.
    let trace = {
        let current = opentelemetry::Context::current();
        let caller = current.span().span_context().clone();
        caller.is_remote().then(|| caller.trace_id())
    };
    let (mode, cwd, mcp) = {
        let sessions = shared.sessions();
        let slot = sessions.get(&session_id.0)?;
        if let Some(live) = live.take_if(|live| live.fits(slot.mode, trace)) {
            return Some(live);
        }
        (slot.mode, slot.cwd.clone(), slot.mcp.tools().to_vec())
    };
    // One that does not fit ends here, out of the lock.
    drop(live);
    // The agent's own tools hide the editor's of the same name, as they hide the MCP ones.
    let hidden = |name: &str| agent.tools().iter().any(|tool| tool.name() == name);
    let mut tools = editor::tools(shared.offers(), shared, session_id, &cwd, hidden);
    tools.tools.extend(mcp);
    Some(Live::open(
        shared, agent, session_id, mode, trace, cwd, tools,
    ))
}

/// The client a turn's updates go to. The turn stops when the client sends
/// `session/cancel` ([`Cancelled::ByClient`]) or goes away ([`PeerGone::Disconnected`]).
pub(crate) struct Client<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) session_id: &'a SessionId,
    pub(crate) token: &'a CancellationToken,
}

impl Sink<Shown> for Client<'_> {
    async fn send(&self, shown: Shown) -> Result<(), Closed> {
        for update in shown.update.into_iter().chain(shown.more) {
            if self.shared.update(self.session_id, update).await.is_err() {
                return Err(Closed);
            }
        }
        if let Some(Reached { call, asks, open }) = shown.reached {
            open.reached(call, asks);
        }
        Ok(())
    }

    async fn closed(&self) -> BoxError {
        self.token.cancelled().await;
        if self.shared.is_stopped() {
            Box::new(PeerGone::Disconnected)
        } else {
            Box::new(Cancelled::ByClient)
        }
    }
}

/// What one event of a turn writes to its client, in order: its update (or a bridge's
/// updates), then the tool call it reached (all that came before it written), which may then
/// ask for permission. Held inline: an update costs no allocation of its own.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    pub(crate) update: Option<SessionUpdate>,
    pub(crate) more: Vec<SessionUpdate>,
    pub(crate) reached: Option<Reached>,
}

/// A tool call the turn reached, and whether it was shown waiting for permission.
#[derive(Debug)]
pub(crate) struct Reached {
    call: String,
    asks: bool,
    open: Arc<Open>,
}

impl Frames for Shown {
    fn is_empty(&self) -> bool {
        self.update.is_none() && self.more.is_empty() && self.reached.is_none()
    }

    /// Each event's updates go as they come, as the client's own writer batches nothing
    /// either.
    fn is_full(&self) -> bool {
        !self.is_empty()
    }
}

/// The policy of a session's connection: its mode's prompt and tools, and permissions asked
/// of the client (by `gate`, for the turn running on the connection).
fn policy(gate: Gate, mode: Option<&Mode>) -> Policy {
    let mut policy = Policy::new();
    if let Some(mode) = mode {
        if let Some(prompt) = &mode.system_prompt {
            policy = policy.system_prompt(prompt.clone());
        }
        if mode.tools.is_some() {
            let mode = mode.clone();
            policy = policy.offer(move |name| mode.offers(name));
        }
    }
    let mode_id = mode.map(|mode| mode.id().to_owned()).unwrap_or_default();
    policy.gate(move |call| {
        // For the turn running now.
        let asker = gate.asker();
        let call = call.clone();
        let mode_id = mode_id.clone();
        async move {
            let Some(asker) = asker else {
                return Err("the client went away".to_owned());
            };
            if !asker.needs_permission(&call.name) {
                return Ok(());
            }
            match asker.permission {
                Permission::Allow => Ok(()),
                Permission::Reject => Err(format!(
                    "`{}` needs permission, which the mode `{mode_id}` never gives",
                    call.name
                )),
                _ => asker.ask(&call).await,
            }
        }
    })
}

/// Asks the client whether a tool call of a prompt turn may run.
struct Asker {
    shared: Arc<Shared>,
    session_id: SessionId,
    token: CancellationToken,
    cwd: PathBuf,
    open: Arc<Open>,
    /// The connection's mode's way with the tools that need permission.
    permission: Permission,
    /// The connection's own tools that need permission.
    asks: Arc<[&'static str]>,
}

/// The tool calls of a turn: those the turn reached (everything the agent streamed before
/// them, and their `tool_call`, written), and those shown and not ended, in order.
///
/// A call's permission request waits until the turn reached the call, so that the client reads
/// it after the text the model streamed before the call and after the call itself: the
/// execution asks as soon as the call starts, while the events before it may still be on
/// their way to the turn.
#[derive(Debug, Default)]
pub(crate) struct Open {
    calls: Mutex<Calls>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct Calls {
    /// Shown and not ended, in order.
    open: Vec<String>,
    /// Reached: whether each was shown as waiting for permission.
    reached: HashMap<String, bool>,
    /// The turn reads no more events: nothing is reached any more.
    closed: bool,
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn show(&self, id: &str) {
        self.lock().open.push(id.to_owned());
    }

    fn end(&self, id: &str) {
        self.lock().open.retain(|open| open != id);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().open)
    }

    /// The turn wrote everything up to call `id`, which it showed as waiting for permission
    /// if `asks`.
    fn reached(&self, id: String, asks: bool) {
        self.lock().reached.insert(id, asks);
        self.changed.notify_waiters();
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_waiters();
    }

    /// Waits until the turn reached call `id`: whether it was shown as waiting for
    /// permission; `None` if the turn stopped reading first.
    async fn reach(&self, id: &str) -> Option<bool> {
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let calls = self.lock();
                if let Some(asks) = calls.reached.get(id) {
                    return Some(*asks);
                }
                if calls.closed {
                    return None;
                }
            }
            changed.await;
        }
    }
}

/// The `tool_call` update that shows a call.
fn tool_call(
    rules: &Rules,
    cwd: &Path,
    id: String,
    name: String,
    args: Value,
    status: ToolCallStatus,
) -> SessionUpdate {
    SessionUpdate::ToolCall(
        ToolCall::new(id, name.clone())
            .kind(rules.kind(&name))
            .locations(locations(&args, cwd))
            .name(name)
            .status(status)
            .raw_input(args),
    )
}

impl Asker {
    /// Whether tool `name` needs permission: the server's rules name it, or it is one of the
    /// connection's own that do (the editor's that change things).
    fn needs_permission(&self, name: &str) -> bool {
        self.shared.rules.needs_permission(name) || self.asks.contains(&name)
    }

    /// The answer that holds for tool `name` for the rest of the session, if any.
    fn always(&self, name: &str) -> Option<bool> {
        self.shared
            .sessions()
            .get(&self.session_id.0)
            .and_then(|slot| slot.always.get(name).copied())
    }

    /// Whether a call of tool `name` will ask the client: the turn shows it as waiting for
    /// permission.
    fn will_ask(&self, name: &str) -> bool {
        self.needs_permission(name)
            && !matches!(self.permission, Permission::Allow | Permission::Reject)
            && self.always(name).is_none()
    }

    /// Says the call the user allowed runs now.
    async fn running(&self, call: &bidi_llm::ToolCall) -> Result<(), String> {
        let update = SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call.id.clone(),
            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
        ));
        self.shared
            .update(&self.session_id, update)
            .await
            .map_err(|_| "the client went away".to_owned())
    }

    /// `Ok` if the user allows `call`; else why not.
    async fn ask(&self, call: &bidi_llm::ToolCall) -> Result<(), String> {
        let name = &call.name;
        // The client reads what the model said before the call, and the call, first.
        let shown_waiting = tokio::select! {
            () = self.token.cancelled() => return std::future::pending().await,
            reached = self.open.reach(&call.id) => reached,
        };
        let Some(shown_waiting) = shown_waiting else {
            return Err("the prompt turn ended before the user could be asked".to_owned());
        };
        match self.always(name) {
            // Answered while this call was being shown (another call of the same tool).
            Some(true) if shown_waiting => return self.running(call).await,
            Some(true) => return Ok(()),
            Some(false) => {
                return Err(format!(
                    "the user rejected `{name}` for the rest of the session"
                ));
            }
            None => {}
        }
        let rules = &self.shared.rules;
        let tool_call = ToolCallUpdate::new(
            call.id.clone(),
            ToolCallUpdateFields::new()
                .title(name.clone())
                .kind(rules.kind(name))
                .status(ToolCallStatus::Pending)
                .locations(locations(&call.arguments, &self.cwd))
                .raw_input(call.arguments.clone()),
        );
        let request =
            RequestPermissionRequest::new(self.session_id.clone(), tool_call, rules.options());
        let params = serde_json::to_value(&request)
            .map_err(|error| format!("the permission request could not be made: {error}"))?;
        let answer = tokio::select! {
            () = self.token.cancelled() => {
                // The prompt turn cancels the execution, which drops this wait with the tool.
                // A refusal here would race with that: the loop could read it first and call
                // the model again.
                return std::future::pending().await;
            }
            answer = self.shared.request(CLIENT_METHOD_NAMES.session_request_permission, params) => answer,
        };
        let answer = answer.map_err(|error| {
            format!(
                "the user could not be asked for permission: {}",
                error.message
            )
        })?;
        let answer: RequestPermissionResponse =
            serde_json::from_value(answer).map_err(|error| {
                format!("the client's answer to the permission request is malformed: {error}")
            })?;
        let option = match answer.outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id,
            _ => return Err("the user dismissed the permission request".to_owned()),
        };
        let Some(kind) = rules.chosen(&option.0) else {
            return Err(format!(
                "the client chose `{}`, an option it was not offered",
                cap(&option.0)
            ));
        };
        let remember = |allow: bool| async move {
            if let Some(slot) = self.shared.sessions().get_mut(&self.session_id.0) {
                slot.always.insert(name.clone(), allow);
            }
            if let Err(error) = self.shared.keep(&self.session_id.0).await {
                log!("the answer for {name:?} holds on this connection only: {error}");
            }
        };
        match kind {
            PermissionOptionKind::AllowOnce => self.running(call).await,
            PermissionOptionKind::AllowAlways => {
                remember(true).await;
                self.running(call).await
            }
            PermissionOptionKind::RejectAlways => {
                remember(false).await;
                Err(format!(
                    "the user rejected `{name}` for the rest of the session"
                ))
            }
            _ => Err(format!("the user rejected `{name}`")),
        }
    }
}

/// The updates a turn's events make; it keeps the output its tools streamed so far.
struct Updates<'a> {
    rules: &'a Rules,
    asker: &'a Asker,
    output: HashMap<String, String>,
    /// What calls showed besides their output (an editor's terminal, a diff), shown before it.
    shown: HashMap<String, Vec<ToolCallContent>>,
    open: Arc<Open>,
    /// The plan calls not ended: shown as `plan` updates, not as tool calls.
    plans: Vec<String>,
}

impl<'a> Updates<'a> {
    fn new(rules: &'a Rules, asker: &'a Asker, open: Arc<Open>) -> Self {
        Self {
            rules,
            asker,
            output: HashMap::new(),
            shown: HashMap::new(),
            open,
            plans: Vec::new(),
        }
    }

    /// The calls still open, as failed for the cancellation.
    fn unfinished(&mut self) -> Vec<SessionUpdate> {
        self.open
            .take()
            .into_iter()
            .map(|id| {
                tool_done(
                    &id,
                    "the prompt turn was cancelled before the tool finished",
                    &[],
                    None,
                    true,
                )
            })
            .collect()
    }

    /// `content` after what call `id` showed besides its output.
    fn before(&self, id: &str, content: Vec<ToolCallContent>) -> Vec<ToolCallContent> {
        match self.shown.get(id) {
            Some(shown) => shown.iter().cloned().chain(content).collect(),
            None => content,
        }
    }

    /// A loop event as the update that shows it, if one does; a call that `asks` for
    /// permission is shown as waiting for it.
    fn of(&mut self, event: AgentEvent, asks: bool) -> Option<SessionUpdate> {
        Some(match event {
            AgentEvent::TextDelta { delta } => SessionUpdate::AgentMessageChunk(chunk(&delta)),
            AgentEvent::ThinkingDelta { delta } => SessionUpdate::AgentThoughtChunk(chunk(&delta)),
            // ACP has no retry: the editor shows it as the agent's thought, in words.
            AgentEvent::ModelRetry { .. } => {
                SessionUpdate::AgentThoughtChunk(chunk(&event.note()?))
            }
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                args,
            } => {
                if tool_name == PLAN_TOOL
                    && let Some(plan) = plan(&args)
                {
                    self.plans.push(tool_call_id);
                    return Some(SessionUpdate::Plan(plan));
                }
                self.open.show(&tool_call_id);
                let status = if asks {
                    ToolCallStatus::Pending
                } else {
                    ToolCallStatus::InProgress
                };
                tool_call(
                    self.rules,
                    &self.asker.cwd,
                    tool_call_id,
                    tool_name,
                    *args,
                    status,
                )
            }
            AgentEvent::ToolExecutionDelta {
                tool_call_id,
                delta,
            } => {
                // An update's content replaces the call's: it is all the output so far.
                let output = self.output.entry(tool_call_id.clone()).or_default();
                output.push_str(&delta);
                let content = content::tool_content(output, &[]);
                let content = self.before(&tool_call_id, content);
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id,
                    ToolCallUpdateFields::new().content(content),
                ))
            }
            AgentEvent::ToolExecutionData {
                tool_call_id,
                name,
                data,
            } if name == editor::CONTENT => {
                let Ok(shown) = serde_json::from_value::<ToolCallContent>(*data) else {
                    return None;
                };
                self.shown
                    .entry(tool_call_id.clone())
                    .or_default()
                    .push(shown);
                let output = self.output.get(&tool_call_id);
                let content =
                    output.map_or_else(Vec::new, |output| content::tool_content(output, &[]));
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id.clone(),
                    ToolCallUpdateFields::new().content(self.before(&tool_call_id, content)),
                ))
            }
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                output,
                details,
                is_error,
                attachments,
                ..
            } => {
                self.output.remove(&tool_call_id);
                if let Some(at) = self.plans.iter().position(|id| *id == tool_call_id) {
                    self.plans.swap_remove(at);
                    return None; // Its plan update showed it.
                }
                self.open.end(&tool_call_id);
                let mut done = tool_done(
                    &tool_call_id,
                    &output,
                    &attachments,
                    details.map(|details| *details),
                    is_error,
                );
                if let Some(shown) = self.shown.remove(&tool_call_id)
                    && let SessionUpdate::ToolCallUpdate(update) = &mut done
                {
                    let content = update.fields.content.take().unwrap_or_default();
                    update.fields.content = Some(shown.into_iter().chain(content).collect());
                }
                done
            }
            _ => return None,
        })
    }
}

impl Wire for Updates<'_> {
    type Event = AgentEvent;
    type Output = ();
    type Frames = Shown;

    fn event(&mut self, event: AgentEvent, out: &mut Shown) {
        // A call's permission is asked once everything before it is shown, the call included.
        let reached = match &event {
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                ..
            } => Some((tool_call_id.clone(), self.asker.will_ask(tool_name))),
            _ => None,
        };
        let asks = reached.as_ref().is_some_and(|(_, asks)| *asks);
        out.update = self.of(event, asks);
        out.reached = reached.map(|(call, asks)| Reached {
            call,
            asks,
            open: Arc::clone(&self.open),
        });
    }

    /// The turn's answer says it failed: nothing to show.
    fn failed(&mut self, _: &str, _: &mut Shown) {}
}

/// How the turn ended, in ACP's terms: its state (`bidi_llm::TurnState`) as a stop reason; a
/// failure is an error answer.
fn stop_reason(result: &ExecuteResult) -> Result<StopReason, Error> {
    match result.state() {
        TurnState::Completed => {
            let last = result
                .messages
                .iter()
                .rev()
                .find_map(|message| match message {
                    Message::Assistant(message) => Some(message.stop_reason),
                    _ => None,
                });
            Ok(match last {
                Some(bidi_llm::StopReason::Length) => StopReason::MaxTokens,
                Some(bidi_llm::StopReason::Refusal) => StopReason::Refusal,
                _ => StopReason::EndTurn,
            })
        }
        TurnState::Aborted => Ok(StopReason::Cancelled),
        TurnState::Failed(failure) if failure.code == LlmCode::MaxTurns => {
            Ok(StopReason::MaxTurnRequests)
        }
        TurnState::Failed(failure) => Err(Error::internal_error().data(json!({
            "code": failure.code,
            "error": failure.error,
        }))),
        TurnState::Waiting { .. } => Err(Error::internal_error().data(
            "the model called tools the agent has no executor for; an ACP client cannot run them",
        )),
        other => Err(Error::internal_error().data(format!("the turn ended {}", other.name()))),
    }
}
