//! A session store written outside `bidi-session`, against its public storage API
//! (`examples::map_store`), passes the conformance suite every store passes, and an agent
//! runs on it.

use std::process::Command;
use std::sync::Arc;

use examples::map_store::map_store;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_your_own_passes_the_conformance_suite() {
    bidi_session::testing::conformance(Arc::new(map_store())).await;
}

#[test]
fn an_agent_runs_its_turns_on_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_own-store"))
        .output()
        .expect("run the own-store example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "> hello there", "{stdout}");
    assert_eq!(lines[2], "> what do you keep?", "{stdout}");
    // Each turn is a snapshot after the session's first: three, newest first.
    let snapshots: Vec<&str> = lines[4..]
        .iter()
        .map(|line| &line[..line.find(':').unwrap_or(0)])
        .collect();
    assert_eq!(
        snapshots,
        [
            "snapshot 3 (completed)",
            "snapshot 2 (completed)",
            "snapshot 1 (completed)"
        ],
        "{stdout}"
    );
}
