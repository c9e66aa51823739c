//! [`Policy`]: what one connection's executions may do, beyond what the agent says.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;

use crate::message::ToolCall;
use crate::tool::Tool;

type Offer = Arc<dyn Fn(&str) -> bool + Send + Sync>;
type Gate = Arc<dyn Fn(&ToolCall) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// What the executions of one connection may do, beyond what the agent says: a system prompt
/// put before the session's, local tools of the connection's own, the local tools the model is
/// offered, and a gate every local tool call passes before it runs. Attach it when connecting, with
/// [`ConnectOptions::extension`](bidi_core::ConnectOptions::extension); a connection without
/// one runs as the agent says.
///
/// A transport serving the agent to a person uses it to ask that person before a tool runs,
/// or to narrow what a session may do.
///
/// - The gate is awaited in the tool's place: other tools of the same answer run meanwhile,
///   and a cancelled execution drops it as it drops a running tool.
/// - A call the gate refuses does not run: its result is an error with the gate's reason,
///   which the model reads.
/// - A call of a tool the policy does not offer is refused the same way, without asking the
///   gate.
///
/// ```
/// use bidi_agent::AgentInit;
/// use bidi_core::ConnectOptions;
/// use bidi_llm::testing::{Scripted, ScriptedModel};
/// use bidi_llm::{LlmAgent, Policy, Status, TurnInput, UserMessage, execute, simple_tool};
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
///     Scripted::new().tool_call("c1", "delete", &json!({"path": "/etc"})),
///     Scripted::new().text("I may not."),
/// ]).recording();
/// let delete = simple_tool("delete", "Delete", "Deletes a file", |_id, args: Path| async move {
///     Err::<(String, Option<serde_json::Value>), _>(format!("never runs: {}", args.path))
/// });
/// let agent = LlmAgent::builder("files", model.clone()).tool(delete).build();
///
/// let policy = Policy::new()
///     .system_prompt("Be careful.")
///     .gate(|call| {
///         let path = call.arguments["path"].as_str().unwrap_or_default().to_owned();
///         async move { Err(format!("`{path}` is off limits")) }
///     });
/// let mut conn = agent.connect_with(AgentInit::new(), ConnectOptions::new().extension(policy));
/// let run = execute(&mut conn, TurnInput::User(UserMessage::new("Delete /etc"))).await?;
/// let result = run.result().await?;
///
/// assert_eq!(result.status, Status::Completed);
/// assert_eq!(model.requests()[0].system_prompt.as_deref(), Some("Be careful."));
/// let bidi_llm::Message::ToolResult(refused) = &result.messages[2] else { panic!() };
/// assert!(refused.is_error);
/// assert_eq!(refused.content, "`/etc` is off limits");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Policy {
    system_prompt: Option<String>,
    tools: Vec<Tool>,
    offer: Option<Offer>,
    gate: Option<Gate>,
}

impl Policy {
    /// A policy that changes nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A system prompt put before the session's own (with a blank line between them), for
    /// every model call.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Adds a tool of this connection's own, offered and run like the agent's tools (after
    /// them; an agent tool of the same name hides it). A transport uses it for tools that
    /// exist only for the connection, say those of a tool server a client named.
    ///
    /// ```
    /// use bidi_agent::AgentInit;
    /// use bidi_core::ConnectOptions;
    /// use bidi_llm::testing::{Scripted, ScriptedModel};
    /// use bidi_llm::{LlmAgent, Policy, TurnInput, UserMessage, execute, simple_tool};
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Name {
    ///     name: String,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let model = ScriptedModel::new([
    ///     Scripted::new().tool_call("c1", "greet", &json!({"name": "Ada"})),
    ///     Scripted::new().text("Done."),
    /// ]).recording();
    /// let agent = LlmAgent::builder("plain", model.clone()).build();
    /// let greet = simple_tool("greet", "Greet", "Greets", |_id, args: Name| async move {
    ///     Ok::<_, String>((format!("Hello, {}!", args.name), None))
    /// });
    /// let options = ConnectOptions::new().extension(Policy::new().tool(greet));
    /// let mut conn = agent.connect_with(AgentInit::new(), options);
    /// let run = execute(&mut conn, TurnInput::User(UserMessage::new("Greet Ada"))).await?;
    /// let result = run.result().await?;
    ///
    /// assert_eq!(model.requests()[0].tools[0].name, "greet");
    /// let bidi_llm::Message::ToolResult(greeting) = &result.messages[2] else { panic!() };
    /// assert_eq!(greeting.content, "Hello, Ada!");
    /// # Ok(())
    /// # }
    /// ```
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// The tools of this connection's own, in the order they were added.
    #[must_use]
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Offers the model only the local tools (the agent's and this policy's) whose name
    /// `offer` accepts (the session's own tools, which its client runs, are always offered).
    /// A call of another one is refused.
    pub fn offer(mut self, offer: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.offer = Some(Arc::new(offer));
        self
    }

    /// Every local tool call waits for `gate` before it runs: `Ok(())` runs it, `Err(reason)`
    /// refuses it with `reason`. The gate also decides on the calls of tools that
    /// [need approval](crate::Tool::needs_approval), in the execution's course, instead of
    /// ending it to wait for a decision.
    pub fn gate<F, Fut>(mut self, gate: F) -> Self
    where
        F: Fn(&ToolCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.gate = Some(Arc::new(move |call| gate(call).boxed()));
        self
    }

    /// The system prompt of a model call, given the session's.
    pub(crate) fn prompt(&self, session: Option<&str>) -> Option<String> {
        match (&self.system_prompt, session) {
            (Some(ours), Some(theirs)) => Some(format!("{ours}\n\n{theirs}")),
            (Some(ours), None) => Some(ours.clone()),
            (None, theirs) => theirs.map(str::to_owned),
        }
    }

    /// Whether the model is offered the agent's tool `name`.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.offer.as_ref().is_none_or(|offer| offer(name))
    }

    /// Whether a gate asks before every local tool call.
    pub(crate) fn has_gate(&self) -> bool {
        self.gate.is_some()
    }

    /// The check `call` waits for before it runs, if there is one.
    pub(crate) fn check(&self, call: &ToolCall) -> Option<BoxFuture<'static, Result<(), String>>> {
        if !self.offers(&call.name) {
            let refusal = format!("the tool `{}` is not available in this session", call.name);
            return Some(futures_util::future::ready(Err(refusal)).boxed());
        }
        self.gate.as_ref().map(|gate| gate(call))
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("system_prompt", &self.system_prompt)
            .field("tools", &self.tools)
            .field("offer", &self.offer.is_some())
            .field("gate", &self.gate.is_some())
            .finish()
    }
}
