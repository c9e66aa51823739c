//! An agent on a session store of your own: `examples::map_store`, some 90 lines over
//! `bidi_session::storage`. Two turns, then the session's history as the store keeps it.
//!
//! ```sh
//! cargo run -p examples --bin own-store
//! ```

use bidi_agent::AgentInit;
use bidi_core::BoxError;
use bidi_llm::{LlmAgent, Message, TurnInput, UserMessage, execute};
use bidi_session::SessionStore as _;
use examples::DemoModel;
use examples::map_store::map_store;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let agent = LlmAgent::builder("assistant", DemoModel)
        .store(map_store())
        .build();
    let mut conn = agent.connect(AgentInit::new().session_id("own-store"));
    for line in ["hello there", "what do you keep?"] {
        let input = TurnInput::User(UserMessage::new(line));
        let result = execute(&mut conn, input).await?.result().await?;
        let answer = match result.messages.last() {
            Some(Message::Assistant(answer)) => answer.text(),
            _ => String::new(),
        };
        println!("> {line}\n  {answer}");
    }
    conn.close();
    conn.output().await?;
    let store = agent.agent().store();
    let mut at = store.load("own-store").await?.map(|head| head.entry);
    while let Some(entry) = at {
        println!(
            "snapshot {} ({}): {}",
            entry.version,
            entry.status.as_str(),
            entry.id
        );
        at = match entry.parent_id {
            Some(parent) => store.entry(&parent).await?,
            None => None,
        };
    }
    Ok(())
}
