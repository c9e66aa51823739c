//! Questions an action asks the person behind its connection's peer while it runs: a message
//! and a form, answered with the form's fields, or declined.
//!
//! An action asks with [`ask`]. The protocol serving the connection decides how the question
//! reaches a person by putting an [`Asker`] in the connection's extensions: MCP asks its client
//! (`elicitation/create`, or as an input request of the task the call runs as). A connection
//! with no asker answers [`AskError::NotOffered`], so an action that asks may still say what
//! it does without an answer.
//!
//! The form is a JSON Schema of an object whose properties are flat: strings (with `format`,
//! `minLength`, `maxLength`, or an `enum`/`oneOf` of choices), numbers and integers (with
//! `minimum` and `maximum`), booleans, and arrays of choices, each with its `title`,
//! `description` and `default`; MCP's elicitation forms take no other.
//!
//! ```
//! use bidi_core::{ActionContext, BoxError, ConnectOptions, Inbound, Outbound};
//! use bidi_flow::ask::{self, Answer, Asker, Question};
//! use bidi_flow::BidiFlow;
//! use serde_json::json;
//!
//! async fn delete(ctx: ActionContext, _: (), mut inbound: Inbound<String>, _: Outbound<()>) -> Result<String, BoxError> {
//!     let file = inbound.recv().await.unwrap_or_default();
//!     let form = json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}});
//!     let question = Question::new(format!("Delete {file}?"), form)?;
//!     Ok(match ask::ask(&ctx, question).await? {
//!         Answer::Accept(fields) if fields["confirm"] == true => format!("deleted {file}"),
//!         _ => format!("kept {file}"),
//!     })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // A person who always confirms.
//! let asker = Asker::new(|_question: Question| async {
//!     let fields = json!({"confirm": true}).as_object().cloned().unwrap_or_default();
//!     Ok(Answer::Accept(fields))
//! });
//! let options = ConnectOptions::new().extension(asker);
//! let said = BidiFlow::new("delete", delete).connect_with((), options).run("notes.txt".into()).await?;
//! assert_eq!(said, "deleted notes.txt");
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use bidi_core::ActionContext;
use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

/// A question: what to tell the person, and the form of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    message: String,
    form: Map<String, Value>,
}

impl Question {
    /// Asks `message`, to be answered with the fields of `form` (a JSON Schema of an object:
    /// see the [module](self)).
    ///
    /// # Errors
    ///
    /// A `form` that is not an object's schema (`"type": "object"`).
    pub fn new(message: impl Into<String>, form: Value) -> Result<Self, AskError> {
        match form {
            Value::Object(form) if form.get("type") == Some(&Value::from("object")) => Ok(Self {
                message: message.into(),
                form,
            }),
            _ => Err(AskError::Failed(
                "a question's form is the JSON Schema of an object".to_owned(),
            )),
        }
    }

    /// What the person is told.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The form of the answer, a JSON Schema of an object.
    #[must_use]
    pub fn form(&self) -> &Map<String, Value> {
        &self.form
    }
}

/// What the person answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// They filled in the form: its fields.
    Accept(Map<String, Value>),
    /// They said no.
    Decline,
    /// They dismissed the question without an answer.
    Cancel,
}

/// Why a question has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AskError {
    /// Nobody can be asked on this connection: its protocol, or its peer, does not ask.
    #[error("the client of this connection cannot be asked")]
    NotOffered,
    /// Asking failed, saying this.
    #[error("asking failed: {0}")]
    Failed(String),
}

/// Asks the person behind a connection's peer: a protocol puts one in the connection's
/// extensions (see the [module](self)).
#[derive(Clone)]
pub struct Asker(
    Arc<dyn Fn(Question) -> BoxFuture<'static, Result<Answer, AskError>> + Send + Sync>,
);

impl Asker {
    /// An asker that answers each question with `ask`.
    pub fn new<F, Fut>(ask: F) -> Self
    where
        F: Fn(Question) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Answer, AskError>> + Send + 'static,
    {
        Self(Arc::new(move |question| ask(question).boxed()))
    }

    /// Asks `question`.
    ///
    /// # Errors
    ///
    /// What the asker says of a question it could not have answered.
    ///
    /// # Cancel safety
    ///
    /// Dropped, the question is withdrawn as far as the protocol can.
    pub async fn ask(&self, question: Question) -> Result<Answer, AskError> {
        (self.0)(question).await
    }
}

impl fmt::Debug for Asker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Asker")
    }
}

/// Asks `question` of the person behind `ctx`'s connection.
///
/// # Errors
///
/// [`AskError::NotOffered`] when nobody can be asked on the connection; what its asker says
/// of a question it could not have answered.
///
/// # Cancel safety
///
/// Dropped, the question is withdrawn as far as the protocol can.
pub async fn ask(ctx: &ActionContext, question: Question) -> Result<Answer, AskError> {
    let asker = ctx.extensions().get::<Asker>().cloned();
    match asker {
        Some(asker) => asker.ask(question).await,
        None => Err(AskError::NotOffered),
    }
}
