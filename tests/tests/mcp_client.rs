//! The MCP TypeScript SDK's `Client` (`tests/mcp`) against bidi's MCP server: the
//! `mcp-server` program over stdio (the script starts it) and over streamable HTTP (started
//! here on a free port of 127.0.0.1). See `tests/mcp/mcp_client.mjs` for the checks.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Kills the HTTP server when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_sdk_client_lists_calls_streams_and_cancels_over_stdio_and_http() -> Result<(), String> {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp");
    tests::node::npm_ci(&clients)?;
    let markers = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bin = env!("CARGO_BIN_EXE_mcp-server");
    let mut server = Command::new(bin)
        .arg("http")
        .env("MCP_MARKER", markers.path().join("http"))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let stdout = server.stdout.take().ok_or("no stdout")?;
    let server = Killed(server);
    let mut url = String::new();
    BufReader::new(stdout)
        .read_line(&mut url)
        .map_err(|e| e.to_string())?;
    let mut node = Command::new("node");
    node.arg(clients.join("mcp_client.mjs"))
        .arg(url.trim())
        .env("MCP_SERVER_BIN", bin)
        .env("MCP_MARKER_DIR", markers.path());
    let summary = tests::node::run(node);
    drop(server);
    assert!(summary.succeeded(), "{summary}");
    // The cancelled calls' connections ended cancelled by the client, on both transports.
    for transport in ["stdio", "http"] {
        let cause = std::fs::read_to_string(markers.path().join(transport))
            .map_err(|e| format!("no cancel recorded over {transport}: {e}"))?;
        assert_eq!(
            cause, "the MCP client cancelled the call",
            "over {transport}"
        );
    }
    Ok(())
}
