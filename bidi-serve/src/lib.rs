//! Serve agents to peers: the seam every agent front end stands on.
//!
//! A front end (an HTTP endpoint, AG-UI, the UI message stream, ACP, a chat channel, A2A)
//! does three things for each execution its peer asks for, and this crate does the same three
//! for all of them:
//!
//! - **Start** ([`Execution`]): open a connection on the session the peer names (new,
//!   resumed, or made from the peer's transcript, in its scope), send the input, and answer
//!   the session it runs on, or a typed [`Refusal`], before a byte is written, so the
//!   front end answers with its protocol's head or its protocol's error.
//! - **Pump** ([`pump`]): read the execution's events, hand them to the wire, batch what the
//!   wire writes, write it once the peer has room, and cancel the execution with
//!   [`PeerGone`](bidi_core::PeerGone) once the peer goes away or stays idle.
//! - **Wire** ([`Wire`]): the protocol itself, events in and frames out, closing what it has
//!   open when the execution fails or is cut short.
//!
//! A new protocol is one more [`Wire`] (and the route or method that hands it to
//! [`Execution::start`]); everything else is shared.
//!
//! ```
//! use bidi_agent::AgentInit;
//! use bidi_llm::testing::{Scripted, ScriptedModel};
//! use bidi_llm::{AgentEvent, LlmAgent, TurnInput, UserMessage};
//! use bidi_serve::{Execution, RefusalKind, Wire};
//!
//! /// Each event's kind, a line each.
//! struct Kinds;
//!
//! impl Wire for Kinds {
//!     type Event = AgentEvent;
//!     type Output = bidi_serve::Output;
//!     type Frames = Vec<u8>;
//!
//!     fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
//!         out.extend_from_slice(event.kind().as_bytes());
//!         out.push(b'\n');
//!     }
//!
//!     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
//!         out.extend_from_slice(format!("failed: {message}\n").as_bytes());
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let agent = LlmAgent::builder("helper", ScriptedModel::new([Scripted::new().text("Hi!")])).build();
//! let hello = || TurnInput::User(UserMessage::new("hello"));
//!
//! // A session that does not exist, resumed: refused before anything is written.
//! let conn = agent.connect(AgentInit::new().resume("nobody"));
//! let (body, _frames) = tokio::sync::mpsc::channel(1);
//! let refused = Execution::new(conn, hello()).start(Kinds, body).await.unwrap_err();
//! assert_eq!(refused.kind(), RefusalKind::NotFound);
//!
//! // A new one: started, then its events.
//! let conn = agent.connect(AgentInit::new());
//! let (body, mut frames) = tokio::sync::mpsc::channel(1);
//! let started = Execution::new(conn, hello()).start(Kinds, body).await?;
//! let mut kinds = Vec::new();
//! while let Some(batch) = frames.recv().await {
//!     kinds.extend(batch);
//! }
//! let kinds = String::from_utf8(kinds)?;
//! assert!(kinds.starts_with("session_start\n"));
//! assert!(kinds.ends_with("execute_complete\n"));
//! # let _ = started;
//! # Ok(())
//! # }
//! ```
//!
//! # Contract
//!
//! The rules of the agent seam, for the front ends built on it and for anyone extending it.
//! Two seams carry every protocol: flows are served through `bidi_flow::JsonConnection`s
//! (`bidi-flow`'s T1–T5), agents through this crate. A front end of an agent (HTTP execute,
//! AG-UI, the UI message stream, Genkit's agent wire, A2A, MCP's agent tools, ACP's session
//! updates, chat channels) is a wire on this seam: it decodes its peer's request into a
//! connection and an input, hands them to the seam with a wire and a sink, and maps the seam's
//! typed answers to its protocol's terms. Nothing else. The rules are numbered so that reviews
//! can point at them; a change to the crate keeps every one, or says here which it changes.
//!
//! - **A1 Start.** `Execution::new(conn, input).idle_timeout(t).start(wire, sink)` opens the
//!   execution in a task of its own and answers [`Started`] `{session_id, snapshot_id}` or a
//!   typed [`Refusal`] ([`RefusalKind`]: `SessionRunning`, `NotFound`, `InvalidInit`,
//!   `InvalidInput`, `SessionIncompatible`, `IdleTimeout`, `PeerGone`, `Cancelled`,
//!   `SendFailed`, `Failed`; a cancel on purpose is `Cancelled`, never a failure) before the
//!   wire writes a byte, so the front end answers with its head (a session header, a 202) or
//!   its protocol's error (an HTTP status, a one-event `RUN_ERROR` stream, a JSON-RPC error). A
//!   requester that goes away before the answer cancels the execution as `PeerGone`.
//!   [`Refusal::of`] (defined in `bidi-agent`, so that a build serving flows alone classifies
//!   errors the same way) is the one classification of a connection's errors; `bidi-http`'s
//!   `codec::Failure` is `From<Refusal>`, and its flows use the same mapping.
//! - **A2 Pump.** [`pump`]`(events, first, wire, sink, idle)` reads an execution's events (or
//!   a turn's `Responses`), hands each to the wire, gathers the events ready behind one that
//!   wrote something into one batch until [`Frames::is_full`] ([`BATCH_BYTES`], 16 KiB, for
//!   bytes; a chat reply's pieces and ACP's updates one event at a time, held inline: no
//!   allocation per frame), and writes the batch once the sink has room: a slow peer slows
//!   the execution. The events are polled first, and the sink's `closed()` (made once per
//!   stream, so that a cancellation token registers once, not once an event) only while none
//!   is ready. It cancels the execution with the cause `closed()` gives (a body nobody reads:
//!   `PeerGone::Disconnected`; ACP's `session/cancel`: its client's cancel), a failed write
//!   (`PeerGone::Disconnected`), or `idle` expiring, a stalled write included
//!   (`PeerGone::Idle`); then it reads what the execution still sends and drops it, so the
//!   execution never waits on a departed peer.
//! - **A3 Wire.** [`Wire`] (`Event`, `Output`, `Frames`; `event`, `failed`, `output` when
//!   `OUTPUT` is true, `end`): events in, owned (as tokio-util's `Encoder` takes its items:
//!   what a wire keeps it takes without a copy), frames out. A wire closes what it has open (a
//!   text block, a tool call's input) in `failed` and `end`, so its peer always reads a
//!   well-formed stream; the open block has one tracker, [`Blocks`] (at most one [`Block`]:
//!   text, reasoning, or a tool call with its argument text so far and whether its start was
//!   shown), which the AG-UI and UI message stream encoders share. Frames are bytes for HTTP
//!   wires, and a list of calls or updates where the peer is not a byte stream (a channel's
//!   streaming calls, ACP's `session/update` notifications with the permission gate's
//!   markers). A wire that hands the state back (Genkit's, A2A's) sets `OUTPUT`: its stream
//!   then ends once the agent has returned, the others' at the last event.
//! - **A4 Sink.** [`Sink`] (`send`, `closed`): an `mpsc::Sender` (one response body),
//!   `bidi-http`'s tee (readers that come and go; never closed), [`Detached`] (nobody; never
//!   closed), a channel's streaming calls, ACP's client, an MCP call. [`sink::stream`] turns
//!   the receiving end of a channel into a response body.
//! - **A5 One cause for a departed peer.** Every transport cancels with
//!   [`PeerGone`](bidi_core::PeerGone) (`Disconnected`, `Idle(timeout)`); an action reads it
//!   with `Cause::peer_gone()` whatever the protocol. A peer's own cancel request stays its
//!   protocol's cause (ACP's `session/cancel`, MCP's `notifications/cancelled`).
//! - **A6 One home for ids.** Session and snapshot ids are minted by `bidi_session::new_id`
//!   (an agent names a new session itself when its init has no id; ACP and the chat channels
//!   mint theirs there too).

#![doc(test(attr(deny(warnings))))]

mod pump;
pub mod sink;
mod start;
mod wire;

pub use bidi_agent::{Refusal, RefusalKind};
pub use pump::{Ended, Events, pump};
pub use sink::{Closed, Detached, Sink};
pub use start::{AgentConnection, Execution, Output, Started};
pub use wire::{BATCH_BYTES, Block, Blocks, Frames, Wire};
