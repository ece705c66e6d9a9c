//! Pages and CPU per commit of a streamed turn on SQLite: the two transactions the host
//! commits for a turn that streams its answer (the admission: lease, turn row, user
//! message, conversation row; the settlement: usage record, the answer's item, the
//! turn's row, the activity time, the lease release), replayed through the store's
//! public calls on a file in a temporary directory that already holds conversations
//! with history.
//!
//! Pages are counted in the write-ahead log: every commit appends one frame per page it
//! changed, so the frames a commit added are its pages; each is named by the table or
//! index that owns it (SQLite's `dbstat` table). Time is wall time per commit on one
//! thread with nobody else writing (≈ CPU). Figures are per commit, medians for time.
//! The text index's batches (`Store::index_text`, which the host runs off the turns)
//! are counted apart, per turn (`WUU_BENCH_INDEX_EVERY` turns a batch, default 100).
//!
//! Run: `cargo bench -p wuu-store --bench pages` (`WUU_BENCH_THREADS` conversations,
//! default 200, each with `WUU_BENCH_HISTORY` turns of history, default 5;
//! `WUU_BENCH_TURNS` measured turns, default 400, spread over the conversations).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

use serde_json::json;
use wuu_store::{ItemRow, LeaseOutcome, LeaseOwner, Store, ThreadRow, TurnRow, UsageRow};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Frames in the write-ahead log at `wal` from frame `from` on: their page numbers.
fn frames(wal: &Path, from: usize) -> (Vec<u32>, usize) {
    let bytes = std::fs::read(wal).unwrap_or_default();
    if bytes.len() < 32 {
        return (Vec::new(), 0);
    }
    let page = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    let frame = 24 + page;
    let total = (bytes.len() - 32) / frame;
    let pages = (from..total)
        .map(|i| {
            let at = 32 + i * frame;
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        })
        .collect();
    (pages, total)
}

/// Which table or index owns each page (`dbstat`); page 1 is the schema's.
fn owners(db: &Path) -> HashMap<u32, String> {
    let c = rusqlite::Connection::open(db).unwrap();
    let mut stmt = c.prepare("SELECT pageno, name FROM dbstat").unwrap();
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?)))
        .unwrap();
    rows.map(Result::unwrap).collect()
}

fn thread_row(id: &str, now: i64) -> ThreadRow {
    let mut t = ThreadRow::new(id, "/home/someone/work/a-project-of-theirs", now);
    t.provider = "openai".into();
    t.model = "gpt-5".into();
    t.preview = "Please look at the failing test in the parser and fix it".into();
    t.extra = json!({"folder_id": "f1"});
    t
}

fn message(thread: &str, turn: &str, n: u32, kind: &str, text: &str) -> ItemRow {
    let id = format!("{turn}-item-{n:04}");
    ItemRow {
        thread_id: thread.into(),
        turn_id: turn.into(),
        body: json!({"id": id, "type": kind, "status": "completed",
                     "role": if kind == "user_message" { "user" } else { "assistant" },
                     "text": text}),
        id,
        item_type: kind.into(),
        status: Some("completed".into()),
        seq: 0,
    }
}

const PROMPT: &str = "Please look at the failing test in the parser and fix it, then run the suite";

fn answer(n: usize) -> String {
    format!(
        "I looked at the parser (turn {n}): the tokenizer dropped the last byte of a quoted \
         string when the quote was escaped. I changed the loop to keep it and added a test; \
         the whole suite passes now."
    )
}

/// One turn: the admission and the settlement, as the host commits them. Returns the
/// wall time of each commit.
fn turn(store: &mut Store, owner: &LeaseOwner, thread: &mut ThreadRow, n: usize) -> [f64; 2] {
    let t0 = Instant::now();
    let now = thread.updated_at_ms + 10;
    let turn_id = format!("turn-{n}");
    let mut row = TurnRow::new(&thread.id, &turn_id, "user", now);
    row.provider = "openai".into();
    row.model = "gpt-5".into();
    thread.updated_at_ms = now;
    let user = message(&thread.id, &turn_id, 1, "user_message", PROMPT);
    store
        .transaction(|tx| {
            match tx.acquire_lease(&thread.id, owner)? {
                LeaseOutcome::Busy(_) => panic!("busy"),
                LeaseOutcome::Acquired { settled, .. } => {
                    let _ = settled.interrupted_turns.is_empty()
                        || tx.get_thread(&thread.id)?.is_none();
                }
                LeaseOutcome::AlreadyHeld => {}
            }
            tx.insert_turn(&row)?;
            tx.upsert_item(&user)?;
            tx.update_thread(thread)
        })
        .unwrap();
    let admitted = t0.elapsed().as_secs_f64() * 1e6;
    let t1 = Instant::now();
    let end = now + 5;
    row.status = "completed".into();
    row.completed_at_ms = Some(end);
    row.answer_ready_at_ms = Some(end);
    row.input_tokens = 1200;
    row.output_tokens = 80;
    let usage = UsageRow {
        thread_id: thread.id.clone(),
        turn_id: turn_id.clone(),
        provider: "openai".into(),
        model: "gpt-5".into(),
        at_ms: end,
        input_tokens: 1200,
        output_tokens: 80,
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        reasoning_tokens: 0,
    };
    let reply = message(&thread.id, &turn_id, 2, "agent_message", &answer(n));
    store
        .transaction(|tx| {
            tx.insert_usage(&usage)?;
            tx.upsert_item(&reply)?;
            tx.update_turn(&row)?;
            tx.touch_thread(&thread.id, end)?;
            tx.release_lease(&thread.id, owner)
        })
        .unwrap();
    thread.updated_at_ms = end;
    [admitted, t1.elapsed().as_secs_f64() * 1e6]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let threads = env_or("WUU_BENCH_THREADS", 200).max(1);
    let history = env_or("WUU_BENCH_HISTORY", 5);
    let turns = env_or("WUU_BENCH_TURNS", 400);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wuu.db");
    let wal = dir.path().join("wuu.db-wal");
    let mut store = Store::open(&db).unwrap();
    let owner = LeaseOwner {
        pid: std::process::id(),
        instance: "bench-instance".into(),
        host: "bench-host".into(),
    };
    let mut rows = Vec::new();
    let mut n = 0;
    for i in 0..threads {
        let t = thread_row(&format!("thread-{i:05}"), 1_700_000_000_000 + i as i64);
        store.insert_thread(&t).unwrap();
        rows.push(t);
    }
    for _ in 0..history {
        for t in rows.iter_mut() {
            turn(&mut store, &owner, t, n);
            n += 1;
        }
    }
    let side = rusqlite::Connection::open(&db).unwrap();
    let checkpoint = || {
        side.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap()
    };
    checkpoint();
    // Per commit kind: pages by owner, total pages, times.
    let mut by_owner: [BTreeMap<String, usize>; 2] = Default::default();
    let mut pages = [0usize; 2];
    let mut times: [Vec<f64>; 2] = Default::default();
    let mut done = 0;
    let index_every = env_or("WUU_BENCH_INDEX_EVERY", 100).max(1);
    let mut index_owner: BTreeMap<String, usize> = BTreeMap::new();
    let (mut index_pages, mut index_time) = (0usize, 0f64);
    while done < turns {
        // A batch stays well under the automatic checkpoint (1,000 frames).
        let batch = (turns - done).min(10);
        let mut seen = 0;
        let mut batch_pages: Vec<[Vec<u32>; 2]> = Vec::new();
        for _ in 0..batch {
            let t = &mut rows[done % threads];
            let mut one: [Vec<u32>; 2] = Default::default();
            let [a, b] = turn_split(&mut store, &owner, t, n, &wal, &mut seen, &mut one);
            times[0].push(a);
            times[1].push(b);
            batch_pages.push(one);
            n += 1;
            done += 1;
        }
        // The host writes the text index off the turns, in batches (its heartbeat).
        let mut indexing = Vec::new();
        if done % index_every == 0 || done == turns {
            let t0 = Instant::now();
            let moved = store.index_text(usize::MAX).unwrap();
            if moved > 0 {
                index_time += t0.elapsed().as_secs_f64() * 1e6;
                indexing = frames(&wal, seen).0;
            }
        }
        let names = owners(&db);
        for p in &indexing {
            let name = names
                .get(p)
                .cloned()
                .unwrap_or_else(|| "(free list)".into());
            *index_owner.entry(name).or_default() += 1;
        }
        index_pages += indexing.len();
        for one in &batch_pages {
            for (k, list) in one.iter().enumerate() {
                pages[k] += list.len();
                for p in list {
                    let name = names
                        .get(p)
                        .cloned()
                        .unwrap_or_else(|| "(free list)".into());
                    *by_owner[k].entry(name).or_default() += 1;
                }
            }
        }
        checkpoint();
    }
    println!(
        "{turns} turns over {threads} conversations with {history} turns of history each \
         (SQLite {})",
        rusqlite::version()
    );
    for (k, name) in ["admission", "settlement"].iter().enumerate() {
        println!(
            "{name}: {:.2} pages a commit, median {:.0} µs",
            pages[k] as f64 / turns.max(1) as f64,
            median(&mut times[k])
        );
        for (owner, count) in &by_owner[k] {
            println!("  {owner:<28} {:.2}", *count as f64 / turns.max(1) as f64);
        }
    }
    let per_turn = |n: f64| n / turns.max(1) as f64;
    println!(
        "text index, in batches every {index_every} turns: {:.2} pages and {:.0} µs a turn",
        per_turn(index_pages as f64),
        per_turn(index_time)
    );
    for (owner, count) in &index_owner {
        println!("  {owner:<28} {:.2}", per_turn(*count as f64));
    }
    println!(
        "per turn: {:.2} pages in 2 commits, {:.2} with the text index's batches",
        per_turn((pages[0] + pages[1]) as f64),
        per_turn((pages[0] + pages[1] + index_pages) as f64)
    );
}

/// [`turn`], reading the frames each commit added into `out`.
fn turn_split(
    store: &mut Store,
    owner: &LeaseOwner,
    thread: &mut ThreadRow,
    n: usize,
    wal: &Path,
    seen: &mut usize,
    out: &mut [Vec<u32>; 2],
) -> [f64; 2] {
    // The two commits run inside `turn`; the frames of the admission are those up to
    // the first commit frame after `seen`.
    let spent = turn(store, owner, thread, n);
    let (all, total) = frames(wal, *seen);
    *seen = total;
    let split = first_commit_len(wal, total - all.len(), all.len());
    out[0] = all[..split].to_vec();
    out[1] = all[split..].to_vec();
    spent
}

/// How many of the `count` frames starting at frame `from` belong to the first commit
/// (a commit's last frame records the database size, non-zero).
fn first_commit_len(wal: &Path, from: usize, count: usize) -> usize {
    let bytes = std::fs::read(wal).unwrap_or_default();
    let page = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    let frame = 24 + page;
    for i in 0..count {
        let at = 32 + (from + i) * frame + 4;
        let size = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        if size != 0 {
            return i + 1;
        }
    }
    count
}
