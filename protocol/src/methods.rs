//! The one table of client → server methods (DESIGN.md "One table of methods").
//!
//! Each row names the wire method, its params type, its result type and its **route**:
//! - `inline`: answered on the reader thread from memory (cheap),
//! - `spawn`: creates a new conversation on a new session thread,
//! - `session`: delivered to the session thread of the conversation the params name,
//! - `catalog`: answered by the catalog pool (listings, searches, model catalogs).
//!
//! From the table come [`ClientRequest`] (the typed request the router matches on),
//! [`ClientRequest::route`], and [`METHODS`] (used for the JSON Schema export).
//! Adding a method is one row.

use crate::activity::*;
use crate::clients::*;
use crate::config::*;
use crate::engines::*;
use crate::extras::*;
use crate::history::*;
use crate::input::*;
use crate::mcp::*;
use crate::panels::*;
use crate::processes::*;
use crate::questions::*;
use crate::run::*;
use crate::side::*;
use crate::thread::*;
use crate::usage::*;
use crate::workspace::*;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the router sends a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Answer on the reader thread.
    Inline,
    /// Create a new conversation (a new session thread answers).
    Spawn,
    /// The session thread of this conversation id.
    Session(String),
    /// The session thread of the given id, or — when `None` — the conversation the
    /// catalog pool resolves (e.g. `thread/resume` without `session_id`).
    Resolve(Option<String>),
    /// The catalog pool.
    Catalog,
}

/// Why params could not be decoded into the method's params type.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodeError {
    /// No such method.
    UnknownMethod(String),
    /// The params did not fit; the message names the field (`path: problem`).
    InvalidParams(String),
}

/// Decodes params (`null` reads as `{}`). The error is serde's message (`invalid params:
/// invalid type: integer `1`, expected a string`); serde does not say where in the params
/// it failed, so a caller that wants the field's path locates it with the method's params
/// schema (the server does, see `server::params_path`). One plain `from_value` per params
/// type: a path-tracking deserializer would instantiate a second copy of every type's
/// decoder.
pub fn decode_params<T: DeserializeOwned>(params: Value) -> Result<T, DecodeError> {
    let params = if params.is_null() {
        Value::Object(Default::default())
    } else {
        params
    };
    serde_json::from_value::<T>(params)
        .map_err(|e| DecodeError::InvalidParams(format!("invalid params: {e}")))
}

/// Schema facts of one method row, for `generate-json-schema`.
pub struct MethodInfo {
    /// Wire name.
    pub name: &'static str,
    /// Rust name of the params type.
    pub params_type: &'static str,
    /// Rust name of the result type.
    pub result_type: &'static str,
    /// Schema of the params.
    pub params_schema: fn(&mut SchemaGenerator) -> Schema,
    /// Schema of the result.
    pub result_schema: fn(&mut SchemaGenerator) -> Schema,
}

macro_rules! client_methods {
    ($( $variant:ident => $wire:literal, $params:ident, $result:ident, $route:expr; )*) => {
        /// A decoded client request: one variant per method of [`METHODS`].
        #[derive(Debug, Clone, PartialEq)]
        pub enum ClientRequest {
            $(
                #[doc = concat!("`", $wire, "`")]
                $variant($params),
            )*
        }

        impl ClientRequest {
            /// Decodes `params` for `method`. Errors: [`DecodeError::UnknownMethod`],
            /// [`DecodeError::InvalidParams`] naming the field.
            pub fn decode(method: &str, params: Value) -> Result<Self, DecodeError> {
                match method {
                    $( $wire => Ok(ClientRequest::$variant(decode_params(params)?)), )*
                    other => Err(DecodeError::UnknownMethod(other.to_owned())),
                }
            }

            /// The wire name of the method.
            pub fn method(&self) -> &'static str {
                match self { $( ClientRequest::$variant(_) => $wire, )* }
            }

            /// Where the router delivers this request.
            pub fn route(&self) -> Route {
                match self {
                    $( ClientRequest::$variant(p) => {
                        let f: fn(&$params) -> Route = $route;
                        f(p)
                    } )*
                }
            }
        }

        /// Every method, in table order.
        pub const METHODS: &[MethodInfo] = &[
            $( MethodInfo {
                name: $wire,
                params_type: stringify!($params),
                result_type: stringify!($result),
                params_schema: |g| g.subschema_for::<$params>(),
                result_schema: |g| g.subschema_for::<$result>(),
            }, )*
        ];
    };
}

client_methods! {
    Initialize => "initialize", InitializeParams, InitializeResult, |_| Route::Inline;
    Shutdown => "shutdown", EmptyParams, OkResult, |_| Route::Inline;
    ConfigRead => "config/read", EmptyParams, ConfigReadResult, |_| Route::Inline;
    ModelCatalogProviders => "config/model-catalog/providers", ModelCatalogProvidersParams, ModelCatalogProvidersResult, |_| Route::Inline;
    ModelCatalogRefresh => "config/model-catalog/refresh", EmptyParams, ModelCatalogRefreshResult, |_| Route::Catalog;
    EngineList => "engine/list", EngineListParams, EngineListResult, |_| Route::Catalog;
    EngineUpdate => "engine/update", EngineUpdateParams, EngineListResult, |_| Route::Catalog;
    EngineAuthMethods => "engine/auth/methods", EngineAuthParams, EngineAuthResult, |_| Route::Catalog;
    EngineAuthenticate => "engine/authenticate", EngineAuthParams, EngineAuthResult, |_| Route::Catalog;
    EngineAuthCancel => "engine/auth/cancel", EngineAuthParams, OkResult, |_| Route::Catalog;
    ThreadStart => "thread/start", ThreadStartParams, ThreadResult, |_| Route::Spawn;
    ThreadResume => "thread/resume", ThreadResumeParams, ThreadResumeResult, |p| Route::Resolve(p.session_id.clone());
    ThreadFork => "thread/fork", ThreadForkParams, ThreadResult, |_| Route::Spawn;
    ThreadList => "thread/list", ThreadListParams, ThreadListResult, |_| Route::Catalog;
    ThreadListAll => "thread/listAll", ThreadListParams, ThreadListResult, |_| Route::Catalog;
    ThreadListArchived => "thread/listArchived", ThreadListParams, ThreadListResult, |_| Route::Catalog;
    ThreadSearch => "thread/search", ThreadSearchParams, ThreadSearchResult, |_| Route::Catalog;
    ThreadRename => "thread/rename", ThreadRenameParams, ThreadResult, |p| Route::Session(p.thread_id.clone());
    ThreadCompactStart => "thread/compact/start", ThreadCompactStartParams, TurnResult, |p| Route::Session(p.thread_id.clone());
    ThreadArchive => "thread/archive", ThreadArchiveParams, ThreadResult, |p| Route::Session(p.thread_id.clone());
    ThreadDelete => "thread/delete", ThreadDeleteParams, ThreadDeleteResult, |p| Route::Session(p.thread_id.clone());
    ThreadHistoryRead => "thread/history/read", HistoryReadParams, HistoryReadResult, |_| Route::Catalog;
    ThreadActivityRead => "thread/activity/read", ActivityReadParams, ActivityReadResult, |_| Route::Catalog;
    ThreadContentRead => "thread/content/read", ContentReadParams, ContentReadResult, |_| Route::Catalog;
    ThreadPin => "thread/pin", ThreadPinParams, ThreadResult, |p| Route::Session(p.thread_id.clone());
    ThreadOrganizationUpdate => "thread/organization/update", ThreadOrganizationUpdateParams, ThreadResult, |p| Route::Session(p.thread_id.clone());
    ThreadEditMessage => "thread/edit-message", ThreadEditMessageParams, ThreadEditMessageResult, |p| Route::Session(p.thread_id.clone());
    ThreadContextComposition => "thread/context-composition", ThreadIdParams, ThreadContextCompositionResult, |p| Route::Session(p.thread_id.clone());
    TurnRequeue => "turn/requeue", TurnRequeueParams, TurnRequeueResult, |p| Route::Session(p.thread_id.clone());
    SessionOrganizationList => "sessionOrganization/list", EmptyParams, SessionOrganizationResult, |_| Route::Catalog;
    SessionFolderCreate => "sessionFolder/create", SessionFolderCreateParams, SessionFolderResult, |_| Route::Catalog;
    SessionFolderUpdate => "sessionFolder/update", SessionFolderUpdateParams, SessionFolderResult, |_| Route::Catalog;
    SessionFolderReorder => "sessionFolder/reorder", SessionFolderReorderParams, SessionOrganizationResult, |_| Route::Catalog;
    SessionFolderDelete => "sessionFolder/delete", SessionFolderDeleteParams, SessionOrganizationResult, |_| Route::Catalog;
    ConfigModelUpdate => "config/model/update", ConfigModelUpdateParams, ConfigModelUpdateResult, |p| match p.thread_id.as_deref().map(str::trim) {
        Some(t) if !t.is_empty() => Route::Session(t.to_owned()),
        _ => Route::Catalog,
    };
    TurnStart => "turn/start", TurnStartParams, TurnResult, |p| Route::Session(p.thread_id.clone());
    TurnInterrupt => "turn/interrupt", TurnInterruptParams, OkResult, |p| Route::Session(p.thread_id.clone());
    TurnQueue => "turn/queue", TurnQueueParams, TurnQueueResult, |p| Route::Session(p.thread_id.clone());
    TurnUpdateQueued => "turn/update-queued", TurnUpdateQueuedParams, TurnUpdateQueuedResult, |p| Route::Session(p.thread_id.clone());
    TurnDequeue => "turn/dequeue", TurnDequeueParams, OkResult, |p| Route::Session(p.thread_id.clone());
    TurnSteer => "turn/steer", TurnSteerParams, TurnSteerResult, |p| Route::Session(p.thread_id.clone());
    TurnUnsteer => "turn/unsteer", TurnUnsteerParams, OkResult, |p| Route::Session(p.thread_id.clone());
    RunStart => "run/start", RunStartParams, RunEnvelope, |p| Route::Session(p.thread_id.clone());
    RunInterrupt => "run/interrupt", RunInterruptParams, RunEnvelope, |_| Route::Catalog;
    UserQuestionList => "user-question/list", UserQuestionListParams, UserQuestionListResult, |_| Route::Inline;
    UserQuestionRespond => "user-question/respond", UserQuestionRespondParams, UserQuestionResolveResult, |_| Route::Inline;
    UserQuestionCancel => "user-question/cancel", UserQuestionCancelParams, UserQuestionResolveResult, |_| Route::Inline;
    UserQuestionHold => "user-question/hold", UserQuestionHoldParams, UserQuestionResolveResult, |_| Route::Inline;
    WorkspaceList => "workspace/list", WorkspaceListParams, WorkspaceListResult, |_| Route::Catalog;
    WorkspaceStateCleanup => "workspace/state/cleanup", WorkspaceStateCleanupParams, WorkspaceStateCleanupResult, |_| Route::Catalog;
    UsageOverview => "usage/overview", UsageParams, UsageOverviewResult, |_| Route::Catalog;
    SettingsUsage => "settings/usage", UsageParams, SettingsUsageResult, |_| Route::Catalog;
    ThreadPreview => "thread/preview", ThreadPreviewParams, ThreadPreviewResult, |_| Route::Catalog;
    ThreadAttachmentRead => "thread/attachment/read", AttachmentReadParams, AttachmentReadResult, |_| Route::Catalog;
    // Panels: answered by `crate::panels` (work pools off the reader thread).
    ConfigAdvancedUpdate => "config/advanced/update", ConfigAdvancedUpdateParams, ConfigAdvancedUpdateResult, |_| Route::Inline;
    ConfigGeneralUpdate => "config/general/update", ConfigGeneralUpdateParams, ConfigGeneralUpdateResult, |_| Route::Inline;
    ConfigProviderRemove => "config/provider/remove", ConfigProviderRemoveParams, ConfigProviderRemoveResult, |_| Route::Inline;
    SkillList => "skill/list", EmptyParams, SkillListResult, |_| Route::Inline;
    InstructionsList => "instructions/list", InstructionsListParams, InstructionsListResult, |_| Route::Inline;
    TextPolish => "text/polish", TextPolishParams, TextPolishResult, |_| Route::Inline;
    GitCommitMessage => "git/commit-message", GitCommitMessageParams, GitCommitMessageResult, |_| Route::Inline;
    ThreadRegenerateTitle => "thread/regenerate-title", ThreadRegenerateTitleParams, ThreadRegenerateTitleResult, |_| Route::Inline;
    WorkspaceGitStatus => "workspace/git/status", WorkspaceViewParams, GitStatusResult, |_| Route::Inline;
    WorkspaceGitChanges => "workspace/git/changes", WorkspaceViewParams, GitChangesResult, |_| Route::Inline;
    WorkspaceGitDiff => "workspace/git/diff", WorkspaceViewParams, GitDiffResult, |_| Route::Inline;
    WorkspaceDirectoryList => "workspace/directory/list", WorkspaceViewParams, DirectoryListResult, |_| Route::Inline;
    WorkspaceFileRead => "workspace/file/read", WorkspaceViewParams, FileReadResult, |_| Route::Inline;
    WorkspaceFileResolve => "workspace/file/resolve", WorkspaceViewParams, FileResolveResult, |_| Route::Inline;
    WorkspaceFileChunk => "workspace/file/chunk", WorkspaceViewParams, FileChunkResult, |_| Route::Inline;
    // Side chats, browser activities and the clients' remaining calls (`crate::side`,
    // `crate::activity`, `crate::extras`): answered off the reader by `crate::panels`.
    SideThreadOpen => "sideThread/open", SideThreadParams, SideThreadOpenResult, |_| Route::Inline;
    SideThreadGetHistory => "sideThread/getHistory", SideThreadParams, SideThreadHistoryResult, |_| Route::Inline;
    SideThreadSendMessage => "sideThread/sendMessage", SideThreadSendParams, SideThreadSendResult, |_| Route::Inline;
    SideThreadInterrupt => "sideThread/interrupt", SideThreadParams, OkResult, |_| Route::Inline;
    SideThreadReset => "sideThread/reset", SideThreadParams, OkResult, |_| Route::Inline;
    ActivityList => "activity/list", ActivityListParams, ActivityListResult, |_| Route::Inline;
    ActivityTakeover => "activity/takeover", ActivityActionParams, ActivityActionResult, |_| Route::Inline;
    ActivityRelease => "activity/release", ActivityActionParams, ActivityReleaseResult, |_| Route::Inline;
    ActivityStop => "activity/stop", ActivityActionParams, ActivityActionResult, |_| Route::Inline;
    ThreadTextSnapshot => "thread/textSnapshot", TextSnapshotParams, TextSnapshotResult, |_| Route::Inline;
    MessageImageRead => "message/image/read", MessageImageReadParams, MessageImageReadResult, |_| Route::Inline;
    ConfigCodexCredentials => "config/codex/credentials", EmptyParams, CodexCredentialsResult, |_| Route::Inline;
    ConfigCodexModels => "config/codex/models", CodexModelsParams, CodexModelsResult, |_| Route::Catalog;
    AuthXaiLoginStart => "auth/xai/login/start", EmptyParams, XaiLoginStartResult, |_| Route::Inline;
    AuthXaiLoginPoll => "auth/xai/login/poll", XaiLoginParams, XaiLoginPollResult, |_| Route::Inline;
    AuthXaiLoginCancel => "auth/xai/login/cancel", XaiLoginParams, OkResult, |_| Route::Inline;
    ThreadControlTake => "thread/control/take", LegacyParams, LegacyResult, |_| Route::Inline;
    ThreadControlReturn => "thread/control/return", LegacyParams, LegacyResult, |_| Route::Inline;
    DevicePushRegister => "device/push_register", LegacyParams, LegacyResult, |_| Route::Inline;
    DevicePushUnregister => "device/push_unregister", LegacyParams, LegacyResult, |_| Route::Inline;
    ProjectWork => "project/work", LegacyParams, LegacyResult, |_| Route::Inline;
    ProjectSession => "project/session", LegacyParams, LegacyResult, |_| Route::Inline;
    ProcessList => "process/list", ProcessListParams, ProcessListResult, |_| Route::Inline;
    ProcessRead => "process/read", ProcessReadParams, ProcessReadResult, |_| Route::Inline;
    ProcessWrite => "process/write", ProcessWriteParams, ProcessWriteResult, |_| Route::Inline;
    ProcessResize => "process/resize", ProcessResizeParams, ProcessResult, |_| Route::Inline;
    ProcessStop => "process/stop", ProcessStopParams, ProcessResult, |_| Route::Inline;
    // MCP servers: answered by `crate::panels::mcp` (a work pool off the reader thread).
    McpList => "mcp/list", EmptyParams, McpListResult, |_| Route::Inline;
    McpConnect => "mcp/connect", McpServerActionParams, McpServerActionResult, |_| Route::Inline;
    McpDisconnect => "mcp/disconnect", McpServerActionParams, McpServerActionResult, |_| Route::Inline;
    McpRefresh => "mcp/refresh", McpServerActionParams, McpServerActionResult, |_| Route::Inline;
    McpAuthStart => "mcp/auth/start", McpServerActionParams, McpAuthStartResult, |_| Route::Inline;
    McpAuthStatus => "mcp/auth/status", McpServerActionParams, McpAuthStatusResult, |_| Route::Inline;
    McpAuthFinish => "mcp/auth/finish", McpAuthFinishParams, McpAuthResult, |_| Route::Inline;
    McpAuthRemove => "mcp/auth/remove", McpServerActionParams, McpAuthResult, |_| Route::Inline;
}

/// Params of methods that take none. Unknown members are still rejected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmptyParams {}

/// `{ok: true}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OkResult {
    /// Always true on success.
    pub ok: bool,
}

/// `thread/start` (spec §3.1; all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadStartParams {
    /// Working directory; defaults to the server's `--workdir`.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Workspace id (informational).
    #[serde(default)]
    pub workspace_id: Option<String>,
    /// Engine id; empty → `engines.default_engine`, empty default → `wuu`.
    #[serde(default)]
    pub engine: Option<String>,
    /// Provider id of the selection (defaults to the workspace default).
    #[serde(default)]
    pub provider: Option<String>,
    /// Model of the selection.
    #[serde(default)]
    pub model: Option<String>,
    /// Reasoning effort; mirrored into `model_variant` for the built-in engine.
    #[serde(default)]
    pub effort: Option<String>,
    /// Speed hint (kept, unused by the built-in engine).
    #[serde(default)]
    pub speed: Option<String>,
    /// `standard` | `read_only` | `unconfined`.
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Review automation (built-in engine, standard mode only).
    #[serde(default)]
    pub approve_for_me: Option<bool>,
    /// In-memory only; never touches the database.
    #[serde(default)]
    pub ephemeral: Option<bool>,
    /// `shared` (default) | `worktree` (not supported by this server: refused).
    #[serde(default)]
    pub workspace: Option<String>,
    /// With `workspace: worktree` only.
    #[serde(default)]
    pub base_revision: Option<String>,
    /// Project membership (`{name}`), kept as given.
    #[serde(default)]
    pub project: Option<Value>,
}

/// `{thread}` (thread/start, fork, rename, archive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadResult {
    /// The conversation snapshot.
    pub thread: Thread,
}

/// `thread/resume` (spec §3.1; seed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadResumeParams {
    /// The conversation; omitted → the most recent visible conversation of the workspace.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Do not broadcast `thread/resumed`.
    #[serde(default)]
    pub response_only: Option<bool>,
    /// Return only the newest history page with every item (no folding): ≤ 20 turns,
    /// ≤ 256 KiB of items, large images as `remote_ref`, `history_paged: true`, and a
    /// `history_cursor` in the Go formats (`turn:<id>` / `item:<…>`). Answers the
    /// requester only (no `thread/resumed` broadcast). What the desktop's phone bridge
    /// sends.
    #[serde(default)]
    pub history_page: Option<bool>,
    /// Compact history (seed: paged history): finished tool activity folded into
    /// `process_summary` items, `turns` = the newest page (≤ 100 turns, ≤ 1 MiB of
    /// items), `history_paged: true`, `history_cursor` for `thread/history/read`. Wins
    /// over `history_page`; answers the requester only (no `thread/resumed` broadcast).
    #[serde(default)]
    pub conversation_history: Option<bool>,
}

/// `thread/resume` result and `thread/resumed` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadResumeResult {
    /// The conversation.
    pub thread: Thread,
    /// Durable parked inputs (never auto-run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_user_messages: Vec<HeldUserMessage>,
    /// Inputs this live process still manages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_user_messages: Vec<HeldUserMessage>,
}

/// `thread/fork`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadForkParams {
    /// Source conversation.
    pub thread_id: String,
    /// Copy history up to and including this turn.
    #[serde(default)]
    pub turn_id: Option<String>,
    /// Within `turn_id`, copy items up to and including this item.
    #[serde(default)]
    pub item_id: Option<String>,
    /// Alternative cut `{seq?, type?, source_id?}` (accepted; `turn_id`/`item_id` win).
    #[serde(default)]
    pub target: Option<Value>,
    /// `local` (default); `worktree` is refused.
    #[serde(default)]
    pub mode: Option<String>,
}

/// `thread/list`, `thread/listAll`, `thread/listArchived`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadListParams {
    /// Workspace to list (`thread/list`); defaults to the server's workdir.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Return `turns: []` (listings always do; accepted for compatibility).
    #[serde(default)]
    pub summary_only: Option<bool>,
}

/// Listing result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadListResult {
    /// Conversations, most recently active first, with `turns: []`.
    pub threads: Vec<Thread>,
}

/// `thread/search`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadSearchParams {
    /// Text to find in titles and messages; empty → recent unarchived suggestions.
    #[serde(default)]
    pub query: Option<String>,
    /// At most this many results (≤ 100, default 20).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One search hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadSearchHit {
    /// The conversation (with `turns: []`).
    pub thread: Thread,
    /// The matching text around the hit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
    /// Position of the matching message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_seq: Option<u64>,
}

/// `thread/search` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadSearchResult {
    /// Hits, best first.
    pub results: Vec<ThreadSearchHit>,
}

/// `thread/rename`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadRenameParams {
    /// The conversation.
    pub thread_id: String,
    /// New title (trimmed; empty clears it).
    pub title: String,
    /// Revision of this title; omitted → one above the stored revision. A revision lower
    /// than the stored one is ignored (the stored, newer title is returned).
    #[serde(default)]
    pub title_revision: Option<u64>,
}

/// `thread/archive`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadArchiveParams {
    /// The conversation.
    pub thread_id: String,
    /// `true` archives, `false` restores.
    pub archived: bool,
    /// Archive even while running (interrupts first).
    #[serde(default)]
    pub force: Option<bool>,
}

/// `thread/delete` (seed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadDeleteParams {
    /// The conversation.
    pub thread_id: String,
    /// Refuse unless the conversation is archived (checked inside the delete
    /// transaction).
    #[serde(default)]
    pub only_if_archived: Option<bool>,
    /// Delete even while subagent workers of the conversation live (they are closed
    /// first); without it such a delete is refused with `thread_busy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// `thread/delete` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadDeleteResult {
    /// The deleted conversation.
    pub thread_id: String,
}

params_with_input! {
    /// `turn/start` (spec §3.2; seed: explicit continue).
    pub struct TurnStartParams {
        /// The conversation.
        pub thread_id: String,
        /// `{path}` of the editor's active document (kept as metadata).
        #[serde(default)]
        pub active_document: Option<Value>,
        /// Explicit continue of this (latest) turn without a user message.
        #[serde(default)]
        pub resume_after_turn_id: Option<String>,
    }
}

/// `{turn}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnResult {
    /// The admitted turn.
    pub turn: Turn,
}

/// `thread/compact/start`: a compact-only turn on an idle conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadCompactStartParams {
    /// The conversation.
    pub thread_id: String,
}

/// `turn/interrupt`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnInterruptParams {
    /// The conversation.
    pub thread_id: String,
    /// Only interrupt if this is the active turn.
    #[serde(default)]
    pub turn_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decode_gives_serde_message() {
        // serde's message; the server prefixes the path (`thread_id: `) it locates.
        let e = ClientRequest::decode("thread/rename", json!({"thread_id": 1, "title": "x"}))
            .unwrap_err();
        let DecodeError::InvalidParams(m) = e else {
            panic!()
        };
        assert_eq!(
            m,
            "invalid params: invalid type: integer `1`, expected a string"
        );
        let e = ClientRequest::decode("thread/rename", json!({"title": "x"})).unwrap_err();
        let DecodeError::InvalidParams(m) = e else {
            panic!()
        };
        assert!(m.contains("thread_id"), "{m}");
        let e = ClientRequest::decode("thread/start", json!({"bogus": true})).unwrap_err();
        let DecodeError::InvalidParams(m) = e else {
            panic!()
        };
        assert!(m.contains("bogus"), "{m}");
        assert!(matches!(
            ClientRequest::decode("nope/nope", json!({})),
            Err(DecodeError::UnknownMethod(_))
        ));
    }

    #[test]
    fn routes() {
        let r =
            ClientRequest::decode("thread/rename", json!({"thread_id":"t","title":"x"})).unwrap();
        assert_eq!(r.route(), Route::Session("t".into()));
        let r = ClientRequest::decode("thread/list", json!({})).unwrap();
        assert_eq!(r.route(), Route::Catalog);
        assert!(METHODS.iter().any(|m| m.name == "thread/start"));
    }
}
