//! [`Responder`]: how an agent streams a turn, ends it, and publishes artifacts.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use bidi_core::{Outbound, SendError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A named collection of parts an agent produced (a file, an image, a snippet). Publishing one
/// with the name of an earlier one replaces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Artifact {
    /// The name, unique within a connection's output.
    pub name: String,
    /// The content, as JSON parts.
    pub parts: Vec<Value>,
}

impl Artifact {
    /// An artifact named `name` made of `parts`.
    pub fn new(name: impl Into<String>, parts: impl IntoIterator<Item = Value>) -> Self {
        Self {
            name: name.into(),
            parts: parts.into_iter().collect(),
        }
    }
}

impl Artifact {
    /// Adds this artifact to `list`, replacing the one of the same name in place.
    ///
    /// ```
    /// use bidi_agent::Artifact;
    /// use serde_json::json;
    ///
    /// let mut list = vec![Artifact::new("doc", [json!("v1")])];
    /// Artifact::new("doc", [json!("v2")]).put_in(&mut list);
    /// Artifact::new("other", [json!("x")]).put_in(&mut list);
    /// assert_eq!(list, [Artifact::new("doc", [json!("v2")]), Artifact::new("other", [json!("x")])]);
    /// ```
    pub fn put_in(self, list: &mut Vec<Self>) {
        match list.iter_mut().find(|a| a.name == self.name) {
            Some(existing) => *existing = self,
            None => list.push(self),
        }
    }
}

/// The agent's side of a turn: stream chunks, end the turn, publish artifacts.
///
/// Cheap to clone; clones share the connection and the artifacts.
pub struct Responder<Stream> {
    out: Outbound<Stream>,
    artifacts: Arc<Mutex<Vec<Artifact>>>,
}

impl<Stream> Responder<Stream> {
    pub(crate) fn new(out: Outbound<Stream>) -> Self {
        Self {
            out,
            artifacts: Arc::default(),
        }
    }

    /// Streams one chunk of the current turn; completes when the consumer has taken it (with the
    /// default unbuffered output).
    ///
    /// # Errors
    ///
    /// As [`Outbound::send`]: the chunk comes back once the consumer is gone or the connection
    /// was cancelled.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the chunk is not delivered.
    pub async fn send(&self, chunk: Stream) -> Result<(), SendError<Stream>> {
        self.out.send(chunk).await
    }

    /// Streams several chunks as one hand-off; completes when the consumer has taken them (with
    /// the default unbuffered output). See [`Outbound::send_batch`].
    ///
    /// # Errors
    ///
    /// As [`Outbound::send_batch`]: the whole batch comes back.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, none of the chunks is delivered.
    pub async fn send_batch(&self, chunks: Vec<Stream>) -> Result<(), SendError<Vec<Stream>>> {
        self.out.send_batch(chunks).await
    }

    /// Ends the current turn: the consumer's `responses()` ends here.
    ///
    /// # Errors
    ///
    /// As [`Outbound::end_turn`].
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the turn is not ended.
    pub async fn end_turn(&self) -> Result<(), SendError<()>> {
        self.out.end_turn().await
    }

    /// Publishes `artifact`, replacing an earlier one of the same name. Artifacts end up in the
    /// connection's [`AgentOutput`](crate::AgentOutput).
    pub fn artifact(&self, artifact: Artifact) {
        artifact.put_in(&mut self.lock());
    }

    /// The artifacts published so far.
    #[must_use]
    pub fn artifacts(&self) -> Vec<Artifact> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Artifact>> {
        self.artifacts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<Stream> Clone for Responder<Stream> {
    fn clone(&self) -> Self {
        Self {
            out: self.out.clone(),
            artifacts: Arc::clone(&self.artifacts),
        }
    }
}

impl<Stream> fmt::Debug for Responder<Stream> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("artifacts", &self.lock().len())
            .finish_non_exhaustive()
    }
}
