//! A task's turns as an A2A task: its state, the status message that says why (the calls it waits
//! for, the error it failed with), its answer as artifacts, and the conversation as its
//! history. One home for both ways a task is read: from the wire that runs it, and from the
//! store (`GetTask`, `CancelTask`).

use std::time::SystemTime;

use bidi_llm::{Attachment, Message as LlmMessage, ToolCall, TurnState, UserMessage};
use serde_json::{Value, json};

use super::types::{Artifact, Ids, Message, Part, Role, Task, TaskState, TaskStatus};

/// The status of task `ids` whose turn is `turn`, reached at `at`: A2A's view of the one turn
/// lifecycle (`bidi_llm::TurnState`), read in this one place whether the task runs on the
/// wire or is read from the store. An `input-required` task says which calls it waits for, a
/// failed one its error, a canceled one so.
pub(crate) fn status(ids: &Ids, turn: &TurnState, at: SystemTime) -> TaskStatus {
    let text = |text: &str| Some(vec![Part::text(text)]);
    let (state, parts) = match turn {
        TurnState::Running => (TaskState::Working, None),
        TurnState::Waiting { results, approvals } => (
            TaskState::InputRequired,
            Some(vec![Part::data(waiting(results, approvals))]),
        ),
        TurnState::Completed => (TaskState::Completed, None),
        TurnState::Failed(failure) => (TaskState::Failed, text(&failure.error)),
        TurnState::Aborted => (TaskState::Canceled, text("the task was canceled")),
        TurnState::Expired => (
            TaskState::Failed,
            text("the task stopped: the process running it went away"),
        ),
        _ => (TaskState::Failed, text("the task failed")),
    };
    with_parts(ids, state, parts, at)
}

/// The status of a task that says its state alone: submitted, or working.
pub(crate) fn bare(ids: &Ids, state: TaskState, at: SystemTime) -> TaskStatus {
    with_parts(ids, state, None, at)
}

/// A `working` status at `at` whose message says `parts`.
pub(crate) fn working(ids: &Ids, parts: Vec<Part>, at: SystemTime) -> TaskStatus {
    with_parts(ids, TaskState::Working, Some(parts), at)
}

fn with_parts(ids: &Ids, state: TaskState, parts: Option<Vec<Part>>, at: SystemTime) -> TaskStatus {
    TaskStatus {
        state,
        message: parts.map(|parts| Message::agent(format!("{}-status", ids.task), ids, parts)),
        timestamp: bidi_http::time::rfc3339(at),
    }
}

/// The data part of an `input-required` status: `{"awaitingToolExecution": [calls],
/// "awaitingApproval": [calls]}`, each call `{id, name, arguments}`, empty lists left out.
fn waiting(results: &[ToolCall], approvals: &[ToolCall]) -> Value {
    let mut data = json!({});
    if !results.is_empty() {
        data["awaitingToolExecution"] = json!(results);
    }
    if !approvals.is_empty() {
        data["awaitingApproval"] = json!(approvals);
    }
    data
}

/// The id of a task's `n`th answer (from 1).
pub(crate) fn answer_id(n: usize) -> String {
    format!("answer-{n}")
}

/// The answer of the turns whose messages are `turn` (a task's, all its turns'): an artifact
/// for each model message with text (a failed or cut short one's text so far too), in order.
pub(crate) fn artifacts(turn: &[LlmMessage]) -> Vec<Artifact> {
    turn.iter()
        .filter_map(|message| match message {
            LlmMessage::Assistant(answer) => Some(answer.text()),
            LlmMessage::Aborted(aborted) => Some(aborted.partial.text()),
            LlmMessage::Error(failed) => failed.partial.as_ref().map(|partial| partial.text()),
            _ => None,
        })
        .filter(|text| !text.is_empty())
        .enumerate()
        .map(|(n, text)| Artifact {
            artifact_id: answer_id(n + 1),
            name: "answer",
            parts: vec![Part::text(text)],
        })
        .collect()
}

/// The conversation of context `context` as A2A messages, the last `limit` of them (all
/// without one). Ids are made from each message's place, so two reads agree.
pub(crate) fn history(
    context: &str,
    conversation: &[LlmMessage],
    locals: &[String],
    limit: Option<u32>,
) -> Vec<Message> {
    let mut messages: Vec<Message> = conversation
        .iter()
        .enumerate()
        .filter_map(|(at, message)| {
            let (role, parts) = parts(message, locals)?;
            Some(Message {
                message_id: format!("{context}-{at}"),
                context_id: Some(context.to_owned()),
                task_id: None,
                role,
                parts,
                metadata: None,
            })
        })
        .collect();
    if let Some(limit) = limit.and_then(|limit| usize::try_from(limit).ok()) {
        messages.drain(..messages.len().saturating_sub(limit));
    }
    messages
}

/// Who said `message`, and what, as parts; `None` for a message with nothing to show.
fn parts(message: &LlmMessage, locals: &[String]) -> Option<(Role, Vec<Part>)> {
    let (role, parts) = match message {
        LlmMessage::User(user) => (Role::User, user_parts(user)),
        LlmMessage::Assistant(answer) => {
            let mut parts = text(answer.text());
            let calls: Vec<&ToolCall> = answer.tool_calls().collect();
            if !calls.is_empty() {
                parts.push(Part::data(json!({ "toolCalls": calls })));
            }
            (Role::Agent, parts)
        }
        LlmMessage::ToolResult(result) => {
            // A remote call's result came from the client; a local one's from the agent.
            let role = if locals.contains(&result.tool_name) {
                Role::Agent
            } else {
                Role::User
            };
            (role, vec![Part::data(json!({ "toolResult": result }))])
        }
        LlmMessage::Aborted(aborted) => (Role::Agent, text(aborted.partial.text())),
        LlmMessage::Error(failed) => (
            Role::Agent,
            text(
                failed
                    .partial
                    .as_ref()
                    .map(|p| p.text())
                    .unwrap_or_default(),
            ),
        ),
        _ => return None,
    };
    (!parts.is_empty()).then_some((role, parts))
}

fn text(text: String) -> Vec<Part> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![Part::text(text)]
    }
}

/// A user message's text and attachments, as parts.
fn user_parts(user: &UserMessage) -> Vec<Part> {
    let mut parts = text(user.content.clone());
    parts.extend(user.attachments.iter().filter_map(file));
    parts
}

/// An attachment as a file part: its bytes, or its address.
fn file(attachment: &Attachment) -> Option<Part> {
    let part = |raw: Option<&str>, url: Option<&str>, media_type: Option<&str>| Part {
        raw: raw.map(str::to_owned),
        url: url.map(str::to_owned),
        media_type: media_type.map(str::to_owned),
        ..Part::default()
    };
    match attachment {
        Attachment::Image {
            data,
            mime_type,
            uri: Some(uri),
        } if data.is_empty() => Some(part(None, Some(uri), Some(mime_type))),
        Attachment::Image {
            data, mime_type, ..
        }
        | Attachment::Audio { data, mime_type } => Some(part(Some(data), None, Some(mime_type))),
        Attachment::Resource {
            uri,
            text: Some(text),
            ..
        } => Some(Part {
            filename: Some(uri.clone()),
            ..Part::text(text.clone())
        }),
        Attachment::Resource {
            uri,
            mime_type,
            blob: Some(blob),
            ..
        } => Some(Part {
            filename: Some(uri.clone()),
            ..part(Some(blob), None, mime_type.as_deref())
        }),
        Attachment::Resource { uri, mime_type, .. } => {
            Some(part(None, Some(uri), mime_type.as_deref()))
        }
        _ => None,
    }
}

/// Task `ids` whose turns added `turn` to `conversation`, its latest ended in `status`.
pub(crate) fn task(
    ids: &Ids,
    status: TaskStatus,
    turn: &[LlmMessage],
    conversation: &[LlmMessage],
    locals: &[String],
    limit: Option<u32>,
) -> Task {
    Task {
        id: ids.task.clone(),
        context_id: ids.context.clone(),
        status,
        artifacts: artifacts(turn),
        history: history(&ids.context, conversation, locals, limit),
    }
}

#[cfg(test)]
mod tests {
    use bidi_llm::{AssistantContent, AssistantMessage, ToolResultMessage};
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn said(text: &str) -> LlmMessage {
        LlmMessage::Assistant(AssistantMessage {
            content: vec![AssistantContent::Text { text: text.into() }],
            ..AssistantMessage::default()
        })
    }

    fn ids() -> Ids {
        Ids {
            task: "t1".into(),
            context: "c1".into(),
        }
    }

    #[test]
    fn a_task_is_its_state_answer_and_history() {
        let call = ToolCall {
            id: "k1".into(),
            name: "lookup".into(),
            arguments: json!({"q": "x"}),
        };
        let conversation = vec![
            LlmMessage::User(UserMessage::new("find x")),
            LlmMessage::Assistant(AssistantMessage {
                content: vec![
                    AssistantContent::Text {
                        text: "Looking".into(),
                    },
                    AssistantContent::ToolCall(call),
                ],
                ..AssistantMessage::default()
            }),
            LlmMessage::ToolResult(ToolResultMessage {
                tool_call_id: "k1".into(),
                tool_name: "lookup".into(),
                content: "found".into(),
                details: None,
                is_error: false,
                attachments: Vec::new(),
            }),
            said(""),
            said("Found x"),
        ];
        let at = UNIX_EPOCH + Duration::from_secs(1);
        let status = status(&ids(), &TurnState::Completed, at);
        let task = task(&ids(), status, &conversation[1..], &conversation, &[], None);
        let json = serde_json::to_value(&task).unwrap();
        assert_eq!(
            json,
            json!({
                "id": "t1", "contextId": "c1",
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "1970-01-01T00:00:01.000Z"},
                "artifacts": [
                    {"artifactId": "answer-1", "name": "answer", "parts": [{"text": "Looking"}]},
                    {"artifactId": "answer-2", "name": "answer", "parts": [{"text": "Found x"}]},
                ],
                "history": [
                    {"messageId": "c1-0", "contextId": "c1", "role": "ROLE_USER", "parts": [{"text": "find x"}]},
                    {"messageId": "c1-1", "contextId": "c1", "role": "ROLE_AGENT", "parts": [
                        {"text": "Looking"},
                        {"data": {"toolCalls": [{"id": "k1", "name": "lookup", "arguments": {"q": "x"}}]},
                         "mediaType": "application/json"},
                    ]},
                    {"messageId": "c1-2", "contextId": "c1", "role": "ROLE_USER", "parts": [
                        {"data": {"toolResult": {"toolCallId": "k1", "toolName": "lookup", "content": "found", "isError": false}},
                         "mediaType": "application/json"},
                    ]},
                    {"messageId": "c1-4", "contextId": "c1", "role": "ROLE_AGENT", "parts": [{"text": "Found x"}]},
                ],
            })
        );
        let last = history("c1", &conversation, &["lookup".into()], Some(2));
        assert_eq!(last.len(), 2);
        assert_eq!(
            last[0].role,
            Role::Agent,
            "a local tool's result is the agent's"
        );
        assert_eq!(last[1].message_id, "c1-4");
        assert!(history("c1", &conversation, &[], Some(0)).is_empty());
    }

    #[test]
    fn statuses_say_why() {
        let call = |id: &str, name: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({}),
        };
        let waiting = TurnState::Waiting {
            results: vec![call("a", "ask")],
            approvals: vec![call("b", "wipe")],
        };
        let status = status(&ids(), &waiting, UNIX_EPOCH);
        assert_eq!(
            serde_json::to_value(&status.message).unwrap(),
            json!({
                "messageId": "t1-status", "contextId": "c1", "taskId": "t1", "role": "ROLE_AGENT",
                "parts": [{"data": {
                    "awaitingToolExecution": [{"id": "a", "name": "ask", "arguments": {}}],
                    "awaitingApproval": [{"id": "b", "name": "wipe", "arguments": {}}],
                }, "mediaType": "application/json"}],
            })
        );
        let boom = bidi_llm::Failure {
            code: bidi_flow::Code::Model,
            error: "boom".into(),
        };
        let failed = super::status(&ids(), &TurnState::Failed(boom), UNIX_EPOCH);
        assert_eq!(failed.state, TaskState::Failed);
        assert_eq!(
            failed.message.unwrap().parts,
            vec![Part::text("boom")],
            "a failure says its error"
        );
        let done = super::status(&ids(), &TurnState::Completed, UNIX_EPOCH);
        assert!(done.message.is_none());
    }

    #[test]
    fn attachments_are_file_parts() {
        let user = UserMessage::new("see")
            .attachment(Attachment::image("AAAA", "image/png"))
            .attachment(Attachment::from_url(
                "https://example.com/a.pdf",
                "application/pdf",
                "a.pdf",
            ))
            .attachment(Attachment::text_resource("file:///n.md", "# N"));
        let parts = user_parts(&user);
        assert_eq!(
            serde_json::to_value(&parts).unwrap(),
            json!([
                {"text": "see"},
                {"raw": "AAAA", "mediaType": "image/png"},
                {"url": "https://example.com/a.pdf", "mediaType": "application/pdf"},
                {"text": "# N", "filename": "file:///n.md"},
            ])
        );
    }
}
