//! A stored conversation as the AI SDK's `UIMessage[]`, for `useChat({ messages })` after a
//! page reload.

use std::collections::HashMap;

use bidi_llm::{AssistantContent, AssistantMessage, Message, ToolResultMessage};
use serde_json::{Map, Value, json};

/// `messages` as `UIMessage`s: a user message each, and one assistant message for everything
/// the agent said between two user messages (a `step-start` part before each model call's
/// parts). Ids are the message's place in the conversation (`u0`, `a1`, ...), the same on
/// every read. A tool call is a `tool-{name}` part: `output-available` or `output-error` once
/// its result is in, `input-available` while it waits.
pub(crate) fn ui_messages(messages: &[Message]) -> Vec<Value> {
    let results: HashMap<&str, &ToolResultMessage> = messages
        .iter()
        .filter_map(|message| match message {
            Message::ToolResult(result) => Some((result.tool_call_id.as_str(), result)),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    let mut assistant: Option<(usize, Vec<Value>)> = None;
    for (index, message) in messages.iter().enumerate() {
        let said = match message {
            Message::User(user) => {
                flush(&mut assistant, &mut out);
                out.push(json!({
                    "id": format!("u{index}"),
                    "role": "user",
                    "parts": [{"type": "text", "text": user.content}],
                }));
                continue;
            }
            Message::Assistant(said) => Some(said),
            Message::Error(failed) => failed.partial.as_ref(),
            Message::Aborted(aborted) => Some(&aborted.partial),
            // Shown in the parts of the call they answer.
            Message::ToolResult(_) => None,
            _ => None,
        };
        if let Some(said) = said {
            let (_, parts) = assistant.get_or_insert_with(|| (index, Vec::new()));
            step(said, &results, parts);
        }
    }
    flush(&mut assistant, &mut out);
    out
}

/// The assistant message being gathered, if any, as a `UIMessage`.
fn flush(assistant: &mut Option<(usize, Vec<Value>)>, out: &mut Vec<Value>) {
    if let Some((index, parts)) = assistant.take() {
        out.push(json!({"id": format!("a{index}"), "role": "assistant", "parts": parts}));
    }
}

/// The parts of one model call.
fn step(
    said: &AssistantMessage,
    results: &HashMap<&str, &ToolResultMessage>,
    parts: &mut Vec<Value>,
) {
    parts.push(json!({"type": "step-start"}));
    for block in &said.content {
        match block {
            AssistantContent::Text { text } => {
                parts.push(json!({"type": "text", "text": text, "state": "done"}));
            }
            AssistantContent::Thinking { thinking } => {
                parts.push(json!({"type": "reasoning", "text": thinking, "state": "done"}));
            }
            AssistantContent::ToolCall(call) => {
                let mut part = Map::new();
                part.insert("type".into(), format!("tool-{}", call.name).into());
                part.insert("toolCallId".into(), call.id.clone().into());
                part.insert("input".into(), call.arguments.clone());
                match results.get(call.id.as_str()) {
                    Some(result) if result.is_error => {
                        part.insert("state".into(), "output-error".into());
                        part.insert("errorText".into(), result.content.clone().into());
                    }
                    Some(result) => {
                        part.insert("state".into(), "output-available".into());
                        let output = result
                            .details
                            .clone()
                            .unwrap_or_else(|| result.content.clone().into());
                        part.insert("output".into(), output);
                    }
                    None => {
                        part.insert("state".into(), "input-available".into());
                    }
                }
                parts.push(Value::Object(part));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use bidi_llm::{StopReason, ToolCall, Usage, UserMessage};

    use super::*;

    fn assistant(content: Vec<AssistantContent>, stop_reason: StopReason) -> Message {
        Message::Assistant(AssistantMessage {
            content,
            usage: Usage::default(),
            stop_reason,
        })
    }

    #[test]
    fn a_turn_with_tools_is_one_assistant_message_of_steps() {
        let call = |id: &str| {
            AssistantContent::ToolCall(ToolCall {
                id: id.into(),
                name: "weather".into(),
                arguments: json!({"city": "Oslo"}),
            })
        };
        let messages = vec![
            Message::User(UserMessage::new("Weather?")),
            assistant(
                vec![
                    AssistantContent::Thinking {
                        thinking: "look it up".into(),
                    },
                    call("c1"),
                ],
                StopReason::ToolCalls,
            ),
            Message::ToolResult(ToolResultMessage {
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
                content: "sunny".into(),
                details: None,
                is_error: false,
                attachments: Vec::new(),
            }),
            assistant(
                vec![AssistantContent::Text {
                    text: "Sunny.".into(),
                }],
                StopReason::Stop,
            ),
            Message::User(UserMessage::new("And tomorrow?")),
            assistant(vec![call("c2")], StopReason::ToolCalls),
        ];
        let ui = ui_messages(&messages);
        assert_eq!(
            Value::Array(ui),
            json!([
                {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "Weather?"}]},
                {"id": "a1", "role": "assistant", "parts": [
                    {"type": "step-start"},
                    {"type": "reasoning", "text": "look it up", "state": "done"},
                    {"type": "tool-weather", "toolCallId": "c1", "input": {"city": "Oslo"},
                     "state": "output-available", "output": "sunny"},
                    {"type": "step-start"},
                    {"type": "text", "text": "Sunny.", "state": "done"},
                ]},
                {"id": "u4", "role": "user", "parts": [{"type": "text", "text": "And tomorrow?"}]},
                {"id": "a5", "role": "assistant", "parts": [
                    {"type": "step-start"},
                    {"type": "tool-weather", "toolCallId": "c2", "input": {"city": "Oslo"},
                     "state": "input-available"},
                ]},
            ])
        );
    }
}
