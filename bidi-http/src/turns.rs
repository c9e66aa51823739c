//! Streamed agent turns that outlive their client: each runs through a [`Tee`] kept in the
//! server's [`Tees`] under a [`TurnKey`] (the caller's scope, the agent, the turn's id), runs to
//! its end whoever reads it, and is read again from its first byte by whichever wire looks it
//! up: Genkit's agent wire by its `x-genkit-stream-id`, A2A's `SubscribeToTask` by its task id.
//! Where the store keeps streams, a turn's writes are published under its snapshot id, so a
//! reader in another process follows it too (`tee::relay`).

use std::sync::Arc;

use axum::body::Body;
use bidi_agent::AgentInit;
use bidi_llm::peer::Started;
use bidi_llm::{LlmAgent, LlmSession, TurnInput};
use bidi_session::{Scoped, SessionStore as _, Status};
use tokio::sync::oneshot;

use crate::agent::{self, HttpWire};
use crate::codec::Failure;
use crate::tee::relay::Publisher;
use crate::tee::{Tee, Tees};
use crate::{Host, Identity};

/// A streamed turn, as its identity's scope, its agent and its id: what keys its [`Tee`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TurnKey {
    scope: String,
    agent: String,
    id: String,
}

impl TurnKey {
    /// The turn `id` of `agent`, in `identity`'s scope.
    #[must_use]
    pub fn new(identity: Option<&Identity>, agent: &str, id: &str) -> Self {
        Self {
            scope: crate::scope(identity).as_str().to_owned(),
            agent: agent.to_owned(),
            id: id.to_owned(),
        }
    }
}

/// Starts one streamed turn of `agent` (served as `name`) through a tee registered in `tees`:
/// how it started, its id (the turn's snapshot id, or for an agent whose client keeps its
/// state, a fresh one), and its first client's body.
///
/// # Errors
///
/// The turn's refusal, as [`agent::start`]'s.
pub async fn start<W: HttpWire>(
    tees: &Arc<Tees<TurnKey>>,
    host: &Host,
    agent: (&LlmAgent, &str),
    turn: (AgentInit<LlmSession>, TurnInput),
    identity: Option<&Identity>,
    wire: W,
) -> Result<(Started, String, Body), Failure> {
    start_as(tees, host, agent, turn, identity, wire, None).await
}

/// [`start`], the turn's stream found under `id` rather than the turn's own id: a wire whose
/// clients name a run of turns by the first one's id (an A2A task that took several inputs)
/// keys each turn of the run by it. Answers `id` as the turn's id.
///
/// # Errors
///
/// The turn's refusal, as [`agent::start`]'s.
pub async fn start_as<W: HttpWire>(
    tees: &Arc<Tees<TurnKey>>,
    host: &Host,
    (agent, name): (&LlmAgent, &str),
    (init, input): (AgentInit<LlmSession>, TurnInput),
    identity: Option<&Identity>,
    wire: W,
    id: Option<&str>,
) -> Result<(Started, String, Body), Failure> {
    let client = agent.agent().is_client_managed();
    let (snapshot, started) = oneshot::channel();
    let publisher = if client {
        None // Its sessions live and die with the connection: no process but this one knows it.
    } else {
        Publisher::start(Arc::clone(agent.agent().store()), started)
    };
    let (tee, reader) = Tee::new(Arc::clone(tees), publisher);
    let stream = tee.stream();
    let started = agent::spawn(host, agent, init, input, identity, wire, tee).await?;
    let own = match started.snapshot_id.as_ref().filter(|_| !client) {
        Some(own) => {
            // Published under the turn's own snapshot: readers elsewhere find it from the store.
            let _ = snapshot.send(own.clone());
            own.clone()
        }
        None => bidi_session::new_id(),
    };
    let id = id.map_or(own, str::to_owned);
    tees.insert(TurnKey::new(identity, name, &id), &stream);
    Ok((started, id, reader.body()))
}

/// Aborts the turn of snapshot `id` of `store` (an agent's sessions as its caller sees them),
/// in whichever process runs it: the status the snapshot had, none if there is no such
/// snapshot. A pending snapshot is aborted at once, and its turn stops at its next lease
/// renewal; any other is left as it is.
///
/// # Errors
///
/// The store's, as a 500.
pub async fn abort(store: &Scoped, id: &str) -> Result<Option<Status>, Failure> {
    store
        .abort(id)
        .await
        .map_err(|error| agent::store_failed(&error))
}
