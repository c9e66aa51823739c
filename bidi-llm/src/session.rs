//! The session side of the agent loop: its persisted state ([`LlmSession`]), the [`Context`] a
//! client starts one from, where it stands ([`Status`]), and what an execution takes ([`TurnInput`]), checked against the session before anything
//! changes.

use std::collections::HashSet;
use std::time::Duration;

use bidi_session::{Change, Lease, MAX_UPDATE_ATTEMPTS, Renewal, Session, StoreError, now_ms};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::conversation::Conversation;
use crate::error::Error;
use crate::message::{Message, ToolCall, ToolResultMessage, UserMessage};
use crate::model::{ModelOptions, ToolSpec};
use crate::takeover::TakeOver;
use crate::tool::Tool;

/// Where a session stands: `snake_case` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// An execution runs on the session: what its readers see while its pending snapshot
    /// holds it (the store keeps no such status: a running execution is a pending snapshot,
    /// with its lease; sessions of bidi 0.1 were saved with it).
    #[schemars(description = "An execution runs on the session.")]
    Running,
    /// Tool calls wait for the caller: remote calls for their results, calls of tools that
    /// [need approval](crate::Tool::needs_approval) for a decision. The next input must answer
    /// them all.
    #[schemars(
        description = "Tool calls wait: the client's own tools for their results, the agent's \
                       tools that need approval for a decision. The next input must answer them all."
    )]
    AwaitingToolExecution,
    /// Nothing runs and nothing is pending: a new session, or the last execution finished or
    /// was cancelled.
    #[default]
    Completed,
    /// The last execution failed (the model failed, the turn limit, the store).
    Error,
}

/// An agent session's persisted state: `camelCase` JSON.
///
/// Besides the conversation and where it stands, a session keeps the context a client started
/// it with ([`Context`]): its system prompt and its own tools, which live in the session (in the
/// store), not in the process, so any agent sharing the store serves them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "A session: its system prompt, its client's own tools, the conversation, and \
                   where it stands."
)]
pub struct LlmSession {
    /// The system prompt every model call of the session starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The session's own tools, declared by its client: remote tools, offered to the model
    /// after the agent's. A call to one suspends the execution until the client sends its
    /// result, as a call of a [`Tool::remote`] does. Its arguments are not checked here: the
    /// client that runs it does. An agent's tool of the same name wins over it.
    #[schemars(
        description = "The client's own tools, offered to the model after the agent's: a call \
                       of one waits until the client sends its result. The agent's tool of the \
                       same name wins over it."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// How the session's model calls sample their answers.
    #[serde(default, skip_serializing_if = "ModelOptions::is_default")]
    pub options: ModelOptions,
    /// The whole conversation.
    #[serde(default)]
    pub messages: Conversation,
    /// Where the session stands.
    #[serde(default)]
    pub status: Status,
    /// The calls waiting for the caller, in call order: calls of remote tools wait for their
    /// results, calls of the agent's local tools (those that
    /// [need approval](crate::Tool::needs_approval)) for a decision. The next input must answer
    /// them all.
    #[schemars(
        description = "The calls waiting for the client, in call order: the client's own tools \
                       for their results, the agent's tools that need approval for a decision. \
                       The next input must answer them all."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_tool_calls: Vec<ToolCall>,
    /// The model of the session's last model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The model the session chose among the agent's ([`LlmAgent::choose_model`](crate::LlmAgent::choose_model)),
    /// by name: its turns call it instead of the agent's own.
    #[schemars(
        description = "The model the session chose among the agent's, by name: its turns call \
                       it instead of the agent's own."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_model: Option<String>,
    /// What the session's model calls cost in all, in the provider's currency.
    #[serde(default)]
    pub total_cost: f64,
    /// State of the application's own, JSON (`null` until set): what a
    /// [custom agent](crate::LlmAgent::custom) keeps between executions.
    #[schemars(
        description = "The application's own state, any JSON (null until set), kept between \
                       executions."
    )]
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub custom: Value,
    /// Named collections of parts the agent produced (files, documents), each kept once by
    /// name: a [custom agent](crate::LlmAgent::custom) adds and replaces them.
    #[schemars(
        description = "Named collections of parts the agent produced (files, documents), each \
                       kept once by name."
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<bidi_agent::Artifact>,
}

/// What a client starts a new session with: a system prompt, the conversation so far, and tools
/// of its own. camelCase JSON; unknown fields are refused.
///
/// The client's tools are **remote**: the model may call them, and a call suspends the execution
/// with `awaiting_tool_execution` until the client sends its result, as with a
/// [`Tool::remote`]. Their arguments are not checked by the agent (it has no type for them, only
/// the schema the client gave): the client that runs a call checks them and answers an error
/// result if they are wrong. The tools are kept in the session, so the execution that takes the
/// results may run on any agent sharing the store.
///
/// [`LlmAgent::new_session`](crate::LlmAgent::new_session) checks a context and makes it the
/// state a session starts from.
///
/// ```
/// use bidi_llm::Context;
/// use serde_json::json;
///
/// let context: Context = serde_json::from_value(json!({
///     "systemPrompt": "You help with files.",
///     "messages": [{"role": "user", "content": "Which file?"}],
///     "tools": [{
///         "name": "pick_file",
///         "description": "Asks the user to pick a file",
///         "parameters": {"type": "object", "properties": {}},
///     }],
/// }))?;
/// assert_eq!(context.tools[0].name, "pick_file");
/// assert!(serde_json::from_value::<Context>(json!({"prompt": "typo"})).is_err());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Context {
    /// The system prompt every model call of the session starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The conversation so far, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// The client's own tools, all remote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
}

impl Context {
    /// The state a session starts from with this context, once it is checked against the
    /// agent's own `tools`.
    pub(crate) fn into_session(self, tools: &[Tool]) -> Result<LlmSession, Error> {
        let refuse = |reason: String| Err(Error::InvalidContext { reason });
        let mut names = HashSet::new();
        for (index, tool) in self.tools.iter().enumerate() {
            let name = tool.name.as_str();
            if name.is_empty() {
                return refuse(format!("tool {index} has an empty name"));
            }
            if !names.insert(name) {
                return refuse(format!("two tools are named `{name}`"));
            }
            if tools.iter().any(|own| own.name() == name) {
                return refuse(format!(
                    "`{name}` is the name of one of the agent's own tools"
                ));
            }
            if !tool.parameters.is_object() {
                return refuse(format!(
                    "the parameters of tool `{name}` are not a JSON object (a JSON Schema of its arguments)"
                ));
            }
        }
        Ok(LlmSession {
            system_prompt: self.system_prompt,
            messages: self.messages.into(),
            tools: self.tools,
            ..LlmSession::default()
        })
    }
}

/// The input of one execution: a user message, or the answers to the pending tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[non_exhaustive]
pub enum TurnInput {
    /// Results for exactly the pending remote calls, when no call waits for approval.
    ToolResults(Vec<ToolResultMessage>),
    /// A user message.
    User(UserMessage),
    /// Answers to exactly the pending calls: results of the remote ones, decisions on those
    /// waiting for approval.
    Resume(Resume),
}

impl TurnInput {
    /// The messages the input adds to the conversation, the decisions it carries, and the
    /// user message that follows the decided calls' results.
    pub(crate) fn into_parts(self) -> (Vec<Message>, Vec<Approval>, Option<UserMessage>) {
        match self {
            Self::User(user) => (vec![Message::User(user)], Vec::new(), None),
            Self::ToolResults(results) => (
                results.into_iter().map(Message::ToolResult).collect(),
                Vec::new(),
                None,
            ),
            Self::Resume(resume) => (
                resume
                    .results
                    .into_iter()
                    .map(Message::ToolResult)
                    .collect(),
                resume.approvals,
                resume.message,
            ),
        }
    }
}

/// The answers to a session's pending tool calls: the results of its remote calls and the
/// caller's decisions on the calls waiting for approval. `camelCase` JSON; unknown fields are
/// refused.
///
/// ```
/// use bidi_llm::{Approval, Resume, TurnInput};
/// use serde_json::json;
///
/// let input: TurnInput = serde_json::from_value(json!({
///     "approvals": [{"toolCallId": "c1", "approved": false, "reason": "not today"}],
/// }))?;
/// assert_eq!(input, TurnInput::Resume(Resume::new().approval(Approval::deny("c1", "not today"))));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Resume {
    /// Results of the pending remote calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ToolResultMessage>,
    /// Decisions on the calls waiting for approval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<Approval>,
    /// What the user said next, after the answers: the model reads the answers, then this,
    /// and answers once. A user who moves on instead of answering the open calls sends this
    /// with every call answered as set aside ([`LlmAgent::set_aside`](crate::LlmAgent::set_aside)).
    #[schemars(
        description = "What the user says next, after the answers: the model reads the answers, \
                       then this, and answers once."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<UserMessage>,
}

impl Resume {
    /// No answers yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the result of a remote call.
    #[must_use]
    pub fn result(mut self, result: ToolResultMessage) -> Self {
        self.results.push(result);
        self
    }

    /// Adds a decision on a call waiting for approval.
    #[must_use]
    pub fn approval(mut self, approval: Approval) -> Self {
        self.approvals.push(approval);
        self
    }

    /// Adds what the user said next, read after the answers.
    #[must_use]
    pub fn message(mut self, message: UserMessage) -> Self {
        self.message = Some(message);
        self
    }
}

/// The caller's decision on a call waiting for approval. `camelCase` JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Approval {
    /// The call.
    pub tool_call_id: String,
    /// Whether it may run.
    pub approved: bool,
    /// Why, if the caller says; the model reads a denial's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The arguments the caller saw and decided on, if it says: they must be the call's, or
    /// the input is refused ([`Error::ModifiedArguments`]), so that a client cannot approve a
    /// call it changed.
    #[schemars(
        description = "The arguments the user saw and decided on, if given: they must be the \
                       call's, or the input is refused, so that a changed call is never approved."
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

impl Approval {
    /// The call `tool_call_id` may run.
    pub fn approve(tool_call_id: impl Into<String>) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            approved: true,
            reason: None,
            arguments: None,
        }
    }

    /// The same decision, on a call with these `arguments`: the input is refused if they are
    /// not the call's.
    #[must_use]
    pub fn with_arguments(mut self, arguments: Value) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// The call `tool_call_id` may not run, for `reason` (empty: no reason given).
    pub fn deny(tool_call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        let reason: String = reason.into();
        Self {
            tool_call_id: tool_call_id.into(),
            approved: false,
            reason: (!reason.is_empty()).then_some(reason),
            arguments: None,
        }
    }

    /// The error result the model reads for a denied call.
    pub(crate) fn denial(&self) -> String {
        match &self.reason {
            Some(reason) => format!("the user denied this call: {reason}"),
            None => "the user denied this call".to_owned(),
        }
    }
}

/// Whether `input` fits where `state` stands: it must answer exactly the pending calls (results
/// for the remote ones, decisions for those of `local` tools, which wait for approval), and a
/// user message must wait until none are pending.
fn check(
    state: &LlmSession,
    input: &TurnInput,
    local: &(dyn Fn(&str) -> bool + Sync),
) -> Result<(), Error> {
    let (awaiting, pending): (Vec<&ToolCall>, Vec<&ToolCall>) = state
        .pending_tool_calls
        .iter()
        .partition(|call| local(&call.name));
    let ids = |calls: &[&ToolCall]| calls.iter().map(|call| call.id.clone()).collect();
    let (results, approvals): (&[ToolResultMessage], &[Approval]) = match input {
        TurnInput::User(_) if pending.is_empty() && awaiting.is_empty() => return Ok(()),
        TurnInput::User(_) if pending.is_empty() => {
            return Err(Error::AwaitingApproval {
                pending: ids(&awaiting),
            });
        }
        TurnInput::User(_) => {
            return Err(Error::AwaitingToolResults {
                pending: ids(&pending),
            });
        }
        // Nothing to answer: a resume that only says something is a user message.
        TurnInput::Resume(Resume {
            results,
            approvals,
            message: Some(_),
        }) if pending.is_empty()
            && awaiting.is_empty()
            && results.is_empty()
            && approvals.is_empty() =>
        {
            return Ok(());
        }
        _ if pending.is_empty() && awaiting.is_empty() => return Err(Error::NothingPending),
        TurnInput::ToolResults(results) => (results, &[]),
        TurnInput::Resume(resume) => (&resume.results, &resume.approvals),
    };
    let mut seen = HashSet::new();
    for result in results {
        let id = &result.tool_call_id;
        let Some(call) = pending.iter().find(|call| &call.id == id) else {
            return Err(Error::NotPending { id: id.clone() });
        };
        if call.name != result.tool_name {
            return Err(Error::WrongTool {
                id: id.clone(),
                expected: call.name.clone(),
                found: result.tool_name.clone(),
            });
        }
        if !seen.insert(id.as_str()) {
            return Err(Error::DuplicateResult { id: id.clone() });
        }
    }
    let missing: Vec<String> = pending
        .iter()
        .filter(|call| !seen.contains(call.id.as_str()))
        .map(|call| call.id.clone())
        .collect();
    if !missing.is_empty() {
        return Err(Error::MissingResults { missing });
    }
    let mut decided = HashSet::new();
    for approval in approvals {
        let id = &approval.tool_call_id;
        let Some(call) = awaiting.iter().find(|call| &call.id == id) else {
            return Err(Error::NotPending { id: id.clone() });
        };
        if approval
            .arguments
            .as_ref()
            .is_some_and(|arguments| *arguments != call.arguments)
        {
            return Err(Error::ModifiedArguments { id: id.clone() });
        }
        if !decided.insert(id.as_str()) {
            return Err(Error::DuplicateApproval { id: id.clone() });
        }
    }
    let undecided: Vec<String> = awaiting
        .iter()
        .filter(|call| !decided.contains(call.id.as_str()))
        .map(|call| call.id.clone())
        .collect();
    if undecided.is_empty() {
        Ok(())
    } else {
        Err(Error::AwaitingApproval { pending: undecided })
    }
}

/// Starts an execution of `owner` on `session`: checks `input` against the latest state (a
/// pending call of a `local` tool waits for a decision) and takes the session's lease for
/// `term` by writing a pending snapshot after its head, the lease keeping `resume` (what
/// another process needs to run the execution again, for a resumable one). Returns the state
/// the execution starts from.
///
/// A session another execution holds is refused with [`Error::SessionRunning`], an input that
/// does not fit with its own error; either way nothing is written.
pub(crate) async fn claim(
    session: &Session<LlmSession>,
    input: &TurnInput,
    (owner, term, resume): (&str, Duration, Option<Value>),
    local: &(dyn Fn(&str) -> bool + Sync),
) -> Result<LlmSession, Error> {
    // The cached state may be stale (another process ran an execution since): a conflicting
    // write re-reads it, and so does a lease that seems held, before it refuses.
    let mut reloaded = false;
    for _ in 0..MAX_UPDATE_ATTEMPTS {
        session.with_state(|state| check(state, input, local))?;
        let mut lease = Lease::new(owner, term);
        lease.resume = resume.clone().map(Box::new);
        match session.start_with(lease, view(input)).await {
            // The execution's own: its conversation grows in place, not copied from the cache's.
            Ok(_) => return Ok(session.take_state()),
            Err(StoreError::Running { lease, .. }) if reloaded => {
                return Err(Error::SessionRunning {
                    session_id: session.id().to_owned(),
                    lease,
                });
            }
            Err(StoreError::Running { .. } | StoreError::Conflict { .. }) => {
                session.reload().await.map_err(Error::Store)?;
                reloaded = true;
            }
            Err(error) => return Err(Error::Store(error)),
        }
    }
    Err(Error::Store(StoreError::Contended {
        session_id: session.id().to_owned(),
        attempts: MAX_UPDATE_ATTEMPTS,
    }))
}

/// Takes the stale execution `turn` names over for `owner` (see [`crate::takeover`]): its
/// session goes back to the state before it, which the execution starts from again.
///
/// A turn another process took over first, or that is not stale any more, is refused with
/// the store's [`StoreError::NotHeld`]; nothing is written then.
pub(crate) async fn take_over(
    session: &Session<LlmSession>,
    turn: &TakeOver,
    owner: &str,
    term: Duration,
) -> Result<LlmSession, Error> {
    let lease = Lease::new(owner, term);
    session
        .take_over(&turn.snapshot_id, &turn.from, lease)
        .await
        .map_err(Error::Store)?;
    Ok(session.take_state())
}

/// What the pending snapshot of an execution shows readers while it runs: the user's message
/// it answers, so that a conversation read mid-answer (a page that reloads, another tab, an
/// editor) shows the question above the answer streaming in. Its finish's change replaces it.
/// Tool results and decisions are not shown: were the execution's process to die, the next
/// one goes on from this view, and the calls they answer must still wait for them then.
fn view(input: &TurnInput) -> Change {
    let TurnInput::User(user) = input else {
        return Change::new();
    };
    // Strings and numbers: it always makes JSON.
    match serde_json::value::to_raw_value(&Message::User(user.clone())) {
        Ok(json) => Change::new().push_json("/messages", json),
        Err(_) => Change::new(),
    }
}

/// Extends the lease of the running execution by `term` from now: a write of a few bytes, the
/// conversation untouched. Answers whether the execution was aborted meanwhile.
pub(crate) async fn renew(
    session: &Session<LlmSession>,
    term: Duration,
) -> Result<Renewal, StoreError> {
    let expires_at = now_ms().saturating_add(u64::try_from(term.as_millis()).unwrap_or(u64::MAX));
    session.renew(expires_at).await
}

/// What an execution changed: the messages it added after the first `first`, and the fields
/// besides the conversation that differ from `before` (the state without its messages, as
/// [`head`] wrote it), each set whole. Costs what the execution added, not the conversation,
/// nor the fields that stayed (a client's tools and their schemas).
pub(crate) fn change(before: &str, after: &mut LlmSession, first: usize) -> Change {
    // Both texts are serde_json's own: they are JSON.
    let mut change = Change::diff_json(before, &head(after)).unwrap_or_default();
    for message in &after.messages[first..] {
        // Written once, as the text stores keep, not built as a `Value`. A message is strings
        // and numbers: it always makes JSON.
        let json = serde_json::value::to_raw_value(message)
            .unwrap_or_else(|_| serde_json::value::RawValue::NULL.to_owned());
        change = change.push_json("/messages", json);
    }
    change
}

/// `state` as JSON text without its messages (an empty list in their place): what [`change`]
/// compares.
pub(crate) fn head(state: &mut LlmSession) -> String {
    let messages = std::mem::take(&mut state.messages);
    // Strings, numbers and lists of them: it always makes JSON.
    let head = serde_json::to_string(&*state).unwrap_or_else(|_| "null".to_owned());
    state.messages = messages;
    head
}
