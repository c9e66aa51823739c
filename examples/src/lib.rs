//! The flows the examples share: an echo action and a chat agent that remembers what it heard
//! (those of the main command, `bidi-demo`), the model that needs no service, and a session
//! store of your own in a page ([`map_store`]).

pub mod map_store;

pub use bidi_demo::{Chat, chat, echo};

/// The model the examples run without a service: [`bidi_llm::testing::DemoModel`].
pub use bidi_llm::testing::DemoModel;
