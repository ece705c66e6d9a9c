//! End-to-end tests of subagents (spec `subagents.md`): a root conversation spawns
//! workers through the `spawn_agent` tool; the fake provider on 127.0.0.1 answers root
//! and worker requests by their content (they arrive concurrently). Each test has its
//! own `WUU_HOME` and workspace.

mod support;

use serde_json::{json, Value};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");

/// Text of a chat message (string content or text parts).
fn text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// The messages after the last one whose text contains `marker`.
fn after(body: &Value, marker: &str) -> Option<Vec<Value>> {
    let msgs = messages(body);
    let i = msgs.iter().rposition(|m| text(m).contains(marker))?;
    Some(msgs.into_iter().skip(i + 1).collect())
}

fn tool_results(msgs: &[Value], action: &str) -> usize {
    msgs.iter()
        .filter(|m| m["role"] == "tool" && text(m).contains(&format!("\"action\":\"{action}\"")))
        .count()
}

/// How many user messages of a request are result notices naming `task`.
fn notices(body: &Value, task: &str) -> usize {
    messages(body)
        .iter()
        .filter(|m| {
            m["role"] == "user"
                && text(m).contains("<subagent_notification>")
                && text(m).contains(&format!("\"task_name\":\"{task}\""))
        })
        .count()
}

fn is_worker(body: &Value) -> bool {
    messages(body)
        .iter()
        .any(|m| m["role"] == "user" && text(m).contains("You are a worker agent"))
}

/// The root requests (not the workers', not a fork's).
fn root_requests(fake: &FakeProvider, marker: &str) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.body)
        .filter(|b| !is_worker(b) && messages(b).iter().any(|m| text(m).contains(marker)))
        .collect()
}

const BIG: usize = 5000;

/// The scripted behaviour of the delegation scenario: the root (first user message
/// `ROOT: delegate`) spawns alpha (fresh, stalls until closed), beta (forked, reports
/// with `agent_report`) and gamma (fresh, answers with more than the inline limit),
/// then closes alpha, then answers `ack`; each result notice gets an `ack`.
fn delegation(body: &Value) -> Option<Script> {
    let last_user = messages(body)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(text)
        .unwrap_or_default();
    if is_worker(body) {
        if last_user.contains("WORKER alpha") {
            return Some(Script::stall(&["working"], Duration::from_secs(60)));
        }
        if messages(body)
            .iter()
            .any(|m| text(m).contains("WORKER beta"))
        {
            let rest = after(body, "WORKER beta").unwrap_or_default();
            return Some(if rest.iter().any(|m| m["role"] == "tool") {
                Script::text(&["beta final"])
            } else {
                Script::tool_call(
                    "call_report",
                    "agent_report",
                    r#"{"outcome":"completed","summary":"beta summary","work_done":["forked and checked"]}"#,
                )
            });
        }
        if last_user.contains("WORKER gamma") {
            let big = format!("{}END", "g".repeat(BIG));
            return Some(Script::text(&[&big]));
        }
        if last_user.contains("WORKER ") {
            return Some(Script::text(&["worker done"]));
        }
        return None;
    }
    let rest = after(body, "ROOT: delegate")?;
    if rest.iter().all(|m| m["role"] != "tool") {
        return Some(Script::tool_calls(&[
            (
                "call_a",
                "spawn_agent",
                r#"{"description":"alpha task","prompt":"WORKER alpha","name":"alpha","run_in_background":true}"#,
            ),
            (
                "call_b",
                "spawn_agent",
                r#"{"description":"beta task","prompt":"WORKER beta","name":"beta","context":"fork"}"#,
            ),
            (
                "call_c",
                "spawn_agent",
                r#"{"description":"gamma task","prompt":"WORKER gamma","name":"gamma","run_in_background":true}"#,
            ),
        ]));
    }
    if tool_results(&rest, "spawn_agent") == 3 && tool_results(&rest, "close_agent") == 0 {
        return Some(Script::tool_call(
            "call_close",
            "close_agent",
            r#"{"target":"alpha"}"#,
        ));
    }
    Some(Script::text(&["ack"]))
}

fn exec_config(fake: &FakeProvider, max_parallel: u32) -> Value {
    json!({
        "default_provider": "fake",
        "providers": {"fake": {
            "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
            "max_retries": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5,
        }},
        "agent": {"auto_title": false, "max_parallel": max_parallel},
    })
}

const FIELDS: &[&str] = &[
    "agent_id",
    "thread_id",
    "agent_type",
    "status",
    "task_name",
    "agent_profile",
    "agent_path",
    "parent_id",
    "description",
    "result",
    "result_path",
    "result_bytes",
    "result_truncated",
    "error",
    "input_tokens",
    "output_tokens",
    "cache_creation_tokens",
    "cache_read_tokens",
];

#[test]
fn exec_root_delegates_to_three_workers_and_gets_each_result_once() {
    let fake = FakeProvider::start();
    fake.set_responder(delegation);
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.json"),
        exec_config(&fake, 2).to_string(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["exec", "--json", "--cd"])
        .arg(ws.path())
        .arg("ROOT: delegate")
        .env("WUU_HOME", home.path())
        .env_remove("RUST_LOG")
        .current_dir(ws.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let end = Instant::now() + Duration::from_secs(90);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        assert!(Instant::now() < end, "wuu exec did not settle");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert_eq!(code, 0, "exit 0\n{out}\n{err}");
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let result = events.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["status"], "completed", "{result}");
    let root = result["thread_id"].as_str().unwrap().to_owned();

    // Every subagent event carries every field of the seed.
    let sub: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap_or("").starts_with("subagent_"))
        .collect();
    for e in &sub {
        for f in FIELDS {
            assert!(e.get(*f).is_some(), "{f} missing in {e}");
        }
        assert_eq!(e["thread_id"], root.as_str());
        assert_eq!(e["parent_id"], root.as_str());
    }
    let by_task = |task: &str, ty: &str| -> Vec<&Value> {
        sub.iter()
            .copied()
            .filter(|e| e["task_name"] == task && e["type"] == ty)
            .collect()
    };
    for task in ["alpha", "beta", "gamma"] {
        assert_eq!(
            by_task(task, "subagent_started").len(),
            1,
            "{task} started once"
        );
        assert_eq!(
            by_task(task, "subagent_completed").len(),
            1,
            "{task} completed once: {sub:#?}"
        );
    }
    assert!(
        sub.iter().any(|e| e["type"] == "subagent_updated"),
        "updates are reported"
    );
    // gamma waited for a slot (max_parallel 2).
    assert_eq!(by_task("gamma", "subagent_started")[0]["status"], "queued");
    let alpha = by_task("alpha", "subagent_completed")[0];
    assert_eq!(alpha["status"], "cancelled");
    let beta = by_task("beta", "subagent_completed")[0];
    assert_eq!(beta["status"], "completed");
    assert_eq!(beta["agent_type"], "fork");
    assert!(beta["result"].as_str().unwrap().contains("beta summary"));
    assert!(beta["input_tokens"].as_u64().unwrap() > 0, "{beta}");
    let gamma = by_task("gamma", "subagent_completed")[0];
    assert_eq!(gamma["status"], "completed");
    assert_eq!(gamma["result_truncated"], true);
    assert_eq!(gamma["result_bytes"].as_u64().unwrap(), BIG as u64 + 3);
    assert_eq!(gamma["agent_path"], "/root/gamma");
    let path = gamma["result_path"].as_str().unwrap();
    let full = std::fs::read_to_string(path).expect("the full result file");
    assert_eq!(full.len(), BIG + 3);
    assert!(gamma["result"].as_str().unwrap().len() < full.len());

    // The root got beta's and gamma's results once each, alpha's (closed) never.
    let roots = root_requests(&fake, "ROOT: delegate");
    let last = roots.last().unwrap();
    assert_eq!(notices(last, "beta"), 1, "beta once");
    assert_eq!(notices(last, "gamma"), 1, "gamma once");
    assert_eq!(notices(last, "alpha"), 0, "closed alpha is not delivered");
    for r in &roots {
        assert!(notices(r, "beta") <= 1 && notices(r, "gamma") <= 1);
    }
    // The fork saw the root's history; the fresh workers did not.
    let reqs = fake.requests();
    let fork_req = reqs
        .iter()
        .find(|r| {
            messages(&r.body)
                .iter()
                .any(|m| text(m).contains("WORKER beta"))
        })
        .unwrap();
    assert!(messages(&fork_req.body)
        .iter()
        .any(|m| text(m).contains("ROOT: delegate")));
    let fresh_req = reqs
        .iter()
        .find(|r| {
            messages(&r.body)
                .iter()
                .any(|m| text(m).contains("WORKER gamma"))
        })
        .unwrap();
    assert!(!messages(&fresh_req.body)
        .iter()
        .any(|m| text(m).contains("ROOT: delegate")));
    // The run's usage counts the workers' tokens too.
    let usage = &result["usage"];
    let root_turns: u64 = events
        .iter()
        .filter(|e| e["type"] == "usage_updated" && e["thread_id"] == root.as_str())
        .count() as u64;
    assert!(root_turns > 0);
    let worker_in: u64 = ["beta", "gamma"]
        .iter()
        .map(|t| {
            by_task(t, "subagent_completed")[0]["input_tokens"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(
        usage["input_tokens"].as_u64().unwrap() > worker_in,
        "{usage}"
    );
}

fn app_config(fake: &FakeProvider, max_parallel: u32) -> Value {
    let mut c = support::app::config_for(&fake.base_url());
    c["agent"]["max_parallel"] = json!(max_parallel);
    c
}

/// The root spawns two workers (`ROOT2`); the first stalls, the second waits for a
/// slot (max_parallel 1).
fn two_workers(body: &Value) -> Option<Script> {
    let last_user = messages(body)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(text)
        .unwrap_or_default();
    if is_worker(body) {
        if last_user.contains("WORKER slow") {
            return Some(Script::stall(&["working"], Duration::from_secs(60)));
        }
        return Some(Script::text(&["quick done"]));
    }
    let rest = after(body, "ROOT2")?;
    if rest.iter().all(|m| m["role"] != "tool") {
        return Some(Script::tool_calls(&[
            (
                "call_s",
                "spawn_agent",
                r#"{"description":"slow task","prompt":"WORKER slow","name":"slow","run_in_background":true}"#,
            ),
            (
                "call_q",
                "spawn_agent",
                r#"{"description":"quick task","prompt":"WORKER quick","name":"quick","run_in_background":true}"#,
            ),
        ]));
    }
    Some(Script::text(&["ack"]))
}

fn agent_status(app: &mut App, task: &str, status: &str) -> Value {
    app.wait_for(&format!("agent/updated {task} {status}"), |v| {
        v["method"] == "agent/updated"
            && v["params"]["agent"]["task_name"] == task
            && v["params"]["agent"]["status"] == status
    })
}

#[test]
fn app_server_sees_agents_and_an_interrupt_freezes_the_tree() {
    let fake = FakeProvider::start();
    fake.set_responder(two_workers);
    let mut app = App::start(Some(app_config(&fake, 1)));
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    let t = app.call("thread/start", json!({}));
    let root = t["thread"]["id"].as_str().unwrap().to_owned();
    app.call("turn/start", json!({"thread_id": root, "prompt": "ROOT2"}));
    let queued = agent_status(&mut app, "quick", "queued");
    assert_eq!(queued["params"]["thread_id"], root.as_str());
    let running = agent_status(&mut app, "slow", "running");
    let slow_id = running["params"]["agent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(running["params"]["agent"]["agent_path"], "/root/slow");
    app.wait_for("root turn completed", |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == root.as_str()
    });
    // Worker threads are hidden from thread/list; their history is readable.
    let list = app.call("thread/list", json!({}));
    let ids: Vec<&str> = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert!(
        ids.contains(&root.as_str()) && !ids.contains(&slow_id.as_str()),
        "{list}"
    );
    let hist = app.call("thread/resume", json!({"session_id": slow_id}));
    assert!(hist.to_string().contains("WORKER slow"), "{hist}");
    // Archive with live workers is refused unless forced.
    let e = app.call_err(
        "thread/archive",
        json!({"thread_id": root, "archived": true}),
    );
    assert_eq!(e["code"], "thread_busy", "{e}");
    // Interrupt of the idle root freezes the tree: both workers stop, nothing wakes it.
    app.call("turn/interrupt", json!({"thread_id": root}));
    agent_status(&mut app, "slow", "cancelled");
    agent_status(&mut app, "quick", "cancelled");
    let n_before = root_requests(&fake, "ROOT2").len();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        root_requests(&fake, "ROOT2").len(),
        n_before,
        "no wake-up while frozen"
    );
    assert!(
        !app.seen.iter().any(|v| v["method"] == "agent/mailbox"),
        "nothing delivered while frozen"
    );
    // The next user turn gets the frozen tree's results, once.
    app.call(
        "turn/start",
        json!({"thread_id": root, "prompt": "what happened?"}),
    );
    app.wait_for("second root turn completed", |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == root.as_str()
    });
    let roots = root_requests(&fake, "ROOT2");
    let last = roots.last().unwrap();
    assert_eq!(notices(last, "slow"), 1, "{last}");
    assert_eq!(notices(last, "quick"), 1);
    // Now the tree is settled: archive works.
    app.call(
        "thread/archive",
        json!({"thread_id": root, "archived": true}),
    );
}

#[test]
fn kill_9_with_workers_running_recovers_without_loss_or_duplicates() {
    let fake = FakeProvider::start();
    fake.set_responder(two_workers);
    let mut app = App::start(Some(app_config(&fake, 1)));
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    let t = app.call("thread/start", json!({}));
    let root = t["thread"]["id"].as_str().unwrap().to_owned();
    app.call("turn/start", json!({"thread_id": root, "prompt": "ROOT2"}));
    agent_status(&mut app, "quick", "queued");
    agent_status(&mut app, "slow", "running");
    app.wait_for("root turn completed", |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == root.as_str()
    });
    // kill -9 while `slow` runs and `quick` waits in the queue.
    app.restart();
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    app.call("thread/resume", json!({"session_id": root}));
    // Recovery: `slow` was interrupted, `quick` runs now; the root hears of both.
    agent_status(&mut app, "slow", "interrupted");
    agent_status(&mut app, "quick", "completed");
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let roots = root_requests(&fake, "ROOT2");
        let last = roots.last().unwrap();
        if notices(last, "slow") == 1 && notices(last, "quick") == 1 {
            break;
        }
        assert!(Instant::now() < end, "both results reach the root");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another restart delivers nothing twice.
    app.wait_for("a root turn completed", |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == root.as_str()
    });
    std::thread::sleep(Duration::from_millis(500));
    app.restart();
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    app.call("thread/resume", json!({"session_id": root}));
    std::thread::sleep(Duration::from_millis(800));
    for r in root_requests(&fake, "ROOT2") {
        assert!(notices(&r, "slow") <= 1 && notices(&r, "quick") <= 1, "{r}");
    }
}

#[test]
fn forced_delete_of_a_root_closes_its_workers() {
    let fake = FakeProvider::start();
    fake.set_responder(two_workers);
    let mut app = App::start(Some(app_config(&fake, 1)));
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    let t = app.call("thread/start", json!({}));
    let root = t["thread"]["id"].as_str().unwrap().to_owned();
    app.call("turn/start", json!({"thread_id": root, "prompt": "ROOT2"}));
    agent_status(&mut app, "quick", "queued");
    agent_status(&mut app, "slow", "running");
    app.wait_for("root turn completed", |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == root.as_str()
    });
    let e = app.call_err("thread/delete", json!({"thread_id": root}));
    assert_eq!(e["code"], "thread_busy", "{e}");
    app.call("thread/delete", json!({"thread_id": root, "force": true}));
    agent_status(&mut app, "slow", "cancelled");
    agent_status(&mut app, "quick", "cancelled");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !app.seen.iter().any(|v| v["method"] == "agent/mailbox"),
        "closed workers deliver nothing"
    );
}

/// The root spawns a stalled worker, then stalls itself (`ROOT4`).
fn busy_root(body: &Value) -> Option<Script> {
    if is_worker(body) {
        return Some(Script::stall(&["working"], Duration::from_secs(60)));
    }
    let rest = after(body, "ROOT4")?;
    if rest.iter().all(|m| m["role"] != "tool") {
        return Some(Script::tool_call(
            "call_w",
            "spawn_agent",
            r#"{"description":"long task","prompt":"WORKER long","name":"long","run_in_background":true}"#,
        ));
    }
    Some(Script::stall(&["thinking"], Duration::from_secs(60)))
}

#[test]
fn interrupting_a_running_root_turn_freezes_its_workers() {
    let fake = FakeProvider::start();
    fake.set_responder(busy_root);
    let mut app = App::start(Some(app_config(&fake, 2)));
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    let t = app.call("thread/start", json!({}));
    let root = t["thread"]["id"].as_str().unwrap().to_owned();
    app.call("turn/start", json!({"thread_id": root, "prompt": "ROOT4"}));
    agent_status(&mut app, "long", "running");
    // The root's second request streams and stalls: its turn is running.
    assert!(fake.wait_requests(3, Duration::from_secs(10)));
    app.call("turn/interrupt", json!({"thread_id": root}));
    let done = app.wait_for("root turn settled", |v| {
        (v["method"] == "turn/completed" || v["method"] == "turn/error")
            && v["params"]["thread_id"] == root.as_str()
    });
    assert_eq!(done["params"]["turn"]["status"], "interrupted", "{done}");
    let frozen = app
        .seen
        .iter()
        .any(|v| v["method"] == "agent/updated" && v["params"]["agent"]["status"] == "cancelled");
    if !frozen {
        agent_status(&mut app, "long", "cancelled");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!app.seen.iter().any(|v| v["method"] == "agent/mailbox"));
}

/// `ROOT3`: spawn an isolated worker; when its result arrives, close it.
fn isolated(body: &Value) -> Option<Script> {
    if is_worker(body) {
        return Some(Script::text(&["iso done"]));
    }
    let rest = after(body, "ROOT3")?;
    if rest.iter().all(|m| m["role"] != "tool") && notices(body, "iso") == 0 {
        return Some(Script::tool_call(
            "call_i",
            "spawn_agent",
            r#"{"description":"isolated task","prompt":"WORKER iso","name":"iso","run_in_background":true,"isolation":"worktree"}"#,
        ));
    }
    if notices(body, "iso") == 1 && tool_results(&messages(body), "close_agent") == 0 {
        return Some(Script::tool_call(
            "call_x",
            "close_agent",
            r#"{"target":"iso"}"#,
        ));
    }
    Some(Script::text(&["ack"]))
}

#[test]
fn an_isolated_worker_runs_in_a_worktree_removed_when_closed_clean() {
    let fake = FakeProvider::start();
    fake.set_responder(isolated);
    let mut app = App::start(Some(app_config(&fake, 2)));
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&app.workdir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    std::fs::write(app.workdir.join("a.txt"), "a").unwrap();
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    app.call(
        "initialize",
        json!({"client": {"name": "t", "version": "1"}}),
    );
    let t = app.call("thread/start", json!({}));
    let root = t["thread"]["id"].as_str().unwrap().to_owned();
    app.call("turn/start", json!({"thread_id": root, "prompt": "ROOT3"}));
    let done = agent_status(&mut app, "iso", "completed");
    let wt = done["params"]["agent"]["worktree_path"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(done["params"]["agent"]["isolation"], "worktree");
    assert!(std::path::Path::new(&wt).join("a.txt").exists(), "{wt}");
    let end = Instant::now() + Duration::from_secs(20);
    while std::path::Path::new(&wt).exists() {
        assert!(
            Instant::now() < end,
            "the clean worktree is removed after close_agent"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // settings/usage counts the worker conversation (it reported usage).
    let u = app.call("settings/usage", json!({}));
    assert_eq!(u["metrics"]["agents"], 1, "{u}");
}
