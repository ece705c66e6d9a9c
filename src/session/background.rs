//! Background-process exits reach the conversation's model (README § "Background
//! processes"): a natural exit of a process started by the model becomes input of its
//! conversation, stored like a user's: a steer of the running turn (taken at its next
//! model step; if the turn ends first, it starts the next turn), or, when the
//! conversation is idle, a queued input that wakes it into a continuation turn. The
//! processes themselves live in [`crate::tools::background`].

use super::{Host, Session, SessionMsg};
use crate::tools::background::ExitNotice;
use crate::util::now_ms;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wuu_protocol::*;
use wuu_store::{input_mode, input_state, InputRow};

/// Ids of stored inputs that report a process exit start with this.
pub const INPUT_PREFIX: &str = "bgexit_";

/// Connects the host's background table to the sessions (once, at startup).
pub fn install(host: &Arc<Host>) {
    let weak = Arc::downgrade(host);
    host.background.on_exit(move |n: ExitNotice| {
        let Some(h) = weak.upgrade() else { return };
        if h.is_closing() {
            return;
        }
        let thread_id = n.thread_id.clone();
        h.registry.dispatch(
            &h,
            &thread_id,
            SessionMsg::Call(Box::new(move |s| {
                if let Ok(s) = s {
                    deliver(s, &n);
                }
            })),
        );
    });
}

/// The model's text for an exit.
fn text(n: &ExitNotice) -> String {
    let p = &n.process;
    let how = match (&p.exit_code, &p.last_error) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(e)) => format!("ended ({e})"),
        _ => "ended".to_string(),
    };
    let tail = n.tail.trim_end();
    format!(
        "<process_notification>\nBackground process {} {how}: {}\nLast output:\n{}\n[{} bytes of output in total; read it with the process tool, action \"read\", offset_bytes 0]\n</process_notification>",
        p.id,
        p.command,
        if tail.is_empty() { "(no output)" } else { tail },
        p.output_bytes
    )
}

/// Stores the exit as input of `s` (see the module docs).
fn deliver(s: &mut Session, n: &ExitNotice) {
    let running = s.running.load(Ordering::SeqCst);
    let now = now_ms();
    let row = InputRow {
        thread_id: s.id.clone(),
        id: format!("{INPUT_PREFIX}{}", n.process.id),
        mode: if running {
            input_mode::STEER
        } else {
            input_mode::QUEUE
        }
        .into(),
        state: input_state::PENDING.into(),
        body: json!({"prompt": text(n), "images": [], "files": [], "content_parts": null,
                     "active_document": null}),
        created_at_ms: now,
        updated_at_ms: now,
    };
    if s.input_get(&row.id).is_some() {
        return;
    }
    if let Err((_, m)) = s.input_put(row.clone()) {
        log::warn!("background exit of {} not delivered: {m}", n.process.id);
        return;
    }
    let message = super::inputs::message_of(&row);
    if running {
        let _ = s.shared.outbox.notify(&TurnSteered { message });
        s.steer_signal = true;
    } else {
        s.drain_queue();
    }
}
