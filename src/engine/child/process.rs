//! An external engine's child process: launched with exactly the environment it is
//! given, through the command launcher in `unconfined` service mode so it dies with the
//! host (parent-death signal, also after `kill -9`) and everything it starts ends with
//! it, recorded in the process ledger until it ends (a restart sweeps what a dead host
//! left), its stderr drained by one thread into a short redacted tail for error
//! messages. See `tools::sandbox` (launcher) and `tools::process` (ledger).

use crate::tools::sandbox::SandboxSettings;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Lines of stderr kept for error messages.
const STDERR_LINES: usize = 6;

/// How long [`Process::kill`] waits for the launcher to end the child's tree after
/// `SIGTERM` before it kills the group.
const STOP_WAIT: Duration = Duration::from_secs(3);

/// A running engine child. Dropping it ends the child ([`Process::kill`]).
pub struct Process {
    /// Short engine name for logs and thread names (`codex`, `claude`).
    name: &'static str,
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The child's ledger entry: the token in its environment and the settings that
    /// name the store (see `tools::process`).
    ledger: (String, SandboxSettings),
    /// Started through the launcher (else directly, in a process group of its own).
    launched: bool,
}

impl Process {
    /// Spawns `binary args…` in `cwd` with exactly the environment `env` (nothing of
    /// ours is inherited) plus the process token, stdin/stdout/stderr piped, and
    /// returns it with its stdout (read by the caller's one reader thread). Recorded in
    /// the process ledger of `ledger` (the wuu home; None = not recorded). Without the
    /// launcher executable it is started directly in a process group of its own (and
    /// then does not die with a killed host). Errors: the program cannot be started.
    pub fn spawn(
        name: &'static str,
        binary: &Path,
        args: &[String],
        cwd: &Path,
        env: &[(OsString, OsString)],
        ledger: Option<&Path>,
    ) -> Result<(Process, ChildStdout), String> {
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
                    .arg(binary);
                (c, true)
            }
            Err(e) => {
                log::warn!("{name}: {e}; starting it directly (it will not die with the host)");
                let mut c = Command::new(binary);
                // Its own process group: an interrupt of ours never reaches it by
                // accident, and closing the host kills whatever it started.
                #[cfg(unix)]
                {
                    use std::os::unix::process::CommandExt;
                    c.process_group(0);
                }
                (c, false)
            }
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(crate::tools::process::TOKEN_VAR, &token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let settings = SandboxSettings {
            process_ledger: ledger.map(Path::to_path_buf),
            ..Default::default()
        };
        crate::tools::process::started(&settings, child.id() as i32, &token);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let proc = Process {
            name,
            stdin: Mutex::new(stdin),
            child: Mutex::new(child),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            ledger: (token, settings),
            launched,
        };
        let Some(stdout) = stdout else {
            return Err(format!("{name}: no stdout pipe"));
        };
        if let Some(err) = stderr {
            let tail = proc.stderr.clone();
            let _ = crate::util::spawn(format!("{name}-stderr"), move || {
                drain_stderr(name, err, tail)
            });
        }
        Ok((proc, stdout))
    }

    /// Writes one line (`line` plus `\n`) to the child's stdin. Errors: stdin is
    /// closed or the child stopped reading.
    pub fn write_line(&self, line: &[u8]) -> Result<(), String> {
        let mut stdin = self.stdin.lock();
        let Some(w) = stdin.as_mut() else {
            return Err(format!("{} stdin is closed", self.name));
        };
        w.write_all(line)
            .and_then(|_| w.write_all(b"\n"))
            .and_then(|_| w.flush())
            .map_err(|e| format!("writing to {}: {e}", self.name))
    }

    /// Closes the child's stdin (end of input).
    pub fn close_stdin(&self) {
        self.stdin.lock().take();
    }

    /// The last lines of the child's stderr (redacted), joined by ` | `.
    pub fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// The last line of the child's stderr (redacted), if any.
    pub fn last_stderr_line(&self) -> Option<String> {
        self.stderr.lock().back().cloned()
    }

    /// Waits at most `limit` for the child to exit on its own; whether it did.
    pub fn wait_exit(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            match self.child.lock().try_wait() {
                Ok(Some(_)) => return true,
                Ok(None) => {}
                Err(_) => return false,
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the child and everything it started: stdin closed, `SIGTERM` to the
    /// launcher, which ends the whole tree (at most [`STOP_WAIT`]); then `SIGKILL` to
    /// the process group and to every process carrying the child's token; the ledger
    /// entry is forgotten. Idempotent.
    pub fn kill(&self) {
        use rustix::process::{kill_process, kill_process_group, Pid, Signal};
        self.stdin.lock().take();
        let mut child = self.child.lock();
        let Some(pid) = Pid::from_raw(child.id() as i32) else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            // Already reaped: its pid may be reused, nothing may be signalled by it.
            crate::tools::process::kill_carriers(&self.ledger.0);
            crate::tools::process::ended(
                &self.ledger.1,
                pid.as_raw_nonzero().get(),
                &self.ledger.0,
            );
            return;
        }
        let mut reaped = false;
        if self.launched {
            let _ = kill_process(pid, Signal::TERM);
            let until = Instant::now() + STOP_WAIT;
            while Instant::now() < until {
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
        crate::tools::process::kill_carriers(&self.ledger.0);
        crate::tools::process::ended(&self.ledger.1, pid.as_raw_nonzero().get(), &self.ledger.0);
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

fn drain_stderr(name: &str, err: impl Read, tail: Arc<Mutex<VecDeque<String>>>) {
    let reader = BufReader::new(err);
    for line in reader.split(b'\n') {
        let Ok(line) = line else { return };
        let text = String::from_utf8_lossy(&line).trim().to_owned();
        if text.is_empty() {
            continue;
        }
        log::debug!("{name} stderr: {text}");
        let text = crate::util::clip(&redact(&text), 300);
        let mut t = tail.lock();
        t.push_back(text);
        if t.len() > STDERR_LINES {
            t.pop_front();
        }
    }
}

/// Replaces URL query strings and long opaque runs (tokens) by `<redacted>`.
pub fn redact(s: &str) -> String {
    s.split(' ')
        .map(|w| {
            let w = match w.find('?') {
                Some(i) if w.contains("://") => format!("{}?<redacted>", &w[..i]),
                _ => w.to_owned(),
            };
            let opaque = w.len() >= 40
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=+/.".contains(c));
            if opaque {
                "<redacted>".to_owned()
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_tokens_and_queries() {
        assert_eq!(
            redact("GET https://x.test/a?key=secret failed"),
            "GET https://x.test/a?<redacted> failed"
        );
        assert_eq!(
            redact("token sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF bad"),
            "token <redacted> bad"
        );
    }
}
