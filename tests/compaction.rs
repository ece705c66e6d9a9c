//! End-to-end tests of context compaction (spec `app-server.md` §4.9 rule 7,
//! `providers.md` §6.6): the real `wuu app-server` against the fake provider on loopback
//! for each wire protocol. The fake enforces a context window (refusing a larger
//! request with its protocol's overflow error, llama.cpp's on Chat) and answers from a
//! script function, so hundreds of turns take seconds. Assertions are on the requests
//! the fake received and on the items the clients see.

mod support;

use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{body_tokens, FakeProvider, HttpError, Proto, Script};

const ALL: [Proto; 3] = [Proto::Chat, Proto::Responses, Proto::Anthropic];

/// A phrase of the summarisation request's system prompt (and of no other request).
const SUMMARY_MARK: &str = "You are summarising the earlier part of a conversation";

/// Opens the summary message in a compacted history.
const SUMMARY_PREFIX: &str = "the earlier part of this conversation was compacted";

/// Runs `f` once per protocol, in parallel; a panic names its protocol.
fn each_proto(f: impl Fn(Proto) + Sync) {
    std::thread::scope(|sc| {
        let handles: Vec<_> = ALL
            .iter()
            .map(|&p| {
                let f = &f;
                (p, sc.spawn(move || f(p)))
            })
            .collect();
        let mut failed = vec![];
        for (p, h) in handles {
            if let Err(e) = h.join() {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failed.push(format!("{p:?}: {msg}"));
            }
        }
        assert!(
            failed.is_empty(),
            "failed protocols:\n{}",
            failed.join("\n")
        );
    });
}

/// One conversation over a fake provider, with `agent` settings and the provider's
/// `context_window` (if any).
struct Env {
    proto: Proto,
    fp: FakeProvider,
    app: App,
    tid: String,
    _root: tempfile::TempDir,
}

impl Env {
    fn new(proto: Proto, window: Option<u64>, agent: Value) -> Env {
        let fp = FakeProvider::start();
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let ws = root.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let ws: PathBuf = ws.canonicalize().unwrap();
        std::fs::write(
            ws.join("notes.txt"),
            "note line of the workspace\n".repeat(110),
        )
        .unwrap();
        let (ty, base) = match proto {
            Proto::Chat => ("openai-compatible", fp.base_url()),
            Proto::Responses => ("openai-responses", fp.base_url()),
            Proto::Anthropic => ("anthropic", fp.root_url()),
        };
        let mut pc = json!({"type": ty, "base_url": base, "model": "fake-model",
            "max_retries": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5});
        if let Some(w) = window {
            pc["context_window"] = json!(w);
        }
        let mut agent_cfg = json!({"auto_title": false});
        if let Value::Object(m) = agent {
            for (k, v) in m {
                agent_cfg[k] = v;
            }
        }
        let cfg =
            json!({"default_provider": "fake", "providers": {"fake": pc}, "agent": agent_cfg});
        std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        let mut app = App::spawn_in(&home, &ws, &[]);
        let r = app.call("thread/start", json!({}));
        let tid = r["thread"]["id"].as_str().unwrap().to_owned();
        Env {
            proto,
            fp,
            app,
            tid,
            _root: root,
        }
    }

    /// The notifications of this thread until `turn/completed` / `turn/error` (the
    /// terminal frame last).
    fn finish(&mut self) -> Vec<Value> {
        let mut frames = vec![];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .app
                .next_within(left)
                .unwrap_or_else(|| panic!("{:?}: no turn end within 30 s", self.proto));
            let m = v["method"].as_str().unwrap_or("").to_owned();
            let terminal = (m == "turn/completed" || m == "turn/error")
                && v["params"]["thread_id"] == json!(self.tid);
            frames.push(v);
            if terminal {
                return frames;
            }
        }
    }

    fn turn(&mut self, prompt: &str) -> Vec<Value> {
        self.app.call(
            "turn/start",
            json!({"thread_id": self.tid, "prompt": prompt}),
        );
        self.finish()
    }

    /// Non-summary requests received so far.
    fn agent_requests(&self) -> Vec<Value> {
        self.fp
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && !is_summary(&r.body))
            .map(|r| r.body)
            .collect()
    }
}

fn is_summary(body: &Value) -> bool {
    body.to_string().contains(SUMMARY_MARK)
}

fn end(frames: &[Value]) -> &Value {
    frames.last().unwrap()
}

/// `context_compaction` items of a turn's final snapshot.
fn compactions(frames: &[Value]) -> Vec<Value> {
    end(frames)["params"]["turn"]["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|i| i["type"] == "context_compaction")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

fn call_id(proto: Proto, n: u64) -> String {
    match proto {
        Proto::Anthropic => format!("toolu_fake_{n}"),
        _ => format!("call_fake_{n}"),
    }
}

/// Whether the request's last input is a tool result (the model saw its tool's output).
fn ends_with_tool_result(proto: Proto, body: &Value) -> bool {
    match proto {
        Proto::Chat => body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "tool"),
        Proto::Responses => body["input"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["type"] == "function_call_output"),
        Proto::Anthropic => body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_array())
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result")),
    }
}

/// Tool-call ids the request declares and the ids its tool results answer, in order.
fn calls_and_results(proto: Proto, body: &Value) -> Vec<(bool, String)> {
    let mut out = vec![];
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    match proto {
        Proto::Chat => {
            for m in body["messages"].as_array().into_iter().flatten() {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    out.push((true, s(&c["id"])));
                }
                if m["role"] == "tool" {
                    out.push((false, s(&m["tool_call_id"])));
                }
            }
        }
        Proto::Responses => {
            for i in body["input"].as_array().into_iter().flatten() {
                match i["type"].as_str() {
                    Some("function_call") => out.push((true, s(&i["call_id"]))),
                    Some("function_call_output") => out.push((false, s(&i["call_id"]))),
                    _ => {}
                }
            }
        }
        Proto::Anthropic => {
            for m in body["messages"].as_array().into_iter().flatten() {
                for b in m["content"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("tool_use") => out.push((true, s(&b["id"]))),
                        Some("tool_result") => out.push((false, s(&b["tool_use_id"]))),
                        _ => {}
                    }
                }
            }
        }
    }
    out
}

/// Asserts every tool result answers a call declared before it, and every call has
/// its result.
fn assert_paired(proto: Proto, body: &Value) {
    let seq = calls_and_results(proto, body);
    let mut open: Vec<String> = vec![];
    for (is_call, id) in &seq {
        if *is_call {
            open.push(id.clone());
        } else {
            let pos = open.iter().position(|c| c == id);
            assert!(pos.is_some(), "{proto:?}: orphaned tool result {id}");
            open.retain(|c| c != id);
        }
    }
    assert!(open.is_empty(), "{proto:?}: calls without results {open:?}");
}

/// The scripted model: a summary for a summarisation request, a final answer after a
/// tool result, else a `read_file` call.
fn scripted_model(fp: &FakeProvider, summaries: Arc<AtomicU64>) {
    let calls = AtomicU64::new(0);
    fp.set_fallback(move |proto, body| {
        if is_summary(body) {
            let n = summaries.fetch_add(1, Ordering::SeqCst) + 1;
            return Script::text(&[
                &format!("SUMMARY-{n}: the user asked for numbered turns; "),
                "notes.txt was read each time.",
            ]);
        }
        if ends_with_tool_result(proto, body) {
            return Script::text(&[
                "Done with this turn. ",
                &"The notes say the same thing again. ".repeat(20),
            ]);
        }
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        Script::tool_call(&call_id(proto, n), "read_file", r#"{"path":"notes.txt"}"#)
    });
}

fn prompt(n: usize) -> String {
    format!(
        "turn {n}: please read the notes again. {}",
        "Some context for this request. ".repeat(40)
    )
}

#[test]
fn a_300_turn_conversation_in_a_16k_window_never_overflows() {
    const WINDOW: u64 = 16_000;
    each_proto(|proto| {
        let mut env = Env::new(
            proto,
            Some(WINDOW),
            json!({"compact_threshold_pct": 0.7, "compact_keep_recent_tokens": 3000}),
        );
        env.fp.set_context_window(WINDOW);
        let summaries = Arc::new(AtomicU64::new(0));
        scripted_model(&env.fp, summaries.clone());
        let mut compacted = 0;
        for n in 1..=300 {
            let frames = env.turn(&prompt(n));
            let e = end(&frames);
            assert_eq!(
                e["method"], "turn/completed",
                "{proto:?}: turn {n} failed: {}",
                e["params"]
            );
            for c in compactions(&frames) {
                assert_eq!(c["status"], "completed", "{proto:?}: {c}");
                assert!(c["summary"].as_str().unwrap().starts_with("SUMMARY-"));
                compacted += 1;
            }
        }
        let made = summaries.load(Ordering::SeqCst);
        assert!(made >= 10, "{proto:?}: only {made} summaries in 300 turns");
        assert_eq!(compacted, made, "{proto:?}: one item per summary");
        let reqs = env.agent_requests();
        let over: Vec<u64> = reqs
            .iter()
            .map(body_tokens)
            .filter(|t| *t > WINDOW)
            .collect();
        // The threshold compacts before the window is reached; an estimate that falls
        // short is caught by the overflow retry, which the turn survived.
        assert!(
            over.len() <= 3,
            "{proto:?}: {} requests overflowed: {over:?}",
            over.len()
        );
        for body in &reqs {
            assert_paired(proto, body);
        }
        // The last request: the newest summary, the recent turns verbatim, not the
        // early ones.
        let last = reqs.last().unwrap().to_string();
        assert!(
            last.contains(SUMMARY_PREFIX),
            "{proto:?}: no summary in {last:.300}"
        );
        assert!(
            last.contains(&format!("SUMMARY-{made}:")),
            "{proto:?}: not the newest summary"
        );
        assert!(
            last.contains("turn 300:") && last.contains("turn 299:"),
            "{proto:?}"
        );
        assert!(
            !last.contains("turn 1:") && !last.contains("turn 150:"),
            "{proto:?}"
        );
        // Clients still read the whole history.
        let h = env
            .app
            .call("thread/resume", json!({"session_id": env.tid}));
        let turns = h["thread"]["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 300, "{proto:?}");
        assert!(turns[0].to_string().contains("turn 1:"));
    });
}

#[test]
fn compact_start_summarises_an_idle_conversation_and_resume_sends_the_compacted_form() {
    each_proto(|proto| {
        let mut env = Env::new(proto, None, json!({"compact_keep_recent_tokens": 200}));
        let summaries = Arc::new(AtomicU64::new(0));
        scripted_model(&env.fp, summaries.clone());
        for n in 1..=4 {
            assert_eq!(end(&env.turn(&prompt(n)))["method"], "turn/completed");
        }
        let before = env.fp.requests().len();
        let r = env
            .app
            .call("thread/compact/start", json!({"thread_id": env.tid}));
        assert_eq!(r["turn"]["kind"], "compact", "{proto:?}: {r}");
        let frames = env.finish();
        assert_eq!(
            end(&frames)["method"],
            "turn/completed",
            "{proto:?}: {}",
            end(&frames)
        );
        let items = compactions(&frames);
        assert_eq!(items.len(), 1, "{proto:?}");
        assert_eq!(items[0]["status"], "completed");
        assert_eq!(items[0]["reason"], "manual");
        assert_eq!(
            items[0]["summary"],
            "SUMMARY-1: the user asked for numbered turns; notes.txt was read each time."
        );
        let started = frames.iter().any(|f| {
            f["method"] == "item/started" && f["params"]["item"]["type"] == "context_compaction"
        });
        assert!(started, "{proto:?}: no item/started for the compaction");
        // One request: the summary; its usage is counted.
        let reqs = env.fp.requests();
        assert_eq!(reqs.len(), before + 1, "{proto:?}");
        assert!(is_summary(&reqs[before].body));
        assert!(reqs[before].body.to_string().contains("turn 1:"));
        let usage = frames.iter().any(|f| f["method"] == "turn/usage");
        assert!(usage, "{proto:?}: the summary's usage was not reported");

        // The next turn sends the summary and the recent turn, not the early ones.
        assert_eq!(end(&env.turn(&prompt(5)))["method"], "turn/completed");
        let last = env.agent_requests().last().unwrap().to_string();
        assert!(
            last.contains("SUMMARY-1:") && last.contains("turn 5:"),
            "{proto:?}"
        );
        assert!(!last.contains("turn 1:"), "{proto:?}: {last:.400}");

        // After a restart, resume sends the compacted form as well.
        env.app.restart();
        env.app
            .call("thread/resume", json!({"session_id": env.tid}));
        scripted_model(&env.fp, summaries.clone());
        assert_eq!(end(&env.turn(&prompt(6)))["method"], "turn/completed");
        let last = env.agent_requests().last().unwrap().to_string();
        assert!(
            last.contains("SUMMARY-1:") && last.contains("turn 6:"),
            "{proto:?}"
        );
        assert!(
            !last.contains("turn 1:") && !last.contains("/compact"),
            "{proto:?}"
        );
        // A fork of the whole conversation sends the compacted form too.
        let f = env.app.call("thread/fork", json!({"thread_id": env.tid}));
        env.tid = f["thread"]["id"].as_str().unwrap().to_owned();
        assert_eq!(end(&env.turn(&prompt(7)))["method"], "turn/completed");
        let last = env.agent_requests().last().unwrap().to_string();
        assert!(
            last.contains("SUMMARY-1:") && last.contains("turn 7:"),
            "{proto:?}"
        );
        assert!(!last.contains("turn 1:"), "{proto:?}");
        // The full history stays readable, compaction item included.
        let h = env
            .app
            .call("thread/resume", json!({"session_id": env.tid}));
        let text = h["thread"]["turns"].to_string();
        assert!(
            text.contains("turn 1:") && text.contains("context_compaction"),
            "{proto:?}"
        );
    });
}

#[test]
fn a_compact_prompt_starts_a_compact_turn_and_a_busy_conversation_refuses_compaction() {
    let mut env = Env::new(
        Proto::Responses,
        None,
        json!({"compact_keep_recent_tokens": 100}),
    );
    let summaries = Arc::new(AtomicU64::new(0));
    scripted_model(&env.fp, summaries.clone());
    for n in 1..=3 {
        assert_eq!(end(&env.turn(&prompt(n)))["method"], "turn/completed");
    }
    // `/compact` as a prompt: a compact turn, no agent request.
    let before = env.agent_requests().len();
    let r = env.app.call(
        "turn/start",
        json!({"thread_id": env.tid, "prompt": "/compact"}),
    );
    assert_eq!(r["turn"]["kind"], "compact");
    let frames = env.finish();
    assert_eq!(end(&frames)["method"], "turn/completed");
    assert_eq!(compactions(&frames).len(), 1);
    assert_eq!(env.agent_requests().len(), before);
    assert_eq!(summaries.load(Ordering::SeqCst), 1);

    // Busy: a turn whose answer stalls.
    env.fp
        .push(Script::stall(&["working"], Duration::from_secs(20)));
    env.app.call(
        "turn/start",
        json!({"thread_id": env.tid, "prompt": "slow"}),
    );
    env.app.notification("item/agentMessage/delta");
    let e = env
        .app
        .call_err("thread/compact/start", json!({"thread_id": env.tid}));
    assert_eq!(e["code"], "thread_busy", "{e}");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("already has a running turn"));
    env.app
        .call("turn/interrupt", json!({"thread_id": env.tid}));
    let frames = env.finish();
    assert_eq!(end(&frames)["params"]["turn"]["status"], "interrupted");

    // A compact turn whose summary request stalls: busy, not steerable, interruptible
    // (its item ends failed and the history stays as it was).
    env.fp
        .push(Script::stall(&["SUMMARY-"], Duration::from_secs(20)));
    let r = env
        .app
        .call("thread/compact/start", json!({"thread_id": env.tid}));
    let turn_id = r["turn"]["id"].as_str().unwrap().to_owned();
    env.app.wait_for("compaction started", |v| {
        v["method"] == "item/started" && v["params"]["item"]["type"] == "context_compaction"
    });
    let e = env.app.call_err(
        "turn/steer",
        json!({"thread_id": env.tid, "prompt": "more", "expected_turn_id": turn_id}),
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("cannot steer a compact turn"),
        "{e}"
    );
    let e = env
        .app
        .call_err("thread/compact/start", json!({"thread_id": env.tid}));
    assert_eq!(e["code"], "thread_busy", "{e}");
    env.app
        .call("turn/interrupt", json!({"thread_id": env.tid}));
    let frames = env.finish();
    assert_eq!(end(&frames)["params"]["turn"]["status"], "interrupted");
    let items = compactions(&frames);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["status"], "failed", "{}", items[0]);
}

#[test]
fn a_context_overflow_compacts_and_retries_the_step_once() {
    each_proto(|proto| {
        let mut env = Env::new(proto, None, json!({"compact_keep_recent_tokens": 100}));
        for n in 1..=3 {
            env.fp.push(Script::text(&[&format!("answer {n}")]));
            assert_eq!(end(&env.turn(&prompt(n)))["method"], "turn/completed");
        }
        let overflow = || {
            Script::status(HttpError::BadRequest(
                "This model's maximum context length is 16000 tokens".into(),
            ))
        };
        // Overflow → summary → the same step again, compacted.
        env.fp.push(overflow());
        env.fp
            .push(Script::text(&["SUMMARY-A of turns one to three"]));
        env.fp.push(Script::text(&["answer 4"]));
        let before = env.fp.requests().len();
        let frames = env.turn(&prompt(4));
        assert_eq!(
            end(&frames)["method"],
            "turn/completed",
            "{proto:?}: {}",
            end(&frames)
        );
        let items = compactions(&frames);
        assert_eq!(items.len(), 1, "{proto:?}");
        assert_eq!(items[0]["reason"], "overflow");
        let reqs = env.fp.requests();
        assert_eq!(reqs.len(), before + 3, "{proto:?}");
        assert!(is_summary(&reqs[before + 1].body));
        let retried = reqs[before + 2].body.to_string();
        assert!(
            retried.contains("SUMMARY-A") && retried.contains("turn 4:"),
            "{proto:?}"
        );
        assert!(!retried.contains("turn 1:"), "{proto:?}");

        // A second overflow of the same step is not retried again.
        env.fp.push(overflow());
        env.fp.push(Script::text(&["SUMMARY-B"]));
        env.fp.push(overflow());
        let frames = env.turn(&prompt(5));
        let e = end(&frames);
        assert_eq!(e["method"], "turn/error", "{proto:?}: {e}");
        assert_eq!(e["params"]["code"], "context_overflow", "{proto:?}: {e}");
        assert_eq!(env.fp.scripts_left(), 0);
    });
}

#[test]
fn disable_auto_compact_turns_compaction_off_live() {
    let mut env = Env::new(
        Proto::Chat,
        Some(8_000),
        json!({"compact_keep_recent_tokens": 100}),
    );
    let summaries = Arc::new(AtomicU64::new(0));
    scripted_model(&env.fp, summaries.clone());
    env.app.call(
        "config/advanced/update",
        json!({"disable_auto_compact": true}),
    );
    for n in 1..=4 {
        assert_eq!(end(&env.turn(&prompt(n)))["method"], "turn/completed");
    }
    assert_eq!(
        summaries.load(Ordering::SeqCst),
        0,
        "compacted while disabled"
    );
    env.app.call(
        "config/advanced/update",
        json!({"disable_auto_compact": false}),
    );
    assert_eq!(end(&env.turn(&prompt(5)))["method"], "turn/completed");
    assert!(
        summaries.load(Ordering::SeqCst) >= 1,
        "not compacted once enabled"
    );
}

#[test]
fn a_compact_prompt_in_run_start_runs_one_compact_turn() {
    let mut env = Env::new(
        Proto::Responses,
        None,
        json!({"compact_keep_recent_tokens": 200}),
    );
    let summaries = Arc::new(AtomicU64::new(0));
    scripted_model(&env.fp, summaries.clone());
    for n in 1..=3 {
        assert_eq!(end(&env.turn(&prompt(n)))["method"], "turn/completed");
    }
    // With an output schema it is refused (a compaction has no answer to validate).
    let e = env.app.call_err(
        "run/start",
        json!({"thread_id": env.tid, "prompt": "/compact",
               "output_schema": {"type": "object"}}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("output_schema"),
        "{e}"
    );
    let r = env.app.call(
        "run/start",
        json!({"thread_id": env.tid, "prompt": "/compact"}),
    );
    let run_id = r["run"]["id"].as_str().unwrap().to_owned();
    let frames = env.finish();
    assert_eq!(end(&frames)["method"], "turn/completed", "{}", end(&frames));
    assert_eq!(end(&frames)["params"]["turn"]["kind"], "compact");
    let items = compactions(&frames);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["status"], "completed");
    // The run settles completed.
    let is_settled = |v: &Value| {
        v["method"] == "run/updated"
            && v["params"]["run"]["id"] == run_id.as_str()
            && v["params"]["run"]["status"] != "running"
    };
    let settled = match frames.iter().find(|v| is_settled(v)) {
        Some(v) => v.clone(),
        None => env.app.wait_for("run settled", is_settled),
    };
    assert_eq!(settled["params"]["run"]["status"], "completed", "{settled}");
    // The next turn sends the summary, not the early turns.
    assert_eq!(end(&env.turn(&prompt(4)))["method"], "turn/completed");
    let last = env.agent_requests().last().unwrap().to_string();
    assert!(last.contains("SUMMARY-1:") && last.contains("turn 4:"));
    assert!(!last.contains("turn 1:"));
}
