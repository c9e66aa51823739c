//! Extractors whose refusals are the JSON error body, like every other refusal of the server.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::codec::{Code, Failure};

/// The path's segments, as [`Path`] reads them; a path it cannot read (percent-encoded bytes
/// that are not UTF-8, say) is refused with the JSON error body instead of axum's plain text.
#[derive(Debug)]
pub(crate) struct Segments<T>(pub(crate) T);

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
