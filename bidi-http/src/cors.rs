//! Cross-origin requests: which browser pages on other origins may call the server.
//!
//! The layer is tower-http's `CorsLayer`, put outermost by `Server::router`: a preflight carries
//! no credentials, so it is answered before the server's auth. The headers a page may read are
//! `X-Session-Id` and those each protocol names (`Protocol::exposed_headers`: the UI message
//! stream's `x-vercel-ai-ui-message-stream`, Genkit's `x-genkit-stream-id`).

use std::fmt;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer, ExposeHeaders};

/// The origins whose pages may call the server from a browser (CORS), for
/// [`Server::cors`](crate::Server::cors).
///
/// Allowed pages may send the JSON bodies and headers the routes take (preflight requests are
/// answered for any route, with the headers the page asks to send), and read the headers the
/// agent routes answer with: `X-Session-Id`, and those each [`Protocol`](crate::Protocol) names.
///
/// ```
/// use bidi_http::{Cors, Server};
///
/// let cors = Cors::origins(["http://localhost:3000"])?;
/// let server = Server::new(bidi_flow::Registry::new()).cors(cors);
/// # drop(server);
/// # Ok::<(), bidi_http::InvalidOrigin>(())
/// ```
#[derive(Clone)]
pub struct Cors {
    /// `None`: any origin.
    origins: Option<Vec<HeaderValue>>,
}

impl Cors {
    /// Pages of these origins (`scheme://host[:port]`, as a browser sends them in `Origin`).
    /// `*` among them allows any origin.
    ///
    /// # Errors
    ///
    /// [`InvalidOrigin`] for an entry that is not an origin: a path, a missing scheme, a
    /// character a header cannot carry.
    pub fn origins<I, S>(origins: I) -> Result<Self, InvalidOrigin>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut values = Vec::new();
        for origin in origins {
            let origin = origin.as_ref().trim();
            if origin == "*" {
                return Ok(Self::any());
            }
            values.push(parse(origin)?);
        }
        Ok(Self {
            origins: Some(values),
        })
    }

    /// Pages of any origin. Only for servers whose routes need no credentials a browser would
    /// add by itself: any page a user visits can call them.
    #[must_use]
    pub fn any() -> Self {
        Self { origins: None }
    }

    /// The layer that answers preflight requests and adds the CORS headers.
    pub(crate) fn layer(&self, exposed: Vec<HeaderName>) -> CorsLayer {
        let origin = match &self.origins {
            Some(origins) => AllowOrigin::list(origins.iter().cloned()),
            None => AllowOrigin::any(),
        };
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers(ExposeHeaders::list(exposed))
            .max_age(Duration::from_secs(600))
    }
}

impl fmt::Debug for Cors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origins {
            Some(origins) => f.debug_list().entries(origins).finish(),
            None => f.write_str("any origin"),
        }
    }
}

/// `origin` as an `Origin` header value, checked: `scheme://host[:port]`, nothing after.
fn parse(origin: &str) -> Result<HeaderValue, InvalidOrigin> {
    let invalid = || InvalidOrigin(origin.to_owned());
    let (scheme, rest) = origin.split_once("://").ok_or_else(invalid)?;
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let host_ok = !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@'])
        && rest.chars().all(|c| c.is_ascii_graphic());
    if !scheme_ok || !host_ok {
        return Err(invalid());
    }
    HeaderValue::from_str(origin).map_err(|_| invalid())
}

/// An allowed origin that is not one: origins are `scheme://host[:port]`, like
/// `http://localhost:3000`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an origin: write it as scheme://host[:port], like http://localhost:3000")]
pub struct InvalidOrigin(String);

/// The headers of the server's own answers a page reads: the agent routes' session id.
pub(crate) fn exposed() -> Vec<HeaderName> {
    #[cfg(feature = "agents")]
    return vec![crate::agent::SESSION_ID];
    #[cfg(not(feature = "agents"))]
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port() {
        assert!(Cors::origins(["http://localhost:3000", "https://app.example"]).is_ok());
        assert!(Cors::origins(["*"]).is_ok_and(|cors| cors.origins.is_none()));
        for bad in [
            "localhost:3000",
            "http://",
            "http://localhost:3000/",
            "http://a/b",
            "http://user@host",
            "http://a b",
            "://host",
        ] {
            assert_eq!(
                Cors::origins([bad]).map(|_| ()),
                Err(InvalidOrigin(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
