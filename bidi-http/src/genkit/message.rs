//! Genkit's message shapes (`MessageData`: a role and its parts) from and to bidi-llm's
//! messages.

use bidi_llm::{AssistantContent, AssistantMessage, Message, ToolCall, ToolResultMessage};
use serde_json::{Value, json};

/// `message` as Genkit's `MessageData`: `user`, `model` or `tool`, and its parts (`text`,
/// `reasoning`, `toolRequest`, `toolResponse`; a user's attachments are left out). A call in `interrupted` is marked as an
/// interrupt, as Genkit marks the calls a turn stopped for.
pub(crate) fn to_genkit(message: &Message, interrupted: &[ToolCall]) -> Value {
    match message {
        // Attachments are not carried over (yet): the text is.
        Message::User(user) => json!({ "role": "user", "content": [{ "text": user.content }] }),
        Message::Assistant(answer) => model(answer, interrupted),
        Message::Aborted(aborted) => model(&aborted.partial, interrupted),
        Message::Error(failed) => match &failed.partial {
            Some(partial) => model(partial, interrupted),
            None => json!({ "role": "model", "content": [] }),
        },
        Message::ToolResult(result) => json!({
            "role": "tool",
            "content": [{ "toolResponse": {
                "name": result.tool_name,
                "ref": result.tool_call_id,
                "output": result.content,
            } }],
        }),
        // A kind of message of a newer bidi-llm: no parts this wire knows.
        _ => json!({ "role": "model", "content": [] }),
    }
}

fn model(answer: &AssistantMessage, interrupted: &[ToolCall]) -> Value {
    let content: Vec<Value> = answer
        .content
        .iter()
        .map(|part| match part {
            AssistantContent::Text { text } => json!({ "text": text }),
            AssistantContent::Thinking { thinking } => json!({ "reasoning": thinking }),
            AssistantContent::ToolCall(call) => {
                let interrupt = interrupted.iter().any(|pending| pending.id == call.id);
                tool_request(call, interrupt)
            }
            // A kind of part of a newer bidi-llm: nothing this wire knows.
            _ => json!({ "text": "" }),
        })
        .collect();
    json!({ "role": "model", "content": content })
}

/// A call as a `toolRequest` part; an interrupt carries `metadata.interrupt`.
pub(crate) fn tool_request(call: &ToolCall, interrupt: bool) -> Value {
    let mut part = json!({ "toolRequest": {
        "name": call.name,
        "ref": call.id,
        "input": call.arguments,
    } });
    if interrupt {
        part["metadata"] = json!({ "interrupt": true });
    }
    part
}

/// The text of a user `MessageData`'s parts, or why it is not one this agent takes.
pub(crate) fn user_text(message: &Value) -> Result<String, String> {
    let role = message.get("role").and_then(Value::as_str).unwrap_or("");
    if role != "user" {
        return Err(format!(
            "a message to the agent is the user's, not `{role}`"
        ));
    }
    let Some(parts) = message.get("content").and_then(Value::as_array) else {
        return Err("a message needs `content`, a list of parts".to_owned());
    };
    let mut text = String::new();
    for (index, part) in parts.iter().enumerate() {
        match part.get("text").and_then(Value::as_str) {
            Some(piece) => text.push_str(piece),
            None => {
                return Err(format!(
                    "part {index} is not text, the only part this agent takes"
                ));
            }
        }
    }
    Ok(text)
}

/// The tool results of `respond`'s `toolResponse` parts.
pub(crate) fn tool_results(respond: &[Value]) -> Result<Vec<ToolResultMessage>, String> {
    respond
        .iter()
        .enumerate()
        .map(|(index, part)| {
            let response = part
                .get("toolResponse")
                .ok_or_else(|| format!("respond part {index} is not a `toolResponse`"))?;
            let field = |name: &str| {
                response
                    .get(name)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("respond part {index} has no `{name}`"))
            };
            let output = match response.get("output") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            Ok(ToolResultMessage {
                tool_call_id: field("ref")?,
                tool_name: field("name")?,
                content: output,
                details: None,
                is_error: false,
                attachments: Vec::new(),
            })
        })
        .collect()
}
