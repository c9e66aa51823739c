//! [`Conversation`]: the messages of a session, shared instead of copied.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::message::Message;

/// A conversation's messages, oldest first: a list that clones in constant time.
///
/// The agent loop hands a session's whole conversation to its model at every call, and a
/// session's state is read by every turn: cloning either must not copy the messages. A
/// `Conversation` shares them; [`push`](Self::push) appends in place when nobody else holds
/// them (a model that has finished with its request, say), and copies them once otherwise. It
/// reads as a slice of [`Message`]s and is JSON as one (an array).
///
/// ```
/// use bidi_llm::{Conversation, Message, UserMessage};
///
/// let mut conversation = Conversation::from(vec![Message::User(UserMessage::new("Hi"))]);
/// let handed = conversation.clone(); // what a model is given: no message is copied
/// assert!(std::ptr::eq(&conversation[0], &handed[0]));
/// drop(handed);
/// conversation.push(Message::User(UserMessage::new("Still there?")));
/// assert_eq!(conversation.len(), 2);
/// ```
#[derive(Clone, Default, PartialEq)]
pub struct Conversation(Arc<Vec<Message>>);

impl Conversation {
    /// No messages.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `message`: in place if nobody else holds these messages, else after copying them
    /// once.
    pub fn push(&mut self, message: Message) {
        Arc::make_mut(&mut self.0).push(message);
    }

    /// The messages to change as a `Vec`, copied first if anybody else holds them.
    pub fn to_mut(&mut self) -> &mut Vec<Message> {
        Arc::make_mut(&mut self.0)
    }

    /// The messages as a `Vec`, copied only if anybody else holds them.
    #[must_use]
    pub fn into_vec(self) -> Vec<Message> {
        Arc::unwrap_or_clone(self.0)
    }
}

impl Deref for Conversation {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        &self.0
    }
}

impl fmt::Debug for Conversation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Self {
        Self(Arc::new(messages))
    }
}

impl FromIterator<Message> for Conversation {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> Self {
        Self(Arc::new(messages.into_iter().collect()))
    }
}

impl Extend<Message> for Conversation {
    fn extend<I: IntoIterator<Item = Message>>(&mut self, messages: I) {
        Arc::make_mut(&mut self.0).extend(messages);
    }
}

impl<'a> IntoIterator for &'a Conversation {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl PartialEq<Vec<Message>> for Conversation {
    fn eq(&self, other: &Vec<Message>) -> bool {
        *self.0 == *other
    }
}

impl Serialize for Conversation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Conversation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(Self::from)
    }
}

impl JsonSchema for Conversation {
    fn schema_name() -> Cow<'static, str> {
        Vec::<Message>::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        Vec::<Message>::schema_id()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Vec::<Message>::json_schema(generator)
    }
}
