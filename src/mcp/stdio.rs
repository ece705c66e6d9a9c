//! The stdio transport (MCP 2025-06-18 "stdio"): the server is a child process; we
//! write one JSON-RPC message per line to its stdin and one reader thread parses its
//! stdout. The child is started through the command launcher as a service (see
//! `tools::sandbox`), so it dies with the host (parent-death signal, also after
//! `kill -9`), and recorded in the process ledger until it is closed. Its stderr is
//! drained by its own thread; the last lines (redacted) explain a crash.
//!
//! A line that is not JSON, or longer than [`MAX_MESSAGE`], fails every call waiting at
//! that moment with a clear error (the server broke the protocol; the answer cannot be
//! matched to a call); the connection stays up. Server requests get `ping` → `{}`,
//! anything else `-32601`.

use super::rpc::{answer_of, Answer, Event, RpcError, Transport, MAX_MESSAGE};
use crate::tools::sandbox::SandboxSettings;
use crate::util::reply::{reply, ReplyRx, ReplyTx};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio as Piped};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const STDERR_LINES: usize = 8;
const STOP_WAIT: Duration = Duration::from_secs(2);

struct Pending {
    waiters: HashMap<u64, ReplyTx<Answer>>,
    closed: Option<String>,
}

/// A running stdio server.
pub struct Stdio {
    name: String,
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicU64,
    stderr: Arc<Mutex<VecDeque<String>>>,
    token: String,
    ledger: SandboxSettings,
    launched: bool,
}

/// What to start.
pub struct Launch<'a> {
    /// Server name (thread names, messages).
    pub name: &'a str,
    /// Program.
    pub program: &'a str,
    /// Arguments.
    pub args: &'a [String],
    /// Working directory.
    pub cwd: &'a Path,
    /// The whole environment.
    pub env: &'a [(OsString, OsString)],
    /// The wuu home whose process ledger records the child.
    pub ledger: Option<PathBuf>,
}

impl Stdio {
    /// Starts the server; `events` gets its notifications and its end.
    pub fn spawn(
        l: Launch<'_>,
        events: Arc<dyn Fn(Event) + Send + Sync>,
    ) -> Result<Arc<Stdio>, String> {
        let (mut cmd, launched) = match crate::tools::sandbox::launcher() {
            Ok(launcher) => {
                let mut c = Command::new(launcher);
                c.arg(crate::tools::sandbox::LAUNCHER_ARG)
                    .arg("--ppid")
                    .arg(std::process::id().to_string())
                    .arg("--mode")
                    .arg("unconfined")
                    .arg("--service")
                    .arg("--")
                    .arg(l.program);
                (c, true)
            }
            Err(e) => {
                log::warn!("mcp {}: {e}; starting it directly", l.name);
                let mut c = Command::new(l.program);
                use std::os::unix::process::CommandExt;
                c.process_group(0);
                (c, false)
            }
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        cmd.args(l.args)
            .current_dir(l.cwd)
            .env_clear()
            .envs(l.env.iter().map(|(k, v)| (k, v)))
            .env(crate::tools::process::TOKEN_VAR, &token)
            .stdin(Piped::piped())
            .stdout(Piped::piped())
            .stderr(Piped::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", l.program))?;
        let ledger = SandboxSettings {
            process_ledger: l.ledger,
            ..Default::default()
        };
        crate::tools::process::started(&ledger, child.id() as i32, &token);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let stderr = child.stderr.take();
        let conn = Arc::new(Stdio {
            name: l.name.to_owned(),
            stdin: Mutex::new(stdin),
            child: Mutex::new(child),
            pending: Arc::new(Mutex::new(Pending {
                waiters: HashMap::new(),
                closed: None,
            })),
            next_id: AtomicU64::new(1),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            token,
            ledger,
            launched,
        });
        if let Some(err) = stderr {
            let tail = conn.stderr.clone();
            let _ = crate::util::spawn(format!("mcp-stderr-{}", thread_tag(l.name)), move || {
                drain_stderr(err, tail)
            });
        }
        let weak = Arc::downgrade(&conn);
        let pending = conn.pending.clone();
        let tail = conn.stderr.clone();
        let name = l.name.to_owned();
        crate::util::spawn(format!("mcp-reader-{}", thread_tag(l.name)), move || {
            read_loop(stdout, &weak, &pending, &*events);
            let why = match tail.lock().back() {
                Some(line) => format!("the server process exited (stderr: {line})"),
                None => "the server process exited".to_owned(),
            };
            log::info!("mcp {name}: {why}");
            fail_all(&pending, &why, true);
            events(Event::Closed(why));
        })
        .map_err(|e| format!("cannot start the reader thread: {e}"))?;
        Ok(conn)
    }

    fn write(&self, v: &Value) -> Result<(), RpcError> {
        let mut line = serde_json::to_vec(v).unwrap_or_default();
        line.push(b'\n');
        let mut stdin = self.stdin.lock();
        let Some(w) = stdin.as_mut() else {
            return Err(RpcError::Transport("the server's stdin is closed".into()));
        };
        w.write_all(&line)
            .and_then(|_| w.flush())
            .map_err(|e| RpcError::Transport(format!("writing to the server: {e}")))
    }
}

impl Transport for Stdio {
    fn start(&self, method: &str, params: Value) -> Result<(u64, ReplyRx<Answer>), RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = reply();
        {
            let mut p = self.pending.lock();
            if let Some(why) = &p.closed {
                return Err(RpcError::Transport(why.clone()));
            }
            p.waiters.insert(id, tx);
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self.write(&msg) {
            self.pending.lock().waiters.remove(&id);
            return Err(e);
        }
        Ok((id, rx))
    }

    fn forget(&self, id: u64) {
        self.pending.lock().waiters.remove(&id);
    }

    fn notify(&self, method: &str, params: Value) {
        let _ = self.write(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn close(&self) {
        use rustix::process::{kill_process, kill_process_group, Pid, Signal};
        self.stdin.lock().take();
        let mut child = self.child.lock();
        let Some(pid) = Pid::from_raw(child.id() as i32) else {
            return;
        };
        let raw = pid.as_raw_nonzero().get();
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let mut reaped = false;
            if self.launched {
                let _ = kill_process(pid, Signal::TERM);
                let until = std::time::Instant::now() + STOP_WAIT;
                while std::time::Instant::now() < until {
                    match child.try_wait() {
                        Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                        Ok(Some(_)) => {
                            reaped = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
            }
            if !reaped {
                let _ = kill_process_group(pid, Signal::KILL);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        crate::tools::process::kill_carriers(&self.token);
        crate::tools::process::ended(&self.ledger, raw, &self.token);
        log::debug!("mcp {}: closed", self.name);
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        self.close();
    }
}

/// The pid of the server's launcher (or of the server when started directly).
impl Stdio {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.lock().id()
    }
}

fn thread_tag(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(16)
        .collect()
}

fn fail_all(pending: &Mutex<Pending>, why: &str, closed: bool) {
    let waiters = {
        let mut p = pending.lock();
        if closed {
            p.closed = Some(why.to_owned());
        }
        std::mem::take(&mut p.waiters)
    };
    for (_, tx) in waiters {
        let e = if closed {
            RpcError::Transport(why.to_owned())
        } else {
            RpcError::Protocol(why.to_owned())
        };
        let _ = tx.send(Err(e));
    }
}

fn drain_stderr(err: impl Read, tail: Arc<Mutex<VecDeque<String>>>) {
    let reader = BufReader::new(err.take(u64::MAX));
    for line in reader.split(b'\n') {
        let Ok(line) = line else { return };
        let text = String::from_utf8_lossy(&line).trim().to_owned();
        if text.is_empty() {
            continue;
        }
        let text = crate::util::clip(&crate::secrets::redact_string(text), 300);
        log::debug!("mcp stderr: {text}");
        let mut t = tail.lock();
        t.push_back(text);
        if t.len() > STDERR_LINES {
            t.pop_front();
        }
    }
}

fn read_loop(
    stdout: impl Read,
    conn: &std::sync::Weak<Stdio>,
    pending: &Mutex<Pending>,
    events: &(dyn Fn(Event) + Send + Sync),
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match (&mut reader)
            .take(MAX_MESSAGE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if n > MAX_MESSAGE && buf.last() != Some(&b'\n') {
            // Skip the rest of the line, counting it.
            let mut total = n;
            loop {
                buf.clear();
                match (&mut reader).take(1 << 20).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(k) => total += k,
                }
                if buf.last() == Some(&b'\n') {
                    break;
                }
            }
            fail_all(
                pending,
                &format!(
                    "the server sent a message of {total} bytes, over the limit of {MAX_MESSAGE} bytes; it was dropped"
                ),
                false,
            );
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                log::warn!("mcp: the server sent a line that is not JSON ({e})");
                fail_all(
                    pending,
                    &format!("the server sent malformed JSON ({e}); the answer was lost"),
                    false,
                );
                continue;
            }
        };
        let Some(conn) = conn.upgrade() else { return };
        route(&conn, pending, events, v);
    }
}

fn route(conn: &Stdio, pending: &Mutex<Pending>, events: &(dyn Fn(Event) + Send + Sync), v: Value) {
    let id = v.get("id").cloned().filter(|i| !i.is_null());
    let method = v.get("method").and_then(Value::as_str).map(str::to_owned);
    match (id, method) {
        (Some(id), Some(method)) => {
            let answer = if method == "ping" {
                json!({"jsonrpc": "2.0", "id": id, "result": {}})
            } else {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("{method} is not supported by this client")}})
            };
            let _ = conn.write(&answer);
        }
        (Some(id), None) => {
            let Some(n) = id.as_u64() else {
                log::debug!("mcp: answer to an id we never sent: {id}");
                return;
            };
            let waiter = pending.lock().waiters.remove(&n);
            if let Some(tx) = waiter {
                let _ = tx.send(answer_of(&v));
            }
        }
        (None, Some(method)) => events(Event::Notification(method)),
        (None, None) => log::debug!("mcp: a message that is neither request nor answer"),
    }
}
