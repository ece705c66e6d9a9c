//! Takeover of a dead host's conversations (README "Several hosts, one database";
//! spec `app-server.md` §6 rules 9–10). A conversation's execution lease names its owner
//! process; when that owner dies (its pid is gone on this machine, or its heartbeat is
//! older than the stale limit), the host that takes the lease over settles what the owner
//! left running (turns and runs interrupted, tool calls failed with an unknown outcome:
//! the store does this in the acquiring transaction) and announces the settled turns.
//!
//! What happens to the dead owner's pending input depends on who takes over:
//! - a **survivor** (this process was already running when the owner last heartbeat)
//!   continues it: pending queued inputs run in order through the queue drain, each once
//!   (admission consumes the stored row in the turn's own transaction); pending steers,
//!   which were meant for the turn that died, become held, as an interrupt makes them;
//! - a **restarted** host (started after the owner's last heartbeat: the same user's app
//!   coming back after a crash) holds every pending input, as local restart always did.
//!
//! Inputs whose delivery to an external engine is unconfirmed (`delivery_unconfirmed`)
//! are never run again by a takeover: they become held, flag kept, for the user to judge.
//! Workers' results stay pending (`agents::recover` delivers them).
//!
//! The sweep ([`sweep`]) runs on the heartbeat thread at every beat: it lists the leases
//! whose holder is dead and sends each conversation a message; the session thread does
//! the takeover ([`Session::take_over_dead_owner`]), which every message to an idle
//! conversation also checks first, so a client that opens the conversation before the
//! sweep sees the same outcome.

use super::Session;
use crate::session::{Host, SessionMsg};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use wuu_store::{input_mode, input_state, LeaseOutcome};

/// Environment variable overriding the stale limit (milliseconds).
pub const STALE_ENV: &str = "WUU_LEASE_STALE_MS";

/// Shortest stale limit (ms) a host accepts. Below it a live owner whose heartbeat
/// thread is merely delayed (a loaded machine, a slow database round trip) looks dead
/// between two beats, and two hosts would run one conversation at once; a smaller
/// setting is raised to it, with a warning.
pub const MIN_STALE_MS: i64 = 1_000;

/// The stale limit from [`STALE_ENV`]'s value `env` (wins when it is a positive number
/// of milliseconds) or the configured `store.lease_stale_ms`, else
/// [`wuu_store::DEFAULT_LEASE_STALE_MS`]; raised to [`MIN_STALE_MS`]. Every value set
/// but ignored or raised is logged as a warning.
fn stale_limit(env: Option<&str>, configured: Option<u64>) -> i64 {
    let from_env = env
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|v| *v > 0);
    if env.is_some() && from_env.is_none() {
        log::warn!("{STALE_ENV} is not a positive number of milliseconds; ignored");
    }
    let from_config = configured
        .and_then(|v| i64::try_from(v).ok())
        .filter(|v| *v > 0);
    if from_env.is_none() && configured.is_some() && from_config.is_none() {
        log::warn!("store.lease_stale_ms is not a positive number of milliseconds; ignored");
    }
    let chosen = from_env
        .or(from_config)
        .unwrap_or(wuu_store::DEFAULT_LEASE_STALE_MS);
    if chosen < MIN_STALE_MS {
        log::warn!(
            "a lease stale limit of {chosen} ms would judge live hosts dead; using {MIN_STALE_MS} ms"
        );
    }
    chosen.max(MIN_STALE_MS)
}

/// Longest heartbeat interval.
const MAX_BEAT: Duration = Duration::from_secs(3);

/// Shortest heartbeat interval.
const MIN_BEAT: Duration = Duration::from_millis(250);

/// The takeover settings of this process: when it started and the stale limit it judges
/// lease owners by (hosts sharing a database should use the same limit).
#[derive(Debug, Clone)]
pub struct Takeover {
    /// When this process started (Unix ms): a dead owner whose last heartbeat is at or
    /// after it died while this process was running (this process is a survivor).
    pub started_at_ms: i64,
    /// Heartbeat age (ms) after which a lease owner on another machine is dead.
    pub stale_ms: i64,
    /// Conversations the sweep sent a takeover that their session has not run yet (a
    /// busy or reviving session gets one message, not one per beat: the heartbeat
    /// thread never waits on a full mailbox).
    in_flight: Arc<Mutex<HashSet<String>>>,
}

impl Takeover {
    /// Settings from `stale_ms` (the configured limit, `None`: the default 30 s), unless
    /// [`STALE_ENV`] holds a positive number of milliseconds. Sets the store's default
    /// limit for every connection this process opens afterwards.
    pub fn new(configured: Option<u64>) -> Takeover {
        let stale_ms = stale_limit(std::env::var(STALE_ENV).ok().as_deref(), configured);
        wuu_store::set_default_stale_ms(stale_ms);
        Takeover {
            started_at_ms: crate::util::now_ms(),
            stale_ms,
            in_flight: Default::default(),
        }
    }

    /// How often this process heartbeats its leases and sweeps for dead owners: a
    /// quarter of the stale limit (so a live owner beats at least three times before it
    /// could be judged dead), between 250 ms and 3 s.
    pub fn beat_interval(&self) -> Duration {
        let quarter = u64::try_from(self.stale_ms / 4).unwrap_or(0);
        Duration::from_millis(quarter).clamp(MIN_BEAT, MAX_BEAT)
    }
}

/// What [`Session::take_over_dead_owner`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseCheck {
    /// Nobody holds the lease.
    Free,
    /// A live owner holds it (this process included), or it could not be read.
    Held,
    /// A dead owner held it; this process took it over and settled the dead owner's work.
    TakenOver,
}

/// One sweep (heartbeat thread): every conversation whose lease holder is dead gets a
/// message that makes its session take the lease over. Sessions are revived as needed.
pub fn sweep(host: &Arc<Host>, store: &wuu_store::Store) {
    let dead = match store.dead_leases(&host.owner) {
        Ok(d) => d,
        Err(e) => {
            log::warn!("takeover sweep: {e}");
            return;
        }
    };
    for (thread_id, holder, _) in dead {
        if host.is_closing() {
            return;
        }
        let in_flight = host.takeover.in_flight.clone();
        if !in_flight.lock().insert(thread_id.clone()) {
            continue;
        }
        log::info!(
            "takeover sweep: thread {thread_id} was held by dead pid {} on {} (instance {})",
            holder.pid,
            holder.host,
            holder.instance
        );
        let id = thread_id.clone();
        let call: crate::session::SessionCall = Box::new(move |s| {
            if let Ok(s) = s {
                s.take_over_dead_owner();
            }
            in_flight.lock().remove(&id);
        });
        host.registry
            .dispatch(host, &thread_id, SessionMsg::Call(call));
    }
}

impl Session {
    /// Takes over this conversation's lease when a dead owner holds it (see the module
    /// doc): settles and announces the dead owner's turns (`turn/error`, then
    /// `thread/updated`), then continues or holds its pending input. Idle sessions only.
    pub fn take_over_dead_owner(&mut self) -> LeaseCheck {
        if self.ephemeral() || self.running.load(Ordering::SeqCst) || self.acquire_store().is_err()
        {
            return LeaseCheck::Held;
        }
        let me = self.shared.owner.clone();
        let Some(store) = self.store.as_mut() else {
            return LeaseCheck::Held;
        };
        let (holder, heartbeat) = match store.lease_of(&self.id) {
            Ok(Some(lease)) => lease,
            Ok(None) => return LeaseCheck::Free,
            Err(e) => {
                log::warn!("reading the lease of {}: {e}", self.id);
                return LeaseCheck::Held;
            }
        };
        if holder.instance == me.instance || !store.holder_dead(&holder, heartbeat, &me) {
            return LeaseCheck::Held;
        }
        let settled = match store.acquire_lease(&self.id, &me) {
            Ok(LeaseOutcome::Acquired { settled, .. }) => settled,
            // Another host took it over first.
            Ok(_) => return LeaseCheck::Held,
            Err(e) => {
                log::warn!("taking over the lease of {}: {e}", self.id);
                return LeaseCheck::Held;
            }
        };
        let survivor = heartbeat >= self.shared.takeover.started_at_ms;
        log::info!(
            "took over thread {} from dead pid {} on {}: {} turn(s), {} run(s) settled; pending input {}",
            self.id,
            holder.pid,
            holder.host,
            settled.interrupted_turns.len(),
            settled.interrupted_runs.len(),
            if survivor { "continues" } else { "is held" }
        );
        self.history_loaded = false;
        self.ensure_history();
        self.announce_settled(&settled);
        if survivor {
            self.hold_steers_of_dead_turn();
            // The pending queued inputs run in order once the message being served is
            // answered (the session's loop drains the queue).
            self.drain_due = true;
        } else {
            self.hold_leftover_pending();
            if !self.held_messages().is_empty() {
                self.announce_held();
            }
        }
        if !self.drain_due {
            self.release_takeover_lease();
        }
        LeaseCheck::TakenOver
    }

    /// Runs the queued input a takeover left due, then gives back the lease the takeover
    /// kept (a turn that started holds it until it ends). The lease is kept from the
    /// takeover to here so no other host sees the conversation free in between.
    pub(crate) fn drain_after_takeover(&mut self) {
        if self.acquire_store().is_err() {
            self.release_takeover_lease();
            return;
        }
        self.drain_queue();
        if !self.running.load(Ordering::SeqCst) {
            self.release_takeover_lease();
        }
    }

    fn release_takeover_lease(&mut self) {
        let (id, me) = (self.id.clone(), self.shared.owner.clone());
        if let Some(store) = self.store.as_mut() {
            if let Err(e) = store.release_lease(&id, &me) {
                log::warn!("releasing the lease of {id}: {e}");
            }
        }
    }

    /// `turn/error` for each turn the takeover settled, then `thread/updated`.
    fn announce_settled(&self, settled: &wuu_store::RecoveryReport) {
        for t in &settled.interrupted_turns {
            let Some(state) = self.turns.iter().find(|s| s.row.id == t.turn_id) else {
                continue;
            };
            let turn = crate::session::convert::turn_wire(state);
            let _ = self
                .shared
                .outbox
                .notify(&crate::session::convert::turn_error_notification(
                    self.id.clone(),
                    turn,
                ));
        }
        if !settled.interrupted_turns.is_empty() {
            self.notify_updated();
        }
    }

    /// A survivor's takeover: pending human steers (meant for the turn that died) and
    /// inputs whose delivery is unconfirmed become held; announces the held list if it
    /// changed. Queued inputs, process-exit notes and workers' results stay pending.
    fn hold_steers_of_dead_turn(&mut self) {
        let mut changed = false;
        for mut row in self.inputs_in(&[input_state::PENDING]) {
            let steer = row.mode == input_mode::STEER
                && !row.id.starts_with(super::background::INPUT_PREFIX)
                && !row.id.starts_with(super::agents::RESULT_INPUT_PREFIX);
            if steer || super::inputs::frozen(&row) {
                row.state = input_state::HELD.into();
                changed |= self.input_put(row).is_ok();
            }
        }
        if changed {
            self.announce_held();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stale_limit_never_goes_below_the_minimum_and_the_environment_wins() {
        let default = wuu_store::DEFAULT_LEASE_STALE_MS;
        assert_eq!(stale_limit(None, None), default);
        assert_eq!(stale_limit(None, Some(5_000)), 5_000);
        assert_eq!(stale_limit(Some("7000"), Some(5_000)), 7_000);
        // Too small to tell a delayed heartbeat from a dead host: raised.
        for tiny in ["1", "10", "40", "999"] {
            assert_eq!(stale_limit(Some(tiny), None), MIN_STALE_MS, "{tiny}");
        }
        assert_eq!(stale_limit(None, Some(10)), MIN_STALE_MS);
        // Not a positive number: ignored, the next source decides.
        for bad in ["", "abc", "-1", "0", "1.5"] {
            assert_eq!(stale_limit(Some(bad), Some(5_000)), 5_000, "{bad}");
        }
        assert_eq!(stale_limit(None, Some(0)), default);
        assert_eq!(stale_limit(None, Some(u64::MAX)), default);
    }
}
