//! The agent card: who the agent is, where its JSON-RPC endpoint is, what it does. Its
//! interface URL is built from the request's `Host` and original path, so that it is right
//! wherever the router is mounted.
//!
//! The card is cached as A2A asks: `Cache-Control: max-age` (five minutes: a card changes
//! when the server is redeployed) and an `ETag` of its content, so that a client whose card
//! has expired asks again with `If-None-Match` and is answered `304 Not Modified` while the
//! card is the same.

use axum::Extension;
use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};

use super::types::{self, AgentCard, Capabilities, Interface, Skill};
use bidi_http::Host;
use bidi_http::agent;
use bidi_http::codec::Failure;
use bidi_http::extract::Segments;

/// `GET .../.well-known/agent-card.json`: the agent card, its interface on the host the
/// request named.
pub(crate) async fn card(
    State(host): State<Host>,
    Segments((kind, name)): Segments<(String, String)>,
    OriginalUri(uri): OriginalUri,
    Extension(shared): Extension<super::Shared>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let agent = agent::agent(&host, &kind, &name)?;
    let requested = &headers;
    let host = requested
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("localhost");
    let scheme = requested
        .get("x-forwarded-proto")
        .and_then(|proto| proto.to_str().ok())
        .filter(|proto| *proto == "https")
        .unwrap_or("http");
    // The endpoint is where the card is, under whatever prefix the router is mounted at.
    let path = uri.path();
    let base = path
        .strip_suffix("/.well-known/agent-card.json")
        .unwrap_or(path);
    let endpoint = if base.ends_with("/a2a") {
        base.to_owned()
    } else {
        format!("{base}/a2a")
    };
    let description = agent.agent().flow().description().unwrap_or_default();
    let mut skills = vec![Skill {
        id: name.clone(),
        name: name.clone(),
        description: description.to_owned(),
        tags: vec!["conversation"],
    }];
    skills.extend(agent.tools().iter().map(|tool| Skill {
        id: format!("{name}.{}", tool.name()),
        name: tool.label().to_owned(),
        description: tool.spec().description,
        tags: match (tool.is_local(), tool.requires_approval()) {
            (false, _) => vec!["tool", "remote"],
            (true, true) => vec!["tool", "approval"],
            (true, false) => vec!["tool"],
        },
    }));
    let card = AgentCard {
        name,
        description: description.to_owned(),
        // Both bindings at one URL: JSON-RPC's endpoint, and the base of HTTP+JSON's paths.
        supported_interfaces: [types::BINDING, types::REST_BINDING]
            .into_iter()
            .map(|binding| Interface {
                url: format!("{scheme}://{host}{endpoint}"),
                protocol_binding: binding,
                protocol_version: types::VERSION,
            })
            .collect(),
        version: env!("CARGO_PKG_VERSION"),
        capabilities: Capabilities {
            streaming: true,
            push_notifications: shared.pushing.enabled(),
            extended_agent_card: false,
        },
        default_input_modes: vec!["text/plain", "application/json"],
        default_output_modes: vec!["text/plain", "application/json"],
        skills,
    };
    // Plain data: it always serializes.
    let body = serde_json::to_vec(&card).unwrap_or_default();
    Ok(cached(body, requested))
}

/// How long a client may keep the card before it asks again.
const MAX_AGE: &str = "max-age=300";

/// The card's answer: `body` with its caching headers, or `304 Not Modified` for a client
/// that has it (its `If-None-Match` names the card's tag).
fn cached(body: Vec<u8>, requested: &HeaderMap) -> Response {
    let tag = format!("\"{:016x}\"", fnv1a(&body));
    let has = requested
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|named| named.trim().trim_start_matches("W/"))
        .any(|named| named == tag || named == "*");
    let tag = HeaderValue::from_str(&tag).unwrap_or(HeaderValue::from_static("\"\""));
    let headers = [
        (header::CACHE_CONTROL, HeaderValue::from_static(MAX_AGE)),
        (header::ETAG, tag),
    ];
    if has {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    let json = HeaderValue::from_static("application/json");
    (headers, [(header::CONTENT_TYPE, json)], Body::from(body)).into_response()
}

/// The 64-bit FNV-1a hash of `bytes`: a tag of the card that is the same in every process
/// and build.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CARD-CACHE-001 and -002: the card carries `Cache-Control` with `max-age` and an
    /// `ETag`; a client that has the card is answered 304.
    #[test]
    fn the_card_is_cached_by_its_tag() {
        let card = br#"{"name":"a"}"#.to_vec();
        let fresh = cached(card.clone(), &HeaderMap::new());
        assert_eq!(fresh.status(), StatusCode::OK);
        assert_eq!(fresh.headers()[header::CACHE_CONTROL], "max-age=300");
        let tag = fresh.headers()[header::ETAG].clone();
        assert_eq!(tag.len(), 18, "{tag:?}");

        let mut requested = HeaderMap::new();
        requested.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"0\", \"1\""),
        );
        assert_eq!(cached(card.clone(), &requested).status(), StatusCode::OK);
        requested.append(header::IF_NONE_MATCH, tag.clone());
        let again = cached(card, &requested);
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(again.headers()[header::ETAG], tag);
        let changed = cached(br#"{"name":"b"}"#.to_vec(), &requested);
        assert_eq!(changed.status(), StatusCode::OK);
        assert_ne!(changed.headers()[header::ETAG], tag);
    }
}
