//! `wuu exec`: one task, non-interactively, for scripts and CI (spec `exec.md`).
//!
//! exec starts the app-server core in-process ([`crate::server::MemoryClient`]) and
//! drives it with the ordinary protocol: `initialize` (client `wuu-exec`) →
//! `thread/start|resume|fork` → one `run/start` → notifications until the terminal
//! `run/updated` of its run → `result`. With `--json` the notifications are projected
//! onto the JSONL stream of [`events`]; otherwise progress goes to stderr and the final
//! message to stdout ([`human`]).
//!
//! Threads: the main thread (requests, projection, deadlines, signals), the
//! subscription pump ([`client`]), the stdout writer ([`writer`]), a signal thread, and
//! a stdin reader when the prompt comes from stdin. Every wait of the main thread also
//! watches SIGINT/SIGTERM and the `--timeout` deadline, so a stalled provider or a
//! consumer that stopped reading stdout cannot keep the process alive past the deadline.
//!
//! Exit codes ([`code`], spec §3) always agree with `result.status`: 0 `completed`,
//! 3 `permission_denied`, 4 `timeout`, 5 `interrupted`, anything else `failed`.

pub mod cli;
pub mod client;
pub mod events;
pub mod human;
pub mod project;
pub mod writer;

use crate::server::ServerOptions;
use cli::{Command, InvalidInput, Mode, Options};
use client::Connection;
use crossbeam_channel::{bounded, Receiver};
use events::{Event, RunResultEvent, ThreadInfo};
use project::Projector;
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use writer::{Blocked, Writer};

/// Exit codes of `wuu exec` (spec §3.1).
pub mod code {
    /// The run completed (and schema / last-message steps succeeded).
    pub const OK: i32 = 0;
    /// A failure without a more specific class; client-side schema mismatch;
    /// `--output-last-message` write failure.
    pub const FAILED: i32 = 1;
    /// Invalid arguments, configuration or input.
    pub const INVALID_INPUT: i32 = 2;
    /// A tool call was refused by the permission mode.
    pub const PERMISSION_DENIED: i32 = 3;
    /// The `--timeout` deadline (or the server's) expired.
    pub const TIMEOUT: i32 = 4;
    /// SIGINT/SIGTERM or another interruption.
    pub const INTERRUPTED: i32 = 5;
    /// App-server protocol failure, subscription overflow, stdout write failure.
    pub const PROTOCOL: i32 = 6;
    /// Provider, model, auth, network or invalid-request failure.
    pub const PROVIDER: i32 = 7;
    /// Unrecovered local or tool failure; also a busy store (the app-server answered
    /// `store_busy`: another process held the SQLite write lock past the busy timeout;
    /// `result.error_category`/`error_code` are `store_busy`, retrying later may succeed).
    pub const TOOL: i32 = 8;
    /// The conversation already has an active run (`thread_busy`).
    pub const CONFLICT: i32 = 9;
}

/// `result.status` of an exit code (spec §3.2).
pub fn status_of(exit: i32) -> &'static str {
    match exit {
        code::OK => "completed",
        code::PERMISSION_DENIED => "permission_denied",
        code::TIMEOUT => "timeout",
        code::INTERRUPTED => "interrupted",
        _ => "failed",
    }
}

/// How long exec waits for the run to settle after it asked for an interrupt (the
/// server gives a command 2 s between SIGTERM and SIGKILL).
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// How long queued output may take to reach a consumer once the run is over and the
/// deadline passed or a signal arrived.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(750);

/// How long the in-process server may take to shut down at the end.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Entry point of `wuu exec` (args after `exec`). Never returns for a run: the process
/// exits with the code of the run once output is flushed (bounded, see
/// [`OUTPUT_GRACE`]).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let opts = match cli::parse(args) {
        Ok(Command::Help) => {
            // Help is the command's whole output: nothing else is on stdout yet.
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = out
                .write_all(cli::HELP.as_bytes())
                .and_then(|_| out.flush());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(o)) => *o,
        Err(e) => {
            eprintln!("error: {}", crate::secrets::redact(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let code = run(opts);
    std::process::exit(code)
}

/// A failure with its exit code.
#[derive(Debug, Clone)]
struct Fail {
    code: i32,
    msg: String,
    /// The app-server error code when the failure is an RPC error (`""` otherwise).
    rpc_code: String,
}

impl Fail {
    fn new(code: i32, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
            rpc_code: String::new(),
        }
    }
}

/// Why the main thread stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cancel {
    Timeout,
    Signal,
}

impl Cancel {
    fn reason(self) -> &'static str {
        match self {
            Cancel::Timeout => "timeout",
            Cancel::Signal => "interrupted",
        }
    }
    fn code(self) -> i32 {
        match self {
            Cancel::Timeout => code::TIMEOUT,
            Cancel::Signal => code::INTERRUPTED,
        }
    }
}

/// Signals and the deadline.
struct Ctl {
    signals: Receiver<i32>,
    deadline: Option<Instant>,
    /// Set once a cancellation was taken.
    cancelled: Option<Cancel>,
}

impl Ctl {
    fn timer(&self) -> Receiver<Instant> {
        match self.deadline {
            Some(t) => crossbeam_channel::at(t),
            None => crossbeam_channel::never(),
        }
    }
}

/// Installs SIGINT/SIGTERM handling: the first signal is delivered on the returned
/// channel; a second one exits the process at once with code 5 (no `result`).
fn install_signals() -> Receiver<i32> {
    let (tx, rx) = bounded::<i32>(1);
    match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ]) {
        Ok(mut signals) => {
            let _ = std::thread::Builder::new()
                .name("wuu-exec-signals".into())
                .spawn(move || {
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

/// Where events go.
struct Out {
    writer: Writer,
    human: Option<human::Human>,
    result: Option<RunResultEvent>,
    /// Lines could not be queued any more (deadline or signal while the consumer
    /// stalled): later events are dropped and the exit does not wait for output.
    stuck: bool,
}

impl Out {
    /// Emits one event. `cancel`/`limit` bound the wait for room in the output queue.
    fn emit(
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
                h.on_event(ev);
                if let Event::Result(r) = ev {
                    if r.status == "completed" && !r.final_message.is_empty() {
                        let mut text = r.final_message.clone().into_bytes();
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

    fn send(
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
}

/// Runs one invocation; returns the exit code.
fn run(opts: Options) -> i32 {
    let signals = install_signals();
    let mut ctl = Ctl {
        signals,
        deadline: opts.timeout.map(|t| Instant::now() + t),
        cancelled: None,
    };
    // Tier 1 (spec §2.9): invalid input before any output: stderr only, exit 2.
    let workdir = match resolve_workdir(&opts) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {}", crate::secrets::redact(&e.to_string()));
            return code::INVALID_INPUT;
        }
    };
    if opts.config.is_some() && opts.ignore_user_config {
        eprintln!("error: --config and --ignore-user-config cannot be combined");
        return code::INVALID_INPUT;
    }
    let has_attachments = !opts.images.is_empty() || !opts.files.is_empty();
    let stdin_text = if cli::wants_stdin(
        &opts.prompt_args,
        std::io::IsTerminal::is_terminal(&std::io::stdin()),
    ) {
        match read_stdin(&mut ctl) {
            Ok(t) => Some(t),
            Err(c) => {
                eprintln!(
                    "error: {} while reading the prompt from stdin",
                    if c == Cancel::Timeout {
                        "timed out"
                    } else {
                        "interrupted"
                    }
                );
                return c.code();
            }
        }
    } else {
        None
    };
    let prompt =
        match cli::combine_prompt(&opts.prompt_args, stdin_text.as_deref(), has_attachments) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {}", crate::secrets::redact(&e.to_string()));
                return code::INVALID_INPUT;
            }
        };
    let human = if opts.json {
        None
    } else {
        Some(human::Human::new(std::io::IsTerminal::is_terminal(
            &std::io::stderr(),
        )))
    };
    let out = Out {
        writer: Writer::stdout(),
        human,
        result: None,
        stuck: false,
    };
    let mut r = Runner {
        opts,
        workdir,
        ctl,
        out,
        conn: None,
        proj: Projector::default(),
        schema: None,
        settled: None,
    };
    let code = match r.execute(prompt) {
        Ok(code) => code,
        Err(f) => r.fail_result(f),
    };
    r.finish(code)
}

fn resolve_workdir(opts: &Options) -> Result<PathBuf, InvalidInput> {
    let cwd =
        std::env::current_dir().map_err(|e| InvalidInput(format!("current directory: {e}")))?;
    let w = match &opts.workdir {
        Some(w) => cwd.join(w),
        None => cwd,
    };
    let w = w
        .canonicalize()
        .map_err(|e| InvalidInput(format!("--cd {}: {e}", w.display())))?;
    if !w.is_dir() {
        return Err(InvalidInput(format!(
            "--cd {}: not a directory",
            w.display()
        )));
    }
    Ok(w)
}

/// Reads stdin to the end on a helper thread, giving up on a signal or the deadline
/// (the reader is abandoned; the process exits without waiting for EOF).
fn read_stdin(ctl: &mut Ctl) -> Result<String, Cancel> {
    let (tx, rx) = bounded::<Vec<u8>>(1);
    let _ = std::thread::Builder::new()
        .name("wuu-exec-stdin".into())
        .spawn(move || {
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

/// How the wait for the run ended.
enum End {
    Settled(Box<wuu_protocol::Run>),
    Cancel(Cancel),
    Fail(Fail),
}

struct Runner {
    opts: Options,
    workdir: PathBuf,
    ctl: Ctl,
    out: Out,
    conn: Option<Connection>,
    proj: Projector,
    schema: Option<Value>,
    /// Status and error of the settled run, once known.
    settled: Option<(String, Option<wuu_protocol::RunError>)>,
}

impl Runner {
    /// Emits an event, mapping a blocked output queue to the cancellation it met.
    fn emit(&mut self, ev: Event) -> Result<(), Cancel> {
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
    fn emit_bounded(&mut self, ev: Event, limit: Instant) {
        let never = crossbeam_channel::never();
        let _ = self.out.emit(&ev, &never, Some(limit));
    }

    fn conn(&self) -> Result<&Connection, Fail> {
        self.conn
            .as_ref()
            .ok_or_else(|| Fail::new(code::PROTOCOL, "not connected"))
    }

    /// Sends a request and waits for its response, watching signals, the deadline and
    /// the subscription. Errors: RPC error (`thread_busy` → 9, `thread_not_found` /
    /// `invalid_params` → 2, `store_busy` → 8, others → 6), protocol failure (6), cancellation (4/5).
    fn rpc(&mut self, method: &str, params: Value) -> Result<Value, Fail> {
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
    fn execute(&mut self, prompt: String) -> Result<i32, Fail> {
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
        // A new conversation runs on `engines.default_engine` (exec has no engine flag),
        // judged before the conversation is created; looked up only when `initialize`
        // reports a problem.
        let resume = matches!(self.opts.mode, Mode::Resume(_));
        if !resume {
            let needs_setup = init.get("status").and_then(Value::as_str) == Some("needs_setup");
            let engine = match self.opts.mode {
                Mode::Start if needs_setup => self.default_engine()?,
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

    /// The engine a new conversation starts on: the configuration's
    /// `engines.default_engine` (the `settings` of `engine/list` without model
    /// discovery), else `"wuu"`.
    fn default_engine(&mut self) -> Result<String, Fail> {
        let list = self.rpc("engine/list", json!({"include_models": false}))?;
        Ok(list
            .pointer("/settings/default_engine")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .unwrap_or("wuu")
            .to_owned())
    }

    /// Fails setup when `initialize` reports a configuration that cannot run: a
    /// missing/invalid config, or a problem with the provider that will be used.
    /// `engine` is the engine that runs the turn (`"wuu"` = the built-in one): for an
    /// external engine (Codex) wuu's provider issues, including "no providers
    /// configured", are warnings, since the engine brings its own provider.
    fn check_setup(&self, init: &Value, engine: &str) -> Result<(), Fail> {
        let own_provider = engine == "wuu";
        if init.get("status").and_then(Value::as_str) != Some("needs_setup") {
            return Ok(());
        }
        let selected = self.opts.provider.clone().unwrap_or_else(|| {
            init.get("provider")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        });
        let mut fatal = vec![];
        let mut provider_problem = false;
        for i in init
            .get("issues")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let c = i.get("code").and_then(Value::as_str).unwrap_or("");
            let p = i.get("provider").and_then(Value::as_str).unwrap_or("");
            let m = i
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match c {
                "invalid_config" if !own_provider && m.ends_with(crate::config::NO_PROVIDERS) => {
                    eprintln!("warning: {m}")
                }
                "missing_user_config" | "invalid_config" => fatal.push(m),
                "unknown_provider" if own_provider && self.opts.provider.is_none() => {
                    provider_problem = true;
                    fatal.push(m)
                }
                "invalid_provider" | "missing_api_key" if own_provider && p == selected => {
                    provider_problem = true;
                    fatal.push(m)
                }
                _ => eprintln!("warning: {}", crate::secrets::redact(&m.to_string())),
            }
        }
        if fatal.is_empty() {
            return Ok(());
        }
        let exit = if provider_problem {
            code::PROVIDER
        } else {
            code::INVALID_INPUT
        };
        Err(Fail::new(
            exit,
            format!("configuration: {}", fatal.join("; ")),
        ))
    }

    /// `thread/start|resume|fork`; emits the thread event; returns the thread object.
    fn acquire_thread(&mut self) -> Result<Value, Fail> {
        let o = self.opts.clone();
        let (thread, make): (Value, fn(ThreadInfo) -> Event) = match &o.mode {
            Mode::Start => {
                let mut p = json!({"cwd": self.workdir.to_string_lossy()});
                if let Some(v) = &o.provider {
                    p["provider"] = json!(v);
                }
                if let Some(v) = &o.model {
                    p["model"] = json!(v);
                }
                if let Some(v) = &o.permission_mode {
                    p["permission_mode"] = json!(v);
                }
                if o.ephemeral {
                    p["ephemeral"] = json!(true);
                }
                let r = self.rpc("thread/start", p)?;
                (
                    r.get("thread").cloned().unwrap_or_default(),
                    Event::ThreadStarted,
                )
            }
            Mode::Resume(id) => {
                let mut p = json!({"response_only": true});
                if let Some(id) = id {
                    p["session_id"] = json!(id);
                }
                let r = self.rpc("thread/resume", p)?;
                (
                    r.get("thread").cloned().unwrap_or_default(),
                    Event::ThreadResumed,
                )
            }
            Mode::Fork(id) => {
                let r = self.rpc("thread/fork", json!({"thread_id": id}))?;
                (
                    r.get("thread").cloned().unwrap_or_default(),
                    Event::ThreadForked,
                )
            }
        };
        let s = |k: &str| {
            thread
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let info = ThreadInfo {
            thread_id: s("id"),
            provider: s("model_provider"),
            model: s("model"),
            cwd: s("cwd"),
            permission_mode: s("permission_mode"),
        };
        if info.thread_id.is_empty() {
            return Err(Fail::new(
                code::PROTOCOL,
                "the app-server returned a thread without id",
            ));
        }
        self.proj.thread_id = info.thread_id.clone();
        if o.mode != Mode::Start {
            if o.ephemeral {
                eprintln!("note: --ephemeral only applies to new conversations");
            }
            for (flag, want, have) in [
                ("--provider", &o.provider, &info.provider),
                ("--model", &o.model, &info.model),
            ] {
                if let Some(w) = want {
                    if w != have {
                        eprintln!(
                            "note: {flag} {w} is not applied to an existing conversation; {} keeps {have}",
                            info.thread_id
                        );
                    }
                }
            }
            if let Some(m) = &o.permission_mode {
                if *m != info.permission_mode {
                    return Err(Fail::new(
                        code::INVALID_INPUT,
                        format!(
                            "--permission-mode {m}: conversation {} runs in {:?}; the mode of an existing conversation cannot be changed",
                            info.thread_id, info.permission_mode
                        ),
                    ));
                }
            }
        }
        self.emit(make(info)).map_err(cancel_fail)?;
        Ok(thread)
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

    /// The result of a terminal run (spec §3.3, §5.4–§5.6).
    fn settle(&mut self, run: wuu_protocol::Run) -> Result<i32, Fail> {
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
                let verdict = crate::session::run::parse_structured(&final_message)
                    .and_then(|v| crate::session::run::schema_errors(&schema, &v).map(|_| v));
                match verdict {
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

    fn result_base(&self, exit: i32, error: String, final_message: String) -> RunResultEvent {
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

    /// Asks the server to interrupt the run and waits (bounded) for it to settle. With
    /// `project`, notifications are still projected (except the interrupted turn's
    /// `turn/error`, replaced by exec's own `turn_interrupted` with the reason it
    /// knows); without (after a subscription failure), pending ones are discarded.
    fn interrupt_and_settle(&mut self, reason: &str, project: bool) -> Option<wuu_protocol::Run> {
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
    fn cancel(&mut self, c: Cancel, _why: Option<&str>) -> i32 {
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
    fn cancel_failed(&mut self, f: Fail) -> i32 {
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

    /// A failure before the run existed (or while emitting its result): one `result`.
    fn fail_result(&mut self, f: Fail) -> i32 {
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

    /// Shuts the server down (bounded), flushes output (bounded), prints `error:` for
    /// failures, and returns the final exit code.
    fn finish(self, mut exit: i32) -> i32 {
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
        let Out {
            writer,
            mut human,
            result,
            stuck,
        } = out;
        if let Some(h) = human.as_mut() {
            h.clear_live();
        }
        let limit = match (ctl.cancelled, ctl.deadline) {
            (Some(_), _) => Some(Instant::now() + OUTPUT_GRACE),
            (None, Some(d)) => Some(d.max(Instant::now() + OUTPUT_GRACE)),
            (None, None) => None,
        };
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

fn cancel_fail(c: Cancel) -> Fail {
    Fail::new(c.code(), c.reason())
}

/// Exit code and error text of a terminal run (spec §3.3).
fn settlement(run: &wuu_protocol::Run) -> (i32, String) {
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

/// Exit code of a failed in-process server start (spec §3.3 setup rule): 7 when the
/// message looks like a provider/model problem, else 2.
fn setup_code(msg: &str) -> i32 {
    let m = msg.to_ascii_lowercase();
    const PROVIDERISH: &[&str] = &[
        "provider",
        "model not found",
        "unsupported model",
        "unknown model",
        "no model",
        "api key",
        "auth token",
        "unsupported wire",
        "unsupported api",
    ];
    if PROVIDERISH.iter().any(|p| m.contains(p)) {
        code::PROVIDER
    } else {
        code::INVALID_INPUT
    }
}

/// Largest `--output-schema` file, in bytes.
pub const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// Reads and compiles an output schema (JSON Schema, default dialect 2020-12). Errors:
/// unreadable, not a regular file (a FIFO or device is refused before any read could
/// block), larger than [`MAX_SCHEMA_BYTES`], not JSON, not a valid schema (with the
/// JSON pointer of the problem and the rule it breaks:
/// [`crate::session::run::check_schema`]).
pub fn load_schema(path: &std::path::Path) -> Result<Value, InvalidInput> {
    let bytes = crate::tools::beneath::read_regular(path, MAX_SCHEMA_BYTES)
        .map_err(|e| InvalidInput(format!("--output-schema {}: {e}", path.display())))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| InvalidInput(format!("--output-schema {}: not JSON: {e}", path.display())))?;
    if !(v.is_object() || v.is_boolean()) {
        return Err(InvalidInput(format!(
            "--output-schema {}: a schema must be an object or a boolean",
            path.display()
        )));
    }
    crate::session::run::check_schema(&v).map_err(|e| {
        InvalidInput(format!(
            "--output-schema {}: invalid schema {e}",
            path.display()
        ))
    })?;
    Ok(v)
}

/// Writes the final message exactly (no newline added) to `path` (relative to the
/// process cwd), creating parent directories.
fn write_last_message(path: &std::path::Path, text: &str) -> Result<(), String> {
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
    fn statuses_follow_codes() {
        assert_eq!(status_of(0), "completed");
        assert_eq!(status_of(3), "permission_denied");
        assert_eq!(status_of(4), "timeout");
        assert_eq!(status_of(5), "interrupted");
        for c in [1, 2, 6, 7, 8, 9] {
            assert_eq!(status_of(c), "failed");
        }
    }

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

    #[test]
    fn schemas_are_checked_locally() {
        let d = tempfile::tempdir().unwrap();
        let good = d.path().join("good.json");
        std::fs::write(&good, r#"{"type":"object","required":["a"]}"#).unwrap();
        assert!(load_schema(&good).is_ok());
        let bad = d.path().join("bad.json");
        std::fs::write(&bad, r#"{"type":"no-such-type"}"#).unwrap();
        assert!(load_schema(&bad).is_err());
        let notjson = d.path().join("x.json");
        std::fs::write(&notjson, "{").unwrap();
        assert!(load_schema(&notjson).is_err());
        assert!(load_schema(&d.path().join("missing.json")).is_err());
    }
}
