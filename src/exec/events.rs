//! The JSONL events of `wuu exec --json` (spec `exec.md` §4.3, seed `000`).
//!
//! One variant per event type; `type` is the first key of every line. Every listed field
//! is always present: absent strings are `""`, numbers `0`, booleans `false`, absent
//! maps/lists `null` (§4.1). Unknown future fields are additive. `request_context` and
//! `provider_state` are built from field tables ([`REQUEST_CONTEXT_FIELDS`],
//! [`PROVIDER_STATE_FIELDS`]) so their shape stays fixed whatever the server sends.

use serde::Serialize;
use serde_json::{Map, Value};

/// A file change derived from a structured file-tool result (§4.4). Paths and hashes
/// only, never contents.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FileChange {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The tool item.
    pub item_id: String,
    /// `write_file` | `edit_file` | `apply_patch`.
    pub tool_name: String,
    /// Workspace-relative (or absolute, as the tool reported it) path.
    pub path: String,
    /// `created` | `modified` | `deleted` | `moved` … as the tool reported it.
    pub action: String,
    /// SHA-256 of the file before (`""` for a new file).
    pub old_file_sha: String,
    /// SHA-256 after (`""` for a deletion).
    pub new_file_sha: String,
    /// Workspace revision after the change.
    pub workspace_revision: String,
    /// Patch journal of the change, when the tool keeps one.
    pub patch_journal_path: String,
    /// Manifest of the change, when the tool keeps one.
    pub manifest_path: String,
    /// Destination of a move.
    pub move_path: String,
    /// Lines added by the change (a shortest line diff; `0` when the tool did not say).
    pub lines_added: u64,
    /// Lines removed by the change (`0` when the tool did not say).
    pub lines_removed: u64,
}

/// Fields of `subagent_*` events (§4.3 rows 21–23).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Subagent {
    /// Parent (or child) thread.
    pub thread_id: String,
    /// The subagent (= its child thread id).
    pub agent_id: String,
    /// Agent type.
    pub agent_type: String,
    /// Status.
    pub status: String,
    /// Task name.
    pub task_name: String,
    /// Agent profile.
    pub agent_profile: String,
    /// Agent path.
    pub agent_path: String,
    /// Parent agent.
    pub parent_id: String,
    /// Task description.
    pub description: String,
    /// Inline result (maybe truncated).
    pub result: String,
    /// Full result file.
    pub result_path: String,
    /// Size of the full result.
    pub result_bytes: u64,
    /// Whether `result` was cut.
    pub result_truncated: bool,
    /// Error text.
    pub error: String,
    /// Fresh input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache read tokens.
    pub cache_read_tokens: u64,
}

/// Fields shared by the `command_*` events.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CommandInfo {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The tool item (same as the paired `tool_*` event).
    pub item_id: String,
    /// Tool name (`bash`).
    pub name: String,
    /// Tool arguments as JSON text, secrets redacted.
    pub arguments: String,
    /// The `command` argument, secrets redacted (`""` when absent).
    pub command: String,
    /// The `process_id` argument of background-process control calls (`""` when absent).
    pub process_id: String,
}

/// One line of the stream. Serialized with `type` first (snake_case variant name).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// Runtime defaults after `initialize`; always the first line when setup succeeded.
    SessionConfigured {
        /// `wuu-app-server/v0.1`.
        protocol_version: String,
        /// Default provider id.
        provider: String,
        /// Default model.
        model: String,
        /// Default effort.
        effort: String,
        /// Default variant.
        variant: String,
        /// Parallel capacity.
        max_parallel: u64,
        /// Absolute workspace root.
        workspace_root: String,
        /// `{"mode": …}` (`{}` when unset).
        permissions: Value,
    },
    /// A new conversation (also ephemeral ones).
    ThreadStarted(ThreadInfo),
    /// A resumed conversation.
    ThreadResumed(ThreadInfo),
    /// A forked conversation (the new copy).
    ThreadForked(ThreadInfo),
    /// A root turn began: reset the message buffer.
    TurnStarted {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
    },
    /// Append to the current message.
    AgentMessageDelta {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// Text to append.
        delta: String,
    },
    /// Replace the current message (not an end marker).
    AgentMessageFinal {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The whole message.
        message: String,
    },
    /// Cumulative token counts of a turn (a snapshot, not a delta).
    UsageUpdated {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// Fresh input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Cache creation tokens.
        cache_creation_tokens: u64,
        /// Cache read tokens.
        cache_read_tokens: u64,
    },
    /// A turn finished (not the run's end: wait for `result`).
    TurnCompleted {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// Fresh input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Cache creation tokens (addition over the Go stream, §11.5).
        cache_creation_tokens: u64,
        /// Cache read tokens (addition over the Go stream, §11.5).
        cache_read_tokens: u64,
        /// The conversation trace (JSONL).
        trace_path: String,
        /// Another turn of the same run follows.
        awaiting_auto_continuation: bool,
    },
    /// A turn failed.
    TurnFailed {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// Error text.
        error: String,
        /// Error category (`auth`, `provider`, `network`, …; `""` when unknown).
        category: String,
        /// The specific failure kind (`quota`, `rate_limit`, `context_overflow`,
        /// `incomplete_stream`, …; `""` when unknown). Addition over the Go stream.
        code: String,
    },
    /// A turn was interrupted.
    TurnInterrupted {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// `interrupted` | `timeout`.
        reason: String,
    },
    /// A tool call started.
    ToolStarted {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The tool item.
        item_id: String,
        /// Tool name.
        name: String,
        /// Arguments as JSON text, secrets redacted.
        arguments: String,
    },
    /// Tool output as it streams.
    ToolOutputDelta {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The tool item.
        item_id: String,
        /// Output text.
        delta: String,
    },
    /// A tool call ended (`status` `completed` | `failed`).
    ToolCompleted {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The tool item.
        item_id: String,
        /// Tool name.
        name: String,
        /// Item status.
        status: String,
        /// Error text (`""` on success).
        error: String,
    },
    /// An item was withdrawn.
    ToolRemoved {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The item.
        item_id: String,
    },
    /// The provider stream of the current step failed and is retried (`status`
    /// `retrying`; the failed attempt's partial text was already withdrawn by an
    /// `agent_message_final`), the retried stream delivers output again
    /// (`reconnected`; it may still fail later and be retried again), or retrying
    /// stopped before any output (`failed`; `turn_failed` follows). Progress, not an error: the run goes on
    /// unless a `turn_failed` comes. Item type `stream_reconnect` of the app-server.
    StreamReconnect {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The `stream_reconnect` item.
        item_id: String,
        /// `retrying` | `reconnected` | `failed`.
        status: String,
        /// Retries made so far, this one included (1 = first retry).
        retry_count: u64,
        /// Retry budget of the request.
        max_retries: u64,
        /// When the retry starts (Unix ms; `0` when unknown).
        retry_at_ms: u64,
        /// Failure category of the failed attempt (`incomplete_stream`, `rate_limit`,
        /// `server`, `network`, `overloaded`, …).
        reason: String,
        /// The failure text.
        message: String,
    },
    /// A `bash` call started (same item as `tool_started`).
    CommandStarted(CommandInfo),
    /// `bash` output (same item as `tool_output_delta`).
    CommandOutputDelta {
        /// Command facts.
        #[serde(flatten)]
        info: CommandInfo,
        /// Output text.
        delta: String,
    },
    /// A `bash` call ended (arguments redacted here too, unlike Go).
    CommandCompleted {
        /// Command facts.
        #[serde(flatten)]
        info: CommandInfo,
        /// Item status.
        status: String,
        /// Error text.
        error: String,
        /// The command's exit code; `null` when it has none (killed by a signal, refused
        /// before it ran, or not reported by the engine). From the tool's structured
        /// result (`exit_code`). Addition over the Go stream.
        exit_code: Option<i64>,
        /// How long the command ran, in milliseconds (`0` when not reported). Addition
        /// over the Go stream.
        duration_ms: u64,
    },
    /// A `bash` item was withdrawn.
    CommandRemoved {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The item.
        item_id: String,
        /// Tool name.
        name: String,
    },
    /// A file changed through a file tool.
    FileChanged(FileChange),
    /// A subagent was first seen (non-terminal).
    SubagentStarted(Subagent),
    /// A subagent changed.
    SubagentUpdated(Subagent),
    /// A subagent ended.
    SubagentCompleted(Subagent),
    /// The task list changed.
    TodoUpdated {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// `{"explanation"?, "todos": [{"content","status"}]}` or `null`.
        todo: Value,
    },
    /// Composition diagnostics of one provider request (fields per
    /// [`REQUEST_CONTEXT_FIELDS`]).
    RequestContext(Map<String, Value>),
    /// Transport diagnostics of one provider step (fields per
    /// [`PROVIDER_STATE_FIELDS`]).
    ProviderState(Map<String, Value>),
    /// The server completed the run but the CLI's schema validation of the final
    /// message failed (§5.5). Always followed by `result`.
    Error {
        /// The conversation.
        thread_id: String,
        /// The turn.
        turn_id: String,
        /// The run.
        run_id: String,
        /// What failed.
        error: String,
        /// Always false.
        retrying: bool,
    },
    /// The terminal line (§5).
    Result(RunResultEvent),
}

/// `thread_started` / `thread_resumed` / `thread_forked` payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ThreadInfo {
    /// The conversation.
    pub thread_id: String,
    /// Its provider (`model_provider`).
    pub provider: String,
    /// Its model.
    pub model: String,
    /// Its working directory.
    pub cwd: String,
    /// Its permission mode (addition over the Go stream).
    pub permission_mode: String,
}

/// The `result` line (§5.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunResultEvent {
    /// `completed` | `failed` | `permission_denied` | `timeout` | `interrupted`.
    pub status: String,
    /// The conversation (`""` before one existed).
    pub thread_id: String,
    /// The last turn of the run.
    pub turn_id: String,
    /// The run (`""` before it existed).
    pub run_id: String,
    /// The last turn's answer (partial on failure).
    pub final_message: String,
    /// The conversation trace (`""` when unknown).
    pub trace_path: String,
    /// Failure text (`""` on success).
    pub error: String,
    /// The process exit code this result goes with (addition over the Go stream).
    pub exit_code: i32,
    /// Machine-readable failure class (`""` on success): the turn's category
    /// (`provider`, `auth`, `network`, `invalid_request`, `local`, `tool`,
    /// `permission_denied`, `invalid_output`), or exec's own (`timeout`, `cancelled`,
    /// `protocol`, `invalid_input`, `conflict`, `output`). Addition over the Go stream.
    pub error_category: String,
    /// The specific failure code when known (`""` otherwise): the provider failure kind of
    /// a failed turn (`quota`, `rate_limit`, `context_overflow`, `authentication`,
    /// `incomplete_stream`, …) or the run's code (`timeout`, `interrupted`,
    /// `permission_denied`, `structured_output_retry_failed`, …).
    pub error_code: String,
    /// `true` when `final_message` is not a finished answer: the run did not complete,
    /// or its last turn was cut off by the output limit.
    pub final_message_partial: bool,
    /// Tokens the run consumed so far (sum of the latest snapshot of every root turn),
    /// also when it failed.
    pub usage: RunUsage,
    /// The parsed answer, with `--output-schema` on success only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_result: Option<Value>,
}

/// Token totals of a run (`result.usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunUsage {
    /// Fresh input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache read tokens.
    pub cache_read_tokens: u64,
}

/// Kind of a diagnostic field: its default when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Integer, default 0.
    Int,
    /// String, default `""`.
    Str,
    /// Boolean, default false.
    Bool,
    /// Object or array, default `null`.
    Nullable,
}

use FieldKind::*;

/// Fields of `request_context` (besides `type`, `thread_id`, `turn_id`; `system_sections`
/// is added only when non-empty).
pub const REQUEST_CONTEXT_FIELDS: &[(&str, FieldKind)] = &[
    ("step_index", Int),
    ("transient_messages", Int),
    ("content_bytes", Int),
    ("block_kinds", Nullable),
    ("block_kind_counts", Nullable),
    ("block_kind_bytes", Nullable),
    ("segment_lifecycle_counts", Nullable),
    ("segment_placement_counts", Nullable),
    ("segment_cache_policy_counts", Nullable),
    ("message_count", Int),
    ("system_messages", Int),
    ("hidden_messages", Int),
    ("tool_count", Int),
    ("stable_prefix", Int),
    ("turn_prefix", Int),
    ("dynamic_context_bytes", Int),
    ("system_bytes", Int),
    ("stable_prefix_bytes", Int),
    ("turn_prefix_bytes", Int),
    ("message_bytes", Int),
    ("tool_schema_bytes", Int),
    ("loadable_tool_count", Int),
    ("loadable_tool_schema_bytes", Int),
    ("loadable_tool_surface_hash", Str),
    ("system_hash", Str),
    ("stable_prefix_hash", Str),
    ("turn_prefix_hash", Str),
    ("tool_surface_hash", Str),
    ("prompt_cache_key", Str),
];

/// Fields of `provider_state` (besides `type`, `thread_id`, `turn_id`).
pub const PROVIDER_STATE_FIELDS: &[(&str, FieldKind)] = &[
    ("step_index", Int),
    ("provider", Str),
    ("protocol", Str),
    ("transport", Str),
    ("replay_mode", Str),
    ("previous_response_id_used", Bool),
    ("connection_reused", Bool),
    ("diagnostic", Str),
    ("transport_failure_phase", Str),
    ("fallback_transport", Str),
    ("events_emitted", Bool),
    ("fallback_active", Bool),
    ("fallback_reason", Str),
    ("fallback_pin_status", Str),
    ("fallback_retry_after_ms", Int),
    ("fallback_ttl_ms", Int),
    ("input_items", Int),
    ("full_input_items", Int),
    ("delta_input_items", Int),
];

/// Builds a diagnostic payload: exactly the fields of `table` (coerced to their kind,
/// defaults when absent or mistyped) plus `thread_id` and `turn_id`.
pub fn diagnostic(
    table: &[(&str, FieldKind)],
    payload: &Value,
    thread_id: &str,
    turn_id: &str,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("thread_id".into(), Value::String(thread_id.to_owned()));
    m.insert("turn_id".into(), Value::String(turn_id.to_owned()));
    for (name, kind) in table {
        let v = payload.get(*name);
        let out = match kind {
            Int => Value::from(v.and_then(Value::as_u64).unwrap_or(0)),
            Str => Value::String(v.and_then(Value::as_str).unwrap_or("").to_owned()),
            Bool => Value::Bool(v.and_then(Value::as_bool).unwrap_or(false)),
            Nullable => match v {
                Some(x @ (Value::Object(_) | Value::Array(_))) => x.clone(),
                _ => Value::Null,
            },
        };
        m.insert((*name).to_owned(), out);
    }
    m
}

impl Event {
    /// The wire `type` of this event.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::SessionConfigured { .. } => "session_configured",
            Event::ThreadStarted(_) => "thread_started",
            Event::ThreadResumed(_) => "thread_resumed",
            Event::ThreadForked(_) => "thread_forked",
            Event::TurnStarted { .. } => "turn_started",
            Event::AgentMessageDelta { .. } => "agent_message_delta",
            Event::AgentMessageFinal { .. } => "agent_message_final",
            Event::UsageUpdated { .. } => "usage_updated",
            Event::TurnCompleted { .. } => "turn_completed",
            Event::TurnFailed { .. } => "turn_failed",
            Event::TurnInterrupted { .. } => "turn_interrupted",
            Event::ToolStarted { .. } => "tool_started",
            Event::ToolOutputDelta { .. } => "tool_output_delta",
            Event::ToolCompleted { .. } => "tool_completed",
            Event::ToolRemoved { .. } => "tool_removed",
            Event::StreamReconnect { .. } => "stream_reconnect",
            Event::CommandStarted(_) => "command_started",
            Event::CommandOutputDelta { .. } => "command_output_delta",
            Event::CommandCompleted { .. } => "command_completed",
            Event::CommandRemoved { .. } => "command_removed",
            Event::FileChanged(_) => "file_changed",
            Event::SubagentStarted(_) => "subagent_started",
            Event::SubagentUpdated(_) => "subagent_updated",
            Event::SubagentCompleted(_) => "subagent_completed",
            Event::TodoUpdated { .. } => "todo_updated",
            Event::RequestContext(_) => "request_context",
            Event::ProviderState(_) => "provider_state",
            Event::Error { .. } => "error",
            Event::Result(_) => "result",
        }
    }

    /// The JSON line of this event (without the newline). Never fails: every field is
    /// a string, number, bool or an already-valid JSON value; strings with control
    /// characters are escaped by serde_json, U+2028 / U+2029 / U+0085 by
    /// [`crate::util::escape_line_separators`] (so no line splitter cuts the line).
    pub fn to_line(&self) -> Vec<u8> {
        crate::util::escape_line_separators(self.serialize_line())
    }

    fn serialize_line(&self) -> Vec<u8> {
        match serde_json::to_vec(self) {
            Ok(v) => v,
            Err(e) => {
                // Unreachable with the shapes above; keep the stream valid regardless.
                serde_json::to_vec(&serde_json::json!({
                    "type": self.kind(),
                    "encoding_error": e.to_string(),
                }))
                .unwrap_or_else(|_| b"{}".to_vec())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn type_first_and_all_fields() {
        let e = Event::ToolStarted {
            thread_id: "t".into(),
            turn_id: "u".into(),
            item_id: "i".into(),
            name: "bash".into(),
            arguments: "{\"command\":\"a && b\"}".into(),
        };
        let line = String::from_utf8(e.to_line()).unwrap();
        assert!(line.starts_with("{\"type\":\"tool_started\""), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["arguments"], "{\"command\":\"a && b\"}");

        let e = Event::CommandCompleted {
            info: CommandInfo {
                item_id: "i".into(),
                ..Default::default()
            },
            status: "completed".into(),
            error: String::new(),
            exit_code: Some(0),
            duration_ms: 5,
        };
        let v: Value = serde_json::from_slice(&e.to_line()).unwrap();
        for k in [
            "thread_id",
            "turn_id",
            "item_id",
            "name",
            "arguments",
            "command",
            "process_id",
            "status",
            "error",
            "exit_code",
            "duration_ms",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        assert_eq!(v["type"], "command_completed");
    }

    #[test]
    fn diagnostics_have_fixed_shape() {
        let m = diagnostic(
            PROVIDER_STATE_FIELDS,
            &json!({"provider": "p", "step_index": 2, "extra": 1}),
            "t",
            "u",
        );
        let e = Event::ProviderState(m);
        let v: Value = serde_json::from_slice(&e.to_line()).unwrap();
        assert_eq!(v["type"], "provider_state");
        assert_eq!(v["step_index"], 2);
        assert_eq!(v["fallback_active"], false);
        assert!(v.get("extra").is_none());
        assert_eq!(
            v.as_object().unwrap().len(),
            PROVIDER_STATE_FIELDS.len() + 3
        );
    }

    #[test]
    fn control_chars_and_invalid_text_stay_valid_json() {
        let e = Event::AgentMessageDelta {
            thread_id: "t".into(),
            turn_id: "u".into(),
            delta: String::from_utf8_lossy(b"a\x00b\x1b[31m\xff\n\xe2\x80\xa8").into_owned(),
        };
        let line = e.to_line();
        assert!(!line.contains(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert!(v["delta"].as_str().unwrap().contains('\u{fffd}'));
    }
}
