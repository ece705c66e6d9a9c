//! One Claude Code turn (spec `engines.md` §1.5): the child, its one reader thread
//! (stdout lines → parsed JSON values on a bounded channel) and the turn loop, one
//! `select!` over those lines and the host's controls (interrupt, answers) until the
//! `result` line; then the child's input ends and it exits (or is killed). A child
//! that exits before its `result`, or stays silent past [`START_TIMEOUT`], fails the
//! turn with its last stderr line; an interrupt is the `interrupt` control request,
//! then a kill after [`INTERRUPT_GRACE`].

use super::projection::TurnMap;
use super::{
    args, child_env, failure, ChildSettings, EXIT_GRACE, INTERRUPT_GRACE, MAX_LINE, START_TIMEOUT,
};
use crate::engine::child::Process;
use crate::engine::{Control, EventSink, Outcome, TurnRequest, UserInput};
use crossbeam_channel::{bounded, never, select, Receiver, Sender};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::{Duration, Instant};

/// Capacity of the reader → turn channel, in lines (the reader blocks when full).
const LINE_CAPACITY: usize = 256;

/// What the reader thread hands the turn loop.
enum Line {
    /// One parsed stdout line.
    Json(Value),
    /// Stdout closed (the child exited or closed it).
    Closed,
}

/// The `user` line of a turn's input: text, plus one base64 `image` block per image.
pub fn user_line(input: &UserInput) -> Value {
    let content = if input.images.is_empty() {
        json!(input.prompt)
    } else {
        let mut blocks = vec![];
        if !input.prompt.is_empty() {
            blocks.push(json!({"type": "text", "text": input.prompt}));
        }
        for img in &input.images {
            let (media, data) = match img.data.strip_prefix("data:") {
                Some(rest) => match rest.split_once(";base64,") {
                    Some((m, d)) => (m.to_owned(), d.to_owned()),
                    None => continue,
                },
                None => (
                    img.media_type
                        .clone()
                        .unwrap_or_else(|| "image/png".to_owned()),
                    img.data.clone(),
                ),
            };
            blocks.push(json!({"type": "image",
                "source": {"type": "base64", "media_type": media, "data": data}}));
        }
        Value::Array(blocks)
    };
    json!({"type": "user", "message": {"role": "user", "content": content},
           "parent_tool_use_id": null})
}

/// Runs one turn of `req` on a new child of `binary`.
pub(super) fn run(
    binary: &Path,
    settings: &ChildSettings,
    req: TurnRequest,
    sink: &EventSink,
    controls: &Receiver<Control>,
) -> Outcome {
    if req.input.prompt.trim().is_empty() && req.input.images.is_empty() {
        return failure(
            "a Claude Code turn needs a user message (continuing without one is not supported)",
            "engine_input_missing",
        );
    }
    let cwd = if req.cwd.is_dir() {
        req.cwd.clone()
    } else {
        req.workspace_root.clone()
    };
    let (proc, stdout) = match Process::spawn(
        "claude",
        binary,
        &args(&req),
        &cwd,
        &child_env(binary, settings),
        settings.ledger.as_deref(),
    ) {
        Ok(p) => p,
        Err(e) => return failure(e, "engine_unavailable"),
    };
    let (tx, lines) = bounded(LINE_CAPACITY);
    let spawned = crate::util::spawn("claude-reader".into(), move || read_loop(stdout, &tx));
    if let Err(e) = spawned {
        return failure(
            format!("cannot start the claude reader: {e}"),
            "engine_unavailable",
        );
    }
    let line = serde_json::to_vec(&user_line(&req.input)).unwrap_or_default();
    if let Err(e) = proc.write_line(&line) {
        return exited(&proc, &format!("claude did not take the prompt: {e}"));
    }
    let mut map = TurnMap::new(sink, &proc, &req);
    let outcome = drive(&proc, &mut map, &lines, controls);
    map.finish();
    // Nothing more is read: a reader blocked on a full channel lets go.
    drop(lines);
    // The turn is over: input ends, the child exits (or is ended with its tree).
    proc.close_stdin();
    if !proc.wait_exit(EXIT_GRACE) {
        log::info!("claude did not exit after its turn; ending it");
    }
    proc.kill();
    outcome
}

fn drive(
    proc: &Process,
    map: &mut TurnMap,
    lines: &Receiver<Line>,
    controls: &Receiver<Control>,
) -> Outcome {
    let started = Instant::now();
    let mut interrupted_at: Option<Instant> = None;
    let mut controls_gone = false;
    loop {
        let ctl = if controls_gone {
            never()
        } else {
            controls.clone()
        };
        let wait = match interrupted_at {
            Some(t) => INTERRUPT_GRACE.saturating_sub(t.elapsed()),
            None if !map.heard => START_TIMEOUT.saturating_sub(started.elapsed()),
            None => Duration::from_secs(3600),
        };
        select! {
            recv(lines) -> l => match l {
                Ok(Line::Json(v)) => {
                    if let Some(end) = map.line(&v) {
                        return if interrupted_at.is_some() { Outcome::Interrupted } else { end };
                    }
                }
                Ok(Line::Closed) | Err(_) => {
                    if interrupted_at.is_some() {
                        return Outcome::Interrupted;
                    }
                    return exited(proc, "claude exited before completing the turn");
                }
            },
            recv(ctl) -> c => match c {
                Ok(Control::Interrupt) | Err(_) => {
                    if c.is_err() {
                        controls_gone = true;
                    }
                    if interrupted_at.is_none() {
                        interrupted_at = Some(Instant::now());
                        let req = json!({"type": "control_request",
                            "request_id": format!("wuu-interrupt-{}", uuid::Uuid::new_v4().simple()),
                            "request": {"subtype": "interrupt"}});
                        let line = serde_json::to_vec(&req).unwrap_or_default();
                        if proc.write_line(&line).is_err() {
                            return Outcome::Interrupted;
                        }
                        // Questions still open can no longer be answered.
                        map.revoke_all();
                    }
                }
                Ok(Control::Steer(_)) => {}
                Ok(Control::Answer { request_id, answer }) => map.answer(&request_id, answer),
            },
            default(wait) => {
                if interrupted_at.is_some() {
                    log::info!("claude did not stop within {} s of the interrupt; killing it", INTERRUPT_GRACE.as_secs());
                    return Outcome::Interrupted;
                }
                if !map.heard {
                    return exited(proc, &format!("claude said nothing within {} s of its start", START_TIMEOUT.as_secs()));
                }
            }
        }
    }
}

/// The turn failed because the child ended (or never started talking): `what`, with
/// its last stderr line.
fn exited(proc: &Process, what: &str) -> Outcome {
    // Give the stderr thread a moment to collect the last words.
    proc.wait_exit(Duration::from_millis(300));
    let message = match proc.last_stderr_line() {
        Some(line) => format!("{what}: {line}"),
        None => what.to_owned(),
    };
    failure(message, "engine_exited")
}

fn read_loop(stdout: impl Read, tx: &Sender<Line>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if n > MAX_LINE && buf.last() != Some(&b'\n') {
            log::warn!("claude sent a line over {MAX_LINE} bytes; skipped");
            let mut rest = Vec::new();
            if reader.read_until(b'\n', &mut rest).is_err() {
                break;
            }
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) => {
                // Streamed pieces are not logged: a secret split across deltas would pass
                // the log redactor piece by piece.
                if v.get("type").and_then(Value::as_str) == Some("stream_event") {
                    log::trace!("claude -> stream_event ({} bytes)", line.len());
                } else {
                    log::debug!("claude -> {}", crate::util::clip(line, 2000));
                }
                if tx.send(Line::Json(v)).is_err() {
                    return;
                }
            }
            Err(e) => log::warn!(
                "claude sent a line that is not JSON ({} bytes): {e}",
                line.len()
            ),
        }
    }
    let _ = tx.send(Line::Closed);
}
