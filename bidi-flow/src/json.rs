//! JSON connections (F4): a typed connection seen through `serde_json::Value`s, for transports.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bidi_core::{ConnectOptions, Error, RecvHalf, Responses, SendError, SendHalf};
use futures_core::Stream;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::flow::BidiFlow;

/// Why a JSON connection, or one of its messages, failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// No action is registered under the key.
    #[error("no action is registered as `{key}`")]
    NotFound {
        /// The key asked for.
        key: String,
    },
    /// The init value does not fit the action's `Init` type; the action was not started.
    #[error("invalid init at `{path}`: {reason}")]
    InvalidInit {
        /// Where in the value: `.` for the root, `messages[0].text` inside it.
        path: String,
        /// What is wrong there.
        reason: String,
    },
    /// An input does not fit the action's `In` type. It was not sent; the connection goes on.
    #[error("invalid input at `{path}`: {reason}")]
    InvalidInput {
        /// Where in the value.
        path: String,
        /// What is wrong there.
        reason: String,
        /// The input, handed back.
        input: Value,
    },
    /// A valid input could not be sent (the connection is closed, completed or cancelled).
    #[error(transparent)]
    Send(#[from] SendError<Value>),
    /// A chunk or the output could not be serialized as JSON. A chunk ends the connection.
    #[error("the action's {what} could not be serialized as JSON: {reason}")]
    Serialize {
        /// `chunk` or `output`.
        what: &'static str,
        /// The serializer's message.
        reason: String,
    },
    /// The connection failed: the action's error, a panic or a cancellation.
    #[error(transparent)]
    Connection(#[from] Error),
}

/// Deserializes `value` as `T` (without copying it), naming the path of the first problem.
pub(crate) fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        (path, error.into_inner().to_string())
    })
}

/// A connection over `serde_json::Value`s, from [`Registry::connect_json`](crate::Registry::connect_json).
///
/// The same semantics as [`Connection`](bidi_core::Connection): inputs are checked against the
/// action's input type before they are sent (a bad one is refused and the connection goes on),
/// chunks and the output are serialized as they arrive. Dropping it cancels the action.
pub struct JsonConnection {
    inner: Box<dyn Erased>,
}

impl JsonConnection {
    /// Sends one input.
    ///
    /// # Errors
    ///
    /// [`JsonError::InvalidInput`] with the path and the reason if it does not fit the input
    /// type (nothing is sent, the connection goes on), or [`JsonError::Send`] with the value
    /// handed back, as [`Connection::send`](bidi_core::Connection::send).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the input is not delivered.
    pub async fn send(&self, input: Value) -> Result<(), JsonError> {
        self.inner.send(input).await
    }

    /// As [`Connection::close`](bidi_core::Connection::close).
    pub fn close(&self) {
        self.inner.close();
    }

    /// The current turn's chunks as JSON, as [`Connection::responses`](bidi_core::Connection::responses).
    /// A chunk that cannot be serialized ends the connection: its [`JsonError::Serialize`] is the
    /// last item, and [`output`](Self::output) returns it too.
    pub fn responses(&mut self) -> JsonResponses<'_> {
        JsonResponses {
            inner: self.inner.responses(),
        }
    }

    /// The output as JSON, as [`Connection::output`](bidi_core::Connection::output).
    ///
    /// # Errors
    ///
    /// [`JsonError::Connection`] if the connection failed, or [`JsonError::Serialize`] if a
    /// chunk or the output could not be serialized.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection, which cancels the action.
    pub async fn output(self) -> Result<Value, JsonError> {
        self.inner.output().await
    }

    /// As [`Connection::cancel`](bidi_core::Connection::cancel).
    pub fn cancel(&self) {
        self.inner.cancel();
    }

    /// As [`Connection::is_finished`](bidi_core::Connection::is_finished).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// As [`Connection::id`](bidi_core::Connection::id).
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.inner.id()
    }
}

impl fmt::Debug for JsonConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonConnection")
            .field("id", &self.inner.id())
            .field("finished", &self.inner.is_finished())
            .finish_non_exhaustive()
    }
}

/// The chunks of one turn of a [`JsonConnection`], as JSON.
pub struct JsonResponses<'a> {
    inner: BoxStream<'a, Result<Value, JsonError>>,
}

impl Stream for JsonResponses<'_> {
    type Item = Result<Value, JsonError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl fmt::Debug for JsonResponses<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonResponses").finish_non_exhaustive()
    }
}

/// What a registry entry can do without its types: open a JSON connection.
pub(crate) trait JsonFlow: Send + Sync {
    fn connect_json(
        &self,
        init: Value,
        options: ConnectOptions,
    ) -> Result<JsonConnection, JsonError>;
}

impl<Init, In, Out, S> JsonFlow for BidiFlow<Init, In, Out, S>
where
    Init: DeserializeOwned + Serialize + Send + 'static,
    In: DeserializeOwned + Send + 'static,
    Out: Serialize + Send + 'static,
    S: Serialize + Send + 'static,
{
    fn connect_json(
        &self,
        init: Value,
        options: ConnectOptions,
    ) -> Result<JsonConnection, JsonError> {
        let init: Init =
            from_value(&init).map_err(|(path, reason)| JsonError::InvalidInit { path, reason })?;
        let (tx, rx) = self.connect_with(init, options).into_split();
        Ok(JsonConnection {
            inner: Box::new(Typed {
                rx,
                tx,
                poisoned: None,
            }),
        })
    }
}

/// A typed connection behind a [`JsonConnection`].
struct Typed<In, Out, S> {
    // Declared before `tx`: dropped first, so a dropped JSON connection stops the action's
    // chunks at once and the sending half's drop then cancels it.
    rx: RecvHalf<Out, S>,
    tx: SendHalf<In>,
    /// A chunk failed to serialize: the connection was cancelled and ends with this error.
    poisoned: Option<JsonError>,
}

trait Erased: Send + Sync {
    fn send(&self, input: Value) -> BoxFuture<'_, Result<(), JsonError>>;
    fn close(&self);
    fn responses(&mut self) -> BoxStream<'_, Result<Value, JsonError>>;
    fn output(self: Box<Self>) -> BoxFuture<'static, Result<Value, JsonError>>;
    fn cancel(&self);
    fn is_finished(&self) -> bool;
    fn id(&self) -> Uuid;
}

impl<In, Out, S> Erased for Typed<In, Out, S>
where
    In: DeserializeOwned + Send + 'static,
    Out: Serialize + Send + 'static,
    S: Serialize + Send + 'static,
{
    fn send(&self, input: Value) -> BoxFuture<'_, Result<(), JsonError>> {
        Box::pin(async move {
            let typed: In = match from_value(&input) {
                Ok(typed) => typed,
                Err((path, reason)) => {
                    return Err(JsonError::InvalidInput {
                        path,
                        reason,
                        input,
                    });
                }
            };
            // The typed value goes back as the JSON the caller sent.
            self.tx
                .send(typed)
                .await
                .map_err(|error| JsonError::Send(error.map(|_| input)))
        })
    }

    fn close(&self) {
        self.tx.close();
    }

    fn responses(&mut self) -> BoxStream<'_, Result<Value, JsonError>> {
        let Self { rx, tx, poisoned } = self;
        Box::pin(Chunks {
            done: poisoned.is_some(),
            inner: rx.responses(),
            tx,
            poisoned,
        })
    }

    fn output(self: Box<Self>) -> BoxFuture<'static, Result<Value, JsonError>> {
        let Self { rx, tx, poisoned } = *self;
        drop(tx);
        Box::pin(async move {
            let output = rx.output().await;
            if let Some(error) = poisoned {
                return Err(error);
            }
            serde_json::to_value(output?).map_err(|error| JsonError::Serialize {
                what: "output",
                reason: error.to_string(),
            })
        })
    }

    fn cancel(&self) {
        self.tx.cancel();
    }

    fn is_finished(&self) -> bool {
        self.tx.is_finished()
    }

    fn id(&self) -> Uuid {
        self.tx.id()
    }
}

struct Chunks<'a, In, S> {
    inner: Responses<'a, S>,
    tx: &'a SendHalf<In>,
    poisoned: &'a mut Option<JsonError>,
    done: bool,
}

impl<In, S: Serialize> Stream for Chunks<'_, In, S> {
    type Item = Result<Value, JsonError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let item = match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => None,
            Poll::Ready(Some(Err(error))) => Some(Err(JsonError::Connection(error))),
            Poll::Ready(Some(Ok(chunk))) => Some(serde_json::to_value(chunk).map_err(|error| {
                let error = JsonError::Serialize {
                    what: "chunk",
                    reason: error.to_string(),
                };
                this.tx.cancel_with(error.clone());
                *this.poisoned = Some(error.clone());
                this.done = true;
                error
            })),
        };
        this.done |= item.is_none();
        Poll::Ready(item)
    }
}
