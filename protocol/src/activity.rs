//! Browser activities (`activity/*`, notifications `activity/started|updated|
//! control_changed|stopped`; spec `app-server.md` §3.7, §4): one per agent-driven browser
//! session of a conversation. Shapes from the desktop's `desktop/src/shared/protocol.ts`
//! (`ActivitySession`, `ActivityListResult`, `ActivityActionResult`,
//! `ActivityReleaseResult`) and the Go `internal/activity` registry.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `activity/list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivityListParams {
    /// The conversation.
    pub thread_id: String,
}

/// `activity/takeover`, `activity/release`, `activity/stop`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivityActionParams {
    /// The conversation.
    pub thread_id: String,
    /// The activity.
    pub activity_id: String,
}

/// One activity (also the params of the four `activity/*` notifications).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActivitySession {
    /// `activity_…`.
    pub id: String,
    /// `browser` (this server drives no `cua` activities).
    pub kind: String,
    /// The conversation.
    pub thread_id: String,
    /// The workspace root.
    pub workdir: String,
    /// Plugin id (unused by the built-in browser).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_id: Option<String>,
    /// The tab the agent used last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `starting` | `active` | `background_controlled` | `foreground_controlled` |
    /// `user_controlled` | `waiting_confirmation` | `stopped` | `error`.
    pub state: String,
    /// `agent` | `user` | `none`.
    pub controller: String,
    /// Preview URI (unused by the built-in browser).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Why the activity ended (`stopped` after a restart: "ended with the server").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last pointer interaction (unused by the built-in browser).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interaction: Option<Value>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// `activity/list` result: oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActivityListResult {
    /// The conversation's activities.
    pub activities: Vec<ActivitySession>,
}

/// `activity/takeover`, `activity/stop` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActivityActionResult {
    /// The activity after the action.
    pub activity: ActivitySession,
}

/// `activity/release` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActivityReleaseResult {
    /// The activity (controller `agent`, state `background_controlled`).
    pub activity: ActivitySession,
    /// The new lease: every later `browser/*` request of the activity carries it as
    /// `lease_token` (the previous token is void).
    pub lease_token: String,
}

/// `activity/started`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ActivityStarted(pub ActivitySession);
/// `activity/updated`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ActivityUpdated(pub ActivitySession);
/// `activity/control_changed`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ActivityControlChanged(pub ActivitySession);
/// `activity/stopped`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ActivityStopped(pub ActivitySession);
