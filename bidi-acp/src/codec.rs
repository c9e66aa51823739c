//! The wire without I/O: a line into a JSON-RPC request, notification or response (or a
//! refusal carrying the JSON-RPC error to answer with), and a message into a line. Lines are
//! read with a size limit by `bidi_flow::lines::read_line`.
//!
//! Wire types come from `agent-client-protocol-schema` (pinned with `=`, protocol version 1).
//! A request is decoded once, by its method, into the schema's `ClientRequest`
//! (`client_request`: the schema crate has the enum but no decoder, and its `untagged` serde
//! cannot tell methods apart); a method not served is `-32601` with the method as data, params
//! that do not fit `-32602` naming where. `session/cancel` is decoded the same way into a
//! `ClientNotification`. The schema crate turns on serde_json's `preserve_order` for the whole
//! workspace build: JSON object keys keep their insertion order everywhere (tests compare JSON
//! as values, not as text). An oversized line is answered under the id read from its first
//! bytes (`head`, a small scanner of top-level members; `read_line` keeps a too-long line's
//! head).

use std::sync::Arc;

use agent_client_protocol_schema::rpc::{JsonRpcMessage, Notification};
use agent_client_protocol_schema::v1::{
    AGENT_METHOD_NAMES, ClientNotification, ClientRequest, Error, ErrorCode, Request, RequestId,
    Response,
};
use bidi_flow::text::cap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// One message from the peer, decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// A request: answer it with `id`.
    Request {
        id: RequestId,
        method: String,
        /// `null` when the request had none.
        params: Value,
    },
    /// A notification: never answered.
    Notification { method: String, params: Value },
    /// The answer to one of our own requests.
    Response {
        id: RequestId,
        result: Result<Value, Error>,
    },
}

/// A line refused: answer with `error` under `id` (`null` when the line named none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub(crate) id: RequestId,
    pub(crate) error: Box<Error>,
}

impl Refusal {
    fn new(id: RequestId, code: ErrorCode, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        Self {
            id,
            error: Box::new(Error::new(code.into(), format!("{code}: {detail}"))),
        }
    }

    /// A line longer than `limit` bytes, not read into memory: answered under the request id
    /// its `head` names, if it names one.
    pub(crate) fn too_large(len: usize, limit: usize, id: Option<RequestId>) -> Self {
        Self::new(
            id.unwrap_or(RequestId::Null),
            ErrorCode::InvalidRequest,
            format!("the line is {len} bytes long; at most {limit} are accepted"),
        )
    }
}

/// A line of `len` bytes, over the `limit`, whose first bytes are `head`: the answer to one
/// of our requests fails it (the server goes without that answer); anything else is refused,
/// under the request's id when the head names it.
pub(crate) fn oversized(len: usize, limit: usize, first: &[u8]) -> Result<Incoming, Refusal> {
    let head = head(first);
    let refusal = Refusal::too_large(len, limit, head.id.clone().filter(|_| head.method));
    match head.id {
        Some(id) if head.response && !head.method => Ok(Incoming::Response {
            id,
            result: Err(*refusal.error),
        }),
        _ => Err(refusal),
    }
}

/// How many bytes of an oversized line are looked at for its id.
const HEAD_BYTES: usize = 4096;

/// What the first bytes of a line too long to read say about it: clients write
/// `{"jsonrpc":"2.0","id":7,"method":...` (both official SDKs do), so the id is found before
/// the large params are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Head {
    /// The message's `id`, if the head has a whole one.
    pub(crate) id: Option<RequestId>,
    /// The head has a `method`: a request (with an id) or a notification.
    pub(crate) method: bool,
    /// The head has a `result` or an `error`: a response.
    pub(crate) response: bool,
}

/// Reads the top-level members of the JSON object `line` starts with, as far as its first
/// [`HEAD_BYTES`] bytes go and as long as they are well formed.
pub(crate) fn head(line: &[u8]) -> Head {
    let mut head = Head::default();
    let mut scan = Scan {
        bytes: &line[..line.len().min(HEAD_BYTES)],
        at: 0,
    };
    if scan.byte() != Some(b'{') {
        return head;
    }
    loop {
        let Some(key) = scan.string() else {
            return head;
        };
        if scan.byte() != Some(b':') {
            return head;
        }
        match key.as_str() {
            "id" => match scan.id() {
                Some(id) => head.id = Some(id),
                None => return head,
            },
            "method" => head.method = true,
            "result" | "error" => head.response = true,
            _ => {}
        }
        if key != "id" && !scan.skip_value() {
            return head;
        }
        if head.id.is_some() && (head.method || head.response) {
            return head;
        }
        if scan.byte() != Some(b',') {
            return head;
        }
    }
}

/// A cursor over the head of a line.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    /// The next byte that is not whitespace, consumed.
    fn byte(&mut self) -> Option<u8> {
        while let Some(&byte) = self.bytes.get(self.at) {
            self.at += 1;
            if !byte.is_ascii_whitespace() {
                return Some(byte);
            }
        }
        None
    }

    fn peek(&mut self) -> Option<u8> {
        let byte = self.byte()?;
        self.at -= 1;
        Some(byte)
    }

    /// The end (exclusive) of the string whose opening quote is at `start`.
    fn string_end(&self, start: usize) -> Option<usize> {
        let mut at = start + 1;
        loop {
            match self.bytes.get(at)? {
                b'"' => return Some(at + 1),
                b'\\' => at += 2,
                _ => at += 1,
            }
        }
    }

    /// A whole JSON string, decoded.
    fn string(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at;
        let end = self.string_end(start)?;
        self.at = end;
        serde_json::from_slice(&self.bytes[start..end]).ok()
    }

    /// A request id: a whole string, or an integer followed by what ends it (a number cut by
    /// the head's end may be longer).
    fn id(&mut self) -> Option<RequestId> {
        if self.peek()? == b'"' {
            return self.string().map(RequestId::Str);
        }
        let start = self.at;
        let len = self.bytes[start..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit() || **byte == b'-')
            .count();
        let end = start + len;
        let ended = self
            .bytes
            .get(end)
            .is_some_and(|byte| byte.is_ascii_whitespace() || matches!(byte, b',' | b'}'));
        if len == 0 || !ended {
            return None;
        }
        self.at = end;
        let text = std::str::from_utf8(&self.bytes[start..end]).ok()?;
        text.parse().ok().map(RequestId::Number)
    }

    /// Skips one whole value; `false` if the head ends first or it is malformed.
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        loop {
            let Some(byte) = self.peek() else {
                return false;
            };
            match byte {
                b'"' => {
                    let Some(end) = self.string_end(self.at) else {
                        return false;
                    };
                    self.at = end;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    let Some(less) = depth.checked_sub(1) else {
                        return false;
                    };
                    depth = less;
                    self.at += 1;
                }
                b',' | b':' if depth > 0 => self.at += 1,
                _ => {
                    // A number, `true`, `false` or `null`.
                    let len = self.bytes[self.at..]
                        .iter()
                        .take_while(|byte| {
                            byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'+' | b'.')
                        })
                        .count();
                    if len == 0 {
                        return false;
                    }
                    self.at += len;
                }
            }
            if depth == 0 {
                return true;
            }
        }
    }
}

/// Decodes one line (without its newline).
pub(crate) fn decode(line: &[u8]) -> Result<Incoming, Refusal> {
    let value: Value = serde_json::from_slice(line).map_err(|error| {
        Refusal::new(
            RequestId::Null,
            ErrorCode::ParseError,
            format!("the line is not JSON: {error}"),
        )
    })?;
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Err(Refusal::new(
                RequestId::Null,
                ErrorCode::InvalidRequest,
                "batches are not part of ACP: send one message per line",
            ));
        }
        _ => {
            return Err(Refusal::new(
                RequestId::Null,
                ErrorCode::InvalidRequest,
                "a message is a JSON object",
            ));
        }
    };
    let id = match object.remove("id") {
        None => None,
        Some(Value::Null) => Some(RequestId::Null),
        Some(Value::String(id)) => Some(RequestId::Str(id)),
        Some(Value::Number(number)) => match number.as_i64() {
            Some(id) => Some(RequestId::Number(id)),
            None => return Err(invalid(None, "`id` is an integer or a string")),
        },
        Some(_) => return Err(invalid(None, "`id` is an integer or a string")),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
    }
    match object.remove("method") {
        Some(Value::String(method)) => {
            let params = match object.remove("params") {
                None => Value::Null,
                Some(params @ (Value::Object(_) | Value::Array(_))) => params,
                Some(_) => return Err(invalid(id, "`params` is an object or an array")),
            };
            Ok(match id {
                Some(id) => Incoming::Request { id, method, params },
                None => Incoming::Notification { method, params },
            })
        }
        Some(_) => Err(invalid(id, "`method` is a string")),
        None => response(id, object),
    }
}

/// A message with neither `method` nor a usable `id`: a response, or nothing valid.
fn response(id: Option<RequestId>, mut object: Map<String, Value>) -> Result<Incoming, Refusal> {
    let Some(id) = id else {
        return Err(invalid(
            None,
            "a message has a `method`, or an `id` if it is a response",
        ));
    };
    match (object.remove("result"), object.remove("error")) {
        (Some(result), None) => Ok(Incoming::Response {
            id,
            result: Ok(result),
        }),
        (None, Some(error)) => {
            let error = serde_json::from_value(error).unwrap_or_else(|error| {
                Error::new(
                    ErrorCode::InternalError.into(),
                    format!("the peer answered with a malformed error object: {error}"),
                )
            });
            Ok(Incoming::Response {
                id,
                result: Err(error),
            })
        }
        (Some(_), Some(_)) => Err(invalid(
            Some(id),
            "a response has `result` or `error`, not both",
        )),
        (None, None) => Err(invalid(
            Some(id),
            "a message has a `method`, or `result` or `error` if it is a response",
        )),
    }
}

fn invalid(id: Option<RequestId>, detail: &str) -> Refusal {
    Refusal::new(
        id.unwrap_or(RequestId::Null),
        ErrorCode::InvalidRequest,
        detail,
    )
}

/// Decodes a method's params into `T`; a mismatch is an invalid-params error naming where
/// (`prompt[0].type`, say) and what.
pub(crate) fn params<T: DeserializeOwned>(params: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(params).map_err(|error| {
        let path = error.path().to_string();
        let reason = cap(&error.into_inner().to_string()).into_owned();
        let message = if path == "." {
            format!("Invalid params: {reason}")
        } else {
            format!("Invalid params at `{path}`: {reason}")
        };
        Error::new(ErrorCode::InvalidParams.into(), message)
            .data(json!({ "path": path, "error": reason }))
    })
}

/// Decodes a request of the client, once, into the schema's typed [`ClientRequest`], by its
/// method: the methods this agent serves. Any other method (an extension's `_...` too) is
/// [`method_not_found`]; params that do not fit the method's request are invalid params
/// naming where ([`params`]).
pub(crate) fn client_request(method: &str, raw: Value) -> Result<ClientRequest, Error> {
    let names = &AGENT_METHOD_NAMES;
    match method {
        m if m == names.initialize => params(raw).map(ClientRequest::InitializeRequest),
        m if m == names.authenticate => params(raw).map(ClientRequest::AuthenticateRequest),
        m if m == names.session_new => params(raw).map(ClientRequest::NewSessionRequest),
        m if m == names.session_load => params(raw).map(ClientRequest::LoadSessionRequest),
        m if m == names.session_close => params(raw).map(ClientRequest::CloseSessionRequest),
        m if m == names.session_list => params(raw).map(ClientRequest::ListSessionsRequest),
        m if m == names.session_delete => params(raw).map(ClientRequest::DeleteSessionRequest),
        m if m == names.session_resume => params(raw).map(ClientRequest::ResumeSessionRequest),
        #[cfg(feature = "unstable_session_status")]
        m if m == names.session_status => params(raw).map(ClientRequest::SessionStatusRequest),
        #[cfg(feature = "unstable_session_fork")]
        m if m == names.session_fork => params(raw).map(ClientRequest::ForkSessionRequest),
        #[cfg(feature = "unstable_session_set_title")]
        m if m == names.session_set_title => params(raw).map(ClientRequest::SetSessionTitleRequest),
        m if m == names.session_set_mode => params(raw).map(ClientRequest::SetSessionModeRequest),
        m if m == names.session_set_config_option => {
            params(raw).map(ClientRequest::SetSessionConfigOptionRequest)
        }
        m if m == names.session_prompt => params(raw).map(ClientRequest::PromptRequest),
        _ => Err(method_not_found(method)),
    }
}

/// Decodes a notification of the client into the schema's typed [`ClientNotification`], by its
/// method: `Ok(None)` for one this agent does not act on (ignored, as JSON-RPC says).
pub(crate) fn client_notification(
    method: &str,
    raw: Value,
) -> Result<Option<ClientNotification>, Error> {
    if method == AGENT_METHOD_NAMES.session_cancel {
        params(raw).map(|cancel| Some(ClientNotification::CancelNotification(cancel)))
    } else {
        Ok(None)
    }
}

/// The answer to a request of a method this agent does not serve: method not found, with the
/// method's name (capped) as data.
pub(crate) fn method_not_found(method: &str) -> Error {
    Error::method_not_found().data(Value::String(cap(method).into_owned()))
}

/// An invalid-params error about `field`.
pub(crate) fn invalid_params(field: &str, reason: impl Into<String>) -> Error {
    let reason = reason.into();
    Error::new(
        ErrorCode::InvalidParams.into(),
        format!("Invalid params at `{field}`: {reason}"),
    )
    .data(json!({ "path": field, "error": reason }))
}

/// Appends `message` and a newline to `buf`.
///
/// # Errors
///
/// The serializer's error (a value that is not JSON, such as a map with non-string keys);
/// `buf` is then unchanged.
pub(crate) fn encode(message: &impl Serialize, buf: &mut Vec<u8>) -> serde_json::Result<()> {
    let start = buf.len();
    if let Err(error) = serde_json::to_writer(&mut *buf, message) {
        buf.truncate(start);
        return Err(error);
    }
    buf.push(b'\n');
    Ok(())
}

/// The answer to request `id`.
pub(crate) fn response_message<R: Serialize>(
    id: RequestId,
    result: Result<R, Error>,
) -> JsonRpcMessage<Response<R>> {
    JsonRpcMessage::wrap(Response::new(id, result))
}

/// A notification.
pub(crate) fn notification<P: Serialize>(
    method: &str,
    params: P,
) -> JsonRpcMessage<Notification<P>> {
    JsonRpcMessage::wrap(Notification {
        method: Arc::from(method),
        params: Some(params),
    })
}

/// A request of ours.
pub(crate) fn request<P: Serialize>(
    id: RequestId,
    method: &str,
    params: P,
) -> JsonRpcMessage<Request<P>> {
    JsonRpcMessage::wrap(Request {
        id,
        method: Arc::from(method),
        params: Some(params),
    })
}

#[cfg(test)]
mod tests {
    use agent_client_protocol_schema::v1::{
        ContentBlock, InitializeRequest, PromptRequest, SessionNotification,
    };

    use super::*;

    fn code(line: &str) -> i32 {
        decode(line.as_bytes()).unwrap_err().error.code.into()
    }

    #[test]
    fn requests_notifications_and_responses() {
        let request = decode(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#,
        );
        assert_eq!(
            request,
            Ok(Incoming::Request {
                id: RequestId::Number(0),
                method: "initialize".into(),
                params: json!({"protocolVersion": 1}),
            })
        );
        let cancel =
            decode(br#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}"#);
        assert_eq!(
            cancel,
            Ok(Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({"sessionId": "s"}),
            })
        );
        let answer = decode(
            br#"{"jsonrpc":"2.0","id":"56da1f4e","result":{"outcome":{"outcome":"cancelled"}}}"#,
        );
        assert_eq!(
            answer,
            Ok(Incoming::Response {
                id: RequestId::Str("56da1f4e".into()),
                result: Ok(json!({"outcome": {"outcome": "cancelled"}})),
            })
        );
        let Ok(Incoming::Response {
            result: Err(error), ..
        }) = decode(
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not found"}}"#,
        )
        else {
            panic!("an error response");
        };
        assert_eq!(error.code, ErrorCode::MethodNotFound);
        // No params is `null`.
        let Ok(Incoming::Request { params, .. }) =
            decode(br#"{"jsonrpc":"2.0","id":1,"method":"x"}"#)
        else {
            panic!("a request");
        };
        assert_eq!(params, Value::Null);
    }

    #[test]
    fn refusals_carry_the_json_rpc_error() {
        assert_eq!(code("not json"), -32700);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"#), -32700);
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#),
            -32600
        );
        assert_eq!(code("42"), -32600);
        assert_eq!(
            code(r#"{"id":1,"method":"initialize"}"#),
            -32600,
            "no jsonrpc"
        );
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#), -32600);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#),
            -32600
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), -32600);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#),
            -32600
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0"}"#), -32600);
        // The id is kept when the line has a usable one.
        let refusal = decode(br#"{"jsonrpc":"1.0","id":"a","method":"x"}"#).unwrap_err();
        assert_eq!(refusal.id, RequestId::Str("a".into()));
        let refusal = decode(b"{oops").unwrap_err();
        assert_eq!(refusal.id, RequestId::Null);
        assert!(
            refusal.error.message.contains("not JSON"),
            "{}",
            refusal.error.message
        );
    }

    #[test]
    fn invalid_params_name_the_field() {
        let error = params::<PromptRequest>(json!({"sessionId": "x"})).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParams);
        assert!(error.message.contains("prompt"), "{}", error.message);
        let error =
            params::<PromptRequest>(json!({"sessionId": "x", "prompt": [{"type": "bogus"}]}))
                .unwrap_err();
        assert!(error.message.contains("prompt[0]"), "{}", error.message);
        assert_eq!(error.data.unwrap()["path"], "prompt[0].type");
        let error = params::<InitializeRequest>(Value::Null).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParams);
        let ok = params::<PromptRequest>(
            json!({"sessionId": "x", "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .unwrap();
        assert_eq!(ok.prompt.len(), 1);
        assert!(matches!(ok.prompt[0], ContentBlock::Text(_)));
    }

    #[test]
    fn requests_decode_once_by_method_into_the_schema_enum() {
        let cases = [
            ("initialize", json!({"protocolVersion": 1}), "initialize"),
            ("authenticate", json!({"methodId": "x"}), "authenticate"),
            (
                "session/new",
                json!({"cwd": "/p", "mcpServers": []}),
                "session/new",
            ),
            (
                "session/load",
                json!({"sessionId": "s", "cwd": "/p", "mcpServers": []}),
                "session/load",
            ),
            ("session/close", json!({"sessionId": "s"}), "session/close"),
            ("session/list", json!({}), "session/list"),
            (
                "session/delete",
                json!({"sessionId": "s"}),
                "session/delete",
            ),
            (
                "session/resume",
                json!({"sessionId": "s", "cwd": "/p"}),
                "session/resume",
            ),
            (
                "session/set_mode",
                json!({"sessionId": "s", "modeId": "ask"}),
                "session/set_mode",
            ),
            (
                "session/prompt",
                json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}),
                "session/prompt",
            ),
        ];
        for (method, raw, expected) in cases {
            let request = client_request(method, raw).unwrap();
            assert_eq!(request.method(), expected);
        }
        let Ok(ClientRequest::PromptRequest(prompt)) = client_request(
            "session/prompt",
            json!({"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}),
        ) else {
            panic!("a prompt request");
        };
        assert_eq!(&*prompt.session_id.0, "s");
    }

    #[test]
    fn a_method_not_served_is_not_found_and_bad_params_are_invalid() {
        // Methods of ACP this agent does not serve, extension methods and nonsense alike.
        for method in ["session/archive", "logout", "_x/anything", "nope"] {
            let error = client_request(method, json!({})).unwrap_err();
            assert_eq!(error.code, ErrorCode::MethodNotFound, "{method}");
            assert_eq!(error.data, Some(json!(method)));
        }
        let long = "m".repeat(10_000);
        let error = client_request(&long, Value::Null).unwrap_err();
        assert!(error.data.unwrap().as_str().unwrap().len() < long.len());
        // Bad params: the same error `params` gives for the method's request.
        let raw = json!({"sessionId": "x", "prompt": [{"type": "bogus"}]});
        let error = client_request("session/prompt", raw.clone()).unwrap_err();
        assert_eq!(error, params::<PromptRequest>(raw).unwrap_err());
        assert_eq!(error.data.unwrap()["path"], "prompt[0].type");
        let error = client_request("initialize", Value::Null).unwrap_err();
        assert_eq!(error, params::<InitializeRequest>(Value::Null).unwrap_err());
    }

    #[test]
    fn notifications_decode_by_method_and_unknown_ones_are_none() {
        let cancel = client_notification("session/cancel", json!({"sessionId": "s"})).unwrap();
        let Some(ClientNotification::CancelNotification(cancel)) = cancel else {
            panic!("a cancel notification");
        };
        assert_eq!(&*cancel.session_id.0, "s");
        let error = client_notification("session/cancel", json!({})).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParams);
        for method in ["session/update", "_x/ping", "nope"] {
            assert!(client_notification(method, json!({})).unwrap().is_none());
        }
    }

    #[test]
    fn encodes_one_line_per_message_into_a_reused_buffer() {
        let mut buf = Vec::new();
        encode(
            &response_message(RequestId::Number(2), Ok(json!({"stopReason": "end_turn"}))),
            &mut buf,
        )
        .unwrap();
        encode(
            &response_message::<Value>(RequestId::Null, Err(Error::parse_error())),
            &mut buf,
        )
        .unwrap();
        let update: SessionNotification = serde_json::from_value(json!({
            "sessionId": "s",
            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a\nb"}},
        }))
        .unwrap();
        encode(&notification("session/update", &update), &mut buf).unwrap();
        encode(
            &request(RequestId::Str("r1".into()), "x/y", json!({})),
            &mut buf,
        )
        .unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[0],
            json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}})
        );
        assert_eq!(lines[1]["id"], Value::Null);
        assert_eq!(lines[1]["error"]["code"], -32700);
        assert_eq!(lines[2]["method"], "session/update");
        assert_eq!(lines[2]["params"]["update"]["content"]["text"], "a\nb");
        assert_eq!(
            lines[3],
            json!({"jsonrpc": "2.0", "id": "r1", "method": "x/y", "params": {}})
        );
        // Every message decodes back.
        for line in text.lines() {
            decode(line.as_bytes()).unwrap();
        }
    }

    #[test]
    fn an_oversized_line_is_an_invalid_request() {
        let too_large = Refusal::too_large(100, 10, None);
        assert_eq!(too_large.error.code, ErrorCode::InvalidRequest);
        assert_eq!(too_large.id, RequestId::Null);
    }

    #[test]
    fn the_head_of_a_line_names_its_id() {
        let request = |id: Option<RequestId>| Head {
            id,
            method: true,
            response: false,
        };
        let cases: [(&str, Head); 14] = [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"prompt":[{"te"#,
                request(Some(RequestId::Number(7))),
            ),
            (
                r#" { "jsonrpc" : "2.0" , "id" : "a\"b" , "method" : "x", "params": {"#,
                request(Some(RequestId::Str("a\"b".into()))),
            ),
            (
                r#"{"method":"session/prompt","id":-3,"params":"#,
                request(Some(RequestId::Number(-3))),
            ),
            // A member before the id is skipped, whatever it holds.
            (
                r#"{"_meta":{"a":[1,{"b":"}"}],"c":null},"id":1,"method":"m","params":{"#,
                request(Some(RequestId::Number(1))),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"bidi-3","result":{"outcome":"#,
                Head {
                    id: Some(RequestId::Str("bidi-3".into())),
                    method: false,
                    response: true,
                },
            ),
            // The params come before the id: it is out of reach.
            (
                r#"{"jsonrpc":"2.0","method":"m","params":{"text":"xxxx"#,
                Head {
                    id: None,
                    method: true,
                    response: false,
                },
            ),
            // A number the head cuts may go on.
            (r#"{"jsonrpc":"2.0","id":12"#, Head::default()),
            (r#"{"jsonrpc":"2.0","id":"unterminat"#, Head::default()),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"m""#, Head::default()),
            (
                r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"m""#,
                Head::default(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":true,"method":"m""#,
                Head::default(),
            ),
            (r#"["jsonrpc","id"]"#, Head::default()),
            (r#"{"jsonrpc" "2.0","id":1,"method":"m""#, Head::default()),
            ("not json at all", Head::default()),
        ];
        for (line, expected) in cases {
            assert_eq!(head(line.as_bytes()), expected, "{line}");
        }
        // Only the first bytes are read.
        let far = format!(
            r#"{{"pad":"{}","id":1,"method":"m"}}"#,
            "x".repeat(HEAD_BYTES)
        );
        assert_eq!(head(far.as_bytes()), Head::default());
    }
}
