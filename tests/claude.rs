//! End-to-end tests of Claude Code as an external engine: the real `wuu app-server`
//! (and `wuu exec`) drives the real `claude -p` (npm `@anthropic-ai/claude-code`, pinned
//! in `.ci/run`), which talks to the fake Messages provider on loopback through
//! `ANTHROPIC_BASE_URL` with an isolated `CLAUDE_CONFIG_DIR` and no outside traffic.
//! What the real CLI cannot be made to do on demand (crash, hang, dump its environment)
//! is scripted in `tests/support/fake_claude.sh`.
//!
//! The Claude binary comes from `WUU_TEST_CLAUDE_BIN`; without it the real-Claude tests
//! print why and return.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

/// The real Claude Code binary, or why it is missing.
fn claude_bin() -> Option<PathBuf> {
    match std::env::var_os("WUU_TEST_CLAUDE_BIN").map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        Some(p) => {
            eprintln!(
                "skipped: WUU_TEST_CLAUDE_BIN={} does not exist",
                p.display()
            );
            None
        }
        None => {
            eprintln!(
                "skipped: WUU_TEST_CLAUDE_BIN is not set ({})",
                std::env::var("WUU_TEST_CLAUDE_SKIP").unwrap_or_else(|_| {
                    "install @anthropic-ai/claude-code and point it at the binary".into()
                })
            );
            None
        }
    }
}

/// A workspace, a wuu home and an isolated Claude config dir; Claude at `bin`.
struct Setup {
    _dir: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    env: Vec<(String, String)>,
}

impl Setup {
    fn new(bin: &Path, base_url: &str, config: Value, extra: &[(&str, &str)]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("wuu-home");
        let ws = dir.path().join("ws");
        let claude_dir = dir.path().join("claude-config");
        for d in [&home, &ws, &claude_dir] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join("config.json"), config.to_string()).unwrap();
        let ws = ws.canonicalize().unwrap();
        let mut env: Vec<(String, String)> = vec![
            ("WUU_CLAUDE_BINARY".into(), bin.to_string_lossy().into()),
            ("HOME".into(), home.to_string_lossy().into()),
            ("ANTHROPIC_BASE_URL".into(), base_url.into()),
            ("ANTHROPIC_API_KEY".into(), "test".into()),
            (
                "CLAUDE_CONFIG_DIR".into(),
                claude_dir.to_string_lossy().into(),
            ),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_TELEMETRY".into(), "1".into()),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
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

    fn real(fp: &FakeProvider, bin: &Path) -> Setup {
        Setup::new(
            bin,
            &fp.root_url(),
            json!({"agent": {"auto_title": false}}),
            &[],
        )
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
            json!({"protocol_version": "wuu-app-server/v0.1", "client": {"name": "claude-test"}}),
        );
        app
    }

    /// Runs `wuu exec ARGS… --cd WS --json`: exit code, stdout, stderr, events.
    fn exec_json(&self, args: &[&str]) -> (Option<i32>, String, String, Vec<Value>) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wuu"))
            .arg("exec")
            .arg("--cd")
            .arg(&self.ws)
            .arg("--json")
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
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
}

fn start_thread(app: &mut App) -> String {
    let r = app.call("thread/start", json!({"engine": "claude"}));
    assert_eq!(r["thread"]["engine_id"], "claude", "{r}");
    r["thread"]["id"].as_str().unwrap().to_owned()
}

fn turn(app: &mut App, thread_id: &str, prompt: &str) -> String {
    let r = app.call(
        "turn/start",
        json!({"thread_id": thread_id, "prompt": prompt}),
    );
    r["turn"]["id"].as_str().unwrap().to_owned()
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

/// The bodies of the Messages requests the fake provider received.
fn bodies(fp: &FakeProvider) -> Vec<String> {
    fp.requests()
        .iter()
        .filter(|r| {
            r.path
                .split('?')
                .next()
                .unwrap_or("")
                .ends_with("/messages")
        })
        .map(|r| r.body.to_string())
        .collect()
}

#[test]
fn claude_turn_streams_completes_and_resumes_after_a_restart() {
    let Some(bin) = claude_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::real(&fp, &bin);
    let mut app = s.app();
    // engine/list: enabled, with the CLI's version and what it can do.
    let r = app.call("engine/list", json!({"include_models": false}));
    let claude = r["engines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "claude")
        .cloned()
        .unwrap();
    assert_eq!(claude["enabled"], true, "{claude}");
    assert_eq!(claude["error"], Value::Null, "{claude}");
    assert!(
        claude["version"]
            .as_str()
            .unwrap_or("")
            .contains("Claude Code"),
        "{claude}"
    );
    let caps = claude["capabilities"].to_string();
    assert!(
        caps.contains("native-session-resume") && caps.contains("queued-steer"),
        "{caps}"
    );

    let thread_id = start_thread(&mut app);
    fp.push(Script::text(&["Hello ", "from claude"]));
    turn(&mut app, &thread_id, "say hello");
    let delta = app.notification("item/agentMessage/delta");
    assert_eq!(delta["params"]["thread_id"], thread_id.as_str(), "{delta}");
    let usage = app.notification("turn/usage");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "Hello from claude", "{end}");
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    assert!(items.iter().any(|i| i["type"] == "agent_message"
        && i["text"] == "Hello from claude"
        && i["terminal"] == true));
    assert!(
        usage["params"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{usage}"
    );
    assert!(bodies(&fp)[0].contains("say hello"));

    // Restart our server: the next turn resumes the native session, so Claude sends
    // the first exchange again.
    drop(app);
    let mut app = s.app();
    fp.push(Script::text(&["Second answer"]));
    turn(&mut app, &thread_id, "and again");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "Second answer", "{end}");
    let last = bodies(&fp).pop().unwrap();
    assert!(
        last.contains("say hello") && last.contains("Hello from claude"),
        "{last}"
    );
    assert!(last.contains("and again"));
    let r = app.call("thread/resume", json!({"session_id": thread_id}));
    assert_eq!(
        r["thread"]["turns"].as_array().map(Vec::len),
        Some(2),
        "{r}"
    );

    // The usage reached the ledgers, counted once on the in-wuu side of Claude.
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
        .find(|b| b["engine_id"] == "claude")
        .cloned()
        .unwrap_or_else(|| panic!("no claude breakdown: {u}"));
    assert!(b["in_wuu"]["input_tokens"].as_u64().unwrap_or(0) > 0, "{b}");
    if let Some(outside) = b.get("outside").filter(|o| !o.is_null()) {
        assert_eq!(
            outside["input_tokens"], 0,
            "claimed sessions are not outside: {b}"
        );
    }
}

#[test]
fn claude_interrupt_stops_the_turn_and_the_conversation_goes_on() {
    let Some(bin) = claude_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::real(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app);
    fp.push(Script::stall(
        &["thinking about it"],
        Duration::from_secs(60),
    ));
    let turn_id = turn(&mut app, &thread_id, "take your time");
    app.wait_for("first delta", |v| v["method"] == "item/agentMessage/delta");
    let asked = Instant::now();
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(asked.elapsed() < Duration::from_secs(20), "not stalled");
    fp.push(Script::text(&["back again"]));
    turn(&mut app, &thread_id, "continue");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "back again", "{end}");
}

#[test]
fn claude_asks_its_question_and_the_client_answers() {
    let Some(bin) = claude_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::real(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app);
    let question = json!({"questions": [{"question": "Which color?", "header": "Color",
        "options": [{"label": "red", "description": "warm"},
                    {"label": "blue", "description": "cool"}],
        "multiSelect": false}]});
    fp.push(Script::tool_call(
        "toolu_q1",
        "AskUserQuestion",
        &question.to_string(),
    ));
    fp.push(Script::text(&["you chose blue"]));
    let turn_id = turn(&mut app, &thread_id, "ask me");
    let q = app.notification("user-question/requested");
    let req = &q["params"]["request"];
    assert_eq!(req["reply_to_tool"], true, "{q}");
    assert_eq!(req["call_id"], "toolu_q1");
    assert_eq!(req["turn_id"], turn_id.as_str());
    assert_eq!(req["questions"][0]["question"], "Which color?");
    assert_eq!(req["questions"][0]["options"][1]["label"], "blue");
    let qid = req["questions"][0]["id"].as_str().unwrap().to_owned();
    let request_id = req["request_id"].as_str().unwrap().to_owned();
    app.call(
        "user-question/respond",
        json!({"request_id": request_id, "answer": {"answers": [{"id": qid, "selected": ["blue"]}]}}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert_eq!(end["params"]["content"], "you chose blue", "{end}");
    // Claude got the answer as its tool's result and sent it to the model.
    let last = bodies(&fp).pop().unwrap();
    assert!(last.contains(r#"\"Which color?\"=\"blue\""#), "{last}");
}

#[test]
fn claude_permission_prompt_is_a_question_the_client_answers() {
    let Some(bin) = claude_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::real(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app);
    fp.push(Script::tool_call(
        "toolu_b1",
        "Bash",
        &json!({"command": "echo claude-was-here > marker.txt && cat marker.txt",
                "description": "write a marker"})
        .to_string(),
    ));
    fp.push(Script::text(&["wrote it"]));
    turn(&mut app, &thread_id, "write the marker");
    let q = app.notification("user-question/requested");
    let req = &q["params"]["request"];
    let text = req["questions"][0]["question"].as_str().unwrap_or("");
    assert!(text.contains("Bash") && text.contains("marker.txt"), "{q}");
    assert_eq!(req["call_id"], "toolu_b1");
    app.call(
        "user-question/respond",
        json!({"request_id": req["request_id"], "answer": {"answers": [
            {"id": req["questions"][0]["id"], "selected": ["Allow"]}]}}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool = items
        .iter()
        .find(|i| i["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool item: {end}"));
    assert_eq!(tool["name"], "bash", "{tool}");
    assert!(
        tool["result"]
            .as_str()
            .unwrap_or("")
            .contains("claude-was-here"),
        "{tool}"
    );
    assert_eq!(
        std::fs::read_to_string(s.ws.join("marker.txt")).unwrap(),
        "claude-was-here\n"
    );
}

#[test]
fn claude_exec_runs_one_shot_with_the_engine_flag() {
    let Some(bin) = claude_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::real(&fp, &bin);
    fp.push(Script::text(&["hello from exec"]));
    let (code, stdout, stderr, events) = s.exec_json(&["--engine", "claude", "say hello"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        events.iter().any(|e| e["type"] == "thread_started"),
        "{stdout}"
    );
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result", "{stdout}");
    assert_eq!(result["status"], "completed", "{stdout}");
    assert_eq!(result["final_message"], "hello from exec", "{stdout}");
}

// ---- the scripted fake `claude` (tests/support/fake_claude.sh) ----

struct Fake {
    setup: Setup,
    log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl Fake {
    fn new(mode: &str, extra: &[(&str, &str)]) -> Fake {
        let logdir = tempfile::tempdir().unwrap();
        let log = logdir.path().join("fake-claude.log");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake_claude.sh");
        let mut vars: Vec<(&str, &str)> = vec![
            ("FAKE_CLAUDE_MODE", mode),
            ("FAKE_CLAUDE_LOG", log.to_str().unwrap()),
        ];
        vars.extend_from_slice(extra);
        // The fake's own variables reach it only as named in `agent.shell_env.keep`.
        let config = json!({"agent": {"auto_title": false, "shell_env": {"keep":
            ["FAKE_CLAUDE_MODE", "FAKE_CLAUDE_LOG", "FAKE_CLAUDE_DELAY"]}}});
        let setup = Setup::new(&script, "http://127.0.0.1:9", config, &vars);
        Fake {
            setup,
            log,
            _logdir: logdir,
        }
    }

    fn read(&self, ext: &str) -> String {
        std::fs::read_to_string(format!("{}{ext}", self.log.display())).unwrap_or_default()
    }
}

#[test]
fn the_claude_child_sees_only_the_variables_it_is_given() {
    let secrets = [
        ("SECRET_TOKEN", "secret-token-0001"),
        ("OPENAI_API_KEY", "sk-other-provider-0002"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-0003"),
        ("GITHUB_TOKEN", "ghp-token-0004"),
        ("DB_PASSWORD", "hunter2-0005"),
        ("SSH_AUTH_SOCK", "/tmp/agent-socket-0006"),
        ("SOME_UNRELATED_VAR", "unrelated-0007"),
    ];
    let mut extra: Vec<(&str, &str)> = secrets.to_vec();
    extra.push(("LC_ALL", "C.UTF-8"));
    let f = Fake::new("normal", &extra);
    let mut app = f.setup.app();
    let thread_id = start_thread(&mut app);
    turn(&mut app, &thread_id, "hi");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "echo: hi", "{end}");
    let dump = f.read(".env");
    for (k, v) in secrets {
        assert!(!dump.contains(v), "{k} reached the Claude child:\n{dump}");
    }
    let mut allowed: Vec<&str> = vec![
        "PATH",
        "HOME",
        "LC_ALL",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_TELEMETRY",
        "DISABLE_AUTOUPDATER",
        "FAKE_CLAUDE_MODE",
        "FAKE_CLAUDE_LOG",
        "WUU_COMMAND_TOKEN",
        // Set by the shell running the fake script or passed from the test runner's
        // base environment.
        "PWD",
        "SHLVL",
        "_",
        "OLDPWD",
    ];
    allowed.extend(wuu_base_vars());
    for line in dump.lines() {
        let Some((k, _)) = line.split_once('=') else {
            continue;
        };
        assert!(
            allowed.contains(&k),
            "{k} was not given to the Claude child:\n{dump}"
        );
    }
    for want in [
        "ANTHROPIC_API_KEY=test",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:9",
        "LC_ALL=C.UTF-8",
        "WUU_COMMAND_TOKEN=",
    ] {
        assert!(
            dump.lines().any(|l| l.starts_with(want)),
            "{want} missing:\n{dump}"
        );
    }
    // The native session id is persisted and handed back with --resume.
    turn(&mut app, &thread_id, "again");
    wait_turn_end(&mut app, &thread_id);
    let args = f.read(".args");
    assert!(args.contains("--resume\nfake-session-1"), "{args}");
    assert!(args.contains("--permission-mode\ndefault"), "{args}");
}

/// The shared base of every engine child (engine::child::BASE_ENV), as far as the test
/// runner's own environment sets them.
fn wuu_base_vars() -> Vec<&'static str> {
    vec![
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TERM",
        "COLORTERM",
        "NO_COLOR",
        "TMPDIR",
        "TZ",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "XDG_STATE_HOME",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
    ]
}

#[test]
fn a_crashed_claude_fails_the_turn_with_its_last_stderr_line() {
    let f = Fake::new("crash", &[]);
    let mut app = f.setup.app();
    let thread_id = start_thread(&mut app);
    turn(&mut app, &thread_id, "hi");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/error", "{end}");
    let msg = end["params"]["error"].as_str().unwrap_or("");
    assert!(msg.contains("simulated crash"), "{end}");
    // The host is fine: it answers at once.
    app.call("thread/list", json!({}));
}

#[test]
fn a_hung_claude_is_killed_after_an_interrupt() {
    let f = Fake::new("hang", &[]);
    let mut app = f.setup.app();
    let thread_id = start_thread(&mut app);
    let turn_id = turn(&mut app, &thread_id, "hi");
    // Its system line arrived: the session id was persisted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f.read(".env").contains("FAKE_CLAUDE_MODE") {
        assert!(Instant::now() < deadline, "the fake did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    app.call(
        "turn/interrupt",
        json!({"thread_id": thread_id, "turn_id": turn_id}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(asked.elapsed() < Duration::from_secs(20), "not stalled");
    // Nothing of it is left running (the server itself carries the variable too).
    let needle = format!("FAKE_CLAUDE_LOG={}", f.log.display());
    let server = app.child.id().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<u32>().is_ok() && n != server)
            })
            .filter(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                let zombie = stat
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
                !zombie
                    && std::fs::read(e.path().join("environ"))
                        .unwrap_or_default()
                        .split(|b| *b == 0)
                        .any(|v| v == needle.as_bytes())
            })
            .count();
        if alive == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{alive} fake processes left");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_steer_to_a_claude_turn_is_queued_and_runs_as_the_next_turn() {
    let f = Fake::new("normal", &[("FAKE_CLAUDE_DELAY", "2")]);
    let mut app = f.setup.app();
    let thread_id = start_thread(&mut app);
    let turn_id = turn(&mut app, &thread_id, "first");
    let r = app.call(
        "turn/steer",
        json!({"thread_id": thread_id, "expected_turn_id": turn_id,
               "prompt": "second", "client_id": "steer-1"}),
    );
    assert_eq!(r["delivery"], "queued", "{r}");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "echo: first", "{end}");
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["params"]["content"], "echo: second", "{end}");
    assert_ne!(end["params"]["turn"]["id"], turn_id.as_str());
}

#[test]
fn claude_permission_prompt_denied_refuses_the_command() {
    let Some(bin) = claude_bin() else { return };
    let fp = FakeProvider::start();
    fp.set_validate(false);
    let s = Setup::real(&fp, &bin);
    let mut app = s.app();
    let thread_id = start_thread(&mut app);
    fp.push(Script::tool_call(
        "toolu_b2",
        "Bash",
        &json!({"command": "echo nope > denied.txt"}).to_string(),
    ));
    fp.push(Script::text(&["ok, not running it"]));
    turn(&mut app, &thread_id, "write the file");
    let q = app.notification("user-question/requested");
    let req = &q["params"]["request"];
    app.call(
        "user-question/respond",
        json!({"request_id": req["request_id"], "answer": {"answers": [
            {"id": req["questions"][0]["id"], "selected": ["Deny"]}]}}),
    );
    let end = wait_turn_end(&mut app, &thread_id);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool = items
        .iter()
        .find(|i| i["type"] == "tool_call")
        .unwrap_or_else(|| panic!("no tool item: {end}"));
    assert_eq!(tool["status"], "failed", "{tool}");
    assert!(!s.ws.join("denied.txt").exists());
    let last = bodies(&fp).pop().unwrap();
    assert!(last.contains("The user denied this tool use"), "{last}");
}
