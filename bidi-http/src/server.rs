//! [`Server`]: the builder of the router that serves a registry, and its options.

#[cfg(feature = "agents")]
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use bidi_flow::Registry;
#[cfg(feature = "agents")]
use bidi_llm::LlmAgent;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

use crate::auth::Authenticate;
use crate::host::Shared;
use crate::{
    Bound, Cors, DEFAULT_ADDR, Host, Identity, Limits, Protocol, Unauthorized, auth, flow, serve,
};
#[cfg(feature = "agents")]
use crate::{agent, tee};

/// Builds the [`axum::Router`] that serves a [`Registry`] (and [`LlmAgent`]s) over HTTP, and
/// serves it.
#[must_use]
pub struct Server {
    registry: Registry,
    #[cfg(feature = "agents")]
    agents: HashMap<String, LlmAgent>,
    auth: Option<Arc<dyn Authenticate>>,
    cors: Option<Cors>,
    routes: Router,
    protocols: Vec<Box<dyn Protocol>>,
    layers: Vec<Box<dyn FnOnce(Router) -> Router + Send>>,
    limits: Limits,
    addr: SocketAddr,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Server");
        debug.field("registry", &self.registry);
        #[cfg(feature = "agents")]
        debug.field("agents", &self.agents.keys().collect::<Vec<_>>());
        debug
            .field("auth", &self.auth.is_some())
            .field("cors", &self.cors)
            .field("routes", &self.routes)
            .field("protocols", &self.protocols.len())
            .field("layers", &self.layers.len())
            .field("limits", &self.limits)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Server {
    /// A server for every action of `registry`.
    pub fn new(registry: Registry) -> Self {
        Self {
            registry,
            #[cfg(feature = "agents")]
            agents: HashMap::new(),
            auth: None,
            cors: None,
            routes: Router::new(),
            protocols: Vec::new(),
            layers: Vec::new(),
            limits: Limits::default(),
            addr: DEFAULT_ADDR,
        }
    }

    #[cfg(feature = "agents")]
    /// Serves `agent`'s execute and session endpoints under `/agent/{name}/`. Register it in the
    /// registry too (`registry.register(agent.agent().clone().into_flow())`) to serve it on the
    /// flow wire and WebSocket as well.
    pub fn agent(mut self, agent: &LlmAgent) -> Self {
        self.agents
            .insert(agent.agent().name().to_owned(), agent.clone());
        self
    }

    /// Authenticates every request: `authenticate` gets the request's headers and returns its
    /// [`Identity`], or refuses it with [`Unauthorized`] (answered with 401). Without it, a
    /// request has the identity a layer of yours put in its extensions, or none.
    ///
    /// It guards the server's address and every [`protocol`](Self::protocol)'s routes. What a
    /// protocol serves on a listener of its own (Genkit's reflection API, `bidi-genkit`) is not
    /// behind it: on a server with auth, that API is served only when
    /// `GENKIT_REFLECTION_SECRET_TOKEN` is set, and asks every call for that secret instead.
    ///
    /// ```
    /// use bidi_http::{Identity, Server, Unauthorized};
    ///
    /// let server = Server::new(bidi_flow::Registry::new()).auth(|headers| async move {
    ///     match headers.get("authorization").and_then(|value| value.to_str().ok()) {
    ///         Some("Bearer alice-token") => Ok(Identity::new("alice")),
    ///         _ => Err(Unauthorized::new("a bearer token is required")),
    ///     }
    /// });
    /// # drop(server);
    /// ```
    pub fn auth<F, Fut>(mut self, authenticate: F) -> Self
    where
        F: Fn(axum::http::HeaderMap) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Identity, Unauthorized>> + Send + 'static,
    {
        self.auth = Some(Arc::new(auth::FnAuth(authenticate)));
        self
    }

    /// Lets pages of other origins call the server from a browser (CORS): preflight requests
    /// are answered, and the agent routes' headers are readable. Without it, a browser refuses
    /// a page's call to another origin, and a preflight (`OPTIONS`) is answered with 405.
    ///
    /// ```
    /// use bidi_http::{Cors, Server};
    ///
    /// let server = Server::new(bidi_flow::Registry::new())
    ///     .cors(Cors::origins(["http://localhost:3000"])?);
    /// # drop(server);
    /// # Ok::<(), bidi_http::InvalidOrigin>(())
    /// ```
    pub fn cors(mut self, cors: Cors) -> Self {
        self.cors = Some(cors);
        self
    }

    /// Serves `protocol` beside the flows: its routes under the server's auth, limits,
    /// layers and CORS, given the server's [`Host`] (its registry and agents), and what it
    /// serves beside the server once bound. Each agent protocol's crate has one.
    ///
    /// ```
    /// use bidi_http::axum::{Router, routing::get};
    /// use bidi_http::{Host, Protocol, Server};
    ///
    /// struct Ping;
    ///
    /// impl Protocol for Ping {
    ///     fn routes(&self, _: &Host) -> Router {
    ///         Router::new().route("/ping", get(|| async { "pong" }))
    ///     }
    /// }
    ///
    /// let server = Server::new(bidi_flow::Registry::new()).protocol(Ping);
    /// # drop(server);
    /// ```
    pub fn protocol(mut self, protocol: impl Protocol) -> Self {
        self.protocols.push(Box::new(protocol));
        self
    }

    /// Serves `routes` (routes of your own: a page, a health check) beside the server's, under
    /// the same [`layer`](Self::layer)s, [`cors`](Self::cors) and [`auth`](Self::auth).
    ///
    /// ```
    /// use bidi_http::Server;
    /// use bidi_http::axum::{Router, routing::get};
    ///
    /// let server = Server::new(bidi_flow::Registry::new())
    ///     .routes(Router::new().route("/health", get(|| async { "ok" })));
    /// # drop(server);
    /// ```
    pub fn routes(mut self, routes: Router) -> Self {
        self.routes = self.routes.merge(routes);
        self
    }

    /// Wraps every route in `layer` (a tower layer: compression, tracing, rate limits), as
    /// [`Router::layer`] does, so that [`bind`](Self::bind) and [`serve`](Bound::serve) still
    /// serve it. Layers run in the order they were added, the last outermost, inside
    /// [`cors`](Self::cors) and around [`auth`](Self::auth).
    ///
    /// ```
    /// use bidi_http::Server;
    /// use bidi_http::axum::http::{HeaderValue, header};
    /// use bidi_http::axum::middleware::{self, Next};
    /// use bidi_http::axum::{extract::Request, response::Response};
    ///
    /// async fn no_store(request: Request, next: Next) -> Response {
    ///     let mut response = next.run(request).await;
    ///     response
    ///         .headers_mut()
    ///         .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    ///     response
    /// }
    ///
    /// let server = Server::new(bidi_flow::Registry::new()).layer(middleware::from_fn(no_store));
    /// # drop(server);
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower_layer::Layer<axum::routing::Route> + Clone + Send + Sync + 'static,
        L::Service: tower_service::Service<axum::extract::Request> + Clone + Send + Sync + 'static,
        <L::Service as tower_service::Service<axum::extract::Request>>::Response:
            axum::response::IntoResponse + 'static,
        <L::Service as tower_service::Service<axum::extract::Request>>::Error:
            Into<std::convert::Infallible> + 'static,
        <L::Service as tower_service::Service<axum::extract::Request>>::Future: Send + 'static,
    {
        self.layers
            .push(Box::new(move |router: Router| router.layer(layer)));
        self
    }

    /// The largest request body accepted, in bytes (default 1 MiB); a larger one is answered
    /// with 413.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_body_bytes = bytes;
        self
    }

    /// The largest WebSocket message accepted, in bytes (default 1 MiB).
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_message_bytes = bytes;
        self
    }

    /// How long a connection may see nothing move, either way, before it is cancelled (default
    /// five minutes). A write its client does not take counts as nothing moving; served with
    /// [`Bound::serve`], a connection whose write has waited one second longer is closed.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// How long a client has to send a request's head, and to start the next request on a
    /// connection it keeps alive (default 15 s); then the connection is closed. Applies when
    /// the server is served with [`Bound::serve`].
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.limits.header_timeout = timeout;
        self
    }

    /// How long a client has to send a request's whole body (default 30 s); a body that
    /// stalls or trickles is answered with 408.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.limits.body_timeout = timeout;
        self
    }

    /// The address [`bind`](Self::bind) binds (default [`DEFAULT_ADDR`], `127.0.0.1:8080`).
    /// Anything but a loopback address serves other machines: put authentication in front.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// The router, to serve yourself or to [`merge`](axum::Router::merge) or
    /// [`nest`](axum::Router::nest) into your app.
    ///
    /// Serving it yourself, set `TCP_NODELAY` on the accepted sockets and a header read
    /// timeout, as [`Bound::serve`] does: without the first, a write that follows another
    /// before the client acknowledged it (a `turn_end` frame after its chunk, the next SSE
    /// record) waits for the client's delayed acknowledgement, up to 40 ms on Linux; without
    /// the second, a client that never finishes its request head holds its connection for
    /// good. [`layer`](Self::layer) adds your layers to what [`bind`](Self::bind) serves.
    ///
    /// ```no_run
    /// use bidi_http::axum::{self, serve::ListenerExt as _};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> std::io::Result<()> {
    /// let app = bidi_http::Server::new(bidi_flow::Registry::new()).router();
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// let listener = listener.tap_io(|tcp| {
    ///     let _ = tcp.set_nodelay(true);
    /// });
    /// axum::serve(listener, app).await
    /// # }
    /// ```
    pub fn router(self) -> Router {
        self.assemble().0
    }

    /// The router, the host its routes share, and the protocols it serves.
    fn assemble(self) -> (Router, Host, Vec<Box<dyn Protocol>>) {
        #[cfg(feature = "agents")]
        let kept = Arc::new(tee::Budget::default());
        let host = Host {
            shared: Arc::new(Shared {
                registry: self.registry,
                #[cfg(feature = "agents")]
                agents: self.agents,
                limits: self.limits,
                authenticated: self.auth.is_some(),
                #[cfg(feature = "agents")]
                kept,
            }),
        };
        // Each concern's routes, one line each.
        let router = flow::routes();
        #[cfg(feature = "agents")]
        let router = router.merge(agent::routes());
        let mut router = router
            .fallback(flow::no_route)
            .method_not_allowed_fallback(flow::no_method)
            .with_state(host.clone());
        let mut exposed = crate::cors::exposed();
        for protocol in &self.protocols {
            router = router.merge(protocol.routes(&host));
            exposed.extend(protocol.exposed_headers());
        }
        let routes = router
            .layer(DefaultBodyLimit::max(self.limits.max_body_bytes))
            .merge(self.routes);
        let auth = self
            .auth
            .map(|authenticate| axum::middleware::from_fn_with_state(authenticate, auth::layer));
        let cors = self.cors.as_ref().map(|cors| cors.layer(exposed));
        // From the inside out: the body deadline, auth, the application's layers, the caller's
        // trace (the application's layers run in it too), CORS (a preflight carries no
        // credentials, so it is answered before auth).
        let router = if self.layers.is_empty() {
            // The server's own layers wrap the routes once, as one service: `Router::layer`
            // wraps each route, and axum clones a route's boxed service, box within box, and
            // boxes each layer's future, for every request it routes.
            let service = ServiceBuilder::new()
                .option_layer(cors)
                .layer(crate::caller::CallerTrace)
                .option_layer(auth)
                .layer(serve::BodyDeadline::new(self.limits))
                .service(routes);
            Router::new().fallback_service(service)
        } else {
            // The application's layers are route layers (`Server::layer`): each sees the route
            // its request matched (`MatchedPath`), so every layer wraps each route.
            let mut router = routes.layer(serve::BodyDeadline::new(self.limits));
            if let Some(auth) = auth {
                router = router.layer(auth);
            }
            for layer in self.layers {
                router = layer(router);
            }
            let router = router.layer(crate::caller::CallerTrace);
            match cors {
                Some(cors) => router.layer(cors),
                None => router,
            }
        };
        (router, host, self.protocols)
    }

    /// Binds the server's address, and what its protocols serve beside it
    /// ([`Protocol::bind`]: Genkit's reflection API, say, which also writes its runtime file).
    ///
    /// # Errors
    ///
    /// The address cannot be bound (taken, or not this machine's), or a protocol's
    /// [`bind`](Protocol::bind) failed: Genkit's reflection API fails with its listener or
    /// runtime file, or, on a server with [`auth`](Self::auth), without
    /// `GENKIT_REFLECTION_SECRET_TOKEN` (an error of kind
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) carrying `bidi_genkit`'s `SecretRequired`).
    ///
    /// # Cancel safety
    ///
    /// Cancelling it drops the server and any socket it bound; nothing was served yet.
    pub async fn bind(self) -> io::Result<Bound> {
        let listener = TcpListener::bind(self.addr).await?;
        let limits = self.limits;
        let (router, host, protocols) = self.assemble();
        let mut besides = Vec::new();
        for protocol in &protocols {
            besides.extend(protocol.bind(&host).await?);
        }
        // Each agent that keeps sessions takes over the detached turns of processes that died.
        #[cfg(feature = "agents")]
        for agent in host.agents().values() {
            if !agent.agent().is_client_managed() {
                let agent = agent.clone();
                besides.push(crate::Beside::new(move |stop| async move {
                    tokio::select! {
                        () = agent.supervise() => {}
                        () = stop => {}
                    }
                    Ok(())
                }));
            }
        }
        Ok(Bound {
            listener,
            router,
            limits,
            besides,
        })
    }
}
