//! A client on in-memory pipes: sends JSON-RPC lines, reads every line the server writes.

use std::io;

use bidi_acp::Server;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, DuplexStream, Lines};
use tokio::task::JoinHandle;

pub(crate) struct Client {
    input: Option<DuplexStream>,
    output: Lines<BufReader<DuplexStream>>,
    server: JoinHandle<io::Result<()>>,
}

impl Client {
    pub(crate) fn start(server: Server) -> Self {
        let (input, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, output) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(server.serve(server_in, server_out));
        Self {
            input: Some(input),
            output: BufReader::new(output).lines(),
            server,
        }
    }

    pub(crate) async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        let input = self.input.as_mut().unwrap();
        input.write_all(line.as_bytes()).await.unwrap();
    }

    pub(crate) async fn recv(&mut self) -> Option<Value> {
        let line = self.output.next_line().await.unwrap()?;
        Some(serde_json::from_str(&line).unwrap())
    }

    /// Messages up to and including the answer to `id`.
    pub(crate) async fn until(&mut self, id: i64) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.recv().await.expect("an answer");
            let done = message.get("method").is_none() && message["id"] == id;
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    /// The answer to `id` (what came before it is dropped).
    pub(crate) async fn answer(&mut self, id: i64) -> Value {
        self.until(id).await.pop().unwrap()
    }

    /// Messages up to and including the next permission request.
    pub(crate) async fn until_asked(&mut self) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let message = self.recv().await.expect("a permission request");
            assert!(
                message.get("method").is_some(),
                "an answer before the request: {message}"
            );
            let done = message["method"] == "session/request_permission";
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    pub(crate) async fn new_session(&mut self) -> Value {
        self.send(json!({"jsonrpc":"2.0","id":100,"method":"session/new","params":{"cwd":"/project","mcpServers":[]}}))
            .await;
        self.until(100).await.pop().unwrap()["result"].clone()
    }

    pub(crate) async fn prompt(&mut self, id: i64, session: &Value, text: &str) {
        self.send(
            json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":{
            "sessionId": session, "prompt": [{"type": "text", "text": text}]}}),
        )
        .await;
    }

    pub(crate) async fn choose(&mut self, request: &Value, outcome: Value) {
        self.send(json!({"jsonrpc":"2.0","id":request["id"],"result":{"outcome":outcome}}))
            .await;
    }

    pub(crate) async fn finish(mut self) -> Vec<Value> {
        drop(self.input.take());
        let mut rest = Vec::new();
        while let Some(message) = self.recv().await {
            rest.push(message);
        }
        self.server.await.unwrap().unwrap();
        rest
    }
}
