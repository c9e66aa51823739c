//! The main command of bidi, `cargo run -p bidi-demo`: a server on 127.0.0.1:8080 with a
//! streaming flow ([`echo`]), a multi-turn agent ([`chat`]) and an LLM agent with tools
//! ([`assistant`]) over every wire bidi-http serves, sessions in a SQLite file; with `--acp`,
//! the assistant over ACP on stdio ([`acp`]), for editors, on the same sessions. This library
//! is what the binary serves, for the examples and tests that serve the same things.
//!
//! ```
//! use std::sync::Arc;
//!
//! use bidi_llm::testing::DemoModel;
//! use bidi_session::{MemoryStore, SessionStore};
//!
//! let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
//! let notes = std::env::temp_dir().join("notes.txt");
//! let assistant = bidi_demo::assistant(DemoModel, Arc::clone(&store), notes);
//! let registry = bidi_demo::registry(store, &assistant)?;
//! let server = bidi_http::Server::new(registry).agent(&assistant);
//! # drop(server);
//! # Ok::<(), bidi_flow::RegistryError>(())
//! ```

mod flows;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use bidi_acp::{Command, ToolKind};
use bidi_agent::{Agent, Scope};
use bidi_flow::{BidiFlow, Registry, RegistryError};
use bidi_llm::{LlmAgent, Model};
use bidi_session::SessionStore;

pub use flows::{Chat, chat, echo};
pub use tools::{save_note, word_count};

/// The LLM agent `assistant` on `model`, with sessions in `store` and two local tools:
/// [`save_note`] (appending to the file `notes`; its calls wait for the user's approval) and
/// [`word_count`]. A client may declare tools of its own, which it runs itself (offered after
/// these: `DemoModel` calls the tool a message names, else the last one offered). A model call
/// that fails as a provider's can (a 429, a 5xx, a stream cut short) is tried again.
#[must_use]
pub fn assistant(model: impl Model, store: impl SessionStore, notes: PathBuf) -> LlmAgent {
    LlmAgent::builder("assistant", model)
        // A provider's 429 or 5xx, or a stream cut short, is tried again (each retry an event).
        .retry(bidi_llm::Retry::new())
        .tool(save_note(notes))
        .tool(word_count())
        .store(store)
        .build()
}

/// `assistant` served over ACP (the Agent Client Protocol, on stdio: what editors such as Zed
/// run), on the sessions the HTTP server serves it on: those of bidi-http's anonymous scope,
/// `""`, in which every request without an identity opens its sessions. An editor thus loads
/// (`session/load`) and goes on with a conversation a web client started on any wire, and the
/// web client goes on with what the editor added. [`save_note`] asks the editor's user before
/// it runs (its calls need approval); `/save_note` and `/word_count` are announced as commands.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use bidi_llm::testing::DemoModel;
/// use bidi_session::{SessionStore, SqliteStore};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store: Arc<dyn SessionStore> = Arc::new(SqliteStore::open("demo.sqlite3").await?);
/// let notes = std::env::temp_dir().join("notes.txt");
/// bidi_demo::acp(bidi_demo::assistant(DemoModel, store, notes)).serve_stdio().await?;
/// # Ok(())
/// # }
/// ```
pub fn acp(assistant: LlmAgent) -> bidi_acp::Server {
    bidi_acp::Server::new(assistant)
        .scope(Scope::new(""))
        .tool_kind("save_note", ToolKind::Edit)
        .command(Command::new("save_note", "Save a note").hint("the note"))
        .command(Command::new("word_count", "Count the words of a text").hint("the text"))
}

/// A registry of the flows and agents the server serves: `echo` (a flow: init a prefix, input
/// a line, a chunk per word), `chat` (an agent remembering what it heard, its sessions in
/// `store`) and `assistant`.
///
/// # Errors
///
/// Never for a new registry; [`RegistryError`] if two of them had one key.
pub fn registry(
    store: Arc<dyn SessionStore>,
    assistant: &LlmAgent,
) -> Result<Registry, RegistryError> {
    let registry = Registry::new();
    registry.register(BidiFlow::new("echo", echo).with_description("Echoes each word"))?;
    registry.register(
        Agent::builder("chat")
            .description("Remembers what you said")
            .store(store)
            .build(chat)
            .into_flow(),
    )?;
    registry.register(assistant.agent().clone().into_flow())?;
    Ok(registry)
}
