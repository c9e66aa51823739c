//! A detached execution whose process dies is taken over by another process on the same store
//! and run to its end; an agent whose turns must not run twice lets it expire instead, as an
//! attached execution does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bidi_agent::AgentInit;
use bidi_core::ConnectOptions;
use bidi_llm::takeover::Resumable;
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{
    AgentEvent, LlmAgent, LlmAgentBuilder, LlmSession, Message, ModelEvent, Status, execute,
};
use bidi_session::{MemoryStore, SessionStore, Status as Snapshot};
use futures_util::StreamExt;
use tokio::sync::mpsc::UnboundedSender;

use crate::support::{saved, user};

/// The lease of the agents here: a silent owner's turn goes stale after 6 s, and lapses at 9 s.
const TERM: Duration = Duration::from_secs(9);

/// Starts an execution of `agent` on a new session `id` on a runtime of its own, waits until
/// its model is called, and drops the runtime there: its tasks stop mid-turn and write
/// nothing more, as a process killed would. `resumable`: the connection is detached.
fn dies_mid_turn(agent: LlmAgent, id: &str, resumable: bool) {
    let id = id.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let conn = runtime.block_on(async {
            let options = if resumable {
                ConnectOptions::new().extension(Resumable)
            } else {
                ConnectOptions::new()
            };
            let init = AgentInit::new().session_id(id).init(LlmSession::default());
            let mut conn = agent.connect_with(init, options);
            let mut run = execute(&mut conn, user("what now?")).await.unwrap();
            // The model's answer never comes: the turn waits in its model call.
            while let Some(event) = run.next().await {
                if matches!(event.unwrap(), AgentEvent::MessageStart { .. }) {
                    break;
                }
            }
            drop(run);
            conn
        });
        drop(runtime);
        drop(conn);
    })
    .join()
    .unwrap();
}

/// Two agents of one name on one store, as two processes are: the first's model never
/// answers (while the sender it answers from, also answered, lives).
fn agents(
    store: &Arc<MemoryStore>,
    at_most_once: bool,
) -> (LlmAgent, LlmAgent, UnboundedSender<ModelEvent>) {
    let (silent, never) = ChannelModel::new();
    let build = |builder: LlmAgentBuilder| {
        let builder = builder.store(Arc::clone(store)).lease(TERM);
        if at_most_once {
            builder.at_most_once()
        } else {
            builder
        }
        .build()
    };
    let first = build(LlmAgent::builder("helper", silent));
    let answer = ScriptedModel::new([Scripted::new().text("Let us go on.")]);
    (first, build(LlmAgent::builder("helper", answer)), never)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_turn_whose_process_died_is_taken_over_and_run_to_its_end() {
    let store = Arc::new(MemoryStore::new());
    let (first, second, _never) = agents(&store, false);
    dies_mid_turn(first, "s", true);
    let (state, head) = saved(&*store, "s").await;
    assert_eq!(head.status, Snapshot::Pending);
    assert_eq!(state.messages.len(), 1, "its question shows while it runs");
    let pending = head.id;

    // The second process finds the turn once its owner has been silent long enough (two
    // thirds of the term; the deadline is generous for a loaded machine).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while second.take_over().await.unwrap() == 0 {
        let (_, head) = saved(&*store, "s").await;
        assert_eq!(
            head.status,
            Snapshot::Pending,
            "running while nobody took it"
        );
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // It runs to its end under the same snapshot, from the state before it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let (state, head) = loop {
        let (state, head) = saved(&*store, "s").await;
        if head.status != Snapshot::Pending {
            break (state, head);
        }
        assert!(tokio::time::Instant::now() < deadline, "never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((head.id, head.status), (pending, Snapshot::Completed));
    assert_eq!(state.status, Status::Completed);
    assert_eq!(texts(&state), ["what now?", "Let us go on."]);
    assert_eq!(second.take_over().await.unwrap(), 0, "taken over once");
}

/// An agent at most once, or an attached execution: the turn is never taken over; it
/// expires when its lease lapses, and the session goes on from the state before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_not_to_run_twice_expires_instead() {
    let store = Arc::new(MemoryStore::new());
    let (once, once_after, _never) = agents(&store, true);
    dies_mid_turn(once, "once", true);
    let (first, second, _silent) = agents(&store, false);
    dies_mid_turn(first, "attached", false);

    let deadline = tokio::time::Instant::now() + TERM * 4;
    for id in ["once", "attached"] {
        loop {
            assert_eq!(once_after.take_over().await.unwrap(), 0);
            assert_eq!(second.take_over().await.unwrap(), 0);
            let head = store.load(id).await.unwrap().unwrap().entry;
            if head.status == Snapshot::Expired {
                break;
            }
            assert_eq!(head.status, Snapshot::Pending);
            assert!(tokio::time::Instant::now() < deadline, "never expired");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The session goes on from the state before the turn.
    let init = AgentInit::new().resume("once");
    let mut conn = once_after.connect(init);
    let (_, result) = crate::support::run(&mut conn, user("again")).await;
    assert_eq!(result.status, Status::Completed);
    let (state, _) = saved(&*store, "once").await;
    assert_eq!(texts(&state), ["again", "Let us go on."]);
}

/// The text of each message of `state`.
fn texts(state: &LlmSession) -> Vec<String> {
    let text = |message: &Message| match message {
        Message::Assistant(answer) => answer.text(),
        other => {
            let json = serde_json::to_value(other).unwrap();
            json["content"].as_str().unwrap_or_default().to_owned()
        }
    };
    state.messages.iter().map(text).collect()
}

/// A model whose process stalls: its answer comes once `wake` says so, its thread blocked
/// until then (no task of its runtime runs meanwhile, its lease renewals neither).
struct Stalling {
    wake: Arc<Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl bidi_llm::Model for Stalling {
    fn name(&self) -> &str {
        "stalling"
    }

    fn stream(
        &self,
        _request: bidi_llm::ModelRequest,
    ) -> futures_util::stream::BoxStream<'static, ModelEvent> {
        let wake = Arc::clone(&self.wake);
        let events = Scripted::new().text("Too late.").events();
        futures_util::stream::once(async move {
            let _ = wake.lock().unwrap().recv();
        })
        .flat_map(move |()| futures_util::stream::iter(events.clone()))
        .boxed()
    }
}

/// A process that stalls (its renewals stop, it does not die) is taken over; when it wakes it
/// is refused, and what it answered is not written: the session has the second run's answer
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_owner_is_refused_once_its_turn_was_taken_over() {
    let store = Arc::new(MemoryStore::new());
    let (wake, woken) = std::sync::mpsc::channel();
    let stalling = Stalling {
        wake: Arc::new(Mutex::new(woken)),
    };
    let build = |builder: LlmAgentBuilder| builder.store(Arc::clone(&store)).lease(TERM).build();
    let stalling = build(LlmAgent::builder("helper", stalling));
    let answer = ScriptedModel::new([Scripted::new().text("Let us go on.")]);
    let second = build(LlmAgent::builder("helper", answer));
    // The first owner runs on a runtime of its own, which the stall blocks whole.
    let first = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let init = AgentInit::new().session_id("s").init(LlmSession::default());
            let options = ConnectOptions::new().extension(Resumable);
            let mut conn = stalling.connect_with(init, options);
            let run = execute(&mut conn, user("what now?")).await.unwrap();
            run.result().await.unwrap()
        })
    });
    // Generous: a turn is stale only after two thirds of its term, and a loaded machine may
    // start the first owner late.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let stalled_owner = loop {
        let head = store
            .load("s")
            .await
            .unwrap()
            .map(|snapshot| snapshot.entry);
        if let Some(lease) = head.and_then(|head| head.lease) {
            break lease.owner;
        }
        assert!(tokio::time::Instant::now() < deadline, "never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    while second.take_over().await.unwrap() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `take_over` starts the turn again in a task of its own, which takes the lease: the
    // stalled owner wakes once it has (else it would finish first, still holding it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (_, head) = saved(&*store, "s").await;
        if head.lease.is_none_or(|lease| lease.owner != stalled_owner) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never changed hands"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wake.send(()).unwrap();
    let stalled = tokio::task::spawn_blocking(move || first.join().unwrap())
        .await
        .unwrap();
    assert_eq!(stalled.status, Status::Error, "{stalled:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (state, head) = saved(&*store, "s").await;
        if head.status != Snapshot::Pending {
            assert_eq!(head.status, Snapshot::Completed);
            assert_eq!(texts(&state), ["what now?", "Let us go on."]);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
