//! The assistant's local tools: [`word_count`] runs at once, [`save_note`] changes something
//! and so runs only once the user approves the call.

use std::convert::Infallible;
use std::path::PathBuf;

use bidi_llm::{Tool, simple_tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;

// The arguments are optional in the schemas (and `request` is another name for them): the demo
// model, which needs no service, calls a tool that requires nothing but a `request` (filling
// its first string field with the user's message) rather than the tools an editor offers
// (`run_command`, which requires more).

/// What `word_count` counts.
#[derive(Debug, Deserialize, JsonSchema)]
struct Text {
    /// The text to count the words of.
    #[serde(default, alias = "request")]
    text: String,
}

/// What `save_note` saves.
#[derive(Debug, Deserialize, JsonSchema)]
struct Note {
    /// The note, one line.
    #[serde(default, alias = "request")]
    note: String,
}

/// A local tool that needs no approval: counts the words of a text (`{"text": ..}`).
///
/// ```
/// use futures_util::StreamExt as _;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let count = bidi_demo::word_count();
/// assert!(!count.requires_approval());
/// let events: Vec<_> = count.run("c1".into(), json!({"text": "one two three"})).collect().await;
/// assert!(matches!(&events[..], [bidi_llm::ToolEvent::Complete { output, .. }] if output == "3 words"));
/// # }
/// ```
#[must_use]
pub fn word_count() -> Tool {
    simple_tool(
        "word_count",
        "Word count",
        "Counts the words of a text",
        |_id, text: Text| async move {
            let words = text.text.split_whitespace().count();
            let unit = if words == 1 { "word" } else { "words" };
            Ok::<_, Infallible>((format!("{words} {unit}"), Some(json!({ "words": words }))))
        },
    )
}

/// A local tool that changes something, so its calls wait for the user's approval: appends a
/// note (`{"note": ..}`, one line: line breaks become spaces) to the file `notes`. It fails,
/// for the model to read, when there is no note or the file cannot be written.
///
/// ```
/// use futures_util::StreamExt as _;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let dir = tempfile::tempdir().unwrap();
/// let notes = dir.path().join("notes.txt");
/// let save = bidi_demo::save_note(notes.clone());
/// assert!(save.requires_approval());
/// let _: Vec<_> = save.run("c1".into(), json!({"note": "buy milk"})).collect().await;
/// assert_eq!(std::fs::read_to_string(&notes).unwrap(), "buy milk\n");
/// // No note: nothing is saved, and the model reads why.
/// let events: Vec<_> = save.run("c2".into(), json!({})).collect().await;
/// assert!(matches!(&events[..], [bidi_llm::ToolEvent::Failed(_)]));
/// assert_eq!(std::fs::read_to_string(&notes).unwrap(), "buy milk\n");
/// # }
/// ```
#[must_use]
pub fn save_note(notes: PathBuf) -> Tool {
    simple_tool(
        "save_note",
        "Save a note",
        "Appends a note to the user's notes file",
        move |_id, note: Note| {
            let notes = notes.clone();
            async move {
                let line = note.note.lines().collect::<Vec<_>>().join(" ");
                if line.trim().is_empty() {
                    return Err("there is no note to save: give it as `note`".to_owned());
                }
                let mut file = tokio::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&notes)
                    .await
                    .map_err(|error| format!("cannot open {}: {error}", notes.display()))?;
                file.write_all(format!("{line}\n").as_bytes())
                    .await
                    .map_err(|error| format!("cannot write {}: {error}", notes.display()))?;
                // Written before the result says so.
                file.flush()
                    .await
                    .map_err(|error| format!("cannot write {}: {error}", notes.display()))?;
                Ok::<_, String>((
                    format!("saved to {}", notes.display()),
                    Some(json!({ "path": notes, "note": line })),
                ))
            }
        },
    )
    .needs_approval()
}
