//! Test doubles: models that answer without a network, for tests, examples and benchmarks.
//!
//! - [`ScriptedModel`] answers each request with the next [`Scripted`] answer.
//! - [`ChannelModel`] streams what the test sends it, when the test sends it: for tests of
//!   timing, batching and cancellation.
//! - [`DemoModel`] never runs out: it says what it heard, and calls the tools it is offered;
//!   for demos and for tests of what surrounds an agent.

mod demo;

pub use demo::DemoModel;

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt as _;
use futures_util::stream::{self, BoxStream};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::ModelError;
use crate::message::{StopReason, Usage};
use crate::model::{Model, ModelEvent, ModelRequest};

/// A deterministic model: answers each request with the next scripted response. Its
/// [`name`](Model::name) is `scripted`.
///
/// It keeps nothing of the requests it is given unless it is made [`recording`](Self::recording)
/// for a test that reads them back ([`requests`](Self::requests)): a request holds the
/// session's conversation, and a model that kept every one would make the session copy its
/// whole conversation at each turn, which a benchmark would count as the agent's cost.
///
/// ```
/// use bidi_llm::testing::{Scripted, ScriptedModel};
/// use bidi_llm::{Model, ModelRequest};
/// use futures_util::StreamExt;
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let model = ScriptedModel::new([
///     Scripted::new().tool_call("call-1", "weather", &json!({"city": "Oslo"})),
///     Scripted::new().text("It is sunny in Oslo."),
/// ])
/// .recording();
/// let events: Vec<_> = model.stream(ModelRequest::new(vec![], vec![])).collect().await;
/// assert!(matches!(events.last(), Some(bidi_llm::ModelEvent::Done { .. })));
/// assert_eq!(model.requests().len(), 1);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ScriptedModel {
    script: Arc<Mutex<VecDeque<Scripted>>>,
    requests: Requests,
    /// Its name; `scripted` unless [`named`](Self::named).
    name: Option<Arc<str>>,
}

impl ScriptedModel {
    /// A model answering with `responses`, in order. Once they run out, each call fails.
    pub fn new(responses: impl IntoIterator<Item = Scripted>) -> Self {
        Self {
            script: Arc::new(Mutex::new(responses.into_iter().collect())),
            requests: Requests::default(),
            name: None,
        }
    }

    /// The same model, named `name` (`scripted` by default): one of several an agent offers.
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(Arc::from(name));
        self
    }

    /// The same model, keeping every request it is given from now on, for
    /// [`requests`](Self::requests). Each kept request holds the conversation it was given, so
    /// the session copies its conversation at its next turn: for tests, not benchmarks.
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.requests = Requests::recording();
        self
    }

    /// Every request received so far.
    ///
    /// # Panics
    ///
    /// If the model is not [`recording`](Self::recording): it kept none.
    #[must_use]
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.all()
    }

    /// Queues one more answer, after those left: a test scripts each step as it comes.
    ///
    /// ```
    /// use bidi_llm::testing::{Scripted, ScriptedModel};
    /// use bidi_llm::{Model, ModelEvent, ModelRequest};
    /// use futures_util::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let model = ScriptedModel::new([]);
    /// model.push(Scripted::new().text_chunks(["hel", "lo"]));
    /// let events: Vec<_> = model.stream(ModelRequest::new(vec![], vec![])).collect().await;
    /// assert!(matches!(&events[1], ModelEvent::TextDelta(piece) if piece == "hel"));
    /// # }
    /// ```
    pub fn push(&self, answer: Scripted) {
        self.script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(answer);
    }
}

impl Model for ScriptedModel {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("scripted")
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        self.requests.record(request);
        let next = self
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let events = next.map_or_else(
            || {
                vec![ModelEvent::Error(ModelError::other(
                    "the scripted model has no response left",
                ))]
            },
            |scripted| scripted.events(),
        );
        Box::pin(stream::iter(events))
    }
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field(
                "remaining",
                &self
                    .script
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .finish()
    }
}

/// One scripted answer: blocks streamed in pieces, then `Done` (or a failure).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Scripted {
    events: Vec<ModelEvent>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    ending: Option<ModelEvent>,
    cut: bool,
}

impl Scripted {
    /// An empty answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A text block, streamed word by word.
    pub fn text(mut self, text: &str) -> Self {
        self.events.push(ModelEvent::TextStart);
        self.events.extend(
            text.split_inclusive(' ')
                .map(|word| ModelEvent::TextDelta(word.to_owned())),
        );
        self.events.push(ModelEvent::TextEnd);
        self
    }

    /// A text block streamed in exactly these pieces.
    pub fn text_chunks<'a>(mut self, pieces: impl IntoIterator<Item = &'a str>) -> Self {
        self.events.push(ModelEvent::TextStart);
        self.events.extend(
            pieces
                .into_iter()
                .map(|piece| ModelEvent::TextDelta(piece.to_owned())),
        );
        self.events.push(ModelEvent::TextEnd);
        self
    }

    /// A thinking block, streamed word by word.
    pub fn thinking(mut self, thinking: &str) -> Self {
        self.events.push(ModelEvent::ThinkingStart);
        self.events.extend(
            thinking
                .split_inclusive(' ')
                .map(|word| ModelEvent::ThinkingDelta(word.to_owned())),
        );
        self.events.push(ModelEvent::ThinkingEnd);
        self
    }

    /// A tool call whose arguments are streamed in two pieces.
    pub fn tool_call(self, id: &str, name: &str, arguments: &Value) -> Self {
        self.raw_tool_call(id, name, &arguments.to_string())
    }

    /// A tool call with arguments given as raw text (which may be invalid JSON).
    pub fn raw_tool_call(mut self, id: &str, name: &str, arguments: &str) -> Self {
        self.events.push(ModelEvent::ToolCallStart {
            id: id.to_owned(),
            name: name.to_owned(),
        });
        let middle = arguments
            .char_indices()
            .nth(arguments.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        let (first, second) = arguments.split_at(middle);
        for piece in [first, second]
            .into_iter()
            .filter(|piece| !piece.is_empty())
        {
            self.events
                .push(ModelEvent::ToolCallDelta(piece.to_owned()));
        }
        self.events.push(ModelEvent::ToolCallEnd);
        self
    }

    /// The usage reported with `Done`.
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// The stop reason reported with `Done`; without it, `tool_calls` when the answer calls
    /// tools and `stop` otherwise.
    ///
    /// ```
    /// use bidi_llm::testing::Scripted;
    /// use bidi_llm::{ModelEvent, StopReason};
    ///
    /// let refused = Scripted::new().text("I can't help with that.").stop(StopReason::Refusal);
    /// assert!(matches!(
    ///     refused.events().last(),
    ///     Some(ModelEvent::Done { stop_reason: StopReason::Refusal, .. })
    /// ));
    /// ```
    pub fn stop(mut self, stop_reason: StopReason) -> Self {
        self.stop_reason = Some(stop_reason);
        self
    }

    /// Fails with `error` after the blocks so far (mid-stream, the last block left open).
    pub fn fail(mut self, error: &str) -> Self {
        self.ending = Some(ModelEvent::Error(ModelError::other(error.to_owned())));
        self.cut = true;
        self
    }

    /// The model events this answer streams.
    #[must_use]
    pub fn events(&self) -> Vec<ModelEvent> {
        let mut events = self.events.clone();
        match &self.ending {
            Some(ending) => {
                if self.cut {
                    // Leave the last block open, as a dropped connection would.
                    if matches!(
                        events.last(),
                        Some(
                            ModelEvent::TextEnd | ModelEvent::ThinkingEnd | ModelEvent::ToolCallEnd
                        )
                    ) {
                        events.pop();
                    }
                }
                events.push(ending.clone());
            }
            None => {
                let calls = events
                    .iter()
                    .any(|e| matches!(e, ModelEvent::ToolCallStart { .. }));
                let stop_reason = self.stop_reason.unwrap_or(if calls {
                    StopReason::ToolCalls
                } else {
                    StopReason::Stop
                });
                events.push(ModelEvent::Done {
                    stop_reason,
                    usage: self.usage,
                });
            }
        }
        events
    }
}

/// Ends a text answer that a [`ChannelModel`] is giving: `rest` as the last delta, then the
/// end of the text and of the answer (stop reason `Stop`). Sends nothing more once the model's
/// answer is gone.
pub fn finish_text(answer: &mpsc::UnboundedSender<ModelEvent>, rest: &str) {
    let done = ModelEvent::Done {
        stop_reason: StopReason::Stop,
        usage: Usage::default(),
    };
    for event in [
        ModelEvent::TextDelta(rest.to_owned()),
        ModelEvent::TextEnd,
        done,
    ] {
        if answer.send(event).is_err() {
            return;
        }
    }
}

/// A model that streams what the test sends through its channel, as it comes: each request
/// takes the events up to and including the next `Done` or `Error`, so one sender scripts
/// several answers. Requests are answered one at a time, in order; once the sender is dropped,
/// an answer just ends (which the loop reports as a failed model call). Its
/// [`name`](Model::name) is `channel`. Like [`ScriptedModel`], it keeps the requests it is
/// given only once made [`recording`](Self::recording).
///
/// ```
/// use bidi_llm::testing::ChannelModel;
/// use bidi_llm::{Model, ModelEvent, ModelRequest, StopReason, Usage};
/// use futures_util::StreamExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (model, tx) = ChannelModel::new();
/// let mut answer = model.stream(ModelRequest::new(vec![], vec![]));
/// tx.send(ModelEvent::TextStart).unwrap();
/// assert!(matches!(answer.next().await, Some(ModelEvent::TextStart)));
/// // Nothing more is sent yet: the answer waits.
/// tx.send(ModelEvent::Done { stop_reason: StopReason::Stop, usage: Usage::default() }).unwrap();
/// assert!(matches!(answer.next().await, Some(ModelEvent::Done { .. })));
/// assert!(answer.next().await.is_none());
/// # }
/// ```
#[derive(Clone)]
pub struct ChannelModel {
    events: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<ModelEvent>>>,
    requests: Requests,
}

impl ChannelModel {
    /// The model and the sender of its events.
    #[must_use]
    pub fn new() -> (Self, mpsc::UnboundedSender<ModelEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let model = Self {
            events: Arc::new(tokio::sync::Mutex::new(rx)),
            requests: Requests::default(),
        };
        (model, tx)
    }

    /// The same model, keeping every request it is given from now on, for
    /// [`requests`](Self::requests). Each kept request holds the conversation it was given, so
    /// the session copies its conversation at its next turn: for tests, not benchmarks.
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.requests = Requests::recording();
        self
    }

    /// Every request received so far.
    ///
    /// # Panics
    ///
    /// If the model is not [`recording`](Self::recording): it kept none.
    #[must_use]
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.all()
    }
}

impl Model for ChannelModel {
    fn name(&self) -> &str {
        "channel"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        self.requests.record(request);
        let events = Arc::clone(&self.events);
        stream::once(async move { events.lock_owned().await })
            .flat_map(|events| {
                stream::unfold((events, false), |(mut events, over)| async move {
                    if over {
                        return None;
                    }
                    let event = events.recv().await?;
                    let over = matches!(event, ModelEvent::Done { .. } | ModelEvent::Error(_));
                    Some((event, (events, over)))
                })
            })
            .boxed()
    }
}

impl fmt::Debug for ChannelModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelModel").finish_non_exhaustive()
    }
}

/// The requests a test model received, shared by its clones.
#[derive(Debug, Clone, Default)]
struct Requests(Option<Arc<Mutex<Vec<ModelRequest>>>>);

impl Requests {
    /// Keeps `request`, if requests are kept; drops it at once otherwise.
    fn record(&self, request: ModelRequest) {
        if let Some(kept) = &self.0 {
            kept.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request);
        }
    }

    /// Requests kept from now on.
    fn recording() -> Self {
        Self(Some(Arc::default()))
    }

    /// The requests kept.
    ///
    /// # Panics
    ///
    /// If none are kept: a test reading them made its model without `.recording()`.
    fn all(&self) -> Vec<ModelRequest> {
        let Some(kept) = &self.0 else {
            panic!("the test model keeps its requests only once made `.recording()`");
        };
        kept.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Conversation;
    use crate::message::{Message, UserMessage};

    /// A conversation of one message, with room to grow in place.
    fn conversation() -> Conversation {
        let mut messages = Vec::with_capacity(8);
        messages.push(Message::User(UserMessage::new("hi")));
        Conversation::from(messages)
    }

    #[tokio::test]
    async fn a_model_that_is_not_recording_keeps_no_conversation() {
        let model =
            ScriptedModel::new([Scripted::new().text("hello"), Scripted::new().text("again")]);
        let mut messages = conversation();
        let before = messages.as_ptr();
        let answer: Vec<_> = model
            .stream(ModelRequest::new(messages.clone(), vec![]))
            .collect()
            .await;
        assert!(matches!(answer.last(), Some(ModelEvent::Done { .. })));
        messages.push(Message::User(UserMessage::new("more")));
        assert_eq!(
            messages.as_ptr(),
            before,
            "appended in place: the model holds none of it"
        );

        let model = model.recording();
        let kept = messages.as_ptr();
        drop(model.stream(ModelRequest::new(messages.clone(), vec![])));
        messages.push(Message::User(UserMessage::new("and more")));
        assert_ne!(
            messages.as_ptr(),
            kept,
            "the kept request holds the conversation"
        );
        assert_eq!(model.requests().len(), 1);
    }

    #[test]
    #[should_panic(expected = "`.recording()`")]
    fn reading_the_requests_of_a_model_that_keeps_none_says_how_to_keep_them() {
        let _ = ScriptedModel::new([]).requests();
    }
}
