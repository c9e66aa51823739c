//! bidi-acp's server on in-memory pipes: stop reasons, cancellation, errors, the end of input;
//! permissions, modes and richer tool calls.

#![allow(clippy::unwrap_used)]

mod mcp;
mod permissions;
mod server;
mod support;
