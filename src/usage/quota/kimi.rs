//! The Kimi Code plan quota adapter (`kimi-code`, spec `engines.md` §3.4): `GET
//! /coding/v1/usages` with the service's key; `limits[{window{duration, timeUnit},
//! detail{limit, used or remaining, resetTime}}]` → `limit-<n>`, `usage` → `usage` (7
//! days).

use super::http::get_json;
use super::values::{bearer, instant, int, num, text};
use super::{QuotaError, Reading};
use serde_json::Value;
use std::time::Instant;
use wuu_protocol::QuotaWindow;

/// Reads the plan windows at `base` with `key` before `deadline`.
pub(super) fn read(base: &str, key: &str, deadline: Instant) -> Result<Reading, QuotaError> {
    let v = get_json(
        &format!("{base}/coding/v1/usages"),
        &[bearer(key)],
        deadline,
    )?;
    parse_kimi(&v)
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
