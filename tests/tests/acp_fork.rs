//! A session forked over ACP is a branch every wire sees: an ACP server and a `bidi_http`
//! server with Genkit's agent wire share one agent and one store (the ACP server in the scope
//! anonymous HTTP requests have), the fork is made with `session/fork`, and Genkit's
//! `getSnapshot` of the fork names the source's snapshot as its parent. The fork and the
//! source go their own ways.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use bidi_agent::Scope;
use bidi_genkit::agent::AgentWire;
use bidi_http::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::DemoModel;
use bidi_session::{MemoryStore, SessionStore};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, DuplexStream, Lines};

/// An ACP client on pipes.
struct Acp {
    input: DuplexStream,
    output: Lines<BufReader<DuplexStream>>,
}

impl Acp {
    fn start(server: bidi_acp::Server) -> Self {
        let (input, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, output) = tokio::io::duplex(1 << 16);
        tokio::spawn(server.serve(server_in, server_out));
        Self {
            input,
            output: BufReader::new(output).lines(),
        }
    }

    /// The answer to request `id` with `method` and `params` (notifications before it skipped).
    async fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = request.to_string();
        line.push('\n');
        self.input.write_all(line.as_bytes()).await.unwrap();
        loop {
            let line = self.output.next_line().await.unwrap().expect("an answer");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
        }
    }
}

/// Genkit's `getSnapshot` of `data`.
async fn snapshot(base: &str, data: Value) -> Value {
    let url = format!("{base}/agent/writer/genkit/getSnapshot");
    let answer: Value = reqwest::Client::new()
        .post(url)
        .json(&json!({ "data": data }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_made_over_acp_is_a_branch_genkit_reads() {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let agent = LlmAgent::builder("writer", DemoModel)
        .store(Arc::clone(&store))
        .build();
    let http = Server::new(bidi_flow::Registry::new())
        .agent(&agent)
        .protocol(AgentWire::new());
    let base = format!("http://{}", tests::http::serve(http).await);
    // The scope anonymous HTTP requests have: both wires see the same sessions.
    let mut acp = Acp::start(bidi_acp::Server::new(agent).scope(Scope::new("")));
    let init = json!({"protocolVersion": 1});
    let initialized = acp.call(0, "initialize", init).await;
    assert!(
        initialized["result"]["agentCapabilities"]["sessionCapabilities"]["fork"].is_object(),
        "{initialized}"
    );
    let created = acp
        .call(
            1,
            "session/new",
            json!({"cwd": "/project", "mcpServers": []}),
        )
        .await;
    let source = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let prompt = |session: &str, text: &str| json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]});
    let said = acp
        .call(2, "session/prompt", prompt(&source, "hello"))
        .await;
    assert_eq!(said["result"]["stopReason"], "end_turn", "{said}");
    let at = snapshot(&base, json!({"sessionId": source})).await;
    let at = at["snapshotId"].as_str().unwrap().to_owned();

    let forked = acp
        .call(
            3,
            "session/fork",
            json!({"sessionId": source, "cwd": "/project"}),
        )
        .await;
    let fork = forked["result"]["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(fork, source);
    let read = snapshot(&base, json!({"sessionId": fork})).await;
    assert_eq!(
        read["parentId"],
        at.as_str(),
        "the fork's lineage: {read:#}"
    );
    assert_eq!(read["sessionId"], fork.as_str());
    assert_eq!(
        read["state"]["messages"].as_array().unwrap().len(),
        2,
        "{read:#}"
    );

    // Each goes its own way.
    let said = acp
        .call(4, "session/prompt", prompt(&fork, "only here"))
        .await;
    assert_eq!(said["result"]["stopReason"], "end_turn", "{said}");
    let fork_now = snapshot(&base, json!({"sessionId": fork})).await;
    assert_eq!(fork_now["state"]["messages"].as_array().unwrap().len(), 4);
    let source_now = snapshot(&base, json!({"sessionId": source})).await;
    assert_eq!(
        source_now["snapshotId"],
        at.as_str(),
        "the source did not move"
    );

    // A fork of nothing is refused.
    let refused = acp
        .call(
            5,
            "session/fork",
            json!({"sessionId": "nope", "cwd": "/project"}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
}
