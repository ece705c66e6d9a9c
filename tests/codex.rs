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
use std::time::Duration;
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

#[allow(dead_code)]
fn _unused(_: &Path, _: Duration) {}
