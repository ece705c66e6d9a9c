//! Request context: the system prompt (base prompt, `AGENTS.md` files from the workspace
//! root down to the cwd, configured instructions), and the `request_context` /
//! `provider_state` diagnostics emitted as `turn/event` (spec `exec.md` §4.3 rows 25–26).

use crate::provider::chat::{ChatMessage, Tools};
use crate::util::short_hash;
use serde_json::{json, Value};
use std::path::Path;

/// The built-in engine's base instructions.
pub const BASE_PROMPT: &str = "You are wuu, a coding agent working inside a software \
workspace. Use the tools to inspect files, make focused edits and run commands; prefer \
small verifiable steps. Paths are relative to the working directory unless absolute. \
When the task is done, answer with a short summary of what you changed and how you \
verified it.";

/// One section of the system prompt.
#[derive(Debug, Clone)]
pub struct Section {
    /// Stable key (`base`, `environment`, `agents_md:<path>`, `instructions`).
    pub key: String,
    /// True when the text does not change between turns.
    pub is_static: bool,
    /// The text.
    pub text: String,
}

/// Largest `AGENTS.md` read, in bytes; a larger one is skipped (with a warning).
pub const MAX_AGENTS_MD_BYTES: u64 = 256 * 1024;

/// `AGENTS.md` files from `root` down to `cwd` (inclusive), outermost first, as
/// `(absolute path, text)`.
///
/// Each file is read through [`crate::beneath::Root`] opened on `root`: symlinks
/// are followed only while they stay inside the workspace (no magic links such as
/// `/proc/self/environ` or `/proc/self/fd/0`), only regular files are read (a FIFO or a
/// device is refused before any read could block), at most [`MAX_AGENTS_MD_BYTES`].
/// A refused file is skipped with a `log::warn!` line naming it and why (never its
/// content); a missing one silently. Text is decoded lossily as UTF-8 and passed through
/// [`crate::secrets::redact`] (it goes to the provider, like command output).
pub fn agents_files(root: &Path, cwd: &Path) -> Vec<(String, String)> {
    use crate::beneath::{rel_beneath, Root};
    let mut dirs = vec![];
    let mut cur = Some(cwd);
    while let Some(d) = cur {
        dirs.push(d.to_path_buf());
        if d == root {
            break;
        }
        cur = d.parent().filter(|p| p.starts_with(root));
    }
    dirs.reverse();
    let ws = match Root::open(root) {
        Ok(ws) => ws,
        Err(e) => {
            log::warn!(
                "AGENTS.md: cannot open the workspace {}: {e}",
                root.display()
            );
            return vec![];
        }
    };
    dirs.iter()
        .filter_map(|d| {
            let p = d.join("AGENTS.md");
            let rel = rel_beneath(root, &p)?;
            match ws.read_capped(&rel, MAX_AGENTS_MD_BYTES) {
                Ok(bytes) => Some((
                    p.to_string_lossy().into_owned(),
                    crate::secrets::redact(&String::from_utf8_lossy(&bytes)).into_owned(),
                )),
                Err(e) if e.is_not_found() => None,
                Err(e) => {
                    log::warn!("{}: not read as instructions: {e}", p.display());
                    None
                }
            }
        })
        .collect()
}

/// Builds the system prompt sections.
pub fn system_sections(
    root: &Path,
    cwd: &Path,
    permission_mode: &str,
    instructions: Option<&str>,
) -> Vec<Section> {
    let mut out = vec![
        Section {
            key: "base".into(),
            is_static: true,
            text: BASE_PROMPT.into(),
        },
        Section {
            key: "environment".into(),
            is_static: true,
            text: format!(
                "Workspace root: {}\nWorking directory: {}\nPermission mode: {permission_mode}{}",
                root.display(),
                cwd.display(),
                match permission_mode {
                    "read_only" => " (no file writes; commands run read-only in a sandbox)",
                    "standard" => " (writes only inside the workspace)",
                    _ => "",
                }
            ),
        },
    ];
    for (path, text) in agents_files(root, cwd) {
        out.push(Section {
            key: format!("agents_md:{path}"),
            is_static: true,
            text: format!("# Instructions from {path}\n\n{text}"),
        });
    }
    if let Some(i) = instructions.filter(|i| !i.trim().is_empty()) {
        out.push(Section {
            key: "instructions".into(),
            is_static: true,
            text: format!("# User instructions\n\n{i}"),
        });
    }
    out
}

/// Whether a request of `system`, `messages` and `tools` reaches `limit` estimated
/// tokens ([`super::compaction::estimate_request`]).
pub fn over(system: &str, messages: &[ChatMessage], tools: &Tools, limit: u64) -> bool {
    super::compaction::estimate_request(system, messages, tools) >= limit
}

/// Joins sections into the system prompt.
pub fn system_prompt(sections: &[Section]) -> String {
    sections
        .iter()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The `request_context` diagnostic of one provider step.
pub fn request_context(
    step: u32,
    sections: &[Section],
    system: &str,
    messages: &[ChatMessage],
    turn_start_index: usize,
    tools: &Tools,
    prompt_cache_key: &str,
) -> Value {
    let tool_json = tools.plain_json();
    let msg_bytes: Vec<Vec<u8>> = messages
        .iter()
        .map(|m| serde_json::to_vec(m).unwrap_or_default())
        .collect();
    let prefix: Vec<u8> = msg_bytes[..turn_start_index.min(msg_bytes.len())].concat();
    let all: Vec<u8> = msg_bytes.concat();
    let mut kinds = serde_json::Map::new();
    for m in messages {
        let k = serde_json::to_value(m.role).unwrap_or_default();
        let k = k.as_str().unwrap_or("other").to_owned();
        let n = kinds.get(&k).and_then(Value::as_u64).unwrap_or(0);
        kinds.insert(k, json!(n + 1));
    }
    json!({
        "type": "request_context",
        "step_index": step,
        "transient_messages": 0,
        "content_bytes": system.len() + all.len() + tool_json.len(),
        "block_kinds": kinds.keys().cloned().collect::<Vec<_>>(),
        "block_kind_counts": kinds,
        "message_count": messages.len(),
        "system_messages": 1,
        "hidden_messages": 0,
        "tool_count": tools.len(),
        "stable_prefix": 1,
        "turn_prefix": turn_start_index,
        "dynamic_context_bytes": 0,
        "system_bytes": system.len(),
        "stable_prefix_bytes": system.len() + tool_json.len(),
        "turn_prefix_bytes": prefix.len(),
        "message_bytes": all.len(),
        "tool_schema_bytes": tool_json.len(),
        "loadable_tool_count": 0,
        "loadable_tool_schema_bytes": 0,
        "loadable_tool_surface_hash": "",
        "system_hash": stable_hash(&[system.as_bytes()]),
        "stable_prefix_hash": stable_hash(&[system.as_bytes(), &tool_json]),
        "turn_prefix_hash": short_hash(&prefix),
        "tool_surface_hash": stable_hash(&[&tool_json]),
        "prompt_cache_key": prompt_cache_key,
        "system_sections": sections.iter().map(|s| json!({
            "key": s.key, "static": s.is_static, "bytes": s.text.len(),
            "hash": stable_hash(&[s.text.as_bytes()]),
        })).collect::<Vec<_>>(),
    })
}

/// [`short_hash`] of the concatenation of `parts`, a text every request of a workspace
/// and mode sends alike (the system prompt and its sections, the tool schemas, the two
/// together): the last [`STABLE_KEPT`] texts hashed and their hashes are kept, so a text
/// seen before costs a comparison instead of a SHA-256 digest of its bytes (tool schemas
/// are tens of KiB).
fn stable_hash(parts: &[&[u8]]) -> String {
    static SEEN: parking_lot::Mutex<Vec<(Vec<u8>, String)>> = parking_lot::const_mutex(Vec::new());
    let equal = |b: &[u8]| {
        b.len() == parts.iter().map(|p| p.len()).sum::<usize>() && {
            let mut rest = b;
            parts.iter().all(|p| match rest.split_at_checked(p.len()) {
                Some((head, tail)) => {
                    rest = tail;
                    head == *p
                }
                None => false,
            })
        }
    };
    if let Some((_, hash)) = SEEN.lock().iter().find(|(b, _)| equal(b)) {
        return hash.clone();
    }
    let bytes = parts.concat();
    let hash = short_hash(&bytes);
    let mut seen = SEEN.lock();
    if seen.len() >= STABLE_KEPT {
        seen.remove(0);
    }
    seen.push((bytes, hash.clone()));
    hash
}

/// How many parts [`stable_hash`] keeps: a few workspaces' system prompts and sections
/// and the tool schemas of a few permission modes.
const STABLE_KEPT: usize = 32;

/// The `provider_state` diagnostic of one provider step.
pub fn provider_state(step: u32, provider: &str, protocol: &str, input_items: usize) -> Value {
    json!({
        "type": "provider_state",
        "step_index": step,
        "provider": provider,
        "protocol": protocol,
        "transport": if protocol == "replay" { "replay" } else { "sse" },
        "replay_mode": "full_history",
        "previous_response_id_used": false,
        "connection_reused": false,
        "diagnostic": "",
        "transport_failure_phase": "",
        "fallback_transport": "",
        "events_emitted": false,
        "fallback_active": false,
        "fallback_reason": "",
        "fallback_pin_status": "",
        "fallback_retry_after_ms": 0,
        "fallback_ttl_ms": 0,
        "input_items": input_items,
        "full_input_items": input_items,
        "delta_input_items": 0,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn agents_files_root_to_cwd() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(root.join("a/b/AGENTS.md"), "deep rules").unwrap();
        std::fs::write(root.join("a/AGENTS.md"), "mid rules").unwrap();
        let files = super::agents_files(&root, &root.join("a/b"));
        let texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts, vec!["root rules", "mid rules", "deep rules"]);
    }

    #[test]
    fn stable_hashes_are_the_digests_of_the_bytes_kept_or_not() {
        use crate::util::short_hash;
        let parts: Vec<Vec<u8>> = (0..super::STABLE_KEPT + 8)
            .map(|i| format!("tool schemas of mode {i}").repeat(100).into_bytes())
            .collect();
        // Seen once, seen again while kept, and again after being pushed out.
        for _ in 0..2 {
            for p in &parts {
                assert_eq!(super::stable_hash(&[p]), short_hash(p));
                assert_eq!(super::stable_hash(&[p]), short_hash(p));
                let (a, b) = p.split_at(p.len() / 3);
                assert_eq!(super::stable_hash(&[a, b]), short_hash(p));
                assert_eq!(super::stable_hash(&[a, b, &[]]), short_hash(p));
            }
        }
        assert_ne!(
            super::stable_hash(&[&parts[0]]),
            super::stable_hash(&[&parts[1]])
        );
        // Parts whose concatenation differs from a kept text by a split point only.
        let (a, b) = parts[2].split_at(10);
        assert_eq!(super::stable_hash(&[a, b]), short_hash(&parts[2]));
        assert_ne!(super::stable_hash(&[a]), short_hash(&parts[2]));
    }
}
