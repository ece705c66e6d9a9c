//! End-to-end tests of the built-in engine (issue 3): the real `wuu app-server` against
//! the fake provider on loopback, for each wire protocol (openai-compatible,
//! openai-responses, anthropic). Every notification is schema-checked by `App`.
//!
//! Each test runs its three protocols on scoped threads, each with its own fake provider
//! and server; waits are on notifications (or bounded polls of `/proc`), never on sleeps.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, FakeUsage, HttpError, Proto, Script};

const ALL: [Proto; 3] = [Proto::Chat, Proto::Responses, Proto::Anthropic];

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

/// A provider config for `proto` pointing at `fp`, with fast retries.
fn provider_config(fp: &FakeProvider, proto: Proto) -> Value {
    let (ty, base) = match proto {
        Proto::Chat => ("openai-compatible", fp.base_url()),
        Proto::Responses => ("openai-responses", fp.base_url()),
        Proto::Anthropic => ("anthropic", fp.root_url()),
    };
    json!({"type": ty, "base_url": base, "model": "fake-model",
        "max_retries": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5,
        "stream_idle_timeout_ms": 10_000, "stream_connect_timeout_ms": 5_000})
}

/// A call id in the protocol's usual form.
fn call_id(proto: Proto, n: u32) -> String {
    match proto {
        Proto::Anthropic => format!("toolu_fake_{n}"),
        _ => format!("call_fake_{n}"),
    }
}

/// One conversation: a fake provider, a server over `root/home` + `root/ws`, a thread.
struct Env {
    proto: Proto,
    fp: FakeProvider,
    app: App,
    tid: String,
    ws: PathBuf,
    root: tempfile::TempDir,
}

impl Env {
    fn new(proto: Proto) -> Env {
        Env::with(proto, |_| {}, json!({}), |_| {})
    }

    /// `tweak` edits the provider config; `thread` are the `thread/start` params;
    /// `prepare` runs on the workspace before the server starts.
    fn with(
        proto: Proto,
        tweak: impl FnOnce(&mut Value),
        thread: Value,
        prepare: impl FnOnce(&Path),
    ) -> Env {
        let fp = FakeProvider::start();
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let ws = root.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        prepare(&ws);
        let mut pc = provider_config(&fp, proto);
        tweak(&mut pc);
        // Automatic titles are tested in tests/history.rs; here they would add requests.
        let cfg = json!({"default_provider": "fake", "providers": {"fake": pc},
            "agent": {"auto_title": false}});
        std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        let mut app = App::spawn_in(&home, &ws, &[]);
        let r = app.call("thread/start", thread);
        let tid = r["thread"]["id"].as_str().unwrap().to_owned();
        Env {
            proto,
            fp,
            app,
            tid,
            ws,
            root,
        }
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// Sends `turn/start` (extra params merged) and returns the response.
    fn start_turn(&mut self, prompt: &str, extra: Value) -> Value {
        let mut p = json!({"thread_id": self.tid, "prompt": prompt});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                p[k] = v;
            }
        }
        self.app.call("turn/start", p)
    }

    /// Collects this thread's notifications until `turn/completed` or `turn/error`.
    fn finish(&mut self) -> TurnLog {
        let mut frames = vec![];
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.app.next_within(left).unwrap_or_else(|| {
                panic!(
                    "{:?}: no turn end within 20 s; frames: {}",
                    self.proto,
                    brief(&frames)
                )
            });
            let m = v["method"].as_str().unwrap_or("").to_owned();
            let terminal = (m == "turn/completed" || m == "turn/error")
                && v["params"]["thread_id"] == json!(self.tid);
            frames.push(v);
            if terminal {
                return TurnLog { frames };
            }
        }
    }

    /// `turn/start` + [`Env::finish`].
    fn turn(&mut self, prompt: &str) -> TurnLog {
        self.start_turn(prompt, json!({}));
        self.finish()
    }
}

fn brief(frames: &[Value]) -> String {
    frames
        .iter()
        .map(|f| {
            let s = f.to_string();
            s.chars().take(300).collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The notifications of one turn, terminal last.
struct TurnLog {
    frames: Vec<Value>,
}

impl TurnLog {
    fn end(&self) -> &Value {
        self.frames.last().unwrap()
    }
    fn method(&self) -> &str {
        self.end()["method"].as_str().unwrap()
    }
    fn turn(&self) -> &Value {
        &self.end()["params"]["turn"]
    }
    fn items(&self) -> &Vec<Value> {
        self.turn()["items"].as_array().unwrap()
    }
    fn all(&self, method: &str) -> Vec<&Value> {
        self.frames
            .iter()
            .filter(|f| f["method"] == json!(method))
            .map(|f| &f["params"])
            .collect()
    }
    fn deltas(&self, method: &str) -> String {
        self.all(method)
            .iter()
            .map(|p| p["delta"].as_str().unwrap())
            .collect()
    }
    fn completed(&self) -> &Value {
        assert_eq!(self.method(), "turn/completed", "{}", self.dump());
        &self.end()["params"]
    }
    fn error(&self) -> &Value {
        assert_eq!(self.method(), "turn/error", "{}", self.dump());
        assert_eq!(
            self.all("turn/completed").len(),
            0,
            "never both turn/completed and turn/error"
        );
        &self.end()["params"]
    }
    fn dump(&self) -> String {
        brief(&self.frames)
    }
    /// Items started with `type`.
    fn started_of_type(&self, ty: &str) -> Vec<&Value> {
        self.all("item/started")
            .into_iter()
            .filter(|p| p["item"]["type"] == json!(ty))
            .map(|p| &p["item"])
            .collect()
    }
    fn removed_ids(&self) -> Vec<&str> {
        self.all("item/removed")
            .iter()
            .map(|p| p["item_id"].as_str().unwrap())
            .collect()
    }
}

fn items_of_type<'a>(items: &'a [Value], ty: &str) -> Vec<&'a Value> {
    items.iter().filter(|i| i["type"] == json!(ty)).collect()
}

/// The system prompt text of a recorded request body.
fn system_text(proto: Proto, body: &Value) -> String {
    match proto {
        Proto::Chat => body["messages"][0]
            .get("content")
            .filter(|_| body["messages"][0]["role"] == "system")
            .map(|c| c.to_string())
            .unwrap_or_default(),
        Proto::Responses => body["instructions"].to_string(),
        Proto::Anthropic => body["system"].to_string(),
    }
}

/// Checks that every tool call of a recorded request is answered right after the
/// message that made it, in call order; returns `(call id, result text)` in order.
fn paired_results(proto: Proto, body: &Value) -> Vec<(String, String)> {
    let mut out = vec![];
    match proto {
        Proto::Chat => {
            let msgs = body["messages"].as_array().unwrap();
            let mut i = 0;
            while i < msgs.len() {
                let ids: Vec<String> = msgs[i]["tool_calls"]
                    .as_array()
                    .map(|c| {
                        c.iter()
                            .map(|c| c["id"].as_str().unwrap().to_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                assert!(
                    msgs[i]["role"] != "tool" || ids.is_empty(),
                    "stray tool message at {i}: {body}"
                );
                for (k, id) in ids.iter().enumerate() {
                    let r = &msgs[i + 1 + k];
                    assert_eq!(r["role"], "tool", "result of {id} follows its call: {body}");
                    assert_eq!(r["tool_call_id"], json!(id), "result order: {body}");
                    out.push((id.clone(), r["content"].to_string()));
                }
                i += 1 + ids.len();
            }
        }
        Proto::Responses => {
            let items = body["input"].as_array().unwrap();
            let mut i = 0;
            while i < items.len() {
                let mut ids = vec![];
                while i < items.len() && items[i]["type"] == "function_call" {
                    ids.push(items[i]["call_id"].as_str().unwrap().to_owned());
                    i += 1;
                }
                for id in &ids {
                    let r = &items[i];
                    assert_eq!(r["type"], "function_call_output", "{body}");
                    assert_eq!(r["call_id"], json!(id), "result order: {body}");
                    out.push((id.clone(), r["output"].to_string()));
                    i += 1;
                }
                if ids.is_empty() {
                    assert_ne!(
                        items[i]["type"], "function_call_output",
                        "stray output: {body}"
                    );
                    i += 1;
                }
            }
        }
        Proto::Anthropic => {
            let msgs = body["messages"].as_array().unwrap();
            for (k, m) in msgs.iter().enumerate() {
                let blocks = m["content"].as_array().cloned().unwrap_or_default();
                let ids: Vec<String> = blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| b["id"].as_str().unwrap().to_owned())
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                assert_eq!(m["role"], "assistant");
                let next = &msgs[k + 1];
                assert_eq!(next["role"], "user", "{body}");
                let results = next["content"].as_array().unwrap();
                for (j, id) in ids.iter().enumerate() {
                    assert_eq!(results[j]["type"], "tool_result", "{body}");
                    assert_eq!(results[j]["tool_use_id"], json!(id), "result order: {body}");
                    out.push((id.clone(), results[j]["content"].to_string()));
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------

#[test]
fn text_answer_streams_deltas_and_completes_with_usage() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        let usage = FakeUsage {
            input: 100,
            cached: 40,
            output: 7,
            reasoning: 0,
        };
        e.fp.push(Script::text(&["Hel", "lo ", "world"]).usage(usage));
        let t = e.turn("Say hello");
        let done = t.completed();
        assert_eq!(done["content"], "Hello world");
        assert_eq!(t.deltas("item/agentMessage/delta"), "Hello world");
        assert_eq!(t.all("item/agentMessage/delta").len(), 3);
        let agent = t.started_of_type("agent_message");
        assert_eq!(agent.len(), 1, "{}", t.dump());
        let agent_id = agent[0]["id"].clone();
        let completed: Vec<_> = t
            .all("item/completed")
            .into_iter()
            .filter(|p| p["item"]["id"] == agent_id)
            .collect();
        assert_eq!(completed.len(), 1);
        assert_eq!(completed[0]["item"]["terminal"], true);
        assert_eq!(completed[0]["item"]["text"], "Hello world");
        assert_eq!(completed[0]["item"]["status"], "completed");
        // Usage: fresh input = input − cached, cache reads separate.
        assert_eq!(done["input_tokens"], 60, "{done}");
        assert_eq!(done["cache_read_tokens"], 40, "{done}");
        assert_eq!(done["output_tokens"], 7, "{done}");
        assert_eq!(done["turn"]["status"], "completed");
        assert_eq!(done["turn"]["input_tokens"], 60);
        assert_eq!(done["turn"]["output_tokens"], 7);
        let u = t.all("turn/usage");
        let last = u.last().expect("turn/usage");
        assert_eq!(
            (&last["input_tokens"], &last["output_tokens"]),
            (&json!(60), &json!(7))
        );
        // The turn's items: the user message and the final answer.
        let types: Vec<&str> = t
            .items()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["user_message", "agent_message"]);
        assert_eq!(e.fp.requests().len(), 1);
    });
}

#[test]
fn reasoning_streams_as_reasoning_deltas() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::reasoning_then_text(
            &["Let me ", "think."],
            &["The ", "answer."],
        ));
        let t = e.turn("Think first");
        assert_eq!(t.completed()["content"], "The answer.");
        assert_eq!(t.deltas("item/reasoning/delta"), "Let me think.");
        let r = items_of_type(t.items(), "reasoning");
        assert_eq!(r.len(), 1, "{}", t.dump());
        assert_eq!(r[0]["text"], "Let me think.");
        assert_eq!(r[0]["status"], "completed");
        // Reasoning deltas come before the answer's deltas.
        let first_text = t
            .frames
            .iter()
            .position(|f| f["method"] == "item/agentMessage/delta")
            .unwrap();
        let last_reasoning = t
            .frames
            .iter()
            .rposition(|f| f["method"] == "item/reasoning/delta")
            .unwrap();
        assert!(last_reasoning < first_text);
    });
}

#[test]
fn multibyte_characters_split_across_chunks_arrive_intact() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        let chunks = ["héllo ", "世界", " 🎉✓"];
        e.fp.push(Script::text(&chunks).split_utf8());
        let t = e.turn("unicode");
        let want: String = chunks.concat();
        assert_eq!(t.completed()["content"], json!(want));
        assert_eq!(t.deltas("item/agentMessage/delta"), want);
        assert!(!t.deltas("item/agentMessage/delta").contains('\u{FFFD}'));
    });
}

#[test]
fn agents_md_is_in_the_system_prompt() {
    each_proto(|proto| {
        let marker = "Always answer in haiku (agents-marker-7c1d).";
        let mut e = Env::with(
            proto,
            |_| {},
            json!({}),
            |ws| std::fs::write(ws.join("AGENTS.md"), format!("# Rules\n{marker}\n")).unwrap(),
        );
        e.fp.push(Script::text(&["ok"]));
        e.turn("hi").completed();
        let reqs = e.fp.requests();
        let sys = system_text(proto, &reqs[0].body);
        assert!(sys.contains("agents-marker-7c1d"), "{proto:?}: {sys}");
        // Not smuggled in as a user message.
        let user_text = reqs[0].body["messages"]
            .to_string()
            .replace(&sys, "")
            .contains("agents-marker-7c1d");
        assert!(!user_text || proto == Proto::Chat);
    });
}

// ---------------------------------------------------------------------------------------
// Tool loop
// ---------------------------------------------------------------------------------------

#[test]
fn tool_loop_reads_edits_runs_and_answers() {
    each_proto(|proto| {
        let mut e = Env::with(
            proto,
            |_| {},
            json!({}),
            |ws| std::fs::write(ws.join("notes.txt"), "alpha\nomega\n").unwrap(),
        );
        let (c1, c2, c3) = (call_id(proto, 1), call_id(proto, 2), call_id(proto, 3));
        e.fp.push(Script::tool_call(
            &c1,
            "read_file",
            r#"{"path":"notes.txt"}"#,
        ));
        e.fp.push(Script::text_then_tool_call(
            "Fixing it.",
            &c2,
            "edit_file",
            r#"{"path":"notes.txt","old_string":"alpha","new_string":"beta"}"#,
        ));
        e.fp.push(Script::tool_call(
            &c3,
            "bash",
            r#"{"command":"cat notes.txt; echo out-marker-93"}"#,
        ));
        e.fp.push(Script::text(&["Done: ", "alpha is now beta."]));
        let t = e.turn("Replace alpha with beta in notes.txt");
        let done = t.completed();
        assert_eq!(done["content"], "Done: alpha is now beta.");
        assert_eq!(
            std::fs::read_to_string(e.ws.join("notes.txt")).unwrap(),
            "beta\nomega\n"
        );
        // Tool items: three, completed, in order, with arguments streamed as deltas.
        let calls = items_of_type(t.items(), "tool_call");
        let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["read_file", "edit_file", "bash"], "{}", t.dump());
        for c in &calls {
            assert_eq!(c["status"], "completed", "{c}");
        }
        assert!(calls[0]["result"].as_str().unwrap().contains("alpha"));
        let args: String = t
            .all("item/toolCall/delta")
            .iter()
            .filter(|p| p["item_id"] == calls[1]["id"])
            .map(|p| p["delta"].as_str().unwrap())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap()["new_string"],
            "beta"
        );
        // The command's output streamed as outputDelta on the bash item.
        let out: String = t
            .all("item/toolCall/outputDelta")
            .iter()
            .filter(|p| p["item_id"] == calls[2]["id"])
            .map(|p| p["delta"].as_str().unwrap())
            .collect();
        assert!(
            out.contains("beta") && out.contains("out-marker-93"),
            "{out}"
        );
        // Only the last message is terminal; the text before the edit is not.
        let agents = items_of_type(t.items(), "agent_message");
        assert_eq!(agents.len(), 2, "{}", t.dump());
        assert_eq!(agents[0]["text"], "Fixing it.");
        assert_ne!(agents[0]["terminal"], true);
        assert_eq!(agents[1]["terminal"], true);
        // Requests: each pairs every call with its result, in order.
        let reqs = e.fp.requests();
        assert_eq!(reqs.len(), 4);
        for (n, r) in reqs.iter().enumerate() {
            let pairs = paired_results(proto, &r.body);
            let ids: Vec<&str> = pairs.iter().map(|(i, _)| i.as_str()).collect();
            assert_eq!(ids, [&c1, &c2, &c3][..n], "request {n}");
        }
        let pairs = paired_results(proto, &reqs[3].body);
        assert!(pairs[0].1.contains("alpha"), "{pairs:?}");
        assert!(pairs[2].1.contains("out-marker-93"), "{pairs:?}");
        // Usage is summed over the four requests.
        assert_eq!(done["input_tokens"], 48);
        assert_eq!(done["output_tokens"], 8);
    });
}

// ---------------------------------------------------------------------------------------
// Failures and retries
// ---------------------------------------------------------------------------------------

/// A failure then a text answer: a `stream_reconnect` item appears, is removed, and the
/// turn completes with the answer only.
fn assert_recovered(t: &TurnLog, answer: &str) {
    assert_eq!(t.completed()["content"], answer, "{}", t.dump());
    let rec = t.started_of_type("stream_reconnect");
    assert!(!rec.is_empty(), "no stream_reconnect item: {}", t.dump());
    let rec_id = rec[0]["id"].as_str().unwrap();
    assert!(rec.iter().all(|r| r["id"] == rec[0]["id"]), "stable id");
    assert_eq!(rec[0]["retry_count"], 1, "{}", rec[0]);
    assert_eq!(rec[0]["max_retries"], 2, "{}", rec[0]);
    assert!(t.removed_ids().contains(&rec_id), "{}", t.dump());
    let types: Vec<&str> = t
        .items()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["user_message", "agent_message"], "{}", t.dump());
    assert_eq!(t.items()[1]["text"], answer);
    assert_eq!(t.items()[1]["terminal"], true);
}

#[test]
fn rate_limited_429_with_retry_after_then_success() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::rate_limited("1"));
        e.fp.push(Script::text(&["after ", "429"]));
        let t = e.turn("hi");
        assert_recovered(&t, "after 429");
        assert_eq!(
            t.started_of_type("stream_reconnect")[0]["reason"],
            "rate_limit"
        );
        assert_eq!(e.fp.requests().len(), 2);
    });
}

#[test]
fn overloaded_529_then_success() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::overloaded());
        e.fp.push(Script::text(&["after 529"]));
        let t = e.turn("hi");
        assert_recovered(&t, "after 529");
        assert_eq!(
            t.started_of_type("stream_reconnect")[0]["reason"],
            "overloaded"
        );
        assert_eq!(e.fp.requests().len(), 2);
    });
}

#[test]
fn truncated_stream_then_success_drops_the_partial_text() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::truncated(&["par", "tial"]));
        e.fp.push(Script::text(&["whole ", "answer"]));
        let t = e.turn("hi");
        assert_recovered(&t, "whole answer");
        // The void attempt's message was announced, then removed.
        let agents = t.started_of_type("agent_message");
        assert_eq!(agents.len(), 2, "{}", t.dump());
        assert!(t.removed_ids().contains(&agents[0]["id"].as_str().unwrap()));
        assert_eq!(
            t.started_of_type("stream_reconnect")[0]["reason"],
            "incomplete_stream"
        );
    });
}

#[test]
fn stalled_stream_is_retried_after_the_idle_timeout() {
    each_proto(|proto| {
        let mut e = Env::with(
            proto,
            |c| c["stream_idle_timeout_ms"] = json!(400),
            json!({}),
            |_| {},
        );
        e.fp.push(Script::stall(&["sta"], Duration::from_secs(30)));
        e.fp.push(Script::text(&["unstuck"]));
        let t = e.turn("hi");
        assert_recovered(&t, "unstuck");
        let rec = t.started_of_type("stream_reconnect");
        assert!(
            rec[0]["text"].as_str().unwrap().contains("stalled"),
            "{}",
            rec[0]
        );
    });
}

#[test]
fn stall_on_every_attempt_fails_the_turn_after_the_retry_budget() {
    each_proto(|proto| {
        let mut e = Env::with(
            proto,
            |c| {
                c["stream_idle_timeout_ms"] = json!(300);
                c["max_retries"] = json!(1);
            },
            json!({}),
            |_| {},
        );
        for _ in 0..2 {
            e.fp.push(Script::stall(&["x"], Duration::from_secs(30)));
        }
        let t = e.turn("hi");
        let err = t.error();
        assert_eq!(err["turn"]["status"], "failed");
        assert_eq!(err["category"], "network", "{err}");
        let rec = &err["turn"]["error"]["recovery"];
        assert_eq!(rec["attempt_count"], 2, "{err}");
        assert_eq!(rec["stop_reason"], "retry_limit", "{err}");
        assert_eq!(e.fp.requests().len(), 2);
        // The last attempt connected (its reconnect row was removed then) and its
        // visible text is kept; an error item explains the failure.
        let items = t.items();
        assert!(items_of_type(items, "stream_reconnect").is_empty());
        let agents = items_of_type(items, "agent_message");
        assert_eq!(agents.len(), 1, "{}", t.dump());
        assert_eq!(
            (&agents[0]["text"], &agents[0]["status"]),
            (&json!("x"), &json!("completed"))
        );
        let errs = items_of_type(items, "error");
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0]["status"], "failed");
    });
}

#[test]
fn rate_limited_on_every_attempt_freezes_the_reconnect_row_as_failed() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        for _ in 0..3 {
            e.fp.push(Script::rate_limited("0"));
        }
        let t = e.turn("hi");
        let err = t.error();
        assert_eq!(err["turn"]["status"], "failed");
        assert_eq!(err["status_code"], 429, "{err}");
        let rec = &err["turn"]["error"]["recovery"];
        assert_eq!(
            (&rec["attempt_count"], &rec["retry_count"]),
            (&json!(3), &json!(2)),
            "{err}"
        );
        assert_eq!(rec["stop_reason"], "retry_limit", "{err}");
        assert_eq!(e.fp.requests().len(), 3);
        let started = t.started_of_type("stream_reconnect");
        assert_eq!(started.len(), 2, "announced once per retry: {}", t.dump());
        assert_eq!(started[0]["id"], started[1]["id"]);
        assert_eq!(
            (&started[0]["retry_count"], &started[1]["retry_count"]),
            (&json!(1), &json!(2))
        );
        let rec_items = items_of_type(t.items(), "stream_reconnect");
        assert_eq!(rec_items.len(), 1, "{}", t.dump());
        assert_eq!(rec_items[0]["status"], "failed");
        assert!(t.removed_ids().is_empty());
    });
}

/// A non-retryable HTTP status ends the turn at once with `category`.
fn non_retryable(error: HttpError, category: &str, status: u16) {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::status(error.clone()));
        e.fp.push(Script::text(&["must not be used"]));
        let t = e.turn("hi");
        let err = t.error();
        assert_eq!(err["category"], category, "{err}");
        assert_eq!(err["status_code"], status, "{err}");
        assert_eq!(err["turn"]["status"], "failed");
        assert_eq!(err["turn"]["error"]["category"], category);
        assert_eq!(
            err["turn"]["error"]["recovery"]["stop_reason"],
            "non_retryable"
        );
        assert_eq!(e.fp.requests().len(), 1, "exactly one request");
        assert_eq!(e.fp.scripts_left(), 1);
        assert!(t.started_of_type("stream_reconnect").is_empty());
    });
}

#[test]
fn unauthorized_401_is_auth_with_one_request() {
    non_retryable(HttpError::Unauthorized, "auth", 401);
}

#[test]
fn model_not_found_404_is_provider() {
    non_retryable(HttpError::ModelNotFound, "provider", 404);
}

#[test]
fn bad_request_400_is_invalid_request() {
    non_retryable(
        HttpError::BadRequest("messages: field required".into()),
        "invalid_request",
        400,
    );
}

// ---------------------------------------------------------------------------------------
// Interrupts and busy threads
// ---------------------------------------------------------------------------------------

#[test]
fn interrupt_during_streaming_keeps_the_partial_text() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::stall(
            &["partial ", "text"],
            Duration::from_secs(30),
        ));
        e.start_turn("hi", json!({}));
        e.app.wait_for("the last delta", |v| {
            v["method"] == "item/agentMessage/delta" && v["params"]["delta"] == "text"
        });
        let t0 = Instant::now();
        let id = e.app.send("turn/interrupt", json!({"thread_id": e.tid}));
        let r = e.app.response(&id);
        assert_eq!(r["result"], json!({"ok": true}), "{r}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        let t = e.finish();
        let err = t.error();
        assert_eq!(err["turn"]["status"], "interrupted");
        assert_eq!(err["category"], "cancelled");
        let agents = items_of_type(t.items(), "agent_message");
        assert_eq!(agents.len(), 1, "{}", t.dump());
        assert_eq!(agents[0]["text"], "partial text");
        assert_eq!(agents[0]["status"], "completed");
        assert!(t.items().iter().all(|i| i["status"] != "in_progress"));
        // The thread is idle again: a new turn is admitted and answered.
        e.fp.push(Script::text(&["again"]));
        assert_eq!(e.turn("again").completed()["content"], "again");
    });
}

/// Pids whose command line contains `marker`.
fn procs_with(marker: &str) -> Vec<String> {
    let mut out = vec![];
    for d in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(c) = std::fs::read(d.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(marker) {
                out.push(format!("{name}: {c}"));
            }
        }
    }
    out
}

#[test]
fn interrupt_during_a_running_command_kills_it() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        // The marker is in both the shell's and the sleep's command line.
        let marker = format!("30.{nanos:09}{}", proto as u8);
        let cmd = format!("echo started; sleep {marker}; echo never");
        e.fp.push(Script::tool_call(
            &call_id(proto, 1),
            "bash",
            &json!({"command": cmd}).to_string(),
        ));
        e.start_turn("sleep", json!({}));
        e.app.wait_for("command output", |v| {
            v["method"] == "item/toolCall/outputDelta"
                && v["params"]["delta"].as_str().unwrap().contains("started")
        });
        // Wait until the sleep itself runs (the shell prints before forking it).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !procs_with(&marker).iter().any(|p| p.contains("sleep 30")) {
            assert!(Instant::now() < deadline, "sleep never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        let t0 = Instant::now();
        let id = e.app.send("turn/interrupt", json!({"thread_id": e.tid}));
        let r = e.app.response(&id);
        assert_eq!(r["result"], json!({"ok": true}));
        let t = e.finish();
        let waited = t0.elapsed();
        let err = t.error();
        assert_eq!(err["turn"]["status"], "interrupted");
        assert!(waited < Duration::from_secs(8), "{waited:?}");
        let calls = items_of_type(t.items(), "tool_call");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["status"], "failed", "{}", calls[0]);
        // By the time the turn has settled, the command's processes are gone.
        assert_eq!(procs_with(&marker), Vec::<String>::new());
        assert_eq!(e.fp.requests().len(), 1, "no request after the interrupt");
    });
}

#[test]
fn second_turn_start_while_busy_is_thread_busy() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(Script::stall(&["busy"], Duration::from_secs(30)));
        e.start_turn("first", json!({}));
        e.app.notification("item/agentMessage/delta");
        let err = e.app.call_err(
            "turn/start",
            json!({"thread_id": e.tid, "prompt": "second"}),
        );
        assert_eq!(err["code"], "thread_busy", "{err}");
        e.app.call("turn/interrupt", json!({"thread_id": e.tid}));
        let t = e.finish();
        assert_eq!(t.error()["turn"]["status"], "interrupted");
        assert_eq!(e.fp.requests().len(), 1);
    });
}

// ---------------------------------------------------------------------------------------
// Permission modes
// ---------------------------------------------------------------------------------------

#[test]
fn read_only_confines_bash_refuses_writes_and_records_denials() {
    each_proto(|proto| {
        let mut e = Env::with(
            proto,
            |_| {},
            json!({"permission_mode": "read_only"}),
            |ws| std::fs::write(ws.join("a.txt"), "keep\n").unwrap(),
        );
        e.fp.push(Script::tool_calls(&[
            (
                &call_id(proto, 1),
                "bash",
                r#"{"command":"touch made-by-bash"}"#,
            ),
            (
                &call_id(proto, 2),
                "write_file",
                r#"{"path":"new.txt","content":"x"}"#,
            ),
            (
                &call_id(proto, 3),
                "edit_file",
                r#"{"path":"a.txt","old_string":"keep","new_string":"lost"}"#,
            ),
            (&call_id(proto, 4), "read_file", r#"{"path":"a.txt"}"#),
        ]));
        e.fp.push(Script::text(&["could not"]));
        let t = e.turn("try");
        let done = t.completed();
        let calls = items_of_type(t.items(), "tool_call");
        assert_eq!(calls.len(), 4, "{}", t.dump());
        // bash runs in the read-only sandbox: the write fails inside the command.
        assert_eq!(calls[0]["status"], "failed", "{}", calls[0]);
        for c in &calls[1..3] {
            assert_eq!(c["status"], "failed", "{c}");
            assert!(
                c["error"].as_str().unwrap().contains("permission denied"),
                "{c}"
            );
        }
        assert_eq!(calls[3]["status"], "completed", "reads are allowed");
        assert!(!e.ws.join("made-by-bash").exists());
        assert!(!e.ws.join("new.txt").exists());
        assert_eq!(
            std::fs::read_to_string(e.ws.join("a.txt")).unwrap(),
            "keep\n"
        );
        let denials = done["turn"]["permission_denials"].as_array().unwrap();
        let tools: Vec<&str> = denials
            .iter()
            .map(|d| d["tool"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["write_file", "edit_file"], "{denials:?}");
        // The model saw the refusals and the command's own error as tool results.
        let pairs = paired_results(proto, &e.fp.requests()[1].body);
        assert_eq!(pairs.len(), 4);
        // The read-only mount (or, without a mount namespace, Landlock) refuses the write.
        assert!(
            pairs[0].1.contains("Read-only file system")
                || pairs[0].1.contains("Permission denied"),
            "{pairs:?}"
        );
        assert!(pairs[1].1.contains("permission denied"), "{pairs:?}");
    });
}

#[test]
fn standard_refuses_writes_outside_the_workspace_and_unconfined_allows_them() {
    each_proto(|proto| {
        for (mode, allowed) in [("standard", false), ("unconfined", true)] {
            let mut e = Env::with(proto, |_| {}, json!({"permission_mode": mode}), |_| {});
            e.fp.push(Script::tool_calls(&[
                (
                    &call_id(proto, 1),
                    "write_file",
                    r#"{"path":"../outside.txt","content":"escaped"}"#,
                ),
                (
                    &call_id(proto, 2),
                    "write_file",
                    r#"{"path":"inside.txt","content":"fine"}"#,
                ),
            ]));
            e.fp.push(Script::text(&["done"]));
            let t = e.turn("write");
            let done = t.completed();
            let outside = e.root.path().join("outside.txt");
            assert_eq!(outside.exists(), allowed, "{mode}");
            assert!(e.ws.join("inside.txt").exists(), "{mode}");
            let calls = items_of_type(t.items(), "tool_call");
            let denials = done["turn"]["permission_denials"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if allowed {
                assert_eq!(calls[0]["status"], "completed", "{}", calls[0]);
                assert!(denials.is_empty());
            } else {
                assert_eq!(calls[0]["status"], "failed", "{}", calls[0]);
                assert!(calls[0]["error"]
                    .as_str()
                    .unwrap()
                    .contains("permission denied"));
                assert_eq!(denials.len(), 1, "{denials:?}");
                assert_eq!(denials[0]["item_id"], calls[0]["id"]);
            }
            assert_eq!(calls[1]["status"], "completed");
        }
    });
}

// ---------------------------------------------------------------------------------------
// Persistence and usage
// ---------------------------------------------------------------------------------------

/// Items without the store's `seq` (assigned at persistence, absent from live frames).
fn without_seq(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .map(|i| {
            let mut i = i.clone();
            i.as_object_mut().unwrap().remove("seq");
            i
        })
        .collect()
}

#[test]
fn history_and_usage_survive_kill_and_restart() {
    each_proto(|proto| {
        let mut e = Env::new(proto);
        e.fp.push(
            Script::tool_call(
                &call_id(proto, 1),
                "bash",
                r#"{"command":"echo persisted"}"#,
            )
            .usage(FakeUsage {
                input: 30,
                cached: 10,
                output: 5,
                reasoning: 0,
            }),
        );
        e.fp.push(
            Script::reasoning_then_text(&["hmm"], &["all ", "good"]).usage(FakeUsage {
                input: 50,
                cached: 20,
                output: 9,
                reasoning: 0,
            }),
        );
        let t = e.turn("run it");
        let done = t.completed().clone();
        assert_eq!(done["input_tokens"], 50);
        assert_eq!(done["cache_read_tokens"], 30);
        assert_eq!(done["output_tokens"], 14);
        let turn_id = done["turn"]["id"].as_str().unwrap().to_owned();
        let live_items = without_seq(t.items());

        e.app.restart(); // SIGKILL, then a fresh process over the same home
        let r = e.app.call("thread/resume", json!({"session_id": e.tid}));
        let turns = r["thread"]["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 1);
        let turn = &turns[0];
        assert_eq!(turn["id"], json!(turn_id));
        assert_eq!(turn["status"], "completed");
        assert_eq!(turn["input_tokens"], 50);
        assert_eq!(turn["output_tokens"], 14);
        assert_eq!(
            without_seq(turn["items"].as_array().unwrap()),
            live_items,
            "the resumed turn has the same items"
        );

        let db = rusqlite::Connection::open_with_flags(
            e.home().join("wuu.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        let (rows, input, output, cached): (i64, i64, i64, i64) = db
            .query_row(
                "SELECT COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens) \
                 FROM usage WHERE thread_id = ?1 AND turn_id = ?2",
                [&e.tid, &turn_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!((rows, input, output, cached), (2, 50, 14, 30));
        let (provider, model): (String, String) = db
            .query_row(
                "SELECT provider, model FROM usage WHERE turn_id = ?1 LIMIT 1",
                [&turn_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((provider.as_str(), model.as_str()), ("fake", "fake-model"));
    });
}

// ---------------------------------------------------------------------------------------
// Anthropic history rules
// ---------------------------------------------------------------------------------------

#[test]
fn anthropic_history_ending_with_assistant_gets_the_guide_in_the_request() {
    let mut e = Env::new(Proto::Anthropic);
    e.fp.push(Script::text(&["first answer"]));
    e.turn("first").completed();
    // A turn with only a PDF attachment adds no text message to the history, so the
    // history the engine sends ends with the previous assistant answer.
    e.fp.push(Script::text(&["continued"]));
    e.start_turn(
        "",
        json!({"files": [{"media_type": "application/pdf", "data": "JVBERi0xLjQK", "filename": "a.pdf"}]}),
    );
    let t = e.finish();
    assert_eq!(t.completed()["content"], "continued");
    let reqs = e.fp.requests();
    assert_eq!(reqs.len(), 2);
    let body = &reqs[1].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(reqs[1].roles(), ["user", "assistant", "user"], "{body}");
    assert_eq!(msgs[1]["content"][0]["text"], "first answer");
    assert_eq!(
        msgs[2]["content"],
        json!([{"type": "text", "text": wuu::provider::anthropic::CONTINUE_GUIDE}])
    );
    // The guide is in the request only, never in the stored history.
    let r = e.app.call("thread/resume", json!({"session_id": e.tid}));
    assert!(!r["thread"]
        .to_string()
        .contains(wuu::provider::anthropic::CONTINUE_GUIDE));
}

/// The commits in the SQLite write-ahead log `wal` from byte `from` on: frames of the
/// log's current generation (their salts match the header's) whose header carries the
/// database size, which only a transaction's last frame does (sqlite.org/fileformat2,
/// "WAL File Format").
fn wal_commits(wal: &[u8], from: usize) -> usize {
    let be = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    if wal.len() < 32 {
        return 0;
    }
    let page = be(wal, 8) as usize;
    let salts = &wal[16..24];
    let frame = 24 + page;
    let first = from.saturating_sub(32).div_ceil(frame);
    let mut commits = 0;
    let mut at = 32 + first * frame;
    while at + frame <= wal.len() {
        if &wal[at + 8..at + 16] == salts && be(wal, at + 4) != 0 {
            commits += 1;
        }
        at += frame;
    }
    commits
}

#[test]
fn a_streamed_turn_commits_its_admission_then_its_answer_usage_and_settlement_together() {
    let fp = FakeProvider::start();
    let mut app = App::start(Some(support::app::config_for(&fp.base_url())));
    let tid = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let wal = app.home.join("wuu.db-wal");
    let usage = FakeUsage {
        input: 30,
        cached: 0,
        output: 5,
        reasoning: 0,
    };
    // The host's heartbeat commits too (every few seconds): a turn that met one is run
    // again, at most twice more.
    let mut commits = vec![];
    for n in 0..3 {
        fp.push(Script::text(&["an ", "answer"]).usage(usage));
        let before = std::fs::metadata(&wal).map_or(0, |m| m.len() as usize);
        app.call("turn/start", json!({"thread_id": tid, "prompt": "go"}));
        let t = tid.clone();
        app.wait_for("turn/completed", move |v| {
            v["method"] == "turn/completed" && v["params"]["thread_id"] == json!(t)
        });
        commits.push(wal_commits(&std::fs::read(&wal).unwrap(), before));
        // Everything the turn announced is stored: the answer, the usage record and
        // the settled turn.
        let store = wuu_store::Store::open_home(&app.home).unwrap();
        let history = store.load_history(&tid).unwrap();
        let last = history.last().unwrap();
        assert_eq!(last.turn.status, "completed");
        let answer = last.items.last().unwrap();
        assert_eq!(
            (answer.item_type.as_str(), answer.status.as_deref()),
            ("agent_message", Some("completed"))
        );
        assert_eq!(answer.body["text"], "an answer");
        assert_eq!(store.list_usage(Some(&tid)).unwrap().len(), n + 1);
        if commits.last() == Some(&2) {
            return;
        }
    }
    panic!("commits per turn: {commits:?}, expected 2 (the admission, the settlement)");
}
