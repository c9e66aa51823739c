//! The Dev UI: a page in the browser, served at `/dev/`, to run a server's actions and agents and
//! watch what they do while you build them.
//!
//! - **Actions**: every registered action (flows and agents) with its four JSON Schemas (init,
//!   input, stream, output), and forms made from them (or raw JSON) to open a connection over
//!   the WebSocket wire, send inputs turn by turn, and watch the chunks, turn ends, output or
//!   error come in; cancel it at any point.
//! - **Chats** with the agents given to [`Server::agent`](bidi_http::Server::agent), over their
//!   UI message stream (`bidi-ai-sdk`'s, served for the page at `/dev/api/agent/{name}/chat`): markdown answers, tool calls with their
//!   arguments and results, calls waiting for an approval (approve or deny them), the page's
//!   own tools (`confirm`, `pick_color`, answered with buttons), a stop button. The chat's id
//!   is the session's, kept in the browser's storage: a reload reads the conversation back from
//!   the server. An answer there runs to its end whoever reads it, so a reload mid-answer does
//!   not stop it: the reloaded page shows the question and follows the answer still running
//!   (`GET /dev/api/agent/{name}/chat/{id}/stream`), then reads the conversation back once it
//!   ends. (The execute endpoint would serve the same events, but its client going away
//!   cancels the turn.) Stop aborts the session's running turn, in whichever process runs it:
//!   it stops at its next lease renewal, within a third of the agent's lease.
//! - **Traces**, live: each connection's span and its turns' spans as they start and end, with
//!   their attributes and errors, from the [`Traces`] the server was given.
//! - **Sessions** of each agent: their snapshots, lineage and state, and the difference between
//!   two snapshots' states.
//!
//! The page is a few hand-written files compiled into the crate: no build step, nothing loaded
//! from elsewhere, it works offline.
//!
//! ```no_run
//! use bidi_devui::DevUi;
//! use bidi_flow::Registry;
//! use bidi_http::Server;
//! use bidi_http::traces::Traces;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::DemoModel;
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! // Every flow traces into the global tracer provider: `install` sets one that keeps spans.
//! let traces = Traces::new();
//! let _provider = traces.install();
//!
//! let assistant = LlmAgent::builder("assistant", DemoModel).build();
//! let registry = Registry::new();
//! registry.register(assistant.agent().clone().into_flow()).expect("a new key");
//! // Open http://127.0.0.1:8080/dev/
//! Server::new(registry)
//!     .agent(&assistant)
//!     .protocol(DevUi::new(traces))
//!     .bind()
//!     .await?
//!     .serve()
//!     .await
//! # }
//! ```
//!
//! # Routes
//!
//! The page calls the server's own routes (`GET /actions`, the WebSocket of each action, the
//! agents' session endpoints) and these (all `GET` but the last):
//!
//! | route | what it answers |
//! |---|---|
//! | `/dev/` | the page (`/dev` redirects there) |
//! | `/dev/api/agents` | the agents served, with their tools: `{"agents": [{"name", "tools": [{"name", "label", "description", "parameters", "local", "needsApproval"}]}]}` |
//! | `/dev/api/agents/{name}/sessions/{id}/snapshots` | the session's head and its lineage, newest first: `{"sessionId", "snapshots": [snapshot], "truncated"}` |
//! | `/dev/api/agents/{name}/sessions/{id}/snapshots/{snapshotId}` | one snapshot and its state: `{"snapshot", "state"}` |
//! | `/dev/api/agents/{name}/sessions/{id}/diff/{from}/{to}` | what changed from snapshot `from`'s state to snapshot `to`'s, as a JSON Patch (RFC 6902): `{"from", "to", "changes"}` |
//! | `/dev/api/traces` | the traces kept, newest first: `{"traces": [summary]}` |
//! | `/dev/api/traces/{traceId}` | one trace's spans, in start order: `{"traceId", "spans": [span]}` |
//! | `/dev/api/agent/{name}/chat`, `.../chat/{id}`, `.../chat/{id}/stream` | the agents' UI message stream, as `bidi_ai_sdk::Chat` serves it |
//! | `/dev/api/traces/live` | SSE: `event: traces` with the list first, then `event: span_start` / `span_end` with each span as it starts and ends (`event: lagged` when the reader fell behind and missed some) |
//!
//! A snapshot is `{"id", "parentId", "version", "status", "error", "createdAt", "updatedAt",
//! "leaseExpiresAt"}` (times in milliseconds since the Unix epoch); a span and a trace summary
//! are [`traces::Span`](bidi_http::traces::Span) and
//! [`traces::TraceSummary`](bidi_http::traces::TraceSummary). A session's lineage is its head's:
//! the snapshots it continues, back to the first (a branch made from an older snapshot leaves
//! the snapshots after that one out of it), at most 1,000 of them.
//!
//! `POST /dev/api/agents/{name}/sessions/{id}/abort` aborts the session's running turn (its
//! head, when pending), in whichever process runs it, and answers `{"snapshotId", "status"}`:
//! the head and the status it had (`null`s for a session with no snapshot).
//!
//! # Who sees what
//!
//! The Dev UI is for development: serve it on a development server, not to the public. Its
//! routes are the server's, under its [`auth`](bidi_http::Server::auth), layers and CORS, and show
//! nothing the server's other routes do not: an identity sees only its own sessions, as on the
//! agent endpoints. Traces are the process's, every identity's connections in one place (a
//! span carries the connection's init and output), so a request that has an identity sees them
//! only if [`DevUi::trace_readers`] lets it (nobody, unless told); a request without one (a
//! server without `auth`, where everybody is the same anonymous caller) sees them. The page's
//! requests carry the browser's cookies, not an `Authorization` header: behind `auth`, give it
//! a cookie the hook reads.

mod agents;
mod assets;
mod sessions;
#[cfg(test)]
mod tests;
mod traces;

use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

use axum::Extension;
use bidi_ai_sdk::Chat;
use bidi_http::codec::{Code, Failure};
use bidi_http::traces::Traces;
use bidi_http::{Host, Identity, Protocol};

type Readers = Arc<dyn Fn(&Identity) -> bool + Send + Sync>;

/// The Dev UI, a [`Protocol`] of a [`bidi_http::Server`]: what it shows (the spans of
/// [`Traces`]) and to whom.
///
/// ```
/// use bidi_devui::DevUi;
/// use bidi_http::traces::Traces;
/// use bidi_http::{Identity, Server, Unauthorized};
///
/// let server = Server::new(bidi_flow::Registry::new())
///     .auth(|headers| async move {
///         match headers.get("cookie").and_then(|value| value.to_str().ok()) {
///             Some("user=ada") => Ok(Identity::new("ada")),
///             _ => Err(Unauthorized::new("sign in first")),
///         }
///     })
///     // Ada develops this server: she may read every connection's spans.
///     .protocol(DevUi::new(Traces::new()).trace_readers(|identity| identity.id() == "ada"));
/// # drop(server);
/// ```
#[derive(Clone)]
#[must_use]
pub struct DevUi {
    traces: Traces,
    readers: Option<Readers>,
}

impl DevUi {
    /// The Dev UI, showing the spans `traces` keeps.
    pub fn new(traces: Traces) -> Self {
        Self {
            traces,
            readers: None,
        }
    }

    /// Which identities may read the traces (every identity's connections, in one place):
    /// those `readers` accepts. Without it, a request with an identity sees no traces (403);
    /// one without an identity always does.
    pub fn trace_readers(
        mut self,
        readers: impl Fn(&Identity) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.readers = Some(Arc::new(readers));
        self
    }

    /// The store it shows (for Genkit's reflection API to forward from too, say).
    #[must_use]
    pub fn traces(&self) -> &Traces {
        &self.traces
    }

    /// Whether `identity` may read the traces: 403 if not.
    fn reads_traces(&self, identity: Option<&Identity>) -> Result<&Traces, Failure> {
        let allowed = match identity {
            None => true,
            Some(identity) => self
                .readers
                .as_ref()
                .is_some_and(|readers| readers(identity)),
        };
        if allowed {
            Ok(&self.traces)
        } else {
            Err(Failure::new(
                StatusCode::FORBIDDEN,
                Code::Unauthorized,
                "the traces show every caller's connections: this identity may not read them \
                 (DevUi::trace_readers)",
            ))
        }
    }
}

impl From<Traces> for DevUi {
    fn from(traces: Traces) -> Self {
        Self::new(traces)
    }
}

impl fmt::Debug for DevUi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DevUi")
            .field("traces", &self.traces)
            .field("trace_readers", &self.readers.is_some())
            .finish()
    }
}

impl Protocol for DevUi {
    /// The page and its assets under `/dev/`, its JSON under `/dev/api/`, and the agents' UI
    /// message stream for its chats under `/dev/api/agent/`.
    fn routes(&self, host: &Host) -> Router {
        Router::new()
            .route("/dev", get(assets::to_index))
            .route("/dev/", get(assets::index))
            .route("/dev/{file}", get(assets::file))
            .route("/dev/api/agents", get(agents::list))
            .route(
                "/dev/api/agents/{name}/sessions/{id}/snapshots",
                get(sessions::lineage),
            )
            .route(
                "/dev/api/agents/{name}/sessions/{id}/snapshots/{snapshot}",
                get(sessions::snapshot),
            )
            .route(
                "/dev/api/agents/{name}/sessions/{id}/diff/{from}/{to}",
                get(sessions::diff),
            )
            .route(
                "/dev/api/agents/{name}/sessions/{id}/abort",
                axum::routing::post(sessions::abort),
            )
            .route("/dev/api/traces", get(traces::list))
            .route("/dev/api/traces/live", get(traces::live))
            .route("/dev/api/traces/{trace}", get(traces::trace))
            .layer(Extension(self.clone()))
            .with_state(host.clone())
            .nest("/dev/api", Chat::new().routes(host))
    }
}
