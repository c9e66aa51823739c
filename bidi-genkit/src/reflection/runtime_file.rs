//! The runtime file that announces a runtime to Genkit's tools:
//! `<projectRoot>/.genkit/runtimes/<pid>-<port>-<ms>.json`, which `genkit start` watches.
//! The project root is found the tools' way (their markers, not `Cargo.toml`), and the file is
//! removed when serving ends or the runtime is dropped.
//!
//! # Announced until found
//!
//! `genkit start` reads the directory, then watches it; a file written between the two is
//! never seen (its CLI 1.43 lists no runtime then, however long it runs). A program that
//! starts fast writes its file in that gap now and then, so a runtime the tools have not
//! notified (their `POST /api/notify` follows every runtime they find) writes its file anew,
//! under a new name, after 1, 2, 4, 8 and 16 seconds ([`ANNOUNCE_AGAIN`]), then stops: a
//! runtime started with no tools running costs five small writes, and tools started later
//! read the file that is there.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::Notify;

/// The files that make a directory a project root for Genkit's tools. `Cargo.toml` is not one:
/// a Rust program is found through a marker beside or above it, as the tools find it.
pub(crate) const MARKERS: [&str; 8] = [
    "package.json",
    "go.mod",
    "pyproject.toml",
    "requirements.txt",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
    "pubspec.yaml",
];

/// The project root Genkit's tools find from `dir`: the first of `dir` and its ancestors (the
/// filesystem's root excluded, as the tools exclude it) that holds one of the [`MARKERS`], or
/// `dir` itself when none does.
pub(crate) fn project_root(dir: &Path) -> PathBuf {
    dir.ancestors()
        .take_while(|ancestor| ancestor.parent().is_some())
        .find(|ancestor| MARKERS.iter().any(|marker| ancestor.join(marker).exists()))
        .unwrap_or(dir)
        .to_path_buf()
}

/// What a runtime file says: the reflection API's version 1 fields.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Info<'a> {
    pub(crate) id: &'a str,
    pub(crate) pid: u32,
    pub(crate) name: &'a str,
    pub(crate) reflection_server_url: &'a str,
    pub(crate) timestamp: String,
    pub(crate) genkit_version: &'a str,
    pub(crate) reflection_api_spec_version: u32,
}

/// The waits after which a runtime the tools have not notified writes its file anew.
pub(crate) const ANNOUNCE_AGAIN: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
];

/// A runtime file written under a project root; removed when dropped, if it is still this
/// process's.
#[derive(Debug)]
pub(crate) struct RuntimeFile {
    /// `<root>/.genkit/runtimes`.
    dir: PathBuf,
    /// The runtime's id, which starts the file's name.
    id: String,
    /// What the file says.
    json: Vec<u8>,
    path: PathBuf,
}

impl RuntimeFile {
    /// Writes `info` to `<root>/.genkit/runtimes/<id>-<ms>.json`, making the directories.
    pub(crate) fn write(root: &Path, info: &Info<'_>, now: SystemTime) -> io::Result<Self> {
        let dir = root.join(".genkit").join("runtimes");
        fs::create_dir_all(&dir)?;
        let json = serde_json::to_vec_pretty(info).map_err(io::Error::other)?;
        let path = named(&dir, info.id, now);
        // One write of a few hundred bytes: the tools read it again if they catch it half
        // written.
        fs::write(&path, &json)?;
        Ok(Self {
            dir,
            id: info.id.to_owned(),
            json,
            path,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the file anew under the name of `now`, the old one removed first: the tools see
    /// a runtime go and come back, never two files of one runtime.
    fn renew(&mut self, now: SystemTime) -> io::Result<()> {
        let path = named(&self.dir, &self.id, now);
        if path == self.path {
            return Ok(());
        }
        self.remove();
        fs::write(&path, &self.json)?;
        self.path = path;
        Ok(())
    }

    /// Removes the file, if it is still this process's: another process's under the same name
    /// (a reused pid) is left alone.
    fn remove(&self) {
        let ours = fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|info| info.get("pid").and_then(serde_json::Value::as_u64))
            == Some(u64::from(std::process::id()));
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl Drop for RuntimeFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `<dir>/<id>-<ms>.json`.
fn named(dir: &Path, id: &str, now: SystemTime) -> PathBuf {
    dir.join(format!("{id}-{}.json", bidi_http::time::unix_millis(now)))
}

/// Writes `file` anew after each of `waits` until `found` is notified (the tools'
/// `POST /api/notify` came), then returns; returns after the last wait too. A file that cannot
/// be written anew ends the announcing: the runtime serves on, and its file, if any, stays.
///
/// # Cancel safety
///
/// Dropping the future leaves `file` as it last wrote it.
pub(crate) async fn announce(file: &mut RuntimeFile, found: &Notify, waits: &[Duration]) {
    for wait in waits {
        tokio::select! {
            () = found.notified() => return,
            () = tokio::time::sleep(*wait) => {}
        }
        if file.renew(SystemTime::now()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    #[test]
    fn the_project_root_is_the_nearest_marked_ancestor() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        let deep = root.join("app").join("src").join("bin");
        fs::create_dir_all(&deep).unwrap();
        // Cargo.toml marks nothing: with no marker the root is the directory itself.
        fs::write(root.join("app").join("Cargo.toml"), "").unwrap();
        assert_eq!(project_root(&deep), deep);
        // Each marker marks its directory; the nearest wins.
        for marker in MARKERS {
            fs::write(root.join(marker), "").unwrap();
            assert_eq!(project_root(&deep), root, "{marker}");
            fs::write(root.join("app").join(marker), "").unwrap();
            assert_eq!(project_root(&deep), root.join("app"), "{marker}");
            fs::remove_file(root.join(marker)).unwrap();
            fs::remove_file(root.join("app").join(marker)).unwrap();
        }
        // A marker that is a directory counts too, as the tools test only that it exists.
        fs::create_dir(root.join("app").join("src").join("go.mod")).unwrap();
        assert_eq!(project_root(&deep), root.join("app").join("src"));
    }

    #[test]
    fn the_file_is_written_under_the_root_and_removed_on_drop() {
        let temp = tempfile::tempdir().unwrap();
        let now = std::time::UNIX_EPOCH + Duration::from_millis(1_795_395_824_521);
        let info = Info {
            id: "42-3100",
            pid: std::process::id(),
            name: "demo",
            reflection_server_url: "http://127.0.0.1:3100",
            timestamp: bidi_http::time::rfc3339(now),
            genkit_version: "bidi-genkit/0.1.0",
            reflection_api_spec_version: 1,
        };
        let file = RuntimeFile::write(temp.path(), &info, now).unwrap();
        let path = file.path().to_path_buf();
        assert_eq!(
            path,
            temp.path()
                .join(".genkit/runtimes/42-3100-1795395824521.json")
        );
        let written: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({
                "id": "42-3100", "pid": std::process::id(), "name": "demo",
                "reflectionServerUrl": "http://127.0.0.1:3100",
                "timestamp": "2026-11-23T01:03:44.521Z",
                "genkitVersion": "bidi-genkit/0.1.0", "reflectionApiSpecVersion": 1
            })
        );
        drop(file);
        assert!(!path.exists());

        // A file another process wrote under the name is left.
        let file = RuntimeFile::write(temp.path(), &info, now).unwrap();
        fs::write(file.path(), br#"{"pid": 1}"#).unwrap();
        let path = file.path().to_path_buf();
        drop(file);
        assert!(path.exists());
    }

    /// A runtime file of this process, written at the epoch under `root`.
    fn written(root: &Path) -> RuntimeFile {
        let info = Info {
            id: "42-3100",
            pid: std::process::id(),
            name: "demo",
            reflection_server_url: "http://127.0.0.1:3100",
            timestamp: "2026-11-23T01:03:44.521Z".to_owned(),
            genkit_version: "bidi-genkit/0.1.0",
            reflection_api_spec_version: 1,
        };
        RuntimeFile::write(root, &info, SystemTime::UNIX_EPOCH).unwrap()
    }

    /// The files of `<root>/.genkit/runtimes`, by name, with what they say.
    fn files(root: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = fs::read_dir(root.join(".genkit/runtimes"))
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                (name, fs::read(entry.path()).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_not_found_writes_its_file_anew_after_each_wait_then_stops() {
        let temp = tempfile::tempdir().unwrap();
        let mut file = written(temp.path());
        let first = file.path().to_path_buf();
        let said = fs::read(&first).unwrap();
        let waits = [Duration::from_millis(5), Duration::from_millis(5)];

        let started = tokio::time::Instant::now();
        announce(&mut file, &Notify::new(), &waits).await;
        assert_eq!(started.elapsed(), Duration::from_millis(10));
        // One file, under a new name, saying the same.
        assert_ne!(file.path(), first);
        assert!(!first.exists());
        let left = files(temp.path());
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].1, said);
        assert!(left[0].0.starts_with("42-3100-"), "{left:?}");
        drop(file);
        assert!(files(temp.path()).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_the_tools_notified_keeps_its_file() {
        let temp = tempfile::tempdir().unwrap();
        let mut file = written(temp.path());
        let first = file.path().to_path_buf();
        let found = Notify::new();
        // Notified before the announcing began: the notice is kept for it.
        found.notify_one();
        let started = tokio::time::Instant::now();
        announce(&mut file, &found, &ANNOUNCE_AGAIN).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(file.path(), first);
        assert!(first.exists());

        // A file another process took over under the name is not removed by a renewal.
        fs::write(&first, br#"{"pid": 1}"#).unwrap();
        announce(&mut file, &Notify::new(), &[Duration::from_millis(1)]).await;
        assert!(first.exists());
        assert_eq!(files(temp.path()).len(), 2);
    }
}
