//! [`OpenAiModel`]: any OpenAI-compatible Chat Completions endpoint, streamed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde_json::{Value, json};

use crate::error::ModelError;
use crate::message::{AssistantContent, Message, StopReason, Usage};
use crate::model::{Model, ModelEvent, ModelRequest};

/// A model behind an OpenAI-compatible `/chat/completions` endpoint (OpenAI, and the many
/// servers that speak its wire format), streamed over SSE: text, tool calls with streamed
/// arguments, `reasoning_content` as thinking, and usage. A request's system prompt goes first,
/// as a `system` message.
///
/// An HTTP error status, a malformed SSE line, a tool call without its `index` or `id`, or a
/// connection that drops before `[DONE]` ends the answer with [`ModelEvent::Error`]; the loop
/// keeps the partial output. Its [`name`](Model::name) is the model's.
///
/// ```no_run
/// use bidi_llm::{LlmAgent, OpenAiModel};
///
/// let model = OpenAiModel::new("https://api.openai.com/v1", "gpt-4o-mini")
///     .api_key(std::env::var("OPENAI_API_KEY").unwrap_or_default());
/// let agent = LlmAgent::builder("assistant", model).max_turns(8).build();
/// # drop(agent);
/// ```
#[derive(Clone)]
pub struct OpenAiModel {
    client: reqwest::Client,
    base_url: String,
    model: String,
    api_key: Option<String>,
}

impl OpenAiModel {
    /// `model` at `base_url` (the part before `/chat/completions`).
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            client: reqwest::Client::new(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            model: model.into(),
            api_key: None,
        }
    }

    /// Sends `key` as the bearer token.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into()).filter(|key| !key.is_empty());
        self
    }

    /// The request body for `request`.
    fn body(&self, request: &ModelRequest) -> Value {
        let system = request
            .system_prompt
            .as_ref()
            .map(|prompt| json!({"role": "system", "content": prompt}));
        let messages: Vec<Value> = system
            .into_iter()
            .chain(request.messages.iter().filter_map(wire_message))
            .collect();
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if let Some(temperature) = request.options.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(max_tokens) = request.options.max_tokens {
            body["max_tokens"] = json!(max_tokens);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({"type": "function", "function": {
                        "name": tool.name, "description": tool.description, "parameters": tool.parameters,
                    }})
                })
                .collect();
        }
        body
    }
}

/// A message as Chat Completions takes it; failed and aborted answers go back as what they
/// produced, so the model sees its own partial output.
fn wire_message(message: &Message) -> Option<Value> {
    let assistant = |content: &[AssistantContent]| {
        let text: String = content
            .iter()
            .filter_map(|block| match block {
                AssistantContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let calls: Vec<Value> = content
            .iter()
            .filter_map(|block| match block {
                AssistantContent::ToolCall(call) => Some(json!({
                    "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": match &call.arguments {
                        Value::String(raw) => raw.clone(),
                        other => other.to_string(),
                    }},
                })),
                _ => None,
            })
            .collect();
        let mut wire = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
        if !calls.is_empty() {
            wire["tool_calls"] = Value::Array(calls);
        }
        wire
    };
    match message {
        Message::User(user) => Some(json!({"role": "user", "content": user.content})),
        Message::Assistant(message) => Some(assistant(&message.content)),
        Message::ToolResult(result) => Some(json!({
            "role": "tool", "tool_call_id": result.tool_call_id, "content": result.content,
        })),
        Message::Error(error) => error
            .partial
            .as_ref()
            .map(|partial| assistant(&partial.content)),
        Message::Aborted(aborted) => Some(assistant(&aborted.partial.content)),
    }
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl Model for OpenAiModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let mut http = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .json(&self.body(&request));
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
        }
        stream::once(async move {
            let response = match http.send().await {
                Ok(response) => response,
                Err(error) => {
                    let error = ModelError::Request(Arc::new(error));
                    return stream::iter([ModelEvent::Error(error)]).boxed();
                }
            };
            let status = response.status();
            if !status.is_success() {
                let body = response.text().await.unwrap_or_default();
                let error = ModelError::Status {
                    status: status.as_u16(),
                    body: body.chars().take(500).collect(),
                };
                return stream::iter([ModelEvent::Error(error)]).boxed();
            }
            let bytes = response.bytes_stream();
            stream::unfold(
                (bytes, Decoder::default(), Vec::<ModelEvent>::new(), false),
                |(mut bytes, mut decoder, mut pending, mut finished)| async move {
                    loop {
                        if !pending.is_empty() {
                            let event = pending.remove(0);
                            return Some((event, (bytes, decoder, pending, finished)));
                        }
                        if finished {
                            return None;
                        }
                        match bytes.next().await {
                            Some(Ok(chunk)) => {
                                finished = decoder.feed(&chunk, &mut pending);
                            }
                            Some(Err(error)) => {
                                let error = ModelError::Request(Arc::new(error));
                                pending.push(ModelEvent::Error(error));
                                finished = true;
                            }
                            None => {
                                pending.push(ModelEvent::Error(ModelError::Ended));
                                finished = true;
                            }
                        }
                    }
                },
            )
            .boxed()
        })
        .flatten()
        .boxed()
    }
}

/// Turns SSE bytes of Chat Completions chunks into model events.
#[derive(Debug, Default)]
struct Decoder {
    /// Bytes of an incomplete line.
    line: Vec<u8>,
    /// The block being streamed.
    open: Option<Block>,
    /// Tool calls by the provider's index: (id, name) once started.
    tools: BTreeMap<u64, (String, String)>,
    stop_reason: Option<StopReason>,
    usage: Usage,
}

#[derive(Debug, PartialEq)]
enum Block {
    Text,
    Thinking,
    Tool(u64),
}

impl Decoder {
    /// Decodes `bytes`; returns whether the stream is over (`[DONE]` or an error).
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> bool {
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches('\r');
            let Some(data) = line.strip_prefix("data:") else {
                // Blank separators, comments (":"), and other SSE fields carry nothing here.
                continue;
            };
            let data = data.trim_start();
            if data == "[DONE]" {
                self.close(out);
                out.push(ModelEvent::Done {
                    stop_reason: self.stop_reason.unwrap_or(StopReason::Stop),
                    usage: self.usage,
                });
                return true;
            }
            let chunk: Value = match serde_json::from_str(data) {
                Ok(chunk) => chunk,
                Err(error) => {
                    out.push(ModelEvent::Error(ModelError::Malformed {
                        line: data.to_owned(),
                        source: Arc::new(error),
                    }));
                    return true;
                }
            };
            if let Some(error) = chunk.get("error") {
                out.push(ModelEvent::Error(ModelError::Provider(error.to_string())));
                return true;
            }
            if let Err(error) = self.chunk(&chunk, out) {
                out.push(ModelEvent::Error(error));
                return true;
            }
        }
        false
    }

    fn chunk(&mut self, chunk: &Value, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            self.usage.input = count("prompt_tokens");
            self.usage.output = count("completion_tokens");
            self.usage.total_tokens = count("total_tokens");
            self.usage.cache_read = usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(());
        };
        let delta = &choice["delta"];
        if let Some(thinking) = delta
            .get("reasoning_content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.switch(Block::Thinking, out);
            out.push(ModelEvent::ThinkingDelta(thinking.to_owned()));
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.switch(Block::Text, out);
            out.push(ModelEvent::TextDelta(text.to_owned()));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).ok_or_else(|| {
                ModelError::Protocol(format!("a tool call delta without an `index`: {call}"))
            })?;
            if !self.tools.contains_key(&index) {
                let field = |pointer: &str, what: &str| {
                    call.pointer(pointer)
                        .and_then(Value::as_str)
                        .filter(|value| !value.is_empty())
                        .map(str::to_owned)
                        .ok_or_else(|| {
                            ModelError::Protocol(format!(
                                "tool call {index} starts without {what}: {call}"
                            ))
                        })
                };
                let id = field("/id", "an `id`")?;
                let name = field("/function/name", "a function `name`")?;
                self.close(out);
                self.tools.insert(index, (id.clone(), name.clone()));
                out.push(ModelEvent::ToolCallStart { id, name });
                self.open = Some(Block::Tool(index));
            }
            if let Some(arguments) = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
            {
                if self.open != Some(Block::Tool(index)) {
                    return Err(ModelError::Protocol(format!(
                        "arguments for tool call {index} after it ended"
                    )));
                }
                out.push(ModelEvent::ToolCallDelta(arguments.to_owned()));
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.close(out);
            self.stop_reason = Some(match reason {
                "length" => StopReason::Length,
                "tool_calls" | "function_call" => StopReason::ToolCalls,
                _ => StopReason::Stop,
            });
        }
        Ok(())
    }

    fn switch(&mut self, block: Block, out: &mut Vec<ModelEvent>) {
        if self.open.as_ref() == Some(&block) {
            return;
        }
        self.close(out);
        out.push(match block {
            Block::Text => ModelEvent::TextStart,
            Block::Thinking => ModelEvent::ThinkingStart,
            Block::Tool(_) => return,
        });
        self.open = Some(block);
    }

    fn close(&mut self, out: &mut Vec<ModelEvent>) {
        match self.open.take() {
            Some(Block::Text) => out.push(ModelEvent::TextEnd),
            Some(Block::Thinking) => out.push(ModelEvent::ThinkingEnd),
            Some(Block::Tool(_)) => out.push(ModelEvent::ToolCallEnd),
            None => {}
        }
    }
}
