//! A connection's [`Policy`]: its system prompt before the session's, the tools it offers, and
//! its gate, which lets a local call run, refuses it, or is dropped with a cancelled execution.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bidi_agent::AgentInit;
use bidi_core::ConnectOptions;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    Context, LlmAgent, Message, Policy, Status, ToolResultMessage, TurnInput, UserMessage, execute,
    simple_tool,
};
use serde_json::json;
use tokio::sync::oneshot;

/// A tool that counts its runs.
fn counted(name: &str, runs: &Arc<AtomicUsize>) -> bidi_llm::Tool {
    let runs = Arc::clone(runs);
    simple_tool(
        name,
        name,
        "Counts",
        move |_id, _args: serde_json::Value| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(("ran".to_owned(), None))
            }
        },
    )
}

fn results(messages: &[Message]) -> Vec<&ToolResultMessage> {
    messages
        .iter()
        .filter_map(|message| match message {
            Message::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_lets_calls_run_or_refuses_them_with_its_reason() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "write", &json!({"ok": true}))
            .tool_call("c2", "write", &json!({"ok": false})),
        Scripted::new().text("done"),
    ]);
    let agent = LlmAgent::builder("a", model)
        .tool(counted("write", &runs))
        .build();
    let asked = Arc::new(AtomicUsize::new(0));
    let policy = Policy::new().gate({
        let asked = Arc::clone(&asked);
        move |call| {
            asked.fetch_add(1, Ordering::SeqCst);
            let ok = call.arguments["ok"] == true;
            let id = call.id.clone();
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(format!("{id} denied"))
                }
            }
        }
    });
    let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new().extension(policy));
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .unwrap();
    let result = run.result().await.unwrap();
    assert_eq!(result.status, Status::Completed);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the allowed call ran");
    let results = results(&result.messages);
    assert_eq!(
        (results[0].is_error, results[0].content.as_str()),
        (false, "ran")
    );
    assert_eq!(
        (results[1].is_error, results[1].content.as_str()),
        (true, "c2 denied")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_prompt_comes_first_and_unoffered_tools_are_neither_shown_nor_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "delete", &json!({})),
        Scripted::new().text("ok"),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model.clone())
        .tool(counted("read", &runs))
        .tool(counted("delete", &runs))
        .build();
    let context: Context = serde_json::from_value(json!({
        "systemPrompt": "You are the session.",
        "tools": [{"name": "ask_user", "description": "client side", "parameters": {}}],
    }))
    .unwrap();
    let state = agent.new_session(context).unwrap();
    let policy = Policy::new()
        .system_prompt("Read only.")
        .offer(|name| name == "read");
    let mut conn = agent.connect_with(
        AgentInit::new().init(state),
        ConnectOptions::new().extension(policy),
    );
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("rm")))
        .await
        .unwrap();
    let result = run.result().await.unwrap();
    let request = &model.requests()[0];
    assert_eq!(
        request.system_prompt.as_deref(),
        Some("Read only.\n\nYou are the session.")
    );
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["read", "ask_user"]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let refused = results(&result.messages)[0];
    assert!(refused.is_error);
    assert!(
        refused.content.contains("`delete` is not available"),
        "{}",
        refused.content
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_the_gate_waits_drops_it_and_the_tool_never_runs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([Scripted::new().tool_call("c1", "write", &json!({}))]);
    let agent = LlmAgent::builder("a", model)
        .tool(counted("write", &runs))
        .build();
    let (waiting_tx, waiting) = oneshot::channel::<()>();
    let waiting_tx = std::sync::Mutex::new(Some(waiting_tx));
    let (dropped_tx, dropped) = oneshot::channel::<()>();
    let dropped_tx = Arc::new(std::sync::Mutex::new(Some(dropped_tx)));
    let policy = Policy::new().gate(move |_call| {
        if let Some(tx) = waiting_tx.lock().unwrap().take() {
            tx.send(()).unwrap();
        }
        // Tells when it is dropped.
        let guard = Guard(Arc::clone(&dropped_tx));
        async move {
            let _guard = guard;
            std::future::pending::<Result<(), String>>().await
        }
    });
    let token = tokio_util::sync::CancellationToken::new();
    let mut conn = agent.connect_with(
        AgentInit::new().session_id("s"),
        ConnectOptions::new()
            .parent(token.clone())
            .extension(policy),
    );
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .unwrap();
    waiting.await.unwrap();
    token.cancel();
    dropped.await.unwrap();
    drop(run);
    conn.done().await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let saved = agent.agent().session("s").await.unwrap().unwrap();
    let state = saved.state();
    let result = results(&state.messages)[0];
    assert!(result.is_error);
    assert!(result.content.contains("cancelled"), "{}", result.content);
}

struct Guard(Arc<std::sync::Mutex<Option<oneshot::Sender<()>>>>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(tx) = self.0.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_tools_are_offered_after_the_agents_gated_and_run_here() {
    let agent_runs = Arc::new(AtomicUsize::new(0));
    let policy_runs = Arc::new(AtomicUsize::new(0));
    let hidden_runs = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "extra", &json!({}))
            .tool_call("c2", "read", &json!({}))
            .tool_call("c3", "secret", &json!({})),
        Scripted::new().text("ok"),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model.clone())
        .tool(counted("read", &agent_runs))
        .build();
    let context: Context = serde_json::from_value(json!({
        "tools": [
            {"name": "ask_user", "description": "client side", "parameters": {}},
            {"name": "extra", "description": "hidden by the policy's", "parameters": {}},
        ],
    }))
    .unwrap();
    let state = agent.new_session(context).unwrap();
    let gated = Arc::new(AtomicUsize::new(0));
    let policy = Policy::new()
        .tool(counted("extra", &policy_runs))
        .tool(counted("read", &hidden_runs)) // hidden by the agent's `read`
        .tool(counted("secret", &hidden_runs))
        .offer(|name| name != "secret")
        .gate({
            let gated = Arc::clone(&gated);
            move |_call| {
                gated.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            }
        });
    assert_eq!(policy.tools().len(), 3);
    let mut conn = agent.connect_with(
        AgentInit::new().init(state),
        ConnectOptions::new().extension(policy),
    );
    let run = execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .unwrap();
    let result = run.result().await.unwrap();
    assert_eq!(result.status, Status::Completed);
    let requests = model.requests();
    let offered: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["read", "extra", "ask_user"]);
    assert_eq!(policy_runs.load(Ordering::SeqCst), 1, "extra ran here");
    assert_eq!(agent_runs.load(Ordering::SeqCst), 1, "the agent's read ran");
    assert_eq!(hidden_runs.load(Ordering::SeqCst), 0);
    assert_eq!(gated.load(Ordering::SeqCst), 2, "secret is refused unasked");
    let results = results(&result.messages);
    assert_eq!(results.len(), 3);
    assert!(!results[0].is_error && !results[1].is_error);
    assert!(results[2].content.contains("`secret` is not available"));
}
