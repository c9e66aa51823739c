//! Real ACP clients in other languages against the `acp-agent` binary: the official TypeScript
//! SDK, the official Python SDK and acpx, a third-party ACP client CLI.
//!
//! The clients are the scripts of `tests/acp` (see its README), run after `npm ci` there and in a
//! virtual environment made from its `requirements.txt`; each starts the agent itself.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tests::node::{Summary, npm_ci, run, run_node};

/// The agent under test.
const AGENT: &str = env!("CARGO_BIN_EXE_acp-agent");

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("acp")
}

/// Asserts every one of the script's `checks` ran and passed.
fn assert_all_passed(summary: &Summary, checks: usize) {
    assert!(summary.failures().is_empty(), "{summary}");
    assert_eq!(summary.failed, Some(0), "{summary}");
    assert_eq!(summary.passed, Some(checks), "{summary}");
    assert!(summary.succeeded(), "{summary}");
}

/// Runs the Node script `script` of `tests/acp` against the agent, in a scratch directory.
fn node_peer(script: &str) -> Summary {
    npm_ci(&peers()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    run_node(
        &peers().join(script),
        &[AGENT, scratch.path().to_str().unwrap()],
    )
}

#[test]
fn typescript_sdk_client_prompts_loads_and_gets_invalid_params() {
    // initialize, session/new, two prompts, an invalid prompt, an unknown method, an unknown
    // session, then session/load and a prompt in a new agent process on the same database, the
    // sessions listed, their status and title, a session/resume in a third process, the model
    // option chosen with session/set_config_option, a session/fork, a session/delete, and the
    // fork and its source loaded in a fourth process. Each connection ends with a check that
    // every session/update passed the SDK's schema.
    assert_all_passed(&node_peer("ts_client.mjs"), 19);
}

#[test]
fn typescript_sdk_editor_serves_files_and_terminals_to_the_agent() {
    // An editor implementing fs/* and terminal/*: a read of an unsaved buffer, an allowed write
    // (on disk, shown as a diff), an allowed command (a real process, its terminal embedded in
    // the call), a rejected write and command (no request reaches the editor), a cancelled
    // command (killed, its terminal released).
    assert_all_passed(&node_peer("editor_client.mjs"), 5);
}

#[test]
fn acpx_runs_a_prompt_to_end_turn() {
    // acpx's exit code, then its JSON-RPC transcript: initialize, session/new, the prompt's
    // message chunks and its end_turn; then, through acpx's own fs/* and terminal/*, an
    // allowed write, an allowed command, and a write --deny-all refuses.
    assert_all_passed(&node_peer("acpx_check.mjs"), 9);
}

#[test]
fn python_sdk_client_prompts_and_cancels() {
    let python = tests::python::venv(&peers().join("requirements.txt")).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut client = Command::new(python);
    client
        .arg(peers().join("py_client.py"))
        .arg(AGENT)
        .arg(scratch.path());
    // initialize, session/new, a prompt, a cancelled slow prompt, the next prompt, an unknown
    // session, every session/update passed the SDK's models.
    assert_all_passed(&run(client), 7);
}

#[test]
fn a_failing_agent_fails_the_peers() {
    npm_ci(&peers()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().to_str().unwrap();

    // An agent that exits at once: every check fails.
    let summary = run_node(&peers().join("ts_client.mjs"), &["/bin/false", dir]);
    assert!(!summary.succeeded(), "{summary}");
    assert_eq!(summary.passed, Some(0), "{summary}");
    let summary = run_node(&peers().join("acpx_check.mjs"), &["/bin/false", dir]);
    assert!(!summary.succeeded(), "{summary}");
    assert!(summary.failed.is_some_and(|n| n > 0), "{summary}");
    let summary = run_node(&peers().join("editor_client.mjs"), &["/bin/false", dir]);
    assert!(!summary.succeeded(), "{summary}");
    assert_eq!(summary.passed, Some(0), "{summary}");

    // An agent sending an update the SDKs' schemas reject: the SDKs drop it, the checks see it.
    let bad = peers().join("bad_agent.py");
    let bad = bad.to_str().unwrap();
    let rejected = |summary: &Summary| {
        summary.failures().iter().any(|line| {
            line.starts_with("not ok - every session/update the agent sent")
                && line.ends_with(" reached the client")
        })
    };
    let summary = run_node(&peers().join("ts_client.mjs"), &[bad, dir]);
    assert!(!summary.succeeded() && rejected(&summary), "{summary}");
    let python = tests::python::venv(&peers().join("requirements.txt")).unwrap();
    let mut client = Command::new(python);
    client.arg(peers().join("py_client.py")).args([bad, dir]);
    let summary = run(client);
    assert!(!summary.succeeded() && rejected(&summary), "{summary}");
}
