//! The suite's fixture tools as bidi flows, and the server of them the suite runs against.

use std::time::Duration;

use bidi_core::{ActionContext, BoxError, Inbound, Outbound};
use bidi_flow::ask::{self, Answer, Question};
use bidi_flow::log::{self, Level};
use bidi_flow::{BidiFlow, Progress, Registry};
use bidi_http::Server;
use bidi_llm::{HostModel, Message, ModelEvent, ModelOptions, ModelRequest, UserMessage};
use bidi_mcp::{McpServer, TaskSupport};
use futures_util::StreamExt as _;
use serde_json::json;

/// `test_simple_text`: the suite's text.
async fn simple_text(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    Ok("This is a simple text response for testing.".to_owned())
}

/// `test_error_handling`: always fails.
async fn error_handling(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    Err("This tool intentionally returns an error for testing".into())
}

/// `test_tool_with_progress`: three steps of 100 streamed, then done.
async fn with_progress(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    out: Outbound<Progress>,
) -> Result<String, BoxError> {
    for step in [0.0, 50.0, 100.0] {
        out.send(Progress::new(step).total(100.0)).await?;
    }
    Ok("Progress complete".to_owned())
}

/// `test_tool_with_logging`: three records at `info`, 50 ms apart.
async fn with_logging(
    ctx: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let steps = [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ];
    for (at, step) in steps.into_iter().enumerate() {
        if at > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        log::record(&ctx, Level::Info, step);
    }
    Ok("Logged three records".to_owned())
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Prompt {
    /// The prompt to send to the LLM.
    prompt: String,
}

/// `test_sampling`: the client's model answers the prompt.
async fn sampling(
    ctx: ActionContext,
    _: (),
    mut inbound: Inbound<Prompt>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let Prompt { prompt } = inbound.recv().await.ok_or("no prompt")?;
    let host = ctx
        .extensions()
        .get::<HostModel>()
        .ok_or("the client does not sample")?;
    let messages = vec![Message::User(UserMessage::new(prompt))];
    let request =
        ModelRequest::new(messages, vec![]).with_options(ModelOptions::new().max_tokens(100));
    let mut events = host.model().stream(request);
    let mut answer = String::new();
    while let Some(event) = events.next().await {
        match event {
            ModelEvent::TextDelta(text) => answer.push_str(&text),
            ModelEvent::Error(error) => return Err(error.into()),
            _ => {}
        }
    }
    Ok(format!("LLM response: {answer}"))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Greeting {
    /// Whom to greet.
    name: String,
}

/// `greet`: a greeting, in the call's request.
async fn greet(
    _: ActionContext,
    _: (),
    mut inbound: Inbound<Greeting>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let Greeting { name } = inbound.recv().await.ok_or("no name")?;
    Ok(format!("Hello, {name}!"))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Compute {
    /// How long to compute, in seconds.
    seconds: f64,
    /// What to call the result.
    label: Option<String>,
}

/// `slow_compute`: sleeps for the seconds asked, then answers; a task.
async fn slow_compute(
    _: ActionContext,
    _: (),
    mut inbound: Inbound<Compute>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let Compute { seconds, label } = inbound.recv().await.ok_or("no input")?;
    tokio::time::sleep(Duration::try_from_secs_f64(seconds)?).await;
    Ok(format!(
        "Computed {} in {seconds} s",
        label.as_deref().unwrap_or("a result")
    ))
}

/// `failing_job`: fails after a second; always a task.
async fn failing_job(
    _: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Err("the job failed, as it always does".into())
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Job {
    /// What the job is about: the suite never says, so its call is refused.
    #[expect(dead_code, reason = "read by its schema only")]
    subject: String,
}

/// `protocol_error_job`: a task whose arguments the flow refuses (`-32602`).
async fn protocol_error_job(
    _: ActionContext,
    _: (),
    _: Inbound<Job>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    Ok("never reached".to_owned())
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Ask {
    /// The message to show the user.
    message: String,
}

/// What the client answered, as the suite's elicitation tools say it.
fn said(answer: &Answer) -> String {
    match answer {
        Answer::Accept(fields) => format!("action=accept, content={}", json!(fields)),
        Answer::Decline => "action=decline".to_owned(),
        Answer::Cancel => "action=cancel".to_owned(),
    }
}

/// `test_elicitation`: asks the user's name and email.
async fn elicitation(
    ctx: ActionContext,
    _: (),
    mut inbound: Inbound<Ask>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let Ask { message } = inbound.recv().await.ok_or("no message")?;
    let form = json!({
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"}
        },
        "required": ["username", "email"]
    });
    let answer = ask::ask(&ctx, Question::new(message, form)?).await?;
    Ok(format!("User response: {}", said(&answer)))
}

/// `test_elicitation_sep1034_defaults`: a form whose every field has a default.
async fn elicitation_defaults(
    ctx: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let form = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {
                "type": "string",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": {"type": "boolean", "default": true}
        }
    });
    let answer = ask::ask(&ctx, Question::new("Your details", form)?).await?;
    Ok(format!("Elicitation completed: {}", said(&answer)))
}

/// `test_elicitation_sep1330_enums`: a form of every kind of choice.
async fn elicitation_enums(
    ctx: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let titled = |values: [(&str, &str); 3]| {
        let choices: Vec<_> = values
            .iter()
            .map(|(value, title)| json!({"const": value, "title": title}))
            .collect();
        serde_json::Value::from(choices)
    };
    let form = json!({
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {
                "type": "string",
                "oneOf": titled([
                    ("value1", "First Option"),
                    ("value2", "Second Option"),
                    ("value3", "Third Option")
                ])
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
            },
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": titled([
                        ("value1", "First Choice"),
                        ("value2", "Second Choice"),
                        ("value3", "Third Choice")
                    ])
                }
            }
        }
    });
    let answer = ask::ask(&ctx, Question::new("Pick", form)?).await?;
    Ok(format!("Elicitation completed: {}", said(&answer)))
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Deletion {
    /// The file to delete.
    filename: String,
}

/// The form of a confirmation.
fn confirmation() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {"confirm": {"type": "boolean", "description": "Whether to go on"}},
        "required": ["confirm"]
    })
}

/// `confirm_delete`: asks before it deletes; a task.
async fn confirm_delete(
    ctx: ActionContext,
    _: (),
    mut inbound: Inbound<Deletion>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let Deletion { filename } = inbound.recv().await.ok_or("no file")?;
    let question = Question::new(format!("Delete {filename}?"), confirmation())?;
    Ok(match ask::ask(&ctx, question).await? {
        Answer::Accept(fields) if fields["confirm"] == true => format!("Deleted {filename}"),
        _ => format!("Kept {filename}"),
    })
}

/// `multi_input`: asks two questions at once; a task.
async fn multi_input(
    ctx: ActionContext,
    _: (),
    _: Inbound<serde_json::Value>,
    _: Outbound<()>,
) -> Result<String, BoxError> {
    let form = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "confirm": {"type": "boolean"}
        }
    });
    let (first, second) = tokio::try_join!(
        ask::ask(&ctx, Question::new("First?", form.clone())?),
        ask::ask(&ctx, Question::new("Second?", form)?),
    )?;
    Ok(format!("Answered: {}; {}", said(&first), said(&second)))
}

/// The fixture tools of the suite's tasks scenarios, `slow_compute`, `failing_job` and
/// `protocol_error_job` as tasks (`failing_job` only so).
fn task_fixtures(registry: &Registry, mcp: McpServer) -> McpServer {
    registry
        .register(BidiFlow::new("greet", greet).with_description("Greets"))
        .unwrap();
    registry
        .register(BidiFlow::new("slow_compute", slow_compute).with_description("Computes slowly"))
        .unwrap();
    registry
        .register(BidiFlow::new("failing_job", failing_job).with_description("Always fails"))
        .unwrap();
    registry
        .register(
            BidiFlow::new("protocol_error_job", protocol_error_job)
                .with_description("Refuses its arguments"),
        )
        .unwrap();
    registry
        .register(BidiFlow::new("test_elicitation", elicitation).with_description("Asks"))
        .unwrap();
    let asking = [
        BidiFlow::new("test_elicitation_sep1034_defaults", elicitation_defaults)
            .with_description("Asks with defaults"),
        BidiFlow::new("test_elicitation_sep1330_enums", elicitation_enums)
            .with_description("Asks for choices"),
        BidiFlow::new("multi_input", multi_input).with_description("Asks twice at once"),
    ];
    for flow in asking {
        registry.register(flow).unwrap();
    }
    registry
        .register(BidiFlow::new("confirm_delete", confirm_delete).with_description("Deletes"))
        .unwrap();
    mcp.task_support("/bidi-flow/slow_compute", TaskSupport::Optional)
        .task_support("/bidi-flow/confirm_delete", TaskSupport::Optional)
        .task_support("/bidi-flow/multi_input", TaskSupport::Optional)
        .task_support("/bidi-flow/failing_job", TaskSupport::Required)
        .task_support("/bidi-flow/protocol_error_job", TaskSupport::Optional)
}

/// bidi's server of the fixture tools, at `/mcp` on a free port of 127.0.0.1.
pub(crate) async fn serve() -> String {
    let registry = Registry::new();
    let flows = [
        BidiFlow::new("test_simple_text", simple_text)
            .with_description("Returns simple text content"),
        BidiFlow::new("test_error_handling", error_handling)
            .with_description("Always returns an error"),
    ];
    for flow in flows {
        registry.register(flow).unwrap();
    }
    registry
        .register(
            BidiFlow::new("test_tool_with_progress", with_progress)
                .with_description("Reports progress as it goes"),
        )
        .unwrap();
    registry
        .register(
            BidiFlow::new("test_tool_with_logging", with_logging)
                .with_description("Logs as it goes"),
        )
        .unwrap();
    registry
        .register(
            BidiFlow::new("test_sampling", sampling).with_description("Asks the client's model"),
        )
        .unwrap();
    let mcp = task_fixtures(&registry, McpServer::new(registry.clone()).sampling(true));
    let server = Server::new(registry).protocol(mcp);
    format!("http://{}/mcp", tests::http::serve(server).await)
}
