//! Genkit's agent conformance spec (`tests/specs/agent.yaml` in the genkit-ai/genkit
//! repository, format in its `docs/agents-conformance-testing.md`), one test per case, named
//! after it, run against bidi agents over Genkit's agent wire (`/agent/{name}/genkit`, its
//! `getSnapshot` and `abort`) on a server bound to 127.0.0.1.
//!
//! The harness agents are built from bidi's own pieces: `LlmAgent`s on a programmable model (a
//! `ScriptedModel` each step scripts) with the spec's tools; the spec's custom agents are
//! `LlmAgent::custom` functions, but for the blocking and failing ones, `LlmAgent`s whose model
//! never answers or always fails. The spec's client-managed agents are built
//! `client_managed()`; the others keep their sessions in the agent's store.
//!
//! Assertions follow the spec's semantics (`contains`: objects by their listed fields, lists as
//! ordered subsequences), with one difference: a bidi model always streams its answer, so a
//! scripted answer without `streamChunks` still reaches the client as `modelChunk`s of role
//! `model`. The chunk lists are checked as the spec lists them, with those model chunks allowed
//! in between and nothing else.
//!
//! Of the spec's 39 cases, 38 apply and pass here; one of them runs differently, and one does
//! not apply:
//!
//! - *multi-turn in one invocation* runs on an agent connection, not over HTTP: over HTTP an
//!   invocation carries one input (Genkit's `remoteAgent` sends one per request), and a bidi
//!   connection takes any number.
//! - *pure detach without payload* does not apply: it sends `detach` as a second input of the
//!   invocation that carries the message, while over HTTP a detach is the flag on the input it
//!   detaches, and a request of `{detach: true}` alone is refused (400: nothing to do).

use std::time::Duration;

use bidi_agent::{AgentInit, Artifact};
use bidi_core::BoxError;
use bidi_flow::Registry;
use bidi_genkit::agent::AgentWire;
use bidi_http::Server;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{
    CustomTurn, LlmAgent, Model, ModelError, ModelEvent, ModelRequest, Tool, ToolEvent, TurnInput,
    UserMessage,
};
use futures_util::stream::{self, BoxStream};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The spec's programmable model, by agent.
struct Spec {
    base: String,
    http: reqwest::Client,
    models: Vec<(&'static str, ScriptedModel)>,
    /// Keeps the blocking agent's model waiting.
    _blocked: mpsc::UnboundedSender<ModelEvent>,
}

/// `interruptTool`'s input.
#[derive(Debug, Deserialize, JsonSchema)]
#[allow(dead_code)] // Read by the schema, not by the test.
struct Query {
    query: String,
}

/// A model whose every call fails with `intentional failure`.
struct Failing;

impl Model for Failing {
    fn name(&self) -> &str {
        "failing"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let error = ModelError::other("intentional failure");
        Box::pin(stream::iter([ModelEvent::Error(error)]))
    }
}

/// The counter agents: `custom.counter` goes up by one, from 0.
async fn count(mut turn: CustomTurn) -> Result<String, BoxError> {
    let counter = turn.custom()["counter"].as_u64().unwrap_or(0);
    turn.set_custom(json!({"counter": counter + 1}));
    Ok("done".to_owned())
}

/// One `send` step's result: the chunks streamed, then the output.
#[derive(Debug)]
struct Sent {
    chunks: Vec<Value>,
    output: Value,
}

impl Spec {
    async fn start() -> Self {
        let model = |name: &'static str| (name, ScriptedModel::new([]));
        let models = vec![
            model("promptAgent"),
            model("promptAgentWithStore"),
            model("promptAgentWithTools"),
            model("promptAgentWithInterrupt"),
            model("promptAgentWithRestartTool"),
        ];
        let scripted = |name: &str| {
            let (_, model) = models.iter().find(|(n, _)| *n == name).expect("an agent");
            LlmAgent::builder(name, model.clone())
        };
        let test_tool = Tool::dynamic(
            "testTool",
            "Test",
            "A simple tool",
            json!({"type": "object"}),
            |_, _| {
                stream::iter([ToolEvent::Complete {
                    output: "tool called".into(),
                    details: None,
                }])
            },
        );
        let interrupt_tool = Tool::remote::<Query>("interruptTool", "Ask", "An interrupt tool");
        let restart_tool = Tool::dynamic(
            "restartTool",
            "Restart",
            "A tool that needs the user's confirmation",
            json!({"type": "object", "properties": {"action": {"type": "string"}}}),
            |_, args| {
                let result = json!({ "result": format!("did {}", args["action"]) });
                stream::iter([ToolEvent::Complete {
                    output: result.to_string(),
                    details: Some(result),
                }])
            },
        )
        .needs_approval();
        let (blocking, blocked) = ChannelModel::new();
        let agents = [
            scripted("promptAgent").client_managed().build(),
            scripted("promptAgentWithStore").build(),
            scripted("promptAgentWithTools")
                .tool(test_tool)
                .client_managed()
                .build(),
            scripted("promptAgentWithInterrupt")
                .tool(interrupt_tool)
                .build(),
            scripted("promptAgentWithRestartTool")
                .tool(restart_tool)
                .build(),
            LlmAgent::builder("customAgentBlocking", blocking)
                .lease(Duration::from_secs(1))
                .build(),
            LlmAgent::builder("customAgentFailing", Failing).build(),
            LlmAgent::custom(
                "customAgentWithArtifacts",
                |mut turn: CustomTurn| async move {
                    turn.artifact(Artifact::new("doc1", [json!({"text": "v1"})]));
                    turn.artifact(Artifact::new("doc1", [json!({"text": "v2"})]));
                    turn.artifact(Artifact::new("doc2", [json!({"text": "other"})]));
                    Ok("done".to_owned())
                },
            )
            .client_managed()
            .build(),
            LlmAgent::custom("customAgentWithCustomState", count)
                .client_managed()
                .build(),
            LlmAgent::custom(
                "customAgentWithMultiCustomState",
                |mut turn: CustomTurn| async move {
                    turn.set_custom(json!({"counter": 1, "status": "working"}));
                    turn.update_custom(|custom| custom["counter"] = json!(2));
                    turn.update_custom(|custom| custom["status"] = json!("done"));
                    Ok("done".to_owned())
                },
            )
            .client_managed()
            .build(),
            LlmAgent::custom(
                "customAgentWithArtifactsStore",
                |mut turn: CustomTurn| async move {
                    let n = turn.artifacts().len() + 1;
                    let parts = [json!({"text": format!("content{n}")})];
                    turn.artifact(Artifact::new(format!("doc{n}"), parts));
                    Ok("done".to_owned())
                },
            )
            .build(),
            LlmAgent::custom("customAgentWithCustomStateStore", count).build(),
        ];
        let server = agents.iter().fold(
            Server::new(Registry::new()).protocol(AgentWire::new()),
            |server, agent| server.agent(agent),
        );
        let base = format!("http://{}", tests::http::serve(server).await);
        Self {
            base,
            http: reqwest::Client::new(),
            models,
            _blocked: blocked,
        }
    }

    /// Scripts `agent`'s next model answer.
    fn answer(&self, agent: &str, answer: Scripted) {
        let (_, model) = self
            .models
            .iter()
            .find(|(n, _)| *n == agent)
            .expect("a model");
        model.push(answer);
    }

    async fn post(&self, url: &str, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}/agent/{url}", self.base))
            .header("accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("the server answers")
    }

    /// A `send` step with one input: its chunks and output.
    async fn send(&self, agent: &str, init: Value, input: Value) -> Sent {
        let response = self
            .post(
                &format!("{agent}/genkit"),
                json!({"data": input, "init": init}),
            )
            .await;
        let status = response.status();
        let body = response.text().await.expect("a body");
        assert_eq!(status, 200, "{body}");
        let mut sent = Sent {
            chunks: Vec::new(),
            output: Value::Null,
        };
        for line in body.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                assert!(
                    line.is_empty() || !line.starts_with("error:"),
                    "the stream failed: {line}"
                );
                continue;
            };
            let record: Value = serde_json::from_str(data).expect("a JSON record");
            match (record.get("message"), record.get("result")) {
                (Some(chunk), _) => sent.chunks.push(chunk.clone()),
                (_, Some(output)) => sent.output = output.clone(),
                _ => panic!("an SSE record of neither a chunk nor the result: {data}"),
            }
        }
        sent
    }

    /// A `send` step the agent refuses: its error status and message. As from Genkit's
    /// servers, the streamed request is answered 200, the failure in an `error:` record.
    async fn refused(&self, agent: &str, init: Value, input: Value) -> (String, String) {
        let response = self
            .post(
                &format!("{agent}/genkit"),
                json!({"data": input, "init": init}),
            )
            .await;
        assert_eq!(response.status(), 200);
        let body = response.text().await.expect("a body");
        let record = body
            .strip_prefix("error: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not one `error:` record: {body}"));
        let body: Value = serde_json::from_str(record).expect("an error record");
        let error = &body["error"];
        (
            error["status"].as_str().unwrap_or_default().to_owned(),
            error["message"].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// `getSnapshot` by `{"snapshotId"}` or `{"sessionId"}`.
    async fn snapshot(&self, agent: &str, lookup: Value) -> Value {
        let response = self
            .post(
                &format!("{agent}/genkit/getSnapshot"),
                json!({"data": lookup}),
            )
            .await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("JSON");
        body["result"].clone()
    }

    /// `abort`: the status the snapshot had (`null` if none).
    async fn abort(&self, agent: &str, snapshot_id: &str) -> Value {
        let response = self
            .post(
                &format!("{agent}/genkit/abort"),
                json!({"data": {"snapshotId": snapshot_id}}),
            )
            .await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("JSON");
        body["result"]["status"].clone()
    }

    /// `waitUntilCompleted`: polls the snapshot until it is `completed`, `failed` or `aborted`.
    async fn settled(&self, agent: &str, snapshot_id: &str) -> Value {
        for _ in 0..400 {
            let snapshot = self
                .snapshot(agent, json!({"snapshotId": snapshot_id}))
                .await;
            if matches!(
                snapshot["status"].as_str(),
                Some("completed" | "failed" | "aborted")
            ) {
                return snapshot;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("snapshot {snapshot_id} did not settle");
    }
}

/// The spec's `contains`: every listed field matches, lists as ordered subsequences.
fn contains(actual: &Value, expected: &Value) -> bool {
    match expected {
        Value::Null => true,
        Value::Object(fields) => fields
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|found| contains(found, value))),
        Value::Array(items) => {
            let Some(actual) = actual.as_array() else {
                return false;
            };
            let mut rest = actual.iter();
            items
                .iter()
                .all(|item| rest.by_ref().any(|found| contains(found, item)))
        }
        scalar => actual == scalar,
    }
}

#[track_caller]
fn assert_contains(actual: &Value, expected: &Value) {
    assert!(
        contains(actual, expected),
        "expected {expected:#}\nin {actual:#}"
    );
}

/// The spec's `expectChunks`, in order; between them only the model's own streamed chunks.
#[track_caller]
fn assert_chunks(chunks: &[Value], expected: &[Value]) {
    let mut expected = expected.iter().peekable();
    for chunk in chunks {
        let fits = expected
            .peek()
            .is_some_and(|want| match want.get("turnEnd") {
                Some(turn_end) => chunk.get("turnEnd").is_some_and(|found| {
                    turn_end
                        .get("finishReason")
                        .is_none_or(|reason| found.get("finishReason") == Some(reason))
                }),
                None => contains(chunk, want),
            });
        if fits {
            expected.next();
            continue;
        }
        assert_eq!(
            chunk["modelChunk"]["role"], "model",
            "a chunk the spec does not expect: {chunk}\nall: {chunks:#?}"
        );
    }
    let missing: Vec<_> = expected.collect();
    assert!(
        missing.is_empty(),
        "missing chunks {missing:?} in {chunks:#?}"
    );
}

fn user(text: &str) -> Value {
    json!({"message": {"role": "user", "content": [{"text": text}]}})
}

fn text(role: &str, text: &str) -> Value {
    json!({"role": role, "content": [{"text": text}]})
}

/// A model answer of one text.
fn reply(text: &str) -> Scripted {
    Scripted::new().text_chunks([text])
}

fn id(output: &Value, field: &str) -> String {
    output[field]
        .as_str()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| panic!("no {field} in {output}"))
        .to_owned()
}

#[tokio::test]
async fn simple_single_turn_client_managed() {
    let spec = Spec::start().await;
    spec.answer("promptAgent", reply("hello back"));
    let sent = spec.send("promptAgent", json!({}), user("hi")).await;
    assert_chunks(
        &sent.chunks,
        &[json!({"turnEnd": {"finishReason": "stop"}})],
    );
    assert_contains(&sent.output["message"], &text("model", "hello back"));
    assert_eq!(sent.output["finishReason"], "stop");
    id(&sent.output["state"], "sessionId");
    assert_contains(
        &sent.output["state"],
        &json!({"messages": [text("user", "hi"), text("model", "hello back")]}),
    );
}

#[tokio::test]
async fn simple_single_turn_server_managed() {
    let spec = Spec::start().await;
    spec.answer("promptAgentWithStore", reply("hello back"));
    let sent = spec
        .send("promptAgentWithStore", json!({}), user("hi"))
        .await;
    assert_chunks(
        &sent.chunks,
        &[json!({"turnEnd": {"finishReason": "stop"}})],
    );
    assert_contains(&sent.output["message"], &text("model", "hello back"));
    assert_eq!(sent.output["finishReason"], "stop");
    assert!(sent.output.get("state").is_none(), "no inline state");
    let snap1 = id(&sent.output, "snapshotId");
    let snapshot = spec
        .snapshot("promptAgentWithStore", json!({"snapshotId": snap1}))
        .await;
    assert_eq!(snapshot["status"], "completed");
    id(&snapshot["state"], "sessionId");
}

#[tokio::test]
async fn streaming_model_chunks() {
    let spec = Spec::start().await;
    spec.answer("promptAgent", Scripted::new().text_chunks(["hel", "lo"]));
    let sent = spec.send("promptAgent", json!({}), user("hi")).await;
    let chunk = |text: &str| json!({"modelChunk": {"index": 0, "role": "model", "content": [{"text": text}]}});
    assert_chunks(
        &sent.chunks,
        &[
            chunk("hel"),
            chunk("lo"),
            json!({"turnEnd": {"finishReason": "stop"}}),
        ],
    );
    // Exactly those: the model streamed nothing else.
    assert_eq!(sent.chunks.len(), 3);
    assert_contains(&sent.output["message"], &text("model", "hello"));
    assert_contains(
        &sent.output["state"],
        &json!({"messages": [text("user", "hi"), text("model", "hello")]}),
    );
}

/// Over HTTP an invocation carries one input (Genkit's `remoteAgent` sends one per request);
/// a bidi connection takes any number, so this case runs on the agent's connection.
#[tokio::test]
async fn multi_turn_in_one_invocation() {
    let model = ScriptedModel::new([reply("reply1"), reply("reply2")]).recording();
    let agent = LlmAgent::builder("promptAgent", model.clone())
        .client_managed()
        .build();
    let mut conn = agent.connect(AgentInit::new());
    for turn in ["turn1", "turn2"] {
        let result = bidi_llm::execute(&mut conn, TurnInput::User(UserMessage::new(turn)))
            .await
            .expect("the turn starts")
            .result()
            .await
            .expect("the turn ends");
        assert_eq!(result.status, bidi_llm::Status::Completed);
    }
    conn.close();
    let output = conn.output().await.expect("an output");
    let texts: Vec<String> = output
        .state
        .messages
        .iter()
        .map(|message| match message {
            bidi_llm::Message::User(user) => user.content.clone(),
            bidi_llm::Message::Assistant(answer) => answer.text(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(texts, ["turn1", "reply1", "turn2", "reply2"]);
    // The second model call saw the first exchange.
    assert_eq!(model.requests()[1].messages.len(), 3);
}

#[tokio::test]
async fn agent_calls_tools() {
    let spec = Spec::start().await;
    spec.answer(
        "promptAgentWithTools",
        Scripted::new().tool_call("ref1", "testTool", &json!({})),
    );
    spec.answer("promptAgentWithTools", reply("done"));
    let sent = spec
        .send("promptAgentWithTools", json!({}), user("do it"))
        .await;
    let response =
        json!({"toolResponse": {"name": "testTool", "ref": "ref1", "output": "tool called"}});
    assert_chunks(
        &sent.chunks,
        &[
            json!({"modelChunk": {"role": "tool", "content": [response]}}),
            json!({"turnEnd": {}}),
        ],
    );
    assert_contains(&sent.output["message"], &text("model", "done"));
    assert_contains(
        &sent.output["state"],
        &json!({"messages": [
            text("user", "do it"),
            {"role": "model", "content": [{"toolRequest": {"name": "testTool", "input": {}, "ref": "ref1"}}]},
            {"role": "tool", "content": [response]},
            text("model", "done"),
        ]}),
    );
}

/// Phase 1 of the interrupt cases: the model calls `interruptTool` with `calls`.
async fn interrupted(spec: &Spec, prompt: &str, calls: &[(&str, Value)]) -> Sent {
    let answer = calls.iter().fold(Scripted::new(), |answer, (id, input)| {
        answer.tool_call(id, "interruptTool", input)
    });
    spec.answer("promptAgentWithInterrupt", answer);
    spec.send("promptAgentWithInterrupt", json!({}), user(prompt))
        .await
}

fn request(name: &str, id: &str, input: &Value) -> Value {
    json!({"toolRequest": {"name": name, "input": input, "ref": id}})
}

fn respond(name: &str, id: &str, output: &Value) -> Value {
    json!({"toolResponse": {"name": name, "ref": id, "output": output}})
}

#[tokio::test]
async fn interrupt_and_resume() {
    let spec = Spec::start().await;
    let input = json!({"query": "yes?"});
    let sent = interrupted(&spec, "hello", &[("123", input.clone())]).await;
    assert_contains(
        &sent.output["message"],
        &json!({"content": [request("interruptTool", "123", &input)]}),
    );
    assert_eq!(sent.output["finishReason"], "interrupted");
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithInterrupt", reply("completed"));
    let answer = respond("interruptTool", "123", &json!({"answer": "yes indeed"}));
    let sent = spec
        .send(
            "promptAgentWithInterrupt",
            json!({"snapshotId": snap1}),
            json!({"resume": {"respond": [answer]}}),
        )
        .await;
    assert_contains(&sent.output["message"], &text("model", "completed"));
}

/// Phase 1 of the restart cases: the model calls `restartTool` with `input`, which waits for
/// the user's confirmation.
async fn restart_requested(spec: &Spec, input: &Value) -> Sent {
    spec.answer(
        "promptAgentWithRestartTool",
        Scripted::new().tool_call("r1", "restartTool", input),
    );
    spec.send("promptAgentWithRestartTool", json!({}), user("do it"))
        .await
}

fn restart(input: &Value) -> Value {
    json!({"resume": {"restart": [{
        "toolRequest": {"name": "restartTool", "input": input, "ref": "r1"},
        "metadata": {"resumed": {"approved": true}},
    }]}})
}

#[tokio::test]
async fn interrupt_and_restart() {
    let spec = Spec::start().await;
    let input = json!({"action": "delete"});
    let sent = restart_requested(&spec, &input).await;
    assert_contains(
        &sent.output["message"],
        &json!({"content": [request("restartTool", "r1", &input)]}),
    );
    assert_eq!(sent.output["finishReason"], "interrupted");
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithRestartTool", reply("deleted"));
    let sent = spec
        .send(
            "promptAgentWithRestartTool",
            json!({"snapshotId": snap1}),
            restart(&input),
        )
        .await;
    assert_contains(&sent.output["message"], &text("model", "deleted"));
    // The tool ran, with the input the model gave it.
    let snapshot = spec
        .snapshot(
            "promptAgentWithRestartTool",
            json!({"snapshotId": id(&sent.output, "snapshotId")}),
        )
        .await;
    let result = json!({"result": "did \"delete\""});
    assert_contains(
        &snapshot["state"],
        &json!({"messages": [
            {"role": "tool", "content": [respond("restartTool", "r1", &result)]},
            text("model", "deleted"),
        ]}),
    );
}

#[tokio::test]
async fn restart_with_forged_inputs_rejected() {
    let spec = Spec::start().await;
    let sent = restart_requested(&spec, &json!({"action": "safe-op"})).await;
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithRestartTool", reply("should not reach"));
    let sent = spec
        .send(
            "promptAgentWithRestartTool",
            json!({"snapshotId": snap1}),
            restart(&json!({"action": "/etc/passwd"})),
        )
        .await;
    assert_eq!(sent.output["finishReason"], "failed");
    assert_eq!(sent.output["error"]["status"], "INVALID_ARGUMENT");
    let message = sent.output["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("modified inputs"), "{message}");
}

#[tokio::test]
async fn respond_referencing_non_existent_tool_rejected() {
    let spec = Spec::start().await;
    let sent = interrupted(&spec, "hello", &[("i1", json!({"query": "confirm?"}))]).await;
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithInterrupt", reply("should not reach"));
    let forged = respond("fakeTool", "fake-ref", &json!({"answer": "hacked"}));
    let sent = spec
        .send(
            "promptAgentWithInterrupt",
            json!({"snapshotId": snap1}),
            json!({"resume": {"respond": [forged]}}),
        )
        .await;
    assert_eq!(sent.output["finishReason"], "failed");
    assert_eq!(sent.output["error"]["status"], "INVALID_ARGUMENT");
    let message = sent.output["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not found in session history"),
        "{message}"
    );
}

/// Two turns on `promptAgentWithStore`, the second from the first's snapshot: both snapshots.
async fn two_turns(spec: &Spec, init: &Value, second_init: Option<Value>) -> (String, String) {
    spec.answer("promptAgentWithStore", reply("reply1"));
    let sent = spec
        .send("promptAgentWithStore", init.clone(), user("first"))
        .await;
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithStore", reply("reply2"));
    let init = second_init.unwrap_or_else(|| json!({"snapshotId": snap1}));
    let sent = spec
        .send("promptAgentWithStore", init, user("second"))
        .await;
    assert_eq!(sent.output["finishReason"], "stop");
    (snap1, id(&sent.output, "snapshotId"))
}

fn first_and_second() -> Value {
    json!([
        text("user", "first"),
        text("model", "reply1"),
        text("user", "second"),
        text("model", "reply2"),
    ])
}

#[tokio::test]
async fn snapshot_chaining_across_invocations() {
    let spec = Spec::start().await;
    let (snap1, snap2) = two_turns(&spec, &json!({}), None).await;
    let snapshot = spec
        .snapshot("promptAgentWithStore", json!({"snapshotId": snap2}))
        .await;
    assert_eq!(snapshot["parentId"], snap1.as_str());
    assert_eq!(snapshot["status"], "completed");
    id(&snapshot["state"], "sessionId");
    assert_contains(&snapshot["state"], &json!({"messages": first_and_second()}));
}

#[tokio::test]
async fn client_managed_state_across_invocations() {
    let spec = Spec::start().await;
    spec.answer("promptAgent", reply("reply1"));
    let sent = spec.send("promptAgent", json!({}), user("first")).await;
    let state1 = sent.output["state"].clone();
    let sid1 = id(&state1, "sessionId");
    spec.answer("promptAgent", reply("reply2"));
    let sent = spec
        .send("promptAgent", json!({"state": state1}), user("second"))
        .await;
    assert_contains(&sent.output["message"], &text("model", "reply2"));
    assert_contains(
        &sent.output["state"],
        &json!({"sessionId": sid1, "messages": first_and_second()}),
    );
}

fn detached(prompt: &str) -> Value {
    json!({"message": {"role": "user", "content": [{"text": prompt}]}, "detach": true})
}

#[tokio::test]
async fn detach_and_background_completion() {
    let spec = Spec::start().await;
    spec.answer("promptAgentWithStore", reply("done in background"));
    let sent = spec
        .send("promptAgentWithStore", json!({}), detached("process this"))
        .await;
    let snap1 = id(&sent.output, "snapshotId");
    let snapshot = spec.settled("promptAgentWithStore", &snap1).await;
    assert_eq!(snapshot["status"], "completed");
    assert_contains(
        &snapshot["state"],
        &json!({"messages": [text("user", "process this"), text("model", "done in background")]}),
    );
}

/// Detaches a turn of `customAgentFailing` and waits for it to fail.
async fn failed_in_background(spec: &Spec) -> (String, Value) {
    let sent = spec
        .send("customAgentFailing", json!({}), detached("fail"))
        .await;
    let snap1 = id(&sent.output, "snapshotId");
    let snapshot = spec.settled("customAgentFailing", &snap1).await;
    assert_eq!(snapshot["status"], "failed");
    assert_eq!(snapshot["finishReason"], "failed");
    (snap1, snapshot)
}

#[tokio::test]
async fn detach_with_background_failure() {
    let spec = Spec::start().await;
    failed_in_background(&spec).await;
}

/// Detaches a turn of `customAgentBlocking`: its pending snapshot.
async fn blocked(spec: &Spec) -> String {
    let sent = spec
        .send("customAgentBlocking", json!({}), detached("do work"))
        .await;
    id(&sent.output, "snapshotId")
}

#[tokio::test]
async fn abort_pending_agent() {
    let spec = Spec::start().await;
    let snap1 = blocked(&spec).await;
    assert_eq!(spec.abort("customAgentBlocking", &snap1).await, "pending");
    let snapshot = spec
        .snapshot("customAgentBlocking", json!({"snapshotId": snap1}))
        .await;
    assert_eq!(snapshot["status"], "aborted");
}

#[tokio::test]
async fn abort_completed_agent() {
    let spec = Spec::start().await;
    spec.answer("promptAgentWithStore", reply("hello"));
    let sent = spec
        .send("promptAgentWithStore", json!({}), user("hi"))
        .await;
    let snap1 = id(&sent.output, "snapshotId");
    assert_eq!(
        spec.abort("promptAgentWithStore", &snap1).await,
        "completed"
    );
    let snapshot = spec
        .snapshot("promptAgentWithStore", json!({"snapshotId": snap1}))
        .await;
    assert_eq!(snapshot["status"], "completed");
}

#[tokio::test]
async fn server_managed_agent_rejects_init_state() {
    let spec = Spec::start().await;
    let state = json!({
        "messages": [text("user", "stale history")],
        "custom": {"shouldBeIgnored": true},
        "artifacts": [],
    });
    let (status, message) = spec
        .refused(
            "promptAgentWithStore",
            json!({"state": state}),
            user("fresh message"),
        )
        .await;
    assert_eq!(status, "FAILED_PRECONDITION");
    assert!(
        message.contains("Cannot send 'state' to agent"),
        "{message}"
    );
}

#[tokio::test]
async fn failed_snapshot_includes_error_details() {
    let spec = Spec::start().await;
    let (_, snapshot) = failed_in_background(&spec).await;
    let message = snapshot["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("intentional failure"), "{snapshot}");
}

#[tokio::test]
async fn abort_non_existent_snapshot() {
    let spec = Spec::start().await;
    assert_eq!(
        spec.abort("promptAgentWithStore", "non-existent-id").await,
        Value::Null
    );
}

#[tokio::test]
async fn snapshot_branching_across_invocations() {
    let spec = Spec::start().await;
    spec.answer("promptAgentWithStore", reply("rootReply"));
    let sent = spec
        .send("promptAgentWithStore", json!({}), user("root"))
        .await;
    let snap1 = id(&sent.output, "snapshotId");
    let mut branches = Vec::new();
    for branch in ["a", "b"] {
        spec.answer("promptAgentWithStore", reply(&format!("reply-{branch}")));
        let sent = spec
            .send(
                "promptAgentWithStore",
                json!({"snapshotId": snap1}),
                user(&format!("branch-{branch}")),
            )
            .await;
        branches.push((branch, id(&sent.output, "snapshotId")));
    }
    for (branch, snap2) in branches {
        let snapshot = spec
            .snapshot("promptAgentWithStore", json!({"snapshotId": snap2}))
            .await;
        assert_eq!(snapshot["parentId"], snap1.as_str());
        assert_eq!(snapshot["status"], "completed");
        let expected = json!({"messages": [
            text("user", "root"),
            text("model", "rootReply"),
            text("user", &format!("branch-{branch}")),
            text("model", &format!("reply-{branch}")),
        ]});
        assert_contains(&snapshot["state"], &expected);
        let other = if branch == "a" {
            "branch-b"
        } else {
            "branch-a"
        };
        assert!(!snapshot["state"].to_string().contains(other), "{snapshot}");
    }
}

#[tokio::test]
async fn multiple_tool_calls_in_one_model_response() {
    let spec = Spec::start().await;
    spec.answer(
        "promptAgentWithTools",
        Scripted::new()
            .tool_call("ref1", "testTool", &json!({}))
            .tool_call("ref2", "testTool", &json!({})),
    );
    spec.answer("promptAgentWithTools", reply("all done"));
    let sent = spec
        .send("promptAgentWithTools", json!({}), user("do both"))
        .await;
    assert_contains(&sent.output["message"], &text("model", "all done"));
    let called = json!("tool called");
    assert_contains(
        &sent.output["state"],
        &json!({"messages": [
            text("user", "do both"),
            {"role": "model", "content": [
                request("testTool", "ref1", &json!({})),
                request("testTool", "ref2", &json!({})),
            ]},
            {"role": "tool", "content": [
                respond("testTool", "ref1", &called),
                respond("testTool", "ref2", &called),
            ]},
            text("model", "all done"),
        ]}),
    );
}

#[tokio::test]
async fn interrupt_with_multiple_tool_requests() {
    let spec = Spec::start().await;
    let (q1, q2) = (json!({"query": "q1?"}), json!({"query": "q2?"}));
    let sent = interrupted(
        &spec,
        "confirm both",
        &[("i1", q1.clone()), ("i2", q2.clone())],
    )
    .await;
    assert_contains(
        &sent.output["message"],
        &json!({"content": [
            request("interruptTool", "i1", &q1),
            request("interruptTool", "i2", &q2),
        ]}),
    );
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithInterrupt", reply("both confirmed"));
    let answers = [
        respond("interruptTool", "i1", &json!({"answer": "yes1"})),
        respond("interruptTool", "i2", &json!({"answer": "yes2"})),
    ];
    let sent = spec
        .send(
            "promptAgentWithInterrupt",
            json!({"snapshotId": snap1}),
            json!({"resume": {"respond": answers}}),
        )
        .await;
    assert_contains(&sent.output["message"], &text("model", "both confirmed"));
}

#[tokio::test]
async fn interrupt_resume_state_accumulation() {
    let spec = Spec::start().await;
    let query = json!({"query": "ok?"});
    let sent = interrupted(&spec, "check", &[("t1", query.clone())]).await;
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithInterrupt", reply("done"));
    let answer = respond("interruptTool", "t1", &json!({"answer": "confirmed"}));
    let sent = spec
        .send(
            "promptAgentWithInterrupt",
            json!({"snapshotId": snap1}),
            json!({"resume": {"respond": [answer.clone()]}}),
        )
        .await;
    let snap2 = id(&sent.output, "snapshotId");
    let snapshot = spec
        .snapshot("promptAgentWithInterrupt", json!({"snapshotId": snap2}))
        .await;
    assert_eq!(snapshot["status"], "completed");
    assert_contains(
        &snapshot["state"],
        &json!({"messages": [
            text("user", "check"),
            {"role": "model", "content": [request("interruptTool", "t1", &query)]},
            {"role": "tool", "content": [answer]},
            text("model", "done"),
        ]}),
    );
}

#[tokio::test]
async fn abort_failed_agent() {
    let spec = Spec::start().await;
    let (snap1, _) = failed_in_background(&spec).await;
    assert_eq!(spec.abort("customAgentFailing", &snap1).await, "failed");
    let snapshot = spec
        .snapshot("customAgentFailing", json!({"snapshotId": snap1}))
        .await;
    assert_eq!(snapshot["status"], "failed");
}

#[tokio::test]
async fn abort_already_aborted_agent() {
    let spec = Spec::start().await;
    let snap1 = blocked(&spec).await;
    assert_eq!(spec.abort("customAgentBlocking", &snap1).await, "pending");
    assert_eq!(spec.abort("customAgentBlocking", &snap1).await, "aborted");
    let snapshot = spec
        .snapshot("customAgentBlocking", json!({"snapshotId": snap1}))
        .await;
    assert_eq!(snapshot["status"], "aborted");
}

/// Two turns on session `sid` (its id in both inits), then the snapshot `lookup` finds from the
/// second turn's: the second, chained to the first, holding both turns.
async fn two_turns_by_session_id(sid: &str, lookup: impl FnOnce(&str) -> Value) {
    let spec = Spec::start().await;
    let init = json!({"sessionId": sid});
    let (snap1, snap2) = two_turns(&spec, &init, Some(init.clone())).await;
    let snapshot = spec.snapshot("promptAgentWithStore", lookup(&snap2)).await;
    assert_eq!(snapshot["snapshotId"], snap2.as_str());
    assert_eq!(snapshot["parentId"], snap1.as_str());
    assert_eq!(snapshot["status"], "completed");
    id(&snapshot["state"], "sessionId");
    assert_contains(
        &snapshot["state"],
        &json!({"sessionId": sid, "messages": first_and_second()}),
    );
}

#[tokio::test]
async fn resume_server_managed_session_by_session_id() {
    two_turns_by_session_id(
        "11111111-1111-4111-8111-111111111111",
        |snap2| json!({"snapshotId": snap2}),
    )
    .await;
}

#[tokio::test]
async fn fetch_latest_snapshot_by_session_id() {
    let sid = "22222222-2222-4222-8222-222222222222";
    two_turns_by_session_id(sid, |_| json!({"sessionId": sid})).await;
}

#[tokio::test]
async fn non_uuid_session_id_accepted() {
    let spec = Spec::start().await;
    let sid = "my-app-session-123";
    spec.answer("promptAgentWithStore", reply("reply1"));
    let sent = spec
        .send(
            "promptAgentWithStore",
            json!({"sessionId": sid}),
            user("first"),
        )
        .await;
    assert_eq!(sent.output["finishReason"], "stop");
    id(&sent.output, "snapshotId");
    let snapshot = spec
        .snapshot("promptAgentWithStore", json!({"sessionId": sid}))
        .await;
    assert_eq!(snapshot["status"], "completed");
    assert_contains(
        &snapshot["state"],
        &json!({"sessionId": sid, "messages": [text("user", "first"), text("model", "reply1")]}),
    );
}

#[tokio::test]
async fn client_managed_agent_rejects_session_id() {
    let spec = Spec::start().await;
    let (status, message) = spec
        .refused(
            "promptAgent",
            json!({"sessionId": "44444444-4444-4444-8444-444444444444"}),
            user("hi"),
        )
        .await;
    assert_eq!(status, "FAILED_PRECONDITION");
    assert!(message.contains("Cannot use 'sessionId'"), "{message}");
}

#[tokio::test]
async fn snapshot_id_and_matching_session_id_together_resume() {
    let spec = Spec::start().await;
    let sid = "55555555-5555-4555-8555-555555555555";
    let init = json!({"sessionId": sid});
    spec.answer("promptAgentWithStore", reply("reply1"));
    let sent = spec.send("promptAgentWithStore", init, user("first")).await;
    let snap1 = id(&sent.output, "snapshotId");
    spec.answer("promptAgentWithStore", reply("reply2"));
    let both = json!({"snapshotId": snap1, "sessionId": sid});
    let sent = spec
        .send("promptAgentWithStore", both, user("second"))
        .await;
    assert_eq!(sent.output["finishReason"], "stop");
}

#[tokio::test]
async fn snapshot_id_with_mismatched_session_id_rejected() {
    let spec = Spec::start().await;
    spec.answer("promptAgentWithStore", reply("reply1"));
    let sent = spec
        .send(
            "promptAgentWithStore",
            json!({"sessionId": "55555555-5555-4555-8555-555555555555"}),
            user("first"),
        )
        .await;
    let snap1 = id(&sent.output, "snapshotId");
    let (status, message) = spec
        .refused(
            "promptAgentWithStore",
            json!({"snapshotId": snap1, "sessionId": "99999999-9999-4999-8999-999999999999"}),
            user("second"),
        )
        .await;
    assert_eq!(status, "INVALID_ARGUMENT");
    assert!(message.contains("does not belong to session"), "{message}");
}

#[tokio::test]
async fn artifacts_streamed_and_deduplicated() {
    let spec = Spec::start().await;
    let sent = spec
        .send("customAgentWithArtifacts", json!({}), user("go"))
        .await;
    let artifact =
        |name: &str, text: &str| json!({"artifact": {"name": name, "parts": [{"text": text}]}});
    assert_chunks(
        &sent.chunks,
        &[
            artifact("doc1", "v1"),
            artifact("doc1", "v2"),
            artifact("doc2", "other"),
            json!({"turnEnd": {}}),
        ],
    );
    assert_contains(&sent.output["message"], &text("model", "done"));
    let artifacts = &sent.output["artifacts"];
    assert_eq!(
        *artifacts,
        json!([
            {"name": "doc1", "parts": [{"text": "v2"}]},
            {"name": "doc2", "parts": [{"text": "other"}]},
        ])
    );
}

#[tokio::test]
async fn custom_state_updated_during_execution() {
    let spec = Spec::start().await;
    let sent = spec
        .send("customAgentWithCustomState", json!({}), user("go"))
        .await;
    assert_contains(&sent.output["message"], &text("model", "done"));
    assert_contains(&sent.output["state"], &json!({"custom": {"counter": 1}}));
}

#[tokio::test]
async fn custom_state_persisted_across_invocations() {
    let spec = Spec::start().await;
    let sent = spec
        .send("customAgentWithCustomState", json!({}), user("first"))
        .await;
    assert_contains(&sent.output["state"], &json!({"custom": {"counter": 1}}));
    let state1 = sent.output["state"].clone();
    let sent = spec
        .send(
            "customAgentWithCustomState",
            json!({"state": state1}),
            user("second"),
        )
        .await;
    assert_contains(
        &sent.output["state"],
        &json!({
            "custom": {"counter": 2},
            "messages": [text("user", "first"), text("user", "second")],
        }),
    );
}

#[tokio::test]
async fn custom_state_streamed_as_custom_patch_chunk() {
    let spec = Spec::start().await;
    let sent = spec
        .send("customAgentWithCustomState", json!({}), user("go"))
        .await;
    assert_chunks(
        &sent.chunks,
        &[
            json!({"customPatch": [{"op": "replace", "path": "", "value": {"counter": 1}}]}),
            json!({"turnEnd": {}}),
        ],
    );
    assert_contains(&sent.output["message"], &text("model", "done"));
    assert_contains(&sent.output["state"], &json!({"custom": {"counter": 1}}));
}

#[tokio::test]
async fn custom_patch_first_chunk_is_whole_document_replace_then_incremental() {
    let spec = Spec::start().await;
    let sent = spec
        .send("customAgentWithMultiCustomState", json!({}), user("go"))
        .await;
    let patch = |path: &str, value: Value| json!({"customPatch": [{"op": "replace", "path": path, "value": value}]});
    assert_chunks(
        &sent.chunks,
        &[
            patch("", json!({"counter": 1, "status": "working"})),
            patch("/counter", json!(2)),
            patch("/status", json!("done")),
            json!({"turnEnd": {}}),
        ],
    );
    // Each incremental patch is that one operation.
    let patches: Vec<_> = sent
        .chunks
        .iter()
        .filter_map(|chunk| chunk.get("customPatch"))
        .collect();
    assert_eq!(
        patches[1],
        &json!([{"op": "replace", "path": "/counter", "value": 2}])
    );
    assert_contains(&sent.output["message"], &text("model", "done"));
    assert_contains(
        &sent.output["state"],
        &json!({"custom": {"counter": 2, "status": "done"}}),
    );
}

#[tokio::test]
async fn detached_run_emits_no_custom_patch_chunks() {
    let spec = Spec::start().await;
    let sent = spec
        .send("customAgentWithCustomStateStore", json!({}), detached("go"))
        .await;
    assert_eq!(sent.chunks, Vec::<Value>::new());
    let snap1 = id(&sent.output, "snapshotId");
    let snapshot = spec
        .settled("customAgentWithCustomStateStore", &snap1)
        .await;
    assert_eq!(snapshot["status"], "completed");
    assert_contains(&snapshot["state"], &json!({"custom": {"counter": 1}}));
}

#[tokio::test]
async fn artifacts_persisted_across_invocations() {
    let spec = Spec::start().await;
    let agent = "customAgentWithArtifactsStore";
    let doc =
        |n: u32| json!({"name": format!("doc{n}"), "parts": [{"text": format!("content{n}")}]});
    let sent = spec.send(agent, json!({}), user("first")).await;
    let snap1 = id(&sent.output, "snapshotId");
    assert_contains(&sent.output["artifacts"], &json!([doc(1)]));
    let sent = spec
        .send(agent, json!({"snapshotId": snap1}), user("second"))
        .await;
    assert_contains(&sent.output["artifacts"], &json!([doc(1), doc(2)]));
}

#[tokio::test]
async fn custom_state_persisted_via_server_managed_store() {
    let spec = Spec::start().await;
    let agent = "customAgentWithCustomStateStore";
    let sent = spec.send(agent, json!({}), user("first")).await;
    let snap1 = id(&sent.output, "snapshotId");
    let sent = spec
        .send(agent, json!({"snapshotId": snap1}), user("second"))
        .await;
    let snap2 = id(&sent.output, "snapshotId");
    let snapshot = spec.snapshot(agent, json!({"snapshotId": snap2})).await;
    assert_eq!(snapshot["status"], "completed");
    assert_contains(
        &snapshot["state"],
        &json!({
            "custom": {"counter": 2},
            "messages": [text("user", "first"), text("user", "second")],
        }),
    );
}

/// Beyond the spec: an id in a body is capped as HTTP ids are (256 bytes). A 900 KB
/// `snapshotId` or `sessionId` is refused with `INVALID_ARGUMENT` by `getSnapshot`, `abort` and
/// a turn's init, and no answer quotes it whole.
#[tokio::test]
async fn ids_over_256_bytes_are_refused_and_never_echoed() {
    let spec = Spec::start().await;
    let long = "x".repeat(900 * 1024);
    let small = |body: &str| {
        assert!(body.len() < 2048, "{} bytes answered", body.len());
        assert!(!body.contains(&"x".repeat(300)), "the id is quoted: {body}");
    };
    for (path, lookup) in [
        ("getSnapshot", json!({"snapshotId": long})),
        ("getSnapshot", json!({"sessionId": long})),
        ("abort", json!({"snapshotId": long})),
    ] {
        let response = spec
            .post(
                &format!("promptAgentWithStore/genkit/{path}"),
                json!({"data": lookup}),
            )
            .await;
        assert_eq!(response.status(), 400, "{path}");
        let body = response.text().await.expect("a body");
        small(&body);
        let body: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            body["error"]["status"], "INVALID_ARGUMENT",
            "{path}: {body}"
        );
    }
    for init in [json!({"snapshotId": long}), json!({"sessionId": long})] {
        let (status, message) = spec.refused("promptAgentWithStore", init, user("hi")).await;
        assert_eq!(status, "INVALID_ARGUMENT");
        small(&message);
    }
}
