//! Genkit's reflection API version 2 of a bidi program (`src/bin/reflection-runtime.rs`),
//! spoken to as Genkit's tools speak it: a WebSocket the program dials
//! (`GENKIT_REFLECTION_V2_SERVER`), JSON-RPC on it. The registration, a run whose inputs come
//! turn by turn (an early input kept until the run reads it), the refusals in JSON-RPC's and
//! Genkit's terms, and a refused registration, which stops the API (the program goes on,
//! saying why). `genkit_cli.rs`
//! drives the same program with Genkit's own CLI over version 2.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tests::genkit::{Group, project};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// The tools' side of the socket.
struct Tools(WebSocketStream<TcpStream>);

impl Tools {
    /// Sends `message`.
    async fn send(&mut self, message: &Value) {
        self.0
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
    }

    /// Sends `text` as it is.
    async fn send_text(&mut self, text: &str) {
        self.0.send(Message::text(text.to_owned())).await.unwrap();
    }

    /// The next message of the runtime.
    async fn next(&mut self) -> Value {
        loop {
            let next = tokio::time::timeout(Duration::from_secs(60), self.0.next());
            match next.await.expect("a message within a minute") {
                Some(Ok(Message::Text(text))) => return serde_json::from_str(&text).unwrap(),
                Some(Ok(_)) => {}
                other => panic!("the socket ended: {other:?}"),
            }
        }
    }

    /// The messages of the runtime up to the answer to `id`, that answer last.
    async fn until_answer(&mut self, id: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.next().await;
            let answered = message["id"] == id && message.get("method").is_none();
            seen.push(message);
            if answered {
                return seen;
            }
        }
    }
}

/// The program, told to dial the tools on `listener`: the program and the accepted socket.
async fn started(listener: &TcpListener, dir: &std::path::Path) -> (Group, Tools) {
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let mut command = Command::new(env!("CARGO_BIN_EXE_reflection-runtime"));
    command
        .env("GENKIT_ENV", "dev")
        .env("GENKIT_REFLECTION_V2_SERVER", &url)
        .env("GENKIT_RUNTIME_ID", "v2-runtime")
        .env_remove("GENKIT_TELEMETRY_SERVER")
        .env_remove("GENKIT_REFLECTION_SECRET_TOKEN");
    let program = Group::spawn(command, dir).unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    let socket = tokio_tungstenite::accept_async(stream).await.unwrap();
    (program, Tools(socket))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_dials_the_tools_and_takes_a_runs_inputs_turn_by_turn() {
    let project = project();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (mut program, mut tools) = started(&listener, project.path()).await;

    let register = tools.next().await;
    assert_eq!(register["method"], "register", "{register}");
    assert_eq!(register["params"]["id"], "v2-runtime");
    assert_eq!(register["params"]["name"], "reflection-runtime");
    assert_eq!(register["params"]["reflectionApiSpecVersion"], 1);
    assert!(register["params"]["pid"].is_u64());
    let id = register["id"].clone();
    tools
        .send(&json!({"jsonrpc": "2.0", "id": id, "result": {}}))
        .await;

    // Refusals in JSON-RPC's terms.
    tools.send_text("not json").await;
    assert_eq!(tools.next().await["error"]["code"], -32700);
    tools
        .send(&json!({"jsonrpc": "2.0", "id": "1", "method": "nope"}))
        .await;
    assert_eq!(tools.until_answer("1").await[0]["error"]["code"], -32601);
    tools
        .send(&json!({"jsonrpc": "2.0", "id": "2", "method": "runAction", "params": {}}))
        .await;
    assert_eq!(tools.until_answer("2").await[0]["error"]["code"], -32602);
    // An unknown action, in Genkit's terms under -32000.
    let unknown = json!({"jsonrpc": "2.0", "id": "3", "method": "runAction",
        "params": {"key": "/flow/nope", "input": 1}});
    tools.send(&unknown).await;
    let answer = tools.until_answer("3").await.pop().unwrap();
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    assert_eq!(answer["error"]["data"]["code"], 5, "{answer}");

    // The listing, the values.
    tools
        .send(&json!({"jsonrpc": "2.0", "id": "4", "method": "listActions"}))
        .await;
    let listed = tools.until_answer("4").await.pop().unwrap();
    assert!(
        listed["result"]["actions"]["/agent/notes"].is_object(),
        "{listed}"
    );
    let values = json!({"jsonrpc": "2.0", "id": "5", "method": "listValues",
        "params": {"type": "defaultModel"}});
    tools.send(&values).await;
    assert_eq!(
        tools.until_answer("5").await[0]["result"],
        json!({"values": {}})
    );

    // A session's inputs: the first sent before the run is read, the second after the first
    // turn's answer; each turn's chunks, then the output.
    let run = json!({"jsonrpc": "2.0", "id": "6", "method": "runAction", "params": {
        "key": "/agent/notes", "init": {"sessionId": "v2"}, "stream": true, "streamInput": true}});
    tools.send(&run).await;
    let input = |chunk: &str| {
        json!({"jsonrpc": "2.0", "method": "sendInputStreamChunk",
            "params": {"requestId": "6", "chunk": chunk}})
    };
    tools.send(&input("one")).await;
    let state = tools.next().await;
    assert_eq!(state["method"], "runActionState", "{state}");
    let trace_id = state["params"]["state"]["traceId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut said = String::new();
    while said != "noted \"one\" after 0 lines" {
        let chunk = tools.next().await;
        assert_eq!(chunk["method"], "streamChunk", "{chunk}");
        assert_eq!(chunk["params"]["requestId"], "6");
        said.push_str(chunk["params"]["chunk"].as_str().unwrap());
    }
    tools.send(&input("two")).await;
    tools
        .send(&json!({"jsonrpc": "2.0", "method": "endInputStream", "params": {"requestId": "6"}}))
        .await;
    let rest = tools.until_answer("6").await;
    let (answer, chunks) = rest.split_last().unwrap();
    let second: String = chunks
        .iter()
        .map(|chunk| chunk["params"]["chunk"].as_str().unwrap())
        .collect();
    assert_eq!(second, "noted \"two\" after 1 lines");
    assert_eq!(answer["result"]["result"]["output"], 2, "{answer}");
    assert_eq!(answer["result"]["telemetry"]["traceId"], trace_id.as_str());

    // An input the action refuses, mid-stream: Genkit's code 3, the trace named.
    let run = json!({"jsonrpc": "2.0", "id": "7", "method": "runAction", "params": {
        "key": "/flow/countdown", "stream": true, "streamInput": true}});
    tools.send(&run).await;
    let refused = json!({"jsonrpc": "2.0", "method": "sendInputStreamChunk",
        "params": {"requestId": "7", "chunk": "x"}});
    tools.send(&refused).await;
    let answer = tools.until_answer("7").await.pop().unwrap();
    assert_eq!(answer["error"]["data"]["code"], 3, "{answer}");
    assert!(
        answer["error"]["data"]["details"]["traceId"].is_string(),
        "{answer}"
    );

    // A run cancelled by its trace; a second cancel finds none.
    let run = json!({"jsonrpc": "2.0", "id": "8", "method": "runAction", "params": {
        "key": "/bidi-flow/slow", "input": "go", "stream": true}});
    tools.send(&run).await;
    let state = tools.next().await;
    let trace_id = state["params"]["state"]["traceId"].clone();
    let cancel = json!({"jsonrpc": "2.0", "id": "9", "method": "cancelAction",
        "params": {"traceId": trace_id}});
    tools.send(&cancel).await;
    let mut seen = tools.until_answer("9").await;
    assert_eq!(seen.pop().unwrap()["result"]["message"], "Action cancelled");
    let answer = tools.until_answer("8").await.pop().unwrap();
    assert_eq!(answer["error"]["data"]["code"], 1, "{answer}");
    tools
        .send(
            &json!({"jsonrpc": "2.0", "id": "10", "method": "cancelAction",
        "params": {"traceId": trace_id}}),
        )
        .await;
    let again = tools.until_answer("10").await.pop().unwrap();
    assert_eq!(
        again["error"]["message"],
        "Action not found or already completed"
    );

    program.interrupt().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_registration_stops_the_api_saying_why() {
    let project = project();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (mut program, mut tools) = started(&listener, project.path()).await;
    let register = tools.next().await;
    let refusal = json!({"jsonrpc": "2.0", "id": register["id"],
        "error": {"code": -32001, "message": "bad secret"}});
    tools.send(&refusal).await;
    program
        .wait_for(Duration::from_secs(60), |out| {
            out.contains("Genkit's tools refused to register this runtime: bad secret")
        })
        .unwrap();
    program.interrupt().unwrap();
}
