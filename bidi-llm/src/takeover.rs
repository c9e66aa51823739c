//! Turns that outlive their process: an execution no client waits on is taken over by another
//! process serving the agent on the same store, should its own die.
//!
//! An execution on a connection marked [`Resumable`] (a detached turn: an HTTP `execute` with
//! `detach`, a Genkit turn the client detached, an A2A task answered at once, a streamed turn
//! that runs to its end whoever reads it) writes its input into its lease
//! ([`Lease::resume`](bidi_session::Lease::resume)). Its process renews the lease every third of
//! its term. Should the process die, the lease goes *stale* once it has not been renewed for two
//! thirds of its term; another process whose agent of the same name
//! [supervises](LlmAgent::supervise) the store then takes the turn over while the lease still
//! holds ([`SessionStore::take_over`](bidi_session::SessionStore::take_over)), and runs it again
//! from its start: from the session as it was before the turn, with the same input. Every wire
//! reads the turn as running throughout, then as it ended. Its first process, should it still
//! run after all (a long pause), is refused at its next renewal and stops.
//!
//! # What runs twice
//!
//! A turn taken over starts again from the state before it, so whatever its first run did
//! before its process died is done again: its **model calls** (paid for twice) and its **local
//! tools' calls** (a booking made, an email sent). Nothing its first run produced is kept: a
//! turn writes the session only as it ends. What it streamed went to the readers of the process
//! that died; readers of the store see it run, then end.
//!
//! An agent whose turns must not run twice says so with
//! [`LlmAgentBuilder::at_most_once`](crate::LlmAgentBuilder::at_most_once): its detached turns
//! keep no input in their lease, and one whose process dies ends `expired` when its lease
//! lapses, the session going on from the state before it, as an attached turn does (its client
//! saw it fail). A connection with a [`Policy`] or a [`HostModel`] is never resumable: what
//! they lend lives in that connection alone.

use std::time::Duration;

use bidi_agent::AgentInit;
use bidi_core::{ActionContext, ConnectOptions};
use bidi_session::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::LlmAgent;
use crate::execute::execute;
use crate::host::HostModel;
use crate::policy::Policy;
use crate::session::TurnInput;
use crate::turn::Config;

/// Marks a connection whose executions no client waits on (detached turns): should this
/// process die while one runs, another process serving the agent on the same store runs it
/// again from its start (see the [module](self)), unless the agent is
/// [at most once](crate::LlmAgentBuilder::at_most_once). Attach it when connecting, with
/// [`ConnectOptions::extension`].
///
/// ```
/// use bidi_core::ConnectOptions;
/// use bidi_llm::takeover::Resumable;
///
/// let options = ConnectOptions::new().extension(Resumable);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Resumable;

/// What a connection that takes a stale turn over continues: the turn's snapshot, and the owner
/// of its stale lease.
#[derive(Debug, Clone)]
pub(crate) struct TakeOver {
    pub(crate) snapshot_id: String,
    pub(crate) from: String,
}

/// What a resumable execution's lease keeps: its agent and its input.
#[derive(Debug, Serialize, Deserialize)]
struct Rerun {
    agent: String,
    input: TurnInput,
}

/// What the lease of an execution of `input` on `ctx`'s connection keeps for another process,
/// if the execution may be taken over.
pub(crate) fn resume(config: &Config, ctx: &ActionContext, input: &TurnInput) -> Option<Value> {
    let extensions = ctx.extensions();
    if config.at_most_once || extensions.get::<Resumable>().is_none() {
        return None;
    }
    if extensions.get::<Policy>().is_some() || extensions.get::<HostModel>().is_some() {
        return None;
    }
    let rerun = Rerun {
        agent: config.name.clone(),
        input: input.clone(),
    };
    // Strings, numbers and JSON values: it always makes JSON.
    serde_json::to_value(rerun).ok()
}

impl LlmAgent {
    /// Takes over the stale turns of this agent in its store (those whose process stopped
    /// renewing their lease: see the [module](self)) and runs each in a task of its own, its
    /// events going nowhere. Answers how many it found; a turn another process took over first
    /// is left to it.
    ///
    /// # Errors
    ///
    /// The store's, reading the stale turns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the turns found are taken over in their own tasks.
    pub async fn take_over(&self) -> Result<usize, StoreError> {
        let name = &self.config().name;
        let mut found = 0;
        for entry in self.agent().store().stale().await? {
            let Some(lease) = entry.lease else { continue };
            let rerun = lease
                .resume
                .map(|resume| serde_json::from_value::<Rerun>(*resume));
            let Some(Ok(rerun)) = rerun.filter(|_| !self.agent().is_client_managed()) else {
                continue;
            };
            if rerun.agent != *name {
                continue;
            }
            let take_over = TakeOver {
                snapshot_id: entry.id,
                from: lease.owner,
            };
            let options = ConnectOptions::new().extension(take_over);
            let mut conn = self.connect_with(AgentInit::new().resume(entry.session_id), options);
            tokio::spawn(async move {
                // How it ends is in the store, for every wire to read.
                if let Ok(run) = execute(&mut conn, rerun.input).await {
                    let _ = run.result().await;
                }
                conn.close();
                let _ = conn.output().await;
            });
            found += 1;
        }
        Ok(found)
    }

    /// Takes over this agent's stale turns as they come, for ever: every sixth of its lease's
    /// term, [`take_over`](Self::take_over). A store that fails is asked again at the next
    /// round. `bidi_http`'s server runs it for each agent it serves; run it yourself beside
    /// an agent you serve otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it stops looking; the turns taken over run on.
    pub async fn supervise(&self) {
        let mut rounds = tokio::time::interval(round(self.config().lease));
        rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            rounds.tick().await;
            let _ = self.take_over().await;
        }
    }
}

/// How often a supervisor looks for stale turns: a sixth of the lease's term, so a stale turn
/// is found with half of the third it has left before its lease lapses.
fn round(term: Duration) -> Duration {
    term / 6
}
