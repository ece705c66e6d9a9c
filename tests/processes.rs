//! End-to-end tests: commands die with their host, and with their end.
//!
//! `bash` runs background jobs that stay in the command's process group and jobs that
//! leave it (`setsid`, a double fork); the command ends, is interrupted, or the host
//! (`wuu exec` or `wuu app-server`) is ended with SIGTERM or SIGKILL; no process of the
//! command may survive. A command's processes are found by their environment: `TMPDIR`
//! is the conversation's private temp dir under this test's own `WUU_HOME`.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::fake_provider::{FakeProvider, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");
/// Two sleeps in the command's group, two that left it (and the session) for good.
const CMD: &str = "(setsid sleep 1000 &); setsid sleep 1000 & sleep 1000 & sleep 1000 & wait";
/// The sleeps of [`CMD`].
const SLEEPS: usize = 4;

struct Lab {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    fake: FakeProvider,
    /// `--permission-mode` of `wuu exec`.
    mode: &'static str,
    /// Extra environment of the host.
    env: Vec<(&'static str, &'static str)>,
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (home, ws) = (base.join("wuu"), base.join("ws"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let fake = FakeProvider::start();
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": {
                "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
                "max_retries": 0, "initial_backoff_ms": 1, "max_backoff_ms": 5,
            }},
            "agent": {"auto_title": false},
        });
        std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        Lab {
            _dir: dir,
            home,
            ws,
            fake,
            mode: "standard",
            env: vec![],
        }
    }

    /// A lab whose commands run in permission mode `mode`.
    fn in_mode(mode: &'static str) -> Lab {
        Lab { mode, ..Lab::new() }
    }

    fn exec(&self) -> Child {
        Command::new(BIN)
            .arg("exec")
            .arg("--json")
            .arg("--cd")
            .arg(&self.ws)
            .arg("--permission-mode")
            .arg(self.mode)
            .arg("run it")
            .env("WUU_HOME", &self.home)
            .env("HOME", &self.home)
            .envs(self.env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn app_server(
        &self,
    ) -> (
        Child,
        std::process::ChildStdin,
        BufReader<std::process::ChildStdout>,
    ) {
        let mut c = Command::new(BIN)
            .arg("app-server")
            .arg("--workdir")
            .arg(&self.ws)
            .env("WUU_HOME", &self.home)
            .env("HOME", &self.home)
            .envs(self.env.iter().copied())
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = c.stdin.take().unwrap();
        let stdout = BufReader::new(c.stdout.take().unwrap());
        (c, stdin, stdout)
    }

    /// Pids of processes whose environment names this test's home (the command's
    /// `TMPDIR`).
    fn command_pids(&self) -> Vec<(i32, String)> {
        let tmp = self.home.join("tmp").display().to_string();
        let needle = format!("TMPDIR={tmp}");
        let mut out = vec![];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            // The launcher is non-dumpable: its environment is readable only by root,
            // its command line (which names the temp dir) by anyone.
            let launcher = cmd.contains("__sandbox") && cmd.contains(&*tmp);
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            let hit = launcher
                || env
                    .split(|b| *b == 0)
                    .any(|v| v.starts_with(needle.as_bytes()));
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(false);
            if hit && !zombie {
                out.push((pid, cmd));
            }
        }
        out
    }

    /// Waits until the command runs: the launcher, bash and every sleep.
    fn wait_running(&self) -> Vec<(i32, String)> {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let pids = self.command_pids();
            let sleeps = pids.iter().filter(|(_, c)| c.starts_with("sleep")).count();
            if sleeps == SLEEPS && pids.iter().any(|(_, c)| c.contains("__sandbox")) {
                return pids;
            }
            assert!(Instant::now() < end, "the command did not start: {pids:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (at most `limit`) until no process of the command is left.
    fn wait_gone(&self, limit: Duration) -> Vec<(i32, String)> {
        let end = Instant::now() + limit;
        loop {
            let pids = self.command_pids();
            if pids.is_empty() || Instant::now() > end {
                return pids;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn kill9(pid: i32) {
    let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
}

fn push_command(fake: &FakeProvider) {
    fake.push(Script::tool_call(
        "call_1",
        "bash",
        &json!({ "command": CMD }).to_string(),
    ));
    fake.push(Script::text(&["done"]));
}

/// The labs the host-death tests run in: a PID namespace (standard), the subreaper
/// (unconfined; standard without a PID namespace).
fn labs() -> Vec<Lab> {
    let mut no_pid_ns = Lab::new();
    no_pid_ns.env.push(("WUU_SANDBOX_NO_PID_NS", "1"));
    vec![Lab::new(), Lab::in_mode("unconfined"), no_pid_ns]
}

#[test]
fn sigkill_of_exec_leaves_no_survivors() {
    for lab in labs().into_iter().chain(labs()) {
        push_command(&lab.fake);
        let mut host = lab.exec();
        let before = lab.wait_running();
        assert!(before.len() >= 6, "{before:?}");
        host.kill().unwrap();
        host.wait().unwrap();
        let left = lab.wait_gone(Duration::from_secs(5));
        assert!(
            left.is_empty(),
            "survivors after SIGKILL of wuu exec ({}, {:?}): {left:?}",
            lab.mode,
            lab.env
        );
    }
}

#[test]
fn escaped_sessions_end_with_the_command() {
    for lab in labs() {
        lab.fake.push(Script::tool_call(
            "call_1",
            "bash",
            &json!({ "command": "(setsid sleep 1000 &); setsid sleep 1000 & sleep 0.5; echo started" })
                .to_string(),
        ));
        lab.fake.push(Script::text(&["done"]));
        let st = lab.exec().wait().unwrap();
        assert!(st.success());
        // The command ended before the turn did: nothing of it may be left.
        let left = lab.wait_gone(Duration::from_secs(1));
        assert!(
            left.is_empty(),
            "survivors of an ended command ({}, {:?}): {left:?}",
            lab.mode,
            lab.env
        );
    }
}

fn send(stdin: &mut std::process::ChildStdin, v: Value) {
    writeln!(stdin, "{v}").unwrap();
    stdin.flush().unwrap();
}

fn wait_for(
    out: &mut BufReader<std::process::ChildStdout>,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "server ended");
        let v: Value = serde_json::from_str(&line).unwrap();
        if pred(&v) {
            return v;
        }
    }
}

/// Starts the command in an app-server conversation; the server, its stdin and the
/// thread id.
fn start_in_app_server(lab: &Lab) -> (Child, std::process::ChildStdin, String) {
    push_command(&lab.fake);
    let (child, mut stdin, mut out) = lab.app_server();
    send(
        &mut stdin,
        json!({"id":"1","method":"initialize","params":{"client":{"name":"t"}}}),
    );
    wait_for(&mut out, |v| v["id"] == "1");
    send(
        &mut stdin,
        json!({"id":"2","method":"thread/start","params":{}}),
    );
    let t = wait_for(&mut out, |v| v["id"] == "2");
    let thread = t["result"]["thread"]["id"].as_str().unwrap().to_string();
    send(
        &mut stdin,
        json!({"id":"3","method":"turn/start","params":{"thread_id": thread, "prompt": "run it"}}),
    );
    wait_for(&mut out, |v| v["id"] == "3");
    // Keep reading so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    (child, stdin, thread)
}

#[test]
fn sigkill_of_app_server_leaves_no_survivors() {
    for _ in 0..3 {
        let lab = Lab::new();
        let (mut host, _stdin, _) = start_in_app_server(&lab);
        lab.wait_running();
        host.kill().unwrap();
        host.wait().unwrap();
        let left = lab.wait_gone(Duration::from_secs(5));
        assert!(
            left.is_empty(),
            "survivors after SIGKILL of app-server: {left:?}"
        );
    }
}

#[test]
fn interrupt_ends_escaped_sessions() {
    let lab = Lab::new();
    let (mut host, mut stdin, thread) = start_in_app_server(&lab);
    lab.wait_running();
    send(
        &mut stdin,
        json!({"id":"4","method":"turn/interrupt","params":{"thread_id": thread}}),
    );
    let left = lab.wait_gone(Duration::from_secs(3));
    drop(stdin);
    let _ = host.kill();
    let _ = host.wait();
    assert!(
        left.is_empty(),
        "survivors of an interrupted turn: {left:?}"
    );
}

#[test]
fn sigterm_of_app_server_leaves_no_survivors() {
    let lab = Lab::new();
    let (host, _stdin, _) = start_in_app_server(&lab);
    lab.wait_running();
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(host.id().to_string())
        .status();
    let left = lab.wait_gone(Duration::from_secs(5));
    let mut host = host;
    let _ = host.kill();
    let _ = host.wait();
    assert!(
        left.is_empty(),
        "survivors after SIGTERM of app-server: {left:?}"
    );
}

#[test]
fn sigkill_of_the_launcher_ends_its_pid_namespace() {
    let lab = Lab::new();
    push_command(&lab.fake);
    let mut host = lab.exec();
    let running = lab.wait_running();
    let launcher = running
        .iter()
        .find(|(_, c)| c.contains("__sandbox"))
        .unwrap()
        .0;
    let _ = Command::new("kill")
        .arg("-STOP")
        .arg(host.id().to_string())
        .status();
    kill9(launcher);
    let left = lab.wait_gone(Duration::from_secs(3));
    host.kill().unwrap();
    host.wait().unwrap();
    assert!(
        left.is_empty(),
        "the namespace outlived its launcher: {left:?}"
    );
}

#[test]
fn a_restart_sweeps_what_a_dead_host_left() {
    // Without a PID namespace (the subreaper), a launcher killed together with its host
    // leaves the command's processes, in its group and out of it, to the next start.
    let mut lab = Lab::new();
    lab.env.push(("WUU_SANDBOX_NO_PID_NS", "1"));
    push_command(&lab.fake);
    let mut host = lab.exec();
    let running = lab.wait_running();
    // Kill the launcher and the host together: nothing is left to kill the group.
    let launcher = running
        .iter()
        .find(|(_, c)| c.contains("__sandbox"))
        .unwrap()
        .0;
    // Stop the host first so it cannot notice the launcher's death and clean up.
    let _ = Command::new("kill")
        .arg("-STOP")
        .arg(host.id().to_string())
        .status();
    kill9(launcher);
    host.kill().unwrap();
    host.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let orphans = lab.command_pids();
    let sleeps = orphans
        .iter()
        .filter(|(_, c)| c.starts_with("sleep"))
        .count();
    assert_eq!(
        sleeps, SLEEPS,
        "the command outlived both (the case the sweep is for): {orphans:?}"
    );
    // A new host on the same store kills them at startup, escaped sessions included.
    lab.env.clear();
    let (mut again, stdin, _out) = lab.app_server();
    let left = lab.wait_gone(Duration::from_secs(10));
    drop(stdin);
    let _ = again.wait();
    assert!(left.is_empty(), "the startup sweep left: {left:?}");
    // The ledger row is gone.
    let conn = rusqlite::Connection::open(lab.home.join("wuu.db")).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM process_groups", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn the_ledger_is_empty_after_a_command_ends() {
    let lab = Lab::new();
    lab.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &json!({"command": "echo hi"}).to_string(),
    ));
    lab.fake.push(Script::text(&["done"]));
    let st = lab.exec().wait().unwrap();
    assert!(st.success());
    let conn = rusqlite::Connection::open(lab.home.join("wuu.db")).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM process_groups", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
    let _ = Path::new("");
}
