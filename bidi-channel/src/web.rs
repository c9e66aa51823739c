//! A channel to browsers (feature `web`): each message a user posts is answered with the reply
//! streamed as Server-Sent Events in the AI SDK's UI message stream, encoded by `bidi-ai-sdk`'s
//! [`UiMessageStream`].
//!
//! [`Web::routes`] is one axum route, `POST /{user}/messages` with `{"text": ".."}`. The answer
//! is `text/event-stream` (`x-vercel-ai-ui-message-stream: v1`): `start`, `text-start`, a
//! `text-delta` per chunk, a transient `data-status` part per tool call
//! (`{"type":"data-status","data":{"status":"Using: search"},"transient":true}`), `text-end`,
//! `finish` and `data: [DONE]` — what the AI SDK's `readUIMessageStream` reads. Without streaming
//! ([`Web::streaming`]) the same stream comes at once when the reply is complete.
//!
//! One reply streams per user at a time: a second message from a user whose reply is still
//! streaming is answered `409 Conflict`. The user id is taken from the path: mount the route
//! behind your own authentication (an axum layer) so users post only as themselves.
//!
//! The response body is a channel of 16 writes, so a slow browser slows the reply. A
//! message the router refuses (too many users) ends the stream with `error` and `finish`. This
//! feature is the crate's one dependency on another protocol crate (`bidi-ai-sdk`, for its
//! encoder).
//!
//! ```
//! use std::sync::Arc;
//!
//! use bidi_channel::MessageRouter;
//! use bidi_channel::web::Web;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let model = ScriptedModel::new([Scripted::new().text("Hello, browser!")]);
//! let web = Arc::new(Web::new(MessageRouter::new(LlmAgent::builder("web", model).build())));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}/ada/messages", listener.local_addr()?);
//! tokio::spawn(async move { axum::serve(listener, web.routes()).await });
//!
//! let body = reqwest::Client::new().post(url).json(&serde_json::json!({"text": "hi"})).send().await?.text().await?;
//! assert!(body.contains(r#"{"type":"text-delta","id":"text-0","delta":"Hello, "}"#));
//! assert!(body.ends_with("data: [DONE]\n\n"));
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bidi_ai_sdk::UiMessageStream;
use bidi_core::BoxError;
use bidi_llm::AgentEvent;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::channel::{Channel, StreamingChannel};
use crate::router::MessageRouter;

/// How many SSE writes may wait for a slow browser before the reply waits for it.
const WINDOW: usize = 16;

/// A channel to browsers: replies as a UI message stream, one per posted message.
pub struct Web {
    router: MessageRouter,
    streaming: bool,
    open: Mutex<HashMap<String, (u64, Arc<tokio::sync::Mutex<Open>>)>>,
    next: Mutex<u64>,
}

impl fmt::Debug for Web {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Web")
            .field("router", &self.router)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

/// A reply being written to a user's open response.
struct Open {
    encoder: UiMessageStream,
    body: mpsc::Sender<Bytes>,
    /// The text written so far.
    streamed: String,
    /// Whether the text block was opened.
    text_open: bool,
}

#[derive(Deserialize)]
struct Posted {
    text: String,
}

impl Web {
    /// A web channel answering through `router`, streaming.
    #[must_use]
    pub fn new(router: MessageRouter) -> Self {
        Self {
            router,
            streaming: true,
            open: Mutex::new(HashMap::new()),
            next: Mutex::new(0),
        }
    }

    /// Turns streaming on (the default) or off: off, each reply's stream is written at once
    /// when it is complete.
    #[must_use]
    pub fn streaming(mut self, on: bool) -> Self {
        self.streaming = on;
        self
    }

    /// The route: `POST /{user}/messages`. Mount it with `nest` or `merge`.
    pub fn routes(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/{user}/messages", post(message))
            .with_state(Arc::clone(self))
    }

    fn reply(&self, user_id: &str) -> Option<Arc<tokio::sync::Mutex<Open>>> {
        self.lock().get(user_id).map(|(_, open)| Arc::clone(open))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Arc<tokio::sync::Mutex<Open>>)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes what `write` encodes to the user's response.
    async fn write(
        &self,
        user_id: &str,
        write: impl FnOnce(&mut Open, &mut Vec<u8>) + Send,
    ) -> Result<(), BoxError> {
        let Some(open) = self.reply(user_id) else {
            return Err(format!("no response is open for {user_id}").into());
        };
        let mut open = open.lock().await;
        let mut buf = Vec::new();
        write(&mut open, &mut buf);
        if buf.is_empty() {
            return Ok(());
        }
        open.body
            .send(Bytes::from(buf))
            .await
            .map_err(|_| "the browser went away".into())
    }

    /// Ends the user's response: what `full_text` has beyond what was streamed, then the end.
    async fn finish(&self, user_id: &str, full_text: &str) -> Result<(), BoxError> {
        let Some((_, open)) = self.lock().remove(user_id) else {
            return Err(format!("no response is open for {user_id}").into());
        };
        let mut open = open.lock().await;
        let mut buf = Vec::new();
        if !open.text_open {
            open.encoder.event(&AgentEvent::TextStart, &mut buf);
        }
        let rest = full_text
            .strip_prefix(open.streamed.as_str())
            .unwrap_or(full_text);
        if !rest.is_empty() {
            open.encoder.event(
                &AgentEvent::TextDelta {
                    delta: rest.to_owned(),
                },
                &mut buf,
            );
        }
        open.encoder.event(
            &AgentEvent::TextEnd {
                text: full_text.to_owned(),
            },
            &mut buf,
        );
        open.encoder.end(&mut buf);
        open.body
            .send(Bytes::from(buf))
            .await
            .map_err(|_| "the browser went away".into())
    }
}

async fn message(State(web): State<Arc<Web>>, Path(user): Path<String>, body: Bytes) -> Response {
    let text = match serde_json::from_slice::<Posted>(&body) {
        Ok(posted) if !posted.text.trim().is_empty() => posted.text,
        Ok(_) => return refuse(StatusCode::BAD_REQUEST, "the message's text is empty"),
        Err(error) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("the body must be {{\"text\": \"..\"}}: {error}"),
            );
        }
    };
    let (tx, rx) = mpsc::channel(WINDOW);
    let id = {
        let mut next = web.next.lock().unwrap_or_else(PoisonError::into_inner);
        *next += 1;
        *next
    };
    {
        let mut open = web.lock();
        if open.contains_key(&user) {
            return refuse(
                StatusCode::CONFLICT,
                "a reply to this user is still streaming",
            );
        }
        let reply = Open {
            encoder: UiMessageStream::new(format!("reply-{id}")),
            body: tx,
            streamed: String::new(),
            text_open: false,
        };
        open.insert(user.clone(), (id, Arc::new(tokio::sync::Mutex::new(reply))));
    }
    let channel: Arc<dyn Channel> = Arc::clone(&web) as Arc<dyn Channel>;
    tokio::spawn(async move {
        let result = web.router.handle(channel, &user, text).await;
        // A reply that never reached `end` (the router refused the message) ends here.
        let left = {
            let mut open = web.lock();
            match open.get(&user) {
                Some((entry, _)) if *entry == id => open.remove(&user).map(|(_, open)| open),
                _ => None,
            }
        };
        if let Some(open) = left {
            let mut open = open.lock().await;
            let mut buf = Vec::new();
            let message = result.as_ref().err().map_or_else(
                || "the reply was not delivered".to_owned(),
                ToString::to_string,
            );
            open.encoder.failed(&message, &mut buf);
            open.encoder.end(&mut buf);
            let _ = open.body.send(Bytes::from(buf)).await;
        }
        if let Err(error) = result {
            tracing::warn!(user_id = user, %error, "a web reply failed");
        }
    });
    UiMessageStream::response(Body::from_stream(bidi_flow::wire::sink::stream(rx)))
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

#[async_trait]
impl Channel for Web {
    fn id(&self) -> &str {
        "web"
    }

    async fn send_to_user(&self, user_id: &str, text: &str) -> Result<(), BoxError> {
        self.finish(user_id, text).await
    }

    fn streaming(&self) -> Option<&dyn StreamingChannel> {
        self.streaming.then_some(self as &dyn StreamingChannel)
    }
}

#[async_trait]
impl StreamingChannel for Web {
    async fn start(&self, user_id: &str) -> Result<(), BoxError> {
        self.write(user_id, |open, buf| {
            open.encoder.event(&AgentEvent::TextStart, buf);
            open.text_open = true;
        })
        .await
    }

    async fn chunk(&self, user_id: &str, chunk: &str) -> Result<(), BoxError> {
        let delta = chunk.to_owned();
        self.write(user_id, move |open, buf| {
            open.streamed.push_str(&delta);
            open.encoder.event(&AgentEvent::TextDelta { delta }, buf);
        })
        .await
    }

    async fn status(&self, user_id: &str, status: &str) -> Result<(), BoxError> {
        let part = json!({"type": "data-status", "data": {"status": status}, "transient": true});
        self.write(user_id, move |_, buf| {
            buf.extend_from_slice(b"data: ");
            buf.extend_from_slice(part.to_string().as_bytes());
            buf.extend_from_slice(b"\n\n");
        })
        .await
    }

    async fn end(&self, user_id: &str, full_text: &str) -> Result<(), BoxError> {
        self.finish(user_id, full_text).await
    }
}
