//! The terminal `result` of a run (spec `exec.md` §3.3, §5): the exit code and error of
//! a settled run, the final message, the `--output-schema` verdict, the
//! `--output-last-message` file, and the error category/code of a failure.

use super::cancel::cancel_fail;
use super::events::{Event, RunResultEvent};
use super::exit::{code, status_of, Fail};
use super::run::Runner;
use super::schema;
use super::OUTPUT_GRACE;
use std::time::Instant;

impl Runner {
    /// The result of a terminal run (spec §3.3, §5.4–§5.6).
    pub(super) fn settle(&mut self, run: wuu_protocol::Run) -> Result<i32, Fail> {
        let (exit, error) = settlement(&run);
        self.settled = Some((run.status.clone(), run.error.clone()));
        let final_message = if self.proj.message.is_empty() {
            run.result
                .as_ref()
                .and_then(|r| r.final_message.clone())
                .unwrap_or_default()
        } else {
            self.proj.message.clone()
        };
        if let Some(t) = run.result.as_ref().and_then(|r| r.trace_path.clone()) {
            if !t.is_empty() {
                self.proj.trace_path = t;
            }
        }
        if self.proj.turn_id.is_empty() {
            if let Some(r) = &run.result {
                self.proj.turn_id = r.final_turn_id.clone();
            }
        }
        let mut result = self.result_base(exit, error, final_message.clone());
        if exit == code::OK {
            if let Some(schema) = self.schema.clone() {
                match schema::structured_result(&schema, &final_message) {
                    Ok(v) => result.structured_result = Some(v),
                    Err(e) => {
                        let e = format!("final answer does not match --output-schema: {e}");
                        self.settled = Some((
                            run.status.clone(),
                            Some(wuu_protocol::RunError {
                                code: "output_schema_mismatch".into(),
                                category: "invalid_output".into(),
                                message: e.clone(),
                                provider: None,
                                status_code: None,
                            }),
                        ));
                        let ev = Event::Error {
                            thread_id: self.proj.thread_id.clone(),
                            turn_id: self.proj.turn_id.clone(),
                            run_id: self.proj.run_id.clone(),
                            error: e.clone(),
                            retrying: false,
                        };
                        self.emit(ev).map_err(cancel_fail)?;
                        result = self.result_base(code::FAILED, e, final_message.clone());
                    }
                }
            }
        }
        if result.exit_code == code::OK {
            if let Some(path) = &self.opts.output_last_message {
                if let Err(e) = write_last_message(path, &final_message) {
                    result = self.result_base(code::FAILED, e, final_message);
                }
            }
        }
        let exit = result.exit_code;
        self.emit(Event::Result(result)).map_err(cancel_fail)?;
        Ok(exit)
    }

    pub(super) fn result_base(
        &self,
        exit: i32,
        error: String,
        final_message: String,
    ) -> RunResultEvent {
        let run_error = self.settled.as_ref().and_then(|(_, e)| e.as_ref());
        let (error_category, error_code) = if exit == code::OK {
            (String::new(), String::new())
        } else {
            let turn_failed = run_error.is_none_or(|e| e.code == "turn_failed")
                && !self.proj.turn_error_category.is_empty();
            if turn_failed {
                (
                    self.proj.turn_error_category.clone(),
                    self.proj.turn_error_code.clone(),
                )
            } else if let Some(e) = run_error.filter(|e| !e.category.is_empty()) {
                (e.category.clone(), e.code.clone())
            } else {
                let category = match exit {
                    code::INVALID_INPUT => "invalid_input",
                    code::PERMISSION_DENIED => "permission_denied",
                    code::TIMEOUT => "timeout",
                    code::INTERRUPTED => "cancelled",
                    code::PROTOCOL => "protocol",
                    code::PROVIDER => "provider",
                    code::TOOL => "tool",
                    code::CONFLICT => "conflict",
                    _ => "failed",
                };
                let code = match exit {
                    code::TIMEOUT => "timeout",
                    code::INTERRUPTED => "interrupted",
                    code::CONFLICT => "thread_busy",
                    _ => "",
                };
                (category.to_owned(), code.to_owned())
            }
        };
        let completed = self
            .settled
            .as_ref()
            .is_some_and(|(status, _)| status == "completed");
        RunResultEvent {
            error_category,
            error_code,
            final_message_partial: !completed || self.proj.truncated,
            usage: self.proj.usage_total(),
            status: status_of(exit).to_owned(),
            thread_id: self.proj.thread_id.clone(),
            turn_id: self.proj.turn_id.clone(),
            run_id: self.proj.run_id.clone(),
            final_message,
            trace_path: self.proj.trace_path.clone(),
            error,
            exit_code: exit,
            structured_result: None,
        }
    }

    /// A failure before the run existed (or while emitting its result): one `result`.
    pub(super) fn fail_result(&mut self, f: Fail) -> i32 {
        if self.out.result.is_some() {
            return f.code;
        }
        let limit = Instant::now() + OUTPUT_GRACE;
        let mut result = self.result_base(f.code, f.msg.clone(), self.proj.message.clone());
        if f.rpc_code == "store_busy" {
            result.error_category = "store_busy".to_owned();
            result.error_code = "store_busy".to_owned();
        }
        self.emit_bounded(Event::Result(result), limit);
        f.code
    }
}

/// Exit code and error text of a terminal run (spec §3.3).
pub(super) fn settlement(run: &wuu_protocol::Run) -> (i32, String) {
    let msg = run
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .filter(|m| !m.is_empty());
    match run.status.as_str() {
        "completed" => (code::OK, String::new()),
        "timed_out" => (
            code::TIMEOUT,
            msg.unwrap_or_else(|| "execution run timed out".into()),
        ),
        "interrupted" | "cancelled" => (
            code::INTERRUPTED,
            msg.unwrap_or_else(|| "execution run interrupted".into()),
        ),
        status => {
            let from_run = run.result.as_ref().map(|r| r.exit_code).unwrap_or(0);
            let exit = if from_run != 0 {
                from_run
            } else {
                let e = run.error.as_ref();
                crate::session::run::exit_code(
                    status,
                    e.map(|e| e.category.as_str()),
                    e.map(|e| e.code.as_str()),
                )
            };
            let exit = if exit == code::OK { code::FAILED } else { exit };
            (exit, msg.unwrap_or_else(|| "execution run failed".into()))
        }
    }
}

/// Writes the final message exactly (no newline added) to `path` (relative to the
/// process cwd), creating parent directories.
pub(super) fn write_last_message(path: &std::path::Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("--output-last-message {}: {e}", path.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("--output-last-message {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settlement_maps_runs() {
        let mut run = wuu_protocol::Run {
            status: "failed".into(),
            ..Default::default()
        };
        run.error = Some(wuu_protocol::RunError {
            category: "auth".into(),
            message: "401".into(),
            ..Default::default()
        });
        assert_eq!(settlement(&run), (7, "401".into()));
        run.status = "timed_out".into();
        assert_eq!(settlement(&run).0, 4);
        run.status = "completed".into();
        assert_eq!(settlement(&run).0, 0);
    }
}
