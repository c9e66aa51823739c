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
        "refused: invalid input at `.`",
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
