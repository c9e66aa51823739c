//! [`BidiFlow`]: a [`BidiAction`] with OpenTelemetry spans, a description and metadata.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bidi_core::{
    ActionContext, ActionFn, ActionFuture, BidiAction, ConnectOptions, Connection, Error, Inbound,
    Outbound,
};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::registry::RegistryError;
use crate::text::cap;
use crate::trace::{ConnectionTrace, FlowTracer, traced};

/// What kind of action a flow registers as: the `{type}` of its `/{type}/{name}` key and the
/// `type` of its [`ActionDesc`](crate::ActionDesc).
///
/// Kinds are open: besides [`BIDI_FLOW`](Self::BIDI_FLOW) and [`AGENT`](Self::AGENT), a
/// protocol crate registers its own (`bidi-ndjson`'s subprocess agents are `/ndjson/..`). A
/// kind is made of lowercase ASCII letters, digits and `-`, and is not empty.
///
/// ```
/// use bidi_core::{BoxError, Inbound, Outbound};
/// use bidi_flow::{ActionType, BidiFlow, Registry};
///
/// // Checked at compile time when used in a `const`.
/// const SUBPROCESS: ActionType = ActionType::from_static("subprocess");
///
/// let registry = Registry::new();
/// let flow = BidiFlow::new("claude", |_ctx, (), _: Inbound<String>, _: Outbound<String>| async {
///     Ok::<_, BoxError>(())
/// });
/// registry.register(flow.with_action_type(SUBPROCESS))?;
/// assert_eq!(registry.actions()[0].key, "/subprocess/claude");
///
/// // Checked at run time, for kinds that come from configuration.
/// assert!(ActionType::new("ndjson").is_ok());
/// assert!(ActionType::new("NDJSON/x").is_err());
/// # Ok::<_, bidi_flow::RegistryError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionType(Cow<'static, str>);

impl ActionType {
    /// A plain bidirectional flow: `/bidi-flow/{name}`, the default.
    pub const BIDI_FLOW: Self = Self::from_static("bidi-flow");
    /// A turn-aware agent over a session: `/agent/{name}`.
    pub const AGENT: Self = Self::from_static("agent");

    /// The kind `kind`.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidActionType`] if `kind` is empty or has anything but lowercase
    /// ASCII letters, digits and `-`.
    pub fn new(kind: impl Into<Cow<'static, str>>) -> Result<Self, RegistryError> {
        let kind = kind.into();
        if is_valid(kind.as_bytes()) {
            Ok(Self(kind))
        } else {
            Err(RegistryError::InvalidActionType {
                kind: cap(&kind).into_owned(),
            })
        }
    }

    /// The kind `kind`, checked at compile time when used in a `const`.
    ///
    /// # Panics
    ///
    /// Panics if `kind` is empty or has anything but lowercase ASCII letters, digits and `-`.
    #[must_use]
    pub const fn from_static(kind: &'static str) -> Self {
        assert!(
            is_valid(kind.as_bytes()),
            "an action type is lowercase ASCII letters, digits and `-`, and not empty"
        );
        Self(Cow::Borrowed(kind))
    }

    /// The kind as it appears in keys and descriptors.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `kind` is a valid action type: non-empty, `[a-z0-9-]` only.
const fn is_valid(kind: &[u8]) -> bool {
    if kind.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < kind.len() {
        let b = kind[i];
        if !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return false;
        }
        i += 1;
    }
    true
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AsRef<str> for ActionType {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for ActionType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[derive(Clone)]
struct Info {
    action_type: ActionType,
    description: Option<String>,
    metadata: Map<String, Value>,
    tracer: FlowTracer,
}

impl Default for Info {
    fn default() -> Self {
        Self {
            action_type: ActionType::BIDI_FLOW,
            description: None,
            metadata: Map::new(),
            tracer: FlowTracer::default(),
        }
    }
}

/// A traced bidirectional flow: the same connect, run and [`Connection`] API as [`BidiAction`],
/// plus one OpenTelemetry span per connection (open for its lifetime), a child span per turn, a
/// description and metadata for the [`Registry`](crate::Registry).
///
/// Spans come from the global tracer provider unless [`with_tracer`](Self::with_tracer) sets one. With no
/// provider installed, a connection is exactly a bare `BidiAction` connection.
///
/// Cheap to clone.
pub struct BidiFlow<Init, In, Out, Stream> {
    plain: BidiAction<Init, In, Out, Stream>,
    traced: BidiAction<Init, In, Out, Stream>,
    info: Arc<Info>,
}

impl<Init, In, Out, Stream> BidiFlow<Init, In, Out, Stream>
where
    Init: Serialize + Send + 'static,
    In: Send + 'static,
    Out: Serialize + Send + 'static,
    Stream: Send + 'static,
{
    /// A flow named `name` running `f` once per connection; `f` is as for [`BidiAction::new`].
    pub fn new<F, Fut>(name: impl Into<Arc<str>>, f: F) -> Self
    where
        F: ActionFn<Init, In, Outbound<Stream>, Fut>,
        Fut: ActionFuture<Out>,
    {
        Self::from_action(BidiAction::new(name, f))
    }

    /// Traces an existing action.
    #[must_use]
    pub fn from_action(action: BidiAction<Init, In, Out, Stream>) -> Self {
        let inner = action.clone();
        let traced = BidiAction::new(
            action.name().to_owned(),
            move |ctx: ActionContext,
                  init: Init,
                  inbound: Inbound<In>,
                  outbound: Outbound<Stream>| {
                let trace = ctx.extensions().get::<Arc<ConnectionTrace>>().cloned();
                let fut = inner.call(ctx.clone(), init, inbound, outbound);
                async move {
                    match trace {
                        Some(trace) => traced(trace, ctx, fut).await,
                        None => fut.await,
                    }
                }
            },
        );
        Self {
            plain: action,
            traced,
            info: Arc::new(Info::default()),
        }
    }

    /// Sets the description shown in the registry.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.info).description = Some(description.into());
        self
    }

    /// Adds a metadata entry shown in the registry (`bidi: true` is always there).
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        Arc::make_mut(&mut self.info)
            .metadata
            .insert(key.into(), value.into());
        self
    }

    /// Sets what the flow registers as (default [`ActionType::BIDI_FLOW`]).
    #[must_use]
    pub fn with_action_type(mut self, action_type: ActionType) -> Self {
        Arc::make_mut(&mut self.info).action_type = action_type;
        self
    }

    /// Traces with `tracer` instead of the global provider's.
    ///
    /// ```
    /// # use bidi_flow::BidiFlow;
    /// # use bidi_core::{BoxError, Inbound, Outbound};
    /// use opentelemetry::global::BoxedTracer;
    /// use opentelemetry::trace::noop::NoopTracer;
    ///
    /// let flow = BidiFlow::new("quiet", |_ctx, (), _: Inbound<()>, _: Outbound<()>| async {
    ///     Ok::<_, BoxError>(())
    /// })
    /// .with_tracer(BoxedTracer::new(Box::new(NoopTracer::new())));
    /// assert_eq!(flow.name(), "quiet");
    /// ```
    #[must_use]
    pub fn with_tracer(mut self, tracer: BoxedTracer) -> Self {
        Arc::make_mut(&mut self.info).tracer = FlowTracer::new(tracer);
        self
    }

    /// The flow's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.plain.name()
    }

    /// What the flow registers as.
    #[must_use]
    pub fn action_type(&self) -> &ActionType {
        &self.info.action_type
    }

    /// The description, if any.
    #[must_use]
    pub fn description(&self) -> Option<&str> {
        self.info.description.as_deref()
    }

    /// The metadata given with [`with_metadata`](Self::with_metadata).
    #[must_use]
    pub fn metadata(&self) -> &Map<String, Value> {
        &self.info.metadata
    }

    /// The untraced action underneath.
    #[must_use]
    pub fn action(&self) -> &BidiAction<Init, In, Out, Stream> {
        &self.plain
    }

    /// As [`BidiAction::connect`], with the connection span's parent being the caller's current
    /// OpenTelemetry context.
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect(&self, init: Init) -> Connection<In, Out, Stream> {
        self.connect_with(init, ConnectOptions::new())
    }

    /// As [`BidiAction::connect_with`].
    ///
    /// # Panics
    ///
    /// Panics if called outside a tokio runtime.
    pub fn connect_with(&self, init: Init, options: ConnectOptions) -> Connection<In, Out, Stream> {
        self.connect_traced(init, options).0
    }

    /// As [`connect_with`](Self::connect_with), with the context of the connection's span
    /// (`None` when its tracer records nothing).
    pub(crate) fn connect_traced(
        &self,
        init: Init,
        options: ConnectOptions,
    ) -> (Connection<In, Out, Stream>, Option<SpanContext>) {
        let Some(trace) = ConnectionTrace::start(&self.info.tracer, self.name(), &init) else {
            return (self.plain.connect_with(init, options), None);
        };
        let options = options
            .observer(trace.clone())
            .extension(Arc::clone(&trace));
        let conn = self.traced.connect_with(init, options);
        trace.set_attribute(KeyValue::new("bidi.connection_id", conn.id().to_string()));
        let span = trace.context().span().span_context().clone();
        (conn, Some(span))
    }

    /// As [`BidiAction::run`], traced.
    ///
    /// # Errors
    ///
    /// As [`BidiAction::run`].
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

impl<Init, In, Out, Stream> Clone for BidiFlow<Init, In, Out, Stream> {
    fn clone(&self) -> Self {
        Self {
            plain: self.plain.clone(),
            traced: self.traced.clone(),
            info: Arc::clone(&self.info),
        }
    }
}

impl<Init, In, Out, Stream> fmt::Debug for BidiFlow<Init, In, Out, Stream> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BidiFlow")
            .field("name", &self.plain.name())
            .field("type", &self.info.action_type)
            .field("description", &self.info.description)
            .field("tracer", &self.info.tracer)
            .finish_non_exhaustive()
    }
}
