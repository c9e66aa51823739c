//! A model call of an execution: its answer streamed through the [`Assembler`], and, when it
//! fails, the agent's [`Retry`](crate::Retry) policy: the same model again after a backoff, or
//! the next fallback model, each attempt announced by a `model_retry` event.

use std::future::poll_fn;
use std::task::{Context, Poll};
use std::time::Duration;

use bidi_flow::log::Level;
use futures_core::Stream;
use futures_util::stream::StreamExt as _;

use super::{BATCH, For, Interrupted, Turn};
use crate::error::{Error, ModelError};
use crate::event::AgentEvent;
use crate::message::{
    AbortedMessage, AssistantMessage, ErrorMessage, Message, Role, StopReason, ToolCall,
};
use crate::model::{Assembled, Assembler, Model, ModelEvent};
use crate::retry::Next;
use crate::session::LlmSession;

/// How one attempt at a model call ended, short of an interruption.
enum Attempt {
    /// The answer is in the session: its tool calls.
    Answered(Vec<ToolCall>),
    /// It failed; what it had streamed.
    Failed {
        error: ModelError,
        partial: AssistantMessage,
    },
}

impl Turn<'_> {
    /// One model call, streamed: the tool calls of its answer, or `None` when it failed (an
    /// error message is added and reported). An interruption adds an aborted message.
    pub(super) async fn call_model(
        &mut self,
        state: &mut LlmSession,
    ) -> Result<Option<Vec<ToolCall>>, Interrupted> {
        self.emit(AgentEvent::MessageStart {
            role: Role::Assistant,
        });
        let config = self.config;
        // A model the client lends is the only one; the agent's own are followed by its
        // fallbacks.
        let primary = match self.host {
            Some(host) => host.model(),
            None => config.model(state.chosen_model.as_deref()),
        };
        let fallbacks = if self.host.is_some() {
            &[][..]
        } else {
            &config.fallbacks[..]
        };
        let mut models = std::iter::once(primary).chain(fallbacks.iter().map(AsRef::as_ref));
        let mut model = models.next().unwrap_or(primary);
        let (mut attempt, mut tries) = (1, 1);
        loop {
            let (error, partial) = match self.attempt(state, model).await? {
                Attempt::Answered(calls) => return Ok(Some(calls)),
                Attempt::Failed { error, partial } => (error, partial),
            };
            let streamed = !partial.content.is_empty();
            let next = config
                .retry
                .as_ref()
                .map_or(Next::Fail, |retry| retry.next(tries, &error, streamed));
            let delay = match next {
                Next::Wait(delay) => delay,
                // The next model takes over at once.
                Next::Fallback if let Some(next) = models.next() => {
                    (model, tries) = (next, 0);
                    Duration::ZERO
                }
                Next::Fallback | Next::Fail => return Ok(self.failed(state, error, partial)),
            };
            attempt += 1;
            tries += 1;
            let retry = AgentEvent::ModelRetry {
                attempt,
                model: model.name().to_owned(),
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error: error.to_string(),
                discarded: streamed,
            };
            if let (Some(logger), Some(note)) = (self.logger, retry.note()) {
                logger.log(Level::Warning, note);
            }
            self.emit(retry);
            if !delay.is_zero() {
                // Boxed: rare, and it would make every execution's future larger.
                if let Err(interrupted) = Box::pin(self.back_off(delay)).await {
                    let partial = AssistantMessage {
                        stop_reason: StopReason::Aborted,
                        ..AssistantMessage::default()
                    };
                    self.end(state, Message::Aborted(AbortedMessage { partial }));
                    return Err(interrupted);
                }
            }
        }
    }

    /// Hands the events over, then waits `delay` unless the execution is interrupted.
    async fn back_off(&mut self, delay: Duration) -> Result<(), Interrupted> {
        self.flush().await?;
        let sleep = tokio::time::sleep(delay);
        self.watch.wait(sleep, For::Work).await.map(drop)
    }

    /// The failed call's error message, added and reported.
    fn failed(
        &mut self,
        state: &mut LlmSession,
        error: ModelError,
        partial: AssistantMessage,
    ) -> Option<Vec<ToolCall>> {
        let message = Message::Error(ErrorMessage {
            error: error.to_string(),
            partial: Some(partial),
        });
        self.end(state, message.clone());
        self.fail(&Error::Model(error), Some(message));
        None
    }

    /// One attempt at a call of `model`: its answer added to the session, or its failure.
    async fn attempt(
        &mut self,
        state: &mut LlmSession,
        model: &dyn Model,
    ) -> Result<Attempt, Interrupted> {
        if state.model.as_deref() != Some(model.name()) {
            state.model = Some(model.name().to_owned());
        }
        let request = self.request(state);
        let mut chat =
            (self.spans.as_ref()).map(|spans| spans.chat(model.name(), model.provider(), &request));
        let mut stream = match &chat {
            // The call's context is current while the model makes its stream (which reads
            // it, to send it on), not at each of its polls: a context attached per event
            // would cost the loop a fifth of its rate.
            Some(chat) => {
                let _current = chat.context().clone().attach();
                model.stream(request)
            }
            None => model.stream(request),
        };
        let mut assembler = Assembler::new();
        loop {
            let outbox = &mut self.outbox;
            let assembled = match poll_fn(|cx| drain(&mut stream, &mut assembler, outbox, cx)).await
            {
                Some(assembled) => assembled,
                None => match self.wait_from(&mut stream).await {
                    Ok(Some(event)) => assembler.apply(event, &mut self.outbox),
                    Ok(None) => assembler.ended(),
                    Err(Interrupted) => {
                        // The model lets go of the conversation before it grows: shared, it
                        // would be copied.
                        drop(stream);
                        if let (Some(spans), Some(chat)) = (self.spans.as_mut(), chat.take()) {
                            spans.failed(chat, "the execution was interrupted", true);
                        }
                        let mut partial = assembler.partial();
                        partial.stop_reason = StopReason::Aborted;
                        self.end(state, Message::Aborted(AbortedMessage { partial }));
                        return Err(Interrupted);
                    }
                },
            };
            match assembled {
                Assembled::Streaming => {}
                Assembled::Done(assistant) => {
                    drop(stream);
                    if let (Some(spans), Some(chat)) = (self.spans.as_mut(), chat.take()) {
                        spans.answered(chat, &assistant);
                    }
                    let cost = assistant.usage.cost.total;
                    self.cost += cost;
                    state.total_cost += cost;
                    let calls = assistant.tool_calls().cloned().collect();
                    self.end(state, Message::Assistant(assistant));
                    return Ok(Attempt::Answered(calls));
                }
                Assembled::Failed { error, partial } => {
                    drop(stream);
                    if let (Some(spans), Some(chat)) = (self.spans.as_mut(), chat.take()) {
                        spans.failed(chat, &error.to_string(), false);
                    }
                    return Ok(Attempt::Failed { error, partial });
                }
            }
        }
    }
}

/// Assembles every event `stream` has ready now into `outbox`, in one synchronous pass, until
/// the outbox is full or the answer is over: what the answer came to, or `None` (the stream is
/// not ready, or the outbox is full) for the loop to hand the outbox over and wait.
///
/// A provider's buffered tokens, or a scripted answer, are thousands of events ready at once:
/// each costs a poll and a push here, not a trip through the loop's `async` state machine.
fn drain(
    stream: &mut (impl Stream<Item = ModelEvent> + Unpin),
    assembler: &mut Assembler,
    outbox: &mut Vec<AgentEvent>,
    cx: &mut Context<'_>,
) -> Poll<Option<Assembled>> {
    while outbox.len() < BATCH {
        let assembled = match stream.poll_next_unpin(cx) {
            Poll::Ready(Some(event)) => assembler.apply(event, outbox),
            Poll::Ready(None) => assembler.ended(),
            Poll::Pending => break,
        };
        if !matches!(assembled, Assembled::Streaming) {
            return Poll::Ready(Some(assembled));
        }
    }
    Poll::Ready(None)
}
