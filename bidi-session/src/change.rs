//! [`Change`]: what one snapshot adds to its parent's state, as a JSON Patch (RFC 6902).

use std::fmt;
use std::io;

use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use jsonptr::PointerBuf;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a snapshot adds to its parent's state: a JSON Patch (RFC 6902), applied in order.
///
/// A session is stored as a log: each snapshot keeps its change, not the whole state again, so
/// a turn that adds two messages to a long conversation writes two messages. Build a change
/// from what you know changed ([`push`](Self::push) onto an array, [`set`](Self::set) a field,
/// [`remove`](Self::remove) one), or let [`diff`](Self::diff) find it between two states.
///
/// ```
/// use bidi_session::Change;
/// use serde_json::json;
///
/// let mut state = json!({"messages": ["hi"], "status": "idle"});
/// let change = Change::new()
///     .push("/messages", json!("hello"))
///     .set("/status", json!("done"));
/// change.apply(&mut state)?;
/// assert_eq!(state, json!({"messages": ["hi", "hello"], "status": "done"}));
/// // As it is stored and streamed: RFC 6902 operations.
/// assert_eq!(
///     serde_json::to_value(&change)?,
///     json!([
///         {"op": "add", "path": "/messages/-", "value": "hello"},
///         {"op": "add", "path": "/status", "value": "done"},
///     ]),
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Change(json_patch::Patch);

/// A change that does not apply to the state it was given (a path that is not there).
#[derive(Debug, thiserror::Error)]
#[error("the change does not apply to the state: {0}")]
pub struct ApplyError(#[source] json_patch::PatchError);

impl Change {
    /// No change.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The change from `old` to `new`.
    #[must_use]
    pub fn diff(old: &Value, new: &Value) -> Self {
        Self(json_patch::diff(old, new))
    }

    /// Appends `value` to the array at `path` (a JSON Pointer such as `/messages`).
    #[must_use]
    pub fn push(mut self, path: &str, value: Value) -> Self {
        let mut path = pointer(path);
        path.push_back("-");
        self.0
            .0
            .push(PatchOperation::Add(AddOperation { path, value }));
        self
    }

    /// Sets the member at `path` to `value`, adding it if it is not there.
    #[must_use]
    pub fn set(mut self, path: &str, value: Value) -> Self {
        let path = pointer(path);
        self.0
            .0
            .push(PatchOperation::Add(AddOperation { path, value }));
        self
    }

    /// Removes the member at `path`, which must be there when the change applies.
    #[must_use]
    pub fn remove(mut self, path: &str) -> Self {
        let path = pointer(path);
        self.0
            .0
            .push(PatchOperation::Remove(RemoveOperation { path }));
        self
    }

    /// Adds `other`'s operations after this change's.
    pub fn extend(&mut self, other: Self) {
        self.0.0.extend(other.0.0);
    }

    /// Whether the change changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.0.is_empty()
    }

    /// Applies the change to `state`: all of it, or (on an error) none of it.
    ///
    /// # Errors
    ///
    /// [`ApplyError`] if an operation does not apply (its path is not there); `state` is then
    /// as it was.
    pub fn apply(&self, state: &mut Value) -> Result<(), ApplyError> {
        json_patch::patch(state, &self.0).map_err(ApplyError)
    }

    /// The change as JSON text, as stores keep it.
    #[must_use]
    pub fn to_json(&self) -> String {
        // A patch is strings and `Value`s: writing it to a `String` cannot fail.
        serde_json::to_string(&self.0).unwrap_or_else(|_| "[]".to_owned())
    }

    /// How many bytes [`to_json`](Self::to_json) would write, without writing them.
    #[must_use]
    pub fn encoded_len(&self) -> u64 {
        let mut counter = Counter(0);
        // Writing to a counter cannot fail.
        let _ = serde_json::to_writer(&mut counter, &self.0);
        counter.0
    }

    /// A change read back from its JSON text.
    ///
    /// # Errors
    ///
    /// The JSON error if `text` is not an RFC 6902 patch.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text).map(Self)
    }
}

impl fmt::Debug for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Change").field(&self.0.0).finish()
    }
}

/// `path` as a JSON Pointer; a path without its leading `/` is taken as one.
fn pointer(path: &str) -> PointerBuf {
    let path = path.strip_prefix('/').unwrap_or(path);
    if path.is_empty() {
        return PointerBuf::new();
    }
    PointerBuf::from_tokens(path.split('/').map(|token| {
        jsonptr::Token::from_encoded(token).map_or_else(
            |_| jsonptr::Token::new(token.to_owned()),
            |t| t.into_owned(),
        )
    }))
}

/// Counts the bytes written to it.
struct Counter(u64);

impl io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
