//! `GET /dev/api/agents`: the agents the server serves, with their tools, so the page can chat
//! with them and knows which pending calls wait for an approval and which for a result.

use axum::Json;
use axum::extract::State;
use bidi_llm::{LlmAgent, Tool};
use serde::Serialize;
use serde_json::Value;

use bidi_http::Host;

/// `{"agents": [..]}`, sorted by name.
#[derive(Debug, Serialize)]
pub(super) struct Agents {
    agents: Vec<AgentView>,
}

/// An agent served under `/agent/{name}/`.
#[derive(Debug, Serialize)]
struct AgentView {
    name: String,
    tools: Vec<ToolView>,
}

/// One of the agent's own tools.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolView {
    name: String,
    label: String,
    description: String,
    /// Its arguments' JSON Schema.
    parameters: Value,
    /// Whether the agent runs it; a remote one is run by the caller, who sends its result.
    local: bool,
    /// Whether its calls wait for the caller's approval.
    needs_approval: bool,
}

impl AgentView {
    fn of(name: &str, agent: &LlmAgent) -> Self {
        Self {
            name: name.to_owned(),
            tools: agent.tools().iter().map(ToolView::of).collect(),
        }
    }
}

impl ToolView {
    fn of(tool: &Tool) -> Self {
        let spec = tool.spec();
        Self {
            name: spec.name,
            label: tool.label().to_owned(),
            description: spec.description,
            parameters: spec.parameters,
            local: tool.is_local(),
            needs_approval: tool.requires_approval(),
        }
    }
}

/// `GET /dev/api/agents`.
pub(super) async fn list(State(host): State<Host>) -> Json<Agents> {
    let mut agents: Vec<AgentView> = host
        .agents()
        .iter()
        .map(|(name, agent)| AgentView::of(name, agent))
        .collect();
    agents.sort_by(|a, b| a.name.cmp(&b.name));
    Json(Agents { agents })
}
