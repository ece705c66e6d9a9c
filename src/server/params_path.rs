//! Where in a request's params a decoding error lies (spec `app-server.md` §1.2: a
//! wrong-typed or unknown param is answered `invalid params: PATH: problem`). The params
//! are decoded by plain serde (`wuu_protocol::decode_params`), whose message says what is
//! wrong but not where; the path is found here, on the error path only, by validating
//! the params against the method's schema from the embedded bundle
//! ([`super::schema::bundle`]) and taking the first failure's location. A tracking
//! deserializer would find it too, at the cost of a second decoder per params type.

use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The location of the first schema failure of `params` for `method`, written as
/// serde_path_to_error does (`input[0].text`, `thread_id`); `None` when the params fit the
/// schema, the failure is at the top level, or the method has no schema in the bundle.
pub fn params_path(method: &str, params: &Value) -> Option<String> {
    let validator = validator(method)?;
    let empty = Value::Object(Default::default());
    let params = if params.is_null() { &empty } else { params };
    let first = validator.iter_errors(params).next()?;
    let path = pointer_path(params, first.instance_path().as_str());
    (!path.is_empty()).then_some(path)
}

/// The compiled params schema of `method`, compiled on its first invalid request and kept
/// (a few milliseconds each: the schema carries every definition of the bundle).
fn validator(method: &str) -> Option<Arc<jsonschema::Validator>> {
    static BUNDLE: OnceLock<Option<Value>> = OnceLock::new();
    static COMPILED: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = OnceLock::new();
    let compiled = COMPILED.get_or_init(Default::default);
    if let Some(v) = compiled.lock().get(method) {
        return Some(v.clone());
    }
    let bundle = BUNDLE
        .get_or_init(|| super::schema::bundle().ok())
        .as_ref()?;
    let schema = wuu_protocol::schema::standalone(bundle, "methods", method, "params")?;
    let v = Arc::new(jsonschema::validator_for(&schema).ok()?);
    compiled.lock().insert(method.to_owned(), v.clone());
    Some(v)
}

/// A JSON pointer into `doc` (`/input/0/text`) as a dotted path (`input[0].text`): a
/// segment that indexes an array is written `[n]`, any other is a key.
fn pointer_path(doc: &Value, pointer: &str) -> String {
    let mut out = String::new();
    let mut at = Some(doc);
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        match at {
            Some(Value::Array(items)) if seg.parse::<usize>().is_ok() => {
                out.push_str(&format!("[{seg}]"));
                at = seg.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            _ => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&seg);
                at = at.and_then(|v| v.get(&seg));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_a_wrong_typed_field() {
        let p = params_path("thread/rename", &json!({"thread_id": 1, "title": "x"}));
        assert_eq!(p.as_deref(), Some("thread_id"));
    }

    #[test]
    fn names_a_nested_field_with_indexes() {
        let doc = json!({"input": [{"a": 1}, {"text": {"x": [0, 5]}}]});
        assert_eq!(
            pointer_path(&doc, "/input/1/text/x/1"),
            "input[1].text.x[1]"
        );
        assert_eq!(pointer_path(&json!({"a/b": {"0": 1}}), "/a~1b/0"), "a/b.0");
    }

    #[test]
    fn params_that_fit_or_an_unknown_method_have_no_path() {
        let ok = json!({"thread_id": "t", "title": "x"});
        assert_eq!(params_path("thread/rename", &ok), None);
        assert_eq!(params_path("nope/nope", &json!({"a": 1})), None);
    }
}
