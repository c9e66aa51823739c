//! bidi-llm: the wire shapes, the agent loop, sessions held by one execution at a time (also
//! across processes), cancellation, and `OpenAiModel` against a local server.

#![allow(clippy::unwrap_used)]

mod agent_loop;
mod approval;
mod cancel;
mod context;
mod custom;
mod host;
mod media;
#[cfg(feature = "openai")]
mod openai;
mod policy;
#[cfg(feature = "openai")]
mod retry;
mod sessions;
mod spans;
mod support;
mod takeover;
mod vocabulary;
