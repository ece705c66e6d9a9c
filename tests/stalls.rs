//! End-to-end tests of requests that must not stall the server: a full worker queue is
//! refused `overloaded` while control requests pass, a stuck catalog worker does not
//! take the listings with it, searches use the text index, and the usage ledgers are
//! read without blocking (a FIFO in place of a ledger, an oversized ledger file), and a
//! conversation answers while its provider request waits for its response head.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::{config_for, App};
use support::fake_provider::{Ending, FakeProvider, Script};

/// Generous bound for "answered, not stalled".
const PROMPT: Duration = Duration::from_secs(5);

fn thread_id(v: &Value) -> String {
    v["thread"]["id"].as_str().unwrap().to_owned()
}

/// A model service on loopback that accepts connections (its listen backlog holds them)
/// and never answers; dropping it resets every connection it holds.
fn silent_service() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    (l, url)
}

/// A user home with no engine ledgers, as the environment of a server.
fn ledger_env(user_home: &Path) -> Vec<(&'static str, String)> {
    let h = user_home.to_string_lossy().into_owned();
    vec![
        ("HOME", h.clone()),
        ("CODEX_HOME", format!("{h}/.codex")),
        ("CLAUDE_CONFIG_DIR", format!("{h}/.claude")),
        ("XDG_DATA_HOME", format!("{h}/.local/share")),
    ]
}

fn start_with(config: Option<Value>, env: &[(&'static str, String)]) -> App {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    App::start_with_env(config, &env)
}

/// Waits for the response to `id` for at most `limit` (other frames stay in the backlog).
fn response_within(app: &mut App, id: &str, limit: Duration) -> Option<Value> {
    let deadline = Instant::now() + limit;
    let is_it = |v: &Value| v.get("method").is_none() && v["id"] == json!(id);
    if let Some(pos) = app.backlog.iter().position(is_it) {
        return app.backlog.remove(pos);
    }
    // `next_within` serves the backlog first: set it aside while reading.
    let mut skipped: std::collections::VecDeque<Value> = std::mem::take(&mut app.backlog);
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break None;
        }
        match app.next_within(left) {
            Some(v) if is_it(&v) => break Some(v),
            Some(v) => skipped.push_back(v),
            None => break None,
        }
    };
    app.backlog = skipped;
    found
}

#[test]
fn a_full_catalog_queue_answers_overloaded_at_once_and_control_requests_pass() {
    let user = tempfile::tempdir().unwrap();
    let (service, url) = silent_service();
    let mut app = start_with(Some(config_for(&url)), &ledger_env(user.path()));
    let th = thread_id(&app.call("thread/start", json!({})));
    // Every refresh asks the silent service: the two catalog workers hang on the first
    // two, the queue takes 256, the rest must be refused at once, not wait for room.
    let refreshes: Vec<String> = (0..300)
        .map(|_| app.send("config/model-catalog/refresh", json!({})))
        .collect();
    let started = Instant::now();
    let config = app.send("config/read", json!({}));
    let interrupt = app.send("turn/interrupt", json!({"thread_id": th}));
    let r = response_within(&mut app, &config, PROMPT).unwrap_or_else(|| {
        panic!(
            "config/read stalled; {} frames read, last {:?}",
            app.seen.len(),
            app.seen.last()
        )
    });
    assert!(r.get("result").is_some(), "{r}");
    let r = response_within(&mut app, &interrupt, PROMPT).expect("turn/interrupt stalled");
    assert_eq!(r["error"]["code"], "no_active_turn", "{r}");
    assert!(started.elapsed() < PROMPT);
    // The excess got `overloaded` with its own id, at once: the queue holds 256 and the
    // workers a few more, so at least 30 of the 300 must have been refused within the
    // bound (how many exactly depends on how soon the workers took their first jobs).
    let mut answered: std::collections::HashMap<String, Value> = Default::default();
    let is_refresh = |v: &Value| {
        v.get("method").is_none()
            && v["id"]
                .as_str()
                .is_some_and(|id| refreshes.iter().any(|r| r == id))
    };
    // `next_within` serves the backlog first: set the other frames aside while reading.
    let mut others = std::collections::VecDeque::new();
    for v in std::mem::take(&mut app.backlog) {
        if is_refresh(&v) {
            answered.insert(v["id"].as_str().unwrap_or_default().to_owned(), v);
        } else {
            others.push_back(v);
        }
    }
    let deadline = Instant::now() + PROMPT;
    while answered.len() < 30 && Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(v) = app.next_within(left) else {
            break;
        };
        if is_refresh(&v) {
            answered.insert(v["id"].as_str().unwrap_or_default().to_owned(), v);
        } else {
            others.push_back(v);
        }
    }
    app.backlog = others;
    assert!(
        answered.len() >= 30,
        "only {} excess refreshes were answered at once",
        answered.len()
    );
    for r in answered.values() {
        assert_eq!(r["error"]["code"], "overloaded", "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("catalog pool"),
            "{r}"
        );
    }
    // The service goes away: everything accepted is answered, nothing is lost.
    drop(service);
    for id in refreshes.iter().filter(|id| !answered.contains_key(*id)) {
        let r = response_within(&mut app, id, Duration::from_secs(60)).expect("lost");
        assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
    }
    let id = app.send("shutdown", json!({}));
    assert!(response_within(&mut app, &id, PROMPT).is_some());
}

#[test]
fn a_stuck_catalog_worker_does_not_take_the_listings_with_it() {
    let user = tempfile::tempdir().unwrap();
    let (service, url) = silent_service();
    let mut app = start_with(Some(config_for(&url)), &ledger_env(user.path()));
    app.call("thread/start", json!({}));
    // Both catalog workers hang on the silent service.
    let stuck: Vec<String> = (0..2)
        .map(|_| app.send("config/model-catalog/refresh", json!({})))
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    for method in ["thread/list", "thread/listArchived", "thread/listAll"] {
        let id = app.send(method, json!({}));
        let r = response_within(&mut app, &id, PROMPT)
            .unwrap_or_else(|| panic!("{method} stalled behind the stuck workers"));
        assert!(r["result"]["threads"].is_array(), "{r}");
    }
    drop(service);
    for id in &stuck {
        assert!(response_within(&mut app, id, Duration::from_secs(60)).is_some());
    }
    let id = app.send("shutdown", json!({}));
    assert!(response_within(&mut app, &id, PROMPT).is_some());
}

#[test]
fn a_full_conversation_mailbox_answers_overloaded_and_other_conversations_pass() {
    let user = tempfile::tempdir().unwrap();
    let mut app = start_with(None, &ledger_env(user.path()));
    let busy = thread_id(&app.call("thread/start", json!({})));
    let other = thread_id(&app.call("thread/start", json!({})));
    app.call(
        "thread/rename",
        json!({"thread_id": busy, "title": "first"}),
    );
    // Another connection holds the write lock: the session of `busy` waits on its
    // first rename (up to the busy timeout) while the client keeps sending.
    let c = rusqlite::Connection::open(app.home.join("wuu.db")).unwrap();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let renames: Vec<String> = (0..300)
        .map(|i| {
            app.send(
                "thread/rename",
                json!({"thread_id": busy, "title": format!("n{i}")}),
            )
        })
        .collect();
    let config = app.send("config/read", json!({}));
    let interrupt = app.send("turn/interrupt", json!({"thread_id": other}));
    let r = response_within(&mut app, &config, PROMPT).expect("config/read stalled");
    assert!(r.get("result").is_some(), "{r}");
    let r = response_within(&mut app, &interrupt, PROMPT).expect("turn/interrupt stalled");
    assert_eq!(r["error"]["code"], "no_active_turn", "{r}");
    // The excess is refused with its own id. On a loaded machine the session may have
    // taken a few renames off its mailbox before blocking on the lock, so the last 40
    // are counted rather than each required to be refused.
    let mut refused = 0;
    for id in &renames[260..] {
        let r = response_within(&mut app, id, Duration::from_secs(30))
            .expect("an excess rename stalled");
        if r["error"]["code"] == "overloaded" {
            assert!(r["error"]["message"].as_str().unwrap().contains("mailbox"));
            refused += 1;
        }
    }
    assert!(
        refused >= 30,
        "only {refused} of the last 40 renames were refused"
    );
    c.execute_batch("ROLLBACK").unwrap();
    drop(c);
    // Everything accepted is answered once the lock is gone.
    for id in &renames[..260] {
        let r = response_within(&mut app, id, Duration::from_secs(30)).expect("lost");
        assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
    }
    let id = app.send("shutdown", json!({}));
    assert!(response_within(&mut app, &id, PROMPT).is_some());
}

#[test]
fn search_on_an_older_store_builds_the_text_index_and_finds_old_messages() {
    let user = tempfile::tempdir().unwrap();
    let (home, ws) = support::app::fresh_dirs(None);
    let cwd = ws.path().canonicalize().unwrap();
    {
        let mut store = wuu_store::Store::open_home(home.path()).unwrap();
        for t in 0..80i64 {
            let id = format!("thr_{t:03}");
            let mut row = wuu_store::ThreadRow::new(&id, cwd.to_string_lossy(), 1_000 + t);
            row.updated_at_ms = 1_000 + t;
            store.insert_thread(&row).unwrap();
            store
                .insert_turn(&wuu_store::TurnRow::new(&id, "u1", "user", 1_000 + t))
                .unwrap();
            for (k, ty) in ["user_message", "agent_message"].iter().enumerate() {
                let text = if t == 3 && k == 1 {
                    "the NEEDLE is in the haystack".to_owned()
                } else {
                    format!("ordinary text {t} {k}")
                };
                store
                    .upsert_item(&wuu_store::ItemRow {
                        thread_id: id.clone(),
                        turn_id: "u1".into(),
                        id: format!("i{k}"),
                        item_type: (*ty).into(),
                        status: Some("completed".into()),
                        seq: 0,
                        body: json!({"id": format!("i{k}"), "type": ty, "text": text}),
                    })
                    .unwrap();
            }
        }
    }
    // Make it a store of schema version 6, written before the text index existed.
    let c = rusqlite::Connection::open(home.path().join("wuu.db")).unwrap();
    c.execute_batch(
        "DROP TRIGGER IF EXISTS items_text_insert; DROP TRIGGER IF EXISTS items_text_delete;
         DROP TRIGGER IF EXISTS items_text_update; DROP TABLE IF EXISTS item_text;
         DROP TABLE IF EXISTS item_text_state;
         PRAGMA user_version = 6;",
    )
    .unwrap();
    drop(c);
    let env: Vec<(&str, String)> = ledger_env(user.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut app = App::spawn_in_env(home.path(), &cwd, &env);
    let id = app.send("thread/search", json!({"query": "needle IS in the"}));
    let r = response_within(&mut app, &id, PROMPT).expect("search stalled");
    let results = r["result"]["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 1, "{r}");
    assert_eq!(results[0]["thread"]["id"], "thr_003");
    assert_eq!(results[0]["message_seq"], 2);
    let id = app.send("thread/search", json!({"query": "no such text"}));
    let r = response_within(&mut app, &id, PROMPT).expect("search stalled");
    assert_eq!(r["result"]["results"], json!([]), "{r}");
    // The index holds the text of every message written before it existed.
    let c = rusqlite::Connection::open(home.path().join("wuu.db")).unwrap();
    let indexed: i64 = c
        .query_row("SELECT count(*) FROM item_text", [], |r| r.get(0))
        .unwrap();
    assert_eq!(indexed, 160);
}

fn mkfifo(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
}

/// The `engine_breakdowns` entry of `engine` in a `settings/usage` result.
fn breakdown(s: &Value, engine: &str) -> Option<Value> {
    s["engine_breakdowns"]
        .as_array()?
        .iter()
        .find(|e| e["engine_id"] == engine)
        .cloned()
}

#[test]
fn a_fifo_in_place_of_the_opencode_ledger_stalls_nothing() {
    let user = tempfile::tempdir().unwrap();
    let env = ledger_env(user.path());
    mkfifo(&user.path().join(".local/share/opencode/opencode.db"));
    let mut app = start_with(None, &env);
    app.call("thread/start", json!({}));
    // Twice at once: both catalog workers would hang on the FIFO.
    let a = app.send("settings/usage", json!({}));
    let b = app.send("settings/usage", json!({}));
    for id in [a, b] {
        let r = response_within(&mut app, &id, PROMPT).expect("settings/usage stalled");
        let s = &r["result"];
        assert!(s.is_object(), "{r}");
        assert!(
            breakdown(s, "opencode").is_none_or(|o| o.get("outside").is_none()),
            "an unreadable ledger has no outside: {s}"
        );
    }
    let id = app.send("thread/list", json!({}));
    let r = response_within(&mut app, &id, PROMPT).expect("thread/list stalled");
    assert_eq!(r["result"]["threads"].as_array().unwrap().len(), 1, "{r}");
    let id = app.send("shutdown", json!({}));
    assert!(
        response_within(&mut app, &id, PROMPT).is_some(),
        "shutdown stalled"
    );
    assert_eq!(app.wait_exit(PROMPT), Some(0));
}

#[test]
fn an_opencode_message_file_over_the_limit_is_skipped_and_the_rest_counted() {
    let user = tempfile::tempdir().unwrap();
    let env = ledger_env(user.path());
    let dir = user
        .path()
        .join(".local/share/opencode/storage/message/ses_x");
    std::fs::create_dir_all(&dir).unwrap();
    let msg = |tokens: u64, pad: usize| {
        json!({"id": "m", "sessionID": "ses_x", "role": "assistant",
               "time": {"created": 1_700_000_000_000i64}, "pad": "x".repeat(pad),
               "tokens": {"input": tokens, "output": 0, "reasoning": 0,
                          "cache": {"read": 0, "write": 0}}})
        .to_string()
    };
    std::fs::write(dir.join("msg_small.json"), msg(7, 10)).unwrap();
    // Just over the documented 16 MiB limit of one message file.
    std::fs::write(dir.join("msg_huge.json"), msg(1000, 16 << 20)).unwrap();
    let mut app = start_with(None, &env);
    let id = app.send("settings/usage", json!({}));
    let r = response_within(&mut app, &id, PROMPT).expect("settings/usage stalled");
    let o = breakdown(&r["result"], "opencode").expect("opencode entry");
    assert_eq!(o["outside"]["input_tokens"], 7, "{o}");
}

#[test]
fn a_silent_stream_leaves_the_conversation_answering_and_loses_no_delta() {
    let fake = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    cfg["agent"] = json!({"auto_title": false});
    let mut app = App::start(Some(cfg));
    let th = thread_id(&app.call("thread/start", json!({})));
    // The provider sends the text, then holds the stream silent before its end.
    let silence = Duration::from_secs(6);
    fake.push(Script::text(&["alpha ", "beta ", "gamma"]).ending(Ending::Late(silence)));
    fake.push(Script::text(&["Queued done."]));
    let r = app.call("turn/start", json!({"thread_id": th, "prompt": "first"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    let mut text = String::new();
    while text != "alpha beta gamma" {
        let d = app.notification("item/agentMessage/delta");
        text.push_str(d["params"]["delta"].as_str().unwrap());
    }
    let silent_from = Instant::now();
    // Requests that need the conversation are answered while its stream is silent.
    let id = app.send(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    let read = response_within(&mut app, &id, PROMPT).expect("thread/resume answered");
    assert!(read.get("error").is_none(), "{read}");
    let id = app.send(
        "turn/queue",
        json!({"thread_id": th, "prompt": "second", "client_id": "q-1"}),
    );
    let queued = response_within(&mut app, &id, PROMPT).expect("turn/queue answered");
    assert_eq!(queued["result"]["queued"]["id"], "q-1", "{queued}");
    // A steer the conversation refuses (not its turn) leaves the stream as it is.
    let id = app.send(
        "turn/steer",
        json!({"thread_id": th, "prompt": "x", "expected_turn_id": "not-this-turn"}),
    );
    let refused = response_within(&mut app, &id, PROMPT).expect("turn/steer answered");
    assert!(refused.get("error").is_some(), "{refused}");
    assert!(
        silent_from.elapsed() < silence,
        "answered only once the stream spoke again"
    );
    // The turn then ends as the provider ends it, with every delta once, from the
    // one request (nothing cut it and asked again).
    let t = turn.clone();
    let end = app.wait_for("turn end", move |v| {
        (v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(t))
            || (v["method"] == "turn/error" && v["params"]["turn_id"] == json!(t))
    });
    assert_eq!(end["method"], "turn/completed", "{end}");
    assert!(
        app.backlog
            .iter()
            .all(|v| v["method"] != "item/agentMessage/delta"
                || v["params"]["turn_id"] != json!(turn)),
        "a delta of the first turn came twice: {:?}",
        app.backlog
    );
    let answer = end["params"]["turn"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "agent_message")
        .map(|i| i["text"].clone());
    assert_eq!(answer, Some(json!("alpha beta gamma")), "{end}");
    // The queued input runs next, as the second (and last) request.
    let queued_turn = app.wait_for("queued turn", |v| v["method"] == "turn/completed");
    assert_ne!(queued_turn["params"]["turn"]["id"], json!(turn));
    assert_eq!(fake.requests().len(), 2);
}

/// A model service on loopback that takes each request whole and never answers it
/// (no status line, no header), then reads on to see the client hang up.
struct HeadlessService {
    url: String,
    /// Requests received whole.
    received: Arc<AtomicUsize>,
    /// Connections the client closed after its request.
    closed: Arc<AtomicUsize>,
}

impl HeadlessService {
    fn start() -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", l.local_addr().unwrap());
        let received = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (r, c) = (received.clone(), closed.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { return };
                let (r, c) = (r.clone(), c.clone());
                std::thread::spawn(move || {
                    let mut conn = BufReader::new(conn);
                    let mut len = 0usize;
                    loop {
                        let mut line = String::new();
                        if conn.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; len];
                    if conn.read_exact(&mut body).is_err() {
                        return;
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    // Nothing more comes from a client that waits for the head: a read
                    // ends when it closes the connection.
                    let mut buf = [0u8; 512];
                    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        HeadlessService {
            url,
            received,
            closed,
        }
    }

    /// Waits until `counter` reaches `n` (at most `limit`).
    fn reaches(counter: &AtomicUsize, n: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while counter.load(Ordering::SeqCst) < n && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        counter.load(Ordering::SeqCst) >= n
    }
}

/// A server whose conversation has a turn waiting for the response head of its provider
/// request (the service holds it): the app, the service, the thread and turn ids.
fn turn_waiting_for_its_head(user_home: &Path) -> (App, HeadlessService, String, String) {
    let service = HeadlessService::start();
    let mut app = start_with(Some(config_for(&service.url)), &ledger_env(user_home));
    let th = thread_id(&app.call("thread/start", json!({})));
    let r = app.call("turn/start", json!({"thread_id": th, "prompt": "first"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    assert!(
        HeadlessService::reaches(&service.received, 1, PROMPT),
        "the provider request never arrived"
    );
    (app, service, th, turn)
}

/// Sends 320 `thread/resume` requests to `th` in blocks of 64, each block followed by a
/// wait (at most 2 s) for its answers: a conversation that serves its mailbox answers
/// each block before the next; one that does not has a full mailbox (256) after four.
/// Returns the answers that came, by id, and the ids sent.
fn flood(app: &mut App, th: &str) -> (std::collections::HashMap<String, Value>, Vec<String>) {
    let mut answers = std::collections::HashMap::new();
    let mut ids = vec![];
    for _ in 0..5 {
        let block: Vec<String> = (0..64)
            .map(|_| {
                app.send(
                    "thread/resume",
                    json!({"session_id": th, "response_only": true}),
                )
            })
            .collect();
        let end = Instant::now() + Duration::from_secs(2);
        for id in &block {
            let left = end.saturating_duration_since(Instant::now());
            match response_within(app, id, left) {
                Some(v) => {
                    answers.insert(id.clone(), v);
                }
                None => break,
            }
        }
        ids.extend(block);
    }
    (answers, ids)
}

/// Interrupts the turn and waits for it to end as interrupted.
fn interrupt(app: &mut App, th: &str, turn: &str) {
    app.call("turn/interrupt", json!({"thread_id": th, "turn_id": turn}));
    let t = turn.to_owned();
    let end = app.wait_for("turn end", move |v| {
        matches!(v["method"].as_str(), Some("turn/completed" | "turn/error"))
            && v["params"]["turn"]["id"] == json!(t)
    });
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
}

#[test]
fn a_second_turn_is_refused_at_once_while_a_response_head_is_awaited() {
    let user = tempfile::tempdir().unwrap();
    let (mut app, service, th, turn) = turn_waiting_for_its_head(user.path());
    let waiting_from = Instant::now();
    // Refused now, not run after the first turn ends.
    let id = app.send("turn/start", json!({"thread_id": th, "prompt": "second"}));
    let busy = response_within(&mut app, &id, PROMPT).expect("turn/start stalled");
    assert_eq!(busy["error"]["code"], "thread_busy", "{busy}");
    let id = app.send("thread/delete", json!({"thread_id": th}));
    let busy = response_within(&mut app, &id, PROMPT).expect("thread/delete stalled");
    assert_eq!(busy["error"]["code"], "thread_busy", "{busy}");
    assert!(waiting_from.elapsed() < PROMPT);
    // Still waiting: nothing was cut.
    assert_eq!(service.closed.load(Ordering::SeqCst), 0);
    interrupt(&mut app, &th, &turn);
    // No second request was made, and the conversation is still there.
    assert_eq!(service.received.load(Ordering::SeqCst), 1);
    let read = app.call("thread/resume", json!({"session_id": th}));
    assert_eq!(
        read["thread"]["turns"].as_array().map(Vec::len),
        Some(1),
        "{read}"
    );
}

#[test]
fn a_read_is_answered_at_once_while_a_response_head_is_awaited() {
    let user = tempfile::tempdir().unwrap();
    let (mut app, service, th, turn) = turn_waiting_for_its_head(user.path());
    let waiting_from = Instant::now();
    let id = app.send(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    let read = response_within(&mut app, &id, PROMPT).expect("thread/resume stalled");
    assert!(read.get("error").is_none(), "{read}");
    assert!(waiting_from.elapsed() < PROMPT);
    assert_eq!(service.closed.load(Ordering::SeqCst), 0);
    interrupt(&mut app, &th, &turn);
}

#[test]
fn an_interrupt_behind_a_flood_ends_a_turn_waiting_for_its_response_head() {
    let user = tempfile::tempdir().unwrap();
    let (mut app, service, th, turn) = turn_waiting_for_its_head(user.path());
    let (answers, ids) = flood(&mut app, &th);
    let started = Instant::now();
    let id = app.send("turn/interrupt", json!({"thread_id": th, "turn_id": turn}));
    let r = response_within(&mut app, &id, PROMPT).expect("turn/interrupt stalled");
    assert_eq!(r["result"]["ok"], true, "{r}");
    let t = turn.clone();
    let end = app.wait_for("turn end", move |v| {
        matches!(v["method"].as_str(), Some("turn/completed" | "turn/error"))
            && v["params"]["turn"]["id"] == json!(t)
    });
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert!(
        HeadlessService::reaches(&service.closed, 1, PROMPT),
        "the provider's connection was left open"
    );
    // Every read of the flood was answered while the head was awaited.
    assert_eq!(answers.len(), ids.len());
    assert!(answers.values().all(|v| v.get("error").is_none()));
}

#[test]
fn shutdown_behind_a_flood_returns_promptly_while_a_response_head_is_awaited() {
    let user = tempfile::tempdir().unwrap();
    let (mut app, service, th, _turn) = turn_waiting_for_its_head(user.path());
    let (answers, ids) = flood(&mut app, &th);
    let started = Instant::now();
    let id = app.send("shutdown", json!({}));
    assert!(
        response_within(&mut app, &id, PROMPT).is_some(),
        "shutdown stalled"
    );
    assert_eq!(app.wait_exit(PROMPT), Some(0));
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert!(HeadlessService::reaches(&service.closed, 1, PROMPT));
    // Every read of the flood was answered while the head was awaited.
    assert_eq!(answers.len(), ids.len());
}
