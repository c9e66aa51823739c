//! Serving a router on a listener, and the deadlines that keep slow peers from holding
//! connections: the request head (and the wait for the next request on an idle keep-alive
//! connection), and the request body.
//!
//! [`Bound::serve`] is an accept loop of its own over hyper's HTTP/1 builder with a timer,
//! because `axum::serve` sets no deadline: a header read timeout (15 s by default) that also
//! closes idle keep-alive connections, `TCP_NODELAY` on every socket (without it a write that
//! follows another before the client acknowledged it, a `turn_end` after its chunk, waits for
//! the delayed acknowledgement), and graceful shutdown, which also stops what the protocols
//! serve beside the server (`Protocol::bind`: Genkit's reflection API). [`BodyDeadline`], a
//! layer, reads every request body whole within the body timeout (30 s by default, else
//! 408) before its route runs. `Server::routes`, `Server::layer` and `Server::cors` exist so
//! that a user's routes and layers are served by this loop too, and keep its deadlines.

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::BodyDataStream;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use futures_util::ready;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use crate::codec::{Code, Failure};
use crate::{Limits, flow};

/// A [`Server`](crate::Server) bound to its address, ready to [`serve`](Self::serve).
#[derive(Debug)]
pub struct Bound {
    pub(crate) listener: TcpListener,
    pub(crate) router: Router,
    pub(crate) limits: Limits,
    /// What the server's protocols serve beside it.
    pub(crate) besides: Vec<crate::Beside>,
}

impl Bound {
    /// The address bound (with the port the system picked for port 0).
    ///
    /// # Errors
    ///
    /// The socket's address cannot be read.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the process ends, with `TCP_NODELAY` on every accepted socket.
    ///
    /// A client has [`Server::header_timeout`](crate::Server::header_timeout) to send a
    /// request's head, and as long again for the next request on a connection it keeps
    /// alive: a silent or trickling client does not hold a connection (and its file
    /// descriptor) longer.
    ///
    /// # Errors
    ///
    /// Accepting connections failed for good.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting; connections being served go on in their tasks.
    pub async fn serve(self) -> io::Result<()> {
        self.serve_with_shutdown(std::future::pending()).await
    }

    /// Serves until `signal` completes, then stops accepting and waits for the requests being
    /// served (idle connections are closed at once). What its protocols serve beside it
    /// (Genkit's reflection API) stops with it; one that fails before (Genkit's tools refusing
    /// the runtime) leaves the server serving, and its error is logged to stderr.
    ///
    /// # Errors
    ///
    /// Accepting connections failed for good.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting; connections being served go on in their tasks.
    pub async fn serve_with_shutdown<F>(self, signal: F) -> io::Result<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // What the protocols serve beside the server: each stops when the server does, or when this future is dropped.
        let (stop, stopped) = watch::channel(());
        let besides: Vec<_> = self
            .besides
            .into_iter()
            .map(|beside| {
                let mut stopped = stopped.clone();
                let served = beside.serve(Box::pin(async move {
                    let _ = stopped.changed().await;
                }));
                // Nobody awaits it before the server stops: its failure is said when it comes.
                tokio::spawn(async move {
                    if let Err(error) = served.await {
                        bidi_flow::log::line(format!(
                            "bidi-http: served beside the server: {error}"
                        ));
                    }
                })
            })
            .collect();
        drop(stopped);
        let served = serve(self.listener, self.router, self.limits, signal).await;
        drop(stop);
        for beside in besides {
            let _ = beside.await;
        }
        served
    }
}

/// Serves `router` on `listener` until `signal` completes: see [`Bound::serve_with_shutdown`].
pub async fn serve<F>(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    signal: F,
) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    // Told when to shut down; every connection holds a receiver, so the sender also says
    // when the last connection is over.
    let (stop, stopped) = watch::channel(false);
    let mut signal = pin!(signal);
    loop {
        let tcp = tokio::select! {
            tcp = accept(&listener) => tcp,
            () = &mut signal => break,
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(connection(
            WriteDeadline::new(tcp, limits.idle_timeout + WRITE_GRACE),
            service,
            limits.header_timeout,
            stopped.clone(),
        ));
    }
    drop(listener);
    let _ = stop.send(true);
    drop(stopped);
    stop.closed().await;
    Ok(())
}

/// The next connection, with `TCP_NODELAY` set: a record goes out as soon as it is written
/// instead of waiting for the acknowledgement of the one before it (up to 40 ms on Linux).
/// Errors of one connection are skipped; others (out of file descriptors) are waited out.
async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                // Without it the socket still works, only later.
                let _ = tcp.set_nodelay(true);
                return tcp;
            }
            Err(error) if is_connection_error(&error) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection over HTTP/1.1 (with upgrades, for WebSockets) until it ends or the
/// server shuts down.
async fn connection(
    tcp: WriteDeadline<TcpStream>,
    service: TowerToHyperService<Router>,
    header_timeout: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let mut conn = pin!(
        http.serve_connection(TokioIo::new(tcp), service)
            .with_upgrades()
    );
    tokio::select! {
        // A connection that fails (a peer that went away, a head too slow) is simply over.
        _ = conn.as_mut() => return,
        _ = stopped.wait_for(|stop| *stop) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// How much longer than the idle timeout a write may wait for the peer before its connection
/// is closed: the idle timeout cancels what the connection runs first, with its own cause.
pub(crate) const WRITE_GRACE: Duration = Duration::from_secs(1);

/// A socket whose writes fail once one has waited longer than `timeout` for the peer to take
/// it: a client that stops reading does not hold its connection (its file descriptor, and
/// what is buffered for it) past the idle timeout (which cancels what it was answered) and
/// [`WRITE_GRACE`]. Waiting
/// for the peer to send costs nothing here: only a write the peer does not take runs the clock.
#[derive(Debug)]
pub(crate) struct WriteDeadline<S> {
    io: S,
    timeout: Duration,
    /// The deadline of the write waiting now, if one is.
    stalled: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl<S> WriteDeadline<S> {
    pub(crate) fn new(io: S, timeout: Duration) -> Self {
        Self {
            io,
            timeout,
            stalled: None,
            waiting: false,
        }
    }

    /// What a write that `poll` says came to: its result, or, pending longer than the
    /// timeout, an error.
    fn watch<T>(&mut self, poll: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.waiting = false;
            return poll;
        }
        let deadline = Instant::now() + self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !self.waiting {
            sleep.as_mut().reset(deadline);
            self.waiting = true;
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the peer took no write for {} s",
                    self.timeout.as_secs_f32()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(poll, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(poll, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(poll, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(poll, cx)
    }
}

/// The layer that reads every request body whole within the body deadline (and the size
/// limit) before the route sees it: a client that stalls or trickles its body is answered 408
/// instead of being waited for, one whose body is too large 413. A `GET` or an `OPTIONS`
/// goes through untouched.
///
/// A [`Server`](crate::Server) wraps its routes in it, and the routes you give it
/// ([`Server::routes`](crate::Server::routes)); a router you serve on your own takes it with
/// [`Router::layer`]:
///
/// ```
/// use bidi_http::Limits;
/// use bidi_http::axum::{Router, routing::post};
/// use bidi_http::serve::BodyDeadline;
///
/// let _uploads: Router = Router::new()
///     .route("/upload", post(|body: String| async move { body.len().to_string() }))
///     .layer(BodyDeadline::new(Limits::default()));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline {
    limits: Limits,
}

impl BodyDeadline {
    /// Reads bodies within `limits`' body timeout and size.
    #[must_use]
    pub fn new(limits: Limits) -> Self {
        Self { limits }
    }
}

impl<S> Layer<S> for BodyDeadline {
    type Service = Deadlined<S>;

    fn layer(&self, inner: S) -> Deadlined<S> {
        Deadlined {
            inner,
            limits: self.limits,
        }
    }
}

/// A service whose requests' bodies are read whole first ([`BodyDeadline`]).
#[derive(Debug, Clone)]
pub struct Deadlined<S> {
    inner: S,
    limits: Limits,
}

impl<S> Service<Request> for Deadlined<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ResponseFuture<S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> ResponseFuture<S> {
        if request.method() == Method::GET || request.method() == Method::OPTIONS {
            let future = self.inner.call(request);
            return ResponseFuture {
                step: Step::Routing { future },
            };
        }
        // The service made ready goes with the request; a clone stays for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        ResponseFuture {
            step: Step::Reading {
                // A timer is made here, and registered only if the body is not there at once.
                deadline: tokio::time::sleep(self.limits.body_timeout),
                read: Some(Read {
                    parts,
                    body: body.into_data_stream(),
                    gathered: Gathered::Nothing,
                    inner,
                }),
                limits: self.limits,
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of a [`Deadlined`] service: the request's body read whole, then its route's
    /// answer (or the answer that refuses the body).
    ///
    /// A plain state machine rather than a boxed `async` block: it lives in its connection's
    /// task, where a box would be one more allocation, past the allocator's thread cache, for
    /// every request.
    pub struct ResponseFuture<S: Service<Request>> {
        #[pin]
        step: Step<S>,
    }
}

impl<S: Service<Request>> fmt::Debug for ResponseFuture<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let step = match self.step {
            Step::Reading { .. } => "reading the body",
            Step::Routing { .. } => "routing",
        };
        f.debug_struct("ResponseFuture")
            .field("step", &step)
            .finish()
    }
}

pin_project_lite::pin_project! {
    #[project = StepProj]
    enum Step<S: Service<Request>> {
        /// Reading the body, within the body timeout.
        Reading {
            #[pin]
            deadline: Sleep,
            // Taken when the body is read or refused.
            read: Option<Read<S>>,
            limits: Limits,
        },
        /// The route answers.
        Routing {
            #[pin]
            future: S::Future,
        },
    }
}

/// A request whose body is being read, and the service it goes to then.
struct Read<S> {
    parts: Parts,
    body: BodyDataStream,
    gathered: Gathered,
    inner: S,
}

/// What has come of a body so far.
enum Gathered {
    Nothing,
    /// One chunk: a small body arrives in one, and is kept as it came.
    One(Bytes),
    /// Chunks copied together.
    Many(Vec<u8>),
}

impl Gathered {
    /// Adds `chunk`; `false` once the body is over `limit` bytes.
    fn add(&mut self, chunk: Bytes, limit: usize) -> bool {
        *self = match std::mem::replace(self, Self::Nothing) {
            Self::Nothing => Self::One(chunk),
            Self::One(first) => {
                let mut all = Vec::with_capacity(first.len() + chunk.len());
                all.extend_from_slice(&first);
                all.extend_from_slice(&chunk);
                Self::Many(all)
            }
            Self::Many(mut all) => {
                all.extend_from_slice(&chunk);
                Self::Many(all)
            }
        };
        self.len() <= limit
    }

    fn len(&self) -> usize {
        match self {
            Self::Nothing => 0,
            Self::One(chunk) => chunk.len(),
            Self::Many(all) => all.len(),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Self::Nothing => Bytes::new(),
            Self::One(chunk) => chunk,
            Self::Many(all) => Bytes::from(all),
        }
    }
}

impl<S> Read<S> {
    /// Reads chunks until the body ends (its bytes), goes over `limit` (`None`), fails, or
    /// waits.
    fn poll_whole(
        &mut self,
        cx: &mut Context<'_>,
        limit: usize,
    ) -> Poll<Result<Option<Bytes>, axum::Error>> {
        loop {
            match ready!(self.body.poll_next_unpin(cx)) {
                Some(Ok(chunk)) => {
                    if !self.gathered.add(chunk, limit) {
                        return Poll::Ready(Ok(None));
                    }
                }
                Some(Err(error)) => return Poll::Ready(Err(error)),
                None => {
                    let gathered = std::mem::replace(&mut self.gathered, Gathered::Nothing);
                    return Poll::Ready(Ok(Some(gathered.into_bytes())));
                }
            }
        }
    }
}

impl<S> Future for ResponseFuture<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut step = self.project().step;
        loop {
            let routed = match step.as_mut().project() {
                StepProj::Routing { future } => return future.poll(cx),
                StepProj::Reading {
                    deadline,
                    read,
                    limits,
                } => {
                    let Some(reading) = read.as_mut() else {
                        // Answered, and polled again: nothing is left to say.
                        return Poll::Pending;
                    };
                    let outcome = match reading.poll_whole(cx, limits.max_body_bytes) {
                        Poll::Ready(outcome) => outcome,
                        Poll::Pending => match deadline.poll(cx) {
                            Poll::Ready(()) => {
                                read.take();
                                return Poll::Ready(Ok(timed_out(limits)));
                            }
                            Poll::Pending => return Poll::Pending,
                        },
                    };
                    let Some(Read {
                        mut parts,
                        mut inner,
                        ..
                    }) = read.take()
                    else {
                        return Poll::Pending;
                    };
                    match outcome {
                        Ok(Some(bytes)) => {
                            parts.extensions.insert(Whole(bytes.clone()));
                            inner.call(Request::from_parts(parts, Body::from(bytes)))
                        }
                        Ok(None) => {
                            return Poll::Ready(Ok(
                                flow::too_large(limits.max_body_bytes).into_response()
                            ));
                        }
                        Err(error) => {
                            return Poll::Ready(Ok(Failure::malformed(format!(
                                "the request body could not be read: {error}"
                            ))
                            .into_response()));
                        }
                    }
                }
            };
            step.set(Step::Routing { future: routed });
        }
    }
}

/// The answer to a body that did not arrive within the body timeout.
fn timed_out(limits: &Limits) -> Response {
    Failure::new(
        StatusCode::REQUEST_TIMEOUT,
        Code::RequestTimeout,
        format!(
            "the request body did not arrive within {} s",
            limits.body_timeout.as_secs_f32()
        ),
    )
    .into_response()
}

/// A request's body as [`BodyDeadline`] read it, within the size limit, so that the route's
/// own extractor ([`Limited`](crate::extract::Limited)) takes it as it is instead of reading it
/// again. Nothing between the layer and the routes changes a body.
#[derive(Debug, Clone)]
pub(crate) struct Whole(pub(crate) Bytes);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::poll_fn;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// What the route behind a [`BodyDeadline`] is given: the body, and what the layer put
    /// in the request's extensions.
    async fn routed(chunks: &[&'static [u8]], limits: Limits) -> (u16, String, Option<Bytes>) {
        let route = tower::service_fn(|request: Request| async move {
            let whole = request
                .extensions()
                .get::<Whole>()
                .map(|Whole(bytes)| bytes.clone());
            let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap();
            let mut response = Response::new(Body::from(body));
            response.extensions_mut().insert(whole);
            Ok::<_, Infallible>(response)
        });
        let mut service = BodyDeadline::new(limits).layer(route);
        let frames = chunks
            .iter()
            .map(|chunk| Ok::<_, io::Error>(Bytes::from_static(chunk)))
            .collect::<Vec<_>>();
        let request = Request::post("/")
            .body(Body::from_stream(futures_util::stream::iter(frames)))
            .unwrap();
        let mut response = service.call(request).await.unwrap();
        let whole = response
            .extensions_mut()
            .remove::<Option<Bytes>>()
            .flatten();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap(), whole)
    }

    #[tokio::test]
    async fn a_body_in_chunks_reaches_its_route_whole() {
        let limits = Limits::default();
        let (status, body, whole) = routed(&[b"{\"data\"", b":", b"1}"], limits).await;
        assert_eq!((status, body.as_str()), (200, r#"{"data":1}"#));
        assert_eq!(whole.as_deref(), Some(&b"{\"data\":1}"[..]));
        let (status, body, whole) = routed(&[b"one chunk"], limits).await;
        assert_eq!((status, body.as_str()), (200, "one chunk"));
        assert_eq!(whole.as_deref(), Some(&b"one chunk"[..]));
        let (status, body, whole) = routed(&[], limits).await;
        assert_eq!(
            (status, body.as_str(), whole),
            (200, "", Some(Bytes::new()))
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_in_any_chunk_is_refused_before_its_route() {
        let limits = Limits {
            max_body_bytes: 4,
            ..Limits::default()
        };
        for chunks in [
            &[&b"12345"[..]][..],
            &[b"12", b"34", b"5"],
            &[b"1234", b"5"],
        ] {
            let (status, body, whole) = routed(chunks, limits).await;
            assert_eq!(status, 413, "{chunks:?}");
            assert!(body.contains("frame_too_large"), "{body}");
            assert_eq!(whole, None);
        }
        let (status, _, _) = routed(&[b"12", b"34"], limits).await;
        assert_eq!(status, 200);
    }

    /// Writes to `socket` until a write waits; how many bytes went.
    async fn fill(socket: &mut WriteDeadline<tokio::io::DuplexStream>) -> usize {
        let mut sent = 0;
        loop {
            let wrote = poll_fn(
                |cx| match Pin::new(&mut *socket).poll_write(cx, &[0; 256]) {
                    Poll::Pending => Poll::Ready(None),
                    Poll::Ready(wrote) => Poll::Ready(Some(wrote)),
                },
            )
            .await;
            match wrote {
                Some(Ok(n)) => sent += n,
                Some(Err(error)) => panic!("{error}"),
                None => return sent,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_does_not_take_fails_after_the_timeout() {
        let (ours, _peer) = tokio::io::duplex(1024);
        let mut socket = WriteDeadline::new(ours, Duration::from_secs(5));
        assert_eq!(fill(&mut socket).await, 1024);
        // The peer takes nothing: the write waits, then fails.
        let error = socket.write_all(&[1; 10]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_reads_resets_the_deadline() {
        let (ours, mut peer) = tokio::io::duplex(1024);
        let mut socket = WriteDeadline::new(ours, Duration::from_secs(5));
        for _ in 0..3 {
            fill(&mut socket).await;
            // A write waits, 4 s of the 5: then the peer reads, and it goes.
            let write = tokio::spawn(async move {
                socket.write_all(&[1; 10]).await.unwrap();
                socket
            });
            tokio::time::sleep(Duration::from_secs(4)).await;
            let mut buf = vec![0; 2048];
            let mut read = 0;
            while read < 1034 {
                read += peer.read(&mut buf).await.unwrap();
            }
            socket = write.await.unwrap();
        }
        // Reading from the peer is no write: silence costs nothing.
        let (ours, mut peer) = tokio::io::duplex(1024);
        let mut socket = WriteDeadline::new(ours, Duration::from_secs(5));
        let read = tokio::spawn(async move {
            let mut byte = [0];
            socket.read_exact(&mut byte).await.map(|_| byte[0])
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        peer.write_all(&[7]).await.unwrap();
        assert_eq!(read.await.unwrap().unwrap(), 7);
    }
}
