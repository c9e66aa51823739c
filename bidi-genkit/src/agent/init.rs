//! What a turn's `init` opens, as Genkit's agents resolve it: the client's state for an agent
//! whose client keeps it; a completed snapshot, or a session's last completed snapshot, for
//! one that keeps its sessions.

use axum::http::StatusCode;
use bidi_agent::{AgentInit, MAX_SESSION_ID_BYTES};
use bidi_flow::text::cap;
use bidi_llm::{LlmAgent, LlmSession};
use bidi_session::{Entry, SessionStore as _, Status};
use serde::Deserialize;
use serde_json::Value;

use super::{message, precondition};
use bidi_http::Identity;
use bidi_http::agent;
use bidi_http::codec::{Code, Failure};

/// Genkit's `AgentInit`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Init {
    #[serde(default)]
    snapshot_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    state: Option<Value>,
}

/// Genkit's `SessionState`, as a client that keeps it sends it back.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientState {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    custom: Option<Value>,
    #[serde(default)]
    artifacts: Vec<Value>,
}

/// What an init opens: the agent's init, and what the client knows of where the turn starts.
#[derive(Debug)]
pub(super) struct Opened {
    /// The session and snapshot to open.
    pub(super) init: AgentInit<LlmSession>,
    /// The session, when the init names one (or the snapshot it names has one).
    pub(super) session_id: Option<String>,
    /// The completed snapshot the turn goes on from, if the client has seen it: what a failed
    /// turn's output names, so that the client's next turn goes on from there.
    pub(super) last_good: Option<String>,
}

/// `id`, the `field` of the request at `path`, if it is an id: not empty, and at most
/// [`MAX_SESSION_ID_BYTES`] long. Genkit's `INVALID_ARGUMENT` otherwise, which does not quote
/// it.
///
/// # Errors
///
/// An id that is empty or too long, as a 400.
pub(super) fn checked(id: String, field: &str, path: &str) -> Result<String, Failure> {
    let refused = |message: String| {
        Failure::new(StatusCode::BAD_REQUEST, Code::InvalidInput, message).at(path)
    };
    if id.is_empty() {
        return Err(refused(format!("`{field}` is empty")));
    }
    if id.len() > MAX_SESSION_ID_BYTES {
        return Err(refused(format!(
            "`{field}` is {} bytes long; an id is at most {MAX_SESSION_ID_BYTES} bytes",
            id.len()
        )));
    }
    Ok(id)
}

/// What the request's init opens for `agent` (served as `name`), as `identity` sees its
/// sessions: for an agent that keeps its sessions, a snapshot or a session by id; for one whose
/// client keeps them, the client's state.
///
/// # Errors
///
/// An init that does not fit the agent (Genkit's `FAILED_PRECONDITION`), an id that is not
/// one, a snapshot that cannot be resumed (not completed: Genkit's `INVALID_ARGUMENT`), or the
/// store's failure.
pub(super) async fn open(
    agent: &LlmAgent,
    name: &str,
    identity: Option<&Identity>,
    init: Init,
) -> Result<Opened, Failure> {
    let snapshot_id = init
        .snapshot_id
        .map(|id| checked(id, "snapshotId", "/init/snapshotId"))
        .transpose()?;
    let session_id = init
        .session_id
        .map(|id| checked(id, "sessionId", "/init/sessionId"))
        .transpose()?;
    if agent.agent().is_client_managed() {
        let misuse = |field: &str| {
            precondition(
                format!(
                    "Cannot use '{field}' with agent `{}`: its client keeps its state; send \
                     the `state` of its last output",
                    cap(name)
                ),
                &format!("/init/{field}"),
            )
        };
        if session_id.is_some() {
            return Err(misuse("sessionId"));
        }
        if snapshot_id.is_some() {
            return Err(misuse("snapshotId"));
        }
        return client(init.state);
    }
    if init.state.is_some() {
        return Err(precondition(
            format!(
                "Cannot send 'state' to agent `{}`: it keeps its sessions; send a snapshotId or \
                 a sessionId",
                cap(name)
            ),
            "/init/state",
        ));
    }
    let store = agent::sessions_of(agent, identity);
    let failed = |error: bidi_session::StoreError| agent::store_failed(&error);
    if let Some(snapshot) = snapshot_id {
        let mut opened = AgentInit::new();
        if let Some(id) = &session_id {
            opened = opened.session_id(id.clone());
        }
        let entry = store.entry(&snapshot).await.map_err(failed)?;
        // A snapshot that is not there, or of another session than the init names: the
        // agent refuses it as it opens it.
        if let Some(entry) =
            entry.filter(|entry| session_id.as_ref().is_none_or(|id| *id == entry.session_id))
        {
            if entry.status != Status::Completed {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    Code::InvalidInput,
                    format!(
                        "Snapshot `{}` is not resumable (status: {}): only a completed snapshot \
                         is",
                        cap(&snapshot),
                        entry.status.as_str()
                    ),
                )
                .at("/init/snapshotId"));
            }
            return Ok(Opened {
                init: opened.snapshot(snapshot.clone()),
                session_id: Some(entry.session_id),
                last_good: Some(snapshot),
            });
        }
        return Ok(Opened {
            init: opened.snapshot(snapshot),
            session_id,
            last_good: None,
        });
    }
    let Some(session) = session_id else {
        return Ok(Opened {
            init: AgentInit::new(),
            session_id: None,
            last_good: None,
        });
    };
    let head = store.load(&session).await.map_err(failed)?;
    let Some(head) = head else {
        // A new session of that id.
        return Ok(Opened {
            init: AgentInit::new().session_id(session.clone()),
            session_id: Some(session),
            last_good: None,
        });
    };
    let head_id = head.entry.id.clone();
    let resumed = last_completed(&store, head.entry).await.map_err(failed)?;
    let mut init = AgentInit::new().session_id(session.clone());
    if resumed.status == Status::Completed && resumed.id != head_id {
        init = init.snapshot(resumed.id.clone());
    }
    Ok(Opened {
        init,
        session_id: Some(session),
        last_good: (visible(&resumed) && resumed.status == Status::Completed).then_some(resumed.id),
    })
}

/// Whether the client may know snapshot `entry`: any but a session's first, the empty one the
/// session was created with before its first turn.
pub(super) fn visible(entry: &Entry) -> bool {
    entry.version > 1
}

/// The snapshot a session's turn goes on from, as Genkit resumes a session: its head, or if
/// that failed, was aborted or expired, the last completed snapshot before it. A head that is
/// running is the head: the turn is refused as the session is busy.
async fn last_completed(
    store: &bidi_session::Scoped,
    head: Entry,
) -> Result<Entry, bidi_session::StoreError> {
    /// How far back a session is walked: its snapshots form a tree, but a store is not
    /// trusted to.
    const MAX_STEPS: usize = 1024;
    let mut entry = head;
    for _ in 0..MAX_STEPS {
        if !matches!(
            entry.status,
            Status::Failed | Status::Aborted | Status::Expired
        ) {
            break;
        }
        let Some(parent) = &entry.parent_id else {
            break;
        };
        match store.entry(parent).await? {
            Some(parent) => entry = parent,
            None => break,
        }
    }
    Ok(entry)
}

/// The init of an agent whose client keeps its state: that state, under its session id.
fn client(state: Option<Value>) -> Result<Opened, Failure> {
    let Some(state) = state else {
        return Ok(Opened {
            init: AgentInit::new(),
            session_id: None,
            last_good: None,
        });
    };
    let invalid = |message: String, path: &str| {
        Failure::new(StatusCode::BAD_REQUEST, Code::InvalidInit, message).at(path)
    };
    let state: ClientState = serde_json::from_value(state)
        .map_err(|error| invalid(format!("invalid state: {error}"), "/init/state"))?;
    let artifacts = serde_json::from_value(Value::Array(state.artifacts)).map_err(|error| {
        invalid(
            format!("invalid artifacts: {error}"),
            "/init/state/artifacts",
        )
    })?;
    let messages = message::from_conversation(&state.messages)
        .map_err(|reason| invalid(reason, "/init/state/messages"))?;
    let session = LlmSession {
        messages: messages.into(),
        custom: state.custom.unwrap_or_default(),
        artifacts,
        ..LlmSession::default()
    };
    let init = AgentInit::new().init(session);
    let session_id = state
        .session_id
        .map(|id| checked(id, "sessionId", "/init/state/sessionId"))
        .transpose()?;
    Ok(match session_id {
        Some(id) => Opened {
            init: init.session_id(id.clone()),
            session_id: Some(id),
            last_good: None,
        },
        None => Opened {
            init,
            session_id: None,
            last_good: None,
        },
    })
}
