//! Your own [`Agent`] behind the server: how a prompt becomes its input and its chunks become
//! updates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol_schema::v1::{ContentBlock, Error, SessionUpdate, StopReason};
use bidi_agent::{Agent, AgentInit, Scope};
use bidi_core::ConnectOptions;
use bidi_flow::wire::{Ended, Wire};
use bidi_session::{Session, SessionStore, StoreError};
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::server::{Shared, sessions};
use crate::turn::{Client, Shown};

/// What turns a bidi [`Agent`] of yours into an ACP agent: the input a prompt makes, and the
/// updates each chunk of a turn shows. Serve it with [`Server::bridge`](crate::Server::bridge).
///
/// Each prompt turn is one connection of the agent on the ACP session's id: the prompt's input
/// is sent, the chunks until the agent ends its turn
/// ([`Responder::end_turn`](bidi_agent::Responder::end_turn)) become `session/update`s, then
/// the input is closed and the turn answers `end_turn` (or `cancelled` after a
/// `session/cancel`, which cancels the connection with [`Cancelled::ByClient`](crate::Cancelled::ByClient)). A session is
/// created with `State::default()` in the agent's store, so `session/load` finds it after a
/// restart and [`replay`](Self::replay)s it.
///
/// Each turn's connection carries a [`Workspace`] extension: the session's working directory
/// and mode.
///
/// ```
/// use bidi_acp::schema::{ContentBlock, ContentChunk, Error, SessionUpdate, TextContent};
/// use bidi_acp::{Bridge, Server};
/// use bidi_agent::{Agent, AgentResult, Responder};
/// use bidi_core::{ActionContext, BoxError, Inbound};
/// use bidi_session::Session;
///
/// /// Counts the prompts of a session.
/// async fn counter(
///     _ctx: ActionContext,
///     session: Session<u64>,
///     mut inbound: Inbound<String>,
///     out: Responder<String>,
/// ) -> Result<AgentResult<()>, BoxError> {
///     while let Some(prompt) = inbound.recv().await {
///         let count = session.update(|count| { *count += 1; *count }).await?;
///         out.send(format!("prompt {count}: {prompt}")).await?;
///         out.end_turn().await?;
///     }
///     Ok(AgentResult::new(()))
/// }
///
/// struct Text;
///
/// impl Bridge for Text {
///     type State = u64;
///     type In = String;
///     type Stream = String;
///
///     fn input(&self, prompt: Vec<ContentBlock>) -> Result<String, Error> {
///         prompt
///             .into_iter()
///             .map(|block| match block {
///                 ContentBlock::Text(text) => Ok(text.text),
///                 _ => Err(Error::invalid_params().data("only text, please")),
///             })
///             .collect()
///     }
///
///     fn updates(&self, chunk: String) -> Vec<SessionUpdate> {
///         let text = ContentBlock::Text(TextContent::new(chunk));
///         vec![SessionUpdate::AgentMessageChunk(ContentChunk::new(text))]
///     }
/// }
///
/// let server = Server::bridge(Agent::builder("counter").build(counter), Text);
/// # drop(server);
/// ```
pub trait Bridge: Send + Sync + 'static {
    /// The agent's session state.
    type State: Serialize + DeserializeOwned + Default + Clone + Send + Sync + 'static;
    /// The agent's input.
    type In: Send + 'static;
    /// The agent's chunks.
    type Stream: Send + 'static;

    /// The agent's input for a prompt's content blocks.
    ///
    /// # Errors
    ///
    /// The error the prompt is refused with, typically
    /// [`Error::invalid_params`] naming what the agent cannot take.
    fn input(&self, prompt: Vec<ContentBlock>) -> Result<Self::In, Error>;

    /// The updates that show a chunk: none, one or several.
    fn updates(&self, chunk: Self::Stream) -> Vec<SessionUpdate>;

    /// The updates that tell a stored session's conversation when a client loads it (none by
    /// default).
    fn replay(&self, state: &Self::State) -> Vec<SessionUpdate> {
        let _ = state;
        Vec::new()
    }
}

/// Where a prompt turn of an agent served over ACP runs: the extension each turn's connection
/// carries (read it with `ctx.extensions().get::<Workspace>()`).
#[derive(Debug, Clone)]
pub struct Workspace {
    cwd: PathBuf,
    mode: Option<String>,
}

impl Workspace {
    pub(crate) fn new(cwd: PathBuf, mode: Option<String>) -> Self {
        Self { cwd, mode }
    }

    /// The session's working directory, as the client gave it (absolute).
    #[must_use]
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The id of the session's current mode, if the server has modes.
    #[must_use]
    pub fn mode(&self) -> Option<&str> {
        self.mode.as_deref()
    }
}

/// Your agent and its bridge, with their types erased.
pub(crate) trait Turns: Send + Sync {
    fn name(&self) -> &str;
    fn store(&self) -> &Arc<dyn SessionStore>;
    /// Creates the session `id` of `scope` with the default state.
    fn create<'a>(&'a self, scope: &Scope, id: Arc<str>) -> BoxFuture<'a, Result<(), StoreError>>;
    /// The updates that replay session `id` of `scope`; `None` if there is no such session.
    fn replay<'a>(
        &'a self,
        scope: &Scope,
        id: Arc<str>,
    ) -> BoxFuture<'a, Result<Option<Vec<SessionUpdate>>, StoreError>>;
    /// Runs one prompt turn, sending its updates, until it ends or `token` is cancelled.
    fn turn(
        &self,
        shared: Arc<Shared>,
        session_id: agent_client_protocol_schema::v1::SessionId,
        prompt: Vec<ContentBlock>,
        workspace: Workspace,
        token: CancellationToken,
    ) -> BoxFuture<'static, Result<StopReason, Error>>;
}

pub(crate) struct Bridged<B: Bridge, Out> {
    agent: Agent<B::State, B::In, Out, B::Stream>,
    bridge: Arc<B>,
}

impl<B: Bridge, Out> Bridged<B, Out> {
    pub(crate) fn new(agent: Agent<B::State, B::In, Out, B::Stream>, bridge: B) -> Self {
        Self {
            agent,
            bridge: Arc::new(bridge),
        }
    }
}

impl<B, Out> Turns for Bridged<B, Out>
where
    B: Bridge,
    Out: Serialize + Send + 'static,
{
    fn name(&self) -> &str {
        self.agent.name()
    }

    fn store(&self) -> &Arc<dyn SessionStore> {
        self.agent.store()
    }

    fn create<'a>(&'a self, scope: &Scope, id: Arc<str>) -> BoxFuture<'a, Result<(), StoreError>> {
        let store = sessions(scope, self.agent.name(), self.agent.store());
        Box::pin(async move {
            Session::create(store, &id, B::State::default())
                .await
                .map(drop)
        })
    }

    fn replay<'a>(
        &'a self,
        scope: &Scope,
        id: Arc<str>,
    ) -> BoxFuture<'a, Result<Option<Vec<SessionUpdate>>, StoreError>> {
        let store = sessions(scope, self.agent.name(), self.agent.store());
        Box::pin(async move {
            let session = Session::<B::State>::load(store, &id).await?;
            Ok(session.map(|session| self.bridge.replay(&session.state())))
        })
    }

    fn turn(
        &self,
        shared: Arc<Shared>,
        session_id: agent_client_protocol_schema::v1::SessionId,
        prompt: Vec<ContentBlock>,
        workspace: Workspace,
        token: CancellationToken,
    ) -> BoxFuture<'static, Result<StopReason, Error>> {
        let agent = self.agent.clone();
        let bridge = Arc::clone(&self.bridge);
        Box::pin(async move {
            let input = bridge.input(prompt)?;
            let options = ConnectOptions::new()
                .extension(workspace)
                .extension(shared.rules.scope.clone());
            let conn =
                agent.connect_with(AgentInit::new().resume(session_id.0.to_string()), options);
            let failed = |error: &dyn std::fmt::Display| {
                Error::internal_error().data(format!("the agent failed: {error}"))
            };
            let (tx, mut rx) = conn.into_split();
            if let Err(error) = tx.send(input).await {
                // The agent ended before it took the prompt: its output says why.
                drop(tx);
                return Err(match rx.output().await {
                    Err(error) => failed(&error),
                    Ok(_) => failed(&error),
                });
            }
            let mut responses = rx.responses();
            let client = Client {
                shared: &shared,
                session_id: &session_id,
                token: &token,
            };
            let mut updates = Updates(&*bridge);
            let ended =
                bidi_flow::wire::pump(&mut responses, None, &mut updates, &client, None).await;
            match ended {
                Ended::Done => {}
                Ended::Failed(refusal) => return Err(failed(&refusal)),
                _ => {
                    // Cancelled: the agent saves its session as it stops.
                    drop(responses);
                    tx.close();
                    let _ = rx.output().await;
                    return Ok(StopReason::Cancelled);
                }
            }
            drop(responses);
            tx.close();
            match rx.output().await {
                Ok(_) => Ok(StopReason::EndTurn),
                Err(error) => Err(failed(&error)),
            }
        })
    }
}

/// A bridged agent's chunks as the updates its bridge makes of them.
struct Updates<'a, B>(&'a B);

impl<B: Bridge> Wire for Updates<'_, B> {
    type Event = B::Stream;
    type Output = ();
    type Frames = Shown;

    fn event(&mut self, chunk: B::Stream, out: &mut Shown) {
        out.more = self.0.updates(chunk);
    }

    /// The turn's answer says it failed: nothing to show.
    fn failed(&mut self, _: &str, _: &mut Shown) {}
}
