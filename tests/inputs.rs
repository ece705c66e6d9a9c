//! End-to-end tests of pending input (queue, steer, hold, cancel records), explicit
//! continue, forced archive, runs and crash recovery (issue 5), against the real binary
//! and the fake provider.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

fn setup() -> (FakeProvider, App, String) {
    let fake = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    cfg["agent"] = json!({"auto_title": false});
    let mut app = App::start(Some(cfg));
    let t = app.call("thread/start", json!({}));
    let id = t["thread"]["id"].as_str().unwrap().to_owned();
    app.notification("thread/started");
    (fake, app, id)
}

fn start_turn(app: &mut App, thread: &str, prompt: &str) -> String {
    let r = app.call("turn/start", json!({"thread_id": thread, "prompt": prompt}));
    r["turn"]["id"].as_str().unwrap().to_owned()
}

/// Waits for the terminal notification of `turn` (turn/completed or turn/error).
fn turn_end(app: &mut App, turn: &str) -> Value {
    let t = turn.to_owned();
    app.wait_for("turn end", move |v| {
        (v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(t))
            || (v["method"] == "turn/error" && v["params"]["turn_id"] == json!(t))
    })
}

fn wait_delta(app: &mut App) {
    app.notification("item/agentMessage/delta");
}

fn user_texts(turn: &Value) -> Vec<String> {
    turn["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "user_message")
        .map(|i| i["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn queue_runs_after_the_whole_task_and_retries_are_idempotent() {
    let (fake, mut app, th) = setup();
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let turn = start_turn(&mut app, &th, "first");
    wait_delta(&mut app);
    let q = app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "second", "client_id": "q-1"}),
    );
    assert_eq!(q["queued"]["id"], "q-1");
    let queued = app.notification("turn/queued");
    assert_eq!(queued["params"]["message"]["origin"], "queue");
    // A retry with the same client_id returns the original entry and changes nothing.
    let again = app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "CHANGED", "client_id": "q-1"}),
    );
    assert_eq!(again["queued"]["preview"], "second");
    let resumed = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(resumed["pending_user_messages"][0]["id"], "q-1");
    // Interrupting holds the queued input (never auto-run after an interrupt).
    app.call("turn/interrupt", json!({"thread_id": th}));
    let held = app.notification("turn/held");
    assert_eq!(held["params"]["messages"][0]["id"], "q-1");
    let end = turn_end(&mut app, &turn);
    assert_eq!(end["method"], "turn/error");
    assert_eq!(end["params"]["turn"]["status"], "interrupted");
    // Send the held entry explicitly: a new turn from it.
    fake.push(Script::text(&["Second done."]));
    let r = app.call("turn/steer", json!({"thread_id": th, "client_id": "q-1"}));
    let t2 = r["turn_id"].as_str().unwrap().to_owned();
    let t2c = t2.clone();
    let started = app.wait_for("second turn", move |v| {
        v["method"] == "turn/started" && v["params"]["turn"]["id"] == json!(t2c)
    });
    assert_eq!(user_texts(&started["params"]["turn"]), vec!["second"]);
    let end = turn_end(&mut app, &t2);
    assert_eq!(end["method"], "turn/completed");
    // Consumed ids are refused by every input method.
    let e = app.call_err(
        "turn/queue",
        json!({"thread_id": th, "prompt": "x", "client_id": "q-1"}),
    );
    assert!(e["message"].as_str().unwrap().contains("consumed"), "{e}");
    let e = app.call_err(
        "turn/steer",
        json!({"thread_id": th, "prompt": "x", "client_id": "q-1"}),
    );
    assert!(e["message"].as_str().unwrap().contains("consumed"), "{e}");
}

#[test]
fn queued_input_runs_when_the_turn_ends() {
    let (fake, mut app, th) = setup();
    fake.push(Script::tool_call(
        "call_1",
        "bash",
        r#"{"command":"sleep 0.5"}"#,
    ));
    fake.push(Script::text(&["First done."]));
    fake.push(Script::text(&["Done with the queued one."]));
    let turn = start_turn(&mut app, &th, "first");
    app.wait_for("tool started", |v| {
        v["method"] == "item/started" && v["params"]["item"]["type"] == "tool_call"
    });
    app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "then this", "client_id": "q-2"}),
    );
    // The queued input waits for the whole task (tool step and final answer).
    let end = turn_end(&mut app, &turn);
    assert_eq!(end["params"]["content"], "First done.");
    let next = app.wait_for("queued turn", |v| {
        v["method"] == "turn/started" && v["params"]["queue_id"] == "q-2"
    });
    let t2 = next["params"]["turn"]["id"].as_str().unwrap().to_owned();
    assert_eq!(user_texts(&next["params"]["turn"]), vec!["then this"]);
    let end = turn_end(&mut app, &t2);
    assert_eq!(end["params"]["content"], "Done with the queued one.");
    assert_eq!(
        end["params"]["turn"]["items"][0]["source_id"], "q-2",
        "the queue id is the user item's source_id"
    );
}

#[test]
fn cancel_records_block_same_mode_and_switch_supersedes() {
    let (_fake, mut app, th) = setup();
    // Cancel before arrival: the later queue with that id is refused.
    let r = app.call("turn/dequeue", json!({"thread_id": th, "queue_id": "c-1"}));
    assert_eq!(r["ok"], false);
    let e = app.call_err(
        "turn/queue",
        json!({"thread_id": th, "prompt": "x", "client_id": "c-1", "hold": true}),
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("cancelled before arrival"),
        "{e}"
    );
    // Explicitly switching to steer supersedes the queue's cancel record (idle: no
    // active turn, so the steer is refused for that reason, not for the cancel).
    let e = app.call_err(
        "turn/steer",
        json!({"thread_id": th, "prompt": "x", "client_id": "c-1"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("no active turn"),
        "{e}"
    );
    // Unsteer before arrival blocks a later steer with that id.
    app.call("turn/unsteer", json!({"thread_id": th, "steer_id": "c-2"}));
    let e = app.call_err(
        "turn/steer",
        json!({"thread_id": th, "prompt": "x", "client_id": "c-2"}),
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("cancelled before arrival"),
        "{e}"
    );
    // …while an explicit queue with that id supersedes the steer's cancel record.
    let r = app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "x", "client_id": "c-2", "hold": true}),
    );
    assert_eq!(r["queued"]["id"], "c-2");
    // Held input: edit, then dequeue.
    let r = app.call(
        "turn/update-queued",
        json!({"thread_id": th, "queue_id": "c-2", "prompt": "edited"}),
    );
    assert_eq!(r["ok"], true);
    let held = app.notification("turn/held");
    assert_eq!(held["params"]["messages"][0]["prompt"], "x");
    let held = app.notification("turn/held");
    assert_eq!(held["params"]["messages"][0]["prompt"], "edited");
    let r = app.call("turn/dequeue", json!({"thread_id": th, "queue_id": "c-2"}));
    assert_eq!(r["ok"], true);
    let r = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert!(r.get("held_user_messages").is_none(), "{r}");
}

#[test]
fn steer_during_streaming_keeps_the_fragment_and_continues_the_turn() {
    let (fake, mut app, th) = setup();
    fake.push(Script::stall(&["Partial answer"], Duration::from_secs(30)));
    fake.push(Script::text(&["Adjusted answer."]));
    let turn = start_turn(&mut app, &th, "do it");
    wait_delta(&mut app);
    let e = app.call_err(
        "turn/steer",
        json!({"thread_id": th, "prompt": "shorter", "expected_turn_id": "turn_wrong"}),
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("expected active turn id"),
        "{e}"
    );
    let r = app.call("turn/steer", json!({"thread_id": th, "prompt": "shorter please", "expected_turn_id": turn, "client_id": "s-1"}));
    assert_eq!(r["turn_id"], json!(turn));
    app.notification("turn/steered");
    let end = turn_end(&mut app, &turn);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let items = end["params"]["turn"]["items"].as_array().unwrap().clone();
    let kinds: Vec<(&str, Option<&str>)> = items
        .iter()
        .map(|i| (i["type"].as_str().unwrap(), i["cause"].as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("user_message", None),
            ("agent_message", Some("incomplete_stream_fragment")),
            ("user_message", None),
            ("agent_message", None)
        ],
        "{items:?}"
    );
    assert_eq!(items[1]["text"], "Partial answer");
    assert_eq!(items[2]["source_id"], "s-1");
    assert_eq!(items[3]["terminal"], true);
    // The second request carries the steer but not the fragment.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let texts: Vec<String> = msgs.iter().map(|m| m["content"].to_string()).collect();
    assert!(
        texts.iter().any(|t| t.contains("shorter please")),
        "{texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("Partial answer")),
        "{texts:?}"
    );
}

#[test]
fn steer_during_a_command_waits_for_the_tool() {
    let (fake, mut app, th) = setup();
    fake.push(Script::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo start; sleep 1; echo slept"}"#,
    ));
    fake.push(Script::text(&["All done."]));
    let turn = start_turn(&mut app, &th, "run it");
    // The command is running once its output streams.
    app.notification("item/toolCall/outputDelta");
    app.call(
        "turn/steer",
        json!({"thread_id": th, "prompt": "also this", "expected_turn_id": turn}),
    );
    let end = turn_end(&mut app, &turn);
    let items = end["params"]["turn"]["items"].as_array().unwrap();
    let tool = items.iter().find(|i| i["type"] == "tool_call").unwrap();
    assert_eq!(
        tool["status"], "completed",
        "the tool was not cancelled: {tool}"
    );
    assert!(tool["result"].as_str().unwrap().contains("slept"));
    let order: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        order,
        vec!["user_message", "tool_call", "user_message", "agent_message"]
    );
}

#[test]
fn explicit_continue_accepts_once_and_refuses_the_rest() {
    let (fake, mut app, th) = setup();
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": "turn_x"}),
    );
    assert!(e["message"].as_str().unwrap().contains("no history"), "{e}");
    fake.push(Script::text(&["First."]));
    let t1 = start_turn(&mut app, &th, "hello");
    turn_end(&mut app, &t1);
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": t1, "prompt": "x"}),
    );
    assert_eq!(e["code"], "invalid_params");
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": "turn_old"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("not the latest"),
        "{e}"
    );
    fake.push(Script::text(&["Continued."]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": t1}),
    );
    let t2 = r["turn"]["id"].as_str().unwrap().to_owned();
    assert_eq!(r["turn"]["kind"], "continue");
    assert_eq!(r["turn"]["items"][0]["cause"], "meta/turn_continue");
    assert!(user_texts(&r["turn"]).is_empty(), "no user message");
    let end = turn_end(&mut app, &t2);
    assert_eq!(end["params"]["content"], "Continued.");
    // The marker never reached the model: the request ends with the first answer.
    let reqs = fake.requests();
    let roles = reqs[1].roles();
    assert_eq!(
        roles.last().map(String::as_str),
        Some("assistant"),
        "{roles:?}"
    );
    // The same source id is refused forever, restarts included.
    app.restart();
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": t1}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("not the latest"),
        "{e}"
    );
    // The continue turn itself is the latest now and may be continued in turn.
    fake.push(Script::text(&["Again."]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": t2}),
    );
    let t3 = r["turn"]["id"].as_str().unwrap().to_owned();
    turn_end(&mut app, &t3);
    // Read-only conversations cannot continue.
    let ro = app.call("thread/start", json!({"permission_mode": "read_only"}));
    let ro = ro["thread"]["id"].as_str().unwrap().to_owned();
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": ro, "resume_after_turn_id": "x"}),
    );
    assert!(e["message"].as_str().unwrap().contains("read-only"), "{e}");
}

#[test]
fn continue_is_refused_while_running_and_after_unknown_at_most_once_outcome() {
    let (fake, mut app, th) = setup();
    fake.push(Script::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo started; sleep 30"}"#,
    ));
    let t1 = start_turn(&mut app, &th, "run");
    // The command runs (and its call record is durable) once its output streams.
    app.notification("item/toolCall/outputDelta");
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": t1}),
    );
    assert_eq!(e["code"], "thread_busy");
    // Crash mid-command: the bash outcome is unknown.
    app.restart();
    let r = app.call("thread/resume", json!({"session_id": th}));
    let turn = r["thread"]["turns"][0].clone();
    assert_eq!(turn["status"], "interrupted", "{turn}");
    let e = app.call_err(
        "turn/start",
        json!({"thread_id": th, "resume_after_turn_id": t1}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("unknown outcome"),
        "{e}"
    );
}

#[test]
fn forced_archive_of_a_running_conversation() {
    let (fake, mut app, th) = setup();
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let turn = start_turn(&mut app, &th, "long task");
    wait_delta(&mut app);
    app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "then deploy", "client_id": "q-9"}),
    );
    let e = app.call_err("thread/archive", json!({"thread_id": th, "archived": true}));
    assert_eq!(e["code"], "thread_busy");
    let id = app.send(
        "thread/archive",
        json!({"thread_id": th, "archived": true, "force": true}),
    );
    let rename = app.send("thread/rename", json!({"thread_id": th, "title": "after"}));
    let r = app.response(&id);
    let thread = &r["result"]["thread"];
    assert_eq!(thread["archived"], true, "{r}");
    assert_eq!(thread["status"], "idle");
    let last = thread["turns"].as_array().unwrap().last().unwrap();
    assert_eq!(last["id"], json!(turn));
    assert_eq!(last["status"], "interrupted");
    assert!(last["error"]["message"]
        .as_str()
        .unwrap()
        .contains("archived"));
    // The later request waited in order behind the archive.
    let rr = app.response(&rename);
    assert_eq!(rr["result"]["thread"]["archived"], true);
    // Queued input was kept (held).
    let resumed = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(resumed["held_user_messages"][0]["id"], "q-9");
}

#[test]
fn restart_turns_pending_input_into_held_and_settles_running_turns() {
    let (fake, mut app, th) = setup();
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let turn = start_turn(&mut app, &th, "long task");
    wait_delta(&mut app);
    app.call(
        "turn/queue",
        json!({"thread_id": th, "prompt": "queued", "client_id": "q-r"}),
    );
    app.call(
        "turn/steer",
        json!({"thread_id": th, "prompt": "steered", "client_id": "s-r", "expected_turn_id": turn}),
    );
    app.restart();
    let r = app.call("thread/resume", json!({"session_id": th}));
    let held: Vec<&str> = r["held_user_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(held.contains(&"q-r"), "{r}");
    // The steer either entered history before the kill, or comes back held.
    let turn0 = &r["thread"]["turns"][0];
    let in_history = turn0["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["source_id"] == "s-r");
    assert!(in_history ^ held.contains(&"s-r"), "{r}");
    assert!(r.get("pending_user_messages").is_none());
    assert_eq!(r["thread"]["status"], "idle");
    assert!(r["thread"]["turns"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["status"] != "in_progress"));
    // Held input is never run automatically.
    assert!(app
        .next_within(Duration::from_millis(300))
        .is_none_or(|v| v["method"] != "turn/started"));
}

#[test]
fn runs_interrupt_and_lookup() {
    let (fake, mut app, th) = setup();
    let e = app.call_err("run/interrupt", json!({"run_id": "run_nope"}));
    assert_eq!(e["code"], "run_not_found");
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let r = app.call(
        "run/start",
        json!({"thread_id": th, "prompt": "task", "request": {"mode": "start"}}),
    );
    let run_id = r["run"]["id"].as_str().unwrap().to_owned();
    assert_eq!(r["run"]["status"], "running");
    app.notification("run/started");
    wait_delta(&mut app);
    let e = app.call_err("run/start", json!({"thread_id": th, "prompt": "again"}));
    assert_eq!(e["code"], "thread_busy");
    let r = app.call(
        "run/interrupt",
        json!({"run_id": run_id, "reason": "timeout"}),
    );
    assert_eq!(r["run"]["status"], "timed_out");
    assert_eq!(r["run"]["result"]["exit_code"], 4);
    let upd = app.notification("run/updated");
    assert_eq!(upd["params"]["run"]["status"], "timed_out");
    // A terminal run is returned as is.
    let r = app.call("run/interrupt", json!({"run_id": run_id}));
    assert_eq!(r["run"]["status"], "timed_out");
}

#[test]
fn two_processes_race_for_one_conversation_exactly_one_wins() {
    let (fake, mut a, th) = setup();
    let mut b = App::spawn_in(&a.home.clone(), &a.workdir.clone(), &[]);
    for _ in 0..2 {
        fake.push(Script::stall(&["Working"], Duration::from_secs(5)));
    }
    let ia = a.send("turn/start", json!({"thread_id": th, "prompt": "A"}));
    let ib = b.send("turn/start", json!({"thread_id": th, "prompt": "B"}));
    let (ra, rb) = (a.response(&ia), b.response(&ib));
    let wins = [&ra, &rb]
        .iter()
        .filter(|r| r.get("result").is_some())
        .count();
    assert_eq!(wins, 1, "{ra}\n{rb}");
    let loser = if ra.get("error").is_some() { &ra } else { &rb };
    assert_eq!(loser["error"]["code"], "thread_busy");
    // A run owned by the other process is not attached here.
    let (owner, other) = if ra.get("result").is_some() {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let turn = if ra.get("result").is_some() { &ra } else { &rb };
    owner.call("turn/interrupt", json!({"thread_id": th}));
    let _ = turn;
    let _ = other;
}

/// The reliability loop: kill -9 at random points while queueing and steering during
/// streaming; after every restart every acknowledged input is present (in history, held
/// or pending), no turn is running, and history is a prefix of what was streamed.
#[test]
fn kill_loop_never_loses_an_acknowledged_input() {
    let iterations: usize = std::env::var("WUU_KILL_LOOP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let fake = FakeProvider::start();
    fake.set_validate(false);
    let mut cfg = config_for(&fake.base_url());
    cfg["agent"] = json!({"auto_title": false});
    let mut app = App::start(Some(cfg));
    let th = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut acked: Vec<String> = vec![];
    let mut seed: u64 = 0x9e3779b97f4a7c15;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let streamed = "alpha beta gamma delta";
    let (mut total_acked, mut total_recovered, mut total_sent) = (0usize, 0usize, 0usize);
    for i in 0..iterations {
        for _ in 0..4 {
            fake.push(Script::stall(
                &["alpha ", "beta ", "gamma ", "delta"],
                Duration::from_secs(30),
            ));
        }
        // Start a turn (the previous one was settled by the restart).
        let tid = app.send(
            "turn/start",
            json!({"thread_id": th, "prompt": format!("task {i}")}),
        );
        let r = app.response(&tid);
        let turn = r["result"]["turn"]["id"].as_str().map(str::to_owned);
        let steps = rand(4);
        for k in 0..steps {
            let id = format!("in-{i}-{k}");
            let req = if k % 2 == 0 {
                app.send(
                    "turn/queue",
                    json!({"thread_id": th, "prompt": format!("queued {i}.{k}"), "client_id": id}),
                )
            } else {
                app.send("turn/steer", json!({"thread_id": th, "prompt": format!("steer {i}.{k}"), "client_id": id, "expected_turn_id": turn}))
            };
            total_sent += 1;
            if rand(3) == 0 {
                // Kill while the request may still be in flight: not acknowledged.
                break;
            }
            let resp = app.response(&req);
            if resp.get("result").is_some() {
                acked.push(id);
            }
        }
        std::thread::sleep(Duration::from_millis(rand(30)));
        app.restart();
        let r = app.call(
            "thread/resume",
            json!({"session_id": th, "response_only": true}),
        );
        let thread = &r["thread"];
        let mut present: Vec<String> = vec![];
        for t in thread["turns"].as_array().unwrap() {
            assert_ne!(
                t["status"], "in_progress",
                "iteration {i}: a turn is running after restart"
            );
            for it in t["items"].as_array().unwrap() {
                if let Some(s) = it["source_id"].as_str() {
                    present.push(s.to_owned());
                }
                if it["type"] == "agent_message" {
                    let text = it["text"].as_str().unwrap_or("");
                    assert!(
                        streamed.starts_with(text),
                        "iteration {i}: history {text:?} is not a prefix of the stream"
                    );
                }
            }
        }
        for key in ["held_user_messages", "pending_user_messages"] {
            for m in r[key].as_array().into_iter().flatten() {
                present.push(m["id"].as_str().unwrap().to_owned());
            }
        }
        for id in &acked {
            assert!(
                present.contains(id),
                "iteration {i}: acknowledged input {id} was lost"
            );
        }
        total_acked += acked.len();
        total_recovered += acked.iter().filter(|id| present.contains(id)).count();
        // Clear held input so the next iteration starts clean of old entries.
        for m in r["held_user_messages"].as_array().into_iter().flatten() {
            let id = m["id"].as_str().unwrap();
            let method = if m["origin"] == "steer" {
                "turn/unsteer"
            } else {
                "turn/dequeue"
            };
            let key = if m["origin"] == "steer" {
                "steer_id"
            } else {
                "queue_id"
            };
            app.call(method, json!({"thread_id": th, key: id}));
        }
        acked.clear();
    }
    eprintln!(
        "kill loop: {iterations} kill -9 restarts, {total_sent} inputs sent, {total_acked} acknowledged, {total_recovered} recovered after restart"
    );
}

#[test]
fn listings_follow_changes_and_running_status() {
    let (fake, mut app, th) = setup();
    let l = app.call("thread/list", json!({}));
    assert_eq!(l["threads"].as_array().unwrap().len(), 1);
    assert_eq!(l["threads"][0]["status"], "idle");
    app.call(
        "thread/rename",
        json!({"thread_id": th, "title": "Renamed"}),
    );
    let l = app.call("thread/list", json!({}));
    assert_eq!(l["threads"][0]["title"], "Renamed");
    app.call("thread/start", json!({}));
    let l = app.call("thread/list", json!({}));
    assert_eq!(l["threads"].as_array().unwrap().len(), 2);
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let turn = start_turn(&mut app, &th, "go");
    wait_delta(&mut app);
    let l = app.call("thread/list", json!({}));
    let row = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == json!(th))
        .unwrap()
        .clone();
    assert_eq!(row["status"], "in_progress");
    app.call("turn/interrupt", json!({"thread_id": th}));
    turn_end(&mut app, &turn);
    let l = app.call("thread/list", json!({}));
    let row = l["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == json!(th))
        .unwrap()
        .clone();
    assert_eq!(row["status"], "idle");
}

#[test]
fn a_second_process_sees_fresh_state_and_cannot_archive_a_foreign_execution() {
    let (fake, mut a, th) = setup();
    let mut b = App::spawn_in(&a.home.clone(), &a.workdir.clone(), &[]);
    fake.push(Script::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo go; sleep 1"}"#,
    ));
    fake.push(Script::text(&["Done."]));
    let turn = start_turn(&mut a, &th, "work");
    a.notification("item/toolCall/outputDelta");
    // B loads the conversation while A runs it.
    let r = b.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(r["thread"]["turns"][0]["status"], "in_progress");
    let e = b.call_err("thread/archive", json!({"thread_id": th, "archived": true}));
    assert_eq!(e["code"], "thread_busy", "{e}");
    turn_end(&mut a, &turn);
    // After A settles, B's view is fresh.
    let r = b.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    let t0 = &r["thread"]["turns"][0];
    assert_eq!(t0["status"], "completed", "{r}");
    assert_eq!(
        t0["items"].as_array().unwrap().last().unwrap()["text"],
        "Done."
    );
    let r = b.call("thread/archive", json!({"thread_id": th, "archived": true}));
    assert_eq!(r["thread"]["archived"], true);
}
