//! A fault campaign: hostile clients against a `bidi-http` server in a process of its own, and
//! what the server holds before, during and after each attack (open file descriptors, threads,
//! resident memory), and how long a well-behaved client's request takes meanwhile, as a ratio
//! to the same request with no attack.
//!
//! ```sh
//! cargo bench -p benches --bench faults                  # every attack, about 1 minute
//! N=1000 cargo bench -p benches --bench faults -- vanish # one attack (a name's prefix), 1,000 clients
//! STORE=sqlite cargo bench -p benches --bench faults     # sessions in SQLite (default: memory)
//! ```
//!
//! The server (this binary, re-executed) serves, with a header and a body timeout of 1 s and an
//! idle timeout of 2 s: an `LlmAgent` `long` whose model streams 200,000 deltas of `"word "`,
//! pausing 1 ms every 50 (at least 4 s, about 11 MB of UI message stream: more than the
//! kernel's socket buffers take, so that a client that does not read holds the answer back,
//! and every attacker finds its execution mid-answer), an `LlmAgent` `probe` whose model streams 2,000
//! deltas at once (the well-behaved client's request: `POST /agent/probe/chat`, read to its
//! end), and the flows of `benches::http` (`echo` for WebSocket). The raw baseline
//! (`raw`) is an axum handler on `axum::serve` streaming the same bytes as the `long` chat's
//! answer, for the memory a vanished client leaves behind.
//!
//! The attacks, `N` clients each (default 200):
//!
//! - `slowloris`: a request head begun and never finished;
//! - `stalled_body`: a head announcing 1,000 bytes of body, and 10 of them;
//! - `idle_keepalive`: one request answered, then the connection kept open, silent;
//! - `never_read`: a chat request whose client never reads a byte of the answer (a 4 KiB
//!   receive buffer), its socket kept open;
//! - `vanish`: a chat request whose client reads 8 KiB of the answer and disconnects, all `N`
//!   at once (three rounds, to tell growth from a leak), then the same through the execute
//!   endpoint (`vanish_execute`: no copy kept for resuming clients), against `raw_vanish`, the
//!   same bytes from the raw baseline;
//! - `tee_resumer`: a chat answer read by its client while `N` resuming clients
//!   (`GET …/chat/{id}/stream`) never read; the ratio is the client's time to read the answer
//!   against the same answer with no resumers;
//! - `ws_never_read`: WebSockets (`N / 4`) sending 512 KiB inputs to `echo` (which answers each)
//!   and never reading.
//!
//! "During" is read once every attacker is in place; "after" once the server's timeouts have
//! passed (the attackers' sockets still open, but for `vanish`, whose clients are gone).

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::routing::post;
use benches::Words;
use bidi_llm::testing::Scripted;
use bidi_llm::{LlmAgent, Model, ModelEvent, ModelRequest};
use bidi_session::{MemoryStore, SessionStore, SqliteStore};
use futures_util::StreamExt as _;
use futures_util::stream::{self, BoxStream};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

/// The `long` answer: deltas, and a 1 ms pause after every `PACE` of them.
const LONG_DELTAS: u64 = 200_000;
const PACE: u64 = 50;
/// The well-behaved client's answer.
const PROBE_DELTAS: u64 = 2_000;
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const BODY_TIMEOUT: Duration = Duration::from_secs(1);
const IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an attack may take to be cut off before the campaign calls it unbounded.
const BOUND: Duration = Duration::from_secs(60);

/// A model streaming `n` deltas of `"word "`, pausing 1 ms after every [`PACE`].
#[derive(Debug, Clone, Copy)]
struct Paced(u64);

impl Model for Paced {
    fn name(&self) -> &str {
        "paced"
    }

    fn stream(&self, _request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let mut frame = Scripted::new().text("x").events().into_iter();
        let start = frame.next().into_iter();
        let _delta = frame.next();
        let n = self.0;
        let deltas = stream::unfold(0, move |i| async move {
            if i == n {
                return None;
            }
            if i > 0 && i % PACE == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Some((ModelEvent::TextDelta("word ".to_owned()), i + 1))
        });
        stream::iter(start)
            .chain(deltas)
            .chain(stream::iter(frame))
            .boxed()
    }
}

// ---------------------------------------------------------------------------------------------
// The server, in a child process.

fn serve(kind: &str) {
    let rt = benches::runtime();
    rt.block_on(async move {
        let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
        if kind == "raw" {
            let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
            println!("{}", listener.local_addr().expect("addr"));
            let app = axum::Router::new().route("/raw/chat", post(raw_chat));
            axum::serve(listener, app).await.expect("serve");
            return;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store: Arc<dyn SessionStore> = if kind == "sqlite" {
            Arc::new(
                SqliteStore::open(dir.path().join("faults.sqlite3"))
                    .await
                    .expect("sqlite"),
            )
        } else {
            Arc::new(MemoryStore::new())
        };
        let long = LlmAgent::builder("long", Paced(LONG_DELTAS))
            .store(Arc::clone(&store))
            .build();
        let probe = LlmAgent::builder("probe", Words(PROBE_DELTAS))
            .store(store)
            .build();
        let bound = bidi_http::Server::new(benches::http::registry())
            .agent(&long)
            .agent(&probe)
            .protocol(bidi_ai_sdk::Chat::new())
            .header_timeout(HEADER_TIMEOUT)
            .body_timeout(BODY_TIMEOUT)
            .idle_timeout(IDLE_TIMEOUT)
            .addr(addr)
            .bind()
            .await
            .expect("bound");
        println!("{}", bound.local_addr().expect("addr"));
        bound.serve().await.expect("serve");
    });
}

/// The raw baseline of the `long` chat: the same records, from a task of its own (as an
/// execution is), through a channel of one, to the response body.
async fn raw_chat() -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        let start = Bytes::from_static(
            b"data: {\"type\":\"start\"}\n\ndata: {\"type\":\"start-step\"}\n\n\
              data: {\"type\":\"text-start\",\"id\":\"t1\"}\n\n",
        );
        if tx.send(start).await.is_err() {
            return;
        }
        for i in 0..LONG_DELTAS {
            if i > 0 && i % PACE == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let delta = Bytes::from_static(
                b"data: {\"type\":\"text-delta\",\"id\":\"t1\",\"delta\":\"word \"}\n\n",
            );
            if tx.send(delta).await.is_err() {
                return;
            }
        }
        let _ = tx
            .send(Bytes::from_static(
                b"data: {\"type\":\"finish\"}\n\ndata: [DONE]\n\n",
            ))
            .await;
    });
    Body::from_stream(tokio_stream_from(rx).map(Ok::<_, std::convert::Infallible>))
}

fn tokio_stream_from(
    rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
}

struct Server {
    child: Child,
    addr: SocketAddr,
    /// Whether it serves the well-behaved client's agent (the raw baseline does not).
    probe: bool,
}

impl Server {
    fn start(kind: &str) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(exe)
            .args(["serve", kind])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the server process");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server's address");
        let addr = line.trim().parse().expect("an address");
        Self {
            child,
            addr,
            probe: kind != "raw",
        }
    }

    fn snap(&self) -> Snap {
        let pid = self.child.id();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(Iterator::count)
            .unwrap_or(0);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0)
        };
        // utime and stime, the 14th and 15th fields, after the command's closing parenthesis.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ticks: u64 = stat
            .rsplit_once(')')
            .map(|(_, rest)| {
                rest.split_whitespace()
                    .skip(11)
                    .take(2)
                    .filter_map(|t| t.parse::<u64>().ok())
                    .sum()
            })
            .unwrap_or(0);
        Snap {
            fds,
            threads: field("Threads:"),
            rss: field("VmRSS:") * 1024,
            cpu: Duration::from_millis(ticks * 10),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone, Copy)]
struct Snap {
    fds: usize,
    threads: usize,
    rss: usize,
    /// The CPU time the server used so far.
    cpu: Duration,
}

impl Snap {
    fn show(self) -> String {
        format!(
            "{:>5} {:>4} {:>7.1}",
            self.fds,
            self.threads,
            self.rss as f64 / f64::from(1 << 20)
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The clients.

fn chat_body(id: &str) -> String {
    json!({
        "id": id, "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
    })
    .to_string()
}

/// A connection with a small receive buffer, so that a client that does not read holds the
/// server's writes back at once.
async fn connect_small(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    let _ = socket.set_recv_buffer_size(4096);
    socket.connect(addr).await.expect("connect")
}

/// A connection with a whole request written on it.
async fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> TcpStream {
    let mut tcp = connect_small(addr).await;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("head");
    tcp.write_all(body.as_bytes()).await.expect("body");
    tcp
}

/// Reads until `n` bytes came, or the server closed, within [`BOUND`]; what came.
async fn read_at_least(tcp: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(BOUND, async {
        let mut buf = [0; 8192];
        while seen.len() < n {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => seen.extend_from_slice(&buf[..k]),
            }
        }
    })
    .await;
    seen
}

/// Whether the server closes `tcp` within [`BOUND`] (reading what it sends meanwhile).
async fn closed_by_server(tcp: &mut TcpStream) -> bool {
    read_at_least(tcp, usize::MAX).await;
    matches!(
        tokio::time::timeout(Duration::from_millis(50), tcp.read(&mut [0; 1])).await,
        Ok(Ok(0) | Err(_))
    )
}

static PROBES: AtomicUsize = AtomicUsize::new(0);

/// The well-behaved client: one chat request on a new session, read to its end.
async fn probe(addr: SocketAddr) -> Duration {
    let id = format!("probe-{}", PROBES.fetch_add(1, Ordering::Relaxed));
    let start = Instant::now();
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let body = chat_body(&id);
    let head = format!(
        "POST /agent/probe/chat HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("request");
    let seen = read_at_least(&mut tcp, usize::MAX).await;
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&seen);
    assert!(text.starts_with("HTTP/1.1 200"), "probe: {text:.200}");
    assert!(text.contains("[DONE]"), "probe: the answer did not end");
    took
}

/// The median of `n` probes.
async fn probes(addr: SocketAddr, n: usize) -> Duration {
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        took.push(probe(addr).await);
    }
    took.sort();
    took[n / 2]
}

struct Row {
    attack: String,
    n: usize,
    before: Snap,
    during: Snap,
    after: Snap,
    /// The well-behaved client's median time during the attack, against before it.
    latency: f64,
    /// What the attack's clients saw: how many were cut off / answered as they should be.
    outcome: String,
}

impl Row {
    fn print_header() {
        println!(
            "{:<16} {:>5} | {:>5} {:>4} {:>7} | {:>5} {:>4} {:>7} | {:>5} {:>4} {:>7} | {:>7} | {:>6} | outcome",
            "attack",
            "n",
            "fds",
            "thr",
            "RSS MiB",
            "fds",
            "thr",
            "RSS MiB",
            "fds",
            "thr",
            "RSS MiB",
            "latency",
            "CPU s"
        );
        println!(
            "{:<16} {:>5} | {:^18} | {:^18} | {:^18} | {:>7} | {:>6} |",
            "", "", "before", "during", "after", "× quiet", "server"
        );
    }

    fn print(&self) {
        println!(
            "{:<16} {:>5} | {} | {} | {} | {:>7.2} | {:>6.2} | {}",
            self.attack,
            self.n,
            self.before.show(),
            self.during.show(),
            self.after.show(),
            self.latency,
            (self.after.cpu.saturating_sub(self.before.cpu)).as_secs_f64(),
            self.outcome
        );
    }
}

/// Runs `attack` against `server`: `place` puts the attackers in place and returns them;
/// the well-behaved client is timed then; `finish` waits for the server to cut them off and
/// says what the attackers saw.
async fn campaign<T, P, F>(
    server: &Server,
    attack: &str,
    n: usize,
    place: impl FnOnce() -> P,
    finish: impl FnOnce(T) -> F,
) -> Row
where
    P: Future<Output = T>,
    F: Future<Output = String>,
{
    let addr = server.addr;
    let timed = server.probe;
    let quiet = if timed {
        probes(addr, 5).await
    } else {
        Duration::ZERO
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.snap();
    let attackers = place().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let during_probe = if timed {
        probes(addr, 3).await
    } else {
        Duration::ZERO
    };
    let during = server.snap();
    let outcome = finish(attackers).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = server.snap();
    Row {
        attack: attack.to_owned(),
        n,
        before,
        during,
        after,
        latency: during_probe.as_secs_f64() / quiet.as_secs_f64(),
        outcome,
    }
}

async fn all<T: Send + 'static>(
    tasks: impl IntoIterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("a client task"));
    }
    out
}

async fn slowloris(server: &Server, n: usize) -> Row {
    let addr = server.addr;
    campaign(
        server,
        "slowloris",
        n,
        || async move {
            all((0..n).map(|_| {
                tokio::spawn(async move {
                    let mut tcp = connect_small(addr).await;
                    tcp.write_all(b"POST /agent/long/chat HTTP/1.1\r\nhost: x\r\n")
                        .await
                        .expect("a head");
                    tcp
                })
            }))
            .await
        },
        |sockets| closed_of(sockets, n),
    )
    .await
}

/// How many of `sockets` (of `n`) the server closed.
async fn closed_of(sockets: Vec<TcpStream>, n: usize) -> String {
    let closed = all(sockets
        .into_iter()
        .map(|mut tcp| tokio::spawn(async move { closed_by_server(&mut tcp).await })))
    .await;
    format!(
        "{}/{n} closed by the server",
        closed.iter().filter(|c| **c).count()
    )
}

async fn stalled_body(server: &Server, n: usize) -> Row {
    let addr = server.addr;
    campaign(
        server,
        "stalled_body",
        n,
        || async move {
            all((0..n).map(|_| {
                tokio::spawn(async move {
                    let mut tcp = connect_small(addr).await;
                    tcp.write_all(
                        b"POST /agent/long/chat HTTP/1.1\r\nhost: x\r\n\
                          content-length: 1000\r\n\r\n{\"id\":\"x\",",
                    )
                    .await
                    .expect("a head");
                    tcp
                })
            }))
            .await
        },
        |sockets| async move {
            let answered = all(sockets.into_iter().map(|mut tcp| {
                tokio::spawn(async move {
                    let seen = read_at_least(&mut tcp, 12).await;
                    seen.starts_with(b"HTTP/1.1 408")
                })
            }))
            .await;
            format!(
                "{}/{n} answered 408",
                answered.iter().filter(|c| **c).count()
            )
        },
    )
    .await
}

async fn idle_keepalive(server: &Server, n: usize) -> Row {
    let addr = server.addr;
    campaign(
        server,
        "idle_keepalive",
        n,
        || async move {
            all((0..n).map(|_| {
                tokio::spawn(async move {
                    let body = r#"{"data":"a","init":null}"#;
                    request(addr, "POST", "/bidi-flow/echo", body).await
                })
            }))
            .await
        },
        |sockets| closed_of(sockets, n),
    )
    .await
}

async fn never_read(server: &Server, n: usize) -> Row {
    let addr = server.addr;
    campaign(
        server,
        "never_read",
        n,
        || async move {
            all((0..n).map(|i| {
                tokio::spawn(async move {
                    let body = chat_body(&format!("never-read-{i}"));
                    request(addr, "POST", "/agent/long/chat", &body).await
                })
            }))
            .await
        },
        |sockets| async move {
            // The kernel's buffers filling (about 4 MB at the answer's pace), the idle timeout
            // and a margin; the sockets stay open, unread.
            tokio::time::sleep(Duration::from_secs(8) + IDLE_TIMEOUT).await;
            let held = sockets;
            // Hold them through the "after" reading, then let them go.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                drop(held);
            });
            "sockets kept open, unread".to_owned()
        },
    )
    .await
}

/// `n` chat requests on `path`, each read for 8 KiB, then all dropped at once.
async fn vanish(server: &Server, n: usize, path: &'static str, attack: &str) -> Row {
    let addr = server.addr;
    let round = PROBES.fetch_add(1, Ordering::Relaxed);
    campaign(
        server,
        attack,
        n,
        || async move {
            all((0..n).map(|i| {
                tokio::spawn(async move {
                    let id = format!("vanish-{round}-{i}");
                    let body = if path.ends_with("/execute") {
                        json!({"sessionId": id, "input": {"content": "go"}, "context": {}})
                            .to_string()
                    } else {
                        chat_body(&id)
                    };
                    let mut tcp = request(addr, "POST", path, &body).await;
                    let seen = read_at_least(&mut tcp, 8192).await;
                    assert!(
                        seen.starts_with(b"HTTP/1.1 200"),
                        "{:.200}",
                        String::from_utf8_lossy(&seen)
                    );
                    tcp
                })
            }))
            .await
        },
        |sockets| async move {
            drop(sockets);
            tokio::time::sleep(Duration::from_secs(1)).await;
            "all disconnected mid-answer".to_owned()
        },
    )
    .await
}

async fn tee_resumer(server: &Server, n: usize) -> Row {
    let addr = server.addr;
    // The answer read alone, then with `n` resumers that never read.
    let alone = read_with_resumers(addr, 0).await;
    let before = server.snap();
    let (with, during, outcome) = {
        let id = format!("tee-{}", PROBES.fetch_add(1, Ordering::Relaxed));
        let body = chat_body(&id);
        let mut tcp = request(addr, "POST", "/agent/long/chat", &body).await;
        read_at_least(&mut tcp, 4096).await;
        let resumers = attach(addr, &id, n).await;
        let during = server.snap();
        let start = Instant::now();
        let seen = read_at_least(&mut tcp, usize::MAX).await;
        let with = start.elapsed();
        assert!(
            String::from_utf8_lossy(&seen).contains("[DONE]"),
            "the answer did not end"
        );
        let attached = resumers.len();
        drop(resumers);
        (
            with,
            during,
            format!(
                "{attached}/{n} attached; the answer ended for its client in {:.2} s (alone {:.2} s)",
                with.as_secs_f64(),
                alone.as_secs_f64()
            ),
        )
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    Row {
        attack: "tee_resumer".to_owned(),
        n,
        before,
        during,
        after: server.snap(),
        latency: with.as_secs_f64() / alone.as_secs_f64(),
        outcome,
    }
}

/// `n` resumers of chat `id` that read the head of their answer and nothing more.
async fn attach(addr: SocketAddr, id: &str, n: usize) -> Vec<TcpStream> {
    let path = format!("/agent/long/chat/{id}/stream");
    let mut resumers = Vec::new();
    for _ in 0..n {
        let mut tcp = request(addr, "GET", &path, "").await;
        let head = read_at_least(&mut tcp, 12).await;
        if head.starts_with(b"HTTP/1.1 200") {
            resumers.push(tcp);
        }
    }
    resumers
}

/// The time to read the rest of a `long` chat answer after its first 4 KiB and after `n`
/// resumers attached.
async fn read_with_resumers(addr: SocketAddr, n: usize) -> Duration {
    let id = format!("tee-{}", PROBES.fetch_add(1, Ordering::Relaxed));
    let body = chat_body(&id);
    let mut tcp = request(addr, "POST", "/agent/long/chat", &body).await;
    read_at_least(&mut tcp, 4096).await;
    let _resumers = attach(addr, &id, n).await;
    let start = Instant::now();
    read_at_least(&mut tcp, usize::MAX).await;
    start.elapsed()
}

/// A WebSocket frame from a client: masked (with a zero key), text.
fn ws_frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(payload);
    frame
}

async fn ws_never_read(server: &Server, n: usize) -> Row {
    let addr = server.addr;
    let input = format!(r#"{{"type":"send","input":"{}"}}"#, "x".repeat(512 << 10));
    let input = Arc::new(ws_frame(input.as_bytes()));
    campaign(
        server,
        "ws_never_read",
        n,
        || async move {
            all((0..n).map(|_| {
                let input = Arc::clone(&input);
                tokio::spawn(async move {
                    let mut tcp = connect_small(addr).await;
                    tcp.write_all(
                        b"GET /bidi-flow/echo HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n\
                          connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                          sec-websocket-version: 13\r\n\r\n",
                    )
                    .await
                    .expect("upgrade");
                    let head = read_at_least(&mut tcp, 12).await;
                    assert!(head.starts_with(b"HTTP/1.1 101"));
                    tcp.write_all(&ws_frame(br#"{"type":"init"}"#))
                        .await
                        .expect("init");
                    // Inputs until the server stops taking them (or 16 went in).
                    let mut sent = 0;
                    for _ in 0..16 {
                        let wrote =
                            tokio::time::timeout(Duration::from_millis(500), tcp.write_all(&input))
                                .await;
                        if !matches!(wrote, Ok(Ok(()))) {
                            break;
                        }
                        sent += 1;
                    }
                    (tcp, sent)
                })
            }))
            .await
        },
        |sockets| async move {
            let sent: usize = sockets.iter().map(|(_, sent)| sent).sum();
            let closed = all(sockets
                .into_iter()
                .map(|(mut tcp, _)| tokio::spawn(async move { closed_by_server(&mut tcp).await })))
            .await;
            format!(
                "{sent} inputs of 512 KiB written in all; {}/{n} closed by the server",
                closed.iter().filter(|c| **c).count()
            )
        },
    )
    .await
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.first().map(String::as_str) == Some("serve") {
        serve(args.get(1).map_or("memory", String::as_str));
        return;
    }
    let only = args.first().cloned().unwrap_or_default();
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let store = std::env::var("STORE").unwrap_or_else(|_| "memory".to_owned());
    let rt = benches::runtime();
    rt.block_on(async move {
        let server = Server::start(&store);
        println!(
            "faults: bidi-http (store: {store}; header and body timeouts {} s, idle timeout {} s), {n} clients per attack",
            HEADER_TIMEOUT.as_secs(),
            IDLE_TIMEOUT.as_secs()
        );
        println!("(fds, threads and RSS are the server process's; latency is the well-behaved client's median during the attack / before it)");
        Row::print_header();
        let wanted = |name: &str| name.starts_with(only.as_str());
        let mut rows = Vec::new();
        if wanted("slowloris") {
            rows.push(slowloris(&server, n).await);
            rows.last().expect("a row").print();
        }
        if wanted("stalled_body") {
            rows.push(stalled_body(&server, n).await);
            rows.last().expect("a row").print();
        }
        if wanted("idle_keepalive") {
            rows.push(idle_keepalive(&server, n).await);
            rows.last().expect("a row").print();
        }
        if wanted("never_read") {
            rows.push(never_read(&server, n).await);
            rows.last().expect("a row").print();
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        if wanted("tee_resumer") {
            rows.push(tee_resumer(&server, n).await);
            rows.last().expect("a row").print();
        }
        if wanted("ws_never_read") {
            rows.push(ws_never_read(&server, (n / 4).max(1)).await);
            rows.last().expect("a row").print();
        }
        if wanted("vanish") || wanted("raw_vanish") {
            let mut per_execution = Vec::new();
            for round in 1..=3 {
                let row = vanish(&server, n, "/agent/long/chat", &format!("vanish #{round}")).await;
                row.print();
                per_execution.push(row.after.rss.saturating_sub(row.before.rss) / n);
                rows.push(row);
            }
            // The same through the execute endpoint, whose answer nobody resumes: what of the
            // above is the chat's copy kept for resuming clients.
            let row = vanish(&server, n, "/agent/long/execute", "vanish_execute").await;
            row.print();
            let execute_per = row.after.rss.saturating_sub(row.before.rss) / n;
            drop(server);
            let raw = Server::start("raw");
            let mut raw_per = Vec::new();
            for round in 1..=3 {
                let row = vanish(&raw, n, "/raw/chat", &format!("raw_vanish #{round}")).await;
                // The raw server has no probe agent: no latency (NaN).
                row.print();
                raw_per.push(row.after.rss.saturating_sub(row.before.rss) / n);
            }
            println!(
                "RSS kept per vanished execution (after - before, / {n}), rounds: bidi chat {per_execution:?} B, execute {execute_per} B, raw {raw_per:?} B"
            );
        }
    });
}
