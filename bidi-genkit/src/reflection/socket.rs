//! The reflection API's version 2: the runtime dials the tools' WebSocket
//! (`GENKIT_REFLECTION_V2_SERVER`, which `genkit start --experimental-reflection-v2` sets) and
//! speaks JSON-RPC 2.0 on it, one message a text frame, so that a bidi action takes its inputs
//! turn by turn.
//!
//! The runtime registers (`register`: its id, pid, name, version) and answers the tools'
//! requests: `listActions` (the registry's descriptors; the init schema, which the tools strip
//! from a descriptor, also in its `metadata.initSchema`), `listValues`, `runAction` and
//! `cancelAction`. A run reports its trace at once (`runActionState`), streams its chunks
//! (`streamChunk`, with `stream`), and takes its inputs from `sendInputStreamChunk` until
//! `endInputStream` (with `streamInput`; a run's `input`, if any, comes first); a run without
//! `streamInput` takes its one `input`. Its answer is `{result, telemetry: {traceId}}`, or the
//! error `-32000` whose `data` is Genkit's error (`{code, message, details: {traceId}}`, the
//! numeric gRPC codes of version 1). A chunk that arrives before its run is read waits in the
//! run's queue, as the tools may send a first input before they read the trace.
//!
//! A run that streams faster than the tools read waits for them (at most [`OUTGOING`]
//! messages wait for the socket).
//!
//! When the WebSocket closes (the tools stopped), the runs going on are cancelled and serving
//! ends. A message that is not JSON-RPC is answered `-32700` or `-32600`; an unknown method
//! `-32601`; params that do not fit `-32602`. A refused `register` ends serving with its error
//! (which a [`Reflection`](super::Reflection) beside a server logs, the server going on).

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use bidi_flow::text::cap;
use bidi_flow::{JsonError, JsonSendHalf};
use bidi_http::flow::CancelOnDrop;
use futures_util::{SinkExt as _, StreamExt as _};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

use super::server::{self, Api, Ids, Refused, Running};
use super::{GENKIT_VERSION, SPEC_VERSION};

/// The id of the runtime's `register` request.
const REGISTER: &str = "register";

/// How many messages of the runs wait for the socket at most: a run streaming faster than the
/// tools read waits for them.
const OUTGOING: usize = 256;

/// What a run hands the loop that writes the socket.
enum Out {
    /// A message's text.
    Frame(String),
    /// The run of this request is over: its inputs go nowhere now.
    Done(String),
}

/// The loop's side of the runs: where each one's inputs go, by request id.
type Inputs = HashMap<String, mpsc::UnboundedSender<Value>>;

/// Dials `url`, registers as `name`, and serves the tools until the socket closes or
/// `signal` completes.
///
/// # Errors
///
/// The tools cannot be reached, or refuse to register the runtime.
pub(super) async fn serve(
    api: Arc<Api>,
    url: &str,
    name: &str,
    signal: impl Future<Output = ()>,
) -> io::Result<()> {
    let (socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .map_err(|error| {
            io::Error::other(format!("cannot reach Genkit's tools at {url}: {error}"))
        })?;
    let (mut sink, mut stream) = socket.split();
    let register = json!({
        "jsonrpc": "2.0",
        "id": REGISTER,
        "method": "register",
        "params": {
            "id": api.id,
            "pid": std::process::id(),
            "name": name,
            "genkitVersion": GENKIT_VERSION,
            "reflectionApiSpecVersion": SPEC_VERSION,
            "envs": ["dev"],
        },
    });
    sink.send(Message::text(register.to_string()))
        .await
        .map_err(io::Error::other)?;
    let (out, mut outgoing) = mpsc::channel(OUTGOING);
    let mut inputs = Inputs::new();
    // Dropped with the loop: the runs still going on are cancelled (their guards).
    let mut runs = JoinSet::new();
    let mut signal = std::pin::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => break,
            Some(sent) = outgoing.recv() => match sent {
                Out::Frame(text) => {
                    if sink.send(Message::text(text)).await.is_err() {
                        break;
                    }
                }
                Out::Done(request) => {
                    inputs.remove(&request);
                }
            },
            Some(_) = runs.join_next(), if !runs.is_empty() => {}
            received = stream.next() => match received {
                Some(Ok(Message::Text(text))) => {
                    let answer = handle(&api, text.as_str(), &out, &mut inputs, &mut runs)?;
                    if let Some(answer) = answer
                        && sink.send(Message::text(answer.to_string())).await.is_err()
                    {
                        break;
                    }
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = sink.close().await;
    Ok(())
}

/// Handles one message of the tools: the answer to send at once, if any.
///
/// # Errors
///
/// The tools refused to register the runtime.
fn handle(
    api: &Arc<Api>,
    text: &str,
    out: &mpsc::Sender<Out>,
    inputs: &mut Inputs,
    runs: &mut JoinSet<()>,
) -> io::Result<Option<Value>> {
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        return Ok(Some(error(&Value::Null, -32700, "the message is not JSON")));
    };
    let id = message.get("id").cloned();
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        if id.as_ref().and_then(Value::as_str) == Some(REGISTER) {
            registered(api, &message)?;
            return Ok(None);
        }
        let id = id.unwrap_or(Value::Null);
        return Ok(Some(error(&id, -32600, "not a JSON-RPC request")));
    };
    let Some(id) = id else {
        notified(api, method, &params, inputs);
        return Ok(None);
    };
    let answer = match method {
        "listActions" => Ok(json!({ "actions": actions(api) })),
        "listValues" => {
            let kind = params.get("type").and_then(Value::as_str);
            server::values_of(kind)
                .map(|values| json!({ "values": values }))
                .map_err(|refused| (-32602, refused))
        }
        "cancelAction" => match params.get("traceId").and_then(Value::as_str) {
            Some(trace_id) if api.cancel(trace_id) => Ok(json!({"message": server::CANCELLED})),
            Some(_) => Err((-32000, server::NOT_RUNNING.to_owned())),
            None => Err((-32602, "`traceId` is required".to_owned())),
        },
        "runAction" => match serde_json::from_value::<RunParams>(params) {
            Ok(params) => {
                let request = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
                let queue = params.stream_input.then(|| {
                    let (sender, queue) = mpsc::unbounded_channel();
                    inputs.insert(request.clone(), sender);
                    queue
                });
                let run = Run {
                    api: Arc::clone(api),
                    id,
                    request,
                    out: out.clone(),
                };
                runs.spawn(run.go(params, queue));
                return Ok(None);
            }
            Err(refused) => Err((-32602, format!("not a run: {}", cap(&refused.to_string())))),
        },
        other => Err((-32601, format!("method not found: `{}`", cap(other)))),
    };
    Ok(Some(match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => error(&id, code, &message),
    }))
}

/// The answer to `register`: the telemetry server it names is where spans go.
///
/// # Errors
///
/// The tools refused the runtime.
fn registered(api: &Api, answer: &Value) -> io::Result<()> {
    if let Some(refused) = answer.get("error") {
        let message = refused.get("message").and_then(Value::as_str).unwrap_or("");
        return Err(io::Error::other(format!(
            "Genkit's tools refused to register this runtime: {}",
            cap(message)
        )));
    }
    if let Some(url) = answer["result"]["telemetryServerUrl"].as_str() {
        // A URL the tools get wrong leaves spans unsent; the runs go on.
        let _ = api.telemetry.notify(url);
    }
    Ok(())
}

/// A notification of the tools: an input of a run, the end of a run's inputs, where to send
/// spans. Others are not this runtime's business.
fn notified(api: &Api, method: &str, params: &Value, inputs: &mut Inputs) {
    let request = match &params["requestId"] {
        Value::String(id) => id.clone(),
        other => other.to_string(),
    };
    match method {
        "sendInputStreamChunk" => {
            let chunk = params.get("chunk").cloned().unwrap_or(Value::Null);
            if let Some(queue) = inputs.get(&request)
                && queue.send(chunk).is_err()
            {
                inputs.remove(&request);
            }
        }
        "endInputStream" => {
            inputs.remove(&request);
        }
        "configure" => {
            if let Some(url) = params.get("telemetryServerUrl").and_then(Value::as_str) {
                let _ = api.telemetry.notify(url);
            }
        }
        _ => {}
    }
}

/// The registry's descriptors, each init schema also in its metadata (the tools keep
/// `metadata` and strip `initSchema`).
fn actions(api: &Api) -> serde_json::Map<String, Value> {
    let mut actions = api.actions();
    for desc in actions.values_mut() {
        if let Some(init) = desc.get("initSchema").cloned()
            && let Some(metadata) = desc.get_mut("metadata").and_then(Value::as_object_mut)
        {
            metadata.insert("initSchema".to_owned(), init);
        }
    }
    actions
}

/// A JSON-RPC error answering `id`.
fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// `runAction`'s params.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunParams {
    key: String,
    /// The first input; absent is `null`.
    #[serde(default)]
    input: Value,
    #[serde(default)]
    init: Option<Value>,
    /// Whether the chunks are wanted.
    #[serde(default)]
    stream: bool,
    /// Whether inputs follow as `sendInputStreamChunk`.
    #[serde(default)]
    stream_input: bool,
    // `context`, `telemetryLabels` and the tools' `runtimeId` mean nothing to a bidi action.
}

/// One run of `runAction`.
struct Run {
    api: Arc<Api>,
    /// The request's id, as the tools sent it.
    id: Value,
    /// The request's id as the inputs name it.
    request: String,
    out: mpsc::Sender<Out>,
}

impl Run {
    /// Runs the action, and answers.
    async fn go(self, params: RunParams, queue: Option<mpsc::UnboundedReceiver<Value>>) {
        let answer = match server::open(&self.api.registry, &params.key, params.init.clone()) {
            Ok(conn) => self.exchange(conn, params, queue).await,
            Err(Refused::NotFound(message)) => Err((5, message, None)),
            Err(Refused::Failed(code, message)) => Err((code, message, None)),
        };
        let answer = match answer {
            Ok((result, trace_id)) => json!({
                "jsonrpc": "2.0",
                "id": self.id,
                "result": {"result": result, "telemetry": {"traceId": trace_id}},
            }),
            Err((code, message, trace_id)) => json!({
                "jsonrpc": "2.0",
                "id": self.id,
                "error": {
                    "code": -32000,
                    "message": message,
                    "data": server::error_body(code, &message, trace_id.as_deref())["error"],
                },
            }),
        };
        let _ = self.out.send(Out::Frame(answer.to_string())).await;
        let _ = self.out.send(Out::Done(self.request)).await;
    }

    /// Sends the inputs and streams the chunks of `conn`: its output and trace, or the gRPC
    /// code and message of its failure.
    async fn exchange(
        &self,
        conn: bidi_flow::JsonConnection,
        params: RunParams,
        queue: Option<mpsc::UnboundedReceiver<Value>>,
    ) -> Result<(Value, String), (u16, String, Option<String>)> {
        let ids = Ids::of(&conn);
        let state = json!({"requestId": self.request, "state": {"traceId": ids.trace}});
        notify(&self.out, "runActionState", &state).await;
        if conn.span_context().is_some() && !params.input.is_null() {
            self.api.telemetry.input(&ids.span, &params.input);
        }
        let (input, mut output) = conn.into_split();
        let guard = CancelOnDrop(Some(input.clone()));
        let _running = Running::start(&self.api, &ids.trace, &input);
        let first = (!params.stream_input || !params.input.is_null()).then_some(params.input);
        let mut refused = None;
        let request = &self.request;
        let out = &self.out;
        let read = async move {
            loop {
                let mut responses = output.responses();
                while let Some(chunk) = responses.next().await {
                    match chunk {
                        Ok(chunk) if params.stream => {
                            let chunk = json!({"requestId": request, "chunk": chunk});
                            notify(out, "streamChunk", &chunk).await;
                        }
                        Ok(_) => {}
                        Err(error) => return Err(error),
                    }
                }
                if !responses.turn_ended() {
                    break;
                }
            }
            output.output().await
        };
        let ended = {
            let mut feed = std::pin::pin!(feed(&input, first, queue, &mut refused));
            let mut read = std::pin::pin!(read);
            let mut fed = false;
            loop {
                tokio::select! {
                    ended = &mut read => break ended,
                    () = &mut feed, if !fed => fed = true,
                }
            }
        };
        guard.disarm();
        let trace = Some(ids.trace.clone());
        match (ended, refused) {
            (_, Some(error)) | (Err(error), None) => {
                let (code, message) = server::status(&error);
                Err((code, message, trace))
            }
            (Ok(result), None) => Ok((result, ids.trace)),
        }
    }
}

/// Sends a notification of `method` to the tools, waiting while the socket is behind; the
/// socket gone, nobody reads it.
async fn notify(out: &mpsc::Sender<Out>, method: &str, params: &Value) {
    let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
    let _ = out.send(Out::Frame(message.to_string())).await;
}

/// Sends `first`, then what `queue` brings, to `input`, and closes it. An input the action
/// refuses cancels the run, kept in `refused` for its answer.
async fn feed(
    input: &JsonSendHalf,
    first: Option<Value>,
    queue: Option<mpsc::UnboundedReceiver<Value>>,
    refused: &mut Option<JsonError>,
) {
    let mut queue = queue;
    let mut next = first;
    loop {
        let Some(value) = next.take() else {
            match queue.as_mut() {
                Some(queue) => match queue.recv().await {
                    Some(value) => next = Some(value),
                    None => break,
                },
                None => break,
            }
            continue;
        };
        match input.send(value).await {
            Ok(()) => {}
            Err(error @ JsonError::InvalidInput { .. }) => {
                input.cancel_with("an input was refused");
                *refused = Some(error);
                return;
            }
            // The action ended without it: its end says how.
            Err(_) => return,
        }
    }
    input.close();
}
