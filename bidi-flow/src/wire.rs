//! The one wire seam: a stream of events (a flow's chunks, an agent's events) through a
//! protocol's [`Wire`] to a [`Sink`], batched, until the events end or the peer goes away.
//!
//! Every protocol writes a connection to its peer the same way, flows and agents alike:
//!
//! - **Wire** ([`Wire`]): the protocol itself, events in and frames out (SSE records, AG-UI
//!   events, ACP updates, a chat reply), closing what it has open when the stream fails or is
//!   cut short, and marking a turn's end where its protocol has one.
//! - **Sink** ([`Sink`]): where the frames go, one write at a time: a response body, a socket,
//!   a channel's streaming calls, an MCP client's progress, several readers, or nobody.
//! - **Pump** ([`pump`], [`pump_held`], [`pump_turns`]): reads the events, hands each to the
//!   wire, gathers what is ready into one write, writes it once the sink has room, and
//!   cancels the connection with [`PeerGone`](bidi_core::PeerGone) once the peer goes away or
//!   stays idle.
//!
//! A new protocol is one more [`Wire`] (and, if its peer is not a byte stream, a [`Sink`]).
//! Starting an agent's execution for a peer is the agents' own business (`bidi-llm`'s
//! `peer::Execution`); a flow's connection is opened with
//! [`Registry::connect_json_with`](crate::Registry::connect_json_with).
//!
//! ```
//! use bidi_core::{BoxError, Inbound, Outbound};
//! use bidi_flow::wire::{self, Wire};
//! use bidi_flow::{BidiFlow, Registry};
//! use serde_json::{Value, json};
//!
//! /// Each chunk as a line of JSON.
//! struct Lines;
//!
//! impl Wire for Lines {
//!     type Event = Value;
//!     type Output = ();
//!     type Frames = Vec<u8>;
//!
//!     fn event(&mut self, chunk: Value, out: &mut Vec<u8>) {
//!         out.extend_from_slice(chunk.to_string().as_bytes());
//!         out.push(b'\n');
//!     }
//!
//!     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
//!         out.extend_from_slice(format!("error: {message}\n").as_bytes());
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let count = BidiFlow::new("count", |_ctx, (), mut inbound: Inbound<u32>, out: Outbound<u32>| async move {
//!     while let Some(n) = inbound.recv().await {
//!         for i in 1..=n {
//!             out.send(i).await?;
//!         }
//!     }
//!     Ok::<_, BoxError>(())
//! });
//! let registry = Registry::new();
//! registry.register(count)?;
//! let conn = registry.connect_json("/bidi-flow/count", json!(null))?;
//! let (input, mut output) = conn.into_split();
//! input.send(json!(3)).await?;
//! input.close();
//!
//! let (body, mut writes) = tokio::sync::mpsc::channel(1);
//! let pumping = tokio::spawn(async move {
//!     let mut held = Vec::new();
//!     let ended = wire::pump_turns(&mut output, &mut Lines, &body, None, &mut held).await;
//!     // What the last events wrote is held back, to go out with the end in one write.
//!     held.extend_from_slice(b"done\n");
//!     let _ = body.send(held).await;
//!     matches!(ended, wire::Ended::Done)
//! });
//! let mut text = Vec::new();
//! while let Some(write) = writes.recv().await {
//!     text.extend(write);
//! }
//! assert_eq!(String::from_utf8(text)?, "1\n2\n3\ndone\n");
//! assert!(pumping.await?);
//! # Ok(())
//! # }
//! ```
//!
//! # Contract
//!
//! - **W1 Pump.** The pump reads the events (a flow's turn, a connection's turns, an agent's
//!   execution), hands each to the wire, gathers the events ready behind one that wrote
//!   something into one batch until [`Frames::is_full`] ([`BATCH_BYTES`], 16 KiB, for bytes;
//!   a chat reply's pieces and ACP's updates one event at a time), and writes the batch once
//!   the sink has room: a slow peer slows the action. The events are polled first, and the
//!   sink's `closed()` (made once per stream, so that a cancellation token registers once,
//!   not once an event) only while none is ready. It cancels the connection with the cause
//!   `closed()` gives (a body nobody reads: `PeerGone::Disconnected`; ACP's
//!   `session/cancel`, MCP's `notifications/cancelled`: the client's cancel), a failed write
//!   (`PeerGone::Disconnected`), or the idle timeout expiring, a stalled write included
//!   (`PeerGone::Idle`); then it reads what the connection still sends and drops it, so the
//!   action never waits on a departed peer. [`pump_held`] keeps the last batch for the caller
//!   to write with what ends its stream (an output, a last record): one write, not two.
//! - **W2 Wire.** [`Wire`] (`Event`, `Output`, `Frames`; `event`, `failed`, `turn_end`,
//!   `output` when `OUTPUT` is true, `end`): events in, owned (as tokio-util's `Encoder` takes
//!   its items: what a wire keeps it takes without a copy), frames out. A wire closes what it
//!   has open (a text block, a tool call's input) in `failed` and `end`, so its peer always
//!   reads a well-formed stream. Frames are bytes for HTTP wires, and a list of calls or
//!   updates where the peer is not a byte stream. A wire that hands the output back (Genkit's,
//!   A2A's) sets `OUTPUT`: its stream then ends once the action has returned.
//! - **W3 Sink.** [`Sink`] (`send`, `closed`): an `mpsc::Sender` (one response body), a
//!   tee of readers that come and go (never closed), [`Detached`] (nobody; never closed), a
//!   channel's streaming calls, ACP's client, an MCP call. [`sink::stream`] turns the
//!   receiving end of a channel into a response body.
//! - **W4 One cause for a departed peer.** Every transport cancels with
//!   [`PeerGone`](bidi_core::PeerGone) (`Disconnected`, `Idle(timeout)`); an action reads it
//!   with `Cause::peer_gone()` whatever the protocol. A peer's own cancel request stays its
//!   protocol's cause.

mod pump;
pub mod sink;

pub use pump::{Ended, Events, pump, pump_held, pump_turns, stop};
pub use sink::{Closed, Detached, Sink};

/// What a wire writes between two writes to its peer: the bytes of a response body, a list of
/// frames, a reply's text. The pump gathers the events that are ready into one batch until it
/// is [full](Self::is_full), then writes it.
pub trait Frames: Default + Send + 'static {
    /// Whether there is nothing to write.
    fn is_empty(&self) -> bool;

    /// Whether the batch should be written now rather than gather more.
    fn is_full(&self) -> bool;
}

/// How many bytes a batch of a byte stream gathers at most.
pub const BATCH_BYTES: usize = 16 * 1024;

impl Frames for Vec<u8> {
    fn is_empty(&self) -> bool {
        Self::is_empty(self)
    }

    fn is_full(&self) -> bool {
        self.len() >= BATCH_BYTES
    }
}

/// Nothing: the frames of a wire that writes nothing (a JSON answer that reads the chunks
/// only to wait for the output).
impl Frames for () {
    fn is_empty(&self) -> bool {
        true
    }

    fn is_full(&self) -> bool {
        false
    }
}

/// Turns a connection's events into a protocol's frames, one event at a time: SSE records,
/// AG-UI events, UI message stream chunks, ACP session updates, a chat reply.
///
/// A wire holds its protocol and nothing else: the pump reads the events, batches what the
/// wire writes, writes it to the peer, and cancels the connection when the peer goes away or
/// stays idle. A wire closes what it has open (a text block, a tool call) in
/// [`failed`](Self::failed) and [`end`](Self::end), so its peer reads a well-formed stream
/// however the connection ended.
///
/// ```
/// use bidi_flow::wire::Wire;
///
/// /// Text chunks, as plain text.
/// struct Text;
///
/// impl Wire for Text {
///     type Event = String;
///     type Output = ();
///     type Frames = Vec<u8>;
///
///     fn event(&mut self, text: String, out: &mut Vec<u8>) {
///         out.extend_from_slice(text.as_bytes());
///     }
///
///     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
///         out.extend_from_slice(format!("\n(error: {message})").as_bytes());
///     }
/// }
///
/// let mut out = Vec::new();
/// Text.event("Hi".to_owned(), &mut out);
/// Text.failed("the model went away", &mut out);
/// assert_eq!(out, b"Hi\n(error: the model went away)");
/// ```
pub trait Wire: Send {
    /// The events it reads.
    type Event;
    /// The output of the connection it serves, for a wire that [shows it](Self::OUTPUT).
    type Output;
    /// What it writes.
    type Frames: Frames;

    /// Whether the wire shows the connection's output ([`output`](Self::output)): its stream
    /// then ends once the action has returned it, not at the last event.
    const OUTPUT: bool = false;

    /// Appends what `event` becomes to `out` (perhaps nothing). The wire owns the event: what
    /// it keeps of it (a tool call's id, a delta) it takes without a copy.
    fn event(&mut self, event: Self::Event, out: &mut Self::Frames);

    /// Appends what says the stream was cut short with `message` (its connection failed):
    /// the end of every open block, then the protocol's error.
    fn failed(&mut self, message: &str, out: &mut Self::Frames);

    /// Appends what marks the end of a turn, where more turns may follow on the connection
    /// ([`pump_turns`]; nothing by default: a protocol with one turn a request has no mark).
    fn turn_end(&mut self, out: &mut Self::Frames) {
        let _ = out;
    }

    /// Takes the connection's output, before [`end`](Self::end), if [`OUTPUT`](Self::OUTPUT).
    fn output(&mut self, output: &Self::Output) {
        let _ = output;
    }

    /// Appends what ends the stream, after the last event (nothing by default).
    fn end(&mut self, out: &mut Self::Frames) {
        let _ = out;
    }
}
