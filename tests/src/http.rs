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

/// `server`, its callers identified by their bearer token: `Authorization: Bearer {name}` is
/// the identity `name`, and a request without one is refused (401).
pub fn by_bearer(server: bidi_http::Server) -> bidi_http::Server {
    server.auth(|headers| async move {
        let token = headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        match token {
            Some(name) => Ok(bidi_http::Identity::new(name)),
            None => Err(bidi_http::Unauthorized::new("a bearer token is required")),
        }
    })
}
