//! A client's A2A message as a turn's input: its text, files and JSON are a user message; the
//! data parts that answer the calls an `input-required` task waits for are its results and
//! approvals.
//!
//! A part carries exactly one of `text`, `raw`, `url` and `data` (A2A's `Part` is a oneof).
//! A data part that answers is an object with `results` or `approvals` (either may be left
//! out), and nothing else: each result `{"toolCallId", "output", "isError"?, "toolName"?}`
//! (`output` text, or any JSON, which the model reads as its JSON text), each approval
//! `{"toolCallId", "approved", "reason"?, "arguments"?}` (`arguments`, if sent, must be the
//! call's). Any other data part is JSON the user sends, as the card's `application/json`
//! input mode says: the model reads its JSON text, in its place among the message's texts.

use std::borrow::Cow;

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
    let mut texts: Vec<Cow<'_, str>> = Vec::new();
    let mut attachments = Vec::new();
    let mut answered: Option<Answers> = None;
    for (at, part) in message.parts.iter().enumerate() {
        let path = format!("{AT}/parts/{at}");
        let contents = [
            part.text.is_some(),
            part.raw.is_some(),
            part.url.is_some(),
            part.data.is_some(),
        ];
        match contents.iter().filter(|&&has| has).count() {
            1 => {}
            0 => {
                return Err(RpcError::invalid_params(
                    &path,
                    "a part carries `text`, `raw`, `url` or `data`",
                ));
            }
            _ => {
                return Err(RpcError::invalid_params(
                    &path,
                    "a part carries one of `text`, `raw`, `url` and `data`, not several",
                ));
            }
        }
        if let Some(data) = &part.data {
            if !answers(data) {
                texts.push(Cow::Owned(data.to_string()));
                continue;
            }
            let more = data_answers(data, &format!("{path}/data"))?;
            let all = answered.get_or_insert_with(Answers::default);
            all.results.extend(more.results);
            all.approvals.extend(more.approvals);
        } else if let Some(text) = &part.text {
            texts.push(Cow::Borrowed(text));
        } else if let Some(attachment) = file(part) {
            attachments.push(attachment);
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

/// Whether a data part answers pending calls: an object with `results` or `approvals`.
fn answers(data: &Value) -> bool {
    data.as_object()
        .is_some_and(|data| data.contains_key("results") || data.contains_key("approvals"))
}

/// A data part's answers, or invalid params at `path`.
fn data_answers(data: &Value, path: &str) -> Result<Answers, RpcError> {
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
            error.field(),
            Some("message.parts[1].data.results[0].toolCallId")
        );
        let error = decode(
            &message(&json!([{"data": {"results": [], "note": 1}}])),
            &[],
        )
        .unwrap_err();
        assert!(error.message.contains("`note`"), "{}", error.message);
        let error = decode(&message(&json!([{"metadata": {}}])), &[]).unwrap_err();
        assert_eq!(error.field(), Some("message.parts[0]"));
        let error = decode(&message(&json!([])), &[]).unwrap_err();
        assert_eq!(error.field(), Some("message.parts"));
    }

    /// DM-PART-001: a part carries exactly one of text, file (bytes or URL) and data.
    #[test]
    fn a_part_is_one_of_text_file_or_data() {
        for part in [
            json!({"text": "a", "data": {"k": 1}}),
            json!({"raw": "AA==", "url": "https://example.com/a"}),
            json!({"text": "a", "url": "https://example.com/a"}),
        ] {
            let error = decode(&message(&json!([part])), &[]).unwrap_err();
            assert_eq!(error.code, INVALID_PARAMS, "{part}");
            assert!(error.message.contains("not several"), "{}", error.message);
            assert_eq!(error.field(), Some("message.parts[0]"));
        }
    }

    /// The card's `application/json` input mode: JSON that answers no call is the user's,
    /// read as its JSON text among the message's texts.
    #[test]
    fn other_json_is_what_the_user_says() {
        let input = decode(
            &message(&json!([
                {"text": "rate this"}, {"data": {"k": 1}}, {"data": [1, 2]},
                {"data": {"result": []}},
            ])),
            &[],
        )
        .unwrap();
        let TurnInput::User(user) = input else {
            panic!("{input:?}")
        };
        assert_eq!(user.content, "rate this\n{\"k\":1}\n[1,2]\n{\"result\":[]}");
    }
}
