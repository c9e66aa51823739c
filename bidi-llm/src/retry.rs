//! [`Retry`]: what an agent does when a model call fails: try it again after a backoff that
//! honours the provider's `Retry-After`, then the agent's [fallback
//! models](crate::LlmAgentBuilder::fallback), each with the same attempts.
//!
//! Every retry is an event, [`AgentEvent::ModelRetry`](crate::AgentEvent::ModelRetry): a
//! client sees why the answer is late, which model answers next, and whether the text it was
//! showing is void. Each attempt is a model call of its own in the execution's trace (its own
//! `chat` span, a failed one marked so).
//!
//! What is tried again:
//!
//! - **A failure retrying can fix** ([`ModelError::is_transient`]): the request could not be
//!   sent or its answer read, the provider answered 408, 409, 425, 429 or a 5xx, reported an
//!   error inside its stream, or its stream was cut before the answer was complete.
//! - **A stream cut mid-answer**, by [`Retry::on_cut`]: [`Cut::Restart`] (the default) calls
//!   the model again from the start, and the retry event says the text streamed so far is
//!   [`discarded`](crate::AgentEvent::ModelRetry::discarded); [`Cut::Keep`] ends the call
//!   with what was streamed, kept in the session's error message, as an agent without a retry
//!   policy does.
//!
//! Any other failure (a request the provider refuses, a malformed stream) is not retried: the
//! next fallback model takes over at once, and with none left the execution fails as it
//! would without a policy. A call the execution's cancellation interrupts, during a backoff
//! too, is never retried.
//!
//! ```
//! use std::time::Duration;
//!
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use bidi_llm::{Cut, LlmAgent, Retry};
//!
//! let primary = ScriptedModel::new([Scripted::new().text("Hello")]).named("primary");
//! let backup = ScriptedModel::new([Scripted::new().text("Hello")]).named("backup");
//! let agent = LlmAgent::builder("assistant", primary)
//!     .retry(
//!         Retry::new()
//!             .attempts(4)
//!             .backoff(Duration::from_millis(200), Duration::from_secs(10))
//!             .on_cut(Cut::Restart),
//!     )
//!     .fallback(backup)
//!     .build();
//! # drop(agent);
//! ```

use std::hash::BuildHasher as _;
use std::time::Duration;

use crate::error::ModelError;

/// How often, and how patiently, an agent calls a model again after a failure: see the
/// [module](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    attempts: u32,
    first: Duration,
    longest: Duration,
    patience: Duration,
    on_cut: Cut,
}

/// What a retrying agent does with an answer whose stream was cut after it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Cut {
    /// Call the model again from the start; what the cut call streamed is discarded.
    #[default]
    Restart,
    /// End the call with what it streamed (kept in the session's error message); a fallback
    /// model does not take over.
    Keep,
}

impl Default for Retry {
    fn default() -> Self {
        Self::new()
    }
}

impl Retry {
    /// Three attempts a model, backoff from 500 ms doubling up to 30 s, a `Retry-After` of up
    /// to 60 s honoured, a cut stream restarted.
    #[must_use]
    pub fn new() -> Self {
        Self {
            attempts: 3,
            first: Duration::from_millis(500),
            longest: Duration::from_secs(30),
            patience: Duration::from_secs(60),
            on_cut: Cut::Restart,
        }
    }

    /// Calls each model at most `attempts` times (at least once) before the next fallback
    /// model, or the failure, takes over.
    #[must_use]
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Waits about `first` before the second attempt, then twice as long before each next
    /// one, never more than `longest`. Each wait is drawn between half and all of its figure,
    /// so that clients a failure struck together do not come back together.
    #[must_use]
    pub fn backoff(mut self, first: Duration, longest: Duration) -> Self {
        self.first = first;
        self.longest = longest.max(first);
        self
    }

    /// Waits as long as a provider's `Retry-After` asks when it is at most `patience`; a
    /// provider that asks for longer is not tried again (the next fallback model takes over).
    #[must_use]
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// What to do with an answer whose stream was cut after it began.
    #[must_use]
    pub fn on_cut(mut self, on_cut: Cut) -> Self {
        self.on_cut = on_cut;
        self
    }

    /// What the policy says of a call that failed with `error` on its `attempt`-th try
    /// (from 1), having streamed something or not.
    pub(crate) fn next(&self, attempt: u32, error: &ModelError, streamed: bool) -> Next {
        if streamed && self.on_cut == Cut::Keep {
            return Next::Fail;
        }
        if !error.is_transient() || attempt >= self.attempts {
            return Next::Fallback;
        }
        match error.retry_after() {
            Some(asked) if asked > self.patience => Next::Fallback,
            Some(asked) => Next::Wait(asked),
            None => Next::Wait(self.backoff_for(attempt)),
        }
    }

    /// The wait after the `attempt`-th try: half to all of `first × 2^(attempt - 1)`, capped.
    fn backoff_for(&self, attempt: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1 << (attempt.saturating_sub(1)).min(20));
        let ceiling = doubled.min(self.longest);
        // A draw in [0, 1) from the standard library's randomly keyed hasher.
        let draw = std::collections::hash_map::RandomState::new()
            .hash_one((attempt, std::time::SystemTime::now()))
            >> 11;
        #[allow(clippy::cast_precision_loss)]
        let fraction = draw as f64 / (1u64 << 53) as f64;
        ceiling.mul_f64(0.5 + fraction / 2.0)
    }
}

/// What follows a failed call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The same model again, after this long.
    Wait(Duration),
    /// The next fallback model, if any.
    Fallback,
    /// The call fails as it is.
    Fail,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, retry_after: Option<Duration>) -> ModelError {
        ModelError::Status {
            status,
            body: String::new(),
            retry_after,
        }
    }

    #[test]
    fn a_transient_failure_waits_a_growing_backoff_within_its_bounds() {
        let retry = Retry::new()
            .attempts(5)
            .backoff(Duration::from_millis(100), Duration::from_millis(300));
        for (attempt, ceiling) in [(1, 100), (2, 200), (3, 300), (4, 300)] {
            let Next::Wait(wait) = retry.next(attempt, &status(503, None), false) else {
                panic!("attempt {attempt} should wait");
            };
            let ceiling = Duration::from_millis(ceiling);
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{wait:?} for {ceiling:?}"
            );
        }
        assert_eq!(retry.next(5, &status(503, None), false), Next::Fallback);
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_patience() {
        let retry = Retry::new().patience(Duration::from_secs(5));
        let asked = Some(Duration::from_secs(2));
        assert_eq!(
            retry.next(1, &status(429, asked), false),
            Next::Wait(Duration::from_secs(2))
        );
        let too_long = Some(Duration::from_secs(6));
        assert_eq!(retry.next(1, &status(429, too_long), false), Next::Fallback);
    }

    #[test]
    fn what_retrying_cannot_fix_goes_to_the_fallback_and_a_kept_cut_fails() {
        let retry = Retry::new();
        assert_eq!(retry.next(1, &status(400, None), false), Next::Fallback);
        assert_eq!(
            retry.next(1, &ModelError::Protocol("bad".into()), false),
            Next::Fallback
        );
        assert!(matches!(
            retry.next(1, &ModelError::Ended, true),
            Next::Wait(_)
        ));
        let keep = Retry::new().on_cut(Cut::Keep);
        assert_eq!(keep.next(1, &ModelError::Ended, true), Next::Fail);
        assert!(matches!(
            keep.next(1, &ModelError::Ended, false),
            Next::Wait(_)
        ));
    }
}
