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
///     fn event(&mut self, event: AgentEvent, out: &mut Vec<u8>) {
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
/// Text.event(AgentEvent::TextDelta { delta: "Hi".into() }, &mut out);
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

    /// Appends what `event` becomes to `out` (perhaps nothing). The wire owns the event: what
    /// it keeps of it (a tool call's id, a delta) it takes without a copy.
    fn event(&mut self, event: Self::Event, out: &mut Self::Frames);

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

/// A block of an answer a wire shows while it streams: text, reasoning, or a tool call's
/// input. Protocols that stream blocks (AG-UI, the UI message stream) have at most one open at
/// a time and must end it before anything else, and before their error when the execution
/// fails or is cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Block {
    /// Text, under the id the wire gave it.
    Text(String),
    /// Reasoning, under the id the wire gave it.
    Reasoning(String),
    /// A tool call's input as the model writes it.
    ToolCall {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// The argument text so far.
        arguments: String,
        /// Whether its start was written: a call whose start came without an id is shown
        /// whole at its end, or not at all.
        shown: bool,
    },
}

/// The one tracker of a wire's open block: what [`Wire::failed`] and [`Wire::end`] close.
///
/// ```
/// use bidi_serve::{Block, Blocks};
///
/// let mut blocks = Blocks::default();
/// assert_eq!(blocks.open(Block::Text("text-0".into())), None);
/// assert_eq!(blocks.text(), Some("text-0"));
/// // Opening another closes it: the wire writes its end first.
/// let closed = blocks.open(Block::Reasoning("reasoning-1".into()));
/// assert_eq!(closed, Some(Block::Text("text-0".into())));
/// // A failure closes what is open.
/// assert_eq!(blocks.close(), Some(Block::Reasoning("reasoning-1".into())));
/// assert!(blocks.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct Blocks {
    open: Option<Block>,
}

impl Blocks {
    /// Opens `block`; answers the block that was open, if the wire did not close it first
    /// (it must then be ended before `block` starts).
    pub fn open(&mut self, block: Block) -> Option<Block> {
        self.open.replace(block)
    }

    /// Closes the open block; answers it, for the wire to end.
    #[must_use = "the closed block must be ended"]
    pub fn close(&mut self) -> Option<Block> {
        self.open.take()
    }

    /// Whether no block is open.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.open.is_none()
    }

    /// The open block.
    #[must_use]
    pub fn current(&self) -> Option<&Block> {
        self.open.as_ref()
    }

    /// The open block, to add to (a tool call's arguments).
    pub fn current_mut(&mut self) -> Option<&mut Block> {
        self.open.as_mut()
    }

    /// The id of the open text block.
    #[must_use]
    pub fn text(&self) -> Option<&str> {
        match &self.open {
            Some(Block::Text(id)) => Some(id),
            _ => None,
        }
    }

    /// The id of the open reasoning block.
    #[must_use]
    pub fn reasoning(&self) -> Option<&str> {
        match &self.open {
            Some(Block::Reasoning(id)) => Some(id),
            _ => None,
        }
    }

    /// The id of the open tool call.
    #[must_use]
    pub fn tool_call(&self) -> Option<&str> {
        match &self.open {
            Some(Block::ToolCall { id, .. }) => Some(id),
            _ => None,
        }
    }
}
