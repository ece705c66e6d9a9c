//! Issue 11, provider part: `wuu exec --json` after a retry, and real provider servers
//! (llama.cpp's `llama-server`, servers that answer a stream with JSON, SSE error bodies).
//!
//! Every test runs the real binary (`wuu exec --json`) against the loopback fake provider
//! (`tests/support/fake_provider.rs`) sending the real wire formats, each with its own
//! `WUU_HOME`, `HOME` and workspace; a few also drive the provider library directly over
//! the same loopback HTTP to look at the normalized stream.

mod support;

use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::fake_provider::{Ending, FakeProvider, Part, Proto, Script, ServerKind};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    fake: FakeProvider,
}

struct Outcome {
    code: i32,
    events: Vec<Value>,
    stderr: String,
}

impl Outcome {
    fn types(&self) -> Vec<&str> {
        self.events
            .iter()
            .map(|e| e["type"].as_str().unwrap_or(""))
            .collect()
    }
    fn all(&self, ty: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == ty).collect()
    }
    fn result(&self) -> &Value {
        self.events.last().expect("a result line")
    }
    /// The message a consumer following the spec rebuilds: `agent_message_delta`
    /// appends, `agent_message_final` replaces, `turn_started` clears.
    fn consumer_message(&self) -> String {
        let mut m = String::new();
        for e in &self.events {
            match e["type"].as_str().unwrap_or("") {
                "turn_started" => m.clear(),
                "agent_message_delta" => m.push_str(e["delta"].as_str().unwrap()),
                "agent_message_final" => m = e["message"].as_str().unwrap().to_string(),
                _ => {}
            }
        }
        m
    }
}

fn proto_config(fake: &FakeProvider, proto: Proto) -> Value {
    let (ty, base) = match proto {
        Proto::Chat => ("openai-compatible", fake.base_url()),
        Proto::Responses => ("openai-responses", fake.base_url()),
        Proto::Anthropic => ("anthropic", fake.root_url()),
    };
    json!({"type": ty, "base_url": base, "model": "m",
        "max_retries": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5,
        "stream_idle_timeout_ms": 10_000, "stream_connect_timeout_ms": 5_000})
}

impl Env {
    fn new(proto: Proto) -> Env {
        Self::with(proto, |_| {})
    }

    /// An environment whose provider config is `proto`'s, changed by `tweak`.
    fn with(proto: Proto, tweak: impl FnOnce(&mut Value)) -> Env {
        let fake = FakeProvider::start();
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let mut p = proto_config(&fake, proto);
        tweak(&mut p);
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": p},
            "agent": {"auto_title": false},
        });
        std::fs::write(home.path().join("config.json"), cfg.to_string()).unwrap();
        Env { home, ws, fake }
    }

    fn ws(&self) -> &Path {
        self.ws.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        let (sub, rest) = match args.first() {
            Some(&s) if s == "resume" => (Some(s), &args[1..]),
            _ => (None, args),
        };
        let mut c = Command::new(BIN);
        c.arg("exec")
            .args(sub)
            .arg("--cd")
            .arg(self.ws())
            .arg("--json")
            .args(rest)
            .env("WUU_HOME", self.home.path())
            .env("HOME", self.home.path())
            .env_remove("RUST_LOG")
            .env_remove("WUU_EXEC_BACKPRESSURE_MS")
            .current_dir(self.ws())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str]) -> Outcome {
        finish(self.command(args).spawn().expect("spawn wuu"))
    }

    /// Request bodies the fake provider received (POSTs only).
    fn bodies(&self) -> Vec<Value> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .map(|r| r.body)
            .collect()
    }
}

fn finish(mut child: Child) -> Outcome {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let end = Instant::now() + Duration::from_secs(90);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("wuu exec hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    let mut events = vec![];
    for (i, line) in stdout.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {i} is not JSON ({e}): {line:.300}"));
        assert!(v["type"].is_string(), "line {i} has no type");
        events.push(v);
    }
    let results = events.iter().filter(|e| e["type"] == "result").count();
    assert_eq!(results, 1, "exactly one result: {stdout:.3000}\n{stderr}");
    let r = events.last().unwrap();
    assert_eq!(r["type"], "result", "result is last");
    assert_eq!(r["exit_code"], code, "{r}");
    Outcome {
        code,
        events,
        stderr,
    }
}

/// The `result` fields added for issue 11: every one present with its type.
fn assert_result_shape(o: &Outcome) {
    let r = o.result();
    for k in ["error_category", "error_code", "error", "final_message"] {
        assert!(r[k].is_string(), "result.{k}: {r}");
    }
    assert!(r["final_message_partial"].is_boolean(), "{r}");
    for k in [
        "input_tokens",
        "output_tokens",
        "cache_creation_tokens",
        "cache_read_tokens",
    ] {
        assert!(r["usage"][k].is_u64(), "result.usage.{k}: {r}");
    }
}

// ---------------------------------------------------------------------------------------
// `wuu exec --json` after a retry
// ---------------------------------------------------------------------------------------

#[test]
fn a_retried_stream_withdraws_the_failed_attempts_text() {
    let env = Env::new(Proto::Chat);
    env.fake.push(Script::truncated(&["w0 ", "w1 ", "w2 "]));
    env.fake.push(Script::truncated(&["w0 ", "w1 ", "w2 "]));
    env.fake
        .push(Script::text(&["w0 ", "w1 ", "w2 ", "w3 ", "w4 ", "w5"]));
    let o = env.run(&["answer"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.consumer_message(), "w0 w1 w2 w3 w4 w5", "{:?}", o.types());
    assert_result_shape(&o);
    let r = o.result();
    assert_eq!(r["final_message"], "w0 w1 w2 w3 w4 w5");
    assert_eq!(r["final_message_partial"], false);
    assert_eq!(r["error_category"], "");
    // Retries are progress, not errors.
    assert!(o.all("error").is_empty(), "{:?}", o.types());
    let rc = o.all("stream_reconnect");
    let statuses: Vec<&str> = rc.iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["retrying", "reconnected", "retrying", "reconnected"],
        "{rc:?}"
    );
    assert_eq!(rc[0]["retry_count"], 1);
    assert_eq!(rc[2]["retry_count"], 2);
    assert_eq!(rc[0]["max_retries"], 2);
    assert_eq!(rc[0]["reason"], "incomplete_stream");
    assert!(!rc[0]["message"].as_str().unwrap().is_empty());
    // Each failed attempt's text is withdrawn before the retry's text starts.
    let t = o.types();
    let first_final = t.iter().position(|t| *t == "agent_message_final").unwrap();
    assert!(first_final < t.iter().position(|t| *t == "stream_reconnect").unwrap());
    assert_eq!(o.all("agent_message_final")[0]["message"], "");
}

#[test]
fn a_run_that_fails_after_stalled_attempts_reports_one_partial_text() {
    let env = Env::with(Proto::Responses, |p| {
        p["stream_idle_timeout_ms"] = json!(300);
    });
    for _ in 0..3 {
        env.fake
            .push(Script::stall(&["Hello"], Duration::from_secs(20)));
    }
    let o = env.run(&["answer"]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    assert_result_shape(&o);
    let r = o.result();
    assert_eq!(r["final_message"], "Hello", "{r}");
    assert_eq!(o.consumer_message(), "Hello");
    assert_eq!(r["final_message_partial"], true);
    assert_eq!(r["error_category"], "network", "{r}");
    assert_eq!(r["error_code"], "incomplete_stream", "{r}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("no data for 0.3 s (stream_idle_timeout_ms 300)"),
        "{r}"
    );
    let tf = o.all("turn_failed");
    assert_eq!(tf.len(), 1);
    assert_eq!(tf[0]["category"], r["error_category"]);
    assert_eq!(tf[0]["code"], "incomplete_stream");
    let retries = o
        .all("stream_reconnect")
        .iter()
        .filter(|e| e["status"] == "retrying")
        .count();
    assert_eq!(retries, 2);
    assert!(o.all("error").is_empty());
    assert_eq!(env.fake.requests().len(), 3);
}

#[test]
fn result_carries_the_usage_consumed_before_a_failure() {
    let env = Env::new(Proto::Chat);
    env.fake.push(
        Script::tool_call("call_1", "bash", r#"{"command":"echo hi"}"#).usage(
            support::fake_provider::FakeUsage {
                input: 100,
                cached: 0,
                output: 7,
                reasoning: 0,
            },
        ),
    );
    env.fake.push(Script::status(
        support::fake_provider::HttpError::Unauthorized,
    ));
    let o = env.run(&["run a command"]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    assert_result_shape(&o);
    let r = o.result();
    assert_eq!(r["usage"]["input_tokens"], 100, "{r}");
    assert_eq!(r["usage"]["output_tokens"], 7, "{r}");
    assert_eq!(r["error_category"], "auth");
    assert_eq!(r["error_code"], "authentication");
    assert_eq!(r["final_message_partial"], true);
}

#[test]
fn usage_limit_429s_are_not_retried() {
    let bodies = [
        // ChatGPT / Codex plans.
        (
            json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached", "plan_type": "plus", "resets_in_seconds": 7200}}),
            None,
        ),
        // OpenAI API billing.
        (
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "code": "insufficient_quota"}}),
            None,
        ),
        // Anthropic-style rate-limit body whose wait is hours: a usage limit.
        (
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Claude usage limit reached. Your limit will reset at 5pm."}}),
            None,
        ),
        (
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded your rate limit"}}),
            Some("7200"),
        ),
    ];
    for (body, retry_after) in bodies {
        let env = Env::new(Proto::Chat);
        let mut headers = vec![];
        if let Some(ra) = retry_after {
            headers.push(("retry-after".to_string(), ra.to_string()));
        }
        for _ in 0..3 {
            env.fake.push(Script::Raw {
                status: 429,
                headers: headers.clone(),
                body: body.to_string(),
            });
        }
        let t0 = Instant::now();
        let o = env.run(&["answer"]);
        assert_eq!(o.code, 7, "{body}: {}", o.stderr);
        assert_eq!(env.fake.requests().len(), 1, "{body}: retried");
        let r = o.result();
        assert_eq!(r["error_code"], "quota", "{r}");
        assert_eq!(r["error_category"], "provider", "{r}");
        assert!(o.all("stream_reconnect").is_empty());
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    // A transient rate limit still is retried.
    let env = Env::new(Proto::Chat);
    env.fake.push(Script::rate_limited("0"));
    env.fake.push(Script::text(&["ok"]));
    let o = env.run(&["answer"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(env.fake.requests().len(), 2);
}

#[test]
fn total_retry_time_of_a_silent_provider_is_capped() {
    let env = Env::with(Proto::Chat, |p| {
        p["stream_idle_timeout_ms"] = json!(300);
        p["max_retries"] = json!(20);
        p["max_retry_time_ms"] = json!(1_000);
    });
    for _ in 0..21 {
        env.fake.push(Script::stall(&[], Duration::from_secs(30)));
    }
    let t0 = Instant::now();
    let o = env.run(&["answer"]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    let n = env.fake.requests().len();
    assert!((2..=5).contains(&n), "{n} attempts");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    let r = o.result();
    assert!(
        r["error"].as_str().unwrap().contains("max_retry_time_ms"),
        "{r}"
    );
}

#[test]
fn a_consumer_that_pauses_for_seconds_does_not_fail_the_run() {
    let env = Env::new(Proto::Chat);
    env.fake.push(Script::many_deltas(60_000, "abcdefghij"));
    let child = env.command(&["stream a lot"]).spawn().unwrap();
    // A CI log shipper that stops reading for a while: pipe, writer queue and
    // subscription fill; the producer must wait, not overflow.
    std::thread::sleep(Duration::from_secs(4));
    let o = finish(child);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.result()["final_message"].as_str().unwrap().len(), 600_000);
}

// ---------------------------------------------------------------------------------------
// Real provider servers
// ---------------------------------------------------------------------------------------

/// The assistant texts of a Responses request's `input`.
fn responses_assistant_texts(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message" && i["role"] == "assistant")
        .map(|i| i["content"][0]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn llama_server_responses_are_keyed_by_item_id_and_not_doubled() {
    let env = Env::new(Proto::Responses);
    env.fake.push(
        Script::stream(vec![
            Part::Reasoning(vec!["think".into(), "ing".into()]),
            Part::Text(vec!["Hel".into(), "lo ".into(), "world".into()]),
        ])
        .server(ServerKind::LlamaServer),
    );
    let o = env.run(&["hi"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let deltas: String = o
        .all("agent_message_delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Hello world");
    assert_eq!(o.result()["final_message"], "Hello world");
    // History sent back holds the answer once.
    env.fake
        .push(Script::text(&["second"]).server(ServerKind::LlamaServer));
    let o = env.run(&["resume", "--last", "again"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bodies = env.bodies();
    assert_eq!(responses_assistant_texts(&bodies[1]), ["Hello world"]);
}

#[test]
fn llama_server_tool_calls_run_once_with_their_arguments() {
    let env = Env::new(Proto::Responses);
    env.fake.push(
        Script::text_then_tool_call("Running.", "call_7", "bash", r#"{"command":"echo hi"}"#)
            .server(ServerKind::LlamaServer),
    );
    env.fake
        .push(Script::text(&["it printed hi"]).server(ServerKind::LlamaServer));
    let o = env.run(&["run echo"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let started = o.all("tool_started");
    assert_eq!(started.len(), 1, "{:?}", o.types());
    assert_eq!(started[0]["arguments"], r#"{"command":"echo hi"}"#);
    let done = o.all("command_completed");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["status"], "completed");
    let bodies = env.bodies();
    assert_eq!(bodies.len(), 2);
    let input = bodies[1]["input"].as_array().unwrap();
    let calls: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 1, "{input:?}");
    assert_eq!(calls[0]["call_id"], "fc_call_7");
    assert_eq!(calls[0]["arguments"], r#"{"command":"echo hi"}"#);
    assert_eq!(responses_assistant_texts(&bodies[1]), ["Running."]);
    assert_eq!(o.result()["final_message"], "it printed hi");
}

#[test]
fn llama_server_function_call_arguments_are_streamed() {
    use wuu::provider::{self, ChatMessage, ChatRequest, Role, StreamEvent};
    let fake = FakeProvider::start();
    fake.push(
        Script::tool_call("call_1", "read_file", r#"{"path":"README.md"}"#)
            .server(ServerKind::LlamaServer),
    );
    let cfg: wuu::config::ProviderConfig =
        serde_json::from_value(proto_config(&fake, Proto::Responses)).unwrap();
    let p = provider::build("fake", &cfg, Path::new(".")).unwrap();
    let req = ChatRequest {
        model: "m".into(),
        system: String::new(),
        messages: vec![ChatMessage::text(Role::User, "read it")],
        tools: Default::default(),
        effort: None,
        max_output_tokens: None,
        prompt_cache_key: None,
        output_schema: None,
        temperature: None,
    };
    let mut evs = vec![];
    p.stream(&req, &mut |e| {
        evs.push(e);
        true
    });
    let kinds: Vec<&str> = evs
        .iter()
        .map(|e| match e {
            StreamEvent::ToolCallStart { .. } => "start",
            StreamEvent::ToolCallDelta { .. } => "delta",
            StreamEvent::ToolCallEnd { .. } => "end",
            StreamEvent::Done { .. } => "done",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["start", "delta", "delta", "delta", "end", "done"],
        "{evs:?}"
    );
    let args: String = evs
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(args, r#"{"path":"README.md"}"#);
}

/// Whether a request body's history holds a tool call (any protocol's shape).
fn history_has_call(body: &Value) -> bool {
    let s = body.to_string();
    s.contains("\"function_call\"")
        || s.contains("\"tool_calls\"")
        || s.contains("\"tool_use\"")
        || s.contains("\"function_call_output\"")
        || s.contains("\"tool_result\"")
}

#[test]
fn a_tool_call_cut_off_by_the_output_limit_never_runs_nor_enters_history() {
    let cases = [
        (Proto::Chat, ServerKind::Vendor),
        (Proto::Responses, ServerKind::Vendor),
        (Proto::Anthropic, ServerKind::Vendor),
        (Proto::Responses, ServerKind::LlamaServer),
    ];
    for (proto, server) in cases {
        let env = Env::new(proto);
        env.fake.push(
            Script::stream(vec![
                Part::Text(vec!["Let me look.".into()]),
                Part::ToolCall {
                    id: "call_cut".into(),
                    name: "bash".into(),
                    args: vec!["{\"comm".into()],
                },
            ])
            .server(server)
            .ending(Ending::Length),
        );
        let marker = env.ws().join("ran");
        let o = env.run(&["look"]);
        let ctx = format!("{proto:?}/{server:?}");
        assert_eq!(o.code, 0, "{ctx}: {}", o.stderr);
        assert!(o.all("tool_started").is_empty(), "{ctx}: {:?}", o.types());
        assert!(o.all("command_started").is_empty(), "{ctx}");
        assert!(!marker.exists());
        assert_eq!(env.fake.requests().len(), 1, "{ctx}: the call was answered");
        let r = o.result();
        assert_eq!(r["final_message"], "Let me look.", "{ctx}: {r}");
        assert_eq!(r["final_message_partial"], true, "{ctx}: {r}");
        // The next turn's history has the text, not the call.
        env.fake.push(Script::text(&["ok"]).server(server));
        let o = env.run(&["resume", "--last", "go on"]);
        assert_eq!(o.code, 0, "{ctx}: {}", o.stderr);
        let bodies = env.bodies();
        assert_eq!(bodies.len(), 2, "{ctx}");
        assert!(!history_has_call(&bodies[1]), "{ctx}: {}", bodies[1]);
        assert!(bodies[1].to_string().contains("Let me look."), "{ctx}");
    }
}

#[test]
fn llama_context_size_error_is_context_overflow() {
    let env = Env::new(Proto::Chat);
    env.fake.push(Script::Raw {
        status: 400,
        headers: vec![],
        body: json!({"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}).to_string(),
    });
    let o = env.run(&["hi"]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    let r = o.result();
    assert_eq!(r["error_code"], "context_overflow", "{r}");
    assert!(r["error"]
        .as_str()
        .unwrap()
        .contains("exceeds the available context size"));
    assert_eq!(env.fake.requests().len(), 1);
}

#[test]
fn max_output_tokens_is_sent_as_each_protocol_names_it() {
    for proto in [Proto::Chat, Proto::Responses, Proto::Anthropic] {
        let field = match proto {
            Proto::Responses => "max_output_tokens",
            _ => "max_tokens",
        };
        // Unset: Chat and Responses send none, Messages its default.
        let env = Env::new(proto);
        env.fake.push(Script::text(&["a"]));
        assert_eq!(env.run(&["hi"]).code, 0);
        let b = &env.bodies()[0];
        match proto {
            Proto::Anthropic => assert_eq!(b["max_tokens"], 8192),
            _ => assert!(b.get(field).is_none(), "{proto:?}: {b}"),
        }
        // Per provider, and per model over it.
        let env = Env::with(proto, |p| p["max_output_tokens"] = json!(1234));
        env.fake.push(Script::text(&["a"]));
        assert_eq!(env.run(&["hi"]).code, 0);
        assert_eq!(env.bodies()[0][field], 1234, "{proto:?}");
        let env = Env::with(proto, |p| {
            p["max_output_tokens"] = json!(1234);
            p["model_max_output_tokens"] = json!({"m": 77, "other": 5});
        });
        env.fake.push(Script::text(&["a"]));
        assert_eq!(env.run(&["hi"]).code, 0);
        assert_eq!(env.bodies()[0][field], 77, "{proto:?}");
    }
}

#[test]
fn a_complete_json_body_answering_a_stream_is_accepted() {
    for proto in [Proto::Chat, Proto::Responses, Proto::Anthropic] {
        let env = Env::new(proto);
        env.fake.push(
            Script::text_then_tool_call("Checking.", "call_j", "bash", r#"{"command":"echo hi"}"#)
                .json_body(),
        );
        env.fake.push(Script::text(&["Hello there"]).json_body());
        let o = env.run(&["hi"]);
        assert_eq!(o.code, 0, "{proto:?}: {}", o.stderr);
        assert_eq!(o.result()["final_message"], "Hello there", "{proto:?}");
        let done = o.all("command_completed");
        assert_eq!(done.len(), 1, "{proto:?}: {:?}", o.types());
        assert_eq!(done[0]["status"], "completed");
        assert_eq!(o.result()["usage"]["output_tokens"], 4, "{proto:?}");
    }
}

#[test]
fn an_sse_bodied_5xx_shows_a_clean_message() {
    let env = Env::with(Proto::Chat, |p| p["max_retries"] = json!(1));
    for _ in 0..2 {
        env.fake.push(Script::Raw {
            status: 500,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: "data: {\"error\":{\"code\":500,\"message\":\"llama: the model crashed\",\"type\":\"server_error\"}}\n\n".into(),
        });
    }
    let o = env.run(&["hi"]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    let r = o.result();
    let e = r["error"].as_str().unwrap();
    assert_eq!(e, "llama: the model crashed", "{r}");
    assert!(!o.stderr.contains("data:"), "{}", o.stderr);
    assert_eq!(env.fake.requests().len(), 2, "5xx is retried");
    let statuses: Vec<&str> = o
        .all("stream_reconnect")
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["retrying", "failed"]);
}
