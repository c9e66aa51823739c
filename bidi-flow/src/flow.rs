//! [`BidiFlow`]: a [`BidiAction`] with OpenTelemetry spans, a description and metadata.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use bidi_core::{
    ActionContext, BidiAction, BoxError, ConnectOptions, Connection, Error, Inbound, Outbound,
};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedTracer;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::trace::{ConnectionTrace, FlowTracer, traced};

/// What kind of action a flow registers as: the `{type}` of its `/{type}/{name}` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ActionType {
    /// A plain bidirectional flow: `/bidi-flow/{name}`.
    BidiFlow,
    /// A turn-aware agent over a session: `/agent/{name}`.
    Agent,
}

impl ActionType {
    /// The type as it appears in keys and descriptors.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BidiFlow => "bidi-flow",
            Self::Agent => "agent",
        }
    }
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Default)]
struct Info {
    action_type: Option<ActionType>,
    description: Option<String>,
    metadata: Map<String, Value>,
    tracer: FlowTracer,
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
    pub fn new<F, Fut, E>(name: impl Into<Arc<str>>, f: F) -> Self
    where
        F: Fn(ActionContext, Init, Inbound<In>, Outbound<Stream>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Out, E>> + Send + 'static,
        E: Into<BoxError>,
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

    /// Sets what the flow registers as (default [`ActionType::BidiFlow`]).
    #[must_use]
    pub fn with_action_type(mut self, action_type: ActionType) -> Self {
        Arc::make_mut(&mut self.info).action_type = Some(action_type);
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
    pub fn action_type(&self) -> ActionType {
        self.info.action_type.unwrap_or(ActionType::BidiFlow)
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
        let Some(trace) = ConnectionTrace::start(&self.info.tracer, self.name(), &init) else {
            return self.plain.connect_with(init, options);
        };
        let options = options
            .observer(trace.clone())
            .extension(Arc::clone(&trace));
        let conn = self.traced.connect_with(init, options);
        trace.set_attribute(KeyValue::new("bidi.connection_id", conn.id().to_string()));
        conn
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
            .field(
                "type",
                &self.info.action_type.unwrap_or(ActionType::BidiFlow),
            )
            .field("description", &self.info.description)
            .field("tracer", &self.info.tracer)
            .finish_non_exhaustive()
    }
}
