//! Pages in a real browser: a headless Chromium loads a URL and gives back the DOM its scripts
//! built (or a screenshot), and [`bundle`] builds the React pages of `tests/node/browser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::node::npm_ci;

/// The Chromium on `PATH`.
///
/// # Panics
///
/// When there is none, naming the package to install.
#[must_use]
pub fn chromium() -> &'static str {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|output| output.status.success())
        })
        .expect(
            "a headless Chromium is needed: `apt-get install chromium` (the README's set-up \
             names every package the tests need; .ci/run installs it)",
        )
}

/// Loads `url` in headless Chromium; with `screenshot`, saves one there and returns nothing,
/// else returns the DOM once the page's scripts ran, for at most `budget_ms` of the page's
/// (virtual) time.
///
/// # Panics
///
/// When Chromium cannot run or fails.
#[must_use]
pub fn browse(url: &str, budget_ms: u32, screenshot: Option<&Path>) -> String {
    // A profile of its own, removed afterwards: without one, headless Chromium leaves a
    // scoped profile with its cache (tens of MB) under ~/.cache/chromium-headless per run.
    let profile = tempfile::tempdir().expect("a temporary directory");
    let mut command = Command::new(chromium());
    command.arg(format!("--user-data-dir={}", profile.path().display()));
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--window-size=900,600",
    ]);
    command.arg(format!("--virtual-time-budget={budget_ms}"));
    match screenshot {
        Some(path) => command.arg(format!("--screenshot={}", path.display())),
        None => command.arg("--dump-dom"),
    };
    let output = command
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", chromium()));
    assert!(output.status.success(), "chromium failed on {url}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Bundles the page `tests/node/browser/{page}.jsx` (`chat` or `copilotkit`) with esbuild,
/// after `npm ci` of `tests/node`, into `dir/{page}.js`, and returns that path.
///
/// # Panics
///
/// When the install or the build fails.
#[must_use]
pub fn bundle(page: &str, dir: &Path) -> PathBuf {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    if let Err(e) = npm_ci(&clients) {
        panic!("npm ci in {}: {e}", clients.display());
    }
    let out = dir.join(format!("{page}.js"));
    let status = Command::new("node")
        .arg(clients.join("browser").join("build.mjs"))
        .arg(page)
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    assert!(status.success(), "esbuild failed on {page}");
    out
}
