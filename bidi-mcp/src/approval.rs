//! Calls of an agent's tools that need approval, in MCP's terms: asked through elicitation
//! (`elicitation/create`, one form per call: `approved`, and an optional `reason`) when the
//! client supports it; otherwise named in the call's result, and answered by the `approvals`
//! argument of a next call on the session.

use std::collections::BTreeMap;

use bidi_llm::{Approval, LlmAgent, ToolCall, TurnState};
use rmcp::model::{
    BooleanSchema, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    ErrorData, PrimitiveSchemaDefinition, StringSchema,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::tools::invalid_argument;

/// The calls a session waits on: those of the agent's tools waiting for approval, and those
/// its client runs (remote tools), whose results this tool cannot send.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Waiting {
    pub(super) approvals: Vec<ToolCall>,
    pub(super) remote: Vec<ToolCall>,
}

impl Waiting {
    /// What waits in a turn that ended in `turn`: the calls of the agent's tools waiting for
    /// approval, and those its client runs; nothing for a turn that waits for nothing.
    pub(super) fn of(turn: TurnState) -> Self {
        match turn {
            TurnState::Waiting { results, approvals } => Self {
                approvals,
                remote: results,
            },
            _ => Self::default(),
        }
    }

    /// The calls waiting for approval as the result's `pendingApprovals`.
    pub(super) fn pending_approvals(&self) -> Value {
        let calls = self.approvals.iter().map(
            |call| json!({"toolCallId": call.id, "name": call.name, "arguments": call.arguments}),
        );
        Value::Array(calls.collect())
    }

    /// What the result of a call that stops here says: what waits, and how to answer it.
    pub(super) fn note(&self, session_id: &str) -> String {
        let mut note = String::new();
        if let Some(first) = self.approvals.first() {
            note.push_str("The agent waits for approval before it goes on:\n");
            for call in &self.approvals {
                note.push_str(&format!("- call `{}`: {}\n", call.id, described(call)));
            }
            note.push_str(&format!(
                "To answer, call this tool again with \"sessionId\": \"{session_id}\" and \
                 \"approvals\": a decision on each call, such as [{{\"toolCallId\": \"{}\", \
                 \"approved\": true}}], or \"approved\": false with a \"reason\" the agent \
                 reads.",
                first.id
            ));
        }
        if !self.remote.is_empty() {
            if !note.is_empty() {
                note.push_str("\n\n");
            }
            note.push_str(
                "The agent also waits for the results of calls its client runs, which this \
                 tool cannot send:\n",
            );
            for call in &self.remote {
                note.push_str(&format!("- call `{}`: {}\n", call.id, described(call)));
            }
            note.push_str(&format!(
                "The session \"{session_id}\" goes on once a client that runs these tools \
                 sends their results."
            ));
        }
        note
    }

    /// Whether `approvals` answer exactly the calls waiting for approval, and nothing else
    /// waits.
    ///
    /// # Errors
    ///
    /// `-32602` naming the argument: a decision on a call that does not wait (or a second
    /// one), a call left without one, nothing waiting, or calls only the client can answer.
    pub(super) fn check(&self, approvals: &[Approval]) -> Result<(), ErrorData> {
        if self.approvals.is_empty() {
            return Err(invalid_argument(
                "/approvals",
                "no call of this session waits for approval",
            ));
        }
        if !self.remote.is_empty() {
            let calls = listed(&self.remote);
            return Err(invalid_argument(
                "/approvals",
                &format!(
                    "the session also waits for the results of calls its client runs ({calls}), \
                     which this tool cannot send"
                ),
            ));
        }
        let mut decided: Vec<&str> = Vec::with_capacity(approvals.len());
        for (i, approval) in approvals.iter().enumerate() {
            let id = approval.tool_call_id.as_str();
            let path = format!("/approvals/{i}/toolCallId");
            if !self.approvals.iter().any(|call| call.id == id) {
                return Err(invalid_argument(
                    &path,
                    &format!(
                        "no call `{}` waits for approval; these do: {}",
                        bidi_flow::text::cap(id),
                        listed(&self.approvals)
                    ),
                ));
            }
            if decided.contains(&id) {
                return Err(invalid_argument(
                    &path,
                    &format!("a second decision on call `{id}`"),
                ));
            }
            decided.push(id);
        }
        let undecided: Vec<ToolCall> = self
            .approvals
            .iter()
            .filter(|call| !decided.contains(&call.id.as_str()))
            .cloned()
            .collect();
        if undecided.is_empty() {
            Ok(())
        } else {
            Err(invalid_argument(
                "/approvals",
                &format!(
                    "no decision on {}: send one for each call that waits",
                    listed(&undecided)
                ),
            ))
        }
    }

    /// Why a call that sent a message without deciding what waits is refused (`reason`, the
    /// agent's words, when nothing waits after all), as `-32602` naming what to send.
    pub(super) fn refusal(&self, reason: &str) -> ErrorData {
        if !self.approvals.is_empty() {
            return invalid_argument(
                "/approvals",
                &format!(
                    "calls wait for approval: {}; send `approvals` with a decision on each (a \
                     message may come with them)",
                    listed(&self.approvals)
                ),
            );
        }
        if !self.remote.is_empty() {
            return invalid_argument(
                "/message",
                &format!(
                    "the session waits for the results of calls its client runs ({}), which \
                     this tool cannot send",
                    listed(&self.remote)
                ),
            );
        }
        invalid_argument("/message", reason)
    }
}

/// A call in words: its tool and its arguments (`transfer with {"amount":5}`), capped.
fn described(call: &ToolCall) -> String {
    let arguments = match &call.arguments {
        Value::Object(map) if map.is_empty() => return format!("{} with no arguments", call.name),
        other => other.to_string(),
    };
    format!("{} with {}", call.name, bidi_flow::text::cap(&arguments))
}

/// Calls in words, their ids first: "`c1` (transfer with {..}), `c2` (..)".
fn listed(calls: &[ToolCall]) -> String {
    calls
        .iter()
        .map(|call| format!("`{}` ({})", call.id, described(call)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A decision as the `approvals` argument carries it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Decision {
    tool_call_id: String,
    approved: bool,
    #[serde(default)]
    reason: Option<String>,
}

/// The `approvals` argument's decisions.
///
/// # Errors
///
/// A value that is not a list of `{toolCallId, approved, reason?}`, or an empty list, as
/// `-32602` naming where.
pub(super) fn parse(value: Value) -> Result<Vec<Approval>, ErrorData> {
    let decisions: Vec<Decision> = serde_path_to_error::deserialize(value).map_err(|error| {
        let path = format!("/approvals{}", bidi_flow::text::pointer(error.path()));
        invalid_argument(
            &path,
            &bidi_flow::text::reason(&error.into_inner().to_string()),
        )
    })?;
    if decisions.is_empty() {
        return Err(invalid_argument(
            "/approvals",
            "an empty list decides nothing: send a decision on each call that waits",
        ));
    }
    Ok(decisions
        .into_iter()
        .map(|decision| {
            if decision.approved {
                let mut approval = Approval::approve(decision.tool_call_id);
                approval.reason = decision.reason;
                approval
            } else {
                Approval::deny(decision.tool_call_id, decision.reason.unwrap_or_default())
            }
        })
        .collect())
}

/// The schema of the `approvals` argument.
pub(super) fn schema() -> Value {
    json!({
        "type": "array",
        "description": "Decisions on the calls the session waits to have approved (the \
                        pendingApprovals of an earlier answer), one for each: a call with \
                        approvals (and the sessionId) goes on with the session.",
        "items": {
            "type": "object",
            "properties": {
                "toolCallId": {"type": "string", "description": "The call decided on."},
                "approved": {"type": "boolean", "description": "Whether it may run."},
                "reason": {"type": "string", "description": "Why, for the agent to read."}
            },
            "required": ["toolCallId", "approved"],
            "additionalProperties": false
        }
    })
}

/// The elicitation that asks the user whether `call`, made by the agent `agent`, may run.
pub(super) fn request(agent: &LlmAgent, call: &ToolCall) -> ElicitRequestParams {
    // The tool's label too, when it says more than its name.
    let label = agent
        .tools()
        .iter()
        .find(|tool| tool.name() == call.name && tool.label() != call.name)
        .map(|tool| format!(" ({})", tool.label()))
        .unwrap_or_default();
    let message = format!(
        "The agent {} asks to run {}{label}. Do you approve?",
        agent.agent().name(),
        described(call)
    );
    let approved = BooleanSchema::new()
        .title("Approve")
        .description("Whether the call may run");
    let reason = StringSchema::new()
        .title("Reason")
        .description("Why, for the agent to read (optional)");
    let properties = BTreeMap::from([
        (
            "approved".to_owned(),
            PrimitiveSchemaDefinition::Boolean(approved),
        ),
        (
            "reason".to_owned(),
            PrimitiveSchemaDefinition::String(reason),
        ),
    ]);
    let mut schema = ElicitationSchema::new(properties);
    schema.required = Some(vec!["approved".to_owned()]);
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    }
}

/// The user's decision on `call`, from the client's answer to its elicitation: `accept` with
/// `approved: true` approves (the call as it was shown), `approved: false`, `decline` and
/// `cancel` deny; a `reason` goes to the model.
///
/// # Errors
///
/// An `accept` whose content has no boolean `approved`, or a `reason` that is not a string,
/// saying so.
pub(super) fn decision(call: &ToolCall, answer: ElicitResult) -> Result<Approval, String> {
    match answer.action {
        ElicitationAction::Decline => Ok(Approval::deny(&call.id, "")),
        ElicitationAction::Cancel => Ok(Approval::deny(
            &call.id,
            "they dismissed the question without answering",
        )),
        ElicitationAction::Accept => {
            let content = answer.content.unwrap_or(Value::Null);
            let reason = match content.get("reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(reason)) => Some(reason.clone()),
                Some(_) => {
                    return Err(format!(
                        "the answer on the call of {} says a `reason` that is not a string",
                        call.name
                    ));
                }
            };
            match content.get("approved") {
                Some(Value::Bool(true)) => {
                    let mut approval =
                        Approval::approve(&call.id).with_arguments(call.arguments.clone());
                    approval.reason = reason;
                    Ok(approval)
                }
                Some(Value::Bool(false)) => {
                    Ok(Approval::deny(&call.id, reason.unwrap_or_default()))
                }
                _ => Err(format!(
                    "the answer on the call of {} accepted without saying `approved` (true or \
                     false)",
                    call.name
                )),
            }
        }
        _ => Ok(Approval::deny(&call.id, "")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({"to": "bob", "amount": 5}),
        }
    }

    fn waiting(approvals: &[&str]) -> Waiting {
        Waiting {
            approvals: approvals.iter().map(|id| call(id, "transfer")).collect(),
            remote: Vec::new(),
        }
    }

    fn message(result: Result<(), ErrorData>) -> String {
        result
            .err()
            .map(|e| e.message.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn approvals_parse_into_decisions_and_bad_ones_name_where() {
        let parsed = parse(json!([
            {"toolCallId": "c1", "approved": true},
            {"toolCallId": "c2", "approved": false, "reason": "too much"}
        ]))
        .map_err(|e| e.message.to_string());
        assert_eq!(
            parsed,
            Ok(vec![
                Approval::approve("c1"),
                Approval::deny("c2", "too much")
            ])
        );
        let refused = |value| parse(value).err().map(|e| (e.message.to_string(), e.data));
        let (text, data) = refused(json!([{"toolCallId": "c1", "approved": "yes"}]))
            .unwrap_or_else(|| panic!("refused"));
        assert!(
            text.starts_with("invalid argument at `/approvals/0/approved`: invalid type"),
            "{text}"
        );
        assert_eq!(data, Some(json!({"path": "/approvals/0/approved"})));
        let (text, _) = refused(json!([{"toolCallId": "c1"}])).unwrap_or_else(|| panic!("refused"));
        assert!(text.contains("missing field `approved`"), "{text}");
        let (text, _) = refused(json!([{"toolCallId": "c1", "approved": true, "why": 1}]))
            .unwrap_or_else(|| panic!("refused"));
        assert!(text.contains("unknown field `why`"), "{text}");
        let (text, _) = refused(json!({"c1": true})).unwrap_or_else(|| panic!("refused"));
        assert!(
            text.starts_with("invalid argument at `/approvals`"),
            "{text}"
        );
        let (text, _) = refused(json!([])).unwrap_or_else(|| panic!("refused"));
        assert!(text.contains("an empty list decides nothing"), "{text}");
    }

    #[test]
    fn approvals_must_answer_exactly_the_waiting_calls() {
        let two = waiting(&["c1", "c2"]);
        assert!(
            two.check(&[Approval::approve("c1"), Approval::deny("c2", "")])
                .is_ok()
        );
        let unknown = message(two.check(&[Approval::approve("nope")]));
        assert!(
            unknown.starts_with("invalid argument at `/approvals/0/toolCallId`: no call `nope`"),
            "{unknown}"
        );
        assert!(unknown.contains("`c1` (transfer with"), "{unknown}");
        let twice = message(two.check(&[Approval::approve("c1"), Approval::approve("c1")]));
        assert!(
            twice.starts_with("invalid argument at `/approvals/1/toolCallId`: a second decision"),
            "{twice}"
        );
        let missing = message(two.check(&[Approval::approve("c1")]));
        assert!(
            missing.starts_with("invalid argument at `/approvals`: no decision on `c2`"),
            "{missing}"
        );
        let none = message(waiting(&[]).check(&[Approval::approve("c1")]));
        assert!(none.contains("no call of this session waits"), "{none}");
        let mut mixed = waiting(&["c1"]);
        mixed.remote.push(call("r1", "lookup"));
        let remote = message(mixed.check(&[Approval::approve("c1")]));
        assert!(remote.contains("`r1` (lookup with"), "{remote}");
    }

    #[test]
    fn the_note_names_the_waiting_calls_and_how_to_answer() {
        let mut both = waiting(&["c1"]);
        both.remote.push(call("r1", "lookup"));
        let note = both.note("s-1");
        assert!(note.contains("- call `c1`: transfer with {"), "{note}");
        assert!(note.contains(r#""amount":5"#), "{note}");
        assert!(note.contains(r#""sessionId": "s-1""#), "{note}");
        assert!(note.contains(r#""toolCallId": "c1""#), "{note}");
        assert!(note.contains("- call `r1`: lookup with"), "{note}");
        assert_eq!(
            both.pending_approvals(),
            json!([{"toolCallId": "c1", "name": "transfer", "arguments": {"to": "bob", "amount": 5}}])
        );
    }

    #[test]
    fn the_elicitation_asks_approved_and_reason_and_its_answers_decide() {
        let agent = LlmAgent::builder("bank", bidi_llm::testing::ScriptedModel::new([])).build();
        let transfer = call("c1", "transfer");
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request(&agent, &transfer)
        else {
            panic!("a form")
        };
        assert!(
            message.starts_with("The agent bank asks to run transfer with {"),
            "{message}"
        );
        assert!(message.contains(r#""amount":5"#), "{message}");
        assert!(message.ends_with("}. Do you approve?"), "{message}");
        let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
        assert_eq!(schema["properties"]["approved"]["type"], "boolean");
        assert_eq!(schema["properties"]["reason"]["type"], "string");
        assert_eq!(schema["required"], json!(["approved"]));

        let answer = |action, content: Option<Value>| {
            let result = ElicitResult::new(action);
            decision(
                &transfer,
                match content {
                    Some(content) => result.with_content(content),
                    None => result,
                },
            )
        };
        let approved = answer(ElicitationAction::Accept, Some(json!({"approved": true})));
        assert_eq!(
            approved,
            Ok(Approval::approve("c1").with_arguments(transfer.arguments.clone()))
        );
        let denied = answer(
            ElicitationAction::Accept,
            Some(json!({"approved": false, "reason": "too much"})),
        );
        assert_eq!(denied, Ok(Approval::deny("c1", "too much")));
        let declined = answer(ElicitationAction::Decline, None);
        assert_eq!(declined, Ok(Approval::deny("c1", "")));
        let cancelled = answer(ElicitationAction::Cancel, None);
        assert!(cancelled.is_ok_and(|a| !a.approved));
        let unsaid = answer(ElicitationAction::Accept, Some(json!({"reason": "hm"})));
        assert!(unsaid.is_err_and(|e| e.contains("without saying `approved`")));
    }
}
