//! Process ledger and skill use tests, run against both backends (see
//! `history_tests`).

use std::process::Command;

use crate::history_tests::{both, lite, thread, turn, History};
use crate::*;

/// The ledger calls these tests make, on either backend.
trait Ledgers: History {
    fn record_process_group(&mut self, r: &ProcessGroupRow) -> Result<()>;
    fn forget_process_group(&mut self, host: &str, pgid: i64, token: &str) -> Result<()>;
    fn orphaned_process_groups(&mut self, host: &str) -> Result<Vec<ProcessGroupRow>>;
    fn record_skill_use(&mut self, name: &str, source: &str, thread: &str, at: i64) -> Result<()>;
    fn skill_use_counts(&mut self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>>;
    fn running_turn_with_provider(&mut self, provider: &str) -> Result<Option<String>>;
}

macro_rules! delegate_ledgers {
    ($ty:ty) => {
        impl Ledgers for $ty {
            fn record_process_group(&mut self, r: &ProcessGroupRow) -> Result<()> {
                <$ty>::record_process_group(self, r)
            }
            fn forget_process_group(&mut self, host: &str, pgid: i64, token: &str) -> Result<()> {
                <$ty>::forget_process_group(self, host, pgid, token)
            }
            fn orphaned_process_groups(&mut self, host: &str) -> Result<Vec<ProcessGroupRow>> {
                <$ty>::orphaned_process_groups(self, host)
            }
            fn record_skill_use(
                &mut self,
                name: &str,
                source: &str,
                thread: &str,
                at: i64,
            ) -> Result<()> {
                <$ty>::record_skill_use(self, name, source, thread, at)
            }
            fn skill_use_counts(&mut self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>> {
                <$ty>::skill_use_counts(self, since_ms)
            }
            fn running_turn_with_provider(&mut self, provider: &str) -> Result<Option<String>> {
                <$ty>::running_turn_with_provider(self, provider)
            }
        }
    };
}

delegate_ledgers!(Store);
#[cfg(feature = "postgres")]
delegate_ledgers!(crate::pg::PgStore);

both!(
    process_groups_of_dead_owners_are_orphans_per_host_sqlite,
    process_groups_of_dead_owners_are_orphans_per_host_postgres,
    process_groups_of_dead_owners_are_orphans_per_host
);
both!(
    skill_uses_are_counted_and_running_providers_found_sqlite,
    skill_uses_are_counted_and_running_providers_found_postgres,
    skill_uses_are_counted_and_running_providers_found
);

fn group(pgid: i64, host: &str, owner_pid: u32, token: &str, at: i64) -> ProcessGroupRow {
    ProcessGroupRow {
        pgid,
        host: host.into(),
        owner_pid,
        instance: format!("inst-{pgid}"),
        token: token.into(),
        started_at_ms: at,
    }
}

fn process_groups_of_dead_owners_are_orphans_per_host(store: &mut impl Ledgers) {
    let mut dead = Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let dead = dead.id();
    let alive = std::process::id();
    store
        .record_process_group(&group(10, "h1", dead, "a", 2))
        .unwrap();
    store
        .record_process_group(&group(11, "h1", alive, "b", 1))
        .unwrap();
    store
        .record_process_group(&group(12, "h1", dead, "c", 1))
        .unwrap();
    store
        .record_process_group(&group(10, "h2", dead, "d", 1))
        .unwrap();
    let orphans = store.orphaned_process_groups("h1").unwrap();
    assert_eq!(
        orphans,
        vec![group(12, "h1", dead, "c", 1), group(10, "h1", dead, "a", 2)]
    );
    // the same host and group again replaces the row
    store
        .record_process_group(&group(12, "h1", alive, "e", 3))
        .unwrap();
    let pgids: Vec<i64> = store
        .orphaned_process_groups("h1")
        .unwrap()
        .iter()
        .map(|g| g.pgid)
        .collect();
    assert_eq!(pgids, [10]);
    // forgetting needs the token
    store.forget_process_group("h1", 10, "wrong").unwrap();
    assert_eq!(store.orphaned_process_groups("h1").unwrap().len(), 1);
    store.forget_process_group("h1", 10, "a").unwrap();
    assert!(store.orphaned_process_groups("h1").unwrap().is_empty());
    assert_eq!(store.orphaned_process_groups("h2").unwrap().len(), 1);
}

fn skill_uses_are_counted_and_running_providers_found(store: &mut impl Ledgers) {
    store.insert_thread(&thread("t", "/w", 1)).unwrap();
    for (name, source, at) in [
        ("pdf", "user", 10),
        ("pdf", "user", 30),
        ("xlsx", "repo", 20),
    ] {
        store.record_skill_use(name, source, "t", at).unwrap();
    }
    store.record_skill_use("pdf", "repo", "t", 5).unwrap();
    let counts = store.skill_use_counts(None).unwrap();
    let shape: Vec<(&str, &str, u64, i64, i64)> = counts
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.source.as_str(),
                c.count,
                c.first_used_at_ms,
                c.last_used_at_ms,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("pdf", "user", 2, 10, 30),
            ("pdf", "repo", 1, 5, 5),
            ("xlsx", "repo", 1, 20, 20)
        ]
    );
    let since: Vec<(String, u64)> = store
        .skill_use_counts(Some(20))
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.count))
        .collect();
    assert_eq!(since, [("pdf".to_string(), 1), ("xlsx".into(), 1)]);

    let mut running = turn("t", "u1");
    running.provider = "openai".into();
    running.status = "in_progress".into();
    store.insert_turn(&running).unwrap();
    let mut done = turn("t", "u2");
    done.provider = "anthropic".into();
    done.status = "completed".into();
    store.insert_turn(&done).unwrap();
    assert_eq!(
        store
            .running_turn_with_provider("openai")
            .unwrap()
            .as_deref(),
        Some("t")
    );
    assert_eq!(store.running_turn_with_provider("anthropic").unwrap(), None);
}
