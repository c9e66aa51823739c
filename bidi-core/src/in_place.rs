//! A future polled again in place when it wakes itself: for a task that drives an action
//! beside the connection's ends; and the action a connection keeps in its caller's task until
//! it has to run alone.

use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::FutureExt as _;
use futures_util::task::AtomicWaker;
use tokio::runtime::Handle;

use crate::ActionTask;

/// Polls in a row before the future yields to the runtime anyway.
const BUDGET: usize = 32;

/// Not being polled: a wake goes to the runtime.
const IDLE: u8 = 0;
/// Being polled: a wake is noted, and answered with another poll at once.
const POLLING: u8 = 1;
/// Being polled, and woken meanwhile.
const WOKEN: u8 = 2;

/// A future polled again at once, in the same poll, when it wakes itself.
///
/// A task that polls a connection's action (taken from a [`Driver`](crate::Driver)) beside
/// the connection's two ends wakes itself several times a turn, from inside its own poll: the
/// input handed over wakes the action, the action's chunk wakes the reader, and so on. A tokio
/// runtime answers a task that woke itself as it answers `yield_now`: to the back of the run
/// queue, and on a multi-thread runtime it unparks an idle worker to steal it, so each of
/// those wakes costs a system call and often a move to another core. `InPlace` polls the
/// future again at once instead, and hands the runtime only the wakes that come from
/// elsewhere (a socket, a timer, another task). After 32 polls in a row it yields to the
/// runtime anyway, so that a future that keeps waking itself cannot hold its worker.
///
/// Wrap the whole future that polls the action's task and the connection's ends, once.
///
/// ```
/// use bidi_core::{BidiAction, BoxError, ConnectOptions, Driver, InPlace, Inbound, Outbound};
/// use futures_util::StreamExt as _;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), BoxError> {
/// let echo = BidiAction::new("echo", |_ctx, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
///     while let Some(text) = inbound.recv().await {
///         out.send(text).await?;
///     }
///     Ok::<_, BoxError>(())
/// });
/// let driver = Driver::new();
/// let mut conn = echo.connect_with((), ConnectOptions::new().driver(&driver));
/// let task = driver.take().expect("the connection's task");
/// let serve = InPlace::new(async move {
///     let (_, echoed) = tokio::join!(task, async move {
///         conn.send("hi".into()).await?;
///         let echoed = conn.responses().next().await.transpose()?;
///         conn.close();
///         Ok::<_, BoxError>(echoed)
///     });
///     echoed
/// });
/// // The action, its input and its chunk: one task, woken only by what happens elsewhere.
/// assert_eq!(tokio::spawn(serve).await??, Some("hi".to_owned()));
/// # Ok(())
/// # }
/// ```
pub struct InPlace<F> {
    inner: Pin<Box<F>>,
    relay: Relay,
}

/// Polls a future again at once, in the same poll, when it wakes itself: the part [`InPlace`]
/// and an in-place connection ([`ConnectOptions::in_place`](crate::ConnectOptions::in_place))
/// share.
pub(crate) struct Relay {
    state: Arc<State>,
    waker: Waker,
}

struct State {
    polling: AtomicU8,
    task: AtomicWaker,
}

impl Wake for State {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.wake_in_poll() {
            self.task.wake();
        }
    }
}

impl State {
    /// Notes a wake for the poll under way, which polls again; `false` if none is.
    fn wake_in_poll(&self) -> bool {
        matches!(
            self.polling
                .compare_exchange(POLLING, WOKEN, Ordering::AcqRel, Ordering::Acquire),
            Ok(_) | Err(WOKEN)
        )
    }
}

impl Relay {
    pub(crate) fn new() -> Self {
        let state = Arc::new(State {
            polling: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&state));
        Self { state, waker }
    }

    /// Polls `f` with the relay's waker, again at once while it wakes itself from inside its
    /// poll, at most [`BUDGET`] times; the wakes from elsewhere reach `cx`'s task.
    pub(crate) fn poll<T>(
        &self,
        cx: &mut Context<'_>,
        mut f: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.state.task.register(cx.waker());
        let mut inner = Context::from_waker(&self.waker);
        for _ in 0..BUDGET {
            self.state.polling.store(POLLING, Ordering::Release);
            let polled = f(&mut inner);
            if polled.is_ready() {
                self.state.polling.store(IDLE, Ordering::Release);
                return polled;
            }
            let settled = self.state.polling.compare_exchange(
                POLLING,
                IDLE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if settled.is_ok() {
                return Poll::Pending;
            }
            // Woken while polled: again, here.
        }
        self.state.polling.store(IDLE, Ordering::Release);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<F: Future> InPlace<F> {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            relay: Relay::new(),
        }
    }
}

impl<F: Future<Output = ()> + Send + 'static> InPlace<F> {
    /// Runs `inner` in place here, in the caller's task, for as long as it goes without
    /// waiting on anything else; then, if it is not finished, in a task of its own.
    ///
    /// A request handler that starts an action and what reads it (the action's task taken
    /// from a [`Driver`](crate::Driver), joined) answers a quick action without spawning
    /// anything or waking another worker, and its answer is ready before the handler returns;
    /// a slow one goes on in its task. Polled here with a waker that does nothing, `inner` is
    /// polled again as the spawned task starts, which registers its wakes anew.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use bidi_core::InPlace;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let done = Arc::new(AtomicBool::new(false));
    /// let flag = Arc::clone(&done);
    /// InPlace::spawn(async move { flag.store(true, Ordering::SeqCst) });
    /// assert!(done.load(Ordering::SeqCst), "ran here, at once");
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// Panics outside a tokio runtime if `inner` waits.
    pub fn spawn(inner: F) {
        let mut inner = Self::new(inner);
        if Pin::new(&mut inner).now_or_never().is_none() {
            drop(tokio::spawn(inner));
        }
    }
}

impl InPlace<()> {
    /// Runs `work` joined with an action's `task` (taken from the [`Driver`](crate::Driver)
    /// its connection was opened with; `None` for an action in a task of its own), as
    /// [`spawn`](InPlace::spawn) runs a future: here as far as both go without waiting, then
    /// in one task, where the action is polled whenever that task wakes (its timers too).
    ///
    /// How a front end answers a request: the action and what reads it to the peer (a pump,
    /// the wait for an output) in the request's task, so that a quick answer spawns nothing
    /// and is ready before the handler returns.
    ///
    /// # Panics
    ///
    /// Panics outside a tokio runtime if the two wait.
    pub fn spawn_beside(task: Option<ActionTask>, work: impl Future<Output = ()> + Send + 'static) {
        // Combinators rather than an `async` block, which would keep `work` twice: as what it
        // captured, and inside the join it awaits.
        let action = futures_util::future::OptionFuture::from(task);
        InPlace::spawn(futures_util::future::join(action, work).map(drop));
    }
}

impl<F: Future> Future for InPlace<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.relay.poll(cx, |cx| this.inner.as_mut().poll(cx))
    }
}

/// `work`'s output, an action's `task` (taken from the [`Driver`](crate::Driver) its connection
/// was opened with) polled beside it whenever the caller's task wakes, whatever `work` waits
/// on; `task` is `None` once the action finished.
///
/// For a task that keeps a connection from one turn to the next and runs each turn itself:
/// while a turn runs, the action runs in the same task (no hand-off between tasks, no other
/// thread woken), and its timers and its own requests go on while the turn waits on
/// something else; between turns nothing polls it, and it waits for its next input where it
/// is. Wrap the caller's task in [`InPlace`] so that the two wake each other in place.
///
/// ```
/// use bidi_core::{BidiAction, BoxError, ConnectOptions, Driver, Inbound, Outbound, beside};
/// use futures_util::StreamExt as _;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), BoxError> {
/// let echo = BidiAction::new("echo", |_ctx, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
///     while let Some(text) = inbound.recv().await {
///         out.send(text).await?;
///         out.end_turn().await?;
///     }
///     Ok::<_, BoxError>(())
/// });
/// let driver = Driver::new();
/// let mut conn = echo.connect_with((), ConnectOptions::new().driver(&driver));
/// let mut task = driver.take();
/// for text in ["one", "two"] {
///     let turn = beside(&mut task, async {
///         conn.send(text.to_owned()).await?;
///         Ok::<_, BoxError>(conn.responses().map(|chunk| chunk.expect("a chunk")).collect::<Vec<_>>().await)
///     });
///     assert_eq!(turn.await?, [text]);
/// }
/// conn.close();
/// beside(&mut task, conn.done()).await;
/// assert!(task.is_none(), "the action finished");
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Dropping the future drops `work` only: the action stays in `task`, where it waits.
pub async fn beside<T>(task: &mut Option<ActionTask>, work: impl Future<Output = T>) -> T {
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(done);
        }
        poll_task(task, cx);
        Poll::Pending
    })
    .await
}

/// Polls an action's `task`, and lets it go once finished: what it ended (channels, the
/// output) woke whatever waits on it, which is polled again.
fn poll_task(task: &mut Option<ActionTask>, cx: &mut Context<'_>) {
    if let Some(running) = task.as_mut()
        && running.as_mut().poll(cx).is_ready()
    {
        *task = None;
    }
}

/// Set while the action was woken and not polled since.
const DUE: usize = 1;
/// Set while the action's task is being polled.
const POLLED: usize = 2;
/// Set once the action's task went to a task of its own (or finished): nothing here polls it.
const ALONE: usize = 4;
/// One of the caller's futures waiting on the connection; counted above the bits above.
const AWAITING: usize = 8;

/// The action's task of a connection that does not spawn it at once, polled beside whatever
/// the caller awaits on the connection (a send, a turn's chunks, the output).
///
/// Opened with the default options, the connection keeps the action here for as long as it
/// waits only on its caller, and hands it to a task of its own the first time it has to run
/// while no poll of the connection is under way:
/// - a wake while the action's task is polled, or while the caller polls the connection (an
///   input handed over, a chunk taken), is answered by that poll, which polls again;
/// - any other wake (a timer, a tool, a model's next bytes, a cancel) gives the action a task
///   of its own, as if it had been spawned at once. Strictly in place
///   ([`ConnectOptions::in_place`](crate::ConnectOptions::in_place)), it goes to the caller's
///   task instead, and waits there for the caller's next await.
///
/// A caller that reads each turn as it streams, of an action that waits only on it (a turn
/// loop over a scripted or buffered model, an echo), never hands the action over, and every
/// hand-off between the two is a call. Such a caller never waits, but each value it takes
/// spends its tokio task's budget: out of it, its read is pending until the task has yielded,
/// and the tasks beside it on its worker run. A second future of the caller's waiting on the
/// connection while another one waits (from another task, say) hands it over too: one relay
/// serves one waiting task.
pub(crate) struct Local {
    relay: Relay,
    action: Arc<Action>,
    /// The waker the action's task is polled with: [`Action`]'s.
    waker: Waker,
}

/// The action's task, and where its wakes go (see [`Local`]).
struct Action {
    /// `DUE | POLLED | ALONE`, plus `AWAITING` for each of the caller's waiting futures.
    flags: AtomicUsize,
    /// The relay's state: whether the caller's poll is under way, and the caller's task.
    relay: Arc<State>,
    /// Locked only for a poll, or to hand the task over.
    task: Mutex<Option<ActionTask>>,
    /// Where the task goes once it has to run alone; `None`: strictly in place.
    runtime: Option<Handle>,
}

impl Wake for Action {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let flags = self.flags.fetch_or(DUE, Ordering::AcqRel);
        if flags & (DUE | POLLED | ALONE) != 0 || self.relay.wake_in_poll() {
            // Noted already, answered by the poll under way, or not ours any more.
            return;
        }
        match self.runtime {
            Some(_) => self.go_alone(),
            None => self.relay.task.wake(),
        }
    }
}

impl Action {
    /// Hands the task, unless finished or handed over already, to a task of its own.
    ///
    /// # Panics
    ///
    /// Panics outside a tokio runtime if the connection is strictly in place.
    fn go_alone(&self) {
        if self.flags.fetch_or(ALONE, Ordering::AcqRel) & ALONE != 0 {
            return;
        }
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            drop(match &self.runtime {
                Some(runtime) => runtime.spawn(task),
                None => tokio::spawn(task),
            });
        }
    }

    /// After a poll: an action still due has nobody to poll it now.
    fn settle(&self) {
        if self.runtime.is_some() && self.flags.load(Ordering::Acquire) & (DUE | ALONE) == DUE {
            self.go_alone();
        }
    }
}

impl Local {
    /// Keeps `task`; `runtime` is where it goes once it has to run alone (`None`: strictly in
    /// place, polled only while the caller awaits the connection).
    pub(crate) fn new(task: ActionTask, runtime: Option<Handle>) -> Self {
        let relay = Relay::new();
        let action = Arc::new(Action {
            flags: AtomicUsize::new(0),
            relay: Arc::clone(&relay.state),
            task: Mutex::new(Some(task)),
            runtime,
        });
        let waker = Waker::from(Arc::clone(&action));
        Self {
            relay,
            action,
            waker,
        }
    }

    /// Runs the action here until it first waits, as a task spawned for it would start: an
    /// action that waits for its first input costs no task at all.
    pub(crate) fn start(&self) {
        for _ in 0..BUDGET {
            if !self.poll_action() {
                return;
            }
        }
        self.action.go_alone();
    }

    /// Polls `op`, and while it is pending the action's task, in place. `waiting` is the
    /// caller's future's own flag: set while it waits here, and handed to [`leave`](Self::leave)
    /// if the future is dropped meanwhile.
    pub(crate) fn poll_beside<T>(
        &self,
        cx: &mut Context<'_>,
        waiting: &mut bool,
        mut op: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        if !*waiting {
            *waiting = true;
            let flags = self.action.flags.fetch_add(AWAITING, Ordering::AcqRel);
            if flags >= AWAITING && flags & ALONE == 0 {
                // Another of the caller's futures waits already, maybe in another task: the
                // action goes alone, and that future is polled again to wait on its own.
                self.action.go_alone();
                self.relay.state.task.wake();
            }
        }
        if self.action.flags.load(Ordering::Acquire) & ALONE != 0 {
            let polled = op(cx);
            if polled.is_ready() {
                *waiting = false;
                self.leave();
            }
            return polled;
        }
        let polled = self.relay.poll(cx, |cx| {
            if let Poll::Ready(output) = op(cx) {
                return Poll::Ready(output);
            }
            if self.poll_action() {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        });
        if polled.is_ready() {
            // `op` may have woken the action (a chunk taken, an input handed over): it runs on
            // to its next wait now, as a task of its own would. (Strictly in place, it waits
            // for the caller's next await.)
            if self.action.runtime.is_some()
                && self.action.flags.load(Ordering::Acquire) & (DUE | ALONE) == DUE
            {
                for _ in 0..BUDGET {
                    if !self.poll_action() {
                        break;
                    }
                }
            }
            *waiting = false;
            self.leave();
        }
        // Still due: the relay ran out of budget.
        self.action.settle();
        polled
    }

    /// One of the caller's futures stopped waiting: it is ready, or dropped.
    pub(crate) fn leave(&self) {
        self.action.flags.fetch_sub(AWAITING, Ordering::AcqRel);
    }

    /// Polls the action's task once with the action's waker; whether it was woken meanwhile
    /// (it wants another poll).
    fn poll_action(&self) -> bool {
        let mut task = self
            .action
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if task.is_none() {
            return false;
        }
        let _ = self
            .action
            .flags
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |flags| {
                Some(flags & !DUE | POLLED)
            });
        poll_task(&mut task, &mut Context::from_waker(&self.waker));
        drop(task);
        self.action.flags.fetch_and(!POLLED, Ordering::AcqRel) & DUE != 0
    }

    /// `fut`'s output, the action's task polled beside it.
    pub(crate) fn beside<F: Future>(&self, fut: F) -> Beside<&Self, F> {
        Beside::new(self, fut)
    }

    /// Gives the action's task, unless finished, a task of its own.
    ///
    /// # Panics
    ///
    /// Panics outside a tokio runtime if the connection is strictly in place.
    pub(crate) fn spawn(&self) {
        self.action.go_alone();
    }
}

pin_project_lite::pin_project! {
    /// `fut`'s output, the action's task of `local` polled beside it; dropped while it waits,
    /// it leaves. A future of its own rather than an `async fn`'s, which would keep `fut`
    /// twice (as its argument and as the local it is pinned in).
    pub(crate) struct Beside<L: Deref<Target = Local>, F> {
        local: L,
        waiting: bool,
        #[pin]
        fut: F,
    }

    impl<L: Deref<Target = Local>, F> PinnedDrop for Beside<L, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.waiting {
                this.local.leave();
            }
        }
    }
}

impl<L: Deref<Target = Local>, F> Beside<L, F> {
    pub(crate) fn new(local: L, fut: F) -> Self {
        Self {
            local,
            waiting: false,
            fut,
        }
    }
}

impl<L: Deref<Target = Local>, F: Future> Future for Beside<L, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let mut fut = this.fut;
        this.local
            .poll_beside(cx, this.waiting, |cx| fut.as_mut().poll(cx))
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // Nobody drives it any more: a task of its own lets the action finish (its grace
        // period after a cancel included), as a spawned action would. Without a runtime it is
        // dropped, which reports the connection done.
        if self.action.runtime.is_some() || tokio::runtime::Handle::try_current().is_ok() {
            self.action.go_alone();
        }
    }
}

impl<F> std::fmt::Debug for InPlace<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InPlace").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts the wakes it gets.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Counter>, Waker) {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        (Arc::clone(&counter), Waker::from(counter))
    }

    #[test]
    fn a_future_that_wakes_itself_is_polled_again_in_the_same_poll() {
        let mut polls = 0;
        let mut fut = InPlace::new(std::future::poll_fn(|cx| {
            polls += 1;
            if polls < 5 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(polls)
        }));
        let (wakes, waker) = counter();
        let polled = Pin::new(&mut fut).poll(&mut Context::from_waker(&waker));
        assert_eq!(polled, Poll::Ready(5));
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "the runtime was not woken"
        );
    }

    #[test]
    fn a_wake_from_elsewhere_reaches_the_runtime() {
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut fut = InPlace::new(std::future::poll_fn({
            let inner_waker = Arc::clone(&inner_waker);
            move |cx| {
                *inner_waker.lock().unwrap() = Some(cx.waker().clone());
                Poll::<()>::Pending
            }
        }));
        let (wakes, waker) = counter();
        assert!(
            Pin::new(&mut fut)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        let later = inner_waker.lock().unwrap().take().unwrap();
        later.wake();
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_future_that_keeps_waking_itself_yields_after_the_budget() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut fut = InPlace::new(std::future::poll_fn({
            let polls = Arc::clone(&polls);
            move |cx| {
                polls.fetch_add(1, Ordering::SeqCst);
                cx.waker().wake_by_ref();
                Poll::<()>::Pending
            }
        }));
        let (wakes, waker) = counter();
        assert!(
            Pin::new(&mut fut)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(polls.load(Ordering::SeqCst), BUDGET);
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "woken to be polled again later"
        );
    }
}
