//! One exec invocation against the in-process app-server (spec `exec.md` §1, §2.8,
//! §7.3): the [`Runner`] holds the connection, the projection and the output; it sends
//! requests watching signals and the deadline, starts the one run (`run/start`) and
//! consumes notifications until the run settles, then shuts the server down.

use super::cancel::{cancel_fail, Cancel, Ctl};
use super::cli::{self, InvalidInput, Mode, Options};
use super::client::{self, Connection};
use super::events::Event;
use super::exit::{code, Fail};
use super::output::Out;
use super::project::Projector;
use super::schema::load_schema;
use super::setup::setup_code;
use super::writer::Blocked;
use super::SHUTDOWN_GRACE;
use crate::session::ServerOptions;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

/// How the wait for the run ended.
enum End {
    Settled(Box<wuu_protocol::Run>),
    Cancel(Cancel),
    Fail(Fail),
}

/// The state of one invocation: options, cancellation, output, the connection to the
/// in-process server and the projection of its notifications.
pub(super) struct Runner {
    pub(super) opts: Options,
    pub(super) workdir: PathBuf,
    pub(super) ctl: Ctl,
    pub(super) out: Out,
    pub(super) conn: Option<Connection>,
    pub(super) proj: Projector,
    pub(super) schema: Option<Value>,
    /// Status and error of the settled run, once known.
    pub(super) settled: Option<(String, Option<wuu_protocol::RunError>)>,
}

impl Runner {
    /// Emits an event, mapping a blocked output queue to the cancellation it met.
    pub(super) fn emit(&mut self, ev: Event) -> Result<(), Cancel> {
        let timer_limit = self.ctl.deadline;
        let c = match self.out.emit(&ev, &self.ctl.signals, timer_limit) {
            Ok(()) => return Ok(()),
            Err(Blocked::Cancelled) => Cancel::Signal,
            Err(Blocked::TimedOut) => Cancel::Timeout,
        };
        self.ctl.cancelled.get_or_insert(c);
        Err(c)
    }

    /// Emits during the cancellation grace: never waits past `limit`.
    pub(super) fn emit_bounded(&mut self, ev: Event, limit: Instant) {
        let never = crossbeam_channel::never();
        let _ = self.out.emit(&ev, &never, Some(limit));
    }

    pub(super) fn conn(&self) -> Result<&Connection, Fail> {
        self.conn
            .as_ref()
            .ok_or_else(|| Fail::new(code::PROTOCOL, "not connected"))
    }

    /// Sends a request and waits for its response, watching signals, the deadline and
    /// the subscription. Errors: RPC error (`thread_busy` → 9, `thread_not_found` /
    /// `invalid_params` → 2, `store_busy` → 8, others → 6), protocol failure (6), cancellation (4/5).
    pub(super) fn rpc(&mut self, method: &str, params: Value) -> Result<Value, Fail> {
        let conn = self.conn()?;
        let id = conn
            .send(method, params)
            .map_err(|e| Fail::new(code::PROTOCOL, e))?;
        let timer = self.ctl.timer();
        loop {
            let conn = self.conn()?;
            crossbeam_channel::select! {
                recv(conn.sub.responses) -> r => {
                    let Ok(r) = r else {
                        return Err(Fail::new(code::PROTOCOL, "app-server closed the connection"));
                    };
                    if r.id != id {
                        continue;
                    }
                    if let Some(e) = r.error {
                        let c = e.get("code").and_then(Value::as_str).unwrap_or("").to_owned();
                        let m = e.get("message").and_then(Value::as_str).unwrap_or("").to_owned();
                        let exit = match c.to_ascii_lowercase().as_str() {
                            "thread_busy" => code::CONFLICT,
                            "thread_not_found" | "invalid_params" => code::INVALID_INPUT,
                            "store_busy" => code::TOOL,
                            _ => code::PROTOCOL,
                        };
                        let mut f = Fail::new(exit, format!("{method}: {m} ({c})"));
                        f.rpc_code = c;
                        return Err(f);
                    }
                    return Ok(r.result.unwrap_or(Value::Null));
                }
                recv(conn.sub.failure) -> f => {
                    let msg = f.map(|f| f.to_string()).unwrap_or_else(|_| "app-server closed".into());
                    return Err(Fail::new(code::PROTOCOL, msg));
                }
                recv(self.ctl.signals) -> _ => {
                    self.ctl.cancelled = Some(Cancel::Signal);
                    return Err(Fail::new(code::INTERRUPTED, "interrupted"));
                }
                recv(timer) -> _ => {
                    self.ctl.cancelled = Some(Cancel::Timeout);
                    return Err(Fail::new(code::TIMEOUT, "timeout"));
                }
            }
        }
    }

    /// Everything from local checks to the settled run; returns the exit code after
    /// emitting `result` (or fails, and the caller emits it).
    pub(super) fn execute(&mut self, prompt: String) -> Result<i32, Fail> {
        // Tier 2 (spec §2.9): checked before anything is sent, reported as a `result`.
        let invalid = |e: InvalidInput| Fail::new(code::INVALID_INPUT, e.0);
        let images = self
            .opts
            .images
            .iter()
            .map(|p| cli::load_attachment(std::path::Path::new(""), p, true))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let files = self
            .opts
            .files
            .iter()
            .map(|p| cli::load_attachment(std::path::Path::new(""), p, false))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        if let Some(p) = self.opts.output_schema.clone() {
            self.schema = Some(load_schema(&p).map_err(invalid)?);
        }

        let mut so = ServerOptions::new(self.workdir.clone());
        so.config_file = self.opts.config.clone();
        so.ignore_user_config = self.opts.ignore_user_config;
        so.safe_mode = self.opts.safe_mode;
        so.auto_titles = false;
        // Nobody answers questions in a one-shot run: `ask_user` is not offered.
        so.questions = false;
        let conn = Connection::start(so).map_err(|e| Fail::new(setup_code(&e), e))?;
        self.conn = Some(conn);

        let init = self.rpc(
            "initialize",
            json!({
                "protocol_version": wuu_protocol::PROTOCOL_VERSION,
                "client": {"name": "wuu-exec", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        // A resumed conversation may run on an external engine (Codex) that needs no wuu
        // provider: its provider problems are judged once the thread's engine is known.
        // A new conversation runs on `--engine`, else `engines.default_engine`,
        // judged before the conversation is created; looked up only when `initialize`
        // reports a problem.
        let resume = matches!(self.opts.mode, Mode::Resume(_));
        if !resume {
            let needs_setup = init.get("status").and_then(Value::as_str) == Some("needs_setup");
            let engine = match (&self.opts.mode, &self.opts.engine) {
                (Mode::Start, Some(e)) => e.clone(),
                (Mode::Start, None) if needs_setup => self.default_engine()?,
                _ => "wuu".to_owned(),
            };
            self.check_setup(&init, &engine)?;
        }
        let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let mode = init
            .pointer("/permissions/mode")
            .and_then(Value::as_str)
            .unwrap_or("");
        self.emit(Event::SessionConfigured {
            protocol_version: str_of(&init, "protocol_version"),
            provider: str_of(&init, "provider"),
            model: str_of(&init, "model"),
            effort: str_of(&init, "effort"),
            variant: str_of(&init, "variant"),
            max_parallel: init
                .get("max_parallel")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            workspace_root: str_of(&init, "workspace_root"),
            permissions: if mode.is_empty() {
                json!({})
            } else {
                json!({"mode": mode})
            },
        })
        .map_err(cancel_fail)?;

        let thread = self.acquire_thread()?;
        if resume {
            let engine = thread
                .get("engine_id")
                .and_then(Value::as_str)
                .filter(|e| !e.is_empty())
                .unwrap_or("wuu");
            self.check_setup(&init, engine)?;
        }
        let thread_id = str_of(&thread, "id");
        self.proj = Projector::new(&thread_id);

        let mut params = json!({
            "thread_id": thread_id,
            "prompt": prompt,
            "request": {"mode": "start"},
        });
        if !images.is_empty() {
            params["images"] = Value::Array(images);
        }
        if !files.is_empty() {
            params["files"] = Value::Array(files);
        }
        if let Some(s) = &self.schema {
            params["output_schema"] = s.clone();
        }
        if self.opts.max_turns > 0 {
            params["max_turns"] = json!(self.opts.max_turns);
            params["request"]["max_turns"] = json!(self.opts.max_turns);
        }
        let started = self.rpc("run/start", params)?;
        let run: wuu_protocol::Run = serde_json::from_value(
            started.get("run").cloned().unwrap_or_default(),
        )
        .map_err(|e| Fail::new(code::PROTOCOL, format!("run/start: undecodable run: {e}")))?;
        self.proj.run_id = run.id.clone();
        if let Some(t) = run.turns.last() {
            self.proj.turn_id = t.id.clone();
        }
        if run.is_terminal() {
            return self.settle(run);
        }
        match self.wait() {
            End::Settled(run) => self.settle(*run),
            End::Cancel(c) => Ok(self.cancel(c, None)),
            End::Fail(f) => Ok(self.cancel_failed(f)),
        }
    }

    /// Consumes notifications until the run settles, a cancellation, or a failure.
    fn wait(&mut self) -> End {
        let timer = self.ctl.timer();
        loop {
            if let Some(run) = self.proj.settled.take() {
                return End::Settled(Box::new(run));
            }
            let Some(conn) = self.conn.as_ref() else {
                return End::Fail(Fail::new(code::PROTOCOL, "not connected"));
            };
            if let Ok(f) = conn.sub.failure.try_recv() {
                return End::Fail(Fail::new(code::PROTOCOL, f.to_string()));
            }
            let n = crossbeam_channel::select! {
                recv(conn.sub.events) -> n => match n {
                    Ok(n) => { conn.sub.release(&n); n }
                    Err(_) => return End::Fail(Fail::new(code::PROTOCOL, client::Failure::Closed.to_string())),
                },
                recv(conn.sub.failure) -> f => {
                    let msg = f.map(|f| f.to_string()).unwrap_or_else(|_| client::Failure::Closed.to_string());
                    return End::Fail(Fail::new(code::PROTOCOL, msg));
                }
                recv(conn.sub.responses) -> _ => continue,
                recv(self.ctl.signals) -> _ => return End::Cancel(Cancel::Signal),
                recv(timer) -> _ => return End::Cancel(Cancel::Timeout),
            };
            for ev in self.proj.on_notification(&n.method, &n.params) {
                if let Err(c) = self.emit(ev) {
                    return End::Cancel(c);
                }
            }
            if let Some(e) = self.out.writer.error() {
                return End::Fail(Fail::new(code::PROTOCOL, e));
            }
        }
    }

    /// Shuts the server down (bounded), flushes output (bounded), prints `error:` for
    /// failures, and returns the final exit code.
    pub(super) fn finish(self, exit: i32) -> i32 {
        let Runner {
            conn,
            out,
            ctl,
            mut proj,
            ..
        } = self;
        let _ = proj.settled.take();
        if let Some(conn) = conn {
            if !conn.close(SHUTDOWN_GRACE) {
                log::warn!("the in-process app-server did not shut down in time");
            }
        }
        out.finish(&ctl, exit)
    }
}
