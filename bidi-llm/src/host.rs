//! [`HostModel`]: a model a connection's client lends, answering its turns instead of the
//! agent's own.

use std::fmt;
use std::sync::Arc;

use futures_util::stream::BoxStream;

use crate::error::ModelError;
use crate::model::{Model, ModelEvent, ModelRequest};

/// The model a connection's client lends, answering its turns instead of the agent's own.
///
/// An agent inside an MCP host (an editor, a desktop assistant) can use the host's model
/// through MCP's sampling, so that it needs no model or API key of its own there: the protocol
/// puts a `HostModel` in the connection's extensions when its client offers one and the server
/// allows it, and the turn calls it. The session records the host's model name, and a turn of
/// another connection (one whose client lends none) calls the agent's own model again.
///
/// ```
/// use bidi_core::ConnectOptions;
/// use bidi_llm::testing::{Scripted, ScriptedModel};
/// use bidi_llm::HostModel;
///
/// let lent = HostModel::new(ScriptedModel::new([Scripted::new().text("from the host")]));
/// let options = ConnectOptions::new().extension(lent);
/// # drop(options);
/// ```
#[derive(Clone)]
pub struct HostModel(Arc<dyn Model>);

impl HostModel {
    /// The client's `model`.
    pub fn new(model: impl Model) -> Self {
        Self(Arc::new(model))
    }

    /// The model it lends.
    #[must_use]
    pub fn model(&self) -> &dyn Model {
        &*self.0
    }

    /// A model for an agent that has none of its own and answers only the clients that lend
    /// theirs: each call of it fails, saying the client has to lend one.
    ///
    /// ```
    /// use bidi_llm::{HostModel, LlmAgent};
    ///
    /// let agent = LlmAgent::builder("helper", HostModel::required()).build();
    /// # drop(agent);
    /// ```
    #[must_use]
    pub fn required() -> impl Model {
        Required
    }
}

impl fmt::Debug for HostModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HostModel").field(&self.0.name()).finish()
    }
}

/// The model of [`HostModel::required`].
struct Required;

impl Model for Required {
    fn name(&self) -> &str {
        "host"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let error = ModelError::other(
            "this agent has no model of its own: it answers a client that lends its model \
             (an MCP client offering sampling)",
        );
        Box::pin(futures_util::stream::iter([ModelEvent::Error(error)]))
    }
}
