//! The open block of an answer a wire streams: what AG-UI's and the UI message stream's
//! encoders close before anything else, and before their error.

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

/// The one tracker of a wire's open block: what
/// [`Wire::failed`](bidi_flow::wire::Wire::failed) and
/// [`Wire::end`](bidi_flow::wire::Wire::end) close.
///
/// ```
/// use bidi_llm::{Block, Blocks};
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
