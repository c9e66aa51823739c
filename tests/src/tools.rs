//! Tools the front-end tests share.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bidi_llm::{Tool, ToolEvent};
use serde_json::{Value, json};

/// `wipe`: a local tool that needs approval and returns `wiped {target}`, counting its runs in
/// `runs`.
#[must_use]
pub fn wipe(runs: Arc<AtomicUsize>) -> Tool {
    Tool::dynamic(
        "wipe",
        "Wipe",
        "Wipes a target",
        json!({"type": "object", "properties": {"target": {"type": "string"}}}),
        move |_id, args: Value| {
            runs.fetch_add(1, Ordering::SeqCst);
            let target = args["target"].as_str().unwrap_or_default().to_owned();
            futures_util::stream::iter([ToolEvent::Complete {
                output: format!("wiped {target}"),
                details: None,
            }])
        },
    )
    .needs_approval()
}
