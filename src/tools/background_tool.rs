//! The model's face of background processes: `bash {run_in_background: true}` and the
//! `process` tool (`list`, `read`, `write`, `stop`); the processes themselves live in
//! [`super::background`].

use super::args::{BashArgs, ProcessArgs};
use super::background::{StartSpec, Summary};
use super::{Cancel, Fail, ToolContext, ToolOutcome};
use serde_json::json;
use std::time::{Duration, Instant};

/// Default bytes of one `read` by the model.
const MODEL_READ_BYTES: usize = 16 * 1024;

fn table(ctx: &ToolContext) -> Result<&super::background::Processes, Fail> {
    ctx.background.as_deref().ok_or_else(|| {
        Fail::Error("background processes are not available in this conversation".into())
    })
}

fn line(s: &Summary) -> String {
    let end = match (&s.exit_code, &s.last_error) {
        (Some(c), _) => format!(", exit code {c}"),
        (None, Some(e)) => format!(", {e}"),
        _ => String::new(),
    };
    format!(
        "{} [{}{}] pid {} — {} ({} bytes of output)",
        s.id, s.status, end, s.pid, s.command, s.output_bytes
    )
}

/// `bash` with `run_in_background`: starts the process and returns at once.
pub(crate) fn start(
    a: &BashArgs,
    ctx: &ToolContext,
    dir: &std::path::Path,
) -> Result<ToolOutcome, Fail> {
    let t = table(ctx)?;
    let s = t.start(
        StartSpec {
            command: &a.command,
            dir,
            tty: a.tty,
        },
        ctx,
        ctx.max_background,
    )?;
    Ok(ToolOutcome::ok(
        format!(
            "Started background process {} (pid {}{}). It keeps running while you work; \
             read its output with the process tool (action \"read\", process_id \"{}\"), \
             send input with action \"write\", end it with action \"stop\". You will be \
             told when it exits.\n",
            s.id,
            s.pid,
            if s.tty { ", on a terminal" } else { "" },
            s.id
        ),
        json!({"process_id": s.id, "pid": s.pid, "background": true, "tty": s.tty}),
    ))
}

/// The `process` tool.
pub(crate) fn run(a: ProcessArgs, ctx: &ToolContext, cancel: &Cancel) -> Result<ToolOutcome, Fail> {
    let t = table(ctx)?;
    let id = || {
        a.process_id
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Fail::Error(format!("process {}: process_id is required", a.action)))
    };
    match a.action.trim() {
        "list" => {
            let all = t.list();
            let text = if all.is_empty() {
                "No background processes in this conversation.\n".to_string()
            } else {
                all.iter().map(|s| line(s) + "\n").collect()
            };
            Ok(ToolOutcome::ok(
                text,
                json!({"action": "list", "processes": all}),
            ))
        }
        "read" => {
            let id = id()?;
            let max = a.max_bytes.unwrap_or(MODEL_READ_BYTES);
            // Waits in short slices so an interrupt is seen.
            let wait = a.wait_ms.unwrap_or(0).min(super::background::MAX_WAIT_MS);
            let deadline = Instant::now() + Duration::from_millis(wait);
            let (s, r) = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let slice = left.min(Duration::from_millis(200)).as_millis() as u64;
                let (s, r) = t
                    .read(id, a.offset_bytes, max, slice, true)
                    .map_err(Fail::Error)?;
                if !r.output.is_empty()
                    || s.status != "running"
                    || left.is_zero()
                    || cancel.is_set()
                {
                    break (s, r);
                }
            };
            let mut text = format!("{}\n", line(&s));
            if r.truncated {
                text.push_str(&format!(
                    "[earlier output skipped; showing bytes {}..{} of {}; read from offset_bytes to see more]\n",
                    r.start_offset, r.end_offset, r.total_bytes
                ));
            }
            if r.output.is_empty() {
                text.push_str("(no new output)\n");
            } else {
                text.push_str(&r.output);
                if !r.output.ends_with('\n') {
                    text.push('\n');
                }
            }
            Ok(ToolOutcome::ok(
                text,
                json!({"action": "read", "process": s, "start_offset": r.start_offset,
                       "end_offset": r.end_offset, "total_bytes": r.total_bytes,
                       "truncated": r.truncated}),
            ))
        }
        "write" => {
            let id = id()?;
            let input = a.input.as_deref().unwrap_or("");
            let (s, n) = t.write(id, input.as_bytes()).map_err(Fail::Error)?;
            Ok(ToolOutcome::ok(
                format!("Wrote {n} bytes to {}.\n", s.id),
                json!({"action": "write", "process": s, "bytes_written": n}),
            ))
        }
        "stop" => {
            let id = id()?;
            let s = t.stop(id).map_err(Fail::Error)?;
            Ok(ToolOutcome::ok(
                format!("{}\n", line(&s)),
                json!({"action": "stop", "process": s}),
            ))
        }
        other => Err(Fail::Error(format!(
            "unknown process action {other:?}; use list, read, write or stop"
        ))),
    }
}
