//! Why an agent's execution did not start, or why its connection ended: one classification
//! of a connection's errors that every front end maps to its protocol's own error.

use std::fmt;

use bidi_core::{Error, NotFound, PeerGone};
use bidi_flow::text::untyped;

/// What kind of refusal a [`Refusal`] is: what a front end maps to its protocol's error (an
/// HTTP status, a JSON-RPC code, an A2A task state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// Another execution holds the session; nothing changed.
    SessionRunning,
    /// The session (or snapshot) asked for does not exist.
    NotFound,
    /// The session's id or snapshot does not fit (empty, too long, another session's).
    InvalidInit,
    /// The input does not fit where the session stands; nothing changed.
    InvalidInput,
    /// The stored session does not fit the agent (written by an older version of it).
    SessionIncompatible,
    /// Nothing moved between the peer and the execution for the idle timeout.
    IdleTimeout,
    /// The peer went away.
    PeerGone,
    /// The connection was cancelled on purpose (its client's cancel, or the server's) before
    /// the agent completed: not a failure of the agent.
    Cancelled,
    /// The input was not taken: the connection no longer takes inputs.
    SendFailed,
    /// Anything else: the agent failed or panicked.
    Failed,
}

/// Why an execution did not start (or a connection failed), in words a user may read, with
/// its [`kind`](Self::kind) for the front end to put in its protocol's terms.
///
/// ```
/// use bidi_core::{Error, PeerGone};
/// use bidi_agent::{Refusal, RefusalKind};
///
/// let missing = Error::action(bidi_session::StoreError::not_found("chat-9"));
/// assert_eq!(Refusal::of(&missing).kind(), RefusalKind::NotFound);
///
/// let gone = Error::Cancelled(bidi_core::Cause::new(PeerGone::Disconnected));
/// assert_eq!(Refusal::of(&gone).kind(), RefusalKind::PeerGone);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    kind: RefusalKind,
    message: String,
    missing: Option<NotFound>,
}

impl Refusal {
    /// A refusal of `kind` saying `message`.
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            missing: None,
        }
    }

    /// What a connection's `error` means to its peer: a session that is not there, an init
    /// that does not fit, a stored state that does not, an idle or departed peer, or a failure.
    #[must_use]
    pub fn of(error: &Error) -> Self {
        let message = untyped(&error.to_string());
        let kind = match error {
            Error::Action(source) => match source.downcast_ref::<bidi_session::StoreError>() {
                Some(bidi_session::StoreError::NotFound(missing)) => {
                    return Self {
                        kind: RefusalKind::NotFound,
                        message,
                        missing: Some(missing.clone()),
                    };
                }
                Some(bidi_session::StoreError::InvalidState { .. }) => {
                    RefusalKind::SessionIncompatible
                }
                _ if source.downcast_ref::<crate::InitError>().is_some() => {
                    RefusalKind::InvalidInit
                }
                _ => RefusalKind::Failed,
            },
            Error::Cancelled(cause) => match cause.peer_gone() {
                Some(PeerGone::Idle(_)) => RefusalKind::IdleTimeout,
                Some(PeerGone::Disconnected) => RefusalKind::PeerGone,
                _ => RefusalKind::Cancelled,
            },
            _ => RefusalKind::Failed,
        };
        Self::new(kind, message)
    }

    /// What kind of refusal it is.
    #[must_use]
    pub fn kind(&self) -> RefusalKind {
        self.kind
    }

    /// What it says, for a user.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What was not found, for a [`RefusalKind::NotFound`] from the store.
    #[must_use]
    pub fn missing(&self) -> Option<&NotFound> {
        self.missing.as_ref()
    }

    /// The refusal as its message, dropping the rest.
    #[must_use]
    pub fn into_message(self) -> String {
        self.message
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}
