//! The MCP TypeScript SDK's `Client` (`tests/mcp`) against bidi's MCP server: the
//! `mcp-server` program over stdio (the script starts it) and over streamable HTTP (started
//! here on a free port of 127.0.0.1). See `tests/mcp/mcp_client.mjs` for the checks, among
//! them a call of an agent whose tool needs approval, asked through the SDK client's
//! elicitation handler (approved, denied, declined, cancelled while asked) or, for a client
//! without elicitation, named in the result and answered by a second call. And the
//! MCP Inspector's command line (`@modelcontextprotocol/inspector-cli`, also in `tests/mcp`),
//! listing and calling the same tools over both transports.

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
    let (server, url) = http_server(&markers.path().join("http"))?;
    let mut node = Command::new("node");
    node.arg(clients.join("mcp_client.mjs"))
        .arg(&url)
        .env("MCP_SERVER_BIN", bin)
        .env("MCP_MARKER_DIR", markers.path());
    let summary = tests::node::run(node);
    drop(server);
    println!("{summary}");
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

/// Starts `mcp-server http` on a free port of 127.0.0.1: the server and its base URL (the
/// MCP endpoint is `/mcp` under it).
fn http_server(marker: &Path) -> Result<(Killed, String), String> {
    let bin = env!("CARGO_BIN_EXE_mcp-server");
    let mut server = Command::new(bin)
        .arg("http")
        .env("MCP_MARKER", marker)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let stdout = server.stdout.take().ok_or("no stdout")?;
    let server = Killed(server);
    let mut url = String::new();
    BufReader::new(stdout)
        .read_line(&mut url)
        .map_err(|e| e.to_string())?;
    Ok((server, url.trim().to_owned()))
}

/// Runs the Inspector's command line on `target` (a command and its arguments, or a URL with
/// `--transport http`) with `args`: its standard output, parsed as JSON, or why it failed.
fn inspector(clients: &Path, target: &[&str], args: &[&str]) -> Result<serde_json::Value, String> {
    // The CLI reads its own package.json by a path relative to the working directory.
    let build = clients.join("node_modules/@modelcontextprotocol/inspector-cli/build");
    let output = Command::new("node")
        .arg("index.js")
        .args(target)
        .args(args)
        .current_dir(&build)
        .output()
        .map_err(|e| format!("cannot run the Inspector CLI: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("{:?} failed: {stdout}{stderr}", output.status));
    }
    serde_json::from_str(&stdout).map_err(|e| format!("not JSON ({e}): {stdout}{stderr}"))
}

#[test]
fn the_inspector_cli_lists_and_calls_tools_over_stdio_and_http() -> Result<(), String> {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp");
    tests::node::npm_ci(&clients)?;
    let markers = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (_server, base) = http_server(&markers.path().join("http"))?;
    let url = format!("{base}/mcp");
    let bin = env!("CARGO_BIN_EXE_mcp-server");
    let stdio = [bin, "stdio"];
    let http = [url.as_str(), "--transport", "http"];
    for target in [&stdio[..], &http[..]] {
        let listed = inspector(&clients, target, &["--method", "tools/list"])?;
        let mut names: Vec<&str> = listed["tools"]
            .as_array()
            .ok_or_else(|| format!("no tools: {listed}"))?
            .iter()
            .filter_map(|tool| tool["name"].as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["atlas", "bank", "chat", "count", "greet", "slow"],
            "{target:?}"
        );
        // An object output is the tool's outputSchema; a string output has none.
        for tool in listed["tools"].as_array().into_iter().flatten() {
            let (name, schema) = (&tool["name"], &tool["outputSchema"]);
            match name.as_str() {
                Some("count" | "chat" | "bank" | "atlas") => {
                    assert_eq!(schema["type"], "object", "{name}");
                }
                _ => assert!(schema.is_null(), "{name}: {schema}"),
            }
        }

        let call = [
            "--method",
            "tools/call",
            "--tool-name",
            "count",
            "--tool-arg",
            "upTo=3",
        ];
        let counted = inspector(&clients, target, &call)?;
        assert_eq!(
            counted["structuredContent"],
            serde_json::json!({"total": 3, "parity": "odd"}),
            "{target:?}"
        );
        assert_eq!(counted["isError"], false, "{target:?}");

        let call = [
            "--method",
            "tools/call",
            "--tool-name",
            "chat",
            "--tool-arg",
            "message=hi",
        ];
        let answered = inspector(&clients, target, &call)?;
        assert_eq!(
            answered["structuredContent"]["text"], "You said: hi",
            "{target:?}"
        );

        // A bad argument is the CLI's failure, naming the field.
        let call = [
            "--method",
            "tools/call",
            "--tool-name",
            "count",
            "--tool-arg",
            "upTo=-1",
        ];
        let refused = inspector(&clients, target, &call).expect_err("a refused call");
        assert!(
            refused.contains("-32602") && refused.contains("/upTo"),
            "{refused}"
        );
    }
    Ok(())
}
