//! Human (text) mode of `wuu exec` (spec `exec.md` §6): progress on stderr, the final
//! message on stdout (through the [`super::writer::Writer`]).
//!
//! When stderr is a terminal, streamed text is shown on one live status line that is
//! cleared before any other progress line and at the end.

use super::events::Event;
use std::io::Write;

/// Widest live line, in characters.
const LIVE_WIDTH: usize = 100;

/// Renders events as progress lines on stderr.
pub struct Human {
    live: bool,
    live_shown: bool,
    tail: String,
}

impl Human {
    /// A renderer; `live` enables the streaming status line (stderr is a terminal).
    pub fn new(live: bool) -> Human {
        Human {
            live,
            live_shown: false,
            tail: String::new(),
        }
    }

    fn line(&mut self, text: &str) {
        self.clear_live();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{text}");
    }

    /// Clears the live line if one is shown.
    pub fn clear_live(&mut self) {
        if self.live_shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.live_shown = false;
        }
    }

    fn live_delta(&mut self, delta: &str) {
        if !self.live {
            return;
        }
        self.tail.push_str(delta);
        let flat: String = self
            .tail
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let n = flat.chars().count();
        let shown: String = flat.chars().skip(n.saturating_sub(LIVE_WIDTH)).collect();
        if n > LIVE_WIDTH * 4 {
            self.tail = shown.clone();
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K\x1b[2m… {shown}\x1b[0m");
        let _ = err.flush();
        self.live_shown = true;
    }

    /// Renders one event (events without a human form are ignored).
    pub fn on_event(&mut self, ev: &Event) {
        match ev {
            Event::SessionConfigured {
                provider,
                model,
                workspace_root,
                permissions,
                ..
            } => {
                self.line(&format!("provider: {provider}"));
                self.line(&format!("model: {model}"));
                self.line(&format!("workspace: {workspace_root}"));
                if let Some(m) = permissions.get("mode").and_then(|m| m.as_str()) {
                    if !m.is_empty() {
                        self.line(&format!("permission_mode: {m}"));
                    }
                }
            }
            Event::ThreadStarted(t) | Event::ThreadResumed(t) | Event::ThreadForked(t) => {
                self.line(&format!("thread_id: {}", t.thread_id));
            }
            Event::TurnStarted { turn_id, .. } => {
                self.tail.clear();
                self.line(&format!("turn_id: {turn_id}"));
            }
            Event::AgentMessageDelta { delta, .. } => self.live_delta(delta),
            Event::AgentMessageFinal { message, .. } => {
                self.tail.clear();
                self.live_delta(message);
            }
            Event::ToolStarted { name, .. } if !name.is_empty() => {
                self.tail.clear();
                self.line(&format!("tool_started: {name}"));
            }
            Event::ToolCompleted {
                name,
                status,
                error,
                ..
            } => {
                if status == "failed" && !error.is_empty() {
                    let first = error.lines().next().unwrap_or("");
                    self.line(&format!("tool_completed: {name} (failed: {first})"));
                } else {
                    self.line(&format!("tool_completed: {name}"));
                }
            }
            Event::FileChanged(fc) => {
                let action = if fc.action.is_empty() {
                    "changed"
                } else {
                    &fc.action
                };
                self.line(&format!("file_changed: {} ({action})", fc.path));
            }
            Event::StreamReconnect {
                status,
                retry_count,
                max_retries,
                message,
                ..
            } if status == "retrying" => {
                self.tail.clear();
                let first = message.lines().next().unwrap_or("");
                self.line(&format!(
                    "stream_reconnect: retry {retry_count}/{max_retries} ({first})"
                ));
            }
            Event::Error { error, .. } => {
                self.line(&format!("structured_output_validation_failed: {error}"));
            }
            Event::Result(r) => {
                self.clear_live();
                if r.status == "completed" && !r.trace_path.is_empty() {
                    self.line(&format!("trace_path: {}", r.trace_path));
                }
            }
            _ => {}
        }
    }
}
