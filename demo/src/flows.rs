//! The plain flows: [`echo`], a streaming flow, and [`chat`], a multi-turn agent that remembers
//! what it heard.

use bidi_agent::{AgentResult, Responder};
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_session::Session;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Streams each message back word by word, each word after `prefix`, then ends the turn.
/// Returns the number of turns.
///
/// ```
/// use bidi_core::BidiAction;
/// use futures_util::StreamExt as _;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_core::BoxError> {
/// let mut conn = BidiAction::new("echo", bidi_demo::echo).connect("> ".to_owned());
/// conn.send("hello there".to_owned()).await?;
/// let words: Vec<String> = conn.responses().map(|word| word.unwrap()).collect().await;
/// assert_eq!(words, ["> hello", "> there"]);
/// conn.close();
/// assert_eq!(conn.output().await?, 1);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// A chunk the consumer no longer takes.
///
/// # Cancel safety
///
/// Cancelling it drops the turn in progress: the words not yet taken are not sent.
pub async fn echo(
    _ctx: ActionContext,
    prefix: String,
    mut inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<usize, BoxError> {
    let mut turns = 0;
    while let Some(msg) = inbound.recv().await {
        for word in msg.split_whitespace() {
            out.send(format!("{prefix}{word}")).await?;
        }
        out.end_turn().await?;
        turns += 1;
    }
    Ok(turns)
}

/// What the chat agent remembers of a conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Chat {
    /// Every line the user sent, in order.
    pub heard: Vec<String>,
}

/// Answers each line word by word, from what it remembers, and saves the line to the session.
/// Returns the number of turns.
///
/// ```
/// use bidi_agent::{Agent, AgentInit};
/// use futures_util::StreamExt as _;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_core::BoxError> {
/// let agent = Agent::builder("chat").build(bidi_demo::chat);
/// let mut conn = agent.connect(AgentInit::new().session_id("s-1"));
/// for line in ["hi", "bye"] {
///     conn.send(line.to_owned()).await?;
///     let reply: String = conn.responses().map(|word| word.unwrap()).collect().await;
///     println!("{reply}");
/// }
/// conn.close();
/// let state = agent.session("s-1").await?.unwrap().state();
/// assert_eq!(state.heard, ["hi", "bye"]);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// A chunk the consumer no longer takes, or a session the store cannot save.
///
/// # Cancel safety
///
/// Cancelling it between turns loses nothing; during a turn, the line is saved only once its
/// whole answer was sent.
pub async fn chat(
    _ctx: ActionContext,
    session: Session<Chat>,
    mut inbound: Inbound<String>,
    out: Responder<String>,
) -> Result<AgentResult<u32>, BoxError> {
    let mut turns = 0;
    while let Some(line) = inbound.recv().await {
        let before = session.state().heard;
        let reply = match before.first() {
            None => format!("Nice to meet you. You said \"{line}\"."),
            Some(first) => format!(
                "Message {} of this session. You first said \"{first}\", and last \"{}\".",
                before.len() + 1,
                before.last().map_or("", String::as_str)
            ),
        };
        for word in reply.split_inclusive(' ') {
            out.send(word.to_owned()).await?;
        }
        session.update(|chat| chat.heard.push(line.clone())).await?;
        out.end_turn().await?;
        turns += 1;
    }
    Ok(AgentResult::new(turns))
}
