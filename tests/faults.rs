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
    for i in 0..n {
        let r = app.response(&format!("u{i}"));
        assert_eq!(r["error"]["code"], "thread_not_found", "{r}");
    }
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
