//! How a protocol is served by a [`Server`](crate::Server): a [`Protocol`] adds its routes,
//! given the [`Host`] they share with the server's own routes.
//!
//! Each agent protocol lives in a crate of its own (AG-UI, the AI SDK's UI message stream,
//! A2A, Genkit's wires, MCP, the Dev UI) and reaches the server through this module only: its
//! routes are served under the server's auth (the request's [`Identity`] is in its
//! extensions), limits, layers and CORS, and they answer refusals with [`Failure`]s mapped
//! into the protocol's own error shape. A new protocol is one more [`Protocol`]:
//!
//! ```
//! use bidi_http::axum::{Router, routing::get};
//! use bidi_http::{Host, Protocol, Server};
//!
//! /// `GET /hello`: how many actions the server serves.
//! struct Hello;
//!
//! impl Protocol for Hello {
//!     fn routes(&self, host: &Host) -> Router {
//!         let host = host.clone();
//!         Router::new().route(
//!             "/hello",
//!             get(move || async move { format!("{} actions", host.registry().actions().len()) }),
//!         )
//!     }
//! }
//!
//! let server = Server::new(bidi_flow::Registry::new()).protocol(Hello);
//! # drop(server);
//! ```
//!
//! [`Identity`]: crate::Identity
//! [`Failure`]: crate::codec::Failure

#[cfg(feature = "agents")]
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::http::HeaderName;
use bidi_core::ConnectOptions;
use bidi_flow::Registry;
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;

use crate::{Identity, Limits};

/// The server a protocol's routes are served by: its registry, its agents, its limits, and
/// the budget of what answers keep for the clients that come back to them. Cheap to clone.
#[derive(Clone)]
pub struct Host {
    pub(crate) shared: Arc<Shared>,
}

/// What a [`Host`] holds.
pub(crate) struct Shared {
    pub(crate) registry: Registry,
    #[cfg(feature = "agents")]
    pub(crate) agents: HashMap<String, LlmAgent>,
    pub(crate) limits: Limits,
    /// Whether the server authenticates its requests.
    pub(crate) authenticated: bool,
    /// What the answers of every wire keep for the clients that come back to them.
    #[cfg(feature = "agents")]
    pub(crate) kept: Arc<crate::tee::Budget>,
}

impl Host {
    /// The registry whose actions the server serves.
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// The server's limits (see [`Server`](crate::Server)'s options).
    #[must_use]
    pub fn limits(&self) -> Limits {
        self.shared.limits
    }

    /// Whether the server authenticates its requests ([`Server::auth`](crate::Server::auth)).
    #[must_use]
    pub fn authenticated(&self) -> bool {
        self.shared.authenticated
    }

    /// The agents given to [`Server::agent`](crate::Server::agent), by name.
    #[cfg(feature = "agents")]
    #[must_use]
    pub fn agents(&self) -> &HashMap<String, LlmAgent> {
        &self.shared.agents
    }

    /// The agent served as `name`, if any.
    #[cfg(feature = "agents")]
    #[must_use]
    pub fn agent(&self, name: &str) -> Option<&LlmAgent> {
        self.shared.agents.get(name)
    }

    /// How many bytes the answers of every protocol keep for the clients that come back to
    /// them: one budget for the server (see [`tee`](crate::tee)).
    #[cfg(feature = "agents")]
    #[must_use]
    pub fn kept(&self) -> &Arc<crate::tee::Budget> {
        &self.shared.kept
    }

    /// Options for a connection made for a request of `identity`: the identity reaches the
    /// action (`ctx.extensions().get::<Identity>()`), and its agent sessions live in the
    /// identity's scope.
    pub fn connect_options(identity: Option<&Identity>) -> ConnectOptions {
        let options = ConnectOptions::new().extension(crate::scope(identity));
        match identity {
            Some(identity) => options.extension(identity.clone()),
            None => options,
        }
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Host");
        debug.field("registry", &self.shared.registry);
        #[cfg(feature = "agents")]
        debug.field("agents", &self.shared.agents.keys().collect::<Vec<_>>());
        debug
            .field("limits", &self.shared.limits)
            .field("authenticated", &self.shared.authenticated)
            .finish_non_exhaustive()
    }
}

/// A protocol a [`Server`](crate::Server) serves beside its flows: its routes, and what it
/// serves beside the server once bound. Added with
/// [`Server::protocol`](crate::Server::protocol).
pub trait Protocol: Send + Sync + 'static {
    /// The protocol's routes (paths relative to the server's root). They are served under the
    /// server's auth, body limit, layers and CORS; the request's
    /// [`Identity`](crate::Identity), if any, is in its extensions.
    fn routes(&self, host: &Host) -> Router;

    /// The headers of its answers a page of another origin may read, when the server serves
    /// [`cors`](crate::Server::cors). None by default.
    fn exposed_headers(&self) -> Vec<HeaderName> {
        Vec::new()
    }

    /// Binds what the protocol serves beside the server, on a listener of its own, when the
    /// server is [bound](crate::Server::bind); [`Bound::serve`](crate::Bound::serve) serves it
    /// until the server stops. Nothing by default.
    ///
    /// # Errors
    ///
    /// Binding failed: [`Server::bind`](crate::Server::bind) fails with it.
    fn bind<'a>(&'a self, host: &'a Host) -> BoxFuture<'a, io::Result<Option<Beside>>> {
        let _ = host;
        Box::pin(async { Ok(None) })
    }
}

/// A boxed future, as [`Protocol::bind`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a protocol serves beside the server (see [`Protocol::bind`]): given a future that
/// completes when the server stops, it serves until then.
pub struct Beside {
    serve: Box<dyn FnOnce(BoxFuture<'static, ()>) -> BoxFuture<'static, io::Result<()>> + Send>,
}

impl Beside {
    /// Serves with `serve`, which is given a future that completes when the server stops.
    pub fn new<F, Fut>(serve: F) -> Self
    where
        F: FnOnce(BoxFuture<'static, ()>) -> Fut + Send + 'static,
        Fut: Future<Output = io::Result<()>> + Send + 'static,
    {
        Self {
            serve: Box::new(move |stop| Box::pin(serve(stop))),
        }
    }

    /// Serves until `stop` completes.
    pub(crate) fn serve(self, stop: BoxFuture<'static, ()>) -> BoxFuture<'static, io::Result<()>> {
        (self.serve)(stop)
    }
}

impl fmt::Debug for Beside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Beside").finish_non_exhaustive()
    }
}
