//! The request: the body `DefaultChatTransport` sends, and the turn it makes on a new chat or
//! a stored one (the user's message, the client's tool results, the user's approvals).
//!
//! A request that is refused gets the server's JSON error body, never a stream: the UI message
//! stream has no shape for a refusal before it starts (AG-UI's one-event `RUN_ERROR` stream has
//! no counterpart here), and the AI SDK's transport shows a refused body to its user as text.

use std::collections::HashSet;

use axum::http::StatusCode;
use bidi_flow::text::cap;
use bidi_llm::{
    Approval, AssistantContent, AssistantMessage, Attachment, Context, LlmAgent, LlmSession,
    Message, Resume, Status, StopReason, ToolCall, ToolResultMessage, ToolSpec, TurnInput,
    UserMessage,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use bidi_http::agent::WaitingCalls;
use bidi_http::codec::{Code, Failure};

/// `POST /agent/{name}/chat`: what `DefaultChatTransport` sends, and the two fields of ours a
/// client may add through its `body` option.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ChatRequest {
    /// The chat: the session's id.
    pub(super) id: String,
    /// The whole conversation, as the client has it.
    pub(super) messages: Vec<UiMessage>,
    /// `submit-message` or `regenerate-message`.
    #[serde(default)]
    pub(super) trigger: Trigger,
    /// The assistant message to regenerate.
    #[serde(default)]
    pub(super) message_id: Option<String>,
    /// The client's own tools (run by the client), for a chat the server does not know yet.
    #[serde(default)]
    pub(super) tools: Vec<ToolSpec>,
    /// The system prompt, for a chat the server does not know yet.
    #[serde(default)]
    system: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Trigger {
    #[default]
    SubmitMessage,
    RegenerateMessage,
}

/// A `UIMessage`: the parts are read as far as the agent needs them, others are skipped.
#[derive(Debug, Deserialize)]
pub(super) struct UiMessage {
    #[serde(default)]
    pub(super) id: String,
    role: UiRole,
    #[serde(default)]
    parts: Vec<UiPart>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum UiRole {
    System,
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
struct UiPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    fields: Map<String, Value>,
}

impl UiPart {
    fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// The tool a tool part calls: `tool-{name}`, or a `dynamic-tool`'s `toolName`.
    fn tool_name(&self) -> Option<&str> {
        match self.kind.strip_prefix("tool-") {
            Some(name) => Some(name),
            None if self.kind == "dynamic-tool" => self.str("toolName"),
            None => None,
        }
    }

    /// A tool part's call, once its input is complete.
    fn tool_call(&self) -> Option<ToolCall> {
        let name = self.tool_name()?;
        let state = self.str("state")?;
        if state == "input-streaming" {
            return None;
        }
        Some(ToolCall {
            id: self.str("toolCallId")?.to_owned(),
            name: name.to_owned(),
            arguments: self
                .fields
                .get("input")
                .filter(|input| !input.is_null())
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
        })
    }

    /// A tool part's approval, once the user answered it (state `approval-responded`).
    fn approval(&self) -> Option<Approval> {
        if self.str("state")? != "approval-responded" {
            return None;
        }
        let call = self.str("toolCallId")?;
        let approval = self.fields.get("approval")?;
        let reason = approval.get("reason").and_then(Value::as_str);
        Some(match approval.get("approved").and_then(Value::as_bool)? {
            true => Approval::approve(call),
            false => Approval::deny(call, reason.unwrap_or_default()),
        })
    }

    /// A tool part's result: its output or error, if it has one.
    fn tool_result(&self) -> Option<ToolResultMessage> {
        let call = self.tool_call()?;
        let (content, details, is_error) = match self.str("state")? {
            "output-available" => match self.fields.get("output") {
                Some(Value::String(text)) => (text.clone(), None, false),
                Some(output) => (output.to_string(), Some(output.clone()), false),
                None => (String::new(), None, false),
            },
            "output-error" => (
                self.str("errorText")
                    .unwrap_or("the tool failed")
                    .to_owned(),
                None,
                true,
            ),
            "output-denied" => ("the user denied the call".to_owned(), None, true),
            _ => return None,
        };
        Some(ToolResultMessage {
            tool_call_id: call.id,
            tool_name: call.name,
            content,
            details,
            is_error,
            attachments: Vec::new(),
        })
    }
}

/// A user message's text and files.
fn user_message(message: &UiMessage) -> UserMessage {
    let text: Vec<&str> = message
        .parts
        .iter()
        .filter(|part| part.kind == "text")
        .filter_map(|part| part.str("text"))
        .collect();
    let files = message
        .parts
        .iter()
        .filter(|part| part.kind == "file")
        .filter_map(attachment);
    UserMessage::new(text.join("\n")).attachments(files)
}

/// A `file` part as an attachment: inline (`data:` URLs) or by its address.
fn attachment(part: &UiPart) -> Option<Attachment> {
    let url = part.str("url")?;
    let media_type = part.str("mediaType").unwrap_or("application/octet-stream");
    Some(Attachment::from_url(url, media_type, &url_name(part)))
}

fn url_name(part: &UiPart) -> String {
    part.str("filename").unwrap_or("attachment").to_owned()
}

/// An assistant `UIMessage` as the conversation's messages: one assistant message per step,
/// each followed by the results its tool parts carry (but for the calls in `skip`).
fn assistant_messages(message: &UiMessage, skip: &HashSet<String>, out: &mut Vec<Message>) {
    let mut content = Vec::new();
    let mut results = Vec::new();
    let flush = |content: &mut Vec<AssistantContent>,
                 results: &mut Vec<ToolResultMessage>,
                 out: &mut Vec<Message>| {
        if content.is_empty() {
            return;
        }
        let calls = content
            .iter()
            .any(|block| matches!(block, AssistantContent::ToolCall(_)));
        out.push(Message::Assistant(AssistantMessage {
            content: std::mem::take(content),
            stop_reason: if calls {
                StopReason::ToolCalls
            } else {
                StopReason::Stop
            },
            ..AssistantMessage::default()
        }));
        out.extend(results.drain(..).map(Message::ToolResult));
    };
    for part in &message.parts {
        match part.kind.as_str() {
            "step-start" => flush(&mut content, &mut results, out),
            "text" => {
                if let Some(text) = part.str("text") {
                    content.push(AssistantContent::Text {
                        text: text.to_owned(),
                    });
                }
            }
            "reasoning" => {
                if let Some(thinking) = part.str("text") {
                    content.push(AssistantContent::Thinking {
                        thinking: thinking.to_owned(),
                    });
                }
            }
            _ => {
                if let Some(call) = part.tool_call() {
                    if !skip.contains(&call.id)
                        && let Some(result) = part.tool_result()
                    {
                        results.push(result);
                    }
                    content.push(AssistantContent::ToolCall(call));
                }
            }
        }
    }
    flush(&mut content, &mut results, out);
}

/// The tool parts of the message's last step.
fn last_step(message: &UiMessage) -> &[UiPart] {
    let start = message
        .parts
        .iter()
        .rposition(|part| part.kind == "step-start")
        .map_or(0, |at| at + 1);
    &message.parts[start..]
}

/// A new chat's session state from the client's conversation, and what to run: the last user
/// message, or the results of the client's calls in the last step of the last assistant
/// message.
///
/// Long by design: one pass over the chat's messages, in order.
pub(super) fn stateless(
    agent: &LlmAgent,
    request: &ChatRequest,
) -> Result<(LlmSession, TurnInput), Failure> {
    let Some((last, earlier)) = request.messages.split_last() else {
        return Err(
            Failure::malformed("`messages` is empty: there is nothing to answer").at("/messages"),
        );
    };
    let remote = |name: &str| match agent.tools().iter().find(|tool| tool.name() == name) {
        Some(tool) => !tool.is_local(),
        None => request.tools.iter().any(|tool| tool.name == name),
    };
    let mut system: Vec<String> = request.system.iter().cloned().collect();
    let mut history = Vec::new();
    let mut pending = Vec::new();
    let mut results = Vec::new();
    let mut skip = HashSet::new();
    if last.role == UiRole::Assistant {
        if let Some(part) = last_step(last)
            .iter()
            .find(|part| part.approval().is_some())
        {
            // The client could make up the call it approves: only a chat kept here has calls
            // waiting for approval.
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                format!(
                    "chat `{}` is not kept here, so it has no call `{}` waiting for approval",
                    cap(&request.id),
                    cap(part.str("toolCallId").unwrap_or_default())
                ),
            )
            .at("/messages"));
        }
        for part in last_step(last) {
            if let Some(call) = part.tool_call()
                && remote(&call.name)
            {
                if let Some(result) = part.tool_result() {
                    results.push(result);
                }
                skip.insert(call.id.clone());
                pending.push(call);
            }
        }
        if pending.is_empty() {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                "the last message is the assistant's and has no tool calls for the client: \
                 there is nothing to answer",
            )
            .at("/messages"));
        }
    }
    let convert =
        |message: &UiMessage, system: &mut Vec<String>, history: &mut Vec<Message>| match message
            .role
        {
            UiRole::System => system.push(user_message(message).content),
            UiRole::User => history.push(Message::User(user_message(message))),
            UiRole::Assistant => assistant_messages(message, &skip, history),
        };
    for message in earlier {
        convert(message, &mut system, &mut history);
    }
    let input = match last.role {
        UiRole::User => TurnInput::User(user_message(last)),
        UiRole::Assistant => {
            convert(last, &mut system, &mut history);
            TurnInput::ToolResults(results)
        }
        UiRole::System => {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidInput,
                "the last message is a system message: there is nothing to answer",
            )
            .at("/messages"));
        }
    };
    let context = Context {
        system_prompt: (!system.is_empty()).then(|| system.join("\n\n")),
        messages: history,
        tools: request.tools.clone(),
    };
    let mut state = agent.new_session(context).map_err(|error| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            error.to_string(),
        )
        .at("/tools")
    })?;
    if !pending.is_empty() {
        state.status = Status::AwaitingToolExecution;
        state.pending_tool_calls = pending;
    }
    Ok((state, input))
}

/// What to run on a stored session: the results of its pending client calls and the user's
/// decisions on its calls waiting for approval, from the last message's tool parts, or the last
/// user message.
pub(super) fn resumed(
    agent: &LlmAgent,
    state: &LlmSession,
    request: &ChatRequest,
    waiting: WaitingCalls,
) -> Result<TurnInput, Failure> {
    let Some(last) = request.messages.last() else {
        return Err(
            Failure::malformed("`messages` is empty: there is nothing to answer").at("/messages"),
        );
    };
    if state.status == Status::AwaitingToolExecution && last.role == UiRole::Assistant {
        let local = |name: &str| {
            agent
                .tools()
                .iter()
                .any(|tool| tool.name() == name && tool.is_local())
        };
        let (approving, running): (Vec<&ToolCall>, Vec<&ToolCall>) = state
            .pending_tool_calls
            .iter()
            .partition(|call| local(&call.name));
        let pending = |calls: &[&ToolCall], id: &str| calls.iter().any(|call| call.id == id);
        let results: Vec<ToolResultMessage> = last
            .parts
            .iter()
            .filter_map(UiPart::tool_result)
            .filter(|result| pending(&running, &result.tool_call_id))
            .collect();
        if approving.is_empty() {
            return Ok(TurnInput::ToolResults(results));
        }
        let mut resume = Resume::new();
        resume.results = results;
        resume.approvals = last
            .parts
            .iter()
            .filter_map(UiPart::approval)
            .filter(|approval| pending(&approving, &approval.tool_call_id))
            .collect();
        return Ok(TurnInput::Resume(resume));
    }
    match last.role {
        UiRole::User
            if !state.pending_tool_calls.is_empty() && waiting == WaitingCalls::SetAside =>
        {
            Ok(agent.set_aside(state, user_message(last)))
        }
        UiRole::User => Ok(TurnInput::User(user_message(last))),
        _ => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidInput,
            "the last message is not the user's, and the chat awaits no tool results from it: \
             there is nothing to answer",
        )
        .at(&format!("/messages/{}", request.messages.len() - 1))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn request(body: Value) -> ChatRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_new_chat_is_made_from_the_client_conversation() {
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let chat = request(json!({
            "id": "c", "trigger": "submit-message", "system": "Be brief.",
            "tools": [{"name": "ask", "description": "Asks", "parameters": {"type": "object"}}],
            "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                {"id": "a1", "role": "assistant", "parts": [
                    {"type": "step-start"},
                    {"type": "text", "text": "Let me ask.", "state": "done"},
                    {"type": "tool-ask", "toolCallId": "k1", "state": "output-available",
                     "input": {"q": "ok?"}, "output": {"yes": true}},
                ]},
            ],
        }));
        let (state, input) = stateless(&agent, &chat).unwrap();
        assert_eq!(state.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(state.status, Status::AwaitingToolExecution);
        assert_eq!(state.pending_tool_calls[0].id, "k1");
        assert_eq!(state.messages.len(), 2, "{:?}", state.messages);
        let TurnInput::ToolResults(results) = input else {
            panic!("{input:?}")
        };
        assert_eq!(results[0].content, r#"{"yes":true}"#);
        assert_eq!(results[0].details, Some(json!({"yes": true})));
    }
}
