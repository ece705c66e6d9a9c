//! Usage records, usage views, quota snapshots, pending inputs, runs and continue
//! sources tests, run against both backends
//! (see `history_tests`).

use serde_json::json;

use crate::history_tests::{both, item, lite, thread, turn, History};
use crate::*;

/// The usage calls these tests make, on either backend.
trait Usage: History {
    fn insert_usage(&mut self, u: &UsageRow) -> Result<()>;
    fn list_usage(&mut self, thread_id: Option<&str>) -> Result<Vec<UsageRow>>;
    fn usage_snapshot(&mut self) -> Result<UsageSnapshot>;
    fn quota_snapshot(&mut self, key: &str) -> Result<Option<serde_json::Value>>;
    fn put_quota_snapshot(&mut self, key: &str, body: &serde_json::Value, now: i64) -> Result<()>;
    fn delete_quota_snapshot(&mut self, key: &str) -> Result<()>;
    /// Closes the connection and opens the same database again.
    fn reopen(&mut self);
    fn upsert_input(&mut self, i: &InputRow) -> Result<()>;
    fn get_input(&mut self, thread_id: &str, id: &str) -> Result<Option<InputRow>>;
    fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>>;
    fn upsert_run(&mut self, r: &RunRow) -> Result<()>;
    fn get_run(&mut self, id: &str) -> Result<Option<RunRow>>;
    fn list_runs(&mut self, thread_id: &str) -> Result<Vec<RunRow>>;
    fn claim_continue_source(&mut self, thread_id: &str, source_turn_id: &str) -> Result<bool>;
}

macro_rules! delegate_usage {
    ($ty:ty, $reopen:expr) => {
        impl Usage for $ty {
            fn reopen(&mut self) {
                *self = $reopen(self);
            }
            fn upsert_input(&mut self, i: &InputRow) -> Result<()> {
                <$ty>::upsert_input(self, i)
            }
            fn get_input(&mut self, thread_id: &str, id: &str) -> Result<Option<InputRow>> {
                <$ty>::get_input(self, thread_id, id)
            }
            fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
                <$ty>::list_inputs(self, thread_id, states)
            }
            fn upsert_run(&mut self, r: &RunRow) -> Result<()> {
                <$ty>::upsert_run(self, r)
            }
            fn get_run(&mut self, id: &str) -> Result<Option<RunRow>> {
                <$ty>::get_run(self, id)
            }
            fn list_runs(&mut self, thread_id: &str) -> Result<Vec<RunRow>> {
                <$ty>::list_runs(self, thread_id)
            }
            fn claim_continue_source(
                &mut self,
                thread_id: &str,
                source_turn_id: &str,
            ) -> Result<bool> {
                <$ty>::claim_continue_source(self, thread_id, source_turn_id)
            }
            fn insert_usage(&mut self, u: &UsageRow) -> Result<()> {
                <$ty>::insert_usage(self, u)
            }
            fn list_usage(&mut self, thread_id: Option<&str>) -> Result<Vec<UsageRow>> {
                <$ty>::list_usage(self, thread_id)
            }
            fn usage_snapshot(&mut self) -> Result<UsageSnapshot> {
                <$ty>::usage_snapshot(self)
            }
            fn quota_snapshot(&mut self, key: &str) -> Result<Option<serde_json::Value>> {
                <$ty>::quota_snapshot(self, key)
            }
            fn put_quota_snapshot(
                &mut self,
                key: &str,
                body: &serde_json::Value,
                now: i64,
            ) -> Result<()> {
                <$ty>::put_quota_snapshot(self, key, body, now)
            }
            fn delete_quota_snapshot(&mut self, key: &str) -> Result<()> {
                <$ty>::delete_quota_snapshot(self, key)
            }
        }
    };
}

fn reopen_lite(s: &Store) -> Store {
    Store::open(s.path()).unwrap()
}

#[cfg(feature = "postgres")]
fn reopen_pg(s: &crate::pg::PgStore) -> crate::pg::PgStore {
    crate::pg::PgStore::open(s.url()).unwrap()
}

delegate_usage!(Store, reopen_lite);
#[cfg(feature = "postgres")]
delegate_usage!(crate::pg::PgStore, reopen_pg);

both!(
    usage_views_read_records_claims_skills_and_latest_turns_sqlite,
    usage_views_read_records_claims_skills_and_latest_turns_postgres,
    usage_views_read_records_claims_skills_and_latest_turns
);
both!(
    inputs_runs_usage_and_continue_sources_sqlite,
    inputs_runs_usage_and_continue_sources_postgres,
    inputs_runs_usage_and_continue_sources
);
both!(
    quota_snapshots_replace_and_delete_sqlite,
    quota_snapshots_replace_and_delete_postgres,
    quota_snapshots_replace_and_delete
);

fn usage(thread_id: &str, turn_id: &str, provider: &str, at_ms: i64, tokens: u64) -> UsageRow {
    UsageRow {
        thread_id: thread_id.into(),
        turn_id: turn_id.into(),
        provider: provider.into(),
        model: "m1".into(),
        at_ms,
        input_tokens: tokens,
        output_tokens: 2 * tokens,
        cache_read_tokens: 3,
        cache_creation_tokens: 0,
        reasoning_tokens: 1,
    }
}

fn skill_call(
    thread_id: &str,
    turn_id: &str,
    id: &str,
    name: &str,
    args: serde_json::Value,
) -> ItemRow {
    let mut it = item(thread_id, turn_id, id, "tool_call", "");
    it.body = json!({"id": id, "type": "tool_call", "name": name, "arguments": args});
    it
}

fn usage_views_read_records_claims_skills_and_latest_turns(store: &mut impl Usage) {
    // a built-in conversation, a subagent child, and an external engine's conversation
    store.insert_thread(&thread("main", "/w", 10)).unwrap();
    let mut child = thread("child", "/w", 10);
    child.extra = json!({"agent": {"root_id": "main"}});
    store.insert_thread(&child).unwrap();
    let mut ext = thread("ext", "/w", 10);
    ext.engine_id = "codex".into();
    ext.extra = json!({"engine_ref": "session-7"});
    store.insert_thread(&ext).unwrap();
    let mut blank = thread("blank", "/w", 10);
    blank.engine_id = "claude".into();
    blank.extra = json!({"engine_ref": "  "});
    store.insert_thread(&blank).unwrap();

    let mut early = turn("main", "u1");
    early.provider = "p".into();
    early.started_at_ms = 1_000;
    early.status = "completed".into();
    store.insert_turn(&early).unwrap();
    let mut late = turn("child", "u2");
    late.provider = "p".into();
    late.model = "m2".into();
    late.started_at_ms = 5_000;
    late.status = "failed".into();
    late.error = Some(json!({"message": "rate limited"}));
    store.insert_turn(&late).unwrap();
    let mut other = turn("ext", "u3");
    other.provider = "q".into();
    other.started_at_ms = 3_000;
    store.insert_turn(&other).unwrap();

    store
        .insert_usage(&usage("main", "u1", "p", 100, 5))
        .unwrap();
    store
        .insert_usage(&usage("child", "u2", "p", 200, 7))
        .unwrap();
    store
        .insert_usage(&usage("child", "u2", "p", 300, 1))
        .unwrap();
    let mut zero = usage("child", "u2", "p", 400, 0);
    zero.cache_read_tokens = 0;
    store.insert_usage(&zero).unwrap();
    assert_eq!(store.list_usage(Some("child")).unwrap().len(), 3);
    assert_eq!(store.list_usage(None).unwrap().len(), 4);
    assert_eq!(
        store.list_usage(Some("main")).unwrap()[0],
        usage("main", "u1", "p", 100, 5)
    );

    for (id, name, args) in [
        ("s1", "load_skill", json!({"name": "pdf"})),
        ("s2", "skill", json!({"skill": "pdf"})),
        ("s3", "Skill", json!({"skill": "xlsx"})),
        ("s4", "shell", json!({"name": "pdf"})),
        ("s5", "load_skill", json!("{\"name\": \"docx\"}")),
        ("s6", "load_skill", json!({"other": 1})),
    ] {
        store
            .upsert_item(&skill_call("main", "u1", id, name, args))
            .unwrap();
    }

    let snap = store.usage_snapshot().unwrap();
    let scan: Vec<(&str, &str, u64, bool)> = snap
        .rows
        .iter()
        .map(|r| {
            (
                r.thread_id.as_str(),
                r.engine_id.as_str(),
                r.input_tokens,
                r.is_agent,
            )
        })
        .collect();
    assert_eq!(
        scan,
        [
            ("main", "", 5, false),
            ("child", "", 7, true),
            ("child", "", 1, true),
            ("child", "", 0, true)
        ]
    );
    assert_eq!(snap.rows[0].output_tokens, 10);
    assert_eq!(snap.rows[0].at_ms, 100);

    let mut claims: Vec<(String, String, Option<String>)> = snap
        .claims
        .into_iter()
        .map(|c| (c.thread_id, c.engine_id, c.engine_ref))
        .collect();
    claims.sort();
    assert_eq!(
        claims,
        [
            ("blank".into(), "claude".into(), None),
            ("ext".into(), "codex".into(), Some("session-7".into()))
        ]
    );

    let mut skills = snap.skills;
    skills.sort();
    assert_eq!(
        skills,
        [
            ("docx".to_string(), 1),
            ("pdf".into(), 2),
            ("xlsx".into(), 1)
        ]
    );

    let mut latest = snap.latest;
    latest.sort_by(|a, b| a.provider.cmp(&b.provider));
    assert_eq!(latest.len(), 2, "{latest:?}");
    let p = &latest[0];
    assert_eq!(
        (
            p.provider.as_str(),
            p.thread_id.as_str(),
            p.turn_id.as_str()
        ),
        ("p", "child", "u2")
    );
    assert_eq!((p.status.as_str(), p.model.as_str()), ("failed", "m2"));
    assert_eq!(p.error.as_deref(), Some("rate limited"));
    assert_eq!(p.started_at_ms, 5_000);
    assert_eq!(p.reported, 2, "records with only zeros are not reported");
    assert_eq!(p.tokens, [8, 16, 6, 0]);
    let q = &latest[1];
    assert_eq!((q.engine_id.as_str(), q.turn_id.as_str()), ("codex", "u3"));
    assert_eq!((q.reported, q.tokens), (0, [0; 4]));
    assert!(q.error.is_none());
}

fn quota_snapshots_replace_and_delete(store: &mut impl Usage) {
    assert_eq!(store.quota_snapshot("acct").unwrap(), None);
    store
        .put_quota_snapshot("acct", &json!({"left": 10}), 1)
        .unwrap();
    store
        .put_quota_snapshot("acct", &json!({"left": 4}), 2)
        .unwrap();
    store.put_quota_snapshot("other", &json!([1]), 2).unwrap();
    assert_eq!(
        store.quota_snapshot("acct").unwrap(),
        Some(json!({"left": 4}))
    );
    store.delete_quota_snapshot("acct").unwrap();
    store.delete_quota_snapshot("acct").unwrap();
    assert_eq!(store.quota_snapshot("acct").unwrap(), None);
    assert_eq!(store.quota_snapshot("other").unwrap(), Some(json!([1])));
}

fn inputs_runs_usage_and_continue_sources(store: &mut impl Usage) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let input = |id: &str, mode: &str, state: &str, at: i64| InputRow {
        thread_id: "t1".into(),
        id: id.into(),
        mode: mode.into(),
        state: state.into(),
        body: json!({"prompt": id}),
        created_at_ms: at,
        updated_at_ms: at,
    };
    store
        .upsert_input(&input("c2", "queue", "pending", 5))
        .unwrap();
    store
        .upsert_input(&input("c1", "steer", "pending", 5))
        .unwrap();
    store
        .upsert_input(&input("c0", "queue", "held", 1))
        .unwrap();
    // an update keeps the queue position (created_at) and changes the rest
    let mut c2 = input("c2", "steer", "held", 50);
    c2.body = json!({"prompt": "edited"});
    store.upsert_input(&c2).unwrap();
    let got = store.get_input("t1", "c2").unwrap().unwrap();
    assert_eq!(got.created_at_ms, 5);
    assert_eq!(got.updated_at_ms, 50);
    assert_eq!((got.mode.as_str(), got.state.as_str()), ("steer", "held"));
    assert_eq!(got.body["prompt"], "edited");
    let ids = |v: Vec<InputRow>| v.into_iter().map(|i| i.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_inputs("t1", &[]).unwrap()),
        ["c0", "c2", "c1"]
    );
    assert_eq!(
        ids(store.list_inputs("t1", &["held"]).unwrap()),
        ["c0", "c2"]
    );
    assert_eq!(ids(store.list_inputs("t1", &["pending"]).unwrap()), ["c1"]);
    assert!(store.get_input("t1", "nope").unwrap().is_none());
    assert!(matches!(
        store
            .upsert_input(&input("c9", "shout", "pending", 1))
            .unwrap_err(),
        StoreError::Invalid(_)
    ));
    assert!(matches!(
        store
            .upsert_input(&input("c9", "queue", "lost", 1))
            .unwrap_err(),
        StoreError::Invalid(_)
    ));

    let mut run = RunRow {
        id: "r1".into(),
        thread_id: "t1".into(),
        status: "accepted".into(),
        owner_instance: "inst".into(),
        body: json!({"status": "accepted", "request": {"mode": "start"}}),
        created_at_ms: 7,
        updated_at_ms: 7,
    };
    store.upsert_run(&run).unwrap();
    run.status = "completed".into();
    run.updated_at_ms = 9;
    run.created_at_ms = 8; // kept from the first insert
    store.upsert_run(&run).unwrap();
    let got = store.get_run("r1").unwrap().unwrap();
    assert_eq!(got.status, "completed");
    assert_eq!((got.created_at_ms, got.updated_at_ms), (7, 9));
    assert_eq!(store.list_runs("t1").unwrap().len(), 1);
    assert!(store.get_run("nope").unwrap().is_none());

    let usage = UsageRow {
        thread_id: "t1".into(),
        turn_id: "u1".into(),
        provider: "p".into(),
        model: "m".into(),
        at_ms: 3,
        input_tokens: 10,
        output_tokens: 20,
        cache_read_tokens: 30,
        cache_creation_tokens: 40,
        reasoning_tokens: 5,
    };
    store.insert_usage(&usage).unwrap();
    store
        .insert_usage(&UsageRow {
            at_ms: 1,
            ..usage.clone()
        })
        .unwrap();
    let all = store.list_usage(None).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].at_ms, 1);
    assert_eq!(all[1], usage);
    assert!(store.list_usage(Some("other")).unwrap().is_empty());

    assert!(store.claim_continue_source("t1", "turn-1").unwrap());
    assert!(!store.claim_continue_source("t1", "turn-1").unwrap());
    store.reopen();
    assert!(!store.claim_continue_source("t1", "turn-1").unwrap());
    assert!(store.claim_continue_source("t1", "turn-2").unwrap());
}
