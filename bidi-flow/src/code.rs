//! The one vocabulary of what went wrong, on every wire: the stable code of a refusal.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What went wrong, as every wire of bidi names it: a flow frame's `error`, an HTTP error
/// body's `details.code`, an agent's `error` event, a [refusal](https://docs.rs/bidi-agent)
/// of an execution. A lowercase name with `_` ([`as_str`](Self::as_str)), stable across
/// versions; each protocol maps it into its own error shape (an HTTP status, a JSON-RPC code,
/// an A2A task state) in one place.
///
/// A code this version does not know (read from a newer peer) is [`Other`](Self::Other).
///
/// ```
/// use bidi_flow::Code;
///
/// assert_eq!(Code::SessionRunning.as_str(), "session_running");
/// assert_eq!(serde_json::to_value(Code::MalformedFrame)?, "malformed_frame");
/// let newer: Code = serde_json::from_value(serde_json::json!("from_the_future"))?;
/// assert_eq!(newer, Code::Other);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Code {
    /// A frame (a request body, a WebSocket message, a line) over the size limit.
    FrameTooLarge,
    /// Not JSON, not an object, a field missing, unknown or of the wrong type.
    MalformedFrame,
    /// A frame whose `type` the wire does not have.
    UnknownFrameType,
    /// A frame for a connection that is not open (on a socket: before `init`).
    UnknownConnection,
    /// A connection opened under an id (on a socket: a second `init`) that is open already.
    DuplicateConnection,
    /// More connections than the server keeps open at once.
    TooManyConnections,
    /// No action, agent, session or snapshot under that name; the error may suggest one.
    NotFound,
    /// The init does not fit the action (or the session's id or snapshot does not fit).
    InvalidInit,
    /// The input does not fit the action, or where the session stands; nothing changed.
    InvalidInput,
    /// The input was not taken: the input is closed or the connection is over.
    SendFailed,
    /// The action failed or panicked.
    ConnectionFailed,
    /// The connection was cancelled on purpose (its client's cancel, or the server's) before
    /// the action completed: not a failure of the action.
    Cancelled,
    /// Nothing moved between the peer and the connection for the idle timeout.
    IdleTimeout,
    /// The peer went away.
    PeerGone,
    /// Another execution holds the session; nothing changed.
    SessionRunning,
    /// The session's stored state does not fit the agent (written by an older version of it).
    SessionIncompatible,
    /// A new agent session needs a `context`.
    ContextRequired,
    /// The request does not fit how the agent keeps its sessions: a client's state for an
    /// agent that keeps them, a session id for one whose clients keep them.
    FailedPrecondition,
    /// The request has no identity the server accepts.
    Unauthorized,
    /// The route takes another method, or a WebSocket upgrade.
    MethodNotAllowed,
    /// The request's body did not arrive within the body timeout.
    RequestTimeout,
    /// An agent's model call failed.
    Model,
    /// An agent's execution made as many model calls as it may.
    MaxTurns,
    /// The session store failed.
    Store,
    /// A code this version does not know (from a newer peer), or none.
    #[default]
    #[serde(other)]
    Other,
}

impl Code {
    /// The code as it is written on the wire.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FrameTooLarge => "frame_too_large",
            Self::MalformedFrame => "malformed_frame",
            Self::UnknownFrameType => "unknown_frame_type",
            Self::UnknownConnection => "unknown_connection",
            Self::DuplicateConnection => "duplicate_connection",
            Self::TooManyConnections => "too_many_connections",
            Self::NotFound => "not_found",
            Self::InvalidInit => "invalid_init",
            Self::InvalidInput => "invalid_input",
            Self::SendFailed => "send_failed",
            Self::ConnectionFailed => "connection_failed",
            Self::Cancelled => "cancelled",
            Self::IdleTimeout => "idle_timeout",
            Self::PeerGone => "peer_gone",
            Self::SessionRunning => "session_running",
            Self::SessionIncompatible => "session_incompatible",
            Self::ContextRequired => "context_required",
            Self::FailedPrecondition => "failed_precondition",
            Self::Unauthorized => "unauthorized",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::RequestTimeout => "request_timeout",
            Self::Model => "model",
            Self::MaxTurns => "max_turns",
            Self::Store => "store",
            Self::Other => "other",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_name_is_the_serde_name() {
        let all = [
            Code::FrameTooLarge,
            Code::MalformedFrame,
            Code::UnknownFrameType,
            Code::UnknownConnection,
            Code::DuplicateConnection,
            Code::TooManyConnections,
            Code::NotFound,
            Code::InvalidInit,
            Code::InvalidInput,
            Code::SendFailed,
            Code::ConnectionFailed,
            Code::Cancelled,
            Code::IdleTimeout,
            Code::PeerGone,
            Code::SessionRunning,
            Code::SessionIncompatible,
            Code::ContextRequired,
            Code::FailedPrecondition,
            Code::Unauthorized,
            Code::MethodNotAllowed,
            Code::RequestTimeout,
            Code::Model,
            Code::MaxTurns,
            Code::Store,
            Code::Other,
        ];
        for code in all {
            let json = serde_json::to_value(code).unwrap_or_default();
            assert_eq!(json, code.as_str(), "{code:?}");
            let back: Code = serde_json::from_value(json).unwrap_or_default();
            assert_eq!(back, code);
        }
    }
}
