//! A model call tried again is told to the editor: ACP has no retry, so it is the agent's
//! thought, in words, before the answer the next model gives.

use bidi_acp::Server;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{LlmAgent, Retry};

use crate::support::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_fails_hands_over_and_the_editor_reads_why() {
    let down = ScriptedModel::new([Scripted::new().fail("the provider is down")]).named("main");
    let backup = ScriptedModel::new([Scripted::new().text("Here I am.")]).named("backup");
    let agent = LlmAgent::builder("a", down)
        .retry(Retry::new())
        .fallback(backup)
        .build();
    let mut client = Client::start(Server::new(agent));
    let session = client.new_session().await["sessionId"].clone();
    client.prompt(1, &session, "hello").await;
    let seen = client.until(1).await;
    let updates: Vec<&serde_json::Value> = seen
        .iter()
        .filter(|message| message["method"] == "session/update")
        .map(|message| &message["params"]["update"])
        .collect();
    let thought = updates
        .iter()
        .position(|update| update["sessionUpdate"] == "agent_thought_chunk")
        .unwrap_or_else(|| panic!("no thought: {updates:?}"));
    let text = updates[thought]["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("the provider is down") && text.contains("`backup`"),
        "{text}"
    );
    let answer: String = updates[thought..]
        .iter()
        .filter(|update| update["sessionUpdate"] == "agent_message_chunk")
        .map(|update| update["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(answer, "Here I am.", "{updates:?}");
    assert!(
        !updates[..thought]
            .iter()
            .any(|update| update["sessionUpdate"] == "agent_message_chunk"),
        "the answer follows the retry: {updates:?}"
    );
    assert_eq!(seen.last().unwrap()["result"]["stopReason"], "end_turn");
}
