//! `ListTasks`: the caller's tasks of the agent, latest status first, a page at a time.
//!
//! The tasks are read from the store as `GetTask` reads one (`lineage`): every session of the
//! caller's scope, or the one `contextId` names, walked back from its head, so any process
//! sharing the store lists alike and a caller sees only its own tasks. The cost grows with
//! the turns of the sessions listed (every task must be found to sort them and to count
//! `totalSize`): a `contextId` reads one session. A task on a branch its session left behind
//! is not listed (`GetTask` still reads it).
//!
//! Tasks are sorted by their status timestamp, newest first, then by id, so that the order is
//! total. A page token is the place of the last task of the page before (its timestamp and id,
//! as hex: opaque to clients), and a page starts after it, so a task that changes between two
//! pages moves in the order rather than repeating the ones around it.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use bidi_session::SessionStore as _;

use super::lineage;
use super::tasks::view;
use super::types::{RpcError, Task, TaskState};
use super::{Call, params};
use bidi_flow::text::{hex, unhex};
use bidi_http::agent;
use bidi_http::time::{parse_rfc3339, unix_millis};

/// How many tasks a page holds when the client does not say.
const DEFAULT_PAGE: u32 = 50;
/// How many tasks a page holds at most: a larger `pageSize` is read as this.
const MAX_PAGE: u32 = 100;

/// `ListTasks`' params. Empty strings are unset, as ProtoJSON writes unset fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    page_size: Option<i64>,
    #[serde(default)]
    page_token: Option<String>,
    #[serde(default)]
    history_length: Option<u32>,
    #[serde(default)]
    status_timestamp_after: Option<String>,
    #[serde(default)]
    include_artifacts: bool,
}

/// `ListTasks`' result.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    tasks: Vec<Task>,
    /// Where the next page starts; empty on the last page.
    next_page_token: String,
    page_size: u32,
    total_size: u32,
}

/// Where a task stands in the order: its status timestamp (milliseconds), then its id.
type Place = (u64, String);

/// What the params ask for, checked.
struct Query {
    context: Option<String>,
    /// `None`: any state; `Some(None)`: a state no task of this agent is ever in.
    state: Option<Option<TaskState>>,
    page: u32,
    after: Option<Place>,
    history: Option<u32>,
    since: Option<u64>,
    artifacts: bool,
}

/// `ListTasks`: a page of the caller's tasks of the agent.
pub(super) async fn list(call: &Call<'_>, params: Option<Value>) -> Result<Response, RpcError> {
    call.keeps_sessions("`ListTasks`")?;
    // Every param is optional, and so are the params.
    let params = params.or_else(|| Some(Value::Object(serde_json::Map::new())));
    let query = checked(self::params(params)?)?;
    let store = agent::sessions_of(call.agent, call.identity);
    let sessions = match &query.context {
        Some(context) => vec![context.clone()],
        None => store
            .list()
            .await
            .map_err(|error| RpcError::internal(agent::store_failed(&error).message))?,
    };
    let locals = call.locals();
    let mut found: Vec<(Place, Task)> = Vec::new();
    for session in &sessions {
        for lineage in lineage::tasks(&store, session).await? {
            let at = unix_millis(lineage.latest.updated_at);
            if query.since.is_some_and(|since| at < since) {
                continue;
            }
            let mut task = view(&lineage, &locals, query.history);
            if query
                .state
                .is_some_and(|state| state != Some(task.status.state))
            {
                continue;
            }
            if !query.artifacts {
                task.artifacts.clear();
            }
            found.push(((at, lineage.task), task));
        }
    }
    // Newest first; then by id, descending, so that the order is total.
    found.sort_unstable_by(|(a, _), (b, _)| b.cmp(a));
    let total = u32::try_from(found.len()).unwrap_or(u32::MAX);
    let start = query.after.as_ref().map_or(0, |after| {
        found.partition_point(|(place, _)| place >= after)
    });
    let page = found.get(start..).unwrap_or_default();
    let page = &page[..page.len().min(query.page as usize)];
    let more = start + page.len() < found.len();
    let next_page_token = match page.last() {
        Some((place, _)) if more => token(place),
        _ => String::new(),
    };
    let listed = Listed {
        tasks: page.iter().map(|(_, task)| task.clone()).collect(),
        next_page_token,
        page_size: query.page,
        total_size: total,
    };
    Ok(call.binding.answer(&listed))
}

/// The params, checked.
///
/// # Errors
///
/// Invalid params naming the one that is wrong.
fn checked(params: ListParams) -> Result<Query, RpcError> {
    let set = |text: Option<String>| text.filter(|text| !text.is_empty());
    let state = match set(params.status).as_deref() {
        // `UNRECOGNIZED`: what the A2A JS SDK's client sends for a status left unset.
        None | Some("TASK_STATE_UNSPECIFIED" | "UNRECOGNIZED") => None,
        Some(name) => Some(state(name).ok_or_else(|| {
            RpcError::invalid_params(
                "/params/status",
                format!("`{}` is not a task state", bidi_flow::text::cap(name)),
            )
        })?),
    };
    let page = match params.page_size {
        None | Some(0) => DEFAULT_PAGE,
        Some(size) if size < 0 => {
            return Err(RpcError::invalid_params(
                "/params/pageSize",
                "a page holds at least one task",
            ));
        }
        Some(size) => u32::try_from(size).unwrap_or(MAX_PAGE).min(MAX_PAGE),
    };
    let after = match set(params.page_token) {
        None => None,
        Some(token) => Some(place(&token).ok_or_else(|| {
            RpcError::invalid_params(
                "/params/pageToken",
                "not a page token of this agent's: send the `nextPageToken` of the page before",
            )
        })?),
    };
    let since = match set(params.status_timestamp_after) {
        None => None,
        Some(text) => Some(parse_rfc3339(&text).map(unix_millis).ok_or_else(|| {
            RpcError::invalid_params(
                "/params/statusTimestampAfter",
                "a time in RFC 3339, as `2026-01-31T12:00:00Z`",
            )
        })?),
    };
    Ok(Query {
        context: set(params.context_id),
        state,
        page,
        after,
        history: params.history_length,
        since,
        artifacts: params.include_artifacts,
    })
}

/// The state `name` names: `Some(None)` for A2A's states no task of this agent is ever in
/// (rejected, auth-required); `None` for a name that is no state.
fn state(name: &str) -> Option<Option<TaskState>> {
    Some(Some(match name {
        "TASK_STATE_SUBMITTED" => TaskState::Submitted,
        "TASK_STATE_WORKING" => TaskState::Working,
        "TASK_STATE_COMPLETED" => TaskState::Completed,
        "TASK_STATE_FAILED" => TaskState::Failed,
        "TASK_STATE_CANCELED" => TaskState::Canceled,
        "TASK_STATE_INPUT_REQUIRED" => TaskState::InputRequired,
        "TASK_STATE_REJECTED" | "TASK_STATE_AUTH_REQUIRED" => return Some(None),
        _ => return None,
    }))
}

/// The page token of `place`: `{millis}:{id}`, as hex.
fn token((at, id): &Place) -> String {
    hex(format!("{at}:{id}").as_bytes())
}

/// The place a page token names; `None` for one this agent did not give.
fn place(token: &str) -> Option<Place> {
    let text = String::from_utf8(unhex(token)?).ok()?;
    let (at, id) = text.split_once(':')?;
    Some((at.parse().ok()?, id.to_owned()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn query(params: Value) -> Result<Query, RpcError> {
        checked(serde_json::from_value(params).unwrap())
    }

    #[test]
    fn page_tokens_name_a_place_and_nothing_else() {
        let place = (1_795_704_881_123, "t:1".to_owned());
        assert_eq!(super::place(&token(&place)), Some(place));
        for bad in ["", "zz", "abc", "3a", "78797a"] {
            assert_eq!(super::place(bad), None, "{bad}");
        }
    }

    #[test]
    fn params_are_checked_naming_the_one_that_is_wrong() {
        let all = query(json!({})).unwrap();
        assert_eq!(
            (all.page, all.state, all.artifacts),
            (DEFAULT_PAGE, None, false)
        );
        // ProtoJSON's unset values.
        let unset = query(json!({"contextId": "", "status": "TASK_STATE_UNSPECIFIED",
                                 "pageToken": "", "pageSize": 0}))
        .unwrap();
        assert_eq!(
            (unset.context, unset.state, unset.page),
            (None, None, DEFAULT_PAGE)
        );
        assert_eq!(query(json!({"pageSize": 1000})).unwrap().page, MAX_PAGE);
        assert_eq!(
            query(json!({"status": "TASK_STATE_REJECTED"}))
                .unwrap()
                .state,
            Some(None)
        );
        assert_eq!(
            query(json!({"statusTimestampAfter": "1970-01-01T00:00:01Z"}))
                .unwrap()
                .since,
            Some(1000)
        );
        for (params, field) in [
            (json!({"pageSize": -1}), "pageSize"),
            (json!({"status": "done"}), "status"),
            (json!({"pageToken": "nope"}), "pageToken"),
            (
                json!({"statusTimestampAfter": "yesterday"}),
                "statusTimestampAfter",
            ),
        ] {
            let Err(error) = query(params.clone()) else {
                panic!("{params} is refused")
            };
            assert_eq!(error.field(), Some(field), "{params}");
        }
    }
}
