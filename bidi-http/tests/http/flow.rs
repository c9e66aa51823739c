//! Genkit's flow wire: JSON and SSE answers, and every refusal as a JSON error.

use serde_json::{Value, json};

use crate::support::{Probe, registry, serve, url};

async fn post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(url(addr, path))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_are_the_registrys_descriptors() {
    let registry = registry(&Probe::default());
    let expected = serde_json::to_value(registry.actions()).unwrap();
    let addr = serve(registry).await;
    let listed: Value = reqwest::get(url(addr, "/actions"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, expected);
    let golden: Value = serde_json::from_str(include_str!("golden/echo-action.json")).unwrap();
    let echo = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|action| action["key"] == "/bidi-flow/echo")
        .unwrap();
    assert_eq!(echo, &golden, "the descriptor's JSON changed: {echo:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_input_gets_the_output() {
    let addr = serve(registry(&Probe::default())).await;
    let (status, body) = post(
        addr,
        "/bidi-flow/echo",
        r#"{"data":"hello there","init":"> "}"#,
    )
    .await;
    assert_eq!((status, body), (200, json!({"result": 1})));
    let (status, body) = post(addr, "/bidi-flow/whoami", r#"{"data":null}"#).await;
    assert_eq!((status, body), (200, json!({"result": "anonymous"})));
}

/// The answer to `body` posted to `path` with `?stream=true`.
async fn post_streamed(addr: std::net::SocketAddr, path: &str, body: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(url(addr, &format!("{path}?stream=true")))
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_answers_are_sse_records() {
    let addr = serve(registry(&Probe::default())).await;
    let client = reqwest::Client::new();
    let expected = "data: {\"message\":\"> hello\"}\n\ndata: {\"message\":\"> there\"}\n\n\
                    data: {\"result\":1}\n\n";
    let by_query = post_streamed(
        addr,
        "/bidi-flow/echo",
        r#"{"data":"hello there","init":"> "}"#,
    )
    .await;
    assert_eq!(by_query.headers()["content-type"], "text/event-stream");
    assert_eq!(by_query.text().await.unwrap(), expected);
    let by_accept = client
        .post(url(addr, "/bidi-flow/echo"))
        .header("accept", "text/event-stream")
        .body(r#"{"data":"hello there","init":"> "}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(by_accept.text().await.unwrap(), expected);
}

/// An answer the action gives at once is one body of known length (one write with the head);
/// one that goes on streams, its records as they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_ready_at_once_is_whole_and_a_long_one_streams() {
    let addr = serve(registry(&Probe::default())).await;
    let quick = post_streamed(
        addr,
        "/bidi-flow/echo",
        r#"{"data":"hello there","init":"> "}"#,
    )
    .await;
    assert!(quick.headers().get("transfer-encoding").is_none());
    let length = quick
        .content_length()
        .expect("a quick answer says its length");
    let text = quick.text().await.unwrap();
    assert_eq!(length, text.len() as u64);
    assert!(text.ends_with("data: {\"result\":1}\n\n"), "{text}");

    let long = post_streamed(addr, "/bidi-flow/forever", r#"{"data":null,"init":16}"#).await;
    assert_eq!(long.content_length(), None);
    assert_eq!(long.headers()["transfer-encoding"], "chunked");
    let mut body = long.bytes_stream();
    let first = futures_util::StreamExt::next(&mut body)
        .await
        .unwrap()
        .unwrap();
    assert!(first.starts_with(b"data: {\"message\":\"xxxx"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_mid_stream_is_the_last_record() {
    let addr = serve(registry(&Probe::default())).await;
    let text = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/fail?stream=true"))
        .body(r#"{"data":"go"}"#)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let records: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(records[0], r#"data: {"message":"partial"}"#);
    // An `error:` record, as Genkit's servers write it, with details as text.
    let error: Value = serde_json::from_str(records[1].strip_prefix("error: ").unwrap()).unwrap();
    assert_eq!(error["error"]["status"], "INTERNAL");
    assert_eq!(error["error"]["details"], "connection_failed");
    assert!(
        error["error"]["message"].as_str().unwrap().contains("boom"),
        "{error}"
    );
    assert_eq!(records.len(), 2);

    let (status, body) = post(addr, "/bidi-flow/fail", r#"{"data":"go"}"#).await;
    assert_eq!(status, 500);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("boom"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_what_is_wrong() {
    let addr = serve(registry(&Probe::default())).await;
    let cases = [
        // (path, body, status, code, JSON Pointer)
        // No `data` is a `null` input, which a flow of strings refuses.
        (
            "/bidi-flow/echo",
            r#"{"init":"> "}"#,
            400,
            "invalid_input",
            Some(""),
        ),
        (
            "/bidi-flow/echo",
            r#"{"data":"a","extra":1}"#,
            400,
            "malformed_frame",
            Some("/extra"),
        ),
        (
            "/bidi-flow/echo",
            r#"{"data":"a""#,
            400,
            "malformed_frame",
            None,
        ),
        ("/bidi-flow/echo", r#"["a"]"#, 400, "malformed_frame", None),
        (
            "/bidi-flow/echo",
            r#"{"data":3,"init":"> "}"#,
            400,
            "invalid_input",
            Some(""),
        ),
        (
            "/bidi-flow/echo",
            r#"{"data":"a","init":7}"#,
            400,
            "invalid_init",
            Some(""),
        ),
        (
            "/bidi-flow/fail",
            r#"{"data":"a","init":{"x":1}}"#,
            400,
            "invalid_init",
            Some("/init"),
        ),
        ("/bidi-flow/ecko", r#"{"data":"a"}"#, 404, "not_found", None),
        ("/nowhere", r#"{"data":"a"}"#, 404, "not_found", None),
    ];
    for (path, body, status, code, pointer) in cases {
        let (got, answer) = post(addr, path, body).await;
        assert_eq!(got, status, "{path} {body}: {answer}");
        assert_eq!(
            answer["error"]["details"]["code"], code,
            "{path} {body}: {answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        if let Some(pointer) = pointer {
            assert_eq!(
                answer["error"]["details"]["path"], pointer,
                "{path} {body}: {answer}"
            );
        }
    }
    let (_, answer) = post(addr, "/bidi-flow/ecko", r#"{"data":"a"}"#).await;
    assert_eq!(answer["error"]["status"], "NOT_FOUND");
    assert_eq!(answer["error"]["details"]["suggestion"], "/bidi-flow/echo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_run_one_turn_per_request_and_keep_their_session() {
    let addr = serve(registry(&Probe::default())).await;
    let (status, first) = post(
        addr,
        "/agent/notes",
        r#"{"data":"one","init":{"sessionId":"s-1"}}"#,
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["result"]["sessionId"], "s-1");
    assert_eq!(first["result"]["state"], json!(["one"]));
    let (_, second) = post(
        addr,
        "/agent/notes",
        r#"{"data":"two","init":{"sessionId":"s-1"}}"#,
    )
    .await;
    assert_eq!(second["result"]["state"], json!(["one", "two"]));
    let (status, missing) = post(
        addr,
        "/agent/notes",
        r#"{"data":"x","init":{"sessionId":"nope","resume":true}}"#,
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["details"]["code"], "not_found");
}

/// The router nested under a prefix of an application's and merged beside its own routes: the
/// flows answer under the prefix (a percent-encoded name too), a path the server does not
/// know is its JSON 404, and the application's routes are its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_nests_and_merges_into_an_application() {
    use bidi_http::axum::{self, Router, routing::get};

    let registry = registry(&Probe::default());
    registry
        .register(bidi_flow::BidiFlow::new("two words", crate::support::echo))
        .unwrap();
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .nest("/api", bidi_http::Server::new(registry).router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let (status, body) = post(addr, "/api/bidi-flow/echo", r#"{"data":"hi","init":"> "}"#).await;
    assert_eq!((status, body), (200, json!({"result": 1})));
    let (status, body) = post(
        addr,
        "/api/bidi-flow/two%20words",
        r#"{"data":"hi","init":"> "}"#,
    )
    .await;
    assert_eq!((status, body), (200, json!({"result": 1})));
    let (status, body) = post(addr, "/api/nothing/here/at/all", r#"{"data":"hi"}"#).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["status"], "NOT_FOUND", "{body}");
    let health = reqwest::get(url(addr, "/health")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
}

/// A layer given to the server wraps each route: it sees the route its request matched (its
/// path's parameters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_layer_sees_the_matched_route() {
    use bidi_http::axum::extract::{RawPathParams, Request};
    use bidi_http::axum::middleware::{self, Next};
    use bidi_http::axum::response::Response;

    async fn kind_header(params: RawPathParams, request: Request, next: Next) -> Response {
        let kind = params
            .iter()
            .find(|(key, _)| *key == "kind")
            .map(|(_, value)| value.to_owned());
        let mut response = next.run(request).await;
        if let Some(kind) = kind {
            response
                .headers_mut()
                .insert("x-kind", kind.parse().unwrap());
        }
        response
    }

    let server =
        bidi_http::Server::new(registry(&Probe::default())).layer(middleware::from_fn(kind_header));
    let addr = crate::support::start(server).await;
    let response = reqwest::Client::new()
        .post(url(addr, "/bidi-flow/echo"))
        .body(r#"{"data":"hi","init":"> "}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-kind"], "bidi-flow");
}
