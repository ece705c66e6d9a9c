//! Background processes: commands a conversation keeps running while its model works
//! (`bash {run_in_background: true}`, the `process` tool, `process/*` methods; spec
//! `app-server.md` §3.7, README § "Background processes").
//!
//! [`Background`] is the host's table of conversations ([`Processes`], one each, made on
//! first use and handed to the tools through [`super::ToolContext::background`]). A
//! process is started through the same sandbox launcher as `bash` (so it dies with the
//! host, even after `kill -9`, and is in the process ledger while it runs), with stdout
//! and stderr on one pipe (or, with `tty`, on a pseudo-terminal whose size clients set
//! with `process/resize`) and stdin on a pipe (or the terminal). One reader thread per
//! process keeps the last [`RING_BYTES`] bytes of output in memory and all of it (up to
//! [`LOG_MAX_BYTES`]) in `<home>/processes/<thread>/<id>.log`; offsets count bytes of
//! that log, after secrets are masked. One waiter thread per process records the exit
//! in `<id>.json` and reports a natural exit to the host's exit hook (the conversation
//! hears of it). Records written by a host that is gone read as `exited`.

use super::sandbox::SandboxSettings;
use super::shell::{shell_command, shell_path};
use super::{Fail, ToolContext};
use parking_lot::{Condvar, Mutex};
use rustix::process::{kill_process_group, Pid, Signal};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Output kept in memory per process (older output is read from the log file).
pub const RING_BYTES: usize = 256 * 1024;
/// Largest log file per process; output beyond it is counted, kept in the ring only.
pub const LOG_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Default concurrent background processes per conversation (`agent.max_background_processes`).
pub const DEFAULT_LIMIT: usize = 8;
/// Longest `wait_ms` of a read.
pub const MAX_WAIT_MS: u64 = 30_000;
/// Default and largest bytes of one read.
pub const READ_DEFAULT_BYTES: usize = 64 * 1024;
/// See [`READ_DEFAULT_BYTES`].
pub const READ_MAX_BYTES: usize = 512 * 1024;

/// A process as clients see it (`process/list`).
pub use wuu_protocol::ManagedProcessSummary as Summary;

/// The persisted record (`<id>.json`): the summary plus its owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    #[serde(flatten)]
    summary: Summary,
    owner_pid: u32,
}

/// One `read`'s answer (`process/read` result without `process`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadOut {
    /// The output (lossy UTF-8, masked).
    pub output: String,
    /// Output before `start_offset` was skipped (asked offset no longer available, or
    /// more than `max_bytes` was new).
    pub truncated: bool,
    /// Log offset of the first byte returned.
    pub start_offset: u64,
    /// Log offset after the last byte returned.
    pub end_offset: u64,
    /// Bytes of output so far.
    pub total_bytes: u64,
    /// `wait_ms` passed without new output.
    pub timed_out: bool,
}

/// What a process exit tells its conversation (the host's exit hook).
#[derive(Debug, Clone)]
pub struct ExitNotice {
    /// The conversation.
    pub thread_id: String,
    /// The process's final summary.
    pub process: Summary,
    /// The last output (at most 2 KiB, masked).
    pub tail: String,
}

type ExitHook = Box<dyn Fn(ExitNotice) + Send + Sync>;

/// The host's background processes: one [`Processes`] per conversation.
pub struct Background {
    home: PathBuf,
    threads: Mutex<HashMap<String, Arc<Processes>>>,
    hook: Arc<Mutex<Option<ExitHook>>>,
}

impl Background {
    /// The table of a host whose home is `home` (logs and records below
    /// `<home>/processes/`).
    pub fn new(home: &Path) -> Arc<Background> {
        Arc::new(Background {
            home: home.to_path_buf(),
            threads: Mutex::new(HashMap::new()),
            hook: Arc::new(Mutex::new(None)),
        })
    }

    /// Sets what a natural exit of a process calls (once, at startup).
    pub fn on_exit(&self, hook: impl Fn(ExitNotice) + Send + Sync + 'static) {
        *self.hook.lock() = Some(Box::new(hook));
    }

    /// The processes of conversation `thread_id` (made, with the records of earlier
    /// hosts, on first use). A conversation without processes on disk is kept only when
    /// `keep` (its turns start processes); for a client's look it is answered empty and
    /// forgotten, so ids that name nothing take no memory. `Err` when the id cannot name
    /// a directory.
    pub fn of(&self, thread_id: &str, keep: bool) -> Result<Arc<Processes>, String> {
        crate::util::check_path_id("thread_id", thread_id)?;
        let mut map = self.threads.lock();
        if let Some(p) = map.get(thread_id) {
            return Ok(p.clone());
        }
        let dir = self.home.join("processes").join(thread_id);
        let on_disk = dir.is_dir();
        let p = Arc::new(Processes::load(thread_id, dir, self.hook.clone()));
        if keep || on_disk {
            map.insert(thread_id.to_string(), p.clone());
        }
        Ok(p)
    }

    /// Stops every running process of `thread_id` (archive, delete) on a helper thread;
    /// returns at once.
    pub fn end_thread(&self, thread_id: &str) {
        let Some(p) = self.threads.lock().get(thread_id).cloned() else {
            return;
        };
        let _ = crate::util::spawn("bg-end".into(), move || p.stop_all());
    }

    /// Stops every process of `thread_id` and removes their records and logs (the
    /// conversation was deleted) on a helper thread; returns at once.
    pub fn forget_thread(&self, thread_id: &str) {
        let p = self.threads.lock().remove(thread_id);
        let dir = self.home.join("processes").join(thread_id);
        if crate::util::check_path_id("thread_id", thread_id).is_err() {
            return;
        }
        let _ = crate::util::spawn("bg-forget".into(), move || {
            if let Some(p) = p {
                p.stop_all();
            }
            let _ = fs::remove_dir_all(dir);
        });
    }
}

/// One conversation's background processes.
pub struct Processes {
    thread_id: String,
    dir: PathBuf,
    procs: Mutex<Vec<Arc<Proc>>>,
    hook: Arc<Mutex<Option<ExitHook>>>,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("thread_id", &self.thread_id)
            .field("count", &self.procs.lock().len())
            .finish()
    }
}

struct State {
    summary: Summary,
    stop_requested: bool,
}

struct Out {
    ring: VecDeque<u8>,
    total: u64,
    log: Option<fs::File>,
    log_bytes: u64,
    done: bool,
}

struct Proc {
    id: String,
    pgid: Option<Pid>,
    token: String,
    ledger: SandboxSettings,
    state: Mutex<State>,
    out: Mutex<Out>,
    changed: Condvar,
    input: Mutex<Option<fs::File>>,
    master: Option<OwnedFd>,
    model_cursor: AtomicU64,
    log_path: PathBuf,
    record_path: PathBuf,
}

/// How a process is started.
pub struct StartSpec<'a> {
    /// The shell command.
    pub command: &'a str,
    /// Its directory.
    pub dir: &'a Path,
    /// On a pseudo-terminal.
    pub tty: bool,
}

impl Processes {
    fn load(thread_id: &str, dir: PathBuf, hook: Arc<Mutex<Option<ExitHook>>>) -> Processes {
        let mut procs = Vec::new();
        if let Ok(entries) = fs::read_dir(&dir) {
            let mut records: Vec<(PathBuf, Record)> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .filter_map(|p| {
                    let r = fs::read(&p)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<Record>(&b).ok())?;
                    Some((p, r))
                })
                .collect();
            records.sort_by(|a, b| a.1.summary.started_at.cmp(&b.1.summary.started_at));
            for (path, mut r) in records {
                let live = matches!(r.summary.status.as_str(), "running" | "stopping");
                if live && !wuu_store::pid_alive(r.owner_pid) {
                    r.summary.status = "exited".into();
                    r.summary.input_available = false;
                    let now = crate::util::rfc3339(crate::util::now_ms());
                    r.summary.stopped_at.get_or_insert(now.clone());
                    r.summary.updated_at = now;
                    r.summary.last_error =
                        Some("ended with its host (the host stopped or restarted)".into());
                    if let Ok(b) = serde_json::to_vec(&r) {
                        let _ = fs::write(&path, b);
                    }
                }
                let log_path = path.with_extension("log");
                let total = r.summary.output_bytes;
                procs.push(Arc::new(Proc {
                    id: r.summary.id.clone(),
                    pgid: None,
                    token: String::new(),
                    ledger: SandboxSettings::default(),
                    state: Mutex::new(State {
                        summary: r.summary,
                        stop_requested: false,
                    }),
                    out: Mutex::new(Out {
                        ring: VecDeque::new(),
                        total,
                        log: None,
                        log_bytes: total,
                        done: true,
                    }),
                    changed: Condvar::new(),
                    input: Mutex::new(None),
                    master: None,
                    model_cursor: AtomicU64::new(total),
                    log_path,
                    record_path: path,
                }));
            }
        }
        Processes {
            thread_id: thread_id.to_string(),
            dir,
            procs: Mutex::new(procs),
            hook,
        }
    }

    /// Every process of the conversation, oldest first.
    pub fn list(&self) -> Vec<Summary> {
        self.procs.lock().iter().map(|p| p.summary()).collect()
    }

    /// How many are running.
    pub fn running(&self) -> usize {
        self.procs
            .lock()
            .iter()
            .filter(|p| p.state.lock().summary.status == "running")
            .count()
    }

    fn get(&self, id: &str) -> Result<Arc<Proc>, String> {
        let id = id.trim();
        self.procs
            .lock()
            .iter()
            .find(|p| p.id == id)
            .cloned()
            .ok_or_else(|| format!("no background process {id:?} in this conversation"))
    }

    /// The summary of `id`.
    pub fn summary(&self, id: &str) -> Result<Summary, String> {
        Ok(self.get(id)?.summary())
    }

    /// Starts a process in `ctx`'s sandbox. Errors: past the limit, the sandbox
    /// unavailable in a confined mode, the launcher or the terminal could not start.
    pub(crate) fn start(
        &self,
        spec: StartSpec<'_>,
        ctx: &ToolContext,
        limit: usize,
    ) -> Result<Summary, Fail> {
        if limit == 0 {
            return Err(Fail::Error(
                "background processes are turned off (agent.max_background_processes = 0); run the command in the foreground".into(),
            ));
        }
        let running = self.running();
        if running >= limit {
            return Err(Fail::Error(format!(
                "this conversation already runs {running} background processes, the limit (agent.max_background_processes = {limit}); stop one with the process tool (action \"stop\") first"
            )));
        }
        super::sandbox::check(ctx)?;
        for d in [&ctx.temp_dir, &self.dir] {
            fs::create_dir_all(d).map_err(|e| {
                Fail::Error(format!("cannot create the directory {}: {e}", d.display()))
            })?;
        }
        let id = crate::util::new_id("bp");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut cmd = shell_command(ctx)?;
        if spec.tty {
            // The launcher makes the terminal its controlling terminal (SIGWINCH).
            insert_tty_flag(&mut cmd);
        }
        cmd.arg("-c")
            .arg(spec.command)
            .current_dir(spec.dir)
            .env_clear()
            .envs(super::sandbox::command_env(ctx))
            .env(super::process::TOKEN_VAR, &token);
        let (reader, input, master): (fs::File, fs::File, Option<OwnedFd>) = if spec.tty {
            let (master, slave) = open_pty()
                .map_err(|e| Fail::Error(format!("cannot open a pseudo-terminal: {e}")))?;
            let dup = |f: &OwnedFd| {
                f.try_clone()
                    .map_err(|e| Fail::Error(format!("cannot duplicate a descriptor: {e}")))
            };
            cmd.stdin(Stdio::from(dup(&slave)?))
                .stdout(Stdio::from(dup(&slave)?))
                .stderr(Stdio::from(slave))
                .env("TERM", "xterm-256color");
            let r = fs::File::from(dup(&master)?);
            let w = fs::File::from(dup(&master)?);
            (r, w, Some(master))
        } else {
            let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| Fail::Error(format!("cannot make a pipe: {e}")))?;
            let w2 = w
                .try_clone()
                .map_err(|e| Fail::Error(format!("cannot duplicate a descriptor: {e}")))?;
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::from(w))
                .stderr(Stdio::from(w2));
            // Placeholder input; replaced by the child's stdin pipe below.
            let devnull = fs::File::open("/dev/null")
                .map_err(|e| Fail::Error(format!("cannot open /dev/null: {e}")))?;
            (fs::File::from(r), devnull, None)
        };
        let spawned = cmd.spawn();
        // Our copies of the child's ends must close, or EOF never comes.
        drop(cmd);
        let mut child: Child = spawned.map_err(|e| {
            Fail::Error(format!(
                "cannot start {} in {}: {e}",
                shell_path().display(),
                spec.dir.display()
            ))
        })?;
        let input = match child.stdin.take() {
            Some(s) => fs::File::from(OwnedFd::from(s)),
            None => input,
        };
        let pgid = Pid::from_child(&child);
        let raw = pgid.as_raw_nonzero().get();
        super::process::started(&ctx.sandbox, raw, &token);
        let now = crate::util::rfc3339(crate::util::now_ms());
        let summary = Summary {
            id: id.clone(),
            owner_kind: "main_agent".into(),
            owner_id: self.thread_id.clone(),
            lifecycle: "background".into(),
            status: "running".into(),
            pid: raw,
            tty: spec.tty,
            command: crate::secrets::redact_string(spec.command.to_string()),
            cwd: spec.dir.to_string_lossy().into_owned(),
            started_at: now.clone(),
            updated_at: now,
            stopped_at: None,
            exit_code: None,
            last_error: None,
            input_available: true,
            output_bytes: 0,
        };
        let log_path = self.dir.join(format!("{id}.log"));
        let log = fs::File::create(&log_path)
            .map_err(|e| log::warn!("background {id}: cannot create its log: {e}"))
            .ok();
        let p = Arc::new(Proc {
            id,
            pgid: Some(pgid),
            token,
            ledger: ctx.sandbox.clone(),
            state: Mutex::new(State {
                summary: summary.clone(),
                stop_requested: false,
            }),
            out: Mutex::new(Out {
                ring: VecDeque::new(),
                total: 0,
                log,
                log_bytes: 0,
                done: false,
            }),
            changed: Condvar::new(),
            input: Mutex::new(Some(input)),
            master,
            model_cursor: AtomicU64::new(0),
            record_path: log_path.with_extension("json"),
            log_path,
        });
        p.persist();
        self.procs.lock().push(p.clone());
        let reader_proc = p.clone();
        let reader_ok =
            crate::util::spawn("bg-read".into(), move || reader_proc.read_loop(reader)).is_ok();
        let waiter_proc = p.clone();
        let hook = self.hook.clone();
        let thread_id = self.thread_id.clone();
        let waiter = crate::util::spawn("bg-wait".into(), move || {
            waiter_proc.wait_loop(child, &thread_id, &hook)
        });
        if waiter.is_err() || !reader_ok {
            signal(pgid, Signal::KILL);
            return Err(Fail::Error(
                "internal error: cannot start the process's helper threads".into(),
            ));
        }
        Ok(summary)
    }

    /// Reads output of `id` from `offset` (absent = from where the model last read, for
    /// the model; clients pass their own), at most `max_bytes`, waiting up to `wait_ms`
    /// for output past `offset` while the process runs.
    pub fn read(
        &self,
        id: &str,
        offset: Option<u64>,
        max_bytes: usize,
        wait_ms: u64,
        for_model: bool,
    ) -> Result<(Summary, ReadOut), String> {
        let p = self.get(id)?;
        let from = offset.unwrap_or_else(|| {
            if for_model {
                p.model_cursor.load(Ordering::SeqCst)
            } else {
                0
            }
        });
        let deadline = Instant::now() + Duration::from_millis(wait_ms.min(MAX_WAIT_MS));
        let mut timed_out = false;
        {
            let mut out = p.out.lock();
            while wait_ms > 0 && out.total <= from && !out.done {
                if p.changed.wait_until(&mut out, deadline).timed_out() {
                    timed_out = out.total <= from;
                    break;
                }
            }
        }
        let r = p.read_range(from, max_bytes.clamp(1, READ_MAX_BYTES));
        if for_model {
            p.model_cursor.fetch_max(r.end_offset, Ordering::SeqCst);
        }
        Ok((p.summary(), ReadOut { timed_out, ..r }))
    }

    /// Writes `input` to the process's stdin (or terminal). Returns the bytes written.
    pub fn write(&self, id: &str, input: &[u8]) -> Result<(Summary, usize), String> {
        let p = self.get(id)?;
        if p.state.lock().summary.status != "running" {
            return Err(format!("background process {} is not running", p.id));
        }
        let mut guard = p.input.lock();
        let Some(f) = guard.as_mut() else {
            return Err(format!("background process {} takes no input", p.id));
        };
        f.write_all(input)
            .and_then(|()| f.flush())
            .map_err(|e| format!("writing to background process {} failed: {e}", p.id))?;
        drop(guard);
        Ok((p.summary(), input.len()))
    }

    /// Sets the terminal size of a `tty` process.
    pub fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<Summary, String> {
        let p = self.get(id)?;
        let Some(m) = &p.master else {
            return Err(format!(
                "background process {} has no terminal (start it with tty: true)",
                p.id
            ));
        };
        if p.state.lock().summary.status != "running" {
            return Err(format!("background process {} is not running", p.id));
        }
        let ws = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(m, ws)
            .map_err(|e| format!("cannot resize the terminal: {e}"))?;
        Ok(p.summary())
    }

    /// Stops `id`: SIGTERM to its process group, SIGKILL after the grace period; waits
    /// (at most about 4 s) for its end. A process that already ended is returned as is.
    pub fn stop(&self, id: &str) -> Result<Summary, String> {
        let p = self.get(id)?;
        p.stop();
        Ok(p.summary())
    }

    /// Stops every running process (conversation archived or deleted).
    pub fn stop_all(&self) {
        let procs: Vec<_> = self.procs.lock().clone();
        for p in procs {
            p.stop();
        }
    }
}

impl Proc {
    fn summary(&self) -> Summary {
        let mut s = self.state.lock().summary.clone();
        s.output_bytes = self.out.lock().total;
        s.input_available = s.status == "running" && self.input.lock().is_some();
        s
    }

    fn persist(&self) {
        let rec = Record {
            summary: self.summary(),
            owner_pid: std::process::id(),
        };
        match serde_json::to_vec(&rec) {
            Ok(b) => {
                if let Err(e) = fs::write(&self.record_path, b) {
                    log::warn!("background {}: cannot write its record: {e}", self.id);
                }
            }
            Err(e) => log::warn!("background {}: {e}", self.id),
        }
    }

    fn read_loop(&self, r: fs::File) {
        crate::secrets::copy_redacted(r, |bytes| self.append(bytes));
        let mut out = self.out.lock();
        out.done = true;
        if let Some(f) = out.log.as_mut() {
            let _ = f.flush();
        }
        drop(out);
        self.changed.notify_all();
    }

    fn append(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut out = self.out.lock();
        out.total += bytes.len() as u64;
        out.ring.extend(bytes);
        let excess = out.ring.len().saturating_sub(RING_BYTES);
        out.ring.drain(..excess);
        if out.log_bytes + bytes.len() as u64 <= LOG_MAX_BYTES {
            if let Some(f) = out.log.as_mut() {
                if f.write_all(bytes).is_ok() {
                    out.log_bytes += bytes.len() as u64;
                } else {
                    out.log = None;
                }
            }
        }
        drop(out);
        self.changed.notify_all();
    }

    /// Output from `from` (clamped to what is available), at most `max` bytes; when
    /// more than `max` is newer than `from`, the newest `max` bytes.
    fn read_range(&self, from: u64, max: usize) -> ReadOut {
        let out = self.out.lock();
        let total = out.total;
        let ring_start = total - out.ring.len() as u64;
        let mut truncated = false;
        let mut start = from.min(total);
        if total - start > max as u64 {
            start = total - max as u64;
            truncated = true;
        }
        let bytes: Vec<u8> = if start >= ring_start {
            let skip = (start - ring_start) as usize;
            out.ring.iter().skip(skip).copied().collect()
        } else {
            // Older than the ring: the log file (flushed by the OS on every write).
            let end = total.min(out.log_bytes);
            drop(out);
            let mut b = Vec::new();
            if start < end {
                if let Ok(mut f) = fs::File::open(&self.log_path) {
                    if f.seek(SeekFrom::Start(start)).is_ok() {
                        let _ = f.take(end - start).read_to_end(&mut b);
                    }
                }
            }
            if (b.len() as u64) < end - start || end < total {
                // The log was cut short: serve what the ring has.
                let out = self.out.lock();
                let ring_start = out.total - out.ring.len() as u64;
                truncated = true;
                start = ring_start.max(start);
                b = out.ring.iter().take(max).copied().collect();
            }
            b
        };
        let end = start + bytes.len() as u64;
        ReadOut {
            output: String::from_utf8_lossy(&bytes).into_owned(),
            truncated: truncated || from < start,
            start_offset: start,
            end_offset: end,
            total_bytes: total.max(end),
            timed_out: false,
        }
    }

    fn wait_loop(&self, mut child: Child, thread_id: &str, hook: &Mutex<Option<ExitHook>>) {
        let status = child.wait();
        // Whatever is left of the group (the launcher ends its tree; this is the rest).
        if let Some(pgid) = self.pgid {
            signal(pgid, Signal::KILL);
            super::process::ended(&self.ledger, pgid.as_raw_nonzero().get(), &self.token);
        }
        // Give the reader a moment to take the last output.
        {
            let deadline = Instant::now() + Duration::from_millis(500);
            let mut out = self.out.lock();
            while !out.done {
                if self.changed.wait_until(&mut out, deadline).timed_out() {
                    break;
                }
            }
        }
        *self.input.lock() = None;
        let natural = {
            let mut st = self.state.lock();
            let now = crate::util::rfc3339(crate::util::now_ms());
            let s = &mut st.summary;
            s.stopped_at = Some(now.clone());
            s.updated_at = now;
            match &status {
                Ok(es) => {
                    use std::os::unix::process::ExitStatusExt;
                    s.exit_code = es.code();
                    if let Some(sig) = es.signal() {
                        s.last_error = Some(format!("killed by signal {sig}"));
                    }
                }
                Err(e) => s.last_error = Some(format!("waiting for it failed: {e}")),
            }
            let requested = st.stop_requested;
            st.summary.status = if requested {
                "stopped".into()
            } else {
                "exited".into()
            };
            !requested
        };
        self.persist();
        self.changed.notify_all();
        if natural {
            let summary = self.summary();
            let total = summary.output_bytes;
            let tail = self.read_range(total.saturating_sub(2048), 2048).output;
            if let Some(h) = hook.lock().as_ref() {
                h(ExitNotice {
                    thread_id: thread_id.to_string(),
                    process: summary,
                    tail,
                });
            }
        }
    }

    fn stop(&self) {
        let Some(pgid) = self.pgid else { return };
        {
            let mut st = self.state.lock();
            if st.summary.status != "running" {
                return;
            }
            st.stop_requested = true;
            st.summary.status = "stopping".into();
        }
        signal(pgid, Signal::TERM);
        let ended = |grace: Duration| {
            let deadline = Instant::now() + grace;
            let mut out = self.out.lock();
            loop {
                let st = self.state.lock().summary.status.clone();
                if st != "stopping" {
                    return true;
                }
                if self
                    .changed
                    .wait_until(
                        &mut out,
                        deadline.min(Instant::now() + Duration::from_millis(50)),
                    )
                    .timed_out()
                    && Instant::now() >= deadline
                {
                    return false;
                }
            }
        };
        if !ended(super::KILL_GRACE) {
            signal(pgid, Signal::KILL);
            super::process::kill_carriers(&self.token);
            ended(Duration::from_secs(2));
        }
    }
}

fn signal(pgid: Pid, sig: Signal) {
    match kill_process_group(pgid, sig) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => log::debug!("background: kill(-{}, {sig:?}): {e}", pgid.as_raw_nonzero()),
    }
}

/// A new pseudo-terminal: (master, slave), both close-on-exec (the child gets dups).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let ws = rustix::termios::Winsize {
        ws_row: 24,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let _ = rustix::termios::tcsetwinsize(&master, ws);
    Ok((master, slave))
}

/// Adds `--tty` before the launcher's `--` (a shell started directly has no launcher).
fn insert_tty_flag(cmd: &mut std::process::Command) {
    let args: Vec<_> = cmd.get_args().map(|a| a.to_os_string()).collect();
    if cmd.get_program().to_string_lossy().ends_with("sh") {
        return;
    }
    let Some(pos) = args.iter().position(|a| a == "--") else {
        return;
    };
    let mut rebuilt = std::process::Command::new(cmd.get_program());
    rebuilt.args(&args[..pos]).arg("--tty").args(&args[pos..]);
    *cmd = rebuilt;
}
