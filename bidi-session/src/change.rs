//! [`Change`]: what one snapshot adds to its parent's state, as a JSON Patch (RFC 6902).

use std::fmt;
use std::io;

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

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
#[derive(Clone, Default)]
pub struct Change(Ops);

/// A change's operations.
#[derive(Clone)]
enum Ops {
    /// As a JSON Patch lists them.
    Patch(json_patch::Patch),
    /// With values pushed as JSON text ([`Change::push_json`]): kept as written, so a writer
    /// that serializes its value once (to be stored as text) never builds a `Value` of it.
    List(Vec<Op>),
    /// One `add` at the root, the state replaced whole (as [`Session::update_state`] writes a
    /// small state): kept without a list, which would be an allocation of its own.
    ///
    /// [`Session::update_state`]: crate::Session::update_state
    Whole(Value),
}

/// One operation of a [`Ops::List`].
#[derive(Clone, Debug)]
enum Op {
    Patch(PatchOperation),
    /// `add` of `json` at the end of the array at `path` (which ends in `-`).
    Push {
        path: PointerBuf,
        json: Box<RawValue>,
    },
}

impl Op {
    /// The operation as JSON Patch has it, its value read from its text.
    fn to_patch(&self) -> Result<PatchOperation, serde_json::Error> {
        Ok(match self {
            Self::Patch(op) => op.clone(),
            Self::Push { path, json } => PatchOperation::Add(AddOperation {
                path: path.clone(),
                value: serde_json::from_str(json.get())?,
            }),
        })
    }
}

impl Default for Ops {
    fn default() -> Self {
        Self::Patch(json_patch::Patch::default())
    }
}

/// A change that does not apply to the state it was given (a path that is not there).
#[derive(Debug, thiserror::Error)]
#[error("the change does not apply to the state: {0}")]
pub struct ApplyError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl Change {
    /// No change.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The change from `old` to `new`.
    #[must_use]
    pub fn diff(old: &Value, new: &Value) -> Self {
        Self(Ops::Patch(json_patch::diff(old, new)))
    }

    /// The change from `old` to `new`, two states written as JSON text, found on the text:
    /// a value whose text is the same on both sides costs one comparison and is left alone;
    /// two objects are compared member by member (a member gone is removed, a new one added),
    /// two arrays item by item (items past the shorter one added or removed at the end), and
    /// any other value that differs is replaced whole. Only what differs is parsed into a
    /// `Value`.
    ///
    /// What [`diff`](Self::diff) finds on two `Value`s, for the cost of reading the two texts:
    /// a large state of which a save changes a little (a custom agent's document, a
    /// conversation's settings beside its messages) is compared without building a tree of
    /// either side.
    ///
    /// ```
    /// use bidi_session::Change;
    ///
    /// let old = r#"{"status":"idle","tools":[{"name":"search"},{"name":"fetch"}],"cost":1.5}"#;
    /// let new = r#"{"status":"done","tools":[{"name":"search"},{"name":"read"}]}"#;
    /// let change = Change::diff_json(old, new)?;
    /// let mut state: serde_json::Value = serde_json::from_str(old)?;
    /// change.apply(&mut state)?;
    /// assert_eq!(state, serde_json::from_str::<serde_json::Value>(new)?);
    /// // Only the tool's name is replaced, not the list.
    /// assert!(change.to_json().contains(r#""path":"/tools/1/name""#));
    /// assert!(Change::diff_json(new, new)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `old` or `new` is not JSON.
    pub fn diff_json(old: &str, new: &str) -> Result<Self, serde_json::Error> {
        let mut ops = Vec::new();
        diff_text(old, new, &mut PointerBuf::new(), &mut ops)?;
        Ok(Self(Ops::Patch(json_patch::Patch(ops))))
    }

    /// The state replaced by `state` whole: what [`set`](Self::set) at the root makes.
    pub(crate) fn whole(state: Value) -> Self {
        Self(Ops::Whole(state))
    }

    /// Appends `value` to the array at `path` (a JSON Pointer such as `/messages`).
    #[must_use]
    pub fn push(self, path: &str, value: Value) -> Self {
        let mut path = pointer(path);
        path.push_back("-");
        self.and(Op::Patch(PatchOperation::Add(AddOperation { path, value })))
    }

    /// Appends `json`, a value already written as JSON text, to the array at `path`: what
    /// [`push`](Self::push) does, for a writer that has its value as a Rust type. Serializing
    /// it once to text (as stores keep changes) costs a fraction of building a `Value` of it.
    ///
    /// ```
    /// use bidi_session::Change;
    /// use serde_json::json;
    ///
    /// let message = serde_json::value::to_raw_value(&("hello", 2))?;
    /// let change = Change::new().push_json("/messages", message);
    /// let mut state = json!({"messages": []});
    /// change.apply(&mut state)?;
    /// assert_eq!(state, json!({"messages": [["hello", 2]]}));
    /// assert_eq!(change, Change::new().push("/messages", json!(["hello", 2])));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn push_json(self, path: &str, json: Box<RawValue>) -> Self {
        let mut path = pointer(path);
        path.push_back("-");
        self.and(Op::Push { path, json })
    }

    /// Sets the member at `path` to `value`, adding it if it is not there.
    #[must_use]
    pub fn set(self, path: &str, value: Value) -> Self {
        let path = pointer(path);
        self.and(Op::Patch(PatchOperation::Add(AddOperation { path, value })))
    }

    /// Removes the member at `path`, which must be there when the change applies.
    #[must_use]
    pub fn remove(self, path: &str) -> Self {
        let path = pointer(path);
        self.and(Op::Patch(PatchOperation::Remove(RemoveOperation { path })))
    }

    /// Adds `other`'s operations after this change's.
    pub fn extend(&mut self, other: Self) {
        *self = match (std::mem::take(self).0, other.0) {
            (Ops::Patch(mut patch), Ops::Patch(more)) => {
                patch.0.extend(more.0);
                Self(Ops::Patch(patch))
            }
            (ops, more) => Self(more).into_ops().into_iter().fold(Self(ops), Self::and),
        };
    }

    /// Whether the change changes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Ops::Patch(patch) => patch.0.is_empty(),
            Ops::List(ops) => ops.is_empty(),
            Ops::Whole(_) => false,
        }
    }

    /// Applies the change to `state`: all of it, or (on an error) none of it.
    ///
    /// # Errors
    ///
    /// [`ApplyError`] if an operation does not apply (its path is not there); `state` is then
    /// as it was.
    pub fn apply(&self, state: &mut Value) -> Result<(), ApplyError> {
        let patch = match &self.0 {
            Ops::Whole(value) => {
                state.clone_from(value);
                return Ok(());
            }
            Ops::Patch(patch) => patch,
            Ops::List(ops) => {
                let patch = ops.iter().map(Op::to_patch).collect::<Result<Vec<_>, _>>();
                let patch = patch.map_err(|error| ApplyError(error.into()))?;
                return json_patch::patch(state, &patch).map_err(|error| ApplyError(error.into()));
            }
        };
        // The whole state replaced (a diff of two numbers, say): nothing can fail, so nothing
        // needs undoing.
        if let [
            PatchOperation::Add(AddOperation { path, value })
            | PatchOperation::Replace(ReplaceOperation { path, value }),
        ] = patch.0.as_slice()
            && path.is_root()
        {
            state.clone_from(value);
            return Ok(());
        }
        json_patch::patch(state, patch).map_err(|error| ApplyError(error.into()))
    }

    /// Applies the change to `state`, a state read again from changes already applied once:
    /// without undoing on an error (`state` is then partly changed), and with pushed JSON text
    /// read straight into the array it goes to.
    pub(crate) fn replay(&self, state: &mut Value) -> Result<(), ApplyError> {
        let Ops::List(ops) = &self.0 else {
            return self.apply(state);
        };
        for op in ops {
            match op {
                Op::Patch(op) => json_patch::patch(state, std::slice::from_ref(op))
                    .map_err(|error| ApplyError(error.into()))?,
                Op::Push { path, json } => {
                    let array = path
                        .parent()
                        .and_then(|array| array.resolve_mut(state).ok())
                        .and_then(Value::as_array_mut)
                        .ok_or_else(|| ApplyError(format!("no array at {path}").into()))?;
                    let value = serde_json::from_str(json.get())
                        .map_err(|error| ApplyError(error.into()))?;
                    array.push(value);
                }
            }
        }
        Ok(())
    }

    /// The change as JSON text, as stores keep it.
    #[must_use]
    pub fn to_json(&self) -> String {
        // A patch is strings and `Value`s: writing it to a `String` cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| "[]".to_owned())
    }

    /// How many bytes [`to_json`](Self::to_json) would write, without writing them.
    #[must_use]
    pub fn encoded_len(&self) -> u64 {
        let (count, ops) = match &self.0 {
            // `[{"op":"add","path":"","value":` value `}]`
            Ops::Whole(value) => return 33 + counted(value),
            Ops::Patch(patch) => (patch.0.len(), patch.0.iter().map(op_len).sum::<u64>()),
            Ops::List(ops) => {
                let len = ops.iter().map(|op| match op {
                    Op::Patch(op) => op_len(op),
                    // `{"op":"add","path":` path `,"value":` json `}`
                    Op::Push { path, json } => 20 + counted(path) + 9 + json.get().len() as u64,
                });
                (ops.len(), len.sum())
            }
        };
        (2 + count.saturating_sub(1)) as u64 + ops // `[`, `]`, commas
    }

    /// A change read back from its JSON text.
    ///
    /// # Errors
    ///
    /// The JSON error if `text` is not an RFC 6902 patch.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The change followed by `op`.
    fn and(self, op: Op) -> Self {
        match (self.0, op) {
            (Ops::List(mut ops), op) => {
                ops.push(op);
                Self(Ops::List(ops))
            }
            (Ops::Patch(mut patch), Op::Patch(op)) => {
                patch.0.push(op);
                Self(Ops::Patch(patch))
            }
            (Ops::Whole(value), Op::Patch(op)) => {
                Self(Ops::Patch(json_patch::Patch(vec![root_add(value), op])))
            }
            (ops, push) => {
                let mut ops = Self(ops).into_ops();
                ops.push(push);
                Self(Ops::List(ops))
            }
        }
    }

    /// The change's operations.
    fn into_ops(self) -> Vec<Op> {
        match self.0 {
            Ops::List(ops) => ops,
            Ops::Patch(patch) => patch.0.into_iter().map(Op::Patch).collect(),
            Ops::Whole(value) => vec![Op::Patch(root_add(value))],
        }
    }
}

/// How many bytes `op` takes as JSON.
fn op_len(op: &PatchOperation) -> u64 {
    // Counted by parts: what serde would write again for every operation (its name and keys,
    // escaped) is counted once here, and only paths and values are written.
    let (name, from, path, value) = match op {
        PatchOperation::Add(op) => ("add", None, &op.path, Some(&op.value)),
        PatchOperation::Remove(op) => ("remove", None, &op.path, None),
        PatchOperation::Replace(op) => ("replace", None, &op.path, Some(&op.value)),
        PatchOperation::Move(op) => ("move", Some(&op.from), &op.path, None),
        PatchOperation::Copy(op) => ("copy", Some(&op.from), &op.path, None),
        PatchOperation::Test(op) => ("test", None, &op.path, Some(&op.value)),
    };
    // `{"op":"` name `","path":` path `}`, with `"from":` from `,` before `"path"` and
    // `,"value":` value after the path, as the operation has them.
    let mut len = (7 + name.len() + 9 + 1) as u64 + counted(path);
    len += from.map_or(0, |from| 8 + counted(from));
    len += value.map_or(0, |value| 9 + counted(value));
    len
}

/// `add` at the root: `value` replaces the state.
fn root_add(value: Value) -> PatchOperation {
    let path = PointerBuf::new();
    PatchOperation::Add(AddOperation { path, value })
}

/// How many bytes `value` takes as JSON.
fn counted(value: &(impl Serialize + ?Sized)) -> u64 {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Changes are equal when their JSON Patches are.
impl PartialEq for Change {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Ops::Patch(a), Ops::Patch(b)) => a == b,
            (Ops::Whole(a), Ops::Whole(b)) => a == b,
            (Ops::Whole(value), Ops::Patch(patch)) | (Ops::Patch(patch), Ops::Whole(value)) => {
                matches!(patch.0.as_slice(), [PatchOperation::Add(op)]
                    if op.path.is_root() && op.value == *value)
            }
            // With pushed JSON text: as the operations read back.
            (Ops::List(_), _) | (_, Ops::List(_)) => {
                serde_json::to_value(self).ok() == serde_json::to_value(other).ok()
            }
        }
    }
}

/// As its JSON Patch: RFC 6902 operations.
impl Serialize for Change {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// `add` at the root, written as `json_patch` writes it, without taking the value.
        #[derive(Serialize)]
        struct RootAdd<'a> {
            op: &'static str,
            path: &'static str,
            value: &'a Value,
        }
        /// A pushed value's `add`, its value written as it is.
        #[derive(Serialize)]
        struct Push<'a> {
            op: &'static str,
            path: &'a PointerBuf,
            value: &'a RawValue,
        }
        match &self.0 {
            Ops::Patch(patch) => patch.serialize(serializer),
            Ops::Whole(value) => {
                let op = RootAdd {
                    op: "add",
                    path: "",
                    value,
                };
                [op].serialize(serializer)
            }
            Ops::List(ops) => {
                let mut seq = serializer.serialize_seq(Some(ops.len()))?;
                for op in ops {
                    match op {
                        Op::Patch(op) => seq.serialize_element(op)?,
                        Op::Push { path, json } => seq.serialize_element(&Push {
                            op: "add",
                            path,
                            value: json,
                        })?,
                    }
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Change {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        json_patch::Patch::deserialize(deserializer).map(|patch| Self(Ops::Patch(patch)))
    }
}

impl fmt::Debug for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Ops::Patch(patch) => f.debug_tuple("Change").field(&patch.0).finish(),
            Ops::Whole(value) => {
                let ops = [root_add(value.clone())];
                f.debug_tuple("Change").field(&ops).finish()
            }
            Ops::List(ops) => f.debug_tuple("Change").field(ops).finish(),
        }
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

/// The operations that make `new` of `old` (both JSON text) at `path`, found on the text.
fn diff_text(
    old: &str,
    new: &str,
    path: &mut PointerBuf,
    ops: &mut Vec<PatchOperation>,
) -> Result<(), serde_json::Error> {
    /// An object's members, as written.
    type Members<'a> = std::collections::BTreeMap<String, &'a RawValue>;
    if old == new {
        return Ok(());
    }
    let kind = |text: &str| text.trim_start().as_bytes().first().copied();
    match (kind(old), kind(new)) {
        (Some(b'{'), Some(b'{')) => {
            let before: Members<'_> = serde_json::from_str(old)?;
            let after: Members<'_> = serde_json::from_str(new)?;
            for (name, value) in &after {
                path.push_back(name.as_str());
                match before.get(name) {
                    Some(was) => diff_text(was.get(), value.get(), path, ops)?,
                    None => ops.push(PatchOperation::Add(AddOperation {
                        path: path.clone(),
                        value: serde_json::from_str(value.get())?,
                    })),
                }
                path.pop_back();
            }
            for name in before.keys().filter(|name| !after.contains_key(*name)) {
                path.push_back(name.as_str());
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: path.clone(),
                }));
                path.pop_back();
            }
        }
        (Some(b'['), Some(b'[')) => {
            let before: Vec<&RawValue> = serde_json::from_str(old)?;
            let after: Vec<&RawValue> = serde_json::from_str(new)?;
            for (index, value) in after.iter().enumerate() {
                path.push_back(index);
                match before.get(index) {
                    Some(was) => diff_text(was.get(), value.get(), path, ops)?,
                    None => ops.push(PatchOperation::Add(AddOperation {
                        path: path.clone(),
                        value: serde_json::from_str(value.get())?,
                    })),
                }
                path.pop_back();
            }
            // From the last, so that each index is still there.
            for index in (after.len()..before.len()).rev() {
                path.push_back(index);
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: path.clone(),
                }));
                path.pop_back();
            }
        }
        _ => ops.push(PatchOperation::Replace(ReplaceOperation {
            path: path.clone(),
            value: serde_json::from_str(new)?,
        })),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `diff_json` makes what `diff` makes of the same states, member by member: names that need
    /// escaping in a pointer, members added, changed and gone, and states that are not objects.
    #[test]
    fn diff_json_turns_one_state_into_the_other() {
        let pairs = [
            (
                json!({"a/b": 1, "~t": [1, 2], "same": {"deep": [1, {"x": "y"}]}, "gone": true}),
                json!({"a/b": 2, "~t": [1, 2, 3], "same": {"deep": [1, {"x": "y"}]}, "new": null}),
            ),
            (json!({"a": 1}), json!([1, 2])),
            (json!("text"), json!({"a": 1})),
            (json!({}), json!({})),
        ];
        for (old, new) in pairs {
            let (old_text, new_text) = (old.to_string(), new.to_string());
            let change = Change::diff_json(&old_text, &new_text).expect("JSON");
            let mut state = old.clone();
            change.apply(&mut state).expect("applies");
            assert_eq!(state, new, "{old} -> {new}: {}", change.to_json());
            // Unchanged members are not written again.
            assert!(!change.to_json().contains("deep"), "{}", change.to_json());
        }
        assert!(Change::diff_json("{", "{}").is_err());
    }

    /// `diff_json` turns one state into the other for states made and changed at random:
    /// nested objects and arrays, items added, removed and changed at every depth, kinds
    /// swapped.
    #[test]
    fn diff_json_turns_random_states_into_each_other() {
        /// A small deterministic generator (xorshift).
        struct Draw(u64);
        impl Draw {
            fn next(&mut self, below: u64) -> u64 {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0 % below
            }
            fn value(&mut self, depth: u32) -> Value {
                match self.next(if depth == 0 { 3 } else { 5 }) {
                    0 => json!(self.next(100)),
                    1 => json!(format!("s{}/~{}", self.next(10), self.next(3))),
                    2 => Value::Null,
                    3 => (0..self.next(5)).map(|_| self.value(depth - 1)).collect(),
                    _ => (0..self.next(5))
                        .map(|_| (format!("k{}", self.next(6)), self.value(depth - 1)))
                        .collect::<serde_json::Map<_, _>>()
                        .into(),
                }
            }
            /// `value` with a few changes somewhere inside.
            fn changed(&mut self, value: &Value, depth: u32) -> Value {
                match (value, self.next(4)) {
                    (_, 0) => self.value(depth),
                    (Value::Array(items), _) => {
                        let mut items: Vec<Value> = items
                            .iter()
                            .map(|item| self.changed(item, depth.saturating_sub(1)))
                            .collect();
                        match self.next(3) {
                            0 => items.push(self.value(depth)),
                            1 => drop(items.pop()),
                            _ => {}
                        }
                        Value::Array(items)
                    }
                    (Value::Object(members), _) => {
                        let mut kept = serde_json::Map::new();
                        for (key, item) in members {
                            if self.next(5) != 0 {
                                let item = self.changed(item, depth.saturating_sub(1));
                                kept.insert(key.clone(), item);
                            }
                        }
                        let mut members = kept;
                        if self.next(2) == 0 {
                            members.insert(format!("n{}", self.next(4)), self.value(depth));
                        }
                        Value::Object(members)
                    }
                    (value, _) => value.clone(),
                }
            }
        }
        let mut draw = Draw(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2_000 {
            let old = draw.value(4);
            let new = draw.changed(&old, 4);
            let change = Change::diff_json(&old.to_string(), &new.to_string()).expect("JSON");
            let mut state = old.clone();
            change.apply(&mut state).expect("applies");
            assert_eq!(state, new, "{old} -> {new}: {}", change.to_json());
        }
    }

    /// `encoded_len` counts what `to_json` writes, for every kind of operation, with paths and
    /// values that need escaping.
    #[test]
    fn encoded_len_is_the_length_of_the_json() {
        let ops = json!([
            {"op": "add", "path": "/a~1b/\"q\"", "value": {"x": ["\u{1}", 1.5, null]}},
            {"op": "remove", "path": "/n"},
            {"op": "replace", "path": "", "value": "é\n"},
            {"op": "move", "from": "/f", "path": "/t"},
            {"op": "copy", "from": "/f\t", "path": "/c"},
            {"op": "test", "path": "/t", "value": true},
        ]);
        let all = Change::from_json(&ops.to_string()).expect("a patch");
        let whole = Change::whole(json!({"a\"": [1, "\u{7}"]}));
        let raw = serde_json::value::to_raw_value(&json!({"t": "\"é\u{1}"})).expect("json");
        let pushed = Change::new()
            .set("/a~1b", json!(1))
            .push_json("/m\"x", raw)
            .remove("/n");
        for change in [Change::new(), whole, all, pushed] {
            assert_eq!(
                change.encoded_len(),
                change.to_json().len() as u64,
                "{change:?}"
            );
        }
    }

    /// A state replaced whole is the change `set("", state)` makes, as JSON, as a change, and
    /// applied; other changes follow it as they would follow that one.
    #[test]
    fn a_whole_state_is_a_set_at_the_root() {
        let state = json!({"n": 1, "s": "x"});
        let (whole, set) = (
            Change::whole(state.clone()),
            Change::new().set("", state.clone()),
        );
        assert_eq!(whole.to_json(), set.to_json());
        assert_eq!(whole, set);
        assert_eq!(set, whole);
        assert_ne!(whole, Change::whole(json!(2)));
        assert_eq!(Change::from_json(&whole.to_json()).expect("a patch"), whole);
        assert_eq!(format!("{whole:?}"), format!("{set:?}"));
        assert!(!whole.is_empty());
        let mut applied = json!(null);
        whole.apply(&mut applied).expect("applies");
        assert_eq!(applied, state);
        let (mut longer, mut expected) = (whole.clone(), set);
        longer.extend(Change::new().set("/n", json!(2)));
        expected.extend(Change::new().set("/n", json!(2)));
        assert_eq!(longer.to_json(), expected.to_json());
        assert_eq!(longer.remove("/s"), expected.remove("/s"));
    }

    /// A value pushed as JSON text is the change `push` makes of it: as JSON, as a change,
    /// applied, and followed by other changes; a change that does not apply leaves the state
    /// as it was.
    #[test]
    fn pushed_json_text_is_a_push() {
        let raw = |value: Value| serde_json::value::to_raw_value(&value).expect("json");
        let text = Change::new()
            .set("/n", json!(1))
            .push_json("/m", raw(json!({"a": [1]})))
            .push_json("/m", raw(json!("b")));
        let value = Change::new()
            .set("/n", json!(1))
            .push("/m", json!({"a": [1]}))
            .push("/m", json!("b"));
        assert_eq!(text.to_json(), value.to_json());
        assert_eq!(text, value);
        assert_eq!(value, text);
        assert_eq!(Change::from_json(&text.to_json()).expect("a patch"), text);
        assert!(!text.is_empty());
        let mut state = json!({"m": []});
        text.apply(&mut state).expect("applies");
        assert_eq!(state, json!({"m": [{"a": [1]}, "b"], "n": 1}));

        let (mut longer, mut expected) = (
            Change::whole(json!({"m": []})),
            Change::whole(json!({"m": []})),
        );
        longer.extend(text.clone());
        expected.extend(value);
        assert_eq!(longer.to_json(), expected.to_json());
        let mut more = text.clone();
        more.extend(Change::new().remove("/n"));
        assert_eq!(more.encoded_len(), more.to_json().len() as u64);

        let mut replayed = json!({"m": []});
        text.replay(&mut replayed).expect("replays");
        assert_eq!(replayed, json!({"m": [{"a": [1]}, "b"], "n": 1}));
        assert!(text.replay(&mut json!({"m": 1})).is_err());

        // The push has no array to go to: nothing of the change is applied.
        let mut state = json!({"m": "x"});
        assert!(text.apply(&mut state).is_err());
        assert_eq!(state, json!({"m": "x"}));
    }
}
