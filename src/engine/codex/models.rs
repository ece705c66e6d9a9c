//! Codex model discovery (spec `engines.md` §1.4 "Model catalogue", §2.3): a
//! short-lived host pages through `model/list`, and each entry becomes an engine model.

use super::host::start;
use super::ChildSettings;
use super::CALL_TIMEOUT;
use serde_json::{json, Value};
use std::path::Path;
use wuu_protocol::EngineModelInfo;

/// Model discovery: a short-lived host in `cwd`, `model/list` paged by `nextCursor`.
pub fn discover_models(
    binary: &Path,
    cwd: &Path,
    settings: &ChildSettings,
) -> Result<Vec<EngineModelInfo>, String> {
    let host = start(binary, cwd, settings)?;
    let mut out = vec![];
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    loop {
        let page = host
            .peer
            .request(
                "model/list",
                json!({"cursor": cursor, "limit": 100}),
                CALL_TIMEOUT,
            )
            .map_err(|e| format!("model/list: {e}"))?;
        for m in page
            .get("data")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if m.get("hidden").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(info) = model_info(m) {
                out.push(info);
            }
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => {
                if !seen.insert(c.to_owned()) {
                    return Err("model/list repeated a cursor".into());
                }
                cursor = Some(c.to_owned());
            }
            _ => return Ok(out),
        }
    }
}

/// One `model/list` entry → an engine model (`engines.md` §1.4 "Model catalogue").
pub fn model_info(m: &Value) -> Option<EngineModelInfo> {
    let s = |k: &str| m.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let id = s("model").or_else(|| s("id"))?.to_owned();
    let efforts: Vec<String> = m
        .get("supportedReasoningEfforts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            e.get("reasoningEffort")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
                .map(str::to_owned)
        })
        .collect();
    let tiers: Vec<&str> = m
        .get("serviceTiers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("id").and_then(Value::as_str).or_else(|| t.as_str()))
        .collect();
    let fast = if tiers.is_empty() {
        m.get("additionalSpeedTiers")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|t| t.as_str() == Some("fast")))
    } else {
        tiers.iter().any(|t| *t == "fast" || *t == "priority")
    };
    let default_fast = matches!(s("defaultServiceTier"), Some("fast" | "priority"));
    Some(EngineModelInfo {
        id,
        display_name: s("displayName").map(str::to_owned),
        default_effort: s("defaultReasoningEffort").map(str::to_owned),
        supported_efforts: (!efforts.is_empty()).then_some(efforts),
        is_default: m.get("isDefault").and_then(Value::as_bool).filter(|d| *d),
        fast_mode: fast.then_some(true),
        default_speed: Some(if default_fast { "fast" } else { "standard" }.into()),
        resolved_model: None,
        options: None,
    })
}
