//! Genkit's reflection API, so that Genkit's own tools drive a bidi program:
//! `genkit start --non-interactive -- <program>` lists its actions, runs them (streaming), cancels them and shows
//! their traces, and `genkit flow:run` runs a flow from the command line. Under
//! `genkit start --experimental-reflection-v2`, the API's version 2, the tools also send a bidi
//! action its inputs one by one, so that the Developer UI holds a conversation with an agent
//! turn by turn (see [version 2](#version-2)).
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
//! | `POST /api/notify {"telemetryServerUrl"}` | 200: spans go there from now on (unless `GENKIT_TELEMETRY_SERVER` is set), and the runtime stops announcing itself |
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
//! # Version 2
//!
//! When `GENKIT_REFLECTION_V2_SERVER` names the tools' WebSocket (which `genkit start
//! --experimental-reflection-v2` sets), the runtime listens on nothing and writes no file: it
//! dials the socket, registers, and answers the same calls as JSON-RPC 2.0 on it
//! ([`Endpoint::Dialed`]). A run's trace is reported as it starts, its chunks follow as
//! notifications, and with `streamInput` its inputs come one by one until the tools end them:
//! each reaches the action as it is sent, the next turn's after the last one's chunks if the
//! tools wait for them. Errors are the JSON-RPC error `-32000` carrying Genkit's error (the
//! codes above). When the socket closes, the runs going on are cancelled and the API stops;
//! the program's server goes on. A refused registration stops the API too, its error logged.
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
//! | `GENKIT_REFLECTION_ENABLED` | `true`: a [`Reflection`] runs one outside development too; `false`: never, even under `GENKIT_ENV=dev`; another value fails [`bind`](bidi_http::Server::bind) |
//! | `GENKIT_REFLECTION_PORT` | the port to serve on; else the first free from 3100 to 3199 |
//! | `GENKIT_REFLECTION_HOST` | the address to serve on (default `127.0.0.1`); requests may name it as their `Host` |
//! | `GENKIT_REFLECTION_V2_SERVER` | the tools' WebSocket (`ws://`): version 2, dialed instead of serving |
//! | `GENKIT_REFLECTION_SECRET_TOKEN` | when set, every call carries it in `x-genkit-reflection-secret`, or is refused with 401; required on a server with auth |
//! | `GENKIT_TELEMETRY_SERVER` | the telemetry server's URL, over the tools' notice |
//! | `GENKIT_RUNTIME_ID` | the runtime's id (default `<pid>-<port>`; `<pid>` for version 2) |

mod access;
mod runtime_file;
mod server;
mod socket;
mod telemetry;

use std::env;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use bidi_flow::Registry;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use access::Access;
use bidi_http::traces::{Traces, Updates};
use bidi_http::{Beside, BoxFuture, Host, Limits, Protocol, serve};
use runtime_file::{ANNOUNCE_AGAIN, Info, RuntimeFile};
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
/// println!("reflection API: {:?}", runtime.endpoint());
/// // Serves until the process ends; `serve_with_shutdown` stops on a signal and removes the file.
/// runtime.serve().await
/// # }
/// ```
pub struct Runtime {
    endpoint: Endpoint,
    wire: Wire,
    limits: Limits,
    reflection: Arc<Api>,
    updates: Updates,
}

/// How a runtime meets Genkit's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// The API's version 1: served at `addr`, announced by the runtime file `file`.
    Served {
        /// The address the API is bound to.
        addr: SocketAddr,
        /// The runtime file as first written: `<projectRoot>/.genkit/runtimes/<id>-<ms>.json`.
        /// Until the tools notify the runtime it writes the file anew now and then, under a
        /// later `<ms>` (see [`Runtime::serve`]).
        file: PathBuf,
    },
    /// The API's version 2 (`genkit start --experimental-reflection-v2`): the tools' WebSocket
    /// the runtime dials, from `GENKIT_REFLECTION_V2_SERVER`.
    Dialed {
        /// The WebSocket's URL.
        url: String,
    },
}

/// What serves the API, by version.
enum Wire {
    /// Version 1: the listener, and the runtime file.
    Served {
        listener: TcpListener,
        file: RuntimeFile,
    },
    /// Version 2: the WebSocket to dial, and the name to register as.
    Dialed { url: String, name: String },
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("id", &self.reflection.id)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Binds the reflection API for `registry`'s actions (on `GENKIT_REFLECTION_HOST` and
    /// `GENKIT_REFLECTION_PORT`, else 127.0.0.1 and the first free port from 3100), and writes
    /// the runtime file; or, when `GENKIT_REFLECTION_V2_SERVER` names the tools' WebSocket
    /// (version 2), readies to dial it. Spans are forwarded from `traces`: the store flows
    /// trace into (see [`Traces::install`]).
    ///
    /// # Errors
    ///
    /// A variable of the environment that does not parse (a port that is not one, a telemetry
    /// server that is no http URL, a WebSocket that is no `ws://` URL), no free port, or the
    /// runtime file cannot be written.
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
        let configured_id = env::var("GENKIT_RUNTIME_ID")
            .ok()
            .filter(|id| !id.is_empty());
        let name = env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.file_stem()?.to_string_lossy().into_owned()));
        let host = env::var("GENKIT_REFLECTION_HOST")
            .ok()
            .filter(|host| !host.is_empty());
        let (id, wire, endpoint, access) = match env::var(V2_VARIABLE) {
            Ok(url) if !url.is_empty() => {
                if !(url.starts_with("ws://") || url.starts_with("wss://")) {
                    return Err(invalid(format!("{V2_VARIABLE} is no ws:// URL: {url}")));
                }
                let id = configured_id.unwrap_or_else(|| std::process::id().to_string());
                let name = name.unwrap_or_else(|| id.clone());
                let endpoint = Endpoint::Dialed { url: url.clone() };
                // Nothing listens: the checks of requests made to a listener never run.
                let access = Access::new((Ipv4Addr::LOCALHOST, 0).into(), None, None);
                (id, Wire::Dialed { url, name }, endpoint, access)
            }
            _ => {
                let listener = listen(host.as_deref().unwrap_or("127.0.0.1")).await?;
                let addr = listener.local_addr()?;
                let id = configured_id
                    .unwrap_or_else(|| format!("{}-{}", std::process::id(), addr.port()));
                let url = format!("http://{}", reachable(addr));
                let name = name.unwrap_or_else(|| id.clone());
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
                let endpoint = Endpoint::Served {
                    addr,
                    file: file.path().to_owned(),
                };
                let access = Access::new(addr, host.as_deref(), secret);
                (id, Wire::Served { listener, file }, endpoint, access)
            }
        };
        let reflection = Arc::new(Api {
            registry,
            id,
            limits,
            access,
            telemetry: Arc::new(Telemetry::new(telemetry)),
            running: Mutex::default(),
            found: Notify::new(),
        });
        Ok(Self {
            endpoint,
            wire,
            limits,
            reflection,
            updates: traces.subscribe(),
        })
    }

    /// The runtime's id, as its runtime file says (`<pid>-<port>` unless `GENKIT_RUNTIME_ID`
    /// sets it).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.reflection.id
    }

    /// How the runtime meets the tools: the address it serves on and its runtime file, or the
    /// WebSocket it dials.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
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
    /// Until Genkit's tools notify it (`POST /api/notify`, which follows every runtime they
    /// find), a served runtime writes its runtime file anew, under a new name, after 1, 2, 4,
    /// 8 and 16 seconds: `genkit start` misses a file written while it sets up its watch, and
    /// would never list the runtime.
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
            wire,
            limits,
            reflection,
            updates,
            ..
        } = self;
        let telemetry = Arc::clone(&reflection.telemetry);
        let _forwarder = AbortOnDrop(tokio::spawn(
            telemetry.forward(updates, reflection.registry.clone()),
        ));
        match wire {
            Wire::Served { listener, mut file } => {
                let router = server::router(Arc::clone(&reflection));
                let serving = serve::serve(listener, router, limits, signal);
                tokio::pin!(serving);
                let announcing =
                    runtime_file::announce(&mut file, &reflection.found, &ANNOUNCE_AGAIN);
                let served = tokio::select! {
                    served = &mut serving => served,
                    () = announcing => serving.await,
                };
                drop(file);
                served
            }
            Wire::Dialed { url, name } => socket::serve(reflection, &url, &name, signal).await,
        }
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

/// The variable that names the tools' WebSocket, for the API's version 2.
const V2_VARIABLE: &str = "GENKIT_REFLECTION_V2_SERVER";

/// The variable that turns the API on or off whatever the environment.
const ENABLED_VARIABLE: &str = "GENKIT_REFLECTION_ENABLED";

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

/// What `GENKIT_REFLECTION_ENABLED` says: `true` serves the API outside development too,
/// `false` never, even under `GENKIT_ENV=dev`; unset says nothing.
///
/// # Errors
///
/// Another value.
fn enabled() -> io::Result<Option<bool>> {
    match env::var(ENABLED_VARIABLE) {
        Ok(value) if value.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Ok(value) if value.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Ok(value) if !value.is_empty() => Err(invalid(format!(
            "{ENABLED_VARIABLE} is `true` or `false`, not {value:?}"
        ))),
        _ => Ok(None),
    }
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
/// use bidi_genkit::reflection::{Endpoint, Reflection};
///
/// # #[tokio::main]
/// # async fn main() -> std::io::Result<()> {
/// let reflection = Reflection::new();
/// let bound = bidi_http::Server::new(bidi_flow::Registry::new())
///     .protocol(reflection.clone())
///     .bind()
///     .await?;
/// let runtime = reflection.serving().expect("bound");
/// if let Endpoint::Served { addr, file } = runtime.endpoint() {
///     println!("reflection API at {addr}, announced in {}", file.display());
/// }
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
    /// The reflection API, served whenever the server is bound (unless
    /// `GENKIT_REFLECTION_ENABLED=false`).
    pub fn new() -> Self {
        Self {
            in_dev: false,
            traces: None,
            serving: Arc::default(),
        }
    }

    /// The reflection API, served only when `GENKIT_ENV=dev` (which `genkit start` sets) or
    /// `GENKIT_REFLECTION_ENABLED=true`: a program that serves it in development and not in
    /// production.
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
            let wanted = match enabled()? {
                Some(enabled) => enabled,
                None => !self.in_dev || dev_env(),
            };
            if !wanted {
                return Ok(None);
            }
            let traces = self.traces.clone().unwrap_or_else(installed_traces);
            let registry = host.registry().clone();
            let runtime =
                Runtime::bind_with(registry, &traces, host.limits(), host.authenticated()).await?;
            let _ = self.serving.set(Serving {
                id: runtime.id().to_owned(),
                endpoint: runtime.endpoint().clone(),
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
    endpoint: Endpoint,
    dropped: DroppedSpans,
}

impl Serving {
    /// The runtime's id (see [`Runtime::id`]).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How it meets the tools (see [`Runtime::endpoint`]); a runtime file is removed when the
    /// server stops.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The span updates that did not reach the telemetry server (see
    /// [`Runtime::dropped_spans`]).
    #[must_use]
    pub fn dropped_spans(&self) -> &DroppedSpans {
        &self.dropped
    }
}
