//! The Dev UI's routes on a real socket: the page and its files, the agents, a session's
//! lineage, snapshots and diffs in the caller's scope only, and the traces to those who may
//! read them, live.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use bidi_llm::testing::DemoModel;
use bidi_llm::{LlmAgent, simple_tool};
use futures_util::StreamExt as _;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::{Value, json};

use super::DevUi;
use bidi_http::traces::Traces;
use bidi_http::{Identity, Server, Unauthorized};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Path {
    path: String,
}

/// The demo agent with `delete_file`, which needs approval.
fn assistant() -> LlmAgent {
    let delete = simple_tool(
        "delete_file",
        "Delete",
        "Deletes a file",
        |_id, args: Path| async move { Ok::<_, String>((format!("deleted {}", args.path), None)) },
    )
    .needs_approval();
    LlmAgent::builder("assistant", DemoModel)
        .tool(delete)
        .build()
}

/// Every request's identity is its `x-user` header; none is refused.
fn users(server: Server) -> Server {
    server.auth(|headers| async move {
        match headers.get("x-user").and_then(|value| value.to_str().ok()) {
            Some(user) => Ok(Identity::new(user)),
            None => Err(Unauthorized::new("who are you?")),
        }
    })
}

async fn serve(server: Server) -> SocketAddr {
    let bound = server
        .addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .bind()
        .await
        .unwrap();
    let addr = bound.local_addr().unwrap();
    tokio::spawn(bound.serve());
    addr
}

async fn get(addr: SocketAddr, path: &str, user: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("http://{addr}{path}"));
    if let Some(user) = user {
        request = request.header("x-user", user);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// One execution of `assistant` as `user`: its session's id.
async fn execute(addr: SocketAddr, user: &str, body: &Value) -> String {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/agent/assistant/execute"))
        .header("x-user", user)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = response.text().await.unwrap();
    assert!(events.contains("event: execute_complete"), "{events}");
    id
}

#[tokio::test]
async fn the_page_and_its_files_are_served_and_nothing_else() {
    let addr = serve(Server::new(Registry::new()).protocol(DevUi::from(Traces::new()))).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = client
        .get(format!("http://{addr}/dev"))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(redirect.headers()["location"], "dev/");
    let page = client
        .get(format!("http://{addr}/dev/"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.starts_with("default-src 'self'"), "{policy}");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(r#"<script type="module" src="app.js">"#),
        "{html}"
    );
    assert!(html.contains(r#"name="viewport""#), "{html}");
    for (file, kind) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("form.js", "text/javascript; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
    ] {
        let response = client
            .get(format!("http://{addr}/dev/{file}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{file}");
        assert_eq!(response.headers()["content-type"], kind, "{file}");
    }
    let (status, body) = get(addr, "/dev/secrets.txt", None).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["details"]["code"], "not_found");

    // A server without the Dev UI serves none of it.
    let plain = serve(Server::new(Registry::new())).await;
    for path in ["/dev/", "/dev/app.js", "/dev/api/agents", "/dev/api/traces"] {
        let (status, _) = get(plain, path, None).await;
        assert!(status == 404 || status == 426, "{path}: {status}");
    }
}

#[tokio::test]
async fn agents_are_listed_with_their_tools() {
    let agent = assistant();
    let addr = serve(
        Server::new(Registry::new())
            .agent(&agent)
            .protocol(DevUi::from(Traces::new())),
    )
    .await;
    let (status, body) = get(addr, "/dev/api/agents", None).await;
    assert_eq!(status, 200);
    let tool = &body["agents"][0]["tools"][0];
    assert_eq!(body["agents"][0]["name"], "assistant");
    assert_eq!(tool["name"], "delete_file");
    assert_eq!(
        (&tool["local"], &tool["needsApproval"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(tool["parameters"]["required"], json!(["path"]));
}

#[tokio::test]
async fn sessions_are_read_in_the_callers_scope_only() {
    let agent = assistant();
    let addr = serve(users(
        Server::new(Registry::new())
            .agent(&agent)
            .protocol(DevUi::from(Traces::new())),
    ))
    .await;
    let input = json!({"input": {"content": "delete_file {\"path\": \"a.txt\"}"}, "context": {}});
    let id = execute(addr, "alice", &input).await;
    let approve = json!({"sessionId": id, "input": {"approvals": [{"toolCallId": "call-1", "approved": true}]}});
    execute(addr, "alice", &approve).await;
    let other = execute(addr, "alice", &input).await;

    let lineage = format!("/dev/api/agents/assistant/sessions/{id}/snapshots");
    let (status, body) = get(addr, &lineage, Some("alice")).await;
    assert_eq!(status, 200, "{body}");
    let snapshots = body["snapshots"].as_array().unwrap();
    let versions: Vec<u64> = snapshots
        .iter()
        .map(|s| s["version"].as_u64().unwrap())
        .collect();
    assert!(
        versions.len() >= 2 && versions.windows(2).all(|w| w[0] == w[1] + 1),
        "{body}"
    );
    assert_eq!(versions.last(), Some(&1));
    assert_eq!(
        (&snapshots[0]["status"], &body["truncated"]),
        (&json!("completed"), &json!(false))
    );
    let (head, first) = (
        snapshots[0]["id"].as_str().unwrap(),
        snapshots.last().unwrap()["id"].as_str().unwrap(),
    );
    assert_eq!(snapshots[1]["id"], snapshots[0]["parentId"]);

    let snapshot = format!("/dev/api/agents/assistant/sessions/{id}/snapshots/{head}");
    let (status, body) = get(addr, &snapshot, Some("alice")).await;
    assert_eq!(status, 200);
    assert_eq!(body["state"]["messages"][2]["content"], "deleted a.txt");

    let diff = format!("/dev/api/agents/assistant/sessions/{id}/diff/{first}/{head}");
    let (status, body) = get(addr, &diff, Some("alice")).await;
    assert_eq!(status, 200, "{body}");
    let changes = body["changes"].as_array().unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c["op"] == "add" && c["path"] == "/messages/0"),
        "{body}"
    );
    assert_eq!(
        (&body["from"]["version"], &body["to"]["id"]),
        (&json!(1), &json!(head))
    );

    // Bob sees none of it; nobody reaches a snapshot through another session's path.
    for path in [&lineage, &snapshot, &diff] {
        let (status, body) = get(addr, path, Some("bob")).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = get(addr, &lineage, None).await;
    assert_eq!(status, 401);
    let elsewhere = format!("/dev/api/agents/assistant/sessions/{other}/snapshots/{head}");
    let (status, body) = get(addr, &elsewhere, Some("alice")).await;
    assert_eq!(status, 404);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no snapshot"),
        "{body}"
    );
    let (status, _) = get(
        addr,
        &format!("/dev/api/agents/nobody/sessions/{id}/snapshots"),
        Some("alice"),
    )
    .await;
    assert_eq!(status, 404);
}

async fn shout(
    _: ActionContext,
    _: (),
    mut lines: Inbound<String>,
    out: Outbound<String>,
) -> Result<u32, BoxError> {
    let mut n = 0;
    while let Some(line) = lines.recv().await {
        out.send(line.to_uppercase()).await?;
        out.end_turn().await?;
        n += 1;
    }
    Ok(n)
}

/// A registry with `shout`, traced into `traces` through a provider of its own.
fn traced(traces: &Traces) -> (SdkTracerProvider, Registry) {
    let provider = SdkTracerProvider::builder()
        .with_span_processor(traces.clone())
        .build();
    let tracer = BoxedTracer::new(Box::new(provider.tracer("bidi-flow")));
    let registry = Registry::new();
    registry
        .register(BidiFlow::new("shout", shout).with_tracer(tracer))
        .unwrap();
    (provider, registry)
}

#[tokio::test]
async fn traces_are_read_live_by_those_who_may() {
    let traces = Traces::new();
    let (_provider, registry) = traced(&traces);
    let dev = DevUi::new(traces).trace_readers(|identity| identity.id() == "ops");
    let addr = serve(users(Server::new(registry).protocol(dev))).await;

    let (status, body) = get(addr, "/dev/api/traces", Some("alice")).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["status"], "PERMISSION_DENIED");
    let (status, _) = get(addr, "/dev/api/traces/live", Some("alice")).await;
    assert_eq!(status, 403);

    let live = reqwest::Client::new()
        .get(format!("http://{addr}/dev/api/traces/live"))
        .header("x-user", "ops")
        .send()
        .await
        .unwrap();
    assert_eq!(live.headers()["content-type"], "text/event-stream");
    let mut stream = live.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("event: traces\ndata: {\"traces\":[]}\n\n") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/bidi-flow/shout"))
        .header("x-user", "alice")
        .body(r#"{"data":"hi"}"#)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(answer.trim_end(), r#"{"result":1}"#);
    while !seen.contains("event: span_end\ndata: {\"traceId\"")
        || !seen.contains("\"name\":\"shout\"")
    {
        seen.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    assert!(
        seen.contains("event: span_start\ndata: {\"traceId\""),
        "{seen}"
    );

    let (status, body) = get(addr, "/dev/api/traces", Some("ops")).await;
    assert_eq!(status, 200);
    let id = body["traces"][0]["traceId"].as_str().unwrap().to_owned();
    assert_eq!(body["traces"][0]["name"], "shout");
    let (status, body) = get(addr, &format!("/dev/api/traces/{id}"), Some("ops")).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shout", "turn 1"]);
    let (status, body) = get(
        addr,
        &format!("/dev/api/traces/{}", "0".repeat(32)),
        Some("ops"),
    )
    .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn without_identities_everybody_reads_the_traces() {
    let traces = Traces::new();
    let (_provider, registry) = traced(&traces);
    let addr = serve(Server::new(registry).protocol(DevUi::from(traces))).await;
    let (status, body) = get(addr, "/dev/api/traces", None).await;
    assert_eq!((status, body), (200, json!({"traces": []})));
}

/// Every field description a schema of `value` carries, with where it is.
fn field_descriptions(path: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = format!("{path}/{key}");
                match (key.as_str(), inner) {
                    ("description", Value::String(text)) if path.contains("/properties/") => {
                        out.push((here, text.clone()));
                    }
                    _ => field_descriptions(&here, inner, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                field_descriptions(&format!("{path}/{i}"), inner, out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_agent_forms_describe_their_fields_for_people_in_the_wire_names() {
    let registry = Registry::new();
    registry
        .register(assistant().agent().clone().into_flow())
        .unwrap();
    let action = registry.action("/agent/assistant").unwrap();
    let mut fields = Vec::new();
    field_descriptions("init", action.init_schema.as_ref().unwrap(), &mut fields);
    field_descriptions("input", action.input_schema.as_ref().unwrap(), &mut fields);
    assert!(
        fields
            .iter()
            .any(|(at, _)| at == "init/properties/sessionId/description")
    );
    for (at, text) in &fields {
        for rust in ["[`", "](", "::", "session_id"] {
            assert!(!text.contains(rust), "{at} shows {rust}: {text}");
        }
    }
}
