//! Argument types of every tool, their JSON Schemas, and lenient-but-clear parsing.

use super::{Fail, PermissionMode};
use crate::provider::chat::ToolSpec;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// `bash` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct BashArgs {
    pub command: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub workdir: Option<String>,
    /// Start the command as a background process and return at once.
    #[serde(default)]
    pub run_in_background: bool,
    /// With `run_in_background`: run it on a pseudo-terminal.
    #[serde(default)]
    pub tty: bool,
}

/// `process` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct ProcessArgs {
    pub action: String,
    #[serde(default)]
    pub process_id: Option<String>,
    #[serde(default)]
    pub input: Option<String>,
    #[serde(default)]
    pub max_bytes: Option<usize>,
    #[serde(default)]
    pub wait_ms: Option<u64>,
    #[serde(default)]
    pub offset_bytes: Option<u64>,
}

/// `read_file` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct ReadFileArgs {
    pub path: String,
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `write_file` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct WriteFileArgs {
    pub path: String,
    pub content: String,
}

/// `edit_file` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct EditFileArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// `apply_patch` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct ApplyPatchArgs {
    pub patch: String,
}

/// `list_files` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct ListFilesArgs {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub depth: Option<u64>,
}

/// `grep` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct GrepArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
}

/// `glob` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct GlobArgs {
    pub pattern: String,
}

/// One `todo_write` item.
#[derive(Debug, Deserialize)]
pub(crate) struct TodoItem {
    pub content: String,
    pub status: String,
}

/// `todo_write` arguments.
#[derive(Debug, Deserialize)]
pub(crate) struct TodoWriteArgs {
    pub todos: Vec<TodoItem>,
}

/// Parses `arguments` (JSON object text; empty or whitespace counts as `{}`) into `T`.
/// Unknown fields are ignored. Errors name the tool and the problem, e.g.
/// ``invalid arguments for bash: missing field `command` ``.
pub(crate) fn parse<T: DeserializeOwned>(tool: &str, arguments: &str) -> Result<T, Fail> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Fail::Error(format!(
            "invalid arguments for {tool}: not valid JSON ({e}); send a JSON object"
        ))
    })?;
    if !value.is_object() {
        return Err(Fail::Error(format!(
            "invalid arguments for {tool}: expected a JSON object, got {}",
            kind(&value)
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| Fail::Error(format!("invalid arguments for {tool}: {e}")))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn spec(name: &str, description: String, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description,
        parameters,
    }
}

/// All tool specs (see [`super::specs`]).
pub(crate) fn specs(mode: PermissionMode) -> Vec<ToolSpec> {
    vec![
        bash_spec(mode),
        read_file_spec(),
        write_file_spec(mode),
        edit_file_spec(mode),
        apply_patch_spec(mode),
        list_files_spec(),
        grep_spec(),
        glob_spec(),
        todo_write_spec(),
        process_spec(),
    ]
}

/// A description of a tool that writes, with the `read_only` refusal appended in that
/// mode.
fn disabled(mode: PermissionMode, s: &str) -> String {
    if mode == PermissionMode::ReadOnly {
        format!("{s} Disabled in read_only mode: calls are refused.")
    } else {
        s.to_string()
    }
}

/// `bash`: its description says what the sandbox of `mode` allows.
fn bash_spec(mode: PermissionMode) -> ToolSpec {
    spec(
        "bash",
        format!(
            "Run a shell command with `bash -c` in the workspace. stdin is closed; stdout \
             and stderr are captured separately and streamed. The result shows the exit \
             code, stdout and stderr; long output is truncated (head and tail kept) and \
             the full output is saved to a file whose path is given. The whole process \
             group (including background jobs) is killed when the command ends, times \
             out, or is interrupted. For a server, a watcher or a long build that should \
             keep running while you work, set `run_in_background`: the call returns at \
             once with a process id, and the `process` tool reads its output, writes to \
             its stdin and stops it; you are told when it exits.{}",
            match mode {
                PermissionMode::ReadOnly => {
                    " read_only mode: the command runs in a read-only sandbox: it can read \
                     the workspace and system files but write only to $TMPDIR (a private \
                     temp dir); secret-looking environment variables are removed."
                }
                PermissionMode::Standard => {
                    " The command runs in a sandbox: it can write only inside the \
                     workspace and $TMPDIR (a private temp dir), read only the workspace, \
                     system and toolchain directories; secret-looking environment \
                     variables are removed."
                }
                PermissionMode::Unconfined => "",
            }
        ),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, run by `bash -c`."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Timeout in milliseconds (default: host setting)."},
                "workdir": {"type": "string", "description": "Working directory, relative to the current directory (default: current directory)."},
                "run_in_background": {"type": "boolean", "description": "Start the command as a background process and return at once with its id (no timeout; stdout and stderr go to one log)."},
                "tty": {"type": "boolean", "description": "With run_in_background: run it on a pseudo-terminal (interactive programs)."}
            },
            "required": ["command"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `read_file`.
fn read_file_spec() -> ToolSpec {
    spec(
        "read_file",
        "Read a text file. Returns numbered lines like `cat -n` (line number, tab, text), \
         at most `limit` lines (default 2000) starting at 1-based line `offset` \
         (default 1). Very long lines are cut. Binary files are refused."
            .to_string(),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the current directory or absolute."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to read (default 2000)."}
            },
            "required": ["path"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `write_file` (refused in `read_only`).
fn write_file_spec(mode: PermissionMode) -> ToolSpec {
    spec(
        "write_file",
        disabled(
            mode,
            "Write a file with the given content, replacing it if it exists. Parent \
             directories are created.",
        ),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the current directory or absolute."},
                "content": {"type": "string", "description": "The complete new file content."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `edit_file` (refused in `read_only`).
fn edit_file_spec(mode: PermissionMode) -> ToolSpec {
    spec(
        "edit_file",
        disabled(
            mode,
            "Replace an exact string in a file. `old_string` must match exactly \
             (including whitespace) and be unique in the file unless `replace_all` is \
             true; include enough surrounding context to make it unique.",
        ),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the current directory or absolute."},
                "old_string": {"type": "string", "description": "Exact text to replace (non-empty)."},
                "new_string": {"type": "string", "description": "Replacement text."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `apply_patch` and its patch format (refused in `read_only`).
fn apply_patch_spec(mode: PermissionMode) -> ToolSpec {
    spec(
        "apply_patch",
        disabled(
            mode,
            "Apply a patch that adds, deletes, updates or moves files. Format:\n\
             *** Begin Patch\n\
             *** Add File: path/new.txt\n\
             +line of the new file\n\
             *** Delete File: path/old.txt\n\
             *** Update File: path/file.rs\n\
             *** Move to: path/renamed.rs   (optional)\n\
             @@ optional line to anchor the hunk, e.g. fn main() {\n \
             context line (space prefix)\n\
             -removed line\n\
             +added line\n\
             *** End of File   (optional: hunk is at the end of the file)\n\
             *** End Patch\n\
             Paths are relative to the current directory. Give about 3 lines of context \
             around each change. The patch is all-or-nothing: if any hunk does not \
             apply, no file is changed.",
        ),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "patch": {"type": "string", "description": "The full patch text, from `*** Begin Patch` to `*** End Patch`."}
            },
            "required": ["patch"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `list_files`.
fn list_files_spec() -> ToolSpec {
    spec(
        "list_files",
        "List files and directories as an indented tree, respecting .gitignore. \
         Directories end with `/`."
            .to_string(),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory to list (default: current directory)."},
                "depth": {"type": "integer", "minimum": 1, "description": "How many levels deep to list (default 2)."}
            },
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `grep`.
fn grep_spec() -> ToolSpec {
    spec(
        "grep",
        "Search file contents with a regular expression (Rust regex syntax), respecting \
         .gitignore and skipping binary files. Output lines are `path:line:text`."
            .to_string(),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression, e.g. `fn\\s+main` or `(?i)todo`."},
                "path": {"type": "string", "description": "File or directory to search (default: current directory)."},
                "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.rs` or `src/**/*.ts`."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `glob`.
fn glob_spec() -> ToolSpec {
    spec(
        "glob",
        "Find files whose path (relative to the current directory) matches a glob, e.g. \
         `**/*.rs` or `src/*.toml`, respecting .gitignore. `*` does not cross `/`; use \
         `**` for any depth. Most recently modified files first."
            .to_string(),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern relative to the current directory."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `process`: the conversation's background processes.
fn process_spec() -> ToolSpec {
    spec(
        "process",
        "Manage background processes started with `bash` `run_in_background`. Actions: \
         `list` (all of this conversation's processes and their status), `read` (output \
         of `process_id` since your last read, at most `max_bytes`, waiting up to \
         `wait_ms` for new output; `offset_bytes` reads from a log offset instead), \
         `write` (send `input` to its stdin; include a trailing newline for a line), \
         `stop` (terminate it and everything it started)."
            .to_string(),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "read", "write", "stop"]},
                "process_id": {"type": "string", "description": "The process id (not for list)."},
                "input": {"type": "string", "description": "write: the text to send."},
                "max_bytes": {"type": "integer", "minimum": 1, "description": "read: at most this many bytes (default 16384)."},
                "wait_ms": {"type": "integer", "minimum": 0, "description": "read: wait up to this long for new output (at most 30000)."},
                "offset_bytes": {"type": "integer", "minimum": 0, "description": "read: start at this log offset instead of after your last read."}
            },
            "required": ["action"],
            "additionalProperties": false
        }"#,
        ),
    )
}

/// `todo_write`.
fn todo_write_spec() -> ToolSpec {
    spec(
        "todo_write",
        "Replace the task list shown to the user. Send the full list every time; keep \
         at most one item `in_progress`."
            .to_string(),
        crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "description": "What to do."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["content", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        }"#,
        ),
    )
}
