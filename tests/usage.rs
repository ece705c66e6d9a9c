//! End-to-end tests of issue 14 (usage views) against the real binary: `usage/overview`
//! and `settings/usage` from the store's usage records, days in an IANA zone, the
//! engines' local ledgers in a temp `HOME`, and retention after delete/archive.

mod support;

use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, FakeUsage, Script};
use wuu_store::{Store, ThreadRow, TurnRow, UsageRow};

fn ms(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

/// Writes a thread with one turn per `(turn id, at)` and one usage record each.
fn seed(
    home: &Path,
    cwd: &Path,
    thread: &str,
    engine: &str,
    engine_ref: Option<&str>,
    usage: &[(&str, &str, u64)],
) {
    let mut store = Store::open_home(home).unwrap();
    let mut t = ThreadRow::new(thread, cwd.to_string_lossy(), ms("2024-01-01T00:00:00Z"));
    t.engine_id = engine.into();
    t.provider = "fake".into();
    t.model = "fake-model".into();
    if let Some(r) = engine_ref {
        t.extra = json!({"engine_ref": r});
    }
    store.insert_thread(&t).unwrap();
    for (turn, at, input) in usage {
        let mut tr = TurnRow::new(thread, *turn, "user", ms(at));
        tr.status = "completed".into();
        tr.provider = "fake".into();
        tr.model = "fake-model".into();
        tr.completed_at_ms = Some(ms(at) + 1);
        store.insert_turn(&tr).unwrap();
        store
            .insert_usage(&UsageRow {
                thread_id: thread.into(),
                turn_id: (*turn).into(),
                provider: "fake".into(),
                model: "fake-model".into(),
                at_ms: ms(at),
                input_tokens: *input,
                output_tokens: 1,
                cache_read_tokens: 0,
                cache_creation_tokens: 0,
                reasoning_tokens: 0,
            })
            .unwrap();
    }
}

fn days(v: &Value) -> Vec<(String, u64)> {
    v["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["date"].as_str().unwrap().to_owned(),
                d["input_tokens"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn no_records_give_zeros_and_unknown_zones_are_refused() {
    let mut app = App::start(None);
    let o = app.call("usage/overview", json!({}));
    let r = &o;
    assert_eq!(r["total_sessions"], 0);
    assert_eq!(r["days"], json!([]));
    assert_eq!(r["metrics"]["turns"], 0);
    assert_eq!(r["metrics"]["input_tokens"], 0);
    assert_eq!(r["metrics"]["cache_hit_rate"], 0.0);
    assert_eq!(r["metrics"]["active_days"], 0);
    assert_eq!(r["metrics"]["date_range"], json!(["", ""]));
    let s = app.call("settings/usage", json!({"timezone": "Europe/Paris"}));
    assert_eq!(s["days"], json!([]));
    assert_eq!(s["model_breakdowns"], json!([]));
    assert_eq!(s["skill_usage"], json!([]));
    assert!(s["generated_at"].as_str().unwrap().ends_with('Z'));
    for method in ["usage/overview", "settings/usage"] {
        let e = app.call_err(method, json!({"timezone": "Nowhere/Atlantis"}));
        assert_eq!(e["code"], "invalid_params", "{e}");
        assert!(
            e["message"].as_str().unwrap().contains("invalid timezone"),
            "{e}"
        );
        let e = app.call_err(method, json!({"timezone": 5}));
        assert_eq!(e["code"], "invalid_params", "{e}");
        let e = app.call_err(method, json!({"range": "7d"}));
        assert_eq!(e["code"], "invalid_params", "{e}");
    }
    // The server keeps serving.
    assert_eq!(app.call("usage/overview", json!({}))["total_sessions"], 0);
}

#[test]
fn days_are_cut_in_the_requested_zone_across_dst() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // 2024-03-10 02:00 PST → 03:00 PDT in Los Angeles.
    seed(
        home.path(),
        ws.path(),
        "thr_a",
        "wuu",
        None,
        &[
            ("t1", "2024-03-10T07:30:00Z", 1), // 23:30 PST on the 9th
            ("t2", "2024-03-10T08:30:00Z", 2), // 00:30 PST on the 10th
            ("t3", "2024-03-11T07:30:00Z", 4), // 00:30 PDT on the 11th (23:30 at -08)
        ],
    );
    seed(
        home.path(),
        ws.path(),
        "thr_b",
        "",
        None,
        &[("t1", "2024-03-11T06:30:00Z", 8)],
    );
    // Two loads of one skill (`/name` and `name`) in thr_a's first turn.
    {
        let mut store = Store::open_home(home.path()).unwrap();
        for (n, arg) in ["/review", "review"].iter().enumerate() {
            store
                .upsert_item(&wuu_store::ItemRow {
                    thread_id: "thr_a".into(),
                    turn_id: "t1".into(),
                    id: format!("it_{n}"),
                    item_type: "tool_call".into(),
                    status: Some("completed".into()),
                    seq: 0,
                    body: json!({"type": "tool_call", "name": "load_skill",
                                 "arguments": json!({"name": arg}).to_string()}),
                })
                .unwrap();
        }
    }
    let mut app = App::spawn_in(home.path(), ws.path(), &[]);
    let la = app.call("usage/overview", json!({"timezone": "America/Los_Angeles"}));
    let r = &la;
    assert_eq!(
        days(r),
        vec![
            ("2024-03-09".to_owned(), 1),
            ("2024-03-10".to_owned(), 10),
            ("2024-03-11".to_owned(), 4)
        ]
    );
    assert_eq!(r["total_sessions"], 2);
    assert_eq!(r["metrics"]["turns"], 4);
    assert_eq!(r["metrics"]["active_days"], 3);
    assert_eq!(
        r["metrics"]["date_range"],
        json!(["2024-03-09", "2024-03-11"])
    );
    let utc = app.call("usage/overview", json!({}));
    assert_eq!(
        days(&utc),
        vec![("2024-03-10".to_owned(), 3), ("2024-03-11".to_owned(), 12)]
    );
    let s = app.call("settings/usage", json!({"timezone": "America/Los_Angeles"}));
    assert_eq!(days(&s), days(r));
    assert_eq!(s["metrics"], r["metrics"]);
    let mb = &s["model_breakdowns"];
    assert_eq!(mb.as_array().unwrap().len(), 1, "{mb}");
    assert_eq!(mb[0]["provider"], "fake");
    assert_eq!(mb[0]["input_tokens"], 15);
    assert_eq!(mb[0]["sessions"], 2);
    assert_eq!(s["skill_usage"], json!([{"name": "review", "count": 2}]));
}

#[test]
fn a_real_turn_is_counted_and_deleting_its_conversation_drops_it() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let run = |app: &mut App| {
        fake.push(Script::text(&["hi"]).usage(FakeUsage {
            input: 100,
            cached: 40,
            output: 7,
            reasoning: 0,
        }));
        let tid = app.call("thread/start", json!({}))["thread"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        app.call("turn/start", json!({"thread_id": tid, "prompt": "hello"}));
        let t = tid.clone();
        app.wait_for("turn/completed", move |v| {
            v["method"] == "turn/completed" && v["params"]["thread_id"] == json!(t)
        });
        tid
    };
    let a = run(&mut app);
    let b = run(&mut app);
    let o = app.call("usage/overview", json!({})).clone();
    assert_eq!(o["total_sessions"], 2);
    assert_eq!(o["metrics"]["input_tokens"], 120, "{o}");
    assert_eq!(o["metrics"]["cache_read_tokens"], 80);
    assert_eq!(o["metrics"]["output_tokens"], 14);
    assert_eq!(o["metrics"]["turns"], 2);
    assert_eq!(o["days"].as_array().unwrap().len(), 1);
    // Archived history is retained: still counted.
    app.call("thread/archive", json!({"thread_id": a, "archived": true}));
    assert_eq!(app.call("usage/overview", json!({}))["total_sessions"], 2);
    // Deleted history is not: its usage goes with it.
    app.call("thread/delete", json!({"thread_id": b}));
    let o = app.call("usage/overview", json!({})).clone();
    assert_eq!(o["total_sessions"], 1);
    assert_eq!(o["metrics"]["input_tokens"], 60);
}

fn write_lines(path: &Path, lines: &[Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::fs::File::create(path).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn codex_rollout(home: &Path, id: &str, at: &str, input: u64) {
    write_lines(
        &home.join(format!(
            ".codex/sessions/2024/05/01/rollout-2024-05-01T10-00-00-{id}.jsonl"
        )),
        &[
            json!({"timestamp": at, "type": "session_meta", "payload": {"id": id, "cwd": "/w"}}),
            json!({"timestamp": at, "type": "event_msg", "payload": {"type": "token_count",
                "info": {"total_token_usage": {"input_tokens": input, "cached_input_tokens": 0,
                                               "output_tokens": 2, "reasoning_output_tokens": 0,
                                               "total_tokens": input + 2},
                         "last_token_usage": null}}}),
        ],
    );
}

#[test]
fn engine_breakdowns_read_the_local_ledgers_of_a_temp_home() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    // Our own conversations: one built-in, one Codex conversation that claimed a native
    // Codex session.
    seed(
        home.path(),
        ws.path(),
        "thr_w",
        "wuu",
        None,
        &[("t1", "2024-05-01T10:00:00Z", 5)],
    );
    let claimed = "0199a213-81c0-7800-8aa1-000000000001";
    let foreign = "0199a213-81c0-7800-8aa1-000000000002";
    seed(
        home.path(),
        ws.path(),
        "thr_c",
        "codex",
        Some(claimed),
        &[("t1", "2024-05-01T10:00:00Z", 30)],
    );
    codex_rollout(user.path(), claimed, "2024-05-01T10:00:00.000Z", 30);
    codex_rollout(user.path(), foreign, "2024-05-02T10:00:00.000Z", 70);
    // Claude Code: one transcript outside Wuu.
    write_lines(
        &user
            .path()
            .join(".claude/projects/-w/5f8a0c2e-1111-4222-8333-944445555666.jsonl"),
        &[
            json!({"type": "assistant", "sessionId": "5f8a0c2e-1111-4222-8333-944445555666",
                 "requestId": "req_1", "timestamp": "2024-05-02T11:00:00.000Z",
                 "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "role": "assistant",
                             "content": [], "usage": {"input_tokens": 9, "output_tokens": 3,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
        ],
    );
    let user_home = user.path().to_str().unwrap();
    let env = [
        ("HOME", user_home),
        ("CODEX_HOME", ""),
        ("XDG_DATA_HOME", ""),
        ("CLAUDE_CONFIG_DIR", ""),
    ];
    let mut app = App::spawn_in_env(home.path(), ws.path(), &env);
    let s = app.call("settings/usage", json!({})).clone();
    let eb: Vec<Value> = s["engine_breakdowns"].as_array().unwrap().clone();
    let by = |id: &str| eb.iter().find(|e| e["engine_id"] == id).cloned();
    let codex = by("codex").expect("codex entry");
    assert_eq!(codex["in_wuu"]["input_tokens"], 30, "{s}");
    assert_eq!(
        codex["outside"]["input_tokens"], 70,
        "the claimed native session is not counted twice: {s}"
    );
    let claude = by("claude").expect("claude entry");
    assert_eq!(claude["in_wuu"]["input_tokens"], 0);
    assert_eq!(claude["outside"]["input_tokens"], 9);
    let wuu = by("wuu").expect("wuu entry");
    assert_eq!(wuu["in_wuu"]["input_tokens"], 5);
    assert!(
        wuu.get("outside").is_none(),
        "no ledger → no outside: {wuu}"
    );
    // No OpenCode data dir in this HOME: no entry.
    assert!(by("opencode").is_none());
    // Days: our own usage on the 1st; the outside rows on the 2nd land in `outside`.
    let d = s["days"].as_array().unwrap();
    assert_eq!(d.len(), 2, "{s}");
    assert_eq!(d[0]["date"], "2024-05-01");
    assert_eq!(d[0]["input_tokens"], 35);
    assert!(d[0].get("outside").is_none());
    assert_eq!(d[1]["date"], "2024-05-02");
    assert_eq!(d[1]["input_tokens"], 0);
    assert_eq!(d[1]["turns"], 0);
    assert_eq!(d[1]["outside"]["input_tokens"], 79);
    assert_eq!(s["metrics"]["active_days"], 1);
    // The overview reads only our records.
    let o = app.call("usage/overview", json!({})).clone();
    assert_eq!(o["days"].as_array().unwrap().len(), 1);
    assert!(o["days"][0].get("outside").is_none());
}

/// A fake `codex app-server` that answers the handshake and `account/rateLimits/read`.
const FAKE_CODEX: &str = r#"#!/usr/bin/env bash
while IFS= read -r line; do
  [[ $line =~ \"id\":([0-9]+) ]] || continue
  id="${BASH_REMATCH[1]}"
  case "$line" in
    *'"method":"initialize"'*) echo "{\"id\":$id,\"result\":{\"userAgent\":\"fake/1\"}}" ;;
    *'"method":"account/rateLimits/read"'*) echo "{\"id\":$id,\"result\":{\"rateLimits\":{\"limitId\":\"codex\",\"planType\":\"plus\",\"primary\":{\"usedPercent\":42,\"windowDurationMins\":300,\"resetsAt\":1900000000}},\"accountId\":\"acct-1\"}}" ;;
    *) echo "{\"id\":$id,\"error\":{\"code\":-32601,\"message\":\"fake\"}}" ;;
  esac
done
"#;

/// A one-shot HTTP server answering every request with `body`.
fn json_server(body: Value) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let body = body.to_string();
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut rd = std::io::BufReader::new(conn.try_clone().unwrap());
                loop {
                    let mut l = String::new();
                    if rd.read_line(&mut l).unwrap_or(0) == 0 || l.trim().is_empty() {
                        break;
                    }
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn engine_list_include_quota_reports_services_engines_and_statistics() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let codex = user.path().join("fake-codex");
    std::fs::write(&codex, FAKE_CODEX).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        home.path().join("config.json"),
        json!({"agent": {"auto_title": false}, "default_provider": "fake",
               "providers": {"fake": {"type": "openai-compatible", "base_url": "https://openrouter.ai/api/v1",
                                      "model": "fake-model", "headers": {"Authorization": "Bearer sk-or-test"}}}})
        .to_string(),
    )
    .unwrap();
    seed(
        home.path(),
        ws.path(),
        "thr_w",
        "wuu",
        None,
        &[("t1", "2024-05-01T10:00:00Z", 5)],
    );
    let or = json_server(json!({"data": {"total_credits": 12.5, "total_usage": 2.25}}));
    let env = [
        ("HOME", user.path().to_str().unwrap()),
        ("CLAUDE_CONFIG_DIR", ""),
        ("WUU_CODEX_BINARY", codex.to_str().unwrap()),
        ("WUU_QUOTA_OPENROUTER_URL", or.as_str()),
    ];
    let mut app = App::spawn_in_env(home.path(), ws.path(), &env);
    // Plain engine/list carries none of it.
    let plain = app.call("engine/list", json!({"include_models": false}));
    assert!(plain.get("subscription_providers").is_none(), "{plain}");
    assert!(plain["engines"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e.get("quota").is_none() && e.get("local_usage").is_none()));
    let r = app.call(
        "engine/list",
        json!({"include_models": false, "include_quota": true}),
    );
    let sp = &r["subscription_providers"][0];
    assert_eq!(sp["name"], "fake");
    assert_eq!(sp["quota"]["status"], "available", "{r}");
    assert_eq!(sp["quota"]["kind"], "balance");
    assert_eq!(
        sp["quota"]["balances"],
        json!([{"currency": "USD", "amount": "10.25"}])
    );
    assert_eq!(sp["local_usage"]["input_tokens"], 5);
    assert_eq!(sp["local_usage"]["reported_turns"], 1);
    assert_eq!(sp["latest_request"]["status"], "completed");
    assert_eq!(sp["latest_request"]["usage_reported"], true);
    assert!(!r.to_string().contains("sk-or-test"));
    let engines = r["engines"].as_array().unwrap();
    let by = |id: &str| engines.iter().find(|e| e["id"] == id).unwrap().clone();
    let wuu = by("wuu");
    assert!(
        wuu.get("quota").is_none(),
        "the built-in engine has no account quota"
    );
    assert_eq!(wuu["local_usage"]["input_tokens"], 5);
    let c = by("codex");
    assert_eq!(c["enabled"], true, "{c}");
    assert_eq!(c["quota"]["status"], "available", "{c}");
    assert_eq!(c["quota"]["plan"], "plus");
    assert_eq!(c["quota"]["windows"][0]["id"], "codex:primary");
    assert_eq!(c["quota"]["windows"][0]["used_percent"], 42.0);
    assert_eq!(c["local_usage"]["input_tokens"], 0);
    // Activity off: quota only.
    let r = app.call(
        "engine/list",
        json!({"include_models": false, "include_quota": true, "include_activity": false}),
    );
    assert_eq!(
        r["subscription_providers"][0]["quota"]["status"],
        "available"
    );
    assert!(r["subscription_providers"][0].get("local_usage").is_none());
    assert!(r["engines"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e.get("local_usage").is_none()));
}
