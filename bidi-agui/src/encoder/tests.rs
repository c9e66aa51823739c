//! The AG-UI encoder's tests.

use bidi_llm::{AbortedMessage, ErrorMessage, Role, Status};
use serde_json::json;

use super::*;

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|event| {
            serde_json::to_value(event).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn encode(encoder: &mut Encoder, events: &[AgentEvent]) -> Vec<Event> {
    let mut out = Vec::new();
    for event in events {
        encoder.event(event, &mut out);
    }
    encoder.end(&mut out);
    out
}

fn start() -> AgentEvent {
    AgentEvent::SessionStart {
        session_id: "t1".into(),
        snapshot_id: None,
    }
}

fn complete(status: Status, pending: Vec<ToolCall>) -> AgentEvent {
    AgentEvent::ExecuteComplete {
        status,
        pending_tool_calls: pending,
        pending_approvals: Vec::new(),
        cost: 0.0,
    }
}

/// A call of the tool `pick`.
pub(crate) fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "pick".into(),
        arguments: json!({"a": 1}),
    }
}

#[test]
fn a_custom_agent_s_state_is_a_state_snapshot_where_it_changes() {
    let mut encoder = Encoder::new("t1", "r1");
    let custom = json!({"step": 2});
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::CustomUpdate {
                custom: custom.clone(),
            },
            complete(Status::Completed, vec![]),
        ],
    );
    assert_eq!(
        kinds(&out),
        ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]
    );
    assert_eq!(
        serde_json::to_value(&out[1]).unwrap(),
        json!({"type": "STATE_SNAPSHOT", "snapshot": custom})
    );
}

#[test]
fn a_text_answer_is_one_message_between_run_started_and_run_finished() {
    let mut encoder = Encoder::new("t1", "r1").state(json!({"n": 1}));
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hi ".into(),
            },
            AgentEvent::TextDelta {
                delta: String::new(),
            },
            AgentEvent::TextDelta {
                delta: "there".into(),
            },
            AgentEvent::TextEnd {
                text: "Hi there".into(),
            },
            complete(Status::Completed, vec![]),
        ],
    );
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let wire: Vec<Value> = out
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(
        wire[0],
        json!({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
    );
    assert_eq!(
        wire[1],
        json!({"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}})
    );
    assert_eq!(wire[2]["role"], "assistant");
    assert_eq!(wire[2]["messageId"], wire[5]["messageId"]);
    assert_eq!(
        wire[6],
        json!({"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1",
               "outcome": {"type": "success"}})
    );
    assert!(encoder.is_ended());
}

#[test]
fn tool_calls_stream_their_arguments_under_their_answer_and_local_results_follow() {
    let mut encoder = Encoder::new("t1", "r1");
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::ThinkingStart,
            AgentEvent::ThinkingDelta {
                delta: "hmm".into(),
            },
            AgentEvent::ThinkingEnd {
                thinking: "hmm".into(),
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Let me".into(),
            },
            // No `text_end`: the call's start ends the text.
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "pick".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{\"a\":".into(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: String::new(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "1}".into(),
            },
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: Box::new(call("c1")),
            },
            AgentEvent::ToolExecutionStart {
                tool_call_id: "c1".into(),
                tool_name: "pick".into(),
                args: Box::new(json!({"a": 1})),
            },
            AgentEvent::ToolExecutionDelta {
                tool_call_id: "c1".into(),
                delta: "..".into(),
            },
            AgentEvent::ToolExecutionEnd {
                tool_call_id: "c1".into(),
                output: "picked".into(),
                details: None,
                is_error: false,
                attachments: vec![],
            },
            complete(Status::Completed, vec![]),
        ],
    );
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "RUN_FINISHED"
        ]
    );
    let wire: Vec<Value> = out
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_ne!(
        wire[1]["messageId"], wire[6]["messageId"],
        "reasoning is a message of its own"
    );
    assert_eq!(wire[9]["parentMessageId"], wire[6]["messageId"]);
    assert_eq!(wire[9]["toolCallId"], "c1");
    assert_eq!(wire[9]["toolCallName"], "pick");
    assert_eq!(
        wire[10],
        json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":"})
    );
    assert_eq!(wire[11]["delta"], "1}");
    assert_eq!(
        wire[12],
        json!({"type": "TOOL_CALL_END", "toolCallId": "c1"})
    );
    assert_eq!(wire[13]["toolCallId"], "c1");
    assert_eq!(wire[13]["content"], "picked");
    assert_eq!(wire[13]["role"], "tool");
}

fn cut_call() -> [AgentEvent; 4] {
    [
        start(),
        AgentEvent::MessageStart {
            role: Role::Assistant,
        },
        AgentEvent::ToolcallStart {
            index: 0,
            tool_call_id: "c1".into(),
            tool_name: "pick".into(),
        },
        AgentEvent::ToolcallDelta {
            index: 0,
            delta: "{\"a\"".into(),
        },
    ]
}

#[test]
fn a_call_cut_mid_arguments_ends_before_the_run_does() {
    // The model fails mid-call.
    let failed = Message::Error(ErrorMessage {
        error: "boom".into(),
        partial: None,
    });
    let mut events = cut_call().to_vec();
    events.extend([
        AgentEvent::MessageEnd {
            message: Box::new(failed.clone()),
        },
        AgentEvent::Error {
            code: Code::Model,
            error: "boom".into(),
            message: Some(Box::new(failed)),
        },
        complete(Status::Error, vec![]),
    ]);
    let out = encode(&mut Encoder::new("t1", "r1"), &events);
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_ERROR"
        ]
    );
    // The execution's connection fails mid-call.
    let mut encoder = Encoder::new("t1", "r1");
    let mut out = Vec::new();
    for event in cut_call() {
        encoder.event(&event, &mut out);
    }
    encoder.failed("gone", &mut out);
    encoder.end(&mut out);
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_ERROR"
        ]
    );
    // A cancellation cuts it: the run finishes cancelled, the call not pending.
    let mut events = cut_call().to_vec();
    events.extend([
        AgentEvent::MessageEnd {
            message: Box::new(Message::Aborted(AbortedMessage {
                partial: AssistantMessage::default(),
            })),
        },
        complete(Status::Completed, vec![]),
    ]);
    let out = encode(&mut Encoder::new("t1", "r1"), &events);
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(
        serde_json::to_value(out.last().unwrap()).unwrap()["outcome"],
        json!({"type": "cancelled"})
    );
}

#[test]
fn a_call_whose_start_has_no_id_comes_whole_at_its_end() {
    let out = encode(
        &mut Encoder::new("t1", "r1"),
        &[
            start(),
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: String::new(),
                tool_name: String::new(),
            },
            AgentEvent::ToolcallDelta {
                index: 0,
                delta: "{\"a\":".into(),
            },
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: Box::new(call("c1")),
            },
            complete(Status::Completed, vec![]),
        ],
    );
    let wire: Vec<Value> = out
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(wire[1]["type"], "TOOL_CALL_START");
    assert_eq!(wire[1]["toolCallId"], "c1");
    assert_eq!(
        wire[2],
        json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":1}"})
    );
    assert_eq!(wire[3]["type"], "TOOL_CALL_END");
    assert_eq!(wire.len(), 5);
}

#[test]
fn remote_calls_finish_the_run_with_their_ids_pending() {
    let mut encoder = Encoder::new("t1", "r1");
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::ToolcallStart {
                index: 0,
                tool_call_id: "c1".into(),
                tool_name: "pick".into(),
            },
            AgentEvent::ToolcallEnd {
                index: 0,
                tool_call: Box::new(call("c1")),
            },
            AgentEvent::AwaitingToolExecution {
                session_id: "t1".into(),
                tool_calls: vec![call("c1")],
            },
            complete(Status::AwaitingToolExecution, vec![call("c1")]),
        ],
    );
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_END",
            "RUN_FINISHED"
        ]
    );
    let last = serde_json::to_value(out.last().unwrap()).unwrap();
    assert_eq!(
        last["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["c1"]})
    );
}

#[test]
fn a_failure_mid_block_ends_the_block_then_the_run_and_nothing_follows() {
    let mut encoder = Encoder::new("t1", "r1");
    let failed = Message::Error(ErrorMessage {
        error: "boom".into(),
        partial: None,
    });
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::ThinkingStart,
            AgentEvent::ThinkingDelta {
                delta: "hmm".into(),
            },
            AgentEvent::MessageEnd {
                message: Box::new(failed.clone()),
            },
            AgentEvent::Error {
                code: Code::Model,
                error: "boom".into(),
                message: Some(Box::new(failed)),
            },
            AgentEvent::SessionEnd {
                session_id: "t1".into(),
                messages: vec![],
                snapshot_id: None,
            },
            complete(Status::Error, vec![]),
        ],
    );
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "RUN_ERROR"
        ]
    );
    assert_eq!(
        serde_json::to_value(out.last().unwrap()).unwrap(),
        json!({"type": "RUN_ERROR", "message": "boom", "code": "model"})
    );
}

#[test]
fn a_cancelled_answer_ends_its_block_and_finishes_the_run_cancelled() {
    let mut encoder = Encoder::new("t1", "r1");
    let aborted = Message::Aborted(AbortedMessage {
        partial: AssistantMessage::default(),
    });
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hel".into(),
            },
            AgentEvent::MessageEnd {
                message: Box::new(aborted),
            },
            complete(Status::Completed, vec![]),
        ],
    );
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let last = serde_json::to_value(out.last().unwrap()).unwrap();
    assert_eq!(last["outcome"], json!({"type": "cancelled"}));
}

#[test]
fn events_that_stop_before_the_end_make_a_run_error() {
    let mut encoder = Encoder::new("t1", "r1");
    let out = encode(&mut encoder, &[start(), AgentEvent::TextStart]);
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_END",
            "RUN_ERROR"
        ]
    );
    // And no events at all: the run starts to fail.
    let out = encode(&mut Encoder::new("t1", "r1"), &[]);
    assert_eq!(kinds(&out), ["RUN_STARTED", "RUN_ERROR"]);
}

fn retry(discarded: bool) -> AgentEvent {
    AgentEvent::ModelRetry {
        attempt: 2,
        model: "backup".into(),
        delay_ms: 500,
        error: "HTTP 503: overloaded".into(),
        discarded,
    }
}

#[test]
fn a_retry_after_a_cut_answer_ends_it_names_it_and_streams_a_new_message() {
    let mut encoder = Encoder::new("t1", "r1");
    let out = encode(
        &mut encoder,
        &[
            start(),
            AgentEvent::MessageStart {
                role: Role::Assistant,
            },
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hel".into(),
            },
            retry(true),
            AgentEvent::TextStart,
            AgentEvent::TextDelta {
                delta: "Hello".into(),
            },
            AgentEvent::TextEnd {
                text: "Hello".into(),
            },
            complete(Status::Completed, vec![]),
        ],
    );
    assert_eq!(
        kinds(&out),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "CUSTOM",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let wire: Vec<Value> = out
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let voided = &wire[1]["messageId"];
    assert_eq!(
        wire[4],
        json!({"type": "CUSTOM", "name": "model_retry", "value": {
            "attempt": 2, "model": "backup", "delayMs": 500, "error": "HTTP 503: overloaded",
            "discarded": true, "messageId": voided}})
    );
    assert_ne!(
        &wire[5]["messageId"], voided,
        "the answer anew is a message of its own"
    );

    // A retry before anything streamed voids nothing.
    let out = encode(
        &mut Encoder::new("t1", "r2"),
        &[start(), retry(false), complete(Status::Completed, vec![])],
    );
    let value = serde_json::to_value(&out[1]).unwrap();
    assert_eq!(value["value"]["messageId"], Value::Null);
    assert_eq!(value["value"]["discarded"], false);
}
