//! Why an agent's execution did not start, or why its connection ended: one classification
//! of a connection's errors, under the one stable [`Code`], that every front end maps to its
//! protocol's own error.

use std::fmt;

use bidi_core::{Error, NotFound, PeerGone};
use bidi_flow::Code;
use bidi_flow::text::untyped;

/// Why an execution did not start (or a connection failed), in words a user may read, with
/// its stable [`code`](Self::code) for the front end to put in its protocol's terms: a
/// session another execution holds ([`Code::SessionRunning`]), one that is not there
/// ([`Code::NotFound`]), an init or input that does not fit ([`Code::InvalidInit`],
/// [`Code::InvalidInput`]), a stored state that does not ([`Code::SessionIncompatible`]), an
/// idle or departed peer ([`Code::IdleTimeout`], [`Code::PeerGone`]), a cancel on purpose
/// ([`Code::Cancelled`], never a failure), an input not taken ([`Code::SendFailed`]), or the
/// agent's failure ([`Code::ConnectionFailed`], or the agent's own code: [`Code::Model`], ...).
///
/// ```
/// use bidi_core::{Error, PeerGone};
/// use bidi_agent::Refusal;
/// use bidi_flow::Code;
///
/// let missing = Error::action(bidi_session::StoreError::not_found("chat-9"));
/// assert_eq!(Refusal::of(&missing).code(), Code::NotFound);
///
/// let gone = Error::Cancelled(bidi_core::Cause::new(PeerGone::Disconnected));
/// assert_eq!(Refusal::of(&gone).code(), Code::PeerGone);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    code: Code,
    message: String,
    missing: Option<NotFound>,
}

impl Refusal {
    /// A refusal under `code` saying `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            missing: None,
        }
    }

    /// What a connection's `error` means to its peer: a session that is not there, an init
    /// that does not fit, a stored state that does not, an idle or departed peer, or a failure.
    #[must_use]
    pub fn of(error: &Error) -> Self {
        let message = untyped(&error.to_string());
        let code = match error {
            Error::Action(source) => match source.downcast_ref::<bidi_session::StoreError>() {
                Some(bidi_session::StoreError::NotFound(missing)) => {
                    return Self {
                        code: Code::NotFound,
                        message,
                        missing: Some(missing.clone()),
                    };
                }
                Some(bidi_session::StoreError::InvalidState { .. }) => Code::SessionIncompatible,
                _ if source.downcast_ref::<crate::InitError>().is_some() => Code::InvalidInit,
                _ => Code::ConnectionFailed,
            },
            Error::Cancelled(cause) => match cause.peer_gone() {
                Some(PeerGone::Idle(_)) => Code::IdleTimeout,
                Some(PeerGone::Disconnected) => Code::PeerGone,
                _ => Code::Cancelled,
            },
            _ => Code::ConnectionFailed,
        };
        Self::new(code, message)
    }

    /// Its stable code.
    #[must_use]
    pub fn code(&self) -> Code {
        self.code
    }

    /// What it says, for a user.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What was not found, for a [`Code::NotFound`] from the store.
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
