//! [`Progress`]: a chunk saying how far a flow has come.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How far a flow has come, streamed as a chunk: the work done so far, of how much when it
/// knows, and what it is doing. A protocol that reports progress reads it as such (MCP's
/// `notifications/progress`, with its `total`); any other streams it as the JSON it is.
///
/// ```
/// use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
/// use bidi_flow::{BidiFlow, Progress};
///
/// async fn index(_: ActionContext, _: (), mut files: Inbound<Vec<String>>, out: Outbound<Progress>) -> Result<usize, BoxError> {
///     let files = files.recv().await.unwrap_or_default();
///     for (done, file) in files.iter().enumerate() {
///         let step = Progress::new(done as f64 + 1.0).total(files.len() as f64).message(file);
///         out.send(step).await?;
///     }
///     Ok(files.len())
/// }
/// # let _ = BidiFlow::new("index", index);
///
/// let step = Progress::new(2.0).total(4.0);
/// assert_eq!(serde_json::to_value(&step)?, serde_json::json!({"progress": 2.0, "total": 4.0}));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Progress {
    /// The work done so far: it grows with every step, whatever its unit.
    pub progress: f64,
    /// How much work there is in all, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What it is doing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Progress {
    /// `progress` done, of an unknown total.
    #[must_use]
    pub fn new(progress: f64) -> Self {
        Self {
            progress,
            total: None,
            message: None,
        }
    }

    /// Of `total` in all.
    #[must_use]
    pub fn total(mut self, total: f64) -> Self {
        self.total = Some(total);
        self
    }

    /// Saying what it does.
    #[must_use]
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The progress a chunk's JSON says, if it is one: an object with a number `progress`,
    /// and no other field than a number `total` and a string `message`.
    #[must_use]
    pub fn of(chunk: &Value) -> Option<Self> {
        let fields = chunk.as_object()?;
        if !fields.get("progress")?.is_number() {
            return None;
        }
        serde_json::from_value(chunk.clone()).ok()
    }
}
