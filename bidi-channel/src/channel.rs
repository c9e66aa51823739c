//! [`Channel`] and its optional streaming capability, [`StreamingChannel`].

use async_trait::async_trait;
use bidi_core::BoxError;

/// A transport that reaches users: a terminal, a chat service, a browser.
///
/// A channel that can only deliver whole messages implements [`send_to_user`](Self::send_to_user)
/// and nothing else. A channel that can show a reply as it grows also hands out a
/// [`StreamingChannel`] from [`streaming`](Self::streaming); the router then calls its four
/// methods instead (`start`, `chunk`s and `status`es, `end`) and never `send_to_user`.
///
/// ```
/// use bidi_channel::Channel;
/// use bidi_core::BoxError;
///
/// /// Delivers whole replies to a log.
/// struct Log;
///
/// #[bidi_channel::async_trait]
/// impl Channel for Log {
///     fn id(&self) -> &str {
///         "log"
///     }
///
///     async fn send_to_user(&self, user_id: &str, text: &str) -> Result<(), BoxError> {
///         println!("to {user_id}: {text}");
///         Ok(())
///     }
/// }
///
/// let channel: std::sync::Arc<dyn Channel> = std::sync::Arc::new(Log);
/// assert!(channel.streaming().is_none(), "whole replies only");
/// ```
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The channel's name, as the router's events carry it (`"terminal"`, `"telegram"`).
    fn id(&self) -> &str;

    /// Delivers a whole reply to `user_id`.
    ///
    /// # Errors
    ///
    /// Whatever kept the reply from the user; the router reports it to its caller.
    ///
    /// # Cancel safety
    ///
    /// The router awaits every call to its end: an implementation need not be cancel safe.
    /// This crate's are not: dropped midway, part of the reply may have been delivered (a line
    /// half printed, the first of several messages) and the rest never is; `Web` then ends the
    /// user's response without it.
    async fn send_to_user(&self, user_id: &str, text: &str) -> Result<(), BoxError>;

    /// The channel's streaming side, if it has one and streaming is on. The default is `None`:
    /// replies arrive whole, through [`send_to_user`](Self::send_to_user).
    fn streaming(&self) -> Option<&dyn StreamingChannel> {
        None
    }
}

/// The streaming side of a [`Channel`]: one reply is `start`, then `chunk`s and `status`es in
/// the order the agent produced them, then `end` with the whole text.
///
/// The router calls these for one user one reply at a time; replies to different users may
/// overlap, so a channel keeps its stream state per user. An error from `start`, `chunk` or
/// `status` is logged and the stream goes on: a channel that missed a chunk still gets the
/// whole text at `end`.
#[async_trait]
pub trait StreamingChannel: Send + Sync {
    /// A reply to `user_id` begins: show a placeholder, a typing indicator.
    ///
    /// # Errors
    ///
    /// Whatever went wrong; the router logs it and streams on.
    ///
    /// # Cancel safety
    ///
    /// The router awaits every call to its end: an implementation need not be cancel safe.
    /// This crate's are not: dropped midway, `Terminal` may not know the reply began and then
    /// prints it again whole at `end`; `Telegram` may have sent its placeholder without keeping
    /// it, and the reply then comes as a new message below it.
    async fn start(&self, user_id: &str) -> Result<(), BoxError>;

    /// More of the reply's text (a few tokens).
    ///
    /// # Errors
    ///
    /// Whatever went wrong; the router logs it and streams on.
    ///
    /// # Cancel safety
    ///
    /// The router awaits every call to its end: an implementation need not be cancel safe.
    /// This crate's are not: dropped midway, the chunk may be shown in part, or counted as
    /// shown when it is not (`Terminal`, `Web`), and so missing from what `end` shows.
    async fn chunk(&self, user_id: &str, chunk: &str) -> Result<(), BoxError>;

    /// What the agent is doing, such as `Using: search`.
    ///
    /// # Errors
    ///
    /// Whatever went wrong; the router logs it and streams on.
    ///
    /// # Cancel safety
    ///
    /// The router awaits every call to its end: an implementation need not be cancel safe.
    /// Dropped midway, this crate's channels may show the status in part, or not at all.
    async fn status(&self, user_id: &str, status: &str) -> Result<(), BoxError>;

    /// The reply is complete: `full_text` is all of it (the text so far and the error, if the
    /// agent failed). Replace what was shown, clean up.
    ///
    /// # Errors
    ///
    /// Whatever kept the final text from the user; the router reports it to its caller.
    ///
    /// # Cancel safety
    ///
    /// The router awaits every call to its end: an implementation need not be cancel safe.
    /// This crate's are not: they let go of the user's reply first, so dropped midway, part of
    /// the final text may have been delivered and the rest never is (`Web` ends the user's
    /// response without it).
    async fn end(&self, user_id: &str, full_text: &str) -> Result<(), BoxError>;
}
