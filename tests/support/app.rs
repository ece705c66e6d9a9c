//! A test client for the real `wuu` binary: spawns `wuu app-server` with its own
//! `WUU_HOME` and workspace in temp dirs, speaks JSON lines, and validates every response
//! and notification it sees against the protocol's JSON Schemas.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Path of the built binary.
pub fn wuu_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wuu"))
}

/// `wuu app-server` (over `workdir`, if given) with `home` as its `WUU_HOME` and `HOME`,
/// no `RUST_LOG`, stdin and stdout piped, for tests that drive the pipes themselves
/// (an [`App`] reads stdout all the time). The caller sets stderr and spawns.
pub fn raw_app_server(home: &Path, workdir: Option<&Path>) -> Command {
    let mut cmd = Command::new(wuu_bin());
    cmd.arg("app-server");
    if let Some(w) = workdir {
        cmd.arg("--workdir").arg(w);
    }
    cmd.env("WUU_HOME", home)
        .env("HOME", home)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    cmd
}

struct Validators {
    results: HashMap<String, jsonschema::Validator>,
    notifications: HashMap<String, jsonschema::Validator>,
}

fn validators() -> &'static Validators {
    static V: OnceLock<Validators> = OnceLock::new();
    V.get_or_init(|| {
        let bundle = wuu_protocol::schema::bundle();
        let mut results = HashMap::new();
        for m in wuu_protocol::METHODS {
            let s = wuu_protocol::schema::standalone(&bundle, "methods", m.name, "result").unwrap();
            results.insert(
                m.name.to_owned(),
                jsonschema::validator_for(&s).expect(m.name),
            );
        }
        let mut notifications = HashMap::new();
        for n in wuu_protocol::NOTIFICATIONS {
            let s = wuu_protocol::schema::standalone(&bundle, "notifications", n.name, "params")
                .unwrap();
            notifications.insert(
                n.name.to_owned(),
                jsonschema::validator_for(&s).expect(n.name),
            );
        }
        Validators {
            results,
            notifications,
        }
    })
}

/// Asserts that a notification's params match its schema (unknown methods are allowed
/// only if listed in the notification table — they fail here).
pub fn check_notification(v: &Value) {
    let method = v["method"].as_str().unwrap();
    let val = validators()
        .notifications
        .get(method)
        .unwrap_or_else(|| panic!("notification {method} is not in the schema table"));
    let errors: Vec<String> = val
        .iter_errors(&v["params"])
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{method} params violate the schema: {errors:?}\n{v}"
    );
}

/// Asserts that a success response matches its method's result schema.
pub fn check_result(method: &str, v: &Value) {
    if let Some(val) = validators().results.get(method) {
        if let Some(r) = v.get("result") {
            let errors: Vec<String> = val.iter_errors(r).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{method} result violates the schema: {errors:?}\n{v}"
            );
        }
    }
}

/// A running `wuu app-server`.
pub struct App {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Frames read but not yet consumed.
    pub backlog: VecDeque<Value>,
    /// Every frame read, in order.
    pub seen: Vec<Value>,
    pending_methods: HashMap<String, String>,
    next_id: u64,
    pub home: PathBuf,
    pub workdir: PathBuf,
    extra_args: Vec<String>,
    /// Extra environment of the process (kept for [`App::restart`]).
    env: Vec<(String, String)>,
    _dirs: Option<(tempfile::TempDir, tempfile::TempDir)>,
}

/// Default deadline for one expected line.
pub const WAIT: Duration = Duration::from_secs(20);

impl App {
    /// Starts a server with a fresh home and workspace. `config` (if given) is written
    /// as the user config.
    pub fn start(config: Option<Value>) -> App {
        let (home, ws) = fresh_dirs(config.as_ref());
        let (h, w) = (home.path().to_path_buf(), ws.path().canonicalize().unwrap());
        let mut app = App::spawn_in(&h, &w, &[]);
        app._dirs = Some((home, ws));
        app
    }

    /// Starts a server with a fresh home and workspace and extra environment variables
    /// (`restart` does not keep them).
    pub fn start_with_env(config: Option<Value>, env: &[(&str, &str)]) -> App {
        let (home, ws) = fresh_dirs(config.as_ref());
        let (h, w) = (home.path().to_path_buf(), ws.path().canonicalize().unwrap());
        let mut app = App::spawn_full(&h, &w, &[], env, None);
        app._dirs = Some((home, ws));
        app
    }

    /// Starts a server over an existing home and workspace.
    pub fn spawn_in(home: &Path, workdir: &Path, extra_args: &[&str]) -> App {
        App::spawn_full(home, workdir, extra_args, &[], None)
    }

    /// Starts a server over an existing home and workspace with extra environment
    /// variables (e.g. `WUU_FAULTS`).
    pub fn spawn_in_env(home: &Path, workdir: &Path, env: &[(&str, &str)]) -> App {
        App::spawn_full(home, workdir, &[], env, None)
    }

    /// [`App::spawn_in_env`] with the server's stderr written to the file `log`.
    pub fn spawn_logged(home: &Path, workdir: &Path, env: &[(&str, &str)], log: &Path) -> App {
        App::spawn_full(home, workdir, &[], env, Some(log))
    }

    fn spawn_full(
        home: &Path,
        workdir: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> App {
        let mut cmd = Command::new(wuu_bin());
        // No inherited `RUST_LOG`, but the caller's own (`env`) applies: removed first.
        cmd.env_remove("RUST_LOG");
        cmd.envs(env.iter().copied());
        cmd.arg("app-server")
            .arg("--workdir")
            .arg(workdir)
            .args(extra_args)
            .env("WUU_HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match log {
                Some(p) => Stdio::from(std::fs::File::create(p).expect("stderr log")),
                None => Stdio::inherit(),
            });
        let mut child = cmd.spawn().expect("spawn wuu");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        App {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            backlog: VecDeque::new(),
            seen: vec![],
            pending_methods: HashMap::new(),
            next_id: 0,
            home: home.to_path_buf(),
            workdir: workdir.to_path_buf(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            _dirs: None,
        }
    }

    /// `Threads:` of the server process (`/proc/PID/status`).
    pub fn os_threads(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Kills the process (SIGKILL) and starts a new one over the same home/workspace.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let args: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let dirs = self._dirs.take();
        let mut fresh = App::spawn_full(&self.home, &self.workdir, &args, &env, None);
        fresh._dirs = dirs;
        *self = fresh;
    }

    /// Writes raw bytes to stdin.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (end of input).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Sends a request with a fresh string id; returns the id.
    pub fn send(&mut self, method: &str, params: Value) -> String {
        self.next_id += 1;
        let id = format!("t{}", self.next_id);
        self.pending_methods.insert(id.clone(), method.to_owned());
        let line = json!({"id": id, "method": method, "params": params}).to_string() + "\n";
        self.write_raw(line.as_bytes());
        id
    }

    fn read_frame(&mut self, deadline: Instant) -> Option<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
                if v.get("method").is_some() && v.get("id").is_none() {
                    check_notification(&v);
                }
                self.seen.push(v.clone());
                Some(v)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits for the response with `id` (other frames go to the backlog).
    pub fn response(&mut self, id: &str) -> Value {
        if let Some(pos) = self
            .backlog
            .iter()
            .position(|v| v.get("method").is_none() && v["id"] == json!(id))
        {
            return self.backlog.remove(pos).unwrap();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let Some(v) = self.read_frame(deadline) else {
                panic!(
                    "no response to {id} within {WAIT:?}; backlog: {:?}",
                    self.backlog
                );
            };
            if v.get("method").is_none() && v["id"] == json!(id) {
                if let Some(m) = self.pending_methods.remove(id) {
                    check_result(&m, &v);
                }
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    /// Sends a request and returns its `result`, panicking on an error response.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let r = self.response(&id);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// Sends a request and returns its `error`, panicking on success.
    pub fn call_err(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let r = self.response(&id);
        assert!(
            r.get("error").is_some(),
            "{method} unexpectedly succeeded: {r}"
        );
        r["error"].clone()
    }

    /// Waits for the next frame matching `pred` (searching the backlog first).
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(pos).unwrap();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let Some(v) = self.read_frame(deadline) else {
                panic!("timed out waiting for {what}; backlog: {:?}", self.backlog);
            };
            if pred(&v) {
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    /// Waits for the next notification `method`.
    pub fn notification(&mut self, method: &str) -> Value {
        let m = method.to_owned();
        self.wait_for(method, move |v| {
            v["method"] == json!(m) && v.get("id").is_none()
        })
    }

    /// Reads the next frame within `d`, if any.
    pub fn next_within(&mut self, d: Duration) -> Option<Value> {
        if let Some(v) = self.backlog.pop_front() {
            return Some(v);
        }
        self.read_frame(Instant::now() + d)
    }

    /// Waits for the process to exit; returns its status code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh home and workspace (temp dirs, removed when dropped); `config` (if given) is
/// written as the home's user config.
pub fn fresh_dirs(config: Option<&Value>) -> (tempfile::TempDir, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    if let Some(c) = config {
        std::fs::write(home.path().join("config.json"), c.to_string()).unwrap();
    }
    (home, ws)
}

/// A user config with one openai-compatible provider at `base_url`. Automatic titles
/// are off (they add a model request after each successful turn); tests of titles turn
/// them on.
pub fn config_for(base_url: &str) -> Value {
    json!({
        "agent": {"auto_title": false},
        "default_provider": "fake",
        "providers": {"fake": {"type": "openai-compatible", "base_url": base_url, "model": "fake-model",
            "max_retries": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5}}
    })
}
