//! Test doubles (feature `testing`): a fake Telegram Bot API server, and a channel that records
//! every call it gets.
//!
//! [`FakeBotApi`] serves `sendMessage`, `editMessageText` and `sendChatAction` on 127.0.0.1 with
//! the real wire (`{"ok":true,"result":..}`, `{"ok":false,"error_code":..,"description":..}`),
//! keeps every chat's messages, allows one edit per second per chat (more get `429` with
//! `parameters.retry_after`), and records every call.
//!
//! ```
//! use std::sync::Arc;
//!
//! use bidi_channel::MessageRouter;
//! use bidi_channel::telegram::Telegram;
//! use bidi_channel::testing::FakeBotApi;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let api = FakeBotApi::start().await?;
//! let telegram = Arc::new(Telegram::builder(api.url()).build()?);
//! let model = ScriptedModel::new([Scripted::new().text("Hi there, how can I help you today?")]);
//! let router = MessageRouter::new(LlmAgent::builder("bot", model).build());
//! router.handle(telegram, "42", "hello").await?;
//! assert_eq!(api.messages(42), ["Hi there, how can I help you today?"]);
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bidi_core::BoxError;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::channel::{Channel, StreamingChannel};

/// The longest message text Telegram takes.
const MAX_TEXT: usize = 4096;

/// A fake Telegram Bot API server on 127.0.0.1. Stops when dropped.
pub struct FakeBotApi {
    addr: SocketAddr,
    state: Arc<Mutex<Chats>>,
    server: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for FakeBotApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeBotApi")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for FakeBotApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// One call the server answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Call {
    /// The method (`editMessageText`).
    pub method: String,
    /// The `chat_id`, if it was a number.
    pub chat_id: Option<i64>,
    /// The `message_id`.
    pub message_id: Option<i64>,
    /// The `text`.
    pub text: Option<String>,
    /// The `action` of `sendChatAction`.
    pub action: Option<String>,
    /// How long after the server started it came (on tokio's clock, so paused time counts).
    pub at: Duration,
    /// The answer's `error_code`, or `None` for `ok`.
    pub error_code: Option<u16>,
}

#[derive(Default)]
struct Chats {
    started: Option<Instant>,
    edit_interval: Duration,
    /// Each chat's messages, by id.
    messages: HashMap<i64, Vec<(i64, String)>>,
    next_id: i64,
    last_edit: HashMap<i64, Instant>,
    /// Until when each chat was told to wait.
    retry_until: HashMap<i64, Instant>,
    calls: Vec<Call>,
    early: usize,
    fail_edits: usize,
}

impl FakeBotApi {
    /// Starts a server allowing one edit per second per chat.
    ///
    /// # Errors
    ///
    /// If 127.0.0.1 has no free port.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, no server is left running.
    pub async fn start() -> io::Result<Self> {
        Self::with_edit_interval(Duration::from_secs(1)).await
    }

    /// Starts a server allowing one edit per `interval` per chat (`Duration::ZERO`: no limit).
    ///
    /// # Errors
    ///
    /// If 127.0.0.1 has no free port.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, no server is left running.
    pub async fn with_edit_interval(interval: Duration) -> io::Result<Self> {
        let state = Arc::new(Mutex::new(Chats {
            started: Some(Instant::now()),
            edit_interval: interval,
            next_id: 1,
            ..Chats::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/{bot}/{method}", post(answer))
            .with_state(Arc::clone(&state));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            state,
            server,
        })
    }

    /// The API URL to give [`Telegram::builder`](crate::telegram::Telegram::builder).
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}/bot123456:TEST", self.addr)
    }

    /// Every call so far, in order.
    #[must_use]
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The text of each message in `chat_id`, oldest first.
    #[must_use]
    pub fn messages(&self, chat_id: i64) -> Vec<String> {
        self.lock()
            .messages
            .get(&chat_id)
            .map(|messages| messages.iter().map(|(_, text)| text.clone()).collect())
            .unwrap_or_default()
    }

    /// How many edits came before the `retry_after` their chat was given had passed.
    #[must_use]
    pub fn early_calls(&self) -> usize {
        self.lock().early
    }

    /// Makes the next `n` edits fail with `400 Bad Request`.
    pub fn fail_edits(&self, n: usize) {
        self.lock().fail_edits = n;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Chats> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ok(result: Value) -> Response {
    let mut body = serde_json::Map::new();
    body.insert("ok".to_owned(), Value::Bool(true));
    body.insert("result".to_owned(), result);
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn refused(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    let body = json!({"ok": false, "error_code": code, "description": description});
    (status, axum::Json(body)).into_response()
}

fn message(id: i64, chat_id: i64, text: &str, date: u64) -> Value {
    json!({
        "message_id": id,
        "date": date,
        "chat": {"id": chat_id, "type": "private"},
        "from": {"id": 123_456, "is_bot": true, "first_name": "Test"},
        "text": text,
    })
}

async fn answer(
    State(state): State<Arc<Mutex<Chats>>>,
    Path((bot, method)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let params: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let chat_id = params.get("chat_id").and_then(Value::as_i64);
    let message_id = params.get("message_id").and_then(Value::as_i64);
    let text = params
        .get("text")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let action = params
        .get("action")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut chats = state.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    let at = chats.started.map_or(Duration::ZERO, |t| now - t);
    let date = at.as_secs();
    let (response, error_code) = if !bot.starts_with("bot") {
        (refused(404, "Not Found"), Some(404))
    } else if !["sendMessage", "editMessageText", "sendChatAction"].contains(&method.as_str()) {
        (refused(404, "Not Found: method not found"), Some(404))
    } else if !params.is_object() {
        (
            refused(400, "Bad Request: the body is not a JSON object"),
            Some(400),
        )
    } else if let Some(chat) = chat_id {
        decide(
            &mut chats,
            &method,
            chat,
            message_id,
            text.as_deref(),
            action.as_deref(),
            now,
            date,
        )
    } else {
        (refused(400, "Bad Request: chat_id is empty"), Some(400))
    };
    chats.calls.push(Call {
        method,
        chat_id,
        message_id,
        text,
        action,
        at,
        error_code,
    });
    response
}

/// What the fake Bot API answers a method call with.
///
/// Long by design: the fake Bot API's methods, one arm each.
#[allow(clippy::too_many_arguments)]
fn decide(
    chats: &mut Chats,
    method: &str,
    chat: i64,
    message_id: Option<i64>,
    text: Option<&str>,
    action: Option<&str>,
    now: Instant,
    date: u64,
) -> (Response, Option<u16>) {
    let too_long = text.is_some_and(|t| t.encode_utf16().count() > MAX_TEXT);
    let empty = text.is_none_or(|t| t.trim().is_empty());
    match method {
        "sendMessage" => {
            if empty {
                return (
                    refused(400, "Bad Request: message text is empty"),
                    Some(400),
                );
            }
            if too_long {
                return (refused(400, "Bad Request: message is too long"), Some(400));
            }
            let id = chats.next_id;
            chats.next_id += 1;
            let text = text.unwrap_or_default();
            chats
                .messages
                .entry(chat)
                .or_default()
                .push((id, text.to_owned()));
            (ok(message(id, chat, text, date)), None)
        }
        "editMessageText" => {
            if let Some(until) = chats.retry_until.get(&chat)
                && now < *until
            {
                chats.early += 1;
            }
            if let Some(last) = chats.last_edit.get(&chat)
                && now < *last + chats.edit_interval
            {
                let wait = (*last + chats.edit_interval) - now;
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                chats
                    .retry_until
                    .insert(chat, now + Duration::from_secs(secs));
                let body = json!({
                    "ok": false,
                    "error_code": 429,
                    "description": format!("Too Many Requests: retry after {secs}"),
                    "parameters": {"retry_after": secs},
                });
                return (
                    (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response(),
                    Some(429),
                );
            }
            if chats.fail_edits > 0 {
                chats.fail_edits -= 1;
                return (
                    refused(400, "Bad Request: message can't be edited"),
                    Some(400),
                );
            }
            if empty {
                return (
                    refused(400, "Bad Request: message text is empty"),
                    Some(400),
                );
            }
            if too_long {
                return (refused(400, "Bad Request: message is too long"), Some(400));
            }
            let text = text.unwrap_or_default();
            let Some(found) = chats
                .messages
                .get_mut(&chat)
                .and_then(|messages| messages.iter_mut().find(|(id, _)| Some(*id) == message_id))
            else {
                return (
                    refused(400, "Bad Request: message to edit not found"),
                    Some(400),
                );
            };
            if found.1 == text {
                return (
                    refused(
                        400,
                        "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
                    ),
                    Some(400),
                );
            }
            found.1 = text.to_owned();
            let id = found.0;
            chats.last_edit.insert(chat, now);
            (ok(message(id, chat, text, date)), None)
        }
        "sendChatAction" => {
            if action.is_none() {
                return (refused(400, "Bad Request: action is empty"), Some(400));
            }
            (ok(Value::Bool(true)), None)
        }
        _ => (refused(404, "Not Found: method not found"), Some(404)),
    }
}

/// A channel that records every call it gets, streaming or not; optionally failing chunks.
#[derive(Debug)]
pub struct Recorder {
    id: String,
    streaming: bool,
    fail_chunks: bool,
    calls: Mutex<Vec<Recorded>>,
}

/// One call a [`Recorder`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recorded {
    /// `send_to_user(user, text)`.
    Send(String, String),
    /// `start(user)`.
    Start(String),
    /// `chunk(user, chunk)`.
    Chunk(String, String),
    /// `status(user, status)`.
    Status(String, String),
    /// `end(user, full_text)`.
    End(String, String),
}

impl Recorder {
    /// A streaming recorder named `id`.
    #[must_use]
    pub fn streaming(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            streaming: true,
            fail_chunks: false,
            calls: Mutex::new(Vec::new()),
        }
    }

    /// A recorder named `id` that takes whole replies only.
    #[must_use]
    pub fn plain(id: &str) -> Self {
        Self {
            streaming: false,
            ..Self::streaming(id)
        }
    }

    /// Fails every `chunk` call (after recording it), as a channel whose edits fail.
    #[must_use]
    pub fn failing_chunks(mut self) -> Self {
        self.fail_chunks = true;
        self
    }

    /// Every call so far.
    #[must_use]
    pub fn calls(&self) -> Vec<Recorded> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, call: Recorded) {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }
}

#[async_trait]
impl Channel for Recorder {
    fn id(&self) -> &str {
        &self.id
    }

    async fn send_to_user(&self, user_id: &str, text: &str) -> Result<(), BoxError> {
        self.record(Recorded::Send(user_id.to_owned(), text.to_owned()));
        Ok(())
    }

    fn streaming(&self) -> Option<&dyn StreamingChannel> {
        self.streaming.then_some(self as &dyn StreamingChannel)
    }
}

#[async_trait]
impl StreamingChannel for Recorder {
    async fn start(&self, user_id: &str) -> Result<(), BoxError> {
        self.record(Recorded::Start(user_id.to_owned()));
        Ok(())
    }

    async fn chunk(&self, user_id: &str, chunk: &str) -> Result<(), BoxError> {
        self.record(Recorded::Chunk(user_id.to_owned(), chunk.to_owned()));
        if self.fail_chunks {
            return Err("the edit failed".into());
        }
        Ok(())
    }

    async fn status(&self, user_id: &str, status: &str) -> Result<(), BoxError> {
        self.record(Recorded::Status(user_id.to_owned(), status.to_owned()));
        Ok(())
    }

    async fn end(&self, user_id: &str, full_text: &str) -> Result<(), BoxError> {
        self.record(Recorded::End(user_id.to_owned(), full_text.to_owned()));
        Ok(())
    }
}
