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

/// A model that needs no service, for the examples and their tests: it answers a user message
/// by calling the tool the message names, else the last tool it is offered (the client's own
/// tools come last), with
/// `{"request": <the message>}` (or, when what follows the tool's name in the message is a JSON
/// object, with that object: `fs__read_text_file {"path": "/tmp/a.txt"}`), or, without tools,
/// by saying what it heard; a tool result by reporting it. A message containing "slowly" makes
/// it think for three seconds first.
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoModel;

impl bidi_llm::Model for DemoModel {
    fn name(&self) -> &str {
        "demo"
    }

    fn stream(
        &self,
        request: bidi_llm::ModelRequest,
    ) -> futures_util::stream::BoxStream<'static, bidi_llm::ModelEvent> {
        use bidi_llm::{Message, ModelEvent, StopReason, Usage};
        use futures_util::StreamExt as _;

        let last = request.messages.last();
        let (text, slow) = match last {
            Some(Message::User(user)) => (user.content.clone(), user.content.contains("slowly")),
            Some(Message::ToolResult(result)) => (format!("Done: {}", result.content), false),
            _ => ("Hello!".to_owned(), false),
        };
        let mut events = Vec::new();
        let mut say = |words: &str| {
            events.push(ModelEvent::TextStart);
            for word in words.split_inclusive(' ') {
                events.push(ModelEvent::TextDelta(word.to_owned()));
            }
            events.push(ModelEvent::TextEnd);
        };
        let named = request
            .tools
            .iter()
            .find(|tool| text.contains(tool.name.as_str()));
        let stop_reason = match (last, named.or(request.tools.last())) {
            (Some(Message::User(_)), Some(tool)) => {
                say(&format!("Let me use {}.", tool.name));
                let given = text
                    .split_once(tool.name.as_str())
                    .and_then(|(_, rest)| {
                        serde_json::from_str::<serde_json::Value>(rest.trim()).ok()
                    })
                    .filter(serde_json::Value::is_object);
                let arguments = given
                    .unwrap_or_else(|| serde_json::json!({ "request": text }))
                    .to_string();
                events.push(ModelEvent::ToolCallStart {
                    id: format!("call-{}", request.messages.len()),
                    name: tool.name.clone(),
                });
                events.push(ModelEvent::ToolCallDelta(arguments));
                events.push(ModelEvent::ToolCallEnd);
                StopReason::ToolCalls
            }
            (Some(Message::User(_)), None) => {
                say(&format!("You said: {text}"));
                StopReason::Stop
            }
            _ => {
                say(&text);
                StopReason::Stop
            }
        };
        events.push(ModelEvent::Done {
            stop_reason,
            usage: Usage::default(),
        });
        let thinking = async move {
            if slow {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            }
        };
        futures_util::stream::once(thinking)
            .flat_map(move |()| futures_util::stream::iter(events.clone()))
            .boxed()
    }
}
