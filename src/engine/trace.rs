//! The conversation trace: a JSONL file per conversation under `$WUU_HOME/traces/`
//! (`<thread_id>.jsonl`) with one line per provider request, provider response, tool
//! call and turn settlement, with timings. Tool arguments are redacted; message bodies
//! are not written (only counts and hashes); every line passes the secret redactor and
//! has U+2028 / U+2029 / U+0085 escaped (`crate::util::escape_line_separators`). Its path
//! is `trace_path` (exec.md §5.3).

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An append-only trace file. Write failures are logged, never fatal.
pub struct Trace {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl Trace {
    /// Opens (appends to) the trace of `thread_id` under `home/traces`.
    pub fn open(home: &Path, thread_id: &str) -> Trace {
        let dir = home.join("traces");
        let path = dir.join(format!("{thread_id}.jsonl"));
        let file = std::fs::create_dir_all(&dir).ok().and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| log::warn!("trace {}: {e}", path.display()))
                .ok()
        });
        Trace { path, file }
    }

    /// Appends one record (a `ts_ms` field is added).
    pub fn write(&mut self, mut record: Value) {
        if let Value::Object(o) = &mut record {
            o.insert("ts_ms".into(), crate::util::now_ms().into());
        }
        if let Some(f) = self.file.as_mut() {
            let mut line = crate::util::escape_line_separators(crate::secrets::redact_vec(
                serde_json::to_vec(&record).unwrap_or_default(),
            ));
            line.push(b'\n');
            if let Err(e) = f.write_all(&line) {
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
