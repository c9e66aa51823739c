//! The main example: a multi-turn agent whose sessions live in a SQLite file.
//!
//! ```sh
//! cargo run -p examples --bin chat                      # type lines; Ctrl-D ends
//! echo "hello" | cargo run -p examples --bin chat       # piped lines, one turn each
//! cargo run -p examples --bin chat -- --session <id>    # resume a session
//! cargo run -p examples --bin chat -- --db chat.db      # another database file
//! ```
//!
//! With no terminal and nothing piped in, it plays a short scripted conversation.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;

use bidi_agent::{Agent, AgentInit};
use bidi_core::BoxError;
use bidi_session::SqliteStore;
use clap::Parser;
use examples::chat;
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A multi-turn chat agent over a SQLite session store.
#[derive(Debug, Parser)]
struct Args {
    /// Resume this session (printed at the end of every run).
    #[arg(long)]
    session: Option<String>,
    /// The SQLite file sessions are kept in.
    #[arg(long, env = "BIDI_CHAT_DB", default_value_os_t = default_db())]
    db: PathBuf,
}

fn default_db() -> PathBuf {
    std::env::temp_dir().join("bidi-chat.sqlite3")
}

async fn lines(interactive: bool) -> Result<Vec<String>, BoxError> {
    if interactive {
        return Ok(Vec::new());
    }
    let mut piped = Vec::new();
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = stdin.next_line().await? {
        if !line.trim().is_empty() {
            piped.push(line);
        }
    }
    if piped.is_empty() {
        piped = ["hello there", "what is bidi?", "thanks, bye"]
            .map(String::from)
            .to_vec();
    }
    Ok(piped)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let interactive = std::io::stdin().is_terminal();
    let store = SqliteStore::open(&args.db).await?;
    let agent = Agent::builder("chat")
        .store(store)
        .description("Remembers what you said")
        .build(chat);
    let init = match &args.session {
        Some(id) => AgentInit::new().session_id(id.clone()),
        None => AgentInit::new(),
    };
    let scripted = lines(interactive).await?;
    // Drive the connection from a task: hand-offs between runtime workers are cheap.
    tokio::spawn(async move {
        let mut conn = agent.connect(init);
        let mut stdout = std::io::stdout();
        let mut input = BufReader::new(tokio::io::stdin()).lines();
        let mut scripted = scripted.into_iter();
        loop {
            let line = if interactive {
                write!(stdout, "you> ")?;
                stdout.flush()?;
                match input.next_line().await? {
                    Some(line) if line.trim().is_empty() => continue,
                    Some(line) => line,
                    None => {
                        // End of input (Ctrl-D): end the prompt's line.
                        writeln!(stdout)?;
                        break;
                    }
                }
            } else {
                let Some(line) = scripted.next() else { break };
                println!("you> {line}");
                line
            };
            conn.send(line).await?;
            write!(stdout, "bot> ")?;
            let mut responses = conn.responses();
            while let Some(word) = responses.next().await {
                write!(stdout, "{}", word?)?;
                stdout.flush()?;
            }
            writeln!(stdout)?;
        }
        conn.close();
        let out = conn.output().await?;
        println!(
            "session {} ({} turns now, {} in all)",
            out.session_id,
            out.output,
            out.state.heard.len()
        );
        println!(
            "resume with: cargo run -p examples --bin chat -- --session {}",
            out.session_id
        );
        Ok::<_, BoxError>(())
    })
    .await?
}
