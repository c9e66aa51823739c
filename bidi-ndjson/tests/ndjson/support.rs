//! Agents to run, and a way to see that a process is gone.

use std::path::PathBuf;
use std::time::Duration;

use bidi_ndjson::Command;

/// A bash agent running `script`.
pub(crate) fn bash(script: &str) -> Command {
    Command::new("bash").arg("-c").arg(script)
}

/// The bash agent in `tests/agents/{name}`.
pub(crate) fn agent(name: &str) -> Command {
    Command::new("bash").arg(agent_path(name))
}

/// The Python agent in `tests/agents/{name}`.
pub(crate) fn python_agent(name: &str) -> Command {
    Command::new("python3").arg(agent_path(name))
}

fn agent_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agents")
        .join(name)
}

/// Whether process `pid` is gone: neither running nor a zombie. Waits for it a while (a
/// killed process is reaped by the runtime in the background).
pub(crate) async fn gone(pid: u32) -> bool {
    ended(pid, false).await
}

/// Whether process `pid` is dead, perhaps a zombie still (an orphan is reaped by init, not
/// by us).
pub(crate) async fn dead(pid: u32) -> bool {
    ended(pid, true).await
}

async fn ended(pid: u32, zombie_too: bool) -> bool {
    for _ in 0..200 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                // `pid (comm) state ...`: a zombie is `Z`.
                let state = stat
                    .rsplit(") ")
                    .next()
                    .and_then(|rest| rest.chars().next());
                if state == Some('X') || (zombie_too && state == Some('Z')) {
                    return true;
                }
            }
        }
        // Real time, even under a paused clock: the reaping needs the process to have died.
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(25)))
            .await
            .unwrap();
    }
    false
}
