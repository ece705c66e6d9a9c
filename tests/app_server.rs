//! End-to-end tests of the app-server core: transport, envelope errors, initialize,
//! configuration, and the conversation lifecycle, against the real binary.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::app::{config_for, App};

fn thread_id(v: &Value) -> String {
    v["thread"]["id"].as_str().unwrap().to_owned()
}

#[test]
fn initialize_reports_ready_with_config_and_needs_setup_without() {
    let mut app = App::start(Some(config_for("http://127.0.0.1:9/v1")));
    let r = app.call(
        "initialize",
        json!({"protocol_version": "wuu-app-server/v0.1", "client": {"name": "t"}}),
    );
    assert_eq!(r["status"], "ready", "{r}");
    assert_eq!(r["protocol_version"], "wuu-app-server/v0.1");
    assert_eq!(r["provider"], "fake");
    assert_eq!(r["model"], "fake-model");
    assert!(r["catalog_providers"].as_array().unwrap().len() > 3);
    assert!(r["core"]["version"].is_string());
    assert_eq!(r["permissions"]["mode"], "standard");
    assert!(r["max_parallel"].as_u64().unwrap() >= 1);

    let e = app.call_err("initialize", json!({"protocol_version": "v9"}));
    assert_eq!(e["code"], "invalid_params");

    let mut bare = App::start(None);
    let r = bare.call("initialize", json!({}));
    assert_eq!(r["status"], "needs_setup");
    assert_eq!(r["issues"][0]["code"], "missing_user_config");
}

#[test]
fn unknown_config_field_is_needs_setup_with_its_path() {
    let mut cfg = config_for("http://127.0.0.1:9/v1");
    cfg["agent"] = json!({"max_stepz": 3});
    let mut app = App::start(Some(cfg));
    let r = app.call("initialize", json!({}));
    assert_eq!(r["status"], "needs_setup");
    let msg = r["issues"].to_string();
    assert!(msg.contains("agent.max_stepz"), "{msg}");
}

#[test]
fn not_json_gets_parse_error_with_null_id_and_next_line_is_served() {
    let mut app = App::start(None);
    app.write_raw(b"{this is not json\n");
    let v = app.wait_for("parse error", |v| v.get("error").is_some());
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["code"], "parse_error");
    let r = app.call("thread/list", json!({}));
    assert!(r["threads"].is_array());
}

#[test]
fn crlf_and_blank_lines_are_accepted() {
    let mut app = App::start(None);
    app.write_raw(b"\n   \r\n\t\n{\"id\":\"a\",\"method\":\"thread/list\",\"params\":{}}\r\n\r\n");
    let r = app.response("a");
    assert!(r["result"]["threads"].is_array(), "{r}");
    // Numeric ids are echoed as numbers.
    app.write_raw(b"{\"id\":42,\"method\":\"thread/list\"}\n");
    let r = app.wait_for("numeric id", |v| v["id"] == json!(42));
    assert!(r["result"].is_object());
}

#[test]
fn oversized_line_is_refused_drained_and_next_request_served() {
    let mut app = App::start(None);
    // 70 MB on one line, written from a thread (the server drains as we write).
    let mut stdin_line = Vec::with_capacity(70 * 1024 * 1024 + 64);
    stdin_line
        .extend_from_slice(b"{\"id\":\"big\",\"method\":\"thread/list\",\"params\":{\"cwd\":\"");
    stdin_line.resize(70 * 1024 * 1024, b'x');
    stdin_line.extend_from_slice(b"\"}}\n{\"id\":\"after\",\"method\":\"thread/list\"}\n");
    app.write_raw(&stdin_line);
    drop(stdin_line);
    let e = app.wait_for("too long", |v| v.get("error").is_some());
    assert_eq!(e["error"]["code"], "invalid_request");
    assert!(e["error"]["message"].as_str().unwrap().contains("too long"));
    let r = app.response("after");
    assert!(r["result"]["threads"].is_array());
    // Memory stayed bounded: the 64 MiB cap never held the whole 70 MB line.
    let status = std::fs::read_to_string(format!("/proc/{}/status", app.child.id())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(hwm_kb < 100 * 1024, "peak RSS {hwm_kb} kB");
}

#[test]
fn unknown_method_unknown_field_and_wrong_type() {
    let mut app = App::start(None);
    let e = app.call_err("thread/frobnicate", json!({}));
    assert_eq!(e["code"], "method_not_found");
    let e = app.call_err("thread/list", json!({"bogus": 1}));
    assert_eq!(e["code"], "invalid_params");
    assert!(e["message"].as_str().unwrap().contains("bogus"), "{e}");
    let e = app.call_err("thread/rename", json!({"thread_id": 5, "title": "x"}));
    assert_eq!(e["code"], "invalid_params");
    // The path, then serde's message (which does not name the field itself).
    assert_eq!(
        e["message"], "invalid params: thread_id: invalid type: integer `5`, expected a string",
        "{e}"
    );
    // A nested param: array indexes and keys (located with the method's params schema).
    let bad_image = json!({"thread_id": "t", "prompt": "x", "images": [{"data": 5}]});
    let e = app.call_err("turn/start", bad_image);
    assert_eq!(
        e["message"],
        "invalid params: images[0].data: invalid type: integer `5`, expected a string",
        "{e}"
    );
    // The second time the compiled schema is reused: the same answer.
    let e = app.call_err("thread/rename", json!({"thread_id": 6, "title": "x"}));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid params: thread_id: "),
        "{e}"
    );
    let e = app.call_err("thread/rename", json!({"title": "x"}));
    assert_eq!(e["code"], "invalid_params");
    assert!(e["message"].as_str().unwrap().contains("thread_id"), "{e}");
    // Params that are not an object.
    app.write_raw(b"{\"id\":\"p\",\"method\":\"thread/list\",\"params\":[1]}\n");
    let r = app.response("p");
    assert_eq!(r["error"]["code"], "invalid_request");
}

#[test]
fn requests_work_before_initialize_and_unknown_thread_is_not_found() {
    let mut app = App::start(None);
    let e = app.call_err(
        "thread/rename",
        json!({"thread_id": "thr_nope", "title": "x"}),
    );
    assert_eq!(e["code"], "thread_not_found");
    let e = app.call_err("thread/resume", json!({"session_id": "thr_nope"}));
    assert_eq!(e["code"], "thread_not_found");
    let e = app.call_err("thread/resume", json!({}));
    assert_eq!(e["code"], "thread_not_found");
    let r = app.call("thread/start", json!({}));
    assert!(thread_id(&r).starts_with("thr_"));
}

#[test]
fn lifecycle_survives_restart() {
    let mut app = App::start(Some(config_for("http://127.0.0.1:9/v1")));
    let a = app.call("thread/start", json!({}));
    let a_id = thread_id(&a);
    let started = app.notification("thread/started");
    assert_eq!(started["params"]["thread"]["id"], json!(a_id));
    assert_eq!(a["thread"]["status"], "idle");
    assert_eq!(a["thread"]["model_provider"], "fake");
    assert_eq!(a["thread"]["engine_id"], "wuu");

    let b = app.call("thread/start", json!({"permission_mode": "read_only"}));
    let b_id = thread_id(&b);
    assert_eq!(b["thread"]["permission_mode"], "read_only");

    let r = app.call(
        "thread/rename",
        json!({"thread_id": a_id, "title": "First"}),
    );
    assert_eq!(r["thread"]["title"], "First");
    assert_eq!(r["thread"]["title_revision"], 1);
    let upd = app.notification("thread/updated");
    assert_eq!(upd["params"]["thread"]["title"], "First");
    // A stale revision never overwrites a newer title.
    app.call(
        "thread/rename",
        json!({"thread_id": a_id, "title": "Newer", "title_revision": 5}),
    );
    let r = app.call(
        "thread/rename",
        json!({"thread_id": a_id, "title": "Stale", "title_revision": 3}),
    );
    assert_eq!(r["thread"]["title"], "Newer");
    assert_eq!(r["thread"]["title_revision"], 5);

    let f = app.call("thread/fork", json!({"thread_id": a_id}));
    let f_id = thread_id(&f);
    assert_eq!(f["thread"]["forked_from_id"], json!(a_id));
    assert_eq!(f["thread"]["model_provider"], "fake");

    let listed = app.call("thread/list", json!({}));
    let ids: Vec<&str> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "{listed}");
    assert!(ids.contains(&a_id.as_str()) && ids.contains(&b_id.as_str()));

    let r = app.call(
        "thread/archive",
        json!({"thread_id": b_id, "archived": true}),
    );
    assert_eq!(r["thread"]["archived"], true);
    let archived = app.call("thread/listArchived", json!({}));
    assert_eq!(archived["threads"].as_array().unwrap().len(), 1);
    let e = app.call_err(
        "thread/delete",
        json!({"thread_id": a_id, "only_if_archived": true}),
    );
    assert_eq!(e["code"], "error");
    let r = app.call(
        "thread/delete",
        json!({"thread_id": b_id, "only_if_archived": true}),
    );
    assert_eq!(r["thread_id"], json!(b_id));
    let e = app.call_err("thread/resume", json!({"session_id": b_id}));
    assert_eq!(e["code"], "thread_not_found");

    let eph = app.call("thread/start", json!({"ephemeral": true}));
    let eph_id = thread_id(&eph);
    assert!(eph_id.starts_with("ephemeral-"));

    // Restart (kill -9): persisted conversations come back, the ephemeral one does not.
    app.restart();
    let listed = app.call("thread/listAll", json!({}));
    let ids: Vec<String> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(ids.contains(&a_id) && ids.contains(&f_id));
    let r = app.call("thread/resume", json!({"session_id": a_id}));
    assert_eq!(r["thread"]["title"], "Newer");
    let resumed = app.notification("thread/resumed");
    assert_eq!(resumed["params"]["thread"]["id"], json!(a_id));
    let e = app.call_err("thread/resume", json!({"session_id": eph_id}));
    assert_eq!(e["code"], "thread_not_found");
    // response_only suppresses the broadcast.
    app.call(
        "thread/resume",
        json!({"session_id": a_id, "response_only": true}),
    );
    // Resume without id picks the most recent visible conversation.
    let r = app.call("thread/resume", json!({}));
    assert!(ids.contains(&thread_id(&r)));
    let search = app.call("thread/search", json!({"query": "newer"}));
    let hits: Vec<&Value> = search["results"].as_array().unwrap().iter().collect();
    assert!(
        hits.iter().any(|h| h["thread"]["id"] == json!(a_id)),
        "{search}"
    );
}

#[test]
fn shutdown_answers_and_exits_zero_and_eof_exits_zero() {
    let mut app = App::start(None);
    app.call("thread/start", json!({}));
    let r = app.call("shutdown", json!({}));
    assert_eq!(r["ok"], true);
    assert_eq!(app.wait_exit(Duration::from_secs(10)), Some(0));

    let mut app = App::start(None);
    app.call("thread/start", json!({}));
    app.close_stdin();
    assert_eq!(app.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn requests_sent_after_shutdown_are_refused_not_left_unanswered() {
    // A client that pipelines writes its next requests before `shutdown` is answered and
    // keeps its end open: each of them is answered `server_closed` (a second `shutdown`
    // too), and nothing of them is done.
    let mut app = App::start(None);
    let t = app.call("thread/start", json!({}));
    let id = thread_id(&t);
    let mut lines = String::new();
    for (rid, method, params) in [
        ("s", "shutdown", json!({})),
        ("a", "config/read", json!({})),
        ("b", "thread/start", json!({})),
        (
            "c",
            "turn/queue",
            json!({"thread_id": id, "prompt": "after shutdown"}),
        ),
        ("d", "shutdown", json!({})),
    ] {
        lines += &(json!({"id": rid, "method": method, "params": params}).to_string() + "\n");
    }
    app.write_raw(lines.as_bytes());
    assert_eq!(app.response("s")["result"]["ok"], true);
    for rid in ["a", "b", "c", "d"] {
        let r = app.response(rid);
        assert_eq!(r["error"]["code"], "server_closed", "{rid}: {r}");
    }
    assert_eq!(app.wait_exit(Duration::from_secs(10)), Some(0));

    let db = rusqlite::Connection::open(app.home.join("wuu.db")).unwrap();
    let threads: i64 = db
        .query_row("SELECT count(*) FROM threads", [], |r| r.get(0))
        .unwrap();
    assert_eq!(threads, 1, "the refused thread/start stored nothing");
    let inputs: i64 = db
        .query_row("SELECT count(*) FROM inputs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(inputs, 0, "the refused turn/queue stored nothing");
}

#[test]
fn sigterm_exits_zero() {
    let mut app = App::start(None);
    app.call("thread/start", json!({}));
    let pid = app.child.id();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert_eq!(app.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn locked_database_makes_requests_wait_not_fail() {
    let mut app = App::start(None);
    let t = app.call("thread/start", json!({}));
    let id = thread_id(&t);
    let db = app.home.join("wuu.db");
    let locker = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE;").unwrap();
        std::thread::sleep(Duration::from_secs(2));
        conn.execute_batch("COMMIT;").unwrap();
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut ids = vec![];
    for i in 0..5 {
        ids.push(app.send(
            "thread/rename",
            json!({"thread_id": id, "title": format!("t{i}")}),
        ));
    }
    ids.push(app.send("thread/start", json!({})));
    for rid in ids {
        let r = app.response(&rid);
        assert!(r.get("error").is_none(), "{r}");
    }
    locker.join().unwrap();
}

#[test]
fn debug_commands_do_one_request() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(support::app::wuu_bin())
        .args(["debug", "app-server", "initialize", "--workdir"])
        .arg(ws.path())
        .env("WUU_HOME", home.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["protocol_version"], "wuu-app-server/v0.1");
    let out = std::process::Command::new(support::app::wuu_bin())
        .args(["debug", "app-server", "send", "--workdir"])
        .arg(ws.path())
        .args(["thread/start", "{}"])
        .env("WUU_HOME", home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["result"]["thread"]["id"]
        .as_str()
        .unwrap()
        .starts_with("thr_"));
}

#[test]
fn generate_json_schema_writes_files() {
    let out = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(support::app::wuu_bin())
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(out.path())
        .status()
        .unwrap();
    assert!(st.success());
    let bundle: Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("wuu-app-server.schema.json")).unwrap(),
    )
    .unwrap();
    assert!(bundle["methods"]["thread/start"]["params"].is_object());
    assert!(out
        .path()
        .join("methods/thread.start.params.json")
        .is_file());
    assert!(out.path().join("notifications/turn.started.json").is_file());
}

#[test]
fn damaged_row_does_not_hide_other_conversations() {
    let mut app = App::start(None);
    let a = thread_id(&app.call("thread/start", json!({})));
    let b = thread_id(&app.call("thread/start", json!({})));
    let db = app.home.join("wuu.db");
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute("UPDATE threads SET extra = '{not json' WHERE id = ?1", [&a])
        .unwrap();
    drop(conn);
    let listed = app.call("thread/list", json!({}));
    let ids: Vec<&str> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    // Both are listed; the damaged one is flagged (issue 11: never hidden).
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(
        ids.contains(&b.as_str()) && ids.contains(&a.as_str()),
        "{listed}"
    );
    let flagged: Vec<&Value> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["damaged"] == json!(true))
        .collect();
    assert_eq!(flagged.len(), 1, "{listed}");
    assert_eq!(flagged[0]["id"], json!(a));
    let all = app.call("thread/listAll", json!({}));
    assert_eq!(all["threads"].as_array().unwrap().len(), 2);
}

#[test]
fn model_catalog_refresh_asks_providers_and_keeps_options_on_failure() {
    let fake = support::fake_provider::FakeProvider::start();
    fake.set_models(&["m-one", "m-two"]);
    let mut cfg = config_for(&fake.base_url());
    cfg["providers"]["dead"] = json!({"type": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "model": "d-model"});
    let mut app = App::start(Some(cfg));
    let before = app.call(
        "config/model-catalog/providers",
        json!({"provider": "dead"}),
    );
    assert_eq!(before["providers"][0]["models"][0]["id"], "d-model");
    let r = app.call("config/model-catalog/refresh", json!({}));
    assert_eq!(r["provider_count"], 2);
    let fake_entry = r["catalog_providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "fake")
        .unwrap()
        .clone();
    let ids: Vec<&str> = fake_entry["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["m-one", "m-two"]);
    let dead = r["catalog_providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "dead")
        .unwrap()
        .clone();
    assert!(dead["refresh_error"].is_string(), "{dead}");
    assert_eq!(dead["models"][0]["id"], "d-model", "previous options kept");
    let e = app.call_err(
        "config/model-catalog/providers",
        json!({"provider": "nope"}),
    );
    assert_eq!(e["code"], "invalid_params");
}

#[test]
fn requests_read_before_end_of_input_are_all_answered() {
    for _ in 0..3 {
        let mut app = App::start(None);
        app.write_raw(
            b"{\"id\":\"a\",\"method\":\"thread/start\",\"params\":{}}\n{\"id\":\"b\",\"method\":\"thread/listAll\"}\n{\"id\":\"c\",\"method\":\"thread/list\"}\n",
        );
        app.close_stdin();
        for id in ["a", "b", "c"] {
            let r = app.response(id);
            assert!(
                r.get("result").is_some() || r["error"]["code"] == "server_closed",
                "{r}"
            );
        }
        assert_eq!(app.wait_exit(Duration::from_secs(10)), Some(0));
    }
}

#[test]
fn a_turn_start_read_just_before_end_of_input_is_admitted_then_interrupted() {
    // The answer used to depend on a race: the session saw the shutdown flag before or
    // after it handled the request (`server_closed`, nothing stored, or a stored turn).
    let fake = support::fake_provider::FakeProvider::start();
    for round in 0..5 {
        fake.push(support::fake_provider::Script::stall(
            &["partial"],
            Duration::from_secs(30),
        ));
        let mut app = App::start(Some(config_for(&fake.base_url())));
        let th = app.call("thread/start", json!({}))["thread"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let line = json!({"id": "t", "method": "turn/start",
            "params": {"thread_id": th, "prompt": format!("keep me {round}")}});
        app.write_raw(format!("{line}\n").as_bytes());
        app.close_stdin();
        let r = app.response("t");
        assert!(r.get("result").is_some(), "round {round}: {r}");
        assert_eq!(app.wait_exit(Duration::from_secs(20)), Some(0));
        // The input is stored and the turn settled as interrupted.
        app.restart();
        let t = app.call("thread/resume", json!({"session_id": th}));
        let turn = &t["thread"]["turns"][0];
        assert_eq!(turn["status"], "interrupted", "round {round}: {t}");
        assert!(
            turn["items"]
                .to_string()
                .contains(&format!("keep me {round}")),
            "round {round}: {t}"
        );
    }
}

#[test]
fn an_acknowledged_interrupt_ends_the_turn_interrupted_even_if_the_answer_finished_meanwhile() {
    // The whole answer fits in the server's buffers but not in its output: the outbox
    // (512 slots, a slot holds one engine batch's delta frames), the writer's 256 KiB
    // and the pipe hold a few thousand frames of 1 KB, the engine's channel a few
    // batches more. While the client does not read, the engine gets the answer's end
    // and finishes, and the session is still projecting, blocked on the output. The
    // interrupt it then acknowledges must end the turn interrupted (spec rule 9), not
    // completed.
    //
    // The window in which this happens is narrow (about the engine channel's few
    // batches) and moves with how full the batches are, which depends on the load:
    // 7,150–7,250 deltas for one server alone on the 2-core VM, scattered over
    // 4,100–6,550 with the sweep's servers running together. Below it the turn ends
    // before the interrupt is read (the interrupt finds nothing to stop); above it the
    // engine is still streaming. So the test runs a sweep of answer lengths at once and
    // checks every run whose interrupt was acknowledged. With the outcome winning over
    // the stop, 3 of 3 sweeps failed.
    let runs: Vec<_> = (4_000..=7_400)
        .step_by(100)
        .map(|n| (n, std::thread::spawn(move || interrupt_behind_a_backlog(n))))
        .collect();
    let mut acknowledged = 0;
    for (n, run) in runs {
        let (ok, status) = run.join().unwrap();
        if ok == Value::Bool(true) {
            acknowledged += 1;
            assert_eq!(
                status, "interrupted",
                "{n} deltas: acknowledged, then {status}"
            );
        } else {
            assert_eq!(
                status, "completed",
                "{n} deltas: not acknowledged, {status}"
            );
        }
    }
    assert!(
        acknowledged > 0,
        "no run of the sweep had an interrupt to stop"
    );
}

/// Starts a turn whose answer is `deltas` deltas of 1 KB, does not read until the
/// provider sent it all (plus 3 s), then interrupts; returns the interrupt's `ok` and
/// the turn's final status.
fn interrupt_behind_a_backlog(deltas: usize) -> (Value, Value) {
    use std::io::{BufRead, BufReader, Write};
    let fake = support::fake_provider::FakeProvider::start();
    fake.push(support::fake_provider::Script::many_deltas(
        deltas,
        &"x".repeat(1000),
    ));
    let (home, ws) = support::app::fresh_dirs(Some(&config_for(&fake.base_url())));
    let mut child = support::app::raw_app_server(home.path(), Some(ws.path()))
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut next = || {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "server ended");
        serde_json::from_str::<Value>(&line).unwrap()
    };
    writeln!(
        stdin,
        r#"{{"id":"s","method":"thread/start","params":{{}}}}"#
    )
    .unwrap();
    let th = loop {
        let v = next();
        if v["id"] == "s" {
            break v["result"]["thread"]["id"].as_str().unwrap().to_owned();
        }
    };
    let start = json!({"id": "t", "method": "turn/start",
        "params": {"thread_id": th, "prompt": "a long answer"}});
    writeln!(stdin, "{start}").unwrap();
    // Not reading: the provider sends everything, the server's buffers fill.
    assert!(fake.wait_requests(1, Duration::from_secs(10)));
    std::thread::sleep(Duration::from_secs(3));
    let interrupt = json!({"id": "i", "method": "turn/interrupt", "params": {"thread_id": th}});
    writeln!(stdin, "{interrupt}").unwrap();
    let (mut acked, mut status) = (None, None);
    while acked.is_none() || status.is_none() {
        let v = next();
        if v["id"] == "i" {
            acked = Some(v.clone());
        }
        if v["method"] == "turn/completed" || v["method"] == "turn/error" {
            status = Some(v["params"]["turn"]["status"].clone());
        }
    }
    drop(stdin);
    let _ = child.wait();
    (acked.unwrap()["result"]["ok"].clone(), status.unwrap())
}

#[test]
fn corrupt_database_is_reported_by_initialize_and_requests_fail_cleanly() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("wuu.db"), vec![b'g'; 4096]).unwrap();
    let mut app = App::spawn_in(home.path(), &ws.path().canonicalize().unwrap(), &[]);
    let r = app.call("initialize", json!({}));
    assert_eq!(r["status"], "needs_setup", "{r}");
    assert!(r["issues"].to_string().contains("store_unavailable"), "{r}");
    let e = app.call_err("thread/start", json!({}));
    assert_eq!(e["code"], "internal_error");
    let e = app.call_err("thread/list", json!({}));
    assert_eq!(e["code"], "internal_error");
}

#[test]
fn database_from_a_newer_build_is_reported_by_the_first_initialize() {
    // `initialize` does not wait for the store to open: the quick header check at start
    // finds what it can (here: a schema version this build cannot migrate) at once.
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(home.path().join("wuu.db")).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let mut app = App::spawn_in(home.path(), &ws.path().canonicalize().unwrap(), &[]);
    let r = app.call("initialize", json!({}));
    assert_eq!(r["status"], "needs_setup", "{r}");
    let issues = r["issues"].to_string();
    assert!(issues.contains("store_unavailable"), "{r}");
    assert!(issues.contains("newer than this build"), "{r}");
    let e = app.call_err("thread/start", json!({}));
    assert_eq!(e["code"], "internal_error");
}

#[test]
fn a_fresh_home_serves_at_once_while_its_database_is_created() {
    // The new database is created and migrated off the startup path; requests sent
    // right after `initialize` (which does not wait for it) still find it complete.
    for _ in 0..3 {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let mut app = App::spawn_in(home.path(), &ws.path().canonicalize().unwrap(), &[]);
        let r = app.call("initialize", json!({}));
        assert!(
            r.get("issues")
                .is_none_or(|i| !i.to_string().contains("store")),
            "{r}"
        );
        let l = app.send("thread/list", json!({}));
        let t = app.send("thread/start", json!({}));
        let a = app.send("thread/listAll", json!({}));
        assert!(app.response(&l)["result"]["threads"].is_array());
        let started = app.response(&t);
        let id = started["result"]["thread"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(app.response(&a)["result"]["threads"].is_array());
        let listed = app.call("thread/list", json!({}));
        assert_eq!(listed["threads"][0]["id"], id, "{listed}");
    }
}

#[test]
fn oversized_ids_titles_and_outside_cwd_are_refused_without_echoing_megabytes() {
    let mut app = App::start(None);
    let long_id = "x".repeat(100_000);
    let id = app.send("thread/rename", json!({"thread_id": long_id, "title": "t"}));
    let r = app.response(&id);
    assert_eq!(r["error"]["code"], "invalid_params");
    assert!(r.to_string().len() < 1000);
    let t = app.call("thread/start", json!({}));
    let tid = thread_id(&t);
    let e = app.call_err(
        "thread/rename",
        json!({"thread_id": tid, "title": "y".repeat(10_000)}),
    );
    assert_eq!(e["code"], "invalid_params");
    let e = app.call_err("thread/start", json!({"cwd": "/"}));
    assert_eq!(e["code"], "invalid_params");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{e}"
    );
}

#[test]
fn listings_see_another_process_within_the_heartbeat_interval() {
    let mut a = App::start(None);
    a.call("thread/start", json!({}));
    let mut b = App::spawn_in(&a.home.clone(), &a.workdir.clone(), &[]);
    assert_eq!(
        b.call("thread/list", json!({}))["threads"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // B answers from its cache until it notices A's commit (lease-thread heartbeat).
    a.call("thread/start", json!({}));
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let n = b.call("thread/list", json!({}))["threads"]
            .as_array()
            .unwrap()
            .len();
        if n == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "B never saw A's conversation"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A build without the `postgres` feature refuses a PostgreSQL store clearly (from
/// `WUU_STORE_URL` or the config's `store.url`) and never shows the URL's password.
#[cfg(not(feature = "postgres"))]
#[test]
fn a_build_without_postgres_refuses_a_postgresql_store() {
    let secret = "pw-never-shown-91c2";
    let url = format!("postgresql://wuu:{secret}@127.0.0.1:5432/wuu");
    let home = tempfile::tempdir().unwrap();
    let mut cmd = support::app::raw_app_server(home.path(), None);
    let out = cmd
        .env("WUU_STORE_URL", &url)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("this wuu was built without PostgreSQL support"),
        "{stderr}"
    );
    assert!(
        stderr.contains("postgresql://wuu@127.0.0.1:5432/wuu"),
        "{stderr}"
    );
    assert!(!stderr.contains(secret), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));

    // The same from the config file.
    std::fs::write(
        home.path().join("config.json"),
        json!({"store": {"url": url}}).to_string(),
    )
    .unwrap();
    let out = support::app::raw_app_server(home.path(), None)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("this wuu was built without PostgreSQL support"),
        "{stderr}"
    );
    assert!(!stderr.contains(secret), "{stderr}");

    // A config refused for another error still names its store: the server never
    // falls back to the SQLite file of the home.
    std::fs::remove_file(home.path().join(wuu_store::DB_FILE)).ok();
    std::fs::write(
        home.path().join("config.json"),
        json!({"store": {"url": url, "bogus": 1}}).to_string(),
    )
    .unwrap();
    let out = support::app::raw_app_server(home.path(), None)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("this wuu was built without PostgreSQL support"),
        "{stderr}"
    );
    assert!(!stderr.contains(secret), "{stderr}");
    assert!(!home.path().join(wuu_store::DB_FILE).exists());
    std::fs::write(
        home.path().join("config.json"),
        json!({"store": {"url": 5}}).to_string(),
    )
    .unwrap();
    let out = support::app::raw_app_server(home.path(), None)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("store.url is not a string"), "{stderr}");
    assert!(!home.path().join(wuu_store::DB_FILE).exists());
}

/// A turn's own transactions leave its messages past the text index's watermark; the
/// heartbeat writes them into the index, and the search finds them either way.
#[test]
fn the_heartbeat_writes_the_messages_of_turns_into_the_text_index() {
    let fake = support::fake_provider::FakeProvider::start();
    fake.push(support::fake_provider::Script::text(&[
        "a zebrafinch ",
        "answer",
    ]));
    let mut app = App::start_with_env(
        Some(config_for(&fake.base_url())),
        &[("WUU_LEASE_STALE_MS", "1000")],
    );
    let th = thread_id(&app.call("thread/start", json!({})));
    app.call(
        "turn/start",
        json!({"thread_id": th, "prompt": "where is the quokka"}),
    );
    app.notification("turn/completed");
    let db = rusqlite::Connection::open(app.home.join("wuu.db")).unwrap();
    let matches = |phrase: &str| -> i64 {
        db.query_row(
            "SELECT count(*) FROM item_text WHERE item_text MATCH ?1",
            [phrase],
            |r| r.get(0),
        )
        .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while matches("\"quokka\"") + matches("\"zebrafinch\"") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the messages were not indexed within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for query in ["quokka", "zebrafinch"] {
        let search = app.call("thread/search", json!({"query": query}));
        assert_eq!(search["results"][0]["thread"]["id"], json!(th), "{search}");
    }
}
