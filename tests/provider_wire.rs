//! The three wire protocols against the fake provider over real loopback HTTP.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::fake_provider::{
    Ending, FakeProvider, FakeUsage, HttpError, Part, Proto, Script, StreamError,
};
use wuu::config::ProviderConfig;
use wuu::provider::{
    self, anthropic::CONTINUE_GUIDE, start_stream, ChatMessage, ChatRequest, FailureKind, Provider,
    ProviderError, ReasoningBlock, Role, StreamEvent, ToolCall, ToolSpec, Usage,
};

const ALL: [Proto; 3] = [Proto::Responses, Proto::Chat, Proto::Anthropic];

fn config(fp: &FakeProvider, proto: Proto) -> ProviderConfig {
    let (ty, base) = match proto {
        Proto::Responses => ("openai-responses", fp.base_url()),
        Proto::Chat => ("openai-compatible", fp.base_url()),
        Proto::Anthropic => ("anthropic", fp.root_url()),
    };
    ProviderConfig {
        provider_type: ty.into(),
        base_url: base,
        model: "fake-model".into(),
        initial_backoff_ms: Some(1),
        max_backoff_ms: Some(5),
        stream_idle_timeout_ms: Some(5_000),
        stream_connect_timeout_ms: Some(5_000),
        ..Default::default()
    }
}

fn provider_with(
    fp: &FakeProvider,
    proto: Proto,
    tweak: impl FnOnce(&mut ProviderConfig),
) -> Arc<dyn Provider> {
    let mut cfg = config(fp, proto);
    tweak(&mut cfg);
    provider::build("fake", &cfg, std::path::Path::new(".")).unwrap()
}

fn provider_for(fp: &FakeProvider, proto: Proto) -> Arc<dyn Provider> {
    provider_with(fp, proto, |_| {})
}

fn request(messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        model: "fake-model".into(),
        system: "You are a test.".into(),
        messages,
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
        }]
        .into(),
        effort: None,
        max_output_tokens: None,
        prompt_cache_key: Some("thread-1".into()),
        output_schema: None,
        temperature: None,
    }
}

fn hello() -> ChatRequest {
    request(vec![ChatMessage::text(Role::User, "Hello?")])
}

fn collect(p: &dyn Provider, req: &ChatRequest) -> Vec<StreamEvent> {
    let mut evs = Vec::new();
    p.stream(req, &mut |e| {
        evs.push(e);
        true
    });
    evs
}

fn text_of(evs: &[StreamEvent]) -> String {
    evs.iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn done_usage(evs: &[StreamEvent]) -> (Usage, Option<String>) {
    match evs.last() {
        Some(StreamEvent::Done {
            usage, stop_reason, ..
        }) => (*usage, stop_reason.clone()),
        e => panic!("expected Done last, got {e:?} in {evs:#?}"),
    }
}

fn failed(evs: &[StreamEvent]) -> ProviderError {
    match evs.last() {
        Some(StreamEvent::Failed { error }) => error.clone(),
        e => panic!("expected Failed last, got {e:?} in {evs:#?}"),
    }
}

fn terminal_count(evs: &[StreamEvent]) -> usize {
    evs.iter()
        .filter(|e| matches!(e, StreamEvent::Done { .. } | StreamEvent::Failed { .. }))
        .count()
}

fn retrying_kinds(evs: &[StreamEvent]) -> Vec<FailureKind> {
    evs.iter()
        .filter_map(|e| match e {
            StreamEvent::Retrying { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect()
}

fn ends(evs: &[StreamEvent]) -> Vec<ToolCall> {
    evs.iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallEnd { call } => Some(call.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn text_answer_events_in_order_with_usage() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::text(&["Hello", " world"]).usage(FakeUsage {
            input: 40,
            cached: 32,
            output: 18,
            reasoning: 3,
        }));
        let p = provider_for(&fp, proto);
        let evs = collect(&*p, &hello());
        assert_eq!(
            &evs[..2],
            &[
                StreamEvent::TextDelta {
                    text: "Hello".into()
                },
                StreamEvent::TextDelta {
                    text: " world".into()
                }
            ],
            "{proto:?}"
        );
        assert_eq!(evs.len(), 3, "{proto:?}: {evs:#?}");
        let (usage, stop) = done_usage(&evs);
        assert_eq!(
            (
                usage.input_tokens,
                usage.cache_read_tokens,
                usage.output_tokens
            ),
            (8, 32, 18),
            "{proto:?}"
        );
        let want_stop = match proto {
            Proto::Anthropic => "end_turn",
            _ => "stop",
        };
        assert_eq!(stop.as_deref(), Some(want_stop));
        let reqs = fp.requests();
        assert_eq!(reqs.len(), 1);
        let path = &reqs[0].path;
        match proto {
            Proto::Responses => {
                assert_eq!(path, "/v1/responses");
                assert_eq!(reqs[0].body["store"], false);
                assert_eq!(reqs[0].body["instructions"], "You are a test.");
                assert_eq!(reqs[0].body["prompt_cache_key"], "thread-1");
                assert_eq!(reqs[0].body["tools"][0]["name"], "read_file");
            }
            Proto::Chat => assert_eq!(path, "/v1/chat/completions"),
            Proto::Anthropic => {
                assert_eq!(path, "/v1/messages");
                assert_eq!(reqs[0].header("anthropic-version"), Some("2023-06-01"));
                assert_eq!(reqs[0].body["system"], "You are a test.");
                assert_eq!(reqs[0].body["tools"][0]["input_schema"]["type"], "object");
            }
        }
        assert_eq!(reqs[0].body["stream"], true);
        assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    }
}

#[test]
fn tool_call_stream_merges_arguments() {
    let args = r#"{"path":"src/main.rs"}"#;
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::tool_call("call_c1", "read_file", args));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        assert!(
            matches!(&evs[0], StreamEvent::ToolCallStart { id, name } if id == "call_c1" && name == "read_file"),
            "{proto:?}: {evs:#?}"
        );
        let deltas: String = evs
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta { id, delta } if id == "call_c1" => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, args, "{proto:?}");
        assert!(
            evs.iter()
                .filter(|e| matches!(e, StreamEvent::ToolCallDelta { .. }))
                .count()
                >= 3
        );
        let calls = ends(&evs);
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (
                calls[0].id.as_str(),
                calls[0].name.as_str(),
                calls[0].arguments.as_str()
            ),
            ("call_c1", "read_file", args)
        );
        let want_stop = if proto == Proto::Anthropic {
            "tool_use"
        } else {
            "tool_calls"
        };
        assert_eq!(done_usage(&evs).1.as_deref(), Some(want_stop), "{proto:?}");
        if proto == Proto::Responses {
            assert_eq!(calls[0].item_id.as_deref(), Some("fc_c1"));
        }
    }
}

#[test]
fn parallel_tool_calls_and_text_then_tool_call() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::tool_calls(&[
            ("call_a", "read_file", r#"{"path":"a"}"#),
            ("call_b", "read_file", r#"{"path":"b"}"#),
        ]));
        fp.push(Script::text_then_tool_call(
            "Reading the file.",
            "call_c",
            "read_file",
            r#"{"path":"c"}"#,
        ));
        let p = provider_for(&fp, proto);
        let calls = ends(&collect(&*p, &hello()));
        let got: Vec<(&str, &str)> = calls
            .iter()
            .map(|c| (c.id.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            got,
            [("call_a", r#"{"path":"a"}"#), ("call_b", r#"{"path":"b"}"#)],
            "{proto:?}"
        );
        let evs = collect(&*p, &hello());
        assert_eq!(text_of(&evs), "Reading the file.");
        let first_text = evs
            .iter()
            .position(|e| matches!(e, StreamEvent::TextDelta { .. }))
            .unwrap();
        let start = evs
            .iter()
            .position(|e| matches!(e, StreamEvent::ToolCallStart { .. }))
            .unwrap();
        assert!(first_text < start, "{proto:?}");
        assert_eq!(ends(&evs).len(), 1);
    }
}

#[test]
fn chat_ollama_style_whole_call_in_one_delta() {
    let fp = FakeProvider::start();
    fp.push(Script::tool_call("call_o", "read_file", r#"{"path":"x"}"#).whole_tool_calls());
    let evs = collect(&*provider_for(&fp, Proto::Chat), &hello());
    let calls = ends(&evs);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].arguments, r#"{"path":"x"}"#);
    assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
}

#[test]
fn reasoning_stream() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::reasoning_then_text(
            &["Let me ", "think."],
            &["Answer."],
        ));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        let reasoning: String = evs
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ReasoningDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, "Let me think.", "{proto:?}");
        let done_at = evs
            .iter()
            .position(|e| matches!(e, StreamEvent::ReasoningDone { .. }))
            .expect("ReasoningDone");
        let text_at = evs
            .iter()
            .position(|e| matches!(e, StreamEvent::TextDelta { .. }))
            .unwrap();
        assert!(done_at < text_at, "{proto:?}: {evs:#?}");
        let StreamEvent::ReasoningDone { block } = &evs[done_at] else {
            unreachable!()
        };
        assert_eq!(
            (
                block.provider.as_str(),
                block.model.as_str(),
                block.text.as_str()
            ),
            ("fake", "fake-model", "Let me think.")
        );
        match proto {
            Proto::Anthropic => assert_eq!(block.signature.as_deref(), Some("sig_fake")),
            Proto::Responses => {
                assert_eq!(block.raw.as_ref().unwrap()["encrypted_content"], "enc_fake")
            }
            Proto::Chat => assert!(block.raw.is_none()),
        }
        assert_eq!(text_of(&evs), "Answer.");
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
    }
}

#[test]
fn reasoning_is_replayed_to_the_same_provider_and_model() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::text(&["ok"]));
        let mut asst = ChatMessage::text(Role::Assistant, "Earlier answer.");
        asst.reasoning.push(ReasoningBlock {
            provider: "fake".into(),
            model: "fake-model".into(),
            text: "prior thought".into(),
            signature: Some("sig_prior".into()),
            redacted: None,
            raw: Some(json!({"id":"rs_prior","type":"reasoning","status":"completed","summary":[],"encrypted_content":"enc_prior"})),
        });
        let req = request(vec![
            ChatMessage::text(Role::User, "a"),
            asst,
            ChatMessage::text(Role::User, "b"),
        ]);
        collect(&*provider_for(&fp, proto), &req);
        let body = &fp.requests()[0].body;
        match proto {
            Proto::Anthropic => {
                assert_eq!(
                    body["messages"][1]["content"][0],
                    json!({"type":"thinking","thinking":"prior thought","signature":"sig_prior"})
                );
            }
            Proto::Responses => {
                assert_eq!(body["input"][1]["type"], "reasoning");
                assert_eq!(body["input"][1]["encrypted_content"], "enc_prior");
                assert!(body["input"][1].get("status").is_none());
            }
            Proto::Chat => assert_eq!(body["messages"][2]["reasoning_content"], "prior thought"),
        }
    }
}

#[test]
fn multibyte_characters_split_across_tcp_writes_stay_intact() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::text(&["héllo ", "你好", " 🦀 ", "ünï"]).split_utf8());
        let evs = collect(&*provider_for(&fp, proto), &hello());
        assert_eq!(text_of(&evs), "héllo 你好 🦀 ünï", "{proto:?}");
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
    }
}

#[test]
fn rate_limit_then_success_retries() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::rate_limited("0"));
        fp.push(Script::text(&["ok"]));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        match &evs[0] {
            StreamEvent::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                kind,
                ..
            } => {
                assert_eq!(
                    (*attempt, *max_attempts, *delay_ms, *kind),
                    (2, 5, 0, FailureKind::RateLimit),
                    "{proto:?}"
                );
            }
            e => panic!("{proto:?}: {e:?}"),
        }
        assert_eq!(text_of(&evs), "ok");
        assert_eq!(terminal_count(&evs), 1);
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
        assert_eq!(fp.requests().len(), 2);
    }
}

#[test]
fn overloaded_and_server_errors_then_success_retry() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::overloaded());
        fp.push(Script::status(HttpError::Server));
        fp.push(Script::text(&["ok"]));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        assert_eq!(
            retrying_kinds(&evs),
            [FailureKind::Overloaded, FailureKind::Server],
            "{proto:?}"
        );
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
        assert_eq!(fp.requests().len(), 3);
    }
}

#[test]
fn retry_budget_is_bounded() {
    for proto in ALL {
        let fp = FakeProvider::start();
        for _ in 0..3 {
            fp.push(Script::status(HttpError::Server));
        }
        let p = provider_with(&fp, proto, |c| c.max_retries = Some(2));
        let evs = collect(&*p, &hello());
        let e = failed(&evs);
        assert_eq!(
            (
                e.kind,
                e.attempts,
                e.max_attempts,
                e.stop_reason.as_str(),
                e.status_code
            ),
            (FailureKind::Server, 3, 3, "retry_limit", Some(500)),
            "{proto:?}"
        );
        assert_eq!(retrying_kinds(&evs).len(), 2);
    }
}

#[test]
fn truncated_stream_then_success_is_retried() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::truncated(&["Hel"]));
        fp.push(Script::text(&["Hello"]));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        assert_eq!(
            evs[0],
            StreamEvent::TextDelta { text: "Hel".into() },
            "{proto:?}"
        );
        assert!(
            matches!(
                &evs[1],
                StreamEvent::Retrying {
                    kind: FailureKind::IncompleteStream,
                    ..
                }
            ),
            "{proto:?}: {evs:#?}"
        );
        assert_eq!(
            evs[2],
            StreamEvent::TextDelta {
                text: "Hello".into()
            }
        );
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
    }
}

#[test]
fn truncated_in_the_middle_of_a_tool_call_never_ends_it_and_is_retried() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(
            Script::tool_call("call_t", "read_file", r#"{"path":"src/main.rs"}"#)
                .ending(Ending::Truncate),
        );
        fp.push(Script::text(&["recovered"]));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        let retry_at = evs
            .iter()
            .position(|e| matches!(e, StreamEvent::Retrying { .. }))
            .expect("retried");
        assert!(
            evs[..retry_at]
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCallStart { .. })),
            "{proto:?}"
        );
        assert!(
            ends(&evs).is_empty(),
            "{proto:?}: a half-built call must not end"
        );
        assert_eq!(text_of(&evs), "recovered");
    }
}

#[test]
fn truncated_after_a_tool_call_end_is_not_retried() {
    for proto in ALL {
        let fp = FakeProvider::start();
        let script = match proto {
            // Chat ends calls at finish_reason; an Ollama-style whole call ends at once.
            Proto::Chat => Script::tool_call("call_x", "read_file", r#"{"path":"a"}"#)
                .whole_tool_calls()
                .ending(Ending::Truncate),
            _ => Script::stream(vec![
                Part::ToolCall {
                    id: "call_x".into(),
                    name: "read_file".into(),
                    args: vec![r#"{"path":"a"}"#.into()],
                },
                Part::Text(vec!["more".into()]),
            ])
            .ending(Ending::Truncate),
        };
        fp.push(script);
        fp.push(Script::text(&["never used"]));
        let evs = collect(&*provider_for(&fp, proto), &hello());
        assert_eq!(ends(&evs).len(), 1, "{proto:?}");
        let e = failed(&evs);
        assert_eq!(
            (e.kind, e.stop_reason.as_str(), e.attempts),
            (FailureKind::IncompleteStream, "replay_unsafe", 1),
            "{proto:?}"
        );
        assert_eq!(fp.requests().len(), 1);
        assert_eq!(fp.scripts_left(), 1);
    }
}

#[test]
fn stall_fails_as_incomplete_stream_after_idle_timeout() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::stall(&["Hi"], Duration::from_secs(5)));
        let p = provider_with(&fp, proto, |c| {
            c.stream_idle_timeout_ms = Some(300);
            c.max_retries = Some(0);
        });
        let t0 = Instant::now();
        let evs = collect(&*p, &hello());
        let took = t0.elapsed();
        assert_eq!(text_of(&evs), "Hi");
        let e = failed(&evs);
        assert_eq!(e.kind, FailureKind::IncompleteStream, "{proto:?}");
        assert!(e.message.contains("stalled"), "{}", e.message);
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "{proto:?}: {took:?}"
        );
    }
}

#[test]
fn stall_then_success_is_retried() {
    let fp = FakeProvider::start();
    fp.push(Script::stall(&["Hi"], Duration::from_secs(5)));
    fp.push(Script::text(&["Hello"]));
    let p = provider_with(&fp, Proto::Anthropic, |c| {
        c.stream_idle_timeout_ms = Some(300)
    });
    let evs = collect(&*p, &hello());
    assert_eq!(retrying_kinds(&evs), [FailureKind::IncompleteStream]);
    assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
}

#[test]
fn non_retryable_statuses_map_to_kinds_with_one_request() {
    let cases = [
        (HttpError::Unauthorized, FailureKind::Authentication, 401),
        (HttpError::ModelNotFound, FailureKind::NotFound, 404),
        (
            HttpError::BadRequest("This model does not support assistant message prefill. The conversation must end with a user message.".into()),
            FailureKind::InvalidRequest,
            400,
        ),
        (HttpError::BadRequest("prompt is too long: 210000 tokens > 200000 maximum".into()), FailureKind::ContextOverflow, 400),
        (HttpError::Quota, FailureKind::Quota, 429),
    ];
    for proto in ALL {
        for (err, kind, status) in cases.iter().cloned() {
            let fp = FakeProvider::start();
            fp.push(Script::status(err.clone()));
            fp.push(Script::text(&["never"]));
            let evs = collect(&*provider_for(&fp, proto), &hello());
            assert_eq!(evs.len(), 1, "{proto:?} {err:?}: {evs:#?}");
            let e = failed(&evs);
            assert_eq!(
                (e.kind, e.status_code, e.attempts, e.stop_reason.as_str()),
                (kind, Some(status), 1, "non_retryable"),
                "{proto:?} {err:?}"
            );
            assert!(
                !e.message.is_empty() && !e.message.starts_with('{'),
                "provider message extracted: {}",
                e.message
            );
            assert_eq!(fp.requests().len(), 1, "{proto:?} {err:?}: not retried");
        }
    }
}

#[test]
fn in_stream_errors_are_classified() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::stream_error(&["par"], StreamError::Overloaded));
        fp.push(Script::stream_error(&[], StreamError::Server));
        fp.push(Script::text(&["ok"]));
        fp.push(Script::stream_error(&["x"], StreamError::InvalidRequest));
        let p = provider_for(&fp, proto);
        let evs = collect(&*p, &hello());
        assert_eq!(
            retrying_kinds(&evs),
            [FailureKind::Overloaded, FailureKind::Server],
            "{proto:?}: {evs:#?}"
        );
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
        let evs = collect(&*p, &hello());
        let e = failed(&evs);
        assert_eq!(
            (e.kind, e.stop_reason.as_str()),
            (FailureKind::InvalidRequest, "non_retryable"),
            "{proto:?}"
        );
    }
}

#[test]
fn anthropic_trailing_assistant_gets_a_request_only_guide_message() {
    let fp = FakeProvider::start(); // validation on: a prefill would be answered 400
    fp.push(Script::text(&["continuing"]));
    let req = request(vec![
        ChatMessage::text(Role::User, "Write a poem."),
        ChatMessage::text(Role::Assistant, "Roses are red,"),
    ]);
    let before = req.clone();
    let evs = collect(&*provider_for(&fp, Proto::Anthropic), &req);
    assert!(
        matches!(evs.last(), Some(StreamEvent::Done { .. })),
        "{evs:#?}"
    );
    assert_eq!(req, before, "history is not modified");
    let body = &fp.requests()[0].body;
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(fp.requests()[0].roles(), ["user", "assistant", "user"]);
    assert_eq!(
        msgs[2]["content"],
        json!([{"type":"text","text": CONTINUE_GUIDE}])
    );
}

#[test]
fn anthropic_base_url_with_v1_is_not_doubled() {
    let fp = FakeProvider::start();
    fp.push(Script::text(&["ok"]));
    let p = provider_with(&fp, Proto::Anthropic, |c| c.base_url = fp.base_url());
    collect(&*p, &hello());
    assert_eq!(fp.requests()[0].path, "/v1/messages");
}

#[test]
fn chat_request_carries_include_usage_and_nested_tools() {
    let fp = FakeProvider::start();
    fp.push(Script::text(&["ok"]));
    let mut req = hello();
    req.output_schema = Some(
        json!({"name":"answer","schema":{"type":"object","properties":{"a":{"type":"string"}}}}),
    );
    req.max_output_tokens = Some(256);
    collect(&*provider_for(&fp, Proto::Chat), &req);
    let b = &fp.requests()[0].body;
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["function"]["name"], "read_file");
    assert_eq!(b["tool_choice"], "auto");
    assert_eq!(b["max_tokens"], 256);
    assert_eq!(b["response_format"]["type"], "json_schema");
    assert_eq!(b["response_format"]["json_schema"]["name"], "answer");
    assert_eq!(
        b["messages"][0],
        json!({"role":"system","content":"You are a test."})
    );
}

#[test]
fn tool_results_are_paired_in_every_protocol() {
    let mut asst = ChatMessage::text(Role::Assistant, "Reading both.");
    asst.tool_calls = vec![
        ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a"}"#.into(),
            item_id: Some("fc_1".into()),
        },
        ToolCall {
            id: "call_2".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"b"}"#.into(),
            item_id: None,
        },
    ];
    let result = |id: &str, text: &str| {
        let mut m = ChatMessage::text(Role::Tool, text);
        m.tool_call_id = Some(id.into());
        m
    };
    let req = request(vec![
        ChatMessage::text(Role::User, "Read a and b."),
        asst,
        result("call_1", "contents of a"),
        result("call_2", "contents of b"),
    ]);
    for proto in ALL {
        let fp = FakeProvider::start(); // validation on: unpaired results would be a 400
        fp.push(Script::text(&["Both read."]));
        let evs = collect(&*provider_for(&fp, proto), &req);
        assert!(
            matches!(evs.last(), Some(StreamEvent::Done { .. })),
            "{proto:?}: {evs:#?}"
        );
        let r = &fp.requests()[0];
        match proto {
            Proto::Chat => {
                assert_eq!(r.roles(), ["system", "user", "assistant", "tool", "tool"]);
                let m = r.body["messages"].as_array().unwrap();
                assert_eq!(m[2]["tool_calls"][0]["id"], "call_1");
                assert_eq!(
                    m[2]["tool_calls"][1]["function"]["arguments"],
                    r#"{"path":"b"}"#
                );
                assert_eq!(
                    (m[3]["tool_call_id"].as_str(), m[4]["tool_call_id"].as_str()),
                    (Some("call_1"), Some("call_2"))
                );
            }
            Proto::Anthropic => {
                assert_eq!(r.roles(), ["user", "assistant", "user"]);
                let m = r.body["messages"].as_array().unwrap();
                let types: Vec<&str> = m[1]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b["type"].as_str().unwrap())
                    .collect();
                assert_eq!(types, ["text", "tool_use", "tool_use"]);
                assert_eq!(m[1]["content"][1]["input"], json!({"path":"a"}));
                let results: Vec<(&str, &str)> = m[2]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| {
                        (
                            b["tool_use_id"].as_str().unwrap(),
                            b["content"].as_str().unwrap(),
                        )
                    })
                    .collect();
                assert_eq!(
                    results,
                    [("call_1", "contents of a"), ("call_2", "contents of b")]
                );
            }
            Proto::Responses => {
                assert_eq!(
                    r.roles(),
                    [
                        "message:user",
                        "message:assistant",
                        "function_call",
                        "function_call",
                        "function_call_output",
                        "function_call_output"
                    ]
                );
                let items = r.body["input"].as_array().unwrap();
                assert_eq!(items[2]["call_id"], "call_1");
                assert!(
                    items[2].get("id").is_none(),
                    "fc ids only with replayed reasoning"
                );
                assert_eq!(
                    items[5],
                    json!({"type":"function_call_output","call_id":"call_2","output":"contents of b"})
                );
            }
        }
    }
}

#[test]
fn fake_provider_validation_rejects_unpaired_history() {
    // Guards the guard: the fake really answers 400 to a broken history.
    let mut asst = ChatMessage::text(Role::Assistant, "");
    asst.tool_calls = vec![ToolCall {
        id: "call_9".into(),
        name: "read_file".into(),
        arguments: "{}".into(),
        item_id: None,
    }];
    let req = request(vec![
        ChatMessage::text(Role::User, "x"),
        asst,
        ChatMessage::text(Role::User, "y"),
    ]);
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::text(&["unused"]));
        let e = failed(&collect(&*provider_for(&fp, proto), &req));
        assert_eq!(
            (e.kind, e.status_code),
            (FailureKind::InvalidRequest, Some(400)),
            "{proto:?}"
        );
        assert!(e.message.contains("call_9"), "{proto:?}: {}", e.message);
    }
}

#[test]
fn cancel_stops_a_stalled_stream_promptly() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::stall(&["Hi"], Duration::from_secs(20)));
        let p = provider_with(&fp, proto, |c| c.stream_idle_timeout_ms = Some(10_000));
        let mut h = start_stream(p, hello());
        let first = h.recv_timeout(Duration::from_secs(5)).expect("first event");
        assert_eq!(first, StreamEvent::TextDelta { text: "Hi".into() });
        std::thread::sleep(Duration::from_millis(50)); // the helper is now blocked in a read
        let t0 = Instant::now();
        h.cancel();
        match h.recv_timeout(Duration::from_secs(2)) {
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {}
            other => panic!("{proto:?}: expected the helper to end, got {other:?}"),
        }
        assert!(
            t0.elapsed() < Duration::from_millis(1_000),
            "{proto:?}: {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn cancel_during_backoff_and_drop_of_the_handle() {
    let fp = FakeProvider::start();
    fp.push(Script::rate_limited("30"));
    let p = provider_with(&fp, Proto::Chat, |c| c.max_backoff_ms = Some(60_000));
    let mut h = start_stream(p.clone(), hello());
    let ev = h.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        matches!(
            ev,
            StreamEvent::Retrying {
                delay_ms: 30_000,
                ..
            }
        ),
        "{ev:?}"
    );
    let t0 = Instant::now();
    h.cancel();
    assert!(h.recv_timeout(Duration::from_secs(2)).is_err());
    assert!(t0.elapsed() < Duration::from_secs(1));

    fp.push(Script::stall(&["Hi"], Duration::from_secs(20)));
    let h = start_stream(p, hello());
    let events = h.batches.clone();
    assert!(events.recv_timeout(Duration::from_secs(5)).is_ok());
    let t0 = Instant::now();
    drop(h);
    assert!(matches!(
        events.recv_timeout(Duration::from_secs(2)),
        Err(crossbeam_channel::RecvTimeoutError::Disconnected)
    ));
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn stream_handle_delivers_many_deltas_with_backpressure() {
    let n = 20_000;
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::many_deltas(n, "x"));
        let mut h = start_stream(provider_for(&fp, proto), hello());
        // Let the bounded channel fill up: the helper must block, not drop.
        std::thread::sleep(Duration::from_millis(200));
        let mut count = 0;
        let mut done = 0;
        for ev in h.events() {
            match ev {
                StreamEvent::TextDelta { text } => {
                    assert_eq!(text, "x");
                    count += 1;
                }
                StreamEvent::Done { .. } => done += 1,
                e => panic!("{proto:?}: {e:?}"),
            }
        }
        assert_eq!((count, done), (n, 1), "{proto:?}");
    }
}

#[test]
fn close_delimited_bodies_work_and_truncation_is_detected() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.set_close_delimited(true);
        fp.push(Script::text(&["whole"]));
        fp.push(Script::truncated(&["part"]));
        fp.push(Script::text(&["again"]));
        let p = provider_for(&fp, proto);
        let evs = collect(&*p, &hello());
        assert_eq!(text_of(&evs), "whole");
        assert!(
            matches!(evs.last(), Some(StreamEvent::Done { .. })),
            "{proto:?}"
        );
        let evs = collect(&*p, &hello());
        assert_eq!(
            retrying_kinds(&evs),
            [FailureKind::IncompleteStream],
            "{proto:?}"
        );
        assert!(matches!(evs.last(), Some(StreamEvent::Done { .. })));
    }
}

#[test]
fn raw_sse_bodies_with_comments_and_no_done_sentinel() {
    let fp = FakeProvider::start();
    let body = concat!(
        ": OPENROUTER PROCESSING\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"hm\"},\"finish_reason\":null}]}\n\n",
        ": keep-alive\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"fine\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"prompt_cache_hit_tokens\":4}}\n\n",
    );
    fp.push(Script::raw_sse(body));
    let evs = collect(&*provider_for(&fp, Proto::Chat), &hello());
    assert_eq!(text_of(&evs), "fine");
    let (usage, stop) = done_usage(&evs);
    assert_eq!(
        (usage.input_tokens, usage.cache_read_tokens, stop.as_deref()),
        (5, 4, Some("stop"))
    );
}

#[test]
fn responses_in_stream_failure_from_spec_7_7() {
    let fp = FakeProvider::start();
    let body = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_f\",\"status\":\"in_progress\",\"output\":[]}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"sequence_number\":1,\"code\":\"server_error\",\"message\":\"boom\",\"param\":null}\n\n",
        "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_f\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n",
    );
    fp.push(Script::raw_sse(body));
    let p = provider_with(&fp, Proto::Responses, |c| c.max_retries = Some(0));
    let e = failed(&collect(&*p, &hello()));
    assert_eq!(
        (e.kind, e.message.as_str(), e.stop_reason.as_str()),
        (FailureKind::Server, "boom", "retry_limit")
    );
}

#[test]
fn no_script_left_is_a_clear_server_error() {
    let fp = FakeProvider::start();
    let p = provider_with(&fp, Proto::Chat, |c| c.max_retries = Some(0));
    let e = failed(&collect(&*p, &hello()));
    assert_eq!(e.kind, FailureKind::Server);
    assert!(e.message.contains("no script left"), "{}", e.message);
}

#[test]
fn list_models_for_each_protocol() {
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.set_models(&["m-one", "m-two"]);
        let p = provider_for(&fp, proto);
        assert_eq!(p.list_models().unwrap(), ["m-one", "m-two"], "{proto:?}");
        let path = &fp.requests()[0].path;
        assert_eq!(path, "/v1/models");
    }
}

#[test]
fn api_key_headers_from_the_configured_env_var() {
    let var = format!("WUU_TEST_KEY_{}", std::process::id());
    std::env::set_var(&var, "sk-test-123");
    for proto in ALL {
        let fp = FakeProvider::start();
        fp.push(Script::text(&["ok"]));
        let p = provider_with(&fp, proto, |c| {
            c.api_key_env = Some(var.clone());
            c.headers = Some([("X-Title".to_string(), "wuu".to_string())].into());
        });
        collect(&*p, &hello());
        let r = &fp.requests()[0];
        match proto {
            Proto::Anthropic => {
                assert_eq!(r.header("x-api-key"), Some("sk-test-123"));
                assert_eq!(r.header("authorization"), None);
            }
            _ => assert_eq!(r.header("authorization"), Some("Bearer sk-test-123")),
        }
        assert_eq!(r.header("x-title"), Some("wuu"));
    }
}

#[test]
fn each_stream_ends_with_exactly_one_terminal_event() {
    let fp = FakeProvider::start();
    fp.push(Script::rate_limited("0"));
    fp.push(Script::truncated(&["a"]));
    fp.push(Script::text(&["b"]));
    let evs = collect(&*provider_for(&fp, Proto::Responses), &hello());
    assert_eq!(terminal_count(&evs), 1);
}
