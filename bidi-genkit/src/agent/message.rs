//! Genkit's message shapes (`MessageData`: a role and its parts) from and to bidi-llm's
//! messages.
//!
//! A conversation is shown as Genkit's messages: the results of one model message's tool
//! calls go together in one `tool` message.

use bidi_llm::{
    Approval, AssistantContent, AssistantMessage, Attachment, Message, ToolCall, ToolResultMessage,
    UserMessage,
};
use serde_json::{Value, json};

/// A conversation as Genkit's messages: the results of one model message's calls make one
/// `tool` message, as Genkit writes them.
pub(crate) fn conversation(messages: &[Message], interrupted: &[ToolCall]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    let mut results_open = false;
    for message in messages {
        let value = to_genkit(message, interrupted);
        let is_result = matches!(message, Message::ToolResult(_));
        match out.last_mut() {
            Some(last) if is_result && results_open => {
                if let (Some(parts), Some(more)) = (
                    last.get_mut("content").and_then(Value::as_array_mut),
                    value.get("content").and_then(Value::as_array),
                ) {
                    parts.extend(more.iter().cloned());
                }
            }
            _ => out.push(value),
        }
        results_open = is_result;
    }
    out
}

/// Genkit's messages (a client's state) as bidi-llm's: a `tool` message's responses become
/// one result each.
pub(crate) fn from_conversation(messages: &[Value]) -> Result<Vec<Message>, String> {
    let mut out = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let parts = parts(message).map_err(|reason| format!("message {index}: {reason}"))?;
        match role {
            "user" => out.push(Message::User(
                user_message(message).map_err(|reason| format!("message {index}: {reason}"))?,
            )),
            "model" => {
                let content = parts
                    .iter()
                    .enumerate()
                    .map(|(at, part)| model_part(part).ok_or(at))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|at| {
                        format!(
                            "message {index}: part {at} is not text, reasoning or a toolRequest"
                        )
                    })?;
                out.push(Message::Assistant(AssistantMessage {
                    content,
                    ..AssistantMessage::default()
                }));
            }
            "tool" => out.extend(
                tool_results(parts)
                    .map_err(|reason| format!("message {index}: {reason}"))?
                    .into_iter()
                    .map(Message::ToolResult),
            ),
            other => {
                return Err(format!(
                    "message {index} has role `{other}`, not user, model or tool"
                ));
            }
        }
    }
    Ok(out)
}

fn parts(message: &Value) -> Result<&[Value], String> {
    message
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| "a message needs `content`, a list of parts".to_owned())
}

/// A part of a model message, if it is one this wire knows.
fn model_part(part: &Value) -> Option<AssistantContent> {
    if let Some(text) = part.get("text").and_then(Value::as_str) {
        return Some(AssistantContent::Text {
            text: text.to_owned(),
        });
    }
    if let Some(thinking) = part.get("reasoning").and_then(Value::as_str) {
        return Some(AssistantContent::Thinking {
            thinking: thinking.to_owned(),
        });
    }
    let request = part.get("toolRequest")?;
    Some(AssistantContent::ToolCall(ToolCall {
        id: request.get("ref").and_then(Value::as_str)?.to_owned(),
        name: request.get("name").and_then(Value::as_str)?.to_owned(),
        arguments: request.get("input").cloned().unwrap_or_else(|| json!({})),
    }))
}

/// A tool's output as Genkit's `toolResponse.output`: the JSON a client sent as it was (kept
/// in the result's details, its text the model read), else the text.
fn output(content: &str, details: Option<&Value>) -> Value {
    match details {
        Some(details) if serde_json::to_string(details).is_ok_and(|text| text == content) => {
            details.clone()
        }
        _ => json!(content),
    }
}

/// `message` as Genkit's `MessageData`: `user`, `model` or `tool`, and its parts (`text`,
/// `media`, `reasoning`, `toolRequest`, `toolResponse`). A call in `interrupted` is marked as an
/// interrupt, as Genkit marks the calls a turn stopped for.
pub(crate) fn to_genkit(message: &Message, interrupted: &[ToolCall]) -> Value {
    match message {
        Message::User(user) => json!({ "role": "user", "content": user_parts(user) }),
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
                "output": output(&result.content, result.details.as_ref()),
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

/// A local tool's result as a `tool` chunk's `toolResponse` part.
pub(crate) fn tool_response(name: &str, id: &str, content: &str, details: Option<&Value>) -> Value {
    json!({ "toolResponse": { "name": name, "ref": id, "output": output(content, details) } })
}

/// A user `MessageData` as a user message: its `text` parts, joined, and its `media` parts as
/// attachments; or why it is not one this agent takes.
pub(crate) fn user_message(message: &Value) -> Result<UserMessage, String> {
    let role = message.get("role").and_then(Value::as_str).unwrap_or("");
    if role != "user" {
        return Err(format!(
            "a message to the agent is the user's, not `{role}`"
        ));
    }
    let mut text = String::new();
    let mut attachments = Vec::new();
    for (index, part) in parts(message)?.iter().enumerate() {
        if let Some(piece) = part.get("text").and_then(Value::as_str) {
            text.push_str(piece);
        } else if let Some(media) = part.get("media") {
            let url = media
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("part {index} is media without a `url`"))?;
            // A data URL names its own type.
            let named = url
                .strip_prefix("data:")
                .and_then(|rest| rest.split_once(';'))
                .map(|(kind, _)| kind);
            let media_type = media
                .get("contentType")
                .and_then(Value::as_str)
                .or(named)
                .unwrap_or("application/octet-stream");
            attachments.push(Attachment::from_url(url, media_type, "attachment"));
        } else {
            return Err(format!(
                "part {index} is neither text nor media, the parts this agent takes"
            ));
        }
    }
    Ok(UserMessage::new(text).attachments(attachments))
}

/// A user message as Genkit's parts: its text, then each attachment as `media`.
fn user_parts(user: &UserMessage) -> Vec<Value> {
    let mut parts = vec![json!({ "text": user.content })];
    for attachment in &user.attachments {
        let media = match attachment {
            Attachment::Image {
                uri: Some(uri),
                mime_type,
                data,
            } if data.is_empty() => json!({ "url": uri, "contentType": mime_type }),
            Attachment::Image {
                data, mime_type, ..
            }
            | Attachment::Audio { data, mime_type } => json!({
                "url": format!("data:{mime_type};base64,{data}"),
                "contentType": mime_type,
            }),
            Attachment::Resource {
                uri,
                mime_type,
                blob,
                ..
            } => {
                let kind = mime_type.as_deref().unwrap_or("application/octet-stream");
                match blob {
                    Some(blob) => json!({
                        "url": format!("data:{kind};base64,{blob}"),
                        "contentType": kind,
                    }),
                    None => json!({ "url": uri, "contentType": kind }),
                }
            }
            // A kind of attachment of a newer bidi-llm: nothing this wire knows.
            _ => continue,
        };
        parts.push(json!({ "media": media }));
    }
    parts
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
            // JSON output reaches the model as its text, and stays whole for the client.
            let (content, details) = match response.get("output") {
                Some(Value::String(text)) => (text.clone(), None),
                Some(other) => (other.to_string(), Some(other.clone())),
                None => (String::new(), None),
            };
            Ok(ToolResultMessage {
                tool_call_id: field("ref")?,
                tool_name: field("name")?,
                content,
                details,
                is_error: false,
                attachments: Vec::new(),
            })
        })
        .collect()
}

/// The approvals of `restart`'s `toolRequest` parts: each call may run, with the input the
/// client saw (the call must have it).
pub(crate) fn restarts(restart: &[Value]) -> Result<Vec<Approval>, String> {
    restart
        .iter()
        .enumerate()
        .map(|(index, part)| {
            let request = part
                .get("toolRequest")
                .ok_or_else(|| format!("restart part {index} is not a `toolRequest`"))?;
            let id = request
                .get("ref")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("restart part {index} has no `ref`"))?;
            let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
            Ok(Approval::approve(id).with_arguments(input))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_user_message_s_media_are_its_attachments_and_come_back_as_media() {
        let sent = json!({"role": "user", "content": [
            {"text": "what is this?"},
            {"media": {"url": "data:image/png;base64,iVBORw0=", "contentType": "image/png"}},
            {"media": {"url": "https://example.com/a.pdf", "contentType": "application/pdf"}},
        ]});
        let user = user_message(&sent).unwrap();
        assert_eq!(user.content, "what is this?");
        assert_eq!(
            user.attachments[0],
            Attachment::image("iVBORw0=", "image/png")
        );
        assert_eq!(to_genkit(&Message::User(user), &[]), sent);
        let unknown = json!({"role": "user", "content": [{"custom": {}}]});
        assert!(user_message(&unknown).unwrap_err().contains("part 0"));
        let no_url = json!({"role": "user", "content": [{"media": {"contentType": "image/png"}}]});
        assert!(
            user_message(&no_url)
                .unwrap_err()
                .contains("without a `url`")
        );
    }
}
