//! One round with handlers: the `listen` loop.
//!
//! A handled message is parsed twice and never as a `serde_json::Value`: its head (`type`,
//! `id`; the other fields skipped), then straight into the handler's type. A `Map` or `Value`
//! handler gets every field but `type`. Unhandled, terminal and plain-text lines are decoded
//! whole into a `Message`. A message of a type that expects a reply and that no handler takes
//! gets a default one: an agent waiting for an answer nobody gives would wait forever. A round
//! that fails while the agent is in it is drained, not abandoned, so that the process, and
//! whatever the agent keeps across rounds, survives. The flow needs none of this: any failure
//! there ends the connection and the process.

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bidi_core::BoxError;
use futures_util::future::BoxFuture;
use opentelemetry::KeyValue;
use opentelemetry::trace::TraceContextExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::child::{Child, Error, error_message};
use crate::codec::{ERROR, Head, Message, Prompt, RESULT, Reply};

/// A handler: the message's fields in, the reply's future out (or where the fields do not fit
/// and why).
type Handler<'a> = Box<
    dyn FnMut(&[u8]) -> Result<BoxFuture<'a, Result<Option<Value>, BoxError>>, (String, String)>
        + Send
        + 'a,
>;
type Observer<'a> = Box<dyn FnMut(&Message, Option<&Value>) + Send + 'a>;

/// One round of [`Child::listen`]: add handlers with [`on`](Self::on), then `.await` it for
/// the agent's `result` (its fields but `type`).
///
/// A message of a type with a handler is decoded into the handler's argument type (any
/// `Deserialize` type: [`Progress`](crate::Progress), [`Question`](crate::Question), a struct
/// of yours, or `serde_json::Map<String, Value>` for all fields), and what the handler returns
/// is written back as the reply (`Some(value)`, a `Result` of one) or not (`None`, `()`).
/// A message no handler takes is reported to [`on_unhandled`](Self::on_unhandled) and answered
/// with its type's default reply, if it has one (see
/// [`Command::default_reply`](crate::Command::default_reply)); the loop goes on. If the round
/// fails while the agent is still in it, the rest of its messages are unhandled too, until its
/// `result` or `error`.
#[must_use = "a round does nothing until awaited"]
pub struct Listen<'a> {
    child: &'a mut Child,
    prompt: Prompt,
    handlers: HashMap<String, Handler<'a>>,
    unhandled: Option<Observer<'a>>,
}

impl fmt::Debug for Listen<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listen")
            .field("prompt", &self.prompt)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'a> Listen<'a> {
    pub(crate) fn new(child: &'a mut Child, prompt: Prompt) -> Self {
        Self {
            child,
            prompt,
            handlers: HashMap::new(),
            unhandled: None,
        }
    }

    /// Handles the messages of type `kind` (a second handler for a type replaces the first).
    /// `result` and `error` end the round and take no handler.
    pub fn on<T, F, Fut>(mut self, kind: impl Into<String>, mut handler: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: FnMut(T) -> Fut + Send + 'a,
        Fut: Future + Send + 'a,
        Fut::Output: IntoReply,
    {
        let handle = move |line: &[u8]| {
            let argument: T = crate::codec::parse_line(line)?;
            let reply = handler(argument);
            Ok(Box::pin(async move { reply.await.into_reply() }) as BoxFuture<'a, _>)
        };
        self.handlers.insert(kind.into(), Box::new(handle));
        self
    }

    /// Called with each message no handler takes, and the default reply it got, if any; after
    /// a failure, with each message read to the round's end, its `result` or `error` last.
    pub fn on_unhandled(
        mut self,
        observer: impl FnMut(&Message, Option<&Value>) + Send + 'a,
    ) -> Self {
        self.unhandled = Some(Box::new(observer));
        self
    }

    async fn run(mut self) -> Result<Map<String, Value>, Error> {
        let deadline = self
            .child
            .settings
            .session_timeout
            .map(|limit| (Instant::now() + limit, limit));
        self.child.prompt(&self.prompt).await?;
        let failed = match self.round(deadline).await {
            Ok(result) => return Ok(result),
            Err(failed) => failed,
        };
        // A failure the agent knows nothing of leaves it mid-round: read the round to its end.
        if matches!(
            failed.error,
            Error::LineTooLong { .. } | Error::InvalidMessage { .. } | Error::Handler { .. }
        ) {
            self.drain(deadline, failed.unanswered).await;
        }
        Err(failed.error)
    }

    /// Reads the round's messages and hands each to its handler, until its `result`.
    async fn round(
        &mut self,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Map<String, Value>, Failed> {
        let settings = Arc::clone(&self.child.settings);
        // The type of the message being handled, in a buffer reused from message to message.
        let mut kind = String::new();
        loop {
            self.child.next_line_before(deadline).await?;
            let line = self.child.line();
            // A message with a handler is read straight into the handler's type; any other
            // (an unhandled type, the result, plain text) is read whole.
            let head = Head::of(line).filter(|head| {
                head.kind != RESULT && head.kind != ERROR && self.handlers.contains_key(&*head.kind)
            });
            let next = match head {
                Some(head) => {
                    kind.clear();
                    kind.push_str(&head.kind);
                    Next::Handle {
                        fields: None,
                        id: head.id,
                    }
                }
                None => {
                    let message = Message::decode(line, &settings.plain);
                    if message.is_terminal() {
                        self.child.in_round = false;
                        return match message.kind.as_str() {
                            RESULT => Ok(message.fields),
                            _ => Err(Error::Agent {
                                message: error_message(&message.fields),
                                fields: message.fields,
                            }
                            .into()),
                        };
                    }
                    kind.clone_from(&message.kind);
                    if self.handlers.contains_key(&message.kind) {
                        // Plain text taken as a handled type: its fields are the handler's.
                        Next::Handle {
                            fields: Some(
                                serde_json::to_vec(&message.fields)
                                    .map_err(std::io::Error::from)
                                    .map_err(Error::from)?,
                            ),
                            id: message.id().cloned(),
                        }
                    } else {
                        Next::Unhandled(message)
                    }
                }
            };
            let (reply, id) = match next {
                Next::Handle { fields, id } => {
                    let id = id.filter(|id| !id.is_null());
                    (self.handle(&kind, fields, &id, deadline).await?, id)
                }
                Next::Unhandled(message) => (self.unhandled(&message), message.id().cloned()),
            };
            if let Some(value) = reply {
                let reply = Reply {
                    in_reply_to: kind.clone(),
                    in_reply_to_id: id,
                    value,
                };
                self.child.reply(&reply).await?;
            }
        }
    }

    /// Hands a message of type `kind` to its handler (the line just read, or `fields`, those
    /// of a plain-text line), within the round's time: its reply.
    async fn handle(
        &mut self,
        kind: &str,
        fields: Option<Vec<u8>>,
        id: &Option<Value>,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Option<Value>, Failed> {
        let line = fields.as_deref().unwrap_or_else(|| self.child.line());
        let Some(handler) = self.handlers.get_mut(kind) else {
            return Ok(None); // Not reached: the handler was found before.
        };
        let handled = handler(line).map_err(|(path, reason)| {
            let error = Error::InvalidMessage {
                kind: kind.to_owned(),
                path,
                reason,
            };
            Failed::unanswered(error, kind, id)
        })?;
        let outcome = match deadline {
            None => handled.await,
            Some((at, limit)) => tokio::select! {
                outcome = handled => outcome,
                () = tokio::time::sleep_until(at) => {
                    self.child.kill().await;
                    return Err(Error::SessionTimeout(limit).into());
                }
            },
        };
        outcome.map_err(|source| {
            let error = Error::Handler {
                kind: kind.to_owned(),
                source,
            };
            Failed::unanswered(error, kind, id)
        })
    }

    /// A message no handler takes: recorded, reported to the observer, and its type's default
    /// reply, if it has one (a `result` or an `error` has none).
    fn unhandled(&mut self, message: &Message) -> Option<Value> {
        let reply = if message.is_terminal() {
            None
        } else {
            self.child.settings.replies.get(&message.kind).cloned()
        };
        event(
            "listen:unhandled",
            vec![
                KeyValue::new("ndjson.type", message.kind.clone()),
                KeyValue::new("ndjson.replied", reply.is_some()),
            ],
        );
        if let Some(observer) = &mut self.unhandled {
            observer(message, reply.as_ref());
        }
        reply
    }

    /// Reads the rest of a failed round to its end (its `result` or `error`), within the
    /// round's limits, so that the next round starts in step. The message the failure left
    /// unanswered, and each one after it, is unhandled: it gets its type's default reply, if
    /// any, and goes to the observer. If the agent exits, is killed at a limit, or cannot be
    /// read, the round stays open.
    async fn drain(
        &mut self,
        deadline: Option<(Instant, Duration)>,
        unanswered: Option<(String, Option<Value>)>,
    ) {
        event("listen:drain", Vec::new());
        if let Some((kind, id)) = unanswered
            && let Some(value) = self.child.settings.replies.get(&kind).cloned()
        {
            let reply = Reply {
                in_reply_to: kind,
                in_reply_to_id: id,
                value,
            };
            if self.child.reply(&reply).await.is_err() {
                return;
            }
        }
        loop {
            match self.child.next_line_before(deadline).await {
                Ok(()) => {}
                // Not kept, as in the round.
                Err(Error::LineTooLong { .. }) => continue,
                Err(_) => return,
            }
            let message = Message::decode(self.child.line(), &self.child.settings.plain);
            let reply = self.unhandled(&message);
            if message.is_terminal() {
                self.child.in_round = false;
                return;
            }
            if let Some(value) = reply
                && self.child.reply(&Reply::to(&message, value)).await.is_err()
            {
                return;
            }
        }
    }
}

/// Why a round failed, and the message the failure left without its answer, if any.
struct Failed {
    error: Error,
    /// The type and `id` of the message left unanswered.
    unanswered: Option<(String, Option<Value>)>,
}

impl Failed {
    /// `error`, which left the message of type `kind` with `id` unanswered.
    fn unanswered(error: Error, kind: &str, id: &Option<Value>) -> Self {
        Self {
            error,
            unanswered: Some((kind.to_owned(), id.clone())),
        }
    }
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Self {
            error,
            unanswered: None,
        }
    }
}

impl<'a> IntoFuture for Listen<'a> {
    type Output = Result<Map<String, Value>, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            event("listen:start", Vec::new());
            let outcome = self.run().await;
            match &outcome {
                Ok(_) => event("listen:complete", Vec::new()),
                Err(error) => event(
                    "listen:error",
                    vec![KeyValue::new("ndjson.error", error.to_string())],
                ),
            }
            outcome
        })
    }
}

/// What to do with the message just read.
enum Next {
    /// Hand it to its handler: the line itself, or these fields (of a plain-text line).
    Handle {
        fields: Option<Vec<u8>>,
        id: Option<Value>,
    },
    /// Nobody handles it.
    Unhandled(Message),
}

/// An event on the current OpenTelemetry span (a flow's, a `bidi_flow::run` step's, yours):
/// nothing when there is none.
fn event(name: &'static str, attributes: Vec<KeyValue>) {
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    if span.is_recording() {
        span.add_event(name, attributes);
    }
}

/// What a handler returns: the reply to write back, if any.
///
/// `()` and `None` write nothing; `Some(value)` writes `value` (anything `Serialize`); a
/// `Result` is its `Ok`, and its `Err` ends the round with [`Error::Handler`].
pub trait IntoReply {
    /// The reply, or why the handler failed.
    ///
    /// # Errors
    ///
    /// The handler's error, or the reply's if it cannot be serialized.
    fn into_reply(self) -> Result<Option<Value>, BoxError>;
}

impl IntoReply for () {
    fn into_reply(self) -> Result<Option<Value>, BoxError> {
        Ok(None)
    }
}

impl<T: Serialize> IntoReply for Option<T> {
    fn into_reply(self) -> Result<Option<Value>, BoxError> {
        self.map(serde_json::to_value)
            .transpose()
            .map_err(Into::into)
    }
}

impl<T: IntoReply, E: Into<BoxError>> IntoReply for Result<T, E> {
    fn into_reply(self) -> Result<Option<Value>, BoxError> {
        self.map_err(Into::into)?.into_reply()
    }
}
