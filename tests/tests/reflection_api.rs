//! Genkit's reflection API of a bidi program (`src/bin/reflection-runtime.rs`), spoken to over
//! real sockets as Genkit's tools speak it: the runtime file, health, the secret, actions,
//! runs (streamed and not), their errors, cancel, and the spans posted to a telemetry server;
//! and what it refuses: pages in a browser, DNS rebinding, bodies that are not JSON, and on a
//! server with auth, every call without the tools' secret. `genkit_cli.rs` drives the same
//! program with Genkit's own CLI.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};
use tests::genkit::{Group, free_port, project};

const SECRET: &str = "s3cret-token";

/// The spans a fake telemetry server was posted, each body as sent.
#[derive(Clone, Default)]
struct Posted(Arc<Mutex<Vec<Value>>>);

impl Posted {
    /// Serves `POST /api/traces` on a free port; its URL.
    async fn serve(&self) -> String {
        async fn take(State(posted): State<Posted>, body: axum::Json<Value>) -> &'static str {
            posted.0.lock().unwrap().push(body.0);
            "OK"
        }
        let app = Router::new()
            .route("/api/traces", post(take))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// The posted versions of span `span_id` of trace `trace_id`, in order.
    fn span(&self, trace_id: &str, span_id: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|trace| trace["traceId"] == trace_id)
            .filter_map(|trace| trace["spans"].get(span_id).cloned())
            .collect()
    }

    /// Every span of trace `trace_id`, as last posted.
    fn spans(&self, trace_id: &str) -> Vec<Value> {
        let mut spans: Vec<Value> = Vec::new();
        for trace in self.0.lock().unwrap().iter() {
            if trace["traceId"] != trace_id {
                continue;
            }
            for span in trace["spans"].as_object().unwrap().values() {
                spans.retain(|kept| kept["spanId"] != span["spanId"]);
                spans.push(span.clone());
            }
        }
        spans
    }

    /// Waits until `done` holds of what was posted.
    async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "{what}: {:#?}",
                self.0.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The runtime program, started as `genkit start` starts it (`GENKIT_ENV=dev`).
struct Runtime {
    group: Group,
    base: String,
    client: reqwest::Client,
    secret: Option<&'static str>,
}

impl Runtime {
    fn start(dir: &Path, telemetry: &str, secret: Option<&'static str>) -> Self {
        let mut group = Self::spawn(dir, telemetry, secret, &[]);
        group
            .1
            .wait_for(Duration::from_secs(60), |out| out.contains("reflection on"))
            .unwrap();
        Self {
            group: group.1,
            base: format!("http://127.0.0.1:{}", group.0),
            client: reqwest::Client::new(),
            secret,
        }
    }

    /// The program started with `args`, and the reflection API's port.
    fn spawn(
        dir: &Path,
        telemetry: &str,
        secret: Option<&'static str>,
        args: &[&str],
    ) -> (u16, Group) {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_reflection-runtime"));
        command
            .args(args)
            .env("GENKIT_ENV", "dev")
            .env("GENKIT_REFLECTION_PORT", port.to_string())
            .env("GENKIT_TELEMETRY_SERVER", telemetry)
            .env_remove("GENKIT_REFLECTION_HOST")
            .env_remove("GENKIT_RUNTIME_ID")
            .env_remove("GENKIT_REFLECTION_SECRET_TOKEN");
        if let Some(secret) = secret {
            command.env("GENKIT_REFLECTION_SECRET_TOKEN", secret);
        }
        (port, Group::spawn(command, dir).unwrap())
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match self.secret {
            Some(secret) => request.header("x-genkit-reflection-secret", secret),
            None => request,
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Runs `request` on `runAction` (streamed or not): its trace id header and its body's
    /// lines.
    async fn run(&self, request: Value, stream: bool) -> (String, Vec<Value>) {
        let path = if stream {
            "/api/runAction?stream=true"
        } else {
            "/api/runAction"
        };
        let response = self.post(path, &request).await;
        assert_eq!(response.status(), 200);
        let trace_id = header(&response, "x-genkit-trace-id");
        let body = response.text().await.unwrap();
        (trace_id, lines(&body))
    }
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("{name} in {:?}", response.headers()))
        .to_str()
        .unwrap()
        .to_owned()
}

/// A body of lines of JSON (the last without a newline).
fn lines(body: &str) -> Vec<Value> {
    assert!(
        !body.ends_with('\n'),
        "the last line has no newline: {body:?}"
    );
    body.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The one runtime file under `root`, and what it says. Read again while it is being written
/// anew (a runtime the tools have not notified renames its file now and then).
fn runtime_file(root: &Path) -> (PathBuf, Value) {
    let dir = root.join(".genkit").join("runtimes");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        if let [file] = &files[..]
            && let Ok(bytes) = std::fs::read(file)
        {
            return (file.clone(), serde_json::from_slice(&bytes).unwrap());
        }
        assert!(Instant::now() < deadline, "one runtime file: {files:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genkit_tools_discover_run_cancel_and_trace_a_bidi_program() {
    let posted = Posted::default();
    let telemetry = posted.serve().await;
    let project = project();
    // Started below the project root: it walks up to the package.json, past a Cargo.toml.
    let cwd = project.path().join("app").join("bin");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(project.path().join("app").join("Cargo.toml"), "").unwrap();
    let mut runtime = Runtime::start(&cwd, &telemetry, Some(SECRET));

    let (file, info) = runtime_file(project.path());
    let pid = runtime.group.id();
    let port = runtime.base.rsplit(':').next().unwrap().to_owned();
    let id = format!("{pid}-{port}");
    assert_eq!(info["id"], id);
    assert_eq!(info["pid"], pid);
    assert_eq!(info["reflectionServerUrl"], runtime.base);
    assert_eq!(info["reflectionApiSpecVersion"], 1);
    assert_eq!(info["name"], "reflection-runtime");
    assert!(
        file.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&format!("{id}-")),
        "{file:?}"
    );

    secret_and_health(&runtime, &id).await;
    actions_and_values(&runtime).await;
    let countdown = runs(&runtime).await;
    let slow = cancel(&runtime).await;
    spans(&posted, &countdown, &slow).await;

    let refused = runtime
        .post(
            "/api/notify",
            &json!({"telemetryServerUrl": "ftp://localhost:4033"}),
        )
        .await;
    assert_eq!(refused.status(), 400);
    let told = runtime
        .post(
            "/api/notify",
            &json!({"telemetryServerUrl": "http://localhost:4033", "reflectionApiSpecVersion": 1}),
        )
        .await;
    assert_eq!(told.status(), 200);

    let status = runtime.group.interrupt().unwrap();
    assert!(status.success(), "{status}: {}", runtime.group.output());
    // Removed at the end, under whatever name it was last written: until notified above, the
    // runtime wrote it anew now and then.
    let dir = project.path().join(".genkit").join("runtimes");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(
        left.is_empty(),
        "the runtime file is removed at the end: {left:?}"
    );
    assert!(
        runtime.group.output().contains("spans dropped: 0"),
        "{}",
        runtime.group.output()
    );
}

async fn secret_and_health(runtime: &Runtime, id: &str) {
    let bare = reqwest::get(format!("{}/api/__health?id={id}", runtime.base))
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    let body: Value = bare.json().await.unwrap();
    assert_eq!(body["error"]["code"], 16, "{body}");
    let wrong = runtime
        .client
        .get(format!("{}/api/actions", runtime.base))
        .header("x-genkit-reflection-secret", "s3cret-tokem")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);

    let health = runtime.get(&format!("/api/__health?id={id}")).await;
    assert_eq!(health.status(), 200);
    assert!(header(&health, "x-genkit-version").starts_with("bidi-genkit/"));
    assert_eq!(runtime.get("/api/__health").await.status(), 200);
    let other = runtime.get("/api/__health?id=1-3100").await;
    assert_eq!(other.status(), 503);
}

async fn actions_and_values(runtime: &Runtime) {
    let actions: Value = runtime.get("/api/actions").await.json().await.unwrap();
    let keys: Vec<&String> = actions.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "/agent/helper",
            "/agent/notes",
            "/bidi-flow/slow",
            "/flow/countdown",
            "/flow/greet",
            "/flow/letter"
        ]
    );
    let countdown = &actions["/flow/countdown"];
    assert_eq!(countdown["key"], "/flow/countdown");
    assert_eq!(countdown["name"], "countdown");
    assert_eq!(countdown["description"], "Counts down from n");
    assert_eq!(countdown["inputSchema"]["type"], "integer");
    assert_eq!(countdown["outputSchema"]["type"], "string");
    assert_eq!(countdown["streamSchema"]["required"], json!(["left"]));
    assert_eq!(countdown["metadata"]["bidi"], true);
    assert!(actions["/agent/notes"]["initSchema"].is_object());

    let values = runtime.get("/api/values?type=defaultModel").await;
    assert_eq!(values.json::<Value>().await.unwrap(), json!({}));
    assert_eq!(runtime.get("/api/values").await.status(), 400);
    assert_eq!(runtime.get("/api/values?type=models").await.status(), 400);
}

/// Runs, streamed and not, and their errors; the countdown's trace id.
async fn runs(runtime: &Runtime) -> String {
    let response = runtime
        .post(
            "/api/runAction",
            &json!({"key": "/flow/countdown", "input": 3, "context": {}}),
        )
        .await;
    assert_eq!(header(&response, "content-type"), "application/json");
    let trace_id = header(&response, "x-genkit-trace-id");
    assert_eq!(trace_id.len(), 32);
    assert_eq!(header(&response, "x-genkit-span-id").len(), 16);
    let body = lines(&response.text().await.unwrap());
    assert_eq!(
        body,
        [json!({"result": "done after 3", "telemetry": {"traceId": trace_id}})]
    );

    let (streamed, body) = runtime
        .run(json!({"key": "/flow/countdown", "input": 2}), true)
        .await;
    assert_eq!(
        body,
        [
            json!({"left": 2}),
            json!({"left": 1}),
            json!({"result": "done after 2", "telemetry": {"traceId": streamed}})
        ]
    );

    // Errors: Genkit's, with gRPC codes, still 200.
    let error = |body: &[Value]| body.last().unwrap()["error"].clone();
    let (bad, body) = runtime
        .run(json!({"key": "/flow/countdown", "input": "three"}), true)
        .await;
    let refused = error(&body);
    assert_eq!(refused["code"], 3, "{refused}");
    assert_eq!(refused["details"]["traceId"], bad);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("expected u32")
    );
    let (_, body) = runtime
        .run(json!({"key": "/flow/countdown", "input": 500}), false)
        .await;
    assert_eq!(
        error(&body),
        json!({"code": 13, "message": "action failed: 500 is too far to count down from (100 at most)",
               "details": {"traceId": body.last().unwrap()["error"]["details"]["traceId"]}})
    );
    let inited = runtime
        .post(
            "/api/runAction",
            &json!({"key": "/flow/countdown", "input": 1, "init": {"a": 1}}),
        )
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(inited["error"]["code"], 3, "{inited}");
    let not_json = runtime
        .request(reqwest::Method::POST, "/api/runAction")
        .header("content-type", "application/json")
        .body("{key")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.json::<Value>().await.unwrap()["error"]["code"], 3);
    inits(runtime).await;
    let missing = runtime
        .post("/api/runAction", &json!({"key": "/flow/nope", "input": 1}))
        .await;
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.text().await.unwrap(), "action /flow/nope not found");

    // The agent keeps its session across runs: one turn per run.
    for heard in 0..2 {
        let (_, body) = runtime
            .run(
                json!({"key": "/agent/notes", "input": format!("line {heard}"), "init": {"sessionId": "s-1"}}),
                true,
            )
            .await;
        let said: String = body[..body.len() - 1]
            .iter()
            .map(|chunk| chunk.as_str().unwrap())
            .collect();
        assert_eq!(said, format!("noted \"line {heard}\" after {heard} lines"));
        assert_eq!(body.last().unwrap()["result"]["output"], 1);
    }
    trace_id
}

/// Runs of flows whose init is a struct, with and without init.
async fn inits(runtime: &Runtime) {
    let result = |body: Vec<Value>| body.last().unwrap().clone();
    // No init, or `null`, is the empty object: the init type's defaults.
    for request in [
        json!({"key": "/flow/greet", "input": "Ada"}),
        json!({"key": "/flow/greet", "input": "Ada", "init": null}),
    ] {
        let (_, body) = runtime.run(request, false).await;
        assert_eq!(result(body)["result"], "Hello, Ada!");
    }
    let (_, body) = runtime
        .run(
            json!({"key": "/flow/greet", "input": "Ada", "init": {"salutation": "Hi"}}),
            false,
        )
        .await;
    assert_eq!(result(body)["result"], "Hi, Ada!");
    let (_, body) = runtime
        .run(
            json!({"key": "/flow/letter", "input": "hello", "init": {"to": "Ada"}}),
            false,
        )
        .await;
    assert_eq!(result(body)["result"], "Dear Ada, hello");
    // An init type without defaults: refused, saying how to pass one.
    let refused: Value = runtime
        .post(
            "/api/runAction",
            &json!({"key": "/flow/letter", "input": "hello"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let error = &refused["error"];
    assert_eq!(error["code"], 3, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("missing field `to`") && message.contains("send an `init` with the run"),
        "{message}"
    );
}

/// A streamed run of the slow flow, cancelled through its trace id once it said it started;
/// its trace id.
async fn cancel(runtime: &Runtime) -> String {
    let mut response = runtime
        .post(
            "/api/runAction?stream=true",
            &json!({"key": "/bidi-flow/slow", "input": "go"}),
        )
        .await;
    // The headers came before the body, which goes on until the cancel.
    assert_eq!(header(&response, "content-type"), "text/plain");
    let trace_id = header(&response, "x-genkit-trace-id");
    let mut body = String::new();
    while !body.contains('\n') {
        let chunk = response.chunk().await.unwrap().expect("the first line");
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert_eq!(body, "\"started\"\n");

    let cancelled = runtime
        .post("/api/cancelAction", &json!({"traceId": trace_id}))
        .await;
    assert_eq!(cancelled.status(), 200);
    assert_eq!(
        cancelled.json::<Value>().await.unwrap(),
        json!({"message": "Action cancelled"})
    );
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let ended = lines(&body);
    assert_eq!(ended.len(), 2, "{body}");
    let error = &ended[1]["error"];
    assert_eq!(error["code"], 1, "{error}");
    assert_eq!(
        error["message"],
        "the action was cancelled: cancelled from Genkit's tools"
    );
    assert_eq!(error["details"]["traceId"], trace_id);

    let again = runtime
        .post("/api/cancelAction", &json!({"traceId": trace_id}))
        .await;
    assert_eq!(again.status(), 404);
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        json!({"message": "Action not found or already completed"})
    );
    let bad = runtime
        .post("/api/cancelAction", &json!({"trace": 1}))
        .await;
    assert_eq!(bad.status(), 400);

    // Not streamed, the body is all at the end: the headers came at once all the same, with
    // the trace id that cancels the run.
    let response = tokio::time::timeout(
        Duration::from_secs(60),
        runtime.post(
            "/api/runAction",
            &json!({"key": "/bidi-flow/slow", "input": "quietly"}),
        ),
    )
    .await
    .expect("the headers before the body");
    let quiet = header(&response, "x-genkit-trace-id");
    let cancelled = runtime
        .post("/api/cancelAction", &json!({"traceId": quiet}))
        .await;
    assert_eq!(cancelled.status(), 200);
    let body = lines(&response.text().await.unwrap());
    assert_eq!(body[0]["error"]["code"], 1, "{body:?}");
    trace_id
}

/// The spans of the countdown and of the cancelled run, as the telemetry server got them.
async fn spans(posted: &Posted, countdown: &str, slow: &str) {
    let root_of = |posted: &Posted, trace: &str| {
        posted
            .spans(trace)
            .into_iter()
            .find(|span| span.get("parentSpanId").is_none())
    };
    posted
        .until("the countdown's spans, ended", |posted| {
            let spans = posted.spans(countdown);
            spans.len() == 3 && spans.iter().all(|span| span["endTime"] != 0)
        })
        .await;
    let root = root_of(posted, countdown).expect("a root");
    let root_id = root["spanId"].as_str().unwrap();
    // Posted twice: when it started, then when it ended.
    let versions = posted.span(countdown, root_id);
    assert_eq!(versions.len(), 2, "{versions:#?}");
    assert_eq!(versions[0]["endTime"], 0);
    assert_eq!(versions[0]["attributes"]["genkit:type"], "action");
    assert_eq!(
        versions[0]["attributes"]["genkit:path"],
        "/{countdown,t:flow}"
    );
    assert!(versions[0]["attributes"].get("genkit:state").is_none());
    let attributes = &versions[1]["attributes"];
    assert_eq!(attributes["genkit:name"], "countdown");
    assert_eq!(attributes["genkit:isRoot"], true);
    assert_eq!(attributes["genkit:metadata:subtype"], "flow");
    assert_eq!(attributes["genkit:key"], "/flow/countdown");
    assert_eq!(attributes["genkit:input"], "3");
    assert_eq!(attributes["genkit:output"], "\"done after 3\"");
    assert_eq!(attributes["genkit:state"], "success");
    assert_eq!(versions[1]["status"], json!({"code": 1}));
    assert_eq!(versions[1]["displayName"], "countdown");
    assert_eq!(versions[1]["spanKind"], "INTERNAL");

    let steps = posted.spans(countdown);
    for name in ["turn 1", "count down"] {
        let step = steps
            .iter()
            .find(|span| span["displayName"] == name)
            .unwrap_or_else(|| panic!("{name} in {steps:#?}"));
        assert_eq!(step["parentSpanId"], root_id);
        assert_eq!(step["attributes"]["genkit:type"], "flowStep");
        assert_eq!(
            step["attributes"]["genkit:path"],
            format!("/{{countdown,t:flow}}/{{{name},t:flowStep}}")
        );
        assert_eq!(step["attributes"]["genkit:state"], "success");
    }

    posted
        .until("the cancelled run's root, ended", |posted| {
            root_of(posted, slow).is_some_and(|root| root["endTime"] != 0)
        })
        .await;
    let root = root_of(posted, slow).unwrap();
    assert_eq!(root["attributes"]["genkit:state"], "error");
    assert_eq!(root["attributes"]["genkit:path"], "/{slow,t:action}");
    assert_eq!(root["attributes"]["genkit:metadata:subtype"], "bidi-flow");
    assert_eq!(root["attributes"]["genkit:input"], "\"go\"");
    assert_eq!(
        root["status"],
        json!({"code": 2, "message": "connection cancelled: cancelled from Genkit's tools"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_hanging_telemetry_server_holds_no_run_back() {
    // Nothing listens on the first; the second takes connections and never answers.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging_url = format!("http://{}", hanging.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hanging.accept().await {
            held.push(socket);
        }
    });
    for (telemetry, refused) in [(dead, true), (hanging_url, false)] {
        let project = project();
        let mut runtime = Runtime::start(project.path(), &telemetry, None);
        for n in 1..=20 {
            let (trace_id, body) = runtime
                .run(json!({"key": "/flow/countdown", "input": n}), true)
                .await;
            assert_eq!(body.len(), n + 1);
            assert_eq!(
                body.last().unwrap(),
                &json!({"result": format!("done after {n}"), "telemetry": {"traceId": trace_id}})
            );
        }
        let status = runtime.group.interrupt().unwrap();
        let output = runtime.group.output();
        assert!(status.success(), "{telemetry}: {output}");
        // What the dead server refused was counted (the hanging one's posts may still wait).
        let dropped: u64 = output
            .lines()
            .find_map(|line| line.strip_prefix("spans dropped: "))
            .unwrap_or_else(|| panic!("the count: {output}"))
            .parse()
            .unwrap();
        assert!(!refused || dropped > 0, "{telemetry}: {output}");
    }
}

/// Asserts `response` is a refusal of HTTP status `status` and gRPC code `code`.
async fn refused(response: reqwest::Response, status: u16, code: u64) {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
}

/// The said words of a streamed turn of the notes agent.
fn said(body: &[Value]) -> String {
    body[..body.len() - 1]
        .iter()
        .map(|chunk| chunk.as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_in_a_browser_and_rebound_names_are_refused() {
    let posted = Posted::default();
    let telemetry = posted.serve().await;
    let project = project();
    let runtime = Runtime::start(project.path(), &telemetry, None);
    let port = runtime.base.rsplit(':').next().unwrap().to_owned();
    let run_action = format!("{}/api/runAction?stream=true", runtime.base);
    let note =
        json!({"key": "/agent/notes", "input": "from a page", "init": {"sessionId": "victim"}});

    // A page's cross-site post: `text/plain` needs no preflight, and the page's Origin comes.
    let cross_site = runtime
        .client
        .post(&run_action)
        .header("origin", "https://evil.example")
        .header("content-type", "text/plain;charset=UTF-8")
        .body(note.to_string())
        .send()
        .await
        .unwrap();
    refused(cross_site, 403, 7).await;
    // The same from a sender that leaves the Origin out: not JSON.
    let plain = runtime
        .client
        .post(&run_action)
        .header("content-type", "text/plain")
        .body(note.to_string())
        .send()
        .await
        .unwrap();
    refused(plain, 415, 3).await;
    // JSON from a page, even a page on this machine.
    let page = runtime
        .client
        .post(&run_action)
        .header("origin", "http://localhost:3000")
        .json(&note)
        .send()
        .await
        .unwrap();
    refused(page, 403, 7).await;
    // DNS rebinding: the page's own name, resolved to this machine.
    let rebound_host = format!("evil.example:{port}");
    let listed = runtime
        .client
        .get(format!("{}/api/actions", runtime.base))
        .header("host", &rebound_host)
        .send()
        .await
        .unwrap();
    refused(listed, 403, 7).await;
    let rebound = runtime
        .client
        .post(&run_action)
        .header("host", &rebound_host)
        .json(&note)
        .send()
        .await
        .unwrap();
    refused(rebound, 403, 7).await;

    // None of them ran: the session heard nothing before the tools' own run.
    let (_, body) = runtime
        .run(
            json!({"key": "/agent/notes", "input": "from the tools", "init": {"sessionId": "victim"}}),
            true,
        )
        .await;
    assert_eq!(said(&body), "noted \"from the tools\" after 0 lines");
    // Genkit's tools reach it by any loopback name of its port.
    for base in [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
    ] {
        let listed = runtime
            .client
            .get(format!("{base}/api/actions"))
            .send()
            .await
            .unwrap();
        assert_eq!(listed.status(), 200, "{base}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_auth_serves_reflection_only_with_the_secret() {
    let posted = Posted::default();
    let telemetry = posted.serve().await;
    let project = project();
    let auth = ["--auth", "alice-token"];

    // Without the tools' secret, the program does not start, and says what to set.
    let (_, mut refused) = Runtime::spawn(project.path(), &telemetry, None, &auth);
    let error = refused
        .wait_for(Duration::from_secs(60), |out| out.contains("reflection on"))
        .unwrap_err();
    assert!(
        error.starts_with("exited") && error.contains("set GENKIT_REFLECTION_SECRET_TOKEN"),
        "{error}"
    );

    // With it, the main port asks for the app's credentials, the reflection API for the
    // secret.
    let (port, mut group) = Runtime::spawn(project.path(), &telemetry, Some(SECRET), &auth);
    let out = group
        .wait_for(Duration::from_secs(60), |out| out.contains("reflection on"))
        .unwrap();
    let main = out
        .lines()
        .find_map(|line| line.strip_prefix("listening on "))
        .unwrap()
        .to_owned();
    let runtime = Runtime {
        group,
        base: format!("http://127.0.0.1:{port}"),
        client: reqwest::Client::new(),
        secret: Some(SECRET),
    };
    let actions = format!("{main}/actions");
    let bare = runtime.client.get(&actions).send().await.unwrap();
    assert_eq!(bare.status(), 401);
    let authorized = runtime
        .client
        .get(&actions)
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(authorized.status(), 200);

    let countdown = json!({"key": "/flow/countdown", "input": 2});
    let without = runtime
        .client
        .post(format!("{}/api/runAction", runtime.base))
        .json(&countdown)
        .send()
        .await
        .unwrap();
    assert_eq!(without.status(), 401);
    // The app's credentials are not the tools' secret.
    let with_the_apps = runtime
        .client
        .post(format!("{}/api/runAction", runtime.base))
        .bearer_auth("alice-token")
        .json(&countdown)
        .send()
        .await
        .unwrap();
    assert_eq!(with_the_apps.status(), 401);
    let (trace_id, body) = runtime.run(countdown, false).await;
    assert_eq!(
        body,
        [json!({"result": "done after 2", "telemetry": {"traceId": trace_id}})]
    );
}

/// What the program prints once it serves (or fails to), run with `vars` set in `dir`.
fn printed(dir: &Path, vars: &[(&str, &str)], until: &str) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reflection-runtime"));
    for variable in [
        "GENKIT_ENV",
        "GENKIT_REFLECTION_ENABLED",
        "GENKIT_REFLECTION_V2_SERVER",
        "GENKIT_REFLECTION_SECRET_TOKEN",
        "GENKIT_TELEMETRY_SERVER",
    ] {
        command.env_remove(variable);
    }
    command.envs(vars.iter().copied());
    let mut program = Group::spawn(command, dir).unwrap();
    program
        .wait_for(Duration::from_secs(60), |out| out.contains(until))
        .unwrap();
    let _ = program.interrupt();
    program.output()
}

#[test]
fn genkit_reflection_enabled_turns_the_api_on_or_off_whatever_the_environment() {
    let project = project();
    let dir = project.path();
    let on = printed(
        dir,
        &[("GENKIT_REFLECTION_ENABLED", "true")],
        "reflection on",
    );
    assert!(on.contains("reflection on http://"), "{on}");
    let outside = printed(dir, &[], "listening on");
    assert!(!outside.contains("reflection"), "{outside}");
    let off = printed(
        dir,
        &[
            ("GENKIT_ENV", "dev"),
            ("GENKIT_REFLECTION_ENABLED", "false"),
        ],
        "listening on",
    );
    assert!(!off.contains("reflection"), "{off}");
    let refused = printed(dir, &[("GENKIT_REFLECTION_ENABLED", "yes")], "cannot start");
    assert!(
        refused.contains("GENKIT_REFLECTION_ENABLED is `true` or `false`"),
        "{refused}"
    );
}
