//! Token usage views and account quota: `usage/overview`, `settings/usage`, and the
//! statistics and quota parts of `engine/list {include_quota}` (seed 003 "查询用量概览",
//! "查询订阅状态"; spec `engines.md` §3–§4).
//!
//! - [`history`]: aggregation of usage records into days, metrics and breakdowns.
//! - [`ledger`]: the external engines' own local ledgers (the `outside` side).
//! - [`activity`]: `local_usage` / `latest_request` per engine and per service.
//! - [`quota`]: account quota adapters, snapshots and their rules.
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
pub mod quota;

use crate::config::{Config, ProviderConfig};
use crate::outbound::Responder;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use wuu_protocol::{EngineUsage, ErrorCode, SubscriptionProvider, SubscriptionQuota, UsageParams};
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
pub fn serve_overview(state: &UsageState, store: &Store, p: UsageParams, reply: Responder) {
    let Some((tz, reply)) = parse_zone(&p, reply) else {
        return;
    };
    match state.store_scan(store) {
        Ok(scan) => reply.ok(&history::overview(&scan.rows, &tz)),
        Err(e) => reply.err(ErrorCode::InternalError, format!("collect usage: {e}")),
    }
}

/// `settings/usage`: usage records plus the engines' local ledgers.
pub fn serve_settings(state: &UsageState, store: &Store, p: UsageParams, reply: Responder) {
    let Some((tz, reply)) = parse_zone(&p, reply) else {
        return;
    };
    let scan = match state.store_scan(store) {
        Ok(s) => s,
        Err(e) => return reply.err(ErrorCode::InternalError, format!("collect usage: {e}")),
    };
    let roots = ledger::LedgerRoots::from_env();
    let ledgers = state.ledger_scan(&roots);
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

/// The opt-in parts of `engine/list {include_quota: true}`.
#[derive(Debug, Default)]
pub struct EngineListUsage {
    /// Every configured model service with its quota (and statistics).
    pub subscription_providers: Vec<SubscriptionProvider>,
    /// Per engine id given: the fields to flatten into its entry.
    pub engines: HashMap<String, EngineUsage>,
}

/// What the usage side needs to know of one `engine/list` entry.
#[derive(Debug, Clone, Copy)]
pub struct EngineEntry<'a> {
    /// Engine id (`wuu`, `codex`, `claude`, …).
    pub id: &'a str,
    /// Enabled and its binary found (only such external engines get a quota).
    pub available: bool,
}

/// Builds the quota and statistics of `engine/list {include_quota: true}` for the
/// configured services and the given engine entries. Reads every quota source at once
/// under the shared 8-second deadline (see [`quota`]); with `include_activity` it also
/// reads the history statistics (one shared scan; a failed scan leaves `local_usage` and
/// `latest_request` absent, never zero). `codex` reads the external Codex engine's rate
/// limits through its host (`None`: the Codex quota is `unsupported`). Never runs
/// inference and changes no selection.
pub fn engine_list_usage(
    cfg: &crate::config::LoadedConfig,
    state: &UsageState,
    store: &mut Store,
    engines: &[EngineEntry<'_>],
    include_activity: bool,
    codex: Option<quota::SharedReader>,
) -> EngineListUsage {
    list_usage(
        &cfg.config,
        state,
        store,
        engines,
        include_activity,
        codex,
        &quota::adapters::Endpoints::from_env(),
    )
}

/// [`engine_list_usage`] with its inputs explicit.
pub fn list_usage(
    config: &Config,
    state: &UsageState,
    store: &mut Store,
    engines: &[EngineEntry<'_>],
    include_activity: bool,
    codex: Option<quota::SharedReader>,
    endpoints: &quota::adapters::Endpoints,
) -> EngineListUsage {
    let started = Instant::now();
    let services: Vec<(String, ProviderConfig)> = config
        .providers
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut sources: Vec<quota::Source> = services
        .iter()
        .map(|(name, p)| quota::Source {
            key: format!("service:{name}"),
            adapter: quota::adapters::service_adapter(p, endpoints),
        })
        .collect();
    let quota_engines: Vec<&str> = engines
        .iter()
        .filter(|e| e.available && e.id != "wuu")
        .map(|e| e.id)
        .collect();
    for id in &quota_engines {
        sources.push(quota::Source {
            key: format!("engine:{id}"),
            adapter: quota::adapters::engine_adapter(id, codex.clone(), endpoints),
        });
    }
    let scan = if include_activity {
        match state.store_scan(store) {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!("usage statistics unavailable: {e}");
                None
            }
        }
    } else {
        None
    };
    let mut quotas = quota::collect(&sources, started, store).into_iter();
    let mut out = EngineListUsage::default();
    for (name, p) in &services {
        let quota = quotas.next().unwrap_or_default();
        let act = scan
            .as_ref()
            .map(|s| activity::activity(s, activity::Key::Service(name)));
        out.subscription_providers.push(SubscriptionProvider {
            provider: crate::provider::catalog::provider_summary(name, p),
            quota,
            local_usage: act.as_ref().map(|a| a.local_usage.clone()),
            latest_request: act.and_then(|a| a.latest_request),
        });
    }
    let mut engine_quota: HashMap<&str, SubscriptionQuota> = HashMap::new();
    for id in &quota_engines {
        if let Some(q) = quotas.next() {
            engine_quota.insert(id, q);
        }
    }
    for e in engines {
        let act = scan
            .as_ref()
            .map(|s| activity::activity(s, activity::Key::Engine(e.id)));
        out.engines.insert(
            e.id.to_owned(),
            EngineUsage {
                quota: engine_quota.remove(e.id),
                local_usage: act.as_ref().map(|a| a.local_usage.clone()),
                latest_request: act.and_then(|a| a.latest_request),
            },
        );
    }
    out
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
