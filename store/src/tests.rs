//! Unit tests against real SQLite files in temporary directories.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use crate::*;

fn open_tmp() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_home(&dir.path().join("home")).unwrap();
    (dir, store)
}

fn thread(id: &str, cwd: &str, updated: i64) -> ThreadRow {
    let mut t = ThreadRow::new(id, cwd, 1_000);
    t.updated_at_ms = updated;
    t.preview = format!("preview of {id}");
    t
}

fn turn(thread_id: &str, id: &str) -> TurnRow {
    TurnRow::new(thread_id, id, "user", 2_000)
}

fn item(thread_id: &str, turn_id: &str, id: &str, ty: &str, text: &str) -> ItemRow {
    ItemRow {
        thread_id: thread_id.into(),
        turn_id: turn_id.into(),
        id: id.into(),
        item_type: ty.into(),
        status: Some("completed".into()),
        seq: 0,
        body: json!({"id": id, "type": ty, "text": text}),
    }
}

/// SQLite's plan of `sql` with `params` (the detail column of `EXPLAIN QUERY PLAN`).
fn query_plan(c: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
    c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap()
        .query_map(params, |r| r.get(3))
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// A raw connection for poking at the file behind the store's back.
fn raw(store: &Store) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(store.path()).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}

fn count(store: &Store, table: &str) -> i64 {
    raw(store)
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn migrations_are_idempotent_and_reopen_keeps_data() {
    let (dir, mut store) = open_tmp();
    assert_eq!(store.schema_version().unwrap(), schema::latest_version());
    store.insert_thread(&thread("t1", "/w", 5)).unwrap();
    let path = store.path().to_path_buf();
    assert_eq!(path, dir.path().join("home").join(DB_FILE));
    drop(store);
    let again = Store::open(&path).unwrap();
    let third = Store::open(&path).unwrap();
    assert_eq!(again.schema_version().unwrap(), schema::latest_version());
    assert!(again.get_thread("t1").unwrap().is_some());
    assert!(third.get_thread("t1").unwrap().is_some());
    let mode: String = raw(&again)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn newer_schema_is_refused() {
    let (_dir, store) = open_tmp();
    raw(&store)
        .pragma_update(None, "user_version", 999)
        .unwrap();
    let err = Store::open(store.path()).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 999, .. }),
        "{err}"
    );
}

#[test]
fn listing_skips_damaged_rows() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("a", "/w", 30)).unwrap();
    store.insert_thread(&thread("b", "/w", 20)).unwrap();
    store.insert_thread(&thread("c", "/other", 10)).unwrap();
    store.insert_thread(&thread("d", "/w", 5)).unwrap();
    store.set_archived("d", true, None).unwrap();
    let ids = |v: Vec<ThreadRow>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_threads(&ThreadFilter::default()).unwrap()),
        ["a", "b", "c", "d"]
    );

    // damaged metadata (extra) is read as `{}` and flagged: the row is still listed
    raw(&store)
        .execute("UPDATE threads SET extra = '{not json' WHERE id = 'b'", [])
        .unwrap();
    let b = store.get_thread("b").unwrap().unwrap();
    assert_eq!(b.extra, serde_json::json!({}));
    assert!(b.damage.as_deref().unwrap().contains("extra"), "{b:?}");
    // an update keeps the damaged text (nothing is guessed over it)
    store.update_thread(&b).unwrap();
    let text: String = raw(&store)
        .query_row("SELECT extra FROM threads WHERE id = 'b'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(text, "{not json");
    // an out-of-range value cannot be read at all (STRICT tables keep types, so a
    // negative revision is the way to break a u64 column): skipped, never hiding others
    store.insert_thread(&thread("e", "/w", 15)).unwrap();
    raw(&store)
        .execute("UPDATE threads SET title_revision = -1 WHERE id = 'e'", [])
        .unwrap();
    let err = store.get_thread("e").unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("threads[e]"), "{err}");
    assert_eq!(
        ids(store.list_threads(&ThreadFilter::default()).unwrap()),
        ["a", "b", "c", "d"]
    );
    assert_eq!(
        ids(store
            .list_threads(&ThreadFilter {
                cwd: Some("/w".into()),
                archived: Some(false),
                limit: Some(5),
            })
            .unwrap()),
        ["a", "b"]
    );
    // the limit counts returned rows, not scanned ones
    raw(&store)
        .execute("UPDATE threads SET title_revision = -1 WHERE id = 'b'", [])
        .unwrap();
    assert_eq!(
        ids(store
            .list_threads(&ThreadFilter {
                limit: Some(2),
                ..Default::default()
            })
            .unwrap()),
        ["a", "c"]
    );
    assert_eq!(
        ids(store
            .list_threads(&ThreadFilter {
                archived: Some(true),
                ..Default::default()
            })
            .unwrap()),
        ["d"]
    );

    // an unreadable newest row does not hide the latest good one
    raw(&store)
        .execute(
            "UPDATE threads SET title_revision = -1, updated_at_ms = 100 WHERE id = 'a'",
            [],
        )
        .unwrap();
    assert_eq!(
        ids(store.list_threads(&ThreadFilter::default()).unwrap()),
        ["c", "d"]
    );
    assert!(store.latest_thread("/w").unwrap().is_none());
    assert_eq!(store.latest_thread("/other").unwrap().unwrap().id, "c");
}

#[test]
fn search_finds_titles_and_message_text() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    store.insert_thread(&thread("t2", "/w", 20)).unwrap();
    store.insert_thread(&thread("t3", "/w", 30)).unwrap();
    store
        .set_title("t3", Some("Refactor the Parser"), 1)
        .unwrap();
    store.insert_turn(&turn("t1", "u1")).unwrap();
    let long = format!(
        "{} the Magic Word is here {}",
        "x".repeat(400),
        "y".repeat(400)
    );
    store
        .upsert_item(&item("t1", "u1", "i1", "user_message", "first"))
        .unwrap();
    let seq = store
        .upsert_item(&item("t1", "u1", "i2", "agent_message", &long))
        .unwrap();
    store
        .upsert_item(&item(
            "t1",
            "u1",
            "i3",
            "reasoning",
            "secret parser thoughts",
        ))
        .unwrap();
    store.insert_turn(&turn("t2", "u1")).unwrap();
    store
        .upsert_item(&item(
            "t2",
            "u1",
            "i1",
            "user_message",
            "请帮我修复这个错误",
        ))
        .unwrap();
    store.set_archived("t1", true, None).unwrap();

    let hits = store.search_threads("magic WORD", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].thread.id, "t1", "archived threads are searched");
    assert_eq!(hits[0].item_seq, Some(seq));
    assert_eq!(hits[0].item_id.as_deref(), Some("i2"));
    assert!(hits[0].snippet.contains("Magic Word"));
    assert!(hits[0].snippet.chars().count() <= SNIPPET_CHARS);

    // reasoning text is not searched; the title is
    let hits = store.search_threads("parser", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].thread.id, "t3");
    assert_eq!(hits[0].item_seq, None);
    assert_eq!(hits[0].snippet, "Refactor the Parser");

    let hits = store.search_threads("修复", 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].thread.id, "t2");

    // previews match; newest activity first; limit applies
    let hits = store.search_threads("PREVIEW OF", 2).unwrap();
    assert_eq!(
        hits.iter()
            .map(|h| h.thread.id.as_str())
            .collect::<Vec<_>>(),
        ["t3", "t2"]
    );
    assert!(store.search_threads("no such text", 10).unwrap().is_empty());

    // empty query: newest unarchived threads
    let hits = store.search_threads("  ", 10).unwrap();
    assert_eq!(
        hits.iter()
            .map(|h| h.thread.id.as_str())
            .collect::<Vec<_>>(),
        ["t3", "t2"]
    );

    // a corrupt item body does not break the search
    raw(&store)
        .execute(
            "UPDATE items SET body = 'garbage' WHERE id = 'i1' AND thread_id = 't2'",
            [],
        )
        .unwrap();
    assert!(store.search_threads("修复", 10).unwrap().is_empty());
    assert_eq!(store.search_threads("magic", 10).unwrap().len(), 1);
}

/// Ids of the threads a search finds, in order.
fn found(store: &Store, query: &str) -> Vec<String> {
    store
        .search_threads(query, 100)
        .unwrap()
        .into_iter()
        .map(|h| h.thread.id)
        .collect()
}

#[test]
fn search_index_is_built_for_older_stores_and_follows_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wuu.db");
    {
        // A store of schema version 6 (before the text index) with messages in it.
        let c = rusqlite::Connection::open(&path).unwrap();
        for sql in &crate::schema::MIGRATIONS[..6] {
            c.execute_batch(sql).unwrap();
        }
        c.pragma_update(None, "user_version", 6).unwrap();
        c.execute_batch(
            r#"INSERT INTO threads (id, cwd, created_at_ms, updated_at_ms) VALUES ('old', '/w', 1, 5);
               INSERT INTO turns (thread_id, id, ordinal, kind, status, started_at_ms)
                   VALUES ('old', 'u1', 1, 'user', 'completed', 1);
               INSERT INTO items (thread_id, id, turn_id, seq, item_type, body) VALUES
                   ('old', 'i1', 'u1', 1, 'user_message', '{"text":"Where is the Needle hidden?"}'),
                   ('old', 'i2', 'u1', 2, 'reasoning', '{"text":"needle in reasoning"}'),
                   ('old', 'i3', 'u1', 3, 'agent_message', 'not json needle');"#,
        )
        .unwrap();
    }
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), schema::latest_version());
    let indexed: i64 = raw(&store)
        .query_row("SELECT count(*) FROM item_text", [], |r| r.get(0))
        .unwrap();
    assert_eq!(indexed, 1, "only the valid message text is indexed");
    // Newer conversations that match nothing: the search reads their messages directly,
    // and those of the older ones through the index.
    for i in 0..40 {
        store
            .insert_thread(&thread(&format!("fill{i}"), "/w", 1_000 + i))
            .unwrap();
    }
    assert_eq!(found(&store, "NEEDLE hid"), ["old"]);
    let hits = store.search_threads("needle", 10).unwrap();
    assert_eq!(hits[0].item_id.as_deref(), Some("i1"));

    // New and changed messages are found by their new text only; deleted ones not at all.
    store.insert_thread(&thread("new", "/w", 10)).unwrap();
    store.insert_turn(&turn("new", "u1")).unwrap();
    store
        .upsert_item(&item(
            "new",
            "u1",
            "m1",
            "agent_message",
            "a haystack of straw",
        ))
        .unwrap();
    assert_eq!(found(&store, "haystack"), ["new"]);
    store
        .upsert_item(&item("new", "u1", "m1", "agent_message", "only hay now"))
        .unwrap();
    assert!(found(&store, "haystack").is_empty());
    assert_eq!(found(&store, "only hay"), ["new"]);
    // An item that changes type leaves the index, and comes back.
    store
        .upsert_item(&item("new", "u1", "m1", "reasoning", "only hay now"))
        .unwrap();
    assert!(found(&store, "only hay").is_empty());
    store
        .upsert_item(&item("new", "u1", "m1", "user_message", "only hay now"))
        .unwrap();
    assert_eq!(found(&store, "only hay"), ["new"]);
    store.delete_item("new", "m1").unwrap();
    assert!(found(&store, "only hay").is_empty());

    // Queries the index cannot narrow (short, non-ASCII cased, quotes, CJK) keep the
    // scan's answers.
    store
        .upsert_item(&item(
            "new",
            "u1",
            "m2",
            "user_message",
            "Ein ÄPFEL sagt \"hi\" 修复这个",
        ))
        .unwrap();
    assert_eq!(found(&store, "äp"), ["new"]);
    assert_eq!(found(&store, "äpfel"), ["new"]);
    assert_eq!(found(&store, "sagt \"HI\""), ["new"]);
    assert_eq!(found(&store, "修复这"), ["new"]);
    assert_eq!(found(&store, "修复"), ["new"]);
    assert_eq!(
        found(&store, "ne"),
        ["new", "old"],
        "titles and previews too"
    );
    assert!(found(&store, "\"\"\"").is_empty());
    assert!(found(&store, "zzz*").is_empty());

    // Deleting a conversation takes its index entries with it.
    store.set_archived("new", true, None).unwrap();
    store.delete_thread("new", true).unwrap();
    store.delete_thread("old", false).unwrap();
    let indexed: i64 = raw(&store)
        .query_row("SELECT count(*) FROM item_text", [], |r| r.get(0))
        .unwrap();
    assert_eq!(indexed, 0);
    assert!(found(&store, "needle").is_empty());
}

/// A queued input of `thread_id`, pending, created and updated at 1 ms.
fn pending_input(thread_id: &str, id: &str) -> InputRow {
    InputRow {
        thread_id: thread_id.into(),
        id: id.into(),
        mode: "queue".into(),
        state: "pending".into(),
        body: json!({"prompt": "p"}),
        created_at_ms: 1,
        updated_at_ms: 1,
    }
}

#[test]
fn transaction_commits_or_rolls_back_as_a_whole() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    store.insert_turn(&turn("t1", "u1")).unwrap();
    let pending = pending_input("t1", "c1");
    store.upsert_input(&pending).unwrap();

    // failure half-way: neither change lands
    let err = store
        .transaction(|tx| {
            tx.upsert_item(&item("t1", "u1", "m1", "user_message", "p"))?;
            tx.upsert_input(&InputRow {
                state: "consumed".into(),
                ..pending.clone()
            })?;
            Err::<(), _>(StoreError::Invalid("boom".into()))
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)));
    assert!(store.get_item("t1", "m1").unwrap().is_none());
    assert_eq!(
        store.get_input("t1", "c1").unwrap().unwrap().state,
        "pending"
    );

    // success: both land
    let seq = store
        .transaction(|tx| {
            let seq = tx.upsert_item(&item("t1", "u1", "m1", "user_message", "p"))?;
            tx.upsert_input(&InputRow {
                state: "consumed".into(),
                ..pending.clone()
            })?;
            Ok(seq)
        })
        .unwrap();
    assert_eq!(seq, 1, "the rolled-back attempt did not use up a seq");
    assert!(store.get_item("t1", "m1").unwrap().is_some());
    assert_eq!(
        store.get_input("t1", "c1").unwrap().unwrap().state,
        "consumed"
    );
}

#[test]
fn write_waits_for_another_writer_within_busy_timeout() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let path = store.path().to_path_buf();
    let (locked_tx, locked_rx) = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
            .unwrap();
        tx.execute("UPDATE threads SET preview = 'held' WHERE id = 't1'", [])
            .unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(2));
        tx.commit().unwrap();
    });
    locked_rx.recv().unwrap();
    let started = Instant::now();
    store.touch_thread("t1", 99).unwrap();
    let waited = started.elapsed();
    holder.join().unwrap();
    assert!(
        waited >= Duration::from_millis(1500),
        "waited only {waited:?}"
    );
    let t = store.get_thread("t1").unwrap().unwrap();
    assert_eq!((t.preview.as_str(), t.updated_at_ms), ("held", 99));
}

#[test]
fn busy_error_is_distinguishable() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    store.set_busy_timeout(Duration::from_millis(100)).unwrap();
    let mut conn = raw(&store);
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let err = store.touch_thread("t1", 50).unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    assert!(err.to_string().contains("busy"), "{err}");
    // reads still work in WAL mode while someone writes
    assert!(store.get_thread("t1").unwrap().is_some());
    drop(tx);
    store.touch_thread("t1", 50).unwrap();
}

#[test]
fn concurrent_writers_in_threads() {
    let (_dir, mut store) = open_tmp();
    for t in ["a", "b"] {
        store.insert_thread(&thread(t, "/w", 10)).unwrap();
        store.insert_turn(&turn(t, "u1")).unwrap();
    }
    let path = store.path().to_path_buf();
    let handles: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).unwrap();
                let mut seqs = Vec::new();
                for i in 0..200 {
                    let it = item(t, "u1", &format!("i{i}"), "agent_message", "x");
                    seqs.push(store.upsert_item(&it).unwrap());
                    if i % 50 == 0 {
                        store.touch_thread(t, i).unwrap();
                    }
                }
                seqs
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), (1..=200).collect::<Vec<u64>>());
    }
    assert_eq!(count(&store, "items"), 400);
}

#[test]
fn check_file_agrees_with_open_on_what_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wuu.db");
    // Missing and empty files pass (they become new databases).
    Store::check_file(&path).unwrap();
    std::fs::write(&path, b"").unwrap();
    Store::check_file(&path).unwrap();
    // A real database passes, before and after data.
    let mut store = Store::open(&path).unwrap();
    Store::check_file(&path).unwrap();
    store.insert_thread(&thread("t1", "/w", 5)).unwrap();
    drop(store);
    Store::check_file(&path).unwrap();
    // Not a database: both refuse.
    let bad = dir.path().join("bad.db");
    std::fs::write(&bad, vec![b'g'; 4096]).unwrap();
    let e = Store::check_file(&bad).unwrap_err();
    assert!(e.to_string().contains("not a database"), "{e}");
    assert!(Store::open(&bad).is_err());
    // A schema from a newer build: both refuse with SchemaTooNew.
    let newer = dir.path().join("newer.db");
    let conn = rusqlite::Connection::open(&newer).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    assert!(matches!(
        Store::check_file(&newer),
        Err(StoreError::SchemaTooNew { found: 999, .. })
    ));
    assert!(matches!(
        Store::open(&newer),
        Err(StoreError::SchemaTooNew { found: 999, .. })
    ));
    // A file that cannot be opened for writing.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.path().join("ro.db");
        std::fs::copy(&path, &ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o444)).unwrap();
        // (root may write anyway; then both accept it)
        if std::fs::OpenOptions::new().write(true).open(&ro).is_err() {
            assert!(matches!(Store::check_file(&ro), Err(StoreError::Io { .. })));
        }
    }
}

#[test]
fn workspace_listing_reads_the_index_without_sorting() {
    let (dir, store) = open_tmp();
    drop(store);
    let conn = rusqlite::Connection::open(dir.path().join("home").join(DB_FILE)).unwrap();
    let sql = crate::threads::workspace_listing_sql_for_tests();
    let plan = query_plan(&conn, &sql, rusqlite::params!["/w", false]);
    assert!(
        plan.iter().any(|p| p.contains("threads_listing")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|p| p.contains("TEMP B-TREE")), "{plan:?}");
}

#[test]
fn visit_threads_keeps_the_listing_order_with_ties() {
    let (_dir, mut store) = open_tmp();
    for (id, cwd, at, archived) in [
        ("b", "/w", 10, false),
        ("a", "/w", 10, false),
        ("c", "/w", 20, false),
        ("d", "/x", 30, false),
        ("e", "/w", 10, true),
        ("0", "/w", 5, false),
    ] {
        store.insert_thread(&thread(id, cwd, at)).unwrap();
        if archived {
            store.set_archived(id, true, None).unwrap();
        }
    }
    for filter in [
        ThreadFilter {
            cwd: Some("/w".into()),
            archived: Some(false),
            limit: None,
        },
        ThreadFilter {
            cwd: Some("/w".into()),
            archived: Some(false),
            limit: Some(2),
        },
        ThreadFilter::default(),
    ] {
        let mut seen = Vec::new();
        store
            .visit_threads(&filter, |t| {
                seen.push(t.id.to_owned());
                Ok(())
            })
            .unwrap();
        let listed: Vec<String> = store
            .list_threads(&filter)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(seen, listed, "{filter:?}");
    }
    let mut seen = Vec::new();
    store
        .visit_threads(
            &ThreadFilter {
                cwd: Some("/w".into()),
                archived: Some(false),
                limit: None,
            },
            |t| {
                seen.push(t.id.to_owned());
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(seen, ["c", "a", "b", "0"]);
}

#[test]
fn cached_statements_are_not_compiled_again_on_every_call() {
    // With STAT4 compiled in, rebinding a parameter compared with a non-unique
    // index prefix re-prepared the statement on every call (the turn path's list_inputs,
    // load_history, lease queries); Store::open turns on the planner stability guarantee.
    let (dir, mut a) = open_tmp();
    a.insert_thread(&thread("t1", "/w", 1)).unwrap();
    let b = Store::open(a.path()).unwrap();
    let sql = format!(
        "SELECT {} FROM inputs WHERE thread_id = ?1 ORDER BY created_at_ms, rowid",
        crate::records::INPUT_COLS
    );
    for i in 0..5 {
        b.list_inputs("t1", &[]).unwrap();
        a.touch_thread("t1", 10 + i).unwrap();
    }
    let reprepared = b
        .lite()
        .unwrap()
        .conn
        .prepare_cached(&sql)
        .unwrap()
        .get_status(rusqlite::StatementStatus::RePrepare);
    assert_eq!(
        reprepared, 0,
        "list_inputs was compiled again {reprepared} times"
    );
    drop(dir);
}

#[test]
fn one_statement_reads_see_only_committed_rows_and_leave_no_transaction_open() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let input = pending_input("t1", "c1");
    store.upsert_input(&input).unwrap();
    // Another connection's write transaction, open and uncommitted.
    let mut conn = raw(&store);
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "UPDATE threads SET preview = 'uncommitted' WHERE id = 't1'",
        [],
    )
    .unwrap();
    tx.execute("UPDATE inputs SET state = 'held' WHERE id = 'c1'", [])
        .unwrap();
    let idle = |s: &Store| s.lite().unwrap().conn.is_autocommit();
    assert_eq!(
        store.get_thread("t1").unwrap().unwrap().preview,
        "preview of t1"
    );
    assert!(idle(&store));
    assert_eq!(
        store.list_inputs("t1", &["pending"]).unwrap(),
        std::slice::from_ref(&input)
    );
    assert_eq!(
        store.get_input("t1", "c1").unwrap().unwrap().state,
        "pending"
    );
    assert_eq!(store.lease_of("t1").unwrap(), None);
    assert!(idle(&store));
    tx.commit().unwrap();
    assert_eq!(
        store.get_thread("t1").unwrap().unwrap().preview,
        "uncommitted"
    );
    assert!(store.list_inputs("t1", &["pending"]).unwrap().is_empty());
    // The store still writes: no read of it was left open.
    store.touch_thread("t1", 99).unwrap();
    assert!(idle(&store));
}

/// Rowids of the messages the text index matches for `phrase` (an FTS5 query).
fn indexed(store: &Store, phrase: &str) -> Vec<i64> {
    let c = raw(store);
    let mut stmt = c
        .prepare("SELECT rowid FROM item_text WHERE item_text MATCH ?1 ORDER BY rowid")
        .unwrap();
    let rows = stmt.query_map([phrase], |r| r.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

fn watermark(store: &Store) -> i64 {
    raw(store)
        .query_row("SELECT indexed FROM item_text_state", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn text_index_is_written_in_batches_and_the_search_reads_past_it() {
    let (_dir, mut store) = open_tmp();
    store.insert_thread(&thread("old", "/w", 5)).unwrap();
    store.insert_turn(&turn("old", "u1")).unwrap();
    for (id, text) in [("m1", "where is the needle"), ("m2", "no match here")] {
        store
            .upsert_item(&item("old", "u1", id, "user_message", text))
            .unwrap();
    }
    store
        .upsert_item(&item("old", "u1", "r1", "reasoning", "needle in reasoning"))
        .unwrap();
    // Past the 32 conversations read directly.
    for i in 0..40 {
        store
            .insert_thread(&thread(&format!("fill{i}"), "/w", 1_000 + i))
            .unwrap();
    }
    // Stored, not indexed: the search reads the backlog.
    assert_eq!(count(&store, "item_text"), 0);
    assert_eq!(found(&store, "NEEDLE"), ["old"]);
    assert!(found(&store, "haystack").is_empty());

    // Two batches: the watermark moves past every item, only messages are indexed.
    assert_eq!(store.index_text(2).unwrap(), 2);
    assert_eq!(store.index_text(2).unwrap(), 1);
    assert_eq!(store.index_text(2).unwrap(), 0);
    assert_eq!(count(&store, "item_text"), 2);
    assert_eq!(watermark(&store), 3);
    let needle = indexed(&store, "\"needle\"");
    assert_eq!(needle.len(), 1);
    assert_eq!(found(&store, "needle"), ["old"]);

    // Indexed rows follow updates and deletes at once.
    store
        .upsert_item(&item("old", "u1", "m1", "user_message", "a haystack now"))
        .unwrap();
    assert!(indexed(&store, "\"needle\"").is_empty());
    assert_eq!(indexed(&store, "\"haystack\""), needle);
    assert!(found(&store, "needle").is_empty());
    assert_eq!(found(&store, "haystack"), ["old"]);
    store.delete_item("old", "m2").unwrap();
    assert!(indexed(&store, "\"match here\"").is_empty());
    assert_eq!(count(&store, "item_text"), 1);

    // A new item that gets a rowid at or below the watermark (the highest rowid was
    // deleted and is handed out again) is indexed at once: nothing reads it otherwise.
    let top = watermark(&store);
    raw(&store)
        .execute("DELETE FROM items WHERE rowid = ?1", [top])
        .unwrap();
    store
        .upsert_item(&item(
            "old",
            "u1",
            "m3",
            "agent_message",
            "reused rowid pin",
        ))
        .unwrap();
    let pin = indexed(&store, "\"rowid pin\"");
    assert!(pin.len() == 1 && pin[0] <= top, "{pin:?} {top}");
    assert_eq!(found(&store, "rowid pin"), ["old"]);
    assert_eq!(store.index_text(10).unwrap(), 0);
}

#[test]
fn a_store_of_version_8_migrates_its_index_and_listing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wuu.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        for sql in &crate::schema::MIGRATIONS[..8] {
            c.execute_batch(sql).unwrap();
        }
        c.pragma_update(None, "user_version", 8).unwrap();
        c.execute_batch(
            r#"INSERT INTO threads (id, cwd, created_at_ms, updated_at_ms, item_seq)
                   VALUES ('old', '/w', 1, 5, 2);
               INSERT INTO turns (thread_id, id, ordinal, kind, status, started_at_ms)
                   VALUES ('old', 'u1', 1, 'user', 'completed', 1);
               INSERT INTO items (thread_id, id, turn_id, seq, item_type, body) VALUES
                   ('old', 'i1', 'u1', 1, 'user_message', '{"text":"an old needle"}'),
                   ('old', 'i2', 'u1', 2, 'agent_message', '{"text":"an old answer"}');
               INSERT INTO leases (thread_id, pid, instance, host, acquired_at_ms, heartbeat_at_ms)
                   VALUES ('old', 4242, 'inst-a', 'host-a', 7, 8);"#,
        )
        .unwrap();
    }
    let mut store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), schema::latest_version());
    let c = raw(&store);
    let by_cwd: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'threads_by_cwd'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(by_cwd, 0);
    // The lease table, keyed by its primary key alone, keeps its rows.
    let leases: String = c
        .query_row(
            "SELECT group_concat(name || ':' || coalesce(sql, ''), ' | ') FROM sqlite_schema \
             WHERE tbl_name = 'leases'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(leases.contains("WITHOUT ROWID"), "{leases}");
    assert!(!leases.contains("leases_by_instance"), "{leases}");
    let (holder, heartbeat) = store.lease_of("old").unwrap().unwrap();
    assert_eq!(
        (
            holder.pid,
            holder.instance.as_str(),
            holder.host.as_str(),
            heartbeat
        ),
        (4242, "inst-a", "host-a", 8)
    );
    // Everything the old triggers indexed is behind the watermark.
    assert_eq!(watermark(&store), 2);
    assert_eq!(count(&store, "item_text"), 2);
    for i in 0..40 {
        store
            .insert_thread(&thread(&format!("fill{i}"), "/w", 1_000 + i))
            .unwrap();
    }
    assert_eq!(found(&store, "old needle"), ["old"]);
    store.insert_turn(&turn("old", "u2")).unwrap();
    store
        .upsert_item(&item("old", "u2", "i3", "agent_message", "a new pin"))
        .unwrap();
    assert_eq!(found(&store, "new pin"), ["old"]);
    assert_eq!(store.index_text(100).unwrap(), 1);
    assert_eq!(indexed(&store, "\"new pin\""), [3]);
    let listed = store
        .list_threads(&ThreadFilter {
            cwd: Some("/w".into()),
            archived: Some(false),
            limit: Some(1),
        })
        .unwrap();
    assert_eq!(listed[0].id, "fill39");
    assert_eq!(store.latest_thread("/w").unwrap().unwrap().id, "fill39");
}

#[test]
fn a_lease_settles_its_threads_orphans_by_the_threads_key() {
    // A takeover reads one thread's running turns and live runs; a filter the key
    // cannot serve (`?2 IS NULL OR thread_id = ?2`) would read every running turn and
    // run of the store on each turn's lease.
    let (_dir, store) = open_tmp();
    let c = raw(&store);
    let turns = query_plan(&c, crate::lease::THREAD_TURNS_IN_PROGRESS, ["t1", "a"]);
    let runs = query_plan(&c, crate::lease::THREAD_LIVE_RUNS, ["t1", "a", "b"]);
    for plan in [turns, runs] {
        assert!(plan.iter().any(|p| p.contains("(thread_id=?")), "{plan:?}");
    }
}
