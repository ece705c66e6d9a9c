//! End-to-end tests of issue 6 (conversation history for clients) against the real
//! binary: compact paged history, activity details, large content references, stale
//! cursors, content parts, titles and per-conversation selection (seed 003).

mod support;

use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, HttpError, Script};
use wuu_protocol::ThreadItem;
use wuu_store::{ItemRow, Store, ThreadRow, TurnRow};

const PAGE_TURNS: usize = 100;
const PAGE_BYTES: usize = 1024 * 1024;
const STALE: &str = "history changed; reopen the conversation";

fn thread_id(v: &Value) -> String {
    v["thread"]["id"].as_str().unwrap().to_owned()
}

fn app_with_fake() -> (App, FakeProvider) {
    let fake = FakeProvider::start();
    let app = App::start(Some(config_for(&fake.base_url())));
    (app, fake)
}

fn start_thread(app: &mut App) -> String {
    thread_id(&app.call("thread/start", json!({})))
}

/// Runs one turn to completion and returns the `turn/completed` params.
fn run_turn(app: &mut App, tid: &str, prompt: &str) -> Value {
    app.call("turn/start", json!({"thread_id": tid, "prompt": prompt}));
    let t = tid.to_owned();
    app.wait_for("turn/completed", move |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == json!(t)
    })["params"]
        .clone()
}

// ---------------------------------------------------------------------------------------
// Conversations built directly in the store
// ---------------------------------------------------------------------------------------

fn item(turn: &str, n: usize, ty: &str) -> ThreadItem {
    let mut i = ThreadItem::new(format!("{turn}-item-{n:04}"), ty);
    i.status = Some("completed".into());
    i
}

/// A finished turn: user message, reasoning, a tool call, narration, another tool call
/// and the final answer (`answer_bytes` long).
fn standard_turn(turn: &str, answer_bytes: usize) -> Vec<ThreadItem> {
    let mut u = item(turn, 1, "user_message");
    u.role = Some("user".into());
    u.text = Some(format!("question of {turn}"));
    let mut r = item(turn, 2, "reasoning");
    r.text = Some("thinking".into());
    let mut c1 = item(turn, 3, "tool_call");
    c1.name = Some("bash".into());
    c1.arguments = Some(r#"{"command":"ls"}"#.into());
    c1.result = Some("a\nb\n".repeat(100));
    let mut n = item(turn, 4, "agent_message");
    n.text = Some("Let me look further.".into());
    let mut c2 = item(turn, 5, "tool_call");
    c2.name = Some("read_file".into());
    c2.arguments = Some(r#"{"path":"a"}"#.into());
    c2.result = Some("content".into());
    let mut a = item(turn, 6, "agent_message");
    a.terminal = true;
    a.text = Some(format!("answer of {turn} ") + &"z".repeat(answer_bytes));
    vec![u, r, c1, n, c2, a]
}

/// Writes a conversation into the store of `home` and returns its id.
fn build(home: &Path, cwd: &Path, turns: &[(String, Vec<ThreadItem>)]) -> String {
    let mut store = Store::open_home(home).unwrap();
    let id = format!("thr_built{}", uuid_like());
    let now = 1_700_000_000_000i64;
    let mut row = ThreadRow::new(&id, cwd.to_string_lossy(), now);
    row.provider = "fake".into();
    row.model = "fake-model".into();
    row.permission_mode = "standard".into();
    row.engine_id = "wuu".into();
    row.preview = "built".into();
    store.insert_thread(&row).unwrap();
    store
        .transaction(|tx| {
            for (i, (turn_id, items)) in turns.iter().enumerate() {
                let mut t = TurnRow::new(&id, turn_id, "user", now + i as i64);
                t.status = "completed".into();
                t.completed_at_ms = Some(now + i as i64 + 1);
                tx.insert_turn(&t)?;
                for it in items {
                    tx.upsert_item(&ItemRow {
                        thread_id: id.clone(),
                        turn_id: turn_id.clone(),
                        id: it.id.clone(),
                        item_type: it.item_type.clone(),
                        status: it.status.clone(),
                        seq: 0,
                        body: serde_json::to_value(it).unwrap(),
                    })?;
                }
            }
            Ok(())
        })
        .unwrap();
    id
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Elements a folded standard turn shows: the user message, one summary, the answer.
fn folded_ids(turn: &str) -> Vec<String> {
    vec![
        format!("{turn}-item-0001"),
        format!("{turn}-item-0002-summary"),
        format!("{turn}-item-0006"),
    ]
}

fn page_bytes(turns: &[Value]) -> usize {
    turns
        .iter()
        .flat_map(|t| t["items"].as_array().unwrap().iter())
        .map(|i| serde_json::to_vec(i).unwrap().len())
        .sum()
}

/// Walks every page from `thread/resume` to the start; returns the pages (newest first).
fn walk(app: &mut App, tid: &str) -> Vec<Vec<Value>> {
    let r = app.call(
        "thread/resume",
        json!({"session_id": tid, "conversation_history": true}),
    );
    assert_eq!(r["thread"]["history_paged"], true, "{}", r["thread"]["id"]);
    let mut pages = vec![r["thread"]["turns"].as_array().unwrap().clone()];
    let mut cursor = r["thread"]["history_cursor"].as_str().map(str::to_owned);
    while let Some(c) = cursor {
        let r = app.call(
            "thread/history/read",
            json!({"thread_id": tid, "cursor": c}),
        );
        assert_eq!(r["cursor"], json!(c));
        assert_eq!(r["thread_id"], json!(tid));
        pages.push(r["turns"].as_array().unwrap().clone());
        cursor = r["history_cursor"].as_str().map(str::to_owned);
        assert!(pages.len() < 1000, "cursor loop");
    }
    pages
}

fn decode_ref(r: &str) -> Vec<String> {
    let b64 = r.strip_prefix("content:").expect("content: ref");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(b64)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Reads the full content behind a `content:` reference, chunk by chunk.
fn read_content(app: &mut App, r: &str) -> Value {
    let parts = decode_ref(r);
    let mut data = String::new();
    let mut offset = 0u64;
    loop {
        let c = app.call(
            "thread/content/read",
            json!({"thread_id": parts[0], "turn_id": parts[1], "item_id": parts[2],
                "sha256": parts[3], "offset": offset}),
        );
        assert_eq!(c["content_type"], "application/json");
        assert_eq!(c["offset"], json!(offset));
        let chunk = c["data"].as_str().unwrap();
        assert!(chunk.len() <= 128 * 1024);
        data.push_str(chunk);
        offset += chunk.len() as u64;
        if offset == c["total"].as_u64().unwrap() {
            break;
        }
        assert!(!chunk.is_empty());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

// ---------------------------------------------------------------------------------------
// Compact history through the model
// ---------------------------------------------------------------------------------------

#[test]
fn compact_history_folds_tool_activity_and_activity_read_opens_it() {
    let (mut app, fake) = app_with_fake();
    let tid2 = start_thread(&mut app);
    fake.push(Script::text_then_tool_call(
        "Let me list.",
        "call_1",
        "list_files",
        "{}",
    ));
    fake.push(Script::tool_call("call_2", "list_files", "{}"));
    fake.push(Script::text(&["Here ", "you go."]));
    let done = run_turn(&mut app, &tid2, "list the files");
    assert_eq!(done["turn"]["status"], "completed", "{done}");

    // Unchanged format without conversation_history.
    let full = app.call("thread/resume", json!({"session_id": tid2}));
    assert!(full["thread"].get("history_paged").is_none());
    let full_items = full["thread"]["turns"][0]["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(full_items.iter().all(|i| i["type"] != "process_summary"));
    assert!(full_items.len() >= 5, "{full_items:?}");

    let r = app.call(
        "thread/resume",
        json!({"session_id": tid2, "conversation_history": true}),
    );
    let th = &r["thread"];
    assert_eq!(th["history_paged"], true);
    assert!(th.get("history_cursor").is_none(), "nothing older: {th}");
    let items = th["turns"][0]["items"].as_array().unwrap();
    let types: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["user_message", "process_summary", "agent_message"],
        "{items:?}"
    );
    assert_eq!(items[2]["terminal"], true);
    let summary = &items[1];
    assert_eq!(summary["summary"]["tool_count"], 2);
    assert_eq!(summary["summary"]["tools"], json!(["list_files"]));
    let last = summary["activity"]["last_item_id"].as_str().unwrap();
    assert_eq!(summary["summary"]["last_item_id"], json!(last));

    // The activity behind the summary: exactly the folded items, in order.
    let turn_id = th["turns"][0]["id"].as_str().unwrap();
    let a = app.call(
        "thread/activity/read",
        json!({"thread_id": tid2, "turn_id": turn_id, "item_id": summary["id"],
            "last_item_id": last}),
    );
    assert!(a.get("next_cursor").is_none());
    let got: Vec<&str> = a["turn"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = full_items[1..full_items.len() - 1]
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, want);
    assert_eq!(summary["summary"]["item_count"], json!(want.len()));
    // A summary whose range no longer exists.
    let e = app.call_err(
        "thread/activity/read",
        json!({"thread_id": tid2, "turn_id": turn_id, "item_id": summary["id"],
            "last_item_id": "nope"}),
    );
    assert_eq!(e["message"], STALE);
}

#[test]
fn ephemeral_conversations_page_from_memory() {
    let (mut app, fake) = app_with_fake();
    let tid = thread_id(&app.call("thread/start", json!({"ephemeral": true})));
    for i in 0..3 {
        fake.push(Script::tool_call(&format!("c{i}"), "list_files", "{}"));
        fake.push(Script::text(&["ok"]));
        run_turn(&mut app, &tid, &format!("turn {i}"));
    }
    let pages = walk(&mut app, &tid);
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].len(), 3);
    for t in &pages[0] {
        let types: Vec<&str> = t["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["user_message", "process_summary", "agent_message"]);
    }
    // A cursor naming the newest turn reads the two before it, through the session.
    let newest = pages[0][2]["id"].as_str().unwrap();
    let c =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([newest, null]).to_string());
    let r = app.call(
        "thread/history/read",
        json!({"thread_id": tid, "cursor": c}),
    );
    assert_eq!(r["turns"].as_array().unwrap().len(), 2);
    assert!(r.get("history_cursor").is_none());
}

// ---------------------------------------------------------------------------------------
// Long conversations built in the store
// ---------------------------------------------------------------------------------------

struct Built {
    app: App,
    tid: String,
    turns: Vec<(String, Vec<ThreadItem>)>,
}

/// 200 small turns, 40 turns with 40 KiB answers, one turn with 30 user messages of
/// 50 KiB (split inside the turn), one with a 300 KiB answer and a 200 KiB tool result,
/// then 20 small turns.
fn long_conversation() -> Built {
    let app = App::start(Some(config_for("http://127.0.0.1:9/v1")));
    let mut turns = vec![];
    for i in 0..262 {
        let tid = format!("turn_{i:04}");
        let items = match i {
            200..240 => standard_turn(&tid, 40 * 1024),
            240 => (1..=30)
                .map(|n| {
                    let mut u = item(&tid, n, "user_message");
                    u.text = Some(format!("{n} ") + &"u".repeat(50 * 1024));
                    u
                })
                .collect(),
            241 => {
                let mut v = standard_turn(&tid, 300 * 1024);
                v[2].result = Some("r".repeat(200 * 1024));
                v
            }
            _ => standard_turn(&tid, 10),
        };
        turns.push((tid, items));
    }
    let tid = build(&app.home, &app.workdir, &turns);
    Built { app, tid, turns }
}

fn expected_elements(turns: &[(String, Vec<ThreadItem>)]) -> Vec<(String, String)> {
    let mut out = vec![];
    for (t, items) in turns {
        if items.iter().all(|i| i.item_type == "user_message") {
            out.extend(items.iter().map(|i| (t.clone(), i.id.clone())));
        } else {
            out.extend(folded_ids(t).into_iter().map(|i| (t.clone(), i)));
        }
    }
    out
}

#[test]
fn long_history_pages_are_bounded_and_reach_the_first_turn_once() {
    let Built {
        mut app,
        tid,
        turns,
    } = long_conversation();
    let pages = walk(&mut app, &tid);
    assert!(pages.len() >= 5, "{} pages", pages.len());
    let mut seen: Vec<(String, String)> = vec![];
    for (n, page) in pages.iter().enumerate() {
        assert!(!page.is_empty(), "page {n} is empty");
        assert!(page.len() <= PAGE_TURNS, "page {n}: {} turns", page.len());
        let bytes = page_bytes(page);
        assert!(bytes <= PAGE_BYTES, "page {n}: {bytes} bytes");
        let mut ids: Vec<(String, String)> = vec![];
        for t in page {
            let turn = t["id"].as_str().unwrap().to_owned();
            for i in t["items"].as_array().unwrap() {
                ids.push((turn.clone(), i["id"].as_str().unwrap().to_owned()));
                if i["type"] == "process_summary" {
                    // Never split: the whole folded range is named by one item.
                    assert_eq!(i["summary"]["item_count"], 4, "{i}");
                }
            }
        }
        // Pages are newest first; within a page oldest first.
        ids.extend(seen);
        seen = ids;
    }
    let want = expected_elements(&turns);
    assert_eq!(seen.len(), want.len(), "every element exactly once");
    assert_eq!(seen, want);
    let distinct: HashSet<_> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len());
    // The first turn is on the last page, exactly once; the turn limit was reached by
    // the small turns and the byte limit split the 30-message turn.
    let last = pages.last().unwrap();
    assert_eq!(last[0]["id"], "turn_0000");
    assert!(pages.iter().any(|p| p.len() == PAGE_TURNS));
    let split = pages
        .iter()
        .filter(|p| p.iter().any(|t| t["id"] == "turn_0240"))
        .count();
    assert!(split >= 2, "the 1.5 MiB turn spans pages");
}

#[test]
fn large_items_are_cut_and_readable_through_their_reference() {
    let Built {
        mut app,
        tid,
        turns,
    } = long_conversation();
    let pages = walk(&mut app, &tid);
    let turn = pages
        .iter()
        .flatten()
        .find(|t| t["id"] == "turn_0241")
        .unwrap()
        .clone();
    let answer = turn["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "agent_message")
        .unwrap()
        .clone();
    let r = answer["remote_content_ref"]
        .as_str()
        .expect("cut with a ref");
    let text = answer["text"].as_str().unwrap();
    assert!(
        text.ends_with('…') && text.len() <= 2048 + 3,
        "{}",
        text.len()
    );
    assert!(serde_json::to_vec(&answer).unwrap().len() < 64 * 1024);
    let full = read_content(&mut app, r);
    let original = &turns[241].1[5];
    assert_eq!(
        full["text"].as_str().unwrap(),
        original.text.as_deref().unwrap()
    );
    assert_eq!(full["id"], json!(original.id));

    // Offsets that are not multiples of 4 work too.
    let parts = decode_ref(r);
    let c = app.call(
        "thread/content/read",
        json!({"thread_id": parts[0], "turn_id": parts[1], "item_id": parts[2],
            "sha256": parts[3], "offset": 5}),
    );
    let c0 = app.call(
        "thread/content/read",
        json!({"thread_id": parts[0], "turn_id": parts[1], "item_id": parts[2],
            "sha256": parts[3]}),
    );
    assert_eq!(
        &c0["data"].as_str().unwrap()[5..100],
        &c["data"].as_str().unwrap()[..95]
    );

    // A wrong hash, a wrong turn, a missing item.
    for (turn_id, item_id, sha) in [
        (parts[1].as_str(), parts[2].as_str(), "0".repeat(64)),
        ("turn_0000", parts[2].as_str(), parts[3].clone()),
        (parts[1].as_str(), "nope", parts[3].clone()),
    ] {
        let e = app.call_err(
            "thread/content/read",
            json!({"thread_id": tid, "turn_id": turn_id, "item_id": item_id, "sha256": sha}),
        );
        assert_eq!(e["message"], "attachment changed or was removed");
    }

    // The large tool result is behind the summary; activity/read cuts it too.
    let summary = turn["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "process_summary")
        .unwrap()
        .clone();
    let a = app.call(
        "thread/activity/read",
        json!({"thread_id": tid, "turn_id": "turn_0241", "item_id": summary["id"],
            "last_item_id": summary["activity"]["last_item_id"]}),
    );
    let call = &a["turn"]["items"][1];
    assert_eq!(call["type"], "tool_call");
    let full = read_content(&mut app, call["remote_content_ref"].as_str().unwrap());
    assert_eq!(full["result"].as_str().unwrap().len(), 200 * 1024);
}

#[test]
fn activity_pages_are_complete() {
    let app = App::start(Some(config_for("http://127.0.0.1:9/v1")));
    // One turn with 450 folded tool calls between the question and the answer.
    let t = "turn_big".to_owned();
    let mut items = vec![item(&t, 1, "user_message")];
    for n in 2..452 {
        let mut c = item(&t, n, "tool_call");
        c.name = Some(format!("tool{}", n % 3));
        c.result = Some("x".repeat(3000));
        items.push(c);
    }
    let mut a = item(&t, 452, "agent_message");
    a.terminal = true;
    a.text = Some("done".into());
    items.push(a);
    let mut app = app;
    let tid = build(&app.home, &app.workdir, &[(t.clone(), items)]);
    let r = app.call(
        "thread/resume",
        json!({"session_id": tid, "conversation_history": true}),
    );
    let summary = r["thread"]["turns"][0]["items"][1].clone();
    assert_eq!(summary["summary"]["item_count"], 450);
    assert_eq!(summary["summary"]["tool_count"], 450);
    assert_eq!(summary["summary"]["tools"].as_array().unwrap().len(), 3);
    let mut ids = vec![];
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut p = json!({"thread_id": tid, "turn_id": t, "item_id": summary["id"],
            "last_item_id": summary["activity"]["last_item_id"]});
        if let Some(c) = &cursor {
            p["cursor"] = json!(c);
        }
        let a = app.call("thread/activity/read", p);
        pages += 1;
        let items = a["turn"]["items"].as_array().unwrap();
        assert!(page_bytes(&[a["turn"].clone()]) <= PAGE_BYTES);
        ids.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_owned()));
        match a["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert!(pages >= 3, "{pages}");
    let want: Vec<String> = (2..452).map(|n| format!("{t}-item-{n:04}")).collect();
    assert_eq!(ids, want);
}

#[test]
fn stale_and_invalid_cursors_are_refused() {
    let Built { mut app, tid, .. } = long_conversation();
    let db = app.home.join("wuu.db");
    // Collect the cursors of the walk.
    let r = app.call(
        "thread/resume",
        json!({"session_id": tid, "conversation_history": true}),
    );
    let mut cursors = vec![r["thread"]["history_cursor"].as_str().unwrap().to_owned()];
    loop {
        let r = app.call(
            "thread/history/read",
            json!({"thread_id": tid, "cursor": cursors.last().unwrap()}),
        );
        match r["history_cursor"].as_str() {
            Some(c) => cursors.push(c.to_owned()),
            None => break,
        }
    }
    let decoded: Vec<(String, Option<String>)> = cursors
        .iter()
        .map(|c| {
            let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(c)
                .unwrap();
            serde_json::from_slice(&b).unwrap()
        })
        .collect();
    let item_cursor = decoded
        .iter()
        .position(|(_, i)| i.is_some())
        .expect("a cursor inside a turn");
    let turn_cursor = decoded
        .iter()
        .position(|(t, i)| i.is_none() && t != &decoded[item_cursor].0)
        .expect("a turn cursor");
    // Reading the same cursor twice gives the same page (appends never shift pages).
    let a = app.call(
        "thread/history/read",
        json!({"thread_id": tid, "cursor": cursors[turn_cursor]}),
    );
    let b = app.call(
        "thread/history/read",
        json!({"thread_id": tid, "cursor": cursors[turn_cursor]}),
    );
    assert_eq!(a, b);

    // History edits remove both boundaries.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "DELETE FROM items WHERE thread_id = ?1 AND id = ?2",
        [&tid, decoded[item_cursor].1.as_ref().unwrap()],
    )
    .unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    conn.execute(
        "DELETE FROM turns WHERE thread_id = ?1 AND id = ?2",
        [&tid, &decoded[turn_cursor].0],
    )
    .unwrap();
    for c in [&cursors[item_cursor], &cursors[turn_cursor]] {
        let e = app.call_err(
            "thread/history/read",
            json!({"thread_id": tid, "cursor": c}),
        );
        assert_eq!(e["message"], STALE, "{e}");
    }
    let e = app.call_err(
        "thread/history/read",
        json!({"thread_id": tid, "cursor": "not a cursor"}),
    );
    assert_eq!(e["code"], "invalid_params");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("invalid history cursor"));
    let e = app.call_err(
        "thread/history/read",
        json!({"thread_id": "thr_missing", "cursor": cursors[0]}),
    );
    assert_eq!(e["code"], "thread_not_found");
}

// ---------------------------------------------------------------------------------------
// Content parts
// ---------------------------------------------------------------------------------------

#[test]
fn content_parts_are_validated_and_survive_history() {
    let (mut app, fake) = app_with_fake();
    let tid = start_thread(&mut app);
    let sel_text = "File a.rs lines 1-2 (comment):\nfn main() {}\nWhy?";
    let parts = json!([
        {"type": "text", "text": "Look: "},
        {"type": "file_selection", "text": sel_text, "id": "sel-1", "intent": "comment",
         "comment": "Why?", "unknown": 1,
         "source": {"workspace": "/w", "path": "a.rs", "quote": "fn main() {}",
            "revision": "r1", "start_line": 1, "start_column": 1, "end_line": 2,
            "end_column": 1}},
        {"type": "file_selection", "text": "", "id": "bad"},
        {"type": "hologram", "text": "ignored"}
    ]);
    let prompt = format!("Look: {sel_text}");
    fake.push(Script::text(&["ok"]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": tid, "prompt": prompt, "content_parts": parts}),
    );
    let user = &r["turn"]["items"][0];
    let kept = user["content_parts"].as_array().expect("metadata kept");
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[1]["type"], "file_selection");
    assert!(kept[1].get("unknown").is_none());
    assert_eq!(user["text"], json!(prompt));
    app.notification("turn/completed");

    // A mismatching prompt drops the metadata but keeps the prompt.
    fake.push(Script::text(&["ok"]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": tid, "prompt": "something else", "content_parts": parts}),
    );
    assert!(r["turn"]["items"][0].get("content_parts").is_none());
    assert_eq!(r["turn"]["items"][0]["text"], "something else");
    app.notification("turn/completed");

    // The model saw the prompt, not the metadata.
    let body = fake.requests()[0].body.to_string();
    assert!(body.contains("fn main() {}"));
    assert!(!body.contains("sel-1"));

    // Accepted metadata survives history, in both formats and after a restart.
    app.restart();
    for params in [
        json!({"session_id": tid}),
        json!({"session_id": tid, "conversation_history": true}),
    ] {
        let r = app.call("thread/resume", params);
        let first = &r["thread"]["turns"][0]["items"][0];
        assert_eq!(
            first["content_parts"].as_array().unwrap().len(),
            2,
            "{first}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Titles
// ---------------------------------------------------------------------------------------

fn title_config(base_url: &str, on: bool) -> Value {
    let mut c = config_for(base_url);
    c["agent"] = json!({"auto_title": on});
    c
}

fn is_title_request(body: &Value) -> bool {
    body.to_string().contains("Write a short title")
}

#[test]
fn rename_keeps_updated_at_and_the_higher_revision_wins() {
    let mut app = App::start(Some(config_for("http://127.0.0.1:9/v1")));
    let t = app.call("thread/start", json!({}))["thread"].clone();
    let tid = t["id"].as_str().unwrap().to_owned();
    assert!(t.get("title_revision").is_none(), "absent means 0");
    std::thread::sleep(Duration::from_millis(20));
    let r = app.call("thread/rename", json!({"thread_id": tid, "title": "First"}));
    assert_eq!(r["thread"]["title"], "First");
    assert_eq!(r["thread"]["title_revision"], 1);
    assert_eq!(
        r["thread"]["updated_at"], t["updated_at"],
        "rename is not activity"
    );
    let u = app.notification("thread/updated");
    assert_eq!(u["params"]["thread"]["title_revision"], 1);
    let r = app.call(
        "thread/rename",
        json!({"thread_id": tid, "title": "Newer", "title_revision": 5}),
    );
    assert_eq!(r["thread"]["title_revision"], 5);
    // A stale snapshot (lower revision) never overwrites the newer title.
    let r = app.call(
        "thread/rename",
        json!({"thread_id": tid, "title": "Stale", "title_revision": 3}),
    );
    assert_eq!(r["thread"]["title"], "Newer");
    assert_eq!(r["thread"]["title_revision"], 5);
    let r = app.call(
        "thread/rename",
        json!({"thread_id": tid, "title": "Same revision", "title_revision": 5}),
    );
    assert_eq!(r["thread"]["title"], "Newer", "revisions only grow");
    // Listing and resume carry the same title and revision.
    let l = app.call("thread/list", json!({}));
    let row = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == json!(tid))
        .unwrap()
        .clone();
    assert_eq!(row["title"], "Newer");
    assert_eq!(row["title_revision"], 5);
    assert_eq!(row["updated_at"], t["updated_at"]);
    let r = app.call("thread/resume", json!({"session_id": tid}));
    assert_eq!(r["thread"]["title_revision"], 5);
}

#[test]
fn auto_title_fills_an_empty_title_once_and_never_a_manual_one() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(title_config(&fake.base_url(), true)));
    let tid = start_thread(&mut app);
    fake.push(Script::text(&["The answer."]));
    fake.push(Script::text(&["\"Paging history\"\n"]));
    let done = run_turn(&mut app, &tid, "How do pages work?");
    let before = done["turn"]["completed_at"].clone();
    let t2 = tid.clone();
    let u = app.wait_for("titled thread/updated", move |v| {
        v["method"] == "thread/updated"
            && v["params"]["thread"]["id"] == json!(t2)
            && v["params"]["thread"]["title"].is_string()
    });
    let th = &u["params"]["thread"];
    assert_eq!(th["title"], "Paging history");
    assert_eq!(th["title_revision"], 1);
    let _ = before;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(is_title_request(&reqs[1].body));
    assert!(reqs[1].body.to_string().contains("How do pages work?"));

    // A titled conversation gets no further title request.
    fake.push(Script::text(&["Again."]));
    run_turn(&mut app, &tid, "more");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fake.requests().len(), 3);

    // A manual title is never replaced.
    let tid2 = start_thread(&mut app);
    app.call("thread/rename", json!({"thread_id": tid2, "title": "Mine"}));
    fake.push(Script::text(&["ok"]));
    run_turn(&mut app, &tid2, "hello");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        fake.requests().len(),
        4,
        "no title request for a titled thread"
    );
    let r = app.call("thread/resume", json!({"session_id": tid2}));
    assert_eq!(r["thread"]["title"], "Mine");

    // A rename while the title request is in flight wins.
    let tid3 = start_thread(&mut app);
    fake.push(Script::text(&["ok"]));
    // The title request stalls, is retried and then succeeds — after the rename.
    fake.push(Script::stall(&["Auto"], Duration::from_millis(800)));
    fake.push(Script::text(&["Auto title"]));
    run_turn(&mut app, &tid3, "hi");
    assert!(fake.wait_requests(6, Duration::from_secs(5)));
    app.call(
        "thread/rename",
        json!({"thread_id": tid3, "title": "Manual"}),
    );
    assert!(fake.wait_requests(7, Duration::from_secs(10)));
    assert_eq!(fake.scripts_left(), 0, "the title answer was produced");
    std::thread::sleep(Duration::from_millis(300));
    let r = app.call("thread/resume", json!({"session_id": tid3}));
    assert_eq!(r["thread"]["title"], "Manual");
    assert_eq!(r["thread"]["title_revision"], 1);
}

#[test]
fn auto_title_failure_is_retried_after_the_next_successful_turn_and_can_be_off() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(title_config(&fake.base_url(), true)));
    let tid = start_thread(&mut app);
    fake.push(Script::text(&["one"]));
    fake.push(Script::status(HttpError::BadRequest(
        "no titles today".into(),
    )));
    run_turn(&mut app, &tid, "first question");
    assert!(fake.wait_requests(2, Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(300));
    let r = app.call("thread/resume", json!({"session_id": tid}));
    assert!(r["thread"].get("title").is_none());
    fake.push(Script::text(&["two"]));
    fake.push(Script::text(&["Retried title"]));
    run_turn(&mut app, &tid, "second question");
    let t2 = tid.clone();
    let u = app.wait_for("title", move |v| {
        v["method"] == "thread/updated"
            && v["params"]["thread"]["id"] == json!(t2)
            && v["params"]["thread"]["title"].is_string()
    });
    assert_eq!(u["params"]["thread"]["title"], "Retried title");
    assert!(is_title_request(&fake.requests()[3].body));

    // agent.auto_title: false → no title request at all.
    let fake = FakeProvider::start();
    let mut app = App::start(Some(title_config(&fake.base_url(), false)));
    let tid = start_thread(&mut app);
    fake.push(Script::text(&["one"]));
    run_turn(&mut app, &tid, "q");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fake.requests().len(), 1);
}

// ---------------------------------------------------------------------------------------
// Selection per conversation
// ---------------------------------------------------------------------------------------

fn two_provider_config(base_url: &str) -> Value {
    let mut c = config_for(base_url);
    c["providers"]["other"] = json!({"type": "openai-compatible", "base_url": base_url,
        "model": "other-model", "max_retries": 0});
    c
}

#[test]
fn selection_updates_one_conversation_and_is_busy_while_it_runs() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(two_provider_config(&fake.base_url())));
    let a = start_thread(&mut app);
    let b = start_thread(&mut app);
    let r = app.call(
        "config/model/update",
        json!({"thread_id": a, "effort": "high", "permission_mode": "read_only"}),
    );
    assert_eq!(r["model"], "fake-model", "omitted fields inherit");
    assert_eq!(r["effort"], "high");
    assert_eq!(r["permissions"]["mode"], "read_only");
    let a2 = a.clone();
    let u = app.wait_for("thread/updated", move |v| {
        v["method"] == "thread/updated" && v["params"]["thread"]["id"] == json!(a2)
    });
    let th = &u["params"]["thread"];
    assert_eq!(th["model_effort"], "high");
    assert_eq!(th["permission_mode"], "read_only");
    assert_eq!(th["model"], "fake-model");
    // Switching provider takes its default model unless one is given.
    app.call(
        "config/model/update",
        json!({"thread_id": a, "provider": "other"}),
    );
    let r = app.call("thread/resume", json!({"session_id": a}));
    assert_eq!(r["thread"]["model_provider"], "other");
    assert_eq!(r["thread"]["model"], "other-model");
    assert_eq!(r["thread"]["model_effort"], "high");
    // The other conversation and the defaults are untouched.
    let r = app.call("thread/resume", json!({"session_id": b}));
    assert_eq!(r["thread"]["model_provider"], "fake");
    assert_eq!(r["thread"]["permission_mode"], "standard");
    assert_eq!(app.call("config/read", json!({}))["model"], "fake-model");

    // The turn runs with the conversation's selection.
    fake.push(Script::text(&["ok"]));
    run_turn(&mut app, &a, "hi");
    assert_eq!(fake.requests()[0].body["model"], "other-model");

    // Busy while a turn executes.
    fake.push(Script::stall(&["slow"], Duration::from_secs(3)));
    app.call("turn/start", json!({"thread_id": b, "prompt": "wait"}));
    assert!(fake.wait_requests(2, Duration::from_secs(5)));
    let e = app.call_err("config/model/update", json!({"thread_id": b, "model": "x"}));
    assert_eq!(e["code"], "thread_busy");
    app.call("turn/interrupt", json!({"thread_id": b}));
    app.notification("turn/error");
    app.call("config/model/update", json!({"thread_id": b, "model": "x"}));

    // Connection changes cannot be combined with a conversation selection.
    for extra in [
        json!({"base_url": "http://127.0.0.1:9/v1"}),
        json!({"keep_selection": true}),
        json!({"create_provider": true}),
    ] {
        let mut p = json!({"thread_id": a, "model": "m"});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        let e = app.call_err("config/model/update", p);
        assert_eq!(e["code"], "invalid_params", "{e}");
    }
    let e = app.call_err(
        "config/model/update",
        json!({"thread_id": a, "provider": "missing"}),
    );
    assert_eq!(e["code"], "invalid_params");
}

#[test]
fn default_selection_updates_the_config_file_and_keep_selection_only_saves_the_connection() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(two_provider_config(&fake.base_url())));
    let old = start_thread(&mut app);
    let e = app.call_err("config/model/update", json!({"effort": "low"}));
    assert!(
        e["message"].as_str().unwrap().contains("model is required"),
        "{e}"
    );
    let r = app.call(
        "config/model/update",
        json!({"provider": "other", "model": "big-model", "effort": "low"}),
    );
    assert_eq!(r["provider"], "other");
    assert_eq!(r["model"], "big-model");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(app.home.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(file["default_provider"], "other");
    assert_eq!(file["agent"]["model"], "big-model");
    assert_eq!(file["agent"]["auto_title"], false, "other settings kept");
    // New conversations use the new defaults; existing ones keep theirs.
    let t = app.call("thread/start", json!({}))["thread"].clone();
    assert_eq!(t["model_provider"], "other");
    assert_eq!(t["model"], "big-model");
    let r = app.call("thread/resume", json!({"session_id": old}));
    assert_eq!(r["thread"]["model"], "fake-model");

    // keep_selection: saves a new connection without changing the defaults.
    let r = app.call(
        "config/model/update",
        json!({"provider": "third", "model": "m3", "type": "anthropic",
            "base_url": "http://127.0.0.1:9", "api_key_env": "THIRD_KEY",
            "create_provider": true, "keep_selection": true}),
    );
    assert_eq!(r["provider"], "other");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(app.home.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(file["providers"]["third"]["type"], "anthropic");
    assert_eq!(file["providers"]["third"]["api_key_env"], "THIRD_KEY");
    assert_eq!(file["default_provider"], "other");
    let e = app.call_err(
        "config/model/update",
        json!({"provider": "third", "keep_selection": true, "effort": "high"}),
    );
    assert_eq!(e["code"], "invalid_params");
    let e = app.call_err(
        "config/model/update",
        json!({"provider": "fourth", "model": "m"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("create_provider"),
        "{e}"
    );
    let e = app.call_err(
        "config/model/update",
        json!({"provider": "other", "model": "m", "api_key": "sk-secret"}),
    );
    assert_eq!(e["code"], "invalid_params");
    // Survives a restart (the file is valid config).
    app.restart();
    assert_eq!(app.call("config/read", json!({}))["provider"], "other");
}

#[test]
fn turn_start_cannot_override_the_permission_mode() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let tid = start_thread(&mut app);
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": tid, "prompt": "x", "permission_mode": "unconfined"}),
    );
    assert_eq!(e["code"], "invalid_params");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("config/model/update"));
    assert!(fake.requests().is_empty());
}
