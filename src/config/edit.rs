//! Edits of the user configuration file: read the JSON document, change it, validate the
//! result with the same strict rules as loading (unknown fields and out-of-range values
//! are refused, naming the field), and replace the file atomically.
//!
//! Atomic replace: the new text goes to a temporary file in the same directory
//! (`.<name>.<pid>.<n>.tmp`), is flushed to disk (`fsync`), keeps the old file's
//! permissions, and is renamed over the old file; the directory is then synced. A crash
//! leaves either the old or the new file, never a mix. [`WRITE_LOCK`] serializes edits
//! of this process (and the configuration watcher's reloads) so two edits never lose
//! each other's change.

use super::Config;
use serde_json::{Map, Value};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Held while this process edits a configuration file or reloads after a hand edit.
pub static WRITE_LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Why an edit did not happen. The file is unchanged in every case.
#[derive(Debug, Clone, PartialEq)]
pub enum EditError {
    /// The requested change is invalid (message names the field).
    Invalid(String),
    /// The current file cannot be edited (unreadable, not JSON, not an object) or the
    /// write failed; the message names the file.
    File(String),
}

/// Decodes a config document; the error is the path of the offending field (`.` for the
/// top level, `providers.x.base_url`) and serde's message. Every reading of a [`Config`]
/// goes through here, so its decoder is instantiated once.
pub fn parse_config(doc: Value) -> Result<Config, (String, String)> {
    serde_path_to_error::deserialize::<_, Config>(doc)
        .map_err(|e| (e.path().to_string(), e.into_inner().to_string()))
}

/// Reads `path` (missing → `{}`), lets `change` edit the top-level object, validates the
/// result as a [`Config`] (plus [`check_values`]) and writes it atomically. Returns the
/// document written. Hold [`WRITE_LOCK`] around the call and the reload that follows.
pub fn edit_file(
    path: &Path,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<(), EditError>,
) -> Result<Value, EditError> {
    let mut doc: Value = match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            EditError::File(format!(
                "the config file {} is not valid JSON ({e}); fix it first",
                path.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Object(Map::new()),
        Err(e) => {
            return Err(EditError::File(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let Some(obj) = doc.as_object_mut() else {
        return Err(EditError::File(format!(
            "the config file {} is not a JSON object",
            path.display()
        )));
    };
    change(obj)?;
    let parsed = parse_config(doc.clone()).map_err(|(at, e)| {
        EditError::Invalid(format!(
            "the change would make the config invalid: at `{at}`: {e}"
        ))
    })?;
    check_values(&parsed).map_err(|m| {
        EditError::Invalid(format!("the change would make the config invalid: {m}"))
    })?;
    let text = serde_json::to_string_pretty(&doc).expect("serialize config") + "\n";
    write_atomic(path, text.as_bytes())
        .map_err(|e| EditError::File(format!("cannot write {}: {e}", path.display())))?;
    Ok(doc)
}

/// Range checks that the type system does not express. `Err` names the field:
/// `agent.max_steps` ≥ 1, `agent.temperature` in 0 ..= 2, `agent.compact_threshold_pct`
/// in (0, 1], alias providers and models non-empty.
pub fn check_values(c: &Config) -> Result<(), String> {
    let Some(a) = &c.agent else { return Ok(()) };
    if a.max_steps == Some(0) {
        return Err("agent.max_steps: must be at least 1".into());
    }
    if let Some(t) = a.temperature {
        if !(0.0..=2.0).contains(&t) || !t.is_finite() {
            return Err(format!("agent.temperature: {t} is not in 0 ..= 2"));
        }
    }
    if let Some(p) = a.compact_threshold_pct {
        if !(p > 0.0 && p <= 1.0) {
            return Err(format!(
                "agent.compact_threshold_pct: {p} is not a fraction in (0, 1]"
            ));
        }
    }
    for (name, alias) in a.model_aliases.iter().flatten() {
        if name.trim().is_empty() {
            return Err("agent.model_aliases: an alias name is empty".into());
        }
        if alias.provider.trim().is_empty() || alias.model.trim().is_empty() {
            return Err(format!(
                "agent.model_aliases.{name}: provider and model are required"
            ));
        }
    }
    if let Some(v) = &a.verification_model {
        if v.provider.trim().is_empty() || v.model.trim().is_empty() {
            return Err("agent.verification_model: provider and model are required".into());
        }
    }
    Ok(())
}

/// Replaces `path` with `bytes` atomically (temporary file, fsync, rename, directory
/// sync). Creates the parent directory when missing. Keeps the old file's permissions.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.json".into());
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if let Ok(meta) = std::fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_validated_and_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"agent":{"max_steps":5}}"#).unwrap();
        edit_file(&path, |o| {
            o.insert("agent".into(), serde_json::json!({"max_steps": 9}));
            Ok(())
        })
        .unwrap();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["agent"]["max_steps"], 9);
        // An unknown field is refused and the file is untouched.
        let e = edit_file(&path, |o| {
            o.insert("agent".into(), serde_json::json!({"max_stepz": 1}));
            Ok(())
        })
        .unwrap_err();
        assert!(
            matches!(&e, EditError::Invalid(m) if m.contains("agent.max_stepz")),
            "{e:?}"
        );
        let e = edit_file(&path, |o| {
            o.insert("agent".into(), serde_json::json!({"temperature": 7.0}));
            Ok(())
        })
        .unwrap_err();
        assert!(
            matches!(&e, EditError::Invalid(m) if m.contains("temperature")),
            "{e:?}"
        );
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["agent"]["max_steps"], 9);
        // No temporary files are left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // A file that is not JSON is not overwritten.
        std::fs::write(&path, "{oops").unwrap();
        let e = edit_file(&path, |_| Ok(())).unwrap_err();
        assert!(matches!(e, EditError::File(_)));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{oops");
    }
}
