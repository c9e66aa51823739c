//! HTTP MCP servers: a fixture speaking MCP's streamable HTTP transport on 127.0.0.1 (JSON
//! answers, one request per connection), recording what it was sent; and the HTTP servers a
//! session cannot use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bidi_acp::Server;
use bidi_llm::LlmAgent;
use bidi_llm::testing::{Scripted, ScriptedModel};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::support::Client;

/// One HTTP request the fixture got: its method, headers (names in lower case) and JSON body.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    headers: HashMap<String, String>,
    body: Value,
}

/// How the fixture answers.
#[derive(Clone, Copy)]
enum Behaviour {
    /// As an MCP server with one tool, `shout`, which upper-cases its `text`.
    Mcp,
    /// `404 Not Found` to everything: no MCP server.
    NotFound,
    /// Reads the request and never answers.
    Silent,
}

/// Starts the fixture on a free port of 127.0.0.1; returns its URL and what it is sent.
async fn fixture(behaviour: Behaviour) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move { answer(stream, behaviour, &log).await });
        }
    });
    (url, seen)
}

async fn answer(stream: TcpStream, behaviour: Behaviour, log: &Mutex<Vec<Seen>>) {
    let mut stream = BufReader::new(stream);
    let mut head = String::new();
    if stream.read_line(&mut head).await.unwrap_or(0) == 0 {
        return;
    }
    let method = head.split(' ').next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let length: usize = headers
        .get("content-length")
        .map_or(0, |length| length.parse().unwrap());
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    log.lock().unwrap().push(Seen {
        method: method.clone(),
        headers,
        body: body.clone(),
    });
    let (status, json) = match behaviour {
        Behaviour::Silent => {
            std::future::pending::<()>().await;
            return;
        }
        Behaviour::NotFound => ("404 Not Found", None),
        Behaviour::Mcp => match (method.as_str(), &body["id"], body["method"].as_str()) {
            ("POST", Value::Null, _) => ("202 Accepted", None),
            ("POST", id, Some("initialize")) => (
                "200 OK",
                Some(json!({"jsonrpc": "2.0", "id": id, "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "fixture", "version": "1.0.0"}}})),
            ),
            ("POST", id, Some("tools/list")) => (
                "200 OK",
                Some(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": [{
                    "name": "shout",
                    "description": "Upper-cases a text",
                    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}})),
            ),
            ("POST", id, Some("tools/call")) => {
                let text = body["params"]["arguments"]["text"].as_str().unwrap_or("");
                (
                    "200 OK",
                    Some(json!({"jsonrpc": "2.0", "id": id, "result": {
                        "content": [{"type": "text", "text": text.to_uppercase()}]}})),
                )
            }
            ("POST", id, _) => (
                "200 OK",
                Some(
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no"}}),
                ),
            ),
            ("DELETE", _, _) => ("200 OK", None),
            _ => ("405 Method Not Allowed", None),
        },
    };
    let body = json.map(|json| json.to_string()).unwrap_or_default();
    let kind = if body.is_empty() {
        String::new()
    } else {
        "Content-Type: application/json\r\n".to_owned()
    };
    let response = format!(
        "HTTP/1.1 {status}\r\n{kind}Mcp-Session-Id: fixture-session\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.get_mut().write_all(response.as_bytes()).await;
    let _ = stream.get_mut().shutdown().await;
}

fn http(name: &str, url: &str, headers: &Value) -> Value {
    json!({"type": "http", "name": name, "url": url, "headers": headers})
}

fn new_session(id: i64, servers: &[Value]) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"session/new","params":{"cwd":"/project","mcpServers":servers}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_mcp_server_gets_the_headers_and_its_tool_runs() {
    let (url, seen) = fixture(Behaviour::Mcp).await;
    let model = ScriptedModel::new([
        Scripted::new().tool_call("c1", "web__shout", &json!({"text": "hi there"})),
        Scripted::new().text("done"),
    ]);
    let agent = LlmAgent::builder("assistant", model).build();
    let mut client = Client::start(Server::new(agent));
    client
        .send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}))
        .await;
    let init = client.answer(0).await;
    let mcp = &init["result"]["agentCapabilities"]["mcpCapabilities"];
    assert_eq!((&mcp["http"], &mcp["sse"]), (&json!(true), &json!(false)));

    let headers = json!([{"name": "Authorization", "value": "Bearer s3cret"},
        {"name": "X-Team", "value": "bidi"}]);
    client
        .send(new_session(1, &[http("web", &url, &headers)]))
        .await;
    let session = client.answer(1).await["result"]["sessionId"].clone();
    client.prompt(2, &session, "shout it").await;
    let turn = client.until(2).await;
    assert_eq!(turn.last().unwrap()["result"]["stopReason"], "end_turn");
    let done: Vec<&Value> = turn
        .iter()
        .map(|m| &m["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .collect();
    assert_eq!(done.len(), 1, "{turn:#?}");
    assert_eq!(done[0]["content"][0]["content"]["text"], "HI THERE");
    client.finish().await;

    let seen = seen.lock().unwrap().clone();
    let calls: Vec<&str> = seen
        .iter()
        .filter_map(|s| s.body["method"].as_str())
        .collect();
    assert_eq!(
        calls,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call"
        ],
        "{seen:#?}"
    );
    for request in &seen {
        assert_eq!(
            request.headers["authorization"], "Bearer s3cret",
            "{request:?}"
        );
        assert_eq!(request.headers["x-team"], "bidi", "{request:?}");
    }
    let call = seen
        .iter()
        .find(|s| s.body["method"] == "tools/call")
        .unwrap();
    assert_eq!(call.body["params"]["name"], "shout", "{call:?}");
    assert_eq!(
        call.headers["mcp-session-id"], "fixture-session",
        "{call:?}"
    );
    // The end of input closed the server's session.
    let last = seen.last().unwrap();
    assert_eq!(last.method, "DELETE", "{seen:#?}");
    assert_eq!(
        last.headers["mcp-session-id"], "fixture-session",
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_mcp_servers_that_cannot_be_used_fail_the_session_naming_them() {
    let agent = LlmAgent::builder("assistant", ScriptedModel::new([])).build();
    let mut client = Client::start(Server::new(agent));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let unreachable = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let (not_found, _) = fixture(Behaviour::NotFound).await;

    // Refused before any connection: invalid params naming the field.
    let sse = json!({"type": "sse", "name": "old", "url": unreachable, "headers": []});
    let refused = [
        (sse, "mcpServers[0]", "only stdio and http"),
        (
            http("ftp", "ftp://127.0.0.1/mcp", &json!([])),
            "mcpServers[0].url",
            "must be http or https",
        ),
        (
            http("rel", "/mcp", &json!([])),
            "mcpServers[0].url",
            "`/mcp` is no URL",
        ),
        (
            http(
                "hdr",
                &unreachable,
                &json!([{"name": "bad name", "value": "x"}]),
            ),
            "mcpServers[0].headers[0]",
            "`bad name` is no HTTP header name",
        ),
        (
            http(
                "val",
                &unreachable,
                &json!([{"name": "Authorization", "value": "top\nsecret"}]),
            ),
            "mcpServers[0].headers[0]",
            "the value of `authorization` is no HTTP header value",
        ),
    ];
    let mut id = 0;
    for (server, path, reason) in refused {
        id += 1;
        client.send(new_session(id, &[server])).await;
        let answer = client.answer(id).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(answer["error"]["data"]["path"], path, "{answer}");
        let error = answer["error"]["data"]["error"].as_str().unwrap();
        assert!(error.contains(reason), "{answer}");
        assert!(
            !error.contains("secret"),
            "a header value is never quoted: {answer}"
        );
    }

    // Connected to, and failing: the client's configuration, so invalid params naming the
    // server and its URL, without the URL's secrets.
    let secret =
        unreachable.replace("http://", "http://alice:hunter22@") + "?token=s3cr3tvalue&v=2";
    let shown = unreachable.replace("http://", "http://***@") + "?token=***&v=***";
    let failures = [
        ("down", &unreachable, &unreachable, "Connection refused"),
        ("web", &not_found, &not_found, "HTTP 404 Not Found"),
        ("vault", &secret, &shown, "Connection refused"),
    ];
    for (name, url, shown, why) in failures {
        id += 1;
        let stdio = json!({"name": "ok", "command": "/bin/true", "args": [], "env": []});
        client
            .send(new_session(id, &[http(name, url, &json!([])), stdio]))
            .await;
        let answer = client.answer(id).await;
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert_eq!(answer["error"]["data"]["path"], "mcpServers[0]", "{answer}");
        let error = answer["error"]["data"]["error"].as_str().unwrap();
        assert!(
            error.starts_with(&format!(
                "the MCP server `{name}` at {shown} failed to connect: "
            )),
            "{answer}"
        );
        assert!(error.contains(why), "{answer}");
        let text = answer.to_string();
        assert!(
            !text.contains("hunter22") && !text.contains("s3cr3tvalue"),
            "{answer}"
        );
    }
    client.finish().await;
}

#[tokio::test(start_paused = true)]
async fn an_http_mcp_server_that_never_answers_fails_at_the_start_timeout() {
    let (url, seen) = fixture(Behaviour::Silent).await;
    let agent = LlmAgent::builder("assistant", ScriptedModel::new([])).build();
    let server = Server::new(agent).mcp_start_timeout(Duration::from_secs(7));
    let mut client = Client::start(server);
    client
        .send(new_session(1, &[http("mute", &url, &json!([]))]))
        .await;
    let answer = client.answer(1).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let error = answer["error"]["data"]["error"].as_str().unwrap();
    assert_eq!(
        error,
        format!("the MCP server `mute` at {url} failed to connect: it did not answer within 7s")
    );
    assert_eq!(seen.lock().unwrap()[0].body["method"], "initialize");
    client.finish().await;
}
