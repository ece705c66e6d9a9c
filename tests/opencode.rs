//! End-to-end tests of OpenCode as an external engine: the real `wuu app-server` (and
//! `wuu exec`) drives the real `opencode serve` (npm `opencode-ai`, pinned in `.ci/run`),
//! which talks to the fake Chat Completions provider on loopback through
//! `OPENCODE_CONFIG_CONTENT` (an `@ai-sdk/openai-compatible` provider), with
//! `OPENCODE_DISABLE_MODELS_FETCH=1` and its own HOME and XDG dirs: no outside traffic.
//! What the real server cannot be made to do on demand (crash with a last stderr line,
//! ignore an abort) is scripted in `tests/support/fake_opencode.py`.
//!
//! The OpenCode binary comes from `WUU_TEST_OPENCODE_BIN`; without it the real-OpenCode
//! tests print why and return.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

/// How long a frame may take: OpenCode's first prompt loads its plugins (seconds), and
/// several servers start at once when the tests run in parallel.
const LONG: Duration = Duration::from_secs(120);

/// The real OpenCode binary, or why it is missing.
fn opencode_bin() -> Option<PathBuf> {
    match std::env::var_os("WUU_TEST_OPENCODE_BIN").map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        Some(p) => {
            eprintln!(
                "skipped: WUU_TEST_OPENCODE_BIN={} does not exist",
                p.display()
            );
            None
        }
        None => {
            eprintln!(
                "skipped: WUU_TEST_OPENCODE_BIN is not set ({})",
                std::env::var("WUU_TEST_OPENCODE_SKIP").unwrap_or_else(|_| {
                    "install opencode-ai and point it at the binary".into()
                })
            );
            None
        }
    }
}

/// A workspace, a wuu home, OpenCode's own HOME and XDG dirs; OpenCode at `bin`, its
/// model the fake provider's.
struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    env: Vec<(String, String)>,
}

impl Setup {
    fn new(bin: &Path, fp: &FakeProvider) -> Setup {
        Setup::with(bin, fp, json!({"agent": {"auto_title": false}}), &[])
    }

    fn with(bin: &Path, fp: &FakeProvider, wuu_config: Value, extra: &[(&str, &str)]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("wuu-home");
        let ws = dir.path().join("ws");
        let xdg = dir.path().join("xdg");
        for d in [&home, &ws, &xdg] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join("config.json"), wuu_config.to_string()).unwrap();
        let ws = ws.canonicalize().unwrap();
        let config = json!({
            "model": "fake/fake-model",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": fp.base_url(), "apiKey": "test"},
                "models": {"fake-model": {"name": "Fake Model"}},
            }},
        });
        let x = |d: &str| xdg.join(d).to_string_lossy().into_owned();
        let mut env: Vec<(String, String)> = vec![
            ("WUU_OPENCODE_BINARY".into(), bin.to_string_lossy().into()),
            ("HOME".into(), home.to_string_lossy().into()),
            ("XDG_CONFIG_HOME".into(), x("config")),
            ("XDG_DATA_HOME".into(), x("data")),
            ("XDG_CACHE_HOME".into(), x("cache")),
            ("XDG_STATE_HOME".into(), x("state")),
            ("OPENCODE_CONFIG_CONTENT".into(), config.to_string()),
            ("OPENCODE_DISABLE_MODELS_FETCH".into(), "1".into()),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD".into(), "1".into()),
        ];
        for (k, v) in extra {
            env.push((k.to_string(), v.to_string()));
        }
        Setup {
            _dir: dir,
            home,
            ws,
            env,
        }
    }

    fn envs(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    fn app_with(&self, capabilities: Value) -> App {
        let mut app = App::spawn_in_env(&self.home, &self.ws, &self.envs());
        app.call(
            "initialize",
            json!({"protocol_version": "wuu-app-server/v0.1",
                   "client": {"name": "opencode-test"}, "capabilities": capabilities}),
        );
        app
    }

    fn app(&self) -> App {
        self.app_with(json!({}))
    }
}

/// The fake provider, answering OpenCode's title requests itself (they come at any
/// time and must not take the turn's scripts).
fn provider() -> FakeProvider {
    let fp = FakeProvider::start();
    fp.set_validate(false);
    fp.set_responder(|body| {
        let system = body
            .pointer("/messages/0/content")
            .map(Value::to_string)
            .unwrap_or_default();
        system
            .contains("title generator")
            .then(|| Script::text(&["A title"]))
    });
    fp
}

/// The bodies of the turn requests (not the title requests) the provider received.
fn bodies(fp: &FakeProvider) -> Vec<String> {
    fp.requests()
        .iter()
        .filter(|r| r.path.contains("/chat/completions"))
        .map(|r| r.body.to_string())
        .filter(|b| !b.contains("title generator"))
        .collect()
}

/// Frames read so far that no wait took yet (the support App's own wait is shorter
/// than OpenCode's start may take).
struct Frames {
    seen: Vec<Value>,
}

impl Frames {
    fn new() -> Frames {
        Frames { seen: vec![] }
    }

    fn wait(&mut self, app: &mut App, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.seen.iter().position(&pred) {
            return self.seen.remove(pos);
        }
        let deadline = Instant::now() + LONG;
        while Instant::now() < deadline {
            if let Some(v) = app.next_within(Duration::from_millis(500)) {
                if pred(&v) {
                    return v;
                }
                self.seen.push(v);
            }
        }
        panic!("timed out waiting for {what}; seen: {:?}", self.seen);
    }

    fn notification(&mut self, app: &mut App, method: &str) -> Value {
        let m = method.to_owned();
        self.wait(app, method, move |v| {
            v["method"] == m.as_str() && v.get("id").is_none()
        })
    }

    fn turn_end(&mut self, app: &mut App, thread_id: &str) -> Value {
        let tid = thread_id.to_owned();
        self.wait(app, "turn end", move |v| {
            matches!(
                v["method"].as_str(),
                Some("turn/completed") | Some("turn/error")
            ) && v["params"]["thread_id"] == tid.as_str()
        })
    }
}

fn start_thread(app: &mut App, mode: &str) -> String {
    let r = app.call(
        "thread/start",
        json!({"engine": "opencode", "permission_mode": mode}),
    );
    assert_eq!(r["thread"]["engine_id"], "opencode", "{r}");
    r["thread"]["id"].as_str().unwrap().to_owned()
}

fn turn(app: &mut App, thread_id: &str, prompt: &str) -> String {
    let r = app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": prompt}),
    );
    r["turn"]["id"].as_str().unwrap().to_owned()
}

fn tool_item(end: &Value) -> Value {
    end["params"]["turn"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "tool_call")
        .cloned()
        .unwrap_or_else(|| panic!("no tool item: {end}"))
}

#[test]
fn opencode_turn_streams_completes_and_resumes_after_a_restart() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    // engine/list: enabled, with what it can do.
    let r = app.call("engine/list", json!({"include_models": false}));
    let oc = r["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "opencode")
        .cloned()
        .unwrap();
    assert_eq!(oc["enabled"], true, "{oc}");
    assert_eq!(oc["error"], Value::Null, "{oc}");
    let caps = oc["capabilities"].to_string();
    assert!(
        caps.contains("native-session-resume") && caps.contains("queued-steer"),
        "{caps}"
    );

    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::text(&["Hello ", "from opencode"]));
    turn(&mut app, &thread_id, "say hello");
    let delta = f.notification(&mut app, "item/agentMessage/delta");
    assert_eq!(delta["params"]["thread_id"], thread_id.as_str(), "{delta}");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "Hello from opencode", "{end}");
    let usage = f.notification(&mut app, "turn/usage");
    assert!(
        usage["params"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{usage}"
    );
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["type"] == "agent_message"
        && i["text"] == "Hello from opencode"
        && i["terminal"] == true));
    assert!(bodies(&fp)[0].contains("say hello"));
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    let native = r["thread"]["engine_ref"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            r["thread"]["extra"]["engine_ref"]
                .as_str()
                .map(str::to_owned)
        });

    // A second turn continues the native session: the model sees the first exchange.
    fp.push(Script::text(&["Second answer"]));
    turn(&mut app, &thread_id, "and again");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "Second answer", "{end}");
    let last = bodies(&fp).pop().unwrap();
    assert!(
        last.contains("say hello") && last.contains("Hello from opencode"),
        "{last}"
    );

    // Restart our server (and with it OpenCode's): the native session goes on.
    drop(app);
    let mut app = s.app();
    let mut f = Frames::new();
    fp.push(Script::text(&["Third answer"]));
    turn(&mut app, &thread_id, "once more");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "Third answer", "{end}");
    let last = bodies(&fp).pop().unwrap();
    assert!(
        last.contains("say hello") && last.contains("Second answer") && last.contains("once more"),
        "{last}"
    );
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    assert_eq!(
        r["thread"]["turns"].as_array().map(Vec::len),
        Some(3),
        "{r}"
    );
    if let Some(native) = native {
        assert!(native.starts_with("ses_"), "{native}");
    }

    // The usage reached the ledgers, counted once on the in-wuu side of OpenCode.
    let o = app.call("usage/overview", json!({}));
    assert!(
        o["metrics"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{o}"
    );
    let u = app.call("settings/usage", json!({}));
    let b = u["engine_breakdowns"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["engine_id"] == "opencode")
        .cloned()
        .unwrap_or_else(|| panic!("no opencode breakdown: {u}"));
    assert!(b["in_wuu"]["input_tokens"].as_u64().unwrap_or(0) > 0, "{b}");
    if let Some(outside) = b.get("outside").filter(|o| !o.is_null()) {
        assert_eq!(
            outside["input_tokens"], 0,
            "claimed sessions are not outside: {b}"
        );
    }
}

#[test]
fn opencode_command_permission_is_a_question_the_client_answers() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::tool_call(
        "call_b1",
        "bash",
        &json!({"command": "echo opencode-was-here > marker.txt && cat marker.txt",
                "description": "write a marker"})
        .to_string(),
    ));
    fp.push(Script::text(&["wrote it"]));
    let turn_id = turn(&mut app, &thread_id, "write the marker");
    let q = f.notification(&mut app, "user-question/requested");
    let req = q["params"]["request"].clone();
    let text = req["questions"][0]["question"].as_str().unwrap_or("");
    assert!(text.contains("bash") && text.contains("marker.txt"), "{q}");
    assert_eq!(req["call_id"], "call_b1", "{q}");
    assert_eq!(req["turn_id"], turn_id.as_str());
    // Input while the turn waits is queued: it runs as the next turn.
    let r = app.call(
        "turn/steer",
        json!({"thread_id": thread_id, "expected_turn_id": turn_id,
               "prompt": "and now the steer", "client_id": "steer-1"}),
    );
    assert_eq!(r["delivery"], "queued", "{r}");
    fp.push(Script::text(&["steered answer"]));
    app.call(
        "user-question/respond",
        json!({"request_id": req["request_id"], "answer": {"answers": [
            {"id": req["questions"][0]["id"], "selected": ["Allow"]}]}}),
    );
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "wrote it", "{end}");
    let tool = tool_item(&end);
    assert_eq!(tool["name"], "bash", "{tool}");
    assert!(
        tool["arguments"]
            .as_str()
            .unwrap_or("")
            .contains("marker.txt"),
        "{tool}"
    );
    assert!(
        tool["result"]
            .as_str()
            .unwrap_or("")
            .contains("opencode-was-here"),
        "{tool}"
    );
    assert_eq!(
        std::fs::read_to_string(s.ws.join("marker.txt")).unwrap(),
        "opencode-was-here\n"
    );
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "steered answer", "{end}");
    assert_ne!(end["params"]["turn"]["id"], turn_id.as_str());
    assert!(bodies(&fp).pop().unwrap().contains("and now the steer"));
}

#[test]
fn opencode_asks_its_question_and_the_client_answers() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    let question = json!({"questions": [{"question": "Which color?", "header": "Color",
        "options": [{"label": "red", "description": "warm"},
                    {"label": "blue", "description": "cool"}]}]});
    fp.push(Script::tool_call(
        "call_q1",
        "question",
        &question.to_string(),
    ));
    fp.push(Script::text(&["you chose blue"]));
    let turn_id = turn(&mut app, &thread_id, "ask me");
    let q = f.notification(&mut app, "user-question/requested");
    let req = q["params"]["request"].clone();
    assert_eq!(req["call_id"], "call_q1", "{q}");
    assert_eq!(req["turn_id"], turn_id.as_str());
    assert_eq!(req["questions"][0]["question"], "Which color?");
    assert_eq!(req["questions"][0]["options"][1]["label"], "blue");
    app.call(
        "user-question/respond",
        json!({"request_id": req["request_id"], "answer": {"answers": [
            {"id": req["questions"][0]["id"], "selected": ["blue"]}]}}),
    );
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "you chose blue", "{end}");
    // OpenCode got the answer as its tool's result and sent it to the model.
    let last = bodies(&fp).pop().unwrap();
    assert!(
        last.contains("Which color?") && last.contains("blue"),
        "{last}"
    );
}

#[test]
fn opencode_permission_denied_refuses_the_command() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::tool_call(
        "call_b2",
        "bash",
        &json!({"command": "echo nope > denied.txt", "description": "write"}).to_string(),
    ));
    fp.push(Script::text(&["ok, not running it"]));
    turn(&mut app, &thread_id, "write the file");
    let q = f.notification(&mut app, "user-question/requested");
    let req = q["params"]["request"].clone();
    app.call(
        "user-question/respond",
        json!({"request_id": req["request_id"], "answer": {"answers": [
            {"id": req["questions"][0]["id"], "selected": ["Deny"]}]}}),
    );
    let end = f.turn_end(&mut app, &thread_id);
    let tool = tool_item(&end);
    assert_eq!(tool["status"], "failed", "{tool}");
    assert!(!s.ws.join("denied.txt").exists());
}

#[test]
fn opencode_permission_fails_closed_without_a_client_to_ask() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app_with(json!({"opt_out_notifications": ["user-question"]}));
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::tool_call(
        "call_b3",
        "bash",
        &json!({"command": "echo nope > closed.txt", "description": "write"}).to_string(),
    ));
    fp.push(Script::text(&["not allowed"]));
    turn(&mut app, &thread_id, "write the file");
    let end = f.turn_end(&mut app, &thread_id);
    let tool = tool_item(&end);
    assert_eq!(tool["status"], "failed", "{tool}");
    assert!(!s.ws.join("closed.txt").exists());
    assert!(
        !f.seen
            .iter()
            .any(|v| v["method"] == "user-question/requested"),
        "asked a client that opted out"
    );
}

#[test]
fn opencode_unconfined_runs_commands_without_asking() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "unconfined");
    fp.push(Script::tool_call(
        "call_b4",
        "bash",
        &json!({"command": "echo free > free.txt", "description": "write"}).to_string(),
    ));
    fp.push(Script::text(&["done"]));
    turn(&mut app, &thread_id, "write it");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(tool_item(&end)["status"], "completed", "{end}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("free.txt")).unwrap(),
        "free\n"
    );
    assert!(!f
        .seen
        .iter()
        .any(|v| v["method"] == "user-question/requested"));
}

#[test]
fn opencode_interrupt_stops_the_turn_and_the_conversation_goes_on() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::stall(
        &["thinking about it"],
        Duration::from_secs(60),
    ));
    let turn_id = turn(&mut app, &thread_id, "take your time");
    f.notification(&mut app, "item/agentMessage/delta");
    let asked = Instant::now();
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(asked.elapsed() < Duration::from_secs(20), "not stalled");
    fp.push(Script::text(&["back again"]));
    turn(&mut app, &thread_id, "continue");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "back again", "{end}");
}

/// The pids of `opencode` processes whose environment carries `needle`.
fn opencode_pids(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let is_opencode = cmd
                .split(|b| *b == 0)
                .any(|a| a.ends_with(b"opencode") || a.ends_with(b"opencode.exe"));
            let ours = env.split(|b| *b == 0).any(|v| v == needle.as_bytes());
            (is_opencode && ours).then_some(pid)
        })
        .collect()
}

#[test]
fn a_crashed_opencode_fails_the_turn_and_the_next_turn_starts_a_new_server() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::stall(&["half an answer"], Duration::from_secs(60)));
    turn(&mut app, &thread_id, "start something");
    f.notification(&mut app, "item/agentMessage/delta");
    let needle = format!("XDG_DATA_HOME={}", s.env[3].1);
    let pids = opencode_pids(&needle);
    assert!(!pids.is_empty(), "no opencode process found");
    for pid in pids {
        let _ = std::process::Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status();
    }
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
    let msg = end["params"]["error"].to_string();
    assert!(msg.contains("OpenCode exited"), "{end}");
    // The host is fine, and the next turn gets a new server and the same session.
    app.call("thread/list", json!({}));
    fp.push(Script::text(&["alive again"]));
    turn(&mut app, &thread_id, "try again");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "alive again", "{end}");
    assert!(bodies(&fp).pop().unwrap().contains("start something"));
}

#[test]
fn opencode_exec_runs_one_shot_with_the_engine_flag() {
    let Some(bin) = opencode_bin() else { return };
    let fp = provider();
    let s = Setup::new(&bin, &fp);
    fp.push(Script::text(&["hello from exec"]));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wuu"))
        .arg("exec")
        .arg("--cd")
        .arg(&s.ws)
        .arg("--json")
        .args(["--engine", "opencode", "say hello"])
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .env("WUU_HOME", &s.home)
        .env_remove("RUST_LOG")
        .current_dir(&s.ws)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run wuu exec");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        events.iter().any(|e| e["type"] == "thread_started"),
        "{stdout}"
    );
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result", "{stdout}");
    assert_eq!(result["status"], "completed", "{stdout}");
    assert_eq!(result["final_message"], "hello from exec", "{stdout}");
}

// ---- the scripted fake `opencode serve` (tests/support/fake_opencode.py) ----

/// A setup whose OpenCode is the scripted fake in `mode` (its variable reaches it only
/// as named in `agent.shell_env.keep`).
fn fake(mode: &str) -> (FakeProvider, Setup) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_opencode.py");
    let fp = FakeProvider::start();
    let config = json!({"agent": {"auto_title": false,
        "shell_env": {"keep": ["FAKE_OPENCODE_MODE"]}}});
    let s = Setup::with(&script, &fp, config, &[("FAKE_OPENCODE_MODE", mode)]);
    (fp, s)
}

#[test]
fn an_opencode_conversation_cannot_start_read_only() {
    let (_fp, s) = fake("hang");
    let mut app = s.app();
    let e = app.call_err(
        "thread/start",
        json!({"engine": "opencode", "permission_mode": "read_only"}),
    );
    assert_eq!(e["code"], "invalid_params", "{e}");
    assert!(e.to_string().contains("read-only"), "{e}");
    // Nothing was stored; standard still starts.
    assert_eq!(app.call("thread/list", json!({}))["threads"], json!([]));
    start_thread(&mut app, "standard");
}

#[test]
fn a_crashed_opencode_fails_the_turn_with_its_last_stderr_line() {
    let (_fp, s) = fake("crash");
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "hi");
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
    let msg = end["params"]["error"].to_string();
    assert!(
        msg.contains("OpenCode exited") && msg.contains("simulated crash"),
        "{end}"
    );
    // The host is fine: it answers at once.
    app.call("thread/list", json!({}));
}

#[test]
fn an_interrupt_while_opencode_starts_ends_the_turn_and_the_server() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_opencode.py");
    let fp = FakeProvider::start();
    let pid_dir = tempfile::tempdir().unwrap();
    let pid_file = pid_dir.path().join("pid");
    let config = json!({"agent": {"auto_title": false,
        "shell_env": {"keep": ["FAKE_OPENCODE_MODE", "FAKE_OPENCODE_PID_FILE"]}}});
    let pid_env = pid_file.to_string_lossy().into_owned();
    let s = Setup::with(
        &script,
        &fp,
        config,
        &[
            ("FAKE_OPENCODE_MODE", "hang_start"),
            ("FAKE_OPENCODE_PID_FILE", pid_env.as_str()),
        ],
    );
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    let turn_id = turn(&mut app, &thread_id, "hi");
    // The server is up and stuck before its listening line (30 s before the timeout).
    let until = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        if let Ok(p) = std::fs::read_to_string(&pid_file) {
            if !p.is_empty() {
                break p;
            }
        }
        assert!(Instant::now() < until, "the fake server never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(
        end["params"]["turn"]["duration_ms"]
            .as_u64()
            .unwrap_or(u64::MAX)
            < 20_000,
        "the interrupt ended the turn, not the start timeout: {end}"
    );
    let stop = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z"))
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < stop,
            "the stuck server {pid} outlived the interrupt"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hung_opencode_is_ended_after_an_interrupt() {
    let (_fp, s) = fake("hang");
    let mut app = s.app();
    let mut f = Frames::new();
    let thread_id = start_thread(&mut app, "standard");
    let turn_id = turn(&mut app, &thread_id, "hi");
    // The fake starts at once; give the turn a moment to post its prompt.
    f.notification(&mut app, "turn/started");
    std::thread::sleep(Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = f.turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(asked.elapsed() < Duration::from_secs(25), "not stalled");
    app.call("thread/list", json!({}));
}
