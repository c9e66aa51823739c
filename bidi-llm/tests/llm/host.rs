//! A connection's [`HostModel`] answers its turns instead of the agent's own model, and its
//! [`Logger`] hears the turn's failures: a tool's as `warning`, a model call's as `error`, a
//! model call tried again as `warning`.

use std::sync::{Arc, Mutex};

use bidi_agent::AgentInit;
use bidi_core::ConnectOptions;
use bidi_flow::log::{Level, Logger, Record};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{HostModel, LlmAgent, Status, TurnInput, UserMessage, execute, simple_tool};
use serde_json::json;

/// A logger keeping what it hears.
fn kept() -> (Logger, Arc<Mutex<Vec<Record>>>) {
    let records = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&records);
    (
        Logger::new(move |record| into.lock().unwrap().push(record)),
        records,
    )
}

/// What the logger of a connection to `agent` hears in a turn answering `line`, which
/// completes.
async fn logged(agent: &LlmAgent, line: &str) -> Vec<Record> {
    let (logger, records) = kept();
    let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new().extension(logger));
    let run = execute(&mut conn, TurnInput::User(UserMessage::new(line)))
        .await
        .unwrap();
    assert_eq!(run.result().await.unwrap().status, Status::Completed);
    records.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lent_model_answers_and_the_agents_own_answers_without_it() {
    let own = ScriptedModel::new([Scripted::new().text("own")]).recording();
    let lent = ScriptedModel::new([Scripted::new().text("lent")]).recording();
    let agent = LlmAgent::builder("a", own.clone()).build();
    let options = ConnectOptions::new().extension(HostModel::new(lent.clone()));
    let mut conn = agent.connect_with(AgentInit::new(), options);
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("hi")))
        .await
        .unwrap();
    let result = run.result().await.unwrap();
    assert_eq!(result.status, Status::Completed);
    assert_eq!(lent.requests().len(), 1);
    assert!(
        own.requests().is_empty(),
        "the agent's own model is not called"
    );

    let mut conn = agent.connect(AgentInit::new());
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("hi")))
        .await
        .unwrap();
    run.result().await.unwrap();
    assert_eq!(
        own.requests().len(),
        1,
        "a connection lending none uses the agent's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_model_fails_on_a_connection_lending_none() {
    let agent = LlmAgent::builder("a", HostModel::required()).build();
    let (logger, records) = kept();
    let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new().extension(logger));
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("hi")))
        .await
        .unwrap();
    let result = run.result().await.unwrap();
    assert_eq!(result.status, Status::Error);
    let records = records.lock().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].level, Level::Error);
    let said = records[0].data.as_str().unwrap();
    assert!(said.contains("no model of its own"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_tool_is_logged_as_a_warning() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "broken", &json!({})),
        Scripted::new().text("sorry"),
    ]);
    let broken = simple_tool(
        "broken",
        "broken",
        "Fails",
        |_id, _: serde_json::Value| async {
            Err::<(String, Option<serde_json::Value>), _>("out of order".to_owned())
        },
    );
    let agent = LlmAgent::builder("a", model).tool(broken).build();
    let records = logged(&agent, "go").await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].level, Level::Warning);
    assert_eq!(
        records[0].data,
        json!({"tool": "broken", "error": "out of order"})
    );
}

/// A model call tried again is a `warning` to the connection's logger, in words (what an MCP
/// client reads of it), before the next model answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_logged_as_a_warning() {
    let down = ScriptedModel::new([Scripted::new().fail("the provider is down")]).named("main");
    let backup = ScriptedModel::new([Scripted::new().text("Here I am.")]).named("backup");
    let agent = LlmAgent::builder("a", down)
        .retry(bidi_llm::Retry::new())
        .fallback(backup)
        .build();
    let records = logged(&agent, "hi").await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].level, Level::Warning);
    let text = records[0].data.as_str().unwrap();
    assert!(
        text.contains("the provider is down") && text.contains("`backup`"),
        "{text}"
    );
}
