//! End-to-end tests of `wuu exec`: the real binary against the fake provider
//! (`tests/support/fake_provider.rs`), each test with its own `WUU_HOME` and workspace.
//!
//! Every JSON stream is checked line by line: each line parses as an object with a
//! `type`, and the stream ends with exactly one `result`, whose `exit_code` and `status`
//! agree with the process exit code.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::fake_provider::{FakeProvider, HttpError, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    fake: FakeProvider,
}

struct Outcome {
    code: i32,
    events: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn types(&self) -> Vec<&str> {
        self.events
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect()
    }
    fn all(&self, ty: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == ty).collect()
    }
    fn one(&self, ty: &str) -> &Value {
        let v = self.all(ty);
        assert_eq!(v.len(), 1, "expected one {ty} in {:#?}", self.types());
        v[0]
    }
    fn result(&self) -> &Value {
        self.events.last().expect("a result line")
    }
}

/// Parses a JSONL stream and checks the invariants every stream must hold.
fn check_stream(stdout: &str, code: i32) -> Vec<Value> {
    let mut events = vec![];
    for (i, line) in stdout.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {i} is not JSON ({e}): {line:.300}"));
        assert!(v.is_object(), "line {i} is not an object");
        assert!(v["type"].is_string(), "line {i} has no type: {line:.300}");
        events.push(v);
    }
    assert!(stdout.is_empty() || stdout.ends_with('\n'));
    let results: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "result")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(results.len(), 1, "exactly one result: {stdout:.2000}");
    assert_eq!(results[0], events.len() - 1, "result is last");
    let r = &events[results[0]];
    assert_eq!(r["exit_code"], code, "result.exit_code agrees: {r}");
    let status = match code {
        0 => "completed",
        3 => "permission_denied",
        4 => "timeout",
        5 => "interrupted",
        _ => "failed",
    };
    assert_eq!(r["status"], status, "status agrees with exit {code}: {r}");
    for k in [
        "thread_id",
        "turn_id",
        "run_id",
        "final_message",
        "trace_path",
        "error",
    ] {
        assert!(r[k].is_string(), "result.{k} is a string: {r}");
    }
    events
}

impl Env {
    fn new() -> Env {
        let fake = FakeProvider::start();
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": {
                "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
                "max_retries": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5,
            }},
            "agent": {"auto_title": false},
        });
        std::fs::write(home.path().join("config.json"), cfg.to_string()).unwrap();
        Env { home, ws, fake }
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        // `resume` / `fork` must come first (spec §2.1); `--cd` goes after them.
        let (sub, rest) = match args.first() {
            Some(&s) if s == "resume" || s == "fork" => (Some(s), &args[1..]),
            _ => (None, args),
        };
        let mut c = Command::new(BIN);
        c.arg("exec")
            .args(sub)
            .arg("--cd")
            .arg(self.ws.path())
            .args(rest)
            .env("WUU_HOME", self.home.path())
            .env_remove("RUST_LOG")
            .current_dir(self.ws.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args).spawn().expect("spawn wuu")
    }

    /// Runs to the end (at most 60 s) and checks the stream when `--json` was given.
    fn run(&self, args: &[&str]) -> Outcome {
        self.run_with_stdin(args, None)
    }

    fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> Outcome {
        let mut c = self.command(args);
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn().expect("spawn wuu");
        if let Some(text) = stdin {
            let mut i = child.stdin.take().unwrap();
            i.write_all(text.as_bytes()).unwrap();
        }
        finish(child, args.contains(&"--json"))
    }
}

/// Collects a child's output (with a 60 s guard) and checks JSON streams.
fn finish(mut child: Child, json: bool) -> Outcome {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = vec![];
        out.read_to_end(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let code = wait_timeout(&mut child, Duration::from_secs(60)).expect("wuu exec hung");
    let stdout = String::from_utf8(t_out.join().unwrap()).expect("stdout is UTF-8");
    let stderr = t_err.join().unwrap();
    let events = if json {
        check_stream(&stdout, code)
    } else {
        vec![]
    };
    Outcome {
        code,
        events,
        stdout,
        stderr,
    }
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<i32> {
    let end = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s.code().unwrap_or(-1));
        }
        if Instant::now() > end {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_prefix(o: &Outcome, thread_event: &str) {
    let t = o.types();
    assert_eq!(
        &t[..3],
        ["session_configured", thread_event, "turn_started"],
        "{t:?}"
    );
    let sc = &o.events[0];
    assert_eq!(sc["provider"], "fake");
    assert_eq!(sc["model"], "m");
    assert!(sc["max_parallel"].as_u64().unwrap() >= 1);
    assert!(sc["protocol_version"]
        .as_str()
        .unwrap()
        .starts_with("wuu-app-server/"));
    let th = &o.events[1];
    for k in ["thread_id", "provider", "model", "cwd"] {
        assert!(!th[k].as_str().unwrap().is_empty(), "{k} in {th}");
    }
    assert_eq!(o.events[2]["thread_id"], th["thread_id"]);
}

#[test]
fn simple_answer_json_and_human() {
    let env = Env::new();
    env.fake.push(Script::text(&["Hello", ", world", "."]));
    let o = env.run(&["--json", "say hello"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_prefix(&o, "thread_started");
    let deltas: Vec<&str> = o
        .all("agent_message_delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas.concat(), "Hello, world.");
    let usage = o.all("usage_updated");
    assert!(!usage.is_empty());
    assert_eq!(usage.last().unwrap()["output_tokens"], 2);
    let tc = o.one("turn_completed");
    assert_eq!(tc["awaiting_auto_continuation"], false);
    let trace = tc["trace_path"].as_str().unwrap();
    assert!(Path::new(trace).is_file(), "trace file {trace}");
    assert!(trace.starts_with(env.home.path().to_str().unwrap()));
    assert_eq!(o.one("request_context")["step_index"], 1);
    assert_eq!(o.one("provider_state")["provider"], "fake");
    // Nobody answers questions in exec: `ask_user` is not offered.
    let tools = env.fake.requests()[0].body["tools"].clone();
    assert!(
        !tools.to_string().contains("\"ask_user\""),
        "ask_user offered in exec: {tools}"
    );
    let r = o.result();
    assert_eq!(r["final_message"], "Hello, world.");
    assert_eq!(r["trace_path"], trace);
    assert_eq!(r["thread_id"], o.events[1]["thread_id"]);
    assert_eq!(r["turn_id"], tc["turn_id"]);
    assert!(r["run_id"].as_str().unwrap().starts_with("run"));
    assert_eq!(r["error"], "");
    assert!(r.get("structured_result").is_none());
    let body = &env.fake.requests()[0].body;
    assert!(body.to_string().contains("say hello"));

    // Human mode: the answer alone on stdout, progress on stderr.
    env.fake.push(Script::text(&["Plain answer"]));
    let o = env.run(&["say it plainly"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, "Plain answer\n");
    for k in [
        "provider: fake",
        "model: m",
        "thread_id: ",
        "turn_id: ",
        "trace_path: ",
    ] {
        assert!(o.stderr.contains(k), "{k} in {}", o.stderr);
    }
}

#[test]
fn prompt_from_stdin_and_odd_text_stay_valid_json() {
    let env = Env::new();
    let huge = "x".repeat(3 * 1024 * 1024);
    let weird = "nul\u{0} esc\u{1b}[31m bell\u{7} ls\u{2028} </script> & \"q\" \\";
    env.fake.push(Script::text(&[weird, &huge]));
    let o = env.run_with_stdin(&["--json"], Some("the task from stdin\n"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let r = o.result();
    let fm = r["final_message"].as_str().unwrap();
    assert!(fm.starts_with(weird));
    assert_eq!(fm.len(), weird.len() + huge.len());
    assert!(env.fake.requests()[0]
        .body
        .to_string()
        .contains("the task from stdin"));
}

#[test]
fn bash_tool_emits_paired_command_events_with_redaction() {
    let env = Env::new();
    let cmd = "echo token=sk-abcdefghijklmnop1234 > /dev/null; echo hi-from-bash";
    env.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &json!({ "command": cmd }).to_string(),
    ));
    env.fake.push(Script::text(&["ran it"]));
    let o = env.run(&["--json", "run something"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let ts = o.one("tool_started");
    let cs = o.one("command_started");
    let item = ts["item_id"].as_str().unwrap();
    assert_eq!(cs["item_id"], item);
    assert_eq!(ts["name"], "bash");
    assert!(cs["command"]
        .as_str()
        .unwrap()
        .ends_with("echo hi-from-bash"));
    assert!(ts["arguments"].as_str().unwrap().contains("hi-from-bash"));
    let out: String = o
        .all("tool_output_delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    assert!(out.contains("hi-from-bash"), "{out}");
    let cod = o.all("command_output_delta");
    assert!(!cod.is_empty());
    assert_eq!(cod[0]["item_id"], item);
    assert_eq!(cod[0]["arguments"], cs["arguments"]);
    let tcomp = o.one("tool_completed");
    assert_eq!(
        (tcomp["status"].as_str(), tcomp["error"].as_str()),
        (Some("completed"), Some(""))
    );
    let ccomp = o.one("command_completed");
    assert_eq!(ccomp["status"], "completed");
    // Order: tool_* before command_* for the same notification.
    let t = o.types();
    let pos = |ty: &str| t.iter().position(|x| *x == ty).unwrap();
    assert!(pos("tool_started") + 1 == pos("command_started"));
    assert!(pos("tool_completed") + 1 == pos("command_completed"));
    // Secrets never reach the stream in argument-bearing events.
    for e in &o.events {
        if [
            "tool_started",
            "command_started",
            "command_output_delta",
            "command_completed",
        ]
        .contains(&e["type"].as_str().unwrap())
        {
            let s = e.to_string();
            assert!(!s.contains("sk-abcdefghijklmnop1234"), "{s}");
            assert!(s.contains("[REDACTED]"), "{s}");
        }
    }
    assert_eq!(o.result()["final_message"], "ran it");
}

#[test]
fn file_edit_and_todo_update() {
    let env = Env::new();
    std::fs::write(env.ws().join("notes.txt"), "alpha\nbeta\n").unwrap();
    env.fake.push(Script::tool_call(
        "call_e",
        "edit_file",
        &json!({"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}).to_string(),
    ));
    env.fake.push(Script::tool_call(
        "call_t",
        "todo_write",
        &json!({"todos": [{"content": "edit notes", "status": "completed"}, {"content": "report", "status": "in_progress"}]}).to_string(),
    ));
    env.fake.push(Script::text(&["edited"]));
    let o = env.run(&["--json", "edit the notes"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read_to_string(env.ws().join("notes.txt")).unwrap(),
        "alpha\ngamma\n"
    );
    let fc = o.one("file_changed");
    assert_eq!(fc["tool_name"], "edit_file");
    assert!(fc["path"].as_str().unwrap().ends_with("notes.txt"));
    let hex64 = |v: &Value| {
        let s = v.as_str().unwrap();
        s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit())
    };
    assert!(hex64(&fc["old_file_sha"]), "{fc}");
    assert!(hex64(&fc["new_file_sha"]), "{fc}");
    assert_ne!(fc["old_file_sha"], fc["new_file_sha"]);
    assert!(
        !fc["workspace_revision"].as_str().unwrap().is_empty(),
        "{fc}"
    );
    for k in ["action", "patch_journal_path", "manifest_path", "move_path"] {
        assert!(fc[k].is_string(), "{k}");
    }
    let edit = o
        .all("tool_completed")
        .into_iter()
        .find(|e| e["name"] == "edit_file")
        .unwrap();
    assert_eq!(fc["item_id"], edit["item_id"]);
    let todo = o.one("todo_updated");
    assert_eq!(todo["todo"]["todos"][0]["content"], "edit notes");
    assert_eq!(todo["todo"]["todos"][1]["status"], "in_progress");
}

#[test]
fn provider_401_exits_7() {
    let env = Env::new();
    env.fake.push(Script::status(HttpError::Unauthorized));
    let o = env.run(&["--json", "hello"]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    let tf = o.one("turn_failed");
    assert!(!tf["error"].as_str().unwrap().is_empty());
    let r = o.result();
    assert!(!r["error"].as_str().unwrap().is_empty());
    assert!(o.stderr.contains("error: "), "{}", o.stderr);
}

#[test]
fn permission_denial_exits_3() {
    let env = Env::new();
    env.fake.push(Script::tool_call(
        "call_w",
        "write_file",
        &json!({"path": "out.txt", "content": "nope"}).to_string(),
    ));
    env.fake.push(Script::text(&["could not write"]));
    let o = env.run(&["--json", "--permission-mode", "read_only", "write a file"]);
    assert_eq!(o.code, 3, "{}", o.stderr);
    assert_eq!(o.events[1]["permission_mode"], "read_only");
    let tc = o.one("tool_completed");
    assert_eq!(tc["status"], "failed");
    assert!(o.all("file_changed").is_empty());
    assert!(!env.ws().join("out.txt").exists());
    assert_eq!(o.result()["status"], "permission_denied");
}

#[test]
fn invalid_schema_exits_2_without_a_request() {
    let env = Env::new();
    std::fs::write(env.ws().join("schema.json"), r#"{"type": 12}"#).unwrap();
    let o = env.run(&["--json", "--output-schema", "schema.json", "answer"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert_eq!(o.types(), ["result"]);
    assert!(o.result()["error"].as_str().unwrap().contains("schema"));
    assert_eq!(o.result()["thread_id"], "");
    assert_eq!(env.fake.requests().len(), 0);
    // Not JSON at all: same.
    std::fs::write(env.ws().join("schema.json"), "{ nope").unwrap();
    let o = env.run(&["--json", "--output-schema", "schema.json", "answer"]);
    assert_eq!(o.code, 2);
    assert_eq!(env.fake.requests().len(), 0);
}

#[test]
fn special_files_as_inputs_are_refused_without_reading_them() {
    // A FIFO blocked exec forever and /dev/zero grew it without bound: each input file is
    // opened non-blocking and must be a regular file.
    let env = Env::new();
    let fifo = env.ws().join("pipe");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for special in [fifo.to_str().unwrap(), "/dev/zero"] {
        for flag in ["--output-schema", "--image", "--file"] {
            let mut child = env.spawn(&["--json", flag, special, "answer"]);
            let code = wait_timeout(&mut child, Duration::from_secs(20));
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            assert_eq!(code, Some(2), "{flag} {special}: {err}");
        }
    }
    // An oversized schema is refused by size, not read whole.
    let big = env.ws().join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(2 * 1024 * 1024).unwrap();
    let o = env.run(&["--json", "--output-schema", "big.json", "answer"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.result()["error"]
            .as_str()
            .unwrap()
            .contains("larger than"),
        "{:?}",
        o.result()
    );
    assert_eq!(env.fake.requests().len(), 0);
}

#[test]
fn schema_correction_turn_then_structured_result() {
    let env = Env::new();
    let schema = json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}});
    std::fs::write(env.ws().join("schema.json"), schema.to_string()).unwrap();
    env.fake.push(Script::text(&["The answer is 42."]));
    env.fake.push(Script::text(&["{\"answer\": ", "42}"]));
    let last = env.ws().join("out/last.txt");
    let o = env.run(&[
        "--json",
        "--output-schema",
        "schema.json",
        "--output-last-message",
        last.to_str().unwrap(),
        "what is the answer",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.all("turn_started").len(), 2, "{:?}", o.types());
    // Spec §5.5: the failed attempt says another turn follows; the last does not.
    let awaiting: Vec<Value> = o
        .all("turn_completed")
        .iter()
        .map(|t| t["awaiting_auto_continuation"].clone())
        .collect();
    assert_eq!(awaiting, [json!(true), json!(false)]);
    assert!(o.all("error").is_empty());
    let r = o.result();
    assert_eq!(r["structured_result"], json!({"answer": 42}));
    assert_eq!(r["final_message"], "{\"answer\": 42}");
    assert_eq!(std::fs::read_to_string(last).unwrap(), "{\"answer\": 42}");
    assert_eq!(env.fake.requests().len(), 2);
}

#[test]
fn schema_retries_exhausted_fail() {
    let env = Env::new();
    std::fs::write(env.ws().join("s.json"), r#"{"type":"array"}"#).unwrap();
    for _ in 0..3 {
        env.fake.push(Script::text(&["not json"]));
    }
    let o = env.run(&["--json", "--output-schema", "s.json", "list"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert_eq!(o.all("turn_started").len(), 3);
    // Two corrections follow; after the last attempt none does.
    let awaiting: Vec<Value> = o
        .all("turn_completed")
        .iter()
        .map(|t| t["awaiting_auto_continuation"].clone())
        .collect();
    assert_eq!(awaiting, [json!(true), json!(true), json!(false)]);
    assert!(o.result().get("structured_result").is_none());
}

fn proc_with(marker: &str) -> Vec<String> {
    let mut found = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                found.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    found
}

/// Reads stdout lines on a thread; returns the receiver of lines and the join handle.
fn line_reader(child: &mut Child) -> crossbeam_channel::Receiver<String> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn sigterm_mid_command_interrupts_and_kills_the_command() {
    let env = Env::new();
    let marker = format!("30.{}{}", std::process::id(), 7);
    let cmd = format!("sleep {marker}; echo never");
    env.fake.push(Script::tool_call(
        "call_s",
        "bash",
        &json!({ "command": cmd }).to_string(),
    ));
    let mut child = env.spawn(&["--json", "sleep a while"]);
    let rx = line_reader(&mut child);
    let mut lines = vec![];
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let l = rx
            .recv_timeout(end.saturating_duration_since(Instant::now()))
            .expect("command_started before the deadline");
        let started = l.contains("\"type\":\"command_started\"");
        lines.push(l);
        if started {
            break;
        }
    }
    // Wait until the sleep really runs.
    let end = Instant::now() + Duration::from_secs(10);
    while proc_with(&format!("sleep {marker}")).is_empty() {
        assert!(Instant::now() < end, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let code = wait_timeout(&mut child, Duration::from_secs(20)).expect("exit after SIGTERM");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    lines.extend(rx.iter());
    let stdout = lines.join("\n") + "\n";
    let events = check_stream(&stdout, code);
    assert_eq!(code, 5);
    let ti: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "turn_interrupted")
        .collect();
    assert_eq!(ti.len(), 1, "{stdout}");
    assert_eq!(ti[0]["reason"], "interrupted");
    let r = events.last().unwrap();
    assert_eq!(r["error"], "interrupted");
    assert!(!r["run_id"].as_str().unwrap().is_empty());
    // The tool call was settled in the stream, and no process is left.
    assert!(events.iter().any(|e| e["type"] == "tool_completed"));
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let left = proc_with(&format!("sleep {marker}"));
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < end, "processes left: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn timeout_against_a_stalled_provider_exits_4() {
    let env = Env::new();
    env.fake
        .push(Script::stall(&["partial "], Duration::from_secs(60)));
    let t0 = Instant::now();
    let o = env.run(&["--json", "--timeout", "1500ms", "answer slowly"]);
    assert_eq!(o.code, 4, "{}", o.stderr);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let ti = o.one("turn_interrupted");
    assert_eq!(ti["reason"], "timeout");
    let r = o.result();
    assert_eq!(r["error"], "timeout");
    assert_eq!(r["final_message"], "partial ");
}

#[test]
fn timeout_bounds_a_consumer_that_stops_reading() {
    let env = Env::new();
    env.fake.push(Script::many_deltas(60_000, "abcdefghij"));
    let t0 = Instant::now();
    let mut child = env.spawn(&["--json", "--timeout", "2s", "stream a lot"]);
    // Never read stdout: the process must still exit shortly after the deadline.
    let code =
        wait_timeout(&mut child, Duration::from_secs(30)).expect("exit despite stalled stdout");
    assert!(t0.elapsed() < Duration::from_secs(12), "{:?}", t0.elapsed());
    // The deadline (4) or, on a slow machine, the subscription overflow (6) ends it first.
    assert!(code == 4 || code == 6, "exit code {code}");
}

#[test]
fn overflow_fails_the_run_with_exit_6() {
    let env = Env::new();
    env.fake.push(Script::many_deltas(60_000, "abcdefghij"));
    // The backpressure bound (default 20 s) shortened: past it, the run overflows.
    let child = env
        .command(&["--json", "stream a lot"])
        .env("WUU_EXEC_BACKPRESSURE_MS", "300")
        .spawn()
        .unwrap();
    // Stop reading for a while: the pipe, the writer queue and the subscription fill.
    std::thread::sleep(Duration::from_secs(4));
    let o = finish(child, true);
    assert_eq!(o.code, 6, "{}", o.stderr);
    let r = o.result();
    assert!(r["error"].as_str().unwrap().contains("overflow"), "{r}");
    assert!(o.stderr.contains("overflow"));
}

#[test]
fn resume_last_continues_the_conversation() {
    let env = Env::new();
    env.fake.push(Script::text(&["first answer"]));
    let first = env.run(&["--json", "remember the word kiwi"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let thread = first.result()["thread_id"].as_str().unwrap().to_owned();
    env.fake.push(Script::text(&["kiwi"]));
    let o = env.run(&["resume", "--last", "--json", "what was the word?"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_prefix(&o, "thread_resumed");
    assert_eq!(o.events[1]["thread_id"], thread);
    assert_eq!(o.result()["thread_id"], thread);
    assert_eq!(o.result()["final_message"], "kiwi");
    let body = env.fake.requests()[1].body.to_string();
    assert!(body.contains("remember the word kiwi") && body.contains("first answer"));
    // Resume by id, and fork.
    env.fake.push(Script::text(&["again"]));
    let o = env.run(&["resume", "--json", &thread, "once more"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.events[1]["thread_id"], thread);
    env.fake.push(Script::text(&["forked"]));
    let o = env.run(&["--json", "--fork", &thread, "branch off"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_prefix(&o, "thread_forked");
    assert_ne!(o.events[1]["thread_id"], thread);
    // Unknown id: invalid input, one result line.
    let o = env.run(&["resume", "--json", "no-such-thread", "x"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

#[test]
fn help_and_bad_flags() {
    let env = Env::new();
    let o = env.run(&["-h"]);
    assert_eq!(o.code, 0);
    assert!(o.stdout.contains("Usage:"));
    for args in [
        &["--bogus", "x"][..],
        &["--timeout", "5parsecs", "x"],
        &["--permission-mode", "root", "x"],
        &["--max-turns", "-3", "x"],
        &["resume"],
        &["--json"],
    ] {
        let o = finish(env.spawn(args), false);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert_eq!(o.stdout, "", "{args:?}");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.starts_with("error: "), "{}", o.stderr);
    }
    assert_eq!(env.fake.requests().len(), 0);
}

#[test]
fn a_workdir_that_cannot_be_resolved_fails_inside_the_run() {
    // Spec §2.9: a workdir resolution failure is an error inside the run, so JSON mode
    // reports it as its one `result` (status `failed`, empty ids), exit 2.
    let env = Env::new();
    let missing = env.ws().join("missing");
    let file = env.ws().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for bad in [&missing, &file] {
        let o = env.run(&["--json", "--cd", bad.to_str().unwrap(), "hi"]);
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert_eq!(o.events.len(), 1, "{:?}", o.events);
        let r = &o.events[0];
        assert_eq!(r["type"], "result", "{r}");
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["thread_id"], "", "{r}");
        assert_eq!(r["exit_code"], 2, "{r}");
        assert_eq!(r["error_category"], "invalid_input", "{r}");
        assert!(r["error"].as_str().unwrap_or("").contains("--cd"), "{r}");
    }
    assert_eq!(env.fake.requests().len(), 0);
}

#[test]
fn broken_stdout_pipe_exits_6() {
    let env = Env::new();
    env.fake.push(Script::many_deltas(60_000, "abcdefghij"));
    let mut child = env.spawn(&["--json", "stream a lot"]);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("session_configured"));
    drop(out);
    let code = wait_timeout(&mut child, Duration::from_secs(30)).expect("exit after EPIPE");
    assert_eq!(code, 6);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("write exec output"), "{err}");
}

#[test]
fn second_process_on_a_busy_thread_exits_9() {
    let env = Env::new();
    env.fake.push(Script::text(&["seeded"]));
    let seed = env.run(&["--json", "seed"]);
    assert_eq!(seed.code, 0, "{}", seed.stderr);
    let thread = seed.result()["thread_id"].as_str().unwrap().to_owned();
    env.fake
        .push(Script::stall(&["thinking"], Duration::from_secs(60)));
    let mut first = env.spawn(&["resume", "--json", "--timeout", "20s", &thread, "long task"]);
    let rx = line_reader(&mut first);
    assert!(env.fake.wait_requests(2, Duration::from_secs(20)));
    let o = env.run(&["resume", "--json", &thread, "another task"]);
    assert_eq!(o.code, 9, "{}", o.stderr);
    assert_eq!(o.result()["thread_id"], thread);
    assert_eq!(o.result()["run_id"], "");
    assert!(o.result()["error"]
        .as_str()
        .unwrap()
        .contains("thread_busy"));
    Command::new("kill")
        .args(["-INT", &first.id().to_string()])
        .status()
        .unwrap();
    let code = wait_timeout(&mut first, Duration::from_secs(20)).unwrap();
    let stdout = rx.iter().collect::<Vec<_>>().join("\n") + "\n";
    check_stream(&stdout, code);
    assert_eq!(code, 5);
}

#[test]
fn ephemeral_run_with_attachments() {
    let env = Env::new();
    // A 1×1 PNG.
    let png: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f,
        0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8,
        0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00,
        0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    std::fs::write(env.ws().join("pixel.png"), png).unwrap();
    env.fake.push(Script::text(&["a pixel"]));
    let o = env.run(&["--json", "--ephemeral", "--image", "pixel.png", "describe"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.result()["final_message"], "a pixel");
    let body = env.fake.requests()[0].body.to_string();
    assert!(
        body.contains("iVBORw0KGgo"),
        "the image reached the provider"
    );
    // Nothing durable: resume --last finds no conversation.
    let o = env.run(&["resume", "--last", "--json", "again"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    // A missing attachment is invalid input, reported as a result, nothing sent.
    let before = env.fake.requests().len();
    let o = env.run(&["--json", "--file", "missing.pdf", "read it"]);
    assert_eq!(o.code, 2);
    assert_eq!(o.types(), ["result"]);
    assert_eq!(env.fake.requests().len(), before);
}

#[test]
fn resume_with_a_compact_prompt_compacts_the_conversation() {
    let env = Env::new();
    let mut cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(env.home.path().join("config.json")).unwrap(),
    )
    .unwrap();
    cfg["agent"]["compact_keep_recent_tokens"] = json!(50);
    std::fs::write(env.home.path().join("config.json"), cfg.to_string()).unwrap();
    let long = "some context for the request. ".repeat(20);
    env.fake.push(Script::text(&["first answer"]));
    let first = env.run(&["--json", &format!("EARLY-ONE {long}")]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    for n in 2..=3 {
        env.fake.push(Script::text(&[&format!("answer {n}")]));
        let o = env.run(&["resume", "--last", "--json", &format!("turn {n} {long}")]);
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    env.fake
        .push(Script::text(&["SUMMARY-X: three turns about context."]));
    let before = env.fake.requests().len();
    let o = env.run(&["resume", "--last", "--json", "/compact"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let reqs = env.fake.requests();
    assert_eq!(reqs.len(), before + 1, "one summary request");
    let summary_req = reqs[before].body.to_string();
    assert!(
        summary_req.contains("EARLY-ONE") && !summary_req.contains("\"/compact\""),
        "{summary_req:.300}"
    );
    assert_eq!(o.result()["status"], "completed", "{}", o.result());
    // The next run sends the summary instead of the early turn.
    env.fake.push(Script::text(&["after"]));
    let o = env.run(&["resume", "--last", "--json", "what now?"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let last = env.fake.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("SUMMARY-X") && !last.contains("EARLY-ONE"),
        "{last:.600}"
    );
}
