//! The agent side: write an NDJSON agent in Rust.

use std::io;

use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader, Stdin, Stdout};

use bidi_flow::lines::{Line, read_line};

use crate::child::DEFAULT_MAX_LINE_BYTES;
use crate::codec::{self, Approval, INIT_ACK, Progress, Prompt, Question, Reply, approves};

/// The host an agent talks to, from the agent's side: read prompts, write progress, partial
/// output and logs, ask questions and approvals and wait for their replies, and end each round
/// with a result or an error.
///
/// ```no_run
/// use bidi_ndjson::{Approval, Host, Progress, Question};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let mut host = Host::stdio();
/// while let Some(prompt) = host.prompt().await? {
///     host.progress(Progress::new("thinking").percent(10.0)).await?;
///     let plan = host.ask(Question::new(format!("How should I do: {}?", prompt.text()))).await?;
///     if host.approve(Approval::new("Apply the plan").risk_level("low")).await? {
///         host.result(json!({"text": format!("done: {plan}")})).await?;
///     } else {
///         host.error("the plan was rejected").await?;
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Host<R = Stdin, W = Stdout> {
    reader: BufReader<R>,
    writer: W,
    line: Vec<u8>,
    out: Vec<u8>,
    max_line_bytes: usize,
    asked: u64,
    init: Option<Value>,
}

impl Host {
    /// The host on this process's stdin and stdout. Write nothing else to stdout: log to
    /// stderr (or with [`log`](Self::log)).
    #[must_use]
    pub fn stdio() -> Self {
        Self::new(tokio::io::stdin(), tokio::io::stdout())
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Host<R, W> {
    /// The host that writes to `reader` and reads `writer`.
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            reader: BufReader::new(reader),
            writer,
            line: Vec::new(),
            out: Vec::new(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            asked: 0,
            init: None,
        }
    }

    /// The longest line read from the host, in bytes (default 1 MiB); a longer one is an
    /// error, never held whole in memory.
    #[must_use]
    pub fn max_line_bytes(mut self, max: usize) -> Self {
        self.max_line_bytes = max.max(1);
        self
    }

    /// The `params` of the host's `init`, once [`prompt`](Self::prompt) has read it.
    #[must_use]
    pub fn init_params(&self) -> Option<&Value> {
        self.init.as_ref()
    }

    /// The next prompt, `None` when the host closes the input. The host's `init` handshake,
    /// if it sends one first, is acknowledged on the way. A line that is a JSON object with
    /// a `prompt` is a JSON prompt (with its `context`); any other line is the prompt's text.
    ///
    /// # Errors
    ///
    /// Reading or writing fails, or a line is over the limit.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped read may lose part of a line, and the host's `init`, once
    /// read, may be left unacknowledged or its acknowledgement half written.
    pub async fn prompt(&mut self) -> io::Result<Option<Prompt>> {
        loop {
            let Some(value) = self.read().await? else {
                return Ok(None);
            };
            match value {
                Value::Object(mut fields) => {
                    if fields.get("type").and_then(Value::as_str) == Some("init") {
                        self.init = fields.remove("params");
                        self.send(&json!({ "type": INIT_ACK })).await?;
                        continue;
                    }
                    if let Some(Value::String(text)) = fields.remove("prompt") {
                        let prompt = Prompt::new(text);
                        return Ok(Some(match fields.remove("context") {
                            Some(context) if !context.is_null() => prompt.context(context),
                            _ => prompt,
                        }));
                    }
                    return Ok(Some(Prompt::new(self.text())));
                }
                _ => return Ok(Some(Prompt::new(self.text()))),
            }
        }
    }

    /// Reports progress.
    ///
    /// # Errors
    ///
    /// Writing fails: the host is gone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn progress(&mut self, progress: Progress) -> io::Result<()> {
        self.message("progress", &progress).await
    }

    /// Streams a piece of the output.
    ///
    /// # Errors
    ///
    /// Writing fails: the host is gone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn partial(&mut self, chunk: impl Into<String>) -> io::Result<()> {
        self.send(&json!({"type": "partial", "chunk": chunk.into()}))
            .await
    }

    /// Logs a line at `level` (`debug`, `info`, `warn`, `error`).
    ///
    /// # Errors
    ///
    /// Writing fails: the host is gone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn log(&mut self, level: &str, message: impl Into<String>) -> io::Result<()> {
        self.send(&json!({"type": "log", "level": level, "message": message.into()}))
            .await
    }

    /// Asks a question and waits for its answer (the reply's `value`, or a plain line).
    ///
    /// # Errors
    ///
    /// Reading or writing fails, or the host closed the input before it answered.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the question written. Dropped once
    /// it is written, the question is still answered: a later `ask` or `approve` skips an
    /// answer that names this question's id but takes one that does not (or a plain line) as
    /// its own, and [`prompt`](Self::prompt) reads it as a prompt.
    pub async fn ask(&mut self, question: Question) -> io::Result<Value> {
        self.request("question", &question).await
    }

    /// Asks for an approval and waits for it: `true` if the answer says yes (`"yes"`, `"ok"`,
    /// `true`, ...).
    ///
    /// # Errors
    ///
    /// As [`ask`](Self::ask).
    ///
    /// # Cancel safety
    ///
    /// As [`ask`](Self::ask).
    pub async fn approve(&mut self, approval: Approval) -> io::Result<bool> {
        Ok(approves(&self.request("approval", &approval).await?))
    }

    /// Ends the round with its result: `fields` (a JSON object, `{"text": ..}` say) become the
    /// `result` message's fields.
    ///
    /// # Errors
    ///
    /// Writing fails, or `fields` is not a JSON object.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn result(&mut self, fields: impl Serialize) -> io::Result<()> {
        self.message("result", &fields).await
    }

    /// Ends the round with an error.
    ///
    /// # Errors
    ///
    /// Writing fails: the host is gone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn error(&mut self, message: impl Into<String>) -> io::Result<()> {
        self.send(&json!({"type": "error", "message": message.into()}))
            .await
    }

    /// Sends a message of any type: `fields` (a JSON object) with `type` set to `kind`.
    ///
    /// # Errors
    ///
    /// Writing fails, or `fields` is not a JSON object.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped write may leave part of the line written.
    pub async fn message(&mut self, kind: &str, fields: &impl Serialize) -> io::Result<()> {
        let mut object = object(fields)?;
        object.insert("type".to_owned(), Value::String(kind.to_owned()));
        self.send(&object).await
    }

    async fn request(&mut self, kind: &str, fields: &impl Serialize) -> io::Result<Value> {
        self.asked += 1;
        let mut object = object(fields)?;
        object.insert("type".to_owned(), Value::String(kind.to_owned()));
        // The request's own id, or one of ours.
        let id = match object.get("id") {
            Some(id) if !id.is_null() => id.clone(),
            _ => Value::String(format!("{}-{}", &kind[..1], self.asked)),
        };
        object.insert("id".to_owned(), id.clone());
        self.send(&object).await?;
        loop {
            let Some(value) = self.read().await? else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the host closed the input before it answered {id}"),
                ));
            };
            let Ok(reply) = serde_json::from_value::<Reply>(value.clone()) else {
                // A host that answers with a plain line.
                return Ok(match value {
                    Value::String(text) => Value::String(text),
                    _ => Value::String(self.text()),
                });
            };
            // A reply to another request of ours (one we stopped waiting for) is skipped.
            match &reply.in_reply_to_id {
                Some(to) if *to != id => {}
                _ => return Ok(reply.value),
            }
        }
    }

    /// Reads the next non-blank line as JSON (a line that is not JSON is a string of its
    /// text); `None` at the end of the input.
    async fn read(&mut self) -> io::Result<Option<Value>> {
        loop {
            match read_line(&mut self.reader, &mut self.line, self.max_line_bytes).await? {
                None => return Ok(None),
                Some(Line::TooLarge(len)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "the host wrote a line of {len} bytes, over the limit of {}",
                            self.max_line_bytes
                        ),
                    ));
                }
                Some(Line::Frame) if self.line.iter().all(u8::is_ascii_whitespace) => {}
                Some(Line::Frame) => {
                    return Ok(Some(
                        serde_json::from_slice(&self.line)
                            .unwrap_or_else(|_| Value::String(self.text())),
                    ));
                }
            }
        }
    }

    /// The line just read, as text.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.line).trim().to_owned()
    }

    async fn send(&mut self, message: &impl Serialize) -> io::Result<()> {
        codec::encode(message, &mut self.out)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        self.writer.write_all(&self.out).await?;
        self.writer.flush().await
    }
}

fn object(fields: &impl Serialize) -> io::Result<Map<String, Value>> {
    match serde_json::to_value(fields) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a message's fields must be a JSON object, not {other}"),
        )),
        Err(error) => Err(io::Error::new(io::ErrorKind::InvalidData, error)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_question_with_an_id_of_its_own_keeps_it_and_waits_for_its_reply() {
        let input = concat!(
            r#"{"type":"response","in_reply_to":"question","in_reply_to_id":"q-1","value":"stale"}"#,
            "\n",
            r#"{"type":"response","in_reply_to":"question","in_reply_to_id":"plan-7","value":"safe"}"#,
            "\n",
        );
        let mut host = Host::new(input.as_bytes(), Vec::new());
        let answer = host
            .ask(Question::new("Which plan?").id("plan-7"))
            .await
            .unwrap();
        assert_eq!(answer, "safe");
        let written: Value = serde_json::from_slice(&host.writer).unwrap();
        assert_eq!(
            written,
            json!({"type": "question", "id": "plan-7", "question": "Which plan?"})
        );
    }
}
