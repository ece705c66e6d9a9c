//! End-to-end tests: a configured provider key appears on no surface (issue 10 §3).
//!
//! Each test uses a distinctive key and greps every surface for it: stdout (JSONL
//! events / protocol frames), stderr at `RUST_LOG=trace`, and every file under
//! `WUU_HOME` — the database, its WAL, traces, spill files — during and after the run.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::fake_provider::{FakeProvider, HttpError, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");
const KEY: &str = "sk-leak-PROBE-5e1f0a9b7c3d";

struct Lab {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    fake: FakeProvider,
}

impl Lab {
    fn new(provider_extra: Value, agent_extra: Value) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (home, ws) = (base.join("wuu"), base.join("ws"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let fake = FakeProvider::start();
        let mut provider = json!({
            "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
            "api_key_env": "LEAK_API_KEY",
            "max_retries": 0, "initial_backoff_ms": 1, "max_backoff_ms": 5,
        });
        merge(&mut provider, provider_extra);
        let mut agent = json!({"auto_title": false, "output_cap_bytes": 1024});
        merge(&mut agent, agent_extra);
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": provider},
            "agent": agent,
        });
        std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        Lab {
            _dir: dir,
            home,
            ws,
            fake,
        }
    }

    /// Runs `wuu exec --json` at `RUST_LOG=trace`; returns (exit code, stdout, stderr).
    fn exec(&self, prompt: &str) -> (i32, String, String) {
        let mut child = Command::new(BIN)
            .arg("exec")
            .arg("--json")
            .arg("--cd")
            .arg(&self.ws)
            .arg(prompt)
            .env("WUU_HOME", &self.home)
            .env("HOME", &self.home)
            .env("LEAK_API_KEY", KEY)
            .env("RUST_LOG", "trace")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t1 = std::thread::spawn(move || {
            let mut s = String::new();
            out.read_to_string(&mut s).unwrap();
            s
        });
        let t2 = std::thread::spawn(move || {
            let mut s = String::new();
            err.read_to_string(&mut s).unwrap();
            s
        });
        let end = Instant::now() + Duration::from_secs(60);
        let code = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code().unwrap_or(-1);
            }
            assert!(Instant::now() < end, "exec hung");
            std::thread::sleep(Duration::from_millis(20));
        };
        (code, t1.join().unwrap(), t2.join().unwrap())
    }
}

fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            b.insert(k, v);
        }
    }
}

/// Every file below `dir` (recursively) with its bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The key is in no file under `home` (db, WAL, traces, spill files, …); returns the
/// names seen, so a test can check that the surfaces it means exist.
fn assert_no_key_on_disk(home: &Path, key: &str) -> Vec<String> {
    let mut names = vec![];
    for (p, bytes) in files(home) {
        if p.file_name().is_some_and(|n| n == "config.json") {
            continue;
        }
        assert!(!contains(&bytes, key), "{} holds the key", p.display());
        names.push(p.to_string_lossy().into_owned());
    }
    names
}

fn assert_clean(what: &str, text: &str, key: &str) {
    if let Some(at) = text.find(key) {
        let mut from = at.saturating_sub(1500);
        while !text.is_char_boundary(from) {
            from -= 1;
        }
        let mut to = (at + 500).min(text.len());
        while !text.is_char_boundary(to) {
            to += 1;
        }
        panic!("{what} shows {key:?}:\n…{}…", &text[from..to]);
    }
}

#[test]
fn an_error_quoting_the_upstream_body_does_not_show_the_key() {
    let lab = Lab::new(json!({}), json!({}));
    lab.fake.push(Script::status(HttpError::BadRequest(format!(
        "Incorrect API key provided: {KEY}. You can find your API key at example"
    ))));
    let (code, stdout, stderr) = lab.exec("hello");
    assert_ne!(code, 0);
    assert!(stdout.contains("Incorrect API key provided"), "{stdout}");
    assert!(stdout.contains("[REDACTED]"), "{stdout}");
    assert_clean("stdout", &stdout, KEY);
    assert_clean("stderr", &stderr, KEY);
    // The request did carry the key (the redactor only masks what leaves the host).
    let req = &lab.fake.requests()[0];
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let names = assert_no_key_on_disk(&lab.home, KEY);
    assert!(names.iter().any(|n| n.ends_with("wuu.db")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("traces")), "{names:?}");
}

#[test]
fn command_output_with_the_key_is_masked_in_items_store_wal_trace_and_spill() {
    // `keep` passes the key to commands on purpose: everything they print is masked.
    let lab = Lab::new(json!({}), json!({"shell_env": {"keep": ["LEAK_API_KEY"]}}));
    let cmd = "echo \"key=$LEAK_API_KEY\"; env | grep LEAK; \
               for i in $(seq 1 400); do printf '%s ' \"$LEAK_API_KEY\"; done; echo; \
               echo \"$LEAK_API_KEY\" >&2";
    lab.fake.push(Script::tool_call(
        "call_1",
        "bash",
        &json!({ "command": cmd }).to_string(),
    ));
    lab.fake.push(Script::text(&["done"]));
    let (code, stdout, stderr) = lab.exec("print it");
    assert_eq!(code, 0, "{stderr:.3000}");
    assert!(stdout.contains("key=[REDACTED]"), "{stdout:.3000}");
    assert_clean("stdout", &stdout, KEY);
    assert_clean("stderr at trace", &stderr, KEY);
    // The model got the masked output too.
    let body = lab.fake.requests()[1].body.to_string();
    assert!(body.contains("[REDACTED]"), "{body:.2000}");
    assert!(!body.contains(KEY));
    let names = assert_no_key_on_disk(&lab.home, KEY);
    assert!(
        names.iter().any(|n| n.contains("/spill/")),
        "a spill file was written: {names:?}"
    );
    let spill = names.iter().find(|n| n.contains("/spill/")).unwrap();
    let spilled = std::fs::read_to_string(spill).unwrap();
    assert!(spilled.contains("[REDACTED] [REDACTED]"), "{spilled:.500}");
}

#[test]
fn base_url_with_userinfo_is_refused_and_never_shown() {
    let secret = "userinfo-KEY-8a7b6c5d4e";
    let lab = Lab::new(json!({}), json!({}));
    let cfg_path = lab.home.join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    let url = lab
        .fake
        .base_url()
        .replace("http://", &format!("http://user:{secret}@"));
    cfg["providers"]["fake"]["base_url"] = json!(url);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    lab.fake.push(Script::text(&["never"]));
    let (code, stdout, stderr) = lab.exec("hello");
    assert_ne!(code, 0, "{stdout}");
    assert!(
        format!("{stdout}{stderr}").contains("api_key_env"),
        "the error says what to do: {stdout}\n{stderr}"
    );
    assert_clean("stdout", &stdout, secret);
    assert_clean("stderr", &stderr, secret);
    assert!(lab.fake.requests().is_empty(), "nothing was sent");
    assert_no_key_on_disk(&lab.home, secret);
    // app-server: initialize and config/read show the provider without the secret.
    let (frames, stderr) = app_server(
        &lab,
        &[
            json!({"id":"1","method":"initialize","params":{"client":{"name":"t"}}}),
            json!({"id":"2","method":"config/read","params":{}}),
        ],
    );
    assert!(frames.contains("invalid_provider"), "{frames}");
    assert_clean("frames", &frames, secret);
    assert_clean("stderr", &stderr, secret);
}

/// Runs `wuu app-server` at `RUST_LOG=trace`, sends `lines`, waits for each answer,
/// scans the home while the server is still running (the WAL is live), then closes
/// stdin. Returns (all frames, stderr).
fn app_server(lab: &Lab, lines: &[Value]) -> (String, String) {
    let mut child = Command::new(BIN)
        .arg("app-server")
        .arg("--workdir")
        .arg(&lab.ws)
        .env("WUU_HOME", &lab.home)
        .env("HOME", &lab.home)
        .env("LEAK_API_KEY", KEY)
        .env("RUST_LOG", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut err = child.stderr.take().unwrap();
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let mut frames = String::new();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
        stdin.flush().unwrap();
        let id = l["id"].clone();
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "server ended early");
            frames.push_str(&line);
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id && (v.get("result").is_some() || v.get("error").is_some()) {
                break;
            }
        }
    }
    assert_no_key_on_disk(&lab.home, KEY);
    drop(stdin);
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    frames.push_str(&rest);
    let _ = child.wait();
    (frames, t_err.join().unwrap())
}

#[test]
fn trace_logs_do_not_show_keys_sent_in_requests() {
    let lab = Lab::new(json!({}), json!({}));
    let sent = "sk-client-SENT-0f9e8d7c6b5a";
    let (frames, stderr) = app_server(
        &lab,
        &[
            json!({"id":"1","method":"initialize","params":{"client":{"name":"t"}}}),
            json!({"id":"2","method":"config/model/update","params":{"model":"m","api_key": sent}}),
            json!({"id":"3","method":"thread/start","params":{}}),
        ],
    );
    assert!(
        stderr.contains("config/model/update"),
        "trace logs requests: {stderr:.2000}"
    );
    assert!(stderr.contains("TRACE"), "{stderr:.500}");
    assert_clean("stderr at trace", &stderr, sent);
    assert_clean("stderr at trace", &stderr, KEY);
    assert_clean("frames", &frames, sent);
    assert_clean("frames", &frames, KEY);
    assert_no_key_on_disk(&lab.home, sent);
    assert_no_key_on_disk(&lab.home, KEY);
}

/// The middle piece of [`KEY`] as the split scripts below send it alone in one delta.
const PIECE: &str = "PROBE-5e1f";

/// A key split across three or more deltas of reasoning, assistant text and tool-call
/// arguments, and a key prefix left open at the very end of the answer.
fn push_split_key_scripts(fake: &FakeProvider) {
    use support::fake_provider::Part;
    fake.push(Script::stream(vec![
        Part::Reasoning(vec![
            "I recall sk-leak-".into(),
            PIECE.into(),
            "0a9b7c3d from".into(),
            " the env".into(),
        ]),
        Part::Text(vec![
            "The key is sk-l".into(),
            "eak-".into(),
            format!("{PIECE}0a"),
            "9b7c3d.".into(),
            " Checking.".into(),
        ]),
        Part::ToolCall {
            id: "call_1".into(),
            name: "bash".into(),
            args: vec![
                "{\"command\":\"echo sk-le".into(),
                format!("ak-{PIECE}"),
                "0a9b7c3d".into(),
                "\"}".into(),
            ],
        },
    ]));
    fake.push(Script::text(&[
        "Again: sk-leak-",
        PIECE,
        "0a9b7c3d; and a mere prefix at the end: sk-leak-PR",
    ]));
}

/// Runs one turn through `wuu app-server` at `RUST_LOG=trace`; returns (frames, stderr).
fn app_server_turn(lab: &Lab, prompt: &str) -> (Vec<Value>, String) {
    let mut child = Command::new(BIN)
        .arg("app-server")
        .arg("--workdir")
        .arg(&lab.ws)
        .env("WUU_HOME", &lab.home)
        .env("HOME", &lab.home)
        .env("LEAK_API_KEY", KEY)
        .env("RUST_LOG", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut err = child.stderr.take().unwrap();
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut line = String::new();
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            let _ = tx.send(std::mem::take(&mut line));
        }
    });
    let mut frames = vec![];
    let read_until = |frames: &mut Vec<Value>, done: &dyn Fn(&Value) -> bool| -> Value {
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no answer ({e}); frames so far: {frames:#?}"));
            let v: Value = serde_json::from_str(&line).unwrap();
            frames.push(v.clone());
            if done(&v) {
                return v;
            }
        }
    };
    let mut send = move |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(json!({"id":"1","method":"initialize","params":{"client":{"name":"t"}}}));
    read_until(&mut frames, &|v| v["id"] == "1");
    send(json!({"id":"2","method":"thread/start","params":{}}));
    let th = read_until(&mut frames, &|v| v["id"] == "2");
    let thread_id = th["result"]["thread"]["id"].clone();
    send(
        json!({"id":"3","method":"turn/start","params":{"thread_id": thread_id, "prompt": prompt}}),
    );
    read_until(&mut frames, &|v| {
        matches!(v["method"].as_str(), Some("turn/completed" | "turn/error"))
    });
    // The WAL is live while the server runs.
    assert_no_key_on_disk(&lab.home, KEY);
    assert_no_key_on_disk(&lab.home, PIECE);
    drop(send);
    frames.extend(rx.iter().filter_map(|l| serde_json::from_str(&l).ok()));
    let _ = child.wait();
    (frames, t_err.join().unwrap())
}

#[test]
fn a_key_split_across_streamed_deltas_is_masked_and_no_delta_is_lost() {
    let lab = Lab::new(json!({}), json!({}));
    push_split_key_scripts(&lab.fake);
    let (frames, stderr) = app_server_turn(&lab, "tell me the key");
    assert!(
        frames.iter().any(|f| f["method"] == "turn/completed"),
        "{frames:#?}"
    );
    let all: String = frames.iter().map(|f| f.to_string() + "\n").collect();
    assert_clean("frames", &all, KEY);
    assert_clean("frames", &all, PIECE);
    assert_clean("stderr at trace", &stderr, KEY);
    assert_clean("stderr at trace", &stderr, PIECE);
    assert!(stderr.contains("TRACE"), "{stderr:.500}");
    assert_no_key_on_disk(&lab.home, KEY);
    let names = assert_no_key_on_disk(&lab.home, PIECE);
    assert!(names.iter().any(|n| n.contains("traces")), "{names:?}");
    let mut checked = deltas_add_up_to_items(&frames);
    checked.sort();
    assert_eq!(
        checked,
        [
            "item/agentMessage/delta",
            "item/agentMessage/delta",
            "item/reasoning/delta",
            "item/toolCall/delta"
        ],
        "{all}"
    );
    // Nothing was lost: the prefix left open at the end arrived with the last delta.
    let done = frames
        .iter()
        .find(|f| f["method"] == "turn/completed")
        .unwrap();
    assert!(
        done["params"]["content"]
            .as_str()
            .unwrap()
            .ends_with("[REDACTED]; and a mere prefix at the end: sk-leak-PR"),
        "{done}"
    );
}

/// Per completed item: its deltas add up to its (masked) text or arguments exactly, and
/// that text shows the mask. Returns the delta methods checked, one per item.
fn deltas_add_up_to_items(frames: &[Value]) -> Vec<&'static str> {
    let mut checked = vec![];
    for done in frames.iter().filter(|f| f["method"] == "item/completed") {
        let item = &done["params"]["item"];
        let (method, field) = match item["type"].as_str().unwrap() {
            "agent_message" => ("item/agentMessage/delta", "text"),
            "reasoning" => ("item/reasoning/delta", "text"),
            "tool_call" => ("item/toolCall/delta", "arguments"),
            _ => continue,
        };
        let deltas: Vec<&str> = frames
            .iter()
            .filter(|f| f["method"] == method && f["params"]["item_id"] == item["id"])
            .map(|f| f["params"]["delta"].as_str().unwrap())
            .collect();
        let whole = item[field].as_str().unwrap();
        assert_eq!(deltas.concat(), whole, "{method} deltas of {item}");
        assert!(whole.contains("[REDACTED]"), "{item}");
        assert!(!deltas.iter().any(|d| d.is_empty()), "{deltas:?}");
        checked.push(method);
    }
    checked
}

#[test]
fn a_stream_cut_off_after_a_split_key_still_delivers_the_held_tail_masked() {
    let lab = Lab::new(json!({}), json!({}));
    lab.fake.push(Script::truncated(&[
        "Key sk-leak-",
        PIECE,
        "0a9b7c3d and then sk-le",
    ]));
    let (frames, stderr) = app_server_turn(&lab, "tell me the key");
    let all: String = frames.iter().map(|f| f.to_string() + "\n").collect();
    assert!(
        frames
            .iter()
            .any(|f| matches!(f["method"].as_str(), Some("turn/completed" | "turn/error"))),
        "{all}"
    );
    assert_clean("frames", &all, KEY);
    assert_clean("frames", &all, PIECE);
    assert_clean("stderr at trace", &stderr, PIECE);
    assert_eq!(
        deltas_add_up_to_items(&frames),
        ["item/agentMessage/delta"],
        "{all}"
    );
    // The held tail (a key prefix) came as the last delta, before item/completed.
    let last = frames
        .iter()
        .rfind(|f| f["method"] == "item/agentMessage/delta")
        .unwrap();
    assert_eq!(last["params"]["delta"], "sk-le", "{all}");
    assert_no_key_on_disk(&lab.home, PIECE);
}

#[test]
fn exec_json_masks_a_key_split_across_deltas() {
    let lab = Lab::new(json!({}), json!({}));
    push_split_key_scripts(&lab.fake);
    let (code, stdout, stderr) = lab.exec("tell me the key");
    assert_eq!(code, 0, "{stderr:.3000}");
    assert_clean("stdout", &stdout, KEY);
    assert_clean("stdout", &stdout, PIECE);
    assert_clean("stderr at trace", &stderr, KEY);
    assert_clean("stderr at trace", &stderr, PIECE);
    assert_no_key_on_disk(&lab.home, KEY);
    assert_no_key_on_disk(&lab.home, PIECE);
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "agent_message_delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result", "{result}");
    let final_message = result["final_message"].as_str().unwrap();
    assert_eq!(
        final_message,
        "Again: [REDACTED]; and a mere prefix at the end: sk-leak-PR"
    );
    // The deltas add up to the two (masked) messages of the turn, nothing lost.
    assert_eq!(
        deltas,
        format!("The key is [REDACTED]. Checking.{final_message}")
    );
    assert!(
        stdout.contains(r#""command":"echo [REDACTED]""#),
        "{stdout:.3000}"
    );
}

#[test]
fn a_custom_auth_header_value_is_masked() {
    let secret = "custom-AUTH-value-77aa0b";
    let lab = Lab::new(json!({"headers": {"X-Custom-Auth": secret}}), json!({}));
    lab.fake.push(Script::status(HttpError::BadRequest(format!(
        "header X-Custom-Auth={secret} rejected"
    ))));
    let (code, stdout, stderr) = lab.exec("hello");
    assert_ne!(code, 0);
    assert!(
        stdout.contains("X-Custom-Auth=[REDACTED] rejected"),
        "{stdout:.3000}"
    );
    assert_clean("stdout", &stdout, secret);
    assert_clean("stderr at trace", &stderr, secret);
    assert_no_key_on_disk(&lab.home, secret);
    // The header was sent.
    let req = &lab.fake.requests()[0];
    assert_eq!(req.header("x-custom-auth"), Some(secret));
}

/// Waits for the response to `id` for at most `limit` (None when it does not come);
/// other frames stay in the backlog.
fn response_within(app: &mut support::app::App, id: &str, limit: Duration) -> Option<Value> {
    let deadline = Instant::now() + limit;
    let mut others = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break None;
        }
        match app.next_within(left) {
            Some(v) if v.get("method").is_none() && v["id"] == json!(id) => break Some(v),
            Some(v) => others.push(v),
            None => break None,
        }
    };
    app.backlog.extend(others);
    found
}

#[test]
fn a_long_key_after_non_ascii_keys_neither_stalls_the_server_nor_leaks() {
    let mut app = support::app::App::start(Some(support::app::config_for("http://127.0.0.1:9")));
    // Twelve pseudo-random non-ASCII characters per key.
    let mut seed: u32 = 0x2545_F491;
    let mut keys: Vec<String> = (0..5)
        .map(|_| {
            (0..12)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    char::from_u32(0x80 + seed % (0xD7FF - 0x80)).unwrap()
                })
                .collect()
        })
        .collect();
    // A run of one byte: a DFA build is quadratic in it (seconds for 4 KiB).
    keys.push("A".repeat(12 * 1024));
    for key in &keys[..5] {
        let e = app.call_err("config/model/update", json!({"api_key": key}));
        assert!(e["message"].as_str().unwrap().contains("api_key"), "{e}");
    }
    // The long key's matcher is built on a catalog worker while `config/read` is
    // answered by the reader, whose copy of the secret set is stale by now.
    let long = app.send("config/model/update", json!({"api_key": keys[5]}));
    std::thread::sleep(Duration::from_millis(300));
    let id = app.send("config/read", json!({}));
    let r = response_within(&mut app, &id, Duration::from_secs(8))
        .expect("config/read must answer within 8 s of the secret changes (the server stalled)");
    assert!(r.get("result").is_some(), "{r}");
    let r = app.response(&long);
    assert!(
        r["error"]["message"].as_str().unwrap().contains("api_key"),
        "{r}"
    );
    let text = format!("one {} two {} three\n", keys[2], keys[5]);
    std::fs::write(app.workdir.join("keys.txt"), &text).unwrap();
    let f = app.call("workspace/file/read", json!({"path": "keys.txt"}));
    let shown = f["text"].as_str().unwrap();
    assert!(
        shown.starts_with("one [REDACTED] two [REDACTED]"),
        "{shown:.300}"
    );
    assert!(shown.ends_with("[REDACTED] three\n"), "{shown:.300}");
    assert!(
        !shown.contains("AAAAAAAA") && !shown.contains(&keys[2]),
        "{shown:.300}"
    );
    // A key longer than the documented bound is refused clearly (and not kept).
    let e = app.call_err(
        "config/model/update",
        json!({"api_key": "B".repeat(16 * 1024 + 1)}),
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("longer than 16384 bytes"),
        "{e}"
    );
    app.call("config/read", json!({}));
}

#[test]
fn workspace_views_serve_no_secret_in_bytes_and_never_the_wuu_home() {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    // The `--workdir ~` layout: the wuu home (with the user config) inside the workspace.
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap().join("ws");
    let home = ws.join(".wuu");
    std::fs::create_dir_all(&home).unwrap();
    let header = "hdr-SECRET-9f8e7d6c5b4a";
    let cfg = json!({
        "agent": {"auto_title": false},
        "default_provider": "fake",
        "providers": {"fake": {"type": "openai-compatible", "base_url": "http://127.0.0.1:9",
            "model": "m", "api_key_env": "LEAK_API_KEY", "headers": {"X-Custom-Auth": header}}},
    });
    std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
    std::fs::write(ws.join(".env"), format!("KEY={KEY}\nAUTH={header}\n")).unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(format!("tEXt {KEY} IEND").as_bytes());
    std::fs::write(ws.join("key.png"), &png).unwrap();
    // The key straddles the first chunk's end (256 KiB).
    let mut big = vec![b'.'; 300_000];
    big[256 * 1024 - 5..256 * 1024 - 5 + KEY.len()].copy_from_slice(KEY.as_bytes());
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    std::fs::write(ws.join("plain.bin"), b"\x00\x01 nothing to hide").unwrap();
    std::os::unix::fs::symlink(".wuu/config.json", ws.join("cfg-link.json")).unwrap();
    std::fs::hard_link(home.join("config.json"), ws.join("cfg-hard.json")).unwrap();
    let ws_s = ws.to_string_lossy().into_owned();
    let mut app = support::app::App::spawn_in_env(
        &home,
        &ws,
        &[("LEAK_API_KEY", KEY), ("HOME", ws_s.as_str())],
    );

    let f = app.call("workspace/file/read", json!({"path": ".env"}));
    assert_eq!(f["text"], "KEY=[REDACTED]\nAUTH=[REDACTED]\n", "{f}");
    for (path, offset) in [(".env", 0), ("big.bin", 0)] {
        let e = app.call_err(
            "workspace/file/chunk",
            json!({"path": path, "offset": offset, "version": ""}),
        );
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("contains a configured secret"),
            "{path}: {e}"
        );
    }
    let img = app.call("workspace/file/read", json!({"path": "key.png"}));
    assert!(img.get("renderable_url").is_none(), "{img}");
    assert!(
        img["renderable_withheld"]
            .as_str()
            .unwrap()
            .contains("configured secret"),
        "{img}"
    );
    // A file without a secret is still served.
    let c = app.call("workspace/file/chunk", json!({"path": "plain.bin"}));
    assert_eq!(c["data"], b64(b"\x00\x01 nothing to hide"));
    // The wuu home and the user config are not workspace files.
    for (method, params) in [
        ("workspace/file/chunk", json!({"path": ".wuu/config.json"})),
        ("workspace/file/read", json!({"path": ".wuu/config.json"})),
        ("workspace/file/read", json!({"path": "cfg-link.json"})),
        ("workspace/file/chunk", json!({"path": "cfg-hard.json"})),
        ("workspace/directory/list", json!({"path": ".wuu"})),
        (
            "workspace/directory/list",
            json!({"root": home.to_string_lossy()}),
        ),
    ] {
        let e = app.call_err(method, params.clone());
        let m = e["message"].as_str().unwrap();
        assert!(
            m.contains("wuu home") || m.contains("user config file"),
            "{method} {params}: {e}"
        );
    }
    let l = app.call("workspace/directory/list", json!({"path": ""}));
    assert!(!l.to_string().contains(".wuu"), "{l}");
    let r = app.call(
        "workspace/file/resolve",
        json!({"reference": ".wuu/config.json"}),
    );
    assert_eq!(r["status"], "missing", "{r}");
    // No frame carried a secret, raw or in base64 (at any of the 3 alignments).
    let frames: String = app.seen.iter().map(|v| v.to_string()).collect();
    for secret in [KEY, header] {
        assert!(!frames.contains(secret), "{secret} leaked");
        for shift in 0..3 {
            let mut padded = vec![b'x'; shift];
            padded.extend_from_slice(secret.as_bytes());
            let enc = b64(&padded);
            let core = &enc[4..enc.len() - 4];
            assert!(!frames.contains(core), "{secret} leaked in base64");
        }
    }
}
