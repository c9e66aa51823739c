//! What the tests share: running an execution, reading a saved session, the tools.

use std::time::Duration;

use bidi_agent::AgentOutput;
use bidi_core::Connection;
use bidi_llm::{
    AgentEvent, ExecuteResult, LlmSession, Tool, ToolEvent, ToolResultMessage, TurnInput,
    UserMessage, execute,
};
use bidi_session::{Entry, SessionStore};
use futures_util::StreamExt;
use futures_util::stream;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// A connection to an `LlmAgent`.
pub(crate) type Conn = Connection<TurnInput, AgentOutput<LlmSession, u32>, AgentEvent>;

/// Runs one execution to its end: every event, then the result.
pub(crate) async fn run(conn: &mut Conn, input: TurnInput) -> (Vec<AgentEvent>, ExecuteResult) {
    let mut stream = execute(conn, input).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    let result = stream.result().await.unwrap();
    (events, result)
}

pub(crate) fn user(text: &str) -> TurnInput {
    TurnInput::User(UserMessage::new(text))
}

pub(crate) fn kinds(events: &[AgentEvent]) -> Vec<&'static str> {
    events.iter().map(AgentEvent::kind).collect()
}

/// A successful result of call `id` of `tool`.
pub(crate) fn result_for(id: &str, tool: &str) -> ToolResultMessage {
    ToolResultMessage {
        tool_call_id: id.into(),
        tool_name: tool.into(),
        content: "yes".into(),
        details: None,
        is_error: false,
        attachments: Vec::new(),
    }
}

/// The latest saved state of `id`, and its snapshot.
pub(crate) async fn saved(store: &dyn SessionStore, id: &str) -> (LlmSession, Entry) {
    let snapshot = store.load(id).await.unwrap().unwrap();
    (
        serde_json::from_value(snapshot.state).unwrap(),
        snapshot.entry,
    )
}

/// The saved state of `id` once no execution runs on it: an execution saves how it ended as it
/// ends, which a caller that stopped reading (or cancelled) does not wait for. (The bound only
/// turns a session left `running` into a failure.)
pub(crate) async fn settled(store: &dyn SessionStore, id: &str) -> LlmSession {
    for _ in 0..2_000 {
        if let Some(snapshot) = store.load(id).await.unwrap()
            && snapshot.entry.status != bidi_session::Status::Pending
        {
            return serde_json::from_value(snapshot.state).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("session {id} stayed running")
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct City {
    pub(crate) city: String,
}

/// A streaming local tool that takes longer for "Oslo" than for others.
pub(crate) fn weather() -> Tool {
    Tool::local("weather", "Weather", "Forecast", |_id, args: City| {
        let slow = args.city == "Oslo";
        let city = args.city.clone();
        stream::once(async move {
            tokio::time::sleep(Duration::from_millis(if slow { 40 } else { 1 })).await;
            ToolEvent::Delta(format!("checking {city}"))
        })
        .chain(stream::once(async move {
            ToolEvent::Complete {
                output: format!("sunny in {}", args.city),
                details: Some(json!({"city": args.city})),
            }
        }))
    })
}

/// A remote tool: the caller confirms.
pub(crate) fn confirm() -> Tool {
    Tool::remote::<City>("confirm", "Confirm", "Asks the user")
}
