//! The agent card: who the agent is, where its JSON-RPC endpoint is, what it does. Its
//! interface URL is built from the request's `Host` and original path, so that it is right
//! wherever the router is mounted.

use axum::Json;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, header};

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
    headers: HeaderMap,
) -> Result<Json<AgentCard>, Failure> {
    let agent = agent::agent(&host, &kind, &name)?;
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
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
    Ok(Json(AgentCard {
        name,
        description: description.to_owned(),
        supported_interfaces: vec![Interface {
            url: format!("{scheme}://{host}{endpoint}"),
            protocol_binding: types::BINDING,
            protocol_version: types::VERSION,
        }],
        version: env!("CARGO_PKG_VERSION"),
        capabilities: Capabilities {
            streaming: true,
            push_notifications: false,
            extended_agent_card: false,
        },
        default_input_modes: vec!["text/plain", "application/json"],
        default_output_modes: vec!["text/plain", "application/json"],
        skills,
    }))
}
