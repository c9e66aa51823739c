//! The `serve` example's chat page in a real browser: a headless Chromium loads it, sends a
//! prompt over AG-UI and over the UI message stream, and the streamed answer is in the page.
//! A screenshot of each is kept under the test's target dir.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use tests::browser::browse;

/// What the page shows once its prompt's answer (or its error) is in.
const DONE: &str = r#"body[data-done="1"]"#;

/// The `serve` example on a free port of 127.0.0.1, killed when dropped.
struct Serve {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Serve {
    fn start() -> Self {
        Self::with(&[])
    }

    /// With more arguments.
    fn with(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
            .args(["--addr", "127.0.0.1:0", "--db"])
            .arg(dir.path().join("sessions.sqlite3"))
            .args(args)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("BIDI_POSTGRES_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        // Keep reading what it prints after, so that it never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("serve said {first:?}"))
            .to_owned();
        Self {
            child,
            url,
            _dir: dir,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_page_streams_an_answer_over_both_protocols() {
    let serve = Serve::start();
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    for protocol in ["ag-ui", "ui-message-stream"] {
        let url = format!("{}/?protocol={protocol}&prompt=hello%20there", serve.url);
        let dom = browse(&url, DONE, None);
        // The demo model answers "You said: hello there", streamed word by word.
        assert!(
            dom.contains("You said: hello there"),
            "{protocol}: no streamed answer in the page:\n{dom}"
        );
        assert!(
            dom.contains(r#"data-done="1""#),
            "{protocol}: the run did not end:\n{dom}"
        );
        assert!(
            !dom.contains(r#"class="turn error""#),
            "{protocol}: an error:\n{dom}"
        );
        let shot = artifacts.join(format!("page-{protocol}.png"));
        let _ = browse(&url, DONE, Some(shot.as_path()));
        let png = std::fs::read(&shot).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{}: not a PNG", shot.display());
        eprintln!("screenshot: {}", shot.display());
    }
}

#[test]
fn a_page_of_another_origin_talks_to_serve_with_cors() {
    let page = Serve::start();
    // The page's origin is its server's: `http://127.0.0.1:{port}`.
    let allowing = Serve::with(&["--cors", &page.url]);
    let refusing = Serve::start();
    for protocol in ["ag-ui", "ui-message-stream"] {
        let url = format!(
            "{}/?protocol={protocol}&prompt=across%20origins&server={}",
            page.url, allowing.url
        );
        let dom = browse(&url, DONE, None);
        assert!(
            dom.contains("You said: across origins"),
            "{protocol}: no answer from the other origin:\n{dom}"
        );
        assert!(!dom.contains(r#"class="turn error""#), "{protocol}:\n{dom}");

        // Without CORS the browser refuses to let the page read the answer.
        let url = format!(
            "{}/?protocol={protocol}&prompt=across%20origins&server={}",
            page.url, refusing.url
        );
        let dom = browse(&url, DONE, None);
        assert!(
            !dom.contains("You said: across origins"),
            "{protocol}:\n{dom}"
        );
        assert!(dom.contains(r#"class="turn error""#), "{protocol}:\n{dom}");
    }
}
