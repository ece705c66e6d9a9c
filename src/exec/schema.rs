//! `--output-schema` (spec `exec.md` §5.5): the schema is read and checked locally
//! before anything is sent, and the final answer of a completed run is parsed and
//! validated against it for `structured_result`.

use super::cli::InvalidInput;
use serde_json::Value;

/// Largest `--output-schema` file, in bytes.
pub const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// Reads and compiles an output schema (JSON Schema, default dialect 2020-12). Errors:
/// unreadable, not a regular file (a FIFO or device is refused before any read could
/// block), larger than [`MAX_SCHEMA_BYTES`], not JSON, not a valid schema (with the
/// JSON pointer of the problem and the rule it breaks:
/// [`crate::session::run::check_schema`]).
pub fn load_schema(path: &std::path::Path) -> Result<Value, InvalidInput> {
    let bytes = crate::beneath::read_regular(path, MAX_SCHEMA_BYTES)
        .map_err(|e| InvalidInput(format!("--output-schema {}: {e}", path.display())))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| InvalidInput(format!("--output-schema {}: not JSON: {e}", path.display())))?;
    if !(v.is_object() || v.is_boolean()) {
        return Err(InvalidInput(format!(
            "--output-schema {}: a schema must be an object or a boolean",
            path.display()
        )));
    }
    crate::session::run::check_schema(&v).map_err(|e| {
        InvalidInput(format!(
            "--output-schema {}: invalid schema {e}",
            path.display()
        ))
    })?;
    Ok(v)
}

/// The structured result of `final_message` under `schema`: the parsed JSON value, or
/// why it does not parse or match ([`crate::session::run::parse_structured`],
/// [`crate::session::run::schema_errors`]).
pub(super) fn structured_result(schema: &Value, final_message: &str) -> Result<Value, String> {
    crate::session::run::parse_structured(final_message)
        .and_then(|v| crate::session::run::schema_errors(schema, &v).map(|_| v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_checked_locally() {
        let d = tempfile::tempdir().unwrap();
        let good = d.path().join("good.json");
        std::fs::write(&good, r#"{"type":"object","required":["a"]}"#).unwrap();
        assert!(load_schema(&good).is_ok());
        let bad = d.path().join("bad.json");
        std::fs::write(&bad, r#"{"type":"no-such-type"}"#).unwrap();
        assert!(load_schema(&bad).is_err());
        let notjson = d.path().join("x.json");
        std::fs::write(&notjson, "{").unwrap();
        assert!(load_schema(&notjson).is_err());
        assert!(load_schema(&d.path().join("missing.json")).is_err());
    }
}
