//! The wire shapes of messages, events and sessions, the assembler, the test models and tools.

use bidi_agent::Artifact;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{
    AbortedMessage, AgentEvent, Assembled, Assembler, AssistantContent, AssistantMessage, Code,
    Cost, Error, ErrorMessage, LlmSession, Message, Model, ModelEvent, ModelOptions, ModelRequest,
    Role, Status, StopReason, Tool, ToolCall, ToolEvent, ToolResultMessage, ToolSpec, Usage,
    UserMessage, simple_tool,
};
use futures_util::StreamExt;
use futures_util::stream;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

fn call() -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: "weather".into(),
        arguments: json!({"city": "Oslo"}),
    }
}

#[test]
fn events_serialize_exactly_as_the_seed_lists_them() {
    let user = Message::User(UserMessage::new("hi"));
    let cases = [
        (
            AgentEvent::SessionStart {
                session_id: "s".into(),
                snapshot_id: Some("p".into()),
            },
            json!({"type": "session_start", "sessionId": "s", "snapshotId": "p"}),
        ),
        (
            AgentEvent::SessionEnd {
                session_id: "s".into(),
                messages: vec![user.clone()],
                snapshot_id: Some("p".into()),
            },
            json!({"type": "session_end", "sessionId": "s", "messages": [{"role": "user", "content": "hi"}], "snapshotId": "p"}),
        ),
        (
            AgentEvent::AwaitingToolExecution {
                session_id: "s".into(),
                tool_calls: vec![call()],
            },
            json!({"type": "awaiting_tool_execution", "sessionId": "s",
                   "toolCalls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}]}),
        ),
        (
            AgentEvent::MessageStart {
                role: Role::ToolResult,
            },
            json!({"type": "message_start", "role": "toolResult"}),
        ),
        (
            AgentEvent::MessageEnd {
                message: Box::new(user),
            },
            json!({"type": "message_end", "message": {"role": "user", "content": "hi"}}),
        ),
        (AgentEvent::TextStart, json!({"type": "text_start"})),
        (
            AgentEvent::TextDelta { delta: "a".into() },
            json!({"type": "text_delta", "delta": "a"}),
        ),
        (
            AgentEvent::TextEnd { text: "ab".into() },
            json!({"type": "text_end", "text": "ab"}),
        ),
        (AgentEvent::ThinkingStart, json!({"type": "thinking_start"})),
        (
            AgentEvent::ThinkingDelta { delta: "h".into() },
            json!({"type": "thinking_delta", "delta": "h"}),
        ),
        (
            AgentEvent::ThinkingEnd {
                thinking: "hm".into(),
            },
            json!({"type": "thinking_end", "thinking": "hm"}),
        ),
        (
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
            },
            json!({"type": "toolcall_start", "index": 0, "toolCallId": "c1", "toolName": "weather"}),
        ),
        (
            AgentEvent::ToolcallDelta {
                index: 1,
                delta: "{".into(),
            },
            json!({"type": "toolcall_delta", "index": 1, "delta": "{"}),
        ),
        (
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: Box::new(call()),
            },
            json!({"type": "toolcall_end", "index": 0, "toolCall": {"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}}),
        ),
        (
            AgentEvent::ToolExecutionStart {
                tool_call_id: "c1".into(),
                tool_name: "weather".into(),
                args: Box::new(json!({})),
            },
            json!({"type": "tool_execution_start", "toolCallId": "c1", "toolName": "weather", "args": {}}),
        ),
        (
            AgentEvent::ToolExecutionDelta {
                tool_call_id: "c1".into(),
                delta: "..".into(),
            },
            json!({"type": "tool_execution_delta", "toolCallId": "c1", "delta": ".."}),
        ),
        (
            AgentEvent::ToolExecutionEnd {
                tool_call_id: "c1".into(),
                output: "sunny".into(),
                details: Some(Box::new(json!({"c": 21}))),
                is_error: false,
                attachments: Vec::new(),
            },
            json!({"type": "tool_execution_end", "toolCallId": "c1", "output": "sunny", "details": {"c": 21}, "isError": false}),
        ),
        (
            AgentEvent::Error {
                code: Code::SessionRunning,
                error: "boom".into(),
                message: None,
            },
            json!({"type": "error", "code": "session_running", "error": "boom"}),
        ),
        (
            AgentEvent::ExecuteComplete {
                status: Status::AwaitingToolExecution,
                pending_tool_calls: vec![call()],
                pending_approvals: Vec::new(),
                cost: 0.25,
            },
            json!({"type": "execute_complete", "status": "awaiting_tool_execution",
                   "pendingToolCalls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}],
                   "cost": 0.25}),
        ),
        (
            AgentEvent::ExecuteComplete {
                status: Status::Completed,
                pending_tool_calls: vec![],
                pending_approvals: Vec::new(),
                cost: 0.0,
            },
            json!({"type": "execute_complete", "status": "completed", "pendingToolCalls": [], "cost": 0.0}),
        ),
    ];
    for (event, expected) in cases {
        assert_eq!(serde_json::to_value(&event).unwrap(), expected, "{event:?}");
        assert_eq!(expected["type"], event.kind());
        assert_eq!(
            serde_json::from_value::<AgentEvent>(expected).unwrap(),
            event
        );
    }
    // `toolCallId` and `toolName` came later: an event without them still reads.
    assert_eq!(
        serde_json::from_value::<AgentEvent>(json!({"type": "toolcall_start", "index": 2}))
            .unwrap(),
        AgentEvent::ToolcallStart {
            index: 2,
            tool_call_id: String::new(),
            tool_name: String::new(),
        }
    );
}

#[test]
fn messages_serialize_with_their_role() {
    let assistant = AssistantMessage {
        content: vec![
            AssistantContent::Thinking {
                thinking: "hmm".into(),
            },
            AssistantContent::Text {
                text: "Let me check.".into(),
            },
            AssistantContent::ToolCall(call()),
        ],
        usage: Usage {
            input: 10,
            output: 5,
            cache_read: 2,
            cache_write: 0,
            total_tokens: 17,
            cost: Cost {
                input: 0.1,
                output: 0.2,
                cache_read: 0.0,
                cache_write: 0.0,
                total: 0.3,
            },
        },
        stop_reason: StopReason::ToolCalls,
    };
    let json = serde_json::to_value(Message::Assistant(assistant.clone())).unwrap();
    assert_eq!(json["role"], "assistant");
    assert_eq!(json["stopReason"], "tool_calls");
    assert_eq!(json["usage"]["cacheRead"], 2);
    assert_eq!(json["usage"]["totalTokens"], 17);
    assert_eq!(
        json["content"][0],
        json!({"type": "thinking", "thinking": "hmm"})
    );
    assert_eq!(json["content"][2]["type"], "toolCall");
    let result = Message::ToolResult(ToolResultMessage {
        tool_call_id: "c1".into(),
        tool_name: "weather".into(),
        content: "sunny".into(),
        details: None,
        is_error: true,
        attachments: Vec::new(),
    });
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"role": "toolResult", "toolCallId": "c1", "toolName": "weather", "content": "sunny", "isError": true})
    );
    let error = Message::Error(ErrorMessage {
        error: "503".into(),
        partial: Some(assistant.clone()),
    });
    assert_eq!(serde_json::to_value(&error).unwrap()["role"], "error");
    let aborted = Message::Aborted(AbortedMessage { partial: assistant });
    assert_eq!(aborted.role(), Role::Aborted);
    for message in [result, error, aborted] {
        let back: Message =
            serde_json::from_value(serde_json::to_value(&message).unwrap()).unwrap();
        assert_eq!(back, message);
    }
}

async fn assemble(scripted: Scripted) -> (Vec<AgentEvent>, Assembled) {
    let model = ScriptedModel::new([scripted]);
    let mut stream = model.stream(ModelRequest::new(vec![], vec![]));
    let (mut assembler, mut events) = (Assembler::new(), Vec::new());
    while let Some(event) = stream.next().await {
        let assembled = assembler.apply(event, &mut events);
        if !matches!(assembled, Assembled::Streaming) {
            return (events, assembled);
        }
    }
    let ended = assembler.ended();
    (events, ended)
}

#[tokio::test]
async fn assembler_builds_the_message_and_its_events() {
    let usage = Usage {
        input: 3,
        output: 4,
        total_tokens: 7,
        ..Usage::default()
    };
    let (events, assembled) = assemble(
        Scripted::new()
            .thinking("a plan")
            .text("Checking now")
            .tool_call("c1", "weather", &json!({"city": "Oslo"}))
            .tool_call("c2", "weather", &json!({"city": "Bergen"}))
            .usage(usage),
    )
    .await;
    let Assembled::Done(message) = assembled else {
        panic!("{assembled:?}")
    };
    assert_eq!(message.stop_reason, StopReason::ToolCalls);
    assert_eq!(message.usage, usage);
    assert_eq!(message.text(), "Checking now");
    let ids: Vec<_> = message.tool_calls().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2"]);
    let kinds: Vec<&str> = events.iter().map(AgentEvent::kind).collect();
    assert_eq!(kinds.first(), Some(&"thinking_start"));
    assert!(kinds.contains(&"thinking_end"));
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolcallEnd { index, tool_call } => Some((*index, tool_call.id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [(0, "c1".to_owned()), (1, "c2".to_owned())]);
    // Starts name the call and its tool before the arguments stream.
    let starts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolcallStart {
                index,
                tool_call_id,
                tool_name,
            } => Some((*index, tool_call_id.as_str(), tool_name.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [(0, "c1", "weather"), (1, "c2", "weather")]);
    // Deltas of the second call carry its index.
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolcallDelta { index: 1, .. }))
    );
}

#[tokio::test]
async fn failures_keep_the_partial_output() {
    let (_, assembled) = assemble(
        Scripted::new()
            .text("half an answer")
            .fail("connection reset"),
    )
    .await;
    let Assembled::Failed { error, partial } = assembled else {
        panic!("{assembled:?}")
    };
    assert_eq!(error.to_string(), "connection reset");
    assert_eq!(partial.text(), "half an answer");
    assert_eq!(partial.stop_reason, StopReason::Error);

    // A stream that just stops is a failure too.
    let model_events = vec![ModelEvent::TextStart, ModelEvent::TextDelta("cut".into())];
    let mut assembler = Assembler::new();
    let mut events = Vec::new();
    for event in model_events {
        assembler.apply(event, &mut events);
    }
    let Assembled::Failed { partial, .. } = assembler.ended() else {
        panic!("not failed")
    };
    assert_eq!(partial.text(), "cut");

    // Invalid JSON arguments are kept, as text, for the tool to refuse.
    let (_, assembled) =
        assemble(Scripted::new().raw_tool_call("c1", "weather", "{\"city\": ")).await;
    let Assembled::Done(message) = assembled else {
        panic!("{assembled:?}")
    };
    assert_eq!(
        message.tool_calls().next().unwrap().arguments,
        json!("{\"city\": ")
    );

    // A scripted model that ran out fails each call.
    let (_, assembled) = assemble_empty().await;
    assert!(
        matches!(assembled, Assembled::Failed { ref error, .. } if error.to_string().contains("no response left"))
    );
}

async fn assemble_empty() -> (Vec<AgentEvent>, Assembled) {
    let model = ScriptedModel::new([]);
    let mut stream = model.stream(ModelRequest::new(vec![], vec![]));
    let (mut assembler, mut events) = (Assembler::new(), Vec::new());
    let event = stream.next().await.unwrap();
    let assembled = assembler.apply(event, &mut events);
    (events, assembled)
}

/// The weather tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
struct City {
    /// The city.
    city: String,
    #[serde(default)]
    days: u8,
}

#[tokio::test]
async fn tools_validate_then_run() {
    let streaming = Tool::local(
        "weather",
        "Weather",
        "Forecast for a city",
        |_id, args: City| {
            stream::iter([
                ToolEvent::Delta(format!("looking up {}", args.city)),
                ToolEvent::Delta("...".into()),
                ToolEvent::Complete {
                    output: format!("sunny for {} days", args.days),
                    details: Some(json!({"c": 21})),
                },
            ])
        },
    );
    assert!(streaming.is_local());
    let spec = streaming.spec();
    assert_eq!(spec.parameters["required"], json!(["city"]));
    assert_eq!(
        spec.parameters["properties"]["city"]["description"],
        "The city."
    );
    let events: Vec<_> = streaming
        .run("c1".into(), json!({"city": "Oslo", "days": 2}))
        .collect()
        .await;
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[2],
        ToolEvent::Complete {
            output: "sunny for 2 days".into(),
            details: Some(json!({"c": 21}))
        }
    );

    let invalid: Vec<_> = streaming
        .run("c2".into(), json!({"city": "Oslo", "days": 900}))
        .collect()
        .await;
    let [ToolEvent::Failed(error)] = &invalid[..] else {
        panic!("{invalid:?}")
    };
    assert!(
        error.starts_with("invalid arguments for `weather` at `days`"),
        "{error}"
    );
    let Err(Error::InvalidArguments { tool, path, .. }) = streaming.validate(&json!({"city": 7}))
    else {
        panic!("accepted")
    };
    assert_eq!((tool.as_str(), path.as_str()), ("weather", "city"));
    assert!(streaming.validate(&json!("not an object")).is_err());

    let simple = simple_tool(
        "add",
        "Add",
        "Adds two numbers",
        |_id, (a, b): (i64, i64)| async move {
            a.checked_add(b)
                .map(|sum| (sum.to_string(), None))
                .ok_or("overflow")
        },
    );
    let ok: Vec<_> = simple.run("c3".into(), json!([2, 3])).collect().await;
    assert_eq!(
        ok,
        [ToolEvent::Complete {
            output: "5".into(),
            details: None
        }]
    );
    let overflow: Vec<_> = simple
        .run("c4".into(), json!([i64::MAX, 1]))
        .collect()
        .await;
    assert_eq!(overflow, [ToolEvent::Failed("overflow".into())]);

    let remote = Tool::remote::<City>("confirm", "Confirm", "Asks the user");
    assert!(!remote.is_local());
    assert!(remote.validate(&json!({"city": "Oslo"})).is_ok());
    let refused: Vec<_> = remote.run("c5".into(), Value::Null).collect().await;
    assert!(matches!(&refused[..], [ToolEvent::Failed(_)]));
}

#[test]
fn stop_reasons_serialize_as_the_seed_says_and_accept_pi_names() {
    for (reason, wire) in [
        (StopReason::Stop, "stop"),
        (StopReason::Length, "length"),
        (StopReason::ToolCalls, "tool_calls"),
        (StopReason::Error, "error"),
        (StopReason::Aborted, "aborted"),
    ] {
        assert_eq!(serde_json::to_value(reason).unwrap(), wire);
        assert_eq!(
            serde_json::from_value::<StopReason>(json!(wire)).unwrap(),
            reason
        );
    }
    assert_eq!(
        serde_json::from_value::<StopReason>(json!("toolUse")).unwrap(),
        StopReason::ToolCalls
    );
    assert!(serde_json::from_value::<StopReason>(json!("tool_use")).is_err());
}

#[test]
fn sessions_serialize_with_the_seed_fields() {
    let session = LlmSession {
        system_prompt: Some("Be brief.".into()),
        tools: vec![ToolSpec {
            name: "pick".into(),
            description: "Picks".into(),
            parameters: json!({"type": "object"}),
        }],
        options: ModelOptions::new().temperature(0.5),
        messages: vec![Message::User(UserMessage::new("hi"))].into(),
        status: Status::AwaitingToolExecution,
        pending_tool_calls: vec![call()],
        model: Some("gpt-test".into()),
        chosen_model: Some("gpt-big".into()),
        total_cost: 0.5,
        custom: json!({"counter": 1}),
        artifacts: vec![Artifact::new("doc", [json!({"text": "v1"})])],
    };
    let json = serde_json::to_value(&session).unwrap();
    assert_eq!(
        json,
        json!({
            "systemPrompt": "Be brief.",
            "tools": [{"name": "pick", "description": "Picks", "parameters": {"type": "object"}}],
            "options": {"temperature": 0.5},
            "messages": [{"role": "user", "content": "hi"}],
            "status": "awaiting_tool_execution",
            "pendingToolCalls": [{"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}],
            "model": "gpt-test",
            "chosenModel": "gpt-big",
            "totalCost": 0.5,
            "custom": {"counter": 1},
            "artifacts": [{"name": "doc", "parts": [{"text": "v1"}]}],
        })
    );
    assert_eq!(
        serde_json::from_value::<LlmSession>(json.clone()).unwrap(),
        session
    );
    // A session of bidi 0.1 saved while it ran still reads: its lease is the store's now.
    let mut old = json;
    old["status"] = json!("running");
    old["lease"] = json!({"owner": "conn-1", "startedAt": 1000, "expiresAt": 31000});
    assert_eq!(
        serde_json::from_value::<LlmSession>(old).unwrap().status,
        Status::Running
    );
    // A new session: nothing runs, nothing is pending.
    let fresh: LlmSession = serde_json::from_value(json!({})).unwrap();
    assert_eq!(fresh.status, Status::Completed);
    assert_eq!(
        serde_json::to_value(&fresh).unwrap(),
        json!({"messages": [], "status": "completed", "totalCost": 0.0})
    );
}

#[test]
fn error_events_from_peers_without_a_code_or_with_a_newer_one() {
    let event: AgentEvent = serde_json::from_value(json!({"type": "error", "error": "x"})).unwrap();
    assert!(matches!(
        event,
        AgentEvent::Error {
            code: Code::Other,
            ..
        }
    ));
    let event: AgentEvent =
        serde_json::from_value(json!({"type": "error", "code": "quota", "error": "x"})).unwrap();
    assert!(matches!(
        event,
        AgentEvent::Error {
            code: Code::Other,
            ..
        }
    ));
}

#[tokio::test]
async fn the_channel_model_answers_one_request_after_the_other() {
    let (model, tx) = ChannelModel::new();
    let model = model.recording();
    assert_eq!(model.name(), "channel");
    let done = || ModelEvent::Done {
        stop_reason: StopReason::Stop,
        usage: Usage::default(),
    };
    for event in [
        ModelEvent::TextStart,
        ModelEvent::TextDelta("one".into()),
        done(),
        ModelEvent::TextStart,
        done(),
    ] {
        tx.send(event).unwrap();
    }
    let first: Vec<_> = model
        .stream(ModelRequest::new(vec![], vec![]))
        .collect()
        .await;
    assert_eq!(first.len(), 3);
    let second: Vec<_> = model
        .stream(ModelRequest::new(vec![], vec![]))
        .collect()
        .await;
    assert_eq!(second.len(), 2);
    assert_eq!(model.requests().len(), 2);
    // Without a sender, an answer just ends.
    drop(tx);
    let third: Vec<_> = model
        .stream(ModelRequest::new(vec![], vec![]))
        .collect()
        .await;
    assert!(third.is_empty());
}
