//! The page's files, compiled into the crate: one HTML page, its stylesheet, and its scripts
//! (ES modules that import one another by relative path).
//!
//! They are written by hand and compiled in with `include_str!`: no build step, and nothing
//! fetched from elsewhere, so the page is answered with a Content Security Policy of `'self'`.
//! The page drives the server's own routes the way any client would (`GET /actions` and the
//! schemas it makes its forms from, the WebSocket wire for runs, the UI message stream for
//! chats); what the Dev UI adds is the read-only JSON under `/dev/api/`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use bidi_http::codec::{Code, Failure};
use bidi_http::extract::Segments;

/// A file of the page: its name under `/dev/`, content type and text.
struct Asset {
    name: &'static str,
    kind: &'static str,
    text: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// Every file but the page itself.
const ASSETS: &[Asset] = &[
    Asset {
        name: "style.css",
        kind: CSS,
        text: include_str!("assets/style.css"),
    },
    Asset {
        name: "app.js",
        kind: JS,
        text: include_str!("assets/app.js"),
    },
    Asset {
        name: "api.js",
        kind: JS,
        text: include_str!("assets/api.js"),
    },
    Asset {
        name: "dom.js",
        kind: JS,
        text: include_str!("assets/dom.js"),
    },
    Asset {
        name: "schema.js",
        kind: JS,
        text: include_str!("assets/schema.js"),
    },
    Asset {
        name: "form.js",
        kind: JS,
        text: include_str!("assets/form.js"),
    },
    Asset {
        name: "run.js",
        kind: JS,
        text: include_str!("assets/run.js"),
    },
    Asset {
        name: "chat.js",
        kind: JS,
        text: include_str!("assets/chat.js"),
    },
    Asset {
        name: "calls.js",
        kind: JS,
        text: include_str!("assets/calls.js"),
    },
    Asset {
        name: "markdown.js",
        kind: JS,
        text: include_str!("assets/markdown.js"),
    },
    Asset {
        name: "traces.js",
        kind: JS,
        text: include_str!("assets/traces.js"),
    },
    Asset {
        name: "sessions.js",
        kind: JS,
        text: include_str!("assets/sessions.js"),
    },
];

/// `GET /dev`: the page is at `/dev/`, whose relative links reach the server's routes.
pub(super) async fn to_index() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, HeaderValue::from_static("dev/"))],
    )
        .into_response()
}

/// `GET /dev/`: the page.
pub(super) async fn index() -> Response {
    let mut response = served(HTML, include_str!("assets/index.html"));
    // The page runs its own scripts and talks to its own server, nothing else: what a
    // rendered answer could smuggle in (markup, a script, a remote image) does not run.
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; \
             frame-ancestors 'none'",
        ),
    );
    response
}

/// `GET /dev/{file}`: one of the page's files, or 404.
pub(super) async fn file(Segments(name): Segments<String>) -> Result<Response, Failure> {
    ASSETS
        .iter()
        .find(|asset| asset.name == name)
        .map(|asset| served(asset.kind, asset.text))
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                Code::NotFound,
                "the Dev UI has no such file: open /dev/",
            )
        })
}

/// A file, revalidated on every load: the page changes with the crate.
fn served(kind: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        text,
    )
        .into_response()
}
