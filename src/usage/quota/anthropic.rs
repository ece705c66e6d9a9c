//! The Anthropic OAuth quota adapter (`anthropic-oauth`, and `claude-code` for the
//! external Claude Code login), spec `engines.md` §3.4: `GET
//! <base>/api/oauth/usage?cedar_ember=1&skip_spend=1` with the OAuth token and
//! `anthropic-beta: oauth-2025-04-20`; windows `five-hour`, `seven-day`,
//! `seven-day-opus`, `seven-day-sonnet` and `limits[]` as `<kind>-<n>`. The Claude Code
//! login is read (never written or refreshed) from its credentials file.

use super::adapters::{Adapter, Endpoints};
use super::http::get_json;
use super::values::{bearer, instant, num, text};
use super::{QuotaError, Reading};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;
use wuu_protocol::QuotaWindow;

/// Reads the usage windows at `base` with the OAuth `token` before `deadline`; `plan`
/// (known from the credential) is reported as the plan.
pub(super) fn read(
    base: &str,
    token: &str,
    plan: &Option<String>,
    deadline: Instant,
) -> Result<Reading, QuotaError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
