//! The A2A 1.0 objects the wire reads and writes, as their JSON (the ProtoJSON of the
//! protocol's `a2a.proto`: camelCase fields, enums by their full names), and the JSON-RPC 2.0
//! envelope around them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this wire speaks: what the agent card announces and what the
/// `A2A-Version` header of a request must say, if it says anything.
pub(crate) const VERSION: &str = "1.0";

/// The bindings of the agent card's interfaces: JSON-RPC, listed first, and HTTP+JSON.
pub(crate) const BINDING: &str = "JSONRPC";
pub(crate) const REST_BINDING: &str = "HTTP+JSON";

/// A message's sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Role {
    /// The client.
    #[serde(rename = "ROLE_USER", alias = "user")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT", alias = "agent")]
    Agent,
}

/// One piece of a message or an artifact: text, a file (its bytes or its address), or JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<String>,
    /// A file's bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) raw: Option<String>,
    /// A file's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<Value>,
}

impl Part {
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    pub(crate) fn data(data: Value) -> Self {
        Self {
            data: Some(data),
            media_type: Some("application/json".to_owned()),
            ..Self::default()
        }
    }
}

/// A message: what the client sends, and the agent's messages in a task's history and
/// status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Message {
    #[serde(default)]
    pub(crate) message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) task_id: Option<String>,
    pub(crate) role: Role,
    #[serde(default)]
    pub(crate) parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) metadata: Option<Value>,
}

impl Message {
    /// The agent's message `id` of `task` in `context`.
    pub(crate) fn agent(id: String, task: &Ids, parts: Vec<Part>) -> Self {
        Self {
            message_id: id,
            context_id: Some(task.context.clone()),
            task_id: Some(task.task.clone()),
            role: Role::Agent,
            parts,
            metadata: None,
        }
    }
}

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum TaskState {
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
}

/// A task's state, the message that goes with it, and when it was reached (RFC 3339).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskStatus {
    pub(crate) state: TaskState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<Message>,
    pub(crate) timestamp: String,
}

/// What a task produced: the agent's answer, one per model message that says something.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Artifact {
    pub(crate) artifact_id: String,
    pub(crate) name: &'static str,
    pub(crate) parts: Vec<Part>,
}

/// A task: the turns of the agent on a session (its context) from a message until it is
/// over, across the inputs it asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) context_id: String,
    pub(crate) status: TaskStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) artifacts: Vec<Artifact>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<Message>,
}

/// A task's id and its context's: its first turn's snapshot and its session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ids {
    pub(crate) task: String,
    pub(crate) context: String,
}

/// A change of a task's state, on a stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatusUpdate {
    pub(crate) task_id: String,
    pub(crate) context_id: String,
    pub(crate) status: TaskStatus,
}

/// A piece of an artifact, on a stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArtifactUpdate {
    pub(crate) task_id: String,
    pub(crate) context_id: String,
    pub(crate) artifact: Artifact,
    pub(crate) append: bool,
    pub(crate) last_chunk: bool,
}

/// One event of a stream (`StreamResponse`), and the result of `SendMessage`
/// (`SendMessageResponse`, whose one case the wire answers is `task`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Event {
    Task(Task),
    StatusUpdate(StatusUpdate),
    ArtifactUpdate(ArtifactUpdate),
}

/// `SendMessage`'s and `SendStreamingMessage`'s params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SendParams {
    pub(crate) message: Message,
    #[serde(default)]
    pub(crate) configuration: Configuration,
}

/// How the client wants a message answered.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Configuration {
    /// The media types the client takes; empty: any.
    #[serde(default)]
    pub(crate) accepted_output_modes: Vec<String>,
    /// How many messages of history the task carries back; none: all.
    #[serde(default)]
    pub(crate) history_length: Option<u32>,
    /// Answer at once with the working task.
    #[serde(default)]
    pub(crate) return_immediately: bool,
    /// A push notification config: refused, the wire sends none.
    #[serde(default)]
    pub(crate) task_push_notification_config: Option<Value>,
}

/// `GetTask`'s params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GetParams {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) history_length: Option<u32>,
}

/// `CancelTask`'s and `SubscribeToTask`'s params.
#[derive(Debug, Deserialize)]
pub(crate) struct TaskParams {
    pub(crate) id: String,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RpcError {
    pub(crate) code: i32,
    pub(crate) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Box<Value>>,
}

/// A JSON-RPC response: its `result` or its `error`, under the request's `id`.
#[derive(Debug, Serialize)]
pub(crate) struct Response<'a, T> {
    pub(crate) jsonrpc: &'static str,
    pub(crate) id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<T>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<&'a RpcError>,
}

impl<'a, T: Serialize> Response<'a, T> {
    pub(crate) fn result(id: &'a Value, result: T) -> Self {
        Self {
            jsonrpc: "2.0",
            id,
            result: Some(result),
            error: None,
        }
    }

    /// The response as JSON text.
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        // Plain data: it always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl<'a> Response<'a, ()> {
    pub(crate) fn error(id: &'a Value, error: &'a RpcError) -> Self {
        Self {
            jsonrpc: "2.0",
            id,
            result: None,
            error: Some(error),
        }
    }
}

/// The agent card, at `.well-known/agent-card.json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentCard {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) supported_interfaces: Vec<Interface>,
    pub(crate) version: &'static str,
    pub(crate) capabilities: Capabilities,
    pub(crate) default_input_modes: Vec<&'static str>,
    pub(crate) default_output_modes: Vec<&'static str>,
    pub(crate) skills: Vec<Skill>,
}

/// Where and how the agent is reached.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Interface {
    pub(crate) url: String,
    pub(crate) protocol_binding: &'static str,
    pub(crate) protocol_version: &'static str,
}

/// What the agent does beyond request and answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Capabilities {
    pub(crate) streaming: bool,
    pub(crate) push_notifications: bool,
    pub(crate) extended_agent_card: bool,
}

/// One thing the agent can do.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Skill {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) tags: Vec<&'static str>,
}
