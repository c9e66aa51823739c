//! Webhook receivers on a free port of 127.0.0.1, for A2A's push notifications: `POST
//! /hook/{name}` is answered 200, `/down` 500 and `/gone` 410; every POST is kept, in order.

use std::time::Duration;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use tokio::sync::{Mutex, mpsc};

/// One POST a receiver got.
#[derive(Debug)]
pub struct Hit {
    /// `hook/{name}`, `down` or `gone`.
    pub path: String,
    /// Its `Authorization`.
    pub authorization: Option<String>,
    /// Its `X-A2A-Notification-Token`.
    pub token: Option<String>,
    /// Its `Content-Type`.
    pub content_type: Option<String>,
    /// The body as JSON (`null` if it is none).
    pub body: Value,
}

impl Hit {
    /// The task state an A2A `statusUpdate` says (empty for any other body).
    #[must_use]
    pub fn state(&self) -> &str {
        self.body["statusUpdate"]["status"]["state"]
            .as_str()
            .unwrap_or("")
    }
}

/// What the receivers got, as it comes.
#[derive(Debug)]
pub struct Hits(Mutex<mpsc::UnboundedReceiver<Hit>>);

impl Hits {
    /// The next hit, within a generous deadline.
    ///
    /// # Panics
    ///
    /// If none comes within two minutes.
    pub async fn next(&self) -> Hit {
        let mut received = self.0.lock().await;
        tokio::time::timeout(Duration::from_secs(120), received.recv())
            .await
            .expect("a notification in time")
            .expect("the receiver runs")
    }

    /// The hits up to and with the first on `path` saying `state`.
    ///
    /// # Panics
    ///
    /// If one does not come within two minutes of the one before.
    pub async fn until(&self, path: &str, state: &str) -> Vec<Hit> {
        let mut hits = Vec::new();
        loop {
            let hit = self.next().await;
            let done = hit.path == path && hit.state() == state;
            hits.push(hit);
            if done {
                return hits;
            }
        }
    }

    /// Whether nothing more came so far.
    pub async fn none_left(&self) -> bool {
        self.0.lock().await.try_recv().is_err()
    }
}

/// Receivers on a free port: their base URL, and what they get.
///
/// # Panics
///
/// If no port of 127.0.0.1 is free.
pub async fn receiver() -> (String, Hits) {
    let (hits, received) = mpsc::unbounded_channel();
    let record = move |path: String, headers: &HeaderMap, body: &str| {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        let _ = hits.send(Hit {
            path,
            authorization: header("authorization"),
            token: header("x-a2a-notification-token"),
            content_type: header("content-type"),
            body: serde_json::from_str(body).unwrap_or(Value::Null),
        });
    };
    let (hook, down, gone) = (record.clone(), record.clone(), record);
    let app = axum::Router::new()
        .route(
            "/hook/{name}",
            post(
                move |Path(name): Path<String>, headers: HeaderMap, body: String| async move {
                    hook(format!("hook/{name}"), &headers, &body);
                    StatusCode::OK
                },
            ),
        )
        .route(
            "/down",
            post(move |headers: HeaderMap, body: String| async move {
                down("down".into(), &headers, &body);
                StatusCode::INTERNAL_SERVER_ERROR
            }),
        )
        .route(
            "/gone",
            post(move |headers: HeaderMap, body: String| async move {
                gone("gone".into(), &headers, &body);
                StatusCode::GONE
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port of 127.0.0.1");
    let addr = listener.local_addr().expect("the bound address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), Hits(Mutex::new(received)))
}
