//! AG-UI against its real client, `@ag-ui/client` 1.0.0:
//!
//! - `HttpAgent` runs against a real bidi-http server's `POST /agent/{name}/ag-ui`
//!   (`tests/node/agui_client.mjs`): text, reasoning, state, a frontend tool left pending and
//!   resumed, a local tool, an error mid-stream.
//! - Property: executions of the real agent loop on random scripts (text, thinking, tool calls;
//!   local tools that succeed, fail, stream or are unknown; frontend tools; model failures
//!   mid-block, a tool call cut mid-arguments among them; cancellation at a random point) are
//!   encoded by [`bidi_agui::Encoder`] as the endpoint does, checked against the AG-UI
//!   ordering rules here (the arguments streamed included), then written out and run through
//!   `HttpAgent` (`tests/node/agui_verify.mjs`), which must accept every one.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tests::rng::Rng;
use tests::tools::wipe;

use bidi_agent::AgentInit;
use bidi_agui::{Encoder, Event};
use bidi_flow::Registry;
use bidi_http::Server;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, AssistantContent, Context, LlmAgent, Message, Status, Tool, ToolEvent, ToolSpec,
    TurnInput, UserMessage, execute,
};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tests::node::client;

/// `add`: a local tool returning `a + b`.
fn add() -> Tool {
    Tool::dynamic(
        "add",
        "Add",
        "Adds two numbers",
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        |_id, args: Value| {
            let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
            futures_util::stream::iter([
                ToolEvent::Data {
                    name: "sum".into(),
                    data: json!({"sum": sum}),
                },
                ToolEvent::Complete {
                    output: sum.to_string(),
                    details: None,
                },
            ])
        },
    )
}

/// The agents `agui_client.mjs` expects; `wipes` counts the runs of `guarded`'s tool.
async fn serve(wipes: Arc<AtomicUsize>) -> SocketAddr {
    let writer = LlmAgent::builder(
        "writer",
        ScriptedModel::new([
            Scripted::new().thinking("let me see").text("Hello world"),
            Scripted::new().thinking("let me see").text("Hello world"),
        ]),
    )
    .build();
    let deployer = LlmAgent::builder(
        "deployer",
        ScriptedModel::new([
            Scripted::new().text("Asking").tool_call(
                "call-1",
                "confirm",
                &json!({"action": "deploy"}),
            ),
            Scripted::new().text("Deployed"),
        ]),
    )
    .build();
    let broken = LlmAgent::builder(
        "broken",
        ScriptedModel::new([Scripted::new()
            .text("Half an answer")
            .fail("the model broke")]),
    )
    .build();
    let calculator = LlmAgent::builder(
        "calculator",
        ScriptedModel::new([
            Scripted::new().tool_call("call-1", "add", &json!({"a": 2, "b": 3})),
            Scripted::new().text("5"),
        ]),
    )
    .tool(add())
    .build();
    let guarded = LlmAgent::builder(
        "guarded",
        ScriptedModel::new([
            Scripted::new()
                .text("Checking")
                .tool_call("call-1", "wipe", &json!({"target": "db"})),
            Scripted::new().text("Wiped"),
            Scripted::new()
                .text("Checking")
                .tool_call("call-1", "wipe", &json!({"target": "db"})),
            Scripted::new().text("Not wiped"),
        ]),
    )
    .tool(wipe(wipes))
    .build();
    tests::http::serve(
        Server::new(Registry::new())
            .agent(&writer)
            .agent(&deployer)
            .agent(&broken)
            .agent(&calculator)
            .agent(&guarded)
            .protocol(bidi_agui::AgUi::new()),
    )
    .await
}

/// CopilotKit's AG-UI client (`@ag-ui/client` 0.0.59, which sends no `protocolVersion` and
/// refuses event keys it does not know) runs text and frontend tools on a server of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_1_0_client_copilotkit_pins_runs_too() {
    let addr = serve(Arc::new(AtomicUsize::new(0))).await;
    let summary = client("agui_legacy_client.mjs", vec![format!("http://{addr}")]).await;
    summary.assert_passed(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_runs_text_tools_state_and_errors() {
    let wipes = Arc::new(AtomicUsize::new(0));
    let addr = serve(Arc::clone(&wipes)).await;
    let summary = client("agui_client.mjs", vec![format!("http://{addr}")]).await;
    summary.assert_passed(8);
    // Approved once, resumed twice, denied once: the tool ran once.
    assert_eq!(wipes.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Property: every execution of the agent loop encodes to a stream the client accepts.

/// Local tools of the generated agents: one that fails, one that streams (yielding between its
/// pieces, so that a cancellation can land inside it).
fn flaky() -> Tool {
    Tool::dynamic(
        "flaky",
        "Flaky",
        "Always fails",
        json!({"type": "object"}),
        |_id, _args| futures_util::stream::iter([ToolEvent::Failed("flaky failed".into())]),
    )
}

fn ticker() -> Tool {
    Tool::dynamic(
        "ticker",
        "Ticker",
        "Streams three ticks",
        json!({"type": "object"}),
        |_id, _args| {
            futures_util::stream::unfold(0, |tick| async move {
                tokio::task::yield_now().await;
                match tick {
                    0..3 => Some((ToolEvent::Delta(format!("tick {tick}")), tick + 1)),
                    3 => Some((
                        ToolEvent::Complete {
                            output: "ticked".into(),
                            details: None,
                        },
                        4,
                    )),
                    _ => None,
                }
            })
        },
    )
}

/// A local tool that needs approval: its calls end the run with an interrupt.
fn guard() -> Tool {
    Tool::dynamic(
        "guard",
        "Guard",
        "Runs once approved",
        json!({"type": "object"}),
        |_id, _args| {
            futures_util::stream::iter([ToolEvent::Complete {
                output: "guarded".into(),
                details: None,
            }])
        },
    )
    .needs_approval()
}

/// Words, sometimes many (more than the loop hands over in one batch).
fn words(rng: &mut Rng, what: &str) -> String {
    let count = if rng.chance(15) {
        70 + rng.below(60)
    } else {
        1 + rng.below(6)
    };
    (0..count)
        .map(|n| format!("{what}{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A random answer of the model.
fn answer(rng: &mut Rng, seed: u64, turn: u64) -> Scripted {
    let mut scripted = Scripted::new();
    for block in 0..rng.below(4) {
        scripted = match rng.below(4) {
            0 | 1 => scripted.text(&words(rng, "w")),
            2 => scripted.thinking(&words(rng, "t")),
            _ => {
                let id = format!("c{seed}-{turn}-{block}");
                let names = ["add", "flaky", "ticker", "confirm", "missing", "guard"];
                let name = names[rng.below(6) as usize];
                if rng.chance(10) {
                    scripted.raw_tool_call(&id, name, "{\"a\": 1, oops")
                } else {
                    scripted.tool_call(&id, name, &json!({"a": rng.below(9), "b": 1}))
                }
            }
        };
    }
    if rng.chance(20) {
        if rng.chance(50) {
            // A call cut mid-arguments: the model fails halfway through them.
            scripted = scripted.raw_tool_call(&format!("c{seed}-{turn}-cut"), "add", "{\"a\": 2, ");
        }
        scripted = scripted.fail("the model broke");
    }
    scripted
}

/// One generated execution, encoded.
struct Case {
    thread_id: String,
    run_id: String,
    events: Vec<Event>,
    /// The agent events the encoder was given; `None` at the end for a connection failure.
    agent_events: Vec<Option<AgentEvent>>,
    cancelled: bool,
}

async fn generate(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let answers: Vec<Scripted> = (0..1 + rng.below(3))
        .map(|turn| answer(&mut rng, seed, turn))
        .collect();
    let agent = LlmAgent::builder("generated", ScriptedModel::new(answers))
        .tool(add())
        .tool(flaky())
        .tool(ticker())
        .tool(guard())
        .max_turns(1 + u32::try_from(rng.below(4)).unwrap())
        .build();
    let confirm = ToolSpec {
        name: "confirm".into(),
        description: "Asks the user".into(),
        parameters: json!({"type": "object"}),
    };
    let state = agent
        .new_session(Context {
            tools: vec![confirm],
            ..Context::default()
        })
        .unwrap();
    let thread_id = format!("thread-{seed}");
    let run_id = format!("run-{seed}");
    let mut encoder = Encoder::new(&thread_id, &run_id);
    if rng.chance(50) {
        encoder = encoder.state(json!({"seed": seed}));
    }
    if rng.chance(50) {
        encoder = encoder.messages(vec![json!({"id": "u1", "role": "user", "content": "go"})]);
    }
    let cancel_at = rng.chance(30).then(|| 1 + rng.below(40));

    let mut conn = agent.connect(AgentInit::new().session_id(&thread_id).init(state));
    let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut agent_events = Vec::new();
    let mut seen = 0;
    let mut cancelled = false;
    // As the endpoint does: every event, a failure of the connection, the end.
    while let Some(item) = run.next().await {
        match item {
            Ok(event) => {
                encoder.event(&event, &mut events);
                agent_events.push(Some(event));
            }
            Err(error) => {
                encoder.failed(&error.to_string(), &mut events);
                agent_events.push(None);
                break;
            }
        }
        seen += 1;
        if !cancelled && cancel_at == Some(seen) {
            run.cancel_with("cancelled by the test");
            cancelled = true;
        }
    }
    encoder.end(&mut events);
    drop(run);
    conn.close();
    let _ = conn.output().await;
    Case {
        thread_id,
        run_id,
        events,
        agent_events,
        cancelled,
    }
}

/// What the client must make of the stream: `outcome` and the pending calls.
fn expectation(case: &Case) -> Value {
    let last = serde_json::to_value(case.events.last().unwrap()).unwrap();
    let (outcome, pending) = match last["type"].as_str().unwrap() {
        "RUN_ERROR" => ("error".to_owned(), json!([])),
        _ => (
            last["outcome"]["type"].as_str().unwrap().to_owned(),
            last["outcome"]["pendingToolCallIds"].clone(),
        ),
    };
    let pending = if pending.is_null() {
        json!([])
    } else {
        pending
    };
    json!({"threadId": case.thread_id, "runId": case.run_id, "outcome": outcome, "pending": pending})
}

/// Checks `case` against AG-UI's ordering rules, as `@ag-ui/client` verifies them, and against
/// what the execution did. Returns what it saw, for the coverage counts.
fn validate(case: &Case) -> Result<Vec<&'static str>, String> {
    let events: Vec<Value> = case
        .events
        .iter()
        .map(|event| serde_json::to_value(event).unwrap())
        .collect();
    for (event, value) in case.events.iter().zip(&events) {
        let back: Event = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        if &back != event {
            return Err(format!("{value} does not read back"));
        }
    }
    let kind = |event: &Value| event["type"].as_str().unwrap().to_owned();
    let id = |event: &Value, field: &str| event[field].as_str().unwrap().to_owned();
    let first = events.first().ok_or("no events")?;
    if kind(first) != "RUN_STARTED" {
        return Err(format!("the first event is {first}"));
    }
    let mut text = HashSet::new();
    let mut reasoning_spans = HashSet::new();
    let mut reasoning = HashSet::new();
    let mut calls = HashSet::new();
    let mut started_calls = Vec::new();
    // The argument text streamed per call.
    let mut arguments: HashMap<String, String> = HashMap::new();
    // The calls the model finished, with their arguments.
    let finished: HashMap<&str, &Value> = case
        .agent_events
        .iter()
        .flatten()
        .filter_map(|event| match event {
            AgentEvent::ToolcallEnd { tool_call, .. } => {
                Some((tool_call.id.as_str(), &tool_call.arguments))
            }
            _ => None,
        })
        .collect();
    let mut results = HashSet::new();
    let mut streamed_text = String::new();
    let mut streamed_thinking = String::new();
    let mut seen = Vec::new();
    for (index, event) in events.iter().enumerate() {
        let kind = kind(event);
        let terminal = kind == "RUN_FINISHED" || kind == "RUN_ERROR";
        if terminal != (index == events.len() - 1) {
            return Err(format!("{kind} at {index} of {}", events.len()));
        }
        if index > 0 && kind == "RUN_STARTED" {
            return Err("a second RUN_STARTED".into());
        }
        let open = |set: &mut HashSet<String>, field: &str| {
            let id = id(event, field);
            if set.insert(id.clone()) {
                Ok(())
            } else {
                Err(format!("{kind}: `{id}` is already open"))
            }
        };
        let active = |set: &HashSet<String>, field: &str| {
            let id = id(event, field);
            if set.contains(&id) {
                Ok(id)
            } else {
                Err(format!("{kind}: `{id}` is not open"))
            }
        };
        let delta = || {
            let delta = event["delta"].as_str().unwrap_or_default();
            if delta.is_empty() {
                Err(format!("{kind} with an empty delta"))
            } else {
                Ok(delta.to_owned())
            }
        };
        match kind.as_str() {
            "TEXT_MESSAGE_START" | "REASONING_START" if !calls.is_empty() => {
                return Err(format!("{kind} inside a tool call"));
            }
            "TEXT_MESSAGE_START" => open(&mut text, "messageId")?,
            "TEXT_MESSAGE_CONTENT" => {
                active(&text, "messageId")?;
                streamed_text.push_str(&delta()?);
            }
            "TEXT_MESSAGE_END" => {
                let id = active(&text, "messageId")?;
                text.remove(&id);
            }
            "REASONING_START" => open(&mut reasoning_spans, "messageId")?,
            "REASONING_END" => {
                let id = active(&reasoning_spans, "messageId")?;
                if reasoning.contains(&id) {
                    return Err("REASONING_END inside its message".into());
                }
                reasoning_spans.remove(&id);
            }
            "REASONING_MESSAGE_START" => {
                active(&reasoning_spans, "messageId")?;
                open(&mut reasoning, "messageId")?;
                seen.push("reasoning");
            }
            "REASONING_MESSAGE_CONTENT" => {
                active(&reasoning, "messageId")?;
                streamed_thinking.push_str(&delta()?);
            }
            "REASONING_MESSAGE_END" => {
                let id = active(&reasoning, "messageId")?;
                reasoning.remove(&id);
            }
            "TOOL_CALL_START" => {
                if !text.is_empty() || !reasoning.is_empty() || !calls.is_empty() {
                    return Err("a tool call inside a text, reasoning or tool call block".into());
                }
                open(&mut calls, "toolCallId")?;
                started_calls.push(id(event, "toolCallId"));
            }
            "TOOL_CALL_ARGS" => {
                let id = active(&calls, "toolCallId")?;
                arguments.entry(id).or_default().push_str(&delta()?);
            }
            "TOOL_CALL_END" => {
                let id = active(&calls, "toolCallId")?;
                calls.remove(&id);
                let streamed = arguments.get(&id).map_or("", String::as_str);
                match finished.get(id.as_str()) {
                    // What streamed is the call's arguments: their text as the model wrote it.
                    Some(Value::String(raw)) if !case.cancelled && raw != streamed => {
                        return Err(format!("`{id}` streamed {streamed:?}, not {raw:?}"));
                    }
                    Some(Value::String(_)) => {}
                    Some(whole) if !case.cancelled => {
                        let parsed: Value =
                            serde_json::from_str(if streamed.is_empty() { "{}" } else { streamed })
                                .map_err(|e| format!("`{id}` streamed {streamed:?}: {e}"))?;
                        if parsed != **whole {
                            return Err(format!("`{id}` streamed {parsed}, not {whole}"));
                        }
                        seen.push("streamed arguments");
                    }
                    Some(_) => {}
                    // Cut short: ended, before the run's end.
                    None if case.cancelled => seen.push("call cut by a cancellation"),
                    None if id.ends_with("-cut") && !streamed.is_empty() => {
                        seen.push("call cut mid-arguments by a failure");
                    }
                    None => seen.push("call cut by a failure"),
                }
            }
            "TOOL_CALL_RESULT" => {
                let call = id(event, "toolCallId");
                if !started_calls.contains(&call) || calls.contains(&call) {
                    return Err(format!("a result for `{call}`, not a finished call"));
                }
                results.insert(call);
                seen.push("tool result");
            }
            "STATE_SNAPSHOT" => {
                if index != 1 {
                    return Err("STATE_SNAPSHOT not right after RUN_STARTED".into());
                }
            }
            "MESSAGES_SNAPSHOT" => {
                let next = events.get(index + 1).ok_or("MESSAGES_SNAPSHOT last")?;
                if next["outcome"]["type"] != "interrupt" {
                    return Err("MESSAGES_SNAPSHOT not right before an interrupting end".into());
                }
                let messages = event["messages"].as_array().ok_or("no messages")?;
                if messages.first().map(|m| &m["id"]) != Some(&json!("u1")) {
                    return Err("the snapshot does not start with the client's messages".into());
                }
                // Every call shown has its message, every result shown its tool message.
                let ids: HashSet<&str> = messages
                    .iter()
                    .flat_map(|m| {
                        let calls = m["toolCalls"].as_array().into_iter().flatten();
                        calls
                            .map(|c| c["id"].as_str().unwrap())
                            .chain(m["toolCallId"].as_str())
                    })
                    .collect();
                if let Some(missing) = started_calls.iter().find(|c| !ids.contains(c.as_str())) {
                    return Err(format!("the snapshot lacks `{missing}`"));
                }
                seen.push("messages snapshot");
            }
            "CUSTOM" => {
                if event["name"] != "sum" || event["value"]["data"]["sum"].is_null() {
                    return Err(format!("unexpected {event}"));
                }
                seen.push("custom data");
            }
            "RUN_STARTED" => {}
            "RUN_FINISHED" => {
                if !(text.is_empty()
                    && reasoning.is_empty()
                    && reasoning_spans.is_empty()
                    && calls.is_empty())
                {
                    return Err("RUN_FINISHED with open blocks".into());
                }
                // What the client derives (calls without results) is what the run says; a
                // cancelled run has no pending calls (its cut calls have no results).
                let derived: HashSet<&String> = started_calls
                    .iter()
                    .filter(|call| {
                        !results.contains(*call) && event["outcome"]["type"] == "success"
                    })
                    .collect();
                let said: HashSet<&str> = event["outcome"]["pendingToolCallIds"]
                    .as_array()
                    .map(|ids| ids.iter().map(|id| id.as_str().unwrap()).collect())
                    .unwrap_or_default();
                if derived.iter().map(|id| id.as_str()).collect::<HashSet<_>>() != said {
                    return Err(format!("pending {said:?}, derived {derived:?}"));
                }
                if !said.is_empty() {
                    seen.push("pending");
                }
                if event["outcome"]["type"] == "cancelled" {
                    seen.push("cancelled outcome");
                }
                // The interrupts are the calls waiting for approval, each shown.
                let waiting: HashSet<String> = case
                    .agent_events
                    .iter()
                    .flatten()
                    .filter_map(|event| match event {
                        AgentEvent::AwaitingApproval { tool_calls, .. } => Some(tool_calls),
                        _ => None,
                    })
                    .flatten()
                    .map(|call| format!("approval-{}", call.id))
                    .collect();
                let interrupts: HashSet<String> = event["outcome"]["interrupts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|interrupt| {
                        let call = interrupt["toolCallId"].as_str().unwrap_or_default();
                        if !started_calls.iter().any(|c| c == call) {
                            return format!("unshown {call}");
                        }
                        interrupt["id"].as_str().unwrap_or_default().to_owned()
                    })
                    .collect();
                if interrupts != waiting {
                    return Err(format!("interrupts {interrupts:?}, waiting {waiting:?}"));
                }
                if !interrupts.is_empty() {
                    seen.push("interrupt");
                }
            }
            "RUN_ERROR" => {
                // Stricter than the client: every block ends before the run fails.
                if !(text.is_empty()
                    && reasoning.is_empty()
                    && reasoning_spans.is_empty()
                    && calls.is_empty())
                {
                    return Err("RUN_ERROR with open blocks".into());
                }
                match events[index - 1]["type"].as_str() {
                    Some("TEXT_MESSAGE_END" | "REASONING_END") => {
                        seen.push("block closed before RUN_ERROR");
                    }
                    Some("TOOL_CALL_END") => seen.push("tool call closed before RUN_ERROR"),
                    _ => {}
                }
            }
            other => return Err(format!("unexpected {other}")),
        }
    }
    // The run ends as the execution did.
    let last = kind(events.last().unwrap());
    let complete = case.agent_events.iter().find_map(|event| match event {
        Some(AgentEvent::ExecuteComplete { status, .. }) => Some(*status),
        _ => None,
    });
    // A failure after `execute_complete` (a cancellation landing then) changes nothing.
    let failed = case
        .agent_events
        .iter()
        .take_while(|event| !matches!(event, Some(AgentEvent::ExecuteComplete { .. })))
        .any(|event| matches!(event, None | Some(AgentEvent::Error { .. })));
    let expected = match complete {
        Some(Status::Error) | None => "RUN_ERROR",
        Some(_) if failed => "RUN_ERROR",
        Some(_) => "RUN_FINISHED",
    };
    if last != expected {
        return Err(format!(
            "the run ends with {last}, the execution with {complete:?}"
        ));
    }
    // Nothing shown is lost: the text and thinking streamed are the messages' (unless a
    // cancellation dropped events on their way).
    if !case.cancelled {
        let mut text = String::new();
        let mut thinking = String::new();
        for event in case.agent_events.iter().flatten() {
            if let AgentEvent::SessionEnd { messages, .. } = event {
                for message in messages {
                    let blocks = match message {
                        Message::Assistant(assistant) => &assistant.content,
                        Message::Error(error) => match &error.partial {
                            Some(partial) => &partial.content,
                            None => continue,
                        },
                        _ => continue,
                    };
                    for block in blocks {
                        match block {
                            AssistantContent::Text { text: more } => text.push_str(more),
                            AssistantContent::Thinking { thinking: more } => {
                                thinking.push_str(more);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        if text != streamed_text || thinking != streamed_thinking {
            return Err("the streamed text differs from the messages".into());
        }
    }
    Ok(seen)
}

fn sse(events: &[Event]) -> String {
    events
        .iter()
        .map(|event| format!("data: {}\n\n", serde_json::to_string(event).unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_generated_execution_encodes_to_a_stream_the_client_accepts() {
    const CASES: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let mut coverage: HashMap<&str, usize> = HashMap::new();
    for seed in 0..CASES {
        let case = generate(seed).await;
        match validate(&case) {
            Ok(seen) => {
                for what in seen {
                    *coverage.entry(what).or_default() += 1;
                }
            }
            Err(why) => panic!(
                "seed {seed}: {why}\n{}\nfrom {:?}",
                sse(&case.events),
                case.agent_events
            ),
        }
        if case.cancelled {
            *coverage.entry("cancellation").or_default() += 1;
        }
        let name = format!("{seed:03}");
        std::fs::write(dir.path().join(format!("{name}.sse")), sse(&case.events)).unwrap();
        std::fs::write(
            dir.path().join(format!("{name}.json")),
            expectation(&case).to_string(),
        )
        .unwrap();
    }
    // The generator reaches what the encoder must get right.
    for what in [
        "reasoning",
        "tool result",
        "pending",
        "block closed before RUN_ERROR",
        "tool call closed before RUN_ERROR",
        "streamed arguments",
        "call cut mid-arguments by a failure",
        "call cut by a cancellation",
        "cancellation",
        "interrupt",
        "messages snapshot",
        "custom data",
    ] {
        assert!(
            coverage.get(what).copied().unwrap_or(0) > 0,
            "no case with {what}: {coverage:?}"
        );
    }
    println!("coverage: {coverage:?}");
    let summary = client("agui_verify.mjs", vec![dir.path().display().to_string()]).await;
    summary.assert_passed(usize::try_from(CASES).unwrap());
}
