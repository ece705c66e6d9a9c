//! End-to-end tests of Codex as an external engine (issue 13): the real `wuu
//! app-server` drives the real `codex app-server` (npm `@openai/codex`, pinned in
//! `.ci/run`), which talks to the fake Responses provider on loopback through an
//! isolated `CODEX_HOME` whose `config.toml` selects a custom `model_provider`.
//!
//! The Codex binary comes from `WUU_TEST_CODEX_BIN`; without it the real-Codex tests
//! print why and return (CI installs the package and only leaves it unset when the npm
//! registry cannot be reached).

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

/// The real Codex binary, or why it is missing.
fn codex_bin() -> Option<PathBuf> {
    match std::env::var_os("WUU_TEST_CODEX_BIN").map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        Some(p) => {
            eprintln!("skipped: WUU_TEST_CODEX_BIN={} does not exist", p.display());
            None
        }
        None => {
            eprintln!(
                "skipped: WUU_TEST_CODEX_BIN is not set ({})",
                std::env::var("WUU_TEST_CODEX_SKIP")
                    .unwrap_or_else(|_| "install @openai/codex and point it at the binary".into())
            );
            None
        }
    }
}

/// A workspace with a wuu home and an isolated Codex home pointing at `fp`.
struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    codex_home: PathBuf,
    bin: PathBuf,
}

impl Setup {
    fn new(fp: &FakeProvider, bin: PathBuf) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("wuu-home");
        let ws = dir.path().join("ws");
        let codex_home = dir.path().join("codex-home");
        for d in [&home, &ws, &codex_home] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(
            codex_home.join("config.toml"),
            format!(
                "model = \"fake-model\"\nmodel_provider = \"fake\"\n\n\
                 [model_providers.fake]\nname = \"fake\"\nbase_url = \"{}\"\n\
                 wire_api = \"responses\"\nenv_key = \"WUU_FAKE_CODEX_KEY\"\n",
                fp.base_url()
            ),
        )
        .unwrap();
        std::fs::write(
            home.join("config.json"),
            json!({"agent": {"auto_title": false}}).to_string(),
        )
        .unwrap();
        let ws = ws.canonicalize().unwrap();
        Setup {
            _dir: dir,
            home,
            ws,
            codex_home,
            bin,
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "CODEX_HOME".into(),
                self.codex_home.to_string_lossy().into(),
            ),
            ("WUU_FAKE_CODEX_KEY".into(), "dummy".into()),
            ("WUU_CODEX_BINARY".into(), self.bin.to_string_lossy().into()),
            ("HOME".into(), self.home.to_string_lossy().into()),
        ]
    }

    /// Runs `wuu exec [ARGS…] --cd WS --json` in this setup and returns its exit code,
    /// stdout, stderr and the stdout events.
    fn exec_json(&self, args: &[&str]) -> (Option<i32>, String, String, Vec<Value>) {
        let (sub, rest) = match args.split_first() {
            Some((&"resume", rest)) => (Some("resume"), rest),
            _ => (None, args),
        };
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wuu"))
            .arg("exec")
            .args(sub)
            .arg("--cd")
            .arg(&self.ws)
            .arg("--json")
            .args(rest)
            .envs(self.env())
            .env("WUU_HOME", &self.home)
            .env_remove("RUST_LOG")
            .current_dir(&self.ws)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run wuu exec");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let events = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        (out.status.code(), stdout, stderr, events)
    }

    fn app(&self) -> App {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        App::spawn_in_env(&self.home, &self.ws, &env)
    }
}

fn init(app: &mut App) {
    app.call(
        "initialize",
        json!({"protocol_version": "wuu-app-server/v0.1", "client": {"name": "codex-test"}}),
    );
}

fn start_codex_thread(app: &mut App) -> String {
    let r = app.call("thread/start", json!({"engine": "codex"}));
    r["thread"]["id"].as_str().unwrap().to_owned()
}

fn wait_turn_end(app: &mut App, thread_id: &str) -> Value {
    let tid = thread_id.to_owned();
    app.wait_for("turn end", move |v| {
        matches!(
            v["method"].as_str(),
            Some("turn/completed") | Some("turn/error")
        ) && v["params"]["thread_id"] == tid.as_str()
    })
}

/// Text the fake provider saw from the user across all requests.
fn bodies(fp: &FakeProvider) -> Vec<String> {
    fp.requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
        .map(|r| r.body.to_string())
        .collect()
}

#[test]
fn config_codex_models_lists_the_engine_catalogue() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    let s = Setup::new(&fp, bin);
    let mut app = s.app();
    init(&mut app);
    // desktop/src/main/index.ts, ipcMain.handle("wuu:config-codex-models"):
    // appServerRequest(event, "config/codex/models", { provider: provider ?? "" });
    // ConfigCodexModelsResult {providers, provider, model, effort?, models[{slug, …}]}.
    let r = app.call("config/codex/models", json!({"provider": ""}));
    assert_eq!(r["provider"], "codex", "{r}");
    assert!(r["providers"].is_array());
    let models = r["models"].as_array().unwrap().clone();
    let listed = app.call("engine/list", json!({}))["engines"][1]["models"].clone();
    let listed = listed.as_array().cloned().unwrap_or_default();
    assert_eq!(models.len(), listed.len(), "{r}");
    for (m, e) in models.iter().zip(&listed) {
        assert_eq!(m["slug"], e["id"]);
        assert_eq!(m["supported_in_api"], true);
    }
    if !models.is_empty() {
        assert!(models.iter().any(|m| m["slug"] == r["model"]), "{r}");
    }
    // clients/mobile-web/src/lib/desktopBridge.ts loadCodexModels(provider) with
    // provider undefined: `{}`.
    let again = app.call("config/codex/models", json!({}));
    assert_eq!(again["models"], r["models"]);
}

#[test]
fn engine_list_reports_codex_and_refuses_unadapted_engines() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    let s = Setup::new(&fp, bin.clone());
    let mut app = s.app();
    init(&mut app);
    let r = app.call("engine/list", json!({"include_models": false}));
    let engines = r["engines"].as_array().unwrap();
    let ids: Vec<&str> = engines.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "wuu",
            "codex",
            "claude",
            "cursor",
            "devin",
            "grok",
            "hermes",
            "pi",
            "opencode",
            "antigravity"
        ]
    );
    let codex = &engines[1];
    assert_eq!(codex["enabled"], true, "{codex}");
    assert_eq!(codex["binary_ok"], true);
    assert_eq!(codex["binary_path"], bin.to_string_lossy().as_ref());
    assert_eq!(codex["models_status"], "deferred");
    assert_eq!(codex["version"], "1");
    // With discovery: the real `model/list` answers.
    let r = app.call("engine/list", json!({"cwd": s.ws.to_string_lossy()}));
    let codex = &r["engines"][1];
    let status = codex["models_status"].as_str().unwrap();
    assert!(["ready", "empty"].contains(&status), "{codex}");
    // An engine without an adapter is refused before anything is stored.
    let e = app.call_err("thread/start", json!({"engine": "devin"}));
    assert!(e["message"].as_str().unwrap().contains("devin"), "{e}");
    let list = app.call("thread/list", json!({}));
    assert_eq!(
        list["data"].as_array().map(Vec::len).unwrap_or(0),
        0,
        "{list}"
    );
}

#[test]
fn codex_text_turn_streams_and_resumes_after_restart() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::new(&fp, bin);
    let mut app = s.app();
    init(&mut app);
    let thread_id = start_codex_thread(&mut app);
    fp.push(Script::text(&["Hello ", "from codex"]));
    app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "say hello"}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "Hello from codex", "{end}");
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["type"] == "agent_message"
        && i["text"] == "Hello from codex"
        && i["terminal"] == true));
    assert!(bodies(&fp)[0].contains("say hello"));

    // Restart our server: the conversation continues the same native thread.
    drop(app);
    let mut app = s.app();
    init(&mut app);
    fp.push(Script::text(&["Second answer"]));
    app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "and again"}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "Second answer", "{end}");
    let last = bodies(&fp).pop().unwrap();
    // Codex replays its own history of the native thread: the first exchange is there.
    assert!(
        last.contains("say hello") && last.contains("Hello from codex"),
        "{last}"
    );
    assert!(last.contains("and again"));
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    let turns = r["thread"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{r}");
}

#[test]
fn codex_tool_turn_runs_a_command_in_the_workspace() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::new(&fp, bin);
    std::fs::write(s.ws.join("marker.txt"), "codex-was-here\n").unwrap();
    let mut app = s.app();
    init(&mut app);
    let thread_id = start_codex_thread(&mut app);
    fp.push(Script::tool_call(
        "call_1",
        "exec_command",
        &json!({"cmd": "cat marker.txt"}).to_string(),
    ));
    fp.push(Script::text(&["done"]));
    app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "show the marker"}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool = items
        .iter()
        .find(|i| i["type"] == "tool_call")
        .unwrap_or_else(|| {
            let tools: Vec<String> = fp.requests()[0].body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| format!("{}:{}", t["name"], t["parameters"]))
                .collect();
            let _ = tools;
            let last = bodies(&fp).pop().unwrap_or_default();
            let at = last.find("function_call").unwrap_or(0);
            panic!(
                "no tool item: {end}\nlast: {}",
                &last[at.saturating_sub(200)..(at + 1500).min(last.len())]
            )
        });
    assert!(
        tool["result"]
            .as_str()
            .unwrap_or("")
            .contains("codex-was-here"),
        "{tool}"
    );
    // The tool result went back to the model.
    let last = bodies(&fp).pop().unwrap();
    assert!(last.contains("codex-was-here"), "{last}");
}

// ---- the scripted fake `codex app-server` (tests/support/fake_codex.sh) ----

/// A server whose Codex is the scripted fake in `mode`; returns it and the fake's log.
struct Fake {
    app: App,
    log: PathBuf,
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    env: Vec<(String, String)>,
}

impl Fake {
    fn start(mode: &str) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        // The fake's variables reach it only as named in `agent.shell_env.keep`.
        std::fs::write(
            home.join("config.json"),
            json!({"agent": {"auto_title": false,
                "shell_env": {"keep": ["FAKE_CODEX_MODE", "FAKE_CODEX_LOG"]}}})
            .to_string(),
        )
        .unwrap();
        let ws = ws.canonicalize().unwrap();
        let log = dir.path().join("fake-codex.log");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_codex.sh");
        let env = vec![
            (
                "WUU_CODEX_BINARY".to_owned(),
                script.to_string_lossy().into_owned(),
            ),
            ("FAKE_CODEX_MODE".to_owned(), mode.to_owned()),
            (
                "FAKE_CODEX_LOG".to_owned(),
                log.to_string_lossy().into_owned(),
            ),
            ("HOME".to_owned(), home.to_string_lossy().into_owned()),
        ];
        let app = Fake::spawn(&home, &ws, &env);
        let mut f = Fake {
            app,
            log,
            _dir: dir,
            home,
            ws,
            env,
        };
        init(&mut f.app);
        f
    }

    fn spawn(home: &Path, ws: &Path, env: &[(String, String)]) -> App {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        App::spawn_in_env(home, ws, &env)
    }

    fn restart(&mut self) {
        let app = Fake::spawn(&self.home, &self.ws, &self.env);
        self.app = app; // the old server is killed on drop
        init(&mut self.app);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn turn(&mut self, thread_id: &str, prompt: &str) -> String {
        let r = self.app.call(
            "turn/start",
            json!({"thread_id": thread_id, "prompt": prompt}),
        );
        r["turn"]["id"].as_str().unwrap().to_owned()
    }
}

#[test]
fn fake_codex_compact_start_runs_the_native_compaction() {
    let mut f = Fake::start("normal");
    let thread_id = start_codex_thread(&mut f.app);
    f.turn(&thread_id, "hello there");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let r = f
        .app
        .call("thread/compact/start", json!({"thread_id": thread_id}));
    assert_eq!(r["turn"]["kind"], "compact", "{r}");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let log = f.log();
    assert!(
        log.contains(r#""method":"thread/compact/start""#)
            && log.contains(r#""threadId":"th_fake_1""#),
        "{log}"
    );
    // The native compaction is not sent as a prompt.
    assert_eq!(log.matches(r#""method":"turn/start""#).count(), 1, "{log}");
}

#[test]
fn fake_codex_question_is_relayed_and_answered_to_the_native_call() {
    let mut f = Fake::start("question");
    let thread_id = start_codex_thread(&mut f.app);
    let turn_id = f.turn(&thread_id, "ask me");
    let q = f.app.notification("user-question/requested");
    let req = &q["params"]["request"];
    assert_eq!(req["reply_to_tool"], true, "{q}");
    assert_eq!(req["call_id"], "call_q1");
    assert_eq!(req["thread_id"], thread_id.as_str());
    assert_eq!(req["turn_id"], turn_id.as_str());
    assert_eq!(req["mode"], "ask");
    assert_eq!(req["questions"][0]["id"], "color");
    assert_eq!(req["questions"][0]["options"][1]["label"], "blue");
    let request_id = req["request_id"].as_str().unwrap().to_owned();
    f.app.call(
        "user-question/respond",
        json!({"request_id": request_id, "answer": {"answers": [{"id": "color", "selected": ["blue"]}]}}),
    );
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["params"]["content"], "you chose blue", "{end}");
    assert!(
        f.log()
            .contains(r#""result":{"answers":{"color":{"answers":["blue"]}}}"#),
        "{}",
        f.log()
    );
}

#[test]
fn fake_codex_question_is_revoked_when_the_turn_is_interrupted() {
    let mut f = Fake::start("question");
    let thread_id = start_codex_thread(&mut f.app);
    let turn_id = f.turn(&thread_id, "ask me");
    let q = f.app.notification("user-question/requested");
    let request_id = q["params"]["request_id"].as_str().unwrap().to_owned();
    f.app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let rid = request_id.clone();
    let resolved = f.app.wait_for("revocation", move |v| {
        v["method"] == "user-question/resolved" && v["params"]["request_id"] == rid.as_str()
    });
    assert_eq!(resolved["params"]["outcome"], "revoked", "{resolved}");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    // A late answer is refused.
    let e = f.app.call_err(
        "user-question/respond",
        json!({"request_id": request_id, "answer": {"answers": [{"id": "color", "selected": ["red"]}]}}),
    );
    assert!(e["message"].as_str().unwrap().contains("revoked"), "{e}");
}

#[test]
fn fake_codex_approval_is_declined_and_reported() {
    let mut f = Fake::start("approval");
    let thread_id = start_codex_thread(&mut f.app);
    f.turn(&thread_id, "do something risky");
    let ev = f.app.wait_for("approval event", |v| {
        v["method"] == "turn/event" && v.to_string().contains("approval_declined")
    });
    assert!(ev.to_string().contains("rm -rf /tmp/x"), "{ev}");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["params"]["content"], "declined", "{end}");
    assert!(
        f.log().contains(r#""result":{"decision":"decline"}"#),
        "{}",
        f.log()
    );
}

#[test]
fn fake_codex_crash_fails_the_turn_and_the_next_turn_starts_a_new_host() {
    let mut f = Fake::start("crash");
    let thread_id = start_codex_thread(&mut f.app);
    f.turn(&thread_id, "first");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
    let msg = end["params"]["error"].as_str().unwrap();
    assert!(msg.contains("stopped during the turn"), "{msg}");
    assert!(
        msg.contains("simulated crash"),
        "the stderr tail is named: {msg}"
    );
    // The partial text streamed before the crash is kept.
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    assert!(items
        .iter()
        .any(|i| i["type"] == "agent_message" && i["text"] == "partial"));
    f.turn(&thread_id, "second");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["params"]["content"], "hello", "{end}");
    // The second host resumed the stored native thread.
    assert!(
        f.log().contains(r#""method":"thread/resume""#),
        "{}",
        f.log()
    );
}

fn steer(f: &mut Fake, thread_id: &str, turn_id: &str, id: &str) -> Value {
    f.app
        .wait_for("streaming", |v| v["method"] == "item/agentMessage/delta");
    f.app.call(
        "turn/steer",
        json!({"thread_id": thread_id, "expected_turn_id": turn_id, "prompt": "also this", "client_id": id}),
    )
}

fn pending_and_held(f: &mut Fake, thread_id: &str) -> (Value, Value) {
    let r = f
        .app
        .call("thread/resume", json!({"session_id": thread_id}));
    (
        r["pending_user_messages"].clone(),
        r["held_user_messages"].clone(),
    )
}

#[test]
fn fake_codex_steer_is_consumed_only_after_the_native_ack() {
    let mut f = Fake::start("steer");
    let thread_id = start_codex_thread(&mut f.app);
    let turn_id = f.turn(&thread_id, "work");
    let r = steer(&mut f, &thread_id, &turn_id, "steer-1");
    assert_eq!(r["delivery"], "active_turn", "{r}");
    let end = wait_turn_end(&mut f.app, &thread_id);
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let user = items
        .iter()
        .find(|i| i["type"] == "user_message" && i["text"] == "also this")
        .unwrap_or_else(|| panic!("steer not in history: {end}"));
    assert_eq!(user["source_id"], "steer-1");
    assert!(f.log().contains(r#""expectedTurnId":"t1""#), "{}", f.log());
    let (pending, held) = pending_and_held(&mut f, &thread_id);
    assert!(!pending.to_string().contains("steer-1") && !held.to_string().contains("steer-1"));
}

#[test]
fn fake_codex_refused_steer_returns_to_pending() {
    let mut f = Fake::start("refuse");
    let thread_id = start_codex_thread(&mut f.app);
    let turn_id = f.turn(&thread_id, "work");
    steer(&mut f, &thread_id, &turn_id, "steer-r");
    let end = wait_turn_end(&mut f.app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert!(!end.to_string().contains("also this"), "{end}");
    let (pending, held) = pending_and_held(&mut f, &thread_id);
    let all = format!("{pending}{held}");
    assert!(
        all.contains("steer-r"),
        "the refused steer is still waiting: {all}"
    );
    assert!(!all.contains("delivery_unconfirmed"), "{all}");
}

#[test]
fn fake_codex_lost_steer_ack_freezes_the_entry_across_restarts() {
    let mut f = Fake::start("lost");
    let thread_id = start_codex_thread(&mut f.app);
    let turn_id = f.turn(&thread_id, "work");
    steer(&mut f, &thread_id, &turn_id, "steer-l");
    wait_turn_end(&mut f.app, &thread_id);
    let (_, held) = pending_and_held(&mut f, &thread_id);
    let entry = held
        .as_array()
        .and_then(|a| a.iter().find(|m| m["id"] == "steer-l").cloned())
        .unwrap_or_else(|| panic!("not held: {held}"));
    assert_eq!(entry["delivery_unconfirmed"], true, "{entry}");
    f.restart();
    let (_, held) = pending_and_held(&mut f, &thread_id);
    assert!(held.to_string().contains("delivery_unconfirmed"), "{held}");
    for (method, params) in [
        (
            "turn/unsteer",
            json!({"thread_id": thread_id, "steer_id": "steer-l"}),
        ),
        (
            "turn/steer",
            json!({"thread_id": thread_id, "client_id": "steer-l"}),
        ),
        (
            "turn/queue",
            json!({"thread_id": thread_id, "client_id": "steer-l", "prompt": "again"}),
        ),
    ] {
        let e = f.app.call_err(method, params);
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("delivery_unconfirmed"),
            "{method}: {e}"
        );
    }
}

#[test]
fn engine_update_keeps_a_disabled_default_and_thread_start_refuses_it() {
    let mut f = Fake::start("normal");
    let r = f.app.call(
        "engine/update",
        json!({"default_engine": "codex", "codex": {"enabled": false}}),
    );
    assert_eq!(r["settings"]["default_engine"], "codex", "{r}");
    assert_eq!(r["settings"]["codex"]["enabled"], false);
    let codex = &r["engines"][1];
    assert_eq!(codex["enabled"], false, "{codex}");
    assert_eq!(codex["binary_ok"], true);
    assert!(r["engines"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .all(|e| e["models_status"] == "deferred"));
    let e = f.app.call_err("thread/start", json!({}));
    assert!(e["message"].as_str().unwrap().contains("disabled"), "{e}");
    assert_eq!(
        f.app.call("thread/list", json!({}))["data"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0),
        0
    );
    // Re-enabled: the default engine is used; the user config keeps the choice.
    f.app
        .call("engine/update", json!({"codex": {"enabled": true}}));
    let t = f.app.call("thread/start", json!({}));
    assert_eq!(t["thread"]["engine_id"], "codex", "{t}");
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(f.home.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["engines"]["default_engine"], "codex", "{cfg}");
    // Discovery through `model/list`, cached between calls.
    let r = f.app.call("engine/list", json!({}));
    let codex = &r["engines"][1];
    assert_eq!(codex["models_status"], "ready", "{codex}");
    assert_eq!(codex["models"][0]["id"], "fake-1");
    assert_eq!(codex["models"][0]["fast_mode"], true);
    assert_eq!(
        codex["models"][0]["supported_efforts"],
        json!(["low", "medium"])
    );
    let before = f.log().matches("model/list").count();
    f.app.call("engine/list", json!({}));
    assert_eq!(
        f.log().matches("model/list").count(),
        before,
        "served from the cache"
    );
    f.app.call("engine/list", json!({"refresh_models": true}));
    assert!(
        f.log().matches("model/list").count() > before,
        "refresh bypasses the cache"
    );
    // Unknown ids and command lines are refused.
    let e = f
        .app
        .call_err("engine/update", json!({"default_engine": "nope"}));
    assert!(
        e["message"].as_str().unwrap().contains("unknown engine"),
        "{e}"
    );
    let e = f.app.call_err(
        "engine/update",
        json!({"codex": {"binary_path": "codex --yolo"}}),
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("not a command line"),
        "{e}"
    );
}

#[allow(dead_code)]
fn _unused(_: Duration) {}

#[test]
fn codex_interrupt_stops_the_native_turn() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::new(&fp, bin);
    let mut app = s.app();
    init(&mut app);
    let thread_id = start_codex_thread(&mut app);
    fp.push(Script::stall(
        &["thinking about it"],
        Duration::from_secs(60),
    ));
    let r = app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "take your time"}),
    );
    let turn_id = r["turn"]["id"].as_str().unwrap().to_owned();
    app.wait_for("first delta", |v| v["method"] == "item/agentMessage/delta");
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    // The conversation goes on: the next turn runs on the same native thread.
    fp.push(Script::text(&["back again"]));
    app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "continue"}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "back again", "{end}");
}

/// The steer lands mid-turn in the real Codex: while a native command runs (`sleep`), our
/// `turn/steer` goes out as Codex `turn/steer` bound to the native turn; Codex acks it,
/// records the user message into the same turn, and sends it with the command's output in
/// its next model request. On our side the steer is consumed and committed as a user item
/// of the active turn (nothing left pending or held).
#[test]
fn codex_steer_mid_turn_is_delivered_natively() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::new(&fp, bin);
    let mut app = s.app();
    init(&mut app);
    let thread_id = start_codex_thread(&mut app);
    fp.push(Script::tool_call(
        "call_sleep",
        "exec_command",
        &json!({"cmd": "sleep 4 && echo slept-well", "yield_time_ms": 20000}).to_string(),
    ));
    fp.push(Script::text(&["steered answer"]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "run the slow command"}),
    );
    let turn_id = r["turn"]["id"].as_str().unwrap().to_owned();
    // The native command is running: the turn is active inside Codex.
    app.wait_for("the command starts", |v| {
        v["method"].as_str().unwrap_or("").starts_with("item/")
            && v.to_string().contains("slept-well")
    });
    assert!(fp.wait_requests(1, Duration::from_secs(5)), "first request");
    let r = app.call(
        "turn/steer",
        json!({"thread_id": thread_id, "expected_turn_id": turn_id,
               "prompt": "also mention pineapples", "client_id": "steer-real"}),
    );
    assert_eq!(r["delivery"], "active_turn", "{r}");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "steered answer", "{end}");
    assert_eq!(end["params"]["turn"]["id"], turn_id.as_str(), "one turn");
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool_at = items
        .iter()
        .position(|i| i["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool item: {end}"));
    let steer_at = items
        .iter()
        .position(|i| i["type"] == "user_message" && i["text"] == "also mention pineapples")
        .unwrap_or_else(|| panic!("steer not committed into the turn: {end}"));
    assert_eq!(items[steer_at]["source_id"], "steer-real", "{end}");
    assert!(
        tool_at < steer_at,
        "the steer follows the running command: {end}"
    );
    // Codex sent the steer natively: in the request after the command, not the first one.
    let bodies = bodies(&fp);
    assert_eq!(bodies.len(), 2, "two model requests in the turn");
    assert!(!bodies[0].contains("pineapples"));
    assert!(
        bodies[1].contains("pineapples") && bodies[1].contains("slept-well"),
        "{}",
        bodies[1]
    );
    // Consumed: nothing pending or held; the stored history has it once.
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    let waiting = format!("{}{}", r["pending_user_messages"], r["held_user_messages"]);
    assert!(!waiting.contains("steer-real"), "{waiting}");
    assert_eq!(
        r.to_string().matches("also mention pineapples").count(),
        1,
        "{r}"
    );
}

/// `wuu exec resume ID PROMPT` of a Codex conversation made through the app-server: exec
/// resumes the stored native thread (Codex replays its history to the provider) and the
/// run ends with a completed `result`.
#[test]
fn codex_exec_resume_continues_the_native_thread() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::new(&fp, bin);
    let mut app = s.app();
    init(&mut app);
    let thread_id = start_codex_thread(&mut app);
    fp.push(Script::text(&["the word is kiwi"]));
    app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "remember the word kiwi"}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    drop(app);

    fp.push(Script::text(&["kiwi"]));
    let (code, stdout, stderr, events) = s.exec_json(&["resume", &thread_id, "what was the word?"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "thread_resumed" && e["thread_id"] == thread_id.as_str()),
        "{stdout}"
    );
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result", "{stdout}");
    assert_eq!(result["status"], "completed", "{stdout}");
    assert_eq!(result["thread_id"], thread_id.as_str(), "{stdout}");
    assert_eq!(result["final_message"], "kiwi", "{stdout}");
    // The native thread was resumed: Codex sent the earlier exchange with the new prompt.
    let last = bodies(&fp).pop().unwrap();
    assert!(
        last.contains("remember the word kiwi")
            && last.contains("the word is kiwi")
            && last.contains("what was the word?"),
        "{last}"
    );
    // One conversation, two turns.
    let mut app = s.app();
    init(&mut app);
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    assert_eq!(
        r["thread"]["turns"].as_array().map(Vec::len),
        Some(2),
        "{r}"
    );
}

/// `wuu exec` of a new conversation whose configured default engine is Codex needs no
/// wuu provider (was: refused with "no providers configured", exit 2).
#[test]
fn codex_exec_new_conversation_on_the_default_engine_needs_no_wuu_provider() {
    let Some(bin) = codex_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::new(&fp, bin);
    std::fs::write(
        s.home.join("config.json"),
        json!({"agent": {"auto_title": false}, "engines": {"default_engine": "codex"}}).to_string(),
    )
    .unwrap();
    fp.push(Script::text(&["hello from codex"]));
    let (code, stdout, stderr, events) = s.exec_json(&["say hello"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let started = events
        .iter()
        .find(|e| e["type"] == "thread_started")
        .unwrap_or_else(|| panic!("{stdout}"));
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result", "{stdout}");
    assert_eq!(result["status"], "completed", "{stdout}");
    assert_eq!(result["final_message"], "hello from codex", "{stdout}");
    // The conversation is a Codex one.
    let thread_id = started["thread_id"].as_str().unwrap_or_default().to_owned();
    let mut app = s.app();
    init(&mut app);
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    assert_eq!(r["thread"]["engine_id"], "codex", "{r}");
}

// ---- the Codex child's lifetime and environment ----

impl Fake {
    /// Live processes whose environment names this fake's log (the launcher, the fake
    /// and what it started; not the running server): pid and command line.
    fn processes(&self) -> Vec<(i32, String)> {
        let needle = format!("FAKE_CODEX_LOG={}", self.log.display());
        let server = self.app.child.id() as i32;
        let mut out = vec![];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if pid == server {
                continue;
            }
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if !env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
                continue;
            }
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, r)| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(false);
            if !zombie {
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                out.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
            }
        }
        out
    }

    /// Waits until the stubborn fake and its `sleep` run.
    fn wait_running(&self) -> Vec<(i32, String)> {
        self.wait_running_or(String::new)
    }

    /// [`Fake::wait_running`], with `why()` in the failure message.
    fn wait_running_or(&self, why: impl Fn() -> String) -> Vec<(i32, String)> {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let p = self.processes();
            if p.iter().any(|(_, c)| c.starts_with("sleep")) && p.len() >= 2 {
                return p;
            }
            assert!(
                Instant::now() < end,
                "the fake did not start: {p:?} {}",
                why()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_gone(&self, limit: Duration) -> Vec<(i32, String)> {
        let end = Instant::now() + limit;
        loop {
            let p = self.processes();
            if p.is_empty() || Instant::now() > end {
                return p;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts a Codex turn and waits for its end (the host then keeps running).
    fn one_turn(&mut self) {
        let thread_id = start_codex_thread(&mut self.app);
        self.turn(&thread_id, "hi");
        wait_turn_end(&mut self.app, &thread_id);
    }
}

fn kill(sig: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status();
}

#[test]
fn a_stubborn_codex_host_dies_with_a_killed_app_server() {
    let mut f = Fake::start("stubborn");
    f.one_turn();
    f.wait_running();
    kill("-9", f.app.child.id());
    let _ = f.app.child.wait();
    let left = f.wait_gone(Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "the Codex host outlived app-server: {left:?}"
    );
}

#[test]
fn a_stubborn_codex_host_dies_with_a_killed_wuu_exec() {
    let f = Fake::start("stubborn");
    std::fs::write(
        f.home.join("config.json"),
        json!({"agent": {"auto_title": false,
            "shell_env": {"keep": ["FAKE_CODEX_MODE", "FAKE_CODEX_LOG"]}},
            "engines": {"default_engine": "codex"}})
        .to_string(),
    )
    .unwrap();
    let mut exec = std::process::Command::new(env!("CARGO_BIN_EXE_wuu"))
        .args(["exec", "--json", "--cd"])
        .arg(&f.ws)
        .arg("HOLD: killed mid-turn")
        .envs(f.env.iter().map(|(k, v)| (k, v)))
        .env("WUU_HOME", &f.home)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(f.home.join("exec.stdout")).unwrap())
        .stderr(std::fs::File::create(f.home.join("exec.stderr")).unwrap())
        .spawn()
        .unwrap();
    f.wait_running_or(|| {
        let out = std::fs::read_to_string(f.home.join("exec.stdout")).unwrap_or_default();
        let err = std::fs::read_to_string(f.home.join("exec.stderr")).unwrap_or_default();
        let log = std::fs::read_to_string(&f.log).unwrap_or_default();
        format!("\nexec stdout:\n{out}\nexec stderr:\n{err}\nfake log:\n{log}")
    });
    exec.kill().unwrap();
    let _ = exec.wait();
    let left = f.wait_gone(Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "the Codex host outlived wuu exec: {left:?}"
    );
}

#[test]
fn a_restart_sweeps_a_codex_host_a_dead_server_left() {
    let mut f = Fake::start("stubborn");
    f.one_turn();
    let running = f.wait_running();
    let launcher = running
        .iter()
        .find(|(_, c)| c.contains("__sandbox"))
        .unwrap_or_else(|| panic!("no launcher: {running:?}"))
        .0;
    // The launcher and the server die together: nothing is left to end the host.
    kill("-STOP", f.app.child.id());
    kill("-9", launcher as u32);
    kill("-9", f.app.child.id());
    let _ = f.app.child.wait();
    std::thread::sleep(Duration::from_millis(300));
    let orphans = f.processes();
    assert!(
        orphans.iter().any(|(_, c)| c.starts_with("sleep")),
        "nothing outlived both (the case the sweep is for): {orphans:?}"
    );
    // A new server on the same store kills them at startup.
    f.restart();
    let left = f.wait_gone(Duration::from_secs(10));
    assert!(left.is_empty(), "the startup sweep left: {left:?}");
}

#[test]
fn the_codex_child_gets_a_built_environment() {
    let dir = tempfile::tempdir().unwrap();
    let codex_home = dir.path().join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        "[model_providers.fake]\nname = \"fake\"\nenv_key = \"FAKE_PROVIDER_KEY\"\n",
    )
    .unwrap();
    let secrets = [
        ("OPENAI_API_KEY", "sk-wuu-provider-key-0001"),
        ("ANTHROPIC_API_KEY", "sk-other-key-0002"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-0003"),
        ("GITHUB_TOKEN", "ghp-token-0004"),
        ("SSH_AUTH_SOCK", "/tmp/agent-socket-0005"),
        ("SOME_UNRELATED_VAR", "unrelated-0006"),
    ];
    let mut f = {
        let f = Fake::start("normal");
        let mut env = f.env.clone();
        for (k, v) in secrets {
            env.push((k.into(), v.into()));
        }
        env.push(("CODEX_HOME".into(), codex_home.to_string_lossy().into()));
        env.push(("FAKE_PROVIDER_KEY".into(), "codex-own-key-0007".into()));
        env.push(("LC_ALL".into(), "C.UTF-8".into()));
        Fake { env, ..f }
    };
    f.restart();
    f.one_turn();
    let dump = std::fs::read_to_string(format!("{}.env", f.log.display())).unwrap();
    for (k, v) in secrets {
        assert!(!dump.contains(v), "{k} reached the Codex child:\n{dump}");
    }
    for want in [
        format!("CODEX_HOME={}", codex_home.display()),
        "FAKE_PROVIDER_KEY=codex-own-key-0007".into(),
        "LC_ALL=C.UTF-8".into(),
        format!("HOME={}", f.home.display()),
        format!("FAKE_CODEX_LOG={}", f.log.display()),
        "WUU_COMMAND_TOKEN=".into(),
        "PATH=".into(),
    ] {
        assert!(
            dump.lines().any(|l| l.starts_with(&want)),
            "{want} missing:\n{dump}"
        );
    }
}

#[test]
fn engine_list_says_why_an_engine_is_off_and_engine_update_checks_the_path() {
    let mut f = Fake::start("normal");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_codex.sh");
    let find = |r: &Value, id: &str| -> Value {
        r["engines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {id} in {r}"))
    };
    // A detected engine is enabled (every catalogue engine has an adapter); one the
    // user disabled says why.
    let r = f.app.call(
        "engine/update",
        json!({"opencode": {"binary_path": script.to_string_lossy()},
               "codex": {"enabled": false}}),
    );
    let opencode = find(&r, "opencode");
    assert_eq!(
        (
            &opencode["binary_ok"],
            &opencode["enabled"],
            &opencode["error"]
        ),
        (&json!(true), &json!(true), &Value::Null),
        "{opencode}"
    );
    let codex = find(&f.app.call("engine/list", json!({})), "codex");
    assert_eq!(codex["enabled"], false, "{codex}");
    assert!(
        codex["error"].as_str().unwrap_or("").contains("disabled"),
        "{codex}"
    );
    // A binary_path must be an absolute path to an executable file.
    let plain = f.ws.join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    for (bad, says) in [
        (json!("bin/codex"), "absolute path"),
        (json!(plain.to_string_lossy()), "not an executable file"),
        (json!(f.ws.to_string_lossy()), "not an executable file"),
        (json!("/nonexistent/codex"), "not an executable file"),
    ] {
        let e = f
            .app
            .call_err("engine/update", json!({"codex": {"binary_path": bad}}));
        assert!(e["message"].as_str().unwrap().contains(says), "{bad}: {e}");
    }
    // Nothing was written for the refused paths; the config keeps the good one.
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(f.home.join("config.json")).unwrap())
            .unwrap();
    assert!(
        cfg["engines"]["codex"].get("binary_path").is_none(),
        "{cfg}"
    );
    assert_eq!(
        cfg["engines"]["opencode"]["binary_path"],
        script.to_string_lossy().as_ref()
    );
}
