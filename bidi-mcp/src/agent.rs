//! An [`LlmAgent`] as an MCP tool: a message in, the answer's text and its session out, the
//! text streamed as progress; run by `bidi-serve`'s [`Execution`] like every agent front end.
//!
//! Its wire keeps the text deltas; its sink is the call's: closed by the request's
//! cancellation (`notifications/cancelled`, the cause saying the MCP client cancelled the
//! call) or by the call's answer being dropped (`PeerGone::Disconnected`).

use std::sync::Arc;

use bidi_agent::{AgentInit, RefusalKind};
use bidi_core::{BoxError, PeerGone};
use bidi_llm::{AgentEvent, Context, LlmAgent, TurnInput, UserMessage};
use bidi_serve::{Closed, Execution, Frames, Sink, Wire};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, Tool};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::tools::invalid_argument;
use super::{CANCELLED, Progress, identity};
use bidi_http::Host;

/// The tool of `agent`, named `name`.
pub(super) fn tool(name: String, agent: &LlmAgent) -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "What the user says to the agent."
            },
            "sessionId": {
                "type": "string",
                "description": "The session to go on with: the sessionId of an earlier answer. \
                                Without it, a new session starts."
            }
        },
        "required": ["message"],
        "additionalProperties": false
    });
    let output = json!({
        "type": "object",
        "properties": {
            "text": {
                "type": "string",
                "description": "The agent's answer."
            },
            "sessionId": {
                "type": "string",
                "description": "The session of the conversation: send it with the next message \
                                to go on with it."
            }
        },
        "required": ["text", "sessionId"],
        "additionalProperties": false
    });
    let (Value::Object(schema), Value::Object(output)) = (schema, output) else {
        unreachable!("JSON objects")
    };
    let description = format!(
        "Talks with the agent {}: answers a message; send the answer's sessionId with the \
         next message to go on with the conversation.",
        agent.agent().name()
    );
    Tool::new(name, description, Arc::new(schema)).with_raw_output_schema(Arc::new(output))
}

/// What a call of an agent tool takes.
struct Arguments {
    message: String,
    session_id: Option<String>,
}

/// The call's arguments.
///
/// # Errors
///
/// A missing or non-string `message`, a non-string `sessionId` or any other argument, as
/// `-32602`.
fn arguments(mut arguments: Map<String, Value>) -> Result<Arguments, ErrorData> {
    let message = match arguments.remove("message") {
        Some(Value::String(message)) => message,
        Some(_) => return Err(invalid_argument("/message", "a string is expected")),
        None => return Err(invalid_argument("/message", "the message is missing")),
    };
    let session_id = match arguments.remove("sessionId") {
        Some(Value::String(id)) => Some(id),
        None | Some(Value::Null) => None,
        Some(_) => return Err(invalid_argument("/sessionId", "a string is expected")),
    };
    if let Some(unknown) = arguments.keys().next() {
        return Err(invalid_argument(
            &format!("/{}", bidi_flow::text::cap(unknown)),
            "unknown argument: this tool takes `message` and `sessionId`",
        ));
    }
    Ok(Arguments {
        message,
        session_id,
    })
}

/// One execution of `agent` for a call: the answer's text and session, or why there is none.
///
/// # Errors
///
/// Bad arguments, or a session that does not exist or does not fit, as `-32602`.
pub(super) async fn call(
    agent: &LlmAgent,
    arguments: Map<String, Value>,
    ctx: RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let Arguments {
        message,
        session_id,
    } = self::arguments(arguments)?;
    let init = match session_id {
        Some(id) => AgentInit::new().resume(id),
        None => {
            let state = agent
                .new_session(Context::default())
                .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
            AgentInit::new().init(state)
        }
    };
    let conn = agent.connect_with(init, Host::connect_options(identity(&ctx).as_ref()));
    let input = TurnInput::User(UserMessage::new(message));
    let (frames, mut replies) = mpsc::channel(1);
    let sink = CallSink {
        frames,
        cancelled: ctx.ct.clone(),
    };
    let started = match Execution::new(conn, input).start(Reply, sink).await {
        Ok(started) => started,
        Err(refusal) => {
            return match refusal.kind() {
                RefusalKind::NotFound
                | RefusalKind::InvalidInit
                | RefusalKind::SessionIncompatible => {
                    Err(invalid_argument("/sessionId", refusal.message()))
                }
                _ => Ok(CallToolResult::error(vec![ContentBlock::text(
                    refusal.into_message(),
                )])),
            };
        }
    };
    let mut progress = Progress::new(&ctx);
    let mut text = String::new();
    let mut failure = None;
    // The sink is dropped once the execution is over.
    while let Some(Pieces(pieces)) = replies.recv().await {
        for piece in pieces {
            match piece {
                Piece::Text(delta) => {
                    text.push_str(&delta);
                    progress.send(delta).await;
                }
                Piece::Failed(message) => failure = Some(message),
            }
        }
    }
    if let Some(message) = failure {
        return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
    }
    // What the tool's outputSchema says; the text once more as the content, for clients that
    // read no structuredContent.
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    result.structured_content = Some(json!({ "text": text, "sessionId": started.session_id }));
    Ok(result)
}

/// What an execution tells its call.
enum Piece {
    /// More of the answer's text.
    Text(String),
    /// The execution failed, saying this.
    Failed(String),
}

/// The pieces of one write.
#[derive(Default)]
struct Pieces(Vec<Piece>);

impl Frames for Pieces {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn is_full(&self) -> bool {
        self.0.len() >= 64
    }
}

/// An agent's events as the pieces of a call's answer.
struct Reply;

impl Wire for Reply {
    type Event = AgentEvent;
    type Output = bidi_serve::Output;
    type Frames = Pieces;

    fn event(&mut self, event: AgentEvent, out: &mut Pieces) {
        match event {
            AgentEvent::TextDelta { delta } => out.0.push(Piece::Text(delta)),
            AgentEvent::Error { error, .. } => out.0.push(Piece::Failed(error)),
            _ => {}
        }
    }

    fn failed(&mut self, message: &str, out: &mut Pieces) {
        out.0.push(Piece::Failed(message.to_owned()));
    }
}

/// Where a call's pieces go: closed once the call is gone (its client went away) or cancelled
/// by its client.
struct CallSink {
    frames: mpsc::Sender<Pieces>,
    cancelled: CancellationToken,
}

impl Sink<Pieces> for CallSink {
    async fn send(&self, pieces: Pieces) -> Result<(), Closed> {
        self.frames.send(pieces).await.map_err(|_| Closed)
    }

    async fn closed(&self) -> BoxError {
        tokio::select! {
            () = self.frames.closed() => Box::new(PeerGone::Disconnected),
            () = self.cancelled.cancelled() => CANCELLED.into(),
        }
    }
}
