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
//!
//! # Contract
//!
//! The rules this crate keeps, for the crates built on it and for anyone extending it:
//! **F1–F4** for flows and the registry, **T1–T5** for the transport seam every protocol crate
//! stands on. They are numbered so that reviews and other crates' docs can point at them; a
//! change to the crate keeps every one, or says here which it changes.
//!
//! ## Flows
//!
//! - **F1** [`BidiFlow`] wraps a `bidi_core::BidiAction` with the same connect API. Each
//!   connection gets one OpenTelemetry span, each turn a child span `turn {n}`, with the
//!   attributes [Tracing](#tracing) lists and an error status on failure; a connection with no
//!   turn emits only its own span.
//! - **F2** [`run`] opens a child span of the current flow span; spans made in user code with
//!   the OpenTelemetry API, or with `tracing` through `tracing-opentelemetry`, nest under the
//!   connection's span.
//! - **F3** [`Registry`]: [`register`](Registry::register) (a key registered twice is an
//!   error), typed lookup, and [`actions`](Registry::actions) returning [`ActionDesc`]s, which
//!   serialize as `{key, name, type, description, inputSchema, outputSchema, streamSchema,
//!   initSchema, metadata}` (camelCase; the metadata has `bidi: true`). The key is
//!   `/{type}/{name}`. Kinds are open: [`ActionType::BIDI_FLOW`] (`/bidi-flow/echo`),
//!   [`ActionType::AGENT`] (`/agent/chat`), and any kind a protocol crate makes with
//!   [`ActionType::from_static`] (checked: lowercase ASCII letters, digits, `-`).
//!   `inputSchema` describes one inbound message; unit types have no schema; schemas come from
//!   schemars. [`Registry::action`] returns the descriptor, or the `NotFound` a transport
//!   answers with: a lookup that misses names a registered key it resembles (`echo` →
//!   `/bidi-flow/echo`).
//! - **F4** [`Registry::connect_json`] returns a [`JsonConnection`] over `serde_json::Value`s.
//!   A bad init is refused before the action starts; a bad inbound message is refused and the
//!   action keeps running (nothing already accepted is lost). Errors name where the value is
//!   wrong as a JSON Pointer (RFC 6901; `""` is the whole value) and quote at most a few
//!   hundred bytes of what the peer sent.
//!
//! ## The transport seam
//!
//! - **T1** A transport drives a registered action through a [`JsonConnection`] that splits
//!   ([`into_split`](JsonConnection::into_split)) into a cloneable [`JsonSendHalf`] and a
//!   [`JsonRecvHalf`] (responses and output), so that one task reads the peer and another
//!   writes chunks. Backpressure is end to end: a slow peer slows the action, and nothing
//!   buffers without bound. A writer that only writes chunks on reads them as JSON text
//!   ([`JsonRecvHalf::raw_responses`]): serialized once from the action's type, no
//!   [`serde_json::Value`] built.
//! - **T2** A connection and each half has `done()` (the connection is over: nothing of the
//!   action runs), `cancel_with(cause)`, and [`JsonResponses::turn_ended`] to tell a turn's
//!   end from the connection's; [`JsonResponses::cancel_with`] cancels from where a writer
//!   reads (a client gone, an idle timeout). A peer that goes away cancels its connections with
//!   a cause that says so (`bidi_core::PeerGone`).
//! - **T2b** Line-delimited transports (NDJSON on stdio, JSON-RPC on a pipe) read lines with
//!   [`lines::read_line`]: a size limit, and never more than the limit of a line in memory.
//! - **T2c** Errors quote what a peer sent through [`text::cap`] and name where a value is
//!   wrong with [`text::pointer`] (a JSON Pointer): one home for both, in every crate.
//! - **T2d** Every protocol writes a connection to its peer through one seam, [`wire`]: a
//!   flow's turns ([`wire::pump_turns`]) and an agent's execution alike, through a protocol's
//!   [`wire::Wire`] to a [`wire::Sink`], batched, cancelled with `PeerGone` once the peer goes
//!   away or stays idle (W1–W4).
//! - **T3** Action kinds are open: a protocol crate registers its own kind and key prefix with
//!   [`ActionType::from_static`] without editing this crate.
//! - **T4** Every protocol crate follows one template, `docs/adding-a-protocol-crate.md` in the
//!   repository, and its runnable model, `examples/src/bin/stdio.rs` (a `Registry` over NDJSON
//!   on stdin and stdout): wire types from the protocol's own crate where one exists; a `codec`
//!   module that turns peer frames into connection operations and chunks into peer frames (the
//!   flow frames have one codec, [`frame`], with their error codes and size limit: the stdio
//!   example speaks its multiplexed wire, bidi-http's WebSocket its socket wire; a bad frame is
//!   a typed [`frame::FrameError`]); limits on frame size; every bad frame answered with the
//!   protocol's own error while the connection goes on; tests against the real peer clients;
//!   and logs never on a protocol stream, and never waiting for stderr. [`log`] is the one home
//!   of that: a queue of 1,024 lines to a writer thread, where a line that finds the queue full
//!   is dropped and counted, since a parent that does not read a child's stderr fills the pipe,
//!   and a blocking write would stall the server.
//! - **T5** An execution that may run in several processes holds its session by the pending
//!   snapshot it writes as it starts (`bidi-session`'s S2): compare-and-swap on the head, under
//!   a lease renewed every third of its term while it runs (a few bytes, the conversation
//!   untouched), given up by the finish that writes what it added and how it ended (on cancel
//!   and error too: `aborted` for a cancelled or aborted execution, `failed` with the error for
//!   a failed one), so two processes never run one session at once. A second execution on a
//!   held session is refused with a typed error and changes nothing; a lease that lapsed (its
//!   process crashed) is taken over by the next execution, from the state before the crashed
//!   one. An abort (by snapshot id, from any process) ends the execution at its next renewal
//!   like a cancellation, except that the connection goes on: its client reads the execution's
//!   end as usual. In `bidi-llm` the conversation is shared, not copied: a model is handed the
//!   session's messages, and the loop lets go of the request before the answer is appended.

#![doc(test(attr(deny(warnings))))]

pub mod ask;
mod code;
mod flow;
pub mod frame;
pub mod idle;
mod json;
pub mod lines;
pub mod log;
mod progress;
mod registry;
pub mod text;
pub mod time;
mod trace;
pub mod wire;

pub use code::Code;
pub use flow::{ActionType, BidiFlow};
pub use json::{JsonChunk, JsonConnection, JsonError, JsonRecvHalf, JsonResponses, JsonSendHalf};
pub use progress::Progress;
pub use registry::{ActionDesc, Registry, RegistryError};
pub use trace::{
    JSON_ATTRIBUTE_LIMIT, JsonCarrier, caller_context, child_span, inject_context, json_attribute,
    run, turn_span,
};
