//! The sessions of a connection: `session/new`, `session/load` (replaying the conversation),
//! `session/close` and `session/set_mode`, and what the server keeps of a session besides
//! the agent's state (its mode, the answers that hold for the rest of it).
//!
//! - The sessions live in the agent's store in the scope `acp` (or the one `Server::scope`
//!   names, one `Rules` field read where sessions are created, replayed and connected to).
//!   `Scoped` keys are length-prefixed, so no client id reaches another scope's keys or an
//!   unscoped session.
//! - A session's mode and its "always" answers are a record of the server's own under the same
//!   session id, in a `Scoped` store of scope `bidi-acp` (for the sessions of scope `acp`;
//!   `bidi-acp:{len}:{scope}` for another scope's, so one id in two scopes is two records).
//!   Never written into the agent's state: an execution saves the whole `LlmSession` it
//!   claimed, so a concurrent write there would conflict with it. Client ids cannot reach the
//!   record: they are ids of the clients' scope, whose keys start with a digit.
//! - Past `max_sessions`, `-32603` with `reason: too_many_sessions`: `-32800` (LSP's "request
//!   cancelled") would read as the client's own cancellation. A session being opened counts
//!   from the start of its request, before its MCP servers start, so the requests in flight
//!   cannot overshoot.
//! - `available_commands_update` is sent after the `session/new` or `session/load` answer:
//!   clients drop the updates of a session they do not know yet.
//! - Each prompt turn has a number unique on the connection, so that a turn that ends after
//!   its session was closed and opened again leaves the new session's state alone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_client_protocol_schema::v1::{
    AvailableCommandsUpdate, CloseSessionResponse, CurrentModeUpdate, Error, ErrorCode,
    LoadSessionRequest, LoadSessionResponse, McpServer, NewSessionRequest, NewSessionResponse,
    SessionConfigOption, SessionId, SessionModeState, SessionUpdate, SetSessionModeRequest,
    SetSessionModeResponse,
};
use bidi_agent::{MAX_SESSION_ID_BYTES, Scope};
use bidi_flow::text::cap;
use bidi_llm::{LlmAgent, LlmSession};
use bidi_session::{Scoped, Session, SessionStore, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::history::history;
use super::shared::{Shared, Slot, closed};
use super::{Backend, config};
use crate::codec;
use crate::mcp::Servers;
use crate::policy::{Command, Mode};

/// The scope of the agent's store the server keeps its own records of sessions in (those of
/// the sessions in the default scope; see [`kept_scope`]).
const KEPT_SCOPE: &str = "bidi-acp";

/// The scope of the agent's store the sessions of ACP clients are in unless the server says
/// otherwise (`Server::scope`): an id a client names is a session of this scope only, never a
/// key of another scope's (the server's own records, say) nor of the agent's unscoped sessions.
pub(crate) const SESSION_SCOPE: &str = "acp";

/// The sessions of ACP clients of agent `agent` in its `store`, in `scope`: where its
/// connections, which carry the scope, open them.
pub(crate) fn sessions(
    scope: &Scope,
    agent: &str,
    store: &Arc<dyn SessionStore>,
) -> Arc<dyn SessionStore> {
    Arc::new(scope.sessions(agent, Arc::clone(store)))
}

/// The scope of the server's own records of the sessions in `scope`: [`KEPT_SCOPE`] for the
/// default scope's, one of their own for each other scope's (the same id in two scopes is two
/// sessions, whose modes and answers are not one record). Every name is distinct: `Scoped`
/// prefixes it with its length, and the scope's length precedes the scope.
fn kept_scope(scope: &Scope) -> String {
    match scope.as_str() {
        SESSION_SCOPE => KEPT_SCOPE.to_owned(),
        other => format!("{KEPT_SCOPE}:{}:{other}", other.len()),
    }
}

/// The error of a valid request on a session that cannot take it now (a prompt turn or a
/// `session/load` runs on it): the request was well formed, so it is no invalid request; it
/// did not run, and may be sent again once the session is free.
pub(crate) fn busy(session_id: &SessionId, why: &str) -> Error {
    Error::new(
        ErrorCode::InternalError.into(),
        format!("The session is busy: {why}"),
    )
    .data(json!({ "reason": "session_busy", "sessionId": session_id }))
}

/// What the server keeps of a session in the agent's store: its mode, the permission answers
/// that hold for the rest of it, and its title and working directory (what `session/list`
/// shows). It is written when one of them changes, not for every session: a session of the
/// store is a session of the store's bound (`MemoryStore::with_max_sessions`), so a record per
/// session would halve how many it holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Kept {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mode: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) always: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) cwd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) title: Option<String>,
}

impl Shared {
    /// Where the server keeps what it knows of a session besides the agent's state: the
    /// agent's store, in a scope of the server's own (one per scope of the clients' sessions).
    pub(super) fn kept_store(&self) -> Arc<dyn SessionStore> {
        let scope = kept_scope(&self.rules.scope);
        Arc::new(Scoped::new(Arc::clone(self.agent.store()), scope))
    }

    /// What the server keeps of session `id`, if anything.
    pub(super) async fn kept(&self, id: &str) -> Result<Option<Kept>, StoreError> {
        Ok(Session::<Kept>::load(self.kept_store(), id)
            .await?
            .map(|session| session.state()))
    }

    /// Saves the session's mode and the answers that hold for the rest of it, so that a
    /// `session/load` (after a restart, say) finds them.
    pub(crate) async fn keep(&self, id: &Arc<str>) -> Result<(), StoreError> {
        let (mode, always, cwd) = {
            let sessions = self.sessions();
            let Some(slot) = sessions.get(id) else {
                return Ok(());
            };
            let mode = self.rules.modes.get(slot.mode);
            let always = slot.always.iter().map(|(k, v)| (k.clone(), *v)).collect();
            (
                mode.map(|mode| mode.id().to_owned()),
                always,
                slot.cwd.clone(),
            )
        };
        self.amend(id, |kept| {
            kept.mode.clone_from(&mode);
            kept.always.clone_from(&always);
            kept.cwd = Some(cwd.clone());
        })
        .await
    }

    /// Changes what the server keeps of session `id` with `change`, the rest kept as it was:
    /// one write, none if nothing changes.
    pub(super) async fn amend(
        &self,
        id: &str,
        change: impl Fn(&mut Kept),
    ) -> Result<(), StoreError> {
        let store = self.kept_store();
        let session = match Session::<Kept>::load(Arc::clone(&store), id).await? {
            Some(session) => session,
            None => {
                let mut kept = Kept::default();
                change(&mut kept);
                match Session::create(Arc::clone(&store), id, kept).await {
                    Ok(_) => return Ok(()),
                    // Another writer made it first: change theirs.
                    Err(error) if error.is_conflict() => {
                        Session::load_or_create(store, id, Kept::default).await?
                    }
                    Err(error) => return Err(error),
                }
            }
        };
        let mut kept = session.state();
        let before = kept.clone();
        change(&mut kept);
        if kept == before {
            return Ok(());
        }
        session.update(|state| change(state)).await
    }

    /// The mode `kept` names, as an index into the server's modes: the default mode if it
    /// names none, or one the server no longer has.
    pub(super) fn mode_of(&self, kept: &Kept) -> usize {
        kept.mode
            .as_deref()
            .and_then(|kept| self.rules.modes.iter().position(|mode| mode.id() == kept))
            .unwrap_or(self.rules.default_mode)
    }

    /// Announces the server's commands for a session just opened.
    pub(super) async fn announce(&self, session_id: &SessionId) {
        if self.rules.commands.is_empty() {
            return;
        }
        let commands = self.rules.commands.iter().map(Command::wire).collect();
        let update = SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands));
        let _ = self.update(session_id, update).await;
    }

    /// The modes, as `session/new`, `session/load` and `session/resume` answer them.
    pub(super) fn modes(&self, current: usize) -> Option<SessionModeState> {
        let mode = self.rules.modes.get(current)?;
        Some(SessionModeState::new(
            mode.id().to_owned(),
            self.rules.modes.iter().map(Mode::wire).collect::<Vec<_>>(),
        ))
    }
}

/// Session `id` of `agent`, in the clients' scope of its store, if it exists.
///
/// # Errors
///
/// The store failed.
pub(super) async fn stored_llm(
    shared: &Shared,
    agent: &LlmAgent,
    id: &str,
) -> Result<Option<Session<LlmSession>>, Error> {
    let store = sessions(
        &shared.rules.scope,
        agent.agent().name(),
        agent.agent().store(),
    );
    Session::load(store, id)
        .await
        .map_err(|error| store_failed(&error))
}

/// `cwd` must be absolute.
pub(super) fn check_session_params(cwd: &std::path::Path) -> Result<(), Error> {
    if !cwd.is_absolute() {
        return Err(codec::invalid_params(
            "cwd",
            format!(
                "`{}` is not an absolute path",
                cap(&cwd.display().to_string())
            ),
        ));
    }
    Ok(())
}

pub(super) async fn new_session(
    shared: &Shared,
    request: NewSessionRequest,
) -> Result<NewSessionResponse, Error> {
    check_session_params(&request.cwd)?;
    let place = shared.place(&shared.sessions())?;
    let mut mcp = start_mcp(shared, &request.mcp_servers).await?;
    let id: Arc<str> = Arc::from(bidi_session::new_id());
    let created = match &shared.agent {
        Backend::Llm(agent) => Session::create(
            sessions(
                &shared.rules.scope,
                agent.agent().name(),
                agent.agent().store(),
            ),
            &id,
            LlmSession::default(),
        )
        .await
        .map(drop),
        Backend::Bridged(turns) => turns.create(&shared.rules.scope, Arc::clone(&id)).await,
    };
    if let Err(error) = created {
        mcp.close().await;
        return Err(store_failed(&error));
    }
    let mode = shared.rules.default_mode;
    let mut slot = Slot::new(request.cwd, mode);
    slot.mcp = mcp;
    {
        let mut sessions = shared.sessions();
        sessions.insert(Arc::clone(&id), slot);
        drop(place); // Under the lock: the session is counted once.
    }
    let options = match &shared.agent {
        Backend::Llm(agent) => config::options(agent, agent.model_of(&LlmSession::default())),
        Backend::Bridged(_) => None,
    };
    Ok(NewSessionResponse::new(SessionId::new(id))
        .modes(shared.modes(mode))
        .config_options(options))
}

/// Starts the MCP servers the client named for a session.
pub(super) async fn start_mcp(shared: &Shared, servers: &[McpServer]) -> Result<Servers, Error> {
    Servers::start(
        servers,
        shared.rules.mcp_start_timeout,
        shared.rules.mcp_call_timeout,
    )
    .await
}

pub(super) async fn load_session(
    shared: &Shared,
    request: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    let LoadSessionRequest {
        session_id,
        cwd,
        mcp_servers,
        ..
    } = request;
    let opened = open_stored(shared, session_id, cwd, &mcp_servers, true).await?;
    Ok(LoadSessionResponse::new()
        .modes(shared.modes(opened.mode))
        .config_options(opened.options))
}

/// Opens stored session `session_id` on the connection, in `cwd` with `servers`, its
/// conversation replayed first if `replay` (`session/load`; `session/resume` does not): its
/// mode and options.
pub(super) async fn open_stored(
    shared: &Shared,
    session_id: SessionId,
    cwd: PathBuf,
    servers: &[McpServer],
    replay: bool,
) -> Result<Opened, Error> {
    check_session_params(&cwd)?;
    if session_id.0.len() > MAX_SESSION_ID_BYTES {
        return Err(codec::invalid_params(
            "sessionId",
            format!(
                "a session id is at most {MAX_SESSION_ID_BYTES} bytes long, not {}",
                session_id.0.len()
            ),
        ));
    }
    let id = Arc::clone(&session_id.0);
    // A session open here already stays open, its prompt turns refused until the load is done;
    // another needs a place.
    let (open, place) = {
        let mut sessions = shared.sessions();
        match sessions.get_mut(&id) {
            Some(slot) if slot.running.is_some() || slot.loading => {
                return Err(busy(
                    &session_id,
                    "a prompt turn or another load runs on it; wait for its answer",
                ));
            }
            Some(slot) => {
                slot.loading = true;
                (true, None)
            }
            None => (false, Some(shared.place(&sessions)?)),
        }
    };
    let loaded = load(shared, &session_id, cwd, servers, (open, place), replay).await;
    if let Some(slot) = shared.sessions().get_mut(&id) {
        slot.loading = false;
    }
    loaded
}

/// Replays session `session_id` (if `replay`) and opens it with its MCP servers (in the place
/// `opening` holds, unless it is open here already, as `opening` says too); the session's
/// mode and options.
async fn load(
    shared: &Shared,
    session_id: &SessionId,
    cwd: PathBuf,
    servers: &[McpServer],
    (open, place): (bool, Option<Place<'_>>),
    replay: bool,
) -> Result<Opened, Error> {
    let id = Arc::clone(&session_id.0);
    // The conversation to replay, and the session's options (an `LlmAgent`'s model).
    let loaded = match &shared.agent {
        Backend::Llm(agent) => stored_llm(shared, agent, &id).await?.map(|session| {
            let state = session.state();
            let updates = match replay {
                true => history(&state.messages, &shared.rules),
                false => Vec::new(),
            };
            (updates, config::options(agent, agent.model_of(&state)))
        }),
        Backend::Bridged(turns) if replay => turns
            .replay(&shared.rules.scope, Arc::clone(&id))
            .await
            .map_err(|error| store_failed(&error))?
            .map(|updates| (updates, None)),
        Backend::Bridged(_) => {
            let store = sessions(
                &shared.rules.scope,
                shared.agent.name(),
                shared.agent.store(),
            );
            let head = store
                .load(&id)
                .await
                .map_err(|error| store_failed(&error))?;
            head.map(|_| (Vec::new(), None))
        }
    };
    let (updates, options) = loaded.ok_or_else(|| Error::session_not_found(session_id.clone()))?;
    let kept = if open {
        None // This connection's own mode and answers are the latest.
    } else {
        shared
            .kept(&id)
            .await
            .map_err(|error| store_failed(&error))?
    };
    let mut mcp = start_mcp(shared, servers).await?;
    for update in updates {
        if shared.update(session_id, update).await.is_err() {
            mcp.close().await;
            return Err(closed());
        }
    }
    let mode = open_slot(shared, &id, cwd, kept, &mut mcp, place);
    mcp.close().await; // The servers it had, or, without room for it, those just started.
    Ok(Opened {
        mode: mode?,
        options,
    })
}

/// A stored session opened on the connection: its mode and its configuration options.
pub(super) struct Opened {
    pub(super) mode: usize,
    pub(super) options: Option<Vec<SessionConfigOption>>,
}

/// Puts loaded session `id` on the connection with the MCP servers in `mcp` (left there: the
/// servers it had if it was open here, to be closed) in `place`, or, if it was open here and
/// closed while it loaded, in a place taken now; its mode.
fn open_slot(
    shared: &Shared,
    id: &Arc<str>,
    cwd: PathBuf,
    kept: Option<Kept>,
    mcp: &mut Servers,
    place: Option<Place<'_>>,
) -> Result<usize, Error> {
    let mut sessions = shared.sessions();
    let place = match place {
        None if !sessions.contains_key(id) => match shared.place(&sessions) {
            Ok(place) => Some(place),
            Err(error) => return Err(error),
        },
        place => place,
    };
    let slot = sessions.entry(Arc::clone(id)).or_insert_with(|| {
        let mut slot = Slot::new(cwd.clone(), shared.rules.default_mode);
        if let Some(kept) = kept {
            slot.mode = shared.mode_of(&kept);
            slot.always = kept.always.into_iter().collect();
        }
        slot
    });
    slot.cwd = cwd;
    // Its connection has the servers and the directory it had: the next prompt opens one on
    // what was loaded. Dropping it cancels it, without waiting.
    drop(shared.take_agent(slot));
    drop(place); // Under the lock: the session is counted once.
    std::mem::swap(&mut slot.mcp, mcp);
    Ok(slot.mode)
}

/// A place taken for one more session on the connection: counted with the open sessions from
/// the start of its `session/new` or `session/load` (before its MCP servers start) until it
/// is open, dropped under the sessions' lock right after it is put there, or until its opening
/// fails (dropped anywhere: a place given back only lowers the count).
pub(super) struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// A place for one more session, if the connection has room for it; `sessions` are the
    /// connection's, locked.
    pub(super) fn place(&self, sessions: &HashMap<Arc<str>, Slot>) -> Result<Place<'_>, Error> {
        let max = self.rules.max_sessions;
        if sessions.len() + self.opening.load(Ordering::Relaxed) >= max {
            return Err(too_many_sessions(max));
        }
        self.opening.fetch_add(1, Ordering::Relaxed);
        Ok(Place(&self.opening))
    }
}

/// The error of a `session/new` or `session/load` past the bound on open sessions: like a busy
/// session's, a valid request that may be sent again (once a session is closed).
fn too_many_sessions(max: usize) -> Error {
    Error::new(
        ErrorCode::InternalError.into(),
        format!(
            "Too many sessions open on this connection: at most {max}; close one with \
             session/close to open another"
        ),
    )
    .data(json!({ "reason": "too_many_sessions", "maxSessions": max }))
}

pub(super) fn store_failed(error: &StoreError) -> Error {
    Error::internal_error().data(format!("the session store failed: {error}"))
}

/// Closes a session on this connection: its running prompt turn is cancelled (it answers
/// `cancelled`), its agent connection and its MCP servers are stopped, and it is forgotten
/// here (not in the store: a `session/load` opens it again).
pub(super) async fn close_session(
    shared: &Shared,
    session_id: &SessionId,
) -> Result<CloseSessionResponse, Error> {
    let Some(mut slot) = shared.sessions().remove(&session_id.0) else {
        return Err(no_session(session_id));
    };
    if let Some(running) = &slot.running {
        running.cancel();
    }
    if let Some(agent) = shared.take_agent(&mut slot) {
        agent.stop().await;
    }
    slot.mcp.close().await;
    Ok(CloseSessionResponse::new())
}

/// Switches a session's mode: its next prompt turn runs in it.
pub(super) async fn set_mode(
    shared: &Shared,
    request: SetSessionModeRequest,
) -> Result<SetSessionModeResponse, Error> {
    let Some(mode) = shared
        .rules
        .modes
        .iter()
        .position(|mode| mode.id() == &*request.mode_id.0)
    else {
        let known: Vec<&str> = shared.rules.modes.iter().map(Mode::id).collect();
        return Err(codec::invalid_params(
            "modeId",
            format!(
                "unknown mode `{}`; this agent's modes: {}",
                cap(&request.mode_id.0),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        ));
    };
    {
        let mut sessions = shared.sessions();
        let Some(slot) = sessions.get_mut(&request.session_id.0) else {
            return Err(no_session(&request.session_id));
        };
        slot.mode = mode;
    }
    shared
        .keep(&request.session_id.0)
        .await
        .map_err(|error| store_failed(&error))?;
    let update = SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(request.mode_id));
    if shared.update(&request.session_id, update).await.is_err() {
        return Err(closed());
    }
    Ok(SetSessionModeResponse::new())
}

pub(crate) fn no_session(session_id: &SessionId) -> Error {
    Error::new(
        ErrorCode::ResourceNotFound.into(),
        "no such session on this connection: create it with session/new or open it with session/load",
    )
    .data(json!({ "sessionId": session_id }))
}
