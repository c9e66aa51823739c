//! [`Observer`]: a window on a connection's traffic, for tracing and metrics.

/// Watches one connection's traffic; set with
/// [`ConnectOptions::observer`](crate::ConnectOptions::observer).
///
/// The calls happen on the action's side, right after the event, in the task that caused it
/// (the action's task, or a task holding a clone of its [`Outbound`](crate::Outbound)); keep them
/// cheap and never block. Every method does nothing by default.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use bidi_core::{BidiAction, BoxError, ConnectOptions, Inbound, Observer, Outbound};
///
/// #[derive(Default)]
/// struct Turns(AtomicUsize);
/// impl Observer for Turns {
///     fn on_end_turn(&self) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let action = BidiAction::new("ping", |_ctx, (), _: Inbound<()>, out: Outbound<()>| async move {
///     out.end_turn().await?;
///     Ok::<_, BoxError>(())
/// });
/// let turns = Arc::new(Turns::default());
/// action.connect_with((), ConnectOptions::new().observer(turns.clone())).output().await?;
/// assert_eq!(turns.0.load(Ordering::Relaxed), 1);
/// # Ok(())
/// # }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// The action took an input.
    fn on_input(&self) {}

    /// `count` chunks were delivered (with the default unbuffered output: taken by the
    /// consumer): one per [`Outbound::send`](crate::Outbound::send), a whole batch per
    /// [`Outbound::send_batch`](crate::Outbound::send_batch).
    fn on_chunks(&self, count: usize) {
        let _ = count;
    }

    /// The action ended a turn.
    fn on_end_turn(&self) {}
}
