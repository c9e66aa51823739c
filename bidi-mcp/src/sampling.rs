//! Sampling as a model: the MCP client's model, asked through `sampling/createMessage`, as the
//! [`HostModel`] of a call's connection, so that an agent inside an MCP host answers with the
//! host's model and needs none of its own (see [`McpServer::sampling`](super::McpServer::sampling)).
//!
//! A model request becomes one `sampling/createMessage`:
//!
//! - the system prompt, the temperature and the most tokens (`maxTokens` is required by MCP:
//!   [`DEFAULT_MAX_TOKENS`] when the session sets none);
//! - the conversation as MCP's sampling messages: a user's text and images and audio, the
//!   assistant's text (its thinking is its own), and tool calls as `tool_use` and their results
//!   as `tool_result` blocks when the client declared `sampling.tools` (SEP-1577), else as text
//!   saying which tool was called and what it answered. A call the conversation has no result
//!   for (a turn cut short) is left out, as MCP asks every `tool_use` to be answered;
//! - the agent's tools, when the client samples with tools; a client that does not gets no
//!   tools, and its model answers in text.
//!
//! The answer is streamed as one piece (MCP's sampling is not streamed): its text blocks, its
//! `tool_use` blocks as tool calls, and its `stopReason` (`endTurn`, `maxTokens`, `toolUse`).
//! The client's refusal (its user declined, say) is the model call's error, in the client's
//! words. The request rides the call's own stream (its originating request), and a model call
//! dropped before the answer (the turn cancelled) tells the client with
//! `notifications/cancelled`.
//!
//! MCP's next protocol version deprecates sampling (SEP-2577, as rmcp marks it); the 2025
//! versions every host speaks today have it.
#![expect(deprecated, reason = "MCP 2025-11-25's sampling, which hosts speak")]

use std::collections::HashSet;
use std::sync::Arc;

use bidi_llm::{
    AssistantContent, Attachment, HostModel, Message, Model, ModelError, ModelEvent, ModelRequest,
    StopReason, Usage,
};
use futures_util::stream::{BoxStream, StreamExt as _};
use rmcp::RoleServer;
use rmcp::model::{
    AudioContent, CancelledNotificationParam, ClientResult, ContentBlock, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, ImageContent, RequestId, Role,
    SamplingContent, SamplingMessage, SamplingMessageContentBlock, TextContent, Tool,
    ToolResultContent,
};
use rmcp::service::{OriginatingRequestId, Peer, PeerRequestOptions, RequestContext};
use serde_json::{Map, Value};

use super::CANCELLED;

/// The most tokens an answer may take when the session sets no `maxTokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The model of the client of `ctx`, if it declared sampling.
pub(super) fn host_model(ctx: &RequestContext<RoleServer>) -> Option<HostModel> {
    let capabilities = &ctx.peer.peer_info()?.capabilities;
    let sampling = capabilities.sampling.as_ref()?;
    Some(HostModel::new(Sampled {
        peer: ctx.peer.clone(),
        origin: ctx.id.clone(),
        tools: sampling.tools.is_some(),
    }))
}

/// The client's model, asked on behalf of the call `origin`.
struct Sampled {
    peer: Peer<RoleServer>,
    origin: RequestId,
    /// Whether the client samples with tools (SEP-1577).
    tools: bool,
}

impl Model for Sampled {
    fn name(&self) -> &str {
        "mcp-sampling"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let mut params = params(&request, self.tools);
        // The model call's span (current while the model makes its stream) goes with it.
        super::traced(&mut params);
        let (peer, origin) = (self.peer.clone(), self.origin.clone());
        let answer = async move {
            let events = match sample(&peer, origin, params).await {
                Ok(result) => events(result),
                Err(error) => vec![ModelEvent::Error(error)],
            };
            futures_util::stream::iter(events)
        };
        Box::pin(futures_util::stream::once(answer).flatten())
    }
}

/// Asks the client's model, on the stream of the call `origin`.
///
/// # Errors
///
/// The client's refusal, in its words; a client gone, or an answer that is not a message.
///
/// # Cancel safety
///
/// Dropped before the answer, it tells the client the request is cancelled.
async fn sample(
    peer: &Peer<RoleServer>,
    origin: RequestId,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, ModelError> {
    let mut request = CreateMessageRequest::new(params);
    request.extensions.insert(OriginatingRequestId(origin));
    let handle = peer
        .send_cancellable_request(request.into(), PeerRequestOptions::no_options())
        .await
        .map_err(|error| ModelError::other(format!("the MCP client cannot sample: {error}")))?;
    let mut pending = Pending(Some((peer.clone(), handle.id.clone())));
    let answer = handle.rx.await;
    pending.0 = None;
    match answer {
        Ok(Ok(ClientResult::CreateMessageResult(result))) => Ok(*result),
        Ok(Ok(_)) => Err(ModelError::Protocol(
            "the MCP client answered sampling with another result".to_owned(),
        )),
        Ok(Err(error)) => Err(ModelError::other(format!(
            "the MCP client did not sample: {}",
            refusal(&error)
        ))),
        Err(_) => Err(ModelError::Ended),
    }
}

/// What the client said when it refused: its error's message.
fn refusal(error: &rmcp::ServiceError) -> String {
    match error {
        rmcp::ServiceError::McpError(data) => data.message.to_string(),
        other => other.to_string(),
    }
}

/// A sampling request not answered yet: dropped so, it is cancelled.
struct Pending(Option<(Peer<RoleServer>, RequestId)>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some((peer, request_id)) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let reason = Some(CANCELLED.to_owned());
            let cancel = CancelledNotificationParam::new(Some(request_id), reason);
            drop(runtime.spawn(async move { peer.notify_cancelled(cancel).await }));
        }
    }
}

/// The `sampling/createMessage` of `request`; with `tools`, the client samples with tools.
fn params(request: &ModelRequest, tools: bool) -> CreateMessageRequestParams {
    let max_tokens = request.options.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let mut params = CreateMessageRequestParams::new(messages(request, tools), max_tokens);
    params.system_prompt.clone_from(&request.system_prompt);
    #[expect(clippy::cast_possible_truncation, reason = "a temperature is small")]
    let temperature = request.options.temperature.map(|t| t as f32);
    params.temperature = temperature;
    if tools && !request.tools.is_empty() {
        let specs = request.tools.iter().map(|spec| {
            let schema = match &spec.parameters {
                Value::Object(schema) => schema.clone(),
                _ => Map::new(),
            };
            Tool::new(
                spec.name.clone(),
                spec.description.clone(),
                Arc::new(schema),
            )
        });
        params.tools = Some(specs.collect());
    }
    params
}

/// The conversation of `request` as sampling messages (see the [module](self)).
fn messages(request: &ModelRequest, tools: bool) -> Vec<SamplingMessage> {
    let answered = paired(request);
    let mut messages: Vec<SamplingMessage> = Vec::with_capacity(request.messages.len());
    // Whether the last message holds tool results.
    let mut last_results = false;
    for message in &request.messages {
        let (role, mut blocks) = match message {
            Message::User(user) => {
                let mut blocks = text(&user.content);
                blocks.extend(user.attachments.iter().filter_map(attached));
                (Role::User, blocks)
            }
            Message::Assistant(assistant) => {
                (Role::Assistant, said(&assistant.content, &answered, tools))
            }
            Message::Aborted(aborted) => {
                let none = HashSet::new();
                (
                    Role::Assistant,
                    said(&aborted.partial.content, &none, tools),
                )
            }
            Message::Error(_) => continue,
            Message::ToolResult(result) if !answered.contains(result.tool_call_id.as_str()) => {
                continue;
            }
            Message::ToolResult(result) if tools => {
                let content = vec![ContentBlock::text(result.content.clone())];
                let mut block = ToolResultContent::new(result.tool_call_id.clone(), content);
                block.is_error = result.is_error.then_some(true);
                (
                    Role::User,
                    vec![SamplingMessageContentBlock::ToolResult(block)],
                )
            }
            Message::ToolResult(result) => {
                let said = format!("(`{}` answered: {})", result.tool_name, result.content);
                (Role::User, text(&said))
            }
            _ => continue,
        };
        if blocks.is_empty() {
            continue;
        }
        // The results of one answer's calls go in one message, as MCP's sampling has them.
        let results = matches!(message, Message::ToolResult(_)) && tools;
        match messages.last_mut() {
            Some(last) if results && last_results => {
                let empty = SamplingContent::Multiple(Vec::new());
                let mut merged = std::mem::replace(&mut last.content, empty).into_vec();
                merged.extend(blocks);
                last.content = merged.into();
            }
            _ => {
                let mut message = SamplingMessage::new(role, blocks.remove(0));
                if !blocks.is_empty() {
                    blocks.insert(0, message.content.into_vec().remove(0));
                    message.content = blocks.into();
                }
                messages.push(message);
            }
        }
        last_results = results;
    }
    messages
}

/// The ids of the tool calls of `request`'s conversation that have a result: MCP asks every
/// `tool_use` to be answered by a `tool_result`, and every result to answer a call.
fn paired(request: &ModelRequest) -> HashSet<&str> {
    let mut called = HashSet::new();
    let mut answered = HashSet::new();
    for message in &request.messages {
        match message {
            Message::Assistant(assistant) => {
                called.extend(assistant.tool_calls().map(|call| call.id.as_str()));
            }
            Message::ToolResult(result) => {
                answered.insert(result.tool_call_id.as_str());
            }
            _ => {}
        }
    }
    answered.retain(|id| called.contains(id));
    answered
}

/// `text` as a block, none if it is empty.
fn text(text: &str) -> Vec<SamplingMessageContentBlock> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![SamplingMessageContentBlock::Text(TextContent::new(text))]
    }
}

/// An attachment a model reads in a sampling message: images and audio.
fn attached(attachment: &Attachment) -> Option<SamplingMessageContentBlock> {
    match attachment {
        Attachment::Image {
            data, mime_type, ..
        } if !data.is_empty() => Some(SamplingMessageContentBlock::Image(ImageContent::new(
            data.clone(),
            mime_type.clone(),
        ))),
        Attachment::Audio { data, mime_type } => Some(SamplingMessageContentBlock::Audio(
            AudioContent::new(data.clone(), mime_type.clone()),
        )),
        _ => None,
    }
}

/// What the assistant said: its text, and its calls `answered` has results for, as tool uses
/// when the client samples with `tools`, else as text.
fn said(
    content: &[AssistantContent],
    answered: &HashSet<&str>,
    tools: bool,
) -> Vec<SamplingMessageContentBlock> {
    let mut blocks = Vec::with_capacity(content.len());
    for block in content {
        match block {
            AssistantContent::Text { text } if !text.is_empty() => {
                blocks.push(SamplingMessageContentBlock::Text(TextContent::new(
                    text.clone(),
                )));
            }
            AssistantContent::ToolCall(call) if answered.contains(call.id.as_str()) => {
                if tools {
                    let input = match &call.arguments {
                        Value::Object(input) => input.clone(),
                        _ => Map::new(),
                    };
                    blocks.push(SamplingMessageContentBlock::tool_use(
                        call.id.clone(),
                        call.name.clone(),
                        input,
                    ));
                } else {
                    let said = format!("(called `{}` with {})", call.name, call.arguments);
                    blocks.push(SamplingMessageContentBlock::Text(TextContent::new(said)));
                }
            }
            _ => {}
        }
    }
    blocks
}

/// The model events of the client's answer.
fn events(result: CreateMessageResult) -> Vec<ModelEvent> {
    if result.message.role != Role::Assistant {
        let error = "the MCP client's sampled message is not the assistant's";
        return vec![ModelEvent::Error(ModelError::Protocol(error.to_owned()))];
    }
    let mut events = Vec::new();
    let mut called = false;
    for block in result.message.content.into_vec() {
        match block {
            SamplingMessageContentBlock::Text(text) => {
                events.extend([
                    ModelEvent::TextStart,
                    ModelEvent::TextDelta(text.text),
                    ModelEvent::TextEnd,
                ]);
            }
            SamplingMessageContentBlock::ToolUse(call) => {
                called = true;
                events.extend([
                    ModelEvent::ToolCallStart {
                        id: call.id,
                        name: call.name,
                    },
                    ModelEvent::ToolCallDelta(Value::Object(call.input).to_string()),
                    ModelEvent::ToolCallEnd,
                ]);
            }
            // An image or audio answer has no place in an assistant's message.
            _ => {}
        }
    }
    let stop_reason = match result.stop_reason.as_deref() {
        Some("maxTokens") => StopReason::Length,
        Some("toolUse") => StopReason::ToolCalls,
        _ if called => StopReason::ToolCalls,
        _ => StopReason::Stop,
    };
    events.push(ModelEvent::Done {
        stop_reason,
        usage: Usage::default(),
    });
    events
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bidi_llm::ModelOptions;
    use serde_json::json;

    use super::*;

    /// A conversation: a question, an answer calling three tools (two answered, one not), the
    /// answered calls' results, a result of no call, and a failed answer.
    fn request() -> ModelRequest {
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "content": "Capitals?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "two calls"},
                {"type": "text", "text": "Looking."},
                {"type": "toolCall", "id": "a", "name": "capital", "arguments": {"country": "Peru"}},
                {"type": "toolCall", "id": "b", "name": "capital", "arguments": {"country": "Chad"}},
                {"type": "toolCall", "id": "d", "name": "capital", "arguments": {"country": "Mali"}},
            ]},
            {"role": "toolResult", "toolCallId": "a", "toolName": "capital", "content": "Lima"},
            {"role": "toolResult", "toolCallId": "b", "toolName": "capital", "content": "N'Djamena"},
            {"role": "toolResult", "toolCallId": "c", "toolName": "capital", "content": "Rome"},
            {"role": "error", "error": "the model failed"},
        ]))
        .unwrap();
        ModelRequest::new(messages, vec![])
            .with_system_prompt("Be brief.")
            .with_options(ModelOptions::new().temperature(0.5))
    }

    #[test]
    fn a_conversation_is_sampling_messages_with_tool_uses_answered() {
        let params = serde_json::to_value(params(&request(), true)).unwrap();
        assert_eq!(params["systemPrompt"], "Be brief.");
        assert_eq!(params["maxTokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(params["temperature"], 0.5);
        assert_eq!(
            params["messages"],
            json!([
                {"role": "user", "content": {"type": "text", "text": "Capitals?"}},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "a", "name": "capital", "input": {"country": "Peru"}},
                    {"type": "tool_use", "id": "b", "name": "capital", "input": {"country": "Chad"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "toolUseId": "a", "content": [{"type": "text", "text": "Lima"}]},
                    {"type": "tool_result", "toolUseId": "b", "content": [{"type": "text", "text": "N'Djamena"}]},
                ]},
            ]),
        );
    }

    #[test]
    fn without_tools_the_calls_and_results_are_text() {
        let params = serde_json::to_value(params(&request(), false)).unwrap();
        assert_eq!(
            params["messages"][1]["content"][1],
            json!({"type": "text", "text": "(called `capital` with {\"country\":\"Peru\"})"}),
        );
        assert_eq!(
            params["messages"][2]["content"],
            json!({"type": "text", "text": "(`capital` answered: Lima)"}),
        );
        assert_eq!(params["messages"].as_array().unwrap().len(), 4);
        assert!(params.get("tools").is_none());
    }

    fn answer(value: serde_json::Value) -> Vec<ModelEvent> {
        events(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn an_answer_is_text_and_tool_calls_and_its_stop_reason() {
        let told = answer(json!({
            "role": "assistant", "model": "m", "stopReason": "maxTokens",
            "content": {"type": "text", "text": "Paris"},
        }));
        assert!(matches!(&told[1], ModelEvent::TextDelta(text) if text == "Paris"));
        assert!(matches!(
            told.last(),
            Some(ModelEvent::Done {
                stop_reason: StopReason::Length,
                ..
            })
        ));
        let called = answer(json!({
            "role": "assistant", "model": "m",
            "content": [{"type": "tool_use", "id": "x", "name": "capital", "input": {"country": "Peru"}}],
        }));
        assert!(
            matches!(&called[0], ModelEvent::ToolCallStart { id, name } if id == "x" && name == "capital")
        );
        assert!(
            matches!(&called[1], ModelEvent::ToolCallDelta(args) if args == r#"{"country":"Peru"}"#)
        );
        assert!(matches!(
            called.last(),
            Some(ModelEvent::Done {
                stop_reason: StopReason::ToolCalls,
                ..
            })
        ));
        let user = answer(json!({
            "role": "user", "model": "m", "content": {"type": "text", "text": "?"},
        }));
        assert!(matches!(&user[..], [ModelEvent::Error(_)]));
    }
}
