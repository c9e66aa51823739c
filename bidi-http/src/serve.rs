//! Serving a router on a listener, and the deadlines that keep slow peers from holding
//! connections: the request head (and the wait for the next request on an idle keep-alive
//! connection), and the request body.

use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::codec::{Code, Failure};
use crate::{Limits, flow};

/// A [`Server`](crate::Server) bound to its address, ready to [`serve`](Self::serve).
#[derive(Debug)]
pub struct Bound {
    pub(crate) listener: TcpListener,
    pub(crate) router: Router,
    pub(crate) limits: Limits,
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
    /// served (idle connections are closed at once).
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
        let Self {
            listener,
            router,
            limits,
        } = self;
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
                tcp,
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
    tcp: TcpStream,
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

/// Reads a request's body whole within the body deadline (and the size limit), before the
/// route sees it: a client that stalls or trickles its body is answered 408 instead of being
/// waited for.
pub(crate) async fn body_deadline(
    State(limits): State<Arc<Limits>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() == Method::GET || request.method() == Method::OPTIONS {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, limits.max_body_bytes.saturating_add(1));
    let bytes = match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(Ok(bytes)) if bytes.len() <= limits.max_body_bytes => bytes,
        Ok(Ok(_)) => return flow::too_large(limits.max_body_bytes).into_response(),
        Ok(Err(error)) => {
            if error.to_string().contains("length limit") {
                return flow::too_large(limits.max_body_bytes).into_response();
            }
            return Failure::malformed(format!("the request body could not be read: {error}"))
                .into_response();
        }
        Err(_) => {
            return Failure::new(
                StatusCode::REQUEST_TIMEOUT,
                Code::RequestTimeout,
                format!(
                    "the request body did not arrive within {} s",
                    limits.body_timeout.as_secs_f32()
                ),
            )
            .into_response();
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
