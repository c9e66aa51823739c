//! A client's A2A message as a turn's input: its text and files are a user message; its data
//! parts answer the calls an `input-required` task waits for.
//!
//! A data part that answers is `{"results": [..], "approvals": [..]}` (either may be left
//! out): each result `{"toolCallId", "output", "isError"?, "toolName"?}` (`output` text, or
//! any JSON, which the model reads as its JSON text), each approval `{"toolCallId",
//! "approved", "reason"?, "arguments"?}` (`arguments`, if sent, must be the call's).

use bidi_flow::text::{pointer, reason};
use bidi_llm::{Approval, Attachment, Resume, ToolCall, ToolResultMessage, TurnInput, UserMessage};
use serde::Deserialize;
use serde_json::Value;

use super::types::{Message, Part, RpcError};

/// Where the client's message is in the request.
const AT: &str = "/params/message";

/// A data part's answers to pending calls.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answers {
    #[serde(default)]
    results: Vec<ToolOutput>,
    #[serde(default)]
    approvals: Vec<Approval>,
}

/// The result of a remote call, as the client sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolOutput {
    tool_call_id: String,
    /// The tool's name; the pending call's when left out.
    #[serde(default)]
    tool_name: Option<String>,
    output: Value,
    #[serde(default)]
    is_error: bool,
}

/// The turn input `message` makes, where the session waits for `pending` calls.
///
/// # Errors
///
/// Invalid params naming the part that is wrong: a data part that answers nothing, a part
/// that is neither text, file nor data, a message with nothing in it.
pub(crate) fn decode(message: &Message, pending: &[ToolCall]) -> Result<TurnInput, RpcError> {
    let mut texts = Vec::new();
    let mut attachments = Vec::new();
    let mut answered: Option<Answers> = None;
    for (at, part) in message.parts.iter().enumerate() {
        let path = format!("{AT}/parts/{at}");
        if let Some(data) = &part.data {
            let more = data_answers(data, &format!("{path}/data"))?;
            let all = answered.get_or_insert_with(Answers::default);
            all.results.extend(more.results);
            all.approvals.extend(more.approvals);
        } else if let Some(text) = &part.text {
            texts.push(text.as_str());
        } else if let Some(attachment) = file(part) {
            attachments.push(attachment);
        } else {
            return Err(RpcError::invalid_params(
                &path,
                "a part carries `text`, `raw`, `url` or `data`",
            ));
        }
    }
    let user = (!texts.is_empty() || !attachments.is_empty())
        .then(|| UserMessage::new(texts.join("\n")).attachments(attachments));
    match (answered, user) {
        (Some(answers), user) => {
            let mut resume = answers
                .results
                .into_iter()
                .map(|output| result(output, pending))
                .fold(Resume::new(), Resume::result);
            resume = answers.approvals.into_iter().fold(resume, Resume::approval);
            if let Some(user) = user {
                resume = resume.message(user);
            }
            Ok(TurnInput::Resume(resume))
        }
        (None, Some(user)) => Ok(TurnInput::User(user)),
        (None, None) => Err(RpcError::invalid_params(
            &format!("{AT}/parts"),
            "the message says nothing: send a text, file or data part",
        )),
    }
}

/// A data part's answers, or invalid params at `path`.
fn data_answers(data: &Value, path: &str) -> Result<Answers, RpcError> {
    if !data.is_object() {
        return Err(RpcError::invalid_params(
            path,
            "a data part answers pending calls: `{\"results\": [..], \"approvals\": [..]}`",
        ));
    }
    serde_path_to_error::deserialize(data).map_err(|error| {
        let at = format!("{path}{}", pointer(error.path()));
        RpcError::invalid_params(&at, reason(&error.into_inner().to_string()))
    })
}

/// A client's result as the agent's, named after the pending call it answers.
fn result(output: ToolOutput, pending: &[ToolCall]) -> ToolResultMessage {
    let name = output.tool_name.unwrap_or_else(|| {
        pending
            .iter()
            .find(|call| call.id == output.tool_call_id)
            .map(|call| call.name.clone())
            .unwrap_or_default()
    });
    let (content, details) = match output.output {
        Value::String(text) => (text, None),
        other => (other.to_string(), Some(other)),
    };
    ToolResultMessage {
        tool_call_id: output.tool_call_id,
        tool_name: name,
        content,
        details,
        is_error: output.is_error,
        attachments: Vec::new(),
    }
}

/// A file part as an attachment: its bytes (`raw`, base64) or its address (`url`).
fn file(part: &Part) -> Option<Attachment> {
    let media_type = part
        .media_type
        .as_deref()
        .unwrap_or("application/octet-stream");
    match (&part.raw, &part.url) {
        (Some(raw), _) => {
            let name = part.filename.as_deref().unwrap_or("file");
            let url = format!("data:{media_type};base64,{raw}");
            Some(Attachment::from_url(&url, media_type, name))
        }
        (None, Some(url)) => {
            let name = part.filename.as_deref().unwrap_or(url);
            Some(Attachment::from_url(url, media_type, name))
        }
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::INVALID_PARAMS;

    fn message(parts: &Value) -> Message {
        serde_json::from_value(json!({"messageId": "m", "role": "ROLE_USER", "parts": parts}))
            .unwrap()
    }

    #[test]
    fn text_and_files_are_a_user_message() {
        let input = decode(
            &message(&json!([
                {"text": "look"}, {"text": "here"},
                {"raw": "iVBORw0=", "mediaType": "image/png"},
                {"url": "https://example.com/a.pdf", "mediaType": "application/pdf"},
            ])),
            &[],
        )
        .unwrap();
        let TurnInput::User(user) = input else {
            panic!("{input:?}")
        };
        assert_eq!(user.content, "look\nhere");
        assert_eq!(
            user.attachments[0],
            Attachment::image("iVBORw0=", "image/png")
        );
        assert!(
            matches!(&user.attachments[1], Attachment::Resource { uri, .. } if uri == "https://example.com/a.pdf")
        );
    }

    #[test]
    fn data_parts_answer_the_pending_calls() {
        let pending = [ToolCall {
            id: "k1".into(),
            name: "lookup".into(),
            arguments: json!({}),
        }];
        let input = decode(
            &message(&json!([
                {"data": {"results": [{"toolCallId": "k1", "output": {"n": 1}}]}},
                {"data": {"approvals": [{"toolCallId": "k2", "approved": false, "reason": "no"}]}},
                {"text": "and then?"},
            ])),
            &pending,
        )
        .unwrap();
        let TurnInput::Resume(resume) = input else {
            panic!("{input:?}")
        };
        assert_eq!(resume.results[0].tool_name, "lookup");
        assert_eq!(resume.results[0].content, r#"{"n":1}"#);
        assert_eq!(resume.results[0].details, Some(json!({"n": 1})));
        assert_eq!(resume.approvals, [Approval::deny("k2", "no")]);
        assert_eq!(resume.message, Some(UserMessage::new("and then?")));
    }

    #[test]
    fn bad_parts_are_invalid_params_naming_the_field() {
        let error = decode(
            &message(&json!([{"text": "x"}, {"data": {"results": [{"toolCallId": 1}]}}])),
            &[],
        )
        .unwrap_err();
        assert_eq!(error.code, INVALID_PARAMS);
        assert_eq!(
            error.data.as_deref(),
            Some(&json!({"path": "/params/message/parts/1/data/results/0/toolCallId"}))
        );
        let error = decode(&message(&json!([{"data": {"result": []}}])), &[]).unwrap_err();
        assert!(error.message.contains("`result`"), "{}", error.message);
        let error = decode(&message(&json!([{"data": [1]}])), &[]).unwrap_err();
        assert_eq!(
            error.data.as_deref(),
            Some(&json!({"path": "/params/message/parts/0/data"}))
        );
        let error = decode(&message(&json!([{"metadata": {}}])), &[]).unwrap_err();
        assert_eq!(
            error.data.as_deref(),
            Some(&json!({"path": "/params/message/parts/0"}))
        );
        let error = decode(&message(&json!([])), &[]).unwrap_err();
        assert_eq!(
            error.data.as_deref(),
            Some(&json!({"path": "/params/message/parts"}))
        );
    }
}
