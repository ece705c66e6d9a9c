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

/// `body` serialized exactly as `serde_json::to_vec` serializes it with the entries of
/// `raw` added, each `(key, json)` an entry whose value is the JSON text `json` (written
/// as is), placed among the object's entries in key order, the order serde_json keeps a
/// map in. `raw` is sorted by key and its keys are not in `body`. A body that is not an
/// object is serialized alone.
pub(crate) fn to_vec_with(body: &Value, raw: &[(&str, &[u8])]) -> Vec<u8> {
    let Value::Object(map) = body else {
        return serde_json::to_vec(body).unwrap_or_default();
    };
    let mut out = Vec::with_capacity(
        raw.iter()
            .map(|(k, j)| k.len() + j.len() + 4)
            .sum::<usize>()
            + 1024,
    );
    out.push(b'{');
    let mut raw = raw.iter().peekable();
    let mut first = true;
    let mut key = |out: &mut Vec<u8>, k: &str| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
    };
    for (k, v) in map {
        while let Some((rk, json)) = raw.next_if(|(rk, _)| *rk < k.as_str()) {
            key(&mut out, rk);
            out.extend_from_slice(json);
        }
        key(&mut out, k);
        let _ = serde_json::to_writer(&mut out, v);
    }
    for (rk, json) in raw {
        key(&mut out, rk);
        out.extend_from_slice(json);
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn raw_entries_land_where_serde_json_puts_their_keys() {
        let body = json!({"b": 1, "model": "m\u{2028}\"x", "z": [1, {"y": null}], "é": true});
        for key in ["a", "c", "tools", "zz", "\u{ff}"] {
            let value = json!([{"name": "t", "parameters": {"type": "object"}}]);
            let mut whole = body.clone();
            whole[key] = value.clone();
            let text = serde_json::to_vec(&value).unwrap();
            assert_eq!(
                String::from_utf8(super::to_vec_with(&body, &[(key, &text)])).unwrap(),
                serde_json::to_string(&whole).unwrap(),
                "{key}"
            );
        }
        assert_eq!(
            super::to_vec_with(&json!({}), &[("tools", b"[]")]),
            b"{\"tools\":[]}"
        );
        assert_eq!(super::to_vec_with(&json!({"a": 1}), &[]), b"{\"a\":1}");
    }
}
