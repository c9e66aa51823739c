//! [`OpenAiModel`]: any OpenAI-compatible Chat Completions endpoint, streamed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde_json::{Value, json};

use crate::error::ModelError;
use crate::message::{AssistantContent, Attachment, Message, StopReason, Usage};
use crate::model::{Model, ModelEvent, ModelRequest};

/// A model behind an OpenAI-compatible `/chat/completions` endpoint (OpenAI, and the many
/// servers that speak its wire format), streamed over SSE: text, tool calls with streamed
/// arguments, `reasoning_content` as thinking, and usage. A request's system prompt goes first,
/// as a `system` message.
///
/// A user message with [`Attachment`]s is sent as content parts: its text, then images as data
/// URLs, wav and mp3 audio as `input_audio` (audio of other types is left out, and a text part
/// says so), text documents as text after their URI, binary ones as `file`. A tool message
/// takes only text, so the attachments of tool results follow them, in one user message. A
/// message without attachments is plain text content. An answer the provider's content filter
/// stopped (`finish_reason: "content_filter"`), or that streamed a `refusal`, stops with
/// [`StopReason::Refusal`].
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
        let mut messages: Vec<Value> = system.into_iter().collect();
        // The attachments of the tool results since the last other message: a tool message
        // takes only text, so they follow those results in a user message.
        let mut attached: Vec<Value> = Vec::new();
        for message in &request.messages {
            if let Message::ToolResult(result) = message {
                if !result.attachments.is_empty() {
                    attached.push(text_part(&format!(
                        "Attached to the result of tool call {} ({}):",
                        result.tool_call_id, result.tool_name
                    )));
                    attached.extend(result.attachments.iter().map(part));
                }
            } else if !attached.is_empty() {
                let parts = std::mem::take(&mut attached);
                messages.push(json!({"role": "user", "content": parts}));
            }
            messages.extend(wire_message(message));
        }
        if !attached.is_empty() {
            messages.push(json!({"role": "user", "content": attached}));
        }
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
        Message::User(user) if user.attachments.is_empty() => {
            Some(json!({"role": "user", "content": user.content}))
        }
        Message::User(user) => {
            let text = Some(&user.content)
                .filter(|text| !text.is_empty())
                .map(|text| text_part(text));
            let parts: Vec<Value> = text
                .into_iter()
                .chain(user.attachments.iter().map(part))
                .collect();
            Some(json!({"role": "user", "content": parts}))
        }
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

fn text_part(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// An attachment as a content part: images as data URLs (or their URI when they come without
/// data), wav and mp3 audio as `input_audio`, text documents as text after their URI, binary
/// ones as `file`. Audio of another type becomes a text part saying it was left out.
fn part(attachment: &Attachment) -> Value {
    match attachment {
        Attachment::Image {
            data,
            mime_type,
            uri,
        } => {
            let url = match uri {
                Some(uri) if data.is_empty() => uri.clone(),
                _ => format!("data:{mime_type};base64,{data}"),
            };
            json!({"type": "image_url", "image_url": {"url": url}})
        }
        Attachment::Audio { data, mime_type } => match audio_format(mime_type) {
            Some(format) => {
                json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
            }
            None => text_part(&format!(
                "[an audio clip of type {mime_type} was left out: only wav and mp3 can be sent]"
            )),
        },
        Attachment::Resource {
            uri,
            text: Some(text),
            ..
        } => text_part(&format!("{uri}\n{text}")),
        Attachment::Resource {
            uri,
            mime_type,
            blob: Some(blob),
            ..
        } => {
            let mime_type = mime_type.as_deref().unwrap_or("application/octet-stream");
            json!({"type": "file", "file": {
                "file_data": format!("data:{mime_type};base64,{blob}"),
                "filename": file_name(uri),
            }})
        }
        Attachment::Resource { uri, .. } => text_part(uri),
    }
}

/// The `input_audio` format of audio of `mime_type`: `wav` or `mp3`, the two Chat Completions
/// takes.
fn audio_format(mime_type: &str) -> Option<&'static str> {
    let essence = mime_type.split(';').next().unwrap_or_default().trim();
    match essence.to_ascii_lowercase().as_str() {
        "audio/wav" | "audio/wave" | "audio/x-wav" | "audio/vnd.wave" => Some("wav"),
        "audio/mpeg" | "audio/mp3" | "audio/mpeg3" | "audio/x-mpeg-3" => Some("mp3"),
        _ => None,
    }
}

/// The last segment of `uri`'s path (`report.pdf`), or `uri` itself if it has none.
fn file_name(uri: &str) -> &str {
    let path = uri.split(['?', '#']).next().unwrap_or_default();
    path.rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .unwrap_or(uri)
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

    fn provider(&self) -> &str {
        "openai"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let mut http = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .json(&self.body(&request));
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
        }
        // The call's trace context (the agent loop makes its `chat` span current while the
        // model makes its stream), as the application's propagator writes it: `traceparent`
        // and `tracestate` with OpenTelemetry's W3C propagator; nothing without one.
        let mut context = HashMap::new();
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&opentelemetry::Context::current(), &mut context);
        });
        for (name, value) in context {
            http = http.header(name, value);
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
                let retry_after = retry_after(response.headers());
                let body = response.text().await.unwrap_or_default();
                let error = ModelError::Status {
                    status: status.as_u16(),
                    body: body.chars().take(500).collect(),
                    retry_after,
                };
                return stream::iter([ModelEvent::Error(error)]).boxed();
            }
            let bytes = response.bytes_stream();
            stream::unfold(
                (
                    bytes,
                    Decoder::default(),
                    VecDeque::<ModelEvent>::new(),
                    false,
                ),
                |(mut bytes, mut decoder, mut pending, mut finished)| async move {
                    loop {
                        if let Some(event) = pending.pop_front() {
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
                                pending.push_back(ModelEvent::Error(error));
                                finished = true;
                            }
                            None => {
                                pending.push_back(ModelEvent::Error(ModelError::Ended));
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

/// How long an error answer asks to wait: OpenAI's `retry-after-ms`, else `Retry-After` in
/// seconds or as an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|ms| ms.trim().parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = header("retry-after")?.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
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
    /// Whether the model streamed a `refusal`.
    refused: bool,
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
    fn feed(&mut self, bytes: &[u8], out: &mut VecDeque<ModelEvent>) -> bool {
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
                let stop_reason = match self.stop_reason.unwrap_or(StopReason::Stop) {
                    StopReason::Stop if self.refused => StopReason::Refusal,
                    other => other,
                };
                out.push_back(ModelEvent::Done {
                    stop_reason,
                    usage: self.usage,
                });
                return true;
            }
            let chunk: Value = match serde_json::from_str(data) {
                Ok(chunk) => chunk,
                Err(error) => {
                    out.push_back(ModelEvent::Error(ModelError::Malformed {
                        line: data.to_owned(),
                        source: Arc::new(error),
                    }));
                    return true;
                }
            };
            if let Some(error) = chunk.get("error") {
                out.push_back(ModelEvent::Error(ModelError::Provider(error.to_string())));
                return true;
            }
            if let Err(error) = self.chunk(&chunk, out) {
                out.push_back(ModelEvent::Error(error));
                return true;
            }
        }
        false
    }

    fn chunk(&mut self, chunk: &Value, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
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
            out.push_back(ModelEvent::ThinkingDelta(thinking.to_owned()));
        }
        if let Some(refusal) = delta
            .get("refusal")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.refused = true;
            self.switch(Block::Text, out);
            out.push_back(ModelEvent::TextDelta(refusal.to_owned()));
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.switch(Block::Text, out);
            out.push_back(ModelEvent::TextDelta(text.to_owned()));
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
                out.push_back(ModelEvent::ToolCallStart { id, name });
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
                out.push_back(ModelEvent::ToolCallDelta(arguments.to_owned()));
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.close(out);
            self.stop_reason = Some(match reason {
                "length" => StopReason::Length,
                "tool_calls" | "function_call" => StopReason::ToolCalls,
                "content_filter" => StopReason::Refusal,
                _ => StopReason::Stop,
            });
        }
        Ok(())
    }

    fn switch(&mut self, block: Block, out: &mut VecDeque<ModelEvent>) {
        if self.open.as_ref() == Some(&block) {
            return;
        }
        self.close(out);
        out.push_back(match block {
            Block::Text => ModelEvent::TextStart,
            Block::Thinking => ModelEvent::ThinkingStart,
            Block::Tool(_) => return,
        });
        self.open = Some(block);
    }

    fn close(&mut self, out: &mut VecDeque<ModelEvent>) {
        match self.open.take() {
            Some(Block::Text) => out.push_back(ModelEvent::TextEnd),
            Some(Block::Thinking) => out.push_back(ModelEvent::ThinkingEnd),
            Some(Block::Tool(_)) => out.push_back(ModelEvent::ToolCallEnd),
            None => {}
        }
    }
}
