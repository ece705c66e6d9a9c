//! A turn's controls, watched while the turn's setup waits for an external engine's
//! child (starting it, its handshake, opening a session): an interrupt, or the host
//! going away, ends the wait at once instead of after the setup's timeout; a steer is
//! deferred to the next turn (the engines that wait here have no native steering); an
//! answer has no question yet to go to.

use crate::engine::{Control, EngineEvent, EventSink};
use crossbeam_channel::{never, select, Receiver};
use std::cell::Cell;
use std::time::Instant;

/// The controls of one turn, and whether a watched wait was interrupted.
pub struct Watch<'a> {
    controls: &'a Receiver<Control>,
    sink: &'a EventSink<'a>,
    interrupted: Cell<bool>,
}

/// How a watched wait ended.
pub enum Waited<T> {
    /// A message arrived.
    Message(T),
    /// The sending side is gone.
    Disconnected,
    /// The deadline passed.
    TimedOut,
    /// The turn was interrupted (or the host went away); the watch says so from now on.
    Interrupted,
}

impl<'a> Watch<'a> {
    /// Watches `controls`; deferred steers are told to `sink`.
    pub fn new(controls: &'a Receiver<Control>, sink: &'a EventSink<'a>) -> Self {
        Watch {
            controls,
            sink,
            interrupted: Cell::new(false),
        }
    }

    /// Whether an interrupt (or the host going away) ended a watched wait.
    pub fn interrupted(&self) -> bool {
        self.interrupted.get()
    }
}

/// Waits for a message on `rx` until `deadline`, watching `watch`'s controls if any.
pub fn recv_watched<T>(rx: &Receiver<T>, deadline: Instant, watch: Option<&Watch>) -> Waited<T> {
    loop {
        let controls = watch.map_or_else(never, |w| w.controls.clone());
        select! {
            recv(rx) -> m => return m.map_or(Waited::Disconnected, Waited::Message),
            recv(controls) -> c => match (c, watch) {
                (Ok(Control::Steer(Some(s))), Some(w)) => {
                    w.sink.emit(EngineEvent::SteerDeferred { input_id: s.input_id });
                }
                (Ok(Control::Steer(_) | Control::Answer { .. }), _) => {}
                (Ok(Control::Interrupt) | Err(_), w) => {
                    if let Some(w) = w {
                        w.interrupted.set(true);
                    }
                    return Waited::Interrupted;
                }
            },
            default(deadline.saturating_duration_since(Instant::now())) => return Waited::TimedOut,
        }
    }
}
