//! Where exec's events go (spec `exec.md` §4.1, §6, §7.4): JSON lines or the human
//! rendering, queued to the stdout [`Writer`] with bounded waits, and the final flush
//! that decides whether output problems change the exit code.

use super::cancel::Ctl;
use super::events::{Event, RunResultEvent};
use super::exit::code;
use super::human;
use super::writer::{Blocked, Writer};
use super::OUTPUT_GRACE;
use crossbeam_channel::Receiver;
use std::time::Instant;

/// Where events go.
pub(super) struct Out {
    pub(super) writer: Writer,
    pub(super) human: Option<human::Human>,
    pub(super) result: Option<RunResultEvent>,
    /// Lines could not be queued any more (deadline or signal while the consumer
    /// stalled): later events are dropped and the exit does not wait for output.
    pub(super) stuck: bool,
}

impl Out {
    /// Emits one event. `cancel`/`limit` bound the wait for room in the output queue.
    pub(super) fn emit(
        &mut self,
        ev: &Event,
        cancel: &Receiver<i32>,
        limit: Option<Instant>,
    ) -> Result<(), Blocked> {
        if let Event::Result(r) = ev {
            self.result = Some(r.clone());
        }
        if self.stuck {
            return Ok(());
        }
        match &mut self.human {
            Some(h) => {
                h.on_event(ev, cancel, limit)?;
                if let Event::Result(r) = ev {
                    if r.status == "completed" && !r.final_message.is_empty() {
                        // Progress first: on a shared terminal the answer comes last.
                        h.sync(cancel, limit)?;
                        // A terminal on stdout gets the text without escape or
                        // control sequences (a model's answer must not retitle the
                        // window or write the clipboard); a pipe gets it as it is.
                        let mut text = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                            super::painter::clean_text(&r.final_message).into_bytes()
                        } else {
                            r.final_message.clone().into_bytes()
                        };
                        text.push(b'\n');
                        return self.send(text, cancel, limit);
                    }
                }
                Ok(())
            }
            None => {
                let mut line = ev.to_line();
                line.push(b'\n');
                self.send(line, cancel, limit)
            }
        }
    }

    pub(super) fn send(
        &mut self,
        bytes: Vec<u8>,
        cancel: &Receiver<i32>,
        limit: Option<Instant>,
    ) -> Result<(), Blocked> {
        let r = self.writer.send(bytes, cancel, limit);
        if r.is_err() {
            self.stuck = true;
        }
        r
    }

    /// Flushes the queued output (bounded: [`OUTPUT_GRACE`] after a cancellation, else
    /// the deadline), prints `error:` for failures, and returns the final exit code (a
    /// failed write is a protocol failure; unconsumed output a timeout or interrupt).
    pub(super) fn finish(self, ctl: &Ctl, mut exit: i32) -> i32 {
        let Out {
            writer,
            human,
            result,
            stuck,
        } = self;
        let limit = match (ctl.cancelled, ctl.deadline) {
            (Some(_), _) => Some(Instant::now() + OUTPUT_GRACE),
            (None, Some(d)) => Some(d.max(Instant::now() + OUTPUT_GRACE)),
            (None, None) => None,
        };
        // Progress ends (its live line erased) before any `error:` line is printed.
        if let Some(h) = human {
            if !h.finish(limit) {
                log::warn!("stderr did not take the progress output in time");
            }
        }
        let (flushed, write_error) = if stuck {
            (false, writer.error())
        } else {
            writer.finish(&ctl.signals, limit)
        };
        let mut printed = false;
        if let Some(e) = write_error {
            if ctl.cancelled.is_none() {
                exit = code::PROTOCOL;
            }
            eprintln!("error: {}", crate::secrets::redact(&e.to_string()));
            printed = true;
        } else if !flushed && ctl.cancelled.is_none() && exit == code::OK {
            let timed_out = ctl.deadline.is_some_and(|d| Instant::now() >= d);
            exit = if timed_out {
                code::TIMEOUT
            } else {
                code::INTERRUPTED
            };
            eprintln!("error: output was not consumed before the run ended");
            printed = true;
        }
        if exit != code::OK && !printed {
            let msg = result
                .as_ref()
                .filter(|r| r.exit_code == exit && !r.error.is_empty())
                .map(|r| r.error.clone())
                .unwrap_or_else(|| match exit {
                    code::TIMEOUT => "timeout".to_owned(),
                    code::INTERRUPTED => "interrupted".to_owned(),
                    _ => format!("run ended with exit code {exit}"),
                });
            eprintln!("error: {}", crate::secrets::redact(&msg));
        }
        exit
    }
}
