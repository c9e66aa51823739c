//! Built without the `mcp` feature: no MCP client. A `session/new` or `session/load` that names
//! MCP servers is refused with invalid params naming `mcpServers`, never served without them.
//!
//! It stands in for `mcp.rs` (`use no_mcp as mcp`, the same `Servers`), so nothing else in the
//! crate knows the feature; stdio servers are refused too (ACP's baseline, which such a build
//! cannot keep). `Server::mcp_start_timeout` and `mcp_call_timeout` exist with the feature
//! only.

use std::time::Duration;

use agent_client_protocol_schema::v1::{Error, McpServer};
use bidi_llm::Tool;

use crate::codec;

/// The MCP servers of one session: none, in a build without MCP support.
#[derive(Debug, Default)]
pub(crate) struct Servers {}

impl Servers {
    /// No server: an empty `servers` is a session without MCP servers, any other is refused.
    pub(crate) async fn start(
        servers: &[McpServer],
        _start_timeout: Duration,
        _call_timeout: Duration,
    ) -> Result<Self, Error> {
        if servers.is_empty() {
            return Ok(Self {});
        }
        Err(codec::invalid_params(
            "mcpServers",
            format!(
                "this agent was built without MCP support (bidi-acp's feature `mcp`), so it \
                 cannot start or connect to the {} MCP server(s) named; send `\"mcpServers\": []`",
                servers.len()
            ),
        ))
    }

    /// The servers' tools: none.
    pub(crate) fn tools(&self) -> &[Tool] {
        &[]
    }

    /// Nothing to stop.
    pub(crate) async fn close(&mut self) {}
}
