//! Limits, clients that go away, idle connections, authentication and sessions per identity.

use std::time::Duration;

use bidi_http::{Identity, Server};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::{Probe, alice_and_bob, registry, settle, start, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_413() {
    let addr = start(Server::new(registry(&Probe::default())).max_body_bytes(1024)).await;
    let body = json!({"data": "x".repeat(2048), "init": "> "}).to_string();
    let response = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/echo"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "frame_too_large");
    assert_eq!(answer["error"]["status"], "RESOURCE_EXHAUSTED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_connection() {
    let (ended, mut how) = mpsc::unbounded_channel();
    let probe = Probe {
        ended: Some(ended),
        ..Probe::default()
    };
    let addr = start(Server::new(registry(&probe))).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    // The server's accept loop; nothing else runs between requests.
    settle(1).await;
    let baseline = metrics.num_alive_tasks();

    // A streaming request: read a record, then drop the response.
    let response = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/forever?stream=true"))
        .body(r#"{"data":null,"init":16}"#)
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: {\"message\":\"xxxx"));
    drop(body);
    assert_eq!(how.recv().await.unwrap(), "disconnected");
    settle(baseline).await;

    // A plain request whose client gives up before the answer.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let gave_up = client
        .post(url(addr, "/bidi-flow/mute"))
        .body(r#"{"data":"anyone?"}"#)
        .send()
        .await;
    assert!(gave_up.unwrap_err().is_timeout());
    assert!(how.recv().await.unwrap().contains("went away"));
    settle(baseline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_cancelled() {
    let (ended, mut how) = mpsc::unbounded_channel();
    let probe = Probe {
        ended: Some(ended),
        ..Probe::default()
    };
    let server = Server::new(registry(&probe)).idle_timeout(Duration::from_millis(100));
    let addr = start(server).await;
    let response = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/mute"))
        .body(r#"{"data":"anyone?"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 504);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "idle_timeout");
    assert!(how.recv().await.unwrap().contains("nothing moved"));

    let text = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/mute?stream=true"))
        .body(r#"{"data":"anyone?"}"#)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let record: Value = serde_json::from_str(text.trim().strip_prefix("error: ").unwrap()).unwrap();
    assert_eq!(record["error"]["details"], "idle_timeout");
    assert_eq!(record["error"]["status"], "DEADLINE_EXCEEDED");
}

fn authenticated(probe: &Probe) -> Server {
    alice_and_bob(Server::new(registry(probe)))
}

async fn post_as(addr: std::net::SocketAddr, who: &str, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url(addr, path))
        .header("authorization", format!("Bearer {who}"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_reach_actions_and_keep_their_sessions_apart() {
    let addr = start(authenticated(&Probe::default())).await;
    let (status, refused) =
        post_as(addr, "mallory", "/bidi-flow/whoami", json!({"data": null})).await;
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(refused["error"]["message"], "a bearer token is required");
    let listed = reqwest::get(url(addr, "/actions")).await.unwrap();
    assert_eq!(listed.status().as_u16(), 401);

    let (_, alice) = post_as(addr, "alice", "/bidi-flow/whoami", json!({"data": null})).await;
    assert_eq!(alice["result"], "alice");

    let note = |text: &str, resume: bool| json!({"data": text, "init": {"sessionId": "shared-name", "resume": resume}});
    let (_, first) = post_as(addr, "alice", "/agent/notes", note("alice's secret", false)).await;
    assert_eq!(first["result"]["state"], json!(["alice's secret"]));
    // Bob cannot resume Alice's session: to him it does not exist.
    let (status, missing) = post_as(addr, "bob", "/agent/notes", note("peek", true)).await;
    assert_eq!(status, 404, "{missing}");
    // The same id is a session of Bob's own.
    let (_, bobs) = post_as(addr, "bob", "/agent/notes", note("bob's note", false)).await;
    assert_eq!(bobs["result"]["state"], json!(["bob's note"]));
    let (_, again) = post_as(addr, "alice", "/agent/notes", note("more", true)).await;
    assert_eq!(again["result"]["state"], json!(["alice's secret", "more"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sessions_are_404_to_other_identities() {
    let model =
        bidi_llm::testing::ScriptedModel::new([bidi_llm::testing::Scripted::new().text("hi")]);
    let agent = bidi_llm::LlmAgent::builder("helper", model).build();
    let addr = start(authenticated(&Probe::default()).agent(&agent)).await;
    let body = json!({"sessionId": "s-1", "input": {"content": "hello"}, "context": {}});
    let response = reqwest::Client::new()
        .post(url(addr, "/agent/helper/execute"))
        .header("authorization", "Bearer alice")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.text().await.unwrap().contains("execute_complete"));
    let get = |who: &'static str| {
        reqwest::Client::new()
            .get(url(addr, "/agent/helper/session/s-1"))
            .header("authorization", format!("Bearer {who}"))
            .send()
    };
    let alice = get("alice").await.unwrap();
    assert_eq!(alice.status().as_u16(), 200);
    let session: Value = alice.json().await.unwrap();
    assert_eq!(session["messages"].as_array().unwrap().len(), 2);
    assert_eq!(get("bob").await.unwrap().status().as_u16(), 404);
    // Nor can Bob go on with it: to him it does not exist, so it would be a new one.
    let response = reqwest::Client::new()
        .post(url(addr, "/agent/helper/execute"))
        .header("authorization", "Bearer bob")
        .body(json!({"sessionId": "s-1", "input": {"content": "peek"}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["details"]["code"], "context_required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_from_a_layer_of_your_own_reaches_the_action() {
    async fn tenant(
        mut request: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let tenant = request
            .headers()
            .get("x-tenant")
            .and_then(|value| value.to_str().ok())
            .map(Identity::new);
        if let Some(tenant) = tenant {
            request.extensions_mut().insert(tenant);
        }
        next.run(request).await
    }
    let app = Server::new(registry(&Probe::default()))
        .router()
        .layer(axum::middleware::from_fn(tenant));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let answer: Value = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/whoami"))
        .header("x-tenant", "acme")
        .body(r#"{"data":null}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"], "acme");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sse_reader_slows_the_action() {
    let probe = Probe::default();
    let addr = start(Server::new(registry(&probe))).await;
    let response = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/forever?stream=true"))
        .body(r#"{"data":null,"init":65536}"#)
        .send()
        .await
        .unwrap();
    // 64 KiB chunks, not read: the socket's buffers fill, then the action waits.
    let last = probe.stalled().await;
    let mut body = response.bytes_stream();
    let mut read = 0;
    while read < (last + 20) * 65_536 {
        read += body.next().await.unwrap().unwrap().len();
    }
    assert!(probe.sent() > last);
}
