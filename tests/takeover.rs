//! End-to-end tests of the takeover of a dead host's conversation (README "Several
//! hosts, one database"): two real `wuu app-server` processes share one store; the one
//! running a turn is killed with SIGKILL while an input waits in its queue; the survivor
//! takes the lease over, settles the turn as interrupted and runs the queued input once.
//! Providers are the fake HTTP provider of tests/support.
//!
//! Every scenario runs twice: `*_sqlite`, both hosts on one `WUU_HOME` (one SQLite file),
//! and `*_postgres` (feature `postgres`), each host with its own `WUU_HOME` and the
//! database `WUU_STORE_URL` names: a schema of its own in the server `WUU_TEST_PG_URL`
//! names (without the variable the PostgreSQL tests print why and skip).

mod support;

use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

/// The stale limit the hosts of these tests run with (ms).
const STALE_MS: &str = "1000";

/// A fake provider that stalls on a conversation whose only prompt is a `STALL-`
/// one and answers at once with "done" once a `QUEUED-` prompt follows.
fn provider() -> FakeProvider {
    let fake = FakeProvider::start();
    fake.set_validate(false);
    fake.set_responder(|body| {
        let text = body.to_string();
        Some(if text.contains("STALL-") && !text.contains("QUEUED-") {
            Script::stall(&["Working"], Duration::from_secs(60))
        } else {
            Script::text(&["done"])
        })
    });
    fake
}

/// Where the hosts of a test keep their conversations.
#[derive(Clone, Copy)]
enum Store {
    /// One `WUU_HOME`, one SQLite file.
    Sqlite,
    /// A PostgreSQL schema of the test's own; each host its own `WUU_HOME`.
    #[cfg(feature = "postgres")]
    Postgres,
}

/// What a test keeps alive: its PostgreSQL schema (dropped at the end) and the second
/// host's home.
struct Keep {
    #[cfg(feature = "postgres")]
    _schema: Option<pg::Schema>,
    _homes: Vec<tempfile::TempDir>,
}

/// A host's user config: the fake provider, and the stale limit in `store`.
fn config(fake: &FakeProvider) -> Value {
    let mut c = config_for(&fake.base_url());
    c["store"] = json!({"lease_stale_ms": STALE_MS.parse::<u64>().unwrap()});
    c
}

/// The environment every host of `store` runs with, and what to keep; `None` when the
/// backend is not available here (the reason printed).
#[cfg_attr(not(feature = "postgres"), allow(unused_mut))]
fn backend(store: Store) -> Option<(Vec<(String, String)>, Keep)> {
    let mut env = vec![("WUU_LEASE_STALE_MS".to_owned(), STALE_MS.to_owned())];
    let keep = match store {
        Store::Sqlite => Keep {
            #[cfg(feature = "postgres")]
            _schema: None,
            _homes: vec![],
        },
        #[cfg(feature = "postgres")]
        Store::Postgres => {
            let schema = pg::Schema::create()?;
            env.push(("WUU_STORE_URL".to_owned(), schema.url()));
            Keep {
                _schema: Some(schema),
                _homes: vec![],
            }
        }
    };
    Some((env, keep))
}

fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Host A (fresh home and workspace) with `env` plus `extra`.
fn first_host(fake: &FakeProvider, env: &[(String, String)], extra: &[(&str, &str)]) -> App {
    let mut all = pairs(env);
    all.extend_from_slice(extra);
    App::start_with_env(Some(config(fake)), &all)
}

/// Another host over `a`'s workspace: on SQLite over `a`'s home, on PostgreSQL with a
/// home of its own (kept in `keep`).
#[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
fn other_host(
    store: Store,
    fake: &FakeProvider,
    a: &App,
    env: &[(String, String)],
    extra: &[(&str, &str)],
    keep: &mut Keep,
) -> App {
    let mut all = pairs(env);
    all.extend_from_slice(extra);
    let mut app = match store {
        Store::Sqlite => App::spawn_in_env(&a.home.clone(), &a.workdir.clone(), &all),
        #[cfg(feature = "postgres")]
        Store::Postgres => {
            let home = tempfile::tempdir().unwrap();
            std::fs::write(home.path().join("config.json"), config(fake).to_string()).unwrap();
            let app = App::spawn_in_env(home.path(), &a.workdir.clone(), &all);
            keep._homes.push(home);
            app
        }
    };
    // Up and serving before the other host's turn starts: a survivor is a host that was
    // running when the owner last heartbeat (one still starting is a restarted host).
    app.call("thread/list", json!({}));
    app
}

/// Two hosts sharing `store`; `None` when it is not available here.
fn hosts(store: Store, fake: &FakeProvider) -> Option<(App, App, Keep)> {
    let (env, mut keep) = backend(store)?;
    let a = first_host(fake, &env, &[]);
    let b = other_host(store, fake, &a, &env, &[], &mut keep);
    Some((a, b, keep))
}

/// Declares `$sqlite` and (feature `postgres`) `$postgres` running `$body(store)`.
macro_rules! both {
    ($sqlite:ident, $postgres:ident, $body:ident) => {
        #[test]
        fn $sqlite() {
            $body(Store::Sqlite);
        }

        #[cfg(feature = "postgres")]
        #[test]
        fn $postgres() {
            $body(Store::Postgres);
        }
    };
}

#[cfg(feature = "postgres")]
mod pg {
    use std::process::Command;

    /// A schema of its own in the test server, dropped when the test ends.
    pub struct Schema {
        base: String,
        name: String,
    }

    impl Schema {
        /// A fresh schema; `None` (the reason printed) without `WUU_TEST_PG_URL`.
        pub fn create() -> Option<Schema> {
            let Ok(base) = std::env::var("WUU_TEST_PG_URL") else {
                eprintln!("skipped: WUU_TEST_PG_URL is not set (.ci/run sets it)");
                return None;
            };
            let name = format!("tk_{}", uuid::Uuid::new_v4().simple());
            let status = Command::new("psql")
                .args([&base, "-qc", &format!("CREATE SCHEMA {name}")])
                .status()
                .expect("psql runs");
            assert!(status.success(), "CREATE SCHEMA {name}");
            Some(Schema { base, name })
        }

        /// The store URL of this schema.
        pub fn url(&self) -> String {
            let sep = if self.base.contains('?') { '&' } else { '?' };
            format!("{}{sep}options=-csearch_path%3D{}", self.base, self.name)
        }
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            let _ = Command::new("psql")
                .args([
                    &self.base,
                    "-qc",
                    &format!("DROP SCHEMA {} CASCADE", self.name),
                ])
                .status();
        }
    }
}

/// What one round did: the thread, the turn that was killed, the inputs acknowledged
/// and the inputs sent without waiting for their answer.
struct Round {
    thread: String,
    killed_turn: String,
    acked: Vec<String>,
    unacked: Vec<String>,
}

/// On host `a`: a new conversation whose turn stalls, `queued` inputs queued (the last
/// one left unanswered when `last_unacked`), then `a` is killed with SIGKILL.
fn run_and_kill(a: &mut App, round: usize, queued: usize, last_unacked: bool) -> Round {
    let thread = a.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.call(
        "turn/start",
        json!({"thread_id": thread, "prompt": format!("STALL-{round}")}),
    );
    let killed_turn = r["turn"]["id"].as_str().unwrap().to_owned();
    a.notification("item/agentMessage/delta");
    let (mut acked, mut unacked) = (vec![], vec![]);
    for k in 0..queued {
        let id = format!("q-{round}-{k}");
        let req = a.send(
            "turn/queue",
            json!({"thread_id": thread, "prompt": format!("QUEUED-{round}.{k}"), "client_id": id}),
        );
        if last_unacked && k + 1 == queued {
            // Killed while the request may still be in flight (or just answered).
            std::thread::sleep(Duration::from_millis((round % 5) as u64));
            unacked.push(id);
        } else {
            let resp = a.response(&req);
            assert!(resp.get("result").is_some(), "{resp}");
            acked.push(id);
        }
    }
    let _ = a.child.kill();
    let _ = a.child.wait();
    Round {
        thread,
        killed_turn,
        acked,
        unacked,
    }
}

/// Waits until host `b` has settled the killed turn and run the conversation's queue:
/// no turn in progress, nothing pending, every acknowledged input in history. Returns
/// the `thread/resume` result.
fn settled_on(b: &mut App, round: &Round) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = b.call(
            "thread/resume",
            json!({"session_id": round.thread, "response_only": true}),
        );
        let turns = r["thread"]["turns"].as_array().cloned().unwrap_or_default();
        let idle = r["thread"]["status"] == "idle"
            && turns.iter().all(|t| t["status"] != "in_progress")
            && r["pending_user_messages"]
                .as_array()
                .is_none_or(|p| p.is_empty());
        let sources = sources(&r);
        if idle && round.acked.iter().all(|id| sources.contains_key(id)) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "the survivor did not take over {}: {r}",
            round.thread
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many times each `source_id` (an input's id) appears among history's user
/// messages.
fn sources(resumed: &Value) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for t in resumed["thread"]["turns"].as_array().into_iter().flatten() {
        for it in t["items"].as_array().into_iter().flatten() {
            if it["type"] == "user_message" {
                if let Some(s) = it["source_id"].as_str() {
                    *out.entry(s.to_owned()).or_default() += 1;
                }
            }
        }
    }
    out
}

/// Checks one round's outcome in `resumed` (a `thread/resume` result from the
/// survivor): the killed turn is interrupted, every acknowledged input ran exactly once,
/// in order, and an unacknowledged one at most once; nothing is left held.
fn check_round(resumed: &Value, round: &Round) {
    let turns = resumed["thread"]["turns"].as_array().unwrap();
    let killed = turns
        .iter()
        .find(|t| t["id"] == json!(round.killed_turn))
        .unwrap();
    assert_eq!(killed["status"], "interrupted", "{killed}");
    let counts = sources(resumed);
    for id in &round.acked {
        assert_eq!(counts.get(id), Some(&1), "input {id}: {resumed}");
    }
    for id in &round.unacked {
        assert!(
            counts.get(id).is_none_or(|n| *n == 1),
            "input {id}: {resumed}"
        );
    }
    let order: Vec<&str> = turns
        .iter()
        .flat_map(|t| t["items"].as_array().unwrap())
        .filter_map(|i| i["source_id"].as_str())
        .collect();
    let mut sorted = order.clone();
    sorted.sort_by_key(|id| id.rsplit('-').next().and_then(|k| k.parse::<u32>().ok()));
    assert_eq!(order, sorted, "inputs ran out of order");
    assert!(
        resumed["held_user_messages"]
            .as_array()
            .is_none_or(|h| h.is_empty()),
        "{resumed}"
    );
}

both!(
    a_killed_hosts_queued_input_runs_once_on_the_survivor_sqlite,
    a_killed_hosts_queued_input_runs_once_on_the_survivor_postgres,
    survivor_runs_queued_input
);

fn survivor_runs_queued_input(store: Store) {
    let fake = provider();
    let Some((mut a, mut b, _keep)) = hosts(store, &fake) else {
        return;
    };
    let round = run_and_kill(&mut a, 0, 1, false);
    // The survivor announces the settled turn, then runs the queued input.
    let err = b.wait_for("turn/error of the killed turn", |v| {
        v["method"] == "turn/error" && v["params"]["turn_id"] == json!(round.killed_turn)
    });
    assert_eq!(err["params"]["turn"]["status"], "interrupted", "{err}");
    let started = b.wait_for("turn/started of the queued input", |v| {
        v["method"] == "turn/started" && v["params"]["queue_id"] == "q-0-0"
    });
    let turn = started["params"]["turn"]["id"].as_str().unwrap().to_owned();
    let done = b.wait_for("turn/completed", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(turn)
    });
    assert_eq!(done["params"]["content"], "done");
    let resumed = settled_on(&mut b, &round);
    check_round(&resumed, &round);
    // It ran once: no second turn of it on the survivor.
    let starts = b
        .seen
        .iter()
        .filter(|v| v["method"] == "turn/started" && v["params"]["queue_id"] == "q-0-0")
        .count();
    assert_eq!(starts, 1);
}

both!(
    a_remote_owner_is_taken_over_after_the_stale_limit_sqlite,
    a_remote_owner_is_taken_over_after_the_stale_limit_postgres,
    remote_owner_expires
);

/// Hosts on different machines (different host names): the killed owner's pid means
/// nothing to the survivor, so it takes over only once the heartbeat is older than the
/// stale limit.
fn remote_owner_expires(store: Store) {
    let fake = provider();
    let Some((env, mut keep)) = backend(store) else {
        return;
    };
    // The stale limit comes from the config alone here (`store.lease_stale_ms`): with
    // the default 30 s the takeover would not come within the wait.
    let env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k != "WUU_LEASE_STALE_MS")
        .collect();
    let mut a = first_host(&fake, &env, &[("WUU_HOST_NAME", "machine-a")]);
    let mut b = other_host(
        store,
        &fake,
        &a,
        &env,
        &[("WUU_HOST_NAME", "machine-b")],
        &mut keep,
    );
    let round = run_and_kill(&mut a, 0, 2, false);
    let killed_at = Instant::now();
    b.wait_for("turn/error of the killed turn", |v| {
        v["method"] == "turn/error" && v["params"]["turn_id"] == json!(round.killed_turn)
    });
    let waited = killed_at.elapsed();
    // The last heartbeat was at most a beat (250 ms) before the kill.
    assert!(
        waited >= Duration::from_millis(700),
        "taken over after {waited:?}"
    );
    let resumed = settled_on(&mut b, &round);
    check_round(&resumed, &round);
}

both!(
    a_dead_turns_pending_steer_comes_back_held_on_the_survivor_sqlite,
    a_dead_turns_pending_steer_comes_back_held_on_the_survivor_postgres,
    steer_of_dead_turn
);

/// A steer the dead turn never took was meant for that turn: the survivor holds it (as
/// an interrupt would, announced with `turn/held`), never runs it, and runs the queued
/// input.
fn steer_of_dead_turn(store: Store) {
    let fake = provider();
    let Some((mut a, mut b, _keep)) = hosts(store, &fake) else {
        return;
    };
    let thread = a.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.call(
        "turn/start",
        json!({"thread_id": thread, "prompt": "STALL-s"}),
    );
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    a.notification("item/agentMessage/delta");
    a.call(
        "turn/queue",
        json!({"thread_id": thread, "prompt": "QUEUED-s", "client_id": "q-s"}),
    );
    a.call(
        "turn/steer",
        json!({"thread_id": thread, "prompt": "also this", "client_id": "s-s", "expected_turn_id": turn}),
    );
    let _ = a.child.kill();
    let _ = a.child.wait();
    b.wait_for("turn/started of the queued input", |v| {
        v["method"] == "turn/started" && v["params"]["queue_id"] == "q-s"
    });
    let round = Round {
        thread: thread.clone(),
        killed_turn: turn,
        acked: vec!["q-s".into()],
        unacked: vec![],
    };
    let resumed = settled_on(&mut b, &round);
    // The steer either reached the dead turn (it cuts the stream at once: then it is in
    // that turn's history) or comes back held, announced; never run as a turn.
    let in_history = sources(&resumed).get("s-s") == Some(&1);
    let held = resumed["held_user_messages"]
        .as_array()
        .is_some_and(|h| h.len() == 1 && h[0]["id"] == "s-s");
    assert!(in_history ^ held, "{resumed}");
    if held {
        assert!(b.seen.iter().any(|v| v["method"] == "turn/held"
            && v["params"]["thread_id"] == json!(thread)
            && v["params"]["messages"][0]["id"] == "s-s"));
    }
    assert!(b
        .seen
        .iter()
        .all(|v| !(v["method"] == "turn/started" && v["params"]["queue_id"] == "s-s")));
}

both!(
    a_restarted_host_holds_the_dead_owners_queued_input_sqlite,
    a_restarted_host_holds_the_dead_owners_queued_input_postgres,
    restarted_host_holds
);

/// A host restarted after the crash (not a survivor) keeps the local rule: the dead
/// owner's pending input comes back held, never run by itself.
fn restarted_host_holds(store: Store) {
    let fake = provider();
    let Some((env, _keep)) = backend(store) else {
        return;
    };
    let mut a = first_host(&fake, &env, &[]);
    let round = run_and_kill(&mut a, 0, 1, false);
    let mut again = App::spawn_in_env(&a.home.clone(), &a.workdir.clone(), &pairs(&env));
    let r = again.call("thread/resume", json!({"session_id": round.thread}));
    let held: Vec<&str> = r["held_user_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(held, vec!["q-0-0"], "{r}");
    assert_eq!(r["thread"]["turns"][0]["status"], "interrupted");
    let until = Instant::now() + Duration::from_millis(1500);
    while let Some(v) = again.next_within(until.saturating_duration_since(Instant::now())) {
        assert_ne!(v["method"], "turn/started", "held input ran: {v}");
    }
}

both!(
    a_live_owners_queued_input_is_left_to_it_sqlite,
    a_live_owners_queued_input_is_left_to_it_postgres,
    live_owner_keeps_its_input
);

/// A live owner's queued input is its own: a second host that opens the conversation
/// while the owner runs it neither holds nor runs it, and the owner runs it once.
fn live_owner_keeps_its_input(store: Store) {
    let fake = provider();
    let Some((mut a, mut b, _keep)) = hosts(store, &fake) else {
        return;
    };
    let thread = a.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = a.call(
        "turn/start",
        json!({"thread_id": thread, "prompt": "STALL-x"}),
    );
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    a.notification("item/agentMessage/delta");
    a.call(
        "turn/queue",
        json!({"thread_id": thread, "prompt": "QUEUED-y", "client_id": "q-live"}),
    );
    let seen = b.call(
        "thread/resume",
        json!({"session_id": thread, "response_only": true}),
    );
    assert!(
        seen["held_user_messages"]
            .as_array()
            .is_none_or(|h| h.is_empty()),
        "{seen}"
    );
    // Well past the stale limit, the owner (heartbeating) keeps its lease.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(b
        .seen
        .iter()
        .all(|v| v["method"] != "turn/started" && v["method"] != "turn/error"));
    a.call("turn/interrupt", json!({"thread_id": thread}));
    a.wait_for("turn end", |v| {
        v["method"] == "turn/error" && v["params"]["turn_id"] == json!(turn)
    });
    let r = a.call(
        "thread/resume",
        json!({"session_id": thread, "response_only": true}),
    );
    let held: Vec<&str> = r["held_user_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(held, vec!["q-live"], "{r}");
}

both!(
    takeover_kill_loop_runs_every_acknowledged_input_exactly_once_sqlite,
    takeover_kill_loop_runs_every_acknowledged_input_exactly_once_postgres,
    kill_loop
);

/// The kill loop: `WUU_TAKEOVER_ROUNDS` rounds (default 100) of run, queue, SIGKILL,
/// takeover, against one survivor; every acknowledged input runs exactly once, inputs
/// sent without waiting for their answer at most once. On SQLite the hosts share a
/// machine (a killed pid is dead at once); on PostgreSQL they have different host
/// names, so every takeover waits for the stale limit, as between machines.
fn kill_loop(store: Store) {
    let rounds: usize = std::env::var("WUU_TAKEOVER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let fake = provider();
    let Some((env, mut keep)) = backend(store) else {
        return;
    };
    let names: [&[(&str, &str)]; 2] = match store {
        Store::Sqlite => [&[], &[]],
        #[cfg(feature = "postgres")]
        Store::Postgres => [
            &[("WUU_HOST_NAME", "machine-a")],
            &[("WUU_HOST_NAME", "machine-b")],
        ],
    };
    let mut a = first_host(&fake, &env, names[0]);
    let mut b = other_host(store, &fake, &a, &env, names[1], &mut keep);
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut acked, mut unacked_ran, mut unacked) = (0, 0, 0);
    let started = Instant::now();
    for i in 0..rounds {
        let queued = 1 + rand(3) as usize;
        let last_unacked = rand(4) == 0;
        let round = run_and_kill(&mut a, i, queued, last_unacked);
        let resumed = settled_on(&mut b, &round);
        check_round(&resumed, &round);
        acked += round.acked.len();
        unacked += round.unacked.len();
        unacked_ran += round
            .unacked
            .iter()
            .filter(|id| sources(&resumed).contains_key(*id))
            .count();
        a.restart();
        // Keep the survivor's output drained.
        b.backlog.clear();
    }
    eprintln!(
        "takeover kill loop: {rounds} SIGKILLs in {:.1} s, {acked} acknowledged inputs each run once, {unacked_ran} of {unacked} unanswered ones ran",
        started.elapsed().as_secs_f64()
    );
}

both!(
    a_conversation_another_host_ran_is_never_shown_stale_sqlite,
    a_conversation_another_host_ran_is_never_shown_stale_postgres,
    other_hosts_turn_is_seen
);

/// The user messages of a resumed conversation, turn by turn.
fn prompts(resumed: &Value) -> Vec<String> {
    resumed["thread"]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["items"].as_array().cloned().unwrap_or_default())
        .filter(|i| i["type"] == "user_message")
        .filter_map(|i| i["text"].as_str().map(str::to_owned))
        .collect()
}

/// Runs a turn of `thread` with `prompt` on `app` to its end.
fn run_turn(app: &mut App, thread: &str, prompt: &str) {
    let r = app.call("turn/start", json!({"thread_id": thread, "prompt": prompt}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    let done = app.wait_for("turn/completed", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(turn)
    });
    assert_eq!(done["params"]["content"], "done", "{done}");
}

/// Host B holds a conversation in memory (it ran a turn and stays idle, lease-free);
/// host A then runs a turn of it. B's resume shows A's turn, and B's next turn sends the
/// model the whole history (A's turn included) and is stored after it.
fn other_hosts_turn_is_seen(store: Store) {
    let fake = provider();
    let Some((mut a, mut b, _keep)) = hosts(store, &fake) else {
        return;
    };
    let t = b.call("thread/start", json!({}));
    let th = t["thread"]["id"].as_str().unwrap().to_owned();
    run_turn(&mut b, &th, "ONE-on-b");
    let r = b.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(prompts(&r), ["ONE-on-b"], "{r}");

    run_turn(&mut a, &th, "TWO-on-a");

    let r = b.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(
        prompts(&r),
        ["ONE-on-b", "TWO-on-a"],
        "B shows a stale view: {r}"
    );

    run_turn(&mut b, &th, "THREE-on-b");
    let sent = fake.requests().last().unwrap().body.to_string();
    let at = |p: &str| {
        sent.find(p)
            .unwrap_or_else(|| panic!("{p} not sent: {sent}"))
    };
    assert!(at("ONE-on-b") < at("TWO-on-a") && at("TWO-on-a") < at("THREE-on-b"));
    for h in [&mut a, &mut b] {
        let r = h.call(
            "thread/resume",
            json!({"session_id": th, "response_only": true}),
        );
        assert_eq!(prompts(&r), ["ONE-on-b", "TWO-on-a", "THREE-on-b"], "{r}");
    }
}

/// Host B starts a conversation (its session parks at once, keeping the row it created)
/// and host A runs a turn of it before B's first request: B's session, revived from that
/// row rather than the store, still finds the row moved, reads the history, sends the
/// model A's turn before its own and shows both, in order, as A does.
fn first_request_after_another_hosts_turn(store: Store) {
    let fake = provider();
    let Some((mut a, mut b, _keep)) = hosts(store, &fake) else {
        return;
    };
    let t = b.call("thread/start", json!({}));
    let th = t["thread"]["id"].as_str().unwrap().to_owned();
    run_turn(&mut a, &th, "ONE-on-a");
    run_turn(&mut b, &th, "TWO-on-b");
    let sent = fake.requests().last().unwrap().body.to_string();
    let at = |p: &str| {
        sent.find(p)
            .unwrap_or_else(|| panic!("{p} not sent: {sent}"))
    };
    assert!(at("ONE-on-a") < at("TWO-on-b"), "{sent}");
    for h in [&mut a, &mut b] {
        let r = h.call(
            "thread/resume",
            json!({"session_id": th, "response_only": true}),
        );
        assert_eq!(prompts(&r), ["ONE-on-a", "TWO-on-b"], "{r}");
    }
}

both!(
    first_request_after_another_hosts_turn_sqlite,
    first_request_after_another_hosts_turn_postgres,
    first_request_after_another_hosts_turn
);

/// Another host's turn committed after host B's session last checked the stored
/// conversation (the fault `session_skips_refresh` makes B skip that check): B's turn,
/// taking the lease, still finds the row moved, reads the history again, sends the model
/// the whole conversation and keeps it in memory in the stored order.
#[test]
fn a_turn_admitted_after_another_hosts_commit_reads_the_history_again() {
    let fake = provider();
    let Some((env, mut keep)) = backend(Store::Sqlite) else {
        return;
    };
    let mut a = first_host(&fake, &env, &[]);
    let mut b = other_host(
        Store::Sqlite,
        &fake,
        &a,
        &env,
        &[("WUU_FAULTS", "session_skips_refresh")],
        &mut keep,
    );
    let t = b.call("thread/start", json!({}));
    let th = t["thread"]["id"].as_str().unwrap().to_owned();
    run_turn(&mut b, &th, "ONE-on-b");
    run_turn(&mut a, &th, "TWO-on-a");
    run_turn(&mut b, &th, "THREE-on-b");
    let sent = fake.requests().last().unwrap().body.to_string();
    let at = |p: &str| {
        sent.find(p)
            .unwrap_or_else(|| panic!("{p} not sent: {sent}"))
    };
    assert!(at("ONE-on-b") < at("TWO-on-a") && at("TWO-on-a") < at("THREE-on-b"));
    let r = b.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(prompts(&r), ["ONE-on-b", "TWO-on-a", "THREE-on-b"], "{r}");
}
