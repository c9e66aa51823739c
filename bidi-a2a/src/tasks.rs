//! The methods on a task (`GetTask`, `CancelTask`, `SubscribeToTask`) and the task a message
//! goes on with: a task is read from the store, as its turns (`lineage`), in the caller's
//! scope; a running one's stream from the tee that keeps it.
//!
//! Streamed and `returnImmediately` turns run through `bidi_http::turns` (the neutral home of
//! streamed turns, which Genkit's agent wire uses too) under a `TurnKey` (scope, agent, task
//! id: a turn that continues a task is keyed by the task's id, not its own snapshot's) in
//! A2A's own `Tees`, within the server's one budget, so they run on without their client.
//! `SubscribeToTask` attaches to the task's running turn, or follows it from the store's
//! `Streams` on another process (under the turn's own snapshot id, found from the task's
//! lineage); the records it replays were written for another request, so `reframe` gives them
//! the subscriber's JSON-RPC id (rewriting what precedes each `,"result":`). `CancelTask` of a
//! running task is the store's abort of its running turn (`turns::abort`), so it reaches the
//! turn in any process; of a task that waits for input, the marker `lineage` writes. A
//! blocking `SendMessage` writes to its body's channel and is cancelled when its client goes
//! away.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::response::Response;
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::TurnState;
use bidi_session::{Scoped, Status as Snapshot};
use futures_util::StreamExt as _;
use serde_json::Value;

use super::binding::Binding;
use super::error::{TASK_NOT_CANCELABLE, UNSUPPORTED};
use super::lineage::{self, Lineage};
use super::task;
use super::types::{Event, GetParams, Ids, RpcError, Task, TaskParams, TaskState};
use super::wire::Continued;
use super::{Call, Opened, params};
use bidi_http::agent;
use bidi_http::tee::relay;
use bidi_http::tee::{Attached, RESUME_BYTES};
use bidi_http::turns::TurnKey;

/// A task as the store has it, with its turns.
pub(super) struct Stored {
    pub(super) task: Task,
    pub(super) lineage: Lineage,
}

fn failed(error: &bidi_session::StoreError) -> RpcError {
    RpcError::internal(agent::store_failed(error).message)
}

/// A state's name, for a message.
fn named(state: TaskState) -> &'static str {
    match state {
        TaskState::Submitted => "submitted",
        TaskState::Working => "working",
        TaskState::Completed => "completed",
        TaskState::Failed => "failed",
        TaskState::Canceled => "canceled",
        TaskState::InputRequired => "input-required",
    }
}

/// Task `id` of `store` (an agent's sessions, as the caller sees them), its history the last
/// `limit` messages; `None` if there is no such task.
///
/// # Errors
///
/// The store's, or a session the agent cannot read.
pub(super) async fn load(
    store: &Scoped,
    id: &str,
    locals: &[String],
    limit: Option<u32>,
) -> Result<Option<Stored>, RpcError> {
    let Some(lineage) = lineage::resolve(store, id).await? else {
        return Ok(None);
    };
    let task = view(&lineage, locals, limit);
    Ok(Some(Stored { task, lineage }))
}

/// The task whose turns are `lineage`: where its latest turn stands, the answers of all its
/// turns, the conversation.
pub(super) fn view(lineage: &Lineage, locals: &[String], limit: Option<u32>) -> Task {
    let entry = &lineage.latest;
    let state = &lineage.state;
    let ids = Ids {
        task: lineage.task.clone(),
        context: entry.session_id.clone(),
    };
    let is_local = |name: &str| locals.iter().any(|local| local == name);
    let turn = TurnState::stored(entry.status, entry.error.as_ref(), state, is_local);
    let turns = state.messages.get(lineage.before..).unwrap_or_default();
    let status = task::status(&ids, &turn, entry.updated_at);
    task::task(&ids, status, turns, &state.messages, locals, limit)
}

/// `GetTask`: the task.
pub(super) async fn get(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    call.keeps_sessions("`GetTask`")?;
    let GetParams { id, history_length } = self::params(params)?;
    let store = agent::sessions_of(call.agent, call.identity);
    let stored = load(&store, &id, &call.locals(), history_length).await?;
    let stored = stored.ok_or_else(|| RpcError::task_not_found(&id))?;
    Ok(call.binding.answer(&stored.task))
}

/// `CancelTask`: cancels a task that runs (aborts its running turn, in whichever process runs
/// it; the turn stops at its next lease renewal) or waits for input (records its cancel), and
/// answers it canceled.
pub(super) async fn cancel(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    call.keeps_sessions("`CancelTask`")?;
    let TaskParams { id } = self::params(params)?;
    let store = agent::sessions_of(call.agent, call.identity);
    let locals = call.locals();
    // A turn that ends, or a message that answers the task, between the read and the cancel:
    // read it again.
    for _ in 0..3 {
        let lineage = lineage::resolve(&store, &id).await?;
        let lineage = lineage.ok_or_else(|| RpcError::task_not_found(&id))?;
        let canceled = if lineage.latest.status == Snapshot::Pending {
            let had = bidi_http::turns::abort(&store, &lineage.latest.id).await;
            had.map_err(|failure| RpcError::internal(failure.message))? == Some(Snapshot::Pending)
        } else if lineage.waits() {
            lineage::cancel_waiting(&store, &lineage).await?
        } else {
            let state = view(&lineage, &locals, Some(0)).status.state;
            return Err(RpcError::new(
                TASK_NOT_CANCELABLE,
                format!(
                    "task `{}` is {}: there is nothing to cancel",
                    cap(&id),
                    named(state)
                ),
            ));
        };
        if canceled {
            let stored = load(&store, &id, &locals, None).await?;
            let stored = stored.ok_or_else(|| RpcError::task_not_found(&id))?;
            // A running turn tells the webhooks itself, as it ends.
            if lineage.latest.status != Snapshot::Pending {
                super::push::notify(call, &stored.task);
            }
            return Ok(call.binding.answer(&stored.task));
        }
    }
    Err(RpcError::internal(format!(
        "task `{}` kept changing while it was canceled: try again",
        cap(&id)
    )))
}

/// `SubscribeToTask`: the stream of a task's running turn from its first event, from this
/// process or another one sharing the store; the current state of a task that waits for
/// input.
pub(super) async fn subscribe(
    call: &Call<'_>,
    params: Option<Value>,
) -> Result<Response, RpcError> {
    call.keeps_sessions("`SubscribeToTask`")?;
    let TaskParams { id } = self::params(params)?;
    match call
        .streams
        .attach(&TurnKey::new(call.identity, call.name, &id))
    {
        Attached::Reader(written, reader) => {
            let body = Attached::body(written, reader);
            return Ok(bidi_http::sse::response(reframe(body, &call.binding)));
        }
        Attached::TooLong => {
            return Err(RpcError::new(
                UNSUPPORTED,
                format!(
                    "task `{}` streamed over the {} MiB kept for subscribers: read it with \
                     `GetTask`",
                    cap(&id),
                    RESUME_BYTES >> 20
                ),
            ));
        }
        Attached::Nothing => {}
    }
    let store = agent::sessions_of(call.agent, call.identity);
    let stored = load(&store, &id, &call.locals(), None).await?;
    let Stored { task, lineage } = stored.ok_or_else(|| RpcError::task_not_found(&id))?;
    if lineage.latest.status == Snapshot::Pending {
        // Another process sharing the store may be streaming its running turn.
        let followed = relay::follow(&store, &lineage.latest.id).await;
        if let Some(body) = followed.map_err(|e| failed(&e))? {
            return Ok(bidi_http::sse::response(reframe(body, &call.binding)));
        }
    }
    match task.status.state {
        state @ (TaskState::Completed | TaskState::Failed | TaskState::Canceled) => {
            Err(RpcError::new(
                UNSUPPORTED,
                format!(
                    "task `{}` is {}: it streams nothing more; read it with `GetTask`",
                    cap(&id),
                    named(state)
                ),
            ))
        }
        _ => {
            let mut record = Vec::new();
            call.binding.record(&Event::Task(task), &mut record);
            Ok(bidi_http::sse::response(Body::from(record)))
        }
    }
}

/// The session a message on task `id` (of `context`, if the client says) goes on with: the
/// task must wait for input.
///
/// # Errors
///
/// No such task (-32001), one of another context (-32602), or one that does not wait for
/// input (-32004).
pub(super) async fn waiting(
    call: &Call<'_>,
    id: &str,
    context: Option<&str>,
) -> Result<Opened, RpcError> {
    let store = agent::sessions_of(call.agent, call.identity);
    let stored = load(&store, id, &[], Some(0)).await?;
    let Stored { task, lineage } = stored.ok_or_else(|| RpcError::task_not_found(id))?;
    if context.is_some_and(|context| context != task.context_id) {
        return Err(RpcError::invalid_params(
            "/params/message/contextId",
            format!("task `{}` is not of this context", cap(id)),
        ));
    }
    match task.status.state {
        TaskState::InputRequired => Ok(continuation(lineage)),
        TaskState::Working => Err(RpcError::new(
            UNSUPPORTED,
            format!(
                "task `{}` is still running: send the message once it waits for input, or \
                 cancel it",
                cap(id)
            ),
        )),
        state => Err(RpcError::new(
            UNSUPPORTED,
            format!(
                "task `{}` is {}: it takes no more messages; send the next one in its context, \
                 without a `taskId`",
                cap(id),
                named(state)
            ),
        )),
    }
}

/// The session a message on task `lineage`, which waits for input, goes on with: from its
/// latest turn, whose calls the message answers (or sets aside), under the task's id.
pub(super) fn continuation(lineage: Lineage) -> Opened {
    let session = lineage.latest.session_id.clone();
    // From the head, as a turn that must follow it: two answers at once cannot both run.
    let init = if lineage.head {
        AgentInit::new().resume(session)
    } else {
        AgentInit::new()
            .session_id(session)
            .snapshot(lineage.latest.id.clone())
    };
    let turns = lineage.state.messages.get(lineage.before..);
    let continues = Continued {
        task: lineage.task,
        before: lineage.before,
        answers: task::artifacts(turns.unwrap_or_default()).len(),
    };
    Opened {
        init,
        state: Some(lineage.state),
        continues: Some(continues),
    }
}

/// A stream of records written for another request, of either binding, as the records of
/// `binding`'s: each event in a JSON-RPC response under this request's id, or bare.
fn reframe(body: Body, binding: &Binding) -> Body {
    let head = match binding {
        Binding::JsonRpc(id) => {
            let mut head = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
            // A JSON value always serializes.
            let _ = serde_json::to_writer(&mut head, id);
            Some(head)
        }
        Binding::Rest => None,
    };
    let chunks = body.into_data_stream();
    let rewritten = futures_util::stream::unfold(
        (chunks, Vec::new(), head),
        |(mut chunks, mut pending, head)| async move {
            loop {
                let chunk = chunks.next().await?.ok()?;
                pending.extend_from_slice(&chunk);
                // Whole records only: what follows the last one waits for the next chunk.
                let Some(end) = rfind(&pending, b"\n\n") else {
                    continue;
                };
                let rest = pending.split_off(end + 2);
                let out = rewrite(&pending, head.as_deref());
                return Some((Ok::<_, Infallible>(Bytes::from(out)), (chunks, rest, head)));
            }
        },
    );
    Body::from_stream(rewritten)
}

/// Records whose data is a stream event, bare or in a JSON-RPC response
/// (`{"jsonrpc":"2.0","id":..,"result":..}`), with each event in a response under `head`
/// (the data up to the new id), or bare (`None`). A JSON id, string or number, never holds
/// `,"result":` unescaped, so the first one ends the envelope's head.
fn rewrite(records: &[u8], head: Option<&[u8]>) -> Vec<u8> {
    const RESULT: &[u8] = b",\"result\":";
    let mut out = Vec::with_capacity(records.len() + 64);
    let mut rest = records;
    while let Some(end) = find(rest, b"\n\n") {
        let record = &rest[..end];
        match record.strip_prefix(b"data: ") {
            Some(data) => {
                let event = match find(data, RESULT) {
                    Some(at) if data.starts_with(b"{\"jsonrpc\"") => {
                        &data[at + RESULT.len()..data.len() - 1]
                    }
                    _ => data,
                };
                match head {
                    Some(head) => bidi_http::sse::text(&mut out, &[head, RESULT, event, b"}"]),
                    None => bidi_http::sse::text(&mut out, &[event]),
                }
            }
            None => {
                out.extend_from_slice(record);
                out.extend_from_slice(b"\n\n");
            }
        }
        rest = &rest[end + 2..];
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|window| window == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .rposition(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn reframed(records: &str, binding: &Binding) -> String {
        let chunks =
            futures_util::stream::iter([Ok::<_, Infallible>(Bytes::from(records.to_owned()))]);
        let body = reframe(Body::from_stream(chunks), binding);
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_stream_of_one_binding_is_read_in_the_other() {
        let enveloped =
            "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"task\":{\"id\":\"t\"}}}\n\n";
        let bare = "data: {\"task\":{\"id\":\"t\"}}\n\n";
        assert_eq!(reframed(enveloped, &Binding::Rest).await, bare);
        assert_eq!(
            reframed(bare, &Binding::JsonRpc(json!("s"))).await,
            "data: {\"jsonrpc\":\"2.0\",\"id\":\"s\",\"result\":{\"task\":{\"id\":\"t\"}}}\n\n"
        );
        assert_eq!(reframed(bare, &Binding::Rest).await, bare);
    }

    #[tokio::test]
    async fn a_stream_again_carries_the_subscriber_s_id() {
        let record = |id: &str, n: u32| {
            format!("data: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"n\":{n}}}}}\n\n")
        };
        // A record split across chunks, two in one chunk, a string id with `,"` escaped.
        let tricky = r#""a\",\"result\":""#;
        let all = format!("{}{}{}", record("7", 1), record(tricky, 2), record("7", 3));
        let (one, two) = all.split_at(20);
        let chunks = futures_util::stream::iter([
            Ok::<_, Infallible>(Bytes::from(one.to_owned())),
            Ok(Bytes::from(two.to_owned())),
        ]);
        let body = reframe(Body::from_stream(chunks), &Binding::JsonRpc(json!("sub-1")));
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let records: Vec<Value> = text
            .split("\n\n")
            .filter(|record| !record.is_empty())
            .map(|record| serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(records.len(), 3, "{text}");
        for (n, record) in records.iter().enumerate() {
            assert_eq!(record["id"], "sub-1");
            assert_eq!(record["result"]["n"], n + 1);
        }
    }
}
