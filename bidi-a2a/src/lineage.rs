//! Which turns make a task, read from the store alone.
//!
//! A task's id is the snapshot of its first turn. Every turn whose parent turn ended waiting
//! for input (`input-required`: a completed snapshot whose session waits for tool calls)
//! continues its parent's task; any other turn starts a task of its own. So the turns of task
//! `T` are the session's lineage from `T` forward, for as long as each turn waits for input,
//! and its latest turn says where it stands. The store keeps no index of a snapshot's
//! children: the lineage is walked back from the session's head to `T`.
//!
//! A task canceled while it waits for input is recorded the same way: a turn after its latest
//! one that did nothing and was aborted (an empty snapshot whose status is aborted). It ends
//! the task (`canceled`) and, not waiting for input, starts no continuation: the session's next
//! message is a new task, whose text sets the canceled task's calls aside.
//!
//! Why the store and not process memory: a task outlives the request, the stream and the
//! process that ran its first turn (a client answers it minutes later, through another
//! process behind the same load balancer), and the session's snapshots are the one record
//! every process reads. So nothing is remembered in memory, nothing is written beyond the
//! turns themselves but the marker of a cancel, and a task reads alike from any process.
//! The price is a walk back from the head on each read of a task, as long as the turns after
//! it (a task far behind a long session's head costs more to read than a recent one).

use std::time::Duration;

use super::types::RpcError;
use bidi_http::agent;
use bidi_llm::{LlmSession, Status};
use bidi_session::{
    Append, Change, Entry, Finish, Lease, Parent, Scoped, SessionStore as _, Snapshot,
    Status as Stored, StoreError,
};

/// How many snapshots a lookup walks at most: a task further back from its session's head is
/// read as its first turn alone.
const WALK: u64 = 10_000;

/// How long the marker of a cancel is held while it is written.
const MARKER_LEASE: Duration = Duration::from_secs(30);

/// A task's turns, as the store keeps them.
#[derive(Debug, Clone)]
pub(crate) struct Lineage {
    /// The task's id: its first turn's snapshot.
    pub(crate) task: String,
    /// Its latest turn's snapshot.
    pub(crate) latest: Entry,
    /// The session's state at the latest turn (its parent's while that turn runs).
    pub(crate) state: LlmSession,
    /// How many messages the conversation held before the task began.
    pub(crate) before: usize,
    /// Whether the latest turn is its session's head.
    pub(crate) head: bool,
}

impl Lineage {
    /// Whether the task waits for input: its latest turn ended waiting for tool calls.
    pub(crate) fn waits(&self) -> bool {
        waits(&self.latest, &self.state)
    }
}

/// Whether the turn of `entry`, at `state`, ended waiting for input.
fn waits(entry: &Entry, state: &LlmSession) -> bool {
    entry.status == Stored::Completed && state.status == Status::AwaitingToolExecution
}

fn failed(error: &StoreError) -> RpcError {
    RpcError::internal(agent::store_failed(error).message)
}

/// A snapshot's entry and its state, as the agent's.
fn decode(snapshot: Snapshot) -> Result<(Entry, LlmSession), RpcError> {
    let state = serde_json::from_value(snapshot.state)
        .map_err(|_| RpcError::internal("the task's session cannot be read by this agent"))?;
    Ok((snapshot.entry, state))
}

async fn snapshot(store: &Scoped, id: &str) -> Result<Option<(Entry, LlmSession)>, RpcError> {
    match store.load_snapshot(id).await.map_err(|e| failed(&e))? {
        Some(snapshot) => decode(snapshot).map(Some),
        None => Ok(None),
    }
}

/// Task `id` of `store`: `None` if there is no such snapshot, or if it is not a task's first
/// turn (it continues the task of a turn that waited for input).
///
/// # Errors
///
/// The store's, or a session the agent cannot read.
pub(crate) async fn resolve(store: &Scoped, id: &str) -> Result<Option<Lineage>, RpcError> {
    let Some(first) = store.entry(id).await.map_err(|e| failed(&e))? else {
        return Ok(None);
    };
    // The message count before the task, and whether `id` is a task at all.
    let before = match &first.parent_id {
        Some(parent) => match snapshot(store, parent).await? {
            Some((entry, state)) if waits(&entry, &state) => return Ok(None),
            Some((_, state)) => state.messages.len(),
            None => 0,
        },
        None => 0,
    };
    let head = store
        .load(&first.session_id)
        .await
        .map_err(|e| failed(&e))?;
    let mut head_state = None;
    let mut chain = Vec::new();
    if let Some(head) = head {
        let (entry, state) = decode(head)?;
        chain = walk_back(store, entry, &first).await?;
        head_state = Some(state);
    }
    // Off the head's lineage, the task is its first turn alone.
    let from_head = !chain.is_empty();
    if !from_head {
        chain = vec![first];
        head_state = None;
    }
    let last = chain.len() - 1;
    let mut at = 0;
    let mut state = state_at(store, &chain, at, &mut head_state).await?;
    // A pending first turn of a session has the state it started with: nothing of its own.
    let before = match &chain[0] {
        entry if entry.status == Stored::Pending && entry.parent_id.is_none() => {
            state.messages.len()
        }
        _ => before,
    };
    while at < last && waits(&chain[at], &state) {
        at += 1;
        state = state_at(store, &chain, at, &mut head_state).await?;
    }
    let head = from_head && at == last;
    let latest = chain.swap_remove(at);
    Ok(Some(Lineage {
        task: id.to_owned(),
        latest,
        state,
        before,
        head,
    }))
}

/// The state at `chain[at]`: the head's (`head`, taken) for the last of a chain that ends at
/// the head.
async fn state_at(
    store: &Scoped,
    chain: &[Entry],
    at: usize,
    head: &mut Option<LlmSession>,
) -> Result<LlmSession, RpcError> {
    if at + 1 == chain.len()
        && let Some(state) = head.take()
    {
        return Ok(state);
    }
    let loaded = snapshot(store, &chain[at].id).await?;
    loaded
        .map(|(_, state)| state)
        .ok_or_else(|| RpcError::internal("a turn of the task is no longer stored"))
}

/// The snapshots from `first` to `head`, oldest first: empty if `first` is not in the head's
/// lineage (another branch went on from before it), or too far back.
async fn walk_back(store: &Scoped, head: Entry, first: &Entry) -> Result<Vec<Entry>, RpcError> {
    if head.version < first.version || head.version - first.version > WALK {
        return Ok(Vec::new());
    }
    let mut chain = vec![head];
    while let Some(at) = chain.last().filter(|at| at.version > first.version) {
        let Some(parent) = at.parent_id.clone() else {
            break;
        };
        match store.entry(&parent).await.map_err(|e| failed(&e))? {
            Some(entry) => chain.push(entry),
            None => break,
        }
    }
    if chain.last().is_none_or(|at| at.id != first.id) {
        return Ok(Vec::new());
    }
    chain.reverse();
    Ok(chain)
}

/// What a message in a context finds at the session's head.
#[derive(Debug)]
pub(crate) enum Head {
    /// The head waits for input: the message continues this task.
    Waiting(Box<Lineage>),
    /// The head's state: the message starts a task of its own.
    Done(Box<LlmSession>),
}

/// The head of session `session` of `store`, and the task it waits for input on, if it does;
/// `None` if there is no such session.
///
/// # Errors
///
/// The store's, or a session the agent cannot read.
pub(crate) async fn head(store: &Scoped, session: &str) -> Result<Option<Head>, RpcError> {
    let Some(head) = store.load(session).await.map_err(|e| failed(&e))? else {
        return Ok(None);
    };
    let (latest, state) = decode(head)?;
    if !waits(&latest, &state) {
        return Ok(Some(Head::Done(Box::new(state))));
    }
    let mut task = latest.id.clone();
    let mut parent = latest.parent_id.clone();
    let mut before = 0;
    for _ in 0..WALK {
        let Some(id) = parent.take() else { break };
        let Some((entry, earlier)) = snapshot(store, &id).await? else {
            break;
        };
        if !waits(&entry, &earlier) {
            before = earlier.messages.len();
            break;
        }
        task = entry.id;
        parent = entry.parent_id;
    }
    Ok(Some(Head::Waiting(Box::new(Lineage {
        task,
        latest,
        state,
        before,
        head: true,
    }))))
}

/// Every task of session `session`'s lineage, from its head back to its first turn (the
/// snapshot that created the session is none): newest first, the first the head's. Empty if
/// there is no such session. At most [`WALK`] snapshots are read: a session longer than that
/// lists its latest tasks only.
///
/// Each turn's state is read (whether it waited for input says where a task begins), so
/// the cost grows with the session's turns.
///
/// # Errors
///
/// The store's, or a session the agent cannot read.
pub(crate) async fn tasks(store: &Scoped, session: &str) -> Result<Vec<Lineage>, RpcError> {
    let Some(head) = store.load(session).await.map_err(|e| failed(&e))? else {
        return Ok(Vec::new());
    };
    let (entry, state) = decode(head)?;
    let mut tasks = Vec::new();
    // The first turn found so far of the task walked, and that task's latest turn.
    let mut first = (entry.id.clone(), entry.parent_id.clone());
    let mut latest = (entry, state);
    let mut read = 0;
    loop {
        let parent = match first.1.take() {
            Some(id) if read < WALK => {
                read += 1;
                snapshot(store, &id).await?
            }
            _ => None,
        };
        match parent {
            // The parent waited for input: it is a turn of the same task.
            Some((entry, state)) if waits(&entry, &state) => first = (entry.id, entry.parent_id),
            parent => {
                let (entry, state) = latest;
                let before = match &parent {
                    Some((_, earlier)) => earlier.messages.len(),
                    // A pending first turn of a session has the state it started with.
                    None if entry.status == Stored::Pending && entry.parent_id.is_none() => {
                        state.messages.len()
                    }
                    None => 0,
                };
                let head = tasks.is_empty();
                tasks.push(Lineage {
                    task: first.0,
                    latest: entry,
                    state,
                    before,
                    head,
                });
                let Some((entry, state)) = parent else {
                    break;
                };
                // The snapshot that created the session is no turn.
                if entry.parent_id.is_none() && entry.status != Stored::Pending {
                    break;
                }
                first = (entry.id.clone(), entry.parent_id.clone());
                latest = (entry, state);
            }
        }
    }
    Ok(tasks)
}

/// Cancels task `lineage`, which waits for input: writes the marker of its cancel after its
/// latest turn. `false` if the session went on meanwhile (nothing was written).
///
/// # Errors
///
/// The store's.
pub(crate) async fn cancel_waiting(store: &Scoped, lineage: &Lineage) -> Result<bool, RpcError> {
    let lease = Lease::new(bidi_session::new_id(), MARKER_LEASE);
    let owner = lease.owner.clone();
    let append = Append::pending(Parent::Head(lineage.latest.id.clone()), lease);
    let marker = match store.append(&lineage.latest.session_id, append).await {
        Ok(marker) => marker,
        Err(StoreError::Conflict { .. } | StoreError::Running { .. }) => return Ok(false),
        Err(error) => return Err(failed(&error)),
    };
    let finish = Finish::new(owner, Stored::Aborted, Change::new());
    store
        .finish(&marker.id, finish)
        .await
        .map_err(|e| failed(&e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bidi_llm::{AssistantContent, AssistantMessage, Message, ToolCall, UserMessage};
    use bidi_session::MemoryStore;
    use serde_json::{Value, json};

    use super::*;

    fn store() -> Scoped {
        Scoped::new(Arc::new(MemoryStore::new()), "test")
    }

    fn said(text: &str) -> Value {
        json!(Message::User(UserMessage::new(text)))
    }

    fn answered(text: &str) -> Value {
        json!(Message::Assistant(AssistantMessage {
            content: vec![AssistantContent::Text { text: text.into() }],
            ..AssistantMessage::default()
        }))
    }

    /// A turn of session `s` after `parent` (a new session without one): it adds `text`
    /// and its answer, and waits for a call (`asks`) or not.
    async fn turn(store: &Scoped, parent: Option<&str>, text: &str, asks: bool) -> Entry {
        let calls = if asks {
            json!([ToolCall {
                id: format!("call-{text}"),
                name: "lookup".into(),
                arguments: json!({}),
            }])
        } else {
            json!([])
        };
        let status = if asks {
            "awaiting_tool_execution"
        } else {
            "completed"
        };
        let change = Change::new()
            .push("/messages", said(text))
            .push("/messages", answered(text))
            .set("/pendingToolCalls", calls)
            .set("/status", json!(status));
        let parent = match parent {
            Some(parent) => parent.to_owned(),
            None => {
                let created = Append::create(json!({"messages": []}));
                store.append("s", created).await.unwrap().id
            }
        };
        let lease = Lease::new("me", Duration::from_secs(60));
        let pending = Append::pending(Parent::Branch(parent), lease);
        let pending = store.append("s", pending).await.unwrap();
        let finish = Finish::new("me", Stored::Completed, change);
        store.finish(&pending.id, finish).await.unwrap()
    }

    #[tokio::test]
    async fn a_task_is_its_first_turn_and_the_turns_that_answered_it() {
        let store = store();
        let first = turn(&store, None, "a", false).await;
        // Task `t`: asks twice, then completes; then a new task.
        let t = turn(&store, Some(&first.id), "t1", true).await;
        let t2 = turn(&store, Some(&t.id), "t2", true).await;
        let t3 = turn(&store, Some(&t2.id), "t3", false).await;
        let next = turn(&store, Some(&t3.id), "n", false).await;

        let task = resolve(&store, &t.id).await.unwrap().unwrap();
        assert_eq!(task.task, t.id);
        assert_eq!(task.before, 2, "the first task's two messages");
        assert!(!task.head, "a task after it is the head");
        assert!(!task.waits());
        assert_eq!(task.latest.id, t3.id);
        assert_eq!(task.state.messages.len(), 8);

        let own = resolve(&store, &next.id).await.unwrap().unwrap();
        assert_eq!((own.latest.id.as_str(), own.before), (next.id.as_str(), 8));
        assert!(own.head);
        // A continuation is no task of its own.
        assert!(resolve(&store, &t2.id).await.unwrap().is_none());
        assert!(resolve(&store, "nope").await.unwrap().is_none());
        assert!(matches!(
            head(&store, "s").await.unwrap(),
            Some(Head::Done(_))
        ));
        assert!(head(&store, "nope").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_waiting_task_is_found_from_its_context_and_canceled_by_a_marker() {
        let store = store();
        let t = turn(&store, None, "t1", true).await;
        let t2 = turn(&store, Some(&t.id), "t2", true).await;
        let Some(Head::Waiting(waiting)) = head(&store, "s").await.unwrap() else {
            panic!("the head waits")
        };
        assert_eq!(
            (waiting.task.as_str(), waiting.latest.id.as_str()),
            (t.id.as_str(), t2.id.as_str())
        );
        assert!(waiting.waits() && waiting.head);
        let task = resolve(&store, &t.id).await.unwrap().unwrap();
        assert_eq!(task.latest.id, t2.id);
        assert!(task.waits() && task.head);

        assert!(cancel_waiting(&store, &task).await.unwrap());
        let canceled = resolve(&store, &t.id).await.unwrap().unwrap();
        assert_eq!(canceled.latest.status, Stored::Aborted);
        assert!(!canceled.waits());
        assert!(canceled.head);
        assert_eq!(
            canceled.state.pending_tool_calls.len(),
            1,
            "the calls stay for the next message to set aside"
        );
        let Some(Head::Done(state)) = head(&store, "s").await.unwrap() else {
            panic!("a canceled task waits for nothing")
        };
        assert_eq!(state.pending_tool_calls.len(), 1);
        // A stale cancel writes nothing.
        assert!(!cancel_waiting(&store, &task).await.unwrap());
    }

    #[tokio::test]
    async fn a_session_lists_its_tasks_newest_first_as_they_resolve() {
        let store = store();
        let first = turn(&store, None, "a", false).await;
        let t = turn(&store, Some(&first.id), "t1", true).await;
        let t2 = turn(&store, Some(&t.id), "t2", true).await;
        let t3 = turn(&store, Some(&t2.id), "t3", false).await;
        let next = turn(&store, Some(&t3.id), "n", true).await;

        let tasks = tasks(&store, "s").await.unwrap();
        let ids: Vec<&str> = tasks.iter().map(|task| task.task.as_str()).collect();
        // The snapshot that created the session is no task.
        assert_eq!(ids, [&*next.id, &*t.id, &*first.id]);
        for listed in &tasks {
            let resolved = resolve(&store, &listed.task).await.unwrap().unwrap();
            assert_eq!(listed.latest.id, resolved.latest.id, "{}", listed.task);
            assert_eq!(listed.before, resolved.before, "{}", listed.task);
            assert_eq!(listed.head, resolved.head, "{}", listed.task);
            assert_eq!(listed.state.messages, resolved.state.messages);
        }
        assert!(tasks[0].waits() && tasks[0].head);
        assert!(super::tasks(&store, "nope").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_task_on_a_branch_left_behind_is_its_first_turn() {
        let store = store();
        let root = turn(&store, None, "a", false).await;
        let t = turn(&store, Some(&root.id), "t", true).await;
        // Another client goes on from before the task.
        turn(&store, Some(&root.id), "b", false).await;
        let task = resolve(&store, &t.id).await.unwrap().unwrap();
        assert_eq!(task.latest.id, t.id);
        assert!(task.waits());
        assert!(!task.head);
    }
}
