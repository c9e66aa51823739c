//! Genkit's reflection API (version 1), so that Genkit's own tools drive a bidi program:
//! `genkit start --non-interactive -- <program>` lists its actions, runs them (streaming), cancels them and shows
//! their traces, and `genkit flow:run` runs a flow from the command line.
//!
//! A [`Runtime`] serves the API on a listener of its own, announces itself with a runtime file
//! under `<projectRoot>/.genkit/runtimes/` (the project root is the nearest directory, from
//! the working directory up, with a `package.json`, `go.mod`, `pyproject.toml`,
//! `requirements.txt`, `pom.xml`, `build.gradle[.kts]` or `pubspec.yaml`: the tools' own
//! markers; `Cargo.toml` is not one), and forwards every span of a [`Traces`] store to the
//! tools' telemetry server. [`Reflection`], a [`Protocol`] of a [`bidi_http::Server`], runs
//! one beside the server when it is bound (or, made [`in_dev`](Reflection::in_dev), only
//! under `GENKIT_ENV=dev`, which `genkit start` sets):
//!
//! ```no_run
//! use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
//! use bidi_flow::{ActionType, BidiFlow, Registry};
//! use bidi_genkit::reflection::Reflection;
//! use bidi_http::Server;
//!
//! async fn countdown(_: ActionContext, _: (), mut n: Inbound<u32>, out: Outbound<u32>)
//!     -> Result<String, BoxError>
//! {
//!     let n = n.recv().await.unwrap_or(0);
//!     for left in (1..=n).rev() {
//!         out.send(left).await?;
//!     }
//!     Ok(format!("done after {n}"))
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let registry = Registry::new();
//! // `genkit flow:run countdown 3` runs `/flow/countdown`: register it as a flow.
//! let flow = BidiFlow::new("countdown", countdown).with_action_type(ActionType::new("flow").expect("a valid type"));
//! registry.register(flow).expect("a new key");
//! Server::new(registry).protocol(Reflection::new()).bind().await?.serve().await
//! # }
//! ```
//!
//! ```sh
//! npx genkit start --non-interactive -- cargo run   # the tools on :4000, this program's actions listed
//! npx genkit flow:run --non-interactive countdown 3 # from another shell: "done after 3"
//! ```
//!
//! Without `--non-interactive`, the CLI's first run stops at its analytics notice ("Press
//! Enter to acknowledge") before it starts anything (`genkit config set analyticsOptOut true`
//! also keeps it from asking).
//!
//! # The API
//!
//! | call | answer |
//! |---|---|
//! | `GET /api/__health?id=` | 200; 503 when `id` is another runtime's |
//! | `POST /api/notify {"telemetryServerUrl"}` | 200: spans go there from now on (unless `GENKIT_TELEMETRY_SERVER` is set) |
//! | `GET /api/actions` | the registry's descriptors by key (`GET /actions`'s, schemas included) |
//! | `GET /api/values?type=defaultModel\|middleware` | `{}` |
//! | `POST /api/runAction[?stream=true] {"key","input","init"?}` | see below |
//! | `POST /api/cancelAction {"traceId"}` | 200 `{"message":"Action cancelled"}`; 404 when no run of that trace goes on |
//!
//! `runAction` opens a connection to `key` with `init`, sends `input`, closes the input, and
//! answers at once with the headers `X-Genkit-Trace-Id` and `X-Genkit-Span-Id` (the
//! connection span's, so the tools can cancel the run and follow its trace while it runs) and
//! `X-Genkit-Version`. With `stream=true` each chunk follows as a line of JSON. The last line
//! is `{"result": output, "telemetry": {"traceId"}}`, or, still with status 200 as Genkit
//! answers, `{"error": {"code", "message", "details": {"traceId"}}}` with a numeric gRPC code:
//! 3 for an init or input that does not fit the action's schema, 1 for a cancelled run (4
//! for one idle past the idle timeout), 13 for an action that failed. An unknown key is 404
//! `action K not found`. `context` and `telemetryLabels` are accepted and left: a bidi action
//! has no use for them. One input per run: the tools' version 1 sends no input stream.
//!
//! A run without `init` (or with `null`), which is what `genkit flow:run` sends, gets `null`
//! if the action's init type takes it (`()`, an `Option`), else the empty object `{}`: an init
//! struct whose fields all have defaults runs with them. Derive `Default` and mark the type
//! `#[serde(default)]`, and a run without init gets `Init::default()`:
//!
//! ```
//! use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
//! use bidi_flow::{ActionType, BidiFlow, Registry};
//! use serde::{Deserialize, Serialize};
//!
//! /// `genkit flow:run greet '"Ada"'` runs with `Greeting::default()`: "Hello, Ada."
//! #[derive(Default, Serialize, Deserialize, schemars::JsonSchema)]
//! #[serde(default)]
//! struct Greeting {
//!     excited: bool,
//! }
//!
//! async fn greet(_: ActionContext, greeting: Greeting, mut name: Inbound<String>, _: Outbound<()>)
//!     -> Result<String, BoxError>
//! {
//!     let name = name.recv().await.unwrap_or_default();
//!     Ok(format!("Hello, {name}{}", if greeting.excited { "!" } else { "." }))
//! }
//!
//! let registry = Registry::new();
//! registry.register(BidiFlow::new("greet", greet).with_action_type(ActionType::new("flow")?))?;
//! # Ok::<(), bidi_flow::RegistryError>(())
//! ```
//!
//! An init type with a required field refuses a run without init (code 3), saying that the
//! action needs an `init` and how to give it one.
//!
//! # Who may call
//!
//! The API runs any action of the registry, so it answers Genkit's tools on this machine and
//! no one else. Each request is checked, and refused in the error shape above:
//!
//! | request | answer |
//! |---|---|
//! | a `Host` other than `127.0.0.1`, `localhost` or `[::1]` with the port bound (or the host of `GENKIT_REFLECTION_HOST`): a page reaching the port by DNS rebinding | 403, code 7 |
//! | an `Origin`: a page in a browser (Genkit's tools call from their own process and send none) | 403, code 7 |
//! | without the secret, when `GENKIT_REFLECTION_SECRET_TOKEN` is set | 401, code 16 |
//! | a `POST` whose `Content-Type` is not JSON: a form or `text/plain` post, which a page sends cross-site without asking first | 415, code 3 |
//!
//! A [`Server`](bidi_http::Server) with [`auth`](bidi_http::Server::auth) starts the API only with a
//! secret: the API runs actions without the server's auth, and Genkit's tools cannot send
//! the app's credentials. Without `GENKIT_REFLECTION_SECRET_TOKEN`,
//! [`Server::bind`](bidi_http::Server::bind) fails with [`SecretRequired`]; with it, every call
//! carries it (Genkit's tools that set the variable send it in `x-genkit-reflection-secret`;
//! the CLI 1.43 sets none, so serve it from a server without auth in development).
//!
//! # Spans
//!
//! Each span start and end of the [`Traces`] store is posted to
//! `{telemetryServerUrl}/api/traces` as Genkit's `TraceData`, with bidi's attributes and
//! Genkit's: a connection span is an `action` (`genkit:metadata:subtype` its action's type,
//! `genkit:input` the run's input when the reflection API ran it, `genkit:init`,
//! `genkit:output`), a turn or `run` step a `flowStep`, each with `genkit:name`,
//! `genkit:path`, `genkit:state` and `genkit:isRoot` on a root. A telemetry server that is
//! down or slow never holds a run back: posts wait at most two seconds each, updates queue
//! in the store's bounded channel, and what is missed is counted
//! ([`Runtime::dropped_spans`]).
//!
//! # Environment
//!
//! | variable | what it does |
//! |---|---|
//! | `GENKIT_ENV=dev` | a server with [`Reflection::in_dev`] runs a runtime beside it when bound |
//! | `GENKIT_REFLECTION_PORT` | the port to serve on; else the first free from 3100 to 3199 |
//! | `GENKIT_REFLECTION_HOST` | the address to serve on (default `127.0.0.1`); requests may name it as their `Host` |
//! | `GENKIT_REFLECTION_SECRET_TOKEN` | when set, every call carries it in `x-genkit-reflection-secret`, or is refused with 401; required on a server with auth |
//! | `GENKIT_TELEMETRY_SERVER` | the telemetry server's URL, over the tools' notice |
//! | `GENKIT_RUNTIME_ID` | the runtime's id (default `<pid>-<port>`) |

mod access;
mod runtime_file;
mod server;
mod telemetry;

use std::env;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use axum::Router;
use bidi_flow::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use access::Access;
use bidi_http::traces::{Traces, Updates};
use bidi_http::{Beside, BoxFuture, Host, Limits, Protocol, serve};
use runtime_file::{Info, RuntimeFile};
use server::Api;
use telemetry::Telemetry;

/// What a runtime says it is, in its runtime file and `X-Genkit-Version`.
pub(crate) const GENKIT_VERSION: &str = concat!("bidi-genkit/", env!("CARGO_PKG_VERSION"));

/// The reflection API's version.
const SPEC_VERSION: u32 = 1;

/// The ports tried, in order, when `GENKIT_REFLECTION_PORT` is not set.
const PORTS: std::ops::RangeInclusive<u16> = 3100..=3199;

/// A Genkit runtime: the reflection API bound on its own listener, its runtime file written.
/// [`serve`](Self::serve) it; the file is removed when serving ends, or when the runtime is
/// dropped.
///
/// ```no_run
/// use bidi_flow::Registry;
/// use bidi_genkit::reflection::Runtime;
/// use bidi_http::traces::Traces;
///
/// # #[tokio::main]
/// # async fn main() -> std::io::Result<()> {
/// let traces = Traces::new();
/// let _provider = traces.install();
/// let runtime = Runtime::bind(Registry::new(), &traces).await?;
/// println!("reflection API at {}", runtime.local_addr()?);
/// // Serves until the process ends; `serve_with_shutdown` stops on a signal and removes the file.
/// runtime.serve().await
/// # }
/// ```
pub struct Runtime {
    listener: TcpListener,
    router: Router,
    limits: Limits,
    reflection: Arc<Api>,
    updates: Updates,
    file: RuntimeFile,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.reflection.id)
            .field("addr", &self.listener.local_addr().ok())
            .field("file", &self.file.path())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Binds the reflection API for `registry`'s actions (on `GENKIT_REFLECTION_HOST` and
    /// `GENKIT_REFLECTION_PORT`, else 127.0.0.1 and the first free port from 3100), and writes
    /// the runtime file. Spans are forwarded from `traces`: the store flows trace into (see
    /// [`Traces::install`]).
    ///
    /// # Errors
    ///
    /// A variable of the environment that does not parse (a port that is not one, a telemetry
    /// server that is no http URL), no free port, or the runtime file cannot be written.
    ///
    /// Every request is checked as [the module](self#who-may-call) says.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes binds nothing and writes no file.
    pub async fn bind(registry: Registry, traces: &Traces) -> io::Result<Self> {
        Self::bind_with(registry, traces, Limits::default(), false).await
    }

    /// [`bind`](Self::bind) for a server: with its limits, and for a server with auth
    /// (`authenticated`), only with the tools' secret.
    pub(crate) async fn bind_with(
        registry: Registry,
        traces: &Traces,
        limits: Limits,
        authenticated: bool,
    ) -> io::Result<Self> {
        let secret = env::var(SECRET_VARIABLE)
            .ok()
            .filter(|secret| !secret.is_empty());
        if authenticated && secret.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, SecretRequired));
        }
        let telemetry = match env::var("GENKIT_TELEMETRY_SERVER") {
            Ok(url) if !url.is_empty() => Some(
                telemetry::traces_uri(&url)
                    .map_err(|reason| invalid(format!("GENKIT_TELEMETRY_SERVER: {reason}")))?,
            ),
            _ => None,
        };
        let host = env::var("GENKIT_REFLECTION_HOST")
            .ok()
            .filter(|host| !host.is_empty());
        let listener = listen(host.as_deref().unwrap_or("127.0.0.1")).await?;
        let addr = listener.local_addr()?;
        let id = env::var("GENKIT_RUNTIME_ID")
            .ok()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| format!("{}-{}", std::process::id(), addr.port()));
        let url = format!("http://{}", reachable(addr));
        let name = env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.file_stem()?.to_string_lossy().into_owned()))
            .unwrap_or_else(|| id.clone());
        let root = runtime_file::project_root(&env::current_dir()?);
        let now = SystemTime::now();
        let info = Info {
            id: &id,
            pid: std::process::id(),
            name: &name,
            reflection_server_url: &url,
            timestamp: bidi_http::time::rfc3339(now),
            genkit_version: GENKIT_VERSION,
            reflection_api_spec_version: SPEC_VERSION,
        };
        let file = RuntimeFile::write(&root, &info, now)?;
        let reflection = Arc::new(Api {
            registry,
            id,
            limits,
            access: Access::new(addr, host.as_deref(), secret),
            telemetry: Arc::new(Telemetry::new(telemetry)),
            running: Mutex::default(),
        });
        Ok(Self {
            listener,
            router: server::router(Arc::clone(&reflection)),
            limits,
            reflection,
            updates: traces.subscribe(),
            file,
        })
    }

    /// The runtime's id, as its runtime file says (`<pid>-<port>` unless `GENKIT_RUNTIME_ID`
    /// sets it).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.reflection.id
    }

    /// The address the reflection API is bound to.
    ///
    /// # Errors
    ///
    /// The socket's address cannot be read.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The runtime file: `<projectRoot>/.genkit/runtimes/<id>-<ms>.json`.
    #[must_use]
    pub fn file(&self) -> &Path {
        self.file.path()
    }

    /// The count of span updates that did not reach the telemetry server: missed while the
    /// forwarder was behind, refused, or not answered within two seconds. Updates made before
    /// the tools named their telemetry server are not counted: there was nowhere to send
    /// them. The handle outlives [`serve`](Self::serve).
    #[must_use]
    pub fn dropped_spans(&self) -> DroppedSpans {
        DroppedSpans(Arc::clone(&self.reflection.telemetry))
    }

    /// Serves until the process ends.
    ///
    /// # Errors
    ///
    /// Accepting connections failed for good.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and forwarding spans, and removes the runtime
    /// file; runs going on go on in their tasks.
    pub async fn serve(self) -> io::Result<()> {
        self.serve_with_shutdown(std::future::pending()).await
    }

    /// Serves until `signal` completes, then stops accepting, waits for the calls being
    /// answered (a run streaming its answer is one), and removes the runtime file.
    ///
    /// # Errors
    ///
    /// Accepting connections failed for good.
    ///
    /// # Cancel safety
    ///
    /// As [`serve`](Self::serve).
    pub async fn serve_with_shutdown<F>(self, signal: F) -> io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Self {
            listener,
            router,
            limits,
            reflection,
            updates,
            file,
        } = self;
        let telemetry = Arc::clone(&reflection.telemetry);
        let _forwarder = AbortOnDrop(tokio::spawn(
            telemetry.forward(updates, reflection.registry.clone()),
        ));
        let served = serve::serve(listener, router, limits, signal).await;
        drop(file);
        served
    }
}

/// How many span updates a [`Runtime`] could not forward: see [`Runtime::dropped_spans`].
#[derive(Debug, Clone)]
pub struct DroppedSpans(Arc<Telemetry>);

impl DroppedSpans {
    /// The count so far.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.0.dropped()
    }
}

/// The variable that holds the secret Genkit's tools send with every call.
const SECRET_VARIABLE: &str = "GENKIT_REFLECTION_SECRET_TOKEN";

/// Why a server with [`auth`](bidi_http::Server::auth) did not start Genkit's reflection API: no
/// `GENKIT_REFLECTION_SECRET_TOKEN` is set. [`Server::bind`](bidi_http::Server::bind) answers it
/// as an [`io::Error`] of kind [`InvalidInput`](io::ErrorKind::InvalidInput), which
/// [`io::Error::get_ref`] downcasts to this.
///
/// The reflection API runs every action without the server's auth, and Genkit's tools cannot
/// send the app's credentials: on such a server it is served only to the holders of the
/// tools' secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this server has auth, and Genkit's reflection API (served by `Reflection`) would run its actions \
     without it: set GENKIT_REFLECTION_SECRET_TOKEN, which \
     every call to the reflection API must then carry, or serve the reflection API from a \
     server without auth"
)]
#[non_exhaustive]
pub struct SecretRequired;

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// The listener on `host`: on `GENKIT_REFLECTION_PORT` if set, else the first free port from
/// 3100.
async fn listen(host: &str) -> io::Result<TcpListener> {
    match env::var("GENKIT_REFLECTION_PORT") {
        Ok(port) if !port.is_empty() => {
            let port: u16 = port
                .parse()
                .map_err(|_| invalid(format!("GENKIT_REFLECTION_PORT is not a port: {port}")))?;
            TcpListener::bind((host, port)).await
        }
        _ => {
            for port in PORTS {
                match TcpListener::bind((host, port)).await {
                    Ok(listener) => return Ok(listener),
                    Err(error) if error.kind() == io::ErrorKind::AddrInUse => {}
                    Err(error) => return Err(error),
                }
            }
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "no free port from {} to {} for Genkit's reflection API: set \
                     GENKIT_REFLECTION_PORT",
                    PORTS.start(),
                    PORTS.end()
                ),
            ))
        }
    }
}

/// `addr` as the tools on this machine reach it: a wildcard address is reached on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

/// The store a [`Reflection`] without traces of its own forwards spans from: made and
/// installed as the global tracer provider on first use, once per process.
fn installed_traces() -> Traces {
    static INSTALLED: OnceLock<Traces> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let traces = Traces::new();
            // The provider stays installed for the process: the global one holds it.
            drop(traces.install());
            traces
        })
        .clone()
}

/// Whether `GENKIT_ENV` says the program runs under Genkit's tools.
fn dev_env() -> bool {
    env::var("GENKIT_ENV").is_ok_and(|env| env == "dev")
}

/// Genkit's reflection API served beside a [`bidi_http::Server`]: when the server is
/// [bound](bidi_http::Server::bind), a [`Runtime`] for its registry is bound too, with the
/// server's limits, and served until the server stops (its runtime file then removed). See
/// the [module](self).
///
/// The API does not run the server's [`auth`](bidi_http::Server::auth), whose credentials the
/// tools cannot send: on a server with auth it is served only with the tools' secret,
/// `GENKIT_REFLECTION_SECRET_TOKEN`, which every call must then carry, and without it
/// [`bind`](bidi_http::Server::bind) fails (see [`SecretRequired`]).
///
/// ```no_run
/// use bidi_genkit::reflection::Reflection;
///
/// # #[tokio::main]
/// # async fn main() -> std::io::Result<()> {
/// let reflection = Reflection::new();
/// let bound = bidi_http::Server::new(bidi_flow::Registry::new())
///     .protocol(reflection.clone())
///     .bind()
///     .await?;
/// let runtime = reflection.serving().expect("bound");
/// println!("reflection API at {}, announced in {}", runtime.addr(), runtime.file().display());
/// bound.serve().await
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Reflection {
    /// Served only under `GENKIT_ENV=dev`.
    in_dev: bool,
    /// Where spans are forwarded from; `None`: the store installed once per process.
    traces: Option<Traces>,
    /// What the runtime bound, once it has.
    serving: Arc<OnceLock<Serving>>,
}

impl Default for Reflection {
    fn default() -> Self {
        Self::new()
    }
}

impl Reflection {
    /// The reflection API, served whenever the server is bound.
    pub fn new() -> Self {
        Self {
            in_dev: false,
            traces: None,
            serving: Arc::default(),
        }
    }

    /// The reflection API, served only when `GENKIT_ENV=dev` (which `genkit start` sets): a
    /// program that serves it in development and not in production.
    pub fn in_dev() -> Self {
        Self {
            in_dev: true,
            ..Self::new()
        }
    }

    /// Forwards the spans of `traces` (the Dev UI's store, say), instead of those of a store
    /// installed as the global tracer provider once per process. A program with a tracer
    /// provider of its own adds `traces` to it.
    pub fn traces(mut self, traces: Traces) -> Self {
        self.traces = Some(traces);
        self
    }

    /// The runtime this protocol bound, once its server is bound (none before, or when
    /// `GENKIT_ENV=dev` is not set for one made [`in_dev`](Self::in_dev)).
    #[must_use]
    pub fn serving(&self) -> Option<&Serving> {
        self.serving.get()
    }
}

impl Protocol for Reflection {
    fn routes(&self, _: &Host) -> axum::Router {
        axum::Router::new()
    }

    fn bind<'a>(&'a self, host: &'a Host) -> BoxFuture<'a, io::Result<Option<Beside>>> {
        Box::pin(async move {
            if self.in_dev && !dev_env() {
                return Ok(None);
            }
            let traces = self.traces.clone().unwrap_or_else(installed_traces);
            let registry = host.registry().clone();
            let runtime =
                Runtime::bind_with(registry, &traces, host.limits(), host.authenticated()).await?;
            let _ = self.serving.set(Serving {
                id: runtime.id().to_owned(),
                addr: runtime.local_addr()?,
                file: runtime.file().to_owned(),
                dropped: runtime.dropped_spans(),
            });
            Ok(Some(Beside::new(|stop| runtime.serve_with_shutdown(stop))))
        })
    }
}

/// A runtime a [`Reflection`] bound beside its server.
#[derive(Debug, Clone)]
pub struct Serving {
    id: String,
    addr: SocketAddr,
    file: std::path::PathBuf,
    dropped: DroppedSpans,
}

impl Serving {
    /// The runtime's id (see [`Runtime::id`]).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The address its reflection API is bound to.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its runtime file, removed when the server stops.
    #[must_use]
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The span updates that did not reach the telemetry server (see
    /// [`Runtime::dropped_spans`]).
    #[must_use]
    pub fn dropped_spans(&self) -> &DroppedSpans {
        &self.dropped
    }
}
