//! A stored conversation as the `session/update`s that tell it, for `session/load`.

use agent_client_protocol_schema::v1::{
    SessionUpdate, ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use bidi_llm::{AssistantContent, AssistantMessage, Attachment, Message};
use serde_json::Value;

use crate::content::{self, chunk};
use crate::policy::Rules;

/// The conversation as the updates that tell it.
pub(super) fn history(messages: &[Message], rules: &Rules) -> Vec<SessionUpdate> {
    let mut updates = Vec::new();
    let assistant = |updates: &mut Vec<SessionUpdate>, message: &AssistantMessage| {
        for block in &message.content {
            match block {
                AssistantContent::Text { text } => {
                    updates.push(SessionUpdate::AgentMessageChunk(chunk(text)));
                }
                AssistantContent::Thinking { thinking } => {
                    updates.push(SessionUpdate::AgentThoughtChunk(chunk(thinking)));
                }
                AssistantContent::ToolCall(call) => updates.push(SessionUpdate::ToolCall(
                    ToolCall::new(call.id.clone(), call.name.clone())
                        .kind(rules.kind(&call.name))
                        .raw_input(call.arguments.clone()),
                )),
                _ => {}
            }
        }
    };
    for message in messages {
        match message {
            Message::User(user) => updates.extend(
                content::user_chunks(user)
                    .into_iter()
                    .map(SessionUpdate::UserMessageChunk),
            ),
            Message::Assistant(message) => assistant(&mut updates, message),
            Message::Aborted(aborted) => assistant(&mut updates, &aborted.partial),
            Message::Error(error) => {
                if let Some(partial) = &error.partial {
                    assistant(&mut updates, partial);
                }
            }
            Message::ToolResult(result) => updates.push(tool_done(
                &result.tool_call_id,
                &result.content,
                &result.attachments,
                result.details.clone(),
                result.is_error,
            )),
            _ => {}
        }
    }
    updates
}

pub(crate) fn tool_done(
    id: &str,
    output: &str,
    attachments: &[Attachment],
    details: Option<Value>,
    is_error: bool,
) -> SessionUpdate {
    let status = if is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id.to_owned(),
        ToolCallUpdateFields::new()
            .status(status)
            .content(content::tool_content(output, attachments))
            .raw_output(details.unwrap_or_else(|| Value::String(output.to_owned()))),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn history_replays_messages_as_updates() {
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "let me look"},
                {"type": "toolCall", "id": "c1", "name": "grep", "arguments": {"q": "x"}},
            ]},
            {"role": "toolResult", "toolCallId": "c1", "toolName": "grep", "content": "3 hits", "isError": false},
            {"role": "assistant", "content": [{"type": "text", "text": "found 3"}]},
        ]))
        .unwrap();
        let updates: Vec<Value> = history(&messages, &Rules::default())
            .into_iter()
            .map(|update| serde_json::to_value(update).unwrap())
            .collect();
        let kinds: Vec<&str> = updates
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk"
            ]
        );
        assert_eq!(updates[3]["rawInput"], json!({"q": "x"}));
        assert_eq!(updates[4]["status"], "completed");
        assert_eq!(updates[4]["content"][0]["content"]["text"], "3 hits");
    }
}
