//! End-to-end tests of the ACP client (`engines.md` §1.6): the real `wuu app-server`
//! drives the real `codex-acp` agent (npm `@zed-industries/codex-acp`, pinned in
//! `.ci/run`) as the `pi` catalogue engine (which appends no launch arguments), talking
//! to the fake Responses provider on loopback through an isolated `CODEX_HOME`; plus a
//! scripted agent (tests/support/fake_acp.py) for what the real one cannot be made to
//! do: a refused permission, a crash mid-update, file requests outside the workspace,
//! every client terminal method. The real `claude-code-acp` (npm
//! `@zed-industries/claude-code-acp`) runs a turn and its Bash tool in our terminal
//! against the fake Messages provider, and every message the client sends to the
//! scripted agent is validated against the ACP reference schema (npm
//! `@agentclientprotocol/sdk`, `schema/v1/schema.json`).
//!
//! The agents and the schema come from `WUU_TEST_CODEX_ACP_BIN`,
//! `WUU_TEST_CLAUDE_CODE_ACP_BIN` and `WUU_TEST_ACP_SCHEMA`; without one, the tests that
//! need it print why and return.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

fn acp_bin() -> Option<PathBuf> {
    match std::env::var_os("WUU_TEST_CODEX_ACP_BIN").map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        Some(p) => {
            eprintln!(
                "skipped: WUU_TEST_CODEX_ACP_BIN={} does not exist",
                p.display()
            );
            None
        }
        None => {
            eprintln!(
                "skipped: WUU_TEST_CODEX_ACP_BIN is not set (install @zed-industries/codex-acp)"
            );
            None
        }
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    env: Vec<(String, String)>,
}

impl Setup {
    /// A wuu home and workspace whose `pi` engine is `bin`, with `env` for the host;
    /// `keep` names the variables the agent child may see besides its base.
    fn new(bin: &Path, env: Vec<(String, String)>, keep: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("wuu-home");
        let ws = dir.path().join("ws");
        for d in [&home, &ws] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(
            home.join("config.json"),
            json!({"agent": {"auto_title": false, "shell_env": {"keep": keep}}}).to_string(),
        )
        .unwrap();
        let mut env = env;
        env.push(("WUU_PI_BINARY".into(), bin.to_string_lossy().into()));
        env.push(("HOME".into(), home.to_string_lossy().into()));
        let ws = ws.canonicalize().unwrap();
        Setup {
            _dir: dir,
            home,
            ws,
            env,
        }
    }

    /// The real codex-acp against `fp`.
    fn codex_acp(fp: &FakeProvider, bin: &Path) -> Setup {
        let codex_home = tempfile::tempdir().unwrap().keep();
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
        Setup::new(
            bin,
            vec![
                ("CODEX_HOME".into(), codex_home.to_string_lossy().into()),
                ("WUU_FAKE_CODEX_KEY".into(), "dummy".into()),
            ],
            &["CODEX_HOME", "WUU_FAKE_CODEX_KEY"],
        )
    }

    /// The scripted agent in `mode`; returns the setup and the agent's log file.
    fn scripted(mode: &str) -> (Setup, PathBuf) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_acp.py");
        let log = std::env::temp_dir().join(format!("fake-acp-{}.log", uuid_like()));
        let s = Setup::new(
            &script,
            vec![
                ("FAKE_ACP_MODE".into(), mode.into()),
                ("FAKE_ACP_LOG".into(), log.to_string_lossy().into()),
            ],
            &["FAKE_ACP_MODE", "FAKE_ACP_LOG"],
        );
        (s, log)
    }

    fn app(&self) -> App {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut app = App::spawn_in_env(&self.home, &self.ws, &env);
        app.call(
            "initialize",
            json!({"protocol_version": "wuu-app-server/v0.1", "client": {"name": "acp-test"}}),
        );
        app
    }
}

fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn start_thread(app: &mut App, mode: &str) -> String {
    let r = app.call(
        "thread/start",
        json!({"engine": "pi", "permission_mode": mode}),
    );
    r["thread"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned()
}

fn turn(app: &mut App, thread_id: &str, prompt: &str) -> String {
    let r = app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": prompt}),
    );
    r["turn"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned()
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

fn bodies(fp: &FakeProvider) -> Vec<String> {
    fp.requests()
        .iter()
        .filter(|r| r.path.ends_with("/responses"))
        .map(|r| r.body.to_string())
        .collect()
}

#[test]
fn acp_conversation_streams_completes_and_continues_after_restart() {
    let Some(bin) = acp_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::codex_acp(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::text(&["Hello ", "from acp"]));
    turn(&mut app, &thread_id, "say hello");
    app.wait_for("a delta", |v| v["method"] == "item/agentMessage/delta");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    // codex-acp streams its own notice about the unknown fake model first.
    let content = end["params"]["content"].as_str().unwrap_or("");
    assert!(content.ends_with("Hello from acp"), "{end}");
    assert!(bodies(&fp)[0].contains("say hello"));

    // A restarted host continues the native session (session/load): the agent's own
    // history of the first exchange goes to the model with the new prompt.
    drop(app);
    let mut app = s.app();
    fp.push(Script::text(&["Second answer"]));
    turn(&mut app, &thread_id, "and again");
    let end = wait_turn_end(&mut app, &thread_id);
    let content = end["params"]["content"].as_str().unwrap_or("");
    assert!(content.ends_with("Second answer"), "{end}");
    let last = bodies(&fp).pop().unwrap();
    assert!(
        last.contains("say hello") && last.contains("Hello from acp") && last.contains("and again"),
        "{last}"
    );
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    assert_eq!(r["thread"]["turns"].as_array().unwrap().len(), 2, "{r}");
}

#[test]
fn acp_interrupt_stops_the_prompt_and_the_conversation_goes_on() {
    let Some(bin) = acp_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::codex_acp(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    // codex-acp sends its next model request only once the cancelled stream has
    // ended: the stall is short, and the interrupt must still end the turn before it.
    fp.push(Script::stall(
        &["thinking about it"],
        Duration::from_secs(4),
    ));
    let turn_id = turn(&mut app, &thread_id, "take your time");
    app.wait_for("first delta", |v| v["method"] == "item/agentMessage/delta");
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(
        end["params"]["turn"]["duration_ms"]
            .as_u64()
            .unwrap_or(u64::MAX)
            < 4000,
        "the interrupt ended the turn before the stalled stream did: {end}"
    );
    fp.push(Script::text(&["back again"]));
    turn(&mut app, &thread_id, "continue");
    let end = wait_turn_end(&mut app, &thread_id);
    let content = end["params"]["content"].as_str().unwrap_or("");
    assert!(content.ends_with("back again"), "{end}");
}

#[test]
fn acp_permission_request_is_answered_by_a_client() {
    let Some(bin) = acp_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::codex_acp(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::tool_call(
        "call_1",
        "exec_command",
        &json!({"cmd": "touch escalated.txt", "sandbox_permissions": "require_escalated",
                "justification": "needs to write"})
        .to_string(),
    ));
    fp.push(Script::text(&["done"]));
    turn(&mut app, &thread_id, "touch it");
    let q = app.notification("user-question/requested");
    let req = &q["params"]["request"];
    let allow = req["questions"][0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["description"] == "allow_once")
        .unwrap_or_else(|| panic!("{q}"))["label"]
        .clone();
    app.call(
        "user-question/respond",
        json!({"request_id": req["request_id"], "answer": {"answers": [{"id": "permission", "selected": [allow]}]}}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert!(s.ws.join("escalated.txt").exists(), "{end}");
}

#[test]
fn scripted_acp_permission_without_a_client_answer_is_refused() {
    let (s, log) = Setup::scripted("permission");
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    let turn_id = turn(&mut app, &thread_id, "do it");
    let q = app.notification("user-question/requested");
    assert!(q.to_string().contains("rm -rf build"), "{q}");
    // allow_always is never offered.
    assert!(!q.to_string().contains("Always"), "{q}");
    app.call(
        "user-question/respond",
        json!({"request_id": q["params"]["request"]["request_id"], "answer": {"answers": [{"id": "permission", "selected": ["Deny"]}]}}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    let content = end["params"]["content"].as_str().unwrap_or("");
    assert!(content.contains(r#""optionId": "no""#), "{end}");
    let _ = turn_id;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""jsonrpc":"2.0""#), "{text}");
}

#[test]
fn scripted_acp_crash_fails_the_turn_with_the_last_stderr_line() {
    let (s, _log) = Setup::scripted("crash");
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "go");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
    assert!(end.to_string().contains("out of cheese"), "{end}");
    // The error names the agent, not the Codex child whose JSON-RPC peer it shares.
    assert!(!end.to_string().contains("codex app-server"), "{end}");
    // The host still serves: the next turn starts a new agent (which crashes again).
    turn(&mut app, &thread_id, "again");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
}

#[test]
fn scripted_acp_interrupt_while_the_agent_starts_ends_the_turn_and_the_child() {
    let (s, log) = Setup::scripted("hang_init");
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    let turn_id = turn(&mut app, &thread_id, "go");
    // The agent is up and stuck in its handshake (30 s before it would time out).
    let end = std::time::Instant::now() + Duration::from_secs(20);
    let pid = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(pid) = text.lines().find_map(|l| l.strip_prefix("HANGING ")) {
            break pid.trim().to_owned();
        }
        assert!(
            std::time::Instant::now() < end,
            "the agent never started: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(
        end["params"]["turn"]["duration_ms"]
            .as_u64()
            .unwrap_or(u64::MAX)
            < 20_000,
        "the interrupt ended the turn, not the handshake timeout: {end}"
    );
    let stop = std::time::Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/cmdline")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z"))
            .unwrap_or(false)
    {
        assert!(
            std::time::Instant::now() < stop,
            "the stuck agent {pid} outlived the interrupt"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn scripted_acp_file_requests_outside_the_workspace_are_refused() {
    let (s, _log) = Setup::scripted("fs_outside");
    std::fs::write(s.ws.join("inside.txt"), "in the workspace").unwrap();
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "read");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(
        end["params"]["content"], "outside: refused inside: in the workspace",
        "{end}"
    );
}

#[test]
fn engine_auth_lists_and_runs_the_agents_methods() {
    let (s, log) = Setup::scripted("auth");
    let mut app = s.app();
    let r = app.call("engine/auth/methods", json!({"engine_id": "pi"}));
    assert_eq!(r["authenticated"], false, "{r}");
    let ids: Vec<&str> = r["methods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    // Terminal logins are left to the CLI.
    assert_eq!(ids, ["fake-login"], "{r}");
    let e = app.call_err(
        "engine/authenticate",
        json!({"engine_id": "pi", "method_id": "term"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("terminal login"),
        "{e}"
    );
    let r = app.call(
        "engine/authenticate",
        json!({"engine_id": "pi", "method_id": "fake-login"}),
    );
    assert_eq!(r["authenticated"], true, "{r}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""methodId":"fake-login""#), "{text}");
    let e = app.call_err("engine/auth/methods", json!({"engine_id": "codex"}));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("does not support ACP authentication"),
        "{e}"
    );
    let r = app.call("engine/auth/cancel", json!({"engine_id": "pi"}));
    assert_eq!(r["ok"], true, "{r}");
}

#[test]
fn scripted_acp_child_gets_a_built_environment() {
    let (mut s, log) = Setup::scripted("");
    s.env.push(("OPENAI_API_KEY".into(), "sk-host-only".into()));
    s.env.push(("SOME_SECRET_TOKEN".into(), "host-only".into()));
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "hi");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "hello", "{end}");
    let text = std::fs::read_to_string(&log).unwrap();
    let env_line = text.lines().find(|l| l.starts_with("ENV ")).unwrap();
    let keys: Vec<String> = serde_json::from_str(&env_line[4..]).unwrap();
    for absent in ["OPENAI_API_KEY", "SOME_SECRET_TOKEN", "WUU_PI_BINARY"] {
        assert!(!keys.iter().any(|k| k == absent), "{absent} in {keys:?}");
    }
    for present in ["PATH", "HOME", "FAKE_ACP_MODE"] {
        assert!(
            keys.iter().any(|k| k == present),
            "{present} not in {keys:?}"
        );
    }
}

/// The `key=json` lines a scripted turn reported.
fn report(end: &Value) -> std::collections::HashMap<String, Value> {
    end["params"]["content"]
        .as_str()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), serde_json::from_str(v).unwrap_or(Value::Null)))
        .collect()
}

#[test]
fn scripted_acp_terminals_run_in_the_sandbox_and_show_as_commands() {
    let (s, _log) = Setup::scripted("terminal");
    std::fs::create_dir(s.ws.join("sub")).unwrap();
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "run things");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let r = report(&end);
    assert_eq!(r["wait"], json!({"exitCode": 3, "signal": null}), "{end}");
    assert_eq!(
        r["output"],
        json!({"output": "out\nerr\n", "truncated": false,
               "exitStatus": {"exitCode": 3, "signal": null}}),
        "{end}"
    );
    assert_eq!(r["release"], json!({}), "{end}");
    assert_eq!(
        r["after_release"], true,
        "a released terminal is gone: {end}"
    );
    // 16 bytes, limit 5: the newest 5 would start inside an "é"; 4 are kept.
    assert_eq!(r["limited"]["output"], "éé", "{end}");
    assert_eq!(r["limited"]["truncated"], true, "{end}");
    assert!(r["killed_running"].get("exitStatus").is_none(), "{end}");
    assert_eq!(r["kill"], json!({}), "{end}");
    let killed = &r["killed"];
    // SIGTERM, or SIGKILL when the signal reached the sandbox's init before the shell.
    assert!(
        ["SIGTERM", "SIGKILL"].contains(&killed["signal"].as_str().unwrap_or(""))
            || [143, 137].contains(&killed["exitCode"].as_i64().unwrap_or(0)),
        "killed by a signal: {end}"
    );
    assert_eq!(
        r["cwd_env"],
        format!("{}/sub\nhi\n", s.ws.display()),
        "cwd beneath the workspace, env from the request: {end}"
    );
    assert!(
        r["outside"].as_str().unwrap_or("").contains("outside"),
        "a cwd outside the workspace is refused in standard mode: {end}"
    );
    assert_eq!(r["touch"]["exitCode"], 0, "{end}");
    assert!(s.ws.join("written-by-terminal").exists());
    // The terminal the agent embedded in its tool call is a command item.
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool = items
        .iter()
        .find(|i| i["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool item: {end}"));
    let text = tool.to_string();
    assert!(
        text.contains(r#"sh -c 'echo out; echo err >&2; exit 3'"#),
        "{tool}"
    );
    assert!(text.contains("exec"), "{tool}");
    assert_eq!(tool["result"], "out\nerr\n", "{tool}");
    // Its output streamed to clients as it came.
    let delta = app.wait_for("the terminal's output", |v| {
        v["method"] == "item/toolCall/outputDelta"
    });
    assert!(delta.to_string().contains(r"out\nerr\n"), "{delta}");
}

#[test]
fn scripted_acp_terminals_follow_the_permission_mode() {
    for mode in ["read_only", "unconfined"] {
        let (s, _log) = Setup::scripted("terminal");
        std::fs::create_dir(s.ws.join("sub")).unwrap();
        let mut app = s.app();
        let thread_id = start_thread(&mut app, mode);
        turn(&mut app, &thread_id, "run things");
        let end = wait_turn_end(&mut app, &thread_id);
        assert_eq!(end["method"], "turn/completed", "{mode}: {end}");
        let r = report(&end);
        let wrote = s.ws.join("written-by-terminal").exists();
        if mode == "read_only" {
            // The read-only sandbox: the command runs, its write fails.
            assert_ne!(r["touch"]["exitCode"], 0, "{end}");
            assert!(!wrote, "{end}");
            assert!(r["outside"].is_string(), "{end}");
        } else {
            assert_eq!(r["touch"]["exitCode"], 0, "{end}");
            assert!(wrote, "{end}");
            assert!(r["outside"].is_null(), "unconfined may run anywhere: {end}");
        }
    }
}

/// Pids of live processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn scripted_acp_terminals_die_with_the_turn() {
    let (s, _log) = Setup::scripted("terminal_linger");
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "leave one running");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert!(
        end["params"]["content"]
            .as_str()
            .unwrap_or("")
            .starts_with("left term"),
        "{end}"
    );
    let left = processes_with("987.654");
    assert!(left.is_empty(), "the terminal outlived its turn: {left:?}");
}

/// The ACP reference schema (`schema/v1/schema.json` of npm `@agentclientprotocol/sdk`,
/// pinned in `.ci/run`) from `WUU_TEST_ACP_SCHEMA`; without it the test prints why.
fn acp_schema() -> Option<Value> {
    let Some(p) = std::env::var_os("WUU_TEST_ACP_SCHEMA").map(PathBuf::from) else {
        eprintln!("skipped: WUU_TEST_ACP_SCHEMA is not set (install @agentclientprotocol/sdk)");
        return None;
    };
    match std::fs::read(&p) {
        Ok(b) => Some(serde_json::from_slice(&b).expect("schema.json is JSON")),
        Err(e) => {
            eprintln!("skipped: WUU_TEST_ACP_SCHEMA={}: {e}", p.display());
            None
        }
    }
}

/// A validator of `$defs/name` (or of `body` with the schema's `$defs`).
fn def_validator(schema: &Value, body: Value) -> jsonschema::Validator {
    let mut s = body;
    s["$schema"] = schema["$schema"].clone();
    s["$defs"] = schema["$defs"].clone();
    jsonschema::validator_for(&s).expect("a valid schema")
}

/// The `$defs` entry handled by `side` for `method` whose name ends with `suffix`.
fn def_of(schema: &Value, side: &str, method: &str, suffix: &str) -> Option<String> {
    schema["$defs"]
        .as_object()?
        .iter()
        .find(|(k, v)| v["x-side"] == side && v["x-method"] == method && k.ends_with(suffix))
        .map(|(k, _)| k.clone())
}

#[test]
fn scripted_acp_messages_we_send_match_the_acp_schema() {
    let Some(schema) = acp_schema() else { return };
    let (s, log) = Setup::scripted("schema");
    let mut app = s.app();
    let r = app.call(
        "engine/authenticate",
        json!({"engine_id": "pi", "method_id": "fake-login"}),
    );
    assert_eq!(r["authenticated"], true, "{r}");
    let thread_id = start_thread(&mut app, "standard");
    turn(&mut app, &thread_id, "exercise every method");
    let q = app.notification("user-question/requested");
    app.call(
        "user-question/respond",
        json!({"request_id": q["params"]["request"]["request_id"], "answer": {"answers": [{"id": "permission", "selected": ["Allow"]}]}}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "schema done", "{end}");
    // session/cancel.
    let turn_id = turn(&mut app, &thread_id, "wait for cancel");
    app.wait_for("the agent waits", |v| {
        v["method"] == "item/agentMessage/delta"
    });
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    // A restarted host loads the session (session/load) and prompts with an image.
    drop(app);
    let mut app = s.app();
    let r = app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": "hi", "images": [
            {"data": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", "media_type": "image/png"}]}),
    );
    assert!(r["turn"]["id"].is_string(), "{r}");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "hello", "{end}");
    drop(app);

    let client = schema["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["title"] == "Client")
        .expect("the schema has a Client branch")
        .clone();
    let client = def_validator(&schema, client);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut asked = std::collections::HashMap::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut failures = vec![];
    for line in text.lines() {
        if let Some(sent) = line.strip_prefix("SENT ") {
            let v: Value = serde_json::from_str(sent).unwrap();
            if let (Some(id), Some(m)) = (v.get("id"), v["method"].as_str()) {
                asked.insert(id.to_string(), m.to_owned());
            }
            continue;
        }
        if line.starts_with("ENV ") {
            continue;
        }
        let v: Value = serde_json::from_str(line).unwrap();
        let mut errors: Vec<String> = client.iter_errors(&v).map(|e| e.to_string()).collect();
        let (what, part, def) = if let Some(m) = v["method"].as_str() {
            let suffix = if v.get("id").is_some() {
                "Request"
            } else {
                "Notification"
            };
            (
                m.to_owned(),
                &v["params"],
                def_of(&schema, "agent", m, suffix),
            )
        } else {
            let m = asked.get(&v["id"].to_string()).cloned().unwrap_or_default();
            if v.get("error").is_some() {
                (
                    format!("{m} (error)"),
                    &v["error"],
                    Some("Error".to_owned()),
                )
            } else {
                (
                    m.clone(),
                    &v["result"],
                    def_of(&schema, "client", &m, "Response"),
                )
            }
        };
        match def {
            Some(d) => {
                let val = def_validator(&schema, json!({"$ref": format!("#/$defs/{d}")}));
                errors.extend(val.iter_errors(part).map(|e| format!("{d}: {e}")));
            }
            None => errors.push(format!("no schema for {what}")),
        }
        if !errors.is_empty() {
            failures.push(format!("{line}\n  {errors:?}"));
        }
        seen.insert(what);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for m in [
        "initialize",
        "authenticate",
        "session/new",
        "session/set_mode",
        "session/prompt",
        "session/cancel",
        "session/load",
        "session/request_permission",
        "fs/write_text_file",
        "fs/read_text_file",
        "fs/read_text_file (error)",
        "terminal/create",
        "terminal/output",
        "terminal/wait_for_exit",
        "terminal/kill",
        "terminal/release",
        "no/such_method (error)",
    ] {
        assert!(seen.contains(m), "{m} was not exercised: {seen:?}");
    }
}

/// The real claude-code-acp agent (npm `@zed-industries/claude-code-acp`, pinned in
/// `.ci/run`), from `WUU_TEST_CLAUDE_CODE_ACP_BIN`; without it the test prints why.
fn claude_acp_bin() -> Option<PathBuf> {
    match std::env::var_os("WUU_TEST_CLAUDE_CODE_ACP_BIN").map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        Some(p) => {
            eprintln!(
                "skipped: WUU_TEST_CLAUDE_CODE_ACP_BIN={} does not exist",
                p.display()
            );
            None
        }
        None => {
            eprintln!("skipped: WUU_TEST_CLAUDE_CODE_ACP_BIN is not set (install @zed-industries/claude-code-acp)");
            None
        }
    }
}

/// claude-code-acp as the `pi` engine, its Claude Code talking to the fake Messages
/// provider `fp` with an isolated config dir and no outside traffic.
fn claude_acp_setup(fp: &FakeProvider, bin: &Path) -> Setup {
    // Claude Code's one-token probe (`max_tokens: 1`) is answered aside, so the queued
    // scripts go to the turn's own requests.
    fp.set_responder(|b| (b["max_tokens"] == 1).then(|| Script::text(&["ok"])));
    let config = tempfile::tempdir().unwrap().keep();
    let vars = [
        ("ANTHROPIC_BASE_URL", fp.root_url()),
        ("ANTHROPIC_API_KEY", "test".to_owned()),
        ("CLAUDE_CONFIG_DIR", config.to_string_lossy().into_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
    ];
    let keep: Vec<&str> = vars.iter().map(|(k, _)| *k).collect();
    Setup::new(
        bin,
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        &keep,
    )
}

#[test]
fn claude_code_acp_turn_streams_and_completes() {
    let Some(bin) = claude_acp_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = claude_acp_setup(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    fp.push(Script::text(&["Hello ", "from claude-code-acp"]));
    turn(&mut app, &thread_id, "say hello");
    app.wait_for("a delta", |v| v["method"] == "item/agentMessage/delta");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(
        end["params"]["content"], "Hello from claude-code-acp",
        "{end}"
    );
    let asked: Vec<String> = fp.requests().iter().map(|r| r.body.to_string()).collect();
    assert!(asked.iter().any(|b| b.contains("say hello")), "{asked:?}");
}

#[test]
fn claude_code_acp_runs_its_bash_in_our_terminal() {
    let Some(bin) = claude_acp_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = claude_acp_setup(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app, "standard");
    // With the client's terminal capability claude-code-acp offers its own Bash tool,
    // which runs the command in a client terminal.
    fp.push(Script::tool_call(
        "toolu_t1",
        "mcp__acp__Bash",
        &json!({"command": "echo acp-terminal > t.txt && cat t.txt", "timeout": 60000,
                "description": "write a marker"})
        .to_string(),
    ));
    fp.push(Script::text(&["wrote it"]));
    turn(&mut app, &thread_id, "write the marker");
    let end = loop {
        let v = app.wait_for("a question or the turn end", |v| {
            v["method"] == "user-question/requested"
                || matches!(
                    v["method"].as_str(),
                    Some("turn/completed") | Some("turn/error")
                )
        });
        if v["method"] != "user-question/requested" {
            break v;
        }
        let req = &v["params"]["request"];
        let allow = req["questions"][0]["options"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["description"] == "allow_once")
            .unwrap_or_else(|| panic!("{v}"))["label"]
            .clone();
        app.call(
            "user-question/respond",
            json!({"request_id": req["request_id"], "answer": {"answers": [{"id": "permission", "selected": [allow]}]}}),
        );
    };
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("t.txt")).unwrap_or_default(),
        "acp-terminal\n",
        "{end}"
    );
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool = items
        .iter()
        .find(|i| i["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool item: {end}"));
    assert_eq!(tool["name"], "exec", "{tool}");
    assert!(
        tool.to_string().contains("echo acp-terminal > t.txt"),
        "{tool}"
    );
    assert!(
        tool["result"]
            .as_str()
            .unwrap_or("")
            .contains("acp-terminal"),
        "{tool}"
    );
}

#[test]
fn acp_engine_list_discovers_the_agents_models() {
    let Some(bin) = acp_bin() else { return };
    let fp = FakeProvider::start();
    let s = Setup::codex_acp(&fp, &bin);
    let mut app = s.app();
    let r = app.call("engine/list", json!({"cwd": s.ws}));
    let pi = r["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "pi")
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    assert_eq!(pi["models_status"], "ready", "{pi}");
    let models = pi["models"].as_array().unwrap();
    // codex-acp's `model` config option: the configured model is current.
    let default = models
        .iter()
        .find(|m| m["is_default"] == true)
        .unwrap_or_else(|| panic!("{pi}"));
    assert_eq!(default["id"], "fake-model", "{pi}");
    assert!(models.len() > 1, "{pi}");
    // Discovery never prompts.
    assert!(bodies(&fp).is_empty());
}
