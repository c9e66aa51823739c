//! A small MCP server on stdio, for the tests of `acp-agent`'s MCP support. Its tools take a
//! `request` text (what `acp-agent`'s demo model sends): `add` adds the integers in it, `fail`
//! answers an error result, `sleep` never answers. With
//! `MCP_FIXTURE_PID_FILE` set, it appends its process id to that file as it starts.

use std::io::Write as _;
use std::time::Duration;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ServiceExt as _, tool, tool_router};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Request {
    /// A text.
    request: String,
}

struct Fixture;

#[tool_router(server_handler)]
impl Fixture {
    /// Adds the integers of a text.
    #[tool(description = "Add the integers in a text")]
    fn add(&self, Parameters(Request { request }): Parameters<Request>) -> String {
        let sum: i64 = request
            .split_whitespace()
            .filter_map(|word| word.parse::<i64>().ok())
            .sum();
        format!("sum {sum}")
    }

    /// Always fails.
    #[tool(description = "Always fails")]
    fn fail(&self, Parameters(Request { request }): Parameters<Request>) -> Result<String, String> {
        Err(format!("no: {request}"))
    }

    /// Never answers.
    #[tool(description = "Sleep for an hour")]
    async fn sleep(&self, Parameters(Request { .. }): Parameters<Request>) -> String {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        "slept".to_owned()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if let Some(path) = std::env::var_os("MCP_FIXTURE_PID_FILE") {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        writeln!(file, "{}", std::process::id())?;
    }
    Fixture
        .serve(rmcp::transport::stdio())
        .await?
        .waiting()
        .await?;
    Ok(())
}
