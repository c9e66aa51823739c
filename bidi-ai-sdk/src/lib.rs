//! The Vercel AI SDK's UI message stream (v1): `POST /agent/{name}/chat` takes the body
//! `DefaultChatTransport` (`useChat`) sends and answers an execution of the agent as the stream
//! `readUIMessageStream` reads, and `GET /agent/{name}/chat/{id}/stream` gives it again, whole,
//! to clients that resume it while it runs; [`UiMessageStream`] is the encoder, usable on its
//! own.

//!
//! # The endpoints
//!
//! `POST /agent/{name}/chat` takes what the AI SDK's `DefaultChatTransport` (`useChat`) sends
//! and answers one execution as its UI message stream (v1: `data: {json}` chunks with the
//! `x-vercel-ai-ui-message-stream: v1` header, ended by `data: [DONE]`); [`UiMessageStream`]
//! says which chunks the agent's events become.
//!
//! ```json
//! {"id": "chat-1", "trigger": "submit-message",
//!  "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Book Oslo"}]}],
//!  "tools": [{"name": "ask", "description": "..", "parameters": {"type": "object"}}],
//!  "system": ".."}
//! ```
//!
//! The chat `id` is the session's id. A chat the server knows goes on from its stored session:
//! the last user message is the input, or, when the chat waits for client tools, the outputs the
//! last assistant message's tool parts carry (`state` `output-available` or `output-error`). A
//! chat the server does not know is made from the request's `messages` (system messages become
//! the system prompt), then answers the same way; so a client that keeps the conversation needs
//! no stored session. `tools` and `system` are ours, added through the transport's `body`
//! option: the client's own tools (which it runs: `onToolCall`, `addToolOutput`) and a system
//! prompt, both read when the chat is new. A call of a client tool is left at `input-available`
//! and the answer finishes with `tool-calls`. A call of a tool that needs approval
//! ([`Tool::needs_approval`](bidi_llm::Tool::needs_approval)) ends the answer with a
//! `tool-approval-request`; the next request's `approval-responded` part decides, and the call
//! runs or ends `tool-output-denied`. Approvals are taken only for a chat the server keeps (a
//! client could make up the call it approves in a chat it sends whole). `regenerate-message` replaces the stored
//! conversation with the request's. Other fields are refused (400), like bodies that are not
//! a chat; refusals answer the JSON error body, before any stream.
//!
//! `GET /agent/{name}/chat/{id}/stream` resumes a chat's answer, as
//! `DefaultChatTransport.reconnectToStream` (`useChat`'s `resume`) asks: while an answer of chat
//! `id` is streaming in this process, it answers 200 with the same headers and the whole stream,
//! from its `start` chunk, what was written so far at once and the rest as it comes, to
//! `data: [DONE]`. Any number of clients resume one answer at once, each reading all of it.
//! With no answer streaming (none began, it ended, or the chat is another identity's) it answers
//! 204 with no body, and the client keeps what it has. Behind a load balancer, the answer may
//! stream in another process: with a store that keeps streams across processes
//! (`PostgresStore`), the answer's writes are published there too and a resume that finds no
//! answer in its own process reads the session's running answer from the store; with others,
//! route a chat's requests to one process to resume.
//!
//! - An answer runs to its end whoever reads it: its client going away does not cancel it (it
//!   ends at the idle timeout if its model stalls), so a page that reloads mid-answer resumes
//!   it and gets what was written, then the rest; and the session holds the whole answer
//!   whether anybody read it or not.
//! - Up to 8 MiB of an answer are kept for resuming clients (and up to 64 MiB for all the
//!   answers streaming at once), and dropped when it ends. Past them, the answer streams on to the clients reading it and new ones are refused with 410
//!   `frame_too_large` (the client's `reconnectToStream` rejects with it) rather than given a
//!   stream that would not build the message the others see.

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::{Status, TurnInput};
use bidi_session::SessionStore;
use serde_json::Value;
use tokio::sync::oneshot;

use bidi_http::agent::{self, WaitingCalls};
use bidi_http::codec::{Code, Failure};
use bidi_http::extract::{JsonBody, Segments, Served};
use bidi_http::tee::relay::{self, Publisher};
use bidi_http::tee::{Attached, RESUME_BYTES, Tee, Tees};
use bidi_http::{Host, Identity, Protocol};

mod chunk;
mod encoder;
mod history;
mod request;

pub use encoder::UiMessageStream;
use request::{ChatRequest, Trigger, resumed, stateless};

/// A chat whose answer streams, as its identity's scope, its agent and its id: what keys its
/// [`Tee`] in the server's chats.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ChatKey {
    scope: String,
    agent: String,
    chat: String,
}

impl ChatKey {
    fn new(identity: Option<&Identity>, agent: &str, chat: &str) -> Self {
        Self {
            scope: bidi_http::scope(identity).as_str().to_owned(),
            agent: agent.to_owned(),
            chat: chat.to_owned(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The endpoint.

/// The headers of a UI message stream, as the AI SDK sends them.
const HEADERS: [(HeaderName, &str); 2] = [
    (header::CONNECTION, "keep-alive"),
    (
        HeaderName::from_static("x-vercel-ai-ui-message-stream"),
        "v1",
    ),
];

/// The UI message stream served by a [`bidi_http::Server`] for each of its agents: `POST
/// /agent/{name}/chat` (an answer), `GET /agent/{name}/chat/{id}` (the stored chat) and `GET
/// /agent/{name}/chat/{id}/stream` (the answer streaming now, for a client that resumes it).
/// See the [crate docs](crate).
///
/// ```no_run
/// use bidi_ai_sdk::Chat;
/// use bidi_flow::Registry;
/// use bidi_http::Server;
/// use bidi_llm::LlmAgent;
/// use bidi_llm::testing::DemoModel;
///
/// # #[tokio::main]
/// # async fn main() -> std::io::Result<()> {
/// let assistant = LlmAgent::builder("assistant", DemoModel).build();
/// Server::new(Registry::new())
///     .agent(&assistant)
///     .protocol(Chat::new())
///     .bind()
///     .await?
///     .serve()
///     .await
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Chat {
    waiting_calls: WaitingCalls,
}

impl Default for Chat {
    fn default() -> Self {
        Self::new()
    }
}

impl Chat {
    /// The UI message stream, a user message refused while calls wait for the client.
    pub fn new() -> Self {
        Self {
            waiting_calls: WaitingCalls::Refuse,
        }
    }

    /// What a user message does while client tool calls (or calls waiting for approval) of
    /// its chat are still open: refused (the default: 400, the calls must be answered first,
    /// as the AI SDK's own `convertToModelMessages` refuses a call without a result), or the
    /// open calls are set aside (each answered as an error saying the user moved on, which
    /// the model reads before the message).
    pub fn waiting_calls(mut self, waiting: WaitingCalls) -> Self {
        self.waiting_calls = waiting;
        self
    }
}

impl Protocol for Chat {
    fn routes(&self, host: &Host) -> Router {
        let chats = Chats {
            answers: Arc::new(Tees::new(Arc::clone(host.kept()))),
            waiting_calls: self.waiting_calls,
        };
        Router::new()
            .route("/{kind}/{name}/chat", post(chat))
            .route("/{kind}/{name}/chat/{id}", get(messages))
            .route("/{kind}/{name}/chat/{id}/stream", get(resume))
            .layer(Extension(chats))
            .with_state(host.clone())
    }

    fn exposed_headers(&self) -> Vec<HeaderName> {
        vec![HEADERS[1].0.clone()]
    }
}

/// The answers a server's UI message streams are giving, for the clients that resume them,
/// and what a user message does while calls wait.
#[derive(Clone)]
struct Chats {
    answers: Arc<Tees<ChatKey>>,
    waiting_calls: WaitingCalls,
}

/// `POST /agent/{name}/chat`: one execution, as a UI message stream.
async fn chat(
    State(host): State<Host>,
    Extension(chats): Extension<Chats>,
    Served { agent, name }: Served,
    identity: Option<Extension<Identity>>,
    JsonBody { value: request, .. }: JsonBody<ChatRequest>,
) -> Result<Response, Failure> {
    let agent = &agent;
    if request.id.is_empty() {
        return Err(Failure::malformed("`id` (the chat) is empty").at("/id"));
    }
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    let stored = agent::load(agent, identity, &request.id).await?;
    let (init, input) = match (&stored, request.trigger) {
        (Some(session), Trigger::SubmitMessage) => {
            let waiting = chats.waiting_calls;
            let input = resumed(agent, &session.state(), &request, waiting)?;
            (AgentInit::new().resume(request.id.clone()), input)
        }
        (Some(session), Trigger::RegenerateMessage) => {
            // The client's conversation replaces the stored one; the chat's tools and prompt
            // stay unless the request brings its own.
            let (mut state, input) = stateless(agent, &request)?;
            let before = session.state();
            if agent::is_running(session) || before.status == Status::Running {
                return Err(Failure::new(
                    StatusCode::CONFLICT,
                    Code::SessionRunning,
                    format!("an execution runs on chat `{}`", cap(&request.id)),
                ));
            }
            if request.tools.is_empty() {
                state.tools = before.tools;
            }
            if state.system_prompt.is_none() {
                state.system_prompt = before.system_prompt;
            }
            state.options = before.options;
            state.total_cost = before.total_cost;
            session
                .update_state(state)
                .await
                .map_err(|error| match error {
                    // Another request changed the chat meanwhile.
                    bidi_session::StoreError::Conflict { .. } => Failure::new(
                        StatusCode::CONFLICT,
                        Code::SessionRunning,
                        error.to_string(),
                    ),
                    _ => Failure::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Code::ConnectionFailed,
                        error.to_string(),
                    ),
                })?;
            (AgentInit::new().resume(request.id.clone()), input)
        }
        (None, _) => {
            let (state, input) = stateless(agent, &request)?;
            (
                AgentInit::new().session_id(request.id.clone()).init(state),
                input,
            )
        }
    };
    let message_id = match (&input, request.messages.last()) {
        // Answers go on with the assistant message that called the tools.
        (TurnInput::ToolResults(_) | TurnInput::Resume(_), Some(last)) if !last.id.is_empty() => {
            last.id.clone()
        }
        _ => request
            .message_id
            .clone()
            .filter(|_| request.trigger == Trigger::RegenerateMessage)
            .unwrap_or_else(|| format!("msg-{}", bidi_session::new_id())),
    };
    let mut encoder = UiMessageStream::new(message_id);
    if let TurnInput::Resume(resume) = &input {
        let answered = resume.approvals.iter().map(|a| a.tool_call_id.clone());
        let denied = resume.approvals.iter().filter(|a| !a.approved);
        encoder = encoder
            .denied(denied.map(|a| a.tool_call_id.clone()).collect::<Vec<_>>())
            .shown(answered.collect::<Vec<_>>());
    }
    let key = ChatKey::new(identity, &name, &request.id);
    let (snapshot, started) = oneshot::channel();
    let publisher = Publisher::start(Arc::clone(agent.agent().store()), started);
    let (tee, reader) = Tee::new(Arc::clone(&chats.answers), publisher);
    let stream = tee.stream();
    let started = agent::spawn(&host, agent, init, input, identity, encoder, tee).await?;
    if let Some(id) = started.snapshot_id {
        let _ = snapshot.send(id);
    }
    chats.answers.insert(key, &stream);
    Ok(UiMessageStream::response(reader.body()))
}

/// `GET /agent/{name}/chat/{id}`: the stored chat as the AI SDK's `UIMessage[]` (for
/// `useChat({ messages })` after a page reload), or 404.
async fn messages(
    State(host): State<Host>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<axum::Json<Vec<Value>>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let state = agent::stored(&host, &kind, &name, identity.as_ref(), &id).await?;
    Ok(axum::Json(history::ui_messages(&state.messages)))
}

/// `GET /agent/{name}/chat/{id}/stream`: the answer chat `id` is streaming in this process,
/// from its first chunk, or 204 when there is none.
async fn resume(
    State(host): State<Host>,
    Extension(chats): Extension<Chats>,
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Response, Failure> {
    let agent = agent::agent(&host, &kind, &name)?;
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    match chats.answers.attach(&ChatKey::new(identity, &name, &id)) {
        Attached::Nothing => {
            // Another process sharing the store may be streaming it.
            let store = agent::sessions_of(agent, identity);
            match follow(&store, &id).await {
                Ok(Some(body)) => Ok(UiMessageStream::response(body)),
                Ok(None) => Ok(StatusCode::NO_CONTENT.into_response()),
                Err(error) => Err(agent::store_failed(&error)),
            }
        }
        Attached::TooLong => Err(Failure::new(
            StatusCode::GONE,
            Code::FrameTooLarge,
            format!(
                "the answer of chat `{}` is over the {} MiB kept for resuming it: only its \
                 first client reads it",
                cap(&id),
                RESUME_BYTES >> 20
            ),
        )),
        Attached::Reader(written, reader) => {
            Ok(UiMessageStream::response(Attached::body(written, reader)))
        }
    }
}

/// The answer chat `id` streams in another process sharing `store` (the session's running
/// turn), from its first byte, as a response body; `None` if there is none.
///
/// # Errors
///
/// The store's.
async fn follow(
    store: &dyn SessionStore,
    id: &str,
) -> Result<Option<Body>, bidi_session::StoreError> {
    if store.streams().is_none() {
        return Ok(None);
    }
    let Some(head) = store.load(id).await? else {
        return Ok(None);
    };
    let entry = &head.entry;
    let running = matches!(
        entry.status,
        bidi_session::Status::Pending | bidi_session::Status::Aborted
    ) && entry
        .lease
        .as_ref()
        .is_some_and(|lease| !lease.is_expired());
    if !running {
        return Ok(None);
    }
    relay::follow(store, &entry.id).await
}
