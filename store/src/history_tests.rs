//! History and paged-read tests, run against both backends: SQLite files in temporary
//! directories, and (feature `postgres`, when `WUU_TEST_PG_URL` names a server, as
//! `.ci/run` starts one) a fresh PostgreSQL schema per test.

use serde_json::json;

use crate::*;

/// The store calls these tests make, on either backend.
pub(crate) trait History {
    fn insert_thread(&mut self, t: &ThreadRow) -> Result<()>;
    fn insert_turn(&mut self, t: &TurnRow) -> Result<()>;
    fn update_turn(&mut self, t: &TurnRow) -> Result<()>;
    fn get_turn(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>>;
    fn upsert_item(&mut self, item: &ItemRow) -> Result<u64>;
    fn get_item(&mut self, thread_id: &str, item_id: &str) -> Result<Option<ItemRow>>;
    fn delete_item(&mut self, thread_id: &str, item_id: &str) -> Result<()>;
    fn load_history(&mut self, thread_id: &str) -> Result<Vec<TurnWithItems>>;
    fn copy_history(
        &mut self,
        src: &str,
        dst: &str,
        cut_turn: Option<&str>,
        cut_item: Option<&str>,
    ) -> Result<()>;
    fn turn_ordinal(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<i64>>;
    fn turn_before(
        &mut self,
        thread_id: &str,
        before: Option<i64>,
    ) -> Result<Option<(i64, TurnRow)>>;
    fn item_heads(&mut self, thread_id: &str, turn_id: &str) -> Result<Vec<ItemHead>>;
    fn item_locator(&mut self, thread_id: &str, item_id: &str) -> Result<Option<(String, u64)>>;
    fn item_body_range(
        &mut self,
        thread_id: &str,
        item_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>>;
    fn stream_item_body(
        &mut self,
        thread_id: &str,
        item_id: &str,
        chunk: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool>;
}

macro_rules! delegate_history {
    ($ty:ty) => {
        impl History for $ty {
            fn insert_thread(&mut self, t: &ThreadRow) -> Result<()> {
                <$ty>::insert_thread(self, t)
            }
            fn insert_turn(&mut self, t: &TurnRow) -> Result<()> {
                <$ty>::insert_turn(self, t)
            }
            fn update_turn(&mut self, t: &TurnRow) -> Result<()> {
                <$ty>::update_turn(self, t)
            }
            fn get_turn(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>> {
                <$ty>::get_turn(self, thread_id, turn_id)
            }
            fn upsert_item(&mut self, item: &ItemRow) -> Result<u64> {
                <$ty>::upsert_item(self, item)
            }
            fn get_item(&mut self, thread_id: &str, item_id: &str) -> Result<Option<ItemRow>> {
                <$ty>::get_item(self, thread_id, item_id)
            }
            fn delete_item(&mut self, thread_id: &str, item_id: &str) -> Result<()> {
                <$ty>::delete_item(self, thread_id, item_id)
            }
            fn load_history(&mut self, thread_id: &str) -> Result<Vec<TurnWithItems>> {
                <$ty>::load_history(self, thread_id)
            }
            fn copy_history(
                &mut self,
                src: &str,
                dst: &str,
                cut_turn: Option<&str>,
                cut_item: Option<&str>,
            ) -> Result<()> {
                <$ty>::copy_history(self, src, dst, cut_turn, cut_item)
            }
            fn turn_ordinal(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<i64>> {
                <$ty>::turn_ordinal(self, thread_id, turn_id)
            }
            fn turn_before(
                &mut self,
                thread_id: &str,
                before: Option<i64>,
            ) -> Result<Option<(i64, TurnRow)>> {
                <$ty>::turn_before(self, thread_id, before)
            }
            fn item_heads(&mut self, thread_id: &str, turn_id: &str) -> Result<Vec<ItemHead>> {
                <$ty>::item_heads(self, thread_id, turn_id)
            }
            fn item_locator(
                &mut self,
                thread_id: &str,
                item_id: &str,
            ) -> Result<Option<(String, u64)>> {
                <$ty>::item_locator(self, thread_id, item_id)
            }
            fn item_body_range(
                &mut self,
                thread_id: &str,
                item_id: &str,
                offset: u64,
                len: usize,
            ) -> Result<Option<(Vec<u8>, u64)>> {
                <$ty>::item_body_range(self, thread_id, item_id, offset, len)
            }
            fn stream_item_body(
                &mut self,
                thread_id: &str,
                item_id: &str,
                chunk: usize,
                f: &mut dyn FnMut(&[u8]),
            ) -> Result<bool> {
                <$ty>::stream_item_body(self, thread_id, item_id, chunk, f)
            }
        }
    };
}

delegate_history!(Store);
#[cfg(feature = "postgres")]
delegate_history!(crate::pg::PgStore);

/// A SQLite store in a temporary directory (kept while the store lives).
pub(crate) struct Lite {
    pub(crate) store: Store,
    _dir: tempfile::TempDir,
}

pub(crate) fn lite() -> Lite {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_home(&dir.path().join("home")).unwrap();
    Lite { store, _dir: dir }
}

/// Runs `$body` (a generic fn taking a [`History`]) on SQLite, and on PostgreSQL when
/// the feature is on and a server is configured.
macro_rules! both {
    ($lite:ident, $pg:ident, $body:ident) => {
        #[test]
        fn $lite() {
            let mut l = lite();
            $body(&mut l.store);
        }

        #[cfg(feature = "postgres")]
        #[test]
        fn $pg() {
            if let Some(mut b) = crate::lease_tests::pg_backend::pg() {
                $body(&mut b.store);
            }
        }
    };
}
pub(crate) use both;

pub(crate) fn thread(id: &str, cwd: &str, updated: i64) -> ThreadRow {
    let mut t = ThreadRow::new(id, cwd, 1_000);
    t.updated_at_ms = updated;
    t.preview = format!("preview of {id}");
    t
}

pub(crate) fn turn(thread_id: &str, id: &str) -> TurnRow {
    TurnRow::new(thread_id, id, "user", 2_000)
}

pub(crate) fn item(thread_id: &str, turn_id: &str, id: &str, ty: &str, text: &str) -> ItemRow {
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

both!(
    item_upsert_keeps_seq_and_history_is_ordered_sqlite,
    item_upsert_keeps_seq_and_history_is_ordered_postgres,
    item_upsert_keeps_seq_and_history_is_ordered
);
both!(
    copy_history_with_cuts_sqlite,
    copy_history_with_cuts_postgres,
    copy_history_with_cuts
);
both!(
    pages_read_turns_heads_and_body_ranges_sqlite,
    pages_read_turns_heads_and_body_ranges_postgres,
    pages_read_turns_heads_and_body_ranges
);

fn item_upsert_keeps_seq_and_history_is_ordered(store: &mut impl History) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    store.insert_turn(&turn("t1", "b-first")).unwrap();
    store.insert_turn(&turn("t1", "a-second")).unwrap();
    let s1 = store
        .upsert_item(&item("t1", "b-first", "x", "user_message", "q"))
        .unwrap();
    let s2 = store
        .upsert_item(&item("t1", "b-first", "y", "agent_message", "partial"))
        .unwrap();
    let s3 = store
        .upsert_item(&item("t1", "a-second", "z", "user_message", "q2"))
        .unwrap();
    assert_eq!((s1, s2, s3), (1, 2, 3));

    let mut updated = item("t1", "b-first", "y", "agent_message", "full answer");
    updated.seq = 999; // ignored
    assert_eq!(store.upsert_item(&updated).unwrap(), 2);
    let got = store.get_item("t1", "y").unwrap().unwrap();
    assert_eq!(got.seq, 2);
    assert_eq!(got.body["text"], "full answer");

    store.delete_item("t1", "z").unwrap();
    store.delete_item("t1", "z").unwrap(); // idempotent
    let s4 = store
        .upsert_item(&item("t1", "a-second", "w", "agent_message", "a"))
        .unwrap();
    assert_eq!(s4, 4, "deleted seqs are not reused");

    let history = store.load_history("t1").unwrap();
    let shape: Vec<(String, Vec<(String, u64)>)> = history
        .iter()
        .map(|t| {
            (
                t.turn.id.clone(),
                t.items.iter().map(|i| (i.id.clone(), i.seq)).collect(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("b-first".into(), vec![("x".into(), 1), ("y".into(), 2)]),
            ("a-second".into(), vec![("w".into(), 4)]),
        ]
    );
    assert!(store.load_history("ghost").unwrap().is_empty());

    // items need their turn
    assert!(matches!(
        store
            .upsert_item(&item("t1", "nope", "q", "user_message", ""))
            .unwrap_err(),
        StoreError::NotFound { kind: "turn", .. }
    ));
    assert!(matches!(
        store.insert_turn(&turn("ghost", "u")).unwrap_err(),
        StoreError::NotFound { kind: "thread", .. }
    ));

    // update_turn round trip
    let mut t = store.get_turn("t1", "b-first").unwrap().unwrap();
    t.status = "completed".into();
    t.error = Some(json!({"message": "x"}));
    t.input_tokens = 10;
    t.cache_creation_tokens = 7;
    t.completed_at_ms = Some(3_000);
    t.truncated = true;
    t.extra = json!({"duration_ms": 5});
    store.update_turn(&t).unwrap();
    assert_eq!(store.get_turn("t1", "b-first").unwrap().unwrap(), t);
    assert_eq!(store.load_history("t1").unwrap()[0].turn.id, "b-first");
    t.id = "ghost".into();
    assert!(matches!(
        store.update_turn(&t).unwrap_err(),
        StoreError::NotFound { kind: "turn", .. }
    ));

    // out-of-range numbers are refused, not wrapped
    let mut huge = turn("t1", "huge");
    huge.output_tokens = u64::MAX;
    assert!(store.insert_turn(&huge).is_err());
}

fn copy_history_with_cuts<S: History>(store: &mut S) {
    store.insert_thread(&thread("src", "/w", 10)).unwrap();
    for (t, status) in [
        ("t1", "completed"),
        ("t2", "completed"),
        ("t3", "in_progress"),
    ] {
        let mut row = turn("src", t);
        row.status = status.into();
        store.insert_turn(&row).unwrap();
        for i in 1..=3 {
            store
                .upsert_item(&item(
                    "src",
                    t,
                    &format!("{t}-item-{i}"),
                    "user_message",
                    "m",
                ))
                .unwrap();
        }
    }
    let shape = |store: &mut S, id: &str| -> Vec<(String, String, Vec<String>)> {
        store
            .load_history(id)
            .unwrap()
            .into_iter()
            .map(|t| {
                (
                    t.turn.id,
                    t.turn.status,
                    t.items.into_iter().map(|i| i.id).collect(),
                )
            })
            .collect()
    };

    // everything; in-progress becomes interrupted
    store.insert_thread(&thread("all", "/w", 10)).unwrap();
    store.copy_history("src", "all", None, None).unwrap();
    let all = shape(&mut *store, "all");
    assert_eq!(all.len(), 3);
    assert_eq!(all[2].1, "interrupted");
    assert_eq!(all[2].2.len(), 3);
    assert!(store
        .get_turn("all", "t3")
        .unwrap()
        .unwrap()
        .completed_at_ms
        .is_some());
    assert_eq!(
        store.get_turn("src", "t3").unwrap().unwrap().status,
        "in_progress"
    );
    // fresh, dense seqs in dst
    let seqs: Vec<u64> = store
        .load_history("all")
        .unwrap()
        .iter()
        .flat_map(|t| t.items.iter().map(|i| i.seq))
        .collect();
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());

    // cut at a turn and an item inside it
    store.insert_thread(&thread("cut", "/w", 10)).unwrap();
    store
        .copy_history("src", "cut", Some("t2"), Some("t2-item-2"))
        .unwrap();
    assert_eq!(
        shape(&mut *store, "cut"),
        vec![
            (
                "t1".to_string(),
                "completed".to_string(),
                vec![
                    "t1-item-1".to_string(),
                    "t1-item-2".into(),
                    "t1-item-3".into()
                ]
            ),
            (
                "t2".into(),
                "completed".into(),
                vec!["t2-item-1".into(), "t2-item-2".into()]
            ),
        ]
    );

    // cut at a whole turn; cut by item alone
    store.insert_thread(&thread("turn-only", "/w", 10)).unwrap();
    store
        .copy_history("src", "turn-only", Some("t1"), None)
        .unwrap();
    assert_eq!(shape(&mut *store, "turn-only").len(), 1);
    store.insert_thread(&thread("item-only", "/w", 10)).unwrap();
    store
        .copy_history("src", "item-only", None, Some("t3-item-1"))
        .unwrap();
    let item_only = shape(&mut *store, "item-only");
    assert_eq!(item_only.len(), 3);
    assert_eq!(item_only[2].2, vec!["t3-item-1".to_string()]);

    // bad cuts fail and copy nothing
    store.insert_thread(&thread("bad", "/w", 10)).unwrap();
    assert!(matches!(
        store
            .copy_history("src", "bad", Some("nope"), None)
            .unwrap_err(),
        StoreError::NotFound { kind: "turn", .. }
    ));
    assert!(matches!(
        store
            .copy_history("src", "bad", Some("t2"), Some("t1-item-1"))
            .unwrap_err(),
        StoreError::NotFound { kind: "item", .. }
    ));
    assert!(shape(&mut *store, "bad").is_empty());
    assert!(matches!(
        store.copy_history("ghost", "bad", None, None).unwrap_err(),
        StoreError::NotFound { kind: "thread", .. }
    ));
}

/// Paged reads: turns by position, item heads without bodies, body ranges in bytes
/// (multi-byte text cut anywhere), streaming in chunks.
fn pages_read_turns_heads_and_body_ranges(store: &mut impl History) {
    store.insert_thread(&thread("t", "/w", 10)).unwrap();
    for id in ["u1", "u2", "u3"] {
        store.insert_turn(&turn("t", id)).unwrap();
    }
    let o: Vec<i64> = ["u1", "u2", "u3"]
        .iter()
        .map(|id| store.turn_ordinal("t", id).unwrap().unwrap())
        .collect();
    assert!(o[0] < o[1] && o[1] < o[2], "{o:?}");
    assert_eq!(store.turn_ordinal("t", "ghost").unwrap(), None);
    let (ord, newest) = store.turn_before("t", None).unwrap().unwrap();
    assert_eq!((ord, newest.id.as_str()), (o[2], "u3"));
    let (ord, prev) = store.turn_before("t", Some(o[2])).unwrap().unwrap();
    assert_eq!((ord, prev.id.as_str()), (o[1], "u2"));
    assert!(store.turn_before("t", Some(o[0])).unwrap().is_none());
    assert!(store.turn_before("ghost", None).unwrap().is_none());

    let mut tool = item("t", "u2", "tool", "tool_call", "");
    tool.body = json!({"id": "tool", "type": "tool_call", "name": "shell", "terminal": true});
    let mut pic = item("t", "u2", "pic", "user_message", "look");
    pic.body["images"] = json!([{"url": "data:,"}]);
    let big_text = "é☃x".repeat(20_000);
    let big = item("t", "u2", "big", "agent_message", &big_text);
    for i in [&tool, &pic, &big] {
        store.upsert_item(i).unwrap();
    }
    let heads = store.item_heads("t", "u2").unwrap();
    let ids: Vec<&str> = heads.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["tool", "pic", "big"]);
    let big_json = serde_json::to_string(&big.body).unwrap();
    assert!(heads[0].terminal && !heads[0].large && !heads[0].attachments);
    assert_eq!(heads[0].name.as_deref(), Some("shell"));
    assert_eq!(heads[0].item_type, "tool_call");
    assert!(heads[1].attachments && !heads[1].terminal && heads[1].name.is_none());
    assert_eq!(heads[1].status.as_deref(), Some("completed"));
    assert!(heads[2].large && !heads[2].terminal);
    assert_eq!(heads[2].len, big_json.len() as u64);
    assert!(heads[0].seq < heads[1].seq && heads[1].seq < heads[2].seq);
    assert!(store.item_heads("t", "u1").unwrap().is_empty());

    let total = big_json.len() as u64;
    assert_eq!(
        store.item_locator("t", "big").unwrap(),
        Some(("u2".to_string(), total))
    );
    assert_eq!(store.item_locator("t", "ghost").unwrap(), None);
    // a range that starts and ends inside multi-byte characters
    let (bytes, size) = store
        .item_body_range("t", "big", 9, 1_000)
        .unwrap()
        .unwrap();
    assert_eq!(size, total);
    assert_eq!(bytes, big_json.as_bytes()[9..1_009].to_vec());
    let (tail, _) = store
        .item_body_range("t", "big", total - 5, 100)
        .unwrap()
        .unwrap();
    assert_eq!(tail, big_json.as_bytes()[big_json.len() - 5..].to_vec());
    let (past, _) = store
        .item_body_range("t", "big", total + 1, 10)
        .unwrap()
        .unwrap();
    assert!(past.is_empty());
    assert_eq!(store.item_body_range("t", "ghost", 0, 10).unwrap(), None);

    let mut streamed = Vec::new();
    let mut chunks = 0;
    let found = store
        .stream_item_body("t", "big", 7_000, &mut |c: &[u8]| {
            assert!(c.len() <= 7_000);
            chunks += 1;
            streamed.extend_from_slice(c);
        })
        .unwrap();
    assert!(found);
    assert_eq!(streamed, big_json.as_bytes());
    assert!(chunks > 1, "{chunks} chunks");
    assert!(!store
        .stream_item_body("t", "ghost", 10, &mut |_: &[u8]| {})
        .unwrap());
}
