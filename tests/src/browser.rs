//! Pages in a real browser: a headless Chromium loads a URL and, once the page shows what the
//! test waits for, gives back the DOM its scripts built (or a screenshot); [`bundle`] builds
//! the React pages of `tests/node/browser`.

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

/// Loads `url` in headless Chromium and waits until an element matches `until` (a CSS
/// selector: what says the page got where the test looks, its answer done or its error shown);
/// with `screenshot`, saves one there and returns nothing, else returns the DOM then.
///
/// The wait is for that condition, bounded only by a generous deadline (four minutes) for a
/// page that never gets there, so a loaded machine makes it slower, not failed. Chromium is
/// driven by puppeteer-core from `tests/node` (installed with [`npm_ci`] first).
///
/// # Panics
///
/// When Chromium or Node cannot run, or the page never shows `until` (with the DOM it had and
/// its errors).
#[must_use]
pub fn browse(url: &str, until: &str, screenshot: Option<&Path>) -> String {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    if let Err(e) = npm_ci(&clients) {
        panic!("npm ci in {}: {e}", clients.display());
    }
    let _ = chromium();
    let mut command = Command::new("node");
    command
        .arg(clients.join("browser").join("load.mjs"))
        .arg(url)
        .arg(until);
    if let Some(path) = screenshot {
        command.arg(path);
    }
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    assert!(
        output.status.success(),
        "the page {url} never showed {until}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Bundles the page `tests/node/browser/{page}.jsx` (`chat` or `copilotkit`; `chat-ai7` is
/// `chat.jsx` on the AI SDK 7 of `tests/node7`) with esbuild, after `npm ci` of `tests/node`
/// (and of `tests/node7` for `chat-ai7`), into `dir/{page}.js`, and returns that path.
///
/// # Panics
///
/// When the install or the build fails.
#[must_use]
pub fn bundle(page: &str, dir: &Path) -> PathBuf {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("node");
    let mut installs = vec![clients.clone()];
    if page.ends_with("-ai7") {
        installs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("node7"));
    }
    for dir in installs {
        if let Err(e) = npm_ci(&dir) {
            panic!("npm ci in {}: {e}", dir.display());
        }
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
