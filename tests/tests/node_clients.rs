//! Real Node peers against a real bidi-http server: Genkit's own JavaScript client
//! (`genkit/beta/client`) on the flow wire and its agent client (`remoteAgent`) on the agent
//! wire, and the `ws` package on the WebSocket wire.
//!
//! The server runs in this process on a free port of 127.0.0.1; the clients are the scripts of
//! `tests/node`, run by `node` after `npm ci` (see `tests/node/README.md`).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use bidi_agent::{Agent, Artifact};
use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use bidi_genkit::agent::AgentWire;
use bidi_http::Server;
use bidi_llm::{
    CustomTurn, LlmAgent, Message, Model, ModelError, ModelEvent, ModelRequest, StopReason, Usage,
};
use futures_util::stream::{self, BoxStream, StreamExt as _};
use serde_json::json;
use tests::node::client;

/// Streams "partial", then fails with "boom".
async fn fail(
    _ctx: ActionContext,
    _init: (),
    _inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<(), BoxError> {
    out.send("partial".to_owned()).await?;
    Err("boom".into())
}

/// Greets its input's name, or the world when there is none.
async fn hello(
    _ctx: ActionContext,
    _init: (),
    mut inbound: Inbound<Option<String>>,
    _out: Outbound<String>,
) -> Result<String, BoxError> {
    let name = inbound.recv().await.flatten();
    Ok(format!("hello, {}", name.as_deref().unwrap_or("world")))
}

/// The flows the clients expect: `/bidi-flow/echo`, `/bidi-flow/fail`, `/bidi-flow/hello` and
/// `/agent/chat`.
fn registry() -> Registry {
    let registry = Registry::new();
    registry
        .register(BidiFlow::new("echo", examples::echo))
        .unwrap();
    registry.register(BidiFlow::new("fail", fail)).unwrap();
    registry.register(BidiFlow::new("hello", hello)).unwrap();
    registry
        .register(Agent::builder("chat").build(examples::chat).into_flow())
        .unwrap();
    registry
}

/// Serves the flows on a free port of 127.0.0.1, on this runtime.
async fn serve() -> SocketAddr {
    tests::http::serve(Server::new(registry())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genkit_client_runs_and_streams_flows() {
    let addr = serve().await;
    client("genkit_client.mjs", vec![format!("http://{addr}")])
        .await
        .assert_passed(16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_client_speaks_full_duplex() {
    let addr = serve().await;
    client("ws_client.mjs", vec![format!("http://{addr}")])
        .await
        .assert_passed(10);
}

/// Answers "echo: <the last user message>"; to "wait", nothing until the turn is aborted; to
/// "fail", an error.
struct Echo;

impl Model for Echo {
    fn name(&self) -> &str {
        "echo"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let said = request
            .messages
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::User(user) => Some(user.content.clone()),
                _ => None,
            });
        let said = said.unwrap_or_default();
        if said == "wait" {
            return stream::once(async { ModelEvent::TextStart })
                .chain(stream::pending())
                .boxed();
        }
        if said == "fail" {
            let error = ModelError::other("intentional failure");
            return stream::iter([ModelEvent::Error(error)]).boxed();
        }
        let answer = format!("echo: {said}");
        let (head, tail) = answer.split_at(answer.len() / 2);
        stream::iter([
            ModelEvent::TextStart,
            ModelEvent::TextDelta(head.to_owned()),
            ModelEvent::TextDelta(tail.to_owned()),
            ModelEvent::TextEnd,
            ModelEvent::Done {
                stop_reason: StopReason::Stop,
                usage: Usage::default(),
            },
        ])
        .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genkit_remote_agent_drives_an_agent() {
    // A short lease: an aborted turn learns it at its next renewal, a third of a term later.
    let echo = LlmAgent::builder("echo", Echo)
        .lease(std::time::Duration::from_secs(3))
        .build();
    let tally = LlmAgent::custom("tally", |mut turn: CustomTurn| async move {
        let count = turn.custom()["count"].as_u64().unwrap_or(0) + 1;
        turn.set_custom(json!({ "count": count }));
        turn.artifact(Artifact::new(
            "tally",
            [json!({ "text": count.to_string() })],
        ));
        Ok(format!("count: {count}"))
    })
    .client_managed()
    .build();
    let addr = tests::http::serve(
        Server::new(Registry::new())
            .agent(&echo)
            .agent(&tally)
            .protocol(AgentWire::new()),
    )
    .await;
    client("genkit_agent.mjs", vec![format!("http://{addr}")])
        .await
        .assert_passed(15);
}

/// Answers "first ", then waits for the gate to open, then "second".
struct Gated(std::sync::Arc<tokio::sync::Semaphore>);

/// Waits for one opening of `gate`.
async fn pass(gate: std::sync::Arc<tokio::sync::Semaphore>) {
    if let Ok(permit) = gate.acquire().await {
        permit.forget();
    }
}

impl Model for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let head = [
            ModelEvent::TextStart,
            ModelEvent::TextDelta("first ".into()),
        ];
        let tail = [
            ModelEvent::TextDelta("second".into()),
            ModelEvent::TextEnd,
            ModelEvent::Done {
                stop_reason: StopReason::Stop,
                usage: Usage::default(),
            },
        ];
        let gate = std::sync::Arc::clone(&self.0);
        stream::iter(head)
            .chain(stream::once(pass(gate)).flat_map(move |()| stream::iter(tail.clone())))
            .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genkit_stream_ids_reconnect_to_a_running_turn() {
    // Each turn of either agent says "first ", then waits until the client opens the gate
    // (`POST /open`), so that it reconnects while the turn runs, whatever the machine's pace.
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let gated = LlmAgent::builder("gated", Gated(std::sync::Arc::clone(&gate))).build();
    let custom_gate = std::sync::Arc::clone(&gate);
    let counter = LlmAgent::custom("counter", move |mut turn: CustomTurn| {
        let gate = std::sync::Arc::clone(&custom_gate);
        async move {
            turn.say("first ");
            pass(gate).await;
            let count = turn.custom()["count"].as_u64().unwrap_or(0) + 1;
            turn.set_custom(json!({ "count": count }));
            Ok("second".to_owned())
        }
    })
    .client_managed()
    .build();
    let open = axum::routing::post(move || {
        gate.add_permits(1);
        async {}
    });
    let addr = tests::http::serve(
        Server::new(Registry::new())
            .agent(&gated)
            .agent(&counter)
            .protocol(AgentWire::new())
            .auth(|headers| async move {
                let user = headers.get("x-user").and_then(|value| value.to_str().ok());
                Ok(bidi_http::Identity::new(user.unwrap_or("anyone")))
            })
            .routes(axum::Router::new().route("/open", open)),
    )
    .await;
    client("genkit_stream.mjs", vec![format!("http://{addr}")])
        .await
        .assert_passed(5);
}
