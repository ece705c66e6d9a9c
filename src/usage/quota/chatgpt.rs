//! The ChatGPT/Codex subscription quota adapter (`openai-codex`, spec `engines.md`
//! §3.4): `GET <base minus /codex>/wham/usage` with the access token and
//! `ChatGPT-Account-ID`; plan `plan_type`, windows `primary`/`secondary` and
//! `additional-<name>-primary/secondary`, reset credits. The account id and e-mail come
//! from the access token's claims when not configured.

use super::http::get_json;
use super::values::{bearer, instant, int, num, text};
use super::{QuotaError, Reading};
use base64::Engine as _;
use serde_json::Value;
use std::time::Instant;
use wuu_protocol::QuotaWindow;

/// Reads the subscription windows at `base` (`…/backend-api`) with `token` and the
/// account id, when known, before `deadline`.
pub(super) fn read(
    base: &str,
    token: &str,
    account_id: &Option<String>,
    deadline: Instant,
) -> Result<Reading, QuotaError> {
    let mut headers = vec![bearer(token)];
    if let Some(a) = account_id {
        headers.push(("chatgpt-account-id", a.clone()));
    }
    let v = get_json(&format!("{base}/wham/usage"), &headers, deadline)?;
    parse_chatgpt(&v, crate::util::now_ms())
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

fn jwt_claims(token: &str) -> Option<Value> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The e-mail in a ChatGPT access token's claims.
pub(super) fn jwt_email(token: &str) -> Option<String> {
    let c = jwt_claims(token)?;
    text(c.pointer("/https:~1~1api.openai.com~1profile/email")).or_else(|| text(c.get("email")))
}

/// The ChatGPT account id in an access token's claims.
pub(super) fn jwt_account_id(token: &str) -> Option<String> {
    let c = jwt_claims(token)?;
    text(c.pointer("/https:~1~1api.openai.com~1auth/chatgpt_account_id"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
