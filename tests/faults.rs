//! End-to-end tests of faults (issue 11): bad ids and bytes from clients, panics inside
//! the server, damaged store rows, crash recovery, a busy store, broken output, and
//! request ids. Every test runs the real binary over its own WUU_HOME.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

fn thread_id(v: &Value) -> String {
    v["thread"]["id"].as_str().unwrap().to_owned()
}

/// Names of the OS threads of process `pid` (Linux `/proc`).
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|s| s.trim().to_owned())
        .collect()
}

/// Every method that names a conversation, with params naming `id`.
fn methods_naming(id: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("turn/interrupt", json!({"thread_id": id})),
        ("turn/start", json!({"thread_id": id, "prompt": "x"})),
        ("turn/queue", json!({"thread_id": id, "prompt": "x"})),
        ("turn/steer", json!({"thread_id": id, "prompt": "x"})),
        ("turn/dequeue", json!({"thread_id": id, "queue_id": "c"})),
        ("turn/unsteer", json!({"thread_id": id, "steer_id": "c"})),
        ("run/start", json!({"thread_id": id, "prompt": "x"})),
        ("thread/resume", json!({"session_id": id})),
        ("thread/rename", json!({"thread_id": id, "title": "t"})),
        ("thread/archive", json!({"thread_id": id, "archived": true})),
        ("thread/delete", json!({"thread_id": id})),
        ("thread/fork", json!({"thread_id": id})),
        (
            "thread/history/read",
            json!({"thread_id": id, "cursor": "c"}),
        ),
        (
            "thread/activity/read",
            json!({"thread_id": id, "turn_id": "t", "item_id": "i", "last_item_id": "i"}),
        ),
        (
            "thread/content/read",
            json!({"thread_id": id, "turn_id": "t", "item_id": "i", "sha256": "00"}),
        ),
        (
            "config/model/update",
            json!({"thread_id": id, "model": "m"}),
        ),
        ("user-question/list", json!({"thread_id": id})),
    ]
}

#[test]
fn nul_and_control_characters_in_thread_ids_are_invalid_params_and_the_server_lives() {
    let mut app = App::start(None);
    for bad in ["\u{0}", "thr_\u{0}x", "a\nb", "\u{7f}", &"x".repeat(300)] {
        for (method, params) in methods_naming(bad) {
            let id = app.send(method, params);
            let r = app.response(&id);
            assert_eq!(
                r["error"]["code"], "invalid_params",
                "{method} {bad:?}: {r}"
            );
        }
    }
    // The raw line of the issue.
    app.write_raw(
        b"{\"id\":\"1\",\"method\":\"turn/interrupt\",\"params\":{\"thread_id\":\"\\u0000\"}}\n",
    );
    let r = app.response("1");
    assert_eq!(r["error"]["code"], "invalid_params", "{r}");
    assert!(app.call("thread/list", json!({}))["threads"].is_array());
    assert_eq!(app.child.try_wait().unwrap(), None, "the server died");
}

#[test]
fn multibyte_thread_ids_are_not_found_without_panicking() {
    let mut app = App::start(None);
    // The last 12 bytes split a character whatever way a byte tail is cut.
    for bad in [
        "é",
        "€€€€€x",
        "😀😀😀x",
        "thr_😀😀😀😀😀x",
        "a\u{301}\u{301}\u{301}\u{301}\u{301}\u{301}",
    ] {
        for (method, params) in methods_naming(bad) {
            if method == "user-question/list" {
                continue; // lists nothing for an unknown conversation
            }
            let id = app.send(method, params);
            let r = app.response(&id);
            assert_eq!(
                r["error"]["code"], "thread_not_found",
                "{method} {bad:?}: {r}"
            );
        }
    }
    assert_eq!(app.child.try_wait().unwrap(), None, "the server died");
}

#[test]
fn unknown_conversations_never_get_a_session_thread() {
    let mut app = App::start(None);
    app.call("initialize", json!({}));
    let pid = app.child.id();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let sampler = std::thread::spawn(move || {
        let (mut peak_total, mut peak_sessions) = (0usize, 0usize);
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
            let names = thread_names(pid);
            peak_total = peak_total.max(names.len());
            peak_sessions = peak_sessions.max(
                names
                    .iter()
                    .filter(|n| n.starts_with("wuu-session"))
                    .count(),
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        (peak_total, peak_sessions)
    });
    let n = 3000;
    let mut batch = Vec::new();
    for i in 0..n {
        let line = json!({"id": format!("u{i}"), "method": "turn/interrupt",
            "params": {"thread_id": format!("thr_unknown_{i}")}});
        batch.extend_from_slice(line.to_string().as_bytes());
        batch.push(b'\n');
    }
    app.write_raw(&batch);
    // The reviver's queue takes the first 1024; past it, a full queue is refused at
    // once (`overloaded`) rather than holding the reader.
    let mut not_found = 0;
    for i in 0..n {
        let r = app.response(&format!("u{i}"));
        match r["error"]["code"].as_str() {
            Some("thread_not_found") => not_found += 1,
            Some("overloaded") => {}
            _ => panic!("{r}"),
        }
    }
    assert!(not_found >= 1024, "{not_found}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (peak_total, peak_sessions) = sampler.join().unwrap();
    assert_eq!(
        peak_sessions, 0,
        "session threads were spawned for unknown conversations"
    );
    assert!(peak_total < 40, "{peak_total} OS threads");
}

#[test]
fn a_panicking_session_answers_internal_error_and_the_server_keeps_serving() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut cmd_env = App::spawn_in_env(
        home.path(),
        &ws.path().canonicalize().unwrap(),
        &[("WUU_FAULTS", "session_panic_on_rename")],
    );
    let app = &mut cmd_env;
    let a = thread_id(&app.call("thread/start", json!({})));
    let b = thread_id(&app.call("thread/start", json!({})));
    // Queue several requests behind the panicking one.
    let rename = app.send("thread/rename", json!({"thread_id": a, "title": "boom"}));
    let after = app.send("thread/resume", json!({"session_id": a}));
    let r = app.response(&rename);
    assert_eq!(r["error"]["code"], "internal_error", "{r}");
    let r = app.response(&after);
    // Either answered by the failed session (internal_error) or by a revived one.
    assert!(
        r["error"]["code"] == "internal_error" || r["result"]["thread"]["id"] == json!(a),
        "{r}"
    );
    // The conversation is served again, and so are others.
    let r = app.call("thread/resume", json!({"session_id": a}));
    assert_eq!(r["thread"]["id"], json!(a));
    let r = app.call("thread/resume", json!({"session_id": b}));
    assert_eq!(r["thread"]["id"], json!(b));
    assert!(
        app.call("thread/list", json!({}))["threads"]
            .as_array()
            .unwrap()
            .len()
            >= 2
    );
    assert_eq!(app.child.try_wait().unwrap(), None, "the server died");
}

fn db(app: &App) -> rusqlite::Connection {
    rusqlite::Connection::open(app.home.join("wuu.db")).unwrap()
}

#[test]
fn crash_recovery_settles_the_tool_item_rows_of_the_interrupted_turn() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let th = thread_id(&app.call("thread/start", json!({})));
    fake.push(Script::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo started; sleep 30"}"#,
    ));
    app.call("turn/start", json!({"thread_id": th, "prompt": "run"}));
    app.notification("item/toolCall/outputDelta");
    app.restart(); // SIGKILL mid-command
    let r = app.call("thread/resume", json!({"session_id": th}));
    let turn = &r["thread"]["turns"][0];
    assert_eq!(turn["status"], "interrupted", "{turn}");
    // The rows themselves are settled (not only the view of a full resume).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows: Vec<(String, String, String)> = {
            let c = db(&app);
            let mut st = c
                .prepare(
                    "SELECT item_type, coalesce(status, ''), body FROM items WHERE thread_id = ?1",
                )
                .unwrap();
            st.query_map([&th], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let open: Vec<_> = rows.iter().filter(|r| r.1 == "in_progress").collect();
        if open.is_empty() {
            let tool = rows
                .iter()
                .find(|r| r.0 == "tool_call")
                .expect("a tool row");
            assert_eq!(tool.1, "failed");
            let body: Value = serde_json::from_str(&tool.2).unwrap();
            assert_eq!(body["status"], "failed", "{body}");
            assert!(
                body["error"]
                    .as_str()
                    .unwrap()
                    .contains("outcome is unknown"),
                "{body}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rows still in progress: {open:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Paged reads see the settled rows too.
    let r = app.call(
        "thread/resume",
        json!({"session_id": th, "conversation_history": true}),
    );
    let text = r.to_string();
    assert!(!text.contains("\"in_progress\""), "{text}");
}

/// Runs `wuu exec ARGS` with a fresh home (a fake provider config) and closed stdin;
/// returns (exit code, stdout, stderr).
fn exec(args: &[&str]) -> (i32, String, String) {
    let fake = FakeProvider::start();
    for _ in 0..4 {
        fake.push(Script::text(&["done"]));
    }
    let (home, ws) = support::app::fresh_dirs(Some(&config_for(&fake.base_url())));
    let out = std::process::Command::new(support::app::wuu_bin())
        .arg("exec")
        .args(args)
        .current_dir(ws.path())
        .env("WUU_HOME", home.path())
        .env("HOME", home.path())
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn exec_subcommand_words_in_the_wrong_place_and_review_are_usage_errors() {
    for args in [
        &["--json", "resume", "thr_x", "p"][..],
        &["--json", "fork", "thr_x"],
        &["review", "--uncommitted"],
        &["--json", "review"],
    ] {
        let (code, stdout, stderr) = exec(args);
        assert_eq!(code, 2, "{args:?}: stdout {stdout} stderr {stderr}");
        assert!(
            !stdout.contains("\"turn_started\""),
            "{args:?} ran a turn: {stdout}"
        );
        assert!(
            stderr.contains(args.iter().find(|a| !a.starts_with('-')).unwrap()),
            "{stderr}"
        );
    }
    // Quoted or after `--`, the word is prompt text.
    let (code, stdout, _) = exec(&["--json", "--", "review", "this"]);
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout, _) = exec(&["--json", "review this please"]);
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn search_queries_are_bounded_and_searches_never_hold_up_listings() {
    let mut app = App::start(None);
    let big = "x".repeat(8 * 1024 * 1024);
    let e = app.call_err("thread/search", json!({"query": big}));
    assert_eq!(e["code"], "invalid_params", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("limit of 4096 bytes") && msg.len() < 200,
        "{msg}"
    );
    // Many conversations, many searches queued, then one listing.
    for i in 0..60 {
        app.call("thread/start", json!({}));
        let t = thread_id(&app.call("thread/start", json!({})));
        app.call(
            "thread/rename",
            json!({"thread_id": t, "title": format!("t{i}")}),
        );
    }
    let mut batch = Vec::new();
    let n = 300;
    for i in 0..n {
        let line = json!({"id": format!("s{i}"), "method": "thread/search", "params": {"query": "no such text anywhere"}});
        batch.extend_from_slice(line.to_string().as_bytes());
        batch.push(b'\n');
    }
    batch.extend_from_slice(b"{\"id\":\"L\",\"method\":\"thread/listAll\",\"params\":{}}\n");
    let before = app.seen.len();
    app.write_raw(&batch);
    let r = app.response("L");
    assert!(
        r["result"]["threads"].as_array().unwrap().len() >= 120,
        "{r}"
    );
    let searches_before = app.seen[before..]
        .iter()
        .filter(|v| v["id"].as_str().is_some_and(|i| i.starts_with('s')))
        .count();
    assert!(
        searches_before < n / 2,
        "the listing waited behind {searches_before} of {n} searches"
    );
    // The search lane's queue takes 256; the excess is refused at once (`overloaded`).
    let mut answered = 0;
    for i in 0..n {
        let r = app.response(&format!("s{i}"));
        if r["error"]["code"] == "overloaded" {
            continue;
        }
        assert!(r["result"]["results"].as_array().unwrap().is_empty(), "{r}");
        answered += 1;
    }
    assert!(answered >= 256, "{answered}");
}

#[test]
fn every_error_code_is_in_the_readme_and_the_schema_and_idle_interrupt_has_its_own() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(support::app::wuu_bin())
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(out.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mut schema_text = String::new();
    for e in std::fs::read_dir(out.path()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            schema_text.push_str(&std::fs::read_to_string(p).unwrap_or_default());
        }
    }
    for code in wuu_protocol::ErrorCode::ALL {
        let c = code.as_str();
        assert!(
            readme.contains(&format!("`{c}`")),
            "README lacks error code {c}"
        );
        assert!(
            schema_text.contains(&format!("\"{c}\"")),
            "the schema lacks error code {c}"
        );
    }
    let mut app = App::start(None);
    let th = thread_id(&app.call("thread/start", json!({})));
    let e = app.call_err("turn/interrupt", json!({"thread_id": th}));
    assert_eq!(e["code"], "no_active_turn", "{e}");
    let e = app.call_err("user-question/cancel", json!({"request_id": "uq_nope"}));
    assert_eq!(e["code"], "question_not_found", "{e}");
    let e = app.call_err("user-question/hold", json!({"request_id": "uq_nope"}));
    assert_eq!(e["code"], "question_not_found", "{e}");
}

/// A conversation with one completed turn ("first question" → "first answer"), then the
/// server stopped; returns (fake, first app (exited; holds the dirs), thread id).
fn stopped_conversation() -> (FakeProvider, App, String) {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let th = thread_id(&app.call("thread/start", json!({})));
    fake.push(Script::text(&["first answer"]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": th, "prompt": "first question"}),
    );
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    app.wait_for("turn end", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(turn)
    });
    app.close_stdin();
    assert_eq!(app.wait_exit(Duration::from_secs(30)), Some(0));
    (fake, app, th)
}

fn reopen(first: &App) -> App {
    App::spawn_in(&first.home, &first.workdir, &[])
}

#[test]
fn a_thread_with_damaged_metadata_is_listed_flagged_and_still_served() {
    let (_fake, first, th) = stopped_conversation();
    db(&first)
        .execute("UPDATE threads SET extra = '{\"x\":' WHERE id = ?1", [&th])
        .unwrap();
    let mut app = reopen(&first);
    let list = app.call("thread/list", json!({}));
    let t = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == json!(th))
        .unwrap_or_else(|| panic!("the damaged thread vanished from thread/list: {list}"))
        .clone();
    assert_eq!(t["damaged"], true, "{t}");
    assert!(t["damage"].as_str().unwrap().contains("extra"), "{t}");
    let r = app.call("thread/resume", json!({"session_id": th}));
    assert_eq!(r["thread"]["damaged"], true);
    assert_eq!(r["thread"]["turns"].as_array().unwrap().len(), 1, "{r}");
    // A rename works and does not overwrite the damaged text with a guess.
    app.call(
        "thread/rename",
        json!({"thread_id": th, "title": "still here"}),
    );
    let extra: String = db(&app)
        .query_row("SELECT extra FROM threads WHERE id = ?1", [&th], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(extra, "{\"x\":");
}

#[test]
fn a_damaged_item_is_a_placeholder_and_the_model_is_told_history_is_missing() {
    let (fake, first, th) = stopped_conversation();
    let n = db(&first)
        .execute(
            "UPDATE items SET body = '{\"role\":' WHERE thread_id = ?1 AND item_type = 'user_message'",
            [&th],
        )
        .unwrap();
    assert_eq!(n, 1);
    let mut app = reopen(&first);
    let r = app.call("thread/resume", json!({"session_id": th}));
    let turns = r["thread"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{r}");
    let items = turns[0]["items"].as_array().unwrap();
    let damaged: Vec<&Value> = items.iter().filter(|i| i["status"] == "damaged").collect();
    assert_eq!(damaged.len(), 1, "{items:?}");
    assert_eq!(damaged[0]["type"], "user_message");
    assert!(
        items.iter().any(|i| i["text"] == "first answer"),
        "{items:?}"
    );
    // Paged reads serve it too.
    for params in [
        json!({"session_id": th, "conversation_history": true}),
        json!({"session_id": th, "history_page": true}),
    ] {
        let r = app.call("thread/resume", params);
        assert!(r.to_string().contains("\"damaged\""), "{r}");
    }
    // The next turn's request carries the rest of the history and says what is missing.
    fake.push(Script::text(&["second answer"]));
    let before = fake.requests().len();
    let r = app.call(
        "turn/start",
        json!({"thread_id": th, "prompt": "second question"}),
    );
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    app.wait_for("turn end", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(turn)
    });
    let reqs = fake.requests();
    let body = reqs[before..]
        .iter()
        .find(|r| r.method == "POST")
        .expect("a model request")
        .body
        .to_string();
    assert!(body.contains("first answer"), "{body}");
    assert!(body.contains("damaged in the store"), "{body}");
    assert!(body.contains("second question"), "{body}");
}

#[test]
fn an_unknown_stored_permission_mode_fails_closed_to_read_only_and_is_reported() {
    let (fake, first, th) = stopped_conversation();
    db(&first)
        .execute(
            "UPDATE threads SET permission_mode = 'read_onIy' WHERE id = ?1",
            [&th],
        )
        .unwrap();
    let mut app = reopen(&first);
    let r = app.call("thread/resume", json!({"session_id": th}));
    assert_eq!(r["thread"]["permission_mode"], "read_only", "{r}");
    assert_eq!(r["thread"]["damaged"], true);
    assert!(
        r["thread"]["damage"]
            .as_str()
            .unwrap()
            .contains("read_onIy"),
        "{r}"
    );
    let marker = app.workdir.join("written-by-bash");
    fake.push(Script::tool_call(
        "call_w",
        "bash",
        &json!({"command": format!("touch {}", marker.display())}).to_string(),
    ));
    fake.push(Script::text(&["done"]));
    let r = app.call("turn/start", json!({"thread_id": th, "prompt": "write"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    app.wait_for("turn end", |v| {
        (v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(turn))
            || (v["method"] == "turn/error" && v["params"]["turn_id"] == json!(turn))
    });
    assert!(
        !marker.exists(),
        "bash ran under an unknown stored permission mode"
    );
}

#[test]
fn an_unknown_stored_turn_status_is_not_passed_to_clients() {
    let (_fake, first, th) = stopped_conversation();
    db(&first)
        .execute(
            "UPDATE turns SET status = 'exploded' WHERE thread_id = ?1",
            [&th],
        )
        .unwrap();
    let mut app = reopen(&first);
    for params in [
        json!({"session_id": th}),
        json!({"session_id": th, "conversation_history": true}),
        json!({"session_id": th, "history_page": true}),
    ] {
        let r = app.call("thread/resume", params);
        let text = r.to_string();
        assert!(!text.contains("\"status\":\"exploded\""), "{text}");
        assert_eq!(r["thread"]["turns"][0]["status"], "failed", "{text}");
    }
}

#[test]
fn numeric_ids_are_echoed_exactly_or_refused() {
    let mut app = App::start(None);
    for (raw, echoed) in [
        ("7", "7"),
        ("-12", "-12"),
        ("18446744073709551615", "18446744073709551615"),
    ] {
        app.write_raw(format!("{{\"id\":{raw},\"method\":\"thread/list\"}}\n").as_bytes());
        let line = app.wait_for(raw, |v| {
            v.get("result").is_some() || v.get("error").is_some()
        });
        assert!(line.get("result").is_some(), "{line}");
        // Compare the raw text of the echoed id.
        assert_eq!(line["id"].to_string(), echoed, "{line}");
    }
    for raw in ["123456789012345678901234567890", "-0", "1E2", "1.5", "7.0"] {
        app.write_raw(format!("{{\"id\":{raw},\"method\":\"thread/list\"}}\n").as_bytes());
        let line = app.wait_for(raw, |v| {
            v.get("error").is_some() || v.get("result").is_some()
        });
        assert_eq!(line["error"]["code"], "invalid_request", "{raw}: {line}");
        assert_eq!(line["id"], Value::Null, "{raw}: {line}");
    }
    assert!(app.call("thread/list", json!({}))["threads"].is_array());
}

#[test]
fn closing_our_stdout_with_stdin_open_interrupts_the_turn_and_exits() {
    use std::io::{BufRead, BufReader, Write};
    let fake = FakeProvider::start();
    let (home, ws) = support::app::fresh_dirs(Some(&config_for(&fake.base_url())));
    fake.push(Script::tool_call(
        "call_loop",
        "bash",
        r#"{"command":"while true; do echo tick; sleep 0.05; done"}"#,
    ));
    let mut child = support::app::raw_app_server(home.path(), Some(ws.path()))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut next = |out: &mut BufReader<_>| -> Value {
        line.clear();
        out.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    writeln!(
        stdin,
        r#"{{"id":"1","method":"thread/start","params":{{}}}}"#
    )
    .unwrap();
    let th = loop {
        let v = next(&mut out);
        if v["id"] == "1" {
            break v["result"]["thread"]["id"].as_str().unwrap().to_owned();
        }
    };
    writeln!(
        stdin,
        "{}",
        json!({"id": "2", "method": "turn/start", "params": {"thread_id": th, "prompt": "loop"}})
    )
    .unwrap();
    loop {
        let v = next(&mut out);
        if v["method"] == "item/toolCall/outputDelta" {
            break;
        }
    }
    drop(out); // the client closes its end of our stdout; stdin stays open
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        assert!(
            Instant::now() < deadline,
            "the server kept running after its output closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(1));
    drop(stdin);
    let c = rusqlite::Connection::open(home.path().join("wuu.db")).unwrap();
    let status: String = c
        .query_row(
            "SELECT status FROM turns WHERE thread_id = ?1",
            [&th],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "interrupted");
}

#[test]
fn a_write_lock_held_past_the_busy_timeout_is_store_busy_naming_the_database() {
    let mut app = App::start(None);
    app.call("thread/list", json!({}));
    let c = db(&app);
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let e = app.call_err("thread/start", json!({}));
    assert_eq!(e["code"], "store_busy", "{e}");
    assert!(e["message"].as_str().unwrap().contains("wuu.db"), "{e}");
    c.execute_batch("ROLLBACK").unwrap();
    app.call("thread/start", json!({}));
}

#[test]
fn folder_writes_under_a_held_write_lock_are_store_busy_and_lose_nothing() {
    let mut app = App::start(None);
    let r = app.call("sessionFolder/create", json!({"name": "kept"}));
    let kept = r["group"]["id"].as_str().unwrap().to_owned();
    let c = db(&app);
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    for (method, params) in [
        ("sessionFolder/create", json!({"name": "later"})),
        (
            "sessionFolder/update",
            json!({"id": kept, "name": "renamed"}),
        ),
    ] {
        let e = app.call_err(method, params);
        assert_eq!(e["code"], "store_busy", "{method}: {e}");
        assert!(e["message"].as_str().unwrap().contains("wuu.db"), "{e}");
    }
    c.execute_batch("ROLLBACK").unwrap();
    let r = app.call("sessionOrganization/list", json!({}));
    let folders = r["organization"]["folders"].as_array().unwrap();
    assert_eq!(folders.len(), 1, "{r}");
    assert_eq!(folders[0]["name"], "kept", "{r}");
    app.call(
        "sessionFolder/update",
        json!({"id": kept, "name": "renamed"}),
    );
}

#[test]
fn turn_admission_and_queue_under_a_held_write_lock_are_store_busy_naming_the_database() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let th = thread_id(&app.call("thread/start", json!({})));
    let c = db(&app);
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    for (method, params) in [
        ("turn/start", json!({"thread_id": th, "prompt": "hello"})),
        ("turn/queue", json!({"thread_id": th, "prompt": "later"})),
    ] {
        let e = app.call_err(method, params);
        assert_eq!(e["code"], "store_busy", "{method}: {e}");
        let m = e["message"].as_str().unwrap();
        assert!(m.contains("wuu.db"), "{method}: {e}");
    }
    c.execute_batch("ROLLBACK").unwrap();
    // Nothing was lost or left half-admitted: the conversation takes a turn afterwards.
    fake.push(Script::text(&["done"]));
    app.call("turn/start", json!({"thread_id": th, "prompt": "hello"}));
    app.wait_for("turn/completed", |v| v["method"] == "turn/completed");
}

#[test]
fn exec_on_a_store_locked_past_the_busy_timeout_exits_8_with_store_busy() {
    let fake = FakeProvider::start();
    fake.push(Script::text(&["done"]));
    let (home, ws) = support::app::fresh_dirs(Some(&config_for(&fake.base_url())));
    let run = || {
        std::process::Command::new(support::app::wuu_bin())
            .args(["exec", "--json", "hello"])
            .current_dir(ws.path())
            .env("WUU_HOME", home.path())
            .env("HOME", home.path())
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    // A first run creates the database.
    assert_eq!(run().status.code(), Some(0));
    let c = rusqlite::Connection::open(home.path().join("wuu.db")).unwrap();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = run();
    c.execute_batch("ROLLBACK").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(8), "{stdout}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result", "{last}");
    assert_eq!(last["error_category"], "store_busy", "{last}");
    assert_eq!(last["error_code"], "store_busy", "{last}");
    assert!(last["error"].as_str().unwrap().contains("wuu.db"), "{last}");
}
