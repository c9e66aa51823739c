//! [`Terminal`]: replies printed as they are generated.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use bidi_core::BoxError;
use tokio::io::{AsyncWrite, AsyncWriteExt as _, Stdout};
use tokio::sync::Mutex;

use crate::channel::{Channel, StreamingChannel};

/// A channel that prints replies to a terminal (or any [`AsyncWrite`]): token by token, a tool
/// call on a line of its own (`  [Using: search]`), a line break at the end of a reply.
///
/// It writes plain text and flushes after every chunk, with no cursor movement or colour, so
/// it works the same when stdout is a pipe or a file. With [`streaming(false)`](Self::streaming)
/// each reply is printed whole once it is complete.
///
/// ```
/// use std::sync::Arc;
///
/// use bidi_channel::{MessageRouter, Terminal};
/// use bidi_llm::LlmAgent;
/// use bidi_llm::testing::{Scripted, ScriptedModel};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), bidi_channel::Error> {
/// let model = ScriptedModel::new([Scripted::new().text("One, two, three.")]);
/// let router = MessageRouter::new(LlmAgent::builder("counter", model).build());
/// let terminal = Arc::new(Terminal::new(Vec::new()));
/// router.handle(terminal.clone(), "me", "count").await?;
/// assert_eq!(terminal.written().await, b"One, two, three.\n");
/// # Ok(())
/// # }
/// ```
pub struct Terminal<W = Stdout> {
    out: Mutex<Out<W>>,
    streaming: bool,
}

struct Out<W> {
    writer: W,
    /// Whether the last line printed is unfinished.
    open_line: bool,
    /// The text streamed so far of each user's reply.
    streamed: HashMap<String, String>,
}

impl<W: AsyncWrite + Unpin> Out<W> {
    /// Writes `text` (on a line of its own if `own_line`) and flushes.
    async fn print(&mut self, text: &str, own_line: bool) -> Result<(), BoxError> {
        if text.is_empty() {
            return Ok(());
        }
        if own_line && self.open_line {
            self.writer.write_all(b"\n").await?;
        }
        self.writer.write_all(text.as_bytes()).await?;
        self.writer.flush().await?;
        self.open_line = !text.ends_with('\n');
        Ok(())
    }
}

impl<W> fmt::Debug for Terminal<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Terminal")
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

impl Terminal<Stdout> {
    /// A terminal channel on the process's stdout.
    #[must_use]
    pub fn stdout() -> Self {
        Self::new(tokio::io::stdout())
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Terminal<W> {
    /// A terminal channel writing to `writer`, streaming.
    #[must_use]
    pub fn new(writer: W) -> Self {
        Self {
            out: Mutex::new(Out {
                writer,
                open_line: false,
                streamed: HashMap::new(),
            }),
            streaming: true,
        }
    }

    /// Turns streaming on (the default) or off: off, each reply is printed whole.
    #[must_use]
    pub fn streaming(mut self, on: bool) -> Self {
        self.streaming = on;
        self
    }
}

impl Terminal<Vec<u8>> {
    /// What was written so far (for tests and examples that print into a buffer).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn written(&self) -> Vec<u8> {
        self.out.lock().await.writer.clone()
    }
}

#[async_trait]
impl<W: AsyncWrite + Unpin + Send + 'static> Channel for Terminal<W> {
    fn id(&self) -> &str {
        "terminal"
    }

    async fn send_to_user(&self, _user_id: &str, text: &str) -> Result<(), BoxError> {
        self.out
            .lock()
            .await
            .print(&format!("{text}\n"), true)
            .await
    }

    fn streaming(&self) -> Option<&dyn StreamingChannel> {
        self.streaming.then_some(self as &dyn StreamingChannel)
    }
}

#[async_trait]
impl<W: AsyncWrite + Unpin + Send + 'static> StreamingChannel for Terminal<W> {
    async fn start(&self, user_id: &str) -> Result<(), BoxError> {
        let mut out = self.out.lock().await;
        out.streamed.insert(user_id.to_owned(), String::new());
        Ok(())
    }

    async fn chunk(&self, user_id: &str, chunk: &str) -> Result<(), BoxError> {
        let mut out = self.out.lock().await;
        if let Some(streamed) = out.streamed.get_mut(user_id) {
            streamed.push_str(chunk);
        }
        out.print(chunk, false).await
    }

    async fn status(&self, _user_id: &str, status: &str) -> Result<(), BoxError> {
        let mut out = self.out.lock().await;
        out.print(&format!("  [{status}]\n"), true).await
    }

    async fn end(&self, user_id: &str, full_text: &str) -> Result<(), BoxError> {
        let mut out = self.out.lock().await;
        let streamed = out.streamed.remove(user_id).unwrap_or_default();
        // What the chunks did not show (an error after the text): printed now.
        match full_text.strip_prefix(streamed.as_str()) {
            Some(rest) => out.print(rest, false).await?,
            None => out.print(full_text, true).await?,
        }
        out.print("\n", false).await
    }
}
