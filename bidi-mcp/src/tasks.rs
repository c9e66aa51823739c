//! MCP tasks (the tasks extension, `io.modelcontextprotocol/tasks`): a call that outlives its
//! request runs as a task its client polls.
//!
//! A tool's [`TaskSupport`] says whether its calls may run so: an agent's may by default (a
//! turn detaches from whoever started it), a flow's not unless the server says so. A call of a
//! tool that supports tasks, from a client that declared the extension (at `initialize` or in
//! the request's `_meta`), is answered at once with the task (`resultType: "task"`, its
//! `taskId`); the call runs in a task of its own, and:
//!
//! - `tasks/get` answers its status (`working`, `input_required`, `completed`, `failed`,
//!   `cancelled`), with the tool's result inlined once completed (a tool that fails is a
//!   completed task whose result has `isError`), the JSON-RPC error once failed (arguments the
//!   tool refuses, `-32602`), and the questions it waits on while `input_required`;
//! - a call that asks is `input_required`, its questions in `inputRequests` as
//!   `elicitation/create` requests: an agent's turn that stops for calls waiting for approval
//!   asks one per call (the form of the crate's approvals), a flow what it asks with
//!   `bidi_flow::ask`; `tasks/update` answers them by their keys, in one update or several (an
//!   answer under any other key changes nothing), and the call goes on once each of its
//!   questions is answered;
//! - `tasks/cancel` cancels the call as MCP's `notifications/cancelled` cancels a request (an
//!   agent's turn is aborted); the task is `cancelled` from then on.
//!
//! A task belongs to the identity whose request created it: to any other it does not exist
//! (`-32602`, as an id the server never gave). It is kept for [`DEFAULT_TASK_RETENTION`]
//! after its client last heard of it (a `tasks/get` or `tasks/update`) or it last changed,
//! whichever is later; `ttlMs` says until when, from its creation. A task forgotten so while
//! still running is cancelled. A server keeps at most [`DEFAULT_MAX_TASKS`]: past them, a call
//! that may run either way runs in its request, and one that needs a task is refused
//! (`-32000`). Tasks live in the server's memory, across its sessions: a client may poll from
//! a session other than the one that called.
//!
//! A client that did not declare the extension calls as before: in its request, or, for a
//! tool that needs a task, `-32021` (missing required client capability) naming the extension.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use bidi_flow::text::cap;
use bidi_flow::time::rfc3339;
use bidi_http::Identity;
use rmcp::model::{
    CallToolResult, ClientCapabilities, CreateTaskResult, DetailedTask, ErrorCode, ErrorData,
    GetTaskResult, InputRequest, InputRequests, InputResponses, JsonObject, Task as Handle,
    TaskPayload,
};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a task is kept after its client last heard of it or it last changed, unless told
/// otherwise ([`McpServer::task_retention`](super::McpServer::task_retention)): one hour.
pub const DEFAULT_TASK_RETENTION: Duration = Duration::from_secs(60 * 60);

/// How many tasks a server keeps at once, unless told otherwise
/// ([`McpServer::max_tasks`](super::McpServer::max_tasks)).
pub const DEFAULT_MAX_TASKS: usize = 10_000;

/// How often a client is asked to poll a task, in milliseconds.
const POLL_INTERVAL_MS: u64 = 500;

/// Whether a tool's calls may run as MCP tasks
/// ([`McpServer::task_support`](super::McpServer::task_support)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// Each call runs in its request (a flow's default).
    Forbidden,
    /// A call runs as a task when its client declared the tasks extension, else in its
    /// request (an agent's default).
    Optional,
    /// A call runs as a task: a client that did not declare the tasks extension is refused
    /// (`-32021`).
    Required,
}

/// The tasks of a server, shared by its sessions.
pub(super) struct Tasks {
    table: Mutex<HashMap<String, Arc<Task>>>,
    limits: Mutex<Limits>,
}

/// How many tasks a server keeps, and for how long.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max: usize,
    pub(super) retention: Duration,
}

impl Default for Tasks {
    fn default() -> Self {
        Self {
            table: Mutex::default(),
            limits: Mutex::new(Limits {
                max: DEFAULT_MAX_TASKS,
                retention: DEFAULT_TASK_RETENTION,
            }),
        }
    }
}

/// One call run as a task.
pub(super) struct Task {
    id: String,
    owner: Option<Identity>,
    created: SystemTime,
    retention: Duration,
    state: Mutex<State>,
    /// Cancels the call.
    cancel: CancellationToken,
    /// Wakes the call when its questions are answered.
    answered: Notify,
}

/// Where a task stands.
struct State {
    payload: TaskPayload,
    /// When it last changed.
    changed: SystemTime,
    /// When its client last heard of it.
    heard: SystemTime,
    /// Its questions: those asked and not answered yet, and the answers not taken yet.
    asked: InputRequests,
    answers: InputResponses,
    /// How many questions it has asked.
    questions: u64,
}

/// `-32602`: no task `id` of the caller's.
fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no task `{}`: tasks are kept for a while after they end",
            cap(id)
        ),
        Some(json!({ "taskId": cap(id) })),
    )
}

/// Whether a request's client declared the tasks extension.
pub(super) fn declared(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities.is_some_and(ClientCapabilities::supports_tasks)
}

/// `-32021`: the call needs a task, and its client did not declare the tasks extension.
pub(super) fn required() -> ErrorData {
    ErrorData::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tasks {
    pub(super) fn limits(&self) -> Limits {
        *lock(&self.limits)
    }

    pub(super) fn set_limits(&self, limits: Limits) {
        *lock(&self.limits) = limits;
    }

    /// A new task of `owner`'s, working; none when the server keeps as many as it may.
    pub(super) fn create(&self, owner: Option<Identity>) -> Option<Arc<Task>> {
        let Limits { max, retention } = *lock(&self.limits);
        let now = SystemTime::now();
        let mut table = lock(&self.table);
        table.retain(|_, task| !task.forget_if_stale(now));
        if table.len() >= max {
            return None;
        }
        let task = Arc::new(Task {
            id: uuid::Uuid::new_v4().to_string(),
            owner,
            created: now,
            retention,
            state: Mutex::new(State {
                payload: TaskPayload::Working,
                changed: now,
                heard: now,
                asked: InputRequests::new(),
                answers: InputResponses::new(),
                questions: 0,
            }),
            cancel: CancellationToken::new(),
            answered: Notify::new(),
        });
        table.insert(task.id.clone(), Arc::clone(&task));
        Some(task)
    }

    /// The task `id` of `caller`'s, heard of now.
    fn find(&self, id: &str, caller: Option<&Identity>) -> Result<Arc<Task>, ErrorData> {
        let task = lock(&self.table)
            .get(id)
            .filter(|task| task.owner.as_ref() == caller)
            .cloned()
            .ok_or_else(|| unknown(id))?;
        lock(&task.state).heard = SystemTime::now();
        Ok(task)
    }

    /// `tasks/get`: where the task stands.
    ///
    /// # Errors
    ///
    /// No task `id` of the caller's, as `-32602`.
    pub(super) fn get(
        &self,
        id: &str,
        caller: Option<&Identity>,
    ) -> Result<GetTaskResult, ErrorData> {
        let task = self.find(id, caller)?;
        let detailed = task.detailed();
        Ok(GetTaskResult::new(detailed))
    }

    /// `tasks/update`: answers to the task's questions, by their keys.
    ///
    /// # Errors
    ///
    /// No task `id` of the caller's, as `-32602`.
    pub(super) fn update(
        &self,
        id: &str,
        caller: Option<&Identity>,
        answers: InputResponses,
    ) -> Result<(), ErrorData> {
        self.find(id, caller)?.answer(answers);
        Ok(())
    }

    /// `tasks/cancel`: cancels the task, if it has not ended.
    ///
    /// # Errors
    ///
    /// No task `id` of the caller's, as `-32602`.
    pub(super) fn cancel(&self, id: &str, caller: Option<&Identity>) -> Result<(), ErrorData> {
        self.find(id, caller)?.end(TaskPayload::Cancelled);
        Ok(())
    }
}

impl Task {
    /// The handle the creating call answers.
    pub(super) fn created(&self) -> CreateTaskResult {
        CreateTaskResult::new(self.handle(&lock(&self.state)))
    }

    /// Cancelled when the task is.
    pub(super) fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// The task's base fields as they are now.
    fn handle(&self, state: &State) -> Handle {
        // Kept until `retention` after the later of its last change and its last hearing.
        let last = state.changed.max(state.heard);
        let lived = last.duration_since(self.created).unwrap_or_default();
        let ttl = u64::try_from((lived + self.retention).as_millis()).unwrap_or(u64::MAX);
        let mut handle = Handle::new(
            self.id.clone(),
            state.payload.status(),
            rfc3339(self.created),
            rfc3339(state.changed),
        )
        .with_ttl_ms(ttl);
        if !state.payload.status().is_terminal() {
            handle = handle.with_poll_interval_ms(POLL_INTERVAL_MS);
        }
        handle
    }

    fn detailed(&self) -> DetailedTask {
        let state = lock(&self.state);
        DetailedTask::new(self.handle(&state), state.payload.clone())
    }

    /// Whether the task is kept no longer: it has not changed, nor been heard of, for its
    /// retention. A task forgotten so while running is cancelled.
    fn forget_if_stale(&self, now: SystemTime) -> bool {
        let state = lock(&self.state);
        let last = state.changed.max(state.heard);
        let stale = now.duration_since(last).unwrap_or_default() > self.retention;
        if stale && !state.payload.status().is_terminal() {
            self.cancel.cancel();
        }
        stale
    }

    /// Ends the task so, unless it has ended already (a task cancelled stays cancelled).
    fn end(&self, payload: TaskPayload) {
        let mut state = lock(&self.state);
        if state.payload.status().is_terminal() {
            return;
        }
        state.payload = payload;
        state.changed = SystemTime::now();
        state.asked.clear();
        drop(state);
        self.cancel.cancel();
    }

    /// Ends the task with its call's result, or the JSON-RPC error that failed it.
    pub(super) fn finish(&self, result: Result<CallToolResult, ErrorData>) {
        let object = |value: Result<Value, serde_json::Error>| match value {
            Ok(Value::Object(object)) => object,
            _ => JsonObject::new(),
        };
        self.end(match result {
            Ok(result) => TaskPayload::Completed {
                result: object(serde_json::to_value(result)),
            },
            Err(error) => TaskPayload::Failed {
                error: object(serde_json::to_value(error)),
            },
        });
    }

    /// Asks the client `requests`, as the task's input requests, and waits for an answer to
    /// each: the answers in the order of `requests`, or none if the task is cancelled first.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the questions stay asked until the task ends.
    pub(super) async fn ask(&self, requests: Vec<InputRequest>) -> Option<Vec<Value>> {
        let keys: Vec<String> = {
            let mut state = lock(&self.state);
            if state.payload.status().is_terminal() {
                return None;
            }
            let keys: Vec<String> = requests
                .into_iter()
                .map(|request| {
                    state.questions += 1;
                    let key = format!("question-{}", state.questions);
                    state.asked.insert(key.clone(), request);
                    key
                })
                .collect();
            let input_requests = state.asked.clone();
            state.payload = TaskPayload::InputRequired { input_requests };
            state.changed = SystemTime::now();
            keys
        };
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            {
                let mut state = lock(&self.state);
                if keys.iter().all(|key| state.answers.contains_key(key)) {
                    let answers = keys
                        .iter()
                        .filter_map(|key| state.answers.remove(key))
                        .collect();
                    return Some(answers);
                }
            }
            tokio::select! {
                () = answered => {}
                () = self.cancel.cancelled() => return None,
            }
        }
    }

    /// Takes `answers` to questions the task asked; the task works again once none waits.
    /// An answer under a key of no question waiting (answered already, never asked) changes
    /// nothing, as the tasks extension says.
    fn answer(&self, answers: InputResponses) {
        let mut state = lock(&self.state);
        if state.payload.status().is_terminal() {
            return;
        }
        for (key, answer) in answers {
            // An answer to a question answered already (a retried update) changes nothing.
            if state.asked.remove(&key).is_some() {
                state.answers.insert(key, answer);
            }
        }
        state.payload = if state.asked.is_empty() {
            TaskPayload::Working
        } else {
            TaskPayload::InputRequired {
                input_requests: state.asked.clone(),
            }
        };
        state.changed = SystemTime::now();
        drop(state);
        self.answered.notify_waiters();
    }
}

/// `-32000`: the server keeps as many tasks as it may.
pub(super) fn full() -> ErrorData {
    ErrorData::new(
        ErrorCode(-32000),
        "the server runs as many tasks as it may: try again later",
        None,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rmcp::model::{ElicitRequest, ElicitRequestParams, TaskStatus};

    use super::*;

    fn question() -> InputRequest {
        let params: ElicitRequestParams = serde_json::from_value(json!({
            "message": "Delete it?",
            "requestedSchema": {"type": "object", "properties": {}}
        }))
        .unwrap();
        InputRequest::Elicitation(ElicitRequest::new(params))
    }

    #[tokio::test]
    async fn questions_wait_for_every_answer_by_key() {
        let tasks = Tasks::default();
        let task = tasks.create(None).unwrap();
        let id = task.id.clone();
        let asking = tokio::spawn({
            let task = Arc::clone(&task);
            async move { task.ask(vec![question(), question()]).await }
        });
        let pending = loop {
            let got = tasks.get(&id, None).unwrap();
            if got.task.status() == TaskStatus::InputRequired {
                break got;
            }
            tokio::task::yield_now().await;
        };
        let TaskPayload::InputRequired { input_requests } = pending.task.payload else {
            panic!("input required")
        };
        let keys: Vec<String> = input_requests.keys().cloned().collect();
        assert_eq!(keys, ["question-1", "question-2"]);
        let first = InputResponses::from([(keys[0].clone(), json!({"action": "accept"}))]);
        tasks.update(&id, None, first.clone()).unwrap();
        // A retry changes nothing: one question still waits.
        tasks.update(&id, None, first).unwrap();
        let got = tasks.get(&id, None).unwrap();
        let TaskPayload::InputRequired { input_requests } = got.task.payload else {
            panic!("still input required")
        };
        assert_eq!(input_requests.keys().collect::<Vec<_>>(), [&keys[1]]);
        // An answer to nothing asked is acknowledged, and changes nothing.
        let stranger = InputResponses::from([("unknown".to_owned(), json!({}))]);
        tasks.update(&id, None, stranger).unwrap();
        let second = InputResponses::from([(keys[1].clone(), json!({"action": "decline"}))]);
        tasks.update(&id, None, second).unwrap();
        let answers = asking.await.unwrap().unwrap();
        assert_eq!(answers[1]["action"], "decline");
        assert_eq!(
            tasks.get(&id, None).unwrap().task.status(),
            TaskStatus::Working
        );
    }

    #[tokio::test]
    async fn a_task_belongs_to_its_identity_and_stays_cancelled() {
        let tasks = Tasks::default();
        let ada = Identity::new("ada");
        let task = tasks.create(Some(ada.clone())).unwrap();
        assert!(tasks.get(&task.id, None).is_err());
        assert!(tasks.get(&task.id, Some(&Identity::new("bob"))).is_err());
        tasks.cancel(&task.id, Some(&ada)).unwrap();
        assert!(task.cancellation().is_cancelled());
        task.finish(Ok(CallToolResult::success(vec![])));
        let got = tasks.get(&task.id, Some(&ada)).unwrap();
        assert_eq!(got.task.status(), TaskStatus::Cancelled);
        // Cancelling an ended task is answered all the same.
        tasks.cancel(&task.id, Some(&ada)).unwrap();
        assert!(task.ask(vec![question()]).await.is_none());
    }

    #[test]
    fn a_full_table_refuses_and_stale_tasks_are_forgotten() {
        let tasks = Tasks::default();
        let limits = |retention| Limits { max: 1, retention };
        tasks.set_limits(limits(Duration::ZERO));
        let stale = tasks.create(None).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        // The stale task is forgotten, and cancelled, to make room.
        tasks.set_limits(limits(DEFAULT_TASK_RETENTION));
        let kept = tasks.create(None).unwrap();
        assert!(stale.cancellation().is_cancelled());
        assert!(tasks.get(&stale.id, None).is_err());
        assert!(tasks.create(None).is_none());
        assert!(tasks.get(&kept.id, None).is_ok());
    }
}
