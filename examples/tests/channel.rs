//! The channel examples, run as real processes.

use std::io::Write as _;
use std::process::{Command, Stdio};

#[test]
fn terminal_example_streams_replies_with_tool_status_lines() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_channel-terminal"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("OPENAI_BASE_URL")
        .spawn()
        .expect("run the channel-terminal example");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"one two three\nfour five\n")
        .expect("write");
    let output = child.wait_with_output().expect("its output");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    assert_eq!(
        stdout,
        "> one two three\nLet me count. \n  [Using: word_count]\nYour message has 3 words. Thanks for writing!\n\
         > four five\nLet me count. \n  [Using: word_count]\nYour message has 2 words. Thanks for writing!\n"
    );
    let stderr = String::from_utf8(output.stderr).expect("utf-8");
    assert!(stderr.contains("2 replies"), "{stderr}");
}

#[test]
fn terminal_example_prints_whole_replies_without_streaming() {
    let output = Command::new(env!("CARGO_BIN_EXE_channel-terminal"))
        .arg("--no-streaming")
        .stdin(Stdio::null())
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("run the channel-terminal example");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    assert_eq!(
        stdout,
        "> hello there\nLet me count. Your message has 2 words. Thanks for writing!\n\
         > what can you do?\nLet me count. Your message has 4 words. Thanks for writing!\n"
    );
}

#[test]
fn telegram_example_prints_a_transcript_of_debounced_edits() {
    let output = Command::new(env!("CARGO_BIN_EXE_channel-telegram"))
        .args(["--words", "60", "--rate", "100"])
        .output()
        .expect("run the channel-telegram example");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[1].contains("sendMessage") && lines[1].contains("ends \"…\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("sendChatAction   ok       action typing"),
        "{stdout}"
    );
    assert!(stdout.contains("editMessageText  ok"), "{stdout}");
    assert!(
        lines.last().is_some_and(|l| l.contains("in 1 message(s)")),
        "{stdout}"
    );
}
