//! Who sends a request: [`Identity`], and the hook that finds it or refuses the request.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::codec::{Code, Failure};

/// Who sent a request, as the server's [`auth`](crate::Server::auth) hook (or a layer of yours
/// that puts one in the request's extensions) found it.
///
/// It reaches the action of every connection the request opens through its context, and agents
/// keep each identity's sessions apart.
///
/// ```
/// use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
/// use bidi_flow::{BidiFlow, Registry};
/// use bidi_http::Identity;
///
/// async fn whoami(ctx: ActionContext, _: (), _: Inbound<()>, _: Outbound<()>)
///     -> Result<String, BoxError>
/// {
///     Ok(ctx.extensions().get::<Identity>().map_or("anonymous", Identity::id).to_owned())
/// }
///
/// Registry::new().register(BidiFlow::new("whoami", whoami)).expect("a new key");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    id: Arc<str>,
}

impl Identity {
    /// The identity `id` (a user id, an API key's owner).
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self { id: id.into() }
    }

    /// Its id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// A request the [`auth`](crate::Server::auth) hook refused: answered with 401 and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unauthorized {
    message: String,
}

impl Unauthorized {
    /// A refusal saying `message` to the client.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        Failure::new(StatusCode::UNAUTHORIZED, Code::Unauthorized, self.message).into_response()
    }
}

type Authenticated = Pin<Box<dyn Future<Output = Result<Identity, Unauthorized>> + Send>>;

/// The hook, object-safe.
pub(crate) trait Authenticate: Send + Sync + 'static {
    fn authenticate(&self, headers: HeaderMap) -> Authenticated;
}

pub(crate) struct FnAuth<F>(pub(crate) F);

impl<F, Fut> Authenticate for FnAuth<F>
where
    F: Fn(HeaderMap) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Identity, Unauthorized>> + Send + 'static,
{
    fn authenticate(&self, headers: HeaderMap) -> Authenticated {
        Box::pin((self.0)(headers))
    }
}

/// The middleware: finds the request's identity or answers 401.
pub(crate) async fn layer(
    State(hook): State<Arc<dyn Authenticate>>,
    mut request: Request,
    next: Next,
) -> Response {
    match hook.authenticate(request.headers().clone()).await {
        Ok(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Err(refused) => refused.into_response(),
    }
}
