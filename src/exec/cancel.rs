//! Cancellation (spec `exec.md` §7): SIGINT/SIGTERM and the `--timeout` deadline
//! ([`Ctl`]), watched by every wait of the main thread, and the interrupt of a live run
//! when one of them (or a protocol failure) ends the wait: ask the server to interrupt,
//! let the run settle within a grace, then emit the terminal events.

use super::events::Event;
use super::exit::{code, Fail};
use super::run::Runner;
use super::{INTERRUPT_GRACE, OUTPUT_GRACE};
use crossbeam_channel::{bounded, Receiver};
use serde_json::json;
use std::time::Instant;

/// Why the main thread stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cancel {
    Timeout,
    Signal,
}

impl Cancel {
    pub(super) fn reason(self) -> &'static str {
        match self {
            Cancel::Timeout => "timeout",
            Cancel::Signal => "interrupted",
        }
    }
    pub(super) fn code(self) -> i32 {
        match self {
            Cancel::Timeout => code::TIMEOUT,
            Cancel::Signal => code::INTERRUPTED,
        }
    }
}

/// Signals and the deadline.
pub(super) struct Ctl {
    pub(super) signals: Receiver<i32>,
    pub(super) deadline: Option<Instant>,
    /// Set once a cancellation was taken.
    pub(super) cancelled: Option<Cancel>,
}

impl Ctl {
    pub(super) fn timer(&self) -> Receiver<Instant> {
        match self.deadline {
            Some(t) => crossbeam_channel::at(t),
            None => crossbeam_channel::never(),
        }
    }
}

/// Installs SIGINT/SIGTERM handling: the first signal is delivered on the returned
/// channel; a second one exits the process at once with code 5 (no `result`).
pub(super) fn install_signals() -> Receiver<i32> {
    let (tx, rx) = bounded::<i32>(1);
    match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) {
        Ok(mut signals) => {
            let _ = crate::util::spawn("wuu-exec-signals".into(), move || {
                let mut seen = 0;
                for sig in signals.forever() {
                    seen += 1;
                    if seen == 1 {
                        let _ = tx.try_send(sig);
                    } else {
                        eprintln!("error: second signal {sig}: exiting without a result");
                        std::process::exit(code::INTERRUPTED);
                    }
                }
            });
        }
        Err(e) => log::warn!("cannot install signal handlers: {e}"),
    }
    rx
}

/// Reads stdin to the end on a helper thread, giving up on a signal or the deadline
/// (the reader is abandoned; the process exits without waiting for EOF).
pub(super) fn read_stdin(ctl: &mut Ctl) -> Result<String, Cancel> {
    let (tx, rx) = bounded::<Vec<u8>>(1);
    let _ = crate::util::spawn("wuu-exec-stdin".into(), move || {
        let mut buf = vec![];
        let _ = std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf);
        let _ = tx.send(buf);
    });
    let timer = ctl.timer();
    crossbeam_channel::select! {
        recv(rx) -> b => Ok(String::from_utf8_lossy(&b.unwrap_or_default()).into_owned()),
        recv(ctl.signals) -> _ => Err(Cancel::Signal),
        recv(timer) -> _ => Err(Cancel::Timeout),
    }
}

pub(super) fn cancel_fail(c: Cancel) -> Fail {
    Fail::new(c.code(), c.reason())
}

impl Runner {
    /// Asks the server to interrupt the run and waits (bounded) for it to settle. With
    /// `project`, notifications are still projected (except the interrupted turn's
    /// `turn/error`, replaced by exec's own `turn_interrupted` with the reason it
    /// knows); without (after a subscription failure), pending ones are discarded.
    pub(super) fn interrupt_and_settle(
        &mut self,
        reason: &str,
        project: bool,
    ) -> Option<wuu_protocol::Run> {
        let limit = Instant::now() + INTERRUPT_GRACE;
        self.proj.suppress_interrupted = true;
        let id = match &self.conn {
            Some(c) if !self.proj.run_id.is_empty() => c
                .send(
                    "run/interrupt",
                    json!({"run_id": self.proj.run_id, "reason": reason}),
                )
                .ok(),
            _ => None,
        }?;
        let timer = crossbeam_channel::at(limit);
        loop {
            if let Some(run) = self.proj.settled.take() {
                return Some(run);
            }
            let conn = self.conn.as_ref()?;
            let n = crossbeam_channel::select! {
                recv(conn.sub.events) -> n => match n {
                    Ok(n) => { conn.sub.release(&n); n }
                    Err(_) => return None,
                },
                recv(conn.sub.responses) -> r => {
                    if let Ok(r) = r {
                        if r.id == id {
                            let run = r.result.and_then(|v| v.get("run").cloned())
                                .and_then(|v| serde_json::from_value::<wuu_protocol::Run>(v).ok());
                            if let Some(run) = run.filter(|r| r.is_terminal()) {
                                return Some(run);
                            }
                        }
                    }
                    continue;
                }
                recv(conn.sub.failure) -> _ => return None,
                recv(timer) -> _ => return None,
            };
            if project {
                for ev in self.proj.on_notification(&n.method, &n.params) {
                    self.emit_bounded(ev, limit);
                }
            }
        }
    }

    /// Signal or deadline while the run is live: interrupt, settle (bounded), then
    /// `turn_interrupted` + `result`. Returns the exit code (4 or 5).
    pub(super) fn cancel(&mut self, c: Cancel, _why: Option<&str>) -> i32 {
        self.ctl.cancelled = Some(c);
        let settled = self.interrupt_and_settle(c.reason(), true);
        if let Some(run) = &settled {
            if let Some(t) = run.result.as_ref().and_then(|r| r.trace_path.clone()) {
                if !t.is_empty() {
                    self.proj.trace_path = t;
                }
            }
        }
        let limit = Instant::now() + OUTPUT_GRACE;
        if !self.proj.turn_id.is_empty() {
            let ev = Event::TurnInterrupted {
                thread_id: self.proj.thread_id.clone(),
                turn_id: self.proj.turn_id.clone(),
                reason: c.reason().to_owned(),
            };
            self.emit_bounded(ev, limit);
        }
        let result = self.result_base(c.code(), c.reason().to_owned(), self.proj.message.clone());
        self.emit_bounded(Event::Result(result), limit);
        c.code()
    }

    /// A protocol failure while the run is live: interrupt it (`exec_failed`), then
    /// `result` failed with the failure's code.
    pub(super) fn cancel_failed(&mut self, f: Fail) -> i32 {
        let settled = self.interrupt_and_settle("exec_failed", false);
        if let Some(t) = settled
            .as_ref()
            .and_then(|r| r.result.as_ref())
            .and_then(|r| r.trace_path.clone())
        {
            self.proj.trace_path = t;
        }
        let limit = Instant::now() + OUTPUT_GRACE;
        let result = self.result_base(f.code, f.msg, self.proj.message.clone());
        self.emit_bounded(Event::Result(result), limit);
        f.code
    }
}
