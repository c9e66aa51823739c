//! The Vercel AI SDK's UI message stream (v1): `POST /agent/{name}/chat` takes the body
//! `DefaultChatTransport` (`useChat`) sends and answers an execution of the agent as the stream
//! `readUIMessageStream` reads, and `GET /agent/{name}/chat/{id}/stream` gives it again, whole,
//! to clients that resume it while it runs; [`UiMessageStream`] is the encoder, usable on its
//! own.

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

use crate::codec::{Code, Failure};
use crate::extract::{JsonBody, Segments, Served};
use crate::{Host, Identity, WaitingCalls, agent};

mod chunk;
mod encoder;
mod history;
mod request;

pub use encoder::UiMessageStream;
use request::{ChatRequest, Trigger, resumed, stateless};

use crate::tee::relay::{self, Publisher};
use crate::tee::{Attached, RESUME_BYTES, Tee};

/// A chat whose answer streams, as its identity's scope, its agent and its id: what keys its
/// [`Tee`] in the server's chats.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ChatKey {
    scope: String,
    agent: String,
    chat: String,
}

impl ChatKey {
    pub(crate) fn new(identity: Option<&Identity>, agent: &str, chat: &str) -> Self {
        Self {
            scope: crate::scope(identity).as_str().to_owned(),
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

/// The UI message stream: `POST /agent/{name}/chat` (an answer), `GET
/// /agent/{name}/chat/{id}` (the stored chat) and `GET /agent/{name}/chat/{id}/stream` (the
/// answer streaming now, for a client that resumes it).
pub(crate) fn routes() -> Router<Host> {
    Router::new()
        .route("/{kind}/{name}/chat", post(chat))
        .route("/{kind}/{name}/chat/{id}", get(messages))
        .route("/{kind}/{name}/chat/{id}/stream", get(resume))
}

/// `POST /agent/{name}/chat`: one execution, as a UI message stream.
async fn chat(
    State(host): State<Host>,
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
            let waiting = host.shared.waiting_calls.unwrap_or(WaitingCalls::Refuse);
            let input = resumed(agent, &session.state(), &request, waiting)?;
            (AgentInit::new().resume(request.id.clone()), input)
        }
        (Some(session), Trigger::RegenerateMessage) => {
            // The client's conversation replaces the stored one; the chat's tools and prompt
            // stay unless the request brings its own.
            let (mut state, input) = stateless(agent, &request)?;
            let before = session.state();
            if before.status == Status::Running {
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
    let (tee, reader) = Tee::new(Arc::clone(&host.shared.chats), publisher);
    let stream = tee.stream();
    let started = agent::spawn(&host, agent, init, input, identity, encoder, tee).await?;
    if let Some(id) = started.snapshot_id {
        let _ = snapshot.send(id);
    }
    host.shared.chats.insert(key, &stream);
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
    Segments((kind, name, id)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Response, Failure> {
    let agent = agent::agent(&host, &kind, &name)?;
    let identity = identity.as_ref().map(|Extension(identity)| identity);
    match host.shared.chats.attach(&ChatKey::new(identity, &name, &id)) {
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
