//! An NDJSON agent written with `bidi_ndjson::Host`: the kind of middleware that sits between a
//! host and a coding agent. It serves one round per prompt line on stdin:
//!
//! 1. `progress` as it reads the task;
//! 2. a `question` about the approach (`kind` `security` for prompts about auth, login or
//!    tokens, `design` otherwise), and waits for the answer;
//! 3. its plan as `partial` output;
//! 4. an `approval` to write the files, and waits for it;
//! 5. a `result` if approved, an `error` if not.
//!
//! ```sh
//! cargo run -p examples --bin ndjson-agent    # type a prompt, then answer it line by line
//! cargo run -p examples --bin supervise       # a model answers it instead
//! ```
//!
//! Replies are `{"type":"response","in_reply_to":..,"in_reply_to_id":..,"value":..}` lines (a
//! plain line is taken as the value). Logs go to stderr; stdout carries messages only.

use std::process::ExitCode;

use bidi_ndjson::{Approval, Host, Progress, Question};
use serde_json::{Value, json};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("[ndjson-agent] {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> std::io::Result<()> {
    let mut host = Host::stdio();
    let mut rounds = 0u32;
    while let Some(prompt) = host.prompt().await? {
        rounds += 1;
        let task = prompt.text().to_owned();
        eprintln!("[ndjson-agent] round {rounds}: {task}");
        host.progress(
            Progress::new(format!("reading the task: {task}"))
                .percent(10.0)
                .stage("ingest"),
        )
        .await?;
        let lower = task.to_lowercase();
        let question = if ["auth", "login", "token"].iter().any(|w| lower.contains(w)) {
            Question::new("How should the tokens be signed?")
                .kind("security")
                .options(["RS256", "HS256"])
        } else {
            Question::new(format!("Which approach for: {task}?"))
                .kind("design")
                .options(["simple", "extensible"])
        };
        let answer = match host.ask(question).await? {
            Value::String(answer) => answer,
            other => other.to_string(),
        };
        host.progress(
            Progress::new(format!("planning with {answer}"))
                .percent(50.0)
                .stage("plan"),
        )
        .await?;
        for line in [
            format!("Plan: {task}, using {answer}.\n"),
            "Writing 3 files...\n".to_owned(),
        ] {
            host.partial(line).await?;
        }
        let risk = if lower.contains("delete") {
            "high"
        } else {
            "medium"
        };
        let approval = Approval::new(format!("Write 3 files for: {task}")).risk_level(risk);
        if host.approve(approval).await? {
            host.result(json!({
                "text": format!("Done: {task} ({answer})"),
                "files_changed": 3,
                "round": rounds,
                "init": host.init_params().cloned(),
            }))
            .await?;
        } else {
            host.error(format!(
                "round {rounds}: the supervisor rejected the change; nothing was written"
            ))
            .await?;
        }
    }
    Ok(())
}
