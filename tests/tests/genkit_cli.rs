//! Genkit's own CLI (`genkit-cli` 1.43.0, pinned in `tests/genkit-cli`) drives a bidi program
//! (`src/bin/reflection-runtime.rs`) through the reflection API, offline: `genkit start` finds
//! it, and its tools API (what the Developer UI calls) lists the program's actions, runs them,
//! streams them, cancels a run and shows their traces; `genkit flow:run` prints a flow's
//! output. The Developer UI's page itself is downloaded by the CLI at start, which fails
//! offline: its API is what is tested.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::genkit::{Group, cli, free_port, project};

/// The CLI's tools API (tRPC procedures and streaming routes) on `port`.
struct Tools {
    base: String,
    client: reqwest::Client,
}

impl Tools {
    /// A tRPC query: `GET /api/{procedure}?input=<json>`; its `result.data`.
    async fn query(&self, procedure: &str, input: &Value) -> Value {
        let url = format!(
            "{}/api/{procedure}?input={}",
            self.base,
            encode(&input.to_string())
        );
        let answer: Value = self
            .client
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["result"]["data"].clone()
    }

    /// A tRPC mutation: `POST /api/{procedure}` with `input`; the whole answer.
    async fn mutate(&self, procedure: &str, input: &Value) -> Value {
        let url = format!("{}/api/{procedure}", self.base);
        let answer = self.client.post(url).json(input).send().await.unwrap();
        answer.json().await.unwrap()
    }

    /// `POST /api/runAction` or `/api/streamAction`: the response, once its headers came.
    async fn run(&self, route: &str, request: &Value) -> reqwest::Response {
        let url = format!("{}/api/{route}", self.base);
        let response = self.client.post(url).json(request).send().await.unwrap();
        assert_eq!(response.status(), 200, "{route}");
        response
    }

    /// `POST /api/streamAction` with `request`, read to its end: its lines of JSON.
    async fn streamed(&self, request: &Value) -> Vec<Value> {
        let body = self
            .run("streamAction", request)
            .await
            .text()
            .await
            .unwrap();
        lines(&body)
    }

    /// Waits until `query` of `procedure` answers what `done` accepts; that answer.
    async fn until(&self, procedure: &str, input: &Value, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let data = self.query(procedure, input).await;
            if done(&data) {
                return data;
            }
            assert!(Instant::now() < deadline, "{procedure} {input}: {data:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `text` percent-encoded for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// Lines of JSON, the last without a newline, as the tools stream them.
fn lines(body: &str) -> Vec<Value> {
    body.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// `genkit <args>` in `dir`, with `home` as its HOME; its output, after it succeeded.
fn genkit(dir: &Path, home: &Path, args: &[&str]) -> String {
    let (succeeded, text) = genkit_output(dir, home, args);
    assert!(succeeded, "genkit {args:?}: {text}");
    text
}

/// `genkit <args>` in `dir`, with `home` as its HOME: whether it succeeded, and its output.
fn genkit_output(dir: &Path, home: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(cli().unwrap())
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("GENKIT_ENV")
        .env_remove("GENKIT_TELEMETRY_SERVER")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A project with the CLI configured to phone nowhere: its directory and the CLI's HOME.
fn configured() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let project = project();
    let (dir, home) = (project.path().to_path_buf(), project.path().join("home"));
    // Nothing phones home: no analytics, no update check.
    genkit(&dir, &home, &["config", "set", "analyticsOptOut", "true"]);
    genkit(
        &dir,
        &home,
        &["config", "set", "updateNotificationsOptOut", "true"],
    );
    (project, dir, home)
}

/// `genkit start` of the reflection runtime in `dir` (with `flags`), its tools API on a free
/// port, once the runtime said `ready` and the tools are up.
fn start(dir: &Path, home: &Path, flags: &[&str], ready: &str) -> (Group, Tools) {
    let port = free_port();
    let mut command = Command::new(cli().unwrap());
    command
        .args(["start", "--non-interactive", "--no-update-notification"])
        .args(flags)
        .arg("-p")
        .arg(port.to_string())
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_reflection-runtime"))
        .env("HOME", home);
    for variable in [
        "GENKIT_ENV",
        "GENKIT_TELEMETRY_SERVER",
        "GENKIT_REFLECTION_PORT",
        "GENKIT_REFLECTION_HOST",
        "GENKIT_REFLECTION_SECRET_TOKEN",
        "GENKIT_REFLECTION_V2_SERVER",
        "GENKIT_RUNTIME_ID",
    ] {
        command.env_remove(variable);
    }
    let mut start = Group::spawn(command, dir).unwrap();
    start
        .wait_for(Duration::from_secs(120), |out| {
            out.contains(ready) && out.contains("Genkit Developer UI")
        })
        .unwrap();
    let tools = Tools {
        base: format!("http://127.0.0.1:{port}"),
        client: reqwest::Client::new(),
    };
    (start, tools)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genkit_start_drives_a_bidi_program() {
    tokio::task::spawn_blocking(|| cli().unwrap())
        .await
        .unwrap();
    let (_project, dir, home) = configured();
    let (mut start, tools) = start(&dir, &home, &[], "reflection on");

    // Found: the runtime file, its health, the notice.
    let runtimes = tools
        .until("getActiveRuntimes", &Value::Null, |data| {
            data.as_array().is_some_and(|runtimes| !runtimes.is_empty())
        })
        .await;
    let runtime = &runtimes[0];
    assert_eq!(runtime["name"], "reflection-runtime", "{runtimes:#}");
    assert!(
        runtime["genkitVersion"]
            .as_str()
            .unwrap()
            .starts_with("bidi-genkit/")
    );
    assert_eq!(runtime["reflectionApiSpecVersion"], 1);

    let actions = tools.query("listActions", &json!({})).await;
    let countdown = &actions["/flow/countdown"];
    assert_eq!(countdown["inputSchema"]["type"], "integer", "{actions:#}");
    assert_eq!(countdown["outputSchema"]["type"], "string");
    assert!(countdown["streamSchema"].is_object());
    assert!(actions["/agent/notes"]["initSchema"].is_object());
    assert_eq!(
        actions["/bidi-flow/slow"]["description"],
        "Runs until cancelled"
    );

    // A run, then the same streamed, then an agent's turn.
    let answer: Value = tools
        .run("runAction", &json!({"key": "/flow/countdown", "input": 3}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"], "done after 3", "{answer}");
    let trace_id = answer["telemetry"]["traceId"].as_str().unwrap().to_owned();
    let streamed = tools
        .streamed(&json!({"key": "/flow/countdown", "input": 2}))
        .await;
    assert_eq!(streamed[..2], [json!({"left": 2}), json!({"left": 1})]);
    assert_eq!(streamed[2]["result"], "done after 2", "{streamed:?}");
    let turn = tools
        .streamed(&json!({"key": "/agent/notes", "input": "hello", "init": {"sessionId": "cli"}}))
        .await;
    let said: String = turn[..turn.len() - 1]
        .iter()
        .map(|chunk| chunk.as_str().unwrap())
        .collect();
    assert_eq!(said, "noted \"hello\" after 0 lines");
    assert_eq!(turn.last().unwrap()["result"]["output"], 1);

    refuses_a_bad_input(&tools).await;
    agent_steps(&tools).await;

    cancel(&tools).await;
    traces(&tools, &trace_id).await;

    // `genkit flow:run` finds the running program and prints the flow's output.
    let printed = genkit(&dir, &home, &["flow:run", "countdown", "3"]);
    assert!(printed.contains("done after 3"), "{printed}");
    let printed = genkit(&dir, &home, &["flow:run", "countdown", "2", "--stream"]);
    assert!(
        printed.contains("\"left\": 1") && printed.contains("done after 2"),
        "{printed}"
    );
    // A flow whose init is a struct: `flow:run` sends no init, which is the init type's
    // defaults; an init type without them is refused, saying how to pass one.
    let printed = genkit(
        &dir,
        &home,
        &["flow:run", "--non-interactive", "greet", "\"Ada\""],
    );
    assert!(printed.contains("Hello, Ada!"), "{printed}");
    let (_, printed) = genkit_output(&dir, &home, &["flow:run", "letter", "\"hi\""]);
    assert!(
        printed.contains("missing field `to`") && printed.contains("send an `init` with the run"),
        "{printed}"
    );
    // Every call of the tools was answered: the notice too, which they only log if refused.
    assert!(
        !start.output().contains("Failed to notify runtime"),
        "{}",
        start.output()
    );

    let file_dir = dir.join(".genkit").join("runtimes");
    start.interrupt().unwrap();
    let left: Vec<_> = std::fs::read_dir(&file_dir).unwrap().collect();
    assert!(
        left.is_empty(),
        "the runtime file is removed: {left:?}\n{}",
        start.output()
    );
}

/// An input the action refuses comes through in Genkit's shape: code 3.
async fn refuses_a_bad_input(tools: &Tools) {
    let refused = tools
        .streamed(&json!({"key": "/flow/countdown", "input": "x"}))
        .await
        .pop()
        .unwrap();
    assert_eq!(refused["error"]["code"], 3, "{refused}");
}

/// Cancels a streamed run of the slow flow through the tools, by its trace id.
async fn cancel(tools: &Tools) {
    let mut response = tools
        .run(
            "streamAction",
            &json!({"key": "/bidi-flow/slow", "input": "go"}),
        )
        .await;
    let trace_id = trace_of(&response);
    let mut body = String::new();
    let first = read_lines(&mut response, &mut body, 1).await;
    assert_eq!(first, [json!("started")], "{body}");
    let cancelled = tools
        .mutate("cancelAction", &json!({"traceId": trace_id}))
        .await;
    assert_eq!(
        cancelled["result"]["data"],
        json!({"message": "Action cancelled"}),
        "{cancelled}"
    );
    let end = rest(&mut response, &mut body).await.pop().unwrap();
    assert_eq!(end["error"]["code"], 1, "{body}");
    let again = tools
        .mutate("cancelAction", &json!({"traceId": trace_id}))
        .await;
    assert!(
        again["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("not found or already completed")),
        "{again}"
    );
}

/// The countdown's trace, as the tools list and show it.
async fn traces(tools: &Tools, trace_id: &str) {
    let listed = tools
        .until("listTraces", &json!({"limit": 50}), |data| {
            data["traces"]
                .as_array()
                .is_some_and(|traces| traces.iter().any(|trace| trace["traceId"] == trace_id))
        })
        .await;
    let summary = listed["traces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|trace| trace["traceId"] == trace_id)
        .unwrap();
    assert_eq!(summary["displayName"], "countdown", "{summary:#}");
    let trace = tools
        .until("getTrace", &json!({"traceId": trace_id}), |trace| {
            trace["spans"].as_object().is_some_and(|spans| {
                spans.len() == 3 && spans.values().all(|span| span["endTime"] != 0)
            })
        })
        .await;
    let spans: Vec<&Value> = trace["spans"].as_object().unwrap().values().collect();
    let root = spans
        .iter()
        .find(|span| span.get("parentSpanId").is_none())
        .expect("a root");
    assert_eq!(root["attributes"]["genkit:type"], "action");
    assert_eq!(root["attributes"]["genkit:input"], "3");
    assert_eq!(root["attributes"]["genkit:state"], "success");
    let turn = spans
        .iter()
        .find(|span| span["displayName"] == "turn 1")
        .unwrap_or_else(|| panic!("a turn in {trace:#}"));
    assert_eq!(turn["parentSpanId"], root["spanId"]);
    assert_eq!(turn["attributes"]["genkit:type"], "flowStep");
}

/// An LLM agent's turn shows in Genkit's trace data as Genkit's own steps: `generate` over the
/// model's action and the tool's, with the model's input and output.
async fn agent_steps(tools: &Tools) {
    let request = json!({"key": "/agent/helper", "input": {"content": "word_count one two three"},
        "init": {"sessionId": "steps"}});
    let answer: Value = tools.run("runAction", &request).await.json().await.unwrap();
    let trace_id = answer["telemetry"]["traceId"].as_str().unwrap().to_owned();
    let subtypes = |trace: &Value| -> Vec<String> {
        trace["spans"]
            .as_object()
            .map(|spans| {
                spans
                    .values()
                    .filter(|span| span["endTime"] != 0)
                    .filter_map(|span| span["attributes"]["genkit:metadata:subtype"].as_str())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    // Two model calls (the one that calls the tool, the one that reports it) and the tool's.
    let trace = tools
        .until("getTrace", &json!({"traceId": trace_id}), |trace| {
            let subtypes = subtypes(trace);
            subtypes.iter().filter(|s| *s == "model").count() == 2
                && subtypes.iter().any(|s| s == "tool")
        })
        .await;
    let spans: Vec<&Value> = trace["spans"].as_object().unwrap().values().collect();
    let step = |subtype: &str| {
        spans
            .iter()
            .find(|span| span["attributes"]["genkit:metadata:subtype"] == subtype)
            .map(|span| &span["attributes"])
            .unwrap_or_else(|| panic!("no {subtype} step in {trace:#}"))
    };
    let generate = spans
        .iter()
        .find(|span| span["attributes"]["genkit:name"] == "generate")
        .unwrap_or_else(|| panic!("no generate step in {trace:#}"));
    assert_eq!(generate["attributes"]["genkit:type"], "util");
    let path = generate["attributes"]["genkit:path"].as_str().unwrap();
    assert!(path.ends_with("/{generate,t:util}"), "{path}");
    let model = step("model");
    assert_eq!(model["genkit:type"], "action");
    assert_eq!(model["genkit:name"], "demo");
    assert_eq!(
        model["genkit:path"],
        format!("{path}/{{demo,t:action,s:model}}")
    );
    assert!(
        model["genkit:input"]
            .as_str()
            .unwrap()
            .contains("word_count one two three"),
        "{model:#}"
    );
    let tool = step("tool");
    assert_eq!(tool["genkit:name"], "word_count");
    assert_eq!(
        tool["genkit:path"],
        format!("{path}/{{word_count,t:action,s:tool}}")
    );
    assert_eq!(tool["genkit:state"], "success");
    assert!(
        tool["genkit:output"].as_str().unwrap().contains("words"),
        "{tool:#}"
    );
}

/// The trace id a run's headers carry, before its body.
fn trace_of(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-genkit-trace-id")
        .expect("the trace id before the body")
        .to_str()
        .unwrap()
        .to_owned()
}

/// Reads `response` to its end, after what `body` holds: all its lines of JSON.
async fn rest(response: &mut reqwest::Response, body: &mut String) -> Vec<Value> {
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    lines(body)
}

/// Reads `response` until its lines hold `count` lines (the last one may be partial): the
/// lines read so far, whole.
async fn read_lines(
    response: &mut reqwest::Response,
    body: &mut String,
    count: usize,
) -> Vec<Value> {
    while body.matches('\n').count() < count {
        let chunk = response.chunk().await.unwrap().expect("more of the run");
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    body.lines()
        .take(count)
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genkit_start_over_reflection_v2_sends_a_bidi_action_its_inputs_turn_by_turn() {
    tokio::task::spawn_blocking(|| cli().unwrap())
        .await
        .unwrap();
    let (_project, dir, home) = configured();
    let flags = ["--experimental-reflection-v2"];
    let (mut start, tools) = start(&dir, &home, &flags, "reflection dialing ws://");

    // Registered over the WebSocket: listed, with its actions (the init schema kept in the
    // metadata, which the tools keep).
    let runtimes = tools
        .until("getActiveRuntimes", &Value::Null, |data| {
            data.as_array().is_some_and(|runtimes| !runtimes.is_empty())
        })
        .await;
    assert_eq!(runtimes[0]["name"], "reflection-runtime", "{runtimes:#}");
    let actions = tools.query("listActions", &json!({})).await;
    assert_eq!(
        actions["/flow/countdown"]["inputSchema"]["type"], "integer",
        "{actions:#}"
    );
    assert!(
        actions["/agent/notes"]["metadata"]["initSchema"].is_object(),
        "{actions:#}"
    );

    // A run with its one input, streamed.
    let streamed = tools
        .streamed(&json!({"key": "/flow/countdown", "input": 2}))
        .await;
    assert_eq!(
        streamed[..2],
        [json!({"left": 2}), json!({"left": 1})],
        "{streamed:?}"
    );
    assert_eq!(streamed[2]["result"], "done after 2", "{streamed:?}");

    // The agent's session, its inputs sent turn by turn: each turn's chunks come before the
    // next input is sent.
    let mut response = tools
        .run(
            "streamAction?bidi=true",
            &json!({"key": "/agent/notes", "init": {"sessionId": "v2"}}),
        )
        .await;
    let trace_id = trace_of(&response);
    let send = |chunk: &str| {
        let body = json!({"traceId": trace_id, "chunk": chunk});
        tools
            .client
            .post(format!("{}/api/sendBidiInput", tools.base))
            .json(&body)
            .send()
    };
    let mut body = String::new();
    let said = |lines: &[Value]| lines.iter().filter_map(Value::as_str).collect::<String>();
    assert_eq!(send("one").await.unwrap().status(), 200);
    let first = read_lines(&mut response, &mut body, 5).await;
    assert_eq!(said(&first), "noted \"one\" after 0 lines", "{first:?}");
    assert_eq!(send("two").await.unwrap().status(), 200);
    let both = read_lines(&mut response, &mut body, 10).await;
    assert_eq!(said(&both[5..]), "noted \"two\" after 1 lines", "{both:?}");
    let ended = tools
        .client
        .post(format!("{}/api/endBidiInput", tools.base))
        .json(&json!({"traceId": trace_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), 200);
    let end = rest(&mut response, &mut body).await.pop().unwrap();
    assert_eq!(end["result"]["output"], 2, "{body}");
    assert_eq!(end["telemetry"]["traceId"], trace_id.as_str());

    // Errors in Genkit's shape; a run cancelled by its trace.
    refuses_a_bad_input(&tools).await;
    cancel(&tools).await;

    // The tools gone, the runtime stops serving the API and its program goes on.
    start.interrupt().unwrap();
    assert!(
        !start.output().contains("Unknown method"),
        "{}",
        start.output()
    );
}
