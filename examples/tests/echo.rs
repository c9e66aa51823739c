//! The README's main command, run as a real process.

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
