//! What the three request builders share (spec `providers.md` §1.1, §6.2): the tool
//! parameter schema as sent, the parts of a structured-output schema, and whether replay
//! state (reasoning, item ids) of an earlier answer may go back to this provider and
//! model.

use serde_json::Value;

/// A tool's parameter schema as sent: a `{"type":"object"}` schema lacking `properties`
/// gets `"properties":{}` (some providers reject it otherwise; §1.1, what wuu does); a
/// null schema becomes an empty object schema.
pub(crate) fn normalize_schema(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Value::Object(m) = &mut s {
        if m.get("type").and_then(Value::as_str) == Some("object") && !m.contains_key("properties")
        {
            m.insert("properties".into(), Value::Object(Default::default()));
        }
    }
    if s.is_null() {
        return serde_json::json!({"type":"object","properties":{}});
    }
    s
}

/// `(name, schema, strict)` of
/// [`ChatRequest::output_schema`](super::chat::ChatRequest::output_schema): either
/// `{name, schema, strict?}` or a bare JSON Schema (named `output`).
pub(crate) fn output_schema_parts(v: &Value) -> (String, Value, bool) {
    match v.get("schema") {
        Some(schema) if schema.is_object() => (
            v.get("name")
                .and_then(Value::as_str)
                .unwrap_or("output")
                .to_string(),
            schema.clone(),
            v.get("strict").and_then(Value::as_bool).unwrap_or(false),
        ),
        _ => ("output".to_string(), v.clone(), false),
    }
}

/// Whether replay state (reasoning, item ids) of `provider`/`model` may be sent to
/// `provider_id`/`req_model`.
pub(crate) fn same_origin(provider: &str, model: &str, provider_id: &str, req_model: &str) -> bool {
    provider == provider_id && model == req_model
}
