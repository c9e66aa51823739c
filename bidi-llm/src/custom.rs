//! Custom agents: an execution whose answer is your code instead of a model loop
//! ([`LlmAgent::custom`](crate::LlmAgent::custom)), with the session's custom state and
//! artifacts to read and change.

use std::fmt;
use std::sync::Arc;

use bidi_agent::Artifact;
use bidi_core::BoxError;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::conversation::Conversation;
use crate::message::Message;
use crate::session::LlmSession;

/// What one execution of a custom agent sees and does: the conversation (the user's message
/// last), the session's custom state and artifacts, and the answer it streams.
///
/// Every change is streamed to the client as it is made ([`AgentEvent::CustomUpdate`],
/// [`AgentEvent::ArtifactUpdate`], [`AgentEvent::TextDelta`]) and kept in the session when
/// the execution ends, as the model loop's messages are.
///
/// [`AgentEvent::CustomUpdate`]: crate::AgentEvent::CustomUpdate
/// [`AgentEvent::ArtifactUpdate`]: crate::AgentEvent::ArtifactUpdate
/// [`AgentEvent::TextDelta`]: crate::AgentEvent::TextDelta
pub struct CustomTurn {
    messages: Conversation,
    custom: Value,
    artifacts: Vec<Artifact>,
    edits: mpsc::UnboundedSender<Edit>,
}

/// A change a custom turn made, in the order it made them.
#[derive(Debug)]
pub(crate) enum Edit {
    Text(String),
    Custom(Value),
    Artifact(Artifact),
}

impl CustomTurn {
    pub(crate) fn new(state: &LlmSession, edits: mpsc::UnboundedSender<Edit>) -> Self {
        Self {
            messages: state.messages.clone(),
            custom: state.custom.clone(),
            artifacts: state.artifacts.clone(),
            edits,
        }
    }

    /// The conversation, this execution's input last.
    #[must_use]
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The text of the user's message this execution answers (empty if the last message is
    /// not the user's).
    #[must_use]
    pub fn text(&self) -> &str {
        match self.messages.last() {
            Some(Message::User(user)) => &user.content,
            _ => "",
        }
    }

    /// The session's custom state: JSON of your own (`null` until it is first set).
    #[must_use]
    pub fn custom(&self) -> &Value {
        &self.custom
    }

    /// Replaces the custom state.
    pub fn set_custom(&mut self, custom: Value) {
        self.custom = custom;
        self.edit(Edit::Custom(self.custom.clone()));
    }

    /// Changes the custom state in place, then streams it.
    pub fn update_custom(&mut self, change: impl FnOnce(&mut Value)) {
        change(&mut self.custom);
        self.edit(Edit::Custom(self.custom.clone()));
    }

    /// The session's artifacts.
    #[must_use]
    pub fn artifacts(&self) -> &[Artifact] {
        &self.artifacts
    }

    /// Adds `artifact`, replacing the session's artifact of the same name.
    pub fn artifact(&mut self, artifact: Artifact) {
        artifact.clone().put_in(&mut self.artifacts);
        self.edit(Edit::Artifact(artifact));
    }

    /// Streams a piece of the answer: the answer is every piece, in order, then the text the
    /// function returns.
    pub fn say(&self, piece: impl Into<String>) {
        self.edit(Edit::Text(piece.into()));
    }

    fn edit(&self, edit: Edit) {
        // The execution reads edits until the function has returned: it is there.
        let _ = self.edits.send(edit);
    }
}

impl fmt::Debug for CustomTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomTurn")
            .field("messages", &self.messages.len())
            .field("custom", &self.custom)
            .field("artifacts", &self.artifacts.len())
            .finish_non_exhaustive()
    }
}

/// A custom agent's function: one call per execution, answering the rest of the answer's text.
pub(crate) type CustomFn =
    Arc<dyn Fn(CustomTurn) -> BoxFuture<'static, Result<String, BoxError>> + Send + Sync>;
