//! bidi-http on real sockets: the flow wire with reqwest, WebSocket with tokio-tungstenite.

mod agent;
mod flow;
mod safety;
mod support;
mod ws;
