//! The wire of a task: an execution's events as A2A's stream (`SendStreamingMessage`: SSE
//! whose every record is a JSON-RPC response carrying a `StreamResponse`), or as the one
//! `SendMessage` response it ends with.

use std::sync::Arc;
use std::time::SystemTime;

use bidi_agent::AgentOutput;
use bidi_flow::Code;
use bidi_flow::wire::Wire;
use bidi_llm::{AgentEvent, Ending, Failure, LlmSession, Message as LlmMessage, TurnState};

use super::binding::Binding;
use super::push::Notifier;
use super::task;
use super::types::{
    Artifact, ArtifactUpdate, Event, Ids, Message, Part, StatusUpdate, Task, TaskState, TaskStatus,
};

/// A turn that continues a task which waited for input: the task, and what its earlier turns
/// did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Continued {
    /// The task's id.
    pub(crate) task: String,
    /// How many messages the conversation held before the task began.
    pub(crate) before: usize,
    /// How many answer artifacts its earlier turns made.
    pub(crate) answers: usize,
}

/// Writes a task's events: as SSE records while it runs (`stream`), or its task once it
/// has ended.
#[derive(Debug)]
pub(crate) struct TaskWire {
    /// How the request came: every record and answer is framed so.
    binding: Binding,
    stream: bool,
    /// The client's message, the first of the task's history on its stream.
    request: Message,
    ids: Ids,
    /// The agent's tools with an executor: their calls wait for approval.
    locals: Arc<[String]>,
    /// How much history the task carries back.
    limit: Option<u32>,
    /// The task this turn continues, if it is not a task's first turn.
    continues: Option<Continued>,
    /// How many answer artifacts were opened, and whether the last one is open.
    answers: usize,
    open: bool,
    /// How the turn ends, as its events say.
    ending: Ending,
    /// Why the stream was cut short, if it was.
    cut: Option<String>,
    /// The turn's messages, and the whole conversation once the agent returned it.
    turn: Vec<LlmMessage>,
    conversation: Vec<LlmMessage>,
    /// Who tells the task's webhooks of its state changes, if anyone.
    notifier: Option<Notifier>,
}

impl TaskWire {
    /// A wire answering a request of `binding` (the client's `request`), streamed or not.
    pub(crate) fn new(
        binding: Binding,
        stream: bool,
        request: Message,
        locals: Arc<[String]>,
        limit: Option<u32>,
    ) -> Self {
        Self {
            binding,
            stream,
            request,
            ids: Ids::default(),
            locals,
            limit,
            continues: None,
            answers: 0,
            open: false,
            ending: Ending::default(),
            cut: None,
            turn: Vec::new(),
            conversation: Vec::new(),
            notifier: None,
        }
    }

    /// The wire of a turn whose state changes `notifier` sends to the task's webhooks.
    pub(crate) fn notifying(mut self, notifier: Option<Notifier>) -> Self {
        self.notifier = notifier;
        self
    }

    /// Tells the task's webhooks that it stands at `status`.
    fn notify(&self, status: &TaskStatus) {
        if let Some(notifier) = &self.notifier {
            notifier.status(StatusUpdate {
                task_id: self.ids.task.clone(),
                context_id: self.ids.context.clone(),
                status: status.clone(),
            });
        }
    }

    /// The wire of a turn that continues task `continues`: its events name that task, and
    /// its answers follow the earlier turns'.
    pub(crate) fn continuing(mut self, continues: Option<Continued>) -> Self {
        self.answers = continues.as_ref().map_or(0, |continued| continued.answers);
        self.continues = continues;
        self
    }

    /// Appends one record of `event`.
    fn record(&self, event: &Event, out: &mut Vec<u8>) {
        self.binding.record(event, out);
    }

    fn status_update(&self, status: TaskStatus, out: &mut Vec<u8>) {
        let update = StatusUpdate {
            task_id: self.ids.task.clone(),
            context_id: self.ids.context.clone(),
            status,
        };
        self.record(&Event::StatusUpdate(update), out);
    }

    fn artifact_update(&self, parts: Vec<Part>, append: bool, last_chunk: bool, out: &mut Vec<u8>) {
        let update = ArtifactUpdate {
            task_id: self.ids.task.clone(),
            context_id: self.ids.context.clone(),
            artifact: Artifact {
                artifact_id: task::answer_id(self.answers),
                name: "answer",
                parts,
            },
            append,
            last_chunk,
        };
        self.record(&Event::ArtifactUpdate(update), out);
    }

    /// The task as it starts: submitted, with the client's message.
    pub(crate) fn submitted(&self, ids: &Ids, state: TaskState) -> Task {
        Task {
            id: ids.task.clone(),
            context_id: ids.context.clone(),
            status: task::bare(ids, state, SystemTime::now()),
            artifacts: Vec::new(),
            history: vec![Message {
                context_id: Some(ids.context.clone()),
                task_id: Some(ids.task.clone()),
                ..self.request.clone()
            }],
        }
    }

    /// Ends the open answer artifact, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open {
            self.open = false;
            if self.stream {
                self.artifact_update(Vec::new(), true, true, out);
            }
        }
    }

    /// Where the task's turn stands now that it ended: as its events say, or failed with why
    /// its stream was cut short (the turn's own error first, if it said one).
    fn turn(&self) -> TurnState {
        let state = self.ending.state();
        match &self.cut {
            None => state.unwrap_or_else(|| failed("the task ended before it finished")),
            Some(_) if matches!(state, Some(TurnState::Failed(_))) => {
                state.unwrap_or(TurnState::Aborted)
            }
            Some(cut) => failed(cut),
        }
    }

    /// The status of the task now that its turn ended.
    fn ended(&self) -> TaskStatus {
        task::status(&self.ids, &self.turn(), SystemTime::now())
    }

    fn started(&mut self, session_id: &str, snapshot_id: Option<&String>, out: &mut Vec<u8>) {
        let continued = self
            .continues
            .as_ref()
            .map(|continued| continued.task.clone());
        let first = if continued.is_some() {
            TaskState::Working
        } else {
            TaskState::Submitted
        };
        self.ids = Ids {
            task: continued
                .or_else(|| snapshot_id.cloned())
                .unwrap_or_else(bidi_session::new_id),
            context: session_id.to_owned(),
        };
        let working = task::bare(&self.ids, TaskState::Working, SystemTime::now());
        self.notify(&working);
        if self.stream {
            let task = self.submitted(&self.ids, first);
            self.record(&Event::Task(task), out);
            self.status_update(working, out);
        }
    }

    /// A model call tried again: the answer streaming ends (a restarted one is the next
    /// artifact), and a `working` status says why, in words and as the event's fields.
    fn retry(&mut self, event: &AgentEvent, out: &mut Vec<u8>) {
        self.close(out);
        if let (true, Some(note)) = (self.stream, event.note()) {
            let parts = vec![Part::text(note), Part::data(event.fields())];
            let status = task::working(&self.ids, parts, SystemTime::now());
            self.status_update(status, out);
        }
    }

    fn text(&mut self, delta: &str, out: &mut Vec<u8>) {
        let append = self.open;
        if !self.open {
            self.open = true;
            self.answers += 1;
        }
        if self.stream {
            self.artifact_update(vec![Part::text(delta)], append, false, out);
        }
    }
}

impl Wire for TaskWire {
    type Event = AgentEvent;
    type Output = AgentOutput<LlmSession, u32>;
    type Frames = Vec<u8>;

    const OUTPUT: bool = true;

    fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
        self.ending.observe(&event);
        match &event {
            AgentEvent::SessionStart {
                session_id,
                snapshot_id,
            } => self.started(session_id, snapshot_id.as_ref(), out),
            AgentEvent::TextDelta { delta } if !delta.is_empty() => self.text(delta, out),
            AgentEvent::MessageEnd { .. } => self.close(out),
            AgentEvent::ModelRetry { .. } => self.retry(&event, out),
            AgentEvent::SessionEnd { messages, .. } => messages.clone_into(&mut self.turn),
            AgentEvent::ExecuteComplete { .. } => {
                self.close(out);
                let status = self.ended();
                self.notify(&status);
                if self.stream {
                    self.status_update(status, out);
                }
            }
            _ => {}
        }
    }

    fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
        self.close(out);
        let complete = self.ending.is_complete();
        self.cut = Some(message.to_owned());
        if !complete {
            let status = self.ended();
            self.notify(&status);
            if self.stream {
                self.status_update(status, out);
            }
        }
    }

    fn output(&mut self, output: &AgentOutput<LlmSession, u32>) {
        if !self.stream {
            self.conversation = output.state.messages.to_vec();
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        if self.stream {
            return;
        }
        let status = self.ended();
        // A task's answers are those of all its turns.
        let turns = match &self.continues {
            Some(continued) => self.conversation.get(continued.before..),
            None => None,
        };
        let task = task::task(
            &self.ids,
            status,
            turns.unwrap_or(&self.turn),
            &self.conversation,
            &self.locals,
            self.limit,
        );
        out.extend_from_slice(&self.binding.frame(&Event::Task(task)));
    }
}

/// A failed turn saying `message`.
fn failed(message: &str) -> TurnState {
    TurnState::Failed(Failure {
        code: Code::ConnectionFailed,
        error: message.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use bidi_llm::{AssistantContent, AssistantMessage, Status, ToolCall, UserMessage};
    use serde_json::json;

    use serde_json::Value;

    use super::*;
    use crate::types::Role;

    fn request() -> Message {
        Message {
            message_id: "m1".into(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts: vec![Part::text("hi")],
            metadata: None,
        }
    }

    /// The records of `out`, as JSON, without their timestamps.
    fn records(out: &[u8]) -> Vec<Value> {
        String::from_utf8(out.to_vec())
            .unwrap()
            .split("\n\n")
            .filter(|record| !record.is_empty())
            .map(|record| {
                let mut value: Value =
                    serde_json::from_str(record.strip_prefix("data: ").unwrap()).unwrap();
                for event in ["statusUpdate", "task"] {
                    let status = value["result"]
                        .get_mut(event)
                        .and_then(|event| event.get_mut("status"))
                        .and_then(Value::as_object_mut);
                    if let Some(status) = status {
                        assert!(status.remove("timestamp").is_some());
                    }
                }
                value
            })
            .collect()
    }

    fn start(wire: &mut TaskWire, out: &mut Vec<u8>) {
        wire.event(
            AgentEvent::SessionStart {
                session_id: "s1".into(),
                snapshot_id: Some("t1".into()),
            },
            out,
        );
    }

    fn answer(text: &str) -> AgentEvent {
        AgentEvent::MessageEnd {
            message: Box::new(LlmMessage::Assistant(AssistantMessage {
                content: vec![AssistantContent::Text { text: text.into() }],
                ..AssistantMessage::default()
            })),
        }
    }

    fn complete(status: Status) -> AgentEvent {
        AgentEvent::ExecuteComplete {
            status,
            pending_tool_calls: Vec::new(),
            pending_approvals: Vec::new(),
            cost: 0.0,
        }
    }

    /// A streaming task's wire for request `id`, started, and what it wrote.
    fn streaming(id: Value) -> (TaskWire, Vec<u8>) {
        let mut wire = TaskWire::new(Binding::JsonRpc(id), true, request(), Arc::from([]), None);
        let mut out = Vec::new();
        start(&mut wire, &mut out);
        (wire, out)
    }

    #[test]
    fn a_stream_is_the_task_then_working_then_the_answer_then_the_end() {
        let (mut wire, mut out) = streaming(json!(7));
        for delta in ["Hel", "lo"] {
            let delta = AgentEvent::TextDelta {
                delta: delta.into(),
            };
            wire.event(delta.clone(), &mut out);
        }
        wire.event(answer("Hello"), &mut out);
        wire.event(complete(Status::Completed), &mut out);
        wire.end(&mut out);
        let envelope = |result: Value| json!({"jsonrpc": "2.0", "id": 7, "result": result});
        let chunk = |parts: Value, append: bool, last: bool| {
            envelope(json!({"artifactUpdate": {
                "taskId": "t1", "contextId": "s1", "append": append, "lastChunk": last,
                "artifact": {"artifactId": "answer-1", "name": "answer", "parts": parts},
            }}))
        };
        assert_eq!(
            records(&out),
            [
                envelope(json!({"task": {
                    "id": "t1", "contextId": "s1", "status": {"state": "TASK_STATE_SUBMITTED"},
                    "history": [{"messageId": "m1", "contextId": "s1", "taskId": "t1",
                                 "role": "ROLE_USER", "parts": [{"text": "hi"}]}],
                }})),
                envelope(json!({"statusUpdate": {
                    "taskId": "t1", "contextId": "s1", "status": {"state": "TASK_STATE_WORKING"},
                }})),
                chunk(json!([{"text": "Hel"}]), false, false),
                chunk(json!([{"text": "lo"}]), true, false),
                chunk(json!([]), true, true),
                envelope(json!({"statusUpdate": {
                    "taskId": "t1", "contextId": "s1", "status": {"state": "TASK_STATE_COMPLETED"},
                }})),
            ]
        );
    }

    #[test]
    fn a_stream_cut_short_ends_failed_with_its_error() {
        let (mut wire, mut out) = streaming(json!("r"));
        wire.event(AgentEvent::TextDelta { delta: "x".into() }, &mut out);
        out.clear();
        wire.failed("the model went away", &mut out);
        let records = records(&out);
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(records[0]["result"]["artifactUpdate"]["lastChunk"], true);
        let status = &records[1]["result"]["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_FAILED");
        assert_eq!(status["message"]["parts"][0]["text"], "the model went away");
        assert_eq!(records[1]["id"], "r");
    }

    /// A model call tried again mid-answer: the answer's artifact ends, a `working` status
    /// says why (in words, and as the event's fields), and the answer streams anew as the
    /// next artifact.
    #[test]
    fn a_retry_ends_the_answer_and_says_why_in_a_working_status() {
        let (mut wire, mut out) = streaming(json!(7));
        wire.event(
            AgentEvent::TextDelta {
                delta: "Hel".into(),
            },
            &mut out,
        );
        out.clear();
        let retry = AgentEvent::ModelRetry {
            attempt: 2,
            model: "m".into(),
            delay_ms: 500,
            error: "the stream was cut".into(),
            discarded: true,
        };
        wire.event(retry, &mut out);
        wire.event(
            AgentEvent::TextDelta {
                delta: "Hello".into(),
            },
            &mut out,
        );
        let records = records(&out);
        assert_eq!(records.len(), 3, "{records:?}");
        assert_eq!(records[0]["result"]["artifactUpdate"]["lastChunk"], true);
        let status = &records[1]["result"]["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_WORKING");
        let parts = &status["message"]["parts"];
        assert!(
            parts[0]["text"]
                .as_str()
                .unwrap()
                .contains("the stream was cut"),
            "{parts}"
        );
        assert_eq!(parts[1]["data"]["attempt"], 2);
        assert_eq!(parts[1]["data"]["discarded"], true);
        let next = &records[2]["result"]["artifactUpdate"];
        assert_eq!(next["artifact"]["artifactId"], "answer-2");
        assert_eq!(next["artifact"]["parts"], json!([{"text": "Hello"}]));
    }

    #[test]
    fn a_blocking_send_answers_the_task_once_it_ended() {
        let locals: Arc<[String]> = Arc::from(["wipe".to_owned()]);
        let mut wire = TaskWire::new(
            Binding::JsonRpc(json!(1)),
            false,
            request(),
            locals,
            Some(1),
        );
        let mut out = Vec::new();
        start(&mut wire, &mut out);
        let call = ToolCall {
            id: "k".into(),
            name: "wipe".into(),
            arguments: json!({"target": "disk"}),
        };
        wire.event(
            AgentEvent::AwaitingApproval {
                session_id: "s1".into(),
                tool_calls: vec![call.clone()],
            },
            &mut out,
        );
        let turn = vec![LlmMessage::User(UserMessage::new("hi"))];
        wire.event(
            AgentEvent::SessionEnd {
                session_id: "s1".into(),
                messages: turn,
                snapshot_id: Some("t1".into()),
            },
            &mut out,
        );
        wire.event(complete(Status::AwaitingToolExecution), &mut out);
        assert!(out.is_empty(), "nothing before the end");
        wire.end(&mut out);
        let response: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(response["id"], 1);
        let task = &response["result"]["task"];
        assert_eq!(task["id"], "t1");
        assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(
            task["status"]["message"]["parts"][0]["data"],
            json!({"awaitingApproval": [call]})
        );
    }

    #[test]
    fn an_aborted_answer_is_canceled() {
        let mut wire = TaskWire::new(
            Binding::JsonRpc(json!(1)),
            true,
            request(),
            Arc::from([]),
            None,
        );
        let mut out = Vec::new();
        start(&mut wire, &mut out);
        out.clear();
        let aborted = AgentEvent::MessageEnd {
            message: Box::new(LlmMessage::Aborted(bidi_llm::AbortedMessage {
                partial: AssistantMessage::default(),
            })),
        };
        wire.event(aborted, &mut out);
        wire.event(complete(Status::Completed), &mut out);
        let records = records(&out);
        let status = &records[0]["result"]["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_CANCELED");
    }
    #[test]
    fn a_continuation_names_its_task_and_numbers_its_answers_after_the_earlier_ones() {
        let continued = Continued {
            task: "t0".into(),
            before: 0,
            answers: 1,
        };
        let mut wire = TaskWire::new(
            Binding::JsonRpc(json!(2)),
            true,
            request(),
            Arc::from([]),
            None,
        )
        .continuing(Some(continued.clone()));
        let mut out = Vec::new();
        start(&mut wire, &mut out);
        wire.event(
            AgentEvent::TextDelta {
                delta: "more".into(),
            },
            &mut out,
        );
        wire.event(answer("more"), &mut out);
        wire.event(complete(Status::Completed), &mut out);
        let records = records(&out);
        let task = &records[0]["result"]["task"];
        assert_eq!(task["id"], "t0", "the task's id, not the turn's snapshot");
        assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
        let chunk = &records[2]["result"]["artifactUpdate"];
        assert_eq!(chunk["taskId"], "t0");
        assert_eq!(chunk["artifact"]["artifactId"], "answer-2");
        let last = &records[records.len() - 1]["result"]["statusUpdate"];
        assert_eq!(last["taskId"], "t0");

        // Blocking: the task's answers are all its turns'.
        let mut wire = TaskWire::new(
            Binding::JsonRpc(json!(3)),
            false,
            request(),
            Arc::from([]),
            None,
        )
        .continuing(Some(continued));
        let mut out = Vec::new();
        start(&mut wire, &mut out);
        let said = |text: &str| {
            LlmMessage::Assistant(AssistantMessage {
                content: vec![AssistantContent::Text { text: text.into() }],
                ..AssistantMessage::default()
            })
        };
        let conversation = vec![
            LlmMessage::User(UserMessage::new("first")),
            said("earlier"),
            LlmMessage::User(UserMessage::new("then")),
            said("later"),
        ];
        wire.event(
            AgentEvent::SessionEnd {
                session_id: "s1".into(),
                messages: conversation[2..].to_vec(),
                snapshot_id: Some("t1".into()),
            },
            &mut out,
        );
        wire.event(complete(Status::Completed), &mut out);
        let output: AgentOutput<LlmSession, u32> = serde_json::from_value(json!({
            "sessionId": "s1", "snapshotId": "t1", "output": 0,
            "state": {"messages": conversation},
        }))
        .unwrap();
        wire.output(&output);
        wire.end(&mut out);
        let response: Value = serde_json::from_slice(&out).unwrap();
        let task = &response["result"]["task"];
        assert_eq!(task["id"], "t0");
        let answers: Vec<&str> = task["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|artifact| artifact["parts"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(answers, ["earlier", "later"]);
    }
}
