//! Which quota adapter reads a source, and the [`Adapter`] each source gets (spec
//! `engines.md` §3.4). Each adapter (one module per source) reads one allowance
//! endpoint with the source's own credential; none runs inference.
//!
//! | Source | Detected from | Request | Result |
//! |---|---|---|---|
//! | OpenRouter (`openrouter`) | `openai-compatible` service on `https://openrouter.ai` / `api.openrouter.ai` | `GET /api/v1/credits`, Bearer | balance USD = `data.total_credits − data.total_usage` (exact decimal) |
//! | DeepSeek (`deepseek`) | `openai-compatible` service on `https://api.deepseek.com` | `GET /user/balance`, Bearer | one balance per `balance_infos[{currency, total_balance}]` |
//! | Anthropic OAuth (`anthropic-oauth`) | `anthropic` service whose credential is an OAuth token (`sk-ant-oat…`, or an `Authorization: Bearer` header); an API key is `unsupported` | `GET <base_url>/api/oauth/usage?cedar_ember=1&skip_spend=1`, Bearer, `anthropic-beta: oauth-2025-04-20` | windows `five-hour` (300 min), `seven-day`, `seven-day-opus`, `seven-day-sonnet` (10080 min) from `{utilization, resets_at}`; `limits[]` → `<kind>-<n>` |
//! | ChatGPT/Codex (`openai-codex`) | `openai-responses` service whose base URL is ChatGPT's `…/backend-api/codex` | `GET <base minus /codex>/wham/usage`, Bearer, `ChatGPT-Account-ID` | plan `plan_type`; windows `primary`/`secondary` and `additional-<name>-primary/secondary`; `rate_limit_reset_credits.available_count` |
//! | Kimi Code (`kimi-code`) | `openai-compatible` service on `https://api.kimi.com` / `api.kimi.ai` with a `/coding…` path | `GET /coding/v1/usages`, Bearer | `limits[{window{duration,timeUnit}, detail{limit, used or remaining, resetTime}}]` → `limit-<n>`; `usage` → `usage` (7 days) |
//! | Zhipu / Z.ai (`zhipu`) | service on `https://open.bigmodel.cn` / `api.z.ai` | `GET /api/monitor/usage/quota/limit`, `Authorization: <key>` | plan `data.level`; `data.limits[{type, unit, number, percentage, nextResetTime}]` → `<type>-<n>` (`TIME_LIMIT`: tool usage) |
//! | external Codex (`codex-cli`) | the `codex` engine | JSON-RPC `account/rateLimits/read {}` on the shared host ([`super::RateLimitReader`]) | windows `<limitId>:primary/secondary`, plan `planType`, account `accountId` |
//! | external Claude Code (`claude-code`) | the `claude` engine: `$CLAUDE_CONFIG_DIR/.credentials.json` else `~/.claude/.credentials.json` (`claudeAiOauth.accessToken`, `subscriptionType`), read only | as Anthropic OAuth on `https://api.anthropic.com` | as Anthropic OAuth, plan = `subscriptionType` |
//!
//! Everything else is `unsupported` (other compatible endpoints are never probed).
//!
//! Base URLs of the fixed hosts can be redirected (tests, proxies) with
//! `WUU_QUOTA_OPENROUTER_URL`, `WUU_QUOTA_DEEPSEEK_URL` and `WUU_QUOTA_CLAUDE_CODE_URL`
//! ([`Endpoints::from_env`]).

use super::chatgpt::{jwt_account_id, jwt_email};
use super::http::host;
use super::{account_id, QuotaError, Reading, SharedReader};
use super::{anthropic, chatgpt, codex_cli, deepseek, kimi, openrouter, zhipu};
use crate::config::ProviderConfig;
use std::time::Instant;
use wuu_protocol::QuotaAccount;

pub use super::anthropic::{claude_code_adapter, claude_credentials_path};

/// Base URLs of the fixed quota hosts.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoints {
    /// OpenRouter (default `https://openrouter.ai`).
    pub openrouter: String,
    /// DeepSeek (default `https://api.deepseek.com`).
    pub deepseek: String,
    /// Anthropic for the Claude Code login (default `https://api.anthropic.com`).
    pub claude_code: String,
    /// Kimi Code (default: the service's own `https://` host).
    pub kimi: Option<String>,
    /// Zhipu / Z.ai (default: the service's own `https://` host).
    pub zhipu: Option<String>,
}

impl Default for Endpoints {
    fn default() -> Self {
        Endpoints {
            openrouter: "https://openrouter.ai".into(),
            deepseek: "https://api.deepseek.com".into(),
            claude_code: "https://api.anthropic.com".into(),
            kimi: None,
            zhipu: None,
        }
    }
}

impl Endpoints {
    /// Defaults, overridden by `WUU_QUOTA_OPENROUTER_URL`, `WUU_QUOTA_DEEPSEEK_URL`,
    /// `WUU_QUOTA_CLAUDE_CODE_URL`, `WUU_QUOTA_KIMI_URL`, `WUU_QUOTA_ZHIPU_URL`.
    pub fn from_env() -> Endpoints {
        let mut e = Endpoints::default();
        let var = |n: &str| {
            std::env::var(n)
                .ok()
                .map(|v| v.trim().trim_end_matches('/').to_owned())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = var("WUU_QUOTA_OPENROUTER_URL") {
            e.openrouter = v;
        }
        if let Some(v) = var("WUU_QUOTA_DEEPSEEK_URL") {
            e.deepseek = v;
        }
        if let Some(v) = var("WUU_QUOTA_CLAUDE_CODE_URL") {
            e.claude_code = v;
        }
        e.kimi = var("WUU_QUOTA_KIMI_URL");
        e.zhipu = var("WUU_QUOTA_ZHIPU_URL");
        e
    }
}

/// How one source is read.
#[derive(Clone)]
pub enum Adapter {
    /// OpenRouter prepaid credits.
    OpenRouter {
        /// Base URL (scheme + host).
        base: String,
        /// API key.
        key: String,
    },
    /// DeepSeek prepaid balance.
    DeepSeek {
        /// Base URL.
        base: String,
        /// API key.
        key: String,
    },
    /// Anthropic OAuth usage windows (a service, or the Claude Code login).
    AnthropicOAuth {
        /// Base URL (host root).
        base: String,
        /// OAuth access token.
        token: String,
        /// `anthropic-oauth` | `claude-code`.
        source: &'static str,
        /// Plan known from the credential (Claude Code `subscriptionType`).
        plan: Option<String>,
    },
    /// ChatGPT/Codex subscription windows.
    ChatGpt {
        /// `…/backend-api` (the service base minus `/codex`).
        base: String,
        /// Access token.
        token: String,
        /// `ChatGPT-Account-ID`, when known.
        account_id: Option<String>,
    },
    /// Kimi Code plan windows.
    Kimi {
        /// Scheme + host.
        base: String,
        /// API key.
        key: String,
    },
    /// Zhipu / Z.ai plan windows.
    Zhipu {
        /// Scheme + host.
        base: String,
        /// API key (sent without `Bearer`).
        key: String,
    },
    /// The external Codex engine's own login.
    CodexCli(SharedReader),
    /// No adapter for this source.
    Unsupported {
        /// Source name.
        source: &'static str,
    },
    /// The source has an adapter but no credential: sign in first.
    NoCredential {
        /// Source name.
        source: &'static str,
        /// Kind it would report.
        kind: &'static str,
    },
}

impl Adapter {
    /// The source name.
    pub fn source(&self) -> &'static str {
        match self {
            Adapter::OpenRouter { .. } => "openrouter",
            Adapter::DeepSeek { .. } => "deepseek",
            Adapter::AnthropicOAuth { source, .. } => source,
            Adapter::ChatGpt { .. } => "openai-codex",
            Adapter::Kimi { .. } => "kimi-code",
            Adapter::Zhipu { .. } => "zhipu",
            Adapter::CodexCli(_) => "codex-cli",
            Adapter::Unsupported { source } | Adapter::NoCredential { source, .. } => source,
        }
    }

    /// The kind it reports.
    pub fn kind(&self) -> Option<&'static str> {
        match self {
            Adapter::OpenRouter { .. } | Adapter::DeepSeek { .. } => Some("balance"),
            Adapter::Kimi { .. } | Adapter::Zhipu { .. } => Some("plan"),
            Adapter::AnthropicOAuth { .. } | Adapter::ChatGpt { .. } | Adapter::CodexCli(_) => {
                Some("subscription")
            }
            Adapter::Unsupported { .. } => None,
            Adapter::NoCredential { kind, .. } => Some(kind),
        }
    }

    /// The account known before reading (from the credential), if any.
    pub fn account(&self) -> Option<QuotaAccount> {
        let (endpoint, identity, cred_source) = match self {
            Adapter::OpenRouter { base, key }
            | Adapter::DeepSeek { base, key }
            | Adapter::Kimi { base, key }
            | Adapter::Zhipu { base, key } => (base.as_str(), key.as_str(), "explicit"),
            Adapter::AnthropicOAuth {
                base,
                token,
                source,
                ..
            } => (
                base.as_str(),
                token.as_str(),
                if *source == "claude-code" {
                    "claude-code"
                } else {
                    "explicit"
                },
            ),
            Adapter::ChatGpt {
                base,
                token,
                account_id: acct,
            } => (
                base.as_str(),
                acct.as_deref().unwrap_or(token.as_str()),
                "explicit",
            ),
            _ => return None,
        };
        let label = match self {
            Adapter::ChatGpt { token, .. } => jwt_email(token),
            _ => None,
        };
        Some(QuotaAccount {
            id: account_id(self.source(), endpoint, identity),
            label,
            source: Some(cred_source.to_owned()),
        })
    }

    /// An answer that needs no request (`unsupported`, no credential).
    pub fn immediate(&self) -> Option<Result<Reading, QuotaError>> {
        match self {
            Adapter::Unsupported { .. } => Some(Err(QuotaError::Unsupported)),
            Adapter::NoCredential { .. } => Some(Err(QuotaError::SignIn)),
            _ => None,
        }
    }

    /// Reads the source before `deadline`.
    pub fn read(&self, deadline: Instant) -> Result<Reading, QuotaError> {
        if let Some(r) = self.immediate() {
            return r;
        }
        match self {
            Adapter::OpenRouter { base, key } => openrouter::read(base, key, deadline),
            Adapter::DeepSeek { base, key } => deepseek::read(base, key, deadline),
            Adapter::AnthropicOAuth {
                base, token, plan, ..
            } => anthropic::read(base, token, plan, deadline),
            Adapter::ChatGpt {
                base,
                token,
                account_id: acct,
            } => chatgpt::read(base, token, acct, deadline),
            Adapter::Kimi { base, key } => kimi::read(base, key, deadline),
            Adapter::Zhipu { base, key } => zhipu::read(base, key, deadline),
            Adapter::CodexCli(reader) => codex_cli::read(reader.as_ref(), deadline),
            Adapter::Unsupported { .. } | Adapter::NoCredential { .. } => {
                Err(QuotaError::Unsupported)
            }
        }
    }
}

// ----- detection -----------------------------------------------------------------------

/// The credential a service sends: the `api_key_env` value, else an `Authorization:
/// Bearer` header.
fn service_credential(cfg: &ProviderConfig) -> Option<String> {
    let from_env = cfg
        .api_key_env
        .as_deref()
        .and_then(|n| std::env::var(n).ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty());
    from_env.or_else(|| {
        cfg.headers.as_ref()?.iter().find_map(|(k, v)| {
            if !k.eq_ignore_ascii_case("authorization") {
                return None;
            }
            let v = v.trim();
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
        })
    })
}

fn header(cfg: &ProviderConfig, name: &str) -> Option<String> {
    cfg.headers.as_ref()?.iter().find_map(|(k, v)| {
        k.eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    })
}

/// The path of `url` (`"/"` when none).
fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    match rest.find('/') {
        Some(i) => rest[i..].to_owned(),
        None => "/".to_owned(),
    }
}

fn https(url: &str) -> bool {
    url.trim().to_ascii_lowercase().starts_with("https://")
}

/// The adapter of a configured service.
pub fn service_adapter(cfg: &ProviderConfig, endpoints: &Endpoints) -> Adapter {
    let base = cfg.base_url.trim().trim_end_matches('/').to_owned();
    let h = host(&base);
    let cred = service_credential(cfg);
    let needs =
        |source: &'static str, kind: &'static str, make: &dyn Fn(String) -> Adapter| match cred
            .clone()
        {
            Some(c) => make(c),
            None => Adapter::NoCredential { source, kind },
        };
    match cfg.provider_type.as_str() {
        "openai-compatible"
            if https(&base) && (h == "openrouter.ai" || h == "api.openrouter.ai") =>
        {
            needs("openrouter", "balance", &|key| Adapter::OpenRouter {
                base: endpoints.openrouter.clone(),
                key,
            })
        }
        "openai-compatible" if https(&base) && h == "api.deepseek.com" => {
            needs("deepseek", "balance", &|key| Adapter::DeepSeek {
                base: endpoints.deepseek.clone(),
                key,
            })
        }
        "openai-compatible"
            if https(&base)
                && (h == "api.kimi.com" || h == "api.kimi.ai")
                && path_of(&base).starts_with("/coding") =>
        {
            let base = endpoints
                .kimi
                .clone()
                .unwrap_or_else(|| format!("https://{h}"));
            needs("kimi-code", "plan", &|key| Adapter::Kimi {
                base: base.clone(),
                key,
            })
        }
        "openai-compatible" | "anthropic"
            if https(&base) && (h == "open.bigmodel.cn" || h == "api.z.ai") =>
        {
            let base = endpoints
                .zhipu
                .clone()
                .unwrap_or_else(|| format!("https://{h}"));
            needs("zhipu", "plan", &|key| Adapter::Zhipu {
                base: base.clone(),
                key,
            })
        }
        "anthropic" => {
            let oauth_header = header(cfg, "authorization").is_some();
            match cred {
                Some(token) if token.starts_with("sk-ant-oat") || oauth_header => {
                    Adapter::AnthropicOAuth {
                        base: if base.is_empty() {
                            "https://api.anthropic.com".into()
                        } else {
                            base
                        },
                        token,
                        source: "anthropic-oauth",
                        plan: None,
                    }
                }
                // An API key has no allowance endpoint.
                _ => Adapter::Unsupported {
                    source: "anthropic-oauth",
                },
            }
        }
        "openai-responses" if base.ends_with("/backend-api/codex") => {
            let usage_base = base.trim_end_matches("/codex").to_owned();
            let acct = header(cfg, "chatgpt-account-id");
            needs("openai-codex", "subscription", &|token| Adapter::ChatGpt {
                base: usage_base.clone(),
                account_id: acct.clone().or_else(|| jwt_account_id(&token)),
                token,
            })
        }
        _ => Adapter::Unsupported {
            source: "openai-compatible",
        },
    }
}

/// The adapter of an external engine entry. `codex` is the Codex host's reader, when
/// the engines side wired one.
pub fn engine_adapter(
    engine_id: &str,
    codex: Option<SharedReader>,
    endpoints: &Endpoints,
) -> Adapter {
    match engine_id {
        "codex" => match codex {
            Some(r) => Adapter::CodexCli(r),
            None => Adapter::Unsupported {
                source: "codex-cli",
            },
        },
        "claude" => claude_code_adapter(claude_credentials_path().as_deref(), endpoints),
        "grok" => Adapter::Unsupported { source: "grok-cli" },
        _ => Adapter::Unsupported { source: "acp" },
    }
}

#[cfg(test)]
mod tests {
    use super::super::kimi::parse_kimi;
    use super::super::zhipu::parse_zhipu;
    use super::*;
    use serde_json::json;

    #[test]
    fn kimi_and_zhipu_plans() {
        let r = parse_kimi(&json!({
            "limits": [{"window": {"duration": 5, "timeUnit": "TIME_UNIT_HOUR"},
                        "detail": {"limit": 200, "remaining": 150, "resetTime": "2030-01-01T00:00:00Z"}},
                       {"window": {}, "detail": {"limit": 0, "used": 3}}],
            "usage": {"limit": 1000, "used": 1000}}))
        .unwrap();
        assert_eq!(r.windows.len(), 3);
        assert_eq!(r.windows[0].window_minutes, Some(300));
        assert_eq!(r.windows[0].label.as_deref(), Some("5 hours"));
        assert_eq!(r.windows[0].used_percent, Some(25.0));
        assert_eq!(r.windows[1].used_percent, None, "no limit: unknown");
        assert_eq!(r.windows[1].label.as_deref(), Some("Allowance"));
        assert_eq!(r.windows[2].used_percent, Some(100.0));
        let z = parse_zhipu(&json!({"success": true, "data": {"level": "pro", "limits": [
            {"type": "TOKENS_LIMIT", "unit": 3, "number": 5, "percentage": 40, "nextResetTime": 1_900_000_000_000i64},
            {"type": "TIME_LIMIT", "unit": 5, "number": 1, "percentage": 2}]}}))
        .unwrap();
        assert_eq!(z.plan.as_deref(), Some("pro"));
        assert_eq!(z.windows[0].id, "tokens_limit-1");
        assert_eq!(z.windows[0].window_minutes, Some(300));
        assert_eq!(z.windows[1].label.as_deref(), Some("Tool usage"));
        assert_eq!(z.windows[1].scope.as_deref(), Some("tools"));
        assert_eq!(z.windows[1].window_minutes, None);
        assert!(parse_zhipu(&json!({"success": false, "data": {}})).is_err());
    }

    #[test]
    fn detection_needs_the_exact_hosts_and_credential_kinds() {
        let e = Endpoints::default();
        let cfg = |t: &str, base: &str, headers: Option<Vec<(&str, &str)>>| ProviderConfig {
            provider_type: t.into(),
            base_url: base.into(),
            headers: headers.map(|h| {
                h.into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            }),
            ..Default::default()
        };
        let auth = || Some(vec![("Authorization", "Bearer tok")]);
        assert_eq!(
            service_adapter(
                &cfg("openai-compatible", "https://openrouter.ai/api/v1", auth()),
                &e
            )
            .source(),
            "openrouter"
        );
        assert!(matches!(
            service_adapter(
                &cfg("openai-compatible", "http://openrouter.ai/api/v1", auth()),
                &e
            ),
            Adapter::Unsupported { .. }
        ));
        assert!(matches!(
            service_adapter(
                &cfg(
                    "openai-compatible",
                    "https://openrouter.ai.evil.com/v1",
                    auth()
                ),
                &e
            ),
            Adapter::Unsupported { .. }
        ));
        assert!(matches!(
            service_adapter(
                &cfg("openai-compatible", "https://api.deepseek.com/v1", None),
                &e
            ),
            Adapter::NoCredential { .. }
        ));
        assert!(matches!(
            service_adapter(&cfg("anthropic", "https://api.anthropic.com", auth()), &e),
            Adapter::AnthropicOAuth { .. }
        ));
        assert!(matches!(
            service_adapter(&cfg("anthropic", "https://api.anthropic.com", None), &e),
            Adapter::Unsupported { .. }
        ));
        match service_adapter(
            &cfg(
                "openai-responses",
                "https://chatgpt.com/backend-api/codex",
                auth(),
            ),
            &e,
        ) {
            Adapter::ChatGpt { base, .. } => assert_eq!(base, "https://chatgpt.com/backend-api"),
            _ => panic!("chatgpt"),
        }
        assert!(matches!(
            service_adapter(
                &cfg("openai-responses", "https://api.openai.com/v1", auth()),
                &e
            ),
            Adapter::Unsupported { .. }
        ));
    }
}
