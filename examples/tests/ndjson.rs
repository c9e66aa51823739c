//! The NDJSON examples as real processes: the `ndjson-agent` written with `bidi_ndjson::Host`,
//! driven by `bidi_ndjson::Command`, and the `supervise` example where a model answers it.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bidi_ndjson::{Approval, Command, Error, Progress, Question};
use serde_json::{Map, Value, json};

const AGENT: &str = env!("CARGO_BIN_EXE_ndjson-agent");
const SUPERVISE: &str = env!("CARGO_BIN_EXE_supervise");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_agent_asks_streams_and_finishes_round_after_round() {
    let mut child = Command::new(AGENT)
        .init(json!({"work_dir": "/project"}))
        .spawn()
        .await
        .unwrap();
    let mut seen = Vec::new();
    let result = child
        .listen("Implement OAuth2 login")
        .on("progress", |p: Progress| {
            seen.push(format!("progress {}", p.stage.unwrap_or_default()));
            async {}
        })
        .on("partial", |p: Map<String, Value>| {
            assert!(p["chunk"].is_string());
            async {}
        })
        .on("question", |q: Question| async move {
            assert_eq!(q.kind.as_deref(), Some("security"));
            assert_eq!(q.options, ["RS256", "HS256"]);
            Some("RS256")
        })
        .on("approval", |a: Approval| async move {
            assert_eq!(a.risk_level.as_deref(), Some("medium"));
            Some(true)
        })
        .await
        .unwrap();
    assert_eq!(seen, ["progress ingest", "progress plan"]);
    assert_eq!(result["text"], "Done: Implement OAuth2 login (RS256)");
    assert_eq!(result["files_changed"], 3);
    assert_eq!(result["init"], json!({"work_dir": "/project"}));

    // The next round on the same process: a design question, and a rejection.
    let rejected = child
        .listen("Delete the old API")
        .on("question", |q: Question| async move {
            assert_eq!(q.kind.as_deref(), Some("design"));
            Some("simple")
        })
        .on("approval", |a: Approval| async move {
            assert_eq!(a.risk_level.as_deref(), Some("high"));
            Some("no")
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&rejected, Error::Agent { message, .. } if message.contains("round 2")),
        "{rejected:?}"
    );
    let status = child.close(Duration::from_secs(10)).await.unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_the_rust_agent_gets_the_default_replies_and_does_not_hang() {
    let mut child = Command::new(AGENT).spawn().await.unwrap();
    // No handlers at all: the question gets "" and the approval "no".
    let error = child.listen("Add a search page").await.unwrap_err();
    assert!(
        matches!(&error, Error::Agent { message, .. } if message.contains("rejected")),
        "{error:?}"
    );
}

#[test]
fn a_model_supervises_the_agent_and_its_decisions_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.sqlite3");
    let output = std::process::Command::new(SUPERVISE)
        .arg("--agent")
        .arg(AGENT)
        .arg("--db")
        .arg(&db)
        .args([
            "Implement OAuth2 login",
            "Add tests for the parser",
            "Delete the legacy search API",
        ])
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Routed by kind: a security question to the security engineer, design ones to the
    // architect; approvals to security, which rejects the high-risk one.
    assert!(stdout.contains("security answers: RS256"), "{stdout}");
    assert!(stdout.contains("architect answers: simple"), "{stdout}");
    assert!(
        stdout.contains("= \"Done: Implement OAuth2 login (RS256)\""),
        "{stdout}"
    );
    assert!(stdout.contains("= rejected: round 3"), "{stdout}");
    let audit = stdout.split("Audit:").nth(1).unwrap();
    assert_eq!(audit.matches("decided:").count(), 6, "{audit}");
    assert!(db.exists());
}
