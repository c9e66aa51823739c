//! A stored conversation as AG-UI messages, for a client that reloads a thread
//! (`agent.setMessages(..)`).

use bidi_llm::{AssistantContent, Message};
use serde_json::{Value, json};

/// `messages` as `@ag-ui/core` messages: `user`, `assistant` (its text, and its tool calls
/// with their arguments as JSON text), `tool` (a result; `error` when the call failed) and
/// `reasoning` (the model's thinking, before the answer it led to). Ids are the message's place
/// in the conversation (`m3`, and `m3-r` for its reasoning), the same on every read.
pub(crate) fn messages(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let id = format!("m{index}");
        let said = match message {
            Message::User(user) => {
                out.push(json!({"id": id, "role": "user", "content": user.content}));
                continue;
            }
            Message::ToolResult(result) => {
                let mut tool = json!({
                    "id": id,
                    "role": "tool",
                    "toolCallId": result.tool_call_id,
                    "content": result.content,
                });
                if result.is_error {
                    tool["error"] = result.content.clone().into();
                }
                out.push(tool);
                continue;
            }
            Message::Assistant(said) => said,
            Message::Error(failed) => match &failed.partial {
                Some(partial) => partial,
                None => continue,
            },
            Message::Aborted(aborted) => &aborted.partial,
            _ => continue,
        };
        let mut text = String::new();
        let mut thinking = String::new();
        let mut calls = Vec::new();
        for block in &said.content {
            match block {
                AssistantContent::Text { text: more } => text.push_str(more),
                AssistantContent::Thinking { thinking: more } => thinking.push_str(more),
                AssistantContent::ToolCall(call) => calls.push(json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments.to_string()},
                })),
                _ => {}
            }
        }
        if !thinking.is_empty() {
            out.push(json!({"id": format!("{id}-r"), "role": "reasoning", "content": thinking}));
        }
        let mut assistant = json!({"id": id, "role": "assistant"});
        if !text.is_empty() {
            assistant["content"] = text.into();
        }
        if !calls.is_empty() {
            assistant["toolCalls"] = calls.into();
        }
        out.push(assistant);
    }
    out
}

#[cfg(test)]
mod tests {
    use bidi_llm::{AssistantMessage, StopReason, ToolCall, ToolResultMessage, Usage, UserMessage};

    use super::*;

    #[test]
    fn a_conversation_with_a_tool_call_reads_as_agui_messages() {
        let messages = vec![
            Message::User(UserMessage::new("Weather?")),
            Message::Assistant(AssistantMessage {
                content: vec![
                    AssistantContent::Thinking {
                        thinking: "look it up".into(),
                    },
                    AssistantContent::Text {
                        text: "Let me see.".into(),
                    },
                    AssistantContent::ToolCall(ToolCall {
                        id: "c1".into(),
                        name: "weather".into(),
                        arguments: json!({"city": "Oslo"}),
                    }),
                ],
                usage: Usage::default(),
                stop_reason: StopReason::ToolCalls,
            }),
            Message::ToolResult(ToolResultMessage {
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
                content: "no network".into(),
                details: None,
                is_error: true,
                attachments: Vec::new(),
            }),
        ];
        assert_eq!(
            Value::Array(super::messages(&messages)),
            json!([
                {"id": "m0", "role": "user", "content": "Weather?"},
                {"id": "m1-r", "role": "reasoning", "content": "look it up"},
                {"id": "m1", "role": "assistant", "content": "Let me see.", "toolCalls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                ]},
                {"id": "m2", "role": "tool", "toolCallId": "c1", "content": "no network",
                 "error": "no network"},
            ])
        );
    }
}
