//! Usage records, usage views and quota snapshot tests, run against both backends
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
}

macro_rules! delegate_usage {
    ($ty:ty) => {
        impl Usage for $ty {
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

delegate_usage!(Store);
#[cfg(feature = "postgres")]
delegate_usage!(crate::pg::PgStore);

both!(
    usage_views_read_records_claims_skills_and_latest_turns_sqlite,
    usage_views_read_records_claims_skills_and_latest_turns_postgres,
    usage_views_read_records_claims_skills_and_latest_turns
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
