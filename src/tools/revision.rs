//! `workspace_revision` and file hashing.
//!
//! `workspace_revision` is a per-process, per-workspace string that changes with every
//! successful write made by the file tools (`write_file`, `edit_file`, `apply_patch`).
//! It is the lowercase hex SHA-256 of
//!
//! ```text
//! "wuu-workspace-revision\n" <root> "\n" <counter> "\n"
//! then, for each file the tools changed in this workspace in this process, sorted by path:
//! <path> "\0" <current sha256 hex, or "" when deleted> "\n"
//! ```
//!
//! where `<counter>` counts tool calls that wrote in this workspace since the process
//! started. It is not persisted: after a restart the counter and the file set start
//! empty again. Changes made outside the tools (e.g. by `bash`) are not tracked.

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard};

#[derive(Default)]
struct RevState {
    counter: u64,
    files: BTreeMap<PathBuf, String>,
}

static REVISIONS: LazyLock<Mutex<HashMap<PathBuf, RevState>>> = LazyLock::new(Default::default);
static WRITE_LOCK: Mutex<()> = Mutex::new(());

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `sha256_hex` of optional content; `""` when absent.
pub(crate) fn sha_opt(bytes: Option<&[u8]>) -> String {
    bytes.map(sha256_hex).unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Serializes the read-modify-write of the file tools within this process, so the
/// reported old/new hashes describe one consistent change.
pub(crate) fn write_lock() -> MutexGuard<'static, ()> {
    WRITE_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records one tool call's changes (`(path, new sha or "")`) in workspace `root` and
/// returns the new `workspace_revision`.
pub(crate) fn record(root: &Path, changes: &[(PathBuf, String)]) -> String {
    let mut all = REVISIONS.lock().unwrap_or_else(|e| e.into_inner());
    let state = all.entry(root.to_path_buf()).or_default();
    state.counter += 1;
    for (path, sha) in changes {
        state.files.insert(path.clone(), sha.clone());
    }
    let mut h = Sha256::new();
    h.update(b"wuu-workspace-revision\n");
    h.update(root.to_string_lossy().as_bytes());
    h.update(format!("\n{}\n", state.counter).as_bytes());
    for (path, sha) in &state.files {
        h.update(path.to_string_lossy().as_bytes());
        h.update(b"\0");
        h.update(sha.as_bytes());
        h.update(b"\n");
    }
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_of_empty_and_absent() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(sha_opt(None), "");
    }

    #[test]
    fn revision_changes_with_every_record() {
        let root = PathBuf::from("/nonexistent/wuu-rev-test");
        let a = record(&root, &[(root.join("a"), "x".into())]);
        let b = record(&root, &[(root.join("a"), "x".into())]);
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }
}
