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
/// causes: cancelled by the caller, every handle dropped, the parent token cancelled.
#[derive(Clone)]
pub struct Cause(Arc<dyn StdError + Send + Sync>);

impl Cause {
    /// A cause from any error or message.
    pub fn new(cause: impl Into<BoxError>) -> Self {
        Self(Arc::from(cause.into()))
    }

    pub(crate) fn requested() -> Self {
        Self::new(Builtin("cancelled by the caller"))
    }

    pub(crate) fn dropped() -> Self {
        Self::new(Builtin("every handle of the connection was dropped"))
    }

    pub(crate) fn parent() -> Self {
        Self::new(Builtin("the parent cancellation token was cancelled"))
    }

    /// The cause as an error.
    #[must_use]
    pub fn get_ref(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.0
    }

    /// The cause as `T`, if it is one.
    #[must_use]
    pub fn downcast_ref<T: StdError + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Cause").field(&self.0).finish()
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
#[derive(Clone, PartialEq, Eq)]
pub enum SendError<T> {
    /// The receiving side is closed: for inputs, [`close`](crate::Connection::close) was called
    /// (or every sending half was dropped); for chunks, the consumer dropped its receiving half.
    Closed(T),
    /// The action has completed.
    Completed(T),
    /// The connection was cancelled.
    Cancelled(T),
}

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            Self::Closed(value) | Self::Completed(value) | Self::Cancelled(value) => value,
        }
    }

    /// The same failure carrying another value (say, the JSON an input was decoded from).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> SendError<U> {
        match self {
            Self::Closed(value) => SendError::Closed(f(value)),
            Self::Completed(value) => SendError::Completed(f(value)),
            Self::Cancelled(value) => SendError::Cancelled(f(value)),
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
        let name = match self {
            Self::Closed(_) => "Closed",
            Self::Completed(_) => "Completed",
            Self::Cancelled(_) => "Cancelled",
        };
        write!(f, "{name}(..)")
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Closed(_) => "send failed: the receiving side is closed",
            Self::Completed(_) => "send failed: the action has completed",
            Self::Cancelled(_) => "send failed: the connection was cancelled",
        })
    }
}

impl<T> StdError for SendError<T> {}
