//! Errors: what a connection ends with, why a send failed, and why a connection was cancelled.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::chan::Reason;

/// A boxed error, what an action's own error is converted into.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// How a connection failed: yielded as the last item of
/// [`Responses`](crate::Responses) and returned by [`Connection::output`](crate::Connection::output).
///
/// `Error` is cheap to clone: the same failure reaches both places.
#[derive(Clone)]
#[non_exhaustive]
pub enum Error {
    /// The action returned an error. It is this error's [`source`](StdError::source), so callers
    /// can downcast it to the action's own error type.
    Action(Arc<dyn StdError + Send + Sync>),
    /// The connection was cancelled before the action completed.
    Cancelled(Cause),
    /// The action panicked; the payload's message, if it had one.
    Panicked(String),
}

impl Error {
    /// Wraps an action's error.
    pub fn action(error: impl Into<BoxError>) -> Self {
        Self::Action(Arc::from(error.into()))
    }

    /// Whether the connection was cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Self::Cancelled(_))
    }

    /// Whether the action panicked.
    #[must_use]
    pub fn is_panic(&self) -> bool {
        matches!(self, Self::Panicked(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Action(error) => write!(f, "action failed: {error}"),
            Self::Cancelled(cause) => write!(f, "connection cancelled: {cause}"),
            Self::Panicked(message) => write!(f, "action panicked: {message}"),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Action(error) => f.debug_tuple("Action").field(error).finish(),
            Self::Cancelled(cause) => f.debug_tuple("Cancelled").field(cause).finish(),
            Self::Panicked(message) => f.debug_tuple("Panicked").field(message).finish(),
        }
    }
}

// Written by hand rather than derived: `source()` must return the action's error itself, not the
// `Arc` around it, or downcasting to the user's type would fail.
impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Action(error) => Some(&**error),
            Self::Cancelled(cause) => Some(cause.get_ref()),
            Self::Panicked(_) => None,
        }
    }
}

/// Why a connection was cancelled. The first cause given wins.
///
/// Given with [`Connection::cancel_with`](crate::Connection::cancel_with), or one of the built-in
/// causes: cancelled by the caller, every handle dropped, the parent token cancelled. Where it
/// came from is [`kind`](Self::kind); what it says is the error inside.
///
/// ```
/// use bidi_core::{BidiAction, BoxError, CauseKind, Error, Inbound, Outbound};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let idle = BidiAction::new("idle", |ctx, (), _: Inbound<()>, _: Outbound<()>| async move {
///     ctx.cancelled().await;
///     Ok::<_, BoxError>(())
/// });
/// let conn = idle.connect(());
/// conn.cancel_with("the peer went away");
/// match conn.output().await {
///     Err(Error::Cancelled(cause)) => {
///         assert_eq!(cause.kind(), CauseKind::Requested);
///         assert_eq!(cause.to_string(), "the peer went away");
///     }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Cause {
    kind: CauseKind,
    error: Arc<dyn StdError + Send + Sync>,
}

/// Where a [`Cause`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CauseKind {
    /// A handle asked for it: [`cancel`](crate::Connection::cancel) or
    /// [`cancel_with`](crate::Connection::cancel_with) (a transport whose peer went away, say).
    Requested,
    /// The parent token given with [`ConnectOptions::parent`](crate::ConnectOptions::parent)
    /// was cancelled.
    Parent,
    /// Every handle of the connection was dropped.
    Dropped,
}

impl Cause {
    /// A cause from any error or message, of kind [`CauseKind::Requested`].
    pub fn new(cause: impl Into<BoxError>) -> Self {
        Self {
            kind: CauseKind::Requested,
            error: Arc::from(cause.into()),
        }
    }

    fn builtin(kind: CauseKind, message: &'static str) -> Self {
        Self {
            kind,
            error: Arc::new(Builtin(message)),
        }
    }

    pub(crate) fn requested() -> Self {
        Self::builtin(CauseKind::Requested, "cancelled by the caller")
    }

    pub(crate) fn dropped() -> Self {
        Self::builtin(
            CauseKind::Dropped,
            "every handle of the connection was dropped",
        )
    }

    pub(crate) fn parent() -> Self {
        Self::builtin(
            CauseKind::Parent,
            "the parent cancellation token was cancelled",
        )
    }

    /// Where the cause came from.
    #[must_use]
    pub fn kind(&self) -> CauseKind {
        self.kind
    }

    /// The cause as an error.
    #[must_use]
    pub fn get_ref(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }

    /// The cause as `T`, if it is one.
    #[must_use]
    pub fn downcast_ref<T: StdError + 'static>(&self) -> Option<&T> {
        self.error.downcast_ref()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cause")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

#[derive(Debug)]
struct Builtin(&'static str);

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl StdError for Builtin {}

/// A send that failed; the value comes back.
///
/// Returned by [`Connection::send`](crate::Connection::send) (the value is an input) and by
/// [`Outbound::send`](crate::Outbound::send) (the value is a chunk).
#[derive(Clone)]
#[non_exhaustive]
pub enum SendError<T> {
    /// The receiving side is closed: for inputs, [`close`](crate::Connection::close) was called
    /// (or every sending half was dropped); for chunks, the consumer dropped its receiving half.
    Closed(T),
    /// The action has completed with an output.
    Completed(T),
    /// The action has ended with this error (its own error or a panic) before taking the
    /// input: an agent whose session store is down, say. The error is also this error's
    /// [`source`](StdError::source), and what [`output`](crate::Connection::output) returns.
    Failed(T, Error),
    /// The connection was cancelled.
    Cancelled(T),
}

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            Self::Closed(value)
            | Self::Completed(value)
            | Self::Failed(value, _)
            | Self::Cancelled(value) => value,
        }
    }

    /// The same failure carrying another value (say, the JSON an input was decoded from).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> SendError<U> {
        match self {
            Self::Closed(value) => SendError::Closed(f(value)),
            Self::Completed(value) => SendError::Completed(f(value)),
            Self::Failed(value, error) => SendError::Failed(f(value), error),
            Self::Cancelled(value) => SendError::Cancelled(f(value)),
        }
    }

    /// The error the action ended with, for [`Failed`](Self::Failed).
    #[must_use]
    pub fn error(&self) -> Option<&Error> {
        match self {
            Self::Failed(_, error) => Some(error),
            _ => None,
        }
    }

    pub(crate) fn new(reason: Reason, value: T) -> Self {
        match reason {
            Reason::Closed => Self::Closed(value),
            Reason::Completed => Self::Completed(value),
            Reason::Cancelled => Self::Cancelled(value),
        }
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed(_) => f.write_str("Closed(..)"),
            Self::Completed(_) => f.write_str("Completed(..)"),
            Self::Failed(_, error) => write!(f, "Failed(.., {error:?})"),
            Self::Cancelled(_) => f.write_str("Cancelled(..)"),
        }
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed(_) => f.write_str("send failed: the receiving side is closed"),
            Self::Completed(_) => f.write_str("send failed: the action has completed"),
            Self::Failed(_, error) => write!(f, "send failed: {error}"),
            Self::Cancelled(_) => f.write_str("send failed: the connection was cancelled"),
        }
    }
}

impl<T> StdError for SendError<T> {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Failed(_, error) => Some(error),
            _ => None,
        }
    }
}

/// Something looked up by name does not exist: an action key, a session id.
///
/// One type wherever a lookup can miss, so callers match one thing. When a close match exists
/// (a registered key that ends the same way, say), it is the [`suggestion`](Self::suggestion).
///
/// ```
/// use bidi_core::NotFound;
///
/// let missing = NotFound::new("action", "echo").with_suggestion("/bidi-flow/echo");
/// assert_eq!(missing.to_string(), "no action `echo`; did you mean `/bidi-flow/echo`?");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct NotFound {
    /// What was looked up: `action`, `session`, ...
    pub kind: &'static str,
    /// The name or id asked for.
    pub name: String,
    /// An existing name close to it, if there is one.
    pub suggestion: Option<String>,
}

impl NotFound {
    /// No `kind` named `name`.
    pub fn new(kind: &'static str, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            suggestion: None,
        }
    }

    /// Names an existing `name` the caller may have meant.
    #[must_use]
    pub fn with_suggestion(mut self, name: impl Into<String>) -> Self {
        self.suggestion = Some(name.into());
        self
    }
}

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no {} `{}`", self.kind, self.name)?;
        if let Some(suggestion) = &self.suggestion {
            write!(f, "; did you mean `{suggestion}`?")?;
        }
        Ok(())
    }
}

impl StdError for NotFound {}

/// Why a transport cancelled a connection: the peer it served went away. Every transport
/// cancels with this one cause, so an action tells "nobody reads any more" from other
/// cancellations the same way whatever the protocol.
///
/// ```
/// use std::time::Duration;
///
/// use bidi_core::{BidiAction, BoxError, Error, Inbound, Outbound, PeerGone};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let idle = BidiAction::new("idle", |ctx, (), _: Inbound<()>, _: Outbound<()>| async move {
///     ctx.cancelled().await;
///     Ok::<_, BoxError>(())
/// });
/// let conn = idle.connect(());
/// conn.cancel_with(PeerGone::Idle(Duration::from_secs(30)));
/// match conn.output().await {
///     Err(Error::Cancelled(cause)) => {
///         assert_eq!(cause.peer_gone(), Some(PeerGone::Idle(Duration::from_secs(30))));
///     }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PeerGone {
    /// The peer disconnected: a closed socket or pipe, an aborted request, a body nobody reads.
    Disconnected,
    /// Nothing moved between the peer and the connection for this long.
    Idle(std::time::Duration),
}

impl fmt::Display for PeerGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disconnected => f.write_str("the peer went away"),
            Self::Idle(timeout) => write!(f, "nothing moved on the connection for {timeout:?}"),
        }
    }
}

impl StdError for PeerGone {}

impl Cause {
    /// The peer that went away, if that is the cause: a transport cancelled the connection
    /// because its peer disconnected or was idle.
    #[must_use]
    pub fn peer_gone(&self) -> Option<PeerGone> {
        self.downcast_ref::<PeerGone>().copied()
    }
}
