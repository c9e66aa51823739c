//! Serving a [`bidi_http::Server`] to the peer clients under test.

use std::net::SocketAddr;

/// Serves `server` on a free port of 127.0.0.1, in a task of this runtime, and answers its
/// address.
///
/// # Panics
///
/// If no port of 127.0.0.1 can be bound.
pub async fn serve(server: bidi_http::Server) -> SocketAddr {
    let bound = server
        .addr(SocketAddr::from(([127, 0, 0, 1], 0)))
        .bind()
        .await
        .expect("a free port of 127.0.0.1");
    let addr = bound.local_addr().expect("the bound address");
    tokio::spawn(bound.serve());
    addr
}
