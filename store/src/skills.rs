//! Skill uses (`load_skill` calls) for `settings/usage`'s `skill_usage`, and the
//! "provider in use" check of `config/provider/remove`.

use crate::error::Result;
use crate::sql::{values, Ops};
use crate::store::{Store, Tx};
use crate::util::get;

/// Uses of one skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillUseCount {
    /// Skill name.
    pub name: String,
    /// `project` | `user`.
    pub source: String,
    /// Number of uses.
    pub count: u64,
    /// Unix ms of the first use in the window.
    pub first_used_at_ms: i64,
    /// Unix ms of the last use.
    pub last_used_at_ms: i64,
}

impl Ops<'_> {
    /// See [`Store::record_skill_use`].
    pub(crate) fn record_skill_use(
        &self,
        name: &str,
        source: &str,
        thread_id: &str,
        at_ms: i64,
    ) -> Result<()> {
        self.conn.exec(
            "INSERT INTO skill_uses (name, source, thread_id, at_ms) VALUES (?1, ?2, ?3, ?4)",
            &values![name, source, thread_id, at_ms],
        )?;
        Ok(())
    }

    /// See [`Store::skill_use_counts`].
    pub(crate) fn skill_use_counts(&self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>> {
        let rows = self.conn.rows(
            "SELECT name, source, COUNT(*), MIN(at_ms), MAX(at_ms) FROM skill_uses \
             WHERE at_ms >= ?1 GROUP BY name, source ORDER BY COUNT(*) DESC, name",
            &values![since_ms.unwrap_or(i64::MIN)],
        )?;
        rows.iter()
            .map(|r| {
                let name: String = get(r, 0, "skill_uses", "?")?;
                let count: i64 = get(r, 2, "skill_uses", &name)?;
                Ok(SkillUseCount {
                    source: get(r, 1, "skill_uses", &name)?,
                    count: count.max(0) as u64,
                    first_used_at_ms: get(r, 3, "skill_uses", &name)?,
                    last_used_at_ms: get(r, 4, "skill_uses", &name)?,
                    name,
                })
            })
            .collect()
    }

    /// See [`Store::running_turn_with_provider`].
    pub(crate) fn running_turn_with_provider(&self, provider: &str) -> Result<Option<String>> {
        let rows = self.conn.rows(
            "SELECT thread_id FROM turns WHERE status = 'in_progress' AND provider = ?1 \
             LIMIT 1",
            &values![provider],
        )?;
        rows.first()
            .map(|r| get(r, 0, "turns", provider))
            .transpose()
    }
}

impl Tx<'_> {
    /// See [`Store::record_skill_use`].
    pub fn record_skill_use(
        &self,
        name: &str,
        source: &str,
        thread_id: &str,
        at_ms: i64,
    ) -> Result<()> {
        self.ops().record_skill_use(name, source, thread_id, at_ms)
    }

    /// See [`Store::skill_use_counts`].
    pub fn skill_use_counts(&self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>> {
        self.ops().skill_use_counts(since_ms)
    }

    /// See [`Store::running_turn_with_provider`].
    pub fn running_turn_with_provider(&self, provider: &str) -> Result<Option<String>> {
        self.ops().running_turn_with_provider(provider)
    }
}

impl Store {
    /// Records one use of a skill (`source` = `project` | `user`) by the model in
    /// conversation `thread_id` (any text; no foreign key, so ephemeral conversations and
    /// deleted ones keep their counts) at `at_ms` (Unix ms).
    pub fn record_skill_use(
        &mut self,
        name: &str,
        source: &str,
        thread_id: &str,
        at_ms: i64,
    ) -> Result<()> {
        self.transaction(|tx| tx.record_skill_use(name, source, thread_id, at_ms))
    }

    /// Uses per `(name, source)` at or after `since_ms` (all time with `None`), most
    /// used first. For `settings/usage`'s `skill_usage`; per-use rows (`skill_uses`:
    /// `name, source, thread_id, at_ms`) allow other windows and time zones.
    pub fn skill_use_counts(&self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>> {
        self.read(|tx| tx.skill_use_counts(since_ms))
    }

    /// A conversation with an `in_progress` turn on `provider` (any process), if any.
    pub fn running_turn_with_provider(&self, provider: &str) -> Result<Option<String>> {
        self.read(|tx| tx.running_turn_with_provider(provider))
    }
}
