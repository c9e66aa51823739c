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
//! naming it. Subscriptions are not offered: a store tells nobody when a session changes.

use bidi_flow::text::{cap, hex, unhex};
use bidi_http::Identity;
use bidi_llm::LlmAgent;
use bidi_session::SessionStore as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rmcp::model::{
    ErrorCode, ErrorData, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
};
use serde_json::json;

use super::McpServer;

/// How many resources a `resources/list` page holds.
pub const PAGE: usize = 100;

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
