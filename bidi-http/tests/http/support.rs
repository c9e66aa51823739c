//! A server on 127.0.0.1 with the flows the tests use, and helpers to read what it answers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bidi_agent::{Agent, AgentResult, Responder};
use bidi_core::PeerGone;
use bidi_core::{ActionContext, BoxError, CauseKind, Inbound, Outbound};
use bidi_flow::{BidiFlow, Registry};
use bidi_http::{Identity, Server, Unauthorized};
use bidi_session::Session;
use tokio::sync::mpsc;

/// One chunk per word (`{prefix}{word}`), a turn end per input; the output counts inputs.
pub(crate) async fn echo(
    _ctx: ActionContext,
    prefix: String,
    mut inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<usize, BoxError> {
    let mut turns = 0;
    while let Some(msg) = inbound.recv().await {
        for word in msg.split_whitespace() {
            out.send(format!("{prefix}{word}")).await?;
        }
        out.end_turn().await?;
        turns += 1;
    }
    Ok(turns)
}

/// Streams "partial", then fails with "boom".
async fn fail(
    _ctx: ActionContext,
    _init: (),
    _inbound: Inbound<String>,
    out: Outbound<String>,
) -> Result<(), BoxError> {
    out.send("partial".to_owned()).await?;
    Err("boom".into())
}

/// Who the request's identity is.
async fn whoami(
    ctx: ActionContext,
    _init: (),
    _inbound: Inbound<()>,
    _out: Outbound<()>,
) -> Result<String, BoxError> {
    Ok(ctx
        .extensions()
        .get::<Identity>()
        .map_or("anonymous", Identity::id)
        .to_owned())
}

/// Remembers every line of its session.
pub(crate) async fn notes(
    _ctx: ActionContext,
    session: Session<Vec<String>>,
    mut inbound: Inbound<String>,
    out: Responder<String>,
) -> Result<AgentResult<usize>, BoxError> {
    while let Some(line) = inbound.recv().await {
        let count = session
            .update(|lines| {
                lines.push(line.clone());
                lines.len()
            })
            .await?;
        out.send(format!("{count}")).await?;
        out.end_turn().await?;
    }
    Ok(AgentResult::new(session.state().len()))
}

/// What the `forever` flow reports: how many chunks it sent, and how it ended.
#[derive(Clone, Default)]
pub(crate) struct Probe {
    pub(crate) sent: Arc<AtomicUsize>,
    pub(crate) ended: Option<mpsc::UnboundedSender<String>>,
}

impl Probe {
    pub(crate) fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }

    /// Waits until `forever`'s count stops moving (its reader's buffers are full), checks that
    /// it stays put, and returns it.
    pub(crate) async fn stalled(&self) -> usize {
        let mut last = usize::MAX;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let sent = self.sent();
            if sent == last {
                break;
            }
            last = sent;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(self.sent(), last, "the action ran ahead of its reader");
        assert!(last < 2_000, "{last} chunks of 64 KiB buffered");
        last
    }
}

/// The flows, with `probe` watching `/bidi-flow/forever` (chunks of `size` bytes until
/// cancelled; reports its cancellation's cause) and `/bidi-flow/mute` (never answers; takes no
/// input).
pub(crate) fn registry(probe: &Probe) -> Registry {
    let registry = Registry::new();
    registry.register(BidiFlow::new("echo", echo)).unwrap();
    registry.register(BidiFlow::new("fail", fail)).unwrap();
    registry.register(BidiFlow::new("whoami", whoami)).unwrap();
    registry
        .register(Agent::builder("notes").build(notes).into_flow())
        .unwrap();
    let forever = probe.clone();
    registry
        .register(BidiFlow::new(
            "forever",
            move |ctx: ActionContext, size: usize, _inbound: Inbound<()>, out: Outbound<String>| {
                let probe = forever.clone();
                async move {
                    let chunk = "x".repeat(size);
                    let cause = loop {
                        tokio::select! {
                            cause = ctx.cancelled() => break cause,
                            sent = out.send(chunk.clone()) => match sent {
                                Ok(()) => { probe.sent.fetch_add(1, Ordering::SeqCst); }
                                Err(_) => break ctx.cancelled().await,
                            },
                        }
                    };
                    if let Some(ended) = &probe.ended {
                        let how = match (cause.kind(), cause.downcast_ref::<PeerGone>()) {
                            (_, Some(PeerGone::Disconnected)) => "disconnected".to_owned(),
                            (CauseKind::Dropped, _) => "dropped".to_owned(),
                            _ => cause.to_string(),
                        };
                        let _ = ended.send(how);
                    }
                    Ok::<_, BoxError>(())
                }
            },
        ))
        .unwrap();
    let mute = probe.clone();
    registry
        .register(BidiFlow::new(
            "mute",
            move |ctx: ActionContext,
                  _init: (),
                  _inbound: Inbound<String>,
                  _out: Outbound<String>| {
                let probe = mute.clone();
                async move {
                    let cause = ctx.cancelled().await;
                    if let Some(ended) = &probe.ended {
                        let _ = ended.send(cause.to_string());
                    }
                    Ok::<_, BoxError>(())
                }
            },
        ))
        .unwrap();
    registry
}

/// Serves `server` on a free port of 127.0.0.1, on this runtime.
pub(crate) async fn start(server: Server) -> SocketAddr {
    let bound = server
        .addr("127.0.0.1:0".parse().unwrap())
        .bind()
        .await
        .unwrap();
    let addr = bound.local_addr().unwrap();
    tokio::spawn(bound.serve());
    addr
}

/// A server for `registry` with default limits.
pub(crate) async fn serve(registry: Registry) -> SocketAddr {
    start(Server::new(registry)).await
}

pub(crate) fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

/// Waits until the runtime's alive tasks drop to `count` (the server's own tasks).
pub(crate) async fn settle(count: usize) {
    let metrics = tokio::runtime::Handle::current().metrics();
    for _ in 0..500 {
        if metrics.num_alive_tasks() <= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{} task(s) alive, expected {count}",
        metrics.num_alive_tasks()
    );
}

/// `server` behind auth: `Bearer alice` is alice, `Bearer bob` is bob, anything else is refused.
pub(crate) fn alice_and_bob(server: Server) -> Server {
    server.auth(|headers| async move {
        match headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
        {
            Some("Bearer alice") => Ok(Identity::new("alice")),
            Some("Bearer bob") => Ok(Identity::new("bob")),
            _ => Err(Unauthorized::new("a bearer token is required")),
        }
    })
}
