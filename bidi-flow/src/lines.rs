//! Newline-delimited framing for transports that speak one JSON message per line (NDJSON over
//! stdio, JSON-RPC on a pipe): [`read_line`] reads a line with a size limit, without ever holding
//! more than the limit of it in memory.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt as _};

/// What [`read_line`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// A line, now in the buffer, without its `\n` (or `\r\n`).
    Frame,
    /// A line of this many bytes, over the limit: read to its end but not kept.
    TooLarge(usize),
}

/// Reads one line into `buf` (cleared first), keeping at most `limit` bytes of it: a longer
/// line is read to its end and dropped as it goes, so a peer cannot make the reader buffer more
/// than `limit` bytes; `buf` then holds its first `limit` bytes (where a protocol's framing
/// usually puts the id to answer with). A last line without a newline still counts.
///
/// ```
/// use bidi_flow::lines::{Line, read_line};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let mut input = &b"{\"a\":1}\r\nthis line is far too long\nlast"[..];
/// let mut buf = Vec::new();
/// assert_eq!(read_line(&mut input, &mut buf, 10).await?, Some(Line::Frame));
/// assert_eq!(buf, b"{\"a\":1}");
/// assert_eq!(read_line(&mut input, &mut buf, 10).await?, Some(Line::TooLarge(25)));
/// assert_eq!(buf, b"this line ");
/// assert_eq!(read_line(&mut input, &mut buf, 10).await?, Some(Line::Frame));
/// assert_eq!(buf, b"last");
/// assert_eq!(read_line(&mut input, &mut buf, 10).await?, None);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// The reader's.
///
/// # Cancel safety
///
/// Not cancel safe: a line partly read when the future is dropped is lost.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Option<Line>> {
    buf.clear();
    let mut len = 0usize;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match len {
                0 => None,
                len if len > limit => Some(Line::TooLarge(len)),
                _ => Some(Line::Frame),
            });
        }
        let newline = memchr::memchr(b'\n', available);
        let part = &available[..newline.unwrap_or(available.len())];
        len += part.len();
        if len <= limit {
            buf.extend_from_slice(part);
        } else {
            // Only the line's head is kept.
            let room = limit.saturating_sub(buf.len()).min(part.len());
            buf.extend_from_slice(&part[..room]);
        }
        let used = part.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            if len > limit {
                return Ok(Some(Line::TooLarge(len)));
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(Line::Frame));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_long_line_is_never_buffered() {
        let long = "x".repeat(100);
        let input = format!("short\r\n{long}\nlast");
        let mut reader = tokio::io::BufReader::with_capacity(8, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Some(Line::Frame)
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Some(Line::TooLarge(100))
        );
        assert!(buf.capacity() < 100, "the long line was not buffered");
        assert_eq!(buf, b"xxxxxxxxxx", "its head was kept");
        assert_eq!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Some(Line::Frame)
        );
        assert_eq!(buf, b"last");
        assert_eq!(read_line(&mut reader, &mut buf, 10).await.unwrap(), None);
    }
}
