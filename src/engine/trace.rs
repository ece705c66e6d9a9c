//! The conversation trace: a JSONL file per conversation under `$WUU_HOME/traces/`
//! (`<thread_id>.jsonl`) with one line per provider request, provider response, tool
//! call and turn settlement, with timings. Tool arguments are redacted; message bodies
//! are not written (only counts and hashes); every line passes the secret redactor and
//! has U+2028 / U+2029 / U+0085 escaped (`crate::util::escape_line_separators`). Its path
//! is `trace_path` (exec.md §5.3).

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An append-only trace file. Write failures are logged, never fatal. A clone shares
/// the open file (the host and the engine of a turn write to one handle).
#[derive(Debug, Clone)]
pub struct Trace {
    path: PathBuf,
    file: Option<Arc<std::fs::File>>,
}

impl Trace {
    /// Opens (appends to) the trace of `thread_id` under `home/traces`, creating the
    /// directory when it is missing.
    pub fn open(home: &Path, thread_id: &str) -> Trace {
        let dir = home.join("traces");
        let path = dir.join(format!("{thread_id}.jsonl"));
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
        };
        // The directory exists but for a conversation's first turn on a new home: it is
        // created only when the open says it is missing.
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&dir).and_then(|_| open())
            }
            other => other,
        };
        let file = file
            .map_err(|e| log::warn!("trace {}: {e}", path.display()))
            .ok()
            .map(Arc::new);
        Trace { path, file }
    }

    /// Appends one record (a `ts_ms` field is added).
    pub fn write(&mut self, mut record: Value) {
        if let Value::Object(o) = &mut record {
            o.insert("ts_ms".into(), crate::util::now_ms().into());
        }
        if let Some(f) = &self.file {
            let mut line = crate::util::escape_line_separators(crate::secrets::redact_vec(
                serde_json::to_vec(&record).unwrap_or_default(),
            ));
            line.push(b'\n');
            if let Err(e) = (&**f).write_all(&line) {
                log::warn!("trace {}: {e}", self.path.display());
                self.file = None;
            }
        }
    }

    /// The path, when the file could be opened.
    pub fn path_string(&self) -> Option<String> {
        self.file
            .as_ref()
            .map(|_| self.path.to_string_lossy().into_owned())
    }
}
