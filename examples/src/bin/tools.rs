//! An LLM agent with a local streaming tool and a remote tool: the turn suspends on the remote
//! call, the client executes it, and a second execution resumes with its result.
//!
//! ```sh
//! cargo run -p examples --bin tools                  # a scripted model, no network
//! OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=sk-... \
//!     cargo run -p examples --bin tools              # a real OpenAI-compatible model
//! ```

use std::time::Duration;

use bidi_agent::AgentInit;
use bidi_core::BoxError;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, LlmAgent, Model, OpenAiModel, Status, Tool, ToolEvent, ToolResultMessage,
    TurnInput, UserMessage, execute,
};
use futures_util::StreamExt;
use futures_util::stream;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Arguments of both tools.
#[derive(Debug, Deserialize, JsonSchema)]
struct Trip {
    /// Where to.
    city: String,
}

/// A local tool that streams its progress.
fn forecast() -> Tool {
    Tool::local(
        "forecast",
        "Forecast",
        "The weather forecast for a city",
        |_id, trip: Trip| {
            let steps = ["contacting the weather service", "reading the forecast"];
            stream::iter(steps)
                .then(|step| async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    ToolEvent::Delta(format!("{step}… "))
                })
                .chain(stream::once(async move {
                    ToolEvent::Complete {
                        output: format!("Sunny and 24 °C in {}", trip.city),
                        details: Some(json!({"celsius": 24})),
                    }
                }))
        },
    )
}

/// The trip planner on `model`: a local forecast tool and a remote booking tool.
fn planner(model: impl Model) -> LlmAgent {
    LlmAgent::builder("trip-planner", model)
        .tool(forecast())
        .tool(Tool::remote::<Trip>(
            "confirm_booking",
            "Confirm booking",
            "Asks the user to confirm a booking; the client runs it",
        ))
        .build()
}

/// A real OpenAI-compatible model when the environment names one, else the scripted one.
fn agent() -> LlmAgent {
    if let (Ok(base), Ok(key)) = (
        std::env::var("OPENAI_BASE_URL"),
        std::env::var("OPENAI_API_KEY"),
    ) {
        let name = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        println!("model: {name} at {base}");
        return planner(OpenAiModel::new(base, name).api_key(key));
    }
    println!("model: scripted (set OPENAI_BASE_URL and OPENAI_API_KEY for a real one)");
    planner(ScriptedModel::new([
        Scripted::new()
            .thinking("I need the forecast, and the user must confirm the booking.")
            .text("Let me check the weather and ask you to confirm.")
            .tool_call("call-1", "forecast", &json!({"city": "Lisbon"}))
            .tool_call("call-2", "confirm_booking", &json!({"city": "Lisbon"})),
        Scripted::new().text("It will be sunny and 24 °C, and your trip to Lisbon is booked."),
    ]))
}

fn show(event: &AgentEvent) {
    match event {
        AgentEvent::TextDelta { delta } | AgentEvent::ThinkingDelta { delta } => print!("{delta}"),
        AgentEvent::TextEnd { .. } | AgentEvent::ThinkingEnd { .. } => println!(),
        AgentEvent::ToolExecutionDelta { delta, .. } => print!("  {delta}"),
        AgentEvent::TextStart | AgentEvent::ThinkingStart | AgentEvent::ToolcallDelta { .. } => {}
        AgentEvent::ToolExecutionEnd { output, .. } => println!("\n  done: {output}"),
        AgentEvent::MessageEnd { message } => println!("[message_end {:?}]", message.role()),
        AgentEvent::SessionEnd { messages, .. } => {
            println!("[session_end: {} new messages]", messages.len());
        }
        other => println!("[{}]", serde_json::to_string(other).unwrap_or_default()),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let agent = agent();
    tokio::spawn(async move {
        let mut conn = agent.connect(AgentInit::new());
        let mut input = TurnInput::User(UserMessage::new(
            "Plan a sunny weekend in Lisbon and book it.",
        ));
        loop {
            let mut run = execute(&mut conn, input).await.map_err(|e| e.to_string())?;
            while let Some(event) = run.next().await {
                show(&event?);
            }
            // `result` takes the stream, which borrowed the connection: `conn` is free again.
            let result = run.result().await?;
            println!("status: {:?}, cost: {}", result.status, result.cost);
            if result.status != Status::AwaitingToolExecution {
                break;
            }
            // The client runs the remote tools and sends their results back.
            let results = result
                .pending_tool_calls
                .iter()
                .map(|call| {
                    println!("client executes {} {}", call.name, call.arguments);
                    ToolResultMessage {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        content: "confirmed by the user".to_owned(),
                        details: None,
                        is_error: false,
                        attachments: Vec::new(),
                    }
                })
                .collect();
            input = TurnInput::ToolResults(results);
        }
        conn.close();
        let out = conn.output().await?;
        println!(
            "session {}: {} messages",
            out.session_id,
            out.state.messages.len()
        );
        Ok::<_, BoxError>(())
    })
    .await?
}
