//! The Zhipu / Z.ai plan quota adapter (`zhipu`, spec `engines.md` §3.4): `GET
//! /api/monitor/usage/quota/limit` with `Authorization: <key>` (no `Bearer`); plan
//! `data.level`, `data.limits[{type, unit, number, percentage, nextResetTime}]` →
//! `<type>-<n>` (`TIME_LIMIT` is tool usage).

use super::http::get_json;
use super::values::{int, num, text};
use super::{QuotaError, Reading};
use serde_json::Value;
use std::time::Instant;
use wuu_protocol::QuotaWindow;

/// Reads the plan windows at `base` with `key` before `deadline`.
pub(super) fn read(base: &str, key: &str, deadline: Instant) -> Result<Reading, QuotaError> {
    let v = get_json(
        &format!("{base}/api/monitor/usage/quota/limit"),
        &[("authorization", key.to_owned())],
        deadline,
    )?;
    parse_zhipu(&v)
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
