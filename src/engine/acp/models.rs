//! ACP model discovery (spec `engines.md` §1.6 "Discovery", §2.3 "ACP model
//! extraction"): a short-lived agent child is started, initialized and asked for one
//! session in the listing's directory (`session/new`, never prompted, never persisted);
//! the models it advertises become engine models, and the child is killed.

use super::{start, SESSION_TIMEOUT};
use crate::engine::codex::ChildSettings;
use serde_json::{json, Value};
use std::path::Path;
use wuu_protocol::EngineModelInfo;

/// Model discovery of catalogue engine `id` run from `binary` in `cwd`. `Ok(None)`: the
/// agent advertises no model catalogue (`unsupported`).
pub fn discover_models(
    id: &str,
    binary: &Path,
    cwd: &Path,
    settings: &ChildSettings,
) -> Result<Option<Vec<EngineModelInfo>>, String> {
    let (peer, _) = start(id, binary, cwd, settings, None)?;
    let answer = peer.request(
        "session/new",
        json!({"cwd": cwd.to_string_lossy(), "mcpServers": []}),
        SESSION_TIMEOUT,
    );
    peer.kill();
    let answer = answer.map_err(|e| format!("session/new: {e}"))?;
    Ok(models_of(&answer))
}

/// The `select` options of a config option (`options` flat, or grouped in
/// `[{group, name, options}]`): `(value, name, description)`.
fn choices(option: &Value) -> Vec<(String, Option<String>, Option<String>)> {
    let mut out = vec![];
    let mut push = |o: &Value| {
        let s = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
        if let Some(v) = s("value").filter(|v| !v.is_empty()) {
            out.push((v, s("name"), s("description")));
        }
    };
    for o in option
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match o.get("options").and_then(Value::as_array) {
            Some(group) => group.iter().for_each(&mut push),
            None => push(o),
        }
    }
    out
}

/// The engine models a `session/new` answer advertises: the `select` config option of
/// category `model` (choices → models, `currentValue` → `is_default`), else
/// `models.availableModels[{modelId, name}]` with `currentModelId`; the default model
/// gets the efforts of the `thought_level` option (its current value as default
/// effort). `None` when the answer has neither.
pub fn models_of(answer: &Value) -> Option<Vec<EngineModelInfo>> {
    let options: Vec<&Value> = answer
        .get("configOptions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let category = |c: &str| {
        options.iter().copied().find(|o| {
            o.get("category").and_then(Value::as_str) == Some(c)
                && o.get("type").and_then(Value::as_str).unwrap_or("select") == "select"
        })
    };
    let current = |o: &Value, k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
    let (mut models, default) = if let Some(m) = category("model") {
        let list: Vec<_> = choices(m)
            .into_iter()
            .map(|(id, name, _)| model(id, name))
            .collect();
        (list, current(m, "currentValue"))
    } else {
        let list: Vec<_> = answer
            .pointer("/models/availableModels")?
            .as_array()?
            .iter()
            .filter_map(|m| {
                let id = m.get("modelId").and_then(Value::as_str)?;
                let name = m.get("name").and_then(Value::as_str).map(str::to_owned);
                Some(model(id.to_owned(), name))
            })
            .collect();
        let default = answer
            .pointer("/models/currentModelId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        (list, default)
    };
    let efforts = category("thought_level").map(|o| {
        let values: Vec<String> = choices(o).into_iter().map(|(v, _, _)| v).collect();
        let cur = current(o, "currentValue").filter(|c| values.contains(c));
        (values, cur)
    });
    for m in &mut models {
        if default.as_deref() == Some(m.id.as_str()) {
            m.is_default = Some(true);
            if let Some((values, cur)) = efforts.clone().filter(|(v, _)| !v.is_empty()) {
                m.supported_efforts = Some(values);
                m.default_effort = cur;
            }
        }
    }
    Some(models)
}

fn model(id: String, name: Option<String>) -> EngineModelInfo {
    EngineModelInfo {
        id,
        display_name: name.filter(|n| !n.is_empty()),
        default_effort: None,
        supported_efforts: None,
        is_default: None,
        fast_mode: None,
        default_speed: None,
        resolved_model: None,
        options: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_come_from_the_model_option_else_the_model_list() {
        let a = json!({"sessionId": "s", "configOptions": [
            {"id": "model", "name": "Model", "category": "model", "type": "select",
             "currentValue": "b", "options": [
                {"group": "g", "name": "G", "options": [{"value": "a", "name": "A"}]},
                {"group": "h", "name": "H", "options": [{"value": "b", "name": "B"}]}]},
            {"id": "reasoning_effort", "name": "Effort", "category": "thought_level",
             "type": "select", "currentValue": "high",
             "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}]}],
            "models": {"availableModels": [{"modelId": "x", "name": "X"}], "currentModelId": "x"}});
        let m = models_of(&a).unwrap();
        let ids: Vec<&str> = m.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(m[0].is_default, None);
        assert_eq!(m[0].supported_efforts, None);
        assert_eq!(m[1].is_default, Some(true));
        assert_eq!(m[1].default_effort.as_deref(), Some("high"));
        assert_eq!(
            m[1].supported_efforts.as_deref(),
            Some(&["low".to_owned(), "high".to_owned()][..])
        );

        let a = json!({"sessionId": "s", "models": {"availableModels": [
            {"modelId": "default", "name": "Default"}, {"modelId": "opus", "name": "Opus"}],
            "currentModelId": "default"}});
        let m = models_of(&a).unwrap();
        assert_eq!(m[0].id, "default");
        assert_eq!(m[0].display_name.as_deref(), Some("Default"));
        assert_eq!(m[0].is_default, Some(true));
        assert_eq!(m[1].is_default, None);
        assert!(models_of(&json!({"sessionId": "s"})).is_none());
    }
}
