//! The connection loop: one reader that answers what it can at once and starts a task for
//! what takes a while (a prompt turn, a session's MCP servers).
//!
//! A prompt turn starts in the read loop and stays there only for as long as it goes without
//! waiting ([`here_first`]): `session/cancel` and the client's answers to our requests must be
//! read while a turn waits, so its first wait moves it to a task of its own. Opening, loading
//! and closing a session go to a task at once: the answer to `session/new` is followed by the
//! session's commands, which the client reads while its next request is already being read.
//! The tasks of `session/new`, `session/load` and `session/close` hold one of 32 permits
//! until their answer is written; with none left the reader waits, so a client that does not
//! read stdout stops being read (backpressure) instead of growing a task per request. Prompt
//! turns take no permit, since a turn may wait for the client's answer, which only the reader
//! can read; there is one turn per session. A busy session refuses with `-32603` and
//! `reason: session_busy`: the request is valid JSON-RPC (so not `-32600`), no ACP code fits,
//! and `-32603` is what the ACP TypeScript SDK answers for any refusal a handler throws.

use std::io;
use std::sync::Arc;

use agent_client_protocol_schema::ProtocolVersion;
use agent_client_protocol_schema::v1::{
    AgentCapabilities, AuthenticateRequest, ClientNotification, ClientRequest, CloseSessionRequest,
    Error, InitializeResponse, LoadSessionRequest, McpCapabilities, NewSessionRequest,
    PromptCapabilities, RequestId, SessionCapabilities, SessionCloseCapabilities,
    SessionDeleteCapabilities, SessionListCapabilities, SessionResumeCapabilities,
};
use bidi_core::InPlace;
use bidi_flow::lines::{Line, read_line};
use bidi_flow::text::cap;
use futures_util::FutureExt as _;
use serde_json::Value;
use tokio::io::{AsyncRead, BufReader};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use super::session::{close_session, load_session, new_session, set_mode};
use super::shared::Shared;
use super::{config, manage};
use crate::codec::{self, Incoming};
use crate::turn::{prompt, start};

pub(crate) async fn read_loop<R: AsyncRead + Unpin>(
    shared: &Arc<Shared>,
    reader: R,
    max_line_bytes: usize,
    turns: &mut JoinSet<()>,
) -> io::Result<()> {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        while turns.try_join_next().is_some() {}
        let line = tokio::select! {
            biased;
            () = shared.stop.cancelled() => return Ok(()),
            line = read_line(&mut reader, &mut buf, max_line_bytes) => line?,
        };
        let incoming = match line {
            None => return Ok(()),
            Some(Line::TooLarge(len)) => codec::oversized(len, max_line_bytes, &buf),
            Some(Line::Frame) if buf.iter().all(u8::is_ascii_whitespace) => continue,
            Some(Line::Frame) => codec::decode(&buf),
        };
        match incoming {
            Err(refusal) => {
                shared
                    .respond::<Value>(refusal.id, Err(*refusal.error))
                    .await;
            }
            Ok(Incoming::Request { id, method, params }) => {
                dispatch(shared, id, &method, params, turns).await;
            }
            Ok(Incoming::Notification { method, params }) => notify(shared, &method, params),
            Ok(Incoming::Response { id, result }) => {
                if !shared.pending.resolve(&id, result) {
                    log!(
                        "an answer to request {:?}, which is not waiting for one: ignored",
                        id.to_string()
                    );
                }
            }
        }
    }
}

/// Answers request `id`: decoded once into the schema's [`ClientRequest`] (an unknown method
/// or bad params answered at once), then served in place, or in a task of its own for what
/// takes a while.
async fn dispatch(
    shared: &Arc<Shared>,
    id: RequestId,
    method: &str,
    params: Value,
    turns: &mut JoinSet<()>,
) {
    let request = match codec::client_request(method, params) {
        Ok(request) => request,
        Err(error) => return shared.respond::<Value>(id, Err(error)).await,
    };
    match request {
        ClientRequest::InitializeRequest(request) => {
            shared.initialized(&request.client_capabilities);
            shared.respond(id, Ok(initialize(shared))).await;
        }
        ClientRequest::AuthenticateRequest(request) => {
            shared
                .respond::<Value>(id, Err(authenticate(&request)))
                .await;
        }
        // Starting or stopping a session's MCP servers takes a while: the reader goes on
        // meanwhile.
        ClientRequest::NewSessionRequest(request) => {
            with_room(shared, turns, |shared| open_new(shared, id, request)).await;
        }
        ClientRequest::LoadSessionRequest(request) => {
            with_room(shared, turns, |shared| open_loaded(shared, id, request)).await;
        }
        ClientRequest::CloseSessionRequest(request) => {
            with_room(shared, turns, |shared| close(shared, id, request)).await;
        }
        ClientRequest::SetSessionModeRequest(request) => {
            let result = set_mode(shared, request).await;
            shared.respond(id, result).await;
        }
        ClientRequest::SetSessionConfigOptionRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let result = config::set(&shared, request).await;
                shared.respond(id, result).await;
            })
            .await;
        }
        ClientRequest::ListSessionsRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let result = manage::list(&shared, request).await;
                shared.respond(id, result).await;
            })
            .await;
        }
        ClientRequest::ResumeSessionRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let session_id = request.session_id.clone();
                let result = manage::resume(&shared, request).await;
                let resumed = result.is_ok();
                shared.respond(id, result).await;
                if resumed {
                    shared.announce(&session_id).await;
                }
            })
            .await;
        }
        ClientRequest::DeleteSessionRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let result = manage::delete(&shared, request).await;
                shared.respond(id, result).await;
            })
            .await;
        }
        #[cfg(feature = "unstable_session_fork")]
        ClientRequest::ForkSessionRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let result = super::fork::fork(&shared, request).await;
                let forked = result.as_ref().ok().map(|forked| forked.session_id.clone());
                shared.respond(id, result).await;
                if let Some(forked) = forked {
                    shared.announce(&forked).await;
                }
            })
            .await;
        }
        #[cfg(feature = "unstable_session_status")]
        ClientRequest::SessionStatusRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let result = manage::status(&shared, request).await;
                shared.respond(id, result).await;
            })
            .await;
        }
        #[cfg(feature = "unstable_session_set_title")]
        ClientRequest::SetSessionTitleRequest(request) => {
            with_room(shared, turns, |shared| async move {
                let result = manage::set_title(&shared, request).await;
                shared.respond(id, result).await;
            })
            .await;
        }
        ClientRequest::PromptRequest(request) => match start(shared, request) {
            Ok(turn) => {
                here_first(turns, prompt(Arc::clone(shared), id, turn));
            }
            Err(error) => shared.respond::<Value>(id, Err(error)).await,
        },
        // What `client_request` never makes (the enum is non-exhaustive): method not found, as
        // for any method not served.
        other => {
            let error = codec::method_not_found(other.method());
            shared.respond::<Value>(id, Err(error)).await;
        }
    }
}

/// `authenticate`: refused, since the agent needs no authentication.
fn authenticate(request: &AuthenticateRequest) -> Error {
    codec::invalid_params(
        "methodId",
        format!(
            "unknown authentication method `{}`: this agent needs no authentication (authMethods is empty)",
            cap(&request.method_id.0)
        ),
    )
}

/// Runs `task` in a task of its own once there is [`room`] for it, holding the room until it
/// ends; nothing once the client is gone.
async fn with_room<F, T>(shared: &Arc<Shared>, turns: &mut JoinSet<()>, task: T)
where
    T: FnOnce(Arc<Shared>) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let Some(room) = room(shared).await else {
        return;
    };
    let task = task(Arc::clone(shared));
    turns.spawn(async move {
        let _room = room;
        task.await;
    });
}

/// Runs `task` here, in the reader, for as long as it goes without waiting, then in a task of
/// its own in `turns`: a turn that needs nothing from outside (a scripted or cached answer, a
/// memory store) is answered before the next line is read, with no task spawned and no other
/// thread woken; one that waits (for the model, the store, the client's answer) leaves the
/// reader free to read on.
fn here_first(turns: &mut JoinSet<()>, task: impl Future<Output = ()> + Send + 'static) {
    let mut task = Box::pin(InPlace::new(task));
    if task.as_mut().now_or_never().is_none() {
        turns.spawn(task);
    }
}

/// `session/new`: opens the session, answers, then announces its commands.
async fn open_new(shared: Arc<Shared>, id: RequestId, request: NewSessionRequest) {
    let result = tokio::select! {
        () = shared.stop.cancelled() => return, // Nobody waits for it.
        result = new_session(&shared, request) => result,
    };
    let opened = result.as_ref().ok().map(|new| new.session_id.clone());
    shared.respond(id, result).await;
    if let Some(session_id) = opened {
        shared.announce(&session_id).await;
    }
}

/// `session/load`: replays and opens the session, answers, then announces its commands.
async fn open_loaded(shared: Arc<Shared>, id: RequestId, request: LoadSessionRequest) {
    let session_id = request.session_id.clone();
    let result = tokio::select! {
        () = shared.stop.cancelled() => return,
        result = load_session(&shared, request) => result,
    };
    let loaded = result.is_ok();
    shared.respond(id, result).await;
    if loaded {
        shared.announce(&session_id).await;
    }
}

/// `session/close`: stops the session's turn and MCP servers, forgets it, answers.
async fn close(shared: Arc<Shared>, id: RequestId, request: CloseSessionRequest) {
    let result = close_session(&shared, &request.session_id).await;
    shared.respond(id, result).await;
}

/// Waits for room for one more request task (`session/new`, `session/load`, `session/close`):
/// at most [`MAX_REQUESTS`](super::MAX_REQUESTS) run at once, so that a client that does not read its answers
/// makes the reader wait (and stop reading) rather than queue answers without bound. `None`
/// once the client is gone.
async fn room(shared: &Shared) -> Option<OwnedSemaphorePermit> {
    tokio::select! {
        () = shared.stop.cancelled() => None,
        permit = Arc::clone(&shared.requests).acquire_owned() => permit.ok(),
    }
}

fn notify(shared: &Shared, method: &str, params: Value) {
    match codec::client_notification(method, params) {
        Ok(Some(ClientNotification::CancelNotification(cancel))) => {
            let sessions = shared.sessions();
            if let Some(token) = sessions
                .get(&cancel.session_id.0)
                .and_then(|slot| slot.running.as_ref())
            {
                token.cancel();
            }
        }
        // Unknown notifications are ignored, as JSON-RPC says.
        Ok(_) => {}
        Err(error) => log!("session/cancel ignored: {:?}", error.message),
    }
}

fn initialize(shared: &Shared) -> InitializeResponse {
    // The only version spoken: the client's if it is 1, else ours, which it may refuse.
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(
                    PromptCapabilities::new()
                        .image(true)
                        .audio(true)
                        .embedded_context(true),
                )
                // Stdio and streamable HTTP MCP servers, with the `mcp` feature (none without
                // it); rmcp has no client for the old SSE transport.
                .mcp_capabilities(
                    McpCapabilities::new()
                        .http(cfg!(feature = "mcp"))
                        .sse(false),
                )
                .session_capabilities(session_capabilities(shared)),
        )
        .agent_info(shared.info.clone())
}

/// The session methods served beyond `new`, `load` and `prompt`.
fn session_capabilities(shared: &Shared) -> SessionCapabilities {
    let capabilities = SessionCapabilities::new()
        .close(SessionCloseCapabilities::new())
        .list(SessionListCapabilities::new())
        .delete(SessionDeleteCapabilities::new())
        .resume(SessionResumeCapabilities::new());
    #[cfg(feature = "unstable_session_status")]
    let capabilities =
        capabilities.status(agent_client_protocol_schema::v1::SessionStatusCapabilities::new());
    #[cfg(feature = "unstable_session_set_title")]
    let capabilities =
        capabilities.title(agent_client_protocol_schema::v1::SessionTitleCapabilities::new());
    // A bridged agent's sessions are another program's: only an `LlmAgent`'s fork.
    #[cfg(feature = "unstable_session_fork")]
    let capabilities = match &shared.agent {
        super::Backend::Llm(_) => {
            capabilities.fork(agent_client_protocol_schema::v1::SessionForkCapabilities::new())
        }
        super::Backend::Bridged(_) => capabilities,
    };
    #[cfg(not(feature = "unstable_session_fork"))]
    let _ = shared;
    capabilities
}

#[cfg(test)]
mod tests {
    use bidi_llm::testing::{Scripted, ScriptedModel};
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, DuplexStream};

    use agent_client_protocol_schema::v1::Implementation;
    use bidi_llm::LlmAgent;
    use serde_json::json;

    use super::*;
    use crate::policy::Rules;
    use crate::server::{Backend, Server};

    /// The code of an error answer.
    fn code(error: &Error) -> i32 {
        error.code.into()
    }

    fn agent(model: ScriptedModel) -> LlmAgent {
        LlmAgent::builder("test", model).build()
    }

    struct Client {
        input: DuplexStream,
        output: tokio::io::Lines<BufReader<DuplexStream>>,
    }

    impl Client {
        async fn send(&mut self, line: Value) {
            let mut text = line.to_string();
            text.push('\n');
            self.input.write_all(text.as_bytes()).await.unwrap();
        }

        async fn recv(&mut self) -> Value {
            let line = self.output.next_line().await.unwrap().expect("a line");
            serde_json::from_str(&line).unwrap()
        }
    }

    fn start_server(agent: LlmAgent) -> (Client, tokio::task::JoinHandle<io::Result<()>>) {
        let (client_in, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(Server::new(agent).serve(server_in, server_out));
        let client = Client {
            input: client_in,
            output: BufReader::new(client_out).lines(),
        };
        (client, server)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prompt_streams_chunks_then_ends_the_turn() {
        let model = ScriptedModel::new([Scripted::new().thinking("hmm").text("Hi there")]);
        let (mut client, server) = start_server(agent(model));
        client.send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}})).await;
        let init = client.recv().await;
        assert_eq!(init["result"]["protocolVersion"], 1);
        assert_eq!(init["result"]["agentCapabilities"]["loadSession"], true);
        assert_eq!(init["result"]["agentInfo"]["name"], "test");
        client.send(json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}})).await;
        let new = client.recv().await;
        let session = new["result"]["sessionId"].as_str().unwrap().to_owned();
        client.send(json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":session,"prompt":[{"type":"text","text":"hello"}]}})).await;
        let mut kinds = Vec::new();
        let mut text = String::new();
        let answer = loop {
            let line = client.recv().await;
            if line.get("id").is_some() {
                break line;
            }
            let update = &line["params"]["update"];
            kinds.push(update["sessionUpdate"].as_str().unwrap().to_owned());
            if update["sessionUpdate"] == "agent_message_chunk" {
                text.push_str(update["content"]["text"].as_str().unwrap());
            }
        };
        assert_eq!(
            answer,
            json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}})
        );
        assert_eq!(text, "Hi there");
        assert!(
            kinds.contains(&"agent_thought_chunk".to_owned()),
            "{kinds:?}"
        );
        drop(client);
        server.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn our_requests_are_answered_and_fail_when_the_client_goes() {
        let (client_in, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let (shared, _stop) = Shared::new(
            Backend::Llm(agent(ScriptedModel::new([]))),
            Implementation::new("t", "0"),
            Rules::default(),
            Box::pin(server_out),
        );
        let mut client = Client {
            input: client_in,
            output: BufReader::new(client_out).lines(),
        };
        let reader = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                let mut turns = JoinSet::new();
                let result = read_loop(&shared, server_in, 1024, &mut turns).await;
                shared.pending.fail_all();
                result
            })
        };
        let first = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.request("x/ask", json!({"q": 1})).await })
        };
        let request = client.recv().await;
        assert_eq!(request["method"], "x/ask");
        let id = request["id"].clone();
        assert!(id.is_string(), "{request}");
        // A stray answer changes nothing; then the real one.
        client
            .send(json!({"jsonrpc":"2.0","id":"nobody","result":{}}))
            .await;
        client
            .send(json!({"jsonrpc":"2.0","id":id,"result":{"a":2}}))
            .await;
        assert_eq!(first.await.unwrap(), Ok(json!({"a": 2})));

        let second = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.request("x/ask", json!({})).await })
        };
        let request = client.recv().await;
        client
            .send(json!({"jsonrpc":"2.0","id":request["id"],"error":{"code":-32601,"message":"Method not found"}}))
            .await;
        let error = second.await.unwrap().unwrap_err();
        assert_eq!(code(&error), -32601);

        let third = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move { shared.request("x/ask", json!({})).await })
        };
        let _ = client.recv().await;
        drop(client.input); // EOF
        let error = third.await.unwrap().unwrap_err();
        assert_eq!(code(&error), -32603);
        assert_eq!(
            error.data,
            Some(json!({"reason": "incoming_transport_closed"}))
        );
        reader.await.unwrap().unwrap();
        // And every later request fails at once.
        let error = shared.request("x/ask", json!({})).await.unwrap_err();
        assert_eq!(
            error.data,
            Some(json!({"reason": "incoming_transport_closed"}))
        );
    }
}
