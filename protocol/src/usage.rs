//! Token usage views and account quota (seed 003 "查询用量概览" and "查询订阅状态";
//! spec `engines.md` §3, §4).
//!
//! - `usage/overview {timezone?}` → [`UsageOverviewResult`]: the home screen's summary.
//! - `settings/usage {timezone?}` → [`SettingsUsageResult`]: the usage page's snapshot.
//! - [`SubscriptionQuota`], [`LocalUsage`], [`LatestRequest`]: the opt-in parts of
//!   `engine/list {include_quota: true}` (per engine entry and per subscription source).
//!
//! Units: token counts are integers; rates are fractions in `[0, 1]`; dates are
//! `YYYY-MM-DD` calendar dates in the requested IANA zone (UTC when omitted); instants
//! are RFC 3339 UTC strings. None of these values is billing: they cover what this host
//! recorded (plus, for `outside`, what the engines' own local ledgers hold).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params of `usage/overview` and `settings/usage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// IANA zone the days are cut in (`America/Los_Angeles`); empty or omitted → UTC.
    /// An unknown zone is `invalid_params` (`invalid timezone: …`).
    #[serde(default)]
    pub timezone: Option<String>,
}

/// Four token counters. `input_tokens` excludes cache reads and cache writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenTotals {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens (reasoning included where the vendor counts it as output).
    pub output_tokens: u64,
    /// Tokens written to a prompt cache.
    pub cache_creation_tokens: u64,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: u64,
}

impl TokenTotals {
    /// Adds `o` to `self` (saturating).
    pub fn add(&mut self, o: &TokenTotals) {
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.cache_creation_tokens = self
            .cache_creation_tokens
            .saturating_add(o.cache_creation_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(o.cache_read_tokens);
    }

    /// All four counters summed.
    pub fn total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_creation_tokens)
            .saturating_add(self.cache_read_tokens)
    }

    /// Whether every counter is zero.
    pub fn is_zero(&self) -> bool {
        self.total() == 0
    }
}

/// The headline block shared by `usage/overview` and `settings/usage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageMetrics {
    /// `input_tokens + cache_read_tokens`.
    pub prompt_tokens: u64,
    /// `input_tokens + cache_read_tokens + output_tokens`.
    pub context_tokens: u64,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-read tokens.
    pub cache_read_tokens: u64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: u64,
    /// `cache_read_tokens / prompt_tokens` (0 when `prompt_tokens` is 0).
    pub cache_hit_rate: f64,
    /// Turns that reported usage (distinct turns with at least one usage record).
    pub turns: u64,
    /// Subagent worker conversations among them (distinct worker threads with usage).
    pub agents: u64,
    /// `[first date, last date]` with usage, in the zone; `["", ""]` when there is none.
    pub date_range: [String; 2],
    /// Number of distinct dates with usage.
    pub active_days: u64,
}

/// One calendar day with usage.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageDay {
    /// `YYYY-MM-DD` in the requested zone.
    pub date: String,
    /// Uncached input tokens (plus claimed ledger rows of engines that never report
    /// usage to this host, `settings/usage` only).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache-read tokens.
    pub cache_read_tokens: u64,
    /// `cache_read / (input + cache_read)` of the day (0 when that is 0).
    pub cache_hit_rate: f64,
    /// Turns with usage that day.
    pub turns: u64,
    /// Subagent worker conversations with usage that day.
    pub agents: u64,
    /// `settings/usage` only: tokens the engines' own ledgers recorded that day outside
    /// this host. Absent when no ledger contributed to the day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<TokenTotals>,
}

/// `usage/overview` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageOverviewResult {
    /// Conversations with at least one usage record.
    pub total_sessions: u64,
    /// Totals.
    pub metrics: UsageMetrics,
    /// One entry per date with usage, ascending; `[]` when there is none.
    pub days: Vec<UsageDay>,
}

/// Per `provider|model` usage, as recorded on each usage row (not the conversation's
/// current selection).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelBreakdown {
    /// Provider id recorded with the usage.
    pub provider: String,
    /// Model id recorded with the usage.
    pub model: String,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache-read tokens.
    pub cache_read_tokens: u64,
    /// Distinct conversations in the bucket.
    pub sessions: u64,
}

/// How often a skill was loaded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillUsage {
    /// Skill name.
    pub name: String,
    /// Number of loads.
    pub count: u64,
}

/// Usage of one engine: what this host recorded for conversations bound to it, and what
/// the engine's own local ledger recorded outside them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineBreakdown {
    /// Engine id (`wuu`, `codex`, `claude`, `opencode`, …).
    pub engine_id: String,
    /// Usage of conversations bound to this engine (for engines that never report usage
    /// to this host: the ledger rows of the native sessions those conversations claimed).
    pub in_wuu: TokenTotals,
    /// Ledger totals minus the native sessions this host's conversations claimed.
    /// Absent when the engine has no readable local ledger or its scan failed (absent is
    /// not zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<TokenTotals>,
}

/// `settings/usage` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SettingsUsageResult {
    /// Conversations with at least one usage record.
    pub total_sessions: u64,
    /// When this snapshot was computed (RFC 3339 UTC).
    pub generated_at: String,
    /// Totals (same object as `usage/overview`).
    pub metrics: UsageMetrics,
    /// Per provider/model, largest context total first; buckets whose tokens are all
    /// zero are dropped.
    pub model_breakdowns: Vec<ModelBreakdown>,
    /// Skill loads across the retained history, most used first.
    pub skill_usage: Vec<SkillUsage>,
    /// One entry per date, ascending (days with only ledger usage included).
    pub days: Vec<UsageDay>,
    /// Per engine. Absent when the history scan failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_breakdowns: Option<Vec<EngineBreakdown>>,
}

/// `local_usage` of an engine entry or subscription source: tokens this host recorded
/// (not billing; excludes unreported and outside usage).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalUsage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache-read tokens.
    pub cache_read_tokens: u64,
    /// Turns whose usage was reported (at least one non-zero counter).
    pub reported_turns: u64,
}

/// The most recent request (turn) of an engine entry or subscription source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LatestRequest {
    /// The turn's status (`completed`, `failed`, `interrupted`, `running`, …).
    pub status: String,
    /// The turn's error text, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it ended (or started, while running), RFC 3339 UTC.
    pub at: String,
    /// Model recorded with the turn.
    pub model: String,
    /// Whether the provider reported usage for it.
    pub usage_reported: bool,
    /// Only when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Only when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Only when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
    /// Only when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
}

/// Account quota of one service or external engine (seed "查询订阅状态").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubscriptionQuota {
    /// `available` | `stale` | `unavailable` | `sign_in` | `unsupported`.
    pub status: String,
    /// `subscription` | `plan` | `balance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The upstream plan name, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The account (never a token or key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<QuotaAccount>,
    /// Last attempt (RFC 3339 UTC).
    pub checked_at: String,
    /// Last successful read (RFC 3339 UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<String>,
    /// Freshness limit: five minutes after the successful read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Safe failure category: `network` | `rate_limited` | `sign_in` |
    /// `invalid_response` | `unsupported` (never an upstream body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Usage windows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<QuotaWindow>,
    /// Prepaid balances, one per currency and account (never merged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub balances: Vec<QuotaBalance>,
    /// Resets the upstream still grants (ChatGPT `rate_limit_reset_credits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_credits: Option<u64>,
}

/// The account a quota belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuotaAccount {
    /// Opaque, source-scoped id: hex of the first 16 bytes of SHA-256 over
    /// `source \0 endpoint \0 identity`.
    pub id: String,
    /// Vendor account name (e.g. an e-mail), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Where the credential came from (`explicit`, `codex-cli`, `claude-code`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One usage window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuotaWindow {
    /// Stable id within the source (`primary`, `five-hour`, …).
    pub id: String,
    /// Display label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Percent used; absent = unknown (not 0, not unlimited); ≥ 100 = exhausted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_percent: Option<f64>,
    /// Window length in minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_minutes: Option<u64>,
    /// Next reset (RFC 3339 UTC). Clients must not refill a stale window at this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<String>,
    /// Model the window applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Scope of the window (`tools`, a limit kind, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Upstream display text, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// Only when the upstream says so explicitly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlimited: Option<bool>,
}

/// A prepaid balance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuotaBalance {
    /// ISO currency code (`USD`, `CNY`).
    pub currency: String,
    /// Decimal string (`"12.5"`), exact as computed.
    pub amount: String,
}

/// One configured model service in `engine/list {include_quota: true}`
/// `subscription_providers`: the provider summary plus its quota and statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubscriptionProvider {
    /// The service (as `config/read` reports it).
    #[serde(flatten)]
    pub provider: crate::config::ProviderSummary,
    /// Its account quota (`unsupported` when no adapter can read it).
    pub quota: SubscriptionQuota,
    /// Usage this host recorded for it (absent with `include_activity: false` or when the
    /// history scan failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_usage: Option<LocalUsage>,
    /// Its newest request (same conditions; also absent when there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_request: Option<LatestRequest>,
}

/// The usage fields of one `engine/list` entry (flattened into it), present only with
/// `include_quota: true`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineUsage {
    /// Account quota: external engines that are enabled and whose binary was found
    /// (never the built-in `wuu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<SubscriptionQuota>,
    /// Usage recorded for conversations bound to this engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_usage: Option<LocalUsage>,
    /// The engine's newest request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_request: Option<LatestRequest>,
}
