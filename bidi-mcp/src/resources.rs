//! MCP resources where bidi has them: the sessions of the agents a server serves, each one's
//! conversation and artifacts, in the caller's scope (the identity of its HTTP requests; none
//! over stdio), read with `resources/read`.
//!
//! - `bidi://agent/{agent}/session/{sessionId}`: the conversation, as the JSON of its messages
//!   (`application/json`).
//! - `bidi://agent/{agent}/session/{sessionId}/artifact/{name}`: an artifact an agent made in
//!   the session, as the JSON of its parts.
//!
//! Names and ids are percent-encoded in a URI. `resources/list` lists the conversations of
//! the caller's sessions of every agent served, by agent and id, a page of [`PAGE`] at a time
//! (the cursor is the last one listed, as hex); artifacts are listed by their template only,
//! as each would cost a session's load. `resources/templates/list` answers both templates. A
//! URI of no agent, session or artifact of the caller's is `-32002` (resource not found),
//! naming it.
//!
//! `resources/subscribe` to a conversation or an artifact of a session of the caller's watches
//! the session until `resources/unsubscribe` or the end of the MCP session, and tells the
//! client `notifications/resources/updated` (the URI subscribed to) each time the session's
//! head changes: a turn starts or ends, in this process or another on the same store. A store
//! tells nobody of a change, so the watch reads the session's head every [`WATCH_EVERY`]; an
//! MCP session holds at most [`MAX_SUBSCRIPTIONS`] (past them, `-32602`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bidi_flow::text::{cap, hex, unhex};
use bidi_http::Identity;
use bidi_llm::LlmAgent;
use bidi_session::SessionStore as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rmcp::RoleServer;
use rmcp::model::{
    ErrorCode, ErrorData, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::Peer;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::McpServer;

/// How many resources a `resources/list` page holds.
pub const PAGE: usize = 100;

/// How often a subscription reads its session's head: a second.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// How many subscriptions an MCP session holds.
pub const MAX_SUBSCRIPTIONS: usize = 100;

/// An MCP session's subscriptions: each one's watch, by URI.
#[derive(Default)]
pub(super) struct Subscriptions(Mutex<HashMap<String, CancellationToken>>);

impl Drop for Subscriptions {
    fn drop(&mut self) {
        let watches = self.0.get_mut().unwrap_or_else(PoisonError::into_inner);
        for watch in watches.values() {
            watch.cancel();
        }
    }
}

/// What every resource URI starts with.
const SCHEME: &str = "bidi://agent/";

/// What a name or id keeps unencoded in a URI: RFC 3986's unreserved characters.
const KEPT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// MCP's "resource not found".
const NOT_FOUND: ErrorCode = ErrorCode(-32002);

/// What a URI names.
#[derive(Debug, PartialEq, Eq)]
struct Named {
    agent: String,
    session: String,
    artifact: Option<String>,
}

impl Named {
    /// What `uri` names, if it is one of bidi's.
    fn parse(uri: &str) -> Option<Self> {
        let rest = uri.strip_prefix(SCHEME)?;
        let decode = |part: &str| Some(percent_decode_str(part).decode_utf8().ok()?.into_owned());
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [agent, "session", session] => Some(Self {
                agent: decode(agent)?,
                session: decode(session)?,
                artifact: None,
            }),
            [agent, "session", session, "artifact", artifact] => Some(Self {
                agent: decode(agent)?,
                session: decode(session)?,
                artifact: Some(decode(artifact)?),
            }),
            _ => None,
        }
    }

    /// Its URI.
    fn uri(&self) -> String {
        let encode = |part: &str| utf8_percent_encode(part, KEPT).to_string();
        let session = format!(
            "{SCHEME}{}/session/{}",
            encode(&self.agent),
            encode(&self.session)
        );
        match &self.artifact {
            Some(name) => format!("{session}/artifact/{}", encode(name)),
            None => session,
        }
    }
}

/// `-32002`: `uri` names nothing the caller may read.
fn not_found(uri: &str) -> ErrorData {
    ErrorData::new(
        NOT_FOUND,
        format!("resource not found: {}", cap(uri)),
        Some(json!({ "uri": cap(uri) })),
    )
}

impl McpServer {
    /// `resources/templates/list`: a session's conversation, and its artifacts.
    pub(super) fn resource_templates() -> ListResourceTemplatesResult {
        let conversation = ResourceTemplate::new(
            format!("{SCHEME}{{agent}}/session/{{sessionId}}"),
            "conversation",
        )
        .with_description("The conversation of a session of an agent, as the JSON of its messages")
        .with_mime_type("application/json");
        let artifact = ResourceTemplate::new(
            format!("{SCHEME}{{agent}}/session/{{sessionId}}/artifact/{{name}}"),
            "artifact",
        )
        .with_description("An artifact an agent made in a session, as the JSON of its parts")
        .with_mime_type("application/json");
        ListResourceTemplatesResult::with_all_items(vec![conversation, artifact])
    }

    /// `resources/list`: a page of the caller's conversations.
    ///
    /// # Errors
    ///
    /// A cursor this server did not give, as `-32602`; the store's failure, as `-32603`.
    pub(super) async fn list_sessions(
        &self,
        request: Option<PaginatedRequestParams>,
        identity: Option<&Identity>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let after = match request.and_then(|request| request.cursor) {
            Some(cursor) => Some(
                unhex(&cursor)
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| {
                        ErrorData::invalid_params(
                            "not a cursor of this server's: send `nextCursor`",
                            None,
                        )
                    })?,
            ),
            None => None,
        };
        let mut agents: Vec<&LlmAgent> = self.agents.values().collect();
        agents.sort_by(|a, b| a.agent().name().cmp(b.agent().name()));
        let mut page = Vec::new();
        let mut more = false;
        'agents: for agent in agents {
            if agent.agent().is_client_managed() {
                continue;
            }
            let store = bidi_http::agent::sessions_of(agent, identity);
            let mut ids = store
                .list()
                .await
                .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
            ids.sort();
            for session in ids {
                let named = Named {
                    agent: agent.agent().name().to_owned(),
                    session,
                    artifact: None,
                };
                let uri = named.uri();
                if after.as_ref().is_some_and(|after| uri <= *after) {
                    continue;
                }
                if page.len() == PAGE {
                    more = true;
                    break 'agents;
                }
                let name = format!("{} session {}", named.agent, named.session);
                let resource = Resource::new(uri, name)
                    .with_mime_type("application/json")
                    .with_description("The session's conversation");
                page.push(resource);
            }
        }
        let next = more
            .then(|| page.last().map(|last| hex(last.uri.as_bytes())))
            .flatten();
        let mut result = ListResourcesResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    /// `resources/read`: a conversation or an artifact of the caller's.
    ///
    /// # Errors
    ///
    /// A URI naming nothing of the caller's, as `-32002`; the store's failure, as `-32603`.
    pub(super) async fn read_session(
        &self,
        uri: &str,
        identity: Option<&Identity>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let named = Named::parse(uri).ok_or_else(|| not_found(uri))?;
        let agent = self
            .agents
            .get(&named.agent)
            .ok_or_else(|| not_found(uri))?;
        let session = bidi_http::agent::load(agent, identity, &named.session)
            .await
            .map_err(|failure| ErrorData::internal_error(failure.message, None))?
            .ok_or_else(|| not_found(uri))?;
        let state = session.state();
        let value = match &named.artifact {
            None => serde_json::to_value(&state.messages),
            Some(name) => {
                let artifact = state
                    .artifacts
                    .iter()
                    .find(|artifact| artifact.name == *name)
                    .ok_or_else(|| not_found(uri))?;
                serde_json::to_value(&artifact.parts)
            }
        }
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let contents = ResourceContents::text(value.to_string(), named.uri())
            .with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]))
    }
}

impl McpServer {
    /// `resources/subscribe`: watches the session `uri` names, telling `peer` of its changes.
    ///
    /// # Errors
    ///
    /// A URI naming nothing of the caller's, as `-32002`; one subscription too many, as
    /// `-32602`; the store's failure, as `-32603`.
    pub(super) async fn watch(
        &self,
        uri: &str,
        identity: Option<&Identity>,
        peer: Peer<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Reading it checks it is the caller's, and gives the head to watch from.
        self.read_session(uri, identity).await?;
        let named = Named::parse(uri).ok_or_else(|| not_found(uri))?;
        let agent = self
            .agents
            .get(&named.agent)
            .ok_or_else(|| not_found(uri))?;
        let store = bidi_http::agent::sessions_of(agent, identity);
        let head = |snapshot: Option<bidi_session::Snapshot>| {
            snapshot.map(|snapshot| (snapshot.id().to_owned(), snapshot.status()))
        };
        let mut seen = head(store.load(&named.session).await.unwrap_or_default());
        let watch = {
            let mut watches = self
                .subscriptions
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if watches.contains_key(uri) {
                return Ok(());
            }
            if watches.len() >= MAX_SUBSCRIPTIONS {
                return Err(ErrorData::invalid_params(
                    format!(
                        "a session holds at most {MAX_SUBSCRIPTIONS} subscriptions: \
                         unsubscribe from one first"
                    ),
                    None,
                ));
            }
            let watch = CancellationToken::new();
            watches.insert(uri.to_owned(), watch.clone());
            watch
        };
        let uri = uri.to_owned();
        drop(tokio::spawn(async move {
            let mut every = tokio::time::interval(WATCH_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = watch.cancelled() => return,
                    _ = every.tick() => {}
                }
                // A failing read is tried again at the next tick.
                let Ok(snapshot) = store.load(&named.session).await else {
                    continue;
                };
                let now = head(snapshot);
                if now != seen {
                    seen = now;
                    if peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }));
        Ok(())
    }

    /// `resources/unsubscribe`: stops watching for `uri`, if it was watched.
    pub(super) fn unwatch(&self, uri: &str) {
        let mut watches = self
            .subscriptions
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(watch) = watches.remove(uri) {
            watch.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn uris_name_a_session_or_an_artifact_encoded() {
        let named = Named {
            agent: "chat".into(),
            session: "a b/c".into(),
            artifact: Some("notes.md".into()),
        };
        let uri = named.uri();
        assert_eq!(uri, "bidi://agent/chat/session/a%20b%2Fc/artifact/notes.md");
        assert_eq!(Named::parse(&uri).unwrap(), named);
        let conversation = Named::parse("bidi://agent/chat/session/s1").unwrap();
        assert_eq!(
            (conversation.session.as_str(), conversation.artifact),
            ("s1", None)
        );
        for nothing in [
            "bidi://agent/chat",
            "bidi://agent/chat/session/s1/other/x",
            "test://static-text",
            "bidi://agent/chat/session/%FF",
        ] {
            assert!(Named::parse(nothing).is_none(), "{nothing}");
        }
    }
}
