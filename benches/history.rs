//! History paging bench (issue 6): bounded memory while a client pages a large
//! conversation.
//!
//! Builds, directly in the SQLite store, a conversation of 10 000 turns (user message,
//! a tool call with 1 KiB of output, the final answer) plus one turn whose tool output is
//! 50 MB, then spawns the real binary and measures its peak RSS (VmHWM):
//! 1. after `initialize`;
//! 2. after walking every history page with `thread/history/read` (served from the
//!    store page by page, starting from a cursor naming the newest turn);
//! 3. after opening the big turn's summary (`thread/activity/read`) and reading the
//!    50 MB item in full through its `remote_content_ref` (`thread/content/read`,
//!    128 KiB chunks);
//! 4. after `thread/resume {conversation_history: true}` — which revives the session
//!    without loading the whole history (a revived session loads it on first need, e.g.
//!    a new turn), so the newest page is served from the store like the others.
//!
//! Run: `cargo bench --bench history` (env `WUU_BENCH_TURNS` overrides 10 000,
//! `WUU_BENCH_BIG_MB` overrides 50).

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;
use wuu_protocol::ThreadItem;
use wuu_store::{ItemRow, Store, ThreadRow, TurnRow};

struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Proc {
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = format!("b{}", self.next);
        let line = json!({"id": id, "method": method, "params": params}).to_string() + "\n";
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut buf = String::new();
            assert!(
                self.stdout.read_line(&mut buf).unwrap() > 0,
                "server exited"
            );
            let v: Value = serde_json::from_str(&buf).unwrap();
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    fn status_kib(&self, key: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn item(turn: &str, n: usize, ty: &str) -> ThreadItem {
    let mut i = ThreadItem::new(format!("{turn}-item-{n:04}"), ty);
    i.status = Some("completed".into());
    i
}

fn main() {
    let turns: usize = std::env::var("WUU_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let big_mb: usize = std::env::var("WUU_BENCH_BIG_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.json"),
        json!({"agent": {"auto_title": false}, "default_provider": "fake",
            "providers": {"fake": {"type": "openai-compatible",
                "base_url": "http://127.0.0.1:9/v1", "model": "fake-model"}}})
        .to_string(),
    )
    .unwrap();

    // Build the conversation in the store.
    let t0 = Instant::now();
    let tid = "thr_bench".to_owned();
    let big_turn = format!("turn_{:05}", turns / 2);
    let big_item = format!("{big_turn}-item-0002");
    {
        let mut store = Store::open_home(home.path()).unwrap();
        let mut row = ThreadRow::new(&tid, ws.path().to_string_lossy(), 1_700_000_000_000);
        row.provider = "fake".into();
        row.model = "fake-model".into();
        row.permission_mode = "standard".into();
        row.engine_id = "wuu".into();
        store.insert_thread(&row).unwrap();
        store
            .transaction(|tx| {
                for i in 0..turns {
                    let turn = format!("turn_{i:05}");
                    let mut t = TurnRow::new(&tid, &turn, "user", 1_700_000_000_000 + i as i64);
                    t.status = "completed".into();
                    tx.insert_turn(&t)?;
                    let mut u = item(&turn, 1, "user_message");
                    u.text = Some(format!("question {i}"));
                    let mut c = item(&turn, 2, "tool_call");
                    c.name = Some("bash".into());
                    c.arguments = Some(r#"{"command":"ls -la"}"#.into());
                    c.result = Some(if turn == big_turn {
                        "0123456789abcdef".repeat(big_mb * 1024 * 1024 / 16)
                    } else {
                        "x".repeat(1024)
                    });
                    let mut a = item(&turn, 3, "agent_message");
                    a.terminal = true;
                    a.text = Some(format!("answer {i}: ") + &"y".repeat(200));
                    for it in [u, c, a] {
                        tx.upsert_item(&ItemRow {
                            thread_id: tid.clone(),
                            turn_id: turn.clone(),
                            id: it.id.clone(),
                            item_type: it.item_type.clone(),
                            status: it.status.clone(),
                            seq: 0,
                            body: serde_json::to_value(&it).unwrap(),
                        })?;
                    }
                }
                Ok(())
            })
            .unwrap();
    }
    let db_bytes = std::fs::metadata(home.path().join("wuu.db"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "built {turns} turns + one {big_mb} MB tool output in {:.1?} (wuu.db {:.1} MiB)",
        t0.elapsed(),
        db_bytes as f64 / 1048576.0
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_wuu"))
        .arg("app-server")
        .arg("--workdir")
        .arg(ws.path())
        .env("WUU_HOME", home.path())
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn wuu");
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut p = Proc {
        child,
        stdin,
        stdout,
        next: 0,
    };
    p.call("initialize", json!({}));
    let base = p.status_kib("VmHWM:");
    println!("1. after initialize:               VmHWM {base:>8} KiB");

    // 2. Walk all pages from the newest turn.
    let newest = format!("turn_{:05}", turns - 1);
    let mut cursor = Some(
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!([newest, null]).to_string()),
    );
    let (mut pages, mut seen_turns, mut max_page_bytes) = (0usize, 0usize, 0usize);
    let mut big_summary: Option<Value> = None;
    let t = Instant::now();
    while let Some(c) = cursor.take() {
        let r = p.call(
            "thread/history/read",
            json!({"thread_id": tid, "cursor": c}),
        );
        pages += 1;
        let page = r["turns"].as_array().unwrap();
        seen_turns += page.len();
        let bytes: usize = page
            .iter()
            .flat_map(|t| t["items"].as_array().unwrap().iter())
            .map(|i| serde_json::to_vec(i).unwrap().len())
            .sum();
        max_page_bytes = max_page_bytes.max(bytes);
        for t in page.iter().filter(|t| t["id"] == json!(big_turn)) {
            big_summary = t["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["type"] == "process_summary")
                .cloned();
        }
        cursor = r["history_cursor"].as_str().map(str::to_owned);
    }
    let paging = t.elapsed();
    let after_pages = p.status_kib("VmHWM:");
    println!(
        "2. after {pages} history pages:      VmHWM {after_pages:>8} KiB  ({seen_turns} turns, largest page {max_page_bytes} B, {:.1?}, {:.2} ms/page)",
        paging,
        paging.as_secs_f64() * 1000.0 / pages.max(1) as f64
    );

    // 3. The big item through activity/read and content/read.
    let s = big_summary.expect("summary of the big turn");
    let a = p.call(
        "thread/activity/read",
        json!({"thread_id": tid, "turn_id": big_turn, "item_id": s["id"],
            "last_item_id": s["activity"]["last_item_id"]}),
    );
    let call = &a["turn"]["items"][0];
    assert_eq!(call["id"], json!(big_item));
    let r = call["remote_content_ref"].as_str().expect("content ref");
    let parts: Vec<String> = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(r.strip_prefix("content:").unwrap())
            .unwrap(),
    )
    .unwrap();
    let t = Instant::now();
    let (mut offset, mut chunks, mut hasher, mut carry) =
        (0u64, 0usize, Sha256::new(), String::new());
    loop {
        let c = p.call(
            "thread/content/read",
            json!({"thread_id": tid, "turn_id": big_turn, "item_id": big_item,
                "sha256": parts[3], "offset": offset}),
        );
        let data = c["data"].as_str().unwrap();
        chunks += 1;
        offset += data.len() as u64;
        carry.push_str(data);
        let whole = carry.len() / 4 * 4;
        hasher.update(
            base64::engine::general_purpose::STANDARD
                .decode(&carry[..whole])
                .unwrap(),
        );
        carry.drain(..whole);
        if offset == c["total"].as_u64().unwrap() {
            break;
        }
    }
    let sha: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, parts[3], "reassembled content matches its reference");
    let after_content = p.status_kib("VmHWM:");
    println!(
        "3. after reading the {big_mb} MB item:   VmHWM {after_content:>8} KiB  ({chunks} chunks in {:.1?})",
        t.elapsed()
    );

    // 4. Resume (revives the session: whole history in memory).
    let t = Instant::now();
    let r = p.call(
        "thread/resume",
        json!({"session_id": tid, "conversation_history": true}),
    );
    let first = r["thread"]["turns"].as_array().unwrap().len();
    let after_resume = p.status_kib("VmHWM:");
    println!(
        "4. after thread/resume (session):  VmHWM {after_resume:>8} KiB  (first page {first} turns, {:.1?})",
        t.elapsed()
    );
    println!(
        "paging cost above the idle server: {} KiB; session revival cost: {} KiB",
        after_content.saturating_sub(base),
        after_resume.saturating_sub(after_content)
    );
}
