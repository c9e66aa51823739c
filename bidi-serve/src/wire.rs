//! A wire: an agent's events in, a protocol's frames out.

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

/// Turns an execution's events into a protocol's frames, one event at a time: SSE records,
/// AG-UI events, UI message stream chunks, ACP session updates, a chat reply.
///
/// A wire holds its protocol and nothing else: the pump reads the events, batches what the
/// wire writes, writes it to the peer, and cancels the execution when the peer goes away or
/// stays idle. A wire closes what it has open (a text block, a tool call) in
/// [`failed`](Self::failed) and [`end`](Self::end), so its peer reads a well-formed stream
/// however the execution ended.
///
/// ```
/// use bidi_llm::AgentEvent;
/// use bidi_serve::Wire;
///
/// /// The text of an answer, as plain text.
/// struct Text;
///
/// impl Wire for Text {
///     type Event = AgentEvent;
///     type Output = ();
///     type Frames = Vec<u8>;
///
///     fn event(&mut self, event: &AgentEvent, out: &mut Vec<u8>) {
///         if let AgentEvent::TextDelta { delta } = event {
///             out.extend_from_slice(delta.as_bytes());
///         }
///     }
///
///     fn failed(&mut self, message: &str, out: &mut Vec<u8>) {
///         out.extend_from_slice(format!("\n(error: {message})").as_bytes());
///     }
/// }
///
/// let mut out = Vec::new();
/// Text.event(&AgentEvent::TextDelta { delta: "Hi".into() }, &mut out);
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

    /// Whether the wire shows the connection's output ([`output`](Self::output)): the pump
    /// then ends the stream once the agent has returned it, not at the execution's last event.
    const OUTPUT: bool = false;

    /// Appends what `event` becomes to `out` (perhaps nothing).
    fn event(&mut self, event: &Self::Event, out: &mut Self::Frames);

    /// Appends what says the execution was cut short with `message` (its connection failed):
    /// the end of every open block, then the protocol's error.
    fn failed(&mut self, message: &str, out: &mut Self::Frames);

    /// Takes the connection's output, before [`end`](Self::end), if [`OUTPUT`](Self::OUTPUT).
    fn output(&mut self, output: &Self::Output) {
        let _ = output;
    }

    /// Appends what ends the stream, after the last event (nothing by default).
    fn end(&mut self, out: &mut Self::Frames) {
        let _ = out;
    }
}
