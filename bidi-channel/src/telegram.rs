//! A Telegram bot as a channel: each reply grows in one message, edited as the agent writes it.
//!
//! [`Telegram`] speaks the [Bot API](https://core.telegram.org/bots/api) through
//! [`frankenstein`]'s request and answer types, over this workspace's reqwest client. The user
//! id the router is given is the Telegram chat id (`"123456789"`, or `"@channel"`).
//!
//! A streamed reply is:
//!
//! - **start**: a placeholder message (`…`), whose id the user's stream keeps;
//! - **chunks**: gathered, and shown by editing the message at most once per
//!   [`edit_interval`](TelegramBuilder::edit_interval) (500 ms by default) and only once at least
//!   [`min_chars`](TelegramBuilder::min_chars) (20) new characters have come; Telegram allows
//!   about one edit per second per chat and answers more with `429 Too Many Requests`, whose
//!   `retry_after` is honoured: no edit of that chat until it has passed, and the reply's
//!   later edits keep at least that far apart (the chat's pace, learned once);
//! - **statuses**: the text so far shown first, however short, if the pace allows (a tool may
//!   take a while), then a `typing` chat action;
//! - **end**: a last edit with the whole text. A reply longer than Telegram's 4,096 characters
//!   is split (at a line break or a space where there is one): the first part goes in the
//!   edited message, the others follow as new messages. If the last edit fails, the first part
//!   is sent as a new message instead. A `429` there is waited out (up to three tries).
//!
//! Stream state is kept per user, so replies to several chats are streamed at once.
//!
//! The debounce needs no timer: a chunk edits when the pace has passed since the last edit, at
//! least `min_chars` new characters came, and no `retry_after` is pending. Telegram counts its
//! limit in UTF-16 code units, and so does the split ([`split`]: after a line break or a space
//! in the second half of a part, else at the limit), the one wire rule of the crate's own,
//! tested without I/O. An unchanged final text is not sent again ("message is not modified"
//! counts as done); an empty reply is sent as `(empty reply)`. Bot API answers are read up to
//! 1 MiB. Receiving updates (`getUpdates`, webhooks) is left to the program: it calls
//! [`MessageRouter::handle`](crate::MessageRouter::handle) with the chat id.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use bidi_channel::MessageRouter;
//! use bidi_channel::telegram::Telegram;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let token = std::env::var("TELEGRAM_BOT_TOKEN")?;
//! // Real Telegram needs HTTPS: turn on the feature `native-tls`, or give the builder a
//! // reqwest client with the TLS backend of your choice.
//! let telegram = Arc::new(Telegram::builder(format!("https://api.telegram.org/bot{token}")).build()?);
//! let model = ScriptedModel::new([Scripted::new().text("Hello from the agent!")]);
//! let router = MessageRouter::new(LlmAgent::builder("bot", model).build());
//! router.handle(telegram, "123456789", "hi").await?;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bidi_core::BoxError;
use frankenstein::AsyncTelegramApi;
use frankenstein::methods::{EditMessageTextParams, SendChatActionParams, SendMessageParams};
use frankenstein::types::{ChatAction, ChatId};
use serde::Deserialize;
use tokio::time::Instant;

use crate::channel::{Channel, StreamingChannel};

/// Telegram's limit on a message's text, in UTF-16 code units.
pub const MAX_MESSAGE_CHARS: usize = 4096;
/// The text of the placeholder message a streamed reply starts with.
pub const PLACEHOLDER: &str = "…";
/// How often a `429` is retried in the last edit and in sent messages.
const TRIES: u32 = 3;
/// The longest `retry_after` waited out; a longer one fails the call.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// The longest answer read from the API.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// What went wrong talking to the Bot API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API refused the call (`{"ok":false,"error_code":400,"description":..}`).
    #[error("Telegram refused {method}: {description} (error {code})")]
    Api {
        /// The method called (`editMessageText`).
        method: String,
        /// The API's `error_code`.
        code: u64,
        /// The API's `description`.
        description: String,
    },
    /// Too many calls: the API asks to wait `retry_after` before the next (error 429).
    #[error("Telegram limits {method}: retry after {}s", retry_after.as_secs())]
    RateLimited {
        /// The method called.
        method: String,
        /// How long to wait.
        retry_after: Duration,
    },
    /// The call did not reach the API, or its answer could not be read.
    #[error("calling {method} failed: {source}")]
    Request {
        /// The method called.
        method: String,
        /// reqwest's error (without the URL, which holds the bot's token).
        #[source]
        source: reqwest::Error,
    },
    /// The answer is not a Bot API answer.
    #[error("the answer to {method} is not a Bot API answer: {reason}")]
    Decode {
        /// The method called.
        method: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The user id does not name a chat.
    #[error("the user id {0:?} is not a Telegram chat id (a number, or @name)")]
    InvalidChat(String),
    /// The client could not be built, or a call needs what this client does not do.
    #[error("{0}")]
    Client(String),
}

/// A Telegram bot as a [`Channel`] that streams replies by editing its message.
pub struct Telegram {
    api: Api,
    edit_interval: Duration,
    min_chars: usize,
    streaming: bool,
    streams: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Stream>>>>,
}

impl fmt::Debug for Telegram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telegram")
            .field("edit_interval", &self.edit_interval)
            .field("min_chars", &self.min_chars)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Telegram`] channel.
#[must_use]
pub struct TelegramBuilder {
    api_url: String,
    client: Option<reqwest::Client>,
    edit_interval: Duration,
    min_chars: usize,
    streaming: bool,
}

impl fmt::Debug for TelegramBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramBuilder")
            .field("edit_interval", &self.edit_interval)
            .field("min_chars", &self.min_chars)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

impl TelegramBuilder {
    /// The HTTP client (a reqwest client with the TLS backend of your choice). The default one
    /// speaks HTTPS with the feature `native-tls`, and plain HTTP only without it (enough for
    /// a local Bot API server).
    pub fn client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// The shortest time between two edits of a streamed message (500 ms by default).
    pub fn edit_interval(mut self, interval: Duration) -> Self {
        self.edit_interval = interval;
        self
    }

    /// How many new characters a streamed message waits for before an edit (20 by default).
    pub fn min_chars(mut self, chars: usize) -> Self {
        self.min_chars = chars;
        self
    }

    /// Turns streaming on (the default) or off: off, each reply is sent whole once complete.
    pub fn streaming(mut self, on: bool) -> Self {
        self.streaming = on;
        self
    }

    /// The channel.
    ///
    /// # Errors
    ///
    /// [`Error::Client`] if the API URL is not an `http` or `https` URL, or the default client
    /// could not be built.
    pub fn build(self) -> Result<Telegram, Error> {
        let url = self.api_url.trim_end_matches('/').to_owned();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::Client(
                "the API URL must start with http:// or https://".to_owned(),
            ));
        }
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .timeout(Duration::from_secs(60))
                .build()
                .map_err(|error| Error::Client(error.without_url().to_string()))?,
        };
        Ok(Telegram {
            api: Api { client, url },
            edit_interval: self.edit_interval,
            min_chars: self.min_chars,
            streaming: self.streaming,
            streams: Mutex::new(HashMap::new()),
        })
    }
}

/// One user's reply being streamed.
#[derive(Debug, Default)]
struct Stream {
    /// The placeholder message, once sent.
    message_id: Option<i32>,
    /// The reply so far.
    buffer: String,
    /// What the message shows.
    shown: String,
    /// Characters come since the last edit.
    pending: usize,
    last_edit: Option<Instant>,
    /// No edit before this (a 429's `retry_after`).
    not_before: Option<Instant>,
    /// The chat's pace, learned from its 429s: edits keep at least this far apart (and at
    /// least the channel's interval) for the rest of the reply.
    pace: Duration,
}

impl Telegram {
    /// A channel calling the Bot API at `api_url`: `https://api.telegram.org/bot{token}`, or a
    /// local Bot API server.
    pub fn builder(api_url: impl Into<String>) -> TelegramBuilder {
        TelegramBuilder {
            api_url: api_url.into(),
            client: None,
            edit_interval: Duration::from_millis(500),
            min_chars: 20,
            streaming: true,
        }
    }

    fn stream(&self, user_id: &str) -> Arc<tokio::sync::Mutex<Stream>> {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(streams.entry(user_id.to_owned()).or_default())
    }

    fn take_stream(&self, user_id: &str) -> Option<Arc<tokio::sync::Mutex<Stream>>> {
        self.streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(user_id)
    }

    /// Sends `text` as a new message, waiting out 429s.
    async fn send(&self, chat: &ChatId, text: &str) -> Result<i32, Error> {
        let params = SendMessageParams::builder()
            .chat_id(chat.clone())
            .text(text)
            .build();
        let sent = retry(|| self.api.send_message(&params)).await?;
        Ok(sent.result.message_id)
    }

    /// Replaces the text of `message_id`.
    async fn edit(&self, chat: &ChatId, message_id: i32, text: &str) -> Result<(), Error> {
        let params = EditMessageTextParams::builder()
            .chat_id(chat.clone())
            .message_id(message_id)
            .text(text)
            .build();
        match self.api.edit_message_text(&params).await {
            Ok(_) => Ok(()),
            // Nothing to change is what we wanted.
            Err(Error::Api { description, .. })
                if description.contains("message is not modified") =>
            {
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Delivers `text` in parts of at most 4,096 characters: the first by editing
    /// `message_id` if there is one (falling back to a new message), the rest as new messages.
    async fn deliver(
        &self,
        chat: &ChatId,
        message_id: Option<i32>,
        shown: &str,
        text: &str,
    ) -> Result<(), Error> {
        let text = if text.trim().is_empty() {
            "(empty reply)"
        } else {
            text
        };
        let parts = split(text, MAX_MESSAGE_CHARS);
        let mut parts = parts.into_iter();
        if let Some(first) = parts.next() {
            let edited = match message_id {
                Some(_) if first == shown => true,
                Some(id) => match retry(|| self.edit(chat, id, first)).await {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(%error, "the last edit failed; sending the reply as a new message");
                        false
                    }
                },
                None => false,
            };
            if !edited {
                self.send(chat, first).await?;
            }
        }
        for part in parts {
            self.send(chat, part).await?;
        }
        Ok(())
    }
}

/// Calls `call` until it is not rate limited, up to [`TRIES`] times, waiting each `retry_after`.
async fn retry<T, F, Fut>(mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut tries = 1;
    loop {
        match call().await {
            Err(Error::RateLimited { retry_after, .. })
                if tries < TRIES && retry_after <= MAX_RETRY_AFTER =>
            {
                tokio::time::sleep(retry_after).await;
                tries += 1;
            }
            other => return other,
        }
    }
}

/// The chat a user id names: a number, or `@name`.
fn chat(user_id: &str) -> Result<ChatId, Error> {
    if let Ok(id) = user_id.parse::<i64>() {
        Ok(ChatId::Integer(id))
    } else if user_id.len() > 1 && user_id.starts_with('@') {
        Ok(ChatId::String(user_id.to_owned()))
    } else {
        Err(Error::InvalidChat(user_id.to_owned()))
    }
}

/// Splits `text` into parts of at most `limit` UTF-16 code units (how Telegram counts), each
/// cut after the last line break, or else the last space, of its second half; a part without
/// either is cut where it is full. The parts joined are `text`.
#[must_use]
pub fn split(text: &str, limit: usize) -> Vec<&str> {
    let limit = limit.max(2);
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut units = 0;
        let mut full = rest.len();
        for (i, c) in rest.char_indices() {
            units += c.len_utf16();
            if units > limit {
                full = i;
                break;
            }
        }
        if full == rest.len() {
            parts.push(rest);
            break;
        }
        let head = &rest[..full];
        let floor = full / 2;
        let cut = head
            .rfind('\n')
            .filter(|&i| i >= floor)
            .or_else(|| head.rfind(' ').filter(|&i| i >= floor))
            .map_or(full, |i| i + 1);
        parts.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    parts
}

impl Telegram {
    /// Edits the user's message to show the reply so far, if it is time: `min_chars` new
    /// characters have come, the pace allows (the interval and what the chat's 429s taught),
    /// and no `retry_after` is running.
    async fn show(
        &self,
        user_id: &str,
        stream: &mut Stream,
        min_chars: usize,
    ) -> Result<(), BoxError> {
        let Some(message_id) = stream.message_id else {
            return Ok(());
        };
        let now = Instant::now();
        let pace = self.edit_interval.max(stream.pace);
        let due = stream.pending >= min_chars.max(1)
            && stream.last_edit.is_none_or(|last| now >= last + pace)
            && stream.not_before.is_none_or(|t| now >= t);
        if !due {
            return Ok(());
        }
        let Some(first) = split(&stream.buffer, MAX_MESSAGE_CHARS).first().copied() else {
            return Ok(());
        };
        if first == stream.shown {
            // The first message is full: the rest comes at the end.
            return Ok(());
        }
        let first = first.to_owned();
        let chat = chat(user_id)?;
        match self.edit(&chat, message_id, &first).await {
            Ok(()) => {
                stream.last_edit = Some(now);
                stream.pending = 0;
                stream.shown = first;
                Ok(())
            }
            Err(Error::RateLimited { retry_after, .. }) => {
                stream.not_before = Some(Instant::now() + retry_after);
                stream.pace = stream.pace.max(retry_after);
                Ok(())
            }
            Err(error) => {
                // The next chunk tries again.
                stream.last_edit = Some(now);
                Err(error.into())
            }
        }
    }
}

#[async_trait]
impl Channel for Telegram {
    fn id(&self) -> &str {
        "telegram"
    }

    async fn send_to_user(&self, user_id: &str, text: &str) -> Result<(), BoxError> {
        let chat = chat(user_id)?;
        self.deliver(&chat, None, "", text).await?;
        Ok(())
    }

    fn streaming(&self) -> Option<&dyn StreamingChannel> {
        self.streaming.then_some(self as &dyn StreamingChannel)
    }
}

#[async_trait]
impl StreamingChannel for Telegram {
    async fn start(&self, user_id: &str) -> Result<(), BoxError> {
        let chat = chat(user_id)?;
        let stream = self.stream(user_id);
        let mut stream = stream.lock().await;
        *stream = Stream::default();
        let id = self.send(&chat, PLACEHOLDER).await?;
        stream.message_id = Some(id);
        stream.shown = PLACEHOLDER.to_owned();
        Ok(())
    }

    async fn chunk(&self, user_id: &str, chunk: &str) -> Result<(), BoxError> {
        let stream = self.stream(user_id);
        let mut stream = stream.lock().await;
        stream.buffer.push_str(chunk);
        stream.pending += chunk.chars().count();
        let min_chars = self.min_chars;
        self.show(user_id, &mut stream, min_chars).await
    }

    async fn status(&self, user_id: &str, _status: &str) -> Result<(), BoxError> {
        let chat = chat(user_id)?;
        {
            // The agent goes off to use a tool, which may take a while: show what it wrote
            // before, however little, if the pace allows.
            let stream = self.stream(user_id);
            let mut stream = stream.lock().await;
            if let Err(error) = self.show(user_id, &mut stream, 1).await {
                tracing::warn!(%error, "an edit before a status failed");
            }
        }
        let params = SendChatActionParams::builder()
            .chat_id(chat)
            .action(ChatAction::Typing)
            .build();
        self.api.send_chat_action(&params).await?;
        Ok(())
    }
    async fn end(&self, user_id: &str, full_text: &str) -> Result<(), BoxError> {
        let chat = chat(user_id)?;
        let (message_id, shown, not_before) = match self.take_stream(user_id) {
            Some(stream) => {
                let mut stream = stream.lock().await;
                let shown = std::mem::take(&mut stream.shown);
                // The chat's pace, if a 429 taught it: an earlier last edit would meet another.
                let paced = stream
                    .last_edit
                    .filter(|_| !stream.pace.is_zero())
                    .map(|last| last + stream.pace);
                (stream.message_id, shown, stream.not_before.max(paced))
            }
            None => (None, String::new(), None),
        };
        // The chat was told to wait: the last edit honours that too.
        if let Some(not_before) = not_before
            && message_id.is_some()
        {
            tokio::time::sleep_until(not_before).await;
        }
        self.deliver(&chat, message_id, &shown, full_text).await?;
        Ok(())
    }
}

/// The Bot API over reqwest: frankenstein's methods and types, this workspace's client.
struct Api {
    client: reqwest::Client,
    /// `https://api.telegram.org/bot{token}`, without a trailing slash.
    url: String,
}

/// The part of every answer that says whether it worked.
#[derive(Deserialize)]
struct Head {
    ok: bool,
    #[serde(default)]
    error_code: u64,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: Option<Parameters>,
}

#[derive(Deserialize)]
struct Parameters {
    #[serde(default)]
    retry_after: Option<u64>,
}

#[async_trait]
impl AsyncTelegramApi for Api {
    type Error = Error;

    async fn request<Params, Output>(
        &self,
        method: &str,
        params: Option<Params>,
    ) -> Result<Output, Error>
    where
        Params: serde::Serialize + fmt::Debug + Send,
        Output: serde::de::DeserializeOwned,
    {
        let failed = |source: reqwest::Error| Error::Request {
            method: method.to_owned(),
            source: source.without_url(),
        };
        let decode = |reason: String| Error::Decode {
            method: method.to_owned(),
            reason,
        };
        let body = match &params {
            Some(params) => serde_json::to_vec(params).map_err(|e| decode(e.to_string()))?,
            None => b"{}".to_vec(),
        };
        let mut answer = self
            .client
            .post(format!("{}/{method}", self.url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(failed)?;
        let mut bytes = Vec::new();
        while let Some(piece) = answer.chunk().await.map_err(failed)? {
            if bytes.len() + piece.len() > MAX_ANSWER_BYTES {
                return Err(decode(format!("longer than {MAX_ANSWER_BYTES} bytes")));
            }
            bytes.extend_from_slice(&piece);
        }
        let head: Head = serde_json::from_slice(&bytes).map_err(|e| decode(e.to_string()))?;
        if head.ok {
            return serde_json::from_slice(&bytes).map_err(|e| decode(e.to_string()));
        }
        let retry_after = head.parameters.and_then(|p| p.retry_after);
        Err(match (head.error_code, retry_after) {
            (429, Some(secs)) => Error::RateLimited {
                method: method.to_owned(),
                retry_after: Duration::from_secs(secs),
            },
            (code, _) => Error::Api {
                method: method.to_owned(),
                code,
                description: head.description,
            },
        })
    }

    async fn request_with_form_data<Params, Output>(
        &self,
        method: &str,
        _params: Params,
        _files: Vec<(&str, PathBuf)>,
    ) -> Result<Output, Error>
    where
        Params: serde::Serialize + fmt::Debug + Send,
        Output: serde::de::DeserializeOwned,
    {
        Err(Error::Client(format!(
            "{method} with files: this channel uploads no files"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split("hello", 4096), ["hello"]);
        assert!(split("", 4096).is_empty());
    }

    #[test]
    fn long_text_splits_at_the_limit_and_joins_back() {
        let text = "word ".repeat(2000); // 10,000 characters
        let parts = split(&text, MAX_MESSAGE_CHARS);
        assert_eq!(parts.len(), 3);
        assert!(
            parts
                .iter()
                .all(|p| p.encode_utf16().count() <= MAX_MESSAGE_CHARS)
        );
        assert_eq!(parts.concat(), text);
        // Cut after a space, not inside a word.
        assert!(parts[0].ends_with(' '));
    }

    #[test]
    fn prefers_line_breaks() {
        let text = format!("{}\n{}", "a".repeat(3000), "b ".repeat(1000));
        let parts = split(&text, MAX_MESSAGE_CHARS);
        assert_eq!(parts[0], format!("{}\n", "a".repeat(3000)));
        assert_eq!(parts.concat(), text);
    }

    #[test]
    fn counts_utf16_units_and_never_cuts_a_character() {
        // Each emoji is two UTF-16 units: 4096 units hold 2048 of them.
        let text = "😀".repeat(3000);
        let parts = split(&text, MAX_MESSAGE_CHARS);
        assert_eq!(parts[0].chars().count(), 2048);
        assert_eq!(parts.concat(), text);
    }

    #[test]
    fn chat_ids() {
        assert!(matches!(chat("42"), Ok(ChatId::Integer(42))));
        assert!(matches!(chat("-100123"), Ok(ChatId::Integer(-100_123))));
        assert!(matches!(chat("@news"), Ok(ChatId::String(_))));
        assert!(matches!(chat("alice"), Err(Error::InvalidChat(_))));
        assert!(matches!(chat(""), Err(Error::InvalidChat(_))));
    }
}
