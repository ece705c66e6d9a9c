//! Account quota for `engine/list {include_quota: true}` (seed "查询订阅状态"; spec
//! `engines.md` §3).
//!
//! A [`Source`] is one configured service or one external engine with the adapter that
//! can read its allowance ([`adapters`]). [`collect`] reads every source concurrently
//! under **one 8-second deadline** shared by all of them, then settles each result by
//! the rules below ([`settle`]) against the persisted snapshots ([`SnapshotStore`], a
//! table of the wuu store, so snapshots survive restarts):
//!
//! 1. Every attempt sets `checked_at`. A success is `available` with `observed_at` =
//!    now and `expires_at` = now + 5 minutes, and replaces the account's snapshot.
//! 2. An authentication refusal (`sign_in`) deletes that account's snapshot.
//! 3. `unsupported` stays `unsupported`.
//! 4. Any other failure returns the account's last success as `stale` (with its old
//!    `observed_at`/`expires_at`, windows and balances, the new `error_code` and
//!    `checked_at`) when the account is still confirmed (same credential-scoped
//!    account id); otherwise `unavailable` without windows or balances.
//!
//! Snapshots are keyed by the account id, which is derived from the source, the
//! endpoint and the credential (or the upstream account id): a changed credential is
//! another account and never inherits its data. A percentage that is missing is
//! unknown (absent, never 0 or unlimited); NaN, infinite and negative percentages are
//! dropped; ≥ 100 means exhausted. A quota read only reads allowance endpoints: it never
//! runs inference and never changes a selection.

pub mod adapters;
mod anthropic;
mod chatgpt;
mod codex_cli;
mod deepseek;
pub mod http;
mod kimi;
mod openrouter;
mod values;
mod zhipu;

use crossbeam_channel::bounded;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wuu_protocol::{QuotaAccount, QuotaBalance, QuotaWindow, SubscriptionQuota};

/// The one deadline all sources share.
pub const DEADLINE: Duration = Duration::from_secs(8);
/// How long a successful read is fresh.
pub const FRESH_FOR_MS: i64 = 5 * 60 * 1000;

/// Why a read failed, as a safe category (never the upstream body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaError {
    /// Transport failure, timeout, or the deadline passed.
    Network,
    /// HTTP 429.
    RateLimited,
    /// The credential was refused (401/403) or there is none.
    SignIn,
    /// Unparseable, oversized or unexpected answer.
    InvalidResponse,
    /// No adapter, or the credential kind cannot be queried.
    Unsupported,
}

impl QuotaError {
    /// The wire `error_code`.
    pub fn code(self) -> &'static str {
        match self {
            QuotaError::Network => "network",
            QuotaError::RateLimited => "rate_limited",
            QuotaError::SignIn => "sign_in",
            QuotaError::InvalidResponse => "invalid_response",
            QuotaError::Unsupported => "unsupported",
        }
    }
}

/// What an adapter read successfully.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// `subscription` | `plan` | `balance`.
    pub kind: &'static str,
    /// Upstream plan.
    pub plan: Option<String>,
    /// The account, when the answer identified it (overrides the source's).
    pub account: Option<QuotaAccount>,
    /// Windows (sanitized by [`settle`]).
    pub windows: Vec<QuotaWindow>,
    /// Balances.
    pub balances: Vec<QuotaBalance>,
    /// Reset credits.
    pub reset_credits: Option<u64>,
}

/// Reads the account rate limits of the external Codex engine through its shared
/// `codex app-server` host: sends `account/rateLimits/read {}` and returns the JSON-RPC
/// `result` (`{rateLimits, rateLimitsByLimitId?, accountId?}`), or the error text.
/// Implemented by the engines' Codex host.
pub trait RateLimitReader: Send + Sync {
    /// One request, answered within `timeout`.
    fn read_rate_limits(&self, timeout: Duration) -> Result<Value, String>;
}

impl<F> RateLimitReader for F
where
    F: Fn(Duration) -> Result<Value, String> + Send + Sync,
{
    fn read_rate_limits(&self, timeout: Duration) -> Result<Value, String> {
        self(timeout)
    }
}

/// A source and how to read it.
#[derive(Clone)]
pub struct Source {
    /// `service:<name>` or `engine:<id>` (for the caller; not on the wire).
    pub key: String,
    /// The adapter.
    pub adapter: adapters::Adapter,
}

/// The opaque account id: hex of the first 16 bytes of SHA-256 over
/// `source \0 endpoint \0 identity`.
pub fn account_id(source: &str, endpoint: &str, identity: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0]);
    h.update(endpoint.as_bytes());
    h.update([0]);
    h.update(identity.as_bytes());
    h.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The snapshot key of an account.
fn snapshot_key(account: &QuotaAccount) -> String {
    account_id("snapshot", "", &account.id)
}

/// Where snapshots persist.
pub trait SnapshotStore {
    /// The snapshot under `key`.
    fn get(&mut self, key: &str) -> Option<SubscriptionQuota>;
    /// Replaces the snapshot under `key`.
    fn put(&mut self, key: &str, q: &SubscriptionQuota);
    /// Deletes the snapshot under `key`.
    fn delete(&mut self, key: &str);
}

impl SnapshotStore for wuu_store::Store {
    fn get(&mut self, key: &str) -> Option<SubscriptionQuota> {
        match self.quota_snapshot(key) {
            Ok(Some(v)) => serde_json::from_value(v).ok(),
            Ok(None) => None,
            Err(e) => {
                log::warn!("quota snapshot read: {e}");
                None
            }
        }
    }

    fn put(&mut self, key: &str, q: &SubscriptionQuota) {
        let body = serde_json::to_value(q).unwrap_or(Value::Null);
        if let Err(e) = self.put_quota_snapshot(key, &body, crate::util::now_ms()) {
            log::warn!("quota snapshot write: {e}");
        }
    }

    fn delete(&mut self, key: &str) {
        if let Err(e) = self.delete_quota_snapshot(key) {
            log::warn!("quota snapshot delete: {e}");
        }
    }
}

/// A percentage the wire may carry: finite and non-negative.
pub fn sane_percent(p: Option<f64>) -> Option<f64> {
    p.filter(|v| v.is_finite() && *v >= 0.0)
}

/// Applies the rules of the module doc to one read.
pub fn settle(
    account: Option<QuotaAccount>,
    kind: Option<&'static str>,
    result: Result<Reading, QuotaError>,
    now_ms: i64,
    snapshots: &mut dyn SnapshotStore,
) -> SubscriptionQuota {
    let checked_at = crate::util::rfc3339(now_ms);
    match result {
        Ok(mut r) => {
            for w in &mut r.windows {
                w.used_percent = sane_percent(w.used_percent);
            }
            let account = r.account.take().or(account);
            let q = SubscriptionQuota {
                status: "available".into(),
                kind: Some(r.kind.to_owned()),
                plan: r.plan,
                account: account.clone(),
                checked_at: checked_at.clone(),
                observed_at: Some(checked_at),
                expires_at: Some(crate::util::rfc3339(now_ms + FRESH_FOR_MS)),
                error_code: None,
                windows: r.windows,
                balances: r.balances,
                reset_credits: r.reset_credits,
            };
            if let Some(a) = &account {
                snapshots.put(&snapshot_key(a), &q);
            }
            q
        }
        Err(e) => {
            let bare = |status: &str| SubscriptionQuota {
                status: status.into(),
                kind: kind.map(str::to_owned),
                account: account.clone(),
                checked_at: checked_at.clone(),
                error_code: Some(e.code().into()),
                ..Default::default()
            };
            match e {
                QuotaError::SignIn => {
                    if let Some(a) = &account {
                        snapshots.delete(&snapshot_key(a));
                    }
                    bare("sign_in")
                }
                QuotaError::Unsupported => bare("unsupported"),
                _ => {
                    let last = account.as_ref().and_then(|a| {
                        snapshots
                            .get(&snapshot_key(a))
                            .filter(|s| s.status == "available")
                            .filter(|s| s.account.as_ref().map(|x| &x.id) == Some(&a.id))
                    });
                    match last {
                        Some(mut s) => {
                            s.status = "stale".into();
                            s.error_code = Some(e.code().into());
                            s.checked_at = checked_at.clone();
                            s
                        }
                        None => bare("unavailable"),
                    }
                }
            }
        }
    }
}

/// Reads every source concurrently under one shared deadline ([`DEADLINE`] from
/// `started`), settles each, and returns the quotas in source order. A source that has
/// not answered by the deadline settles as a `network` failure (its thread ends on its
/// own request timeout, which is capped by the same deadline).
pub fn collect(
    sources: &[Source],
    started: Instant,
    snapshots: &mut dyn SnapshotStore,
) -> Vec<SubscriptionQuota> {
    let deadline = started + DEADLINE;
    let (tx, rx) = bounded::<(usize, Result<Reading, QuotaError>)>(sources.len().max(1));
    let mut pending = 0;
    let mut results: Vec<Option<Result<Reading, QuotaError>>> = vec![None; sources.len()];
    for (i, s) in sources.iter().enumerate() {
        if let Some(immediate) = s.adapter.immediate() {
            results[i] = Some(immediate);
            continue;
        }
        let tx = tx.clone();
        let adapter = s.adapter.clone();
        let spawned = crate::util::spawn("wuu-quota".into(), move || {
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| adapter.read(deadline)))
                    .unwrap_or(Err(QuotaError::InvalidResponse));
            let _ = tx.send((i, r));
        });
        match spawned {
            Ok(_) => pending += 1,
            Err(_) => results[i] = Some(Err(QuotaError::Network)),
        }
    }
    drop(tx);
    while pending > 0 {
        match rx.recv_deadline(deadline) {
            Ok((i, r)) => {
                results[i] = Some(r);
                pending -= 1;
            }
            Err(_) => break,
        }
    }
    let now = crate::util::now_ms();
    sources
        .iter()
        .zip(results)
        .map(|(s, r)| {
            settle(
                s.adapter.account(),
                s.adapter.kind(),
                r.unwrap_or(Err(QuotaError::Network)),
                now,
                snapshots,
            )
        })
        .collect()
}

/// Host handle for callers that keep a [`RateLimitReader`].
pub type SharedReader = Arc<dyn RateLimitReader>;

#[cfg(test)]
mod tests;
