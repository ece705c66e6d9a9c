//! Client terminals: commands an external agent asks the host to run (ACP `terminal/*`,
//! spec `engines.md` §1.6), run exactly as `bash` runs a command — through the sandbox
//! launcher in the conversation's permission mode, with the scrubbed command
//! environment, a token in the process ledger, `cwd` beneath the workspace in the
//! confined modes — but kept running while the agent polls it.
//!
//! A [`Terminal`] has one pipe for stdout and stderr; a reader thread masks configured
//! secrets and keeps the newest `output_byte_limit` bytes (older output is dropped from
//! the front at a character boundary and the terminal reads `truncated`); a waiter
//! thread records the exit status. [`Terminals`] is one conversation's table: a
//! released terminal is killed and forgotten, and dropping the table (or
//! [`Terminals::release_all`]) kills every terminal it still holds.

use super::paths::{self, Access};
use super::sandbox::SandboxSettings;
use super::shell::{shell_command, shell_path, trim_incomplete_end};
use super::{Fail, ToolContext, KILL_GRACE};
use parking_lot::{Condvar, Mutex};
use rustix::process::{kill_process_group, Pid, Signal};
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest output kept per terminal, in bytes (also the default when the agent names
/// no `outputByteLimit`).
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;
/// Most terminals one conversation holds at once (released ones do not count).
pub const MAX_TERMINALS: usize = 32;

/// How a terminal is started (ACP `terminal/create` params).
#[derive(Debug, Clone, Default)]
pub struct TerminalSpec {
    /// The program, or a shell command line when `args` is empty.
    pub command: String,
    /// Its arguments (each passed verbatim, shell-quoted).
    pub args: Vec<String>,
    /// Variables set on top of the command environment (`name`, `value`).
    pub env: Vec<(String, String)>,
    /// Absolute working directory (absent: the conversation's cwd).
    pub cwd: Option<String>,
    /// Output bytes kept (absent or larger: [`MAX_OUTPUT_BYTES`]).
    pub output_byte_limit: Option<u64>,
}

impl TerminalSpec {
    /// The command line shown to clients and run by the shell: `command` alone when it
    /// has no arguments, else every word single-quoted.
    pub fn command_line(&self) -> String {
        if self.args.is_empty() {
            return self.command.clone();
        }
        std::iter::once(&self.command)
            .chain(&self.args)
            .map(|w| quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `w` as one shell word (unchanged when it has no special characters).
fn quote(w: &str) -> String {
    let plain = !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// How a terminal's command ended (ACP `TerminalExitStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it (`SIGKILL`, …), when one did.
    pub signal: Option<String>,
}

/// What a terminal has shown so far (ACP `terminal/output` result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The kept output (lossy UTF-8, masked).
    pub output: String,
    /// Output was dropped from the front to stay within the limit.
    pub truncated: bool,
    /// The exit status, once the command ended.
    pub exit: Option<ExitStatus>,
}

struct Out {
    buf: Vec<u8>,
    /// Bytes appended so far (the kept ones are the last `buf.len()`).
    total: u64,
    limit: usize,
    truncated: bool,
    reader_done: bool,
    exit: Option<ExitStatus>,
}

/// One running (or ended) terminal.
pub struct Terminal {
    id: String,
    command: String,
    cwd: PathBuf,
    pgid: Pid,
    token: String,
    ledger: SandboxSettings,
    out: Mutex<Out>,
    changed: Condvar,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("id", &self.id)
            .field("command", &self.command)
            .finish()
    }
}

impl Terminal {
    /// Its id (`term_…`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The command line it runs (masked).
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The directory it runs in.
    pub fn cwd(&self) -> &std::path::Path {
        &self.cwd
    }

    /// The output so far and the exit status once known. While the command runs, an
    /// incomplete character at the end is held back.
    pub fn snapshot(&self) -> Snapshot {
        let out = self.out.lock();
        let bytes = if out.exit.is_some() {
            &out.buf[..]
        } else {
            trim_incomplete_end(&out.buf)
        };
        Snapshot {
            output: String::from_utf8_lossy(bytes).into_owned(),
            truncated: out.truncated,
            exit: out.exit.clone(),
        }
    }

    /// The output after byte `offset` (counted over everything the command wrote; output
    /// already dropped is skipped) and the offset to ask from next time. While the
    /// command runs, an incomplete character at the end is held back.
    pub fn since(&self, offset: u64) -> (String, u64) {
        let out = self.out.lock();
        let kept_from = out.total - out.buf.len() as u64;
        let start = usize::try_from(offset.max(kept_from) - kept_from).unwrap_or(usize::MAX);
        let new = out.buf.get(start..).unwrap_or(&[]);
        let new = if out.exit.is_some() {
            new
        } else {
            trim_incomplete_end(new)
        };
        let next = kept_from + (start + new.len()) as u64;
        (String::from_utf8_lossy(new).into_owned(), next)
    }

    /// Waits until the command ended, at most `timeout` (`None`: no limit); its exit
    /// status, or `None` when the time ran out.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<ExitStatus> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut out = self.out.lock();
        while out.exit.is_none() {
            match deadline {
                Some(d) => {
                    if self.changed.wait_until(&mut out, d).timed_out() {
                        break;
                    }
                }
                None => self.changed.wait(&mut out),
            }
        }
        out.exit.clone()
    }

    /// Kills the command: SIGTERM to its process group, SIGKILL (and the sweep by
    /// token) after [`KILL_GRACE`]; returns once it ended (at most about
    /// `KILL_GRACE` + 2 s). The output stays readable.
    pub fn kill(&self) {
        if self.out.lock().exit.is_some() {
            return;
        }
        signal(self.pgid, Signal::TERM);
        if self.wait(Some(KILL_GRACE)).is_none() {
            signal(self.pgid, Signal::KILL);
            super::process::kill_carriers(&self.token);
            self.wait(Some(Duration::from_secs(2)));
        }
    }

    fn append(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut out = self.out.lock();
        out.total += bytes.len() as u64;
        out.buf.extend_from_slice(bytes);
        if out.buf.len() > out.limit {
            let mut cut = out.buf.len() - out.limit;
            // Never start inside a character.
            while out.buf.get(cut).is_some_and(|b| b & 0xC0 == 0x80) {
                cut += 1;
            }
            out.buf.drain(..cut);
            out.truncated = true;
        }
        drop(out);
        self.changed.notify_all();
    }

    fn read_loop(&self, r: fs::File) {
        crate::secrets::copy_redacted(r, |bytes| self.append(bytes));
        self.out.lock().reader_done = true;
        self.changed.notify_all();
    }

    fn wait_loop(&self, mut child: Child) {
        let status = child.wait();
        // Whatever is left of the group (the launcher ends its tree; this is the rest).
        signal(self.pgid, Signal::KILL);
        super::process::ended(&self.ledger, self.pgid.as_raw_nonzero().get(), &self.token);
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut out = self.out.lock();
        while !out.reader_done {
            if self.changed.wait_until(&mut out, deadline).timed_out() {
                break;
            }
        }
        out.exit = Some(match status {
            Ok(es) => {
                use std::os::unix::process::ExitStatusExt;
                ExitStatus {
                    exit_code: es.code(),
                    signal: es.signal().map(signal_name),
                }
            }
            Err(e) => {
                log::warn!("terminal {}: waiting for it failed: {e}", self.id);
                ExitStatus {
                    exit_code: None,
                    signal: None,
                }
            }
        });
        drop(out);
        self.changed.notify_all();
    }
}

/// The conventional name of signal `n` (`SIGTERM`), else `SIG<n>`.
fn signal_name(n: i32) -> String {
    let name = match n {
        1 => "HUP",
        2 => "INT",
        3 => "QUIT",
        4 => "ILL",
        6 => "ABRT",
        7 => "BUS",
        8 => "FPE",
        9 => "KILL",
        10 => "USR1",
        11 => "SEGV",
        12 => "USR2",
        13 => "PIPE",
        14 => "ALRM",
        15 => "TERM",
        _ => return format!("SIG{n}"),
    };
    format!("SIG{name}")
}

fn signal(pgid: Pid, sig: Signal) {
    match kill_process_group(pgid, sig) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => log::debug!("terminal: kill(-{}, {sig:?}): {e}", pgid.as_raw_nonzero()),
    }
}

/// One conversation's terminals.
#[derive(Debug, Default)]
pub struct Terminals {
    map: Mutex<HashMap<String, Arc<Terminal>>>,
}

impl Terminals {
    /// An empty table.
    pub fn new() -> Terminals {
        Terminals::default()
    }

    /// Starts `spec` in `ctx`'s sandbox. Errors (as text): too many terminals, a bad
    /// variable name, `cwd` not an absolute directory (or outside the workspace in a
    /// confined mode), the sandbox unavailable in a confined mode, the launcher could
    /// not start.
    pub fn create(&self, spec: &TerminalSpec, ctx: &ToolContext) -> Result<Arc<Terminal>, String> {
        self.start(spec, ctx).map_err(|f| match f {
            Fail::Denied(m) => format!("permission denied: {m}"),
            Fail::Error(m) => m,
        })
    }

    fn start(&self, spec: &TerminalSpec, ctx: &ToolContext) -> Result<Arc<Terminal>, Fail> {
        if spec.command.trim().is_empty() {
            return Err(Fail::Error("command must not be empty".into()));
        }
        let held = self.map.lock().len();
        if held >= MAX_TERMINALS {
            return Err(Fail::Error(format!(
                "this session already holds {held} terminals, the limit; release one first"
            )));
        }
        for (k, v) in &spec.env {
            let bad_name = k.is_empty() || k.contains(['=', '\0']);
            if bad_name || v.contains('\0') {
                return Err(Fail::Error(format!("invalid environment variable {k:?}")));
            }
        }
        let dir = match spec.cwd.as_deref().filter(|c| !c.trim().is_empty()) {
            Some(c) => {
                if !std::path::Path::new(c).is_absolute() {
                    return Err(Fail::Error(format!("cwd {c} is not an absolute path")));
                }
                let d = paths::resolve(ctx, c, Access::Read)?;
                if !d.is_dir() {
                    return Err(Fail::Error(format!("cwd {c} is not a directory")));
                }
                d
            }
            None => ctx.cwd.clone(),
        };
        super::sandbox::check(ctx)?;
        fs::create_dir_all(&ctx.temp_dir).map_err(|e| {
            Fail::Error(format!(
                "cannot create the command temp dir {}: {e}",
                ctx.temp_dir.display()
            ))
        })?;
        let line = spec.command_line();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut cmd = shell_command(ctx)?;
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| Fail::Error(format!("cannot make a pipe: {e}")))?;
        let w2 = w
            .try_clone()
            .map_err(|e| Fail::Error(format!("cannot duplicate a descriptor: {e}")))?;
        let reserved = |k: &str| k == super::process::TOKEN_VAR || k == "WUU_SANDBOX";
        cmd.arg("-c")
            .arg(&line)
            .current_dir(&dir)
            .env_clear()
            .envs(super::sandbox::command_env(ctx))
            .envs(spec.env.iter().filter(|(k, _)| !reserved(k)).cloned())
            .env(super::process::TOKEN_VAR, &token)
            .stdin(Stdio::null())
            .stdout(Stdio::from(w))
            .stderr(Stdio::from(w2));
        let spawned = cmd.spawn();
        // Our copies of the write end must close, or EOF never comes.
        drop(cmd);
        let child = spawned.map_err(|e| {
            Fail::Error(format!(
                "cannot start {} in {}: {e}",
                shell_path().display(),
                dir.display()
            ))
        })?;
        let pgid = Pid::from_child(&child);
        super::process::started(&ctx.sandbox, pgid.as_raw_nonzero().get(), &token);
        let limit = spec
            .output_byte_limit
            .map_or(MAX_OUTPUT_BYTES, |l| {
                usize::try_from(l).unwrap_or(usize::MAX)
            })
            .min(MAX_OUTPUT_BYTES);
        let t = Arc::new(Terminal {
            id: crate::util::new_id("term"),
            command: crate::secrets::redact_string(line),
            cwd: dir,
            pgid,
            token,
            ledger: ctx.sandbox.clone(),
            out: Mutex::new(Out {
                buf: Vec::new(),
                total: 0,
                limit,
                truncated: false,
                reader_done: false,
                exit: None,
            }),
            changed: Condvar::new(),
        });
        let reader = t.clone();
        let read_ok = crate::util::spawn("term-read".into(), move || {
            reader.read_loop(fs::File::from(r))
        })
        .is_ok();
        let waiter = t.clone();
        let wait_ok =
            crate::util::spawn("term-wait".into(), move || waiter.wait_loop(child)).is_ok();
        if !read_ok || !wait_ok {
            signal(pgid, Signal::KILL);
            return Err(Fail::Error(
                "internal error: cannot start the terminal's helper threads".into(),
            ));
        }
        self.map.lock().insert(t.id.clone(), t.clone());
        Ok(t)
    }

    /// The terminal `id` of this conversation.
    pub fn get(&self, id: &str) -> Result<Arc<Terminal>, String> {
        self.map
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(|| format!("no terminal {id:?} in this session"))
    }

    /// Forgets terminal `id` (later calls name nothing) and returns it, for the caller
    /// to [`Terminal::kill`].
    pub fn release(&self, id: &str) -> Result<Arc<Terminal>, String> {
        self.map
            .lock()
            .remove(id)
            .ok_or_else(|| format!("no terminal {id:?} in this session"))
    }

    /// Releases every terminal and kills those still running (all at once: SIGTERM,
    /// then SIGKILL to what is left after the grace period). Returns once they ended.
    pub fn release_all(&self) {
        let all: Vec<Arc<Terminal>> = self.map.lock().drain().map(|(_, t)| t).collect();
        let running: Vec<_> = all
            .into_iter()
            .filter(|t| t.out.lock().exit.is_none())
            .collect();
        if running.is_empty() {
            return;
        }
        for t in &running {
            signal(t.pgid, Signal::TERM);
        }
        let deadline = Instant::now() + KILL_GRACE;
        for t in &running {
            let left = deadline.saturating_duration_since(Instant::now());
            if t.wait(Some(left)).is_none() {
                signal(t.pgid, Signal::KILL);
                super::process::kill_carriers(&t.token);
                t.wait(Some(Duration::from_secs(2)));
            }
        }
    }
}

impl Drop for Terminals {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_quotes_arguments_only() {
        let s = TerminalSpec {
            command: "ls -la | head".into(),
            ..Default::default()
        };
        assert_eq!(s.command_line(), "ls -la | head");
        let s = TerminalSpec {
            command: "printf".into(),
            args: vec![r"%s\n".into(), "it's".into(), "a/b".into()],
            ..Default::default()
        };
        assert_eq!(s.command_line(), r"printf '%s\n' 'it'\''s' a/b");
    }

    #[test]
    fn output_keeps_the_newest_bytes_from_a_character_boundary() {
        let t = Terminal {
            id: "term_x".into(),
            command: String::new(),
            cwd: PathBuf::new(),
            pgid: Pid::from_raw(i32::MAX).unwrap(),
            token: String::new(),
            ledger: SandboxSettings::default(),
            out: Mutex::new(Out {
                buf: Vec::new(),
                total: 0,
                limit: 5,
                truncated: false,
                reader_done: false,
                exit: None,
            }),
            changed: Condvar::new(),
        };
        t.append("ab€".as_bytes());
        assert_eq!(t.snapshot().output, "ab€");
        assert!(!t.snapshot().truncated);
        t.append(b"c");
        assert_eq!(t.snapshot().output, "b€c");
        assert!(t.snapshot().truncated);
        // The newest 5 bytes of "b€cde" start inside "€": the whole character goes.
        t.append(b"de");
        assert_eq!(t.snapshot().output, "cde");
        // An incomplete character at the end is held back while the command runs.
        t.append(&"é".as_bytes()[..1]);
        assert_eq!(t.snapshot().output, "cde");
        // Streaming: everything after an offset, the incomplete character held back.
        assert_eq!(t.since(0), ("cde".to_owned(), 8));
        assert_eq!(t.since(7), ("e".to_owned(), 8));
        t.append(&"é".as_bytes()[1..]);
        assert_eq!(t.since(8), ("é".to_owned(), 10));
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(40), "SIG40");
    }
}
