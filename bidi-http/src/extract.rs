//! Extractors whose refusals are the JSON error body, like every other refusal of the server.
//!
//! axum answers what its own extractors refuse in plain text; these answer in the server's JSON
//! error body instead, also for paths axum cannot read ([`Segments`]), so that a client meets
//! one shape of error whatever it got wrong.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::codec::{Code, Failure};

/// The path's segments, as [`Path`] reads them; a path it cannot read (percent-encoded bytes
/// that are not UTF-8, say) is refused with the JSON error body instead of axum's plain text.
#[derive(Debug)]
pub struct Segments<T>(pub T);

impl<S, T> FromRequestParts<S> for Segments<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Failure> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(segments)) => Ok(Self(segments)),
            Err(rejection) => Err(Failure::new(
                rejection.status(),
                Code::MalformedFrame,
                format!("the path cannot be read: {}", rejection.body_text()),
            )),
        }
    }
}

/// The agent the request's path names (`/agent/{name}/...`), or 404 in the JSON error body.
#[cfg(feature = "agents")]
#[derive(Debug)]
pub struct Served {
    /// The agent.
    pub agent: bidi_llm::LlmAgent,
    /// The name it is served under.
    pub name: String,
}

#[cfg(feature = "agents")]
#[derive(serde::Deserialize)]
struct AgentPath {
    kind: String,
    name: String,
}

#[cfg(feature = "agents")]
impl FromRequestParts<crate::Host> for Served {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, host: &crate::Host) -> Result<Self, Failure> {
        let Segments(AgentPath { kind, name }) =
            Segments::<AgentPath>::from_request_parts(parts, host).await?;
        let agent = crate::agent::agent(host, &kind, &name)?.clone();
        Ok(Self { agent, name })
    }
}

/// A request body within the server's body limit; refused (413, or the error reading it) in
/// the JSON error body.
#[derive(Debug)]
pub struct Limited(pub axum::body::Bytes);

impl axum::extract::FromRequest<crate::Host> for Limited {
    type Rejection = Failure;

    async fn from_request(
        request: axum::extract::Request,
        host: &crate::Host,
    ) -> Result<Self, Failure> {
        if let Some(crate::serve::Whole(bytes)) = request.extensions().get() {
            return Ok(Self(bytes.clone()));
        }
        let bytes = axum::body::Bytes::from_request(request, host).await;
        body(bytes, host.limits().max_body_bytes).map(Self)
    }
}

/// A request body that is a JSON object of type `T`, within the server's body limit; refused
/// (413, or 400 naming where it is wrong) in the JSON error body. `bytes` is the body as sent.
#[cfg(feature = "agents")]
#[derive(Debug)]
pub struct JsonBody<T> {
    /// The body, read.
    pub value: T,
    /// The body as sent.
    pub bytes: axum::body::Bytes,
}

#[cfg(feature = "agents")]
impl<T> axum::extract::FromRequest<crate::Host> for JsonBody<T>
where
    T: DeserializeOwned,
{
    type Rejection = Failure;

    async fn from_request(
        request: axum::extract::Request,
        host: &crate::Host,
    ) -> Result<Self, Failure> {
        let Limited(bytes) = Limited::from_request(request, host).await?;
        let value = crate::codec::decode_object(&bytes)?;
        Ok(Self { value, bytes })
    }
}

/// The body, or 413 / 400 as JSON.
fn body(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
    limit: usize,
) -> Result<axum::body::Bytes, Failure> {
    body.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            crate::flow::too_large(limit)
        } else {
            Failure::new(
                rejection.status(),
                Code::MalformedFrame,
                rejection.body_text(),
            )
        }
    })
}
