//! A model supervises an agent: the `ndjson-agent` example runs as a subprocess and does the
//! work; its questions and approvals are answered by LLM specialists, each question routed by
//! its kind (an architect for design, a security engineer for security, a QA lead for tests),
//! and every decision is kept in the specialist's session, printed at the end for audit.
//!
//! ```sh
//! cargo run -p examples --bin supervise
//! cargo run -p examples --bin supervise -- "Implement OAuth2 login" "Delete the legacy API"
//! cargo run -p examples --bin supervise -- --db audit.sqlite3    # keep the decisions
//! ```
//!
//! The specialists are OpenAI-compatible models when `OPENAI_BASE_URL` and `OPENAI_API_KEY`
//! are set (`OPENAI_MODEL`, default `gpt-4o-mini`), else a scripted reviewer that needs no
//! service: an architect picks the first option, a security engineer prefers RS256 and
//! rejects high-risk changes, a QA lead picks the last option.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use bidi_agent::AgentInit;
use bidi_core::BoxError;
use bidi_llm::{
    Context, LlmAgent, Message, Model, ModelEvent, ModelRequest, OpenAiModel, StopReason,
    TurnInput, Usage, UserMessage, execute,
};
use bidi_ndjson::{Approval, Command, Progress, Question};
use bidi_session::{MemoryStore, SessionStore, SqliteStore};
use clap::Parser;
use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use serde_json::{Map, Value, json};

/// Runs the `ndjson-agent` example on prompts, with LLM specialists answering its questions.
#[derive(Debug, Parser)]
struct Args {
    /// The agent to run (default: the `ndjson-agent` built next to this program).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// A SQLite file to keep the specialists' sessions in (default: memory).
    #[arg(long)]
    db: Option<PathBuf>,
    /// The prompts, one round each.
    prompts: Vec<String>,
}

/// The specialists: a session id suffix, and the system prompt of its sessions.
const SPECIALISTS: [(&str, &str); 3] = [
    (
        "architect",
        "You are a senior architect. Make clear, decisive technical choices. Answer with the option you choose.",
    ),
    (
        "security",
        "You are a security engineer. Evaluate for vulnerabilities. Answer approvals with approve or reject and why.",
    ),
    (
        "qa",
        "You are a QA lead. Prioritize test coverage and correctness. Answer with the option you choose.",
    ),
];

/// The specialist for a question: by its `kind`, else by its words.
fn route(question: &Question) -> &'static str {
    let text = question.question.to_lowercase();
    match question.kind.as_deref() {
        Some("security") => "security",
        Some("test" | "qa") => "qa",
        Some("design") => "architect",
        _ if ["security", "auth", "token"]
            .iter()
            .any(|w| text.contains(w)) =>
        {
            "security"
        }
        _ if text.contains("test") => "qa",
        _ => "architect",
    }
}

/// Asks `specialist` in its session of this run; the answer's text.
async fn ask(
    agent: &LlmAgent,
    run: &str,
    specialist: &str,
    text: String,
) -> Result<String, BoxError> {
    let (_, system_prompt) = SPECIALISTS
        .iter()
        .find(|(name, _)| *name == specialist)
        .ok_or("no such specialist")?;
    let context: Context = serde_json::from_value(json!({ "systemPrompt": system_prompt }))?;
    let init = AgentInit::new()
        .session_id(format!("{run}-{specialist}"))
        .init(agent.new_session(context)?);
    let mut conn = agent.connect(init);
    let result = execute(&mut conn, TurnInput::User(UserMessage::new(text)))
        .await?
        .result()
        .await?;
    conn.close();
    conn.output().await?;
    let answer = result
        .messages
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant(message) => Some(message.text()),
            _ => None,
        });
    answer.ok_or_else(|| "the specialist said nothing".into())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("[supervise] {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let store: Arc<dyn SessionStore> = match &args.db {
        Some(path) => Arc::new(SqliteStore::open(path).await?),
        None => Arc::new(MemoryStore::new()),
    };
    let agent = specialists(Arc::clone(&store));
    let program = match args.agent {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("ndjson-agent"),
    };
    let prompts = if args.prompts.is_empty() {
        vec![
            "Implement OAuth2 login".to_owned(),
            "Delete the legacy search API".to_owned(),
        ]
    } else {
        args.prompts
    };
    let run = format!("supervise-{}", std::process::id());
    let mut child = Command::new(&program)
        .init(json!({ "work_dir": std::env::current_dir()? }))
        .spawn()
        .await?;
    for prompt in &prompts {
        println!("> {prompt}");
        let (agent, run) = (&agent, run.as_str());
        let round = child
            .listen(prompt.as_str())
            .on("progress", |progress: Progress| {
                println!("  progress: {}", progress.message);
                async {}
            })
            .on("partial", |partial: Map<String, Value>| {
                print!("  | {}", partial["chunk"].as_str().unwrap_or_default());
                async {}
            })
            .on("question", move |question: Question| async move {
                let specialist = route(&question);
                let mut text = format!("Question: {}", question.question);
                if !question.options.is_empty() {
                    text.push_str(&format!("\nOptions: {}", question.options.join(", ")));
                }
                let answer = ask(agent, run, specialist, text).await?;
                println!("  {specialist} answers: {answer}");
                Ok::<_, BoxError>(Some(answer))
            })
            .on("approval", move |approval: Approval| async move {
                let risk = approval.risk_level.as_deref().unwrap_or("unknown");
                let text = format!("Approve? {} (risk: {risk})", approval.description);
                let answer = ask(agent, run, "security", text).await?;
                let approved = answer.to_lowercase().starts_with("approve");
                println!(
                    "  security {}: {answer}",
                    if approved { "approves" } else { "rejects" }
                );
                Ok::<_, BoxError>(Some(if approved { "yes" } else { "no" }))
            })
            .await;
        match round {
            Ok(result) => println!("= {}", result["text"]),
            Err(bidi_ndjson::Error::Agent { message, .. }) => println!("= rejected: {message}"),
            Err(error) => return Err(error.into()),
        }
    }
    child.close(std::time::Duration::from_secs(5)).await?;

    println!("\nAudit:");
    for (specialist, _) in SPECIALISTS {
        let Some(session) = agent
            .agent()
            .session(&format!("{run}-{specialist}"))
            .await?
        else {
            continue;
        };
        println!("  {specialist} (session {run}-{specialist}):");
        for message in &session.state().messages {
            match message {
                Message::User(user) => println!("    asked: {}", user.content.replace('\n', " / ")),
                Message::Assistant(answer) => println!("    decided: {}", answer.text()),
                _ => {}
            }
        }
    }
    Ok(())
}

fn specialists(store: Arc<dyn SessionStore>) -> LlmAgent {
    if let (Ok(base), Ok(key)) = (
        std::env::var("OPENAI_BASE_URL"),
        std::env::var("OPENAI_API_KEY"),
    ) {
        let name = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        eprintln!("[supervise] specialists: {name} at {base}");
        let model = OpenAiModel::new(base, name).api_key(key);
        return LlmAgent::builder("specialists", model).store(store).build();
    }
    eprintln!(
        "[supervise] specialists: scripted (set OPENAI_BASE_URL and OPENAI_API_KEY for real ones)"
    );
    LlmAgent::builder("specialists", Reviewer)
        .store(store)
        .build()
}

/// A scripted specialist that needs no service: its answer depends on the role its system
/// prompt gives it and on the question.
#[derive(Debug, Clone, Copy)]
struct Reviewer;

impl Model for Reviewer {
    fn name(&self) -> &str {
        "reviewer"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let role = request.system_prompt.unwrap_or_default().to_lowercase();
        let asked = match request.messages.last() {
            Some(Message::User(user)) => user.content.clone(),
            _ => String::new(),
        };
        let answer = decide(&role, &asked);
        futures_util::stream::iter([
            ModelEvent::TextStart,
            ModelEvent::TextDelta(answer),
            ModelEvent::TextEnd,
            ModelEvent::Done {
                stop_reason: StopReason::Stop,
                usage: Usage::default(),
            },
        ])
        .boxed()
    }
}

fn decide(role: &str, asked: &str) -> String {
    if asked.starts_with("Approve?") {
        return if asked.contains("risk: high") {
            "reject: a high-risk change needs a human review".to_owned()
        } else {
            "approve: the change is contained".to_owned()
        };
    }
    let options: Vec<&str> = asked
        .lines()
        .find_map(|line| line.strip_prefix("Options: "))
        .map(|options| options.split(", ").collect())
        .unwrap_or_default();
    let pick = if role.contains("security") {
        options.iter().find(|o| **o == "RS256").or(options.first())
    } else if role.contains("qa") {
        options.last()
    } else {
        options.first()
    };
    pick.map_or_else(
        || "Keep it simple.".to_owned(),
        |option| (*option).to_owned(),
    )
}
