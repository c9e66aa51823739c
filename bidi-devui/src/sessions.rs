//! An agent's sessions as the store keeps them, read-only: a session's lineage of snapshots,
//! one snapshot's state, and what changed between two of them. Each identity reads its own
//! sessions only, through the same scope as the agent endpoints.
//!
//! A lineage is walked from the head through `SessionStore::entry`, parent by parent: a store
//! lists no snapshots of a session, so the tail of a branch that was left is not shown. A diff
//! is `bidi_session::Change::diff` of the two states, the JSON Patch a store would write.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use bidi_flow::text::cap;
use bidi_session::{Change, Entry, Scoped, SessionStore as _, Snapshot};
use serde::Serialize;
use serde_json::Value;

use bidi_http::agent::{sessions_of, store_failed};
use bidi_http::codec::{Code, Failure};
use bidi_http::extract::Segments;
use bidi_http::{Host, Identity};

/// How many snapshots a lineage lists at most.
const LINEAGE: usize = 1_000;

/// A snapshot without its state.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SnapshotView {
    id: String,
    parent_id: Option<String>,
    version: u64,
    /// `pending`, `completed`, `failed`, `aborted` or `expired`.
    status: &'static str,
    /// Why its turn failed, when it did.
    error: Option<Value>,
    created_at: u64,
    updated_at: u64,
    /// While its turn runs: when the turn's claim lapses unless renewed.
    lease_expires_at: Option<u64>,
}

impl SnapshotView {
    fn of(entry: Entry) -> Self {
        Self {
            lease_expires_at: entry.lease.as_ref().map(|lease| lease.expires_at),
            id: entry.id,
            parent_id: entry.parent_id,
            version: entry.version,
            status: entry.status.as_str(),
            error: entry.error,
            created_at: bidi_http::time::unix_millis(entry.created_at),
            updated_at: bidi_http::time::unix_millis(entry.updated_at),
        }
    }
}

/// `GET /dev/api/agents/{name}/sessions/{id}/snapshots`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Lineage {
    session_id: String,
    /// The head first, then each one's parent.
    snapshots: Vec<SnapshotView>,
    /// Whether older snapshots were left out (past 1,000).
    truncated: bool,
}

/// The sessions of agent `name` that `identity` sees, or 404 if no such agent is served.
fn store(host: &Host, name: &str, identity: Option<&Identity>) -> Result<Scoped, Failure> {
    let agent = bidi_http::agent::agent(host, "agent", name)?;
    Ok(sessions_of(agent, identity))
}

fn no_session(id: &str) -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        Code::NotFound,
        format!("no session `{}`", cap(id)),
    )
}

fn no_snapshot(id: &str) -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        Code::NotFound,
        format!("the session has no snapshot `{}`", cap(id)),
    )
}

/// Snapshot `snapshot` of session `id`, or 404 (also when it is another session's).
async fn load(store: &Scoped, id: &str, snapshot: &str) -> Result<Snapshot, Failure> {
    match store.load_snapshot(snapshot).await {
        Ok(Some(found)) if found.session_id() == id => Ok(found),
        Ok(_) => Err(no_snapshot(snapshot)),
        Err(error) => Err(store_failed(&error)),
    }
}

/// `GET /dev/api/agents/{name}/sessions/{id}/snapshots`: the head and its lineage.
pub(super) async fn lineage(
    State(host): State<Host>,
    Segments((name, id)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<Lineage>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let store = store(&host, &name, identity.as_ref())?;
    let head = store
        .load(&id)
        .await
        .map_err(|error| store_failed(&error))?
        .ok_or_else(|| no_session(&id))?;
    let mut next = head.entry.parent_id.clone();
    let mut snapshots = vec![SnapshotView::of(head.entry)];
    while let Some(parent) = next.take_if(|_| snapshots.len() < LINEAGE) {
        let Some(entry) = store
            .entry(&parent)
            .await
            .map_err(|error| store_failed(&error))?
        else {
            break;
        };
        next.clone_from(&entry.parent_id);
        snapshots.push(SnapshotView::of(entry));
    }
    Ok(Json(Lineage {
        session_id: id,
        snapshots,
        truncated: next.is_some(),
    }))
}

/// `GET /dev/api/agents/{name}/sessions/{id}/snapshots/{snapshot}`.
#[derive(Debug, Serialize)]
pub(super) struct SnapshotState {
    snapshot: SnapshotView,
    /// The session's state at the snapshot (its parent's while it is pending).
    state: Value,
}

/// `GET /dev/api/agents/{name}/sessions/{id}/snapshots/{snapshot}`: one snapshot's state.
pub(super) async fn snapshot(
    State(host): State<Host>,
    Segments((name, id, snapshot)): Segments<(String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<SnapshotState>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let store = store(&host, &name, identity.as_ref())?;
    let Snapshot { entry, state, .. } = load(&store, &id, &snapshot).await?;
    Ok(Json(SnapshotState {
        snapshot: SnapshotView::of(entry),
        state,
    }))
}

/// `GET /dev/api/agents/{name}/sessions/{id}/diff/{from}/{to}`.
#[derive(Debug, Serialize)]
pub(super) struct Diff {
    from: SnapshotView,
    to: SnapshotView,
    /// What turns `from`'s state into `to`'s: a JSON Patch (RFC 6902).
    changes: Change,
}

/// `GET /dev/api/agents/{name}/sessions/{id}/diff/{from}/{to}`: what changed from one
/// snapshot's state to the other's.
pub(super) async fn diff(
    State(host): State<Host>,
    Segments((name, id, from, to)): Segments<(String, String, String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<Diff>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let store = store(&host, &name, identity.as_ref())?;
    let old = load(&store, &id, &from).await?;
    let new = load(&store, &id, &to).await?;
    Ok(Json(Diff {
        changes: Change::diff(&old.state, &new.state),
        from: SnapshotView::of(old.entry),
        to: SnapshotView::of(new.entry),
    }))
}

/// `POST /dev/api/agents/{name}/sessions/{id}/abort`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Aborted {
    /// The session's head: the running turn's snapshot, when one runs.
    snapshot_id: Option<String>,
    /// The status the head had: `pending` when its turn was running and is now aborted.
    status: Option<&'static str>,
}

/// `POST /dev/api/agents/{name}/sessions/{id}/abort`: aborts the session's running turn, in
/// whichever process runs it (it stops at its next lease renewal); a head that is not pending
/// is left as it is.
pub(super) async fn abort(
    State(host): State<Host>,
    Segments((name, id)): Segments<(String, String)>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<Aborted>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let store = store(&host, &name, identity.as_ref())?;
    let head = store
        .load(&id)
        .await
        .map_err(|error| store_failed(&error))?;
    let Some(head) = head else {
        return Err(no_session(&id));
    };
    let status = bidi_http::turns::abort(&store, &head.entry.id).await?;
    Ok(Json(Aborted {
        snapshot_id: Some(head.entry.id),
        status: status.map(|status| status.as_str()),
    }))
}
