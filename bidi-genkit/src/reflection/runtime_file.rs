//! The runtime file that announces a runtime to Genkit's tools:
//! `<projectRoot>/.genkit/runtimes/<pid>-<port>-<ms>.json`, which `genkit start` watches.
//! The project root is found the tools' way (their markers, not `Cargo.toml`), and the file is
//! removed when serving ends or the runtime is dropped.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

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

/// A runtime file written under a project root; removed when dropped, if it is still this
/// process's.
#[derive(Debug)]
pub(crate) struct RuntimeFile {
    path: PathBuf,
}

impl RuntimeFile {
    /// Writes `info` to `<root>/.genkit/runtimes/<id>-<ms>.json`, making the directories.
    pub(crate) fn write(root: &Path, info: &Info<'_>, now: SystemTime) -> io::Result<Self> {
        let dir = root.join(".genkit").join("runtimes");
        fs::create_dir_all(&dir)?;
        let path = dir.join(format!(
            "{}-{}.json",
            info.id,
            bidi_http::time::unix_millis(now)
        ));
        let json = serde_json::to_vec_pretty(info).map_err(io::Error::other)?;
        // One write of a few hundred bytes: the tools read it again if they catch it half
        // written.
        fs::write(&path, json)?;
        Ok(Self { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RuntimeFile {
    fn drop(&mut self) {
        // Another process's file under the same name (a reused pid) is left alone.
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
}
