//! [`BidiAction`]: a named async function that serves connections.

use std::any::Any;
use std::fmt;
use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::{FutureExt as _, TryFutureExt as _};
use tokio_util::sync::CancellationToken;

use crate::connection::Connection;
use crate::context::ActionContext;
use crate::endpoint::{Inbound, Outbound};
use crate::error::{BoxError, Cause, Error};
use crate::extensions::Extensions;
use crate::in_place::Local;
use crate::link::{Core, Link};
use crate::observer::Observer;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

type ErasedFn<Init, In, Out, S> = dyn Fn(ActionContext, Init, Inbound<In>, Outbound<S>) -> BoxFuture<Result<Out, BoxError>>
    + Send
    + Sync;

/// An action's function: `Fn(ActionContext, Init, Inbound<In>, Sink) -> Fut`, shareable between
/// tasks. `Sink` is where it streams: an [`Outbound`] for a plain action, an agent's responder
/// for an agent. Implemented for every such `async fn` and closure; it is the one bound that
/// [`BidiAction::new`] and the layers above (flows, agents) put on the functions they take.
///
/// ```
/// use bidi_core::{ActionContext, ActionFn, ActionFuture, BoxError, Inbound, Outbound};
///
/// async fn count(_ctx: ActionContext, _init: (), mut inbound: Inbound<u8>, _out: Outbound<()>)
///     -> Result<usize, BoxError>
/// {
///     let mut n = 0;
///     while inbound.recv().await.is_some() {
///         n += 1;
///     }
///     Ok(n)
/// }
///
/// fn takes<F, Fut>(_f: F)
/// where
///     F: ActionFn<(), u8, Outbound<()>, Fut>,
///     Fut: ActionFuture<usize>,
/// {
/// }
/// takes(count);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an action function taking `{Init}`, `Inbound<{In}>` and `{Sink}`",
    label = "not an action function for these types",
    note = "an action function is `Fn(ActionContext, Init, Inbound<In>, Sink) -> impl Future<Output = Result<Out, E>>`, `Send + Sync + 'static`, with a `Send + 'static` future and `E: Into<BoxError>`"
)]
pub trait ActionFn<Init, In, Sink, Fut>:
    Fn(ActionContext, Init, Inbound<In>, Sink) -> Fut + Send + Sync + 'static
{
}

impl<F, Init, In, Sink, Fut> ActionFn<Init, In, Sink, Fut> for F where
    F: Fn(ActionContext, Init, Inbound<In>, Sink) -> Fut + Send + Sync + 'static
{
}

/// The future an [`ActionFn`] returns: `Send + 'static`, resolving to `Result<Out, E>` with an
/// error convertible into [`BoxError`]. Implemented for every such future.
#[diagnostic::on_unimplemented(
    message = "an action function's future must be `Send + 'static` and resolve to `Result<{Out}, E>` with `E: Into<BoxError>`",
    label = "not an action's future"
)]
pub trait ActionFuture<Out>: Future<Output = Result<Out, Self::Error>> + Send + 'static {
    /// The function's own error type.
    type Error: Into<BoxError>;
}

impl<Fut, Out, E> ActionFuture<Out> for Fut
where
    Fut: Future<Output = Result<Out, E>> + Send + 'static,
    E: Into<BoxError>,
{
    type Error = E;
}

/// A typed bidirectional streaming action: `Init` configures a connection, `In` is one inbound
/// message, `Stream` one streamed chunk, `Out` the final output.
///
/// Built from one async function; see the [crate docs](crate) for a whole example. Cheap to
/// clone: clones share the function.
pub struct BidiAction<Init, In, Out, Stream> {
    name: Arc<str>,
    /// The function, its future boxed: for [`call`](Self::call).
    f: Arc<ErasedFn<Init, In, Out, Stream>>,
    /// Spawns a connection's task with the function's future inline (no box per connection).
    start: Arc<ErasedStart<Init, In, Out, Stream>>,
}

type ErasedStart<Init, In, Out, S> =
    dyn Fn(Arc<Core<In, Out, S>>, Init, bool, Option<Driver>) + Send + Sync;

impl<Init, In, Out, Stream> BidiAction<Init, In, Out, Stream>
where
    Init: Send + 'static,
    In: Send + 'static,
    Out: Send + 'static,
    Stream: Send + 'static,
{
    /// An action named `name` running `f` once per connection.
    ///
    /// `f` gets the connection's [`ActionContext`], its `Init` value, the [`Inbound`] inputs and
    /// the [`Outbound`] chunk sink. Its error, of any type convertible into [`BoxError`], reaches
    /// the caller as [`Error::Action`] with the error as its source.
    pub fn new<F, Fut>(name: impl Into<Arc<str>>, f: F) -> Self
    where
        F: ActionFn<Init, In, Outbound<Stream>, Fut>,
        Fut: ActionFuture<Out>,
    {
        let f = Arc::new(f);
        let boxed = Arc::clone(&f);
        Self {
            name: name.into(),
            f: Arc::new(
                move |ctx: ActionContext,
                      init: Init,
                      inbound: Inbound<In>,
                      outbound: Outbound<Stream>| {
                    // A combinator, not an `async` block, which would hold the action's
                    // future (kilobytes, for an agent) twice: as captured, and as awaited.
                    let fut = boxed(ctx, init, inbound, outbound);
                    Box::pin(fut.map_err(Into::into)) as BoxFuture<_>
                },
            ),
            start: Arc::new(move |core, init, watch_parent, driver| {
                spawn(core, watch_parent, Arc::clone(&f), init, driver);
            }),
        }
    }

    /// Calls the action's function on ends that already exist, without spawning anything: how
    /// a layer wraps one action in another (`bidi-flow` traces an action this way).
    ///
    /// The future does not catch panics; the connection running the outer action does.
    pub fn call(
        &self,
        ctx: ActionContext,
        init: Init,
        inbound: Inbound<In>,
        outbound: Outbound<Stream>,
    ) -> impl Future<Output = Result<Out, BoxError>> + Send + 'static + use<Init, In, Out, Stream>
    {
        (self.f)(ctx, init, inbound, outbound)
    }

    /// Opens a connection with unbuffered channels, running the action with `init`, and
    /// returns the caller's [`Connection`].
    ///
    /// The action starts here, and runs in the caller's task for as long as it waits only on
    /// its caller: until its first wait, then whenever the caller awaits the connection (a
    /// send, a turn's chunks, the output), a hand-off between the two is a call. The first
    /// time it has to run while nobody polls the connection (a timer, a tool, its model's next
    /// bytes, a cancel), it gets a task of its own on this runtime, as if spawned at once, and
    /// keeps it. A connection with a buffer ([`ConnectOptions::output_buffer`],
    /// [`input_buffer`](ConnectOptions::input_buffer)), whose action is to run ahead of its
    /// caller, spawns it at once; so does a [`Driver`]'s task given to `tokio::spawn`.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect(&self, init: Init) -> Connection<In, Out, Stream> {
        self.connect_with(init, ConnectOptions::new())
    }

    /// Opens a connection with `options`: buffer sizes, a parent cancellation token, extensions.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime (unless the options have a [`Driver`] or ask
    /// for [`in_place`](ConnectOptions::in_place)).
    pub fn connect_with(&self, init: Init, options: ConnectOptions) -> Connection<In, Out, Stream> {
        let ConnectOptions {
            input_buffer,
            output_buffer,
            parent,
            extensions,
            observer,
            grace,
            driver,
            in_place,
        } = options;
        // Unless a driver of the caller's takes it, the task goes to one of the connection's
        // own, and the connection runs it in place: strictly, or until it has to run alone
        // (then on this runtime).
        let (driver, runtime) = match (in_place, driver) {
            (false, Some(driver)) => (Some(driver), None),
            (true, _) => (Some(Driver::new()), None),
            // A buffer asks for the action to run ahead of its caller: a task of its own.
            (false, None) if input_buffer > 0 || output_buffer > 0 => (None, None),
            (false, None) => (Some(Driver::new()), Some(tokio::runtime::Handle::current())),
        };
        let own = in_place || runtime.is_some();
        let watch_parent = parent.is_some();
        let token = parent.map(|parent| parent.child_token());
        let core = Arc::new(Core::<In, Out, Stream>::new(
            Arc::clone(&self.name),
            input_buffer,
            output_buffer,
            token,
            extensions,
            observer,
            grace,
        ));
        (self.start)(Arc::clone(&core), init, watch_parent, driver.clone());
        let local = own
            .then(|| driver.and_then(|driver| driver.take()))
            .flatten()
            .map(|task| Local::new(task, runtime.clone()));
        if let Some(local) = &local
            && runtime.is_some()
        {
            local.start();
        }
        Connection::new(core, local)
    }

    /// Runs the action once: `input` is its only input, then the input is closed; chunks are
    /// discarded; returns the output.
    ///
    /// # Errors
    ///
    /// The action's error, [`Error::Panicked`], or [`Error::Cancelled`] if a parent token
    /// cancelled it.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the action; its task ends.
    pub async fn run(&self, init: Init, input: In) -> Result<Out, Error> {
        self.connect(init).run(input).await
    }
}

impl<Init, In, Out, Stream> BidiAction<Init, In, Out, Stream> {
    /// The action's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<Init, In, Out, Stream> Clone for BidiAction<Init, In, Out, Stream> {
    fn clone(&self) -> Self {
        Self {
            name: Arc::clone(&self.name),
            f: Arc::clone(&self.f),
            start: Arc::clone(&self.start),
        }
    }
}

impl<Init, In, Out, Stream> fmt::Debug for BidiAction<Init, In, Out, Stream> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BidiAction")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// Spawns the task of the connection `core` (or hands it to `driver`): runs `f` on its ends
/// under the connection's supervision (the grace period after a cancel, the parent token),
/// catches a panic, and records the result.
fn spawn<Init, In, Out, S, F, Fut>(
    core: Arc<Core<In, Out, S>>,
    watch_parent: bool,
    f: Arc<F>,
    init: Init,
    driver: Option<Driver>,
) where
    Init: Send + 'static,
    In: Send + 'static,
    Out: Send + 'static,
    S: Send + 'static,
    F: ActionFn<Init, In, Outbound<S>, Fut>,
    Fut: ActionFuture<Out>,
{
    let ctx = ActionContext::new(core.clone());
    let inbound = Inbound::new(core.clone());
    let outbound = Outbound::new(core.clone());
    // The function is called in the task, under `catch_unwind` like the future it returns,
    // which goes to the heap at once: an action's future may be kilobytes (an agent's turn
    // loop), and a task's future is moved whole on its way through the runtime (into the
    // spawn, into the task's cell, and the stage written over it as it ends). Boxed, the task
    // is a few words and those moves are too.
    let run = AssertUnwindSafe(async move { Box::pin(f(ctx, init, inbound, outbound)).await })
        .catch_unwind();
    // Made here, not in the task: a task dropped before its first poll still reports done.
    let done = DoneOnDrop(core);
    let task = async move {
        let core = &done.0;
        let outcome = supervise(&**core, run, watch_parent).await;
        // `None`: cancelled, and the grace ran out; the future is already dropped.
        if let Some(result) = outcome {
            // An action that returned because it saw the parent's cancellation was cancelled.
            if watch_parent && core.control().parent_cancelled() {
                core.cancel(Cause::parent());
            }
            core.complete(match result {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(error)) => Err(Error::Action(Arc::from(error.into()))),
                Err(payload) => Err(Error::Panicked(panic_message(&*payload))),
            });
        }
        drop(done);
    };
    match driver {
        Some(driver) => driver.put(Box::pin(task)),
        None => drop(tokio::spawn(task)),
    }
}

/// A connection's action as a future, from a [`Driver`]: it runs the action to its end,
/// the grace period after a cancel included, then reports the connection done.
pub type ActionTask = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where a connection opened with [`ConnectOptions::driver`] leaves its action's task instead
/// of spawning it, for the caller to run in a task of its own: a transport that serves one
/// connection from one task (a WebSocket) then polls the action beside its reads and writes,
/// and a turn crosses no task boundary. Wrap that task's future in [`InPlace`](crate::InPlace):
/// the action and the connection's ends wake one another from inside its poll, and it polls
/// again at once rather than hand each of those wakes to the runtime.
///
/// The task must be polled for the action to run: until it is, inputs wait and nothing streams.
/// Dropping it drops the action wherever it waits and reports the connection done (as a
/// runtime shutting down would); to stop driving an action that should finish, spawn the task.
/// The connection's guarantees hold as for a spawned action: cancellation, the grace period
/// (once polled), panics caught, `done()` when the future is finished or dropped.
///
/// ```
/// use bidi_core::{BidiAction, BoxError, ConnectOptions, Driver, Inbound, Outbound};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let shout = BidiAction::new("shout", |_ctx, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
///     while let Some(text) = inbound.recv().await {
///         out.send(text.to_uppercase()).await?;
///     }
///     Ok::<_, BoxError>(())
/// });
/// let driver = Driver::new();
/// let conn = shout.connect_with((), ConnectOptions::new().driver(&driver));
/// let task = driver.take().expect("the connection's task");
/// // The action runs where `task` is polled: here, beside the caller's own work.
/// let (_, output) = tokio::join!(task, async move {
///     conn.send("hi".into()).await?;
///     conn.close();
///     Ok::<_, BoxError>(conn.output().await?)
/// });
/// output?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Driver {
    slot: Arc<std::sync::Mutex<Option<ActionTask>>>,
}

impl Driver {
    /// An empty driver.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The task of the connection last opened with this driver, once: `None` if none was
    /// opened (a connection refused before its action started) or it was taken already.
    #[must_use]
    pub fn take(&self) -> Option<ActionTask> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn put(&self, task: ActionTask) {
        *self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

/// Marks the action done (its future finished or dropped) when the task lets go of it, however
/// that happens: completion, the grace period running out, or the runtime shutting down.
struct DoneOnDrop<L: ?Sized + Link>(Arc<L>);

impl<L: ?Sized + Link> Drop for DoneOnDrop<L> {
    fn drop(&mut self) {
        let control = self.0.control();
        // The connection no longer holds on to the task.
        drop(control.task.take());
        control.set_done();
    }
}

/// Drives the action's future: to its end, or, once the connection is cancelled, for at most
/// the grace period; `None` when the grace ran out and the future was dropped.
///
/// The connection's cancel wakes this task (`Control::task`), so the grace starts even while the
/// action waits on something that knows nothing of the cancel.
async fn supervise<T>(
    core: &(impl Link + ?Sized),
    run: impl Future<Output = T>,
    watch_parent: bool,
) -> Option<T> {
    let control = core.control();
    // In an `Option` so that it can be dropped in place, before the caller reports it done.
    let mut run = std::pin::pin!(Some(run));
    let mut parent = watch_parent.then(|| Box::pin(control.token().clone().cancelled_owned()));
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let outcome = poll_fn(|cx| {
        // Each poll: a task run by a `Driver` may move to another task (spawned when its
        // transport stops driving it). The same waker again costs a comparison.
        control.task.register(cx.waker());
        if let Some(cancelled) = &mut parent
            && cancelled.as_mut().poll(cx).is_ready()
        {
            parent = None;
            core.cancel(Cause::parent());
        }
        if let Some(fut) = run.as_mut().as_pin_mut()
            && let Poll::Ready(result) = fut.poll(cx)
        {
            return Poll::Ready(Some(result));
        }
        if control.was_cancelled() {
            if control.grace.is_zero() {
                return Poll::Ready(None);
            }
            let sleep = grace.get_or_insert_with(|| Box::pin(tokio::time::sleep(control.grace)));
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
        }
        Poll::Pending
    })
    .await;
    run.set(None);
    outcome
}

/// How long a cancelled action may take to finish before its future is dropped, unless
/// [`ConnectOptions::grace`] says otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(1);

/// Options for [`BidiAction::connect_with`].
///
/// ```
/// use bidi_core::{BidiAction, BoxError, ConnectOptions, Inbound, Outbound};
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(Clone)]
/// struct User(&'static str);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let whoami = BidiAction::new("whoami", |ctx, (), _: Inbound<()>, _: Outbound<()>| async move {
///     let user = ctx.extensions().get::<User>().map_or("nobody", |user| user.0);
///     Ok::<_, BoxError>(user.to_owned())
/// });
/// let shutdown = CancellationToken::new();
/// let options = ConnectOptions::new()
///     .input_buffer(16)
///     .parent(shutdown.clone()) // shutdown.cancel() would cancel the connection
///     .extension(User("ada"));
/// assert_eq!(whoami.connect_with((), options).output().await?, "ada");
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct ConnectOptions {
    input_buffer: usize,
    output_buffer: usize,
    parent: Option<CancellationToken>,
    extensions: Extensions,
    observer: Option<Arc<dyn Observer>>,
    grace: Duration,
    driver: Option<Driver>,
    in_place: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            input_buffer: 0,
            output_buffer: 0,
            parent: None,
            extensions: Extensions::default(),
            observer: None,
            grace: DEFAULT_GRACE,
            driver: None,
            in_place: false,
        }
    }
}

impl ConnectOptions {
    /// Unbuffered both ways, no parent, no extensions, a grace of [`DEFAULT_GRACE`].
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a cancelled action may take to finish cooperatively (default
    /// [`DEFAULT_GRACE`], one second).
    ///
    /// Once the connection is cancelled, the action sees it: [`ActionContext::cancelled`]
    /// resolves, its pending and later sends fail and its inbound ends. Whatever it still does
    /// then (saving a session, say) may take up to `grace`; after that its future is dropped,
    /// wherever it is waiting. [`Connection::output`] and [`Connection::done`] return only once
    /// the future has finished or been dropped. `Duration::ZERO` drops it at the cancel.
    ///
    /// A grace period needs the runtime's time driver (`enable_time`, part of `enable_all` and
    /// of `#[tokio::main]`) when the action does not return as soon as it is cancelled.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How many inputs [`Connection::send`] may hand over before the action takes them.
    /// 0, the default, is a rendezvous.
    pub fn input_buffer(mut self, size: usize) -> Self {
        self.input_buffer = size;
        self
    }

    /// How many chunks [`Outbound::send`] may hand over before the consumer takes them.
    /// 0, the default, is a rendezvous.
    pub fn output_buffer(mut self, size: usize) -> Self {
        self.output_buffer = size;
        self
    }

    /// Cancels the connection when `token` is cancelled, with a cause saying so.
    pub fn parent(mut self, token: CancellationToken) -> Self {
        self.parent = Some(token);
        self
    }

    /// Attaches `value` for the action to read through [`ActionContext::extensions`].
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// Watches the connection's traffic (inputs taken, chunks delivered, turns ended); how
    /// `bidi-flow` traces turns.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Replaces all extensions.
    pub fn extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// Leaves the action's task in `driver` instead of spawning it, for the caller to poll
    /// (see [`Driver`]).
    pub fn driver(mut self, driver: &Driver) -> Self {
        self.driver = Some(driver.clone());
        self
    }

    /// Runs the action only in the caller's task, never in a task of its own while the
    /// connection is whole: the connection polls it whenever the caller awaits the connection
    /// ([`send`](Connection::send), a [`responses`](Connection::responses) stream,
    /// [`output`](Connection::output), [`done`](Connection::done)), and nowhere else. By
    /// default a connection does the same until its action has to run while nobody awaits
    /// it, and then spawns it ([`BidiAction::connect`]); strictly in place, it waits for the
    /// caller instead, which needs no runtime to open.
    ///
    /// The action runs only while the connection is awaited: between turns it waits where it
    /// is, as it would for an unbuffered hand-off, and so do its timers (an agent renews the
    /// lease on its session only while it runs: read its events as they come). Splitting the
    /// connection ([`into_split`](Connection::into_split)), or dropping it before its action
    /// finished, gives the action a task of its own, so that it can finish (its grace period
    /// after the cancel included); outside a tokio runtime a dropped action is dropped where
    /// it waits.
    ///
    /// Drive an in-place connection from one task. Takes precedence over
    /// [`driver`](Self::driver).
    ///
    /// ```
    /// use bidi_core::{BidiAction, BoxError, ConnectOptions, Inbound, Outbound};
    /// use futures_util::StreamExt as _;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let count = BidiAction::new("count", |_ctx, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
    ///     while let Some(n) = inbound.recv().await {
    ///         out.send_batch((1..=n).collect()).await?;
    ///         out.end_turn().await?;
    ///     }
    ///     Ok::<_, BoxError>(())
    /// });
    /// let mut conn = count.connect_with((), ConnectOptions::new().in_place());
    /// conn.send(3).await?;
    /// let turn: Vec<u32> = conn.responses().map(|n| n.expect("chunk")).collect().await;
    /// assert_eq!(turn, [1, 2, 3]);
    /// conn.close();
    /// conn.output().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn in_place(mut self) -> Self {
        self.in_place = true;
        self
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("input_buffer", &self.input_buffer)
            .field("output_buffer", &self.output_buffer)
            .field("parent", &self.parent)
            .field("extensions", &self.extensions)
            .field("observer", &self.observer.is_some())
            .field("grace", &self.grace)
            .field("driver", &self.driver.is_some())
            .field("in_place", &self.in_place)
            .finish()
    }
}
