//! The external Codex engine's quota adapter (`codex-cli`, spec `engines.md` §3.4):
//! JSON-RPC `account/rateLimits/read {}` on the shared Codex host
//! ([`super::RateLimitReader`]); windows `<limitId>:primary/secondary`, plan
//! `planType`, account `accountId`.

use super::values::{instant, int, num, text};
use super::{account_id, QuotaError, RateLimitReader, Reading};
use serde_json::Value;
use std::time::Instant;
use wuu_protocol::{QuotaAccount, QuotaWindow};

/// Asks the Codex host through `reader` before `deadline`.
pub(super) fn read(reader: &dyn RateLimitReader, deadline: Instant) -> Result<Reading, QuotaError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
