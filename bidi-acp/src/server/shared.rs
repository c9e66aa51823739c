//! What the reader and the tasks it starts share: the sessions open on the connection, the
//! one line writer, and our own requests waiting for the client's answer.
//!
//! Our requests (permission requests, the editor's files and terminals) go through one table
//! of pending ids, `Shared::request`; all of them fail when the client's input ends.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol_schema::v1::{
    CLIENT_METHOD_NAMES, ClientCapabilities, Error, Implementation, RequestId, SessionId,
    SessionNotification, SessionUpdate,
};
use futures_util::future::join_all;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio::sync::{Semaphore, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Backend, MAX_REQUESTS};
use crate::codec;
use crate::editor::Offers;
use crate::mcp::Servers;
use crate::policy::Rules;
use crate::turn::{Idle, Live};

type Sink = Pin<Box<dyn AsyncWrite + Send>>;

pub(crate) struct Shared {
    pub(crate) agent: Backend,
    pub(super) info: Implementation,
    pub(crate) rules: Rules,
    out: Writer,
    sessions: Mutex<HashMap<Arc<str>, Slot>>,
    pub(crate) pending: Pending,
    /// The number of the last prompt turn started on the connection.
    pub(crate) turns: AtomicU64,
    /// The sessions being opened (a `session/new` or a `session/load` of a session not open
    /// here runs): with the open ones, within the bound. Changed under the sessions' lock,
    /// but for a failed opening's place given back (see [`Place`](super::session::Place)).
    pub(super) opening: AtomicUsize,
    /// Room for the request tasks running: see [`room`](super::reader::room).
    pub(super) requests: Arc<Semaphore>,
    /// Cancelled when the client is gone: every turn's token is a child of it.
    pub(crate) stop: CancellationToken,
    /// The sessions whose slot keeps their agent connection; locked after `sessions`.
    pub(crate) idle: Mutex<Idle>,
    /// What the client offers of its files and terminals, as `initialize` said.
    offers: Mutex<Offers>,
}

/// A session open on this connection.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The running prompt turn's cancellation, if one runs.
    pub(crate) running: Option<CancellationToken>,
    /// The running (or last) prompt turn's number, unique on the connection: a turn that ends
    /// after its session was closed and opened again leaves the new one's turn alone.
    pub(crate) turn: u64,
    /// A `session/load` of it runs: no prompt turn may start.
    pub(crate) loading: bool,
    /// The current mode: an index into the server's modes.
    pub(crate) mode: usize,
    /// The session's working directory, which relative paths in tool arguments are against.
    pub(crate) cwd: PathBuf,
    /// The tools the user allowed (`true`) or rejected (`false`) for the rest of the session.
    pub(crate) always: HashMap<String, bool>,
    /// The MCP servers the client named for the session, running.
    pub(crate) mcp: Servers,
    /// The session's agent connection, kept from its last prompt turn for the next one; the
    /// running turn holds it meanwhile.
    pub(crate) agent: Option<Live>,
}

impl Slot {
    pub(super) fn new(cwd: PathBuf, mode: usize) -> Self {
        Self {
            running: None,
            turn: 0,
            loading: false,
            mode,
            cwd,
            always: HashMap::new(),
            mcp: Servers::default(),
            agent: None,
        }
    }
}

impl Shared {
    pub(crate) fn new(
        agent: Backend,
        info: Implementation,
        rules: Rules,
        sink: Sink,
    ) -> (Arc<Self>, CancellationToken) {
        let stop = CancellationToken::new();
        let shared = Arc::new(Self {
            agent,
            info,
            rules,
            out: Writer {
                inner: tokio::sync::Mutex::new((sink, Vec::new())),
                stop: stop.clone(),
            },
            sessions: Mutex::new(HashMap::new()),
            pending: Pending::default(),
            turns: AtomicU64::new(0),
            opening: AtomicUsize::new(0),
            requests: Arc::new(Semaphore::new(MAX_REQUESTS)),
            stop: stop.clone(),
            idle: Mutex::default(),
            offers: Mutex::default(),
        });
        (shared, stop)
    }

    /// Stops every session's agent connection and MCP servers, and waits for them to end.
    pub(super) async fn close_sessions(&self) {
        let (agents, servers) = {
            let mut sessions = self.sessions();
            let agents = self.take_agents(&mut sessions);
            let servers: Vec<Servers> = sessions
                .values_mut()
                .map(|slot| std::mem::take(&mut slot.mcp))
                .collect();
            (agents, servers)
        };
        join_all(agents.into_iter().map(Live::stop)).await;
        for mut servers in servers {
            servers.close().await;
        }
    }

    pub(crate) fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Slot>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the client offers of its files and terminals: what it advertised in `initialize`,
    /// if the server offers the agent editor tools at all.
    pub(crate) fn offers(&self) -> Offers {
        *self.offers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes note of the client's capabilities, from its `initialize`.
    pub(super) fn initialized(&self, capabilities: &ClientCapabilities) {
        if self.rules.editor {
            *self.offers.lock().unwrap_or_else(PoisonError::into_inner) = Offers::of(capabilities);
        }
    }

    /// Whether the client is gone.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    pub(crate) async fn respond<R: Serialize>(&self, id: RequestId, result: Result<R, Error>) {
        // A failed write stops everything already (see `Writer::send`).
        let _ = self.out.send(&codec::response_message(id, result)).await;
    }

    pub(crate) async fn update(
        &self,
        session_id: &SessionId,
        update: SessionUpdate,
    ) -> io::Result<()> {
        let params = SessionNotification::new(session_id.clone(), update);
        self.out
            .send(&codec::notification(
                CLIENT_METHOD_NAMES.session_update,
                &params,
            ))
            .await
    }

    /// Sends a request to the client and waits for its answer; its `_meta` carries the
    /// current trace context (`traceparent`), when the application's propagator writes one.
    ///
    /// # Errors
    ///
    /// The client's error; or, when the client went away before answering, an internal error
    /// whose data says `{"reason": "incoming_transport_closed"}`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future forgets the request: a later answer is ignored.
    pub(crate) async fn request(&self, method: &str, mut params: Value) -> Result<Value, Error> {
        // The span asking (a tool call's) goes with the request, in its `_meta`.
        let mut trace = serde_json::Map::new();
        bidi_flow::inject_context(&mut trace);
        if !trace.is_empty()
            && let Value::Object(params) = &mut params
            && let Value::Object(meta) = params.entry("_meta").or_insert_with(|| json!({}))
        {
            for (key, value) in trace {
                meta.entry(key).or_insert(value);
            }
        }
        let (id, answer) = self.pending.register().ok_or_else(closed)?;
        let _forget = Forget(&self.pending, id.clone());
        if self
            .out
            .send(&codec::request(id.clone(), method, params))
            .await
            .is_err()
        {
            return Err(closed());
        }
        answer.await.unwrap_or_else(|_| Err(closed()))
    }
}

/// Forgets a request of ours when its waiter is gone.
struct Forget<'a>(&'a Pending, RequestId);

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.0.forget(&self.1);
    }
}

/// The error of a request the client can no longer answer.
pub(super) fn closed() -> Error {
    Error::internal_error().data(json!({ "reason": "incoming_transport_closed" }))
}

/// The writer all tasks share: one line at a time, into a buffer reused from line to line.
struct Writer {
    inner: tokio::sync::Mutex<(Sink, Vec<u8>)>,
    stop: CancellationToken,
}

impl Writer {
    /// Writes one message as a line. A failed write means nobody reads: everything stops.
    async fn send(&self, message: &impl Serialize) -> io::Result<()> {
        let mut inner = self.inner.lock().await;
        let (sink, buf) = &mut *inner;
        buf.clear();
        if let Err(error) = codec::encode(message, buf) {
            log!("a message could not be encoded, not sent: {error}");
            return Err(io::Error::new(io::ErrorKind::InvalidData, error));
        }
        let written = match sink.write_all(buf).await {
            Ok(()) => sink.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = &written {
            if !self.stop.is_cancelled() {
                log!("the client's input closed ({error}): stopping");
            }
            self.stop.cancel();
        }
        written
    }
}

/// Our own requests waiting for the client's answer. Closed (`None`) once the client is gone:
/// nothing can be answered any more.
pub(crate) struct Pending {
    next: AtomicU64,
    waiting: Mutex<Option<HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>>>,
}

impl Default for Pending {
    fn default() -> Self {
        Self {
            next: AtomicU64::new(0),
            waiting: Mutex::new(Some(HashMap::new())),
        }
    }
}

impl Pending {
    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<HashMap<RequestId, oneshot::Sender<Result<Value, Error>>>>>
    {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh id and where its answer will arrive; `None` once the client is gone.
    fn register(&self) -> Option<(RequestId, oneshot::Receiver<Result<Value, Error>>)> {
        let mut waiting = self.waiting();
        let waiting = waiting.as_mut()?;
        let id = RequestId::Str(format!(
            "bidi-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        waiting.insert(id.clone(), tx);
        Some((id, rx))
    }

    fn forget(&self, id: &RequestId) {
        if let Some(waiting) = self.waiting().as_mut() {
            waiting.remove(id);
        }
    }

    /// Hands the client's answer to whoever waits for it; `false` if nobody does.
    pub(super) fn resolve(&self, id: &RequestId, result: Result<Value, Error>) -> bool {
        let sender = self
            .waiting()
            .as_mut()
            .and_then(|waiting| waiting.remove(id));
        match sender {
            Some(sender) => {
                // The requester may have stopped waiting: the answer is then dropped.
                let _ = sender.send(result);
                true
            }
            None => false,
        }
    }

    /// The client is gone: every request waiting fails, and so does every later one.
    pub(crate) fn fail_all(&self) {
        let waiting = self.waiting().take();
        for (_, sender) in waiting.into_iter().flatten() {
            let _ = sender.send(Err(closed()));
        }
    }
}
