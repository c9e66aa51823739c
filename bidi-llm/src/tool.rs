//! [`Tool`]s: local ones stream their execution, remote ones suspend the turn.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_core::Stream;
use futures_util::StreamExt as _;
use futures_util::stream::{self, BoxStream};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::Error;
use crate::message::Attachment;
use crate::model::ToolSpec;

/// One event of a local tool's execution: deltas and attachments as it goes, then `Complete` or
/// `Failed`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ToolEvent {
    /// More output, shown as it comes.
    Delta(String),
    /// An image, audio clip or document for the result: the attachments a tool streams before
    /// it completes go with its result, in order. A tool that fails drops them.
    ///
    /// ```
    /// use bidi_llm::{Attachment, Tool, ToolEvent};
    /// use futures_util::stream;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Shot {}
    ///
    /// let screenshot = Tool::local("screenshot", "Screenshot", "Takes a screenshot", |_id, _: Shot| {
    ///     stream::iter([
    ///         ToolEvent::Attachment(Attachment::image("iVBORw0K", "image/png")),
    ///         ToolEvent::Complete { output: "the screen, attached".into(), details: None },
    ///     ])
    /// });
    /// # drop(screenshot);
    /// ```
    Attachment(Attachment),
    /// Data for the application, not the model: progress, a chart's points, a form to show.
    /// It streams as [`AgentEvent::ToolExecutionData`](crate::AgentEvent::ToolExecutionData)
    /// and is not kept in the conversation. User interfaces show it by `name` (the Vercel AI
    /// SDK as a `data-{name}` part, the call's latest data of a name replacing the one before;
    /// AG-UI as a `CUSTOM` event).
    ///
    /// ```
    /// use bidi_llm::{Tool, ToolEvent};
    /// use futures_util::stream;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Files {}
    ///
    /// let copy = Tool::local("copy", "Copy", "Copies the files", |_id, _: Files| {
    ///     stream::iter([
    ///         ToolEvent::Data { name: "progress".into(), data: json!({"done": 1, "of": 2}) },
    ///         ToolEvent::Data { name: "progress".into(), data: json!({"done": 2, "of": 2}) },
    ///         ToolEvent::Complete { output: "copied 2 files".into(), details: None },
    ///     ])
    /// });
    /// # drop(copy);
    /// ```
    Data {
        /// What kind of data.
        name: String,
        /// The data.
        data: Value,
    },
    /// The tool finished: its output for the model and details for the application.
    Complete {
        /// The output.
        output: String,
        /// Structured details.
        details: Option<Value>,
    },
    /// The tool failed; the message goes to the model as an error result.
    Failed(String),
}

type Validate = Arc<dyn Fn(&Value) -> Result<(), Error> + Send + Sync>;
type Execute =
    Arc<dyn Fn(String, Value) -> Result<BoxStream<'static, ToolEvent>, Error> + Send + Sync>;

/// A tool the model may call. With an executor it is **local**: the loop runs it and streams
/// its events. Without one it is **remote**: the turn stops with `awaiting_tool_execution` and
/// the caller sends the result back.
///
/// Arguments are checked against the tool's argument type before anything runs: a call with
/// invalid arguments gets an error result naming the path and the reason, and the loop goes on.
///
/// A local tool is cancelled by dropping its stream (when the execution is cancelled, say):
/// keep what it starts inside the stream, so that dropping it stops that too (a child process
/// with `kill_on_drop`, a task behind an abort-on-drop handle).
#[derive(Clone)]
pub struct Tool {
    name: String,
    label: String,
    description: String,
    parameters: Value,
    validate: Validate,
    execute: Option<Execute>,
    approval: bool,
}

fn parse<Args: DeserializeOwned>(name: &str, args: &Value) -> Result<Args, Error> {
    serde_path_to_error::deserialize(args).map_err(|error| Error::InvalidArguments {
        tool: name.to_owned(),
        path: error.path().to_string(),
        source: error.into_inner(),
    })
}

impl Tool {
    fn with<Args: DeserializeOwned + JsonSchema>(
        name: &str,
        label: &str,
        description: &str,
        execute: Option<Execute>,
    ) -> Self {
        let parameters = SchemaSettings::draft2020_12()
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<Args>()
            .to_value();
        let owned = name.to_owned();
        Self {
            name: name.to_owned(),
            label: label.to_owned(),
            description: description.to_owned(),
            parameters,
            validate: Arc::new(move |args| parse::<Args>(&owned, args).map(drop)),
            execute,
            approval: false,
        }
    }

    /// A local tool whose executor streams [`ToolEvent`]s; its argument schema comes from `Args`.
    pub fn local<Args, F, S>(name: &str, label: &str, description: &str, execute: F) -> Self
    where
        Args: DeserializeOwned + JsonSchema + 'static,
        F: Fn(String, Args) -> S + Send + Sync + 'static,
        S: Stream<Item = ToolEvent> + Send + 'static,
    {
        let owned = name.to_owned();
        let execute: Execute = Arc::new(move |id, args| {
            let args = parse::<Args>(&owned, &args)?;
            Ok(execute(id, args).boxed())
        });
        Self::with::<Args>(name, label, description, Some(execute))
    }

    /// A local tool described by a JSON schema rather than a Rust type, for tools known only
    /// at run time (those of a tool server, say). `parameters` is shown to the model as is;
    /// the arguments reach `execute` unchecked, except that they must be a JSON object, so
    /// `execute` checks them (and answers [`ToolEvent::Failed`] when they are wrong).
    ///
    /// ```
    /// use bidi_llm::{Tool, ToolEvent};
    /// use futures_util::{StreamExt as _, stream};
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    /// let echo = Tool::dynamic("echo", "Echo", "Echoes", schema.clone(), |_id, args| {
    ///     stream::iter([ToolEvent::Complete { output: args["text"].to_string(), details: None }])
    /// });
    /// assert_eq!(echo.spec().parameters, schema);
    /// let events: Vec<_> = echo.run("c1".into(), json!({"text": "hi"})).collect().await;
    /// assert_eq!(events, [ToolEvent::Complete { output: "\"hi\"".into(), details: None }]);
    /// let events: Vec<_> = echo.run("c2".into(), json!(7)).collect().await;
    /// assert!(matches!(&events[..], [ToolEvent::Failed(_)]));
    /// # }
    /// ```
    pub fn dynamic<F, S>(
        name: &str,
        label: &str,
        description: &str,
        parameters: Value,
        execute: F,
    ) -> Self
    where
        F: Fn(String, Value) -> S + Send + Sync + 'static,
        S: Stream<Item = ToolEvent> + Send + 'static,
    {
        let owned = name.to_owned();
        let validate: Validate =
            Arc::new(move |args| parse::<serde_json::Map<String, Value>>(&owned, args).map(drop));
        let check = Arc::clone(&validate);
        let execute: Execute = Arc::new(move |id, args| {
            check(&args)?;
            Ok(execute(id, args).boxed())
        });
        Self {
            name: name.to_owned(),
            label: label.to_owned(),
            description: description.to_owned(),
            parameters,
            validate,
            execute: Some(execute),
            approval: false,
        }
    }

    /// A remote tool: the model may call it, the caller executes it.
    #[must_use]
    pub fn remote<Args: DeserializeOwned + JsonSchema + 'static>(
        name: &str,
        label: &str,
        description: &str,
    ) -> Self {
        Self::with::<Args>(name, label, description, None)
    }

    /// Makes every call of this local tool wait for the caller's approval before it runs.
    ///
    /// The execution ends there, with the call in
    /// [`AgentEvent::AwaitingApproval`](crate::AgentEvent::AwaitingApproval) (and the session
    /// [`awaiting_tool_execution`](crate::Status::AwaitingToolExecution)); the next input is a
    /// [`TurnInput::Resume`](crate::TurnInput::Resume) with the caller's decision. An approved call
    /// runs, then the loop goes on; a denied one does not run, and the model reads the denial,
    /// with its reason, as the call's error result. Other calls of the same answer run meanwhile.
    ///
    /// A connection whose [`Policy`](crate::Policy) has a gate asks the gate instead, while the
    /// execution runs: a transport that can ask its user in the middle of a turn (ACP's
    /// permission requests) needs no second input. A remote tool is never approved here: its
    /// caller runs it.
    ///
    /// ```
    /// use bidi_agent::AgentInit;
    /// use bidi_llm::testing::{Scripted, ScriptedModel};
    /// use bidi_llm::{Approval, LlmAgent, Resume, Status, TurnInput, UserMessage, execute, simple_tool};
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Path {
    ///     path: String,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let model = ScriptedModel::new([
    ///     Scripted::new().tool_call("c1", "delete", &json!({"path": "/tmp/a"})),
    ///     Scripted::new().text("Deleted."),
    /// ]);
    /// let delete = simple_tool("delete", "Delete", "Deletes a file", |_id, args: Path| async move {
    ///     Ok::<_, String>((format!("deleted {}", args.path), None))
    /// })
    /// .needs_approval();
    /// let agent = LlmAgent::builder("files", model).tool(delete).build();
    /// let mut conn = agent.connect(AgentInit::new().session_id("s1"));
    ///
    /// // The call waits for a decision: the execution ends there.
    /// let run = execute(&mut conn, TurnInput::User(UserMessage::new("Delete /tmp/a"))).await?;
    /// let result = run.result().await?;
    /// assert_eq!(result.status, Status::AwaitingToolExecution);
    /// assert_eq!(result.pending_approvals[0].id, "c1");
    ///
    /// // Approved, it runs, and the model answers.
    /// let input = TurnInput::Resume(Resume::new().approval(Approval::approve("c1")));
    /// let result = execute(&mut conn, input).await?.result().await?;
    /// assert_eq!(result.status, Status::Completed);
    /// let bidi_llm::Message::ToolResult(done) = &result.messages[0] else { panic!() };
    /// assert_eq!(done.content, "deleted /tmp/a");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn needs_approval(mut self) -> Self {
        self.approval = self.execute.is_some();
        self
    }

    /// Whether its calls wait for the caller's approval (see
    /// [`needs_approval`](Self::needs_approval)).
    #[must_use]
    pub fn requires_approval(&self) -> bool {
        self.approval
    }

    /// The name the model calls it by.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A human label.
    #[must_use]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether the loop runs it (it has an executor).
    #[must_use]
    pub fn is_local(&self) -> bool {
        self.execute.is_some()
    }

    /// The tool as the model sees it.
    #[must_use]
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
        }
    }

    /// Checks `args` against the argument type.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArguments`], naming the path and the reason.
    pub fn validate(&self, args: &Value) -> Result<(), Error> {
        (self.validate)(args)
    }

    /// Starts the tool for call `id`. A remote tool, or invalid arguments, give a stream with a
    /// single [`ToolEvent::Failed`].
    #[must_use]
    pub fn run(&self, id: String, args: Value) -> BoxStream<'static, ToolEvent> {
        let Some(execute) = &self.execute else {
            return stream::once(async move {
                ToolEvent::Failed(format!("`{id}` is a remote tool call"))
            })
            .boxed();
        };
        match execute(id, args) {
            Ok(events) => events,
            Err(error) => {
                let message = error.to_string();
                stream::once(async move { ToolEvent::Failed(message) }).boxed()
            }
        }
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("label", &self.label)
            .field("local", &self.is_local())
            .field("approval", &self.approval)
            .finish_non_exhaustive()
    }
}

/// A local tool that does not stream: `execute` returns the output and optional details, or an
/// error for the model.
pub fn simple_tool<Args, F, Fut, E>(name: &str, label: &str, description: &str, execute: F) -> Tool
where
    Args: DeserializeOwned + JsonSchema + 'static,
    F: Fn(String, Args) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(String, Option<Value>), E>> + Send + 'static,
    E: fmt::Display,
{
    Tool::local(name, label, description, move |id, args| {
        stream::once(execute(id, args)).map(|result| match result {
            Ok((output, details)) => ToolEvent::Complete { output, details },
            Err(error) => ToolEvent::Failed(error.to_string()),
        })
    })
}
