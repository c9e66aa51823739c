//! What the server decides about the agent's tools: which need the user's permission, the
//! session modes, the kind a tool call is shown with, and the files it touches.
//!
//! They reach the agent loop as a `bidi_llm::Policy`, a connection extension that carries
//! behaviour, not only data: a system prompt put before the session's, the agent tools
//! offered, and a gate every local tool call awaits before it runs (here: asking the client
//! with `session/request_permission`; a refusal is the tool's error result). Tools that need
//! approval need permission without a rule: the gate decides them in the turn, so an ACP turn
//! never ends waiting for a decision.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_client_protocol_schema::v1::{
    AvailableCommand, AvailableCommandInput, PermissionOption, PermissionOptionKind, SessionMode,
    ToolCallLocation, ToolKind, UnstructuredCommandInput,
};
use bidi_agent::Scope;
use serde_json::Value;

/// How a [`Mode`] treats the tools that need the user's permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Permission {
    /// Ask the user, as the server's policy says (the default).
    #[default]
    Ask,
    /// Run them without asking.
    Allow,
    /// Refuse them without asking.
    Reject,
}

/// A session mode the client may switch to with `session/set_mode`: a system prompt put before
/// the session's, the tools the model is offered in it, and how it treats the tools that need
/// permission.
///
/// ```
/// use bidi_acp::{Mode, Permission};
///
/// let read_only = Mode::new("read-only", "Read only")
///     .description("Looks, never touches")
///     .system_prompt("You may read files but never change them.")
///     .tools(["read*", "list*", "search*"])
///     .permission(Permission::Reject);
/// assert_eq!(read_only.id(), "read-only");
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Mode {
    id: String,
    name: String,
    description: Option<String>,
    pub(crate) system_prompt: Option<String>,
    pub(crate) tools: Option<Vec<String>>,
    pub(crate) permission: Permission,
}

impl Mode {
    /// A mode named `name` (shown to the user), chosen by `id`; it changes nothing until told.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            description: None,
            system_prompt: None,
            tools: None,
            permission: Permission::Ask,
        }
    }

    /// What the mode is for, shown to the user.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// A system prompt put before the session's for every model call in this mode.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Only the agent's tools whose name matches one of `patterns` are offered to the model in
    /// this mode, and a call of another one is refused. A pattern is a name in which `*`
    /// stands for any run of characters (`read*`, `*_file`, `*`).
    pub fn tools<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tools = Some(patterns.into_iter().map(Into::into).collect());
        self
    }

    /// How the mode treats the tools that need permission (default [`Permission::Ask`]).
    pub fn permission(mut self, permission: Permission) -> Self {
        self.permission = permission;
        self
    }

    /// The mode's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn offers(&self, name: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|pattern| matches(pattern, name)))
    }

    pub(crate) fn wire(&self) -> SessionMode {
        SessionMode::new(self.id.clone(), self.name.clone()).description(self.description.clone())
    }
}

/// A command the client offers its user as `/name`, announced in an
/// `available_commands_update` when a session opens.
///
/// The client sends a command as the prompt's text (`/test integration`, say), and the agent
/// reads it as it reads any prompt: tell the agent what its commands mean (in its system
/// prompt, say).
///
/// ```
/// use bidi_acp::Command;
///
/// let test = Command::new("test", "Run the tests").hint("which tests, by name");
/// assert_eq!(test.name(), "test");
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Command {
    name: String,
    description: String,
    hint: Option<String>,
}

impl Command {
    /// The command `/name`, described to the user as `description`.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            hint: None,
        }
    }

    /// The command takes input after its name, and the client shows `hint` where it goes.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The command's name, without the `/`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn wire(&self) -> AvailableCommand {
        AvailableCommand::new(self.name.clone(), self.description.clone()).input(
            self.hint.as_ref().map(|hint| {
                AvailableCommandInput::Unstructured(UnstructuredCommandInput::new(hint.clone()))
            }),
        )
    }
}

/// What the server's builder says about tools.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    /// The patterns of the tools that need permission.
    pub(crate) ask: Vec<String>,
    /// The options a permission request offers.
    pub(crate) options: Vec<PermissionOptionKind>,
    /// Kinds set by name, over the guessed ones.
    pub(crate) kinds: HashMap<String, ToolKind>,
    pub(crate) modes: Vec<Mode>,
    /// The commands announced when a session opens.
    pub(crate) commands: Vec<Command>,
    /// The mode a session starts in: an index into `modes`.
    pub(crate) default_mode: usize,
    /// How long an MCP server may take to start and list its tools.
    pub(crate) mcp_start_timeout: Duration,
    /// How long an MCP tool call may take.
    pub(crate) mcp_call_timeout: Duration,
    /// How many sessions a connection may have open at once.
    pub(crate) max_sessions: usize,
    /// How many sessions keep their agent connection between prompt turns.
    pub(crate) max_idle_agents: usize,
    /// Whether the editor's files and terminals are offered as tools when the client offers
    /// them.
    pub(crate) editor: bool,
    /// The scope the clients' sessions are in, in the agent's store.
    pub(crate) scope: Scope,
}

/// How long an MCP server may take to start (or answer, over HTTP) and list its tools, by
/// default.
const DEFAULT_MCP_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an MCP tool call may take, by default.
const DEFAULT_MCP_CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for Rules {
    fn default() -> Self {
        Self {
            ask: Vec::new(),
            options: vec![
                PermissionOptionKind::AllowOnce,
                PermissionOptionKind::AllowAlways,
                PermissionOptionKind::RejectOnce,
                PermissionOptionKind::RejectAlways,
            ],
            kinds: HashMap::new(),
            modes: Vec::new(),
            commands: Vec::new(),
            default_mode: 0,
            mcp_start_timeout: DEFAULT_MCP_START_TIMEOUT,
            mcp_call_timeout: DEFAULT_MCP_CALL_TIMEOUT,
            max_sessions: crate::server::DEFAULT_MAX_SESSIONS,
            max_idle_agents: crate::server::DEFAULT_MAX_IDLE_AGENT_CONNECTIONS,
            editor: true,
            scope: Scope::new(crate::server::SESSION_SCOPE),
        }
    }
}

impl Rules {
    pub(crate) fn needs_permission(&self, name: &str) -> bool {
        self.ask.iter().any(|pattern| matches(pattern, name))
    }

    pub(crate) fn kind(&self, name: &str) -> ToolKind {
        self.kinds
            .get(name)
            .copied()
            .unwrap_or_else(|| kind_of(name))
    }

    /// The options offered, with the ids answers name them by.
    pub(crate) fn options(&self) -> Vec<PermissionOption> {
        self.options
            .iter()
            .map(|kind| {
                let (id, name) = option_name(*kind);
                PermissionOption::new(id, name, *kind)
            })
            .collect()
    }

    /// The kind of the option the client chose, if we offered it.
    pub(crate) fn chosen(&self, option_id: &str) -> Option<PermissionOptionKind> {
        self.options
            .iter()
            .copied()
            .find(|kind| option_name(*kind).0 == option_id)
    }
}

fn option_name(kind: PermissionOptionKind) -> (&'static str, &'static str) {
    match kind {
        PermissionOptionKind::AllowOnce => ("allow-once", "Allow once"),
        PermissionOptionKind::AllowAlways => ("allow-always", "Always allow"),
        PermissionOptionKind::RejectOnce => ("reject-once", "Reject"),
        PermissionOptionKind::RejectAlways => ("reject-always", "Always reject"),
        _ => ("other", "Other"),
    }
}

/// Whether `name` matches `pattern`, in which `*` stands for any run of characters.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // No `*`: the whole name.
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The kind a tool's name suggests: `read_file` reads, `run_command` executes, and so on.
pub(crate) fn kind_of(name: &str) -> ToolKind {
    const KINDS: &[(&[&str], ToolKind)] = &[
        (&["fetch*", "get*url*", "download*"], ToolKind::Fetch),
        (&["read*", "get*", "list*", "view*", "cat*"], ToolKind::Read),
        (&["search*", "find*", "grep*", "glob*"], ToolKind::Search),
        (
            &[
                "write*", "create*", "update*", "edit*", "patch*", "replace*",
            ],
            ToolKind::Edit,
        ),
        (&["delete*", "remove*", "rm*"], ToolKind::Delete),
        (&["move*", "rename*", "mv*"], ToolKind::Move),
        (
            &["run*", "exec*", "command*", "shell*", "bash*"],
            ToolKind::Execute,
        ),
        (&["think*", "reason*", "analyze*", "plan*"], ToolKind::Think),
    ];
    let name = name.to_ascii_lowercase();
    // A prefixed name (`server__read_file`) is judged by its last part.
    let name = name.rsplit("__").next().unwrap_or(&name);
    KINDS
        .iter()
        .find(|(patterns, _)| patterns.iter().any(|pattern| matches(pattern, name)))
        .map_or(ToolKind::Other, |(_, kind)| *kind)
}

/// The keys of arguments that name a file or a directory.
const PATH_KEYS: &[&str] = &[
    "path",
    "file",
    "filePath",
    "file_path",
    "filename",
    "fileName",
    "dir",
    "directory",
    "source",
    "destination",
    "paths",
    "files",
];

/// The files a call's arguments name, made absolute against `cwd`; a `line` argument goes
/// with a single one.
pub(crate) fn locations(args: &Value, cwd: &Path) -> Vec<ToolCallLocation> {
    let Value::Object(args) = args else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut add = |value: &Value| {
        if let Value::String(path) = value
            && !path.is_empty()
            && !path.contains("://")
        {
            paths.push(cwd.join(path));
        }
    };
    for key in PATH_KEYS {
        match args.get(*key) {
            Some(Value::Array(items)) => items.iter().for_each(&mut add),
            Some(value) => add(value),
            None => {}
        }
    }
    let line = args
        .get("line")
        .and_then(Value::as_u64)
        .and_then(|line| u32::try_from(line).ok());
    let single = paths.len() == 1;
    paths
        .into_iter()
        .map(|path| {
            let location = ToolCallLocation::new(path);
            if single {
                location.line(line)
            } else {
                location
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn patterns_match_whole_names_with_stars_anywhere() {
        assert!(matches("read*", "read_file"));
        assert!(matches("read_file", "read_file"));
        assert!(!matches("read_file", "read_files"));
        assert!(matches("*", ""));
        assert!(matches("get*url*", "get_page_url"));
        assert!(matches("*_file", "write_file"));
        assert!(!matches("*_file", "write_files"));
        assert!(matches("a*b*a", "aba"));
        assert!(!matches("ab*ba", "aba"), "the parts do not overlap");
        assert!(!matches("write*", "rewrite"));
    }

    #[test]
    fn kinds_come_from_names() {
        let cases = [
            ("read_file", ToolKind::Read),
            ("list_dir", ToolKind::Read),
            ("get_page_url", ToolKind::Fetch),
            ("fetch", ToolKind::Fetch),
            ("search_files", ToolKind::Search),
            ("Write_File", ToolKind::Edit),
            ("delete_file", ToolKind::Delete),
            ("rename_file", ToolKind::Move),
            ("run_command", ToolKind::Execute),
            ("think_step", ToolKind::Think),
            ("fs__read_text_file", ToolKind::Read),
            ("word_count", ToolKind::Other),
        ];
        for (name, kind) in cases {
            assert_eq!(kind_of(name), kind, "{name}");
        }
    }

    #[test]
    fn locations_come_from_path_like_arguments() {
        let cwd = Path::new("/project");
        let one = locations(&json!({"filePath": "src/lib.rs", "line": 7}), cwd);
        assert_eq!(one, [ToolCallLocation::new("/project/src/lib.rs").line(7)]);
        let many = locations(
            &json!({"source": "/a", "destination": "b", "paths": ["c", 3], "url": "https://x"}),
            cwd,
        );
        let paths: Vec<_> = many.iter().map(|l| l.path.clone()).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/a"),
                "/project/b".into(),
                "/project/c".into()
            ]
        );
        assert!(many.iter().all(|l| l.line.is_none()));
        assert!(locations(&json!({"text": "path"}), cwd).is_empty());
        assert!(locations(&json!("path"), cwd).is_empty());
    }
}
