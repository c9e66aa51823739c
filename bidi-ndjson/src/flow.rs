//! An agent process as a bidi flow: prompts and replies in, its messages out, a round a turn.
//!
//! The agent's output is read in a task of its own, one message ahead at most, because reading
//! a line is not cancel safe and a channel receive is: replies and new prompts are taken while
//! a round runs, and prompts queue behind the running round.

use std::collections::VecDeque;
use std::time::Duration;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{ActionType, BidiFlow};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::child::{Command, Error};
use crate::codec::{Message, Prompt, Reply};

/// The kind NDJSON agents register under: `/ndjson/{name}`.
pub const ACTION_TYPE: ActionType = ActionType::from_static("ndjson");

/// How long an agent gets to exit once its connection's input is closed.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// What a connection to an agent's flow takes.
///
/// ```
/// use bidi_ndjson::Input;
/// use serde_json::json;
///
/// let prompt: Input = serde_json::from_value(json!({"type": "prompt", "prompt": "Build an API"}))?;
/// let reply: Input = serde_json::from_value(json!({
///     "type": "response", "in_reply_to": "question", "in_reply_to_id": "q1", "value": "RS256"
/// }))?;
/// # let _ = (prompt, reply);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Input {
    /// A prompt: it starts a round, a turn of the connection, once the rounds before it ended.
    Prompt {
        /// The text.
        prompt: String,
        /// A context, for agents that take JSON prompts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<Value>,
    },
    /// A reply to one of the agent's messages, written to it as it is.
    Response {
        /// The type of the message answered.
        in_reply_to: String,
        /// The `id` of the message answered, when it had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        in_reply_to_id: Option<Value>,
        /// The answer.
        value: Value,
    },
}

/// How an agent's connection ended: the rounds it ran and the agent's exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Exit {
    /// The rounds the agent ended (with a `result` or an `error`).
    pub rounds: u64,
    /// Its exit code (`None` if a signal ended it).
    pub code: Option<i32>,
}

impl Command {
    /// The agent as a flow named `name` (registered as `/ndjson/{name}`): each connection
    /// starts a process; a [`Input::Prompt`] starts a round, whose messages are the turn's
    /// chunks, the `result` or `error` that ends it last; a [`Input::Response`] is written to
    /// the agent. Prompts sent while a round runs wait for it to end. Closing the input lets
    /// the agent finish its rounds, closes its stdin and waits for it to exit (killing it
    /// after a few seconds); the output is its [`Exit`].
    ///
    /// The message and session timeouts and the line limit hold per round; a failure (an
    /// agent that exits mid-round, a timeout) fails the connection with the [`Error`]. The
    /// agent is killed and reaped however the connection ends (cancelled, dropped, failed).
    ///
    /// ```no_run
    /// use bidi_flow::Registry;
    /// use bidi_ndjson::Command;
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let registry = Registry::new();
    /// registry.register(Command::new("./agent.sh").flow("worker"))?;
    /// let conn = registry.connect_json("/ndjson/worker", json!(null))?;
    /// conn.send(json!({"type": "prompt", "prompt": "Build an API"})).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn flow(self, name: &str) -> BidiFlow<(), Input, Exit, Message> {
        let command = self;
        BidiFlow::new(
            name.to_owned(),
            move |_ctx: ActionContext, (), inbound: Inbound<Input>, out: Outbound<Message>| {
                let command = command.clone();
                async move { serve(&command, inbound, out).await.map_err(BoxError::from) }
            },
        )
        .with_action_type(ACTION_TYPE)
    }
}

/// The subprocess's side of one connection: its lines as chunks, the inbound messages as its
/// input, until it exits.
///
/// Long by design: one `select!` over the child's lines, the inbound messages and the
/// deadlines, which share the loop's state.
async fn serve(
    command: &Command,
    mut inbound: Inbound<Input>,
    out: Outbound<Message>,
) -> Result<Exit, Error> {
    let mut child = command.spawn().await?;
    let settings = &command.settings;
    // A task reads the agent's output (reading a line is not cancel safe; receiving it is),
    // one message ahead at most.
    let (tx, mut messages) = mpsc::channel(1);
    let reading = child.take_reader().map(|mut reader| {
        tokio::spawn(async move {
            loop {
                let read = reader.read(None).await;
                let more = matches!(read, Ok(Some(_)));
                if tx.send(read).await.is_err() || !more {
                    break;
                }
            }
        })
    });
    let _stop_reading = reading.map(AbortOnDrop);
    let mut queue: VecDeque<Prompt> = VecDeque::new();
    let mut rounds = 0u64;
    let mut input_open = true;
    // The running round's deadlines: its session deadline, and the next message's.
    let mut round: Option<(Option<Instant>, Option<Instant>)> = None;
    loop {
        if round.is_none()
            && let Some(prompt) = queue.pop_front()
        {
            let written = child.writer.prompt(&prompt, settings.prompt_format).await;
            child.written(written).await?;
            let now = Instant::now();
            round = Some((
                settings.session_timeout.map(|limit| now + limit),
                settings.message_timeout.map(|limit| now + limit),
            ));
        }
        if round.is_none() && !input_open {
            break;
        }
        let (session_at, message_at) = round.unwrap_or_default();
        let timeout = match (session_at, message_at) {
            (Some(session), Some(message)) if message < session => Some((
                message,
                Error::MessageTimeout(settings.message_timeout.unwrap_or_default()),
            )),
            (Some(session), _) => Some((
                session,
                Error::SessionTimeout(settings.session_timeout.unwrap_or_default()),
            )),
            (None, Some(message)) => Some((
                message,
                Error::MessageTimeout(settings.message_timeout.unwrap_or_default()),
            )),
            (None, None) => None,
        };
        let expired = async {
            match &timeout {
                Some((at, _)) => tokio::time::sleep_until(*at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            read = messages.recv(), if round.is_some() => {
                let message = match read {
                    Some(Ok(Some(message))) => message,
                    Some(read) => return Err(child.read(read).await.err().unwrap_or_else(gone)),
                    None => return Err(child.read::<Message>(Ok(None)).await.err().unwrap_or_else(gone)),
                };
                let terminal = message.is_terminal();
                if out.send(message).await.is_err() {
                    break; // Nobody reads: the connection is over.
                }
                if terminal {
                    rounds += 1;
                    round = None;
                    if out.end_turn().await.is_err() {
                        break;
                    }
                } else if let Some((_, message_at)) = &mut round {
                    *message_at = settings.message_timeout.map(|limit| Instant::now() + limit);
                }
            }
            () = expired, if round.is_some() => {
                if let Some((_, error)) = timeout {
                    return Err(child.read::<Message>(Err(error)).await.err().unwrap_or_else(gone));
                }
            }
            input = inbound.recv(), if input_open => match input {
                None => input_open = false,
                Some(Input::Prompt { prompt, context }) => {
                    let mut prompt = Prompt::new(prompt);
                    if let Some(context) = context {
                        prompt = prompt.context(context);
                    }
                    queue.push_back(prompt);
                }
                Some(Input::Response { in_reply_to, in_reply_to_id, value }) => {
                    let reply = Reply { in_reply_to, in_reply_to_id, value };
                    let written = child.writer.send(&reply).await;
                    child.written(written).await?;
                }
            },
        }
    }
    let status = child.close(CLOSE_GRACE).await?;
    Ok(Exit {
        rounds,
        code: status.code(),
    })
}

/// What a read that could not be an error says: the output ended.
fn gone() -> Error {
    Error::Io(std::io::Error::other("the agent's output ended"))
}

/// Aborts the reading task when the connection ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
