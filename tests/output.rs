//! End-to-end tests of what reaches stdout, stderr and the trace files: every line stays
//! whole under line splitters that break on more than `\n` (U+2028, U+2029, U+0085),
//! trace logging keeps protocol frames off bare stderr lines, `wuu exec` options in any
//! position, output-schema errors with their JSON pointer, the stored output schema of
//! a run, and a tool call cut off by the output limit. The real binary against the fake
//! provider (`tests/support/fake_provider.rs`), each test with its own `WUU_HOME`.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};
use support::app::{config_for, fresh_dirs, raw_app_server, wuu_bin, App};
use support::fake_provider::{Ending, FakeProvider, Part, Script};

/// Text with every character a line splitter other than JSON's may break on.
const TRICKY: &str = "one\u{2028}two\u{2029}three\u{85}four";

/// A title with the separators (titles refuse control characters such as U+0085).
const TITLE: &str = "title one\u{2028}two\u{2029}three";

/// Splits like Python's `str.splitlines` (which JavaScript's line terminators are a
/// subset of): on `\n`, `\r`, `\x0b`, `\x0c`, `\x1c`–`\x1e`, U+0085, U+2028 and U+2029.
fn python_lines(text: &str) -> Vec<&str> {
    text.split(|c: char| {
        matches!(
            c,
            '\n' | '\r'
                | '\u{0b}'
                | '\u{0c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        )
    })
    .filter(|l| !l.trim().is_empty())
    .collect()
}

/// Asserts that every line of `text`, split the Python way, is a whole JSON object;
/// returns them.
fn whole_objects(what: &str, text: &str) -> Vec<Value> {
    python_lines(text)
        .into_iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{what}: a line cut by splitlines ({e}): {l:?}"));
            assert!(v.is_object(), "{what}: not an object: {l}");
            v
        })
        .collect()
}

/// A raw app-server over its own home and workspace: stdin to write, stdout lines (as
/// text, split on `\n` only) arriving on a channel.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Raw {
    fn start(config: &Value, rust_log: Option<&str>, stderr: Stdio) -> Raw {
        let (home, ws) = fresh_dirs(Some(config));
        let mut cmd = raw_app_server(home.path(), Some(ws.path()));
        if let Some(l) = rust_log {
            cmd.env("RUST_LOG", l);
        }
        let mut child = cmd.stderr(stderr).spawn().expect("spawn wuu");
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
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
        Raw {
            stdin: child.stdin.take(),
            child,
            lines,
            _dirs: (home, ws),
        }
    }

    fn home(&self) -> &Path {
        self._dirs.0.path()
    }

    fn send(&mut self, id: &str, method: &str, params: Value) {
        let line = json!({"id": id, "method": method, "params": params}).to_string() + "\n";
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Reads stdout until a line containing `marker`; returns everything read.
    fn read_until(&mut self, marker: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut all = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {marker} within 30 s; got:\n{all}"));
            all.push_str(&line);
            if line.contains(marker) {
                return all;
            }
        }
    }

    /// Closes stdin and waits (at most 20 s) for the exit: the server ends at end of
    /// input.
    fn finish(mut self) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The id in `{"id": …, "result": {"thread": {"id": …}}}` among `frames`.
fn thread_of(frames: &[Value], id: &str) -> String {
    frames
        .iter()
        .find(|f| f["id"] == id)
        .and_then(|f| f["result"]["thread"]["id"].as_str())
        .unwrap_or_else(|| panic!("no thread in the answer to {id}: {frames:?}"))
        .to_owned()
}

#[test]
fn app_server_frames_and_traces_stay_whole_under_python_line_splitting() {
    let fake = FakeProvider::start();
    // A tool call whose arguments carry the characters (they reach the trace file),
    // then an answer streamed in deltas that carry them.
    let args = json!({"path": format!("missing-{TRICKY}")}).to_string();
    fake.push(Script::tool_call("c1", "list_files", &args));
    let halves = ["one\u{2028}tw", "o\u{2029}three\u{85}four"];
    fake.push(Script::text(&halves));
    let mut raw = Raw::start(&config_for(&fake.base_url()), None, Stdio::null());
    raw.send("s", "thread/start", json!({}));
    let mut out = raw.read_until("\"id\":\"s\"");
    let thread = thread_of(&whole_objects("app-server stdout", &out), "s");
    raw.send(
        "r",
        "thread/rename",
        json!({"thread_id": thread, "title": TITLE}),
    );
    out += &raw.read_until("\"id\":\"r\"");
    raw.send(
        "t",
        "turn/start",
        json!({"thread_id": thread, "prompt": format!("say {TRICKY}")}),
    );
    out += &raw.read_until("turn/completed");
    let home = raw.home().to_path_buf();
    let frames = whole_objects("app-server stdout", &out);
    // Decoding gives the characters back.
    let deltas: String = frames
        .iter()
        .filter(|f| f["method"] == "item/agentMessage/delta")
        .map(|f| f["params"]["delta"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(deltas, TRICKY, "{out}");
    let renamed = frames.iter().find(|f| f["id"] == "r").unwrap();
    assert_eq!(renamed["result"]["thread"]["title"], TITLE, "{renamed}");
    assert!(
        !out.contains('\u{2028}') && !out.contains('\u{2029}') && !out.contains('\u{85}'),
        "raw separators on stdout: {out}"
    );
    let trace = std::fs::read_to_string(home.join("traces").join(format!("{thread}.jsonl")))
        .expect("the trace file");
    let records = whole_objects("trace", &trace);
    let tool = records
        .iter()
        .find(|r| r["type"] == "tool")
        .unwrap_or_else(|| panic!("no tool record in the trace: {trace}"));
    assert!(
        tool["arguments"].as_str().unwrap().contains(TRICKY),
        "{tool}"
    );
    raw.finish();
}

#[test]
fn trace_logging_puts_every_frame_on_its_own_log_record() {
    // With RUST_LOG=trace the writer logs what it writes; a block of joined delta
    // frames used to be one record, its later frames bare lines on stderr.
    let fake = FakeProvider::start();
    let deltas: Vec<String> = (0..200).map(|i| format!("d{i} ")).collect();
    let refs: Vec<&str> = deltas.iter().map(String::as_str).collect();
    fake.push(Script::text(&refs));
    let mut raw = Raw::start(
        &config_for(&fake.base_url()),
        Some("wuu=trace"),
        Stdio::piped(),
    );
    let mut stderr = raw.child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    raw.send("s", "thread/start", json!({}));
    let out = raw.read_until("\"id\":\"s\"");
    let thread = thread_of(&whole_objects("stdout", &out), "s");
    raw.send(
        "t",
        "turn/start",
        json!({"thread_id": thread, "prompt": "go"}),
    );
    raw.read_until("turn/completed");
    raw.finish();
    let err = err.join().unwrap();
    let mut logged = 0;
    for line in err.lines() {
        let body = line.trim_start();
        assert!(
            !(body.starts_with('{') && body.contains("\"method\"")),
            "a protocol frame on stderr without a log header: {line:.300}"
        );
        if line.contains("out: {") && line.contains("item/agentMessage/delta") {
            assert!(line.starts_with('['), "{line:.300}");
            logged += 1;
        }
    }
    assert!(logged >= 100, "{logged} delta frames logged:\n{err:.3000}");
}

/// `wuu exec` over its own home (with a config for `fake`) and workspace.
struct Exec {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    fake: FakeProvider,
}

/// What one `wuu exec` printed.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Exec {
    fn new() -> Exec {
        let fake = FakeProvider::start();
        let (home, ws) = fresh_dirs(Some(&config_for(&fake.base_url())));
        Exec { home, ws, fake }
    }

    /// Runs `wuu exec ARGS` (at most 60 s).
    fn run(&self, args: &[&str]) -> Ran {
        let mut child = Command::new(wuu_bin())
            .arg("exec")
            .args(args)
            .env("WUU_HOME", self.home.path())
            .env("HOME", self.home.path())
            .env_remove("RUST_LOG")
            .current_dir(self.ws.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wuu exec");
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let code = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("wuu exec {args:?} hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ran {
            code,
            stdout: t_out.join().unwrap(),
            stderr: t_err.join().unwrap(),
        }
    }

    /// Runs with `--json` somewhere in `args`; every line must be a whole JSON event.
    fn run_json(&self, args: &[&str]) -> (Ran, Vec<Value>) {
        let ran = self.run(args);
        let events = whole_objects("exec stdout", &ran.stdout);
        assert!(
            events.last().is_some_and(|e| e["type"] == "result"),
            "{args:?}: no result line (code {}): {}\n{}",
            ran.code,
            ran.stdout,
            ran.stderr
        );
        (ran, events)
    }
}

#[test]
fn exec_json_lines_stay_whole_under_python_line_splitting() {
    let exec = Exec::new();
    exec.fake
        .push(Script::text(&["one\u{2028}tw", "o\u{2029}three\u{85}four"]));
    let prompt = format!("say {TRICKY}");
    let (ran, events) = exec.run_json(&["--json", &prompt]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "agent_message_delta")
        .map(|e| e["delta"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(deltas, TRICKY, "{}", ran.stdout);
    assert_eq!(events.last().unwrap()["final_message"], TRICKY);
    assert!(
        !ran.stdout.contains('\u{2028}') && !ran.stdout.contains('\u{2029}'),
        "{}",
        ran.stdout
    );
}

#[test]
fn exec_options_are_accepted_after_the_id_and_the_prompt() {
    let exec = Exec::new();
    // `wuu exec PROMPT --json`.
    exec.fake.push(Script::text(&["noted"]));
    let (ran, events) = exec.run_json(&["remember kiwi", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let thread = events.last().unwrap()["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = exec.fake.requests()[0].body.to_string();
    assert!(first.contains("remember kiwi") && !first.contains("--json"));
    // `wuu exec resume ID --json PROMPT` and an option after the prompt.
    exec.fake.push(Script::text(&["kiwi"]));
    let (ran, events) = exec.run_json(&[
        "resume",
        &thread,
        "--json",
        "what was the word?",
        "--max-turns",
        "3",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(events[1]["type"], "thread_resumed", "{}", ran.stdout);
    assert_eq!(events.last().unwrap()["thread_id"], thread);
    assert_eq!(events.last().unwrap()["final_message"], "kiwi");
    let second = exec.fake.requests()[1].body.to_string();
    assert!(second.contains("what was the word?") && !second.contains("max-turns"));
    // `--` still makes the rest prompt text.
    exec.fake.push(Script::text(&["ok"]));
    let (ran, _) = exec.run_json(&["--json", "--", "explain", "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let third = exec.fake.requests()[2].body.to_string();
    assert!(third.contains("explain --json"), "{third:.2000}");
    // An unknown option after the prompt is an error that says how to pass it.
    let ran = exec.run(&["list files", "-la"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("`--`"), "{}", ran.stderr);
    assert!(ran.stdout.is_empty());
}

/// An output schema whose `summary` has a misspelt type.
fn misspelt_schema() -> Value {
    json!({"type": "object", "properties": {"summary": {"type": "strng"}}, "required": ["summary"]})
}

#[test]
fn an_invalid_output_schema_names_the_pointer_and_the_rule() {
    let exec = Exec::new();
    std::fs::write(
        exec.ws.path().join("schema.json"),
        misspelt_schema().to_string(),
    )
    .unwrap();
    let ran = exec.run(&["--json", "--output-schema", "schema.json", "summarize"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    for want in [
        "/properties/summary/type",
        "\"strng\"",
        "JSON Schema type",
        "anyOf",
    ] {
        assert!(ran.stderr.contains(want), "{want:?} in {}", ran.stderr);
    }
    assert!(exec.fake.requests().is_empty(), "no model request was made");
    // The same through run/start.
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let th = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = app.call_err(
        "run/start",
        json!({"thread_id": th, "prompt": "summarize", "output_schema": misspelt_schema()}),
    );
    assert_eq!(e["code"], "invalid_params", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains(
            "output_schema: at /properties/summary/type: \"strng\" is not a JSON Schema type"
        ),
        "{m}"
    );
    assert!(m.contains("anyOf"), "{m}");
}

#[test]
fn a_run_keeps_its_output_schema() {
    let fake = FakeProvider::start();
    fake.push(Script::text(&[r#"{"summary": "short"}"#]));
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let th = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let schema = json!({"type": "object", "properties": {"summary": {"type": "string"}},
        "required": ["summary"], "additionalProperties": false});
    let started = app.call(
        "run/start",
        json!({"thread_id": th, "prompt": "summarize", "output_schema": schema}),
    );
    assert_eq!(
        started["run"]["request"]["output_schema"], schema,
        "{started}"
    );
    assert_eq!(started["run"]["request"]["structured_output"], true);
    let run_id = started["run"]["id"].as_str().unwrap().to_owned();
    let done = app.wait_for("the terminal run/updated", |v| {
        v["method"] == "run/updated"
            && v["params"]["run"]["id"] == run_id.as_str()
            && v["params"]["run"]["status"] != "running"
    });
    assert_eq!(done["params"]["run"]["status"], "completed", "{done}");
    assert_eq!(done["params"]["run"]["request"]["output_schema"], schema);
    // Read back from the store by a new process: run/interrupt answers a settled run
    // as it is stored.
    app.restart();
    let read = app.call("run/interrupt", json!({"run_id": run_id}));
    assert_eq!(read["run"]["status"], "completed", "{read}");
    assert_eq!(read["run"]["request"]["output_schema"], schema, "{read}");
}

/// An answer (Chat wire format, `finish_reason: "length"`) with one complete tool call
/// and one the output limit cut off inside its arguments.
fn one_complete_one_cut_off() -> Script {
    Script::stream(vec![
        Part::ToolCall {
            id: "call_whole".into(),
            name: "list_files".into(),
            args: vec!["{\"path\":".into(), "\".\"}".into()],
        },
        Part::ToolCall {
            id: "call_cut".into(),
            name: "write_file".into(),
            args: vec!["{\"path\":\"big.txt\",".into(), "\"content\":\"aaaa".into()],
        },
    ])
    .ending(Ending::Length)
}

#[test]
fn a_tool_call_cut_off_beside_a_complete_one_is_reported_to_the_model() {
    let fake = FakeProvider::start();
    fake.push(one_complete_one_cut_off());
    fake.push(Script::text(&["listed; will write again"]));
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let th = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.call(
        "turn/start",
        json!({"thread_id": th, "prompt": "list and write"}),
    );
    let done = app.notification("turn/completed");
    assert_eq!(done["params"]["turn"]["status"], "completed", "{done}");
    assert_eq!(done["params"]["truncated"], true, "{done}");
    // The complete call ran; the cut one was withdrawn and never ran.
    let items = done["params"]["turn"]["items"].to_string();
    assert!(items.contains("call_whole"), "{items}");
    assert!(!items.contains("call_cut"), "{items}");
    assert!(!app.workdir.join("big.txt").exists());
    // The next request tells the model which call was cut off and not run.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let next = reqs[1].body.to_string();
    assert!(next.contains("call_whole"), "{next:.3000}");
    assert!(
        next.contains("`write_file` (call id call_cut) was cut off by the output limit"),
        "{next:.3000}"
    );
    assert!(next.contains("NOT run"), "{next:.3000}");
}

#[test]
fn exec_removes_only_the_tool_calls_it_announced() {
    let exec = Exec::new();
    exec.fake.push(one_complete_one_cut_off());
    exec.fake.push(Script::text(&["listed"]));
    let (ran, events) = exec.run_json(&["--json", "list and write"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_started")
        .map(|e| &e["item_id"])
        .collect();
    assert_eq!(started.len(), 1, "{}", ran.stdout);
    for e in events.iter().filter(|e| e["type"] == "tool_removed") {
        assert!(
            started.contains(&&e["item_id"]),
            "tool_removed for a call never started: {e}\n{}",
            ran.stdout
        );
    }
    let result = events.last().unwrap();
    assert_eq!(result["final_message"], "listed");
    assert_eq!(result["final_message_partial"], false, "{result}");
}
