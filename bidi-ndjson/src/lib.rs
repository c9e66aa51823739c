//! External agent processes that speak newline-delimited JSON (NDJSON) on stdin and stdout —
//! coding agents behind a small middleware, scripts, workers in any language — driven from
//! Rust: start one with [`Command`], then [`listen`](Child::listen) to a round with typed
//! handlers that answer its questions; serve it as a bidi flow with [`Command::flow`]; or write
//! such an agent in Rust with [`Host`].
//!
//! ```
//! use bidi_ndjson::{Command, Progress, Question};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), bidi_ndjson::Error> {
//! // An agent in three lines of bash: it asks one question, then reports the answer.
//! let script = r#"read prompt
//! echo '{"type":"progress","message":"working on '"$prompt"'"}'
//! echo '{"type":"question","id":"q1","question":"RS256 or HS256?"}'
//! read reply
//! echo '{"type":"result","text":"done","reply":'"$reply"'}'"#;
//!
//! let mut child = Command::new("bash").arg("-c").arg(script).spawn().await?;
//! let mut progress = Vec::new();
//! let result = child
//!     .listen("sign the tokens")
//!     .on("progress", |p: Progress| {
//!         progress.push(p.message);
//!         async {}
//!     })
//!     .on("question", |q: Question| async move {
//!         Some(if q.question.contains("RS256") { "RS256" } else { "no idea" })
//!     })
//!     .await?;
//! assert_eq!(progress, ["working on sign the tokens"]);
//! assert_eq!(result["text"], "done");
//! assert_eq!(
//!     result["reply"],
//!     serde_json::json!({"type": "response", "in_reply_to": "question", "in_reply_to_id": "q1", "value": "RS256"})
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # The wire
//!
//! Each line the agent writes is a JSON object with a `type`; the other fields are the
//! message:
//!
//! | type | fields | |
//! |---|---|---|
//! | `progress` | `message`, `percent?`, `stage?` ([`Progress`]) | |
//! | `question` | `question`, `context?`, `options?`, `kind?`, `id?` ([`Question`]) | expects a reply |
//! | `approval` | `description`, `risk_level?`, `id?` ([`Approval`]) | expects a reply |
//! | `partial` | `chunk` ([`Partial`]) | |
//! | `log` | `level?`, `message` ([`Log`]) | |
//! | `result` | anything | ends the round with its fields |
//! | `error` | `message` | ends the round with [`Error::Agent`] |
//! | any other | anything | dispatched to its handler by name |
//!
//! The host writes, one line each: the optional handshake `{"type":"init","params":{..}}`
//! (answered `{"type":"init_ack"}`), each round's prompt (its text, or
//! `{"prompt":..,"context":..}` with [`PromptFormat::Json`]), and the replies:
//! `{"type":"response","in_reply_to":"question","in_reply_to_id":"q1","value":..}`, with
//! `in_reply_to_id` when the message had an `id`. A line that is not a JSON object with a
//! `type` is plain text: a `result` whose `text` is the line (or another type, its text in
//! the field that type's message reads, see [`Command::plain_text_as`]). Blank lines are
//! skipped.
//!
//! # Rounds
//!
//! - A handler gets the message's fields as its argument type, any `Deserialize` type (a
//!   message that does not fit fails the round with [`Error::InvalidMessage`] naming the
//!   field); what it returns is the reply: `Some(value)` writes it, `None` or `()` writes
//!   nothing, an `Err` ends the round with [`Error::Handler`]. Handlers run one at a time, in
//!   the order of the messages.
//! - A message no handler takes goes to [`Listen::on_unhandled`] and the loop goes on; if its
//!   type expects a reply (`question` and `approval` by default) it gets a default one, so the
//!   agent never waits forever for an answer nobody gives ([`Command::default_reply`]).
//! - Several rounds may run one after the other on one process: one prompt line each.
//! - A round that fails while the agent is still in it (a line too long, a message that does
//!   not fit its handler's type, a handler's error) is read to its end before the error is
//!   returned, so that the next round starts in step: the message left unanswered, and every
//!   later one that expects an answer, gets its type's default reply; all of them, the
//!   round's `result` or `error` last, go to [`Listen::on_unhandled`]. The round's limits
//!   still hold (an agent that does not end it in time is killed), so set a
//!   [`Command::session_timeout`] to bound how long a failed round takes to return.
//! - A round that could not end (its future was dropped, the agent's output could not be
//!   read) leaves the agent in it: the next round fails at once with [`Error::OutOfStep`] and
//!   writes nothing. Read the old round to its end with [`Child::next`] (answering with
//!   [`Child::reply`]), or start a new process.
//! - A round records `listen:start`, `listen:unhandled` (with the message's type),
//!   `listen:complete` and `listen:error` as events on the current OpenTelemetry span (a
//!   flow's, or a `bidi_flow::run` step's).
//! - Limits: [`Command::message_timeout`] (silence between messages) and
//!   [`Command::session_timeout`] (a whole round, handlers included) kill the agent and fail
//!   the round; a line over [`Command::max_line_bytes`] is never held whole in memory and
//!   fails the round with [`Error::LineTooLong`] (the line is skipped, the process stays
//!   usable). An agent whose output ends before its result
//!   fails it with [`Error::Exited`], its exit status and the tail of its stderr; one that no
//!   longer reads its input fails the write with [`Error::Stdin`].
//! - The agent runs in a process group of its own; dropping its [`Child`] (or cancelling its
//!   flow's connection, or a timeout) kills the group and the runtime reaps the agent: no
//!   zombies. [`Child::close`] closes its input and waits for it to exit.
//!
//! # As a flow
//!
//! [`Command::flow`] makes the agent a [`BidiFlow`](bidi_flow::BidiFlow) to register
//! (`/ndjson/{name}`), trace and serve over any transport: each connection is one process,
//! each prompt a turn whose chunks are the agent's [`Message`]s, and replies are inputs
//! ([`Input`]).
//!
//! # Feature flags
//!
//! None: the crate is tokio's process and I/O types (on Unix, the process group is killed with
//! `nix`).

#![doc(test(attr(deny(warnings))))]

mod child;
mod codec;
mod flow;
mod host;
mod listen;

pub use child::{Child, Command, DEFAULT_MAX_LINE_BYTES, Error};
pub use codec::{
    Approval, Log, Message, Partial, Progress, Prompt, PromptFormat, Question, Reply, approves,
};
pub use flow::{ACTION_TYPE, Exit, Input};
pub use host::Host;
pub use listen::{IntoReply, Listen};
