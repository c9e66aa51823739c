//! bidi-http on real sockets: the flow wire with reqwest, WebSocket with tokio-tungstenite.

#![allow(clippy::unwrap_used)]

mod agent;
mod flow;
mod hostile;
mod safety;
mod support;
mod ws;
