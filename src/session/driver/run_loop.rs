//! The turn's run loop (spec `app-server.md` §4.9; `engines.md` §1.1).
//!
//! The built-in engine runs the turn on this (session) thread: its events are
//! projected in place ([`DirectHost`]), and the session mailbox is served between two
//! reads of the provider stream, before each model step and, while a tool runs, when
//! the session's wake rings ([`crate::engine::EventSink::bell`]). A read parked on a silent
//! stream is woken by whoever queues a message for the session ([`LiveStream::posted`],
//! from the registry): it returns without damaging the stream, the mailbox is served
//! (a control that ends the stream cuts it then) and the engine reads on. A run
//! deadline wakes the read the same way. While a request waits for its response head
//! (a phase ureq cannot resume), that phase runs on a pool thread
//! ([`crate::provider::head`]) and this thread waits for its wake and the head
//! together, serving the mailbox the same way; only when every pool thread is busy does
//! the phase run here, and a message that ends the stream then cuts it from outside.
//!
//! An external engine runs on the conversation's engine thread (long-lived, see
//! [`crate::session::engines::EngineThread`]) while this thread `select!`s over the
//! engine's events, the mailbox and the run deadline.

use super::{Driver, Stop};
use crate::engine::{
    Control, DirectHost, Engine, EngineEvent, EventSink, Limits, LiveStream, Outcome, Steering,
    TextDeltas, TurnRequest, UserInput, BUILTIN, EVENT_CAPACITY,
};
use crate::session::registry::Mail;
use crate::util::now_ms;
use crossbeam_channel::{select, Receiver, Sender};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::time::Duration;
use wuu_protocol::*;

/// Decodes stored attachments (`{media_type, data}` values).
fn attachments(v: Option<&[Value]>) -> Vec<Attachment> {
    v.unwrap_or_default()
        .iter()
        .filter_map(|a| serde_json::from_value(a.clone()).ok())
        .collect()
}

/// The outcome of a turn whose engine failed unexpectedly (panicked, no thread).
fn engine_failure() -> Outcome {
    Outcome::Failed(Box::new(TurnError {
        message: "internal error: the engine failed unexpectedly".into(),
        code: Some("internal_error".into()),
        category: Some("local".into()),
        ..Default::default()
    }))
}

/// The driver as the host of an engine running on the session thread.
struct Here<'d, 'a> {
    driver: RefCell<&'d mut Driver<'a>>,
    mailbox: Receiver<Mail>,
    ctl: (Sender<Control>, LiveStream),
    steering: Steering,
    stop_sent: Cell<bool>,
}

impl Here<'_, '_> {
    fn after(&self, d: &mut Driver<'_>) {
        d.check_deadline();
        let mut stop_sent = self.stop_sent.get();
        d.forward_controls(&self.ctl, self.steering, &mut stop_sent);
        self.stop_sent.set(stop_sent);
    }
}

impl DirectHost for Here<'_, '_> {
    fn project(&self, ev: EngineEvent) {
        let mut d = self.driver.borrow_mut();
        d.project_event(ev);
        self.after(&mut d);
    }

    fn project_deltas(&self, deltas: &TextDeltas) {
        let mut d = self.driver.borrow_mut();
        d.project_deltas(deltas);
        self.after(&mut d);
    }

    fn serve(&self) {
        let mut d = self.driver.borrow_mut();
        while let Ok(m) = self.mailbox.try_recv() {
            d.take_store();
            d.on_mailbox(*m);
        }
        self.after(&mut d);
    }

    fn idle(&self) {
        // A streaming turn needs no store connection: it goes back to the pool while
        // the engine waits, so busy sessions share a few warm ones.
        self.driver.borrow_mut().s.release_store();
    }
}

impl Driver<'_> {
    /// Runs the conversation's engine (the built-in one here, an external one on its
    /// engine thread) and projects its events until it ends, serving the mailbox
    /// meanwhile. Returns the engine's outcome; an engine that panics, or whose thread
    /// cannot start, is a failure.
    pub(super) fn run_engine(&mut self) -> Outcome {
        let engine = crate::session::engines::open(self.s);
        let steering = engine.steering();
        let req = self.request();
        // Controls are rare (at most one per request this session serves, and the
        // mailbox is bounded); unbounded so the host never blocks on an engine that
        // itself waits for the host.
        let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
        let live = self.s.live.clone();
        self.ctl = Some(ctl_tx.clone());
        let outcome = if engine.id() == BUILTIN {
            self.run_here(engine, req, (ctl_tx, live), &ctl_rx, steering)
        } else {
            self.run_on_engine_thread(engine, req, (ctl_tx, live), ctl_rx, steering)
        };
        self.ctl = None;
        self.take_store();
        self.revoke_questions();
        outcome
    }

    /// Runs the built-in engine on this thread, its events projected in place.
    fn run_here(
        &mut self,
        mut engine: Box<dyn Engine>,
        req: TurnRequest,
        ctl: (Sender<Control>, LiveStream),
        controls: &Receiver<Control>,
        steering: Steering,
    ) -> Outcome {
        let live = ctl.1.clone();
        live.set_on_host_thread(true);
        live.wake().set_deadline(self.opts.deadline_ms);
        let host = Here {
            mailbox: self.s.rx.clone(),
            driver: RefCell::new(self),
            ctl,
            steering,
            stop_sent: Cell::new(false),
        };
        let sink = EventSink::direct(&host, live);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.run_turn(req, &sink, controls)
        }));
        drop(sink);
        host.ctl.1.set_on_host_thread(false);
        host.ctl.1.wake().set_deadline(None);
        outcome.unwrap_or_else(|_| engine_failure())
    }

    /// Runs an external engine on the conversation's engine thread and projects its
    /// events here, serving the mailbox meanwhile, until the engine drops its event
    /// channel.
    fn run_on_engine_thread(
        &mut self,
        mut engine: Box<dyn Engine>,
        req: TurnRequest,
        ctl: (Sender<Control>, LiveStream),
        ctl_rx: Receiver<Control>,
        steering: Steering,
    ) -> Outcome {
        let (ev_tx, ev_rx) = crossbeam_channel::bounded(EVENT_CAPACITY);
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let mailbox = self.s.rx.clone();
        let live = ctl.1.clone();
        let job = Box::new(move || {
            let sink = EventSink::with_live(ev_tx, live);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                engine.run_turn(req, &sink, &ctl_rx)
            }));
            // The event channel closes first: the session's loop ends on it.
            drop(sink);
            let _ = done_tx.send((engine, outcome));
        });
        let thread_id = self.s.id.clone();
        if let Err(e) = self.s.engine_thread.run(&thread_id, job) {
            log::error!("cannot start the engine thread of {thread_id}: {e}");
            return engine_failure();
        }
        self.select_loop(&ev_rx, &mailbox, &ctl, steering);
        match done_rx.recv() {
            Ok((engine, Ok(outcome))) => {
                // An external engine session (and its native host) outlives the turn.
                if engine.id() != BUILTIN {
                    self.s.engine = Some(engine);
                }
                outcome
            }
            Ok((_, Err(_))) | Err(_) => engine_failure(),
        }
    }

    /// Waits for the engine, a client or the deadline, one wake-up at a time, and
    /// answers each; returns once the engine has dropped its event channel.
    fn select_loop(
        &mut self,
        events: &Receiver<EngineEvent>,
        mailbox: &Receiver<Mail>,
        ctl: &(Sender<Control>, LiveStream),
        steering: Steering,
    ) {
        let mut stop_sent = false;
        loop {
            let wait = self.deadline_wait();
            if events.is_empty() && mailbox.is_empty() {
                // Nothing to do until the engine or a client speaks: the store
                // connection goes back to the pool meanwhile (a streaming turn needs
                // none, so busy sessions share a few warm ones).
                self.s.release_store();
            }
            select! {
                recv(events) -> ev => match ev {
                    Ok(ev) => self.project_event(ev),
                    Err(_) => break,
                },
                recv(mailbox) -> msg => if let Ok(m) = msg {
                    self.take_store();
                    self.on_mailbox(*m)
                },
                default(wait) => self.take_store(),
            }
            self.check_deadline();
            self.forward_controls(ctl, steering, &mut stop_sent);
        }
    }

    /// Tells the engine what the last wake-up asked of it: a stop becomes one
    /// interrupt; otherwise a steer signal wakes an engine that takes steers at its
    /// next step, or hands a native steering engine the steers it has not had yet.
    fn forward_controls(
        &mut self,
        ctl: &(Sender<Control>, LiveStream),
        steering: Steering,
        stop_sent: &mut bool,
    ) {
        // Sent first, then the stream the engine reads is cut: the engine finds the
        // control once its read returns.
        let send = |c: Control| {
            if ctl.0.send(c.clone()).is_ok() {
                ctl.1.cut(&c);
            }
        };
        if self.stop.is_some() {
            if !*stop_sent {
                *stop_sent = true;
                send(Control::Interrupt);
            }
        } else if self.s.steer_signal {
            self.s.steer_signal = false;
            match steering {
                Steering::NextStep => send(Control::Steer(None)),
                Steering::Native => {
                    for steer in self.native_steers() {
                        send(Control::Steer(Some(steer)));
                    }
                }
                // Steers were queued on arrival: nothing for the engine.
                Steering::Queued => {}
            }
        }
    }

    /// The engine's view of the admitted turn.
    fn request(&self) -> TurnRequest {
        let cfg = self.s.shared.config();
        let agent = cfg.agent();
        let row = &self.s.turns[self.turn_idx].row;
        let input = self.s.turns[self.turn_idx]
            .items
            .first()
            .filter(|i| i.item_type == "user_message")
            .map(|i| UserInput {
                prompt: i.text.clone().unwrap_or_default(),
                images: attachments(i.images.as_deref()),
                files: attachments(i.files.as_deref()),
            })
            .unwrap_or_default();
        TurnRequest {
            thread_id: self.s.id.clone(),
            turn_id: row.id.clone(),
            // A worker isolated in a git worktree works beneath that worktree.
            workspace_root: if crate::session::agents::isolated(&self.s.thread) {
                std::path::PathBuf::from(&self.s.thread.cwd)
            } else {
                self.s.shared.opts.workdir.clone()
            },
            cwd: std::path::PathBuf::from(&self.s.thread.cwd),
            home: self.s.shared.opts.home.clone(),
            provider_id: row.provider.clone(),
            model: row.model.clone(),
            effort: self.s.thread.effort.clone(),
            permission_mode: crate::session::convert::stored_permission_mode(&self.s.thread),
            instructions: cfg.config.instructions.clone(),
            output_schema: self.opts.output_schema.clone(),
            input,
            engine_ref: crate::session::engines::engine_ref(&self.s.thread),
            limits: Limits {
                max_steps: agent.max_steps.unwrap_or(200).max(1),
                bash_timeout_ms: agent.bash_timeout_ms.unwrap_or(120_000),
                output_cap_bytes: agent.output_cap_bytes.unwrap_or(64 * 1024),
                sandbox: crate::tools::sandbox::SandboxSettings {
                    process_ledger: Some(self.s.shared.opts.home.clone()),
                    ..crate::tools::sandbox::SandboxSettings::from_config(&cfg)
                },
                temperature: agent.temperature,
                max_background: agent
                    .max_background_processes
                    .map(|n| n as usize)
                    .unwrap_or(crate::tools::background::DEFAULT_LIMIT),
            },
            background: self.s.shared.background.of(&self.s.id, true).ok(),
            compact_only: self.s.turns[self.turn_idx].row.kind == "compact",
            trace: self.trace.clone(),
        }
    }

    /// Takes a store connection again after a wait (see `run_engine`). When none can be
    /// opened the turn stops: nothing more of it could be persisted.
    pub(super) fn take_store(&mut self) {
        if let Err((_, message)) = self.s.acquire_store() {
            log::error!("turn of {}: {message}", self.s.id);
            self.stop
                .get_or_insert(Stop::Interrupt(format!("store unavailable: {message}")));
        }
    }

    fn deadline_wait(&self) -> Duration {
        match self.opts.deadline_ms {
            Some(d) => Duration::from_millis((d - now_ms()).max(0) as u64),
            None => Duration::from_secs(3600),
        }
    }

    pub(super) fn check_deadline(&mut self) {
        if let Some(d) = self.opts.deadline_ms {
            if now_ms() >= d {
                self.stop.get_or_insert(Stop::Interrupt("timeout".into()));
            }
        }
    }
}
