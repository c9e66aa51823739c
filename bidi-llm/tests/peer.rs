//! An agent's executions for a peer, and the wire seam's pump under them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bidi_agent::AgentInit;
use bidi_agent::Refusal;
use bidi_core::{BidiAction, BoxError, Error, Inbound, Outbound, PeerGone};
use bidi_flow::idle::{Activity, Idle};
use bidi_flow::wire::{Closed, Detached, Ended, Sink, Wire, pump};
use bidi_llm::peer::{Execution, Output};
use bidi_llm::testing::{ChannelModel, Scripted, ScriptedModel};
use bidi_llm::{AgentEvent, Code, LlmAgent, ModelEvent, StopReason, TurnInput, Usage, UserMessage};
use tokio::sync::{mpsc, oneshot};

/// Each event's kind, a line each; a failure as `failed: {message}`.
struct Kinds;

impl Wire for Kinds {
    type Event = AgentEvent;
    type Output = Output;
    type Frames = Vec<u8>;

    fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
        out.extend_from_slice(event.kind().as_bytes());
        out.push(b'\n');
    }

    fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("failed: {message}\n").as_bytes());
    }
}

/// Numbers, a line each.
struct Numbers;

impl Wire for Numbers {
    type Event = u64;
    type Output = ();
    type Frames = Vec<u8>;

    fn event(&mut self, n: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{n}\n").as_bytes());
    }

    fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("failed: {message}\n").as_bytes());
    }
}

fn hello() -> TurnInput {
    TurnInput::User(UserMessage::new("hello"))
}

/// What a sink's receiver got, until the sink is dropped.
async fn written(mut frames: mpsc::Receiver<Vec<u8>>) -> String {
    let mut all = Vec::new();
    while let Some(batch) = frames.recv().await {
        all.extend(batch);
    }
    String::from_utf8(all).unwrap()
}

#[tokio::test]
async fn a_refusal_is_answered_before_a_byte_is_written() {
    let agent = LlmAgent::builder("helper", ScriptedModel::new([])).build();
    let conn = agent.connect(AgentInit::new().resume("nobody"));
    let (sink, frames) = mpsc::channel(1);
    let refusal = Execution::new(conn, hello())
        .start(Kinds, sink)
        .await
        .unwrap_err();
    assert_eq!(refusal.code(), Code::NotFound);
    assert_eq!(refusal.missing().unwrap().name, "nobody");
    assert_eq!(written(frames).await, "", "nothing is written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_another_execution_holds_is_refused_and_the_first_goes_on() {
    let (model, answer) = ChannelModel::new();
    let agent = LlmAgent::builder("helper", model).build();
    let conn = agent.connect(AgentInit::new().session_id("s"));
    let (sink, first) = mpsc::channel(1);
    let started = Execution::new(conn, hello())
        .start(Kinds, sink)
        .await
        .unwrap();
    assert_eq!(started.session_id, "s");
    assert!(started.snapshot_id.is_some());

    let conn = agent.connect(AgentInit::new().resume("s"));
    let (sink, second) = mpsc::channel(1);
    let refusal = Execution::new(conn, hello())
        .start(Kinds, sink)
        .await
        .unwrap_err();
    assert_eq!(refusal.code(), Code::SessionRunning);
    assert_eq!(written(second).await, "");

    answer.send(ModelEvent::TextStart).unwrap();
    answer.send(ModelEvent::TextDelta("Hi".into())).unwrap();
    answer.send(ModelEvent::TextEnd).unwrap();
    answer
        .send(ModelEvent::Done {
            stop_reason: StopReason::Stop,
            usage: Usage::default(),
        })
        .unwrap();
    let first = written(first).await;
    assert!(first.starts_with("session_start\n"), "{first}");
    assert!(first.contains("text_delta\n"), "{first}");
    assert!(first.ends_with("execute_complete\n"), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_nobody_reads_runs_to_its_end_when_detached() {
    let model = ScriptedModel::new([Scripted::new().text("Hi!"), Scripted::new().text("Again!")]);
    let agent = LlmAgent::builder("helper", model).build();
    let conn = agent.connect(AgentInit::new().session_id("d"));
    let started = Execution::new(conn, hello())
        .start(Kinds, Detached)
        .await
        .unwrap();
    assert_eq!(started.session_id, "d");
    // The next execution on the session starts once the detached one is over.
    let conn = loop {
        let mut conn = agent.connect(AgentInit::new().resume("d"));
        let result = bidi_llm::execute(&mut conn, hello())
            .await
            .unwrap()
            .result()
            .await
            .unwrap();
        match &result.error {
            Some(failure) if failure.code == Code::SessionRunning => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            error => {
                assert_eq!(*error, None);
                break conn;
            }
        }
    };
    conn.close();
    let state = conn.output().await.unwrap().state;
    assert_eq!(state.messages.len(), 4, "both turns are in the session");
}

/// An action that sends numbers until it is cancelled, and says why it was.
fn counter(cause: oneshot::Sender<Option<PeerGone>>) -> BidiAction<(), (), (), u64> {
    let cause = std::sync::Mutex::new(Some(cause));
    BidiAction::new(
        "counter",
        move |ctx, (), _: Inbound<()>, out: Outbound<u64>| {
            let cause = cause.lock().unwrap().take();
            async move {
                let mut n = 0;
                let why = loop {
                    tokio::select! {
                        why = ctx.cancelled() => break why,
                        sent = out.send(n) => match sent {
                            Ok(()) => n += 1,
                            Err(_) => break ctx.cancelled().await,
                        },
                    }
                };
                if let Some(cause) = cause {
                    let _ = cause.send(why.peer_gone());
                }
                Ok::<_, BoxError>(())
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_cancels_the_stream_as_gone() {
    let (cause, why) = oneshot::channel();
    let mut conn = counter(cause).connect(());
    let mut responses = conn.responses();
    let (sink, mut frames) = mpsc::channel(1);
    let reader = tokio::spawn(async move {
        let first = frames.recv().await.unwrap();
        drop(frames);
        first
    });
    let ended = pump(&mut responses, None, &mut Numbers, &sink, None).await;
    assert!(matches!(ended, Ended::Stopped), "{ended:?}");
    assert!(
        String::from_utf8(reader.await.unwrap())
            .unwrap()
            .starts_with("0\n")
    );
    assert_eq!(why.await.unwrap(), Some(PeerGone::Disconnected));
}

/// A peer that takes nothing: every write waits.
struct Stalled;

impl Sink<Vec<u8>> for Stalled {
    async fn send(&self, _: Vec<u8>) -> Result<(), Closed> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stalls_for_the_idle_timeout_cancels_the_stream_as_idle() {
    let (cause, why) = oneshot::channel();
    let mut conn = counter(cause).connect(());
    let mut responses = conn.responses();
    let timeout = Duration::from_secs(30);
    let mut idle = Idle::new(Activity::new(), timeout);
    let ended = pump(
        &mut responses,
        None,
        &mut Numbers,
        &Stalled,
        Some(&mut idle),
    )
    .await;
    assert!(matches!(ended, Ended::Stopped), "{ended:?}");
    assert_eq!(why.await.unwrap(), Some(PeerGone::Idle(timeout)));
}

#[tokio::test]
async fn a_failed_stream_ends_with_the_wires_failure() {
    let failing = BidiAction::new(
        "failing",
        |_, (), _: Inbound<()>, out: Outbound<u64>| async move {
            out.send(7).await?;
            Err::<(), BoxError>("the disk is full".into())
        },
    );
    let mut conn = failing.connect(());
    let mut responses = conn.responses();
    let (sink, frames) = mpsc::channel(4);
    let ended = pump(&mut responses, None, &mut Numbers, &sink, None).await;
    drop(sink);
    let Ended::Failed(error) = ended else {
        panic!("{ended:?}");
    };
    assert_eq!(Refusal::of(&error).code(), Code::ConnectionFailed);
    let written = written(frames).await;
    assert!(written.starts_with("7\nfailed: "), "{written}");
    assert!(written.contains("the disk is full"), "{written}");
    drop(responses);
    assert!(matches!(conn.output().await, Err(Error::Action(_))));
}
