//! Thread rows, titles, archive and latest-thread tests, run against both backends (see
//! `history_tests`).

use crate::history_tests::{both, item, lite, thread, turn, History};
use crate::*;

/// The thread calls these tests make, on either backend.
trait Threads: History {
    fn set_title(&mut self, id: &str, title: Option<&str>, rev: u64) -> Result<Option<ThreadRow>>;
    fn set_title_if_empty(
        &mut self,
        id: &str,
        title: &str,
        rev: u64,
    ) -> Result<(Option<ThreadRow>, bool)>;
    fn set_archived(&mut self, id: &str, on: bool, why: Option<&str>) -> Result<Option<ThreadRow>>;
    fn list_threads(&mut self, filter: &ThreadFilter) -> Result<Vec<ThreadRow>>;
    fn latest_thread(&mut self, cwd: &str) -> Result<Option<ThreadRow>>;
    fn touch_thread(&mut self, id: &str, at: i64) -> Result<()>;
    fn update_thread(&mut self, t: &ThreadRow) -> Result<()>;
    fn get_thread(&mut self, id: &str) -> Result<Option<ThreadRow>>;
    fn thread_exists(&mut self, id: &str) -> Result<bool>;
}

macro_rules! delegate_threads {
    ($ty:ty) => {
        impl Threads for $ty {
            fn set_title(
                &mut self,
                id: &str,
                title: Option<&str>,
                rev: u64,
            ) -> Result<Option<ThreadRow>> {
                <$ty>::set_title(self, id, title, rev)
            }
            fn set_title_if_empty(
                &mut self,
                id: &str,
                title: &str,
                rev: u64,
            ) -> Result<(Option<ThreadRow>, bool)> {
                <$ty>::set_title_if_empty(self, id, title, rev)
            }
            fn set_archived(
                &mut self,
                id: &str,
                on: bool,
                why: Option<&str>,
            ) -> Result<Option<ThreadRow>> {
                <$ty>::set_archived(self, id, on, why)
            }
            fn list_threads(&mut self, filter: &ThreadFilter) -> Result<Vec<ThreadRow>> {
                <$ty>::list_threads(self, filter)
            }
            fn latest_thread(&mut self, cwd: &str) -> Result<Option<ThreadRow>> {
                <$ty>::latest_thread(self, cwd)
            }
            fn touch_thread(&mut self, id: &str, at: i64) -> Result<()> {
                <$ty>::touch_thread(self, id, at)
            }
            fn update_thread(&mut self, t: &ThreadRow) -> Result<()> {
                <$ty>::update_thread(self, t)
            }
            fn get_thread(&mut self, id: &str) -> Result<Option<ThreadRow>> {
                <$ty>::get_thread(self, id)
            }
            fn thread_exists(&mut self, id: &str) -> Result<bool> {
                <$ty>::thread_exists(self, id)
            }
        }
    };
}

delegate_threads!(Store);
#[cfg(feature = "postgres")]
delegate_threads!(crate::pg::PgStore);

both!(thread_crud_sqlite, thread_crud_postgres, thread_crud);
both!(
    title_revision_is_monotonic_sqlite,
    title_revision_is_monotonic_postgres,
    title_revision_is_monotonic
);
both!(
    archive_and_unarchive_sqlite,
    archive_and_unarchive_postgres,
    archive_and_unarchive
);
both!(
    latest_thread_is_most_recent_unarchived_of_cwd_sqlite,
    latest_thread_is_most_recent_unarchived_of_cwd_postgres,
    latest_thread_is_most_recent_unarchived_of_cwd
);
both!(
    titles_fill_once_and_updates_keep_damaged_extras_sqlite,
    titles_fill_once_and_updates_keep_damaged_extras_postgres,
    titles_fill_once_and_updates_keep_damaged_extras
);

fn title_revision_is_monotonic(store: &mut impl Threads) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let r = store.set_title("t1", Some("auto"), 1).unwrap().unwrap();
    assert_eq!((r.title.as_deref(), r.title_revision), (Some("auto"), 1));
    let r = store.set_title("t1", Some("manual"), 3).unwrap().unwrap();
    assert_eq!((r.title.as_deref(), r.title_revision), (Some("manual"), 3));
    // a late, lower revision loses and the caller sees the winner
    let r = store
        .set_title("t1", Some("late auto"), 2)
        .unwrap()
        .unwrap();
    assert_eq!((r.title.as_deref(), r.title_revision), (Some("manual"), 3));
    // the same revision may be re-applied (idempotent retry)
    let r = store.set_title("t1", Some("manual!"), 3).unwrap().unwrap();
    assert_eq!(r.title.as_deref(), Some("manual!"));
    let r = store.set_title("t1", None, 4).unwrap().unwrap();
    assert_eq!((r.title, r.title_revision), (None, 4));
    assert_eq!(r.updated_at_ms, 10, "titles do not count as activity");
    assert!(store.set_title("ghost", Some("x"), 9).unwrap().is_none());
}

fn archive_and_unarchive(store: &mut impl Threads) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let r = store
        .set_archived("t1", true, Some("done"))
        .unwrap()
        .unwrap();
    assert!(r.archived);
    assert_eq!(r.archive_reason.as_deref(), Some("done"));
    let listed = store
        .list_threads(&ThreadFilter {
            archived: Some(true),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(listed.len(), 1);
    let r = store
        .set_archived("t1", false, Some("ignored"))
        .unwrap()
        .unwrap();
    assert!(!r.archived);
    assert_eq!(r.archive_reason, None);
    assert!(store.set_archived("ghost", true, None).unwrap().is_none());
}

fn latest_thread_is_most_recent_unarchived_of_cwd(store: &mut impl Threads) {
    assert!(store.latest_thread("/w").unwrap().is_none());
    store.insert_thread(&thread("old", "/w", 10)).unwrap();
    store.insert_thread(&thread("new", "/w", 20)).unwrap();
    store.insert_thread(&thread("newest", "/w", 30)).unwrap();
    store.insert_thread(&thread("elsewhere", "/x", 99)).unwrap();
    store.set_archived("newest", true, None).unwrap();
    assert_eq!(store.latest_thread("/w").unwrap().unwrap().id, "new");
    store.touch_thread("old", 50).unwrap();
    assert_eq!(store.latest_thread("/w").unwrap().unwrap().id, "old");
}

fn titles_fill_once_and_updates_keep_damaged_extras(store: &mut impl Threads) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    assert!(store.thread_exists("t1").unwrap());
    assert!(!store.thread_exists("ghost").unwrap());
    let (row, written) = store.set_title_if_empty("t1", "auto", 0).unwrap();
    assert!(written);
    assert_eq!(row.unwrap().title_revision, 1);
    let (row, written) = store.set_title_if_empty("t1", "again", 1).unwrap();
    assert!(!written, "a title is there already");
    assert_eq!(row.unwrap().title.as_deref(), Some("auto"));

    let mut t = store.get_thread("t1").unwrap().unwrap();
    t.model = "m2".into();
    t.extra = serde_json::json!({"k": 1});
    t.updated_at_ms = 20;
    store.update_thread(&t).unwrap();
    let got = store.get_thread("t1").unwrap().unwrap();
    assert_eq!(
        (got.model.as_str(), got.extra.clone()),
        ("m2", serde_json::json!({"k": 1}))
    );
    // a row read as damaged does not write its placeholder extra back
    t.damage = Some("extra".into());
    t.extra = serde_json::json!({});
    store.update_thread(&t).unwrap();
    assert_eq!(
        store.get_thread("t1").unwrap().unwrap().extra,
        serde_json::json!({"k": 1})
    );
    t.id = "ghost".into();
    assert!(matches!(
        store.update_thread(&t).unwrap_err(),
        StoreError::NotFound { kind: "thread", .. }
    ));
}

fn thread_crud(store: &mut impl Threads) {
    let mut t = thread("t1", "/w", 10);
    t.title = Some("hello".into());
    t.title_revision = 1;
    t.extra = serde_json::json!({"pinned": true});
    t.forked_from_id = Some("t0".into());
    store.insert_thread(&t).unwrap();
    assert_eq!(store.get_thread("t1").unwrap(), Some(t.clone()));
    assert!(store.get_thread("nope").unwrap().is_none());
    // a duplicate id is the database's constraint error (SQLite's or PostgreSQL's)
    assert!(matches!(
        store.insert_thread(&t).unwrap_err(),
        StoreError::Sqlite(_) | StoreError::Postgres { .. }
    ));

    // update_thread writes the selection but never the title or the archive flag
    let mut u = t.clone();
    u.model = "gpt-x".into();
    u.preview = "new preview".into();
    u.updated_at_ms = 20;
    u.title = Some("stale".into());
    u.title_revision = 0;
    u.archived = true;
    u.extra = serde_json::json!({"pinned": false, "speed": "fast"});
    store.update_thread(&u).unwrap();
    let got = store.get_thread("t1").unwrap().unwrap();
    assert_eq!(got.model, "gpt-x");
    assert_eq!(got.preview, "new preview");
    assert_eq!(got.updated_at_ms, 20);
    assert_eq!(
        got.extra,
        serde_json::json!({"pinned": false, "speed": "fast"})
    );
    assert_eq!(got.title.as_deref(), Some("hello"));
    assert_eq!(got.title_revision, 1);
    assert!(!got.archived);

    store.touch_thread("t1", 15).unwrap(); // never moves backwards
    assert_eq!(store.get_thread("t1").unwrap().unwrap().updated_at_ms, 20);
    store.touch_thread("t1", 30).unwrap();
    assert_eq!(store.get_thread("t1").unwrap().unwrap().updated_at_ms, 30);

    let mut missing = thread("ghost", "/w", 1);
    missing.model = "m".into();
    assert!(matches!(
        store.update_thread(&missing).unwrap_err(),
        StoreError::NotFound { kind: "thread", .. }
    ));
    assert!(matches!(
        store.touch_thread("ghost", 1).unwrap_err(),
        StoreError::NotFound { .. }
    ));
}

/// The calls of the deletion test, on either backend.
trait Deletes: Threads {
    fn insert_usage(&mut self, u: &UsageRow) -> Result<()>;
    fn list_usage(&mut self, thread_id: Option<&str>) -> Result<Vec<UsageRow>>;
    fn upsert_input(&mut self, i: &InputRow) -> Result<()>;
    fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>>;
    fn upsert_run(&mut self, r: &RunRow) -> Result<()>;
    fn list_runs(&mut self, thread_id: &str) -> Result<Vec<RunRow>>;
    fn claim_continue_source(&mut self, thread_id: &str, source_turn_id: &str) -> Result<bool>;
    fn delete_thread(&mut self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome>;
    /// Unarchives `id`, then deletes it if archived, in one transaction.
    fn unarchive_and_delete_in_one_transaction(&mut self, id: &str) -> Result<DeleteOutcome>;
}

macro_rules! delegate_deletes {
    ($ty:ty) => {
        fn insert_usage(&mut self, u: &UsageRow) -> Result<()> {
            <$ty>::insert_usage(self, u)
        }
        fn list_usage(&mut self, thread_id: Option<&str>) -> Result<Vec<UsageRow>> {
            <$ty>::list_usage(self, thread_id)
        }
        fn upsert_input(&mut self, i: &InputRow) -> Result<()> {
            <$ty>::upsert_input(self, i)
        }
        fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
            <$ty>::list_inputs(self, thread_id, states)
        }
        fn upsert_run(&mut self, r: &RunRow) -> Result<()> {
            <$ty>::upsert_run(self, r)
        }
        fn list_runs(&mut self, thread_id: &str) -> Result<Vec<RunRow>> {
            <$ty>::list_runs(self, thread_id)
        }
        fn claim_continue_source(&mut self, thread_id: &str, source_turn_id: &str) -> Result<bool> {
            <$ty>::claim_continue_source(self, thread_id, source_turn_id)
        }
        fn delete_thread(&mut self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome> {
            <$ty>::delete_thread(self, id, only_if_archived)
        }
    };
}

impl Deletes for Store {
    delegate_deletes!(Store);
    fn unarchive_and_delete_in_one_transaction(&mut self, id: &str) -> Result<DeleteOutcome> {
        self.transaction(|tx| {
            tx.set_archived(id, false, None)?;
            tx.delete_thread(id, true)
        })
    }
}

#[cfg(feature = "postgres")]
impl Deletes for crate::pg::PgStore {
    delegate_deletes!(crate::pg::PgStore);
    fn unarchive_and_delete_in_one_transaction(&mut self, id: &str) -> Result<DeleteOutcome> {
        self.with_transaction(Some(id), |tx| {
            tx.set_archived(id, false, None)?;
            tx.delete_thread(id, true)
        })
    }
}

both!(
    delete_only_if_archived_sqlite,
    delete_only_if_archived_postgres,
    delete_only_if_archived
);

/// How many rows a thread has: items, turns, usage, inputs, runs.
fn rows_of(store: &mut impl Deletes, id: &str) -> [usize; 5] {
    let history = store.load_history(id).unwrap();
    [
        history.iter().map(|t| t.items.len()).sum(),
        history.len(),
        store.list_usage(Some(id)).unwrap().len(),
        store.list_inputs(id, &[]).unwrap().len(),
        store.list_runs(id).unwrap().len(),
    ]
}

fn populate(store: &mut impl Deletes, id: &str) {
    store.insert_thread(&thread(id, "/w", 10)).unwrap();
    store.insert_turn(&turn(id, "u1")).unwrap();
    store
        .upsert_item(&item(id, "u1", "i1", "user_message", "hi"))
        .unwrap();
    store
        .insert_usage(&UsageRow {
            thread_id: id.into(),
            turn_id: "u1".into(),
            provider: "p".into(),
            model: "m".into(),
            at_ms: 5,
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
            cache_creation_tokens: 4,
            reasoning_tokens: 5,
        })
        .unwrap();
    store
        .upsert_input(&InputRow {
            thread_id: id.into(),
            id: "c1".into(),
            mode: "queue".into(),
            state: "held".into(),
            body: serde_json::json!({"prompt": "later"}),
            created_at_ms: 1,
            updated_at_ms: 1,
        })
        .unwrap();
    store
        .upsert_run(&RunRow {
            id: format!("run-{id}"),
            thread_id: id.into(),
            status: "completed".into(),
            owner_instance: "x".into(),
            body: serde_json::json!({}),
            created_at_ms: 1,
            updated_at_ms: 1,
        })
        .unwrap();
    assert!(store.claim_continue_source(id, "u1").unwrap());
}

fn delete_only_if_archived(store: &mut impl Deletes) {
    populate(store, "t1");
    populate(store, "t2");
    let before = [rows_of(store, "t1"), rows_of(store, "t2")];
    assert_eq!(before, [[1; 5]; 2]);

    assert_eq!(
        store.delete_thread("t1", true).unwrap(),
        DeleteOutcome::NotArchived
    );
    assert_eq!(store.load_history("t1").unwrap().len(), 1);

    // unarchived inside the same transaction as the delete: the delete sees it
    store.set_archived("t1", true, None).unwrap();
    let outcome = store.unarchive_and_delete_in_one_transaction("t1").unwrap();
    assert_eq!(outcome, DeleteOutcome::NotArchived);
    assert!(store.get_thread("t1").unwrap().is_some());

    store.set_archived("t1", true, None).unwrap();
    assert_eq!(
        store.delete_thread("t1", true).unwrap(),
        DeleteOutcome::Deleted
    );
    assert!(store.get_thread("t1").unwrap().is_none());
    let after = [rows_of(store, "t1"), rows_of(store, "t2")];
    assert_eq!(after, [[0; 5], [1; 5]], "only t2's rows remain");
    assert_eq!(
        store.delete_thread("t1", false).unwrap(),
        DeleteOutcome::NotFound
    );
    // without only_if_archived an idle unarchived thread can be deleted
    assert_eq!(
        store.delete_thread("t2", false).unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(rows_of(store, "t2"), [0; 5]);
}
