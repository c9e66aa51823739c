//! [`DemoModel`]: a model that answers without a service and never runs out.

use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;

use crate::message::{Message, StopReason, Usage};
use crate::model::{Model, ModelEvent, ModelRequest, ToolSpec};

/// A model that needs no service and never runs out, for demos, examples and tests of what
/// surrounds an agent: it answers a user message by calling the tool the message names, else
/// the last tool it is offered that `{"request": <the message>}` fills (one that requires no
/// other argument), else the last one (the client's own tools come last), with that (or, when what follows the tool's name in the message is a JSON
/// object, with that object: `fs__read_text_file {"path": "/tmp/a.txt"}`), or, without tools,
/// by saying what it heard; a tool result by reporting it. A message containing "slowly" makes
/// it think for three seconds first.
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
        let mut events = Vec::new();
        let mut say = |words: &str| {
            events.push(ModelEvent::TextStart);
            for word in words.split_inclusive(' ') {
                events.push(ModelEvent::TextDelta(word.to_owned()));
            }
            events.push(ModelEvent::TextEnd);
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
        let stop_reason = match (last, named.or(fallback).or(request.tools.last())) {
            (Some(Message::User(_)), Some(tool)) => {
                say(&format!("Let me use {}.", tool.name));
                let given = text
                    .split_once(tool.name.as_str())
                    .and_then(|(_, rest)| {
                        serde_json::from_str::<serde_json::Value>(rest.trim()).ok()
                    })
                    .filter(serde_json::Value::is_object);
                let arguments = given
                    .unwrap_or_else(|| serde_json::json!({ "request": text }))
                    .to_string();
                events.push(ModelEvent::ToolCallStart {
                    id: format!("call-{}", request.messages.len()),
                    name: tool.name.clone(),
                });
                events.push(ModelEvent::ToolCallDelta(arguments));
                events.push(ModelEvent::ToolCallEnd);
                StopReason::ToolCalls
            }
            (Some(Message::User(_)), None) => {
                say(&format!("You said: {text}"));
                StopReason::Stop
            }
            _ => {
                say(&text);
                StopReason::Stop
            }
        };
        events.push(ModelEvent::Done {
            stop_reason,
            usage: Usage::default(),
        });
        let thinking = async move {
            if slow {
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            }
        };
        futures_util::stream::once(thinking)
            .flat_map(move |()| futures_util::stream::iter(events.clone()))
            .boxed()
    }
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
}
