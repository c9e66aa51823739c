//! The demo model under a consumer that stops reading: a test binary of its own, so that the
//! process's peak memory is this test's alone.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use bidi_agent::AgentInit;
use bidi_llm::testing::DemoModel;
use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage, execute};
use futures_util::StreamExt as _;

/// The process's peak resident memory so far, in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A 0.8 MB message is 400,000 words of answer: the demo model makes them as they are taken,
/// so a consumer that reads one and stops holds the message and little more (it held about
/// 90 MiB of events when the model built its answer first).
#[tokio::test(flavor = "current_thread")]
async fn a_long_answer_costs_no_memory_ahead_of_a_reader_that_stopped() {
    let agent = LlmAgent::builder("echo", DemoModel).build();
    let mut conn = agent.connect(AgentInit::new());
    let message = "a ".repeat(400_000);
    let before = peak_kib();
    let input = TurnInput::User(UserMessage::new(message));
    let mut run = execute(&mut conn, input).await.unwrap();
    while let Some(event) = run.next().await {
        if let AgentEvent::TextDelta { .. } = event.unwrap() {
            break;
        }
    }
    // The agent runs as far as it can without its reader.
    for _ in 0..1_000 {
        tokio::task::yield_now().await;
    }
    let grown = peak_kib().saturating_sub(before);
    assert!(grown < 24 * 1024, "the peak grew by {grown} KiB");
    drop(run);
    conn.close();
}
