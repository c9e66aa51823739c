//! The stdio example run as a real process, talked to in NDJSON over its stdin and stdout.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

use serde_json::{Value, json};

/// One run: every frame written to stdout, stderr, and how the process ended.
struct Run {
    frames: Vec<Value>,
    stderr: String,
    status: ExitStatus,
}

impl Run {
    /// The frames about connection `id`, in order.
    fn of(&self, id: &str) -> Vec<&Value> {
        self.frames.iter().filter(|f| f["id"] == id).collect()
    }

    /// The error frames, in order.
    fn errors(&self) -> Vec<&Value> {
        self.frames
            .iter()
            .filter(|f| f["type"] == "error")
            .collect()
    }
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_stdio"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the stdio example")
}

/// Writes `input` to a fresh server (from a thread, so a full stdout pipe cannot deadlock the
/// test), ends its input, and reads everything it writes until it exits.
fn run(args: &[&str], input: impl Into<Vec<u8>>) -> Run {
    let mut child = spawn(args);
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.into();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("the server's output");
    writer.join().expect("writer thread").expect("write stdin");
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let frames = stdout
        .lines()
        .map(|line| {
            // Logs never reach stdout: every line is a frame.
            let frame: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line on stdout ({e}): {line:?}"));
            let kind = frame["type"].as_str().unwrap_or_default();
            assert!(
                ["chunk", "turn_end", "output", "error"].contains(&kind),
                "not a frame: {line}"
            );
            frame
        })
        .collect();
    Run {
        frames,
        stderr: String::from_utf8(output.stderr).expect("utf-8"),
        status: output.status,
    }
}

/// Frames as NDJSON.
fn lines(frames: &[Value]) -> String {
    frames.iter().map(|f| format!("{f}\n")).collect()
}

/// The chunks of `frames` between turn ends, joined, and the output frame.
fn turns(frames: &[&Value]) -> (Vec<String>, Value) {
    let mut turns = vec![String::new()];
    let mut output = Value::Null;
    for frame in frames {
        match frame["type"].as_str().unwrap() {
            "chunk" => turns
                .last_mut()
                .unwrap()
                .push_str(frame["chunk"].as_str().unwrap()),
            "turn_end" => turns.push(String::new()),
            "output" => output = frame["output"].clone(),
            other => panic!("unexpected {other} frame: {frame}"),
        }
    }
    assert_eq!(
        turns.pop().as_deref(),
        Some(""),
        "the last turn ended: {frames:?}"
    );
    (turns, output)
}

#[test]
fn two_connections_are_multiplexed() {
    let run = run(
        &[],
        lines(&[
            json!({"type": "connect", "id": "a", "key": "/bidi-flow/echo", "init": "> "}),
            json!({"type": "connect", "id": "b", "key": "/agent/chat", "init": {}}),
            json!({"type": "send", "id": "a", "input": "hello there"}),
            json!({"type": "send", "id": "b", "input": "hi"}),
            json!({"type": "send", "id": "b", "input": "again"}),
            json!({"type": "send", "id": "a", "input": "bye"}),
            json!({"type": "close", "id": "b"}),
            json!({"type": "close", "id": "a"}),
        ]),
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert!(run.errors().is_empty(), "{:?}", run.errors());

    let a = run.of("a");
    let chunks: Vec<_> = a
        .iter()
        .filter(|f| f["type"] == "chunk")
        .map(|f| &f["chunk"])
        .collect();
    assert_eq!(
        chunks,
        [&json!("> hello"), &json!("> there"), &json!("> bye")]
    );
    assert_eq!(
        turns(&a),
        (
            vec!["> hello> there".to_owned(), "> bye".to_owned()],
            json!(2)
        )
    );

    let (replies, output) = turns(&run.of("b"));
    assert_eq!(
        replies,
        [
            "Nice to meet you. You said \"hi\".",
            "Message 2 of this session. You first said \"hi\", and last \"hi\"."
        ]
    );
    assert_eq!(output["output"], 2);
    assert_eq!(output["state"]["heard"], json!(["hi", "again"]));
    assert!(output["sessionId"].is_string());
    assert_eq!(run.frames.len(), a.len() + run.of("b").len());
    // The logs are on stderr.
    assert!(run.stderr.contains("[stdio] serving"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("\"a\": connected to \"/bidi-flow/echo\""),
        "{}",
        run.stderr
    );
}

#[test]
fn every_bad_frame_is_answered_and_the_rest_goes_on() {
    let mut input = String::new();
    for bad in ["nope", "[1]", r#"{"type": "send", "id": "x""#] {
        input.push_str(bad);
        input.push('\n');
    }
    input.push_str(&lines(&[
        json!({"id": "x"}),
        json!({"type": "jump", "id": "x"}),
        json!({"type": "send", "input": 1}),
        json!({"type": 7, "id": "x"}),
        json!({"type": "send", "id": "ghost", "input": "x"}),
        json!({"type": "close", "id": "ghost"}),
        json!({"type": "cancel", "id": "ghost"}),
        json!({"type": "connect", "id": "e", "key": "echo", "init": ""}),
        json!({"type": "connect", "id": "e", "key": "/bidi-flow/translate", "init": ""}),
        json!({"type": "connect", "id": "e"}),
        json!({"type": "connect", "id": "e", "key": "/bidi-flow/echo"}),
        json!({"type": "connect", "id": "c", "key": "/agent/chat", "init": {"sessionId": 5}}),
        json!({"type": "connect", "id": "e", "key": "/bidi-flow/echo", "init": "> "}),
        json!({"type": "connect", "id": "e", "key": "/agent/chat", "init": {}}),
        json!({"type": "send", "id": "e", "input": {"text": "hi"}}),
        json!({"type": "send", "id": "e", "input": "still here"}),
        json!({"type": "connect", "id": "t", "key": "/bidi-flow/tick", "init": {"everyMs": 5}}),
        json!({"type": "close", "id": "t"}),
        json!({"type": "send", "id": "t", "input": null}),
        json!({"type": "cancel", "id": "t", "reason": "enough ticks"}),
        json!({"type": "close", "id": "e"}),
    ]));
    let run = run(&[], input);
    assert!(run.status.success(), "{}", run.stderr);

    // (id, code, what the message says)
    let expected = [
        (None, "malformed_frame", "not JSON"),
        (None, "malformed_frame", "a frame is a JSON object"),
        (None, "malformed_frame", "not JSON: EOF while parsing"),
        (Some("x"), "malformed_frame", "a frame needs a `type`"),
        (Some("x"), "unknown_frame_type", "unknown frame type `jump`"),
        (None, "malformed_frame", "a `send` frame needs an `id`"),
        (
            None,
            "malformed_frame",
            "bad frame: invalid type: integer `7`",
        ),
        (
            Some("ghost"),
            "unknown_connection",
            "no open connection `ghost`",
        ),
        (
            Some("ghost"),
            "unknown_connection",
            "no open connection `ghost`",
        ),
        (
            Some("ghost"),
            "unknown_connection",
            "no open connection `ghost`",
        ),
        (
            Some("e"),
            "not_found",
            "no action `echo`; did you mean `/bidi-flow/echo`?",
        ),
        (Some("e"), "not_found", "no action `/bidi-flow/translate`"),
        (
            Some("e"),
            "malformed_frame",
            "a `connect` frame needs a `key`",
        ),
        (
            Some("e"),
            "invalid_init",
            "invalid init at the root: invalid type: null",
        ),
        (Some("c"), "invalid_init", "invalid init at `/sessionId`"),
        (
            Some("e"),
            "duplicate_connection",
            "connection `e` is open already",
        ),
        (Some("e"), "invalid_input", "invalid input at the root"),
        (Some("t"), "send_failed", "send failed"),
        (Some("t"), "cancelled", "connection cancelled: enough ticks"),
    ];
    let errors = run.errors();
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (id, code, message) in expected {
        let found = errors.iter().any(|e| {
            e["id"].as_str() == id
                && e["code"] == code
                && e["message"].as_str().unwrap().contains(message)
        });
        assert!(
            found,
            "no {code} error for {id:?} saying {message:?} in {errors:#?}"
        );
    }
    let not_found: Vec<_> = errors.iter().filter(|e| e["code"] == "not_found").collect();
    assert_eq!(not_found[0]["suggestion"], "/bidi-flow/echo");
    assert!(not_found[1].get("suggestion").is_none());
    let paths: Vec<_> = errors
        .iter()
        .filter_map(|e| Some((e["code"].as_str()?, e.get("path")?.as_str()?)))
        .collect();
    assert_eq!(
        paths,
        [
            ("invalid_init", ""),
            ("invalid_init", "/sessionId"),
            ("invalid_input", "")
        ]
    );

    // The echo connection went on through all of it.
    let echo: Vec<_> = run
        .of("e")
        .into_iter()
        .filter(|f| f["type"] != "error")
        .collect();
    let (turns, output) = turns(&echo);
    assert_eq!(turns, ["> still> here"]);
    assert_eq!(output, 1);
}

#[test]
fn an_oversized_line_is_refused_and_the_stream_goes_on() {
    let huge = "x".repeat(10_000);
    let mut input = lines(&[
        json!({"type": "connect", "id": "e", "key": "/bidi-flow/echo", "init": ""}),
        json!({"type": "send", "id": "e", "input": huge}),
        json!({"type": "send", "id": "e", "input": "fits"}),
        json!({"type": "close", "id": "e"}),
    ]);
    // A last line over the limit, without its newline.
    input.push_str(&huge);
    let run = run(&["--max-frame-bytes", "256"], input);
    assert!(run.status.success(), "{}", run.stderr);
    let errors = run.errors();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    for error in &errors {
        assert_eq!(error["code"], "frame_too_large");
        assert!(error.get("id").is_none());
        let message = error["message"].as_str().unwrap();
        assert!(
            message.ends_with("bytes is over the limit of 256 bytes"),
            "{message}"
        );
    }
    let (turns, output) = turns(&run.of("e"));
    assert_eq!(turns, ["fits"]);
    assert_eq!(output, 1);
}

#[test]
fn end_of_input_closes_inputs_then_cancels_what_still_runs() {
    let run = run(
        &["--drain-ms", "200"],
        lines(&[
            json!({"type": "connect", "id": "e", "key": "/bidi-flow/echo", "init": ""}),
            json!({"type": "connect", "id": "t", "key": "/bidi-flow/tick", "init": {"everyMs": 20}}),
            json!({"type": "send", "id": "e", "input": "one two"}),
        ]),
    );
    assert!(run.status.success(), "{}", run.stderr);
    // End of input closed the echo's input: it finished, and its output was written.
    let (turns, output) = turns(&run.of("e"));
    assert_eq!(turns, ["onetwo"]);
    assert_eq!(output, 1);
    // The clock ignores its input closing: it was cancelled, saying why.
    let tick = run.of("t");
    let last = tick.last().unwrap();
    assert_eq!(last["code"], "connection_failed", "{tick:?}");
    // The one cause every transport gives for a departed peer.
    assert_eq!(last["message"], "connection cancelled: the peer went away");
    assert!(tick[..tick.len() - 1].iter().all(|f| f["type"] == "chunk"));
    assert!(
        run.stderr.contains("cancelled after") && run.stderr.contains("the peer went away"),
        "the action saw the cause: {}",
        run.stderr
    );
}

/// A server talked to one frame at a time.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Peer {
    fn start() -> Self {
        let mut child = spawn(&[]);
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, frame: &Value) {
        writeln!(self.stdin, "{frame}").expect("write a frame");
    }

    fn next(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read a frame");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Reads until a frame of type `kind` for `id`; returns it.
    fn until(&mut self, id: &str, kind: &str) -> Value {
        loop {
            let frame = self.next();
            if frame["id"] == id && frame["type"] == kind {
                return frame;
            }
        }
    }
}

#[test]
fn an_id_is_free_again_once_its_output_is_written() {
    let mut peer = Peer::start();
    for round in 1..=2 {
        peer.send(&json!({"type": "connect", "id": "a", "key": "/bidi-flow/echo", "init": ""}));
        peer.send(&json!({"type": "send", "id": "a", "input": format!("round{round}")}));
        assert_eq!(peer.until("a", "chunk")["chunk"], format!("round{round}"));
        peer.send(&json!({"type": "close", "id": "a"}));
        assert_eq!(peer.until("a", "output")["output"], 1);
    }
    drop(peer.stdin);
    let output = peer.child.wait_with_output().expect("exit");
    assert!(output.status.success());
    assert!(output.stdout.is_empty(), "nothing after the outputs");
}

#[test]
fn a_closed_stdout_cancels_every_connection() {
    let mut peer = Peer::start();
    peer.send(
        &json!({"type": "connect", "id": "t", "key": "/bidi-flow/tick", "init": {"everyMs": 5}}),
    );
    assert_eq!(peer.until("t", "chunk")["chunk"], 0);
    // The peer stops reading and closes its end; its stdin stays open.
    drop(peer.stdout);
    let status = peer.child.wait().expect("the server exits");
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut peer.child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("cancelled after")
            && stderr.contains("the peer went away: stdout is closed"),
        "{stderr}"
    );
    drop(peer.stdin);
}

#[test]
fn a_peer_that_does_not_read_stdout_is_not_read_either() {
    // Its stderr is not read either: the logs would fill the pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_stdio"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run the stdio example");
    let _deadline = tests::flood::deadline(child.id(), std::time::Duration::from_secs(300));
    let pairs = 20_000;
    let lines = (0..pairs)
        .flat_map(|n| {
            let id = format!("c{n}");
            [
                json!({"type": "connect", "id": id, "key": "/bidi-flow/echo", "init": ""}),
                json!({"type": "close", "id": id}),
            ]
        })
        .map(|frame| frame.to_string())
        .collect();
    let flood = tests::flood::flood(child.stdin.take().expect("stdin"), lines);
    // Nobody reads the outputs: once the connections writing them reach the bound, the server
    // reads no more frames.
    let stalled = flood
        .stalled()
        .expect("the server read every frame while nobody read its output");
    assert!(
        stalled < pairs / 2,
        "{stalled} of {} frames read",
        2 * pairs
    );
    // Read at last: every connection ends with its output, or was refused for the bound.
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ended = vec![0u8; pairs];
    for line in stdout.lines() {
        let frame: Value = serde_json::from_str(&line.expect("a line")).expect("a frame");
        let n: usize = frame["id"].as_str().expect("an id")[1..]
            .parse()
            .expect("a number");
        match (frame["type"].as_str(), frame["code"].as_str()) {
            (Some("output"), _) | (Some("error"), Some("too_many_connections")) => ended[n] += 1,
            // A refused connection's `close`.
            (Some("error"), Some("unknown_connection")) => {}
            _ => panic!("{frame}"),
        }
    }
    assert!(ended.iter().all(|ended| *ended == 1), "one end each");
    flood.finish().expect("every frame written");
    assert!(child.wait().expect("exit").success());
}

#[test]
fn what_a_peer_sent_is_escaped_in_the_log() {
    let forged = "a\nforged line \u{1b}[31mred";
    let frames = [
        json!({"type": "connect", "id": forged, "key": "/nope", "init": null}),
        json!({"type": "connect", "id": forged, "key": "/bidi-flow/echo", "init": ""}),
        json!({"type": "send", "id": forged, "input": "hi"}),
        json!({"type": "close", "id": forged}),
        json!({"type": forged, "id": "x"}),
        json!({"type": "connect", "id": "t", "key": "/bidi-flow/tick", "init": {"everyMs": 5}}),
        json!({"type": "cancel", "id": "t", "reason": forged}),
    ];
    let input: String = frames.iter().map(|frame| format!("{frame}\n")).collect();
    let run = run(&[], input);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(!run.stderr.contains('\u{1b}'), "{:?}", run.stderr);
    assert!(
        run.stderr.lines().all(|line| line.starts_with("[stdio] ")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("forged line"), "{}", run.stderr);
}

#[test]
fn a_peer_that_does_not_read_stderr_still_gets_every_answer() {
    // Stderr is piped and never read: the logs fill the pipe (64 KiB) long before the end.
    let mut child = spawn(&[]);
    let _stderr = child.stderr.take().expect("stderr");
    // A server stalled on its logs is killed, and the count below fails.
    let _deadline = tests::flood::deadline(child.id(), std::time::Duration::from_secs(120));
    let frames = 5_000;
    let kind = "x".repeat(100);
    // Each refused frame is logged, its type quoted: about 200 bytes of log a frame.
    let lines = (0..frames)
        .map(|n| json!({"type": kind, "id": format!("f{n}")}).to_string())
        .collect();
    let flood = tests::flood::flood(child.stdin.take().expect("stdin"), lines);
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut answered = 0;
    for line in stdout.lines() {
        let frame: Value = serde_json::from_str(&line.expect("a line")).expect("a frame");
        assert_eq!(frame["code"], "unknown_frame_type", "{frame}");
        assert_eq!(frame["id"], format!("f{answered}"), "{frame}");
        answered += 1;
    }
    assert_eq!(answered, frames, "every frame answered");
    flood.finish().expect("every frame written");
    assert!(child.wait().expect("exit").success());
}

#[test]
fn a_long_id_is_refused_and_not_echoed() {
    let long = "i".repeat(100_000);
    let run = run(
        &[],
        lines(&[
            json!({"type": "connect", "id": long, "key": "/bidi-flow/echo", "init": ""}),
            json!({"type": "send", "id": long, "input": "x"}),
            json!({"type": "connect", "id": "a", "key": "/bidi-flow/echo", "init": ""}),
            json!({"type": "send", "id": "a", "input": "still here"}),
            json!({"type": "close", "id": "a"}),
        ]),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let errors = run.errors();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    for error in errors {
        assert_eq!(error["code"], "malformed_frame");
        assert!(error.get("id").is_none(), "{error}");
        assert!(error.to_string().len() < 200, "{error}");
    }
    // The other connection went on.
    let (turns, output) = turns(&run.of("a"));
    assert_eq!((turns, output), (vec!["stillhere".to_owned()], json!(1)));
}
