//! `bash`: one command in its own session and process group (the launcher's), output
//! streamed, group always killed.
//!
//! Threads: two reader threads (stdout, stderr) send raw chunks over a small bounded
//! channel to the call's helper thread, which is the only sender of [`ToolEvent`]s. It
//! decodes UTF-8 incrementally (an incomplete trailing sequence is carried to the next
//! chunk), keeps a bounded head and tail of each stream, spills everything to a file once
//! a stream exceeds the cap, watches the timeout and the cancel flag every 20 ms, and
//! forwards output with backpressure (it blocks, in 20 ms slices, while the event channel
//! is full; readers then block, and so does the command on its pipe).
//!
//! Killing: timeout and cancel send SIGTERM to the process group, then SIGKILL after
//! [`KILL_GRACE`]. The launcher ends every other process of the command when its shell
//! ends, also those that left the group (see `sandbox` and `process`); the group still
//! gets SIGTERM when the main child exits, then SIGKILL if anything is left after the
//! grace period, and after a SIGKILL of the launcher the processes carrying the
//! command's token are killed. After the main child exited, output pipes are read for at
//! most `KILL_GRACE + 500 ms`; a process that escaped all this (a shell started without
//! the launcher) and keeps them open is then abandoned (its reader thread ends when the
//! pipe closes).

use super::args::BashArgs;
use super::paths::{self, Access};
use super::{
    Cancel, Fail, PermissionMode, ToolContext, ToolEvent, ToolOutcome, KILL_GRACE, TERM_AGAIN,
};
use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use rustix::process::{kill_process_group, test_kill_process_group, Pid, Signal};
use serde_json::json;
use std::collections::VecDeque;
use std::fs;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// Poll interval of the helper loop (cancel, timeout, child exit).
const TICK: Duration = Duration::from_millis(20);
/// Bytes per read from a pipe (and at most per `Output` event).
const READ_CHUNK: usize = 64 * 1024;
/// How long pipes are still read after SIGKILL before giving up on them.
const PIPE_DRAIN_AFTER_KILL: Duration = Duration::from_millis(500);
/// Largest timeout honoured (24 h); larger values are clamped.
const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;
const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// The shell used: the first existing `bash` (`/bin/bash`, `/usr/bin/bash`,
/// `/usr/local/bin/bash`, then `$PATH`), else `/bin/sh` (or `sh` from `$PATH`).
pub(crate) fn shell_path() -> &'static Path {
    static SHELL: OnceLock<PathBuf> = OnceLock::new();
    SHELL.get_or_init(|| {
        let in_path = |name: &str| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join(name))
                    .find(|c| c.is_file())
            })
        };
        ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .or_else(|| in_path("bash"))
            .or_else(|| Some(PathBuf::from("/bin/sh")).filter(|p| p.is_file()))
            .or_else(|| in_path("sh"))
            .unwrap_or_else(|| PathBuf::from("sh"))
    })
}

/// Incremental lossy UTF-8 decoder.
#[derive(Default)]
pub(crate) struct Utf8Stream {
    carry: Vec<u8>,
    /// Some bytes were invalid and replaced with U+FFFD.
    pub lossy: bool,
}

impl Utf8Stream {
    /// Decodes `bytes` after any carried bytes; an incomplete sequence at the end is kept
    /// for the next call.
    pub(crate) fn decode(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut rest: &[u8] = &buf;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            self.lossy = true;
                            rest = &after[n..];
                        }
                        None => {
                            self.carry = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// Flushes carried bytes at end of stream (they become U+FFFD).
    pub(crate) fn finish(&mut self) -> String {
        if self.carry.is_empty() {
            return String::new();
        }
        self.carry.clear();
        self.lossy = true;
        "\u{FFFD}".to_string()
    }
}

/// Drops an incomplete UTF-8 sequence at the end of `b`.
pub(crate) fn trim_incomplete_end(b: &[u8]) -> &[u8] {
    for back in 1..=b.len().min(4) {
        let i = b.len() - back;
        let byte = b[i];
        if byte & 0xC0 != 0x80 {
            let need = match byte {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            return if back < need { &b[..i] } else { b };
        }
    }
    b
}

/// Drops UTF-8 continuation bytes at the start of `b` (at most 3).
fn trim_partial_start(b: &[u8]) -> &[u8] {
    let skip = b.iter().take(3).take_while(|x| *x & 0xC0 == 0x80).count();
    &b[skip..]
}

/// Bounded capture of one stream: the first `head_cap` and last `tail_cap` bytes.
struct Capture {
    total: u64,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    dec: Utf8Stream,
}

impl Capture {
    fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self {
            total: 0,
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            dec: Utf8Stream::default(),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let take = (self.head_cap - self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        let rest = &bytes[take..];
        if rest.is_empty() || self.tail_cap == 0 {
            return;
        }
        if rest.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&rest[rest.len() - self.tail_cap..]);
        } else {
            self.tail.extend(rest);
            let excess = self.tail.len().saturating_sub(self.tail_cap);
            self.tail.drain(..excess);
        }
    }

    fn kept(&self) -> u64 {
        (self.head.len() + self.tail.len()) as u64
    }

    fn truncated(&self) -> bool {
        self.total > self.kept()
    }

    /// The kept text: everything, or head + omission marker + tail.
    fn text(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if !self.truncated() {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[… {} bytes omitted …]\n{}",
            String::from_utf8_lossy(trim_incomplete_end(&self.head)),
            self.total - self.kept(),
            String::from_utf8_lossy(trim_partial_start(&tail))
        )
    }
}

/// The spill file: both streams in arrival order, started once a stream exceeds the
/// cap (bytes before that are buffered; at most 2 × cap).
struct Spill {
    /// Masks configured secrets before anything reaches the file.
    redactor: crate::secrets::StreamRedactor,
    dir: PathBuf,
    buffer: Vec<u8>,
    file: Option<BufWriter<fs::File>>,
    path: Option<PathBuf>,
    error: Option<String>,
}

impl Spill {
    fn push(&mut self, bytes: &[u8], over_cap: bool) {
        if self.error.is_some() {
            return;
        }
        let bytes = &self.redactor.push(bytes)[..];
        if let Some(f) = &mut self.file {
            if let Err(e) = f.write_all(bytes) {
                self.error = Some(format!("writing the spill file failed: {e}"));
            }
            return;
        }
        self.buffer.extend_from_slice(bytes);
        if over_cap {
            if let Err(e) = self.start() {
                self.error = Some(format!(
                    "cannot create a spill file in {}: {e}",
                    self.dir.display()
                ));
            }
            self.buffer = Vec::new();
        }
    }

    fn start(&mut self) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let path = self
            .dir
            .join(format!("bash-{}.log", uuid::Uuid::now_v7().simple()));
        let mut f = BufWriter::new(fs::File::create(&path)?);
        f.write_all(&self.buffer)?;
        self.file = Some(f);
        self.path = Some(path);
        Ok(())
    }

    fn finish(&mut self) {
        let rest = self.redactor.finish();
        if let Some(f) = &mut self.file {
            if let Err(e) = f.write_all(&rest).and_then(|()| f.flush()) {
                self.error = Some(format!("writing the spill file failed: {e}"));
            }
        }
        self.file = None;
    }
}

fn signal_group(pgid: Pid, sig: Signal) {
    match kill_process_group(pgid, sig) {
        Ok(()) => {}
        Err(rustix::io::Errno::SRCH) => {}
        Err(e) => log::warn!(
            "bash: kill(-{}, {sig:?}) failed: {e}",
            pgid.as_raw_nonzero()
        ),
    }
}

/// Whether the process group still has a member that is not a zombie. Orphaned zombies
/// are reaped by init on its own schedule (which can take a second or more), so on Linux
/// the members are looked up in `/proc` (`stat`: state and pgrp) to avoid waiting for
/// them; elsewhere any member counts.
fn group_alive(pgid: Pid) -> bool {
    match test_kill_process_group(pgid) {
        Ok(()) => {}
        Err(_) => return false,
    }
    let Ok(dir) = fs::read_dir("/proc") else {
        return true;
    };
    let want = pgid.as_raw_nonzero().get();
    let mut saw_any = false;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        saw_any = true;
        // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        if pgrp == Some(want) && state != "Z" && state != "X" {
            return true;
        }
    }
    // No readable /proc: trust kill(2).
    !saw_any
}

fn spawn_reader<R: Read + Send + 'static>(
    mut r: R,
    idx: usize,
    tx: Sender<(usize, Vec<u8>)>,
) -> io::Result<()> {
    crate::util::spawn(format!("bash-{}", STREAMS[idx]), move || {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send((idx, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("bash: reading {} failed: {e}", STREAMS[idx]);
                    break;
                }
            }
        }
    })
    .map(|_| ())
}

/// Runs `bash` through the sandbox launcher (see `sandbox`): confined to the workspace
/// in `standard`, to read-only access in `read_only` (refused in both when Landlock is
/// unavailable); `workdir` must stay inside the workspace in those modes.
pub(crate) fn run(
    a: BashArgs,
    ctx: &ToolContext,
    cancel: &Cancel,
    events: &Sender<ToolEvent>,
) -> Result<ToolOutcome, Fail> {
    if a.command.trim().is_empty() {
        return Err(Fail::Error("command must not be empty".into()));
    }
    let dir = workdir(&a, ctx)?;
    if a.run_in_background {
        return super::background_tool::start(&a, ctx, &dir);
    }
    if a.tty {
        return Err(Fail::Error(
            "tty needs run_in_background: true (a foreground command has no terminal)".into(),
        ));
    }
    let timeout_ms = timeout_ms(&a, ctx);

    super::sandbox::check(ctx)?;
    if let Err(e) = fs::create_dir_all(&ctx.temp_dir) {
        return Err(Fail::Error(format!(
            "cannot create the command temp dir {}: {e}",
            ctx.temp_dir.display()
        )));
    }
    let Started {
        mut child,
        pgid,
        token,
        chunks,
    } = spawn(&a, ctx, &dir)?;

    let mut output = Output::new(ctx);
    let start = Instant::now();
    let mut watch = Watch::new(start.checked_add(Duration::from_millis(timeout_ms)));
    let mut pump = Pump {
        chunks,
        events,
        pending: None,
        readers_done: false,
        consumer_gone: false,
    };
    let pipes_abandoned = loop {
        let now = Instant::now();
        watch.check(now, cancel, &mut child, pgid, &token);
        if let Some(at) = watch.exited_at {
            if pump.drained() {
                break false;
            }
            if now >= at + KILL_GRACE + PIPE_DRAIN_AFTER_KILL {
                break !pump.readers_done;
            }
        }
        pump.step(&mut output);
    };
    pump.finish();
    output.finish(events);
    watch.reap(pgid, &token);
    super::process::ended(&ctx.sandbox, pgid.as_raw_nonzero().get(), &token);

    let elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(outcome(&Finished {
        status: watch.status,
        timed_out: watch.timed_out,
        interrupted: watch.interrupted,
        timeout_ms,
        caps: &output.caps,
        spill: &output.spill,
        pipes_abandoned,
        elapsed_ms,
    }))
}

/// The directory the command runs in: `workdir` (resolved for reading, must be a
/// directory) or the context's cwd.
fn workdir(a: &BashArgs, ctx: &ToolContext) -> Result<PathBuf, Fail> {
    match a.workdir.as_deref() {
        Some(w) if !w.trim().is_empty() => {
            let d = paths::resolve(ctx, w, Access::Read)?;
            if !d.is_dir() {
                return Err(Fail::Error(format!("workdir `{w}` is not a directory")));
            }
            Ok(d)
        }
        _ => Ok(ctx.cwd.clone()),
    }
}

/// The call's timeout in ms: its own, else the context's default, else (and at most)
/// [`MAX_TIMEOUT_MS`].
fn timeout_ms(a: &BashArgs, ctx: &ToolContext) -> u64 {
    match a.timeout_ms {
        Some(t) if t > 0 => t,
        _ if ctx.default_timeout_ms > 0 => ctx.default_timeout_ms,
        _ => MAX_TIMEOUT_MS,
    }
    .min(MAX_TIMEOUT_MS)
}

/// A started command: its main child, process group, token, and the output chunks of
/// its two reader threads (`(stream index, bytes)`).
struct Started {
    child: Child,
    pgid: Pid,
    token: String,
    chunks: Receiver<(usize, Vec<u8>)>,
}

/// The shell command without its script: through the launcher, or (in `unconfined`
/// when the launcher is unavailable) the shell directly in a group of its own.
pub(crate) fn shell_command(ctx: &ToolContext) -> Result<Command, Fail> {
    // The launcher makes itself a session and process group leader (`setsid`, its pgid
    // is its pid) as its first act; a shell started directly gets a group of its own.
    match super::sandbox::launcher() {
        Ok(launcher) => {
            let mut c = Command::new(launcher);
            c.arg(super::sandbox::LAUNCHER_ARG)
                .arg("--ppid")
                .arg(std::process::id().to_string())
                .arg("--mode")
                .arg(ctx.permission_mode.as_str())
                .args(super::sandbox::policy_args(ctx))
                .arg("--")
                .arg(shell_path());
            Ok(c)
        }
        Err(e) if ctx.permission_mode == PermissionMode::Unconfined => {
            log::warn!("bash: {e}; running the shell directly (it will not die with the host)");
            let mut c = Command::new(shell_path());
            c.process_group(0);
            Ok(c)
        }
        Err(e) => Err(Fail::Error(format!(
            "cannot start the command sandbox: {e}"
        ))),
    }
}

/// Starts the command in `dir` with the sandbox's environment and a fresh token, and
/// its two output reader threads. A reader that cannot start kills the group.
fn spawn(a: &BashArgs, ctx: &ToolContext, dir: &Path) -> Result<Started, Fail> {
    let mut cmd = shell_command(ctx)?;
    let token = uuid::Uuid::new_v4().simple().to_string();
    let mut child = cmd
        .arg("-c")
        .arg(&a.command)
        .current_dir(dir)
        .env_clear()
        .envs(super::sandbox::command_env(ctx))
        .env(super::process::TOKEN_VAR, &token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Fail::Error(format!(
                "cannot start {} in {}: {e}",
                shell_path().display(),
                dir.display()
            ))
        })?;
    let pgid = Pid::from_child(&child);
    super::process::started(&ctx.sandbox, pgid.as_raw_nonzero().get(), &token);
    let (chunk_tx, chunks) = crossbeam_channel::bounded::<(usize, Vec<u8>)>(16);
    let mut reader_error = None;
    if let Some(out) = child.stdout.take() {
        if let Err(e) = spawn_reader(out, 0, chunk_tx.clone()) {
            reader_error = Some(e);
        }
    }
    if let Some(err) = child.stderr.take() {
        if let Err(e) = spawn_reader(err, 1, chunk_tx.clone()) {
            reader_error = Some(e);
        }
    }
    drop(chunk_tx);
    if let Some(e) = reader_error {
        signal_group(pgid, Signal::KILL);
        let _ = child.wait();
        super::process::ended(&ctx.sandbox, pgid.as_raw_nonzero().get(), &token);
        return Err(Fail::Error(format!(
            "internal error: cannot start output reader threads: {e}"
        )));
    }
    Ok(Started {
        child,
        pgid,
        token,
        chunks,
    })
}

/// What is kept of both streams: the bounded captures, the masks of streamed output
/// and the spill file.
struct Output {
    cap: usize,
    caps: [Capture; 2],
    /// Streamed output is masked before it is sent (a secret split across reads too).
    masks: [crate::secrets::StreamRedactor; 2],
    spill: Spill,
}

impl Output {
    fn new(ctx: &ToolContext) -> Self {
        let cap = ctx.output_cap_bytes;
        Output {
            cap,
            caps: [Capture::new(cap), Capture::new(cap)],
            masks: Default::default(),
            spill: Spill {
                redactor: Default::default(),
                dir: ctx.spill_dir.clone(),
                buffer: Vec::new(),
                file: None,
                path: None,
                error: None,
            },
        }
    }

    /// Takes one chunk of stream `idx`; returns its masked, decoded text to stream
    /// (empty when everything is held back).
    fn push(&mut self, idx: usize, bytes: &[u8]) -> String {
        let c = &mut self.caps[idx];
        c.push(bytes);
        self.spill.push(bytes, c.total > self.cap as u64);
        c.dec.decode(&self.masks[idx].push(bytes))
    }

    /// Ends both streams: sends what the masks and decoders still hold, closes the
    /// spill file.
    fn finish(&mut self, events: &Sender<ToolEvent>) {
        for (idx, c) in self.caps.iter_mut().enumerate() {
            let held = self.masks[idx].finish();
            let mut text = c.dec.decode(&held);
            text.push_str(&c.dec.finish());
            if !text.is_empty() {
                let _ = events.send(ToolEvent::Output {
                    stream: STREAMS[idx],
                    text,
                });
            }
        }
        self.spill.finish();
    }
}

/// Moves output from the reader threads to the event channel, one tick at a time, with
/// backpressure: while an event waits for room, no chunk is read.
struct Pump<'a> {
    chunks: Receiver<(usize, Vec<u8>)>,
    events: &'a Sender<ToolEvent>,
    /// An event the channel had no room for yet.
    pending: Option<ToolEvent>,
    /// Both readers ended (their pipes closed).
    readers_done: bool,
    /// The event receiver is gone: output is still captured, no longer sent.
    consumer_gone: bool,
}

impl Pump<'_> {
    /// One step of at most [`TICK`]: sends the pending event, or takes the next chunk,
    /// or (readers done) sleeps.
    fn step(&mut self, output: &mut Output) {
        if let Some(ev) = self.pending.take() {
            match self.events.send_timeout(ev, TICK) {
                Ok(()) => {}
                Err(SendTimeoutError::Timeout(ev)) => self.pending = Some(ev),
                Err(SendTimeoutError::Disconnected(_)) => self.consumer_gone = true,
            }
        } else if !self.readers_done {
            match self.chunks.recv_timeout(TICK) {
                Ok((idx, bytes)) => {
                    let text = output.push(idx, &bytes);
                    if !text.is_empty() && !self.consumer_gone {
                        self.pending = Some(ToolEvent::Output {
                            stream: STREAMS[idx],
                            text,
                        });
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.readers_done = true,
            }
        } else {
            thread::sleep(TICK);
        }
    }

    /// All output was read and sent.
    fn drained(&self) -> bool {
        self.readers_done && self.pending.is_none()
    }

    /// Stops reading (readers still running end when their pipe closes or on their next
    /// send) and sends the pending event, waiting for room.
    fn finish(self) {
        drop(self.chunks);
        if let Some(ev) = self.pending {
            let _ = self.events.send(ev);
        }
    }
}

/// The command's end: cancel, timeout, the main child's exit, and the SIGTERM →
/// SIGKILL escalation of its process group.
struct Watch {
    deadline: Option<Instant>,
    status: Option<ExitStatus>,
    exited_at: Option<Instant>,
    term_at: Option<Instant>,
    /// When SIGTERM was last sent (see [`TERM_AGAIN`]).
    termed_at: Option<Instant>,
    kill_sent: bool,
    timed_out: bool,
    interrupted: bool,
}

impl Watch {
    fn new(deadline: Option<Instant>) -> Self {
        Watch {
            deadline,
            status: None,
            exited_at: None,
            term_at: None,
            termed_at: None,
            kill_sent: false,
            timed_out: false,
            interrupted: false,
        }
    }

    /// SIGTERM to the group, once.
    fn term(&mut self, pgid: Pid, now: Instant) {
        if self.term_at.is_none() {
            signal_group(pgid, Signal::TERM);
            self.term_at = Some(now);
            self.termed_at = Some(now);
        }
    }

    /// SIGTERM again while the group waits out the grace: a process the first one
    /// missed (forked while it was delivered: a shell's handler records it, then the
    /// child execs and forgets it) or one that ignored only the first gets it, so the
    /// group rarely waits out the whole grace.
    fn term_again(&mut self, pgid: Pid, now: Instant) {
        if let Some(last) = self.termed_at {
            if !self.kill_sent && now >= last + TERM_AGAIN {
                signal_group(pgid, Signal::TERM);
                self.termed_at = Some(now);
            }
        }
    }

    /// One look at cancel, the deadline, the kill grace and the main child.
    fn check(&mut self, now: Instant, cancel: &Cancel, child: &mut Child, pgid: Pid, token: &str) {
        if !self.interrupted && cancel.is_set() {
            self.interrupted = true;
            self.term(pgid, now);
        }
        if self.exited_at.is_none() && !self.timed_out && self.deadline.is_some_and(|d| now >= d) {
            self.timed_out = true;
            self.term(pgid, now);
        }
        self.term_again(pgid, now);
        if let Some(t) = self.term_at {
            if !self.kill_sent && now >= t + KILL_GRACE {
                signal_group(pgid, Signal::KILL);
                self.kill_sent = true;
                // The launcher may die before it ended the command's other processes
                // (its own grace runs as long as ours): end those that carry the token
                // now, not after the pipes they hold were given up on.
                super::process::kill_carriers(token);
            }
        }
        if self.exited_at.is_none() {
            let exited = match child.try_wait() {
                Ok(Some(st)) => {
                    self.status = Some(st);
                    true
                }
                Ok(None) => false,
                Err(e) => {
                    log::warn!("bash: waiting for the child failed: {e}");
                    true
                }
            };
            if exited {
                self.exited_at = Some(now);
                // Background jobs of the command die with it.
                self.term(pgid, now);
            }
        }
    }

    /// Waits until no process of the group is left, sending SIGKILL after the grace
    /// period; after a SIGKILL, also kills the processes carrying `token`.
    fn reap(&mut self, pgid: Pid, token: &str) {
        // No process of the group may outlive the call.
        let term_at = self.term_at.unwrap_or_else(Instant::now);
        while !self.kill_sent && group_alive(pgid) {
            let now = Instant::now();
            if now >= term_at + KILL_GRACE {
                signal_group(pgid, Signal::KILL);
                self.kill_sent = true;
            } else {
                self.term_again(pgid, now);
                thread::sleep(TICK);
            }
        }
        if self.kill_sent {
            signal_group(pgid, Signal::KILL);
            // The launcher was killed before it could end the command's other processes
            // (without a PID namespace they outlive it): they carry the token.
            super::process::kill_carriers(token);
        }
    }
}

struct Finished<'a> {
    status: Option<ExitStatus>,
    timed_out: bool,
    interrupted: bool,
    timeout_ms: u64,
    caps: &'a [Capture; 2],
    spill: &'a Spill,
    pipes_abandoned: bool,
    elapsed_ms: u64,
}

fn outcome(f: &Finished<'_>) -> ToolOutcome {
    let exit_code = f.status.and_then(|s| s.code());
    let signal = f.status.and_then(|s| s.signal());
    let lossy = f.caps.iter().any(|c| c.dec.lossy);
    let mut out = String::new();
    if f.interrupted {
        out.push_str("Command interrupted; its process group was killed.\n");
    } else if f.timed_out {
        out.push_str(&format!(
            "Command timed out after {} ms; its process group was killed.\n",
            f.timeout_ms
        ));
    }
    match (exit_code, signal) {
        (Some(c), _) => out.push_str(&format!("Exit code: {c}\n")),
        (None, Some(s)) => out.push_str(&format!("Killed by signal {s}\n")),
        (None, None) => out.push_str("Exit status unknown\n"),
    }
    for (idx, c) in f.caps.iter().enumerate() {
        if c.total == 0 {
            continue;
        }
        let text = c.text();
        out.push_str(STREAMS[idx]);
        out.push_str(":\n");
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    if f.caps.iter().all(|c| c.total == 0) {
        out.push_str("(no output)\n");
    }
    for (idx, c) in f.caps.iter().enumerate() {
        if c.truncated() {
            out.push_str(&format!(
                "[{} truncated: {} bytes in total, showing the first {} and the last {} bytes]\n",
                STREAMS[idx],
                c.total,
                c.head.len(),
                c.tail.len()
            ));
        }
    }
    if let Some(p) = &f.spill.path {
        out.push_str(&format!(
            "[full output (stdout and stderr in arrival order) saved to {}]\n",
            p.display()
        ));
    }
    if let Some(e) = &f.spill.error {
        out.push_str(&format!("[{e}]\n"));
    }
    if lossy {
        out.push_str("[output was not valid UTF-8; invalid bytes were replaced with U+FFFD]\n");
    }
    if f.pipes_abandoned {
        out.push_str(
            "[a process outside the command's process group kept the output open; stopped reading]\n",
        );
    }
    let success = f.status.is_some_and(|s| s.success());
    let mut detail = json!({
        "exit_code": exit_code,
        "timed_out": f.timed_out,
        "interrupted": f.interrupted,
        "stdout_bytes": f.caps[0].total,
        "stderr_bytes": f.caps[1].total,
        "lossy_utf8": lossy,
        "duration_ms": f.elapsed_ms,
    });
    if let Some(s) = signal {
        detail["signal"] = json!(s);
    }
    if let Some(p) = &f.spill.path {
        detail["spill_path"] = json!(p.to_string_lossy());
    }
    ToolOutcome {
        output: out,
        is_error: f.interrupted || f.timed_out || !success,
        permission_denied: false,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_carries_split_chars_and_flags_invalid() {
        let mut d = Utf8Stream::default();
        let bytes = "é€😀".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&d.decode(std::slice::from_ref(b)));
        }
        assert_eq!(out, "é€😀");
        assert!(!d.lossy);
        assert_eq!(d.decode(b"a\xffb"), "a\u{FFFD}b");
        assert!(d.lossy);
        let mut d = Utf8Stream::default();
        assert_eq!(d.decode(b"x\xe2\x82"), "x");
        assert_eq!(d.finish(), "\u{FFFD}");
        assert!(d.lossy);
    }

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(10);
        c.push(b"0123456789");
        assert!(!c.truncated());
        assert_eq!(c.text(), "0123456789");
        c.push(b"abcdefghij");
        assert!(c.truncated());
        assert_eq!(c.total, 20);
        assert_eq!(c.text(), "01234\n[… 10 bytes omitted …]\nfghij");
        let mut c = Capture::new(6);
        c.push("ééé€€".as_bytes()); // 2+2+2+3+3 = 12 bytes
        let t = c.text();
        assert!(!t.contains('\u{FFFD}'), "{t}");
    }

    #[test]
    fn trims_utf8_boundaries() {
        assert_eq!(trim_incomplete_end("aé".as_bytes()), "aé".as_bytes());
        assert_eq!(trim_incomplete_end(&"a€".as_bytes()[..3]), b"a");
        assert_eq!(trim_partial_start(&"€b".as_bytes()[1..]), b"b");
    }
}
