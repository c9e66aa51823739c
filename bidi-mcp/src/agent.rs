//! An [`LlmAgent`] as an MCP tool: a message in, the answer's text and its session out, the
//! text streamed as progress (the deltas ready together as one notification: a model that
//! streams as it thinks makes one notification a delta, a burst of buffered tokens one in
//! all); run by `bidi-llm`'s [`Execution`] like every agent front end.
//!
//! Its wire keeps the text deltas and what the turn waits on; its sink is the call's: closed
//! by the call's cancellation (`notifications/cancelled`, or `tasks/cancel` of the task it runs
//! as, the cause saying the MCP client cancelled the call) or by the call's answer being
//! dropped (`PeerGone::Disconnected`).
//!
//! A turn that stops for calls waiting for approval asks the client one question per call
//! (see [`asking`](super::asking): by elicitation, or as its task's input requests), when the
//! client can be asked, and goes on with the session with the decisions, in the same call,
//! until the turn completes; the wait for answers ends with the call's cancellation. A client
//! that cannot be asked reads what waits in the result, and answers with the `approvals`
//! argument of a next call (see [`approval`](super::approval)).

use std::sync::Arc;

use bidi_agent::{AgentInit, Refusal};
use bidi_core::{BoxError, Driver, PeerGone};
use bidi_flow::Code;
use bidi_flow::wire::{Closed, Frames, Sink, Wire};
use bidi_llm::peer::Execution;
use bidi_llm::{
    AgentEvent, Approval, Context, Ending, LlmAgent, LlmSession, Resume, ToolCall, TurnInput,
    TurnState, UserMessage,
};
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, Tool};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::approval::{self, Waiting};
use super::asking::Unanswered;
use super::tools::invalid_argument;
use super::{CANCELLED, CallEnv, Caller, Step};

/// The tool of `agent`, named `name`.
pub(super) fn tool(name: String, agent: &LlmAgent) -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "What the user says to the agent. It may be left out of a call \
                                that sends approvals."
            },
            "sessionId": {
                "type": "string",
                "description": "The session to go on with: the sessionId of an earlier answer. \
                                Without it, a new session starts."
            },
            "approvals": approval::schema()
        },
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
            },
            "pendingApprovals": {
                "type": "array",
                "description": "The calls the agent waits to have approved before it goes on: \
                                answer them with approvals in a next call on the session.",
                "items": {
                    "type": "object",
                    "properties": {
                        "toolCallId": {"type": "string"},
                        "name": {"type": "string"},
                        "arguments": {}
                    },
                    "required": ["toolCallId", "name", "arguments"]
                }
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
         next message to go on with the conversation. When the agent waits for approval of \
         a call and the client cannot be asked, the answer lists it in pendingApprovals: \
         send the decisions as approvals, with the sessionId.",
        agent.agent().name()
    );
    Tool::new(name, description, Arc::new(schema)).with_raw_output_schema(Arc::new(output))
}

/// What a call of an agent tool takes.
#[derive(Debug, PartialEq)]
enum Arguments {
    /// A message, on a new session or the one named.
    Message {
        message: String,
        session_id: Option<String>,
    },
    /// Decisions on the calls the session waits to have approved, and what the user says
    /// next, if anything.
    Answers {
        session_id: String,
        approvals: Vec<Approval>,
        message: Option<String>,
    },
}

/// The call's arguments.
///
/// # Errors
///
/// A non-string `message` or `sessionId`, approvals that are not a list of decisions or come
/// without a `sessionId`, neither a message nor approvals, or any other argument, as `-32602`.
fn arguments(mut arguments: Map<String, Value>) -> Result<Arguments, ErrorData> {
    let mut string = |name: &str| match arguments.remove(name) {
        Some(Value::String(value)) => Ok(Some(value)),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(invalid_argument(
            &format!("/{name}"),
            "a string is expected",
        )),
    };
    let message = string("message")?;
    let session_id = string("sessionId")?;
    let approvals = match arguments.remove("approvals") {
        None | Some(Value::Null) => None,
        Some(approvals) => Some(approval::parse(approvals)?),
    };
    if let Some(unknown) = arguments.keys().next() {
        return Err(invalid_argument(
            &format!("/{}", bidi_flow::text::cap(unknown)),
            "unknown argument: this tool takes `message`, `sessionId` and `approvals`",
        ));
    }
    match (message, session_id, approvals) {
        (message, Some(session_id), Some(approvals)) => Ok(Arguments::Answers {
            session_id,
            approvals,
            message,
        }),
        (_, None, Some(_)) => Err(invalid_argument(
            "/sessionId",
            "approvals answer the calls of a session: name it",
        )),
        (Some(message), session_id, None) => Ok(Arguments::Message {
            message,
            session_id,
        }),
        (None, _, None) => Err(invalid_argument(
            "/message",
            "the message is missing (a call without one sends approvals)",
        )),
    }
}

/// One call of an agent tool: the executions it runs on the session, the text they said so
/// far, and the progress it notifies.
struct Call<'a> {
    agent: &'a LlmAgent,
    caller: &'a Caller,
    /// What its connections carry.
    env: CallEnv,
    text: String,
}

/// How one execution of a call ended, in the call's terms: the turn's state
/// (`bidi_llm::TurnState`) as this tool answers it.
enum Ended {
    /// The turn is over (completed, or aborted).
    Completed,
    /// It failed, saying this.
    Failed(String),
    /// It stopped for these calls.
    Waiting(Waiting),
}

impl Ended {
    /// The call's view of a turn that ended in `turn`.
    fn of(turn: TurnState) -> Self {
        match turn {
            TurnState::Failed(failure) => Self::Failed(failure.error),
            TurnState::Waiting { .. } => Self::Waiting(Waiting::of(turn)),
            TurnState::Expired => Self::Failed("the agent's process went away".to_owned()),
            _ => Self::Completed,
        }
    }
}

/// What the client said when asked about the calls waiting for approval.
enum Asked {
    /// A decision on each.
    Decided(Vec<Approval>),
    /// The call was cancelled while it waited.
    Cancelled,
    /// The client could not be asked, or its answer says nothing: why.
    Failed(String),
}

/// The executions of `agent` for a call, until its turn is over: the answer's text and
/// session, what waits, or why there is none.
///
/// # Errors
///
/// Bad arguments, a session that does not exist or does not fit, or approvals that do not
/// answer what the session waits on, as `-32602`.
pub(super) async fn call(
    agent: &LlmAgent,
    arguments: Map<String, Value>,
    env: CallEnv,
    caller: &Caller,
) -> Result<CallToolResult, ErrorData> {
    let arguments = self::arguments(arguments)?;
    let mut call = Call {
        agent,
        caller,
        env,
        text: String::new(),
    };
    // Where a refused input is the caller's.
    let answers = matches!(arguments, Arguments::Answers { .. });
    let (mut init, mut input) = call.open(arguments).await?;
    let mut first = true;
    loop {
        let resumed = init.session_id.clone();
        let (session_id, ended) = match call.run(init, input).await {
            Ok(run) => run,
            Err(refusal) => {
                return match refusal.code() {
                    Code::NotFound | Code::InvalidInit | Code::SessionIncompatible => {
                        Err(invalid_argument("/sessionId", refusal.message()))
                    }
                    Code::InvalidInput if first && answers => {
                        Err(invalid_argument("/approvals", refusal.message()))
                    }
                    Code::InvalidInput if first => match resumed {
                        Some(id) => Err(call.waiting(&id).await?.refusal(refusal.message())),
                        None => Err(invalid_argument("/message", refusal.message())),
                    },
                    _ => Ok(CallToolResult::error(vec![ContentBlock::text(
                        refusal.into_message(),
                    )])),
                };
            }
        };
        first = false;
        let waiting = match ended {
            Ended::Failed(message) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
            }
            Ended::Completed => return Ok(call.answer(&session_id, None, None)),
            Ended::Waiting(waiting) => waiting,
        };
        if !waiting.remote.is_empty() || !call.caller.asking.can_ask() {
            return Ok(call.answer(&session_id, Some(&waiting), None));
        }
        match call.ask(&waiting.approvals).await {
            Asked::Decided(approvals) => {
                let mut resume = Resume::new();
                for approval in approvals {
                    resume = resume.approval(approval);
                }
                init = AgentInit::new().resume(session_id);
                input = TurnInput::Resume(resume);
            }
            Asked::Cancelled => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(CANCELLED)]));
            }
            Asked::Failed(why) => {
                return Ok(call.answer(&session_id, Some(&waiting), Some(&why)));
            }
        }
    }
}

impl Call<'_> {
    /// The session a call's `arguments` go on with (a new one if they name none), and its
    /// input.
    ///
    /// # Errors
    ///
    /// Approvals that do not answer what the session waits on, or a session that does not
    /// exist, as `-32602`.
    async fn open(
        &self,
        arguments: Arguments,
    ) -> Result<(AgentInit<LlmSession>, TurnInput), ErrorData> {
        match arguments {
            Arguments::Answers {
                session_id,
                approvals,
                message,
            } => {
                self.waiting(&session_id).await?.check(&approvals)?;
                let mut resume = Resume::new();
                for approval in approvals {
                    resume = resume.approval(approval);
                }
                if let Some(message) = message {
                    resume = resume.message(UserMessage::new(message));
                }
                let init = AgentInit::new().resume(session_id);
                Ok((init, TurnInput::Resume(resume)))
            }
            Arguments::Message {
                message,
                session_id: Some(id),
            } => Ok((
                AgentInit::new().resume(id),
                TurnInput::User(UserMessage::new(message)),
            )),
            Arguments::Message {
                message,
                session_id: None,
            } => {
                let state = self
                    .agent
                    .new_session(Context::default())
                    .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
                let init = AgentInit::new().init(state);
                Ok((init, TurnInput::User(UserMessage::new(message))))
            }
        }
    }

    /// One execution of `input` on the session `init` names: its session and how it ended,
    /// its text added to the call's and notified as progress.
    ///
    /// # Errors
    ///
    /// The execution's refusal.
    async fn run(
        &mut self,
        init: AgentInit<LlmSession>,
        input: TurnInput,
    ) -> Result<(String, Ended), Refusal> {
        let driver = Driver::new();
        let options = self.env.options().driver(&driver);
        let conn = self.agent.connect_with(init, options);
        let (frames, mut replies) = mpsc::channel(1);
        let sink = CallSink {
            frames,
            cancelled: self.caller.cancelled().clone(),
        };
        let started = Execution::new(conn, input)
            .action(driver.take())
            .start(Reply::default(), sink)
            .await?;
        // The text of an execution after the first begins a paragraph of its own.
        let mut separate = !self.text.is_empty();
        let mut failure = None;
        let mut turn = None;
        // The sink is dropped once the execution is over: its session saved.
        while let Some(Pieces(pieces)) = replies.recv().await {
            for piece in pieces {
                match piece {
                    Piece::Text(mut delta) => {
                        if std::mem::take(&mut separate) {
                            delta.insert_str(0, "\n\n");
                        }
                        self.text.push_str(&delta);
                        self.caller.progress.send(Step::Text(delta)).await;
                    }
                    Piece::Failed(message) => failure = Some(message),
                    Piece::Ended(state) => turn = Some(state),
                }
            }
        }
        let ended = match (failure, turn) {
            (Some(message), _) => Ended::Failed(message),
            (None, Some(turn)) => Ended::of(turn),
            (None, None) => Ended::Failed("the turn ended before it finished".to_owned()),
        };
        Ok((started.session_id, ended))
    }

    /// What the session `id` waits on, as the caller sees it.
    ///
    /// # Errors
    ///
    /// A session that does not exist, as `-32602`; the store's failure, as `-32603`.
    async fn waiting(&self, id: &str) -> Result<Waiting, ErrorData> {
        let session = bidi_http::agent::load(self.agent, self.env.identity.as_ref(), id)
            .await
            .map_err(|failure| ErrorData::internal_error(failure.message, None))?;
        match session {
            Some(session) => Ok(Waiting::of(self.agent.turn_state(&session))),
            None => Err(invalid_argument(
                "/sessionId",
                &format!("no session `{}`", bidi_flow::text::cap(id)),
            )),
        }
    }

    /// Asks the client about each of `calls` (see [`asking`](super::asking)).
    async fn ask(&self, calls: &[ToolCall]) -> Asked {
        let questions = calls.iter().map(|call| approval::request(self.agent, call));
        let answers = match self.caller.asking.ask(questions.collect()).await {
            Ok(answers) => answers,
            Err(Unanswered::Cancelled) => return Asked::Cancelled,
            Err(Unanswered::Failed(why)) => return Asked::Failed(why),
        };
        let decisions = calls
            .iter()
            .zip(answers)
            .map(|(call, answer)| approval::decision(call, answer));
        match decisions.collect() {
            Ok(approvals) => Asked::Decided(approvals),
            Err(why) => Asked::Failed(why),
        }
    }

    /// The call's result: the text so far and the session, and what waits if the turn
    /// stopped (then an error if the client could not be asked, saying `why`).
    fn answer(
        &self,
        session_id: &str,
        waiting: Option<&Waiting>,
        why: Option<&str>,
    ) -> CallToolResult {
        let mut structured = json!({ "text": self.text, "sessionId": session_id });
        // The text once more as the content, for clients that read no structuredContent.
        let mut content = vec![ContentBlock::text(self.text.clone())];
        if let Some(waiting) = waiting {
            if !waiting.approvals.is_empty() {
                structured["pendingApprovals"] = waiting.pending_approvals();
            }
            let note = waiting.note(session_id);
            let note = match why {
                Some(why) => format!("Asking for approval failed: {why}.\n\n{note}"),
                None => note,
            };
            if self.text.is_empty() {
                content.clear();
            }
            content.push(ContentBlock::text(note));
        }
        let mut result = if why.is_some() {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = Some(structured);
        result
    }
}

/// What an execution tells its call.
enum Piece {
    /// More of the answer's text.
    Text(String),
    /// The execution was cut short, saying this.
    Failed(String),
    /// The turn ended so.
    Ended(TurnState),
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
#[derive(Default)]
struct Reply {
    ending: Ending,
}

impl Wire for Reply {
    type Event = AgentEvent;
    type Output = bidi_llm::peer::Output;
    type Frames = Pieces;

    fn event(&mut self, event: AgentEvent, out: &mut Pieces) {
        if let AgentEvent::TextDelta { delta } = event {
            // The text ready together goes as one notification: MCP asks a sender to keep its
            // progress from flooding the client, and each notification is a message the
            // client decodes. The text is the same.
            match out.0.last_mut() {
                Some(Piece::Text(text)) => text.push_str(&delta),
                _ => out.0.push(Piece::Text(delta)),
            }
            return;
        }
        self.ending.observe(&event);
        if matches!(event, AgentEvent::ExecuteComplete { .. })
            && let Some(turn) = self.ending.state()
        {
            out.0.push(Piece::Ended(turn));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_ready_together_is_one_piece() {
        let mut reply = Reply::default();
        let mut out = Pieces::default();
        let text = |delta: &str| AgentEvent::TextDelta {
            delta: delta.to_owned(),
        };
        for delta in ["Hel", "lo", " there"] {
            reply.event(text(delta), &mut out);
        }
        reply.failed("cut", &mut out);
        reply.event(text("again"), &mut out);
        let pieces: Vec<String> = out
            .0
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => format!("text {text}"),
                Piece::Failed(why) => format!("failed {why}"),
                Piece::Ended(_) => "ended".to_owned(),
            })
            .collect();
        assert_eq!(pieces, ["text Hello there", "failed cut", "text again"]);
    }

    fn parsed(arguments: Value) -> Result<Arguments, String> {
        let Value::Object(arguments) = arguments else {
            unreachable!("an object")
        };
        self::arguments(arguments).map_err(|error| error.message.to_string())
    }

    #[test]
    fn a_call_takes_a_message_or_approvals_on_a_session() {
        assert_eq!(
            parsed(json!({"message": "hi"})),
            Ok(Arguments::Message {
                message: "hi".into(),
                session_id: None
            })
        );
        let decisions = json!([{"toolCallId": "c1", "approved": true}]);
        assert_eq!(
            parsed(json!({"sessionId": "s", "approvals": decisions})),
            Ok(Arguments::Answers {
                session_id: "s".into(),
                approvals: vec![Approval::approve("c1")],
                message: None
            })
        );
        let refused = |arguments| parsed(arguments).err().unwrap_or_default();
        assert_eq!(
            refused(json!({"approvals": decisions})),
            "invalid argument at `/sessionId`: approvals answer the calls of a session: name it"
        );
        assert_eq!(
            refused(json!({"sessionId": "s"})),
            "invalid argument at `/message`: the message is missing (a call without one sends \
             approvals)"
        );
        assert!(refused(json!({"message": "hi", "nope": 1})).contains("`/nope`: unknown argument"));
        assert!(
            refused(json!({"sessionId": "s", "approvals": [{"toolCallId": 1, "approved": true}]}))
                .starts_with("invalid argument at `/approvals/0/toolCallId`")
        );
    }

    #[test]
    fn the_schemas_take_approvals_and_say_what_waits() {
        let agent = LlmAgent::builder("bank", bidi_llm::testing::ScriptedModel::new([])).build();
        let tool = tool("bank".into(), &agent);
        let input = Value::Object((*tool.input_schema).clone());
        assert_eq!(input["properties"]["approvals"]["type"], "array");
        assert_eq!(input.get("required"), None);
        let output = tool
            .output_schema
            .map(|schema| Value::Object((*schema).clone()))
            .unwrap_or_default();
        assert_eq!(output["required"], json!(["text", "sessionId"]));
        assert_eq!(output["properties"]["pendingApprovals"]["type"], "array");
    }
}
