//! The traces the server keeps, for the page: a list, one trace, and every span as it starts and
//! ends (SSE), to those who may read them ([`DevUi::trace_readers`](super::DevUi::trace_readers)).
//! The live records are written by `bidi_http::sse`, the one SSE writer.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Json};
use bidi_flow::text::cap;
use serde::Serialize;

use bidi_http::Identity;
use bidi_http::codec::{Code, Failure};
use bidi_http::extract::Segments;
use bidi_http::traces::{Span, TraceSummary, Update, Updates};

use crate::DevUi;

/// How often the live stream writes a comment when no span moves, so that proxies and the
/// browser keep it open.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// `GET /dev/api/traces`.
#[derive(Debug, Serialize)]
pub(super) struct TraceList {
    traces: Vec<TraceSummary>,
}

/// `GET /dev/api/traces`: the traces kept, newest first.
pub(super) async fn list(
    Extension(dev): Extension<DevUi>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<TraceList>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let traces = dev.reads_traces(identity.as_ref())?;
    Ok(Json(TraceList {
        traces: traces.list(),
    }))
}

/// `GET /dev/api/traces/{trace}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Trace {
    trace_id: String,
    spans: Vec<Span>,
}

/// `GET /dev/api/traces/{trace}`: one trace's spans, or 404.
pub(super) async fn trace(
    Extension(dev): Extension<DevUi>,
    Segments(trace_id): Segments<String>,
    identity: Option<Extension<Identity>>,
) -> Result<Json<Trace>, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let traces = dev.reads_traces(identity.as_ref())?;
    match traces.trace(&trace_id) {
        Some(spans) => Ok(Json(Trace { trace_id, spans })),
        None => Err(Failure::new(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            format!(
                "no trace `{}` is kept (only the most recent ones are)",
                cap(&trace_id)
            ),
        )),
    }
}

/// `GET /dev/api/traces/live`: `event: traces` with the list, then each span's start and end.
pub(super) async fn live(
    Extension(dev): Extension<DevUi>,
    identity: Option<Extension<Identity>>,
) -> Result<Response, Failure> {
    let identity = identity.map(|Extension(identity)| identity);
    let traces = dev.reads_traces(identity.as_ref())?;
    // Subscribed before the list is read: a span that starts meanwhile is in one or the other.
    let updates = traces.subscribe();
    let mut first = Vec::new();
    bidi_http::sse::event(
        &mut first,
        "traces",
        &TraceList {
            traces: traces.list(),
        },
    );
    let body =
        futures_util::stream::unfold((Some(first), updates), |(first, mut updates)| async move {
            if let Some(first) = first {
                return Some((Ok::<_, Infallible>(Bytes::from(first)), (None, updates)));
            }
            let bytes = next(&mut updates).await;
            Some((Ok(Bytes::from(bytes)), (None, updates)))
        });
    Ok(bidi_http::sse::response(Body::from_stream(body)))
}

/// The next record: an update, `lagged` after missed ones, or a keepalive comment.
async fn next(updates: &mut Updates) -> Vec<u8> {
    let mut buf = Vec::new();
    match tokio::time::timeout(KEEPALIVE, updates.recv()).await {
        Ok(Ok(update)) => {
            let kind = match &update {
                Update::SpanStart(_) => "span_start",
                Update::SpanEnd(_) => "span_end",
            };
            bidi_http::sse::event(&mut buf, kind, update.span());
        }
        Ok(Err(lagged)) => {
            bidi_http::sse::event(
                &mut buf,
                "lagged",
                &serde_json::json!({ "missed": lagged.0 }),
            );
        }
        Err(_) => buf.extend_from_slice(b": keepalive\n\n"),
    }
    buf
}
