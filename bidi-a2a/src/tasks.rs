//! The methods on a task (`GetTask`, `CancelTask`, `SubscribeToTask`) and the task a message
//! goes on with: a task is read from the store, as the snapshot of its turn, in the caller's
//! scope; a running one's stream from the tee that keeps it.
//!
//! Streamed and `returnImmediately` tasks run through `bidi_http::turns` (the neutral home of
//! streamed turns, which Genkit's agent wire uses too) under a `TurnKey` (scope, agent, task
//! id) in A2A's own `Tees`, within the server's one budget, so they run on without their
//! client. `SubscribeToTask` attaches to one, or follows it from the store's `Streams` on
//! another process; the records it replays were written for another request, so `reframe`
//! gives them the subscriber's JSON-RPC id (rewriting what precedes each `,"result":`).
//! `CancelTask` is the store's abort (`turns::abort`), so it reaches the turn in any process.
//! A blocking `SendMessage` writes to its body's channel and is cancelled when its client
//! goes away.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::response::Response;
use bidi_agent::AgentInit;
use bidi_flow::text::cap;
use bidi_llm::{LlmSession, Message as LlmMessage, Status, ToolCall};
use bidi_session::{Scoped, SessionStore as _, Status as Snapshot};
use futures_util::StreamExt as _;
use serde_json::Value;

use super::error::{TASK_NOT_CANCELABLE, UNSUPPORTED};
use super::task::{self, Pending};
use super::types::{Event, GetParams, Ids, Response as Rpc, RpcError, Task, TaskParams, TaskState};
use super::{Call, json_response, params};
use bidi_http::agent;
use bidi_http::tee::relay;
use bidi_http::tee::{Attached, RESUME_BYTES};
use bidi_http::turns::TurnKey;

/// A task as the store has it, with the calls its session waits for.
pub(super) struct Stored {
    pub(super) task: Task,
    pub(super) calls: Vec<ToolCall>,
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
    let Some(snapshot) = store.load_snapshot(id).await.map_err(|e| failed(&e))? else {
        return Ok(None);
    };
    let state: LlmSession = serde_json::from_value(snapshot.state)
        .map_err(|_| RpcError::internal("the task's session cannot be read by this agent"))?;
    let entry = snapshot.entry;
    let ids = Ids {
        task: entry.id.clone(),
        context: entry.session_id.clone(),
    };
    let message = |error: Option<&Value>| {
        let message = error.and_then(|error| error.get("message"));
        message.and_then(Value::as_str).map(str::to_owned)
    };
    let (state_now, error) = match (entry.status, state.status) {
        (Snapshot::Pending, _) => (TaskState::Working, None),
        (Snapshot::Aborted, _) => (TaskState::Canceled, None),
        (Snapshot::Failed, _) => (TaskState::Failed, message(entry.error.as_ref())),
        (Snapshot::Expired, _) => (
            TaskState::Failed,
            Some("the task stopped: the process running it went away".to_owned()),
        ),
        (_, Status::AwaitingToolExecution) => (TaskState::InputRequired, None),
        (_, Status::Error) => (TaskState::Failed, last_error(&state.messages)),
        _ => (TaskState::Completed, None),
    };
    // A pending snapshot's state is its parent's: its turn has added nothing yet.
    let parent = entry
        .parent_id
        .as_deref()
        .filter(|_| state_now != TaskState::Working);
    let first = match parent {
        Some(parent) => store
            .load_snapshot(parent)
            .await
            .map_err(|e| failed(&e))?
            .and_then(|parent| {
                parent
                    .state
                    .get("messages")
                    .and_then(Value::as_array)
                    .map(Vec::len)
            })
            .unwrap_or(0),
        None if state_now == TaskState::Working => state.messages.len(),
        None => 0,
    };
    let turn = state.messages.get(first..).unwrap_or_default();
    let pending = Pending::of(&state.pending_tool_calls, locals);
    let status = task::status(
        &ids,
        state_now,
        error.as_deref(),
        &pending,
        entry.updated_at,
    );
    let task = task::task(&ids, status, turn, &state.messages, locals, limit);
    Ok(Some(Stored {
        task,
        calls: state.pending_tool_calls,
    }))
}

/// The error of the session's last failed model call.
fn last_error(messages: &[LlmMessage]) -> Option<String> {
    messages.iter().rev().find_map(|message| match message {
        LlmMessage::Error(failed) => Some(failed.error.clone()),
        _ => None,
    })
}

/// `GetTask`: the task.
pub(super) async fn get(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    call.keeps_sessions("`GetTask`")?;
    let GetParams { id, history_length } = self::params(params)?;
    let store = agent::sessions_of(call.agent, call.identity);
    let stored = load(&store, &id, &call.locals(), history_length).await?;
    let stored = stored.ok_or_else(|| RpcError::task_not_found(&id))?;
    Ok(json_response(Rpc::result(&call.id, stored.task).to_vec()))
}

/// `CancelTask`: aborts the running task, in whichever process runs it, and answers it
/// canceled; its turn stops at its next lease renewal.
pub(super) async fn cancel(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    call.keeps_sessions("`CancelTask`")?;
    let TaskParams { id } = self::params(params)?;
    let store = agent::sessions_of(call.agent, call.identity);
    let had = bidi_http::turns::abort(&store, &id).await;
    match had.map_err(|failure| RpcError::internal(failure.message))? {
        None => Err(RpcError::task_not_found(&id)),
        Some(Snapshot::Pending) => {
            let stored = load(&store, &id, &call.locals(), None).await?;
            let stored = stored.ok_or_else(|| RpcError::task_not_found(&id))?;
            Ok(json_response(Rpc::result(&call.id, stored.task).to_vec()))
        }
        Some(_) => Err(RpcError::new(
            TASK_NOT_CANCELABLE,
            format!(
                "task `{}` is not running (it is over, canceled already, or waits for input): \
                 there is nothing to cancel",
                cap(&id)
            ),
        )),
    }
}

/// `SubscribeToTask`: a running task's stream from its first event, from this process or
/// another one sharing the store; the current state of a task that waits for input.
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
            return Ok(bidi_http::sse::response(reframe(body, &call.id)));
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
    let entry = store.entry(&id).await.map_err(|e| failed(&e))?;
    if entry.is_some_and(|entry| entry.status == Snapshot::Pending) {
        // Another process sharing the store may be streaming it.
        let followed = relay::follow(&store, &id).await.map_err(|e| failed(&e))?;
        if let Some(body) = followed {
            return Ok(bidi_http::sse::response(reframe(body, &call.id)));
        }
    }
    let stored = load(&store, &id, &call.locals(), None).await?;
    let task = stored.ok_or_else(|| RpcError::task_not_found(&id))?.task;
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
            bidi_http::sse::data(&mut record, &Rpc::result(&call.id, Event::Task(task)));
            Ok(bidi_http::sse::response(Body::from(record)))
        }
    }
}

/// The session a message on task `id` (of `context`, if the client says) goes on with, and
/// the calls it answers: the task must wait for input.
///
/// # Errors
///
/// No such task (-32001), one of another context (-32602), or one that does not wait for
/// input (-32004).
pub(super) async fn waiting(
    call: &Call<'_>,
    id: &str,
    context: Option<&str>,
) -> Result<(AgentInit<LlmSession>, Vec<ToolCall>), RpcError> {
    let store = agent::sessions_of(call.agent, call.identity);
    let stored = load(&store, id, &[], Some(0)).await?;
    let Stored { task, calls } = stored.ok_or_else(|| RpcError::task_not_found(id))?;
    if context.is_some_and(|context| context != task.context_id) {
        return Err(RpcError::invalid_params(
            "/params/message/contextId",
            format!("task `{}` is not of this context", cap(id)),
        ));
    }
    match task.status.state {
        TaskState::InputRequired => {
            let init = AgentInit::new().session_id(task.context_id).snapshot(id);
            Ok((init, calls))
        }
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

/// A stream of records written for another request, as the records of request `id`: each
/// record's JSON-RPC id replaced by `id`.
fn reframe(body: Body, id: &Value) -> Body {
    let mut head = b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec();
    // A JSON value always serializes.
    let _ = serde_json::to_writer(&mut head, id);
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
                let out = rewrite(&pending, &head);
                return Some((Ok::<_, Infallible>(Bytes::from(out)), (chunks, rest, head)));
            }
        },
    );
    Body::from_stream(rewritten)
}

/// Records (`data: {"jsonrpc":"2.0","id":..,"result":..}\n\n` each) with `head` (the data
/// up to the new id) in place of what precedes each `,"result":`: a JSON id, string or
/// number, never holds `,"` unescaped.
fn rewrite(records: &[u8], head: &[u8]) -> Vec<u8> {
    const RESULT: &[u8] = b",\"result\":";
    let mut out = Vec::with_capacity(records.len() + 64);
    let mut rest = records;
    while let Some(end) = find(rest, b"\n\n") {
        let record = &rest[..end];
        match find(record, RESULT) {
            Some(at) => bidi_http::sse::text(&mut out, &[head, &record[at..]]),
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
        let body = reframe(Body::from_stream(chunks), &json!("sub-1"));
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
