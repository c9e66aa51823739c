//! The message router over an `LlmAgent`, on the terminal channel: each reply is printed token
//! by token as the agent writes it, a tool call on a line of its own.
//!
//! ```sh
//! cargo run -p examples --bin channel-terminal                        # type lines; Ctrl-D ends
//! echo "count these words" | cargo run -p examples --bin channel-terminal
//! cargo run -p examples --bin channel-terminal -- --no-streaming      # whole replies
//! ```
//!
//! The model is an OpenAI-compatible one when `OPENAI_BASE_URL` and `OPENAI_API_KEY` are set
//! (`OPENAI_MODEL`, default `gpt-4o-mini`), else a scripted one that needs no service: it counts
//! the words of each message with its `word_count` tool. With no terminal and nothing piped in,
//! it plays a short scripted conversation. Logs go to stderr; stdout has the conversation only.

use std::io::IsTerminal as _;
use std::sync::Arc;

use bidi_channel::{Event, MessageRouter, Terminal};
use bidi_core::BoxError;
use bidi_llm::testing::Scripted;
use bidi_llm::{LlmAgent, Message, Model, ModelEvent, ModelRequest, OpenAiModel, simple_tool};
use clap::Parser;
use futures_util::StreamExt as _;
use futures_util::stream::{self, BoxStream};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// The router over an agent, on the terminal.
#[derive(Debug, Parser)]
struct Args {
    /// Print each reply whole once it is complete.
    #[arg(long)]
    no_streaming: bool,
}

/// Answers a user's message with a call of `word_count`, and the tool's result with a sentence.
struct Demo;

impl Model for Demo {
    fn name(&self) -> &str {
        "demo"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        let answer = match request.messages.last() {
            Some(Message::User(user)) => Scripted::new().text("Let me count. ").tool_call(
                "count-1",
                "word_count",
                &json!({"text": user.content}),
            ),
            Some(Message::ToolResult(result)) => Scripted::new().text(&format!(
                "Your message has {} words. Thanks for writing!",
                result.content
            )),
            _ => Scripted::new().text("Say something."),
        };
        stream::iter(answer.events()).boxed()
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Text {
    /// The text to count the words of.
    text: String,
}

fn agent() -> LlmAgent {
    let word_count = simple_tool(
        "word_count",
        "Word count",
        "Counts the words of a text",
        |_id, args: Text| async move {
            Ok::<_, String>((args.text.split_whitespace().count().to_string(), None))
        },
    );
    if let (Ok(base), Ok(key)) = (
        std::env::var("OPENAI_BASE_URL"),
        std::env::var("OPENAI_API_KEY"),
    ) {
        let name = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        eprintln!("[channel-terminal] model: {name} at {base}");
        let model = OpenAiModel::new(base, name).api_key(key);
        return LlmAgent::builder("assistant", model)
            .tool(word_count)
            .build();
    }
    eprintln!(
        "[channel-terminal] model: scripted (set OPENAI_BASE_URL and OPENAI_API_KEY for a real one)"
    );
    LlmAgent::builder("assistant", Demo)
        .tool(word_count)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let interactive = std::io::stdin().is_terminal();
    let router = MessageRouter::new(agent());
    let terminal = Arc::new(Terminal::stdout().streaming(!args.no_streaming));

    // Subscribers see every message and every whole reply, streamed or not.
    let mut events = router.subscribe();
    let log = tokio::spawn(async move {
        let mut replies = 0;
        while let Ok(event) = events.recv().await {
            if let Event::AgentResponse { text, .. } = event {
                replies += 1;
                eprintln!(
                    "[channel-terminal] reply {replies}: {} characters",
                    text.chars().count()
                );
            }
        }
        replies
    });

    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    if interactive {
        loop {
            stdout.write_all(b"you> ").await?;
            stdout.flush().await?;
            let Some(line) = stdin.next_line().await? else {
                break;
            };
            if !line.trim().is_empty() {
                router.handle(terminal.clone(), "me", line).await?;
            }
        }
    } else {
        let mut lines = Vec::new();
        while let Some(line) = stdin.next_line().await? {
            if !line.trim().is_empty() {
                lines.push(line);
            }
        }
        if lines.is_empty() {
            lines = ["hello there", "what can you do?"]
                .map(String::from)
                .to_vec();
        }
        for line in lines {
            stdout.write_all(format!("> {line}\n").as_bytes()).await?;
            stdout.flush().await?;
            router.handle(terminal.clone(), "me", line).await?;
        }
    }
    drop(router);
    let replies = log.await?;
    eprintln!("[channel-terminal] {replies} replies");
    Ok(())
}
