//! The rules every store keeps, in one place: what may follow a snapshot, who finishes and
//! renews a pending one, what an abort changes. Stores read the rows involved under their lock
//! (or in their transaction) and ask here before they write.

use bidi_core::NotFound;

use crate::store::{Lease, Parent, Renewal, Status, StoreError};

/// A stored snapshot as the rules see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<'a> {
    /// Its session.
    pub(crate) session_id: &'a str,
    /// Its status as stored (never `Expired`).
    pub(crate) status: Status,
    /// Its lease: held from the pending write until the finish, also while it is aborted.
    pub(crate) lease: Option<&'a Lease>,
    /// Whether any snapshot follows it.
    pub(crate) has_children: bool,
}

impl Node<'_> {
    /// Whether a turn still holds it: it has not finished and its lease has not lapsed.
    fn is_held(&self) -> bool {
        matches!(self.status, Status::Pending | Status::Aborted)
            && self.lease.is_some_and(|lease| !lease.is_expired())
    }
}

/// Whether a snapshot may follow `parent_node` (the snapshot `parent` names, looked up in the
/// session, or in any session for a fork), given the session's `head`.
pub(crate) fn check_append(
    session_id: &str,
    parent: &Parent,
    head: Option<&str>,
    parent_node: Option<Node<'_>>,
) -> Result<(), StoreError> {
    let conflict = |expected: Option<&str>| StoreError::Conflict {
        session_id: session_id.to_owned(),
        expected: expected.map(str::to_owned),
        actual: head.map(str::to_owned),
    };
    let node = match parent {
        Parent::None if head.is_none() => return Ok(()),
        Parent::None => return Err(conflict(None)),
        Parent::Head(id) if head != Some(id.as_str()) => return Err(conflict(Some(id))),
        Parent::Head(id) | Parent::Branch(id) => match parent_node {
            Some(node) if node.session_id == session_id => node,
            _ if matches!(parent, Parent::Head(_)) => return Err(conflict(Some(id))),
            _ => return Err(StoreError::NotFound(NotFound::new("snapshot", id.clone()))),
        },
        // A fork starts a session: the snapshot it goes on from is another's.
        Parent::Fork(_) if head.is_some() => return Err(conflict(None)),
        Parent::Fork(id) => match parent_node {
            Some(node) => node,
            None => return Err(StoreError::NotFound(NotFound::new("snapshot", id.clone()))),
        },
    };
    match node.lease {
        Some(lease) if node.is_held() => Err(StoreError::Running {
            session_id: session_id.to_owned(),
            lease: lease.clone(),
        }),
        _ => Ok(()),
    }
}

/// Whether `owner` may finish `node`, and the status it is finished with: an aborted snapshot
/// stays aborted.
pub(crate) fn check_finish(
    snapshot_id: &str,
    owner: &str,
    node: Option<Node<'_>>,
    status: Status,
) -> Result<Status, StoreError> {
    let node = held(snapshot_id, owner, node)?;
    if node.has_children {
        return Err(not_held(
            snapshot_id,
            "its lease lapsed and another turn went on from it",
        ));
    }
    Ok(match (node.status, status) {
        (Status::Aborted, _) => Status::Aborted,
        (_, Status::Pending | Status::Expired) => Status::Completed,
        (_, status) => status,
    })
}

/// What renewing `node`'s lease for `owner` finds.
pub(crate) fn check_renew(
    snapshot_id: &str,
    owner: &str,
    node: Option<Node<'_>>,
) -> Result<Renewal, StoreError> {
    let node = held(snapshot_id, owner, node)?;
    if node.has_children {
        return Err(not_held(
            snapshot_id,
            "its lease lapsed and another turn went on from it",
        ));
    }
    Ok(if node.status == Status::Aborted {
        Renewal::Aborted
    } else {
        Renewal::Renewed
    })
}

/// What an abort does to a snapshot of stored `status` with `lease`: the status it answers
/// (as a reader would see it), and the status to store, if it changes.
pub(crate) fn abort(status: Status, lease: Option<&Lease>) -> (Status, Option<Status>) {
    match status {
        Status::Pending if lease.is_some_and(Lease::is_expired) => (Status::Expired, None),
        Status::Pending => (Status::Pending, Some(Status::Aborted)),
        other => (other, None),
    }
}

/// Whether `node`'s turn is stale at `now` (see [`Lease::is_stale_at`]): pending, nothing
/// after it, its resumable lease holding but not renewed since `renewed_at` for two thirds of
/// its term.
pub(crate) fn is_stale(node: Node<'_>, renewed_at: u64, now: u64) -> bool {
    node.status == Status::Pending
        && !node.has_children
        && node
            .lease
            .is_some_and(|lease| lease.is_stale_at(renewed_at, now))
}

/// Whether a process may take `node`'s turn over from `from`: it is stale under `from`'s lease.
pub(crate) fn check_take_over(
    snapshot_id: &str,
    from: &str,
    node: Option<Node<'_>>,
    renewed_at: u64,
    now: u64,
) -> Result<(), StoreError> {
    let node = held(snapshot_id, from, node)?;
    if is_stale(node, renewed_at, now) {
        Ok(())
    } else if node.lease.is_some_and(|lease| lease.resume.is_none()) {
        Err(not_held(snapshot_id, "its turn is not to run twice"))
    } else {
        Err(not_held(snapshot_id, "its turn is not stale"))
    }
}

/// The lease of a turn taken over: `to`'s owner and expiry; when it started and what running
/// it again takes stay.
pub(crate) fn hand_over(lease: Option<&mut Lease>, to: Lease) {
    if let Some(lease) = lease {
        lease.owner = to.owner;
        lease.expires_at = to.expires_at;
    }
}

/// `node`, if it is unfinished under `owner`'s lease.
fn held<'a>(
    snapshot_id: &str,
    owner: &str,
    node: Option<Node<'a>>,
) -> Result<Node<'a>, StoreError> {
    let Some(node) = node else {
        return Err(not_held(snapshot_id, "there is no such snapshot"));
    };
    // A lapsed lease is over for good: a reader may have taken the snapshot's state as final
    // and gone on from it, so neither a late finish nor a late renewal may change it.
    match node.lease {
        Some(lease) if lease.owner != owner => Err(not_held(snapshot_id, "another turn holds it")),
        Some(lease) if lease.is_expired() => Err(not_held(snapshot_id, "its lease lapsed")),
        Some(_) => Ok(node),
        None => Err(not_held(snapshot_id, "its turn has finished")),
    }
}

fn not_held(snapshot_id: &str, reason: &'static str) -> StoreError {
    StoreError::NotHeld {
        snapshot_id: snapshot_id.to_owned(),
        reason,
    }
}
