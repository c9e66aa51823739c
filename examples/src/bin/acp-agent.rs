//! An LLM agent served over the Agent Client Protocol (ACP) on stdin and stdout, with
//! `bidi-acp`: the agent editors such as Zed start as a subprocess.
//!
//! ```sh
//! cargo run -p examples --bin acp-agent                                  # sessions in a temp SQLite file
//! cargo run -p examples --bin acp-agent -- --db ~/.local/state/acp.sqlite3
//! printf '%s\n' \
//!   '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}' \
//!   '{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}' \
//!   | cargo run -p examples --bin acp-agent
//! ```
//!
//! The model is an OpenAI-compatible one when `OPENAI_BASE_URL` and `OPENAI_API_KEY` are set
//! (`OPENAI_MODEL`, default `gpt-4o-mini`; `OPENAI_MODELS`, a comma-separated list, adds the
//! models the editor's model selector offers), else a demo model that needs no service (and
//! `demo-loud`, the same in capitals, to choose in the editor's model selector): it answers
//! each prompt by calling the agent's `word_count` tool on it and reporting the result (a prompt
//! containing "slowly" makes it think for three seconds first, long enough to cancel it; a
//! prompt naming `save_note` calls that tool instead).
//!
//! Its tools are the main command's (`bidi_demo::save_note` and `bidi_demo::word_count`).
//! `save_note` appends the prompt to a notes file (`--notes`): it changes something, so it
//! needs the user's permission, which the editor asks for. Three session modes: `ask` (the
//! default: permission is asked), `read-only` (only `word_count` is offered, and `save_note`
//! is refused) and `yolo` (nothing is asked). The mode and the "always" answers are kept with
//! the session. Two commands are announced, `/save_note` and `/word_count`: the prompt's text
//! is what the model reads, and the demo model calls the tool it names.
//! The MCP servers a client names in `session/new` or `session/load` are started (stdio) or
//! connected to (http) for the session; their tools are offered as `{server}__{tool}` (a
//! prompt naming one makes the demo model call it), and `--ask fs__write*` makes the ones a
//! pattern names ask for permission first.
//! An editor that offers its files and terminals gives the agent `read_text_file`,
//! `write_text_file` and `run_command` (`run_command {"command": "ls"}` makes the demo model
//! call it); writes and commands ask for permission in the `ask` mode.
//! Sessions live in SQLite (`--db`), so `session/load` replays a conversation after a restart.
//! Logs go to stderr; stdout carries protocol lines only.
//!
//! To use it from an editor, register the built binary as a custom agent; in Zed's
//! `settings.json`:
//!
//! ```json
//! {
//!   "agent_servers": {
//!     "bidi": { "command": "/path/to/target/debug/acp-agent", "args": ["--db", "/tmp/bidi-acp.sqlite3"] }
//!   }
//! }
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use bidi_acp::{Command, Mode, Permission, Server, ToolKind};
use bidi_llm::{LlmAgent, Model, ModelEvent, ModelRequest, OpenAiModel};
use bidi_session::{SessionStore, SqliteStore};
use clap::Parser;
use examples::DemoModel;
use futures_util::stream::{BoxStream, StreamExt as _};

/// Serves an LLM agent over ACP on stdin and stdout.
#[derive(Debug, Parser)]
struct Args {
    /// The SQLite file sessions are kept in.
    #[arg(long, env = "BIDI_ACP_DB", default_value_os_t = std::env::temp_dir().join("bidi-acp.sqlite3"))]
    db: PathBuf,
    /// The longest line accepted, in bytes.
    #[arg(long, default_value_t = bidi_acp::DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,
    /// How many sessions the client may have open at once.
    #[arg(long, default_value_t = bidi_acp::DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,
    /// The file `save_note` appends to.
    #[arg(long, env = "BIDI_ACP_NOTES", default_value_os_t = std::env::temp_dir().join("bidi-acp-notes.txt"))]
    notes: PathBuf,
    /// How long a call of an MCP server's tool may take, in seconds.
    #[arg(long, default_value_t = 60)]
    mcp_call_timeout: u64,
    /// How many model calls one prompt turn may make.
    #[arg(long, default_value_t = 10)]
    max_turns: u32,
    /// Also ask the user before running the tools this pattern names (`fs__write*`, say: an
    /// MCP server's tools); repeatable.
    #[arg(long, value_name = "PATTERN")]
    ask: Vec<String>,
}

/// The agent: a real model when the environment names one, else the demo model.
fn agent(store: Arc<dyn SessionStore>, max_turns: u32, notes: PathBuf) -> LlmAgent {
    if let (Ok(base), Ok(key)) = (
        std::env::var("OPENAI_BASE_URL"),
        std::env::var("OPENAI_API_KEY"),
    ) {
        let name = std::env::var("OPENAI_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
        eprintln!("[acp-agent] model: {name} at {base}");
        let model = OpenAiModel::new(&base, name).api_key(&key);
        let mut builder = LlmAgent::builder("acp-agent", model);
        let others = std::env::var("OPENAI_MODELS").unwrap_or_default();
        for other in others
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            builder = builder.model_choice(OpenAiModel::new(&base, other).api_key(&key));
        }
        return builder
            .tool(bidi_demo::save_note(notes))
            .tool(bidi_demo::word_count())
            .max_turns(max_turns)
            .store(store)
            .build();
    }
    eprintln!("[acp-agent] model: demo (set OPENAI_BASE_URL and OPENAI_API_KEY for a real one)");
    LlmAgent::builder("acp-agent", DemoModel)
        .model_choice(Loud)
        .tool(bidi_demo::save_note(notes))
        .tool(bidi_demo::word_count())
        .max_turns(max_turns)
        .store(store)
        .build()
}

/// The demo model in capitals: a second model to choose.
struct Loud;

impl Model for Loud {
    fn name(&self) -> &str {
        "demo-loud"
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, ModelEvent> {
        DemoModel
            .stream(request)
            .map(|event| match event {
                ModelEvent::TextDelta(text) => ModelEvent::TextDelta(text.to_uppercase()),
                other => other,
            })
            .boxed()
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let store: Arc<dyn SessionStore> = match SqliteStore::open(&args.db).await {
        Ok(store) => Arc::new(store),
        Err(error) => {
            eprintln!("[acp-agent] cannot open {}: {error}", args.db.display());
            return ExitCode::FAILURE;
        }
    };
    eprintln!("[acp-agent] sessions: {}", args.db.display());
    let mut server = Server::new(agent(store, args.max_turns, args.notes))
        .max_line_bytes(args.max_line_bytes)
        .max_sessions(args.max_sessions)
        .mcp_call_timeout(std::time::Duration::from_secs(args.mcp_call_timeout))
        .tool_kind("save_note", ToolKind::Edit)
        .command(Command::new("save_note", "Save a note").hint("the note"))
        .command(Command::new("word_count", "Count the words of a text").hint("the text"))
        .mode(Mode::new("ask", "Ask").description("Asks before it changes anything"))
        .mode(
            Mode::new("read-only", "Read only")
                .description("Never changes anything")
                .system_prompt("You may look at things but never change them.")
                .tools(["word_count"])
                .permission(Permission::Reject),
        )
        .mode(
            Mode::new("yolo", "Yolo")
                .description("Changes things without asking")
                .permission(Permission::Allow),
        );
    for pattern in &args.ask {
        server = server.require_permission(pattern);
    }
    match server.serve_stdio().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("[acp-agent] reading stdin failed: {error}");
            ExitCode::FAILURE
        }
    }
}
