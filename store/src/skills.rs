//! Skill uses (`load_skill` calls) for `settings/usage`'s `skill_usage`, and the
//! "provider in use" check of `config/provider/remove`.

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
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

impl Tx<'_> {
    /// See [`Store::record_skill_use`].
    pub fn record_skill_use(
        &self,
        name: &str,
        source: &str,
        thread_id: &str,
        at_ms: i64,
    ) -> Result<()> {
        crate::util::execute(
            self.conn,
            "INSERT INTO skill_uses (name, source, thread_id, at_ms) VALUES (?1, ?2, ?3, ?4)",
            params![name, source, thread_id, at_ms],
        )?;
        Ok(())
    }

    /// See [`Store::skill_use_counts`].
    pub fn skill_use_counts(&self, since_ms: Option<i64>) -> Result<Vec<SkillUseCount>> {
        let mut st = self.conn.prepare_cached(
            "SELECT name, source, COUNT(*), MIN(at_ms), MAX(at_ms) FROM skill_uses \
             WHERE at_ms >= ?1 GROUP BY name, source ORDER BY COUNT(*) DESC, name",
        )?;
        let mut rows = st.query(params![since_ms.unwrap_or(i64::MIN)])?;
        let mut out = vec![];
        while let Some(r) = rows.next()? {
            let name: String = get(r, 0, "skill_uses", "?")?;
            let count: i64 = get(r, 2, "skill_uses", &name)?;
            out.push(SkillUseCount {
                source: get(r, 1, "skill_uses", &name)?,
                count: count.max(0) as u64,
                first_used_at_ms: get(r, 3, "skill_uses", &name)?,
                last_used_at_ms: get(r, 4, "skill_uses", &name)?,
                name,
            });
        }
        Ok(out)
    }

    /// See [`Store::running_turn_with_provider`].
    pub fn running_turn_with_provider(&self, provider: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT thread_id FROM turns WHERE status = 'in_progress' AND provider = ?1 \
                 LIMIT 1",
                params![provider],
                |r| r.get::<_, String>(0),
            )
            .optional()?)
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
