//! `session/fork` (behind the schema's `unstable_session_fork`): a new session, open on the
//! connection, whose conversation is the source's so far.
//!
//! The fork is a branch in the store: its first snapshot goes on from the source's latest
//! (`Session::fork`) and names it as its parent, so every front end that reads lineage sees
//! where it came from (Genkit's `getSnapshot` of it has the source's snapshot as `parentId`).
//! The two go their own ways from then on. The fork starts in the source's mode with its
//! "always" answers, in the working directory and with the MCP servers the request names; it
//! is not replayed (the client has the conversation). A source whose prompt turn runs is
//! busy; one that does not exist is `session not found`.

use std::sync::Arc;

use agent_client_protocol_schema::v1::{Error, ForkSessionRequest, ForkSessionResponse, SessionId};
use bidi_llm::LlmSession;
use bidi_session::{Session, StoreError};

use super::session::{check_session_params, start_mcp, store_failed};
use super::shared::Slot;
use super::{Backend, Shared, busy, config, sessions};

/// `session/fork`.
///
/// # Errors
///
/// A relative `cwd`, an agent that keeps no conversation of its own to fork (a bridged one), a
/// source that does not exist or whose turn runs, no room for one more session, MCP servers
/// that do not start, or the store failing.
pub(super) async fn fork(
    shared: &Shared,
    request: ForkSessionRequest,
) -> Result<ForkSessionResponse, Error> {
    check_session_params(&request.cwd)?;
    let Backend::Llm(agent) = &shared.agent else {
        return Err(Error::invalid_request()
            .data("this agent's sessions are another program's: they cannot be forked here"));
    };
    let source = &request.session_id;
    let store = sessions(
        &shared.rules.scope,
        agent.agent().name(),
        agent.agent().store(),
    );
    let session = Session::<LlmSession>::load(Arc::clone(&store), &source.0)
        .await
        .map_err(|error| store_failed(&error))?
        .ok_or_else(|| Error::session_not_found(source.clone()))?;
    let (mode, always) = match shared.sessions().get(&source.0) {
        Some(slot) => (Some(slot.mode), slot.always.clone()),
        None => (None, Default::default()),
    };
    let (mode, always) = match mode {
        Some(mode) => (mode, always),
        None => {
            let kept = shared
                .kept(&source.0)
                .await
                .map_err(|error| store_failed(&error))?
                .unwrap_or_default();
            (shared.mode_of(&kept), kept.always.into_iter().collect())
        }
    };
    let place = shared.place(&shared.sessions())?;
    let mut mcp = start_mcp(shared, &request.mcp_servers).await?;
    let id: Arc<str> = Arc::from(bidi_session::new_id());
    let state = session.state();
    let at = session.head().id.clone();
    if let Err(error) = Session::fork(store, &id, &at, state.clone()).await {
        mcp.close().await;
        return Err(match error {
            StoreError::Running { .. } => busy(
                source,
                "a prompt turn runs on it; fork it once the turn ends",
            ),
            error => store_failed(&error),
        });
    }
    let remembered = mode != shared.rules.default_mode || !always.is_empty();
    {
        let mut slot = Slot::new(request.cwd, mode);
        slot.always = always;
        slot.mcp = mcp;
        let mut sessions = shared.sessions();
        sessions.insert(Arc::clone(&id), slot);
        drop(place); // Under the lock: the session is counted once.
    }
    // The fork exists and is open: a record that cannot be written leaves its mode and
    // answers on this connection only, as for a permission answered "always".
    if remembered && let Err(error) = shared.keep(&id).await {
        log!("the fork's mode and answers hold on this connection only: {error}");
    }
    let options = config::options(agent, agent.model_of(&state));
    Ok(ForkSessionResponse::new(SessionId::new(id))
        .modes(shared.modes(mode))
        .config_options(options))
}
