//! The process ledger and skill uses on PostgreSQL: the [`PgStore`] counterparts of the
//! [`crate::Store`] methods of `processes.rs` and `skills.rs`. A process group is
//! keyed by host, so hosts sharing a database each sweep only their own. README
//! "Several hosts, one database".

use super::PgStore;
use crate::error::Result;
use crate::processes::ProcessGroupRow;
use crate::skills::SkillUseCount;

impl PgStore {
    /// See [`crate::Store::record_process_group`].
    pub fn record_process_group(&mut self, r: &ProcessGroupRow) -> Result<()> {
        self.transaction(None, |ops| ops.record_process_group(r))
    }

    /// See [`crate::Store::forget_process_group`].
    pub fn forget_process_group(&mut self, host: &str, pgid: i64, token: &str) -> Result<()> {
        self.transaction(None, |ops| ops.forget_process_group(host, pgid, token))
    }

    /// See [`crate::Store::orphaned_process_groups`].
    pub fn orphaned_process_groups(&mut self, host: &str) -> Result<Vec<ProcessGroupRow>> {
        self.transaction(None, |ops| ops.orphaned_process_groups(host))
    }

    /// See [`crate::Store::record_skill_use`].
    pub fn record_skill_use(
        &mut self,
        name: &str,
        source: &str,
        thread_id: &str,
        at_ms: i64,
    ) -> Result<()> {
        self.transaction(None, |ops| {
            ops.record_skill_use(name, source, thread_id, at_ms)
        })
    }

    /// See [`crate::Store::skill_use_counts`].
    pub fn skill_use_counts(&mut self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>> {
        self.transaction(None, |ops| ops.skill_use_counts(since_ms))
    }

    /// See [`crate::Store::running_turn_with_provider`].
    pub fn running_turn_with_provider(&mut self, provider: &str) -> Result<Option<String>> {
        self.transaction(None, |ops| ops.running_turn_with_provider(provider))
    }
}
