//! The action [`Registry`] and its [`ActionDesc`] descriptors with JSON Schemas.

use std::any::{Any, TypeId, type_name};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use bidi_core::{ConnectOptions, NotFound};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::flow::{ActionType, BidiFlow};
use crate::json::{JsonConnection, JsonError, JsonFlow};
use crate::text::cap;

/// A registered action as transports and tools see it: its key, types as JSON Schemas
/// (draft 2020-12) and metadata. Serialises with camelCase keys; a unit type has no schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ActionDesc {
    /// `/{type}/{name}`, say `/bidi-flow/echo` or `/agent/chat`.
    pub key: String,
    /// The action's name.
    pub name: String,
    /// What kind of action it is.
    #[serde(rename = "type")]
    pub action_type: String,
    /// What it does, if it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The schema of one inbound message (`In`, as it is deserialized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The schema of the final output (`Out`, as it is serialized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The schema of one streamed chunk (`Stream`, as it is serialized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_schema: Option<Value>,
    /// The schema of the connection's init value (`Init`, as it is deserialized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_schema: Option<Value>,
    /// The flow's metadata, with `bidi: true`.
    pub metadata: Map<String, Value>,
}

/// Why a registry call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Another action is registered under the key.
    #[error("an action is already registered as `{key}`")]
    Duplicate {
        /// The key.
        key: String,
    },
    /// No action is registered under the key. Names a registered key it resembles, if one does.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// The action under the key has other types than the ones asked for.
    #[error("`{key}` is a {registered}, not a {requested}")]
    TypeMismatch {
        /// The key.
        key: String,
        /// The type asked for.
        requested: &'static str,
        /// The type registered.
        registered: &'static str,
    },
    /// An [`ActionType`] that is empty or has anything but lowercase ASCII letters, digits and
    /// `-`.
    #[error("invalid action type `{kind}`: use lowercase ASCII letters, digits and `-`")]
    InvalidActionType {
        /// The kind asked for (capped to a few hundred bytes).
        kind: String,
    },
}

/// The schema of `T` for `settings`, or `None` for the unit type.
fn schema<T: JsonSchema + 'static>(settings: SchemaSettings) -> Option<Value> {
    if TypeId::of::<T>() == TypeId::of::<()>() {
        return None;
    }
    Some(
        settings
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value(),
    )
}

fn key(action_type: &ActionType, name: &str) -> String {
    format!("/{action_type}/{name}")
}

/// "No action `key`", naming the registered key the caller most likely meant, if any.
fn not_found(entries: &BTreeMap<String, Entry>, key: &str) -> NotFound {
    let missing = NotFound::new("action", cap(key));
    let registered = entries
        .iter()
        .map(|(key, entry)| (key.as_str(), entry.desc.name.as_str()));
    match suggest(registered, key) {
        Some(suggestion) => missing.with_suggestion(suggestion),
        None => missing,
    }
}

/// The registered key `asked` most likely meant, from `(key, name)` pairs in key order: the
/// first whose name is `asked` (or its last `/` segment: `/agent/echo` for `/bidi-flow/echo`),
/// else the first that ends with `asked` at a `/`, else the closest by edit distance if it is
/// close enough (one edit per three characters, at most three).
fn suggest<'a>(
    registered: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    asked: &str,
) -> Option<&'a str> {
    if asked.is_empty() {
        return None;
    }
    let last = asked.rsplit('/').next().filter(|last| !last.is_empty());
    if let Some((key, _)) = registered
        .clone()
        .find(|&(_, name)| name == asked || Some(name) == last)
    {
        return Some(key);
    }
    if let Some((key, _)) = registered.clone().find(|&(key, _)| {
        key.strip_suffix(asked)
            .is_some_and(|rest| asked.starts_with('/') || rest.ends_with('/'))
    }) {
        return Some(key);
    }
    // Edit distance: a peer's key may be huge, so only candidates of about its length count
    // (the distance is at least the difference in length), which bounds the work.
    let asked: Vec<char> = asked.chars().take(MAX_SUGGESTED_LEN + 1).collect();
    if asked.len() > MAX_SUGGESTED_LEN {
        return None;
    }
    let threshold = (asked.len() / 3).clamp(1, 3);
    registered
        .filter_map(|(key, name)| {
            let distance = [key, name]
                .into_iter()
                .filter_map(|candidate| {
                    let candidate: Vec<char> = candidate.chars().collect();
                    (candidate.len().abs_diff(asked.len()) <= threshold)
                        .then(|| edit_distance(&asked, &candidate))
                })
                .min()?;
            (distance <= threshold).then_some((distance, key))
        })
        // `min_by_key` keeps the first of equals: ties go to the first key in order.
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, key)| key)
}

/// Keys longer than this (in chars) get no edit-distance suggestion.
const MAX_SUGGESTED_LEN: usize = 256;

/// The optimal string alignment distance between `a` and `b`: insertions, deletions,
/// substitutions and swaps of two neighbours each cost one (`ehco` is one from `echo`).
fn edit_distance(a: &[char], b: &[char]) -> usize {
    // Three rows of the classic table: the one before the previous, the previous, this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let substitution = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            current[j] = substitution.min(previous[j] + 1).min(current[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                current[j] = current[j].min(before[j - 2] + 1);
            }
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

struct Entry {
    desc: ActionDesc,
    /// The `BidiFlow<Init, In, Out, Stream>` itself, for typed lookups.
    flow: Box<dyn Any + Send + Sync>,
    type_name: &'static str,
    json: Arc<dyn JsonFlow>,
}

/// Registered flows by key: typed lookups for Rust callers, descriptors and JSON connections for
/// transports. Cheap to clone; clones share the actions.
///
/// ```
/// use bidi_core::{BoxError, Inbound, Outbound};
/// use bidi_flow::{BidiFlow, Registry};
///
/// let echo = BidiFlow::new("echo", |_ctx, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
///     while let Some(msg) = inbound.recv().await {
///         out.send(msg).await?;
///         out.end_turn().await?;
///     }
///     Ok::<_, BoxError>(())
/// });
/// let registry = Registry::new();
/// registry.register(echo)?;
/// assert_eq!(registry.actions()[0].key, "/bidi-flow/echo");
/// let echo = registry.get::<(), String, (), String>("/bidi-flow/echo")?;
/// assert_eq!(echo.name(), "echo");
/// assert!(registry.get::<(), u32, (), u32>("/bidi-flow/echo").is_err());
/// # Ok::<_, bidi_flow::RegistryError>(())
/// ```
#[derive(Clone)]
pub struct Registry {
    entries: Arc<RwLock<BTreeMap<String, Entry>>>,
    /// How many actions are registered, told to whoever watches.
    count: Arc<watch::Sender<usize>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            entries: Arc::default(),
            count: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Registry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `flow` under `/{type}/{name}`, computing its schemas once, now.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Duplicate`] if the key is taken; the registry is unchanged.
    pub fn register<Init, In, Out, Stream>(
        &self,
        flow: BidiFlow<Init, In, Out, Stream>,
    ) -> Result<(), RegistryError>
    where
        Init: DeserializeOwned + Serialize + JsonSchema + Send + 'static,
        In: DeserializeOwned + JsonSchema + Send + 'static,
        Out: Serialize + JsonSchema + Send + 'static,
        Stream: Serialize + JsonSchema + Send + 'static,
    {
        let key = key(flow.action_type(), flow.name());
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if entries.contains_key(&key) {
            return Err(RegistryError::Duplicate { key });
        }
        let de = SchemaSettings::draft2020_12().for_deserialize();
        let ser = SchemaSettings::draft2020_12().for_serialize();
        let mut metadata = flow.metadata().clone();
        metadata.insert("bidi".to_owned(), Value::Bool(true));
        let desc = ActionDesc {
            key: key.clone(),
            name: flow.name().to_owned(),
            action_type: flow.action_type().to_string(),
            description: flow.description().map(str::to_owned),
            input_schema: schema::<In>(de.clone()),
            output_schema: schema::<Out>(ser.clone()),
            stream_schema: schema::<Stream>(ser),
            init_schema: schema::<Init>(de),
            metadata,
        };
        entries.insert(
            key,
            Entry {
                desc,
                type_name: type_name::<BidiFlow<Init, In, Out, Stream>>(),
                json: Arc::new(flow.clone()),
                flow: Box::new(flow),
            },
        );
        self.count.send_replace(entries.len());
        Ok(())
    }

    /// Watches the registry grow: the receiver sees how many actions are registered, and
    /// [`changed`](watch::Receiver::changed) wakes after each registration (several in a row
    /// may wake it once). What a protocol that tells its clients of new actions waits on (MCP's
    /// `notifications/tools/list_changed`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), bidi_flow::RegistryError> {
    /// use bidi_core::{BoxError, Inbound, Outbound};
    /// use bidi_flow::{BidiFlow, Registry};
    ///
    /// let registry = Registry::new();
    /// let mut changes = registry.changes();
    /// registry.register(BidiFlow::new("new", |_ctx, (), _: Inbound<()>, _: Outbound<()>| async {
    ///     Ok::<_, BoxError>(())
    /// }))?;
    /// changes.changed().await.expect("the registry lives");
    /// assert_eq!(*changes.borrow(), 1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn changes(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }

    /// The flow registered under `key`, with its types.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`] (naming a registered key it resembles, if one does), or
    /// [`RegistryError::TypeMismatch`] naming both types.
    pub fn get<Init, In, Out, Stream>(
        &self,
        key: &str,
    ) -> Result<BidiFlow<Init, In, Out, Stream>, RegistryError>
    where
        Init: 'static,
        In: 'static,
        Out: 'static,
        Stream: 'static,
    {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        let entry = entries
            .get(key)
            .ok_or_else(|| RegistryError::NotFound(not_found(&entries, key)))?;
        entry
            .flow
            .downcast_ref::<BidiFlow<Init, In, Out, Stream>>()
            .cloned()
            .ok_or_else(|| RegistryError::TypeMismatch {
                key: key.to_owned(),
                requested: type_name::<BidiFlow<Init, In, Out, Stream>>(),
                registered: entry.type_name,
            })
    }

    /// The descriptors of every registered action, by key.
    #[must_use]
    pub fn actions(&self) -> Vec<ActionDesc> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries.values().map(|entry| entry.desc.clone()).collect()
    }

    /// The descriptor of the action under `key`.
    ///
    /// # Errors
    ///
    /// [`NotFound`] naming a registered key it resembles, if one does (what a transport answers
    /// for an unknown key before it connects).
    pub fn action(&self, key: &str) -> Result<ActionDesc, NotFound> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .map(|entry| entry.desc.clone())
            .ok_or_else(|| not_found(&entries, key))
    }

    /// Opens a JSON connection to the action under `key`. `init` is checked against the
    /// action's `Init` type first: a bad one is refused before the action starts.
    ///
    /// # Errors
    ///
    /// [`JsonError::NotFound`] (naming a registered key it resembles, if one does), or
    /// [`JsonError::InvalidInit`] with the JSON Pointer of the problem and the reason.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect_json(&self, key: &str, init: Value) -> Result<JsonConnection, JsonError> {
        self.connect_json_with(key, init, ConnectOptions::new())
    }

    /// As [`connect_json`](Self::connect_json), with options (extensions from the transport,
    /// buffers, a parent token).
    ///
    /// # Errors
    ///
    /// As [`connect_json`](Self::connect_json).
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect_json_with(
        &self,
        key: &str,
        init: Value,
        options: ConnectOptions,
    ) -> Result<JsonConnection, JsonError> {
        let json = {
            let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
            let entry = entries
                .get(key)
                .ok_or_else(|| JsonError::NotFound(not_found(&entries, key)))?;
            Arc::clone(&entry.json)
        };
        json.connect_json(init, options)
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Registry")
            .field("keys", &entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distance(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        edit_distance(&a, &b)
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(distance("", ""), 0);
        assert_eq!(distance("echo", "echo"), 0);
        assert_eq!(distance("", "echo"), 4);
        assert_eq!(distance("echo", ""), 4);
        assert_eq!(distance("ehco", "echo"), 1, "a swap of neighbours");
        assert_eq!(distance("ecoh", "echo"), 1);
        assert_eq!(distance("eho", "echo"), 1);
        assert_eq!(distance("echoo", "echo"), 1);
        assert_eq!(distance("acho", "echo"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(
            distance("/bidi_flow/échø", "/bidi-flow/echo"),
            3,
            "chars, not bytes"
        );
    }

    const KEYS: [(&str, &str); 4] = [
        ("/agent/chat", "chat"),
        ("/bidi-flow/chat", "chat"),
        ("/bidi-flow/echo", "echo"),
        ("/bidi-flow/tools/search", "tools/search"),
    ];

    fn suggested(asked: &str) -> Option<&'static str> {
        suggest(KEYS.into_iter(), asked)
    }

    #[test]
    fn suggestions() {
        // The name alone, or under another type.
        assert_eq!(suggested("echo"), Some("/bidi-flow/echo"));
        assert_eq!(suggested("/agent/echo"), Some("/bidi-flow/echo"));
        assert_eq!(
            suggested("chat"),
            Some("/agent/chat"),
            "the first in key order"
        );
        assert_eq!(suggested("tools/search"), Some("/bidi-flow/tools/search"));
        // The end of a key, at a `/`.
        assert_eq!(suggested("bidi-flow/echo"), Some("/bidi-flow/echo"));
        assert_eq!(suggested("/tools/search"), Some("/bidi-flow/tools/search"));
        // A typo.
        assert_eq!(suggested("/bidi-flow/ehco"), Some("/bidi-flow/echo"));
        assert_eq!(suggested("/bidi_flow/echo"), Some("/bidi-flow/echo"));
        assert_eq!(suggested("/bidi-flw/echo"), Some("/bidi-flow/echo"));
        assert_eq!(suggested("ech"), Some("/bidi-flow/echo"));
        // Nothing close.
        assert_eq!(suggested(""), None);
        assert_eq!(suggested("o"), None);
        assert_eq!(suggested("/bidi-flow/weather"), None);
        assert_eq!(suggested("translate"), None);
        assert_eq!(suggested(&"x".repeat(10 << 20)), None);
    }
}
