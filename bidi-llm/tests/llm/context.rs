//! Sessions a client starts with a context of its own: a system prompt, a conversation, and
//! remote tools that live in the session, also for another agent sharing the store.

use bidi_agent::{AgentInit, Scope};
use bidi_core::{ConnectOptions, SendError};
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, Code, Context, Error, LlmAgent, LlmSession, Message, Status, ToolCall, ToolSpec,
    TurnInput, UserMessage, execute,
};
use bidi_session::{SessionStore, SqliteStore, StoreError};
use serde_json::{Value, json};

use crate::support::{confirm, kinds, result_for, run, saved, user, weather};

/// A client tool named `name`.
fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name}, run by the client"),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }
}

fn names(tools: &[ToolSpec]) -> Vec<&str> {
    tools.iter().map(|tool| tool.name.as_str()).collect()
}

/// A context with a system prompt, an earlier exchange and a client tool, `pick`.
fn context() -> Context {
    serde_json::from_value(json!({
        "systemPrompt": "Be brief.",
        "messages": [{"role": "user", "content": "earlier"}],
        "tools": [spec("pick")],
    }))
    .unwrap()
}

/// The model calls the client's tool: the execution awaits it, with that call pending (its
/// arguments unchecked, even broken ones); the results complete the next execution. Every
/// request carries the system prompt and offers the agent's tools, then the client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_suspends_the_turn_until_its_results() {
    let model = ScriptedModel::new([
        Scripted::new()
            .tool_call("c1", "pick", &json!({"path": "/tmp"}))
            .raw_tool_call("c2", "pick", "{not json"),
        Scripted::new().text("Picked."),
    ])
    .recording();
    let agent = LlmAgent::builder("files", model.clone())
        .tool(weather())
        .tool(confirm())
        .build();
    let state = agent.new_session(context()).unwrap();
    assert_eq!(state.status, Status::Completed);
    let mut conn = agent.connect(AgentInit::new().session_id("s1").init(state));

    let (events, result) = run(&mut conn, user("pick one")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution, "{result:?}");
    let pending = vec![
        ToolCall {
            id: "c1".into(),
            name: "pick".into(),
            arguments: json!({"path": "/tmp"}),
        },
        ToolCall {
            id: "c2".into(),
            name: "pick".into(),
            arguments: Value::String("{not json".into()),
        },
    ];
    assert_eq!(result.pending_tool_calls, pending);
    assert!(events.contains(&AgentEvent::AwaitingToolExecution {
        session_id: "s1".into(),
        tool_calls: pending,
    }));
    assert!(
        !kinds(&events).contains(&"tool_execution_start"),
        "nothing ran here: {events:?}"
    );

    let (_, result) = run(
        &mut conn,
        TurnInput::ToolResults(vec![result_for("c1", "pick"), result_for("c2", "pick")]),
    )
    .await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let Some(Message::Assistant(answer)) = result.messages.last() else {
        panic!("{result:?}")
    };
    assert_eq!(answer.text(), "Picked.");

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(names(&request.tools), ["weather", "confirm", "pick"]);
        assert_eq!(request.tools[2], spec("pick"));
        assert_eq!(
            request.messages[0],
            Message::User(UserMessage::new("earlier"))
        );
    }
    assert!(matches!(
        requests[1].messages.last(),
        Some(Message::ToolResult(result)) if result.tool_call_id == "c2"
    ));

    // The context is the session's: saved with it.
    let (saved, _) = saved(&**agent.agent().store(), "s1").await;
    assert_eq!(saved.system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(saved.tools, [spec("pick")]);
    let json = serde_json::to_value(&saved).unwrap();
    assert_eq!(json["systemPrompt"], "Be brief.");
    assert_eq!(json["tools"][0]["name"], "pick");
}

/// A session without a context asks as before: no system prompt, only the agent's tools, and a
/// call of a tool nobody declared fails as unknown instead of suspending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_context_only_the_agents_tools_are_offered() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "pick", &json!({})),
        Scripted::new().text("ok"),
    ])
    .recording();
    let agent = LlmAgent::builder("files", model.clone())
        .tool(weather())
        .build();
    let mut conn = agent.connect(AgentInit::new());
    let (_, result) = run(&mut conn, user("pick one")).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    let unknown = result.messages.iter().find_map(|message| match message {
        Message::ToolResult(result) => Some(result),
        _ => None,
    });
    let unknown = unknown.unwrap();
    assert!(unknown.is_error && unknown.content.contains("no tool named `pick`"));
    let request = &model.requests()[0];
    assert_eq!(request.system_prompt, None);
    assert_eq!(names(&request.tools), ["weather"]);
}

/// An agent's tool wins over a session tool of the same name (a session saved before the agent
/// got that tool, say): it runs here, and the model is offered it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_tool_wins_over_a_session_tool_of_its_name() {
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "weather", &json!({"city": "Bergen"})),
        Scripted::new().text("Sunny."),
    ])
    .recording();
    let agent = LlmAgent::builder("a", model.clone())
        .tool(weather())
        .build();
    let state = LlmSession {
        tools: vec![spec("weather"), spec("pick")],
        ..LlmSession::default()
    };
    let mut conn = agent.connect(AgentInit::new().init(state));
    let (events, result) = run(&mut conn, user("weather?")).await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    assert!(events.contains(&AgentEvent::ToolExecutionEnd {
        tool_call_id: "c1".into(),
        output: "sunny in Bergen".into(),
        details: Some(Box::new(json!({"city": "Bergen"}))),
        is_error: false,
        attachments: Vec::new(),
    }));
    let request = &model.requests()[0];
    assert_eq!(names(&request.tools), ["weather", "pick"]);
    assert_ne!(request.tools[0], spec("weather"), "the agent's own spec");
}

/// Each refusal says why, with code `invalid_input`.
#[test]
fn a_context_is_checked_against_the_agent() {
    let agent = LlmAgent::builder("a", ScriptedModel::new([]))
        .tool(weather())
        .tool(confirm())
        .build();
    let with_tools = |tools: Vec<ToolSpec>| Context {
        tools,
        ..Context::default()
    };
    let mut unnamed = spec("");
    unnamed.description = "no name".into();
    let mut not_an_object = spec("pick");
    not_an_object.parameters = json!([{"type": "string"}]);
    let mut schema_true = spec("pick");
    schema_true.parameters = json!(true);
    let refused = [
        (
            with_tools(vec![spec("a"), unnamed]),
            "tool 1 has an empty name",
        ),
        (
            with_tools(vec![spec("pick"), spec("x"), spec("pick")]),
            "two tools are named `pick`",
        ),
        (
            with_tools(vec![spec("confirm")]),
            "`confirm` is the name of one of the agent's own tools",
        ),
        (
            with_tools(vec![spec("weather")]),
            "`weather` is the name of one of the agent's own tools",
        ),
        (
            with_tools(vec![not_an_object]),
            "the parameters of tool `pick` are not a JSON object",
        ),
        (
            with_tools(vec![schema_true]),
            "the parameters of tool `pick` are not a JSON object",
        ),
    ];
    for (context, reason) in refused {
        let error = agent.new_session(context.clone()).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidContext { reason: why } if why.starts_with(reason)),
            "{context:?}: {error:?}"
        );
        assert_eq!(error.code(), Code::InvalidInput);
        assert!(
            error.to_string().starts_with("invalid context: "),
            "{error}"
        );
    }

    // What passes becomes the new session's state as it is.
    let state = agent.new_session(context()).unwrap();
    assert_eq!(
        (
            state.system_prompt.as_deref(),
            state.messages.len(),
            state.tools.len()
        ),
        (Some("Be brief."), 1, 1)
    );
    assert_eq!(
        agent.new_session(Context::default()).unwrap(),
        LlmSession::default()
    );
}

/// The context's wire shape: camelCase, everything optional, unknown fields refused; a tool's
/// unknown fields (a client's `label`) ignored.
#[test]
fn contexts_deserialize_strictly() {
    let empty: Context = serde_json::from_value(json!({})).unwrap();
    assert_eq!(empty, Context::default());
    assert_eq!(serde_json::to_value(&empty).unwrap(), json!({}));
    let error = serde_json::from_value::<Context>(json!({"system_prompt": "x"})).unwrap_err();
    assert!(
        error.to_string().contains("unknown field `system_prompt`"),
        "{error}"
    );
    let labelled: Context = serde_json::from_value(json!({
        "tools": [{"name": "pick", "label": "Pick", "description": "d", "parameters": {}}],
    }))
    .unwrap();
    assert_eq!(labelled.tools[0].parameters, json!({}));
    let error =
        serde_json::from_value::<Context>(json!({"tools": [{"name": "pick"}]})).unwrap_err();
    assert!(
        error.to_string().contains("missing field `description`"),
        "{error}"
    );
    assert_eq!(
        serde_json::to_value(context()).unwrap(),
        json!({
            "systemPrompt": "Be brief.",
            "messages": [{"role": "user", "content": "earlier"}],
            "tools": [{
                "name": "pick",
                "description": "pick, run by the client",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }],
        })
    );
}

/// A session one agent started from a context is resumed with the tool results on another
/// agent instance (another model, no knowledge of `pick`) sharing the SQLite file: the client's
/// tools are in the session, not in the process. Both connections are alice's; an unscoped one
/// finds nothing to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_to_another_agent_with_its_client_tools() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let alice = || ConnectOptions::new().extension(Scope::new("alice"));

    let first_model = ScriptedModel::new([Scripted::new().tool_call("c1", "pick", &json!({}))]);
    let first = LlmAgent::builder("files", first_model)
        .store(SqliteStore::open(&path).await.unwrap())
        .build();
    let state = first.new_session(context()).unwrap();
    let mut conn = first.connect_with(AgentInit::new().session_id("s1").init(state), alice());
    let (_, result) = run(&mut conn, user("pick one")).await;
    assert_eq!(result.status, Status::AwaitingToolExecution, "{result:?}");
    conn.close();
    conn.output().await.unwrap();
    drop(first);

    let second_model = ScriptedModel::new([
        Scripted::new().tool_call("c2", "pick", &json!({"path": "/"})),
        Scripted::new().text("Done."),
    ])
    .recording();
    let second = LlmAgent::builder("files", second_model.clone())
        .store(SqliteStore::open(&path).await.unwrap())
        .build();

    // Unscoped, alice's session does not exist.
    let mut stranger = second.connect(AgentInit::new().resume("s1"));
    match execute(
        &mut stranger,
        TurnInput::ToolResults(vec![result_for("c1", "pick")]),
    )
    .await
    {
        Err(SendError::Failed(_, error)) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
            let found = std::iter::from_fn(|| {
                let error = source?;
                source = error.source();
                Some(error)
            })
            .any(|error| {
                matches!(error.downcast_ref::<StoreError>(), Some(StoreError::NotFound(missing)) if missing.name == "s1")
            });
            assert!(found, "{error:?}");
        }
        other => panic!("expected the session not to be found, got {other:?}"),
    }

    let mut conn = second.connect_with(AgentInit::new().resume("s1"), alice());
    let (_, result) = run(
        &mut conn,
        TurnInput::ToolResults(vec![result_for("c1", "pick")]),
    )
    .await;
    // The second agent's model calls `pick` again: it suspends here too.
    assert_eq!(result.status, Status::AwaitingToolExecution, "{result:?}");
    assert_eq!(result.pending_tool_calls[0].id, "c2");
    let (_, result) = run(
        &mut conn,
        TurnInput::ToolResults(vec![result_for("c2", "pick")]),
    )
    .await;
    assert_eq!(result.status, Status::Completed, "{result:?}");
    for request in second_model.requests() {
        assert_eq!(request.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(names(&request.tools), ["pick"]);
    }
    let store = second.agent().store();
    // Keyed by scope and agent: `Scope::new("alice").sessions("files", ..)`.
    assert_eq!(store.list().await.unwrap(), ["13:5:alice:files:s1"]);
}
