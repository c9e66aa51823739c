//! Helpers shared by the integration tests.

use std::time::Duration;

use bidi_core::{ActionContext, BidiAction, BoxError, Inbound, Outbound};

/// Runs each test body on a two-worker multi-thread runtime and on a current-thread runtime.
macro_rules! both_runtimes {
    ($($(#[$meta:meta])* async fn $name:ident() $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn multi_thread() $body

            #[tokio::test(flavor = "current_thread")]
            async fn current_thread() $body
        }
    )*};
}

/// Waits until the runtime has no task left but the test itself, and fails if that takes
/// unreasonably long (this bounds a wait; it asserts nothing about speed).
pub(crate) async fn assert_no_tasks_left() {
    let metrics = tokio::runtime::Handle::current().metrics();
    for _ in 0..10_000 {
        if metrics.num_alive_tasks() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("{} task(s) still alive", metrics.num_alive_tasks());
}

/// Echoes each input as one chunk and ends the turn; an empty input is an empty turn.
/// Returns the number of turns.
pub(crate) fn echo() -> BidiAction<(), String, usize, String> {
    BidiAction::new(
        "echo",
        |_ctx: ActionContext, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
            let mut turns = 0;
            while let Some(msg) = inbound.recv().await {
                if !msg.is_empty() {
                    out.send(format!("echo: {msg}")).await?;
                }
                out.end_turn().await?;
                turns += 1;
            }
            Ok::<_, BoxError>(turns)
        },
    )
}

/// The error an action fails with in the tests.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Boom(pub(crate) u32);

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "boom {}", self.0)
    }
}

impl std::error::Error for Boom {}
