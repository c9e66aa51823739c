//! [`Scope`]: whose sessions a connection may open.

use std::sync::Arc;

use bidi_session::{Scoped, SessionStore};

/// The scope a connection's session ids are names in: an identity such as a user or a tenant.
///
/// Attach one to a connection with
/// [`ConnectOptions::extension`](bidi_core::ConnectOptions::extension) and the agent opens that
/// connection's session in [`Scope::sessions`] of the agent's store: session ids then name
/// sessions only within the scope and the agent, so another identity can neither read nor
/// resume them, another agent on the same store never mistakes them for its own, and the same
/// id in two scopes (or of two agents) is two sessions. The output's session id is the id the
/// connection used, without the scope. A transport that authenticates its peers attaches the
/// peer's identity as the scope of each connection it opens.
///
/// ```
/// use bidi_agent::{Agent, AgentInit, AgentResult, Responder, Scope};
/// use bidi_core::{ActionContext, BoxError, ConnectOptions, Inbound};
/// use bidi_session::Session;
///
/// async fn count(
///     _ctx: ActionContext,
///     session: Session<u32>,
///     mut inbound: Inbound<()>,
///     _out: Responder<()>,
/// ) -> Result<AgentResult<u32>, BoxError> {
///     while inbound.recv().await.is_some() {
///         session.update(|n| *n += 1).await?;
///     }
///     Ok(AgentResult::new(session.state()))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let agent = Agent::builder("count").build(count);
/// let mut tallies = Vec::new();
/// for user in ["alice", "alice", "bob"] {
///     let options = ConnectOptions::new().extension(Scope::new(user));
///     let conn = agent.connect_with(AgentInit::new().session_id("tally"), options);
///     conn.send(()).await?;
///     conn.close();
///     let out = conn.output().await?;
///     assert_eq!(out.session_id, "tally");
///     tallies.push(out.output);
/// }
/// // alice's "tally" counted twice, bob's (another session) once; unscoped, there is none.
/// assert_eq!(tallies, [1, 2, 1]);
/// assert!(agent.session("tally").await?.is_none());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope(Arc<str>);

impl Scope {
    /// The scope `name`: any string, the empty one included, names a scope of its own.
    #[must_use]
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Self(name.into())
    }

    /// The scope's name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The sessions of agent `agent` within this scope: `store` seen through keys made of the
    /// scope, the agent's name and the session id, so that no session id names a session of
    /// another scope or another agent.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// use bidi_agent::Scope;
    /// use bidi_session::{Append, MemoryStore, SessionStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), bidi_session::StoreError> {
    /// let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    /// let alice = Scope::new("alice");
    /// alice.sessions("chat", Arc::clone(&store)).append("s", Append::create(1.into())).await?;
    /// assert!(alice.sessions("notes", Arc::clone(&store)).load("s").await?.is_none());
    /// assert!(Scope::new("bob").sessions("chat", store).load("s").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn sessions(&self, agent: &str, store: Arc<dyn SessionStore>) -> Scoped {
        // Length-prefixed, so that no two (scope, agent) pairs make one name.
        Scoped::new(store, format!("{}:{}:{agent}", self.0.len(), self.0))
    }
}
