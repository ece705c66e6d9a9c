//! Lease, takeover and recovery tests, run against both backends: SQLite files in
//! temporary directories, and (feature `postgres`, when `WUU_TEST_PG_URL` names a
//! server, as `.ci/run` starts one) a fresh PostgreSQL schema per test.

use std::process::{Child, Command};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use serde_json::json;

use crate::*;

/// The store calls these tests make, on either backend.
trait Backend: Send + Sized + 'static {
    /// Another connection to the same database.
    fn reopen(&self) -> Self;
    fn insert_thread(&mut self, t: &ThreadRow) -> Result<()>;
    fn insert_turn(&mut self, t: &TurnRow) -> Result<()>;
    fn get_turn(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>>;
    fn upsert_run(&mut self, r: &RunRow) -> Result<()>;
    fn get_run(&mut self, id: &str) -> Result<Option<RunRow>>;
    fn acquire_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<LeaseOutcome>;
    fn release_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<()>;
    fn heartbeat(&mut self, owner: &LeaseOwner) -> Result<()>;
    fn lease_of(&mut self, thread_id: &str) -> Result<Option<(LeaseOwner, i64)>>;
    fn dead_leases(&mut self, me: &LeaseOwner) -> Result<Vec<(String, LeaseOwner, i64)>>;
    fn set_lease_stale_ms(&mut self, stale_ms: i64);
    fn recover(
        &mut self,
        me: &LeaseOwner,
        stale_ms: i64,
        started_at_ms: i64,
    ) -> Result<RecoveryReport>;
    fn upsert_input(&mut self, i: &InputRow) -> Result<()>;
    fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>>;
}

macro_rules! delegate {
    () => {
        fn insert_thread(&mut self, t: &ThreadRow) -> Result<()> {
            self.store.insert_thread(t)
        }
        fn insert_turn(&mut self, t: &TurnRow) -> Result<()> {
            self.store.insert_turn(t)
        }
        fn get_turn(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>> {
            self.store.get_turn(thread_id, turn_id)
        }
        fn upsert_run(&mut self, r: &RunRow) -> Result<()> {
            self.store.upsert_run(r)
        }
        fn get_run(&mut self, id: &str) -> Result<Option<RunRow>> {
            self.store.get_run(id)
        }
        fn acquire_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<LeaseOutcome> {
            self.store.acquire_lease(thread_id, owner)
        }
        fn release_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<()> {
            self.store.release_lease(thread_id, owner)
        }
        fn heartbeat(&mut self, owner: &LeaseOwner) -> Result<()> {
            self.store.heartbeat(owner)
        }
        fn lease_of(&mut self, thread_id: &str) -> Result<Option<(LeaseOwner, i64)>> {
            self.store.lease_of(thread_id)
        }
        fn set_lease_stale_ms(&mut self, stale_ms: i64) {
            self.store.set_lease_stale_ms(stale_ms)
        }
        fn dead_leases(&mut self, me: &LeaseOwner) -> Result<Vec<(String, LeaseOwner, i64)>> {
            self.store.dead_leases(me)
        }
        fn recover(
            &mut self,
            me: &LeaseOwner,
            stale_ms: i64,
            started_at_ms: i64,
        ) -> Result<RecoveryReport> {
            self.store.recover(me, stale_ms, started_at_ms)
        }
        fn upsert_input(&mut self, i: &InputRow) -> Result<()> {
            self.store.upsert_input(i)
        }
        fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
            self.store.list_inputs(thread_id, states)
        }
    };
}

/// A SQLite store in a temporary directory (kept while any connection lives).
struct Lite {
    store: Store,
    _dir: Arc<tempfile::TempDir>,
}

impl Backend for Lite {
    fn reopen(&self) -> Self {
        Lite {
            store: Store::open(self.store.path()).unwrap(),
            _dir: self._dir.clone(),
        }
    }
    delegate!();
}

fn lite() -> Lite {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_home(&dir.path().join("home")).unwrap();
    Lite {
        store,
        _dir: Arc::new(dir),
    }
}

#[cfg(feature = "postgres")]
pub(crate) mod pg_backend {
    use super::*;
    use crate::pg::PgStore;

    /// A PostgreSQL store in its own schema of the test server.
    pub(crate) struct Pg {
        pub(crate) store: PgStore,
        pub(crate) url: String,
    }

    impl Backend for Pg {
        fn reopen(&self) -> Self {
            Pg {
                store: PgStore::open(&self.url).unwrap(),
                url: self.url.clone(),
            }
        }
        delegate!();
    }

    /// A store in a fresh schema of `WUU_TEST_PG_URL`'s database; `None` (with the
    /// reason printed) when the variable is unset.
    pub(crate) fn pg() -> Option<Pg> {
        let Ok(base) = std::env::var("WUU_TEST_PG_URL") else {
            eprintln!("skipped on PostgreSQL: WUU_TEST_PG_URL is not set (.ci/run sets it)");
            return None;
        };
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let status = Command::new("psql")
            .args([&base, "-qc", &format!("CREATE SCHEMA {schema}")])
            .status()
            .expect("psql runs");
        assert!(status.success(), "CREATE SCHEMA {schema}");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
        Some(Pg {
            store: PgStore::open(&url).unwrap(),
            url,
        })
    }
}

/// Runs `$body` (a generic fn taking a [`Backend`]) on SQLite, and on PostgreSQL when
/// the feature is on and a server is configured.
macro_rules! both {
    ($lite:ident, $pg:ident, $body:ident) => {
        #[test]
        fn $lite() {
            $body(lite());
        }

        #[cfg(feature = "postgres")]
        #[test]
        fn $pg() {
            if let Some(b) = pg_backend::pg() {
                $body(b);
            }
        }
    };
}

fn thread(id: &str, cwd: &str, updated: i64) -> ThreadRow {
    let mut t = ThreadRow::new(id, cwd, 1_000);
    t.updated_at_ms = updated;
    t.preview = format!("preview of {id}");
    t
}

fn turn(thread_id: &str, id: &str) -> TurnRow {
    TurnRow::new(thread_id, id, "user", 2_000)
}

/// A child process that stays alive until killed; its pid stands for "another live wuu".
struct LiveChild(Child);

impl LiveChild {
    fn spawn() -> LiveChild {
        LiveChild(Command::new("sleep").arg("60").spawn().unwrap())
    }
    fn owner(&self) -> LeaseOwner {
        LeaseOwner {
            pid: self.0.id(),
            instance: uuid::Uuid::new_v4().to_string(),
            host: host_name(),
        }
    }
}

impl Drop for LiveChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An owner whose pid belonged to a process that has exited (and was reaped).
fn dead_owner() -> LeaseOwner {
    let mut child = Command::new("true").spawn().unwrap();
    child.wait().unwrap();
    let pid = child.id();
    assert!(!pid_alive(pid), "pid {pid} should be dead");
    LeaseOwner {
        pid,
        instance: uuid::Uuid::new_v4().to_string(),
        host: host_name(),
    }
}

/// An owner on another machine: its pid means nothing here, only its heartbeat counts.
fn remote_owner() -> LeaseOwner {
    LeaseOwner {
        pid: 1,
        instance: uuid::Uuid::new_v4().to_string(),
        host: format!("elsewhere-{}", uuid::Uuid::new_v4().simple()),
    }
}

both!(
    lease_is_exclusive_between_stores,
    pg_lease_is_exclusive_between_stores,
    lease_is_exclusive
);

fn lease_is_exclusive<B: Backend>(mut store: B) {
    let other = LiveChild::spawn();
    let owners = [LeaseOwner::current(), other.owner()];
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();

    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = owners
        .iter()
        .cloned()
        .map(|owner| {
            let mut store = store.reopen();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                store.acquire_lease("t1", &owner).unwrap()
            })
        })
        .collect();
    let outcomes: Vec<LeaseOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let acquired = outcomes
        .iter()
        .filter(|o| matches!(o, LeaseOutcome::Acquired { previous: None, .. }))
        .count();
    let busy: Vec<&LeaseOwner> = outcomes
        .iter()
        .filter_map(|o| match o {
            LeaseOutcome::Busy(holder) => Some(holder),
            _ => None,
        })
        .collect();
    assert_eq!(acquired, 1, "{outcomes:?}");
    assert_eq!(busy.len(), 1, "{outcomes:?}");

    let mut a = store.reopen();
    let mut b = store.reopen();
    let (holder, hb1) = a.lease_of("t1").unwrap().unwrap();
    assert_eq!(&holder, busy[0]);
    let (holder_owner, loser) = if holder == owners[0] {
        (&owners[0], &owners[1])
    } else {
        (&owners[1], &owners[0])
    };
    assert_eq!(
        b.acquire_lease("t1", holder_owner).unwrap(),
        LeaseOutcome::AlreadyHeld
    );
    assert_eq!(
        b.acquire_lease("t1", loser).unwrap(),
        LeaseOutcome::Busy(holder.clone())
    );

    std::thread::sleep(Duration::from_millis(5));
    a.heartbeat(holder_owner).unwrap();
    let (_, hb2) = b.lease_of("t1").unwrap().unwrap();
    assert!(hb2 > hb1, "heartbeat moves forward: {hb1} -> {hb2}");

    // releasing by the wrong owner does nothing; by the holder frees it
    a.release_lease("t1", loser).unwrap();
    assert!(a.lease_of("t1").unwrap().is_some());
    a.release_lease("t1", holder_owner).unwrap();
    assert!(a.lease_of("t1").unwrap().is_none());
    assert!(matches!(
        b.acquire_lease("t1", loser).unwrap(),
        LeaseOutcome::Acquired { previous: None, .. }
    ));
    assert_eq!(b.lease_of("t1").unwrap().unwrap().0, *loser);
}

both!(
    dead_owner_lease_is_taken_over_and_its_turn_settled,
    pg_dead_owner_lease_is_taken_over_and_its_turn_settled,
    dead_owner_takeover
);

fn dead_owner_takeover<B: Backend>(mut store: B) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let dead = dead_owner();
    // the dead process held the lease and was running a turn and a run
    assert!(matches!(
        store.acquire_lease("t1", &dead).unwrap(),
        LeaseOutcome::Acquired { .. }
    ));
    store.insert_turn(&turn("t1", "u1")).unwrap();
    store
        .upsert_run(&RunRow {
            id: "r1".into(),
            thread_id: "t1".into(),
            status: "running".into(),
            owner_instance: dead.instance.clone(),
            body: json!({"status": "running"}),
            created_at_ms: 1,
            updated_at_ms: jiff::Timestamp::now().as_millisecond(),
        })
        .unwrap();
    // another thread's work of the same dead owner is not this takeover's to settle
    store.insert_thread(&thread("t2", "/w", 11)).unwrap();
    store.insert_turn(&turn("t2", "v1")).unwrap();
    store
        .upsert_run(&RunRow {
            id: "r2".into(),
            thread_id: "t2".into(),
            status: "running".into(),
            owner_instance: dead.instance.clone(),
            body: json!({"status": "running"}),
            created_at_ms: 1,
            updated_at_ms: jiff::Timestamp::now().as_millisecond(),
        })
        .unwrap();

    let me = LeaseOwner::current();
    let mut mine = store.reopen();
    match mine.acquire_lease("t1", &me).unwrap() {
        LeaseOutcome::Acquired { previous, settled } => {
            assert_eq!(previous.as_ref(), Some(&dead));
            assert_eq!(
                settled.interrupted_turns,
                vec![SettledTurn {
                    thread_id: "t1".into(),
                    turn_id: "u1".into()
                }]
            );
            assert_eq!(settled.interrupted_runs, vec!["r1".to_string()]);
        }
        other => panic!("expected takeover, got {other:?}"),
    }
    let t = store.get_turn("t1", "u1").unwrap().unwrap();
    assert_eq!(t.status, "interrupted");
    assert_eq!(t.error.unwrap()["message"], INTERRUPTED_MESSAGE);
    let run = store.get_run("r1").unwrap().unwrap();
    assert_eq!(run.status, "interrupted");
    assert_eq!(run.body["status"], "interrupted");
    assert_eq!(store.lease_of("t1").unwrap().unwrap().0, me);
    assert_eq!(
        store.get_turn("t2", "v1").unwrap().unwrap().status,
        "in_progress"
    );
    assert_eq!(store.get_run("r2").unwrap().unwrap().status, "running");

    // my own running turn is never settled by my re-acquire
    store.insert_turn(&turn("t1", "u2")).unwrap();
    assert_eq!(
        mine.acquire_lease("t1", &me).unwrap(),
        LeaseOutcome::AlreadyHeld
    );
    assert_eq!(
        store.get_turn("t1", "u2").unwrap().unwrap().status,
        "in_progress"
    );
}

both!(
    stale_heartbeat_lease_is_taken_over,
    pg_stale_heartbeat_lease_is_taken_over,
    stale_heartbeat_takeover
);

fn stale_heartbeat_takeover<B: Backend>(mut store: B) {
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let child = LiveChild::spawn();
    let hung = child.owner(); // alive pid, but it stops heartbeating
    let me = LeaseOwner::current();
    store.set_lease_stale_ms(300);
    assert!(matches!(
        store.acquire_lease("t1", &hung).unwrap(),
        LeaseOutcome::Acquired { .. }
    ));
    assert_eq!(
        store.acquire_lease("t1", &me).unwrap(),
        LeaseOutcome::Busy(hung.clone())
    );
    std::thread::sleep(Duration::from_millis(400));
    match store.acquire_lease("t1", &me).unwrap() {
        LeaseOutcome::Acquired { previous, .. } => assert_eq!(previous, Some(hung)),
        other => panic!("expected takeover, got {other:?}"),
    }
}

both!(
    remote_owner_lease_expires_and_its_work_is_settled,
    pg_remote_owner_lease_expires_and_its_work_is_settled,
    remote_owner_expiry
);

/// A host on another machine stops heartbeating (killed, partitioned): its pid cannot be
/// checked from here, so its lease holds until the stale limit, then the next acquirer
/// takes it over and settles its turn, its tool call and its run.
fn remote_owner_expiry<B: Backend>(mut store: B) {
    store.set_lease_stale_ms(300);
    store.insert_thread(&thread("t1", "/w", 10)).unwrap();
    let remote = remote_owner();
    store.acquire_lease("t1", &remote).unwrap();
    store.insert_turn(&turn("t1", "u1")).unwrap();
    store
        .upsert_run(&RunRow {
            id: "r1".into(),
            thread_id: "t1".into(),
            status: "running".into(),
            owner_instance: remote.instance.clone(),
            body: json!({"status": "running"}),
            created_at_ms: 1,
            updated_at_ms: jiff::Timestamp::now().as_millisecond(),
        })
        .unwrap();
    store
        .upsert_input(&InputRow {
            thread_id: "t1".into(),
            id: "q1".into(),
            mode: input_mode::QUEUE.into(),
            state: input_state::PENDING.into(),
            body: json!({"text": "next"}),
            created_at_ms: 3_000,
            updated_at_ms: 3_000,
        })
        .unwrap();
    let me = LeaseOwner::current();
    let mut here = store.reopen();
    here.set_lease_stale_ms(300);
    // its pid 1 is alive here, but that says nothing about another host; the heartbeat
    // is fresh, so the lease holds
    assert_eq!(
        here.acquire_lease("t1", &me).unwrap(),
        LeaseOutcome::Busy(remote.clone())
    );
    std::thread::sleep(Duration::from_millis(400));
    match here.acquire_lease("t1", &me).unwrap() {
        LeaseOutcome::Acquired { previous, settled } => {
            assert_eq!(previous, Some(remote));
            assert_eq!(settled.interrupted_turns.len(), 1);
            assert_eq!(settled.interrupted_runs, vec!["r1".to_string()]);
        }
        other => panic!("expected takeover, got {other:?}"),
    }
    let t = store.get_turn("t1", "u1").unwrap().unwrap();
    assert_eq!(t.status, "interrupted");
    assert_eq!(store.get_run("r1").unwrap().unwrap().status, "interrupted");
    // the input the dead host acknowledged (committed) while its turn ran is there,
    // still pending, for the new owner to run
    let pending = here.list_inputs("t1", &[input_state::PENDING]).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].id, "q1");
    assert_eq!(pending[0].body["text"], "next");
}

both!(
    recover_settles_dead_work_and_leaves_live_work,
    pg_recover_settles_dead_work_and_leaves_live_work,
    recover_dead_work
);

fn recover_dead_work<B: Backend>(mut store: B) {
    let now = jiff::Timestamp::now().as_millisecond();
    let me = LeaseOwner::current();
    let dead = dead_owner();
    let child = LiveChild::spawn();
    let live = child.owner();
    for t in ["dead", "live", "orphan", "mine", "idle"] {
        store.insert_thread(&thread(t, "/w", 10)).unwrap();
    }
    store.acquire_lease("dead", &dead).unwrap();
    store.acquire_lease("live", &live).unwrap();
    store.acquire_lease("mine", &me).unwrap();
    for t in ["dead", "live", "orphan", "mine"] {
        store.insert_turn(&turn(t, "running")).unwrap();
    }
    let mut done = turn("idle", "finished");
    done.status = "completed".into();
    store.insert_turn(&done).unwrap();
    let run = |id: &str, thread: &str, status: &str, owner: &str, updated: i64| RunRow {
        id: id.into(),
        thread_id: thread.into(),
        status: status.into(),
        owner_instance: owner.into(),
        body: json!({"status": status}),
        created_at_ms: updated,
        updated_at_ms: updated,
    };
    let runs = [
        run("r-dead", "dead", "running", &dead.instance, now),
        run(
            "r-live-accepted",
            "idle",
            "accepted",
            &live.instance,
            now - 3_600_000,
        ),
        run("r-unknown-old", "idle", "running", "gone", now - 3_600_000),
        run("r-unknown-fresh", "idle", "accepted", "starting", now),
        run("r-done", "idle", "completed", &dead.instance, 1),
        run("r-mine", "idle", "accepted", &me.instance, 1),
    ];
    for r in &runs {
        store.upsert_run(r).unwrap();
    }

    let mut other = store.reopen();
    let report = other.recover(&me, 60_000, i64::MAX).unwrap();
    assert_eq!(
        report.interrupted_turns,
        vec![
            SettledTurn {
                thread_id: "dead".into(),
                turn_id: "running".into()
            },
            SettledTurn {
                thread_id: "orphan".into(),
                turn_id: "running".into()
            },
        ]
    );
    let mut interrupted = report.interrupted_runs.clone();
    interrupted.sort();
    assert_eq!(interrupted, ["r-dead", "r-unknown-old"]);
    assert_eq!(
        report.removed_leases,
        vec![("dead".to_string(), dead.clone())]
    );

    let mut status = |t: &str| store.get_turn(t, "running").unwrap().unwrap().status;
    assert_eq!(status("dead"), "interrupted");
    assert_eq!(status("orphan"), "interrupted");
    assert_eq!(status("live"), "in_progress");
    assert_eq!(status("mine"), "in_progress");
    let orphan = store.get_turn("orphan", "running").unwrap().unwrap();
    assert_eq!(
        orphan.error,
        Some(json!({"message": "interrupted: the process that ran this turn stopped"}))
    );
    assert!(orphan.completed_at_ms.is_some());
    assert_eq!(store.get_turn("idle", "finished").unwrap().unwrap(), done);
    let mut run_status = |id: &str| store.get_run(id).unwrap().unwrap().status;
    assert_eq!(run_status("r-live-accepted"), "accepted");
    assert_eq!(run_status("r-unknown-fresh"), "accepted");
    assert_eq!(run_status("r-done"), "completed");
    assert_eq!(run_status("r-mine"), "accepted");
    assert!(store.lease_of("dead").unwrap().is_none());
    assert_eq!(store.lease_of("live").unwrap().unwrap().0, live);
    assert_eq!(store.lease_of("mine").unwrap().unwrap().0, me);

    // a second pass finds nothing more
    assert!(other.recover(&me, 60_000, i64::MAX).unwrap().is_empty());
}

both!(
    recovery_leaves_an_owner_that_died_after_this_start_to_the_takeover,
    pg_recovery_leaves_an_owner_that_died_after_this_start_to_the_takeover,
    recover_after_start
);

/// A host whose start-up recovery runs late (its heartbeat thread was slow) finds the
/// lease of an owner that heartbeat after this host started and died since: that owner
/// was alive while this host served, so its lease and turn are left for the takeover
/// sweep, which settles and announces them as a survivor's; an owner dead before the
/// start is recovered as before.
fn recover_after_start<B: Backend>(mut store: B) {
    let me = LeaseOwner::current();
    let (before, after) = (dead_owner(), dead_owner());
    for t in ["before", "after"] {
        store.insert_thread(&thread(t, "/w", 10)).unwrap();
    }
    store.acquire_lease("before", &before).unwrap();
    let started_at = jiff::Timestamp::now().as_millisecond() + 1;
    std::thread::sleep(std::time::Duration::from_millis(5));
    store.acquire_lease("after", &after).unwrap();
    for t in ["before", "after"] {
        store.insert_turn(&turn(t, "running")).unwrap();
    }
    let mut other = store.reopen();
    let report = other.recover(&me, 60_000, started_at).unwrap();
    assert_eq!(report.removed_leases, vec![("before".to_string(), before)]);
    assert_eq!(
        report.interrupted_turns,
        vec![SettledTurn {
            thread_id: "before".into(),
            turn_id: "running".into()
        }]
    );
    let kept = store.lease_of("after").unwrap().unwrap().0;
    assert_eq!(kept, after);
    assert_eq!(
        store.dead_leases(&me).unwrap().len(),
        1,
        "the sweep sees it"
    );
    let status = store.get_turn("after", "running").unwrap().unwrap().status;
    assert_eq!(status, "in_progress");
}

both!(
    dead_leases_lists_only_dead_holders,
    pg_dead_leases_lists_only_dead_holders,
    dead_leases_listing
);

/// The takeover sweep's question: a lease whose holder's pid is gone here, or whose
/// heartbeat is older than the stale limit, is listed; a live holder's and our own are
/// not; nothing is changed by asking.
fn dead_leases_listing<B: Backend>(mut store: B) {
    store.set_lease_stale_ms(300);
    for id in ["t-dead", "t-live", "t-mine", "t-remote"] {
        store.insert_thread(&thread(id, "/w", 10)).unwrap();
    }
    let live = LiveChild::spawn();
    let (dead, remote, me) = (dead_owner(), remote_owner(), LeaseOwner::current());
    store.acquire_lease("t-dead", &dead).unwrap();
    store.acquire_lease("t-live", &live.owner()).unwrap();
    store.acquire_lease("t-mine", &me).unwrap();
    store.acquire_lease("t-remote", &remote).unwrap();
    let ids =
        |v: Vec<(String, LeaseOwner, i64)>| v.into_iter().map(|(t, ..)| t).collect::<Vec<_>>();
    assert_eq!(ids(store.dead_leases(&me).unwrap()), vec!["t-dead"]);
    std::thread::sleep(Duration::from_millis(400));
    store.heartbeat(&me).unwrap();
    let listed = store.dead_leases(&me).unwrap();
    // the live child never heartbeats: after the stale limit it is dead too
    assert_eq!(ids(listed.clone()), vec!["t-dead", "t-live", "t-remote"]);
    assert_eq!(listed[2].1, remote);
    assert_eq!(store.lease_of("t-dead").unwrap().unwrap().0, dead);
}
