//! Traced bidirectional flows: [`BidiFlow`] (a `bidi_core::BidiAction` with OpenTelemetry
//! spans), the action [`Registry`] with JSON Schemas, and JSON connections for transports.
//!
//! ```
//! use bidi_core::{BoxError, Inbound, Outbound};
//! use bidi_flow::{BidiFlow, Registry};
//! use futures_util::StreamExt;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let shout = BidiFlow::new("shout", |_ctx, (), mut inbound: Inbound<String>, out: Outbound<String>| async move {
//!     let mut turns = 0u32;
//!     while let Some(text) = inbound.recv().await {
//!         // A traced step: a child span of this connection's span.
//!         let loud = bidi_flow::run("uppercase", async { Ok::<_, BoxError>(text.to_uppercase()) }).await?;
//!         out.send(loud).await?;
//!         out.end_turn().await?;
//!         turns += 1;
//!     }
//!     Ok::<_, BoxError>(turns)
//! })
//! .with_description("Shouts back");
//!
//! let registry = Registry::new();
//! registry.register(shout)?;
//!
//! // What a transport does: JSON in, JSON out.
//! let mut conn = registry.connect_json("/bidi-flow/shout", json!(null))?;
//! conn.send(json!("hello")).await?;
//! let chunks: Vec<_> = conn.responses().collect().await;
//! assert_eq!(chunks[0].as_ref().unwrap(), &json!("HELLO"));
//! assert!(conn.send(json!(42)).await.is_err()); // refused: not a string; the connection goes on
//! conn.close();
//! assert_eq!(conn.output().await?, json!(1));
//! # Ok(())
//! # }
//! ```
//!
//! # Flow types
//!
//! A flow registered in a [`Registry`] is served as JSON, so its types need serde and
//! schemars 1's `JsonSchema` (for the descriptors' schemas): the init `Deserialize`,
//! `Serialize` and `JsonSchema`; the input `Deserialize` and `JsonSchema`; the chunks and the
//! output `Serialize` and `JsonSchema`. A flow used from Rust alone needs none of them.
//! Transports send `null` for an init (or an input) the peer left out, which an init of `()`
//! or an `Option` takes; any other type refuses it with the JSON Pointer `""`.
//!
//! # Transports
//!
//! A transport (HTTP, WebSocket, stdio, ...) serves a [`Registry`] through
//! [`Registry::connect_json`]: a bad key is refused with a [`bidi_core::NotFound`] naming the
//! registered key it resembles, a bad init or input with the JSON Pointer of the problem (errors
//! quote at most a few hundred bytes of what the peer sent, and name JSON, not Rust types:
//! [`text`]). [`JsonConnection::into_split`] gives a cloneable [`JsonSendHalf`] for the task
//! that reads the peer and a [`JsonRecvHalf`] for the task that writes chunks, turn ends
//! ([`JsonResponses::turn_ended`]) and the output; backpressure runs end to end, and `done()`
//! on either half waits for the connection's end without consuming anything. A transport
//! cancels with a cause of its own when the peer goes away. A transport that speaks JSON frames
//! to its peer (`init`/`connect`, `send`, `close`, `cancel` in; `chunk`, `turn_end`, `output`,
//! `error` out) uses [`frame`], their one codec, with the error codes and the frame size limit.
//! A protocol crate registers its
//! flows under its own [`ActionType`] (`/ndjson/{name}`, say), made with
//! [`ActionType::from_static`].
//!
//! # Tracing
//!
//! Each connection of a flow gets one span, named after the flow and open for the connection's
//! lifetime, with `bidi.flow`, `bidi.connection_id`, `bidi.init` and `bidi.output` (JSON, capped
//! at [`JSON_ATTRIBUTE_LIMIT`] bytes), `bidi.messages_in`, `bidi.messages_out`, `bidi.turns`, and
//! an error status on failure or cancellation. Each turn is a child span `turn {n}` with its
//! `bidi.chunks`. A connection with no turn emits only its own span. Inside the action, the
//! connection span is the current OpenTelemetry context: [`run`] steps, spans made with the
//! OpenTelemetry API and `tracing` spans (through `tracing-opentelemetry`) nest under it; tasks the
//! action spawns keep it with `opentelemetry::context::FutureExt::with_current_context` or
//! `tracing::Instrument::in_current_span`.
//!
//! Spans come from the global tracer provider (a no-op until the application installs one, in
//! which case a flow costs what a bare action does) or from [`BidiFlow::with_tracer`].
//!
//! # Tokio
//!
//! Flows run on a tokio runtime with its time driver (`#[tokio::main]`, or a runtime built with
//! `enable_all()`). For `#[tokio::main]` as in the examples, your `Cargo.toml` needs:
//!
//! ```toml
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! # Feature flags
//!
//! `bidi-flow` has no optional features.

#![doc(test(attr(deny(warnings))))]

mod flow;
pub mod frame;
pub mod idle;
mod json;
pub mod lines;
pub mod log;
mod registry;
pub mod text;
mod trace;

pub use flow::{ActionType, BidiFlow};
pub use json::{JsonConnection, JsonError, JsonRecvHalf, JsonResponses, JsonSendHalf};
pub use registry::{ActionDesc, Registry, RegistryError};
pub use trace::{JSON_ATTRIBUTE_LIMIT, json_attribute, run};
