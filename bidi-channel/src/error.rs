//! [`Error`]: what the router reports to its caller.

use bidi_core::BoxError;

/// Why [`MessageRouter::handle`](crate::MessageRouter::handle) could not hand back a delivered
/// reply. An agent that fails is not one of these: its reply carries the error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The router already holds as many conversations as it may.
    #[error("too many users at once: the router holds at most {limit} conversations")]
    TooManyUsers {
        /// The limit ([`max_users`](crate::MessageRouterBuilder::max_users)).
        limit: usize,
    },
    /// The channel could not deliver the whole reply (it was announced on the bus all the same).
    #[error("the reply to {user_id} on {channel_id} was not delivered: {source}")]
    Delivery {
        /// To whom.
        user_id: String,
        /// The channel.
        channel_id: String,
        /// The reply.
        text: String,
        /// The channel's error.
        #[source]
        source: BoxError,
    },
    /// The user's task stopped before the reply (a channel panicked).
    #[error("the conversation of {user_id} stopped before its reply")]
    Interrupted {
        /// Whose.
        user_id: String,
    },
}
