//! JSON Schema export of every method's params and result and every notification's
//! params (`wuu app-server generate-json-schema --out DIR`).
//!
//! Output: one bundle document, draft 2020-12, with `$defs` holding every type and a
//! top-level `methods` / `notifications` map from wire name to `{params, result}`
//! references, and `reverse_methods` (server → client requests, e.g. `browser/cdp`)
//! with the same `{params, result}` shape. Tests validate real traffic against it.

use crate::methods::METHODS;
use crate::notifications::NOTIFICATIONS;
use crate::{ErrorObject, RequestId};
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

/// Builds the bundle: `{"$schema", "$defs", "error", "error_codes" (every code a
/// response's `error.code` can carry), "id", "methods": {name: {params, result}},
/// "notifications": {name: {params}}, "reverse_methods": {name: {params, result}}}` where params/result are `$ref`s into `$defs`.
pub fn bundle() -> Value {
    let mut gen = SchemaSettings::draft2020_12().into_generator();
    let mut methods = Map::new();
    for m in METHODS {
        let params = (m.params_schema)(&mut gen);
        let result = (m.result_schema)(&mut gen);
        methods.insert(
            m.name.to_owned(),
            json!({"params": params.to_value(), "result": result.to_value()}),
        );
    }
    let mut notifications = Map::new();
    for n in NOTIFICATIONS {
        let params = (n.params_schema)(&mut gen);
        notifications.insert(n.name.to_owned(), json!({"params": params.to_value()}));
    }
    let mut reverse = Map::new();
    for r in crate::browser::REVERSE_METHODS {
        let params = (r.params_schema)(&mut gen);
        let result = (r.result_schema)(&mut gen);
        reverse.insert(
            r.name.to_owned(),
            json!({"params": params.to_value(), "result": result.to_value()}),
        );
    }
    let error = gen.subschema_for::<ErrorObject>().to_value();
    let error_codes = gen.subschema_for::<crate::ErrorCode>().to_value();
    let id = gen.subschema_for::<RequestId>().to_value();
    let defs: Map<String, Value> = gen
        .take_definitions(true)
        .into_iter()
        .collect::<Map<String, Value>>();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "wuu-app-server/v0.1",
        "$defs": defs,
        "error": error,
        "error_codes": error_codes,
        "id": id,
        "methods": methods,
        "notifications": notifications,
        "reverse_methods": reverse,
    })
}

/// A standalone schema for one method's params (`kind` = `params`|`result`) or one
/// notification (`kind` = `params`), with the bundle's `$defs` inlined so it validates
/// on its own. `None` when the name is unknown.
pub fn standalone(bundle: &Value, family: &str, name: &str, kind: &str) -> Option<Value> {
    let mut s = bundle.get(family)?.get(name)?.get(kind)?.clone();
    if let Value::Object(o) = &mut s {
        o.insert("$defs".into(), bundle["$defs"].clone());
        o.insert("$schema".into(), bundle["$schema"].clone());
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bundle_has_every_method() {
        let b = super::bundle();
        for m in crate::METHODS {
            assert!(b["methods"][m.name]["params"].is_object(), "{}", m.name);
        }
        assert!(b["notifications"]["turn/started"]["params"].is_object());
    }
}
