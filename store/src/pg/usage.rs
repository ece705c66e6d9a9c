//! Usage records, usage views and quota snapshots on PostgreSQL: the [`PgStore`]
//! counterparts of the [`crate::Store`] methods of `usage.rs` and of the usage records
//! of `records.rs`. README "Several hosts, one database".

use super::PgStore;
use crate::error::Result;
use crate::rows::UsageRow;
use crate::usage::{EngineClaim, LatestTurn, UsageScanRow, UsageSnapshot};

impl PgStore {
    /// See [`crate::Store::insert_usage`].
    pub fn insert_usage(&mut self, u: &UsageRow) -> Result<()> {
        self.transaction(Some(&u.thread_id), |ops| ops.insert_usage(u))
    }

    /// See [`crate::Store::list_usage`].
    pub fn list_usage(&mut self, thread_id: Option<&str>) -> Result<Vec<UsageRow>> {
        self.transaction(None, |ops| ops.list_usage(thread_id))
    }

    /// See [`crate::Store::usage_scan`].
    pub fn usage_scan(&mut self) -> Result<Vec<UsageScanRow>> {
        self.transaction(None, |ops| ops.usage_scan())
    }

    /// See [`crate::Store::engine_claims`].
    pub fn engine_claims(&mut self) -> Result<Vec<EngineClaim>> {
        self.transaction(None, |ops| ops.engine_claims())
    }

    /// See [`crate::Store::latest_turns`].
    pub fn latest_turns(&mut self) -> Result<Vec<LatestTurn>> {
        self.transaction(None, |ops| ops.latest_turns())
    }

    /// See [`crate::Store::skill_loads`].
    pub fn skill_loads(&mut self) -> Result<Vec<(String, u64)>> {
        self.transaction(None, |ops| ops.skill_loads())
    }

    /// See [`crate::Store::usage_snapshot`]: the four reads in one transaction.
    pub fn usage_snapshot(&mut self) -> Result<UsageSnapshot> {
        self.transaction(None, |ops| ops.usage_snapshot())
    }

    /// See [`crate::Store::quota_snapshot`].
    pub fn quota_snapshot(&mut self, key: &str) -> Result<Option<serde_json::Value>> {
        self.transaction(None, |ops| ops.quota_snapshot(key))
    }

    /// See [`crate::Store::put_quota_snapshot`].
    pub fn put_quota_snapshot(
        &mut self,
        key: &str,
        body: &serde_json::Value,
        now_ms: i64,
    ) -> Result<()> {
        self.transaction(Some(""), |ops| ops.put_quota_snapshot(key, body, now_ms))
    }

    /// See [`crate::Store::delete_quota_snapshot`].
    pub fn delete_quota_snapshot(&mut self, key: &str) -> Result<()> {
        self.transaction(Some(""), |ops| ops.delete_quota_snapshot(key))
    }
}
