//! A session's agent connection, kept from one prompt turn to the next: each prompt is one more
//! input on it, so a turn starts from the session the connection holds instead of loading it
//! from the store, and costs the same on a long session as on a new one.
//!
//! A session shared with other front ends may take their turns between two of its prompts,
//! in this process or another on the store. The connection's next execution claims the
//! session by compare-and-swap from the head it cached, finds that the head moved, reads the
//! session again and starts from there (`bidi_llm`'s claim), so the other turns are neither
//! lost nor overwritten, and the kept connection needs no check of its own.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use agent_client_protocol_schema::v1::SessionId;
use bidi_agent::{AgentInit, AgentOutput};
use bidi_core::{ActionTask, ConnectOptions, Connection, Driver};
use bidi_llm::{AgentEvent, LlmAgent, LlmSession, TurnInput};
use opentelemetry::trace::TraceId;
use tokio_util::sync::CancellationToken;

use super::{Asker, Open, policy};
use crate::editor::Offered;
use crate::policy::Permission;
use crate::server::{Shared, Slot};

/// A connection of the served [`LlmAgent`].
pub(super) type AgentConnection = Connection<TurnInput, AgentOutput<LlmSession, u32>, AgentEvent>;

/// A session's agent connection, open on its session (`AgentInit::resume`) with the policy of
/// the session's mode and MCP servers.
///
/// Its session's slot keeps it while no prompt turn runs (unless the server keeps more recently
/// used ones: see [`Idle`]); the running turn holds it otherwise, and gives it back when it
/// ends well. A turn cancelled (`session/cancel`, the client gone)
/// or whose connection failed drops it instead, and the next prompt opens another. A
/// `session/set_mode` makes the next prompt open another in the new mode (the policy is the
/// connection's); a `session/load` and a `session/close` drop it. Dropping it cancels the
/// connection: the agent function, which waits for its next input, ends.
pub(crate) struct Live {
    conn: AgentConnection,
    /// The agent's task, polled by the turn running on the connection; `None` once the agent
    /// function ended.
    task: Option<ActionTask>,
    /// The gate of the connection's policy, which asks for the turn running on it.
    pub(super) gate: Gate,
    /// The mode the policy was made for: an index into the server's modes.
    mode: usize,
    /// The trace of the prompt that opened it (its `_meta`'s `traceparent`), whose trace its
    /// turns are in.
    trace: Option<TraceId>,
    /// When its slot kept it last: its place in [`Idle`].
    kept: u64,
}

impl Live {
    /// Opens session `session_id`'s connection, in the mode `mode` with `tools` (the
    /// editor's and its MCP servers'), relative paths against `cwd`, in the caller's trace
    /// `trace` (the current context's, where its span starts).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (as [`LlmAgent::connect_with`]).
    pub(super) fn open(
        shared: &Arc<Shared>,
        agent: &LlmAgent,
        session_id: &SessionId,
        mode: usize,
        trace: Option<TraceId>,
        cwd: PathBuf,
        tools: Offered,
    ) -> Self {
        let rules = shared.rules.modes.get(mode);
        let gate = Gate {
            shared: Arc::downgrade(shared),
            session_id: session_id.clone(),
            cwd,
            permission: rules.map_or(Permission::Ask, |mode| mode.permission),
            asks: tools.asks.into(),
            current: Arc::default(),
        };
        let mut policy = policy(gate.clone(), rules);
        for tool in tools.tools {
            policy = policy.tool(tool);
        }
        let driver = Driver::new();
        let options = ConnectOptions::new()
            .driver(&driver)
            .extension(policy)
            .extension(shared.rules.scope.clone());
        let init = AgentInit::new().resume(session_id.0.to_string());
        let conn = agent.connect_with(init, options);
        Self {
            conn,
            task: driver.take(),
            gate,
            mode,
            trace,
            kept: 0,
        }
    }

    /// Whether a prompt turn in mode `mode`, of a caller in the trace `trace`, may run on it:
    /// it was opened in that mode and trace (a turn is in its connection's trace), and it
    /// still takes inputs.
    pub(super) fn fits(&self, mode: usize, trace: Option<TraceId>) -> bool {
        self.mode == mode && self.trace == trace && !self.conn.is_finished()
    }

    /// The prompt turn about to run on it: the gate asks for that turn (its cancellation, the
    /// calls it reached).
    pub(super) fn begin(&self, token: CancellationToken, open: Arc<Open>) {
        *self.gate.current() = Current { token, open };
    }

    /// What `work` does with the connection, the agent run beside it in the same task: polled
    /// whenever the task wakes, whatever `work` waits on (the client's writer, an answer), as
    /// it would run in a task of its own, but with no hand-off between tasks and no other
    /// thread woken. Between two turns nothing runs it: the agent function waits for its next
    /// input.
    pub(super) async fn beside<'a, T, F>(
        &'a mut self,
        work: impl FnOnce(&'a mut AgentConnection) -> F,
    ) -> T
    where
        F: Future<Output = T> + 'a,
    {
        bidi_core::beside(&mut self.task, work(&mut self.conn)).await
    }

    /// Cancels the connection and waits until nothing of its agent function runs any more.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the wait only: the connection is cancelled already.
    pub(crate) async fn stop(mut self) {
        self.conn.cancel();
        self.beside(|conn| conn.done()).await;
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Nobody runs the agent any more: a task of its own lets it end (the connection is
        // cancelled as it drops), as it would have in a task of its own from the start.
        if let Some(task) = self.task.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            drop(runtime.spawn(task));
        }
    }
}

impl fmt::Debug for Live {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("conn", &self.conn)
            .field("mode", &self.mode)
            .field("trace", &self.trace)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

/// The gate of a connection's policy: it asks the client for the prompt turn running on the
/// connection. It holds the server weakly, since the server holds the connection.
#[derive(Clone)]
pub(super) struct Gate {
    shared: Weak<Shared>,
    session_id: SessionId,
    cwd: PathBuf,
    /// The connection's mode's way with the tools that need permission.
    permission: Permission,
    /// The connection's own tools that need permission (the editor's that change things).
    asks: Arc<[&'static str]>,
    /// The turn running on the connection.
    current: Arc<Mutex<Current>>,
}

/// The prompt turn running on a connection, as its gate sees it.
#[derive(Debug, Clone, Default)]
struct Current {
    token: CancellationToken,
    /// The tool calls the turn reached and showed.
    open: Arc<Open>,
}

impl Gate {
    fn current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What asks for the turn running now; `None` once the server is gone.
    pub(super) fn asker(&self) -> Option<Asker> {
        self.shared.upgrade().map(|shared| self.bind(shared))
    }

    /// What asks for the turn running now, on `shared`, the server's.
    pub(super) fn bind(&self, shared: Arc<Shared>) -> Asker {
        let Current { token, open } = self.current().clone();
        Asker {
            shared,
            session_id: self.session_id.clone(),
            token,
            cwd: self.cwd.clone(),
            open,
            permission: self.permission,
            asks: Arc::clone(&self.asks),
        }
    }
}

/// The sessions whose slot keeps their agent connection while no prompt turn runs, least
/// recently used first: at most the server's `max_idle_agent_connections` of them, so that
/// the connections (each a task, and its session's state in memory) of the sessions a client
/// no longer prompts do not pile up.
#[derive(Debug, Default)]
pub(crate) struct Idle {
    /// The session of each connection kept, by when it was kept.
    order: BTreeMap<u64, Arc<str>>,
    /// The last tick given.
    tick: u64,
}

impl Shared {
    /// Locked after the sessions, never before.
    fn idle(&self) -> MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the agent connection `slot` keeps, if any.
    pub(crate) fn take_agent(&self, slot: &mut Slot) -> Option<Live> {
        let live = slot.agent.take()?;
        self.idle().order.remove(&live.kept);
        Some(live)
    }

    /// Takes the agent connection every session keeps.
    pub(crate) fn take_agents(&self, sessions: &mut HashMap<Arc<str>, Slot>) -> Vec<Live> {
        self.idle().order.clear();
        sessions
            .values_mut()
            .filter_map(|slot| slot.agent.take())
            .collect()
    }

    /// Has session `id` (in `sessions`, locked) keep `live` as the most recently used agent
    /// connection. Answers the connection no session keeps, to drop: past the bound, the least
    /// recently used one; `live` itself if the session is gone or the bound is 0.
    pub(crate) fn keep_agent(
        &self,
        sessions: &mut HashMap<Arc<str>, Slot>,
        id: &Arc<str>,
        mut live: Live,
    ) -> Option<Live> {
        let max = self.rules.max_idle_agents;
        let Some(slot) = sessions.get_mut(id).filter(|_| max > 0) else {
            return Some(live);
        };
        let mut idle = self.idle();
        idle.tick += 1;
        live.kept = idle.tick;
        idle.order.insert(live.kept, Arc::clone(id));
        slot.agent = Some(live);
        if idle.order.len() <= max {
            return None;
        }
        let (kept, oldest) = idle.order.pop_first()?;
        let slot = sessions.get_mut(&oldest)?;
        match &slot.agent {
            Some(live) if live.kept == kept => slot.agent.take(),
            _ => None,
        }
    }
}
