//! The flows the examples share: an echo action and a chat agent that remembers what it heard.

use bidi_agent::{AgentResult, Responder};
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_session::Session;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Streams each message back word by word, each word after `prefix`, then ends the turn.
/// Returns the number of turns.
///
/// # Errors
///
/// A chunk the consumer no longer takes.
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
/// # Errors
///
/// A chunk the consumer no longer takes, or a session the store cannot save.
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

/// The model the examples run without a service: [`bidi_llm::testing::DemoModel`].
pub use bidi_llm::testing::DemoModel;
