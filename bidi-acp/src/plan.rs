//! Plans: the agent publishes its plan by calling [`plan_tool`], and the client sees a `plan`
//! update instead of a tool call.

use agent_client_protocol_schema::v1::{Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus};
use bidi_llm::{Tool, simple_tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// The name of [`plan_tool`]: the server shows a call of the agent's tool of this name as a
/// `plan` update.
pub const PLAN_TOOL: &str = "update_plan";

/// The arguments of [`plan_tool`].
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The whole plan, which replaces the one before.
    entries: Vec<Entry>,
}

/// One step of the plan.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// What the step does.
    content: String,
    /// How much it matters (default medium).
    #[serde(default)]
    priority: Priority,
    /// Where it stands (default pending).
    #[serde(default)]
    status: Status,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Priority {
    High,
    #[default]
    Medium,
    Low,
}

#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Status {
    #[default]
    Pending,
    InProgress,
    Completed,
}

/// A tool the model calls to publish its plan, and to update it as it goes: each call gives
/// the whole plan (`{"entries": [{"content", "priority", "status"}]}`, priority `high`,
/// `medium` or `low`, status `pending`, `in_progress` or `completed`). Add it to the agent;
/// the server shows each call as a `plan` update rather than a tool call, and the model is
/// answered `plan updated`.
///
/// ```
/// use bidi_llm::LlmAgent;
/// use bidi_llm::testing::ScriptedModel;
///
/// let agent = LlmAgent::builder("planner", ScriptedModel::new([]))
///     .tool(bidi_acp::plan_tool())
///     .build();
/// # drop(agent);
/// ```
#[must_use]
pub fn plan_tool() -> Tool {
    simple_tool(
        PLAN_TOOL,
        "Update the plan",
        "Publishes your plan for the task, shown to the user: call it first with every step \
         pending, then again with the whole plan each time a step starts or is done.",
        |_id, args: Args| async move {
            Ok::<_, std::convert::Infallible>((
                format!("plan updated ({} entries)", args.entries.len()),
                None,
            ))
        },
    )
}

/// The plan a call of [`plan_tool`] publishes, if its arguments are one.
pub(crate) fn plan(args: &Value) -> Option<Plan> {
    let args = Args::deserialize(args).ok()?;
    Some(Plan::new(
        args.entries
            .into_iter()
            .map(|entry| {
                let priority = match entry.priority {
                    Priority::High => PlanEntryPriority::High,
                    Priority::Medium => PlanEntryPriority::Medium,
                    Priority::Low => PlanEntryPriority::Low,
                };
                let status = match entry.status {
                    Status::Pending => PlanEntryStatus::Pending,
                    Status::InProgress => PlanEntryStatus::InProgress,
                    Status::Completed => PlanEntryStatus::Completed,
                };
                PlanEntry::new(entry.content, priority, status)
            })
            .collect(),
    ))
}
