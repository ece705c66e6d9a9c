//! Several hosts, one PostgreSQL database (README "Several hosts, one database"): two
//! real `wuu app-server` processes with their own `WUU_HOME` and `HOME` share the
//! database named by `WUU_STORE_URL`. Each test works in a schema of its own in the
//! server `WUU_TEST_PG_URL` names (`.ci/run` starts one with `.ci/pg`); without the
//! variable the tests print why and skip.
#![cfg(feature = "postgres")]

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

/// A schema of its own in the test server, dropped when the test ends.
struct Schema {
    base: String,
    name: String,
}

impl Schema {
    /// A fresh schema; `None` (with the reason printed) without `WUU_TEST_PG_URL`.
    fn create() -> Option<Schema> {
        let Ok(base) = std::env::var("WUU_TEST_PG_URL") else {
            eprintln!("skipped: WUU_TEST_PG_URL is not set (.ci/run sets it)");
            return None;
        };
        let name = format!("mh_{}", uuid::Uuid::new_v4().simple());
        psql(&base, &format!("CREATE SCHEMA {name}"));
        Some(Schema { base, name })
    }

    /// The store URL of this schema, with `password` written in it when given.
    fn url(&self, password: Option<&str>) -> String {
        let mut url = self.base.clone();
        if let Some(pw) = password {
            url = url.replacen("://wuu@", &format!("://wuu:{pw}@"), 1);
            assert!(url.contains(pw), "WUU_TEST_PG_URL names user wuu: {url}");
        }
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}options=-csearch_path%3D{}", self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                &self.base,
                "-qc",
                &format!(
                    "SET client_min_messages = warning; DROP SCHEMA {} CASCADE",
                    self.name
                ),
            ])
            .status();
    }
}

fn psql(base: &str, sql: &str) {
    let status = Command::new("psql")
        .args([base, "-qc", sql])
        .status()
        .expect("psql runs");
    assert!(status.success(), "{sql}");
}

/// One host: its own home (also `HOME`) with the fake provider's config, the shared
/// workspace, the shared database; stderr in `<home>/stderr.log`.
struct Host {
    app: App,
    log: PathBuf,
    _home: tempfile::TempDir,
}

fn host(fake: &FakeProvider, workdir: &Path, url: &str) -> Host {
    host_with(fake, workdir, Some(url), None)
}

/// [`host`] with the database named by `WUU_STORE_URL` (`env_url`) and/or the user
/// config's `store.url` (`config_url`).
fn host_with(
    fake: &FakeProvider,
    workdir: &Path,
    env_url: Option<&str>,
    config_url: Option<&str>,
) -> Host {
    let home = tempfile::tempdir().unwrap();
    let mut config = config_for(&fake.base_url());
    if let Some(url) = config_url {
        config["store"] = json!({ "url": url });
    }
    std::fs::write(home.path().join("config.json"), config.to_string()).unwrap();
    let log = home.path().join("stderr.log");
    let h = home.path().to_str().unwrap().to_owned();
    let mut env = vec![("HOME", h.as_str()), ("RUST_LOG", "debug")];
    if let Some(url) = env_url {
        env.push(("WUU_STORE_URL", url));
    }
    let app = App::spawn_logged(home.path(), workdir, &env, &log);
    Host {
        app,
        log,
        _home: home,
    }
}

fn thread_ids(list: &Value) -> Vec<String> {
    list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits for the terminal notification of `turn`.
fn turn_end(app: &mut App, turn: &str) -> Value {
    let t = turn.to_owned();
    app.wait_for("turn end", move |v| {
        (v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(t))
            || (v["method"] == "turn/error" && v["params"]["turn_id"] == json!(t))
    })
}

fn start_thread(app: &mut App) -> String {
    let t = app.call("thread/start", json!({}));
    app.notification("thread/started");
    t["thread"]["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_conversation_started_on_one_host_is_listed_and_resumed_on_the_other() {
    let Some(schema) = Schema::create() else {
        return;
    };
    let url = schema.url(None);
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    let mut a = host(&fake, &workdir, &url);
    let mut b = host(&fake, &workdir, &url);

    // B lists first (its listing is cached), then A creates and runs a turn.
    assert!(thread_ids(&b.app.call("thread/list", json!({}))).is_empty());
    let th = start_thread(&mut a.app);
    fake.push(Script::text(&["Hello ", "from A"]));
    let r = a
        .app
        .call("turn/start", json!({"thread_id": th, "prompt": "hi"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    assert_eq!(turn_end(&mut a.app, &turn)["method"], "turn/completed");

    // B's next listing shows it: A's commits reached B (NOTIFY) and invalidated B's
    // cached listing.
    let deadline = Instant::now() + Duration::from_secs(5);
    let listed = loop {
        let ids = thread_ids(&b.app.call("thread/list", json!({})));
        if ids.contains(&th) || Instant::now() > deadline {
            break ids;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(listed, vec![th.clone()]);

    // B resumes it with A's history.
    let r = b.app.call("thread/resume", json!({"session_id": th}));
    let turns = r["thread"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{r}");
    assert_eq!(turns[0]["status"], "completed");
    let texts: Vec<&str> = turns[0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["text"].as_str())
        .collect();
    assert!(texts.contains(&"hi"), "{texts:?}");
    assert!(texts.contains(&"Hello from A"), "{texts:?}");

    // A rename on B reaches A's (cached) listing too.
    a.app.call("thread/list", json!({}));
    b.app.call(
        "thread/rename",
        json!({"thread_id": th, "title": "Renamed on B"}),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let l = a.app.call("thread/list", json!({}));
        if l["threads"][0]["title"] == "Renamed on B" {
            break;
        }
        assert!(Instant::now() < deadline, "A never saw the rename: {l}");
        std::thread::sleep(Duration::from_millis(5));
    }

    // Search finds it on B by its message text.
    let s = b
        .app
        .call("thread/search", json!({"query": "from a", "limit": 10}));
    assert!(s.to_string().contains(&th), "{s}");
}

#[test]
fn two_hosts_racing_to_run_one_conversation_exactly_one_wins() {
    let Some(schema) = Schema::create() else {
        return;
    };
    let url = schema.url(None);
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    let mut a = host(&fake, &workdir, &url);
    let mut b = host(&fake, &workdir, &url);
    let th = start_thread(&mut a.app);
    for _ in 0..2 {
        fake.push(Script::stall(&["Working"], Duration::from_secs(5)));
    }
    let ia = a
        .app
        .send("turn/start", json!({"thread_id": th, "prompt": "A"}));
    let ib = b
        .app
        .send("turn/start", json!({"thread_id": th, "prompt": "B"}));
    let (ra, rb) = (a.app.response(&ia), b.app.response(&ib));
    let wins = [&ra, &rb]
        .iter()
        .filter(|r| r.get("result").is_some())
        .count();
    assert_eq!(wins, 1, "{ra}\n{rb}");
    let (winner, loser) = if ra.get("result").is_some() {
        (&mut a, &rb)
    } else {
        (&mut b, &ra)
    };
    assert_eq!(loser["error"]["code"], "thread_busy", "{loser}");
    winner.app.call("turn/interrupt", json!({"thread_id": th}));
}

#[test]
fn resume_on_one_host_while_the_other_runs_a_turn_shows_it_running() {
    let Some(schema) = Schema::create() else {
        return;
    };
    let url = schema.url(None);
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    let mut a = host(&fake, &workdir, &url);
    let mut b = host(&fake, &workdir, &url);
    let th = start_thread(&mut a.app);
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let r = a
        .app
        .call("turn/start", json!({"thread_id": th, "prompt": "long"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    a.app.notification("item/agentMessage/delta");

    // The spec documents no busy error for thread/resume: B answers the stored
    // conversation, its turn still running (not a stale, settled view), and B cannot
    // start a turn of it while A holds its lease.
    let r = b.app.call("thread/resume", json!({"session_id": th}));
    let turns = r["thread"]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{r}");
    assert_eq!(turns[0]["id"], json!(turn));
    assert_eq!(turns[0]["status"], "in_progress", "{r}");
    let e = b
        .app
        .call_err("turn/start", json!({"thread_id": th, "prompt": "B too"}));
    assert_eq!(e["code"], "thread_busy", "{e}");

    a.app.call("turn/interrupt", json!({"thread_id": th}));
    turn_end(&mut a.app, &turn);
}

/// The user messages of a resumed conversation, in order.
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

/// Runs a turn of `th` with `prompt` on `app` to its completion.
fn run_turn(fake: &FakeProvider, app: &mut App, th: &str, prompt: &str) {
    fake.push(Script::text(&["done"]));
    let r = app.call("turn/start", json!({"thread_id": th, "prompt": prompt}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    assert_eq!(turn_end(app, &turn)["method"], "turn/completed");
}

#[test]
fn a_conversation_held_in_memory_shows_the_other_hosts_turns() {
    let Some(schema) = Schema::create() else {
        return;
    };
    let url = schema.url(None);
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    let mut a = host(&fake, &workdir, &url);
    let mut b = host(&fake, &workdir, &url);
    let th = start_thread(&mut a.app);
    run_turn(&fake, &mut a.app, &th, "ONE-on-a");

    // B loads the conversation (an idle session holding no lease), then A runs twice.
    let r = b.app.call("thread/resume", json!({"session_id": th}));
    assert_eq!(prompts(&r), ["ONE-on-a"], "{r}");
    run_turn(&fake, &mut a.app, &th, "TWO-on-a");
    run_turn(&fake, &mut a.app, &th, "THREE-on-a");

    let r = b.app.call("thread/resume", json!({"session_id": th}));
    assert_eq!(
        prompts(&r),
        ["ONE-on-a", "TWO-on-a", "THREE-on-a"],
        "B shows a stale view: {r}"
    );
    run_turn(&fake, &mut b.app, &th, "FOUR-on-b");
    let sent = fake.requests().last().unwrap().body.to_string();
    let order: Vec<usize> = ["ONE-on-a", "TWO-on-a", "THREE-on-a", "FOUR-on-b"]
        .iter()
        .map(|p| {
            sent.find(p)
                .unwrap_or_else(|| panic!("{p} not sent: {sent}"))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{sent}");
    for h in [&mut a, &mut b] {
        let r = h.app.call("thread/resume", json!({"session_id": th}));
        assert_eq!(
            prompts(&r),
            ["ONE-on-a", "TWO-on-a", "THREE-on-a", "FOUR-on-b"],
            "{r}"
        );
    }
}

#[test]
fn a_password_in_the_url_never_reaches_an_answer_or_a_log_line() {
    let Some(schema) = Schema::create() else {
        return;
    };
    const SECRET: &str = "pw-do-not-show-7f3a";
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();

    // A reachable database (the test server trusts, so the password is unused).
    let mut a = host(&fake, &workdir, &schema.url(Some(SECRET)));
    a.app.call("initialize", json!({}));
    let th = start_thread(&mut a.app);
    fake.push(Script::text(&["ok"]));
    let r = a
        .app
        .call("turn/start", json!({"thread_id": th, "prompt": "hi"}));
    turn_end(&mut a.app, r["turn"]["id"].as_str().unwrap());
    a.app.call("thread/list", json!({}));

    // An unreachable one: requests fail with store_unavailable, naming the database
    // without its password.
    let dead = format!("postgresql://wuu:{SECRET}@127.0.0.1:1/postgres");
    let mut d = host(&fake, &workdir, &dead);
    let e = d.app.call_err("thread/start", json!({}));
    assert_eq!(e["code"], "store_unavailable", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("postgresql://wuu@127.0.0.1:1/postgres"),
        "{e}"
    );
    let e = d.app.call_err("thread/list", json!({}));
    assert_eq!(e["code"], "store_unavailable", "{e}");
    let init = d.app.call("initialize", json!({}));

    for h in [&mut a, &mut d] {
        h.app.call("shutdown", json!({}));
        h.app.wait_exit(Duration::from_secs(10));
        let log = std::fs::read_to_string(&h.log).unwrap();
        assert!(!log.is_empty(), "RUST_LOG=debug logs something");
        assert!(!log.contains(SECRET), "stderr shows the password:\n{log}");
        for frame in &h.app.seen {
            assert!(!frame.to_string().contains(SECRET), "{frame}");
        }
    }
    // The host that served a turn logged at the level asked for, so the search for the
    // password covered its debug lines too.
    let served = std::fs::read_to_string(&a.log).unwrap();
    assert!(
        served.contains(" DEBUG "),
        "RUST_LOG=debug logs debug lines:\n{served}"
    );
    assert!(!init.to_string().contains(SECRET), "{init}");
}

#[test]
fn a_connection_lost_mid_turn_never_loses_an_acknowledged_input() {
    let Some(schema) = Schema::create() else {
        return;
    };
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    // Host A's connections carry a name of their own, so the test can cut exactly them.
    let name = format!("{}_a", schema.name);
    let mut a = host(
        &fake,
        &workdir,
        &format!("{}&application_name={name}", schema.url(None)),
    );
    let th = start_thread(&mut a.app);
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let r = a
        .app
        .call("turn/start", json!({"thread_id": th, "prompt": "first"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    a.app.notification("item/agentMessage/delta");
    let q = a.app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "second", "client_id": "q-1"}),
    );
    assert_eq!(q["queued"]["id"], "q-1");

    // Every connection of host A is cut by the server.
    psql(
        &schema.base,
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{name}'"
        ),
    );
    // A settles its turn (its next writes reconnect) and keeps serving.
    a.app.call("turn/interrupt", json!({"thread_id": th}));
    turn_end(&mut a.app, &turn);
    assert!(thread_ids(&a.app.call("thread/list", json!({}))).contains(&th));

    // The acknowledged input is in the database, held (never run after an interrupt,
    // although the hold's first write met the cut connection), seen from another host.
    let mut b = host(&fake, &workdir, &schema.url(None));
    let r = b.app.call("thread/resume", json!({"session_id": th}));
    let held = r["held_user_messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(held.iter().any(|m| m["id"] == "q-1"), "{r}");
    assert_eq!(r["thread"]["turns"].as_array().unwrap().len(), 1, "{r}");
}

#[test]
fn the_config_names_the_database_and_the_environment_wins_over_it() {
    let Some(schema) = Schema::create() else {
        return;
    };
    let url = schema.url(None);
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    // Host A names the database in its config only; host B's config names an
    // unreachable one, which its environment overrides.
    let mut a = host_with(&fake, &workdir, None, Some(&url));
    let mut b = host_with(
        &fake,
        &workdir,
        Some(&url),
        Some("postgresql://wuu@127.0.0.1:1/postgres"),
    );
    let th = start_thread(&mut a.app);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if thread_ids(&b.app.call("thread/list", json!({}))).contains(&th) {
            break;
        }
        assert!(Instant::now() < deadline, "B never listed A's conversation");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nothing was written to either home's SQLite file.
    for h in [&a, &b] {
        let db = h.log.with_file_name("wuu.db");
        assert!(
            std::fs::metadata(&db).map_or(true, |m| m.len() == 0),
            "{} was written",
            db.display()
        );
    }
}

/// A host whose database could not be used at start (here: its schema did not exist
/// yet) tries again every beat. Until it holds a connection nothing heartbeats its
/// leases, so the others would take over the conversations it runs; once the database
/// is there the `initialize` issue clears and the host is registered.
#[test]
fn a_host_started_before_its_database_was_ready_heartbeats_once_it_is() {
    let Some(schema) = Schema::create() else {
        return;
    };
    psql(&schema.base, &format!("DROP SCHEMA {}", schema.name));
    let fake = FakeProvider::start();
    let ws = tempfile::tempdir().unwrap();
    let workdir = ws.path().canonicalize().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.json"),
        config_for(&fake.base_url()).to_string(),
    )
    .unwrap();
    let log = home.path().join("stderr.log");
    let h = home.path().to_str().unwrap().to_owned();
    let url = schema.url(None);
    let env = [
        ("HOME", h.as_str()),
        ("RUST_LOG", "debug"),
        ("WUU_STORE_URL", url.as_str()),
        ("WUU_LEASE_STALE_MS", "1000"),
    ];
    let mut app = App::spawn_logged(home.path(), &workdir, &env, &log);
    let store_issue = |init: &Value| {
        init["issues"]
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["code"] == "store_unavailable"))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let init = app.call("initialize", json!({}));
        if store_issue(&init) {
            break;
        }
        assert!(Instant::now() < deadline, "no store issue: {init}");
        std::thread::sleep(Duration::from_millis(50));
    }
    psql(&schema.base, &format!("CREATE SCHEMA {}", schema.name));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let init = app.call("initialize", json!({}));
        if !store_issue(&init) {
            assert_eq!(init["status"], "ready", "{init}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the issue stayed after the database appeared: {init}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new("psql")
        .args([
            &schema.base,
            "-tAc",
            &format!("SELECT count(*) FROM {}.instances", schema.name),
        ])
        .output()
        .unwrap();
    let registered: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(registered >= 1, "the host registered itself");
    app.call("shutdown", json!({}));
    app.wait_exit(Duration::from_secs(10));
}
