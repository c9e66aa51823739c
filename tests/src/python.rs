//! Python peers: [`venv`] makes (once) a virtual environment holding a requirements file's
//! packages, whose interpreter runs the Python peer scripts with [`crate::node::run`].
//!
//! ```no_run
//! use std::path::Path;
//! use std::process::Command;
//!
//! let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("acp");
//! let python = tests::python::venv(&peers.join("requirements.txt"))?;
//! let mut client = Command::new(python);
//! client.arg(peers.join("py_client.py")).args(["/path/to/acp-agent", "/tmp"]);
//! let summary = tests::node::run(client);
//! assert!(summary.succeeded(), "{summary}");
//! # Ok::<(), String>(())
//! ```

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

/// The file, in a virtual environment, holding the requirements installed in it.
const MARKER: &str = ".bidi-requirements";

/// Returns the interpreter of a virtual environment holding the packages of the pip
/// requirements file `requirements`, making it first if needed:
/// `$HOME/.cache/bidi-venv-<hash of the file's bytes>`, made with `python3 -m venv` and
/// `pip install -r`. A directory whose `.bidi-requirements` is not a copy of the file (an
/// install that did not finish) is made again.
///
/// Runs at most once per requirements text per process: later calls return the first call's
/// result. Concurrent test processes take turns through an exclusive lock on
/// `$HOME/.cache/bidi-venv-<hash>.lock`, so one installs and the others find it installed.
/// `.ci/run` makes the same directory the same way before the tests run.
///
/// Blocks while pip runs (about ten seconds from an empty cache): call it from
/// `tokio::task::spawn_blocking` in an async test.
///
/// # Errors
///
/// `requirements` unreadable, `HOME` unset, `python3` or its `venv` module missing (Debian's
/// `python3-venv`), or `pip install` failing (with the end of its output).
pub fn venv(requirements: &Path) -> Result<PathBuf, String> {
    static VENVS: OnceLock<Mutex<HashMap<Vec<u8>, Result<PathBuf, String>>>> = OnceLock::new();
    let wanted = fs::read(requirements)
        .map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
    let cache = Path::new(&home).join(".cache");
    let mut venvs = VENVS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    venvs
        .entry(wanted.clone())
        .or_insert_with(|| venv_in(&cache, requirements, &wanted))
        .clone()
}

/// [`venv`]'s work in the directory `cache`, for the requirements file `path` holding `wanted`.
fn venv_in(cache: &Path, path: &Path, wanted: &[u8]) -> Result<PathBuf, String> {
    let name = format!("bidi-venv-{:016x}", fnv1a(wanted));
    let dir = cache.join(&name);
    fs::create_dir_all(cache).map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    let lock_path = cache.join(format!("{name}.lock"));
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("cannot open the lock {}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    let python = dir.join("bin").join("python");
    if python.exists() && fs::read(dir.join(MARKER)).is_ok_and(|have| have == wanted) {
        return Ok(python);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]).arg(&dir);
    checked(
        make,
        "python3 -m venv (on Debian: apt-get install python3-venv)",
    )?;
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
    ])
    .arg(path);
    checked(pip, "pip install")?;
    fs::write(dir.join(MARKER), wanted)
        .map_err(|e| format!("cannot write {}: {e}", dir.join(MARKER).display()))?;
    Ok(python)
}

/// Runs `command` with no stdin; an error with the end of its output unless it succeeds.
fn checked(mut command: Command, what: &str) -> Result<Output, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if output.status.success() {
        return Ok(output);
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    Err(format!(
        "{what} failed ({}):\n{}",
        output.status,
        lines[lines.len().saturating_sub(40)..].join("\n")
    ))
}

/// The 64-bit FNV-1a hash of `bytes`: stable across Rust versions, and a line of Python in
/// `.ci/run`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_reference_hash() {
        // The FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_venv_is_made_once_and_remade_when_unfinished() {
        let cache = tempfile::tempdir().unwrap();
        let requirements = cache.path().join("requirements.txt");
        // No package: pip installs nothing, without the network.
        let wanted = b"# nothing\n";
        fs::write(&requirements, wanted).unwrap();
        let python = venv_in(cache.path(), &requirements, wanted).unwrap();
        let dir = python.parent().unwrap().parent().unwrap().to_owned();
        assert_eq!(
            dir.file_name().unwrap().to_str().unwrap(),
            format!("bidi-venv-{:016x}", fnv1a(wanted))
        );
        assert_eq!(fs::read(dir.join(MARKER)).unwrap(), wanted);
        let version = checked(
            {
                let mut c = Command::new(&python);
                c.arg("--version");
                c
            },
            "python --version",
        )
        .unwrap();
        assert!(String::from_utf8_lossy(&version.stdout).starts_with("Python 3"));

        // Made: the second call keeps the directory.
        fs::write(dir.join("sentinel"), "").unwrap();
        assert_eq!(
            venv_in(cache.path(), &requirements, wanted).unwrap(),
            python
        );
        assert!(dir.join("sentinel").exists());

        // Unfinished (no marker): made again.
        fs::remove_file(dir.join(MARKER)).unwrap();
        assert_eq!(
            venv_in(cache.path(), &requirements, wanted).unwrap(),
            python
        );
        assert!(!dir.join("sentinel").exists());
        assert_eq!(fs::read(dir.join(MARKER)).unwrap(), wanted);
    }

    #[test]
    fn a_failing_install_is_an_error_and_leaves_no_marker() {
        let cache = tempfile::tempdir().unwrap();
        let requirements = cache.path().join("requirements.txt");
        let wanted = b"--this-is-not-a-pip-option\n";
        fs::write(&requirements, wanted).unwrap();
        let error = venv_in(cache.path(), &requirements, wanted).unwrap_err();
        assert!(error.contains("pip install failed"), "{error}");
        let dir = cache
            .path()
            .join(format!("bidi-venv-{:016x}", fnv1a(wanted)));
        assert!(!dir.join(MARKER).exists());
        assert!(venv(&cache.path().join("missing.txt")).is_err());
    }
}
