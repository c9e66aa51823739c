//! The A2A wire: an [`LlmAgent`] as an agent of the
//! [Agent2Agent protocol](https://a2a-protocol.org/v1.0.0/specification/) 1.0, over its JSON-RPC
//! and HTTP+JSON bindings, as the official A2A SDKs' clients (`@a2a-js/sdk`, `a2a-sdk` for
//! Python) reach it:
//! [`A2a`] serves every agent of a [`bidi_http::Server`] so. Give the clients
//! (`ClientFactory.createFromUrl` of `@a2a-js/sdk`, `ClientFactory.create_from_url` of the
//! Python `a2a-sdk`) `http://host:port/agent/{name}/a2a` and they find the card and the
//! endpoint.
//!
//! ```no_run
//! use bidi_a2a::A2a;
//! use bidi_flow::Registry;
//! use bidi_http::Server;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::DemoModel;
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let assistant = LlmAgent::builder("assistant", DemoModel).build();
//! // POST /agent/assistant/a2a, and its card at
//! // GET /agent/assistant/a2a/.well-known/agent-card.json
//! Server::new(Registry::new())
//!     .agent(&assistant)
//!     .protocol(A2a::new())
//!     .bind()
//!     .await?
//!     .serve()
//!     .await
//! # }
//! ```
//!
//! ```sh
//! curl -s localhost:8080/agent/assistant/a2a -H 'A2A-Version: 1.0' -d '{"jsonrpc": "2.0",
//!   "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m1",
//!   "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}'
//! # {"jsonrpc":"2.0","id":1,"result":{"task":{"id":"..","contextId":"..",
//! #  "status":{"state":"TASK_STATE_COMPLETED",..},"artifacts":[..],"history":[..]}}}
//! ```
//!
//! - `GET /agent/{name}/a2a/.well-known/agent-card.json` (and `/agent/{name}/.well-known/
//!   agent-card.json`, where a client resolves the card of the base URL `/agent/{name}/a2a`):
//!   the agent card. Its interfaces are `JSONRPC` and `HTTP+JSON`, both A2A 1.0 at
//!   `/agent/{name}/a2a`, on the host the request named; it streams, sends push
//!   notifications (unless they are [disabled](PushNotifications::disabled)), takes and
//!   answers text and JSON, and has a skill for the conversation and one for each of the
//!   agent's tools. It is cached for five minutes (`Cache-Control: max-age=300`) and tagged
//!   (`ETag`): a client that has it asks with `If-None-Match` and is answered 304.
//! - `POST /agent/{name}/a2a`: JSON-RPC 2.0. `SendMessage` runs the message's turn and
//!   answers the task once the turn has ended (the task is then over, or asks for input;
//!   `configuration.returnImmediately`: answers the working task at once, and the turn runs
//!   on without its client); `SendStreamingMessage` answers SSE whose every `data:` is a
//!   JSON-RPC response of the request's id: the task (submitted), its status (working), the
//!   answer as artifact chunks (`answer-1`, `answer-2`, .. one per model message that says
//!   something, `append` after its first chunk, an empty `lastChunk`), then its final
//!   status; the task runs on if its client goes away. `GetTask` reads a task
//!   (`historyLength` limits its history), `ListTasks` lists the caller's tasks, latest
//!   status first, a page at a time (`contextId`, `status` and `statusTimestampAfter` filter
//!   them; `pageSize`, 50 unless asked, at most 100; `pageToken` is the `nextPageToken` of
//!   the page before, empty on the last; artifacts only with `includeArtifacts`),
//!   `CancelTask` cancels one that runs (in whichever process runs it) or waits for input,
//!   and `SubscribeToTask` streams a running task again
//!   from the first event of its running turn (a task that waits for input answers its
//!   current state and closes, as A2A closes a stream at `TASK_STATE_INPUT_REQUIRED`: the
//!   message that answers it streams the next turn; one that is over is refused).
//!
//! - HTTP+JSON, the same operations as resources under `/agent/{name}/a2a`: `POST
//!   /message:send` and `/message:stream`, `GET /tasks/{id}` and `/tasks` (the params as
//!   query parameters), `POST /tasks/{id}:cancel` and `/tasks/{id}:subscribe`, `POST|GET
//!   /tasks/{id}/pushNotificationConfigs` and `GET|DELETE ../{configId}`, `GET
//!   /extendedAgentCard`. Answers are the bare objects (`application/a2a+json`), stream records
//!   bare `StreamResponse`s, errors `{"error": {"code", "status", "message", "details"}}` with
//!   the HTTP status A2A maps each to (404 for an unknown task, 400 for the others, 500 for
//!   the server's failures). A task started over one binding is read, subscribed to and
//!   canceled over either.
//!
//! A **task runs until it is terminal, across the inputs it asks for.** Its `contextId` is the
//! session's id (a message without one starts a new session), its `id` the snapshot of its
//! first turn of the agent. A turn that stops for input leaves the task
//! `TASK_STATE_INPUT_REQUIRED`; the message that answers it runs the next turn of the same
//! task, `TASK_STATE_WORKING` again, and so on until a turn ends it: `TASK_STATE_COMPLETED`,
//! `TASK_STATE_FAILED` (its status message says why) or `TASK_STATE_CANCELED`. Every answer
//! names the task: each turn's `SendMessage` result and `SendStreamingMessage` events (a
//! continuation's stream opens with the task, working), `GetTask`, `CancelTask` and
//! `SubscribeToTask`. Its state is its latest turn's, its artifacts the answers of all its
//! turns (`answer-1`, `answer-2`, .. across them), its history the session's conversation.
//! A message in the context without a `taskId` starts a new task, unless the context's last
//! task waits for input: the session has one conversation, so that message continues it.
//!
//! The store alone says which turns make a task, so any process sharing it answers alike: a
//! turn whose parent turn ended waiting for input continues its parent's task, any other
//! starts one, and a task's turns are found by walking its session back from the head.
//! `CancelTask` on a task that waits for input writes an empty, aborted turn after it, which
//! ends it `TASK_STATE_CANCELED` (a message on it is then refused with -32004, as on any task
//! that is over); the next message in the context starts a new task, and its text sets the
//! canceled calls aside.
//!
//! **Input required.** A turn that stops for remote tool calls, or for calls of tools that
//! need approval, leaves the task `TASK_STATE_INPUT_REQUIRED`, its status message one data
//! part `{"awaitingToolExecution": [{"id", "name", "arguments"}], "awaitingApproval": [..]}`.
//! The client answers with a message on the same `taskId` (its `contextId` may be left out)
//! whose data part is `{"results": [{"toolCallId", "output", "isError"?}], "approvals":
//! [{"toolCallId", "approved", "reason"?}]}` (`output` is text, or any JSON); text parts
//! beside it are what the user says next. A message of text alone is the user moving on:
//! the waiting calls are answered as set aside (each remote call an error result, each
//! approval denied, saying the user moved on), then the model reads the text. Either way
//! the task runs on under its id.
//!
//! With the A2A JS SDK (`@a2a-js/sdk` 1.x), approving the first waiting call of `task`:
//!
//! ```js
//! const call = task.status.message.parts[0].content.value.awaitingApproval[0];
//! await client.sendMessage({ message: {
//!   messageId: crypto.randomUUID(), role: Role.ROLE_USER,
//!   taskId: task.id, contextId: task.contextId,
//!   parts: [{ content: { $case: 'data', value: { approvals: [{ toolCallId: call.id, approved: true }] } },
//!             mediaType: 'application/json' }],
//! } });
//! ```
//!
//! and with the Python `a2a-sdk` 1.x (protobuf types):
//!
//! ```python
//! reply = json_format.ParseDict({
//!     "messageId": str(uuid4()), "role": "ROLE_USER",
//!     "taskId": task.id, "contextId": task.context_id,
//!     "parts": [{"data": {"approvals": [{"toolCallId": call_id, "approved": False,
//!                                        "reason": "not today"}]}}],
//! }, Message())
//! await client.send_message(SendMessageRequest(message=reply))
//! ```
//!
//! **Push notifications** (feature `push`, on by default): a client gives a task a webhook,
//! in the message that starts or continues it (`configuration.taskPushNotificationConfig`)
//! or later (`CreateTaskPushNotificationConfig`; `Get..`, `List..` and `Delete..` read and
//! remove them), and each of the task's state changes is POSTed to it once, in order, as a
//! `statusUpdate` with the config's credentials: working, then input-required, completed,
//! failed or canceled. A webhook that fails is tried again a bounded number of times. A
//! config is the caller's and its task's, kept in the agent's store, so every process sharing
//! it notifies alike. Webhooks on private addresses are refused unless allowed
//! ([`PushNotifications`] says how deliveries are made).
//!
//! **Versions.** A request names A2A 1.0 in its `A2A-Version` header (or an `A2A-Version`
//! query parameter), as the SDKs' clients do; A2A reads a request that names none as 0.3's,
//! which is refused with -32009 saying which header to send.
//!
//! **Messages** carry a `messageId`, and each part exactly one of `text`, `raw`, `url` and
//! `data`. A data part that answers no call (see below) is JSON the user sends, as the card's
//! `application/json` input mode says: the model reads its JSON text.
//!
//! **Errors** are JSON-RPC errors in A2A's codes: -32700 (not JSON), -32600 (no JSON-RPC
//! request), -32601 (no such method, A2A 0.3's names among them: the message gives the 1.0
//! name), -32602 (invalid params; `data` holds a `google.rpc.BadRequest` naming the field,
//! `message.parts[0].text`), -32603 (the server failed), -32001 (no such task, in the
//! caller's identity, or no such push notification config), -32002 (the task is over:
//! nothing to cancel), -32003 (push notifications disabled), -32004 (not supported: a
//! message on a task that is over, a context busy with another task, tasks of an agent that
//! keeps no sessions, the extended card), -32005 (the client accepts none of the agent's
//! output modes), -32009 (a version other than 1.0). Each A2A error (-32001 and below)
//! carries in `data` the `google.rpc.ErrorInfo` A2A asks for: its `reason`
//! (`TASK_NOT_FOUND`), `domain` `a2a-protocol.org`, and the task's id in `metadata` where one
//! is named.
//!
//! An agent built [`client_managed`](bidi_llm::LlmAgentBuilder::client_managed) keeps no
//! sessions: it answers `SendMessage` and `SendStreamingMessage` (each a conversation of its
//! own, under the message's `contextId` or a new one), and refuses a `taskId`,
//! `returnImmediately` and the methods on tasks (`GetTask`, `ListTasks`, ..) with -32004.

mod binding;
mod card;
mod error;
mod input;
mod jsonrpc;
mod lineage;
mod list;
#[cfg(feature = "push")]
mod push;
#[cfg(not(feature = "push"))]
mod push {
    //! Without the `push` feature, turns notify nobody, and a message's own config is refused.

    use serde_json::Value;

    use crate::types::{RpcError, StatusUpdate, Task};
    use crate::{Call, Saved};

    /// A notifier of nothing.
    #[derive(Debug)]
    pub(crate) struct Notifier;

    impl Notifier {
        pub(crate) fn status(&self, _: StatusUpdate) {}
    }

    /// No notifier; a message's own config is refused (-32003).
    pub(crate) fn notifier(
        _: &Call<'_>,
        inline: Option<Value>,
    ) -> Result<(Option<Notifier>, Saved), RpcError> {
        match inline {
            Some(config) if !config.is_null() => Err(RpcError::no_push()),
            _ => Ok((None, None)),
        }
    }

    /// Nobody to tell.
    pub(crate) fn notify(_: &Call<'_>, _: &Task) {}
}
mod rest;
mod task;
mod tasks;
mod types;
mod wire;

#[cfg(feature = "push")]
pub use push::PushNotifications;

use std::sync::Arc;

use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use bidi_agent::AgentInit;
use bidi_flow::text::{cap, pointer, reason};
use bidi_llm::{LlmAgent, LlmSession, TurnInput};
use serde::de::DeserializeOwned;
use serde_json::Value;

use bidi_http::agent;
use bidi_http::codec::{Code, Failure};
use bidi_http::tee::Tees;
use bidi_http::turns::TurnKey;
use bidi_http::{Host, Identity, Protocol};

use binding::Binding;
use error::{CONTENT_TYPE_NOT_SUPPORTED, UNSUPPORTED};
use types::{Event, Ids, Message, Role, RpcError, SendParams, TaskState};
use wire::{Continued, TaskWire};

/// The tasks streaming in this process, for the clients that subscribe to them again.
type Streams = Arc<Tees<TurnKey>>;

/// A2A 1.0 served by a [`bidi_http::Server`] for each of its agents: `POST
/// /agent/{name}/a2a` (JSON-RPC) and the agent's card. See the [crate docs](crate).
#[derive(Debug, Clone, Copy, Default)]
#[must_use]
pub struct A2a {
    #[cfg(feature = "push")]
    push: PushNotifications,
}

impl A2a {
    /// A2A for every agent of the server (with push notifications, as
    /// [`PushNotifications::new`] sends them, where the `push` feature is on).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends the tasks' push notifications as `push` says
    /// ([`PushNotifications::disabled`]: none).
    #[cfg(feature = "push")]
    pub fn push_notifications(mut self, push: PushNotifications) -> Self {
        self.push = push;
        self
    }
}

impl Protocol for A2a {
    fn routes(&self, host: &Host) -> Router {
        #[cfg(feature = "push")]
        let pushing = Pushing(push::Pusher::new(self.push));
        #[cfg(not(feature = "push"))]
        let pushing = Pushing::default();
        routes(Arc::clone(host.kept()), pushing).with_state(host.clone())
    }
}

/// Who sends the server's push notifications, if it sends them.
#[derive(Debug, Clone, Default)]
struct Pushing(#[cfg(feature = "push")] Option<Arc<push::Pusher>>);

impl Pushing {
    /// Whether the server sends push notifications (what its cards say).
    fn enabled(&self) -> bool {
        #[cfg(feature = "push")]
        return self.0.is_some();
        #[cfg(not(feature = "push"))]
        false
    }
}

/// The A2A routes, their streams' bytes kept within `budget`.
fn routes(budget: Arc<bidi_http::tee::Budget>, pushing: Pushing) -> Router<Host> {
    let streams: Streams = Arc::new(Tees::new(budget));
    let router = Router::new().route("/{kind}/{name}/a2a", post(jsonrpc::rpc));
    rest::routes(router)
        .route(
            "/{kind}/{name}/a2a/.well-known/agent-card.json",
            get(card::card),
        )
        .route(
            "/{kind}/{name}/.well-known/agent-card.json",
            get(card::card),
        )
        .layer(Extension(Shared { streams, pushing }))
}

/// What every request of the routes shares: the streams of the tasks running in this
/// process, and who sends push notifications.
#[derive(Debug, Clone)]
struct Shared {
    streams: Streams,
    pushing: Pushing,
}

/// What every method of a request has at hand.
struct Call<'a> {
    host: &'a Host,
    streams: &'a Streams,
    #[cfg(feature = "push")]
    pushing: &'a Pushing,
    agent: &'a LlmAgent,
    name: &'a str,
    identity: Option<&'a Identity>,
    /// How the request came, and so how it is answered.
    binding: Binding,
}

impl Call<'_> {
    /// The agent's tools whose calls wait for approval (those it runs itself).
    fn locals(&self) -> Arc<[String]> {
        let tools = self.agent.tools().iter();
        tools
            .filter(|tool| tool.is_local())
            .map(|tool| tool.name().to_owned())
            .collect()
    }

    /// Refuses what needs the agent's sessions, for an agent that keeps none.
    fn keeps_sessions(&self, what: &str) -> Result<(), RpcError> {
        if self.agent.agent().is_client_managed() {
            return Err(RpcError::new(
                UNSUPPORTED,
                format!(
                    "agent `{}` keeps no tasks (its clients keep its state): {what} is not \
                     supported",
                    cap(self.name)
                ),
            ));
        }
        Ok(())
    }
}

/// The params of a method, as `T`.
///
/// # Errors
///
/// Invalid params, naming what is wrong.
fn params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let Some(params @ Value::Object(_)) = params else {
        return Err(RpcError::invalid_params(
            "/params",
            "the params are a JSON object",
        ));
    };
    serde_path_to_error::deserialize(params).map_err(|error| {
        let path = format!("/params{}", pointer(error.path()));
        RpcError::invalid_params(&path, reason(&error.into_inner().to_string()))
    })
}

/// Whether a client that accepts `modes` takes what the agent answers: text, and JSON.
fn accepts(modes: &[String]) -> bool {
    const ANSWERED: [&str; 5] = ["text/plain", "text/*", "text", "*/*", "application/json"];
    modes.is_empty()
        || modes.iter().any(|mode| {
            ANSWERED
                .iter()
                .any(|answered| mode.eq_ignore_ascii_case(answered))
        })
}

/// `SendMessage` (its task once it has ended, or at once with `returnImmediately`) and
/// `SendStreamingMessage` (`stream`: SSE of the task's events).
async fn send(call: &Call<'_>, params: Option<Value>, stream: bool) -> Result<Response, RpcError> {
    let SendParams {
        message,
        mut configuration,
    } = self::params(params)?;
    let inline = configuration.task_push_notification_config.take();
    if !accepts(&configuration.accepted_output_modes) {
        return Err(RpcError::new(
            CONTENT_TYPE_NOT_SUPPORTED,
            "this agent answers text/plain and application/json, which the client does not accept",
        ));
    }
    if message.message_id.is_empty() {
        return Err(RpcError::invalid_params(
            "/params/message/messageId",
            "a message carries its `messageId`",
        ));
    }
    if message.role != Role::User {
        return Err(RpcError::invalid_params(
            "/params/message/role",
            "a client's message is the user's (`ROLE_USER`)",
        ));
    }
    let detach = configuration.return_immediately && !stream;
    let client = call.agent.agent().is_client_managed();
    if client && detach {
        call.keeps_sessions("`returnImmediately`")?;
    }
    let (notifier, saved) = push::notifier(call, inline)?;
    let Opened {
        init,
        state,
        continues,
    } = open(call, &message).await?;
    let pending = state
        .as_ref()
        .map_or(&[][..], |state| &state.pending_tool_calls[..]);
    let mut input = input::decode(&message, pending)?;
    // Text alone, where calls wait: the user moves on, and the calls are set aside.
    if let (TurnInput::User(user), Some(state)) = (&input, &state)
        && !state.pending_tool_calls.is_empty()
    {
        input = call.agent.set_aside(state, user.clone());
    }
    let limit = configuration.history_length;
    let task = continues.as_ref().map(|continued| continued.task.clone());
    // A task answered at once streams for those who subscribe to it.
    let wire = TaskWire::new(
        call.binding.clone(),
        stream || detach,
        message.clone(),
        call.locals(),
        limit,
    )
    .continuing(continues)
    .notifying(notifier);
    let turn = (init, input);
    let refused = |failure: Failure| refusal(&failure, &message);
    if client || !(stream || detach) {
        let started = agent::start(call.host, call.agent, turn.0, turn.1, call.identity, wire);
        let (_, body) = started.await.map_err(refused)?;
        wait(saved).await;
        return Ok(if stream {
            bidi_http::sse::response(body)
        } else {
            call.binding.body(body)
        });
    }
    let working = detach.then(|| wire.submitted(&Ids::default(), TaskState::Working));
    let started = bidi_http::turns::start_as(
        call.streams,
        call.host,
        (call.agent, call.name),
        turn,
        call.identity,
        wire,
        task.as_deref(),
    );
    let (started, task_id, body) = started.await.map_err(refused)?;
    wait(saved).await;
    let Some(mut task) = working else {
        return Ok(bidi_http::sse::response(body));
    };
    // Nobody reads this task's stream but those who subscribe to it.
    drop(body);
    if let Some(first) = task.history.first_mut() {
        first.task_id = Some(task_id.clone());
        first.context_id = Some(started.session_id.clone());
    }
    task.id = task_id;
    task.context_id = started.session_id;
    Ok(call.binding.answer(&Event::Task(task)))
}

/// The signal that a message's own push notification config was saved for its task (as its
/// turn started), where it has one.
type Saved = Option<tokio::sync::oneshot::Receiver<()>>;

/// Waits until a message's own config is saved, so that the answer comes after it (a client
/// reads it back at once); a turn that never started saves nothing, and waits for nothing.
async fn wait(saved: Saved) {
    if let Some(saved) = saved {
        let _ = saved.await;
    }
}

/// A refusal to start the turn `message` asked for, in A2A's terms.
fn refusal(failure: &Failure, message: &Message) -> RpcError {
    match (&message.context_id, failure.code) {
        (Some(context), Code::NotFound) => RpcError::invalid_params(
            "/params/message/contextId",
            format!("there is no context `{}`", cap(context)),
        ),
        (_, Code::InvalidInit) => RpcError::from_failure(failure, "/params/message/contextId"),
        _ => RpcError::from_failure(failure, "/params/message/parts"),
    }
}

/// The session a message goes on with, and the task it continues.
struct Opened {
    init: AgentInit<LlmSession>,
    /// The session's state, where calls of it wait: what the message answers, or sets aside.
    state: Option<LlmSession>,
    /// The task the message continues: one that waits for input.
    continues: Option<Continued>,
}

impl Opened {
    /// A message that starts a task of its own on `init`'s session.
    fn new(init: AgentInit<LlmSession>) -> Self {
        Self {
            init,
            state: None,
            continues: None,
        }
    }
}

/// The session `message` goes on with (the one its `taskId` or `contextId` names, or a new
/// one), and the task it continues: the one its `taskId` names, or the one its context waits
/// for input on.
///
/// # Errors
///
/// A task that is not the caller's (-32001), over or running (-32004), of another context,
/// or a context that does not exist (-32602).
async fn open(call: &Call<'_>, message: &Message) -> Result<Opened, RpcError> {
    let client = call.agent.agent().is_client_managed();
    if message.task_id.is_some() {
        call.keeps_sessions("a message on a task")?;
    }
    match (&message.task_id, &message.context_id) {
        (Some(task), context) => tasks::waiting(call, task, context.as_deref()).await,
        (None, Some(context)) if client => Ok(Opened::new(AgentInit::new().session_id(context))),
        (None, Some(context)) => {
            let store = agent::sessions_of(call.agent, call.identity);
            Ok(match lineage::head(&store, context).await? {
                Some(lineage::Head::Waiting(lineage)) => tasks::continuation(*lineage),
                Some(lineage::Head::Done(state)) => Opened {
                    state: (!state.pending_tool_calls.is_empty()).then_some(*state),
                    ..Opened::new(AgentInit::new().resume(context))
                },
                None => Opened::new(AgentInit::new().resume(context)),
            })
        }
        (None, None) => Ok(Opened::new(AgentInit::new())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn params_are_decoded_naming_the_field_that_is_wrong() {
        let error = params::<types::GetParams>(None).unwrap_err();
        assert_eq!(error.field(), Some(""));
        let error =
            params::<types::GetParams>(Some(json!({"id": "t", "historyLength": -1}))).unwrap_err();
        assert_eq!(error.code, error::INVALID_PARAMS);
        assert_eq!(error.field(), Some("historyLength"));
        let error =
            params::<SendParams>(Some(json!({"message": {"role": "ROLE_BOT", "parts": []}})))
                .unwrap_err();
        assert_eq!(error.field(), Some("message.role"));
        assert!(
            !error.message.contains("Role"),
            "no Rust names: {}",
            error.message
        );
    }

    #[test]
    fn output_modes_must_include_text_or_json() {
        assert!(accepts(&[]));
        assert!(accepts(&["image/png".into(), "Text/Plain".into()]));
        assert!(!accepts(&["image/png".into()]));
    }
}
