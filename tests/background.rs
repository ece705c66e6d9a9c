//! End-to-end tests of background processes: `bash {run_in_background: true}`, the
//! `process` tool, `process/*` for clients, their end with the host and with their
//! conversation, the limit, and the exit that wakes the conversation (README
//! § "Background processes").

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

struct Lab {
    fake: FakeProvider,
    app: App,
    home: PathBuf,
    ws: PathBuf,
    tid: String,
    _root: tempfile::TempDir,
}

impl Lab {
    fn new(agent: Value) -> Lab {
        let fake = FakeProvider::start();
        let root = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let (home, ws) = (base.join("home"), base.join("ws"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let mut agent = agent;
        agent["auto_title"] = json!(false);
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": {"type": "openai-compatible", "base_url": fake.base_url(),
                "model": "m", "max_retries": 0, "initial_backoff_ms": 1, "max_backoff_ms": 5}},
            "agent": agent,
        });
        std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        let mut app = spawn(&home, &ws);
        let r = app.call("thread/start", json!({}));
        let tid = r["thread"]["id"].as_str().unwrap().to_owned();
        Lab {
            fake,
            app,
            home,
            ws,
            tid,
            _root: root,
        }
    }

    /// Runs one turn to its end; returns its `turn/completed` params.
    fn turn(&mut self, prompt: &str) -> Value {
        self.app.call(
            "turn/start",
            json!({"thread_id": self.tid, "prompt": prompt}),
        );
        self.turn_end()
    }

    fn turn_end(&mut self) -> Value {
        let tid = self.tid.clone();
        self.app.wait_for("turn end", |v| {
            (v["method"] == "turn/completed" || v["method"] == "turn/error")
                && v["params"]["thread_id"] == json!(tid)
        })["params"]
            .clone()
    }

    fn list(&mut self) -> Vec<Value> {
        self.app
            .call("process/list", json!({"thread_id": self.tid}))["processes"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The tool outputs the provider was sent (all wire formats' shapes flattened).
    fn sent(&self) -> String {
        self.fake
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Live processes whose environment names this test's home (their `TMPDIR`), or
    /// whose launcher's command line does.
    fn pids(&self) -> Vec<(i32, String)> {
        pids_under(&self.home)
    }
}

fn spawn(home: &Path, ws: &Path) -> App {
    App::spawn_in_env(home, ws, &[("HOME", home.to_str().unwrap())])
}

fn pids_under(home: &Path) -> Vec<(i32, String)> {
    let tmp = home.join("tmp").display().to_string();
    let needle = format!("TMPDIR={tmp}");
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
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

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A Python the sandbox can run: the system one (a `python3` shim under `$HOME`, such as
/// pyenv's, is hidden from commands with the rest of the user's home).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn bash_bg(command: &str) -> String {
    json!({"command": command, "run_in_background": true}).to_string()
}

#[test]
fn model_runs_a_server_in_the_background_and_a_client_stops_another() {
    let mut lab = Lab::new(json!({}));
    std::fs::write(lab.ws.join("hello.txt"), "hello from the workspace\n").unwrap();
    let port = free_port();
    // Turn 1: the model starts the server in the background; the call returns at once.
    lab.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &bash_bg(&format!(
            "{} -u -m http.server {port} --bind 127.0.0.1",
            python()
        )),
    ));
    lab.fake.push(Script::text(&["started"]));
    let t0 = Instant::now();
    let end = lab.turn("serve the workspace");
    assert_eq!(end["turn"]["status"], "completed", "{end}");
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "the start did not return at once"
    );
    let procs = lab.list();
    assert_eq!(procs.len(), 1, "{procs:?}");
    let id = procs[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(procs[0]["status"], "running");
    assert_eq!(procs[0]["owner_id"], json!(lab.tid));
    assert!(lab
        .sent()
        .contains(&format!("Started background process {id}")));

    // Turn 2: fetch a page from it with another bash call, read its log, stop it.
    let fetch = format!(
        "for i in $(seq 100); do {} -c 'import urllib.request;print(urllib.request.urlopen(\"http://127.0.0.1:{port}/hello.txt\").read().decode())' 2>/dev/null && exit 0; sleep 0.1; done; exit 1",
        python()
    );
    lab.fake.push(Script::tool_call(
        "call_2",
        "bash",
        &json!({ "command": fetch }).to_string(),
    ));
    lab.fake.push(Script::tool_call(
        "call_3",
        "process",
        &json!({"action": "read", "process_id": id, "wait_ms": 5000}).to_string(),
    ));
    lab.fake.push(Script::tool_call(
        "call_4",
        "process",
        &json!({"action": "stop", "process_id": id}).to_string(),
    ));
    lab.fake.push(Script::text(&["done"]));
    let end = lab.turn("fetch, read the log, stop");
    assert_eq!(end["turn"]["status"], "completed", "{end}");
    let sent = lab.sent();
    assert!(
        sent.contains("hello from the workspace"),
        "the page was not fetched: {sent}"
    );
    // http.server logs each request to stderr: `"GET /hello.txt HTTP/1.1" 200`.
    assert!(
        sent.contains("GET /hello.txt"),
        "the log was not read: {sent}"
    );
    let procs = lab.list();
    assert_eq!(procs[0]["status"], "stopped", "{procs:?}");
    // The client reads the same log.
    let r = lab.app.call(
        "process/read",
        json!({"thread_id": lab.tid, "process_id": id, "offset_bytes": 0}),
    );
    assert!(
        r["output"].as_str().unwrap().contains("GET /hello.txt"),
        "{r}"
    );
    assert_eq!(r["start_offset"], 0);
    assert_eq!(r["end_offset"], r["total_bytes"]);

    // Turn 3: another one, stopped by a client with `process/stop`.
    lab.fake
        .push(Script::tool_call("call_5", "bash", &bash_bg("sleep 1000")));
    lab.fake.push(Script::text(&["ok"]));
    lab.turn("sleep");
    let procs = lab.list();
    assert_eq!(procs.len(), 2);
    let id2 = procs[1]["id"].as_str().unwrap().to_owned();
    assert_eq!(procs[1]["status"], "running");
    wait_until("the sleep", Duration::from_secs(10), || {
        lab.pids().iter().any(|(_, c)| c.starts_with("sleep 1000"))
    });
    let r = lab.app.call(
        "process/stop",
        json!({"thread_id": lab.tid, "process_id": id2}),
    );
    assert_eq!(r["process"]["status"], "stopped", "{r}");
    wait_until("no process left", Duration::from_secs(5), || {
        lab.pids().is_empty()
    });
    // Unknown ids are a clear error, and the server keeps serving.
    let e = lab.app.call_err(
        "process/stop",
        json!({"thread_id": lab.tid, "process_id": "bp_nope"}),
    );
    assert!(e["message"].as_str().unwrap().contains("bp_nope"), "{e}");
    lab.list();
}

#[test]
fn a_killed_host_leaves_no_process_and_a_restart_reports_it_exited() {
    let mut lab = Lab::new(json!({}));
    lab.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &bash_bg("(setsid sleep 1000 &); sleep 1000"),
    ));
    lab.fake.push(Script::text(&["ok"]));
    lab.turn("sleep");
    wait_until("the sleeps", Duration::from_secs(10), || {
        lab.pids()
            .iter()
            .filter(|(_, c)| c.starts_with("sleep 1000"))
            .count()
            == 2
    });
    lab.app.child.kill().unwrap();
    lab.app.child.wait().unwrap();
    wait_until(
        "no process left after kill -9",
        Duration::from_secs(5),
        || lab.pids().is_empty(),
    );
    lab.app = spawn(&lab.home, &lab.ws);
    let procs = lab.list();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!(procs[0]["status"], "exited", "{procs:?}");
    assert!(procs[0]["last_error"].as_str().unwrap().contains("host"));
    assert!(lab.pids().is_empty());
}

#[test]
fn the_limit_is_a_clear_error_and_archive_ends_the_processes() {
    let mut lab = Lab::new(json!({"max_background_processes": 1}));
    lab.fake.push(Script::tool_calls(&[
        ("call_1", "bash", &bash_bg("sleep 1000")),
        ("call_2", "bash", &bash_bg("sleep 1001")),
    ]));
    lab.fake.push(Script::text(&["ok"]));
    lab.turn("two");
    let sent = lab.sent();
    assert!(
        sent.contains("already runs 1 background processes, the limit"),
        "{sent}"
    );
    assert_eq!(lab.list().len(), 1);
    wait_until("the sleep", Duration::from_secs(10), || {
        lab.pids().iter().any(|(_, c)| c.starts_with("sleep 1000"))
    });
    lab.app.call(
        "thread/archive",
        json!({"thread_id": lab.tid, "archived": true}),
    );
    wait_until(
        "no process left after archive",
        Duration::from_secs(8),
        || lab.pids().is_empty(),
    );
    wait_until("stopped", Duration::from_secs(5), || {
        lab.list()[0]["status"] == "stopped"
    });
}

#[test]
fn clients_write_to_stdin_and_resize_a_terminal() {
    let mut lab = Lab::new(json!({}));
    lab.fake.push(Script::tool_calls(&[
        (
            "call_1",
            "bash",
            &bash_bg("while read line; do echo \"got:$line\"; done"),
        ),
        (
            "call_2",
            "bash",
            &json!({"command": "read x; stty size; read y", "run_in_background": true, "tty": true})
                .to_string(),
        ),
    ]));
    lab.fake.push(Script::text(&["ok"]));
    lab.turn("two");
    let procs = lab.list();
    assert_eq!(procs.len(), 2, "{procs:?}");
    // The two calls of one step start concurrently: find each by its kind, not its place.
    let by_tty = |want: bool| {
        procs
            .iter()
            .find(|p| (p["tty"] == true) == want)
            .unwrap_or_else(|| panic!("{procs:?}"))
    };
    let (pipe, tty) = (
        by_tty(false)["id"].as_str().unwrap().to_owned(),
        by_tty(true)["id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(by_tty(true)["tty"], true);
    assert_eq!(by_tty(false)["input_available"], true);

    let w = lab.app.call(
        "process/write",
        json!({"thread_id": lab.tid, "process_id": pipe, "input": "hello\n"}),
    );
    assert_eq!(w["bytes_written"], 6);
    let mut out = String::new();
    wait_until("the echo", Duration::from_secs(10), || {
        let r = lab.app.call(
            "process/read",
            json!({"thread_id": lab.tid, "process_id": pipe, "wait_ms": 500}),
        );
        out = r["output"].as_str().unwrap().to_owned();
        out.contains("got:hello")
    });

    // A pipe process has no terminal to resize.
    let e = lab.app.call_err(
        "process/resize",
        json!({"thread_id": lab.tid, "process_id": pipe, "cols": 100, "rows": 30}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("no terminal"),
        "{e}"
    );
    let r = lab.app.call(
        "process/resize",
        json!({"thread_id": lab.tid, "process_id": tty, "cols": 100, "rows": 30}),
    );
    assert_eq!(r["process"]["id"], json!(tty));
    lab.app.call(
        "process/write",
        json!({"thread_id": lab.tid, "process_id": tty, "input": "\n"}),
    );
    wait_until("stty size", Duration::from_secs(10), || {
        let r = lab.app.call(
            "process/read",
            json!({"thread_id": lab.tid, "process_id": tty, "wait_ms": 500}),
        );
        r["output"].as_str().unwrap().contains("30 100")
    });
    let e = lab.app.call_err(
        "process/resize",
        json!({"thread_id": lab.tid, "process_id": tty, "cols": 1, "rows": 30}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("out of range"),
        "{e}"
    );
    for id in [&pipe, &tty] {
        lab.app.call(
            "process/stop",
            json!({"thread_id": lab.tid, "process_id": id}),
        );
    }
    wait_until("no process left", Duration::from_secs(5), || {
        lab.pids().is_empty()
    });
}

#[test]
fn an_exit_wakes_the_idle_conversation_into_a_continuation_turn() {
    let mut lab = Lab::new(json!({}));
    lab.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &bash_bg("sleep 1; echo build finished"),
    ));
    lab.fake.push(Script::text(&["waiting for the build"]));
    // The continuation turn the exit starts.
    lab.fake.push(Script::text(&["the build finished"]));
    let end = lab.turn("build in the background");
    assert_eq!(end["turn"]["status"], "completed");
    let end = lab.turn_end();
    assert_eq!(end["turn"]["status"], "completed", "{end}");
    let sent = lab.sent();
    assert!(sent.contains("<process_notification>"), "{sent}");
    assert!(sent.contains("exited with code 0"), "{sent}");
    assert!(sent.contains("build finished"), "{sent}");
    assert_eq!(lab.list()[0]["status"], "exited");
    assert_eq!(lab.list()[0]["exit_code"], 0);
}

#[test]
fn an_exit_during_a_turn_reaches_the_model_at_its_next_step() {
    let mut lab = Lab::new(json!({}));
    lab.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &bash_bg("sleep 0.3; echo quick job done"),
    ));
    // The model is busy while the process ends.
    lab.fake.push(Script::tool_call(
        "call_2",
        "bash",
        &json!({"command": "sleep 2"}).to_string(),
    ));
    lab.fake.push(Script::text(&["saw it"]));
    let end = lab.turn("work");
    assert_eq!(end["turn"]["status"], "completed", "{end}");
    let reqs = lab.fake.requests();
    assert_eq!(
        reqs.len(),
        3,
        "no continuation turn: the exit steered this one"
    );
    let last = reqs[2].body.to_string();
    assert!(last.contains("<process_notification>"), "{last}");
    assert!(last.contains("quick job done"), "{last}");
    // It is part of this turn's history (a steer), not a new turn.
    let items = end["turn"]["items"].as_array().unwrap();
    assert!(
        items.iter().any(|i| i["type"] == "user_message"
            && i["text"]
                .as_str()
                .unwrap_or("")
                .contains("process_notification")),
        "{items:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(lab.fake.requests().len(), 3);
}

#[test]
fn process_methods_refuse_thread_ids_that_are_paths_and_zero_turns_background_off() {
    let mut lab = Lab::new(json!({"max_background_processes": 0}));
    // A record outside the home that a path-like thread id would reach.
    let outside = lab.home.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let record = outside.join("bp_fake.json");
    std::fs::write(&record, r#"{"id":"bp_fake","status":"running"}"#).unwrap();
    let before = std::fs::read_to_string(&record).unwrap();
    let rel = "../../outside".to_string();
    let abs = outside.to_string_lossy().into_owned();
    for tid in [rel.as_str(), abs.as_str(), ".", "..", "", "a/b"] {
        for (method, extra) in [
            ("process/list", json!({})),
            ("process/read", json!({"process_id": "bp_fake"})),
            ("process/stop", json!({"process_id": "bp_fake"})),
        ] {
            let mut params = extra.clone();
            params["thread_id"] = json!(tid);
            let e = lab.app.call_err(method, params);
            assert_eq!(e["code"], "invalid_params", "{method} {tid:?}: {e}");
        }
    }
    assert_eq!(std::fs::read_to_string(&record).unwrap(), before);
    // max_background_processes 0: a background start is refused, nothing runs.
    lab.fake.push(Script::tool_calls(&[(
        "call_1",
        "bash",
        &bash_bg("sleep 1002"),
    )]));
    lab.fake.push(Script::text(&["ok"]));
    lab.turn("try");
    assert!(lab.sent().contains("background processes are turned off"));
    assert!(lab.list().is_empty());
    assert!(!lab.pids().iter().any(|(_, c)| c.starts_with("sleep 1002")));
}
