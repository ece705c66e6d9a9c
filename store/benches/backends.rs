//! Store backends side by side: the same store calls on SQLite (a file in a temporary
//! directory) and on PostgreSQL (loopback), measured in the same run.
//!
//! Rows: the listing of one workspace's 1,000 conversations (`list_threads`, what
//! `thread/list` reads), and a turn's store writes (insert the turn, five items written
//! twice each — started, then completed — settle the turn, record activity), each call
//! its own transaction as the host commits them. Figures are medians; the ratio is
//! PostgreSQL over SQLite.
//!
//! Run: `WUU_BENCH_PG_URL=postgresql://user@127.0.0.1:5432/db cargo bench -p wuu-store
//! --features postgres --bench backends` (`.ci/pg` starts a throwaway server; without
//! the variable only SQLite runs). `WUU_BENCH_TURNS` overrides 200 turns.

use std::time::{Duration, Instant};

use serde_json::json;
use wuu_store::{ItemRow, Result, Store, ThreadFilter, ThreadRow, TurnRow};

const THREADS: usize = 1_000;
const LISTINGS: usize = 30;

/// The calls the bench makes, on either backend.
trait Calls {
    fn insert_thread(&mut self, t: &ThreadRow) -> Result<()>;
    fn list(&mut self, f: &ThreadFilter) -> Result<usize>;
    fn insert_turn(&mut self, t: &TurnRow) -> Result<()>;
    fn update_turn(&mut self, t: &TurnRow) -> Result<()>;
    fn upsert_item(&mut self, i: &ItemRow) -> Result<u64>;
    fn touch_thread(&mut self, id: &str, at: i64) -> Result<()>;
}

macro_rules! calls {
    ($t:ty) => {
        impl Calls for $t {
            fn insert_thread(&mut self, t: &ThreadRow) -> Result<()> {
                <$t>::insert_thread(self, t)
            }
            fn list(&mut self, f: &ThreadFilter) -> Result<usize> {
                Ok(<$t>::list_threads(self, f)?.len())
            }
            fn insert_turn(&mut self, t: &TurnRow) -> Result<()> {
                <$t>::insert_turn(self, t)
            }
            fn update_turn(&mut self, t: &TurnRow) -> Result<()> {
                <$t>::update_turn(self, t)
            }
            fn upsert_item(&mut self, i: &ItemRow) -> Result<u64> {
                <$t>::upsert_item(self, i)
            }
            fn touch_thread(&mut self, id: &str, at: i64) -> Result<()> {
                <$t>::touch_thread(self, id, at)
            }
        }
    };
}

calls!(Store);
#[cfg(feature = "postgres")]
calls!(wuu_store::pg::PgStore);

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// (listing of 1,000, one turn's writes), medians.
fn run(s: &mut dyn Calls, turns: usize) -> (Duration, Duration) {
    for i in 0..THREADS {
        let mut t = ThreadRow::new(format!("t{i:04}"), "/bench", 1_000);
        t.updated_at_ms = 1_000 + i as i64;
        t.preview = format!("conversation {i} about something worth listing");
        s.insert_thread(&t).unwrap();
    }
    let filter = ThreadFilter {
        cwd: Some("/bench".into()),
        archived: Some(false),
        limit: None,
    };
    let mut listings = Vec::new();
    for _ in 0..LISTINGS {
        let started = Instant::now();
        assert_eq!(s.list(&filter).unwrap(), THREADS);
        listings.push(started.elapsed());
    }
    let mut writes = Vec::new();
    for n in 0..turns {
        let thread = format!("t{:04}", n % THREADS);
        let started = Instant::now();
        let mut turn = TurnRow::new(&thread, format!("u{n}"), "user", 2_000);
        s.insert_turn(&turn).unwrap();
        for k in 0..5 {
            let mut item = ItemRow {
                thread_id: thread.clone(),
                turn_id: turn.id.clone(),
                id: format!("i{n}-{k}"),
                item_type: "agent_message".into(),
                status: Some("in_progress".into()),
                seq: 0,
                body: json!({"id": format!("i{n}-{k}"), "type": "agent_message", "text": "x".repeat(200)}),
            };
            s.upsert_item(&item).unwrap();
            item.status = Some("completed".into());
            s.upsert_item(&item).unwrap();
        }
        turn.status = "completed".into();
        s.update_turn(&turn).unwrap();
        s.touch_thread(&thread, 10_000 + n as i64).unwrap();
        writes.push(started.elapsed());
    }
    (median(listings), median(writes))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let turns: usize = std::env::var("WUU_BENCH_TURNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let mut lite = Store::open(&dir.path().join("wuu.db")).unwrap();
    let (lite_list, lite_turn) = run(&mut lite, turns);
    println!(
        "sqlite      list of {THREADS}: {:8.3} ms   turn's writes: {:8.3} ms",
        ms(lite_list),
        ms(lite_turn)
    );
    #[cfg(feature = "postgres")]
    {
        let Ok(base) = std::env::var("WUU_BENCH_PG_URL") else {
            println!("postgresql  skipped: WUU_BENCH_PG_URL is not set");
            return;
        };
        let schema = format!("bench_{}", std::process::id());
        let ok = std::process::Command::new("psql")
            .args([&base, "-qc", &format!("CREATE SCHEMA {schema}")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "CREATE SCHEMA {schema} failed");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        let mut pg = wuu_store::pg::PgStore::open(&url).unwrap();
        let (pg_list, pg_turn) = run(&mut pg, turns);
        println!(
            "postgresql  list of {THREADS}: {:8.3} ms   turn's writes: {:8.3} ms",
            ms(pg_list),
            ms(pg_turn)
        );
        println!(
            "ratio (postgresql / sqlite): list {:.2}x, turn's writes {:.2}x",
            ms(pg_list) / ms(lite_list),
            ms(pg_turn) / ms(lite_turn)
        );
        let _ = std::process::Command::new("psql")
            .args([
                &base,
                "-qc",
                &format!("SET client_min_messages = warning; DROP SCHEMA {schema} CASCADE"),
            ])
            .status();
    }
}
