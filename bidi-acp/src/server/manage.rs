//! The sessions of the store, beyond those open on this connection: `session/list`,
//! `session/resume`, `session/delete`, and (behind the schema's unstable features)
//! `session/status` and `session/set_title`.
//!
//! - A session listed is one of the clients' scope in the agent's store (the scope
//!   `Server::scope` names), whoever made it: another connection, another process, another
//!   front end sharing the scope. Its working directory is the one it has on this connection if
//!   it is open here, else the server's record of it (kept with its mode, its permission
//!   answers and its title: written when one of those changes, not for every session, since
//!   each record counts against the store's bound), else the server's own working directory,
//!   where an editor starts its agent. Its title is the record's, its `updatedAt` its latest
//!   turn's. Sessions are listed by id, a page of [`PAGE`] at a time; the cursor is the last
//!   id of the page before, as hex.
//! - `session/resume` opens a stored session as `session/load` does, without replaying its
//!   conversation.
//! - `session/delete` closes the session here if it is open, then removes it from the store
//!   with the server's record of it. A connection that has it open elsewhere finds it gone at
//!   its next prompt.
//! - `session/status` says `open` for a session open on this connection, `saved` for one of
//!   the store (this server knows no other connection's sessions).

use std::path::PathBuf;

use agent_client_protocol_schema::v1::{
    DeleteSessionRequest, DeleteSessionResponse, Error, ListSessionsRequest, ListSessionsResponse,
    ResumeSessionRequest, ResumeSessionResponse, SessionId, SessionInfo,
};
use bidi_flow::text::{hex, unhex};
use bidi_session::SessionStore as _;

use super::session::{open_stored, store_failed};
use super::{Shared, sessions};
use crate::codec;

/// How many sessions a `session/list` page holds.
pub(super) const PAGE: usize = 100;

/// `session/list`: a page of the scope's stored sessions.
pub(super) async fn list(
    shared: &Shared,
    request: ListSessionsRequest,
) -> Result<ListSessionsResponse, Error> {
    if let Some(cwd) = &request.cwd
        && !cwd.is_absolute()
    {
        return Err(codec::invalid_params(
            "cwd",
            "a working directory is an absolute path",
        ));
    }
    let after = match &request.cursor {
        Some(cursor) => Some(cursor_id(cursor).ok_or_else(|| {
            codec::invalid_params("cursor", "not a cursor of this agent's: send `nextCursor`")
        })?),
        None => None,
    };
    let store = sessions(
        &shared.rules.scope,
        shared.agent.name(),
        shared.agent.store(),
    );
    let ids = store.list().await.map_err(|error| store_failed(&error))?;
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let mut page = Vec::new();
    let mut more = false;
    for id in ids
        .into_iter()
        .filter(|id| after.as_ref().is_none_or(|after| id > after))
    {
        let kept = shared
            .kept(&id)
            .await
            .map_err(|error| store_failed(&error))?;
        let kept = kept.unwrap_or_default();
        let open = shared.sessions().get(&*id).map(|slot| slot.cwd.clone());
        let cwd = open
            .or_else(|| kept.cwd.clone())
            .unwrap_or_else(|| here.clone());
        if request.cwd.as_ref().is_some_and(|wanted| *wanted != cwd) {
            continue;
        }
        if page.len() == PAGE {
            more = true;
            break;
        }
        let Some(head) = store
            .load(&id)
            .await
            .map_err(|error| store_failed(&error))?
        else {
            continue; // Deleted meanwhile.
        };
        let updated = bidi_flow::time::rfc3339(head.entry.updated_at);
        page.push(
            SessionInfo::new(SessionId::new(id), cwd)
                .title(kept.title)
                .updated_at(updated),
        );
    }
    let next = match page.last() {
        Some(last) if more => Some(hex(last.session_id.0.as_bytes())),
        _ => None,
    };
    Ok(ListSessionsResponse::new(page).next_cursor(next))
}

/// `session/resume`: opens a stored session without replaying it.
pub(super) async fn resume(
    shared: &Shared,
    request: ResumeSessionRequest,
) -> Result<ResumeSessionResponse, Error> {
    let ResumeSessionRequest {
        session_id,
        cwd,
        mcp_servers,
        ..
    } = request;
    let opened = open_stored(shared, session_id, cwd, &mcp_servers, false).await?;
    Ok(ResumeSessionResponse::new()
        .modes(shared.modes(opened.mode))
        .config_options(opened.options))
}

/// `session/delete`: closes the session here, then removes it and the server's record of it
/// from the store.
pub(super) async fn delete(
    shared: &Shared,
    request: DeleteSessionRequest,
) -> Result<DeleteSessionResponse, Error> {
    let session_id = request.session_id;
    // Open here: closed first, its turn cancelled.
    if shared.sessions().contains_key(&session_id.0) {
        super::session::close_session(shared, &session_id).await?;
    }
    let store = sessions(
        &shared.rules.scope,
        shared.agent.name(),
        shared.agent.store(),
    );
    let deleted = store
        .delete(&session_id.0)
        .await
        .map_err(|error| store_failed(&error))?;
    if !deleted {
        return Err(Error::session_not_found(session_id));
    }
    shared
        .kept_store()
        .delete(&session_id.0)
        .await
        .map_err(|error| store_failed(&error))?;
    Ok(DeleteSessionResponse::new())
}

/// `session/status`: `open` here, or `saved` in the store.
#[cfg(feature = "unstable_session_status")]
pub(super) async fn status(
    shared: &Shared,
    request: agent_client_protocol_schema::v1::SessionStatusRequest,
) -> Result<agent_client_protocol_schema::v1::SessionStatusResponse, Error> {
    use agent_client_protocol_schema::v1::{SessionStatus, SessionStatusResponse};

    let session_id = request.session_id;
    if shared.sessions().contains_key(&session_id.0) {
        return Ok(SessionStatusResponse::new(SessionStatus::Open));
    }
    let store = sessions(
        &shared.rules.scope,
        shared.agent.name(),
        shared.agent.store(),
    );
    match store.load(&session_id.0).await {
        Ok(Some(_)) => Ok(SessionStatusResponse::new(SessionStatus::Saved)),
        Ok(None) => Err(Error::session_not_found(session_id)),
        Err(error) => Err(store_failed(&error)),
    }
}

/// `session/set_title`: the session's title, in the server's record of it (what
/// `session/list` shows), and a `session_info_update` where it is open.
#[cfg(feature = "unstable_session_set_title")]
pub(super) async fn set_title(
    shared: &Shared,
    request: agent_client_protocol_schema::v1::SetSessionTitleRequest,
) -> Result<agent_client_protocol_schema::v1::SetSessionTitleResponse, Error> {
    use agent_client_protocol_schema::v1::{
        SessionInfoUpdate, SessionUpdate, SetSessionTitleResponse,
    };

    let session_id = request.session_id;
    let store = sessions(
        &shared.rules.scope,
        shared.agent.name(),
        shared.agent.store(),
    );
    let exists = store.load(&session_id.0).await;
    if exists.map_err(|error| store_failed(&error))?.is_none() {
        return Err(Error::session_not_found(session_id));
    }
    let title = normalized(&request.title);
    if title.is_empty() {
        return Err(codec::invalid_params("title", "a title says something"));
    }
    shared
        .amend(&session_id.0, |kept| kept.title = Some(title.clone()))
        .await
        .map_err(|error| store_failed(&error))?;
    if shared.sessions().contains_key(&session_id.0) {
        let update = SessionInfoUpdate::new().title(title.clone());
        if shared
            .update(&session_id, SessionUpdate::SessionInfoUpdate(update))
            .await
            .is_err()
        {
            return Err(super::shared::closed());
        }
    }
    Ok(SetSessionTitleResponse::new(title))
}

/// How long a title is kept, in characters.
#[cfg(feature = "unstable_session_set_title")]
const TITLE_CHARS: usize = 200;

/// A title as kept: one line, trimmed, at most [`TITLE_CHARS`] characters.
#[cfg(feature = "unstable_session_set_title")]
fn normalized(title: &str) -> String {
    let line = title.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().take(TITLE_CHARS).collect()
}

/// The id a cursor names; `None` for one this agent did not give.
fn cursor_id(cursor: &str) -> Option<String> {
    String::from_utf8(unhex(cursor)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "unstable_session_set_title")]
    #[test]
    fn titles_are_one_trimmed_line() {
        assert_eq!(normalized("  Fix\n the   build \t"), "Fix the build");
        assert_eq!(normalized(&"x".repeat(500)).len(), TITLE_CHARS);
        assert_eq!(normalized(" \n "), "");
    }

    #[test]
    fn cursors_are_ids_as_hex() {
        assert_eq!(
            cursor_id(&hex("a-1:é".as_bytes())),
            Some("a-1:é".to_owned())
        );
        for bad in ["z", "zz", "ff"] {
            assert_eq!(cursor_id(bad), None, "{bad}");
        }
    }
}
