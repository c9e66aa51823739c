//! The action [`Registry`] (F3) and its [`ActionDesc`] descriptors with JSON Schemas.

use std::any::{Any, TypeId, type_name};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use bidi_core::ConnectOptions;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::flow::{ActionType, BidiFlow};
use crate::json::{JsonConnection, JsonError, JsonFlow};

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
    /// No action is registered under the key.
    #[error("no action is registered as `{key}`")]
    NotFound {
        /// The key.
        key: String,
    },
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

fn key(action_type: ActionType, name: &str) -> String {
    format!("/{action_type}/{name}")
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
#[derive(Clone, Default)]
pub struct Registry {
    entries: Arc<RwLock<BTreeMap<String, Entry>>>,
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
        Ok(())
    }

    /// The flow registered under `key`, with its types.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`], or [`RegistryError::TypeMismatch`] naming both types.
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
        let entry = entries.get(key).ok_or_else(|| RegistryError::NotFound {
            key: key.to_owned(),
        })?;
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
    #[must_use]
    pub fn action(&self, key: &str) -> Option<ActionDesc> {
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries.get(key).map(|entry| entry.desc.clone())
    }

    /// Opens a JSON connection to the action under `key` (F4). `init` is checked against the
    /// action's `Init` type first: a bad one is refused before the action starts.
    ///
    /// # Errors
    ///
    /// [`JsonError::NotFound`], or [`JsonError::InvalidInit`] with the JSON path and the reason.
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
            let entry = entries.get(key).ok_or_else(|| JsonError::NotFound {
                key: key.to_owned(),
            })?;
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
