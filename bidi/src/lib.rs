//! bidi: typed bidirectional streaming flows for tokio, and agents served over every agent
//! protocol, in one dependency. Each module is one of the bidi crates, re-exported; a feature
//! turns each protocol on, so a program compiles the protocols it serves and no other.
//!
//! ```toml
//! [dependencies]
//! bidi = { version = "0.1", features = ["agui", "ai-sdk"] }
//! ```
//!
//! An agent served over AG-UI and the AI SDK's UI message stream:
//!
//! ```no_run
//! # #[cfg(all(feature = "agui", feature = "ai-sdk"))]
//! # mod run {
//! use bidi::flow::Registry;
//! use bidi::http::Server;
//! use bidi::llm::LlmAgent;
//! use bidi::llm::testing::DemoModel;
//!
//! # pub async fn main() -> std::io::Result<()> {
//! let assistant = LlmAgent::builder("assistant", DemoModel).build();
//! Server::new(Registry::new())
//!     .agent(&assistant)
//!     .protocol(bidi::agui::AgUi::new())       // POST /agent/assistant/ag-ui
//!     .protocol(bidi::ai_sdk::Chat::new())     // POST /agent/assistant/chat (useChat)
//!     .bind()
//!     .await?
//!     .serve()
//!     .await
//! # }
//! # }
//! # fn main() {}
//! ```
//!
//! | module | crate | what it is |
//! |---|---|---|
//! | [`core`] | `bidi-core` | `BidiAction`, connections, turns, cancellation |
//! | [`flow`] | `bidi-flow` | traced flows, the registry and its JSON Schemas, JSON connections |
//! | [`session`] | `bidi-session` | session stores: memory, SQLite, PostgreSQL, your own |
//! | [`agent`] | `bidi-agent` | agents over sessions, turn ends |
//! | `llm` | `bidi-llm` | `LlmAgent`: models, tools, approvals, agent events |
//! | `http` | `bidi-http` | the HTTP server: flows, WebSocket, the execute wire, the protocol seam |
//! | `agui`, `ai_sdk`, `a2a`, `genkit`, `mcp`, `devui` | `bidi-agui` … `bidi-devui` | the HTTP protocols |
//! | `acp`, `ndjson`, `channel` | `bidi-acp`, `bidi-ndjson`, `bidi-channel` | editors, subprocess agents, chat channels |
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]

pub use bidi_agent as agent;
pub use bidi_core as core;
pub use bidi_flow as flow;
pub use bidi_session as session;

#[cfg(feature = "a2a")]
pub use bidi_a2a as a2a;
#[cfg(feature = "acp")]
pub use bidi_acp as acp;
#[cfg(feature = "agui")]
pub use bidi_agui as agui;
#[cfg(feature = "ai-sdk")]
pub use bidi_ai_sdk as ai_sdk;
#[cfg(feature = "channel")]
pub use bidi_channel as channel;
#[cfg(feature = "devui")]
pub use bidi_devui as devui;
#[cfg(feature = "genkit")]
pub use bidi_genkit as genkit;
#[cfg(feature = "http")]
pub use bidi_http as http;
#[cfg(feature = "llm")]
pub use bidi_llm as llm;
#[cfg(feature = "mcp")]
pub use bidi_mcp as mcp;
#[cfg(feature = "ndjson")]
pub use bidi_ndjson as ndjson;
