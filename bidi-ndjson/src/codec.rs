//! The wire: one JSON object per line. The agent writes typed messages (`progress`, `question`,
//! `result`, ...); the host writes the optional `init`, the prompt, and `response`s. No I/O here.
//!
//! Replies carry `in_reply_to_id` whenever the message had an `id`, the correlation the
//! protocol proposes; `in_reply_to` is still the message's type, so agents that read only that
//! read them unchanged. `Question` and `Approval` carry the optional `id` too, so a handler
//! sees what it answers, and `Host` keeps a request's own id. A text prompt is one line: a
//! context on a second line could not be told from the next prompt, so such a prompt is
//! refused (JSON prompts carry both).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One message an agent wrote: its `type` and every other field.
///
/// ```
/// use bidi_ndjson::Message;
///
/// let message = Message::decode(br#"{"type":"question","id":"q1","question":"RS256?"}"#, "result");
/// assert_eq!(message.kind, "question");
/// assert_eq!(message.id(), Some(&serde_json::json!("q1")));
/// assert_eq!(message.fields["question"], "RS256?");
///
/// // A line that is not a JSON object with a `type` is plain text.
/// let plain = Message::decode(b"all done\n", "result");
/// assert_eq!((plain.kind.as_str(), &plain.fields["text"]), ("result", &serde_json::json!("all done")));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// The message's type: `progress`, `question`, `approval`, `partial`, `log`, `result`,
    /// `error`, or one of the agent's own.
    #[serde(rename = "type")]
    pub kind: String,
    /// Every other field.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Message {
    /// A message of type `kind` with `fields` (a `type` among them is dropped).
    #[must_use]
    pub fn new(kind: impl Into<String>, mut fields: Map<String, Value>) -> Self {
        fields.remove("type");
        Self {
            kind: kind.into(),
            fields,
        }
    }

    /// Decodes one line. A line that is not a JSON object with a string `type` (plain text,
    /// other JSON) becomes a message of type `plain` whose text is the line, trimmed, in the
    /// field this crate's type for `plain` reads: `message` for `log`, `progress` and
    /// `error`, `chunk` for `partial`, `question` for `question`, `description` for
    /// `approval`, and `text` for `result` and any other type.
    ///
    /// ```
    /// use bidi_ndjson::{Log, Message};
    ///
    /// let plain = Message::decode(b"warming the cache\n", "log");
    /// assert_eq!(plain.fields["message"], "warming the cache");
    /// let log: Log = serde_json::from_value(serde_json::Value::Object(plain.fields))?;
    /// assert_eq!(log.message, "warming the cache");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    #[must_use]
    pub fn decode(line: &[u8], plain: &str) -> Self {
        if let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(line)
            && let Some(Value::String(kind)) = fields.remove("type")
        {
            return Self { kind, fields };
        }
        let text = String::from_utf8_lossy(line).trim().to_owned();
        let mut fields = Map::new();
        fields.insert(plain_text_field(plain).to_owned(), Value::String(text));
        Self {
            kind: plain.to_owned(),
            fields,
        }
    }

    /// The message's `id`, by which a reply names it.
    #[must_use]
    pub fn id(&self) -> Option<&Value> {
        self.fields.get("id").filter(|id| !id.is_null())
    }

    /// Whether the message ends a round: `result` or `error`.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        self.kind == RESULT || self.kind == ERROR
    }
}

/// The field a plain-text line taken as a message of type `kind` is put in: the one this
/// crate's type for `kind` reads its text from.
fn plain_text_field(kind: &str) -> &'static str {
    match kind {
        "log" | "progress" | ERROR => "message",
        "partial" => "chunk",
        "question" => "question",
        "approval" => "description",
        _ => "text",
    }
}

/// What a line says before it is read whole: its type and id, if it is a message (the other
/// fields are skipped, not kept).
#[derive(Deserialize)]
pub(crate) struct Head<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    pub(crate) id: Option<Value>,
}

impl<'a> Head<'a> {
    /// The head of `line`; `None` if it is not a JSON object with a string `type`.
    pub(crate) fn of(line: &'a [u8]) -> Option<Self> {
        serde_json::from_slice(line).ok()
    }
}

/// The fields of the message on `line` as `T`, read from the line itself; or the JSON Pointer
/// of the first field that does not fit and why. A `Map` or `Value` gets every field but
/// `type`.
pub(crate) fn parse_line<T: serde::de::DeserializeOwned + 'static>(
    line: &[u8],
) -> Result<T, (String, String)> {
    let mut value: T = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(_) => {
            // Read it again, tracking where it fails.
            let mut json = serde_json::Deserializer::from_slice(line);
            return Err(match serde_path_to_error::deserialize::<_, T>(&mut json) {
                Ok(_) => (String::new(), "the message is malformed".to_owned()),
                Err(error) => (
                    bidi_flow::text::pointer(error.path()),
                    error.inner().to_string(),
                ),
            });
        }
    };
    let any: &mut dyn std::any::Any = &mut value;
    if let Some(map) = any.downcast_mut::<Map<String, Value>>() {
        map.remove("type");
    } else if let Some(Value::Object(map)) = any.downcast_mut::<Value>() {
        map.remove("type");
    }
    Ok(value)
}

/// The type of the message that ends a round with its payload.
pub(crate) const RESULT: &str = "result";
/// The type of the message that ends a round with an error.
pub(crate) const ERROR: &str = "error";

/// A reply to a message, as the host writes it to the agent's stdin:
/// `{"type":"response","in_reply_to":"question","in_reply_to_id":"q1","value":"RS256"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename = "response")]
pub struct Reply {
    /// The type of the message answered.
    pub in_reply_to: String,
    /// The `id` of the message answered, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to_id: Option<Value>,
    /// The answer.
    pub value: Value,
}

impl Reply {
    /// The reply to `message` saying `value`.
    #[must_use]
    pub fn to(message: &Message, value: Value) -> Self {
        Self {
            in_reply_to: message.kind.clone(),
            in_reply_to_id: message.id().cloned(),
            value,
        }
    }
}

/// A prompt: its text and, for JSON prompts, a context.
///
/// ```
/// use bidi_ndjson::Prompt;
/// use serde_json::json;
///
/// let prompt = Prompt::new("Refactor the auth module").context(json!({"branch": "main"}));
/// assert_eq!(prompt.text(), "Refactor the auth module");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Prompt {
    #[serde(rename = "prompt")]
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context: Option<Value>,
}

impl Prompt {
    /// A prompt saying `text`.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            context: None,
        }
    }

    /// Adds a context, which JSON prompts carry (`{"prompt": .., "context": ..}`).
    #[must_use]
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// The text.
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The context, if any.
    #[must_use]
    pub fn context_value(&self) -> Option<&Value> {
        self.context.as_ref()
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

/// How prompts are written to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PromptFormat {
    /// The text as one line (the default). A prompt with a line break or a context is refused:
    /// use [`Json`](Self::Json) for those.
    #[default]
    Text,
    /// `{"prompt": "<text>", "context": <context>}` as one line.
    Json,
}

/// Why a prompt cannot be written in the text format.
pub(crate) fn encode_prompt(
    prompt: &Prompt,
    format: PromptFormat,
    buf: &mut Vec<u8>,
) -> Result<(), &'static str> {
    buf.clear();
    match format {
        PromptFormat::Text => {
            if prompt.context.is_some() {
                return Err("a text prompt has no context: write JSON prompts to send one");
            }
            if prompt.text.contains(['\n', '\r']) {
                return Err("a text prompt is one line: write JSON prompts to send line breaks");
            }
            buf.extend_from_slice(prompt.text.as_bytes());
        }
        PromptFormat::Json => {
            serde_json::to_writer(&mut *buf, prompt).map_err(|_| "the prompt is not JSON")?;
        }
    }
    buf.push(b'\n');
    Ok(())
}

/// Encodes any message as one line into `buf` (cleared first).
pub(crate) fn encode(message: &impl Serialize, buf: &mut Vec<u8>) -> serde_json::Result<()> {
    buf.clear();
    serde_json::to_writer(&mut *buf, message)?;
    buf.push(b'\n');
    Ok(())
}

/// The `init` line of the handshake: `{"type":"init","params":{..}}`.
pub(crate) fn init(params: &Value) -> Value {
    serde_json::json!({ "type": "init", "params": params })
}

/// The type of the answer that accepts `init`.
pub(crate) const INIT_ACK: &str = "init_ack";

// ---------------------------------------------------------------------------------------------
// The message types every agent knows. Each is the fields of a message of that type; unknown
// fields are ignored.

/// `{"type":"progress","message":"Reading files...","percent":10}`: how far the agent is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Progress {
    /// What it is doing.
    pub message: String,
    /// How far, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// The stage it is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
}

impl Progress {
    /// Progress saying `message`.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            percent: None,
            stage: None,
        }
    }

    /// How far, in percent.
    #[must_use]
    pub fn percent(mut self, percent: f64) -> Self {
        self.percent = Some(percent);
        self
    }

    /// The stage.
    #[must_use]
    pub fn stage(mut self, stage: impl Into<String>) -> Self {
        self.stage = Some(stage.into());
        self
    }
}

/// `{"type":"question","id":"q1","question":"Use RS256 or HS256?","kind":"design"}`: the agent
/// needs an answer to go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Question {
    /// The question's `id`, if the agent gave it one: the reply names it in its
    /// `in_reply_to_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// The question.
    pub question: String,
    /// What it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The answers to choose from, if it is a choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// What kind of question it is (`design`, `security`, `test`, ...), for routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl Question {
    /// A question asking `question`.
    #[must_use]
    pub fn new(question: impl Into<String>) -> Self {
        Self {
            id: None,
            question: question.into(),
            context: None,
            options: Vec::new(),
            kind: None,
        }
    }

    /// Its `id` (a [`Host`](crate::Host) gives each question one of its own otherwise).
    #[must_use]
    pub fn id(mut self, id: impl Into<Value>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// What it is about.
    #[must_use]
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// The answers to choose from.
    #[must_use]
    pub fn options<I: IntoIterator<Item = S>, S: Into<String>>(mut self, options: I) -> Self {
        self.options = options.into_iter().map(Into::into).collect();
        self
    }

    /// What kind of question it is.
    #[must_use]
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }
}

/// `{"type":"approval","id":"a1","description":"Delete 3 files","risk_level":"medium"}`: the
/// agent needs a yes or a no to go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Approval {
    /// The request's `id`, if the agent gave it one: the reply names it in its
    /// `in_reply_to_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// What it wants to do.
    pub description: String,
    /// How risky it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk_level: Option<String>,
}

impl Approval {
    /// A request to approve `description`.
    #[must_use]
    pub fn new(description: impl Into<String>) -> Self {
        Self {
            id: None,
            description: description.into(),
            risk_level: None,
        }
    }

    /// Its `id` (a [`Host`](crate::Host) gives each request one of its own otherwise).
    #[must_use]
    pub fn id(mut self, id: impl Into<Value>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How risky it is.
    #[must_use]
    pub fn risk_level(mut self, risk_level: impl Into<String>) -> Self {
        self.risk_level = Some(risk_level.into());
        self
    }
}

/// `{"type":"partial","chunk":"..."}`: a piece of the output, as it streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Partial {
    /// The piece.
    pub chunk: String,
}

/// `{"type":"log","level":"debug","message":"Cache invalidated"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct Log {
    /// The level (`debug`, `info`, `warn`, `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// The message.
    pub message: String,
}

/// Whether an answer to an approval says yes: `true`, or one of `y`, `yes`, `approve`,
/// `approved`, `true`, `1`, `ok`, `proceed` (any case).
#[must_use]
pub fn approves(value: &Value) -> bool {
    match value {
        Value::Bool(yes) => *yes,
        Value::Number(number) => number.as_f64() == Some(1.0),
        Value::String(text) => matches!(
            text.trim().to_ascii_lowercase().as_str(),
            "y" | "yes" | "approve" | "approved" | "true" | "1" | "ok" | "proceed"
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lines_decode_to_messages_or_plain_text() {
        let message = Message::decode(
            br#"{"type":"progress","message":"hi","percent":10}"#,
            "result",
        );
        assert_eq!(message.kind, "progress");
        assert_eq!(
            message.fields,
            json!({"message": "hi", "percent": 10})
                .as_object()
                .unwrap()
                .clone()
        );
        assert!(!message.is_terminal());
        for line in [
            &b"not json"[..],
            b"[1,2]",
            br#"{"text":"no type"}"#,
            br#"{"type":7}"#,
            b"\xff\xfe",
        ] {
            let plain = Message::decode(line, "result");
            assert_eq!(plain.kind, "result");
            assert!(plain.is_terminal());
            assert!(plain.fields["text"].is_string());
        }
        assert_eq!(
            Message::decode(b"  spaced out \r", "log").fields["message"],
            "spaced out"
        );
    }

    #[test]
    fn typed_fields_name_what_does_not_fit() {
        let (path, reason) =
            parse_line::<Question>(br#"{"type":"question","question":7}"#).unwrap_err();
        assert_eq!(path, "/question");
        assert!(reason.contains("string"), "{reason}");
        let question: Question = parse_line(
            br#"{"type":"question","id":"q","question":"a or b?","options":["a","b"],"extra":1}"#,
        )
        .unwrap();
        let untyped: Map<String, Value> = parse_line(br#"{"type":"x","a":1}"#).unwrap();
        assert_eq!(Value::Object(untyped), serde_json::json!({"a": 1}));
        assert_eq!(question.options, ["a", "b"]);
    }

    #[test]
    fn questions_and_approvals_carry_their_id_when_they_have_one() {
        let question: Question =
            parse_line(br#"{"type":"question","id":"q-1","question":"?"}"#).unwrap();
        assert_eq!(question.id, Some(json!("q-1")));
        let approval: Approval =
            parse_line(br#"{"type":"approval","id":7,"description":"x"}"#).unwrap();
        assert_eq!(approval.id, Some(json!(7)));
        for anonymous in [
            &br#"{"type":"approval","description":"x"}"#[..],
            br#"{"type":"approval","id":null,"description":"x"}"#,
        ] {
            assert_eq!(parse_line::<Approval>(anonymous).unwrap().id, None);
        }
        // One without an id is written without one.
        let written = serde_json::to_value(Question::new("?")).unwrap();
        assert_eq!(written, json!({"question": "?"}));
        let written = serde_json::to_value(Approval::new("x").id("a-1")).unwrap();
        assert_eq!(written, json!({"id": "a-1", "description": "x"}));
    }

    #[test]
    fn plain_text_fits_the_type_it_is_taken_as() {
        let log: Log =
            serde_json::from_value(Value::Object(Message::decode(b"warming up", "log").fields))
                .unwrap();
        assert_eq!((log.level, log.message.as_str()), (None, "warming up"));
        let progress: Progress = serde_json::from_value(Value::Object(
            Message::decode(b"halfway", "progress").fields,
        ))
        .unwrap();
        assert_eq!(progress.message, "halfway");
        let partial: Partial =
            serde_json::from_value(Value::Object(Message::decode(b"a piece", "partial").fields))
                .unwrap();
        assert_eq!(partial.chunk, "a piece");
        let error = Message::decode(b"it broke", ERROR);
        assert_eq!(crate::child::error_message(&error.fields), "it broke");
        assert_eq!(Message::decode(b"x", "custom").fields["text"], "x");
    }

    #[test]
    fn replies_carry_the_id_when_the_message_had_one() {
        let mut buf = Vec::new();
        let asked = Message::decode(
            br#"{"type":"question","id":"q-17","question":"?"}"#,
            "result",
        );
        encode(&Reply::to(&asked, json!("RS256")), &mut buf).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&buf).unwrap(),
            json!({"type":"response","in_reply_to":"question","in_reply_to_id":"q-17","value":"RS256"})
        );
        assert_eq!(buf.last(), Some(&b'\n'));
        let anonymous = Message::decode(br#"{"type":"approval","description":"x"}"#, "result");
        encode(&Reply::to(&anonymous, json!("yes")), &mut buf).unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&buf).unwrap(),
            json!({"type":"response","in_reply_to":"approval","value":"yes"})
        );
    }

    #[test]
    fn prompts_are_one_line_in_either_format() {
        let mut buf = Vec::new();
        encode_prompt(&Prompt::new("do it"), PromptFormat::Text, &mut buf).unwrap();
        assert_eq!(buf, b"do it\n");
        assert!(encode_prompt(&Prompt::new("two\nlines"), PromptFormat::Text, &mut buf).is_err());
        let with = Prompt::new("two\nlines").context(json!({"k": 1}));
        assert!(encode_prompt(&with, PromptFormat::Text, &mut buf).is_err());
        encode_prompt(&with, PromptFormat::Json, &mut buf).unwrap();
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(
            serde_json::from_slice::<Value>(&buf).unwrap(),
            json!({"prompt": "two\nlines", "context": {"k": 1}})
        );
    }

    #[test]
    fn approvals_read_yes_like_answers() {
        for yes in [
            json!(true),
            json!("Yes"),
            json!(" ok "),
            json!("proceed"),
            json!(1),
        ] {
            assert!(approves(&yes), "{yes}");
        }
        for no in [
            json!(false),
            json!("no"),
            json!(""),
            json!(null),
            json!(0),
            json!({"yes": true}),
        ] {
            assert!(!approves(&no), "{no}");
        }
    }
}
