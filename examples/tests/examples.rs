//! The examples, run as real processes.

use std::process::Command;

#[test]
fn echo_example_streams_each_turn() {
    let output = Command::new(env!("CARGO_BIN_EXE_echo"))
        .args(["one two", "three"])
        .output()
        .expect("run the echo example");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "> one two",
            "  echo: one",
            "  echo: two",
            "> three",
            "  echo: three"
        ]
    );
    assert!(lines[5].contains("input closed after 2 turns"), "{stdout}");
    assert_eq!(lines[6], "output: 2 turns");
}

#[test]
fn registry_example_prints_descriptors_traffic_and_spans() {
    let output = Command::new(env!("CARGO_BIN_EXE_registry"))
        .output()
        .expect("run the registry example");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    for expected in [
        r#""key": "/bidi-flow/counter""#,
        r#""key": "/bidi-flow/shout""#,
        "sent 3, total 16",
        "refused: invalid input at the root",
        "output: 16",
        "Name         : turn 3",
        "bidi.output: String(Owned(\"16\"))",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

/// Runs the chat example with `stdin` piped in; returns its stdout.
fn chat(db: &std::path::Path, session: Option<&str>, stdin: &str) -> String {
    use std::io::Write as _;
    let mut command = Command::new(env!("CARGO_BIN_EXE_chat"));
    command.arg("--db").arg(db);
    if let Some(id) = session {
        command.args(["--session", id]);
    }
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the chat example");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let output = child.wait_with_output().expect("chat output");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

#[test]
fn chat_example_resumes_a_session_in_a_new_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("chat.db");
    let first = chat(&db, None, "one\ntwo\n");
    assert!(
        first.contains("bot> Nice to meet you. You said \"one\"."),
        "{first}"
    );
    assert!(first.contains("(2 turns now, 2 in all)"), "{first}");
    let id = first
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the session id is printed");
    let second = chat(&db, Some(id), "three\n");
    assert!(
        second
            .contains("bot> Message 3 of this session. You first said \"one\", and last \"two\"."),
        "{second}"
    );
    assert!(
        second.contains(&format!("session {id} (1 turns now, 3 in all)")),
        "{second}"
    );
    // Nothing piped: the scripted conversation.
    let scripted = chat(&db, None, "");
    assert!(scripted.contains("you> hello there"), "{scripted}");
}

#[test]
fn tools_example_suspends_on_the_remote_tool_and_resumes() {
    let output = Command::new(env!("CARGO_BIN_EXE_tools"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run the tools example");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let order = [
        "model: scripted",
        "contacting the weather service",
        "done: Sunny and 24 °C in Lisbon",
        "awaiting_tool_execution",
        "status: AwaitingToolExecution",
        "client executes confirm_booking",
        "your trip to Lisbon is booked",
        "status: Completed",
    ];
    let mut from = 0;
    for expected in order {
        let at = stdout[from..]
            .find(expected)
            .unwrap_or_else(|| panic!("missing {expected:?} in:\n{stdout}"));
        from += at + expected.len();
    }
}
