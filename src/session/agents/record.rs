//! The durable record of one worker (`$WUU_HOME/agents/<root>/<agent>.json`, written by
//! temp file + rename before every announcement), its full result file
//! (`…/<agent>/result.md`) and the bounded preview (spec `subagents.md` §5.1).

use crate::util::rfc3339;
use serde::{Deserialize, Serialize};
use std::path::Path;
use wuu_protocol::{Agent, AgentMailboxMessage};

/// Results up to this many bytes are passed inline unchanged.
pub const INLINE_LIMIT: usize = 4000;
const HEAD: usize = 3000;
const TAIL: usize = 1000;
const MARKER: &str = "[agent result preview truncated; read result_path for the full output]";

/// The preview of a result: the text itself when it has at most [`INLINE_LIMIT`]
/// bytes, else its first 3000 bytes, a marker and its last 1000 bytes (cut on UTF-8
/// boundaries); and whether it was cut.
pub fn preview_of(text: &str) -> (String, bool) {
    if text.len() <= INLINE_LIMIT {
        return (text.to_owned(), false);
    }
    let mut head = HEAD;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - TAIL;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let (h, _) = text.split_at(head);
    let (_, t) = text.split_at(tail);
    (format!("{h}\n\n{MARKER}\n\n{t}"), true)
}

/// One worker, as this process knows it and as it is stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Rec {
    /// Worker id (= child thread id).
    pub id: String,
    /// The root conversation.
    pub root_id: String,
    /// Direct parent (the root).
    pub parent_id: String,
    /// `general-purpose` | `fork`.
    pub agent_type: String,
    /// Task name.
    pub task_name: String,
    /// Profile name given at spawn.
    pub agent_profile: String,
    /// `/root/<task>`.
    pub agent_path: String,
    /// Human summary.
    pub description: String,
    /// Status (see [`super::is_terminal`]).
    pub status: String,
    /// The task as given at spawn.
    pub prompt: String,
    /// Messages sent while it was queued (appended to its first prompt).
    pub mailbox: Vec<String>,
    /// `inplace` | `worktree`.
    pub isolation: String,
    /// The isolation worktree.
    pub worktree_path: Option<String>,
    /// The repository the worktree was made from.
    pub repo: Option<String>,
    /// Provider and model of its turns.
    pub provider: String,
    /// Model.
    pub model: String,
    /// Preview of the result.
    pub result: String,
    /// Full result file (absolute; empty when there is none).
    pub result_path: String,
    /// Full result size.
    pub result_bytes: u64,
    /// Whether the preview was cut.
    pub result_truncated: bool,
    /// Error text.
    pub error: String,
    /// Cumulative tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache read tokens.
    pub cache_read_tokens: u64,
    /// Creation (queue order), Unix ms.
    pub created_at_ms: i64,
    /// Launch, Unix ms.
    pub started_at_ms: i64,
    /// Terminal time, Unix ms.
    pub completed_at_ms: Option<i64>,
    /// Revivals so far (each terminal state of a generation is one result).
    pub generation: u32,
    /// The current generation reached its terminal state.
    pub generation_done: bool,
    /// Delivery id of the current terminal result (`agent_result_<id>_<generation>`).
    pub result_id: String,
    /// The last result id handed to the root or consumed by a foreground spawn.
    pub delivered: String,
    /// Closed by `close_agent`: its results are not delivered.
    pub suppress: bool,
    /// Finished while the tree was frozen: delivered at the next user turn.
    pub held: bool,
    /// A stop was asked for; a launch that has not begun does not begin.
    pub cancel_requested: bool,
    /// Whether a foreground spawn waits for it (its result is consumed there).
    pub foreground: bool,
    /// The structured report of `agent_report`, if any.
    pub report: Option<serde_json::Value>,
}

impl Rec {
    /// Whether the current terminal result still has to reach the root.
    pub fn undelivered(&self) -> bool {
        super::is_terminal(&self.status)
            && !self.suppress
            && !self.foreground
            && !self.result_id.is_empty()
            && self.delivered != self.result_id
    }

    /// The result text from an `agent_report` summary (with its lists), if one was made.
    pub fn report_text(&self) -> Option<String> {
        let r = self.report.as_ref()?;
        let mut out = r.get("summary")?.as_str()?.to_owned();
        for key in [
            "work_done",
            "changed_files",
            "blockers",
            "risks",
            "next_steps",
            "artifacts",
        ] {
            if let Some(items) = r.get(key).and_then(|v| v.as_array()) {
                let lines: Vec<&str> = items.iter().filter_map(|v| v.as_str()).collect();
                if !lines.is_empty() {
                    out.push_str(&format!("\n\n{key}:\n- {}", lines.join("\n- ")));
                }
            }
        }
        Some(out)
    }

    /// The wire `Agent`.
    pub fn wire(&self) -> Agent {
        Agent {
            id: self.id.clone(),
            agent_type: self.agent_type.clone(),
            task_name: self.task_name.clone(),
            agent_profile: self.agent_profile.clone(),
            agent_path: self.agent_path.clone(),
            parent_id: self.parent_id.clone(),
            description: self.description.clone(),
            status: self.status.clone(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            isolation: self.isolation.clone(),
            worktree_path: self.worktree_path.clone(),
            result: self.result.clone(),
            result_path: self.result_path.clone(),
            result_bytes: self.result_bytes,
            result_truncated: self.result_truncated,
            error: self.error.clone(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_creation_tokens: self.cache_creation_tokens,
            cache_read_tokens: self.cache_read_tokens,
            started_at: rfc3339(if self.started_at_ms > 0 {
                self.started_at_ms
            } else {
                self.created_at_ms
            }),
            completed_at: self.completed_at_ms.map(rfc3339),
        }
    }

    /// The completion notice of the current terminal state.
    pub fn mailbox_message(&self) -> AgentMailboxMessage {
        AgentMailboxMessage {
            message_type: "agent_result".into(),
            result_id: self.result_id.clone(),
            agent_id: self.id.clone(),
            agent_path: self.agent_path.clone(),
            parent_id: self.parent_id.clone(),
            task_name: self.task_name.clone(),
            agent_type: self.agent_type.clone(),
            description: self.description.clone(),
            status: self.status.clone(),
            result: self.result.clone(),
            result_path: self.result_path.clone(),
            result_bytes: self.result_bytes,
            result_truncated: self.result_truncated,
            error: self.error.clone(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        }
    }
}

/// Writes `rec` to `<dir>/<id>.json` (temp file, fsync, rename). Failures are logged:
/// the in-memory tree goes on.
pub fn save(dir: &Path, rec: &Rec) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let name = crate::util::name_tail(&rec.id, 120);
        let tmp = dir.join(format!(".{name}.json.tmp"));
        let bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(format!("{name}.json")))
    };
    if let Err(e) = write() {
        log::error!("storing worker record {}: {e}", rec.id);
    }
}

/// Every record under `dir` (unreadable ones are skipped with a warning).
pub fn load_all(dir: &Path) -> Vec<Rec> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out = vec![];
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Rec>(&b).map_err(|e| e.to_string()))
        {
            Ok(r) if !r.id.is_empty() => out.push(r),
            Ok(_) => log::warn!("worker record {} has no id", path.display()),
            Err(e) => log::warn!("skipping worker record {}: {e}", path.display()),
        }
    }
    out
}

/// Writes a non-empty result to `<dir>/<id>/result.md`; its absolute path.
pub fn write_result(dir: &Path, id: &str, text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let d = dir.join(crate::util::name_tail(id, 120));
    let path = d.join("result.md");
    let res = std::fs::create_dir_all(&d).and_then(|_| std::fs::write(&path, text));
    match res {
        Ok(()) => Some(path.to_string_lossy().into_owned()),
        Err(e) => {
            log::error!("writing the result of worker {id}: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_keeps_short_and_cuts_long_on_char_boundaries() {
        assert_eq!(preview_of("abc"), ("abc".into(), false));
        let long = "é".repeat(3000); // 6000 bytes
        let (p, cut) = preview_of(&long);
        assert!(cut);
        assert!(p.contains(MARKER));
        assert!(p.len() < long.len());
        assert!(p.starts_with("é"));
        assert!(p.ends_with("é"));
    }
}
