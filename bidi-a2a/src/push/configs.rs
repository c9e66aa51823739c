//! A task's push notification configs: the methods that make, read, list and delete them
//! (`CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
//! `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig`), and where they are
//! kept: a session per task, `{"configs": [..]}`, in the agent's store under the caller's
//! scope (see the module above).
//!
//! A config is A2A's `TaskPushNotificationConfig`; one made without an `id` is given one, and
//! one made with the `id` of another of the task's configs replaces it.

use std::sync::Arc;

use axum::response::Response;
use bidi_flow::text::cap;
use bidi_session::{Append, Change, Parent, Scoped, SessionStore as _, StoreError};
use reqwest::header::HeaderValue;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::TASK_NOT_FOUND;
use crate::types::RpcError;
use crate::{Call, lineage, params};
use bidi_http::agent;

/// A2A's `TaskPushNotificationConfig`: where to POST a task's notifications, and how to
/// authenticate to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PushConfig {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) tenant: String,
    #[serde(default)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) task_id: String,
    #[serde(default)]
    pub(crate) url: String,
    /// Sent as `X-A2A-Notification-Token`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) authentication: Option<Authentication>,
}

/// A2A's `AuthenticationInfo`: an HTTP authentication scheme and its credentials.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Authentication {
    #[serde(default)]
    pub(crate) scheme: String,
    #[serde(default)]
    pub(crate) credentials: String,
}

impl PushConfig {
    /// The `Authorization` header the webhook gets, if the config has a scheme.
    pub(crate) fn authorization(&self) -> Option<String> {
        let authentication = self.authentication.as_ref()?;
        let scheme = authentication.scheme.trim();
        if scheme.is_empty() {
            return None;
        }
        Some(match authentication.credentials.trim() {
            "" => scheme.to_owned(),
            credentials => format!("{scheme} {credentials}"),
        })
    }
}

/// A config as it is kept: with when it was made, so that its webhook is told only of what
/// happens after.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Kept {
    pub(crate) config: PushConfig,
    /// When the config was made, in milliseconds since the Unix epoch; 0 for one that came
    /// with the message of a turn, which is told of all that turn's changes.
    #[serde(default)]
    pub(crate) since: u64,
}

/// What a task's configs session holds.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    #[serde(default)]
    configs: Vec<Kept>,
}

/// Checks `config` (at `path` of the request): its URL, as `private` allows, and what its
/// headers would carry.
///
/// # Errors
///
/// Invalid params naming the field that is wrong.
pub(crate) fn check(config: &PushConfig, private: bool, path: &str) -> Result<(), RpcError> {
    if let Some(why) = super::refusal(&config.url, private) {
        return Err(RpcError::invalid_params(&format!("{path}/url"), why));
    }
    if HeaderValue::from_str(&config.token).is_err() {
        return Err(RpcError::invalid_params(
            &format!("{path}/token"),
            "a token is text a header can carry",
        ));
    }
    let header = config.authorization().unwrap_or_default();
    let scheme = config
        .authentication
        .as_ref()
        .map_or("", |auth| auth.scheme.trim());
    if HeaderValue::from_str(&header).is_err() || scheme.contains(char::is_whitespace) {
        return Err(RpcError::invalid_params(
            &format!("{path}/authentication"),
            "a scheme is one word, and its credentials text a header can carry",
        ));
    }
    Ok(())
}

/// The configs of `call`'s agent's tasks, in the caller's scope.
pub(crate) fn store_of(call: &Call<'_>) -> Scoped {
    let store = Arc::clone(call.agent.agent().store());
    // No agent's name holds a control character: these are no agent's sessions.
    bidi_http::scope(call.identity).sessions(&format!("{}\u{1}a2a-push", call.name), store)
}

fn failed(error: &StoreError) -> RpcError {
    RpcError::internal(agent::store_failed(error).message)
}

/// Task `task`'s configs in `store`.
///
/// # Errors
///
/// The store's.
pub(crate) async fn load(store: &Scoped, task: &str) -> Result<Vec<Kept>, StoreError> {
    let Some(snapshot) = store.load(task).await? else {
        return Ok(Vec::new());
    };
    let stored: Stored = serde_json::from_value(snapshot.state).unwrap_or_default();
    Ok(stored.configs)
}

/// Changes task `task`'s configs with `change` and writes them, reading them again if
/// another writer went first: what `change` returned.
async fn write<R>(
    store: &Scoped,
    task: &str,
    mut change: impl FnMut(&mut Vec<Kept>) -> R,
) -> Result<R, RpcError> {
    for _ in 0..5 {
        let head = store.load(task).await.map_err(|e| failed(&e))?;
        let (mut configs, parent) = match head {
            Some(snapshot) => {
                let stored: Stored = serde_json::from_value(snapshot.state).unwrap_or_default();
                (stored.configs, Some(snapshot.entry.id))
            }
            None => (Vec::new(), None),
        };
        let result = change(&mut configs);
        let state = json!({ "configs": configs });
        let append = match parent {
            None => Append::create(state),
            Some(head) => {
                let set = Change::new().set("/configs", state["configs"].clone());
                Append::change(Parent::Head(head), set).with_checkpoint(state)
            }
        };
        match store.append(task, append).await {
            Ok(_) => return Ok(result),
            Err(StoreError::Conflict { .. }) => {}
            Err(error) => return Err(failed(&error)),
        }
    }
    Err(RpcError::internal(
        "the task's push notification configs kept changing: try again",
    ))
}

/// Saves `config` for task `task` in `store`, told of what happens from `since` (given an id
/// if it has none, in place of the task's config of its id if there is one): the config
/// saved.
///
/// # Errors
///
/// The store's.
pub(crate) async fn save(
    store: &Scoped,
    task: &str,
    mut config: PushConfig,
    since: u64,
) -> Result<PushConfig, RpcError> {
    task.clone_into(&mut config.task_id);
    if config.id.is_empty() {
        config.id = bidi_session::new_id();
    }
    write(store, task, |configs| {
        configs.retain(|kept| kept.config.id != config.id);
        configs.push(Kept {
            config: config.clone(),
            since,
        });
    })
    .await?;
    Ok(config)
}

/// `GetTaskPushNotificationConfig`'s and `DeleteTaskPushNotificationConfig`'s params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Named {
    task_id: String,
    id: String,
}

/// `ListTaskPushNotificationConfigs`' params (one page holds every config of a task).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OfTask {
    task_id: String,
}

/// Refuses a task that is not one of the caller's.
async fn task_of(call: &Call<'_>, task: &str) -> Result<(), RpcError> {
    call.keeps_sessions("push notifications")?;
    let store = agent::sessions_of(call.agent, call.identity);
    match lineage::resolve(&store, task).await? {
        Some(_) => Ok(()),
        None => Err(RpcError::task_not_found(task)),
    }
}

fn config_not_found(task: &str, id: &str) -> RpcError {
    RpcError::new(
        TASK_NOT_FOUND,
        format!(
            "task `{}` has no push notification config `{}`",
            cap(task),
            cap(id)
        ),
    )
    .with("taskId", task)
}

/// `CreateTaskPushNotificationConfig`: the config, saved for its task.
pub(crate) async fn create(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    let Some(pusher) = call.pushing.0.as_deref() else {
        return Err(RpcError::no_push());
    };
    let config: PushConfig = self::params(params)?;
    if config.task_id.is_empty() {
        return Err(RpcError::invalid_params(
            "/params/taskId",
            "a config names its task (`taskId`)",
        ));
    }
    check(&config, pusher.settings().private_allowed(), "/params")?;
    task_of(call, &config.task_id).await?;
    let task = config.task_id.clone();
    let now = bidi_http::time::unix_millis(std::time::SystemTime::now());
    let saved = save(&store_of(call), &task, config, now).await?;
    Ok(call.binding.answer(&saved))
}

/// `GetTaskPushNotificationConfig`: one config of a task.
pub(crate) async fn get(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    let Named { task_id, id } = self::params(params)?;
    task_of(call, &task_id).await?;
    let configs = load(&store_of(call), &task_id)
        .await
        .map_err(|e| failed(&e))?;
    let config = configs
        .into_iter()
        .map(|kept| kept.config)
        .find(|config| config.id == id);
    let config = config.ok_or_else(|| config_not_found(&task_id, &id))?;
    Ok(call.binding.answer(&config))
}

/// `ListTaskPushNotificationConfigs`: every config of a task, in one page.
pub(crate) async fn list(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    let OfTask { task_id } = self::params(params)?;
    task_of(call, &task_id).await?;
    let configs = load(&store_of(call), &task_id)
        .await
        .map_err(|e| failed(&e))?;
    let configs: Vec<PushConfig> = configs.into_iter().map(|kept| kept.config).collect();
    let listed = json!({"configs": configs, "nextPageToken": ""});
    Ok(call.binding.answer(&listed))
}

/// `DeleteTaskPushNotificationConfig`: removes one config of a task.
pub(crate) async fn delete(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    let Named { task_id, id } = self::params(params)?;
    task_of(call, &task_id).await?;
    let removed = write(&store_of(call), &task_id, |configs| {
        let before = configs.len();
        configs.retain(|kept| kept.config.id != id);
        configs.len() < before
    })
    .await?;
    if !removed {
        return Err(config_not_found(&task_id, &id));
    }
    Ok(call.binding.answer(&json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> PushConfig {
        PushConfig {
            url: url.to_owned(),
            ..PushConfig::default()
        }
    }

    #[test]
    fn configs_are_checked_naming_the_field() {
        assert!(check(&config("http://example.com/hook"), false, "/params").is_ok());
        let error = check(&config("http://127.0.0.1/hook"), false, "/params").unwrap_err();
        assert_eq!(error.field(), Some("url"));
        let mut tokened = config("http://example.com/hook");
        tokened.token = "line\nbreak".into();
        assert_eq!(
            check(&tokened, false, "/params").unwrap_err().field(),
            Some("token")
        );
        let mut auth = config("http://example.com/hook");
        auth.authentication = Some(Authentication {
            scheme: "Bearer token".into(),
            credentials: "x".into(),
        });
        let error = check(
            &auth,
            false,
            "/params/configuration/taskPushNotificationConfig",
        );
        assert_eq!(
            error.unwrap_err().field(),
            Some("configuration.taskPushNotificationConfig.authentication")
        );
    }

    #[test]
    fn authorization_is_the_scheme_then_the_credentials() {
        let mut auth = config("http://example.com/hook");
        assert_eq!(auth.authorization(), None);
        auth.authentication = Some(Authentication {
            scheme: "Bearer".into(),
            credentials: "s3cret".into(),
        });
        assert_eq!(auth.authorization().as_deref(), Some("Bearer s3cret"));
    }

    #[tokio::test]
    async fn saved_configs_are_given_ids_and_replaced_by_id() {
        let store = Scoped::new(Arc::new(bidi_session::MemoryStore::new()), "push");
        let first = save(&store, "t", config("http://a/"), 0).await.unwrap();
        assert!(!first.id.is_empty());
        assert_eq!(first.task_id, "t");
        let second = save(&store, "t", config("http://b/"), 1).await.unwrap();
        let replaced = PushConfig {
            id: first.id.clone(),
            ..config("http://c/")
        };
        save(&store, "t", replaced, 2).await.unwrap();
        let urls: Vec<String> = load(&store, "t")
            .await
            .unwrap()
            .into_iter()
            .map(|kept| kept.config.url)
            .collect();
        assert_eq!(urls, ["http://b/", "http://c/"]);
        assert!(load(&store, "other").await.unwrap().is_empty());
        assert_ne!(first.id, second.id);
    }
}
