//! Token usage views and account quota: `usage/overview`, `settings/usage`, and the
//! statistics and quota parts of `engine/list {include_quota}` (seed 003 "查询用量概览",
//! "查询订阅状态"; spec `engines.md` §3–§4).
//!
//! - [`history`]: aggregation of usage records into days, metrics and breakdowns.
//! - [`ledger`]: the external engines' own local ledgers (the `outside` side).
//! - [`activity`]: `local_usage` / `latest_request` per engine and per service.
//!
//! Concurrency: requests run on the catalog pool. Concurrent requests share one history
//! scan ([`Coalesced`]): the first starts it, the others wait for its result instead of
//! reading again. Ledger files are cached by size and mtime ([`ledger::LedgerCache`]).
//!
//! Retention: usage belongs to the retained history of its conversation. Deleting a
//! conversation (`thread/delete`) deletes its usage records with it (the store's
//! `ON DELETE CASCADE`), so the views no longer count it; archiving keeps it.

pub mod activity;
pub mod history;
pub mod ledger;

use crate::server::{Responder, Shared};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use wuu_protocol::{ErrorCode, UsageParams};
use wuu_store::{Store, UsageSnapshot};

/// What one store scan read (zone-independent; each request aggregates it in its zone).
pub type StoreScan = UsageSnapshot;

/// One in-flight computation shared by every caller that arrives while it runs.
pub struct Coalesced<T> {
    slot: Mutex<Option<Arc<Flight<T>>>>,
}

struct Flight<T> {
    value: Mutex<Option<T>>,
    ready: Condvar,
}

impl<T> Default for Coalesced<T> {
    fn default() -> Self {
        Coalesced {
            slot: Mutex::new(None),
        }
    }
}

impl<T: Clone> Coalesced<T> {
    /// Runs `f`, or — when another caller is already running it — waits for that
    /// caller's result. Nothing is kept after the flight lands (no stale answers).
    /// A panic in `f` lands `on_panic()` for every waiter.
    pub fn run(&self, f: impl FnOnce() -> T, on_panic: impl FnOnce() -> T) -> T {
        let (flight, leader) = {
            let mut slot = self.slot.lock();
            match slot.as_ref() {
                Some(f) => (f.clone(), false),
                None => {
                    let f = Arc::new(Flight {
                        value: Mutex::new(None),
                        ready: Condvar::new(),
                    });
                    *slot = Some(f.clone());
                    (f, true)
                }
            }
        };
        if leader {
            let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .unwrap_or_else(|_| on_panic());
            *flight.value.lock() = Some(v.clone());
            self.slot.lock().take();
            flight.ready.notify_all();
            v
        } else {
            let mut value = flight.value.lock();
            while value.is_none() {
                flight.ready.wait(&mut value);
            }
            value.clone().expect("landed")
        }
    }
}

/// Ledger scan results per engine.
pub type LedgerScan = Arc<Vec<(String, ledger::LedgerOutcome)>>;

/// Usage state shared by the catalog threads.
#[derive(Default)]
pub struct UsageState {
    store_scan: Coalesced<Result<Arc<StoreScan>, String>>,
    ledger_scan: Coalesced<Option<LedgerScan>>,
    ledger_cache: ledger::LedgerCache,
}

impl UsageState {
    /// The store scan, shared with concurrent callers. Errors: the store's message.
    pub fn store_scan(&self, store: &Store) -> Result<Arc<StoreScan>, String> {
        self.store_scan.run(
            || {
                store
                    .usage_snapshot()
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            },
            || Err("the usage scan failed".to_owned()),
        )
    }

    /// The ledger scan of `roots`, shared with concurrent callers; `None` when it failed
    /// as a whole.
    pub fn ledger_scan(&self, roots: &ledger::LedgerRoots) -> Option<LedgerScan> {
        self.ledger_scan.run(
            || Some(Arc::new(ledger::scan_all(roots, &self.ledger_cache))),
            || None,
        )
    }
}

fn parse_zone(p: &UsageParams, reply: Responder) -> Option<(jiff::tz::TimeZone, Responder)> {
    match history::zone(p.timezone.as_deref()) {
        Ok(tz) => Some((tz, reply)),
        Err(e) => {
            reply.err(ErrorCode::InvalidParams, e);
            None
        }
    }
}

/// `usage/overview`: reads only usage records.
pub fn serve_overview(shared: &Arc<Shared>, store: &Store, p: UsageParams, reply: Responder) {
    let Some((tz, reply)) = parse_zone(&p, reply) else {
        return;
    };
    match shared.usage.store_scan(store) {
        Ok(scan) => reply.ok(&history::overview(&scan.rows, &tz)),
        Err(e) => reply.err(ErrorCode::InternalError, format!("collect usage: {e}")),
    }
}

/// `settings/usage`: usage records plus the engines' local ledgers.
pub fn serve_settings(shared: &Arc<Shared>, store: &Store, p: UsageParams, reply: Responder) {
    let Some((tz, reply)) = parse_zone(&p, reply) else {
        return;
    };
    let scan = match shared.usage.store_scan(store) {
        Ok(s) => s,
        Err(e) => return reply.err(ErrorCode::InternalError, format!("collect usage: {e}")),
    };
    let roots = ledger::LedgerRoots::from_env();
    let ledgers = shared.usage.ledger_scan(&roots);
    let mut result = history::settings(
        &history::SettingsInputs {
            rows: &scan.rows,
            claims: &scan.claims,
            skills: &scan.skills,
            ledgers: ledgers.as_deref().map(Vec::as_slice).unwrap_or(&[]),
            now_ms: crate::util::now_ms(),
        },
        &tz,
    );
    if ledgers.is_none() {
        // The scan failed as a whole: the engine breakdowns are absent, not zero.
        result.engine_breakdowns = None;
    }
    reply.ok(&result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn concurrent_callers_share_one_run() {
        let c = Arc::new(Coalesced::<u32>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
        let leader = {
            let (c, runs) = (c.clone(), runs.clone());
            std::thread::spawn(move || {
                c.run(
                    || {
                        runs.fetch_add(1, Ordering::SeqCst);
                        go_rx.recv().unwrap();
                        7
                    },
                    || 0,
                )
            })
        };
        // Wait until the leader is inside its run.
        while runs.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let followers: Vec<_> = (0..3)
            .map(|_| {
                let (c, runs) = (c.clone(), runs.clone());
                std::thread::spawn(move || {
                    c.run(
                        || {
                            runs.fetch_add(1, Ordering::SeqCst);
                            99
                        },
                        || 0,
                    )
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        go_tx.send(()).unwrap();
        assert_eq!(leader.join().unwrap(), 7);
        for f in followers {
            assert_eq!(f.join().unwrap(), 7);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // After landing, a new call runs again (nothing cached).
        assert_eq!(c.run(|| 3, || 0), 3);
        // A panicking run lands the fallback.
        assert_eq!(c.run(|| panic!("boom"), || 42), 42);
    }
}
