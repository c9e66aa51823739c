//! bidi-acp's server on in-memory pipes: stop reasons, cancellation, errors, the end of input;
//! permissions, modes and richer tool calls; what sessions keep; agents of one's own; the
//! scope of the clients' sessions.

#![allow(clippy::unwrap_used)]

mod editor;
mod live;
mod manage;
#[cfg(feature = "mcp")]
mod mcp;
mod permissions;
mod retry;
mod scope;
mod server;
mod sessions;
mod support;
#[cfg(not(feature = "mcp"))]
mod without_mcp;
