//! What an action knows about the connection it serves.

use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::Cause;
use crate::extensions::Extensions;
use crate::link::Link;

/// The context an action runs in: its name, the connection id, the cancellation, and the
/// extensions the caller attached with [`ConnectOptions::extension`](crate::ConnectOptions::extension).
///
/// Cheap to clone; clones see the same connection.
#[derive(Clone)]
pub struct ActionContext {
    link: Arc<dyn Link>,
}

impl ActionContext {
    pub(crate) fn new(link: Arc<dyn Link>) -> Self {
        Self { link }
    }

    /// The action's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.link.control().name
    }

    /// The connection's id, the same as [`Connection::id`](crate::Connection::id).
    #[must_use]
    pub fn connection_id(&self) -> Uuid {
        self.link.control().id()
    }

    /// The extensions the caller attached when connecting.
    #[must_use]
    pub fn extensions(&self) -> &Extensions {
        &self.link.control().extensions
    }

    /// Whether the connection was cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.link.control().is_cancelled()
    }

    /// The cancellation cause, once the connection was cancelled.
    #[must_use]
    pub fn cause(&self) -> Option<Cause> {
        self.link.control().cause()
    }

    /// Waits until the connection is cancelled and returns the cause.
    ///
    /// Once that happens, the action's pending and later [`Inbound::recv`](crate::Inbound::recv)
    /// calls return `None` and its [`Outbound`](crate::Outbound) sends fail; the action should
    /// return soon after. Its result is then discarded: the caller gets
    /// [`Error::Cancelled`](crate::Error::Cancelled).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing.
    pub async fn cancelled(&self) -> Cause {
        let control = self.link.control();
        control.token().cancelled().await;
        control.cause().unwrap_or_else(Cause::parent)
    }

    /// A token cancelled with this connection, for libraries that take one or for nested
    /// connections ([`ConnectOptions::parent`](crate::ConnectOptions::parent)). Cancelling the
    /// returned token does not cancel this connection.
    #[must_use]
    pub fn child_token(&self) -> CancellationToken {
        self.link.control().token().child_token()
    }
}

impl fmt::Debug for ActionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActionContext")
            .field("name", &self.name())
            .field("connection_id", &self.connection_id())
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}
