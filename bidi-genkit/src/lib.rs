//! Genkit's wires for bidi: its agent wire, so that Genkit's own agent client (`remoteAgent`
//! from `genkit/beta/client`) talks to an `LlmAgent` of a [`bidi_http::Server`], and its
//! reflection API, so that Genkit's CLI and Developer UI drive a bidi program's actions.
//!
//! - [`agent::AgentWire`] serves `POST /agent/{name}/genkit` (a turn, streamed or not, with
//!   durable streams a client reconnects to), `.../genkit/getSnapshot` and `.../genkit/abort`
//!   for each agent of the server.
//! - [`reflection::Reflection`] serves Genkit's reflection API beside the server, on a
//!   listener of its own (port 3100 or the next free one, `GENKIT_REFLECTION_PORT` to
//!   choose), and writes the runtime file the tools find it by, under the project root (the
//!   nearest directory with a `package.json` or another of Genkit's markers; not
//!   `Cargo.toml`).
//!
//! ```no_run
//! use bidi_flow::Registry;
//! use bidi_genkit::{agent::AgentWire, reflection::Reflection};
//! use bidi_http::Server;
//! use bidi_llm::LlmAgent;
//! use bidi_llm::testing::DemoModel;
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let registry = Registry::new();
//! let assistant = LlmAgent::builder("assistant", DemoModel).build();
//! registry.register(assistant.agent().clone().into_flow()).expect("a new key");
//! Server::new(registry)
//!     .agent(&assistant)
//!     .protocol(AgentWire::new())
//!     // Only under `genkit start`, which sets GENKIT_ENV=dev.
//!     .protocol(Reflection::in_dev())
//!     .bind()
//!     .await?
//!     .serve()
//!     .await
//! # }
//! ```
//!
//! ```sh
//! npx genkit start --non-interactive -- cargo run    # the tools list the registry's actions, run, cancel, trace them
//! npx genkit flow:run --non-interactive countdown 3  # /flow/countdown: a flow registered as ActionType::new("flow")
//! ```
//!
//! (Without `--non-interactive`, the CLI's first run waits at its analytics notice.) A run
//! through the tools is a connection with one input, streamed or not; a run without init
//! (`flow:run` sends none) gets the init type's defaults when it has them. Its connection
//! span's trace, with its turns and `run` steps, goes to the tools' telemetry server as it
//! runs. The API answers Genkit's tools on this machine only, not pages in a browser; on a
//! server with `auth` it needs `GENKIT_REFLECTION_SECRET_TOKEN`. The module [`reflection`]
//! has the API, who may call it, its errors and its environment.
//!
//! # Feature flags
//!
#![doc = document_features::document_features!()]

#[cfg(feature = "agent")]
pub mod agent;
#[cfg(feature = "reflection")]
pub mod reflection;
