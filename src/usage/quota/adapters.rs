//! Quota adapters (spec `engines.md` §3.4). Each reads one allowance endpoint with the
//! source's own credential; none runs inference.
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

use super::http::{get_json, host};
use super::{account_id, QuotaError, Reading, SharedReader};
use crate::config::ProviderConfig;
use base64::Engine as _;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;
use wuu_protocol::{QuotaAccount, QuotaBalance, QuotaWindow};

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

fn bearer(token: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {token}"))
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
            Adapter::OpenRouter { base, key } => {
                let v = get_json(&format!("{base}/api/v1/credits"), &[bearer(key)], deadline)?;
                parse_openrouter(&v)
            }
            Adapter::DeepSeek { base, key } => {
                let v = get_json(&format!("{base}/user/balance"), &[bearer(key)], deadline)?;
                parse_deepseek(&v)
            }
            Adapter::AnthropicOAuth {
                base, token, plan, ..
            } => {
                let v = get_json(
                    &format!("{base}/api/oauth/usage?cedar_ember=1&skip_spend=1"),
                    &[
                        bearer(token),
                        ("anthropic-beta", "oauth-2025-04-20".to_owned()),
                    ],
                    deadline,
                )?;
                let mut r = parse_anthropic(&v)?;
                r.plan = plan.clone();
                Ok(r)
            }
            Adapter::ChatGpt {
                base,
                token,
                account_id: acct,
            } => {
                let mut headers = vec![bearer(token)];
                if let Some(a) = acct {
                    headers.push(("chatgpt-account-id", a.clone()));
                }
                let v = get_json(&format!("{base}/wham/usage"), &headers, deadline)?;
                parse_chatgpt(&v, crate::util::now_ms())
            }
            Adapter::Kimi { base, key } => {
                let v = get_json(
                    &format!("{base}/coding/v1/usages"),
                    &[bearer(key)],
                    deadline,
                )?;
                parse_kimi(&v)
            }
            Adapter::Zhipu { base, key } => {
                let v = get_json(
                    &format!("{base}/api/monitor/usage/quota/limit"),
                    &[("authorization", key.clone())],
                    deadline,
                )?;
                parse_zhipu(&v)
            }
            Adapter::CodexCli(reader) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(QuotaError::Network);
                }
                let v = reader.read_rate_limits(left).map_err(|e| {
                    log::debug!("codex account/rateLimits/read: {e}");
                    QuotaError::Network
                })?;
                parse_codex_rate_limits(&v)
            }
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

/// Where the Claude Code login lives: `$CLAUDE_CONFIG_DIR/.credentials.json`, else
/// `~/.claude/.credentials.json`.
pub fn claude_credentials_path() -> Option<PathBuf> {
    let var = |n: &str| {
        std::env::var_os(n)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("CLAUDE_CONFIG_DIR")
        .or_else(|| var("HOME").map(|h| h.join(".claude")))
        .map(|d| d.join(".credentials.json"))
}

/// The Claude Code login's adapter from its credentials file (read, never written or
/// refreshed): `claudeAiOauth.accessToken`, plan `subscriptionType`. No usable file →
/// sign in.
pub fn claude_code_adapter(creds: Option<&std::path::Path>, endpoints: &Endpoints) -> Adapter {
    let creds = creds
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let oauth = creds.as_ref().and_then(|v| v.get("claudeAiOauth"));
    let token = oauth
        .and_then(|o| o.get("accessToken"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match token {
        Some(t) => Adapter::AnthropicOAuth {
            base: endpoints.claude_code.clone(),
            token: t.to_owned(),
            source: "claude-code",
            plan: oauth
                .and_then(|o| o.get("subscriptionType"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        },
        None => Adapter::NoCredential {
            source: "claude-code",
            kind: "subscription",
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

// ----- parsing -------------------------------------------------------------------------

fn num(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    num(v).filter(|f| f.is_finite()).map(|f| f as i64)
}

fn text(v: Option<&Value>) -> Option<String> {
    v?.as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// An RFC 3339 string or Unix seconds → RFC 3339 UTC.
fn instant(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => s
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| crate::util::rfc3339(t.as_millisecond())),
        Value::Number(_) => int(v)
            .filter(|s| *s > 0)
            .map(|s| crate::util::rfc3339(s.saturating_mul(1000))),
        _ => None,
    }
}

/// An exact decimal: `mantissa × 10^-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    mantissa: i128,
    scale: u32,
}

impl Decimal {
    fn parse(s: &str) -> Option<Decimal> {
        let s = s.trim();
        let (num, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
            None => (s, 0),
        };
        let (neg, digits) = match num.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, num.strip_prefix('+').unwrap_or(num)),
        };
        let (int_part, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if int_part.is_empty() && frac.is_empty() {
            return None;
        }
        if !int_part
            .bytes()
            .chain(frac.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut mantissa: i128 = 0;
        for b in int_part.bytes().chain(frac.bytes()) {
            mantissa = mantissa.checked_mul(10)?.checked_add((b - b'0') as i128)?;
        }
        let mut scale = frac.len() as i64 - exp as i64;
        if mantissa == 0 {
            // Zero at any exponent: `0e2147483647` would otherwise loop 2^31 times.
            scale = scale.clamp(0, 36);
        }
        while scale < 0 {
            mantissa = mantissa.checked_mul(10)?;
            scale += 1;
        }
        if scale > 36 {
            return None;
        }
        Some(Decimal {
            mantissa: if neg { -mantissa } else { mantissa },
            scale: scale as u32,
        })
    }

    fn of(v: &Value) -> Option<Decimal> {
        match v {
            // serde_json prints an f64 as its shortest round-trip decimal, which is the
            // literal the upstream sent for ordinary amounts.
            Value::Number(n) => Decimal::parse(&n.to_string()),
            Value::String(s) => Decimal::parse(s),
            _ => None,
        }
    }

    fn rescale(self, scale: u32) -> Option<Decimal> {
        let mut m = self.mantissa;
        for _ in self.scale..scale {
            m = m.checked_mul(10)?;
        }
        Some(Decimal { mantissa: m, scale })
    }

    fn sub(self, o: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(o.scale);
        let (a, b) = (self.rescale(scale)?, o.rescale(scale)?);
        Some(Decimal {
            mantissa: a.mantissa.checked_sub(b.mantissa)?,
            scale,
        })
    }

    fn render(self) -> String {
        let neg = self.mantissa < 0;
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let (int_part, frac) = if digits.len() > scale {
            let (a, b) = digits.split_at(digits.len() - scale);
            (a.to_owned(), b.to_owned())
        } else {
            ("0".to_owned(), format!("{digits:0>scale$}"))
        };
        let frac = frac.trim_end_matches('0');
        let body = if frac.is_empty() {
            int_part
        } else {
            format!("{int_part}.{frac}")
        };
        if neg && body != "0" {
            format!("-{body}")
        } else {
            body
        }
    }
}

/// OpenRouter `GET /api/v1/credits` → `{data: {total_credits, total_usage}}`.
pub fn parse_openrouter(v: &Value) -> Result<Reading, QuotaError> {
    let data = v.get("data").ok_or(QuotaError::InvalidResponse)?;
    let credits = data
        .get("total_credits")
        .and_then(Decimal::of)
        .ok_or(QuotaError::InvalidResponse)?;
    let usage = data
        .get("total_usage")
        .and_then(Decimal::of)
        .ok_or(QuotaError::InvalidResponse)?;
    let left = credits.sub(usage).ok_or(QuotaError::InvalidResponse)?;
    Ok(Reading {
        kind: "balance",
        balances: vec![QuotaBalance {
            currency: "USD".into(),
            amount: left.render(),
        }],
        ..Default::default()
    })
}

/// DeepSeek `GET /user/balance` → `{balance_infos: [{currency, total_balance}]}`.
pub fn parse_deepseek(v: &Value) -> Result<Reading, QuotaError> {
    let infos = v
        .get("balance_infos")
        .and_then(Value::as_array)
        .ok_or(QuotaError::InvalidResponse)?;
    let mut balances = Vec::new();
    for i in infos {
        let (Some(currency), Some(amount)) = (
            text(i.get("currency")),
            i.get("total_balance").and_then(Decimal::of),
        ) else {
            continue;
        };
        balances.push(QuotaBalance {
            currency,
            amount: amount.render(),
        });
    }
    Ok(Reading {
        kind: "balance",
        balances,
        ..Default::default()
    })
}

/// Anthropic `GET /api/oauth/usage` → windows.
pub fn parse_anthropic(v: &Value) -> Result<Reading, QuotaError> {
    if !v.is_object() {
        return Err(QuotaError::InvalidResponse);
    }
    let mut windows = Vec::new();
    for (key, id, label, minutes) in [
        ("five_hour", "five-hour", "5 hours", 300),
        ("seven_day", "seven-day", "7 days", 10080),
        ("seven_day_opus", "seven-day-opus", "7 days (Opus)", 10080),
        (
            "seven_day_sonnet",
            "seven-day-sonnet",
            "7 days (Sonnet)",
            10080,
        ),
    ] {
        let Some(w) = v.get(key).filter(|w| w.is_object()) else {
            continue;
        };
        windows.push(QuotaWindow {
            id: id.into(),
            label: Some(label.into()),
            used_percent: num(w.get("utilization")),
            window_minutes: Some(minutes),
            resets_at: instant(w.get("resets_at")),
            ..Default::default()
        });
    }
    if let Some(limits) = v.get("limits").and_then(Value::as_array) {
        for (n, l) in limits.iter().enumerate() {
            let kind = text(l.get("kind")).unwrap_or_else(|| "limit".into());
            windows.push(QuotaWindow {
                id: format!("{kind}-{}", n + 1),
                label: Some(kind.clone()),
                used_percent: num(l.get("percent")),
                resets_at: instant(l.get("resets_at")),
                model: text(l.pointer("/scope/model/display_name")),
                scope: Some(kind),
                ..Default::default()
            });
        }
    }
    Ok(Reading {
        kind: "subscription",
        windows,
        ..Default::default()
    })
}

fn chatgpt_window(w: &Value, id: String, label: String, now_ms: i64) -> Option<QuotaWindow> {
    if !w.is_object() {
        return None;
    }
    let resets_at = instant(w.get("reset_at")).or_else(|| {
        int(w.get("reset_after_seconds"))
            .filter(|s| *s >= 0)
            .map(|s| crate::util::rfc3339(now_ms.saturating_add(s.saturating_mul(1000))))
    });
    Some(QuotaWindow {
        id,
        label: Some(label),
        used_percent: num(w.get("used_percent")),
        window_minutes: int(w.get("limit_window_seconds"))
            .filter(|s| *s > 0)
            .map(|s| ((s as f64) / 60.0).round() as u64),
        resets_at,
        ..Default::default()
    })
}

/// ChatGPT `GET /backend-api/wham/usage`.
pub fn parse_chatgpt(v: &Value, now_ms: i64) -> Result<Reading, QuotaError> {
    if !v.is_object() {
        return Err(QuotaError::InvalidResponse);
    }
    let mut windows = Vec::new();
    if let Some(rl) = v.get("rate_limit") {
        for (key, id, label) in [
            ("primary_window", "primary", "Primary"),
            ("secondary_window", "secondary", "Secondary"),
        ] {
            if let Some(w) = rl.get(key) {
                windows.extend(chatgpt_window(w, id.into(), label.into(), now_ms));
            }
        }
    }
    if let Some(extra) = v.get("additional_rate_limits").and_then(Value::as_array) {
        for a in extra {
            let name = text(a.get("limit_name"))
                .or_else(|| text(a.get("metered_feature")))
                .unwrap_or_else(|| "additional".into());
            let Some(rl) = a.get("rate_limit") else {
                continue;
            };
            for (key, suffix) in [
                ("primary_window", "primary"),
                ("secondary_window", "secondary"),
            ] {
                if let Some(w) = rl.get(key) {
                    windows.extend(chatgpt_window(
                        w,
                        format!("additional-{name}-{suffix}"),
                        name.clone(),
                        now_ms,
                    ));
                }
            }
        }
    }
    Ok(Reading {
        kind: "subscription",
        plan: text(v.get("plan_type")),
        windows,
        reset_credits: int(v.pointer("/rate_limit_reset_credits/available_count"))
            .filter(|n| *n >= 0)
            .map(|n| n as u64),
        ..Default::default()
    })
}

fn codex_windows(
    snapshot: &Value,
    prefix: &str,
    label: Option<String>,
    out: &mut Vec<QuotaWindow>,
) {
    for key in ["primary", "secondary"] {
        let Some(w) = snapshot.get(key).filter(|w| w.is_object()) else {
            continue;
        };
        out.push(QuotaWindow {
            id: format!("{prefix}:{key}"),
            label: label.clone(),
            used_percent: num(w.get("usedPercent")),
            window_minutes: int(w.get("windowDurationMins"))
                .filter(|m| *m > 0)
                .map(|m| m as u64),
            resets_at: instant(w.get("resetsAt")),
            ..Default::default()
        });
    }
}

/// The result of Codex `account/rateLimits/read`.
pub fn parse_codex_rate_limits(v: &Value) -> Result<Reading, QuotaError> {
    if !v.is_object() {
        return Err(QuotaError::InvalidResponse);
    }
    let mut windows = Vec::new();
    let by_id = v.get("rateLimitsByLimitId").and_then(Value::as_object);
    let mut plan = None;
    match by_id.filter(|m| !m.is_empty()) {
        Some(map) => {
            let unnamed_several = map.len() > 1;
            for (id, snap) in map {
                let label =
                    text(snap.get("limitName")).or_else(|| unnamed_several.then(|| id.clone()));
                plan = plan.or_else(|| text(snap.get("planType")));
                codex_windows(snap, id, label, &mut windows);
            }
        }
        None => {
            if let Some(snap) = v.get("rateLimits") {
                let id = text(snap.get("limitId")).unwrap_or_else(|| "codex".into());
                codex_windows(snap, &id, text(snap.get("limitName")), &mut windows);
            }
        }
    }
    if let Some(snap) = v.get("rateLimits") {
        plan = text(snap.get("planType")).or(plan);
    }
    if windows.is_empty() {
        return Err(QuotaError::Unsupported);
    }
    let account = text(v.get("accountId")).map(|a| QuotaAccount {
        id: account_id("codex-cli", "", &a),
        label: text(v.get("email")),
        source: Some("codex-cli".into()),
    });
    Ok(Reading {
        kind: "subscription",
        plan,
        account,
        windows,
        ..Default::default()
    })
}

fn percent_of(used: Option<f64>, limit: Option<f64>) -> Option<f64> {
    match (used, limit) {
        (Some(u), Some(l)) if l > 0.0 => Some(u / l * 100.0),
        _ => None,
    }
}

fn kimi_window(id: String, label: String, minutes: Option<u64>, d: &Value) -> QuotaWindow {
    let limit = num(d.get("limit"));
    let used = num(d.get("used")).or_else(|| {
        let r = num(d.get("remaining"))?;
        Some(limit? - r)
    });
    let reset = ["resetTime", "resetAt", "reset_at", "reset_time"]
        .iter()
        .find_map(|k| instant(d.get(*k)));
    QuotaWindow {
        id,
        label: Some(label),
        used_percent: percent_of(used, limit),
        window_minutes: minutes,
        resets_at: reset,
        ..Default::default()
    }
}

/// Kimi Code `GET /coding/v1/usages`.
pub fn parse_kimi(v: &Value) -> Result<Reading, QuotaError> {
    if !v.is_object() {
        return Err(QuotaError::InvalidResponse);
    }
    let mut windows = Vec::new();
    if let Some(limits) = v.get("limits").and_then(Value::as_array) {
        for (n, l) in limits.iter().enumerate() {
            let duration = int(l.pointer("/window/duration")).filter(|d| *d > 0);
            let unit = text(l.pointer("/window/timeUnit")).unwrap_or_default();
            let (per, word) = match unit.as_str() {
                "TIME_UNIT_MINUTE" => (1, "minutes"),
                "TIME_UNIT_HOUR" => (60, "hours"),
                "TIME_UNIT_DAY" => (1440, "days"),
                _ => (0, ""),
            };
            let (minutes, label) = match duration {
                Some(d) if per > 0 => (Some(d as u64 * per), format!("{d} {word}")),
                _ => (None, "Allowance".to_owned()),
            };
            let detail = l.get("detail").unwrap_or(l);
            windows.push(kimi_window(
                format!("limit-{}", n + 1),
                label,
                minutes,
                detail,
            ));
        }
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        windows.push(kimi_window("usage".into(), "7 days".into(), Some(10080), u));
    }
    Ok(Reading {
        kind: "plan",
        windows,
        ..Default::default()
    })
}

/// Zhipu / Z.ai `GET /api/monitor/usage/quota/limit`.
pub fn parse_zhipu(v: &Value) -> Result<Reading, QuotaError> {
    if v.get("success") == Some(&Value::Bool(false)) {
        return Err(QuotaError::InvalidResponse);
    }
    let data = v
        .get("data")
        .filter(|d| d.is_object())
        .ok_or(QuotaError::InvalidResponse)?;
    let mut windows = Vec::new();
    if let Some(limits) = data.get("limits").and_then(Value::as_array) {
        for (n, l) in limits.iter().enumerate() {
            let kind = text(l.get("type")).unwrap_or_else(|| "limit".into());
            let tools = kind == "TIME_LIMIT";
            let number = int(l.get("number")).filter(|x| *x > 0);
            let minutes = if tools {
                None
            } else {
                match int(l.get("unit")) {
                    Some(3) => Some(number.map(|x| x as u64 * 60).unwrap_or(300)),
                    Some(6) => Some(10080),
                    _ => None,
                }
            };
            windows.push(QuotaWindow {
                id: format!("{}-{}", kind.to_ascii_lowercase(), n + 1),
                label: Some(if tools {
                    "Tool usage".into()
                } else {
                    kind.clone()
                }),
                used_percent: num(l.get("percentage")),
                window_minutes: minutes,
                resets_at: int(l.get("nextResetTime"))
                    .filter(|ms| *ms > 0)
                    .map(crate::util::rfc3339),
                scope: tools.then(|| "tools".to_owned()),
                ..Default::default()
            });
        }
    }
    Ok(Reading {
        kind: "plan",
        plan: text(data.get("level")),
        windows,
        ..Default::default()
    })
}

fn jwt_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The e-mail in a ChatGPT access token's claims.
fn jwt_email(token: &str) -> Option<String> {
    let c = jwt_claims(token)?;
    text(c.pointer("/https:~1~1api.openai.com~1profile/email")).or_else(|| text(c.get("email")))
}

/// The ChatGPT account id in an access token's claims.
fn jwt_account_id(token: &str) -> Option<String> {
    let c = jwt_claims(token)?;
    text(c.pointer("/https:~1~1api.openai.com~1auth/chatgpt_account_id"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decimals_are_exact() {
        let d = |s: &str| Decimal::parse(s).unwrap();
        assert_eq!(d("100.5").sub(d("25.75")).unwrap().render(), "74.75");
        assert_eq!(d("0.3").sub(d("0.1")).unwrap().render(), "0.2");
        assert_eq!(d("1").sub(d("1.000")).unwrap().render(), "0");
        assert_eq!(d("5").sub(d("7.25")).unwrap().render(), "-2.25");
        assert_eq!(d("1e-3").render(), "0.001");
        assert_eq!(d("1.5E2").render(), "150");
        assert!(Decimal::parse("abc").is_none());
        assert!(Decimal::parse("").is_none());
        assert!(Decimal::parse("1e99999").is_none());
        // A zero with a huge exponent (provider bytes) is zero, at once.
        assert_eq!(d("0e2147483647").render(), "0");
        assert_eq!(d("-0.0e-2147483648").render(), "0");
        let r = parse_openrouter(&json!({"data": {"total_credits": 10.1, "total_usage": 0.2}}))
            .unwrap();
        assert_eq!(r.balances[0].amount, "9.9");
        assert_eq!(r.balances[0].currency, "USD");
        assert!(parse_openrouter(&json!({"data": {}})).is_err());
    }

    #[test]
    fn deepseek_keeps_currencies_apart() {
        let r = parse_deepseek(&json!({"is_available": true, "balance_infos": [
            {"currency": "CNY", "total_balance": "110.00", "granted_balance": "10.00"},
            {"currency": "USD", "total_balance": "3.50"}]}))
        .unwrap();
        assert_eq!(r.balances.len(), 2);
        assert_eq!(r.balances[0].amount, "110");
        assert_eq!(r.balances[1].currency, "USD");
        assert_eq!(r.balances[1].amount, "3.5");
    }

    #[test]
    fn anthropic_windows() {
        let r = parse_anthropic(&json!({
            "five_hour": {"utilization": 42.0, "resets_at": "2025-10-01T12:00:00+00:00"},
            "seven_day": {"utilization": null, "resets_at": null},
            "seven_day_opus": null,
            "limits": [{"kind": "weekly_model", "percent": 101,
                        "scope": {"model": {"display_name": "Opus"}}}]
        }))
        .unwrap();
        assert_eq!(r.windows.len(), 3);
        assert_eq!(r.windows[0].id, "five-hour");
        assert_eq!(r.windows[0].used_percent, Some(42.0));
        assert_eq!(r.windows[0].window_minutes, Some(300));
        assert_eq!(
            r.windows[0].resets_at.as_deref(),
            Some("2025-10-01T12:00:00.000Z")
        );
        assert_eq!(r.windows[1].used_percent, None, "missing is unknown, not 0");
        assert_eq!(r.windows[2].id, "weekly_model-1");
        assert_eq!(r.windows[2].model.as_deref(), Some("Opus"));
        assert_eq!(r.windows[2].used_percent, Some(101.0));
    }

    #[test]
    fn chatgpt_usage() {
        let r = parse_chatgpt(
            &json!({"plan_type": "plus",
                "rate_limit": {"primary_window": {"used_percent": 12.5, "limit_window_seconds": 18000,
                                                  "reset_at": 1_760_000_000},
                               "secondary_window": {"used_percent": 3, "limit_window_seconds": 604800,
                                                    "reset_after_seconds": 60}},
                "additional_rate_limits": [{"limit_name": "codex-max", "rate_limit":
                    {"primary_window": {"limit_window_seconds": 300}}}],
                "rate_limit_reset_credits": {"available_count": 2}}),
            1_000_000,
        )
        .unwrap();
        assert_eq!(r.plan.as_deref(), Some("plus"));
        assert_eq!(r.reset_credits, Some(2));
        let ids: Vec<&str> = r.windows.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(
            ids,
            ["primary", "secondary", "additional-codex-max-primary"]
        );
        assert_eq!(r.windows[0].window_minutes, Some(300));
        assert_eq!(
            r.windows[1].resets_at.as_deref(),
            Some(crate::util::rfc3339(1_060_000).as_str())
        );
        assert_eq!(r.windows[2].used_percent, None);
    }

    #[test]
    fn codex_rate_limits() {
        let r = parse_codex_rate_limits(&json!({
            "rateLimits": {"limitId": "codex", "limitName": null, "planType": "pro",
                "primary": {"usedPercent": 30, "windowDurationMins": 300, "resetsAt": 1_760_000_000},
                "secondary": null},
            "accountId": "acct_1"}))
        .unwrap();
        assert_eq!(r.plan.as_deref(), Some("pro"));
        assert_eq!(r.windows.len(), 1);
        assert_eq!(r.windows[0].id, "codex:primary");
        assert_eq!(r.account.unwrap().source.as_deref(), Some("codex-cli"));
        let r = parse_codex_rate_limits(&json!({"rateLimits": {}, "rateLimitsByLimitId": {
            "a": {"primary": {"usedPercent": 1}}, "b": {"secondary": {"usedPercent": 2}}}}))
        .unwrap();
        let labels: Vec<_> = r.windows.iter().map(|w| w.label.clone().unwrap()).collect();
        assert_eq!(labels, ["a", "b"]);
        assert_eq!(
            parse_codex_rate_limits(&json!({"rateLimits": {}})).unwrap_err(),
            QuotaError::Unsupported
        );
    }

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
