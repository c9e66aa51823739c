//! [`DemoModel`]: a model that answers without a service and never runs out.

use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;

use crate::message::{Message, StopReason, Usage};
use crate::model::{Model, ModelEvent, ModelRequest, ToolSpec};

/// A model that needs no service and never runs out, for demos, examples and tests of what
/// surrounds an agent. It answers:
///
/// - a user message, when it is offered tools, by calling the tool the message names, else the
///   last one that `{"request": <the message>}` fills (one that requires no other argument),
///   else the last one (the client's own tools come last). The call's arguments are the JSON
///   object that follows the tool's name in the message, if one does
///   (`fs__read_text_file {"path": "/tmp/a.txt"}`); else the message as `request` when the
///   tool takes `request` or declares no properties; else the message in the tool's first
///   string property, a required one first (`{"city": <the message>}`);
/// - a user message, without tools, by saying what it heard;
/// - a tool result by reporting it.
///
/// It streams its answer word by word as the agent takes the words, as a model service does,
/// so a long answer costs no memory ahead of a consumer that does not read. A message
/// containing "slowly" makes it think for three seconds first. Its usage counts words as
/// tokens: those of the message it answers in, those it says out.
///
/// ```
/// use bidi_agent::AgentInit;
/// use bidi_llm::testing::DemoModel;
/// use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage, execute};
/// use futures_util::StreamExt as _;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let agent = LlmAgent::builder("demo", DemoModel).build();
/// let mut conn = agent.connect(AgentInit::new());
/// let mut said = String::new();
/// let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("hello"))).await?;
/// while let Some(event) = run.next().await {
///     if let AgentEvent::TextDelta { delta } = event? {
///         said.push_str(&delta);
///     }
/// }
/// assert_eq!(said, "You said: hello");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoModel;

impl Model for DemoModel {
    fn name(&self) -> &str {
        "demo"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let last = request.messages.last();
        let (text, slow) = match last {
            Some(Message::User(user)) => (user.content.clone(), user.content.contains("slowly")),
            Some(Message::ToolResult(result)) => (format!("Done: {}", result.content), false),
            _ => ("Hello!".to_owned(), false),
        };
        let named = request
            .tools
            .iter()
            .find(|tool| text.contains(tool.name.as_str()));
        let fits = |tool: &&ToolSpec| {
            tool.parameters["required"]
                .as_array()
                .is_none_or(|required| required.iter().all(|name| name == "request"))
        };
        let fallback = request.tools.iter().rev().find(fits);
        let heard = text.split_whitespace().count();
        let (said, call) = match (last, named.or(fallback).or(request.tools.last())) {
            (Some(Message::User(_)), Some(tool)) => {
                let call = [
                    ModelEvent::ToolCallStart {
                        id: format!("call-{}", request.messages.len()),
                        name: tool.name.clone(),
                    },
                    ModelEvent::ToolCallDelta(arguments(tool, &text)),
                    ModelEvent::ToolCallEnd,
                ];
                (format!("Let me use {}.", tool.name), Some(call))
            }
            (Some(Message::User(_)), None) => (format!("You said: {text}"), None),
            _ => (text, None),
        };
        let usage = words_used(heard, &said);
        let stop_reason = if call.is_some() {
            StopReason::ToolCalls
        } else {
            StopReason::Stop
        };
        let thinking = async move {
            if slow {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            }
            None
        };
        // Word by word as the consumer takes them, as a model streams: a long answer is never
        // built as events ahead of a consumer that does not read.
        futures_util::stream::once(thinking)
            .filter_map(std::future::ready)
            .chain(futures_util::stream::iter([ModelEvent::TextStart]))
            .chain(words(said))
            .chain(futures_util::stream::iter(
                std::iter::once(ModelEvent::TextEnd)
                    .chain(call.into_iter().flatten())
                    .chain(std::iter::once(ModelEvent::Done { stop_reason, usage })),
            ))
            .boxed()
    }
}

/// The usage of an answer `said` to a message of `heard` words, a word a token.
fn words_used(heard: usize, said: &str) -> Usage {
    let input = heard as u64;
    let output = said.split_whitespace().count() as u64;
    Usage {
        input,
        output,
        total_tokens: input + output,
        ..Usage::default()
    }
}

/// `text` as one delta per word (each with the space after it), made as they are taken.
fn words(text: String) -> impl futures_util::Stream<Item = ModelEvent> {
    futures_util::stream::unfold((text, 0), |(text, at)| async move {
        let rest = text.get(at..).filter(|rest| !rest.is_empty())?;
        let len = rest.find(' ').map_or(rest.len(), |space| space + 1);
        let word = rest[..len].to_owned();
        Some((ModelEvent::TextDelta(word), (text, at + len)))
    })
}

/// The arguments of a call of `tool` for a message saying `text`: the JSON object that follows
/// the tool's name in it, else `{"request": text}` when the tool takes `request` or names no
/// properties, else the message in the tool's first string property (a required one first).
fn arguments(tool: &ToolSpec, text: &str) -> String {
    let given = text
        .split_once(tool.name.as_str())
        .and_then(|(_, rest)| serde_json::from_str::<serde_json::Value>(rest.trim()).ok())
        .filter(serde_json::Value::is_object);
    if let Some(given) = given {
        return given.to_string();
    }
    let properties = tool.parameters["properties"].as_object();
    let strings = || {
        properties
            .into_iter()
            .flatten()
            .filter(|(_, schema)| schema["type"] == "string")
            .map(|(name, _)| name.as_str())
    };
    let required = tool.parameters["required"].as_array();
    let is_required = |name: &str| required.is_some_and(|all| all.iter().any(|r| r == name));
    let field = match properties {
        Some(all) if !all.is_empty() && !all.contains_key("request") => strings()
            .find(|name| is_required(name))
            .or_else(|| strings().next())
            .unwrap_or("request"),
        _ => "request",
    };
    let mut arguments = serde_json::Map::new();
    arguments.insert(field.to_owned(), serde_json::Value::String(text.to_owned()));
    serde_json::Value::Object(arguments).to_string()
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt as _;
    use serde_json::json;

    use super::*;
    use crate::message::UserMessage;

    fn spec(name: &str, required: &[&str]) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: String::new(),
            parameters: json!({"type": "object", "required": required}),
        }
    }

    async fn called(tools: Vec<ToolSpec>, text: &str) -> Option<String> {
        let messages = vec![Message::User(UserMessage::new(text))];
        let events: Vec<ModelEvent> = DemoModel
            .stream(ModelRequest::new(messages, tools))
            .collect()
            .await;
        events.into_iter().find_map(|event| match event {
            ModelEvent::ToolCallStart { name, .. } => Some(name),
            _ => None,
        })
    }

    #[tokio::test]
    async fn it_calls_the_named_tool_else_the_last_one_its_request_fills() {
        let tools = || {
            vec![
                spec("word_count", &["request"]),
                spec("lookup", &[]),
                spec("run_command", &["command"]),
            ]
        };
        assert_eq!(called(tools(), "hello").await.as_deref(), Some("lookup"));
        let named = called(tools(), r#"run_command {"command": "ls"}"#).await;
        assert_eq!(named.as_deref(), Some("run_command"));
        // None fits: the last one.
        let only = called(vec![spec("a", &["x"]), spec("b", &["y"])], "hi").await;
        assert_eq!(only.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn a_tool_without_request_gets_the_message_in_its_first_string_field() {
        let weather = ToolSpec {
            name: "weather".to_owned(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {
                "days": {"type": "integer"}, "city": {"type": "string"},
                "unit": {"type": "string"}}, "required": ["unit"]}),
        };
        assert_eq!(arguments(&weather, "celsius"), r#"{"unit":"celsius"}"#);
        let mut optional = weather.clone();
        optional.parameters["required"] = json!([]);
        assert_eq!(arguments(&optional, "Oslo"), r#"{"city":"Oslo"}"#);
        let given = arguments(&weather, r#"weather {"city": "Bergen"}"#);
        assert_eq!(given, r#"{"city":"Bergen"}"#);
        let open = spec("note", &[]);
        assert_eq!(arguments(&open, "buy milk"), r#"{"request":"buy milk"}"#);
    }

    #[tokio::test]
    async fn it_streams_word_by_word() {
        let messages = vec![Message::User(UserMessage::new("hello  there"))];
        let events: Vec<ModelEvent> = DemoModel
            .stream(ModelRequest::new(messages, Vec::new()))
            .collect()
            .await;
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|event| match event {
                ModelEvent::TextDelta(delta) => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, ["You ", "said: ", "hello ", " ", "there"]);
        assert!(matches!(events.first(), Some(ModelEvent::TextStart)));
        assert!(matches!(events.last(), Some(ModelEvent::Done { .. })));
    }
}
