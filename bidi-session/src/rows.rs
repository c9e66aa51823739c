//! What the SQL stores share: a snapshot's row as they read it, and the replay of a lineage
//! into a state.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::change::Change;
use crate::rules::{self, Node};
use crate::storage::{Body, log_store};
use crate::store::{Entry, Lease, Replay, Status, StoreError, now_ms};

/// The columns of a snapshot row, in the order the SQL stores select them.
pub(crate) const COLUMNS: &str = "id, session_id, parent_id, version, status, lease_owner, \
    lease_started, lease_expires, error, replay_checkpoint, replay_changes, has_children, \
    created_at, updated_at, lease_resume";

/// A snapshot's row, without its change and checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) session_id: String,
    pub(crate) parent_id: Option<String>,
    pub(crate) version: i64,
    pub(crate) status: String,
    /// The lease, from its three columns (all set, or none).
    pub(crate) lease: Option<Lease>,
    pub(crate) error: Option<String>,
    pub(crate) replay_checkpoint: i64,
    pub(crate) replay_changes: i64,
    pub(crate) has_children: bool,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

impl Row {
    pub(crate) fn status(&self) -> Result<Status, StoreError> {
        Status::from_name(&self.status).ok_or_else(|| {
            StoreError::backend(format!(
                "a snapshot has an unknown status `{}`",
                self.status
            ))
        })
    }

    pub(crate) fn replay(&self) -> Replay {
        Replay {
            checkpoint: unsigned(self.replay_checkpoint),
            changes: unsigned(self.replay_changes),
        }
    }

    /// The row as the rules see it.
    pub(crate) fn node(&self) -> Result<Node<'_>, StoreError> {
        Ok(Node {
            session_id: &self.session_id,
            status: self.status()?,
            lease: self.lease.as_ref(),
            has_children: self.has_children,
        })
    }

    /// Whether `from`'s turn of `found`, snapshot `id`, may be taken over now.
    pub(crate) fn check_take_over(
        id: &str,
        from: &str,
        found: Option<&Self>,
    ) -> Result<(), StoreError> {
        let node = found.map(Self::node).transpose()?;
        let renewed_at = found.map_or(0, |row| unsigned(row.updated_at));
        rules::check_take_over(id, from, node, renewed_at, now_ms())
    }

    /// The entry a reader sees once the row's turn was taken over by `to` at `at`.
    pub(crate) fn taken_over(mut self, to: Lease, at: i64) -> Result<Entry, StoreError> {
        rules::hand_over(self.lease.as_mut(), to);
        self.updated_at = at;
        self.entry()
    }

    /// Whether the row's turn is stale at `now`.
    pub(crate) fn is_stale(&self, now: u64) -> Result<bool, StoreError> {
        Ok(rules::is_stale(
            self.node()?,
            unsigned(self.updated_at),
            now,
        ))
    }

    /// The entry a reader sees once the row's turn finished with `status`.
    pub(crate) fn finished(
        mut self,
        status: Status,
        error: Option<String>,
        replay: Replay,
        at: i64,
    ) -> Result<Entry, StoreError> {
        status.as_str().clone_into(&mut self.status);
        self.lease = None;
        self.error = error;
        self.replay_checkpoint = signed(replay.checkpoint);
        self.replay_changes = signed(replay.changes);
        self.updated_at = at;
        self.entry()
    }

    /// The entry a reader sees.
    pub(crate) fn entry(self) -> Result<Entry, StoreError> {
        let status = self.status()?;
        let lease = self.lease.clone();
        let replay = self.replay();
        // Text a store wrote is JSON: anything else is a damaged database.
        let error = self
            .error
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(StoreError::backend)?;
        Ok(Entry::new(
            self.id,
            self.session_id,
            self.parent_id,
            unsigned(self.version),
            status,
            lease,
            error,
            replay,
            time(self.created_at),
            time(self.updated_at),
        ))
    }
}

/// The state at the end of a lineage, from its rows oldest first: `(checkpoint, change)` each,
/// the first with a checkpoint.
pub(crate) fn replay(
    rows: impl IntoIterator<Item = (Option<String>, String)>,
) -> Result<Value, StoreError> {
    log_store::replay(
        rows.into_iter()
            .map(|(checkpoint, change)| Body { change, checkpoint }),
    )
}

/// The lease of a row's lease columns: the first three all set, or none; `resume` as JSON
/// text, for a turn that may be taken over.
pub(crate) fn lease(
    owner: Option<String>,
    started: Option<i64>,
    expires: Option<i64>,
    resume: Option<String>,
) -> Option<Lease> {
    Some(Lease {
        owner: owner?,
        started_at: unsigned(started?),
        expires_at: unsigned(expires?),
        // Text a store wrote is JSON; a damaged one leaves the turn to expire, not to run again.
        resume: resume.and_then(|text| serde_json::from_str(&text).ok()),
    })
}

/// A lease's `resume` as the SQL stores keep it.
pub(crate) fn resume(lease: Option<&Lease>) -> Option<String> {
    lease?.resume.as_deref().map(Value::to_string)
}

/// A snapshot's change and checkpoint as the SQL stores write them, and what loading it costs.
pub(crate) struct Encoded {
    pub(crate) change: String,
    pub(crate) checkpoint: Option<String>,
    pub(crate) replay: Replay,
}

/// Encodes a snapshot after `parent` (`None`: a session's first) that adds `change`, and carries
/// `checkpoint` if there is one.
pub(crate) fn encode(
    parent: Option<&Row>,
    change: &Change,
    checkpoint: Option<&Value>,
) -> Result<Encoded, StoreError> {
    let (body, replay) = log_store::encode(parent.map(Row::replay), change, checkpoint)?;
    Ok(Encoded {
        change: body.change,
        checkpoint: body.checkpoint,
        replay,
    })
}

/// `value` as JSON text.
pub(crate) fn text(value: Option<&Value>) -> Result<Option<String>, StoreError> {
    value
        .map(serde_json::to_string)
        .transpose()
        .map_err(StoreError::Serialization)
}

/// Milliseconds since the Unix epoch, as SQL stores them.
pub(crate) fn millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) fn time(millis: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(unsigned(millis))
}

/// A count or a time read from SQL (`BIGINT`/`INTEGER`, never negative).
pub(crate) fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A count or a time as SQL stores it.
pub(crate) fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
