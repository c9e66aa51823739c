//! The flow frames: the JSON objects a peer exchanges with a server to drive flow connections,
//! without I/O. One home for the two wires that speak them, bidi-http's WebSocket and the stdio
//! example (the template every protocol crate follows).
//!
//! From the peer, a frame opens a connection (`init` on a socket, `connect` on a multiplexed
//! stream), sends one input (`send`), ends the input (`close`) or cancels (`cancel`):
//! [`decode`] reads a socket's frame into an [`Op`], [`decode_addressed`] a multiplexed
//! stream's into an [`Addressed`] op. To the peer, a [`Frame`] is a chunk, a turn's end, the
//! output, or an error with a [`Code`].
//!
//! | wire | opens with | frames name their connection | a field a frame does not have |
//! |---|---|---|---|
//! | socket (one connection per socket: bidi-http's WebSocket) | `{"type":"init","init":…}` | no | refused, with its JSON Pointer |
//! | multiplexed (one stream, many connections: the stdio example) | `{"type":"connect","id":"a","key":"/bidi-flow/echo","init":…}` | by the peer's `id` | ignored |
//!
//! ```
//! use bidi_flow::Code;
//! use bidi_flow::frame::{self, Frame, Op};
//! use serde_json::json;
//!
//! assert_eq!(frame::decode(br#"{"type":"send","input":"hi"}"#)?, Op::Send { input: json!("hi") });
//! let error = frame::decode(br#"{"type":"dance"}"#).unwrap_err();
//! assert_eq!(error.code(), Code::UnknownFrameType);
//!
//! let mut buf = Vec::new();
//! Frame::Chunk { id: None, chunk: &json!("hi") }.encode(&mut buf);
//! assert_eq!(buf, br#"{"type":"chunk","chunk":"hi"}"#);
//! # Ok::<_, frame::FrameError>(())
//! ```

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Code;
use crate::JsonError;
use crate::text::{cap, pointer, reason};

/// The default size limit of one frame: 1 MiB. A frame over its wire's limit is refused with
/// [`FrameError::TooLarge`] (code `frame_too_large`), and the stream goes on.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// The longest connection `id` a multiplexed frame may carry, in bytes: an id is echoed in every
/// frame about its connection, so a longer one is refused (`malformed_frame`, naming no id).
pub const MAX_ID_BYTES: usize = 256;

/// What a frame from the peer asks of its connection. `K` is what an opening frame names the
/// action by: nothing on a socket (its URL does), the key on a multiplexed stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Op<K = ()> {
    /// Opens the connection on `init` (`null` when the frame has none).
    Open {
        /// The action's key, where the frame names it.
        key: K,
        /// The init.
        init: Value,
    },
    /// One input (`null` when the frame has none).
    Send {
        /// The input.
        input: Value,
    },
    /// No more input: the action finishes and returns its output.
    Close,
    /// Cancels the connection, with the peer's reason if it gave one.
    Cancel {
        /// The peer's reason.
        reason: Option<String>,
    },
}

/// A frame of a multiplexed stream: the connection it names (the peer's `id`) and its op.
#[derive(Debug, Clone, PartialEq)]
pub struct Addressed {
    /// The peer's name for the connection.
    pub id: String,
    /// What the frame asks, opening by the action's key.
    pub op: Op<String>,
}

/// A frame the peer got wrong. The stream goes on: answer it with [`FrameError::frame`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A frame of `len` bytes, over the `limit`.
    #[error("a frame of {len} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// The frame's size in bytes (as far as it was read).
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// Not JSON, not an object, or a field missing, unknown or of the wrong type.
    #[error("{message}")]
    Malformed {
        /// The connection the frame named, if it got that far.
        id: Option<String>,
        /// What was wrong.
        message: String,
        /// Where, as a JSON Pointer, on a socket (the multiplexed wire does not say).
        path: Option<String>,
    },
    /// A `type` the wire does not have.
    #[error("unknown frame type `{}`; expected {expected}", cap(kind))]
    UnknownType {
        /// The connection the frame named, if any.
        id: Option<String>,
        /// The type the peer sent.
        kind: String,
        /// The types the wire has, for the message.
        expected: &'static str,
    },
}

impl FrameError {
    /// Checks a frame of `len` bytes against `limit`.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] if `len > limit`.
    ///
    /// ```
    /// use bidi_flow::frame::FrameError;
    ///
    /// assert!(FrameError::check_size(10, 16).is_ok());
    /// assert_eq!(
    ///     FrameError::check_size(20, 16).unwrap_err().to_string(),
    ///     "a frame of 20 bytes is over the limit of 16 bytes"
    /// );
    /// ```
    pub fn check_size(len: usize, limit: usize) -> Result<(), Self> {
        if len > limit {
            Err(Self::TooLarge { len, limit })
        } else {
            Ok(())
        }
    }

    /// The `code` of the error frame answering it.
    #[must_use]
    pub fn code(&self) -> Code {
        match self {
            Self::TooLarge { .. } => Code::FrameTooLarge,
            Self::Malformed { .. } => Code::MalformedFrame,
            Self::UnknownType { .. } => Code::UnknownFrameType,
        }
    }

    /// The connection the refused frame named, if it named one.
    #[must_use]
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::TooLarge { .. } => None,
            Self::Malformed { id, .. } | Self::UnknownType { id, .. } => id.as_deref(),
        }
    }

    /// The error frame answering it: its [`code`](Self::code), `message` (its `Display`, which
    /// the caller keeps), its [`id`](Self::id) and path.
    ///
    /// ```
    /// use bidi_flow::frame;
    ///
    /// let error = frame::decode(b"[1]").unwrap_err();
    /// let message = error.to_string();
    /// let mut buf = Vec::new();
    /// error.frame(&message).encode(&mut buf);
    /// assert_eq!(
    ///     buf,
    ///     br#"{"type":"error","code":"malformed_frame","message":"a frame is a JSON object"}"#
    /// );
    /// ```
    #[must_use]
    pub fn frame<'a>(&'a self, message: &'a str) -> Frame<'a> {
        let path = match self {
            Self::Malformed { path, .. } => path.as_deref(),
            _ => None,
        };
        Frame::Error {
            id: self.id(),
            code: self.code(),
            message,
            path,
            suggestion: None,
        }
    }
}

/// One frame to the peer. `id` names the connection on a multiplexed stream and is `None` on a
/// socket (it is then left out).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame<'a> {
    /// One chunk of the current turn: `{"type":"chunk","chunk":…}`.
    Chunk {
        /// The connection.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        /// The chunk.
        chunk: &'a Value,
    },
    /// The action ended the turn: `{"type":"turn_end"}`.
    TurnEnd {
        /// The connection.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
    },
    /// The connection's output, its last frame: `{"type":"output","output":…}`.
    Output {
        /// The connection.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        /// The output.
        output: &'a Value,
    },
    /// A refused frame (the stream goes on), or with [`Code::ConnectionFailed`] or
    /// [`Code::Cancelled`] the connection's last frame: `{"type":"error","code","message","path"?,"suggestion"?}`.
    Error {
        /// The connection the refused frame named, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        /// What was wrong.
        code: Code,
        /// What was wrong, for people.
        message: &'a str,
        /// Where in what the peer sent, as a JSON Pointer.
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<&'a str>,
        /// A registered key resembling the one asked for.
        #[serde(skip_serializing_if = "Option::is_none")]
        suggestion: Option<&'a str>,
    },
}

impl<'a> Frame<'a> {
    /// The error frame of a refused `connect`, `init` or `send`, or of a connection's end:
    /// `message` is the error's `Display`, which the caller keeps; codes `not_found` (with the
    /// suggestion), `invalid_init` / `invalid_input` (with the path), `cancelled` for a
    /// connection cancelled on purpose, `connection_failed` for its other ends, `send_failed`
    /// for the rest.
    ///
    /// ```
    /// use bidi_flow::Code;
    /// use bidi_flow::frame::Frame;
    /// use bidi_flow::{BidiFlow, Registry};
    /// # use bidi_core::{BoxError, Inbound, Outbound};
    /// # let registry = Registry::new();
    /// # registry.register(BidiFlow::new("echo", |_ctx, (): (), _: Inbound<String>, _: Outbound<String>| async {
    /// #     Ok::<_, BoxError>(())
    /// # }))?;
    /// let error = registry.connect_json("echo", serde_json::Value::Null).unwrap_err();
    /// let message = error.to_string();
    /// let Frame::Error { code, suggestion, .. } = Frame::refusal(Some("a"), &error, &message) else {
    ///     unreachable!()
    /// };
    /// assert_eq!((code, suggestion), (Code::NotFound, Some("/bidi-flow/echo")));
    /// # Ok::<_, bidi_flow::RegistryError>(())
    /// ```
    #[must_use]
    pub fn refusal(id: Option<&'a str>, error: &'a JsonError, message: &'a str) -> Self {
        let (code, path, suggestion) = match error {
            JsonError::NotFound(missing) => (Code::NotFound, None, missing.suggestion.as_deref()),
            JsonError::InvalidInit { path, .. } => (Code::InvalidInit, Some(path.as_str()), None),
            JsonError::InvalidInput { path, .. } => (Code::InvalidInput, Some(path.as_str()), None),
            JsonError::Connection(bidi_core::Error::Cancelled(cause))
                if cause.peer_gone().is_none() =>
            {
                (Code::Cancelled, None, None)
            }
            JsonError::Connection(_) => (Code::ConnectionFailed, None, None),
            _ => (Code::SendFailed, None, None),
        };
        Self::Error {
            id,
            code,
            message,
            path,
            suggestion,
        }
    }

    /// An error frame with a code and a message only.
    #[must_use]
    pub fn error(id: Option<&'a str>, code: Code, message: &'a str) -> Self {
        Self::Error {
            id,
            code,
            message,
            path: None,
            suggestion: None,
        }
    }

    /// Appends the frame to `buf` as JSON (no line break: a line-delimited wire adds its own).
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let start = buf.len();
        // A `Value` and strings always serialize into memory; should that ever change, the
        // peer still gets a frame.
        if serde_json::to_writer(&mut *buf, self).is_err() {
            buf.truncate(start);
            buf.extend_from_slice(
                br#"{"type":"error","code":"connection_failed","message":"unserializable frame"}"#,
            );
        }
    }

    /// The frame as JSON text, for a wire of text messages.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut buf = Vec::with_capacity(64);
        self.encode(&mut buf);
        // `serde_json` writes UTF-8, and so does the fallback.
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The fields of a socket's frame; which ones a type needs is checked after.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SocketFields {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    init: Value,
    #[serde(default)]
    input: Value,
    reason: Option<String>,
}

/// The fields of a multiplexed stream's frame; others are ignored.
#[derive(Deserialize)]
struct AddressedFields {
    #[serde(rename = "type")]
    kind: Option<String>,
    id: Option<String>,
    key: Option<String>,
    #[serde(default)]
    init: Value,
    #[serde(default)]
    input: Value,
    reason: Option<String>,
}

/// Decodes one frame of a socket (one connection per socket): `init`, `send`, `close` or
/// `cancel`, with no `id`.
///
/// # Errors
///
/// [`FrameError::Malformed`] for what is not a JSON object, lacks a `type` or has a field of the
/// wrong type or one a frame does not have (with the JSON Pointer of the problem);
/// [`FrameError::UnknownType`] for any other `type`. The size is the caller's to check
/// ([`FrameError::check_size`]), before it buffers the frame.
///
/// ```
/// use bidi_flow::frame::{self, Op};
/// use serde_json::Value;
///
/// assert_eq!(frame::decode(br#"{"type":"init"}"#)?, Op::Open { key: (), init: Value::Null });
/// assert_eq!(frame::decode(br#"{"type":"cancel"}"#)?, Op::Cancel { reason: None });
/// let error = frame::decode(br#"{"type":"send","inptu":1}"#).unwrap_err();
/// assert!(matches!(error, frame::FrameError::Malformed { path: Some(p), .. } if p == "/inptu"));
/// # Ok::<_, frame::FrameError>(())
/// ```
pub fn decode(frame: &[u8]) -> Result<Op, FrameError> {
    let fields: SocketFields = fields(frame, true)?;
    let Some(kind) = fields.kind else {
        return Err(malformed(None, "a frame needs a `type`"));
    };
    match kind.as_str() {
        "init" => Ok(Op::Open {
            key: (),
            init: fields.init,
        }),
        "send" => Ok(Op::Send {
            input: fields.input,
        }),
        "close" => Ok(Op::Close),
        "cancel" => Ok(Op::Cancel {
            reason: fields.reason,
        }),
        _ => Err(FrameError::UnknownType {
            id: None,
            kind,
            expected: "init, send, close or cancel",
        }),
    }
}

/// Decodes one frame of a multiplexed stream: `connect` (with `id` and `key`), `send`,
/// `close` or `cancel` (with `id`).
///
/// # Errors
///
/// [`FrameError::Malformed`] for what is not a JSON object, or lacks a `type`, an `id` or a
/// `connect`'s `key`, or has an `id` over [`MAX_ID_BYTES`] (the error names no id then), or
/// has a field of the wrong type; [`FrameError::UnknownType`] for any other `type`. Each
/// names the frame's `id` when it could be read. The size is the caller's to check, before it
/// buffers the frame (`bidi_flow::lines::read_line` does).
///
/// ```
/// use bidi_flow::frame::{self, Op};
/// use serde_json::json;
///
/// let frame = frame::decode_addressed(br#"{"type":"connect","id":"a","key":"/bidi-flow/echo"}"#)?;
/// assert_eq!(frame.id, "a");
/// assert_eq!(frame.op, Op::Open { key: "/bidi-flow/echo".into(), init: json!(null) });
/// let error = frame::decode_addressed(br#"{"type":"send"}"#).unwrap_err();
/// assert_eq!(error.to_string(), "a `send` frame needs an `id`");
/// # Ok::<_, frame::FrameError>(())
/// ```
pub fn decode_addressed(frame: &[u8]) -> Result<Addressed, FrameError> {
    let fields: AddressedFields = fields(frame, false)?;
    let AddressedFields {
        kind,
        id,
        key,
        init,
        input,
        reason,
    } = fields;
    if let Some(long) = id.as_ref().filter(|id| id.len() > MAX_ID_BYTES) {
        // Not echoed: a peer's megabyte of id would come back in every answer.
        return Err(malformed(
            None,
            format!(
                "an `id` is at most {MAX_ID_BYTES} bytes long, not {}",
                long.len()
            ),
        ));
    }
    let Some(kind) = kind else {
        return Err(malformed(id, "a frame needs a `type`"));
    };
    if !matches!(kind.as_str(), "connect" | "send" | "close" | "cancel") {
        return Err(FrameError::UnknownType {
            id,
            kind,
            expected: "connect, send, close or cancel",
        });
    }
    let Some(id) = id else {
        return Err(malformed(None, format!("a `{kind}` frame needs an `id`")));
    };
    let op = match kind.as_str() {
        "connect" => match key {
            Some(key) => Op::Open { key, init },
            None => return Err(malformed(Some(id), "a `connect` frame needs a `key`")),
        },
        "send" => Op::Send { input },
        "close" => Op::Close,
        _ => Op::Cancel { reason },
    };
    Ok(Addressed { id, op })
}

fn malformed(id: Option<String>, message: impl Into<String>) -> FrameError {
    FrameError::Malformed {
        id,
        message: message.into(),
        path: None,
    }
}

/// The fields of a JSON object; on a problem, the message (and with `with_path`, the JSON
/// Pointer) saying what and where.
fn fields<T: DeserializeOwned>(frame: &[u8], with_path: bool) -> Result<T, FrameError> {
    decode_object(frame, with_path).map_err(|undecoded| match undecoded {
        Undecoded::NotJson(error) => malformed(None, format!("not JSON: {error}")),
        Undecoded::NotObject => malformed(None, "a frame is a JSON object"),
        Undecoded::Bad { path: None, reason } => malformed(None, format!("bad frame: {reason}")),
        Undecoded::Bad {
            path: Some(path),
            reason,
        } => {
            let at = if path.is_empty() {
                "at the root".to_owned()
            } else {
                format!("at `{}`", cap(&path))
            };
            FrameError::Malformed {
                id: None,
                message: format!("bad frame {at}: {reason}"),
                path: Some(path),
            }
        }
    })
}

/// Why [`decode_object`] decoded nothing, for its caller to say in its protocol's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undecoded {
    /// The bytes are not JSON: why, as `serde_json` says it.
    NotJson(String),
    /// The bytes are JSON, but not an object.
    NotObject,
    /// An object that does not fit: the JSON Pointer of the first value that does not
    /// (empty for the object itself; `None` when it was not looked for), and why.
    Bad {
        /// Where, as a JSON Pointer.
        path: Option<String>,
        /// Why, naming JSON types, not Rust ones.
        reason: String,
    },
}

/// Decodes a JSON object of type `T` from `bytes`: a frame, a request's body.
///
/// A value that decodes is read once, straight into `T`. Only a refused one is read again,
/// when `with_path` asks for it, to find the JSON Pointer of the first value that does not
/// fit.
///
/// ```
/// use bidi_flow::frame::{self, Undecoded};
///
/// #[derive(serde::Deserialize)]
/// struct Ask {
///     n: u32,
/// }
///
/// let ask: Ask = frame::decode_object(br#"{"n":3}"#, true).unwrap();
/// assert_eq!(ask.n, 3);
/// let refused = frame::decode_object::<Ask>(br#"{"n":"three"}"#, true).err();
/// assert!(matches!(refused, Some(Undecoded::Bad { path: Some(p), .. }) if p == "/n"));
/// assert_eq!(frame::decode_object::<Ask>(b"[3]", true).err(), Some(Undecoded::NotObject));
/// ```
///
/// # Errors
///
/// [`Undecoded`]: not JSON, not an object, or an object that does not fit `T`.
pub fn decode_object<T: DeserializeOwned>(bytes: &[u8], with_path: bool) -> Result<T, Undecoded> {
    // serde would read a struct from an array too: an object is asked for, nothing else.
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => Undecoded::NotObject,
                Err(error) => Undecoded::NotJson(error.to_string()),
            },
        );
    }
    // The common case parses once; only a refusal pays for finding its path.
    match serde_json::from_slice(bytes) {
        Ok(decoded) => Ok(decoded),
        Err(error) if !error.is_data() => Err(Undecoded::NotJson(error.to_string())),
        Err(error) if !with_path => Err(Undecoded::Bad {
            path: None,
            reason: error.to_string(),
        }),
        Err(error) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let Err(error) = serde_path_to_error::deserialize::<_, T>(&mut de) else {
                return Err(Undecoded::Bad {
                    path: None,
                    reason: reason(&error.to_string()),
                });
            };
            Err(Undecoded::Bad {
                path: Some(pointer(error.path())),
                reason: reason(&error.into_inner().to_string()),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(frame: Frame<'_>) -> String {
        frame.to_text()
    }

    #[test]
    fn socket_frames_decode_into_ops() {
        assert_eq!(
            decode(br#"{"type":"init","init":"> "}"#),
            Ok(Op::Open {
                key: (),
                init: json!("> ")
            })
        );
        assert_eq!(
            decode(br#"{"type":"send","input":[1]}"#),
            Ok(Op::Send { input: json!([1]) })
        );
        assert_eq!(decode(br#" {"type":"close"}"#), Ok(Op::Close));
        assert_eq!(
            decode(br#"{"type":"cancel","reason":"stop"}"#),
            Ok(Op::Cancel {
                reason: Some("stop".into())
            })
        );
    }

    #[test]
    fn bad_socket_frames_are_typed_errors() {
        let code = |bytes: &[u8]| decode(bytes).unwrap_err().code();
        assert_eq!(code(br#"{"type":"dance"}"#), Code::UnknownFrameType);
        assert_eq!(code(br#"{"input":1}"#), Code::MalformedFrame);
        assert_eq!(code(b"not json"), Code::MalformedFrame);
        assert_eq!(code(b"{nope"), Code::MalformedFrame);
        assert_eq!(code(b"[1]"), Code::MalformedFrame);
        // A frame that names a connection belongs to the other wire.
        assert_eq!(code(br#"{"type":"send","id":"a"}"#), Code::MalformedFrame);
        let error = decode(br#"{"type":"send","reason":7}"#).unwrap_err();
        assert!(
            matches!(&error, FrameError::Malformed { path: Some(p), .. } if p == "/reason"),
            "{error:?}"
        );
        let error = decode(br#"{"type":"dance"}"#).unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown frame type `dance`; expected init, send, close or cancel"
        );
    }

    #[test]
    fn addressed_frames_need_ids_and_keys() {
        assert_eq!(
            decode_addressed(br#"{"type":"cancel","id":"a","reason":"r","extra":1}"#),
            Ok(Addressed {
                id: "a".into(),
                op: Op::Cancel {
                    reason: Some("r".into())
                }
            })
        );
        let error = decode_addressed(br#"{"type":"connect","id":"a"}"#).unwrap_err();
        assert_eq!(
            (error.id(), error.to_string().as_str()),
            (Some("a"), "a `connect` frame needs a `key`")
        );
        let error = decode_addressed(br#"{"type":"jump","id":"x"}"#).unwrap_err();
        assert_eq!(
            (error.id(), error.code()),
            (Some("x"), Code::UnknownFrameType)
        );
        let error = decode_addressed(br#"{"id":"x"}"#).unwrap_err();
        assert_eq!(error.id(), Some("x"));
        let error = decode_addressed(br#"{"type":"send","id":7}"#).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("bad frame: invalid type: integer `7`")
        );
        assert!(matches!(error, FrameError::Malformed { path: None, .. }));
    }

    #[test]
    fn a_long_id_is_refused_without_being_echoed() {
        let at_most = "i".repeat(MAX_ID_BYTES);
        let frame = format!(r#"{{"type":"close","id":"{at_most}"}}"#);
        assert!(decode_addressed(frame.as_bytes()).is_ok());
        let long = "i".repeat(100_000);
        for kind in ["connect", "send", "jump"] {
            let frame = format!(r#"{{"type":"{kind}","id":"{long}"}}"#);
            let error = decode_addressed(frame.as_bytes()).unwrap_err();
            assert_eq!((error.id(), error.code()), (None, Code::MalformedFrame));
            assert_eq!(
                error.to_string(),
                "an `id` is at most 256 bytes long, not 100000"
            );
        }
    }

    #[test]
    fn frames_encode_as_documented() {
        assert_eq!(
            text(Frame::Chunk {
                id: None,
                chunk: &json!(1)
            }),
            r#"{"type":"chunk","chunk":1}"#
        );
        assert_eq!(text(Frame::TurnEnd { id: None }), r#"{"type":"turn_end"}"#);
        assert_eq!(
            text(Frame::Output {
                id: Some("a"),
                output: &json!(1)
            }),
            r#"{"type":"output","id":"a","output":1}"#
        );
        let error = decode(br#"{"type":"send","inptu":1}"#).unwrap_err();
        let message = error.to_string();
        assert_eq!(
            text(error.frame(&message)),
            format!(
                r#"{{"type":"error","code":"malformed_frame","message":"{message}","path":"/inptu"}}"#
            )
        );
        let too_large = FrameError::check_size(5, 4).unwrap_err();
        assert_eq!(
            text(too_large.frame("m")),
            r#"{"type":"error","code":"frame_too_large","message":"m"}"#
        );
    }

    #[test]
    fn quotes_of_unknown_types_are_capped() {
        let long = format!(r#"{{"type":"{}"}}"#, "x".repeat(10_000));
        let error = decode(long.as_bytes()).unwrap_err();
        assert!(error.to_string().len() < 400, "{error}");
    }
}
