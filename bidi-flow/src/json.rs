//! JSON connections: a typed connection seen through `serde_json::Value`s, for transports, and
//! its owned halves.

use std::fmt;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bidi_core::{
    BoxError, ConnectOptions, Error, NotFound, RecvHalf, Responses, SendError, SendHalf,
};
use futures_core::{FusedStream, Stream};
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use opentelemetry::trace::SpanContext;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::flow::BidiFlow;
use crate::text::{cap, pointer, reason};

/// Why a JSON connection, or one of its messages, failed.
///
/// Messages quote at most a few hundred bytes of what the peer sent: a long reason, key or path
/// keeps its start and its end around a marker saying how many bytes were cut. The `Debug`
/// output of an input handed back is capped the same way.
#[derive(Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// No action is registered under the key. Names a registered key it resembles, if one does.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// The init value does not fit the action's `Init` type; the action was not started.
    #[error("invalid init {}: {reason}", Location(.path))]
    InvalidInit {
        /// Where in the value, as a JSON Pointer (RFC 6901): empty for the whole value,
        /// `/messages/0/text` inside it, with `~` and `/` in keys written `~0` and `~1`.
        path: String,
        /// What is wrong there, capped to a few hundred bytes.
        reason: String,
    },
    /// An input does not fit the action's `In` type. It was not sent; the connection goes on.
    #[error("invalid input {}: {reason}", Location(.path))]
    InvalidInput {
        /// Where in the value, as a JSON Pointer, as for [`InvalidInit`](Self::InvalidInit).
        path: String,
        /// What is wrong there, capped to a few hundred bytes.
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

/// Where a JSON Pointer points, for messages: `at the root` or `` at `/a/b` `` (capped).
struct Location<'a>(&'a str);

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("at the root")
        } else {
            write!(f, "at `{}`", cap(self.0))
        }
    }
}

/// A value in a `Debug` output, as capped JSON.
struct Quoted<'a>(&'a Value);

impl fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&cap(&self.0.to_string()))
    }
}

// By hand: a derived `Debug` would print a 10 MiB input handed back in full.
impl fmt::Debug for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound(missing) => f.debug_tuple("NotFound").field(missing).finish(),
            Self::InvalidInit { path, reason } => f
                .debug_struct("InvalidInit")
                .field("path", &cap(path))
                .field("reason", reason)
                .finish(),
            Self::InvalidInput {
                path,
                reason,
                input,
            } => f
                .debug_struct("InvalidInput")
                .field("path", &cap(path))
                .field("reason", reason)
                .field("input", &Quoted(input))
                .finish(),
            Self::Send(error) => f.debug_tuple("Send").field(error).finish(),
            Self::Serialize { what, reason } => f
                .debug_struct("Serialize")
                .field("what", what)
                .field("reason", reason)
                .finish(),
            Self::Connection(error) => f.debug_tuple("Connection").field(error).finish(),
        }
    }
}

/// Deserializes `value` as `T` (without copying it), naming the JSON Pointer of the first
/// problem and a capped reason.
pub(crate) fn from_value<T: DeserializeOwned>(value: &Value) -> Result<T, (String, String)> {
    // The common case reads once; only a refusal pays for tracking its path.
    if let Ok(typed) = T::deserialize(value) {
        return Ok(typed);
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = pointer(error.path());
        (path, reason(&error.into_inner().to_string()))
    })
}

/// A connection over `serde_json::Value`s, from [`Registry::connect_json`](crate::Registry::connect_json).
///
/// The same semantics as [`Connection`](bidi_core::Connection): inputs are checked against the
/// action's input type before they are sent (a bad one is refused and the connection goes on),
/// chunks and the output are serialized as they arrive. Dropping it cancels the action.
///
/// A transport splits it with [`into_split`](Self::into_split): one task reads the peer and
/// sends inputs, another writes the chunks, and either can wait for the end with `done()`.
pub struct JsonConnection {
    // Declared before `send`: dropped first, so a dropped connection stops the action's chunks
    // at once and the sending half's drop then cancels it.
    recv: JsonRecvHalf,
    send: JsonSendHalf,
    span: Option<SpanContext>,
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
        self.send.send(input).await
    }

    /// As [`Connection::close`](bidi_core::Connection::close).
    pub fn close(&self) {
        self.send.close();
    }

    /// The current turn's chunks as JSON, as [`Connection::responses`](bidi_core::Connection::responses).
    /// A chunk that cannot be serialized ends the connection: its [`JsonError::Serialize`] is the
    /// last item, and [`output`](Self::output) returns it too.
    pub fn responses(&mut self) -> JsonResponses<'_> {
        self.recv.responses()
    }

    /// The output as JSON, as [`Connection::output`](bidi_core::Connection::output): closes the
    /// input, discards unread chunks and waits for the action's result.
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
        let Self { recv, send, .. } = self;
        drop(send);
        recv.output().await
    }

    /// As [`Connection::cancel`](bidi_core::Connection::cancel).
    pub fn cancel(&self) {
        self.send.cancel();
    }

    /// As [`Connection::cancel_with`](bidi_core::Connection::cancel_with): the first cause
    /// wins, and the action sees it.
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.send.cancel_with(cause);
    }

    /// As [`Connection::is_finished`](bidi_core::Connection::is_finished).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.send.is_finished()
    }

    /// Waits until the connection is over, as [`Connection::done`](bidi_core::Connection::done):
    /// the action's future has finished, or after a cancel, finished or been dropped at the end
    /// of its grace period. Consumes nothing: chunks and the output stay readable.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn done(&self) {
        self.send.done().await;
    }

    /// As [`Connection::id`](bidi_core::Connection::id).
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.send.id()
    }

    /// The OpenTelemetry context of the connection's span: its trace id and span id, to
    /// find the connection's trace (the connection span is its root unless the caller's
    /// context had a span). `None` when the connection is not traced: its flow's tracer
    /// records nothing (no tracer provider is installed, or it samples the span out).
    ///
    /// ```
    /// use bidi_core::{BoxError, Inbound, Outbound};
    /// use bidi_flow::{BidiFlow, Registry};
    /// use serde_json::json;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), BoxError> {
    /// let registry = Registry::new();
    /// registry.register(BidiFlow::new("quiet", |_ctx, (), _: Inbound<()>, _: Outbound<()>| async {
    ///     Ok::<_, BoxError>(())
    /// }))?;
    /// // No tracer provider is installed here: nothing is traced.
    /// let conn = registry.connect_json("/bidi-flow/quiet", json!(null))?;
    /// assert!(conn.span_context().is_none());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn span_context(&self) -> Option<&SpanContext> {
        self.span.as_ref()
    }

    /// Splits the connection into an owned, cloneable input half and an owned output half, for
    /// full-duplex use from two tasks: what a transport does, reading its peer in one task and
    /// writing chunks in another.
    ///
    /// As for [`Connection::into_split`](bidi_core::Connection::into_split), dropping every
    /// input half closes the input, and dropping every half cancels the action.
    ///
    /// ```
    /// use bidi_core::{BoxError, Inbound, Outbound};
    /// use bidi_flow::{BidiFlow, Registry};
    /// use futures_util::StreamExt;
    /// use serde_json::json;
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), BoxError> {
    /// let registry = Registry::new();
    /// registry.register(BidiFlow::new("double", |_ctx, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
    ///     while let Some(n) = inbound.recv().await {
    ///         out.send(2 * n).await?;
    ///         out.end_turn().await?;
    ///     }
    ///     Ok::<_, BoxError>("done")
    /// }))?;
    ///
    /// let (input, mut output) = registry.connect_json("/bidi-flow/double", json!(null))?.into_split();
    /// // One task reads the peer and sends its inputs; dropping the half closes the input.
    /// let reader = tokio::spawn(async move {
    ///     for n in [1, 2, 3] {
    ///         input.send(json!(n)).await?;
    ///     }
    ///     Ok::<_, bidi_flow::JsonError>(())
    /// });
    /// // This one writes the chunks, turn by turn, then the output.
    /// let mut chunks = Vec::new();
    /// loop {
    ///     let turn: Vec<_> = output.responses().collect().await;
    ///     if turn.is_empty() && output.is_finished() {
    ///         break;
    ///     }
    ///     for chunk in turn {
    ///         chunks.push(chunk?);
    ///     }
    /// }
    /// reader.await??;
    /// assert_eq!(chunks, [json!(2), json!(4), json!(6)]);
    /// assert_eq!(output.output().await?, json!("done"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn into_split(self) -> (JsonSendHalf, JsonRecvHalf) {
        let Self { recv, send, .. } = self;
        (send, recv)
    }
}

impl fmt::Debug for JsonConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonConnection")
            .field("id", &self.id())
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

/// The input half of a [`JsonConnection`], from [`JsonConnection::into_split`]. Cloneable:
/// clones send into the same connection, and the input closes once every clone is dropped.
#[derive(Clone)]
pub struct JsonSendHalf {
    inner: Arc<dyn ErasedSend>,
}

impl JsonSendHalf {
    /// As [`JsonConnection::send`].
    ///
    /// # Errors
    ///
    /// As [`JsonConnection::send`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the input is not delivered.
    pub async fn send(&self, input: Value) -> Result<(), JsonError> {
        self.inner.send(input).await
    }

    /// As [`JsonConnection::close`]: closes the input for every clone.
    pub fn close(&self) {
        self.inner.close();
    }

    /// As [`JsonConnection::cancel`].
    pub fn cancel(&self) {
        self.inner.cancel(None);
    }

    /// As [`JsonConnection::cancel_with`].
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.inner.cancel(Some(cause.into()));
    }

    /// As [`JsonConnection::is_finished`].
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// As [`JsonConnection::done`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn done(&self) {
        self.inner.done().await;
    }

    /// As [`JsonConnection::id`].
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.inner.id()
    }
}

impl fmt::Debug for JsonSendHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonSendHalf")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

/// The output half of a [`JsonConnection`], from [`JsonConnection::into_split`]: each turn's
/// chunks and the output, as JSON.
pub struct JsonRecvHalf {
    inner: Box<dyn ErasedRecv>,
}

impl JsonRecvHalf {
    /// As [`JsonConnection::responses`].
    pub fn responses(&mut self) -> JsonResponses<'_> {
        JsonResponses::new(self.inner.responses(), |chunks, cx| chunks.poll_value(cx))
    }

    /// The current turn's chunks as JSON text, as [`responses`](Self::responses) reads them
    /// as values: for a writer that only writes each chunk on (a record, a frame), each is
    /// serialized once, straight from the action's type, with no [`Value`] built.
    ///
    /// ```
    /// use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
    /// use bidi_flow::{BidiFlow, Registry};
    /// use futures_util::StreamExt as _;
    /// use serde_json::{Value, json};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let registry = Registry::new();
    /// registry.register(BidiFlow::new(
    ///     "count",
    ///     |_: ActionContext, (): (), _: Inbound<()>, out: Outbound<Value>| async move {
    ///         out.send(json!({"i": 0})).await?;
    ///         Ok::<_, BoxError>(1)
    ///     },
    /// ))?;
    /// let conn = registry.connect_json("/bidi-flow/count", Value::Null)?;
    /// let (_input, mut output) = conn.into_split();
    /// let chunk = output.raw_responses().next().await.unwrap()?;
    /// assert_eq!(chunk.get(), r#"{"i":0}"#);
    /// # Ok(())
    /// # }
    /// ```
    pub fn raw_responses(&mut self) -> JsonResponses<'_, Box<RawValue>> {
        JsonResponses::new(self.inner.responses(), |chunks, cx| chunks.poll_raw(cx))
    }

    /// As [`JsonConnection::output`], without closing the input (the input halves do that).
    ///
    /// # Errors
    ///
    /// As [`JsonConnection::output`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops this half; once every half is gone the action is cancelled.
    pub async fn output(self) -> Result<Value, JsonError> {
        self.inner.output().await
    }

    /// As [`JsonConnection::cancel`].
    pub fn cancel(&self) {
        self.inner.cancel(None);
    }

    /// As [`JsonConnection::cancel_with`].
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.inner.cancel(Some(cause.into()));
    }

    /// As [`JsonConnection::is_finished`].
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// As [`JsonConnection::done`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn done(&self) {
        self.inner.done().await;
    }

    /// As [`JsonConnection::id`].
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.inner.id()
    }
}

impl fmt::Debug for JsonRecvHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonRecvHalf")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

/// The chunks of one turn of a [`JsonConnection`], as JSON: [`Value`]s
/// ([`responses`](JsonRecvHalf::responses)), or their JSON text
/// ([`raw_responses`](JsonRecvHalf::raw_responses)).
///
/// Dropping it cancels nothing; the next `responses()` call continues with the next chunk.
pub struct JsonResponses<'a, C = Value> {
    inner: Box<dyn ErasedResponses + 'a>,
    poll: PollChunk<C>,
    chunk: PhantomData<fn() -> C>,
}

/// How a turn's typed chunks are read as `C`.
type PollChunk<C> =
    fn(&mut dyn ErasedResponses, &mut Context<'_>) -> Poll<Option<Result<C, JsonError>>>;

impl<'a, C> JsonResponses<'a, C> {
    fn new(inner: Box<dyn ErasedResponses + 'a>, poll: PollChunk<C>) -> Self {
        Self {
            inner,
            poll,
            chunk: PhantomData,
        }
    }
}

/// A chunk as a [`JsonResponses`] hands it over: a [`Value`], or its JSON text
/// ([`RawValue`]). A writer generic over it reads a turn with [`JsonChunk::responses`].
pub trait JsonChunk: Sized + Send + sealed::Sealed {
    /// The current turn of `output`, its chunks as `Self`.
    fn responses(output: &mut JsonRecvHalf) -> JsonResponses<'_, Self>;
}

impl JsonChunk for Value {
    fn responses(output: &mut JsonRecvHalf) -> JsonResponses<'_, Self> {
        output.responses()
    }
}

impl JsonChunk for Box<RawValue> {
    fn responses(output: &mut JsonRecvHalf) -> JsonResponses<'_, Self> {
        output.raw_responses()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for serde_json::Value {}
    impl Sealed for Box<serde_json::value::RawValue> {}
}

impl<C> JsonResponses<'_, C> {
    /// Whether the stream ended at the action's end of the turn, as
    /// [`Responses::turn_ended`](bidi_core::Responses::turn_ended): `false` while it streams
    /// and when it ended because the connection ended.
    #[must_use]
    pub fn turn_ended(&self) -> bool {
        self.inner.turn_ended()
    }

    /// Cancels the connection with `cause` from where its chunks are read, as
    /// [`Responses::cancel_with`](bidi_core::Responses::cancel_with): the stream then ends with
    /// the cancellation.
    pub fn cancel_with(&self, cause: impl Into<BoxError>) {
        self.inner.cancel(cause.into());
    }
}

impl<C> Stream for JsonResponses<'_, C> {
    type Item = Result<C, JsonError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        (this.poll)(&mut *this.inner, cx)
    }
}

impl<C> FusedStream for JsonResponses<'_, C> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

impl<C> fmt::Debug for JsonResponses<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonResponses")
            .field("done", &self.inner.is_terminated())
            .field("turn_ended", &self.inner.turn_ended())
            .finish_non_exhaustive()
    }
}

/// A typed turn's chunks seen as JSON.
trait ErasedResponses: Send {
    fn poll_value(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Value, JsonError>>>;
    fn poll_raw(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Box<RawValue>, JsonError>>>;
    fn turn_ended(&self) -> bool;
    fn is_terminated(&self) -> bool;
    fn cancel(&self, cause: BoxError);
}

/// One turn of a [`TypedRecv`]: serializes each chunk as it is read.
struct Chunks<'a, S> {
    inner: Responses<'a, S>,
    /// Where a chunk that fails to serialize is recorded: the connection then ends with it.
    poisoned: &'a mut Option<JsonError>,
    done: bool,
}

impl<S: Serialize + Send> Chunks<'_, S> {
    /// The next chunk, serialized by `serialize`.
    fn poll_as<C>(
        &mut self,
        cx: &mut Context<'_>,
        serialize: impl FnOnce(S) -> Result<C, serde_json::Error>,
    ) -> Poll<Option<Result<C, JsonError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = match std::task::ready!(self.inner.poll_next_unpin(cx)) {
            None => None,
            Some(Err(error)) => Some(Err(JsonError::Connection(error))),
            Some(Ok(chunk)) => Some(serialize(chunk).map_err(|error| {
                let error = JsonError::Serialize {
                    what: "chunk",
                    reason: error.to_string(),
                };
                self.inner.cancel_with(error.clone());
                *self.poisoned = Some(error.clone());
                self.done = true;
                error
            })),
        };
        self.done |= item.is_none();
        Poll::Ready(item)
    }
}

impl<S: Serialize + Send> ErasedResponses for Chunks<'_, S> {
    fn poll_value(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Value, JsonError>>> {
        self.poll_as(cx, serde_json::to_value)
    }

    fn poll_raw(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Box<RawValue>, JsonError>>> {
        self.poll_as(cx, |chunk| serde_json::value::to_raw_value(&chunk))
    }

    fn turn_ended(&self) -> bool {
        self.inner.turn_ended()
    }

    fn is_terminated(&self) -> bool {
        self.done
    }

    fn cancel(&self, cause: BoxError) {
        self.inner.cancel_with(cause);
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
        let (conn, span) = self.connect_traced(init, options);
        let (tx, rx) = conn.into_split();
        Ok(JsonConnection {
            span,
            recv: JsonRecvHalf {
                inner: Box::new(TypedRecv { rx, poisoned: None }),
            },
            send: JsonSendHalf {
                inner: Arc::new(TypedSend { tx }),
            },
        })
    }
}

/// The typed input half behind a [`JsonSendHalf`] and all its clones.
struct TypedSend<In> {
    tx: SendHalf<In>,
}

/// The typed output half behind a [`JsonRecvHalf`].
struct TypedRecv<Out, S> {
    rx: RecvHalf<Out, S>,
    /// A chunk failed to serialize: the connection was cancelled and ends with this error.
    poisoned: Option<JsonError>,
}

trait ErasedSend: Send + Sync {
    fn send(&self, input: Value) -> BoxFuture<'_, Result<(), JsonError>>;
    fn close(&self);
    /// Cancels with `cause`, or as requested by the caller if `None`.
    fn cancel(&self, cause: Option<BoxError>);
    fn is_finished(&self) -> bool;
    fn done(&self) -> BoxFuture<'_, ()>;
    fn id(&self) -> Uuid;
}

trait ErasedRecv: Send + Sync {
    fn responses(&mut self) -> Box<dyn ErasedResponses + '_>;
    fn output(self: Box<Self>) -> BoxFuture<'static, Result<Value, JsonError>>;
    fn cancel(&self, cause: Option<BoxError>);
    fn is_finished(&self) -> bool;
    fn done(&self) -> BoxFuture<'_, ()>;
    fn id(&self) -> Uuid;
}

impl<In> ErasedSend for TypedSend<In>
where
    In: DeserializeOwned + Send + 'static,
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

    fn cancel(&self, cause: Option<BoxError>) {
        match cause {
            Some(cause) => self.tx.cancel_with(cause),
            None => self.tx.cancel(),
        }
    }

    fn is_finished(&self) -> bool {
        self.tx.is_finished()
    }

    fn done(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tx.done())
    }

    fn id(&self) -> Uuid {
        self.tx.id()
    }
}

impl<Out, S> ErasedRecv for TypedRecv<Out, S>
where
    Out: Serialize + Send + 'static,
    S: Serialize + Send + 'static,
{
    fn responses(&mut self) -> Box<dyn ErasedResponses + '_> {
        let Self { rx, poisoned } = self;
        Box::new(Chunks {
            done: poisoned.is_some(),
            inner: rx.responses(),
            poisoned,
        })
    }

    fn output(self: Box<Self>) -> BoxFuture<'static, Result<Value, JsonError>> {
        let Self { rx, poisoned } = *self;
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

    fn cancel(&self, cause: Option<BoxError>) {
        match cause {
            Some(cause) => self.rx.cancel_with(cause),
            None => self.rx.cancel(),
        }
    }

    fn is_finished(&self) -> bool {
        self.rx.is_finished()
    }

    fn done(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.rx.done())
    }

    fn id(&self) -> Uuid {
        self.rx.id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Deep {
        messages: Vec<Message>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Message {
        text: String,
    }

    #[test]
    fn paths_are_json_pointers() {
        let (path, reason) =
            from_value::<Deep>(&serde_json::json!({"messages": [{"text": "a"}, {"text": 1}]}))
                .unwrap_err();
        assert_eq!(path, "/messages/1/text");
        assert!(reason.contains("expected a string"), "{reason}");
        let (root, _) = from_value::<Deep>(&serde_json::json!(null)).unwrap_err();
        assert_eq!(root, "");
    }
}
