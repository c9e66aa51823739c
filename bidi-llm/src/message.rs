//! Messages of a conversation: `role` tag, `camelCase` fields.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation, tagged by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "camelCase")]
#[non_exhaustive]
pub enum Message {
    /// What the user said.
    User(UserMessage),
    /// What the model answered.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    ToolResult(ToolResultMessage),
    /// A model call that failed, with what it had produced.
    Error(ErrorMessage),
    /// A model call that was cancelled, with what it had produced.
    Aborted(AbortedMessage),
}

/// What the user said: text, and images, audio or documents attached to it.
///
/// ```
/// use bidi_llm::{Attachment, UserMessage};
/// use serde_json::json;
///
/// let plain = UserMessage::new("hi");
/// assert_eq!(serde_json::to_value(&plain)?, json!({"content": "hi"}));
///
/// let with_image = UserMessage::new("What is this?").attachment(Attachment::image("iVBORw0K", "image/png"));
/// assert_eq!(
///     serde_json::to_value(&with_image)?,
///     json!({"content": "What is this?", "attachments": [
///         {"type": "image", "data": "iVBORw0K", "mimeType": "image/png"},
///     ]}),
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    /// The text.
    pub content: String,
    /// Images, audio and documents that go with the text, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

impl UserMessage {
    /// A user message saying `content`, without attachments.
    pub fn new(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            attachments: Vec::new(),
        }
    }

    /// Attaches `attachment`, after those attached so far.
    #[must_use]
    pub fn attachment(mut self, attachment: Attachment) -> Self {
        self.attachments.push(attachment);
        self
    }

    /// Attaches `attachments`, after those attached so far.
    #[must_use]
    pub fn attachments(mut self, attachments: impl IntoIterator<Item = Attachment>) -> Self {
        self.attachments.extend(attachments);
        self
    }
}

/// An image, audio clip or document that goes with a user message or a tool result: `type`
/// tag (`image`, `audio`, `resource`), `camelCase` fields. Binary content is base64 text.
///
/// ```
/// use bidi_llm::Attachment;
/// use serde_json::json;
///
/// let notes = Attachment::text_resource("file:///project/notes.md", "# Notes");
/// assert_eq!(
///     serde_json::to_value(&notes)?,
///     json!({"type": "resource", "uri": "file:///project/notes.md", "text": "# Notes"}),
/// );
/// let report = Attachment::blob_resource("file:///project/report.pdf", "JVBERi0x", "application/pdf");
/// let back: Attachment = serde_json::from_value(serde_json::to_value(&report)?)?;
/// assert_eq!(back, report);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
#[non_exhaustive]
pub enum Attachment {
    /// An image.
    Image {
        /// The image's bytes, base64.
        data: String,
        /// Its media type (`image/png`).
        mime_type: String,
        /// Where it comes from, if it has an address. A model is sent the address instead of
        /// the bytes when `data` is empty.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    /// An audio clip.
    Audio {
        /// The clip's bytes, base64.
        data: String,
        /// Its media type (`audio/wav`).
        mime_type: String,
    },
    /// A document inlined: text or a base64 blob, named by its URI. With neither, it only
    /// names the document.
    Resource {
        /// The document's URI (`file:///project/notes.md`).
        uri: String,
        /// Its media type, if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Its content, if it is text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Its bytes, base64, if it is binary.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
}

impl Attachment {
    /// An image: its bytes as base64 `data`, and its `mime_type` (`image/png`).
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image {
            data: data.into(),
            mime_type: mime_type.into(),
            uri: None,
        }
    }

    /// An audio clip: its bytes as base64 `data`, and its `mime_type` (`audio/wav`).
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// A text document named `uri`.
    pub fn text_resource(uri: impl Into<String>, text: impl Into<String>) -> Self {
        Self::Resource {
            uri: uri.into(),
            mime_type: None,
            text: Some(text.into()),
            blob: None,
        }
    }

    /// A binary document named `uri`: its bytes as base64 `blob`, and its `mime_type`
    /// (`application/pdf`).
    pub fn blob_resource(
        uri: impl Into<String>,
        blob: impl Into<String>,
        mime_type: impl Into<String>,
    ) -> Self {
        Self::Resource {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: None,
            blob: Some(blob.into()),
        }
    }

    /// The file at `url` of media type `media_type`, as front ends send files: its bytes when
    /// `url` is a base64 `data:` URL, else its address (an image the model fetches, a document
    /// it is told of). `name` names an inlined document that is neither image nor audio.
    ///
    /// ```
    /// use bidi_llm::Attachment;
    ///
    /// let inline = Attachment::from_url("data:image/png;base64,iVBORw0=", "image/png", "a.png");
    /// assert_eq!(inline, Attachment::image("iVBORw0=", "image/png"));
    /// let linked = Attachment::from_url("https://example.com/a.pdf", "application/pdf", "a.pdf");
    /// assert!(matches!(linked, Attachment::Resource { uri, .. } if uri == "https://example.com/a.pdf"));
    /// ```
    #[must_use]
    pub fn from_url(url: &str, media_type: &str, name: &str) -> Self {
        let inline = url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .map(|(_, data)| data);
        match (media_type.split('/').next(), inline) {
            (Some("image"), Some(data)) => Self::image(data, media_type),
            (Some("audio"), Some(data)) => Self::audio(data, media_type),
            (_, Some(data)) => Self::blob_resource(name, data, media_type),
            (Some("image"), None) => Self::Image {
                data: String::new(),
                mime_type: media_type.to_owned(),
                uri: Some(url.to_owned()),
            },
            (_, None) => Self::Resource {
                uri: url.to_owned(),
                mime_type: Some(media_type.to_owned()),
                text: None,
                blob: None,
            },
        }
    }
}

/// One block of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
#[non_exhaustive]
pub enum AssistantContent {
    /// Text for the user.
    Text {
        /// The text.
        text: String,
    },
    /// The model's reasoning.
    Thinking {
        /// The reasoning.
        thinking: String,
    },
    /// A call of a tool.
    ToolCall(ToolCall),
}

/// A call of a tool, as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    /// The call's id; its result names it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON.
    pub arguments: Value,
}

/// Why the model stopped: `stop`, `length`, `tool_calls` or `refusal` on the wire (`toolUse` is
/// read as `tool_calls`); the partial answer of a failed or cancelled call says `error` or
/// `aborted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// It finished its answer.
    #[default]
    Stop,
    /// It hit its output limit.
    Length,
    /// It called tools and waits for their results.
    #[serde(alias = "toolUse")]
    ToolCalls,
    /// It failed.
    Error,
    /// It was cancelled.
    Aborted,
    /// It declined to answer (a provider's content filter, say). The turn ends as after
    /// [`Stop`](Self::Stop).
    Refusal,
}

/// Token counts and their cost.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Input tokens read from the provider's cache.
    pub cache_read: u64,
    /// Input tokens written to the provider's cache.
    pub cache_write: u64,
    /// All tokens.
    pub total_tokens: u64,
    /// What they cost.
    pub cost: Cost,
}

/// The cost of a [`Usage`], in the provider's currency.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct Cost {
    /// Of the input tokens.
    pub input: f64,
    /// Of the output tokens.
    pub output: f64,
    /// Of the cache reads.
    pub cache_read: f64,
    /// Of the cache writes.
    pub cache_write: f64,
    /// In all.
    pub total: f64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.total += other.total;
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.total_tokens += other.total_tokens;
        self.cost += other.cost;
    }
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    /// Text, thinking and tool calls, in the order the model produced them.
    pub content: Vec<AssistantContent>,
    /// What this message used.
    #[serde(default)]
    pub usage: Usage,
    /// Why the model stopped.
    #[serde(default)]
    pub stop_reason: StopReason,
}

impl AssistantMessage {
    /// The tool calls, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|block| match block {
            AssistantContent::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The text blocks, joined.
    #[must_use]
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                AssistantContent::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The output, for the model.
    pub content: String,
    /// Structured details, for the application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Whether the call failed (bad arguments, a tool error).
    #[serde(default)]
    pub is_error: bool,
    /// Images, audio and documents the tool returned, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
}

/// A model call that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorMessage {
    /// What went wrong.
    pub error: String,
    /// What the model had produced before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<AssistantMessage>,
}

/// A model call that was cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AbortedMessage {
    /// What the model had produced before.
    pub partial: AssistantMessage,
}

impl Message {
    /// The `role` tag.
    #[must_use]
    pub fn role(&self) -> Role {
        match self {
            Self::User(_) => Role::User,
            Self::Assistant(_) => Role::Assistant,
            Self::ToolResult(_) => Role::ToolResult,
            Self::Error(_) => Role::Error,
            Self::Aborted(_) => Role::Aborted,
        }
    }
}

/// A message's role, as `message_start` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Role {
    /// [`Message::User`].
    User,
    /// [`Message::Assistant`].
    Assistant,
    /// [`Message::ToolResult`].
    ToolResult,
    /// [`Message::Error`].
    Error,
    /// [`Message::Aborted`].
    Aborted,
}
