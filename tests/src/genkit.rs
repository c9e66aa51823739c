//! Driving a bidi program with Genkit's own tools: [`cli`] installs the pinned `genkit-cli` of
//! `tests/genkit-cli`, [`Group`] runs a program (the CLI, or the `reflection-runtime` program it
//! starts) in a process group of its own and stops it the way a person at a terminal does
//! (SIGINT to the group), and [`project`] makes a project directory for the CLI to work in.
//!
//! ```no_run
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let cli = tests::genkit::cli()?;
//! let project = tests::genkit::project();
//! let mut command = Command::new(&cli);
//! command.args(["start", "--non-interactive", "-p", "4000", "--", "my-program"]);
//! let mut genkit = tests::genkit::Group::spawn(command, project.path())?;
//! genkit.wait_for(Duration::from_secs(60), |out| out.contains("Genkit Developer UI"))?;
//! genkit.interrupt()?;
//! # Ok::<(), String>(())
//! ```

use std::io::{BufRead as _, BufReader, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The directory of the pinned `genkit-cli`: `tests/genkit-cli`.
#[must_use]
pub fn cli_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("genkit-cli")
}

/// Installs the pinned `genkit-cli` (`npm ci`, once per process) and answers its `genkit`
/// command.
///
/// # Errors
///
/// `npm ci` failed (see [`npm_ci`](crate::node::npm_ci)), or installed no `genkit` command.
pub fn cli() -> Result<PathBuf, String> {
    let dir = cli_dir();
    crate::node::npm_ci(&dir)?;
    let genkit = dir.join("node_modules").join(".bin").join("genkit");
    if genkit.exists() {
        Ok(genkit)
    } else {
        Err(format!("npm ci installed no {}", genkit.display()))
    }
}

/// A project directory for Genkit's tools: a temporary directory with a `package.json` (one of
/// the markers the tools find a project root by) and a `home` directory to be the tools'
/// `HOME`, so that their configuration and downloads stay in it.
///
/// # Panics
///
/// If the temporary directory cannot be made.
#[must_use]
pub fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("package.json"),
        r#"{"name": "bidi-genkit-project", "private": true}"#,
    )
    .expect("package.json written");
    std::fs::create_dir(dir.path().join("home")).expect("home made");
    dir
}

/// A free port of 127.0.0.1 (free when asked: bind it soon).
///
/// # Panics
///
/// If no port can be bound.
#[must_use]
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A program running in a process group of its own, its stdout and stderr collected (and printed
/// if a test fails while it runs). Dropped, it is interrupted (and killed if it does not stop).
#[derive(Debug)]
pub struct Group {
    child: Child,
    output: Arc<Mutex<String>>,
}

/// How long an interrupted group has to exit before it is killed.
const STOP: Duration = Duration::from_secs(20);

impl Group {
    /// Runs `command` in `dir`, in a new process group.
    ///
    /// # Errors
    ///
    /// The program could not be started.
    pub fn spawn(mut command: Command, dir: &Path) -> Result<Self, String> {
        let mut child = command
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run {command:?}: {e}"))?;
        let output = Arc::new(Mutex::new(String::new()));
        if let Some(stdout) = child.stdout.take() {
            collect(stdout, Arc::clone(&output));
        }
        if let Some(stderr) = child.stderr.take() {
            collect(stderr, Arc::clone(&output));
        }
        Ok(Self { child, output })
    }

    /// Its process id (the group's id too).
    #[must_use]
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed so far, stdout and stderr as the lines came.
    #[must_use]
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until what it printed satisfies `done`, and answers it.
    ///
    /// # Errors
    ///
    /// It exited first, or `within` went by: with what it printed.
    pub fn wait_for(
        &mut self,
        within: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let output = self.output();
            if done(&output) {
                return Ok(output);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                thread::sleep(Duration::from_millis(100));
                return Err(format!("exited ({status}):\n{}", self.output()));
            }
            if Instant::now() > deadline {
                return Err(format!("nothing after {within:?}:\n{output}"));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGINT to the group, as Ctrl-C does (Genkit's CLI ignores SIGTERM), and waits for
    /// the program to exit; kills the group if it has not within 20 s.
    ///
    /// # Errors
    ///
    /// It had to be killed, or could not be waited for.
    pub fn interrupt(&mut self) -> Result<ExitStatus, String> {
        let group = Pid::from_raw(i32::try_from(self.child.id()).map_err(|e| e.to_string())?);
        let _ = killpg(group, Signal::SIGINT);
        let deadline = Instant::now() + STOP;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                Ok(None) => {
                    let _ = killpg(group, Signal::SIGKILL);
                    let _ = self.child.wait();
                    return Err(format!(
                        "did not stop within {STOP:?} of SIGINT:\n{}",
                        self.output()
                    ));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

impl Drop for Group {
    /// Interrupts the program if it runs; when a test failed, prints what it printed.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.interrupt();
        }
        if thread::panicking() {
            eprintln!("--- what {:?} printed:\n{}", self.child.id(), self.output());
        }
    }
}

/// Appends what `from` prints to `output`, line by line, in a thread.
fn collect(from: impl Read + Send + 'static, output: Arc<Mutex<String>>) {
    thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            let mut output = output.lock().unwrap_or_else(PoisonError::into_inner);
            output.push_str(&line);
            output.push('\n');
        }
    });
}
