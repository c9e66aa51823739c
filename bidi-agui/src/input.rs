//! The request: a `RunAgentInput` read into the session to open and the turn to run, and the
//! answers its `resume` gives the thread's interrupts.

use super::*;

/// `RunAgentInput`: what `HttpAgent` posts. Other fields (`context`, `forwardedProps`, ...) are
/// read and ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunAgentInput {
    /// The thread: the session.
    pub(super) thread_id: String,
    /// The run.
    pub(super) run_id: String,
    /// The client's state, echoed as `STATE_SNAPSHOT`.
    #[serde(default)]
    pub(super) state: Option<Value>,
    /// The conversation as the client has it.
    pub(super) messages: Vec<InputMessage>,
    /// The client's (frontend) tools.
    #[serde(default)]
    pub(super) tools: Vec<InputTool>,
    /// Answers to the thread's interrupts.
    #[serde(default)]
    pub(super) resume: Option<Vec<ResumeEntry>>,
    /// The AG-UI version the client speaks: `@ag-ui/client` 1.0 and later send it, older
    /// clients (CopilotKit's) do not.
    #[serde(default)]
    pub(super) protocol_version: Option<String>,
}

/// The answer to an interrupt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResumeEntry {
    pub(super) interrupt_id: String,
    pub(super) status: ResumeStatus,
    #[serde(default)]
    pub(super) payload: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// The input's messages as they came, for the run's `MESSAGES_SNAPSHOT`.
#[derive(Deserialize)]
pub(super) struct RawMessages {
    pub(super) messages: Vec<Value>,
}

/// A message of the input, tagged by `role`.
#[derive(Debug, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub(super) enum InputMessage {
    /// Instructions from the application's developer: part of the system prompt.
    Developer { content: String },
    /// Instructions: part of the system prompt.
    System { content: String },
    /// What the agent answered.
    #[serde(rename_all = "camelCase")]
    Assistant {
        #[serde(default)]
        content: Option<String>,
        #[serde(default)]
        tool_calls: Vec<InputToolCall>,
    },
    /// What the user said.
    User { content: Content },
    /// A tool call's result.
    #[serde(rename_all = "camelCase")]
    Tool {
        content: Content,
        tool_call_id: String,
        #[serde(default)]
        error: Option<String>,
    },
    /// Shown to the user only: not part of the conversation the model sees.
    Activity {},
    /// The agent's reasoning: not sent back to the model.
    Reasoning {},
}

/// A message's content: text, or parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// One part of a message's content.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(super) enum Part {
    Text {
        text: String,
    },
    Image {
        source: Source,
    },
    Audio {
        source: Source,
    },
    Video {},
    #[serde(rename_all = "camelCase")]
    Document {
        source: Source,
        #[serde(default)]
        id: Option<String>,
    },
}

/// Where a media part's bytes are.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(super) enum Source {
    /// Inline, base64.
    #[serde(rename_all = "camelCase")]
    Data { value: String, mime_type: String },
    /// At a URL.
    #[serde(rename_all = "camelCase")]
    Url {
        value: String,
        #[serde(default)]
        mime_type: Option<String>,
    },
    /// At the provider: this server cannot read it.
    File {},
}

#[derive(Debug, Deserialize)]
pub(super) struct InputToolCall {
    id: String,
    function: InputFunction,
}

#[derive(Debug, Deserialize)]
pub(super) struct InputFunction {
    name: String,
    arguments: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct InputTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: Option<Value>,
}

pub(super) fn invalid(message: impl Into<String>, path: &str) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, Code::InvalidInput, message).at(path)
}

impl Content {
    /// The text and attachments of the content at `path`.
    fn read(self, path: &str) -> Result<(String, Vec<Attachment>), Failure> {
        let parts = match self {
            Self::Text(text) => return Ok((text, Vec::new())),
            Self::Parts(parts) => parts,
        };
        let mut texts = Vec::new();
        let mut attachments = Vec::new();
        for (index, part) in parts.into_iter().enumerate() {
            let at = || format!("{path}/{index}");
            let unsupported =
                |what: &str| invalid(format!("{what} parts are not supported here"), &at());
            match part {
                Part::Text { text } => texts.push(text),
                Part::Image { source } => attachments.push(match source {
                    Source::Data { value, mime_type } => Attachment::image(value, mime_type),
                    Source::Url { value, mime_type } => Attachment::Image {
                        data: String::new(),
                        mime_type: mime_type.unwrap_or_default(),
                        uri: Some(value),
                    },
                    Source::File {} => return Err(unsupported("provider file")),
                }),
                Part::Audio { source } => match source {
                    Source::Data { value, mime_type } => {
                        attachments.push(Attachment::audio(value, mime_type));
                    }
                    _ => return Err(unsupported("audio by reference")),
                },
                Part::Document { source, id } => attachments.push(match source {
                    Source::Data { value, mime_type } => Attachment::blob_resource(
                        id.unwrap_or_else(|| "document".to_owned()),
                        value,
                        mime_type,
                    ),
                    Source::Url { value, mime_type } => Attachment::Resource {
                        uri: value,
                        mime_type,
                        text: None,
                        blob: None,
                    },
                    Source::File {} => return Err(unsupported("provider file")),
                }),
                Part::Video {} => return Err(unsupported("video")),
            }
        }
        Ok((texts.join("\n"), attachments))
    }
}

/// A tool call's arguments: JSON, or the text as it is when it is not.
pub(super) fn arguments(text: String) -> Value {
    if text.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The result of the call `tool_call_id` of `tool_name`.
pub(super) fn tool_result(
    tool_call_id: String,
    tool_name: String,
    content: Content,
    error: Option<String>,
    path: &str,
) -> Result<ToolResultMessage, Failure> {
    let (mut text, attachments) = content.read(&format!("{path}/content"))?;
    let is_error = error.is_some();
    if text.is_empty()
        && let Some(error) = error
    {
        text = error;
    }
    Ok(ToolResultMessage {
        tool_call_id,
        tool_name,
        content: text,
        details: None,
        is_error,
        attachments,
    })
}

/// A new thread's session and its first input: the messages before the last user message are
/// its history (system and developer messages its system prompt), the input's tools its remote
/// tools, and the last user message the input.
///
/// Long by design: one pass over the thread's messages, in order.
pub(super) fn create(
    agent: &LlmAgent,
    messages: Vec<InputMessage>,
    tools: Vec<InputTool>,
) -> Result<(LlmSession, TurnInput), Failure> {
    let Some(last) = messages.len().checked_sub(1) else {
        return Err(invalid(
            "a new thread needs a user message to answer",
            "/messages",
        ));
    };
    if !matches!(messages[last], InputMessage::User { .. }) {
        return Err(invalid(
            "the last message of a new thread is the user message to answer",
            &format!("/messages/{last}"),
        ));
    }
    let mut prompt = Vec::new();
    let mut history = Vec::new();
    let mut input = None;
    for (index, message) in messages.into_iter().enumerate() {
        let path = format!("/messages/{index}");
        match message {
            InputMessage::Developer { content } | InputMessage::System { content } => {
                prompt.push(content);
            }
            InputMessage::User { content } => {
                let (text, attachments) = content.read(&format!("{path}/content"))?;
                let user = UserMessage::new(text).attachments(attachments);
                if index == last {
                    input = Some(TurnInput::User(user));
                } else {
                    history.push(Message::User(user));
                }
            }
            InputMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::new();
                if let Some(text) = content.filter(|text| !text.is_empty()) {
                    blocks.push(AssistantContent::Text { text });
                }
                for call in tool_calls {
                    blocks.push(AssistantContent::ToolCall(ToolCall {
                        id: call.id,
                        name: call.function.name,
                        arguments: arguments(call.function.arguments),
                    }));
                }
                history.push(Message::Assistant(AssistantMessage {
                    content: blocks,
                    ..AssistantMessage::default()
                }));
            }
            InputMessage::Tool {
                content,
                tool_call_id,
                error,
            } => {
                let name = history.iter().rev().find_map(|message| match message {
                    Message::Assistant(assistant) => assistant
                        .tool_calls()
                        .find(|call| call.id == tool_call_id)
                        .map(|call| call.name.clone()),
                    _ => None,
                });
                let Some(name) = name else {
                    return Err(invalid(
                        format!(
                            "the tool message answers `{}`, which no assistant message before it calls",
                            cap(&tool_call_id)
                        ),
                        &format!("{path}/toolCallId"),
                    ));
                };
                history.push(Message::ToolResult(tool_result(
                    tool_call_id,
                    name,
                    content,
                    error,
                    &path,
                )?));
            }
            InputMessage::Activity {} | InputMessage::Reasoning {} => {}
        }
    }
    let context = Context {
        system_prompt: (!prompt.is_empty()).then(|| prompt.join("\n\n")),
        messages: history,
        tools: tools
            .into_iter()
            .map(|tool| ToolSpec {
                name: tool.name,
                description: tool.description,
                parameters: tool
                    .parameters
                    .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
            })
            .collect(),
    };
    let state = agent
        .new_session(context)
        .map_err(|error| invalid(error.to_string(), "/tools"))?;
    // `create` made sure the last message is the user's.
    let input = input.ok_or_else(|| invalid("no user message", "/messages"))?;
    Ok((state, input))
}

/// The input that goes on with an existing thread: the results of its pending frontend calls
/// (the `tool` messages that answer them) with the decisions on its calls waiting for approval,
/// or else the last message, a user message.
pub(super) fn resume(
    agent: &LlmAgent,
    state: &LlmSession,
    messages: Vec<InputMessage>,
    approvals: Vec<Approval>,
    waiting: WaitingCalls,
) -> Result<TurnInput, Failure> {
    let last = messages.len().checked_sub(1);
    let mut results = Vec::new();
    let mut user = None;
    let answers = |id: &str| !approvals.iter().any(|approval| approval.tool_call_id == id);
    for (index, message) in messages.into_iter().enumerate() {
        let path = format!("/messages/{index}");
        match message {
            InputMessage::Tool {
                content,
                tool_call_id,
                error,
            } => {
                let Some(call) = state
                    .pending_tool_calls
                    .iter()
                    .find(|call| call.id == tool_call_id && answers(&call.id))
                else {
                    continue; // The result of an earlier run's call.
                };
                let result = tool_result(tool_call_id, call.name.clone(), content, error, &path)?;
                results.retain(|earlier: &ToolResultMessage| {
                    earlier.tool_call_id != result.tool_call_id
                });
                results.push(result);
            }
            InputMessage::User { content } if Some(index) == last => {
                let (text, attachments) = content.read(&format!("{path}/content"))?;
                user = Some(UserMessage::new(text).attachments(attachments));
            }
            _ => {}
        }
    }
    if !approvals.is_empty() {
        let mut resume = Resume::new();
        resume.results = results;
        resume.approvals = approvals;
        return Ok(TurnInput::Resume(resume));
    }
    if !results.is_empty() {
        return Ok(TurnInput::ToolResults(results));
    }
    match user {
        Some(user) if state.pending_tool_calls.is_empty() => Ok(TurnInput::User(user)),
        Some(user) if waiting == WaitingCalls::SetAside => Ok(agent.set_aside(state, user)),
        None if state.pending_tool_calls.is_empty() => Err(invalid(
            "the last message is the user message to answer",
            &last.map_or_else(
                || "/messages".to_owned(),
                |last| format!("/messages/{last}"),
            ),
        )),
        _ => Err(invalid(
            format!(
                "the thread waits for the results of {}: send them as `tool` messages",
                state
                    .pending_tool_calls
                    .iter()
                    .map(|call| format!("`{}`", cap(&call.id)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "/messages",
        )),
    }
}

/// The `RUN_ERROR` code of input that leaves interrupts unanswered.
pub(super) const INTERRUPTS_PENDING: &str = "interrupts_pending";
/// The `RUN_ERROR` code of a `resume` naming no open interrupt.
pub(super) const NO_INTERRUPT: &str = "no_interrupt";

/// What a run's `resume` does with the thread's interrupts.
#[derive(Debug)]
pub(super) enum Answered {
    /// It answers every open interrupt (or there are none and it is empty): the decisions.
    Approvals(Vec<Approval>),
    /// The thread has no open interrupt, and every one named was answered by an earlier run:
    /// a resume sent again, which does nothing.
    Before,
    /// It does not fit: the run fails with this.
    Wrong { message: String, code: &'static str },
}

/// Checks `entries` against the interrupts open on the thread (its calls waiting for approval):
/// each must be answered, once; an answer to an interrupt that an earlier run answered is
/// allowed (resumes are idempotent), one to an interrupt the thread never had is not.
pub(super) fn interrupts(
    agent: &LlmAgent,
    state: &LlmSession,
    entries: &[ResumeEntry],
) -> Answered {
    let local = |name: &str| {
        agent
            .tools()
            .iter()
            .any(|tool| tool.name() == name && tool.is_local())
    };
    let open: Vec<&ToolCall> = state
        .pending_tool_calls
        .iter()
        .filter(|call| local(&call.name))
        .collect();
    let answered_before = |call_id: &str| {
        state.messages.iter().any(|message| {
            matches!(message, Message::ToolResult(result) if result.tool_call_id == call_id)
        })
    };
    let mut approvals: Vec<Approval> = Vec::new();
    let mut repeated = 0;
    for entry in entries {
        let call_id = entry
            .interrupt_id
            .strip_prefix(APPROVAL)
            .unwrap_or_default();
        if !open.iter().any(|call| call.id == call_id) {
            if !call_id.is_empty() && answered_before(call_id) {
                repeated += 1;
                continue;
            }
            return Answered::Wrong {
                message: format!(
                    "no interrupt `{}` is open on this thread",
                    cap(&entry.interrupt_id)
                ),
                code: NO_INTERRUPT,
            };
        }
        if approvals
            .iter()
            .any(|approval| approval.tool_call_id == call_id)
        {
            return Answered::Wrong {
                message: format!("interrupt `{}` is answered twice", cap(&entry.interrupt_id)),
                code: INTERRUPTS_PENDING,
            };
        }
        let payload = entry.payload.as_ref();
        let reason = payload
            .and_then(|payload| payload.get("reason"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let approved = entry.status == ResumeStatus::Resolved
            && payload
                .and_then(|payload| payload.get("approved"))
                .and_then(Value::as_bool)
                != Some(false);
        approvals.push(if approved {
            Approval::approve(call_id)
        } else if reason.is_empty() && entry.status == ResumeStatus::Cancelled {
            Approval::deny(call_id, "the user cancelled the request")
        } else {
            Approval::deny(call_id, reason)
        });
    }
    if open.is_empty() && repeated > 0 {
        return Answered::Before;
    }
    let unanswered: Vec<String> = open
        .iter()
        .filter(|call| {
            !approvals
                .iter()
                .any(|approval| approval.tool_call_id == call.id)
        })
        .map(|call| format!("`{APPROVAL}{}`", cap(&call.id)))
        .collect();
    if unanswered.is_empty() {
        Answered::Approvals(approvals)
    } else {
        Answered::Wrong {
            message: format!(
                "the thread waits for answers to interrupts {}: resume them first",
                unanswered.join(", ")
            ),
            code: INTERRUPTS_PENDING,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bidi_llm::Status;
    use serde_json::json;

    use super::*;
    use crate::encoder::tests::call;

    #[test]
    fn input_messages_become_a_session_history_and_its_input() {
        let input: RunAgentInput = serde_json::from_value(json!({
            "threadId": "t1", "runId": "r1", "state": null, "context": [], "forwardedProps": {},
            "messages": [
                {"id": "s", "role": "system", "content": "Be brief."},
                {"id": "u1", "role": "user", "content": "pick one"},
                {"id": "a1", "role": "assistant", "content": "ok",
                 "toolCalls": [{"id": "c1", "type": "function",
                                "function": {"name": "pick", "arguments": "{\"a\":1}"}}]},
                {"id": "t", "role": "tool", "toolCallId": "c1", "content": "1"},
                {"id": "r", "role": "reasoning", "content": "hidden"},
                {"id": "u2", "role": "user", "content": [
                    {"type": "text", "text": "and"},
                    {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}}
                ]}
            ],
            "tools": [{"name": "ask", "description": "asks"}]
        }))
        .unwrap();
        assert!(input.state.is_none());
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let (state, turn) = create(&agent, input.messages, input.tools).unwrap();
        assert_eq!(state.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(state.messages.len(), 3);
        let Message::ToolResult(result) = &state.messages[2] else {
            panic!("{:?}", state.messages[2])
        };
        assert_eq!(
            (result.tool_name.as_str(), result.content.as_str()),
            ("pick", "1")
        );
        assert_eq!(state.tools[0].parameters["type"], "object");
        let TurnInput::User(user) = turn else {
            panic!("{turn:?}")
        };
        assert_eq!(user.content, "and");
        assert_eq!(user.attachments, [Attachment::image("AAAA", "image/png")]);
    }

    #[test]
    fn a_tool_message_answering_nothing_is_refused_with_its_path() {
        let messages: Vec<InputMessage> = serde_json::from_value(json!([
            {"id": "t", "role": "tool", "toolCallId": "c9", "content": "1"},
            {"id": "u", "role": "user", "content": "hi"}
        ]))
        .unwrap();
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let failure = create(&agent, messages, vec![]).unwrap_err();
        assert_eq!(failure.status, StatusCode::BAD_REQUEST);
        assert_eq!(failure.path.as_deref(), Some("/messages/0/toolCallId"));
    }

    #[test]
    fn a_resumed_thread_takes_the_results_of_its_pending_calls() {
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([])).build();
        let state = LlmSession {
            pending_tool_calls: vec![call("c1")],
            ..LlmSession::default()
        };
        let messages: Vec<InputMessage> = serde_json::from_value(json!([
            {"id": "u", "role": "user", "content": "hi"},
            {"id": "t", "role": "tool", "toolCallId": "c1", "content": "", "error": "denied"}
        ]))
        .unwrap();
        let set_aside = WaitingCalls::SetAside;
        let resumed = resume(&agent, &state, messages, Vec::new(), set_aside).unwrap();
        let TurnInput::ToolResults(results) = resumed else {
            panic!()
        };
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].tool_name, "pick");
        assert!(results[0].is_error);
        assert_eq!(results[0].content, "denied");

        let user = || -> Vec<InputMessage> {
            serde_json::from_value(json!([{"id": "u", "role": "user", "content": "hi"}])).unwrap()
        };
        let failure = resume(&agent, &state, user(), Vec::new(), WaitingCalls::Refuse).unwrap_err();
        assert!(failure.message.contains("`c1`"), "{}", failure.message);
        // Set aside: the call's error result, then the message.
        let TurnInput::Resume(resumed) =
            resume(&agent, &state, user(), Vec::new(), set_aside).unwrap()
        else {
            panic!()
        };
        assert_eq!(resumed.results[0].tool_call_id, "c1");
        assert!(resumed.results[0].is_error);
        assert_eq!(resumed.message.map(|m| m.content).as_deref(), Some("hi"));
    }

    /// An agent whose `wipe` needs approval, and a thread waiting on calls `w1` and `w2` of it
    /// (and `r1` of the client's `pick`), after `w0` was answered by an earlier run.
    fn waiting() -> (LlmAgent, LlmSession) {
        let wipe = Tool::dynamic(
            "wipe",
            "Wipe",
            "Wipes",
            json!({"type": "object"}),
            |_, _| futures_util::stream::empty(),
        )
        .needs_approval();
        let agent = LlmAgent::builder("a", bidi_llm::testing::ScriptedModel::new([]))
            .tool(wipe)
            .build();
        let wipe_call = |id: &str| ToolCall {
            id: id.into(),
            name: "wipe".into(),
            arguments: json!({}),
        };
        let state = LlmSession {
            status: Status::AwaitingToolExecution,
            pending_tool_calls: vec![call("r1"), wipe_call("w1"), wipe_call("w2")],
            messages: vec![Message::ToolResult(ToolResultMessage {
                tool_call_id: "w0".into(),
                tool_name: "wipe".into(),
                content: "wiped".into(),
                details: None,
                is_error: false,
                attachments: Vec::new(),
            })]
            .into(),
            ..LlmSession::default()
        };
        (agent, state)
    }

    fn entry(id: &str, status: ResumeStatus, payload: Option<Value>) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: id.into(),
            status,
            payload,
        }
    }

    #[test]
    fn a_resume_must_answer_every_open_interrupt_once() {
        let (agent, state) = waiting();
        let wrong = |entries: &[ResumeEntry]| match interrupts(&agent, &state, entries) {
            Answered::Wrong { message, code } => (message, code),
            other => panic!("{other:?}"),
        };
        let (message, code) = wrong(&[]);
        assert_eq!(code, INTERRUPTS_PENDING);
        assert!(
            message.contains("`approval-w1`, `approval-w2`"),
            "{message}"
        );
        let (message, _) = wrong(&[entry("approval-w1", ResumeStatus::Resolved, None)]);
        assert!(
            message.contains("`approval-w2`") && !message.contains("w1"),
            "{message}"
        );
        let twice = [
            entry("approval-w1", ResumeStatus::Resolved, None),
            entry("approval-w1", ResumeStatus::Cancelled, None),
        ];
        assert!(wrong(&twice).0.contains("answered twice"));
        // A remote call is not an interrupt, nor is a made-up id.
        assert_eq!(
            wrong(&[entry("approval-r1", ResumeStatus::Resolved, None)]).1,
            NO_INTERRUPT
        );
        assert_eq!(
            wrong(&[entry("w1", ResumeStatus::Resolved, None)]).1,
            NO_INTERRUPT
        );

        let answers = [
            entry(
                "approval-w1",
                ResumeStatus::Resolved,
                Some(json!({"approved": false, "reason": "no"})),
            ),
            entry("approval-w2", ResumeStatus::Cancelled, None),
            // Answered by an earlier run: allowed along with the open ones.
            entry("approval-w0", ResumeStatus::Resolved, None),
        ];
        let Answered::Approvals(approvals) = interrupts(&agent, &state, &answers) else {
            panic!()
        };
        assert_eq!(
            approvals,
            [
                Approval::deny("w1", "no"),
                Approval::deny("w2", "the user cancelled the request")
            ]
        );
        let answers = [
            entry(
                "approval-w2",
                ResumeStatus::Resolved,
                Some(json!({"approved": true})),
            ),
            entry("approval-w1", ResumeStatus::Resolved, None),
        ];
        let Answered::Approvals(approvals) = interrupts(&agent, &state, &answers) else {
            panic!()
        };
        assert_eq!(
            approvals,
            [Approval::approve("w2"), Approval::approve("w1")]
        );
    }

    #[test]
    fn a_resume_of_interrupts_answered_before_does_nothing() {
        let (agent, mut state) = waiting();
        state.pending_tool_calls.clear();
        state.status = Status::Completed;
        let again = [entry("approval-w0", ResumeStatus::Resolved, None)];
        assert!(matches!(
            interrupts(&agent, &state, &again),
            Answered::Before
        ));
        let unknown = [entry("approval-w9", ResumeStatus::Resolved, None)];
        assert!(matches!(
            interrupts(&agent, &state, &unknown),
            Answered::Wrong {
                code: NO_INTERRUPT,
                ..
            }
        ));
        // No resume, nothing open: a plain run.
        assert!(matches!(interrupts(&agent, &state, &[]), Answered::Approvals(a) if a.is_empty()));
    }
}
