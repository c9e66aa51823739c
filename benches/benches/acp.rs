//! `bidi-acp` against an agent written with the official ACP Rust SDK (`agent-client-protocol`)
//! that sends the same updates, and against raw NDJSON lines, same run. One SDK client drives
//! both agents; every side is in this process, on the benchmarks' two-worker runtime, each
//! connection two `tokio::io::duplex` pipes.
//!
//! - `acp_stream`: one prompt turn streaming 100,000 `agent_message_chunk` updates; the unit is
//!   the whole turn (prompt sent, every update counted by the client, `stopReason` received),
//!   each turn on a new session.
//! - `acp_round_trip`: prompt, one chunk, `stopReason`; sessions of 100 turns (a bidi session's
//!   history grows with each turn), or a new session per turn (`*_fresh_session`).
//!
//! The rows: `bidi_acp` (an `LlmAgent` whose model streams the deltas, served by
//! `bidi_acp::Server`) and `sdk_agent` (a prompt handler sending the notifications), both to the
//! SDK client; `raw_lines`, a loop writing the same lines to a reader parsing each with
//! serde_json (the floor); and, to say where the time goes, `raw_agent_to_sdk_client` (the SDK
//! client's own ceiling), `bidi_acp_to_raw_client` (bidi's side alone) and
//! `agent_turn_without_acp` (the same `LlmAgent` turn run directly, as the server runs it).
//!
//! ```sh
//! cargo bench -p benches --bench acp
//! BIDI_BENCH_UPDATES=10000 BIDI_BENCH_TURNS=10 cargo bench -p benches --bench acp
//! ```

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, ContentBlock, ContentChunk, InitializeRequest, InitializeResponse,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionId,
    SessionNotification, SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use benches::{Words, on_worker, runtime};
use bidi_acp::Server;
use bidi_agent::AgentInit;
use bidi_core::ConnectOptions;
use bidi_llm::{AgentEvent, LlmAgent, LlmSession, Policy, TurnInput, UserMessage, execute};
use bidi_session::Session;
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::oneshot;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// Updates in the streamed turn: 100,000, or `BIDI_BENCH_UPDATES`.
static UPDATES: LazyLock<u64> = LazyLock::new(|| {
    std::env::var("BIDI_BENCH_UPDATES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
});

/// The capacity of each pipe.
const PIPE: usize = 1 << 20;

/// What every chunk says.
const WORD: &str = "word ";

/// An `LlmAgent` whose model streams `n` deltas.
fn words_agent(n: u64) -> LlmAgent {
    LlmAgent::builder("words", Words(n)).build()
}

/// Serves a [`words_agent`] with `bidi-acp`. The row with a new session per turn opens as
/// many sessions on its connection as criterion runs turns, and never closes one: no cap.
fn bidi_agent(n: u64, input: DuplexStream, output: DuplexStream) {
    let server = Server::new(words_agent(n)).max_sessions(usize::MAX);
    tokio::spawn(server.serve(input, output));
}

/// Serves an agent written with the SDK whose prompt turns send `n` chunks of [`WORD`].
fn sdk_agent(n: u64, input: DuplexStream, output: DuplexStream) {
    let sessions = AtomicU64::new(0);
    let agent = Agent
        .v1()
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                responder.respond(
                    InitializeResponse::new(request.protocol_version)
                        .agent_capabilities(AgentCapabilities::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_request: NewSessionRequest, responder, _cx| {
                let id = sessions.fetch_add(1, Ordering::Relaxed);
                responder.respond(NewSessionResponse::new(format!("sdk-{id}")))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest,
                        responder: agent_client_protocol::Responder<
                PromptResponse,
                agent_client_protocol::V1,
            >,
                        cx: ConnectionTo<Client>| {
                for _ in 0..n {
                    cx.send_notification(SessionNotification::new(
                        request.session_id.clone(),
                        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(
                            TextContent::new(WORD),
                        ))),
                    ))?;
                }
                responder.respond(PromptResponse::new(StopReason::EndTurn))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(ByteStreams::new(output.compat_write(), input.compat()));
    tokio::spawn(agent);
}

/// An SDK client, initialized, counting the `agent_message_chunk`s it receives.
#[derive(Clone)]
struct Peer {
    cx: ConnectionTo<Agent>,
    chunks: Arc<AtomicU64>,
}

impl Peer {
    /// Connects to the agent `serve` starts on the other ends of two fresh pipes.
    async fn connect(serve: impl FnOnce(DuplexStream, DuplexStream)) -> Self {
        let (to_agent, agent_in) = tokio::io::duplex(PIPE);
        let (agent_out, from_agent) = tokio::io::duplex(PIPE);
        serve(agent_in, agent_out);
        let chunks = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&chunks);
        let (tx, rx) = oneshot::channel();
        let client = Client
            .v1()
            .on_receive_notification(
                async move |notification: SessionNotification, _cx| {
                    if matches!(notification.update, SessionUpdate::AgentMessageChunk(_)) {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .connect_with(
                ByteStreams::new(to_agent.compat_write(), from_agent.compat()),
                async move |cx: ConnectionTo<Agent>| {
                    let _ = tx.send(cx);
                    // The connection stays open for the whole benchmark.
                    std::future::pending::<Result<(), agent_client_protocol::Error>>().await
                },
            );
        tokio::spawn(client);
        let cx = rx.await.unwrap();
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
            .block_task()
            .await
            .unwrap();
        Self { cx, chunks }
    }

    async fn new_session(&self) -> SessionId {
        self.cx
            .send_request(NewSessionRequest::new("/tmp"))
            .block_task()
            .await
            .unwrap()
            .session_id
    }

    /// One prompt turn; returns how many chunks arrived before its answer.
    async fn prompt(&self, session: &SessionId) -> u64 {
        let before = self.chunks.load(Ordering::Relaxed);
        let answer = self
            .cx
            .send_request(PromptRequest::new(
                session.clone(),
                vec![ContentBlock::Text(TextContent::new("go"))],
            ))
            .block_task()
            .await
            .unwrap();
        assert_eq!(answer.stop_reason, StopReason::EndTurn);
        self.chunks.load(Ordering::Relaxed) - before
    }
}

// ---------------------------------------------------------------------------------------------
// The raw baseline: the same lines, written by a hand-written loop and parsed with serde_json.

#[derive(Serialize)]
struct Line<'a, P> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Update<'a> {
    session_id: &'a str,
    update: Chunk<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    session_update: &'static str,
    content: Text<'a>,
}

#[derive(Serialize)]
struct Text<'a> {
    r#type: &'static str,
    text: &'a str,
}

/// Appends the `session/update` line of one chunk to `buf`.
fn chunk_line(buf: &mut Vec<u8>) {
    let line = Line::<Update<'_>> {
        jsonrpc: "2.0",
        id: None,
        method: Some("session/update"),
        params: Some(Update {
            session_id: "raw-0",
            update: Chunk {
                session_update: "agent_message_chunk",
                content: Text {
                    r#type: "text",
                    text: WORD,
                },
            },
        }),
        result: None,
    };
    serde_json::to_writer(&mut *buf, &line).unwrap();
    buf.push(b'\n');
}

/// Appends the answer `result` to request `id` to `buf`.
fn answer_line(id: &Value, result: &Value, buf: &mut Vec<u8>) {
    let line = Line::<()> {
        jsonrpc: "2.0",
        id: Some(id),
        method: None,
        params: None,
        result: Some(result),
    };
    serde_json::to_writer(&mut *buf, &line).unwrap();
    buf.push(b'\n');
}

/// Writes `n` chunk lines then an answer, each line serialized and written on its own.
async fn raw_turn(n: u64, id: &Value, out: &mut DuplexStream, buf: &mut Vec<u8>) {
    for _ in 0..n {
        buf.clear();
        chunk_line(buf);
        out.write_all(buf).await.unwrap();
    }
    buf.clear();
    answer_line(id, &serde_json::json!({"stopReason": "end_turn"}), buf);
    out.write_all(buf).await.unwrap();
}

/// Reads lines, each parsed, up to the answer; returns how many chunks came before it, and
/// the answer's result.
async fn raw_read_turn(lines: &mut tokio::io::Lines<BufReader<DuplexStream>>) -> (u64, Value) {
    let mut chunks = 0;
    while let Some(line) = lines.next_line().await.unwrap() {
        let mut message: Value = serde_json::from_str(&line).unwrap();
        if message.get("method").is_none() {
            let result = message["result"].take();
            assert!(!result.is_null(), "an error: {line}");
            return (chunks, result);
        }
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            chunks += 1;
        }
    }
    panic!("the agent stopped");
}

/// A raw agent: answers every prompt line with `n` chunk lines and an answer line (and
/// `initialize` and `session/new` as an SDK client expects).
fn raw_agent(n: u64, input: DuplexStream, mut output: DuplexStream) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(input).lines();
        let mut buf = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            let request: Value = serde_json::from_str(&line).unwrap();
            let id = &request["id"];
            let result = match request["method"].as_str() {
                Some("initialize") => {
                    serde_json::json!({"protocolVersion": 1, "agentCapabilities": {}})
                }
                Some("session/new") => serde_json::json!({"sessionId": "raw-0"}),
                _ => {
                    raw_turn(n, id, &mut output, &mut buf).await;
                    continue;
                }
            };
            buf.clear();
            answer_line(id, &result, &mut buf);
            output.write_all(&buf).await.unwrap();
        }
    });
}

/// A raw client: writes each request as a line, parses every line it reads with serde_json.
struct RawPeer {
    out: DuplexStream,
    lines: tokio::io::Lines<BufReader<DuplexStream>>,
    next: u64,
}

impl RawPeer {
    /// Connects to the agent `serve` starts on the other ends of two fresh pipes.
    async fn connect(serve: impl FnOnce(DuplexStream, DuplexStream)) -> Self {
        let (out, agent_in) = tokio::io::duplex(PIPE);
        let (agent_out, input) = tokio::io::duplex(PIPE);
        serve(agent_in, agent_out);
        let mut peer = Self {
            out,
            lines: BufReader::new(input).lines(),
            next: 0,
        };
        peer.request("initialize", serde_json::json!({"protocolVersion": 1}))
            .await;
        peer
    }

    /// Sends a request; returns the chunks that came before its answer, and the answer.
    async fn request(&mut self, method: &str, params: Value) -> (u64, Value) {
        self.next += 1;
        let line = serde_json::json!({
            "jsonrpc": "2.0", "id": self.next, "method": method, "params": params,
        });
        let mut line = serde_json::to_vec(&line).unwrap();
        line.push(b'\n');
        self.out.write_all(&line).await.unwrap();
        raw_read_turn(&mut self.lines).await
    }

    async fn new_session(&mut self) -> Value {
        let params = serde_json::json!({"cwd": "/tmp", "mcpServers": []});
        let (_, mut result) = self.request("session/new", params).await;
        result["sessionId"].take()
    }

    async fn prompt(&mut self, session: &Value) -> u64 {
        let params = serde_json::json!({
            "sessionId": session, "prompt": [{"type": "text", "text": "go"}],
        });
        let (chunks, result) = self.request("session/prompt", params).await;
        assert_eq!(result["stopReason"], "end_turn");
        chunks
    }
}

/// As [`turns`], for a raw client.
async fn raw_turns(peer: &mut RawPeer, iters: u64, n: u64, per_session: u64) -> Duration {
    let mut elapsed = Duration::ZERO;
    let mut session = peer.new_session().await;
    for turn in 0..iters {
        if turn > 0 && turn % per_session == 0 {
            session = peer.new_session().await;
        }
        let start = Instant::now();
        let chunks = peer.prompt(&session).await;
        elapsed += start.elapsed();
        assert_eq!(chunks, n);
    }
    elapsed
}

// ---------------------------------------------------------------------------------------------

/// Prompt turns per session in `acp_round_trip`: 100, or `BIDI_BENCH_TURNS`. A session's
/// history grows by two messages a turn; bidi-acp keeps the session's agent connection from one
/// prompt to the next, so a turn neither loads nor saves the whole of it.
static TURNS: LazyLock<u64> = LazyLock::new(|| {
    std::env::var("BIDI_BENCH_TURNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
});

/// Times `iters` prompt turns of `n` chunks each, a new session every `per_session` turns
/// (opened outside the timed part).
async fn turns(peer: Peer, iters: u64, n: u64, per_session: u64) -> Duration {
    let mut elapsed = Duration::ZERO;
    let mut session = peer.new_session().await;
    for turn in 0..iters {
        if turn > 0 && turn % per_session == 0 {
            session = peer.new_session().await;
        }
        let start = Instant::now();
        let chunks = peer.prompt(&session).await;
        elapsed += start.elapsed();
        assert_eq!(chunks, n);
    }
    elapsed
}

/// Times `iters` turns of `agent` run directly, without ACP, the way the server runs each
/// prompt turn: on one connection per session, opened by its first turn; sessions as in
/// [`turns`].
async fn agent_turns(agent: LlmAgent, iters: u64, n: u64, per_session: u64) -> Duration {
    static SESSIONS: AtomicU64 = AtomicU64::new(0);
    let new_session = async || {
        let id = format!("direct-{}", SESSIONS.fetch_add(1, Ordering::Relaxed));
        let store = Arc::clone(agent.agent().store());
        Session::create(store, &id, LlmSession::default())
            .await
            .unwrap();
        id
    };
    let connect = |session: &str| {
        let options = ConnectOptions::new().extension(Policy::new());
        agent.connect_with(AgentInit::new().resume(session.to_owned()), options)
    };
    let mut elapsed = Duration::ZERO;
    let mut session = new_session().await;
    let mut conn = None;
    for turn in 0..iters {
        if turn > 0 && turn % per_session == 0 {
            session = new_session().await;
            conn = None;
        }
        let start = Instant::now();
        let conn = conn.get_or_insert_with(|| connect(&session));
        let mut run = execute(conn, TurnInput::User(UserMessage::new("go")))
            .await
            .unwrap();
        let mut chunks = 0;
        while let Some(event) = run.next().await {
            if matches!(event.unwrap(), AgentEvent::TextDelta { .. }) {
                chunks += 1;
            }
        }
        run.result().await.unwrap();
        elapsed += start.elapsed();
        assert_eq!(chunks, n);
    }
    elapsed
}

/// A [`RawPeer`] the benchmarks share, connected on `rt`.
fn raw_peer(
    rt: &tokio::runtime::Runtime,
    serve: impl FnOnce(DuplexStream, DuplexStream) + Send + 'static,
) -> Arc<tokio::sync::Mutex<RawPeer>> {
    let peer = on_worker(rt, RawPeer::connect(serve));
    Arc::new(tokio::sync::Mutex::new(peer))
}

/// Times [`raw_turns`] of a shared [`RawPeer`] on a worker of `rt`.
fn raw_sample(
    rt: &tokio::runtime::Runtime,
    peer: &Arc<tokio::sync::Mutex<RawPeer>>,
    iters: u64,
    n: u64,
    per_session: u64,
) -> Duration {
    let peer = Arc::clone(peer);
    on_worker(rt, async move {
        raw_turns(&mut *peer.lock().await, iters, n, per_session).await
    })
}

fn acp(c: &mut Criterion) {
    let rt = runtime();
    let n = *UPDATES;

    let bidi = on_worker(&rt, Peer::connect(move |i, o| bidi_agent(n, i, o)));
    let sdk = on_worker(&rt, Peer::connect(move |i, o| sdk_agent(n, i, o)));
    let raw_to_sdk = on_worker(&rt, Peer::connect(move |i, o| raw_agent(n, i, o)));
    let raw = raw_peer(&rt, move |i, o| raw_agent(n, i, o));
    let bidi_to_raw = raw_peer(&rt, move |i, o| bidi_agent(n, i, o));
    let agent = words_agent(n);

    let mut group = c.benchmark_group("acp_stream");
    group.throughput(Throughput::Elements(n));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("bidi_acp", |b| {
        b.iter_custom(|iters| on_worker(&rt, turns(bidi.clone(), iters, n, 1)));
    });
    group.bench_function("sdk_agent", |b| {
        b.iter_custom(|iters| on_worker(&rt, turns(sdk.clone(), iters, n, 1)));
    });
    group.bench_function("raw_lines", |b| {
        b.iter_custom(|iters| raw_sample(&rt, &raw, iters, n, 1));
    });
    group.bench_function("raw_agent_to_sdk_client", |b| {
        b.iter_custom(|iters| on_worker(&rt, turns(raw_to_sdk.clone(), iters, n, 1)));
    });
    group.bench_function("bidi_acp_to_raw_client", |b| {
        b.iter_custom(|iters| raw_sample(&rt, &bidi_to_raw, iters, n, 1));
    });
    group.bench_function("agent_turn_without_acp", |b| {
        b.iter_custom(|iters| on_worker(&rt, agent_turns(agent.clone(), iters, n, 1)));
    });
    group.finish();

    let turns_per_session = *TURNS;
    // The rows with a new session per turn have agents (and stores) of their own: in one
    // shared with the 100-turn rows, their sessions would push those long ones out of the
    // store's 1,024 as they open, and the bench would time that.
    let bidi = on_worker(&rt, Peer::connect(|i, o| bidi_agent(1, i, o)));
    let bidi_fresh = on_worker(&rt, Peer::connect(|i, o| bidi_agent(1, i, o)));
    let sdk = on_worker(&rt, Peer::connect(|i, o| sdk_agent(1, i, o)));
    let raw_to_sdk = on_worker(&rt, Peer::connect(|i, o| raw_agent(1, i, o)));
    let raw = raw_peer(&rt, |i, o| raw_agent(1, i, o));
    let bidi_to_raw = raw_peer(&rt, |i, o| bidi_agent(1, i, o));
    let agent = words_agent(1);
    let agent_fresh = words_agent(1);

    let mut group = c.benchmark_group("acp_round_trip");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("bidi_acp", |b| {
        b.iter_custom(|iters| on_worker(&rt, turns(bidi.clone(), iters, 1, turns_per_session)));
    });
    group.bench_function("bidi_acp_fresh_session", |b| {
        b.iter_custom(|iters| on_worker(&rt, turns(bidi_fresh.clone(), iters, 1, 1)));
    });
    group.bench_function("sdk_agent", |b| {
        b.iter_custom(|iters| on_worker(&rt, turns(sdk.clone(), iters, 1, turns_per_session)));
    });
    group.bench_function("raw_lines", |b| {
        b.iter_custom(|iters| raw_sample(&rt, &raw, iters, 1, turns_per_session));
    });
    group.bench_function("raw_agent_to_sdk_client", |b| {
        b.iter_custom(|iters| {
            on_worker(&rt, turns(raw_to_sdk.clone(), iters, 1, turns_per_session))
        });
    });
    group.bench_function("bidi_acp_to_raw_client_fresh_session", |b| {
        b.iter_custom(|iters| raw_sample(&rt, &bidi_to_raw, iters, 1, 1));
    });
    group.bench_function("agent_turn_without_acp", |b| {
        b.iter_custom(|iters| {
            on_worker(&rt, agent_turns(agent.clone(), iters, 1, turns_per_session))
        });
    });
    group.bench_function("agent_turn_without_acp_fresh_session", |b| {
        b.iter_custom(|iters| on_worker(&rt, agent_turns(agent_fresh.clone(), iters, 1, 1)));
    });
    group.finish();
}

/// A peer driving prompt turns on sessions of `per_session` turns, across calls.
struct Driven {
    peer: Peer,
    per_session: u64,
    session: Option<SessionId>,
    turns: u64,
}

impl Driven {
    fn new(peer: Peer, per_session: u64) -> Self {
        Self {
            peer,
            per_session,
            session: None,
            turns: 0,
        }
    }

    /// Times one prompt turn (opening its session, when it takes a new one, is not timed).
    async fn turn(&mut self) -> Duration {
        if self.turns.is_multiple_of(self.per_session) {
            self.session = Some(self.peer.new_session().await);
        }
        self.turns += 1;
        let session = self.session.as_ref().unwrap();
        let start = Instant::now();
        assert_eq!(self.peer.prompt(session).await, 1);
        start.elapsed()
    }
}

/// The round trips of bidi-acp (sessions of 100 turns, and a new session per turn) and of the
/// SDK agent in turn, prompt after prompt, and the time each took in all: on a VM whose speed
/// drifts by ±20% over minutes, ratios from turns interleaved this way are steadier than those
/// of criterion's functions, measured one after another.
fn interleaved(_c: &mut Criterion) {
    const ROUNDS: u64 = 20_000;
    let rt = runtime();
    let per_session = *TURNS;
    let totals = on_worker(&rt, async move {
        let mut peers = [
            Driven::new(Peer::connect(|i, o| bidi_agent(1, i, o)).await, per_session),
            Driven::new(Peer::connect(|i, o| bidi_agent(1, i, o)).await, 1),
            Driven::new(Peer::connect(|i, o| sdk_agent(1, i, o)).await, per_session),
        ];
        // Warm up.
        for peer in &mut peers {
            for _ in 0..1_000 {
                peer.turn().await;
            }
        }
        let mut totals = [Duration::ZERO; 3];
        for round in 0..ROUNDS {
            for step in 0..3 {
                // Each round starts with another peer, so none always goes first.
                let i = (step + round as usize) % 3;
                totals[i] += peers[i].turn().await;
            }
        }
        totals
    });
    let micros = totals.map(|total| total.as_secs_f64() * 1e6 / ROUNDS as f64);
    let [long, fresh, sdk] = micros;
    println!(
        "acp_round_trip/interleaved ({ROUNDS} rounds): bidi_acp {long:.1} µs ({:.2} of the SDK \
         agent), bidi_acp_fresh_session {fresh:.1} µs ({:.2}), sdk_agent {sdk:.1} µs",
        sdk / long,
        sdk / fresh,
    );
}

criterion_group!(benches, acp, interleaved);
criterion_main!(benches);
