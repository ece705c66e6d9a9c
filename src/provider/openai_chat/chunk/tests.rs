//! The typed and scanned readings of chunks against the `Value` reading.

use super::*;
use crate::provider::chat::StreamEvent;
use crate::provider::openai_chat::{Parser, Readings};
use crate::provider::retry::AttemptError;
use crate::provider::scan::fuzz::{opt, Rng};
use crate::provider::sse::SseEvent;
use crate::provider::wire::WireParser;

/// `{"k":v,…}` of the present entries (`None` = key absent), in a shuffled order,
/// sometimes with an unknown key or a repeated key.
fn object(rng: &mut Rng, entries: &[(&str, Option<String>)]) -> String {
    let mut parts: Vec<String> = entries
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("\"{k}\":{v}")))
        .collect();
    if rng.chance(30) {
        parts.push(format!(
            "\"{}\":{}",
            rng.pick(&["x", "logprobs", "role", "type"]),
            rng.pick(UNKNOWN)
        ));
    }
    if rng.chance(8) && !parts.is_empty() {
        let i = (rng.next() % parts.len() as u64) as usize;
        parts.push(parts[i].clone()); // repeated key, same value
    }
    for i in (1..parts.len()).rev() {
        parts.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let sep = if rng.chance(10) { " , " } else { "," };
    format!("{{{}}}", parts.join(sep))
}

/// Values of unknown keys: some of them are refused by the `Value` parser too.
const UNKNOWN: &[&str] = &[
    "null",
    "1",
    "-2",
    "1.5e3",
    "true",
    "\"s\"",
    "[1,{\"a\":[null]}]",
    "{\"b\":{}}",
    "1e999",
    "\"\\ud800\"",
    "\"\\uD83E\\uDD80\"",
    "18446744073709551616",
];
/// String-ish values, including escapes and wrong types.
const TEXTS: &[&str] = &[
    "\"hi\"",
    "\"\"",
    "\"a\\nb \\\"q\\\" \\u00e9\"",
    "\"\\ud83e\\udd80 🦀 é\"",
    "null",
    "5",
    "[\"a\"]",
    "{\"t\":1}",
    "\"\\/\"",
];
const COUNTS: &[&str] = &[
    "0",
    "7",
    "100",
    "null",
    "-1",
    "2.5",
    "\"3\"",
    "18446744073709551615",
];

fn gen_usage(rng: &mut Rng) -> String {
    match rng.next() % 6 {
        0 => "null".into(),
        1 => rng.pick(&["5", "\"u\"", "[]"]).into(),
        _ => {
            let details = |rng: &mut Rng, key: &str| {
                opt(rng, 60, |rng| {
                    if rng.chance(15) {
                        rng.pick(&["null", "3", "[1]"]).to_string()
                    } else {
                        let e = [
                            (key, opt(rng, 80, |r| r.pick(COUNTS).into())),
                            ("audio_tokens", opt(rng, 30, |r| r.pick(COUNTS).into())),
                        ];
                        object(rng, &e)
                    }
                })
            };
            let e = [
                ("prompt_tokens", opt(rng, 85, |r| r.pick(COUNTS).into())),
                ("completion_tokens", opt(rng, 85, |r| r.pick(COUNTS).into())),
                ("total_tokens", opt(rng, 50, |r| r.pick(COUNTS).into())),
                (
                    "prompt_cache_hit_tokens",
                    opt(rng, 30, |r| r.pick(COUNTS).into()),
                ),
                ("prompt_tokens_details", details(rng, "cached_tokens")),
                (
                    "completion_tokens_details",
                    details(rng, "reasoning_tokens"),
                ),
            ];
            object(rng, &e)
        }
    }
}

fn gen_fragment(rng: &mut Rng) -> String {
    if rng.chance(5) {
        return rng.pick(&["null", "3", "\"f\""]).into();
    }
    let function = opt(rng, 85, |rng| {
        if rng.chance(8) {
            return rng.pick(&["null", "\"f\"", "[]"]).into();
        }
        let e = [
            (
                "name",
                opt(rng, 60, |r| {
                    r.pick(&["\"bash\"", "\"\"", "null", "\"e\\u0078ec\"", "4"])
                        .into()
                }),
            ),
            (
                "arguments",
                opt(rng, 80, |r| {
                    r.pick(&[
                        "\"\"",
                        "\"{\\\"a\\\":\"",
                        "\"1}\"",
                        "\"{}\"",
                        "\"{\\\"c\\\":\\\"\\u00e9\\\"}\"",
                        "null",
                        "{\"a\":1}",
                        "7",
                    ])
                    .into()
                }),
            ),
        ];
        object(rng, &e)
    });
    let e = [
        (
            "index",
            opt(rng, 80, |r| {
                r.pick(&["0", "1", "null", "-1", "1.0", "\"0\""]).into()
            }),
        ),
        (
            "id",
            opt(rng, 50, |r| {
                r.pick(&["\"call_a\"", "\"call_b\"", "\"\"", "null", "9"])
                    .into()
            }),
        ),
        ("type", opt(rng, 40, |_| "\"function\"".into())),
        ("function", function),
    ];
    object(rng, &e)
}

fn gen_delta(rng: &mut Rng) -> String {
    if rng.chance(6) {
        return rng.pick(&["null", "\"d\"", "[]", "3"]).into();
    }
    let e = [
        ("content", opt(rng, 70, |r| r.pick(TEXTS).into())),
        ("reasoning_content", opt(rng, 25, |r| r.pick(TEXTS).into())),
        ("reasoning", opt(rng, 25, |r| r.pick(TEXTS).into())),
        ("role", opt(rng, 20, |_| "\"assistant\"".into())),
        (
            "tool_calls",
            opt(rng, 35, |rng| {
                if rng.chance(10) {
                    return rng.pick(&["null", "{}", "\"t\""]).into();
                }
                let n = rng.next() % 3;
                let items: Vec<String> = (0..n).map(|_| gen_fragment(rng)).collect();
                format!("[{}]", items.join(","))
            }),
        ),
    ];
    object(rng, &e)
}

fn gen_choice(rng: &mut Rng) -> String {
    if rng.chance(4) {
        return rng.pick(&["null", "1", "[]"]).into();
    }
    let e = [
        ("index", opt(rng, 60, |_| "0".into())),
        ("delta", opt(rng, 80, gen_delta)),
        ("message", opt(rng, 15, gen_delta)),
        (
            "finish_reason",
            opt(rng, 40, |r| {
                r.pick(&[
                    "null",
                    "\"stop\"",
                    "\"length\"",
                    "\"tool_calls\"",
                    "\"error\"",
                    "3",
                    "\"st\\u006fp\"",
                ])
                .into()
            }),
        ),
    ];
    object(rng, &e)
}

fn gen_chunk(rng: &mut Rng) -> String {
    let error = opt(rng, 6, |r| {
        r.pick(&[
            "null",
            "{\"message\":\"Overloaded\",\"code\":529}",
            "\"boom\"",
            "{\"code\":502,\"message\":\"up\\u0073tream\"}",
        ])
        .into()
    });
    let e = [
        (
            "id",
            opt(rng, 70, |r| {
                r.pick(&["\"chatcmpl-1\"", "\"c\\u0032\"", "null", "4", "\"\""])
                    .into()
            }),
        ),
        (
            "object",
            opt(rng, 50, |r| {
                r.pick(&["\"chat.completion.chunk\"", "\"error\"", "null", "1"])
                    .into()
            }),
        ),
        ("created", opt(rng, 40, |_| "1700000000".into())),
        ("model", opt(rng, 40, |_| "\"m\"".into())),
        (
            "choices",
            opt(rng, 85, |rng| {
                if rng.chance(8) {
                    return rng.pick(&["null", "{}", "\"c\""]).into();
                }
                let n = rng.next() % 3;
                let items: Vec<String> = (0..n).map(|_| gen_choice(rng)).collect();
                format!("[{}]", items.join(","))
            }),
        ),
        ("usage", opt(rng, 35, gen_usage)),
        ("error", error),
        ("message", opt(rng, 4, |_| "\"boom\"".into())),
        ("code", opt(rng, 4, |_| "500".into())),
    ];
    let s = object(rng, &e);
    match rng.next() % 40 {
        0 => s.chars().take(s.chars().count() / 2).collect(), // truncated: not JSON
        1 => format!("{s} x"),                                // trailing garbage
        2 => rng
            .pick(&["[1,2]", "42", "\"s\"", "null", "", "[DONE"])
            .into(),
        3 => format!(" {s}\n"),
        _ => s,
    }
}

/// Synthesized call ids (`call_<24 hex>`) renamed by order of appearance.
fn normalize(events: Vec<StreamEvent>) -> Vec<StreamEvent> {
    let mut seen: Vec<String> = vec![];
    let mut norm = |id: &mut String| {
        let synth = id.len() == 29
            && id.starts_with("call_")
            && id[5..].bytes().all(|b| b.is_ascii_hexdigit());
        if synth {
            let k = match seen.iter().position(|s| s == id) {
                Some(k) => k,
                None => {
                    seen.push(id.clone());
                    seen.len() - 1
                }
            };
            *id = format!("synth#{k}");
        }
    };
    events
        .into_iter()
        .map(|mut e| {
            match &mut e {
                StreamEvent::ToolCallStart { id, .. }
                | StreamEvent::ToolCallDelta { id, .. }
                | StreamEvent::ToolCallCutOff { id, .. } => norm(id),
                StreamEvent::ToolCallEnd { call } => norm(&mut call.id),
                _ => {}
            }
            e
        })
        .collect()
}

type Run = (Vec<StreamEvent>, Option<Result<StreamEvent, AttemptError>>);

/// Feeds `datas` through a parser reading chunks with `readings`, then `[DONE]`/EOF.
fn run(datas: &[String], readings: Readings, end_with_done: bool) -> Run {
    let mut p = Parser::new("p", "m");
    p.readings = readings;
    let mut out = crate::provider::wire::Out::default();
    let mut datas: Vec<String> = datas.to_vec();
    if end_with_done {
        datas.push("[DONE]".into());
    }
    for data in datas {
        let ev = SseEvent {
            event: None,
            data,
            id: None,
        };
        if let Some(t) = p.on_event(&ev, &mut out) {
            return (normalize(out.into_events()), Some(t));
        }
    }
    let t = p.on_eof(&mut out);
    (normalize(out.into_events()), Some(t))
}

/// The typed reading equals the `Value` reading whenever it answers, and it answers
/// for the usual shapes.
fn check_chunk(data: &str) -> bool {
    let Some(typed) = parse_typed(data) else {
        return false;
    };
    same_as_value(data, "typed", &typed);
    true
}

/// Checks the reading `got` of the fast path `what` against the `Value` reading: the
/// payload must be JSON, no error object, and read alike.
fn same_as_value(data: &str, what: &str, got: &Chunk) {
    let v: Value = serde_json::from_str(data)
        .unwrap_or_else(|e| panic!("{what} path accepted what Value refuses ({e}): {data}"));
    assert!(
        !(v.get("error").is_some_and(|e| !e.is_null())
            || v.get("object").and_then(Value::as_str) == Some("error")),
        "{what} path accepted an error object: {data}"
    );
    assert!(
        v.pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            != Some("error"),
        "{what} path accepted a failed choice: {data}"
    );
    assert_eq!(*got, Chunk::from_value(&v), "{what} chunk {data}");
}

/// The scanned reading equals the `Value` reading whenever it answers.
fn check_scan(data: &str) -> bool {
    let mut scratch = String::from("left over from the last chunk");
    scratch.clear();
    let Some(scanned) = scan(data, &mut scratch, &mut Template::default()) else {
        return false;
    };
    same_as_value(data, "scanned", &scanned);
    true
}

/// Random edits of a chunk: a byte dropped, doubled or replaced, a cut, bytes of an
/// escape or a number in between.
fn mutate(rng: &mut Rng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..1 + rng.next() % 3 {
        if b.is_empty() {
            break;
        }
        let i = (rng.next() % b.len() as u64) as usize;
        match rng.next() % 5 {
            0 => {
                b.remove(i);
            }
            1 => b.insert(i, b[i]),
            2 => b[i] = b"{}[]\",:\\ u0e-.1\x01\xff"[(rng.next() % 17) as usize],
            3 => b.truncate(i),
            _ => {
                let piece: &[u8] = rng
                    .pick(&[
                        "\\u00e9", "\\ud83e", "\\udd80", "\\n", "1e5", "-0", " ", "\\",
                    ])
                    .as_bytes();
                b.splice(i..i, piece.iter().copied());
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn typed_chunks_read_like_values() {
    let usual = [
        r#"{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}],"usage":null}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b\\c\n\u00e9\ud83e\udd80"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"th","content":null}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"ink"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"id":"x","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105,"prompt_tokens_details":{"cached_tokens":60},"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":40}}"#,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
        r#"{"choices":[{"delta":null,"message":{"content":"ignored: delta is there"}}]}"#,
    ];
    for data in usual {
        assert!(
            check_chunk(data),
            "the typed path reads the usual shape {data}"
        );
    }
    let fallback = [
        r#"{"error":{"message":"Overloaded","code":529}}"#,
        r#"{"object":"error","message":"boom","code":500}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}],"error":{"code":502,"message":"upstream"}}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}"#,
        r#"{"choices":[{"delta":{"content":["part"]}}]}"#,
        r#"{"choices":[[{"delta":{"content":"positional"}}]]}"#,
        r#"[{"choices":[]}]"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"n":1e999}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1.0}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}"#,
        "not json",
    ];
    for data in fallback {
        assert!(!check_chunk(data), "the Value path reads {data}");
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut typed, total) = (0, 4000);
    for _ in 0..total {
        typed += check_chunk(&gen_chunk(&mut rng)) as usize;
    }
    assert!(
        typed > total / 4,
        "the typed path read only {typed} of {total}"
    );
}

#[test]
fn typed_path_streams_the_same_events_as_the_value_path() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for round in 0..3000 {
        let n = 1 + rng.next() % 6;
        let datas: Vec<String> = (0..n).map(|_| gen_chunk(&mut rng)).collect();
        let done = rng.chance(50);
        let fast = run(&datas, Readings::Typed, done);
        let value = run(&datas, Readings::Value, done);
        assert_eq!(fast, value, "round {round}: {datas:#?}");
    }
}

#[test]
fn scanned_chunks_read_like_values() {
    let usual = [
        r#"{"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}],"usage":null}"#,
        r#"{"choices":[{"delta":{"content":"tok "},"finish_reason":null,"index":0}],"created":1700000000,"id":"chatcmpl-fake","model":"fake-model","object":"chat.completion.chunk","usage":null}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"a\"b\\c\n\u00e9\ud83e\udd80 é 🦀"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"gen-1","provider":"OpenAI","model":"m","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":"x","reasoning":null,"reasoning_details":[]},"finish_reason":null,"native_finish_reason":null,"logprobs":null}],"system_fingerprint":null}"#,
        r#"{"choices":[{"delta":{"reasoning_content":"th","content":null}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"ink"}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[{"delta":null,"message":{"content":"ignored: delta is there"}}]}"#,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}]}"#,
        " \t{ \"choices\" : [ { \"delta\" : { \"content\" : \"sp\" } } , 2 ] }\r\n ",
        r#"{"choices":[{"delta":{"content":"first"},"delta":{"content":"last"}}],"id":"a","id":null}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"extra":{"deep":[1,-2.5,true,false,null,"\u0041",{"a":[]}]},"n":18446744073709551615}"#,
        r#"{"choices":[]}"#,
        "{}",
    ];
    for data in usual {
        assert!(check_scan(data), "the scan reads the usual shape {data}");
    }
    let elsewhere = [
        // The typed path reads these.
        r#"{"id":"x","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"n":1.5e3}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":18446744073709551616}]}}]}"#,
        r#"{"choices":[{"delta":{"c\u006fntent":"x"}}]}"#,
        // The `Value` path reads (or refuses) these.
        r#"{"error":{"message":"Overloaded","code":529}}"#,
        r#"{"object":"error","message":"boom","code":500}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}],"error":{"code":502,"message":"upstream"}}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}"#,
        r#"{"choices":[{"delta":{"content":["part"]}}]}"#,
        r#"{"choices":[{"delta":{"content":5}}]}"#,
        r#"{"choices":[[{"delta":{"content":"positional"}}]]}"#,
        r#"{"choices":null}"#,
        r#"[{"choices":[]}]"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"n":1e999}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"n":123456789012345678901234567890}"#,
        r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}]} x"#,
        r#"{"choices":[{"delta":{"content":"x"}},]}"#,
        "{\"choices\":[{\"delta\":{\"content\":\"a\u{1}b\"}}]}",
        "not json",
        "",
    ];
    for data in elsewhere {
        assert!(!check_scan(data), "the scan leaves {data}");
        // Whichever path reads it, the stream's events are those of the `Value` path.
        let datas = [data.to_string()];
        assert_eq!(
            run(&datas, Readings::All, true),
            run(&datas, Readings::Value, true),
            "{data}"
        );
    }
    // Generated chunks (escapes, unicode, surrogates, numbers, nulls, nested objects,
    // repeated keys, whitespace, wrong types, errors, truncations), then random edits of
    // them.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut scanned, total) = (0, 20_000);
    for i in 0..total {
        let mut data = gen_chunk(&mut rng);
        if i % 2 == 1 {
            data = mutate(&mut rng, &data);
        }
        scanned += check_scan(&data) as usize;
        check_chunk(&data);
    }
    assert!(
        scanned > total / 8,
        "the scan read only {scanned} of {total}"
    );
}

#[test]
fn every_reading_streams_the_same_events_as_the_value_path() {
    let mut rng = Rng(0x6A09_E667_F3BC_C908);
    for round in 0..4000 {
        let n = 1 + rng.next() % 6;
        let datas: Vec<String> = (0..n)
            .map(|_| {
                let d = gen_chunk(&mut rng);
                if rng.chance(25) {
                    mutate(&mut rng, &d)
                } else {
                    d
                }
            })
            .collect();
        let done = rng.chance(50);
        let value = run(&datas, Readings::Value, done);
        assert_eq!(
            run(&datas, Readings::All, done),
            value,
            "round {round}: {datas:#?}"
        );
        assert_eq!(
            run(&datas, Readings::Typed, done),
            value,
            "round {round}: {datas:#?}"
        );
    }
}

#[test]
fn arbitrary_bytes_never_panic_a_reading() {
    let mut rng = Rng(0xBB67_AE85_84CA_A73B);
    let alphabet = "{}[]\":,\\u0123456789abcdefnulltrue.-eE \t\r\né🦀\u{1}";
    let chars: Vec<char> = alphabet.chars().collect();
    for _ in 0..20_000 {
        let n = (rng.next() % 40) as usize;
        let data: String = (0..n)
            .map(|_| chars[(rng.next() % chars.len() as u64) as usize])
            .collect();
        check_scan(&data);
        check_chunk(&data);
        let data = format!("{{\"choices\":[{{\"delta\":{{\"content\":{data}");
        check_scan(&data);
    }
}

/// A text chunk with `@` where its text goes (twice when a key repeats), keys shuffled,
/// sometimes with more than the text in its delta, a finish reason or a second choice.
fn gen_frame(rng: &mut Rng) -> String {
    let text_key = rng.pick(&["content", "reasoning_content", "reasoning"]);
    let other_key = rng.pick(&["content", "reasoning_content", "reasoning"]);
    let e = [
        (text_key, Some("@".into())),
        ("role", opt(rng, 30, |_| "\"assistant\"".into())),
        (other_key, opt(rng, 15, |r| r.pick(TEXTS).into())),
        (
            "tool_calls",
            opt(rng, 5, |r| r.pick(&["[]", "null"]).into()),
        ),
    ];
    let delta = object(rng, &e);
    let e = [
        ("index", opt(rng, 70, |_| "0".into())),
        ("delta", Some(delta)),
        ("logprobs", opt(rng, 40, |_| "null".into())),
        (
            "finish_reason",
            opt(rng, 60, |r| r.pick(&["null", "null", "\"stop\""]).into()),
        ),
    ];
    let choice = object(rng, &e);
    let second = if rng.chance(10) {
        ",{\"delta\":{\"content\":\"second\"}}"
    } else {
        ""
    };
    let e = [
        (
            "id",
            opt(rng, 80, |r| {
                r.pick(&["\"chatcmpl-1\"", "\"c\\u0032\"", "null", "7"])
                    .into()
            }),
        ),
        (
            "object",
            opt(rng, 60, |_| "\"chat.completion.chunk\"".into()),
        ),
        ("created", opt(rng, 50, |_| "1741570283".into())),
        ("model", opt(rng, 50, |_| "\"gpt-4o\"".into())),
        ("choices", Some(format!("[{choice}{second}]"))),
        ("usage", opt(rng, 30, |_| "null".into())),
    ];
    object(rng, &e)
}

/// A text for a frame's `@`: plain words mostly, else strings with escapes, other
/// types, or bytes that are no single token.
fn gen_text(rng: &mut Rng) -> String {
    match rng.below(10) {
        0..=4 => format!("\"{}\"", rng.pick(&["tok ", "the", "", " reads", "é 🦀"])),
        5 | 6 => rng.pick(TEXTS).into(),
        7 => {
            let t = rng.pick(&["\"tok\"", "\"a\\nb\""]);
            mutate(rng, t)
        }
        8 => rng
            .pick(&[
                "\"a\",\"content\":\"b\"",
                "\"a\" ",
                " \"a\"",
                "\"a\"}",
                "\"a",
                "a\"",
            ])
            .into(),
        _ => rng
            .pick(&["\"\\ud800\"", "\"\\u00e9\\\"\"", "\"x\\\\\"", "\"\u{1}\""])
            .into(),
    }
}

#[test]
fn chunks_read_through_the_last_chunks_shape_stream_as_the_value_path_does() {
    // Streams of chunks that share their bytes around the text, as a service sends them,
    // with every kind of text in between, now and then another frame or a random edit.
    let mut rng = Rng(0x3C6E_F372_FE94_F82B);
    let (mut through, mut total) = (0, 0);
    for round in 0..3000 {
        let mut frame = gen_frame(&mut rng);
        let n = 2 + rng.below(6);
        let mut datas = vec![];
        for _ in 0..n {
            if rng.chance(10) {
                frame = gen_frame(&mut rng);
            }
            let mut data = String::new();
            for (i, part) in frame.split('@').enumerate() {
                if i > 0 {
                    data.push_str(&gen_text(&mut rng));
                }
                data.push_str(part);
            }
            if rng.chance(5) {
                data = mutate(&mut rng, &data);
            }
            datas.push(data);
        }
        let done = rng.chance(50);
        assert_eq!(
            run(&datas, Readings::All, done),
            run(&datas, Readings::Value, done),
            "round {round}: {datas:#?}"
        );
        // Chunk by chunk, with the template of the chunks before.
        let mut template = Template::default();
        for data in &datas {
            let mut scratch = String::new();
            let read = template.read(data, &mut scratch).is_some();
            scratch.clear();
            if let Some(got) = scan(data, &mut scratch, &mut template) {
                same_as_value(data, "templated scan", &got);
            }
            through += read as usize;
            total += 1;
        }
    }
    assert!(
        through > total / 20,
        "only {through} of {total} chunks read through a template"
    );
}

#[test]
fn a_template_reads_only_one_string_token_between_the_same_bytes() {
    let frame = |text: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":null}}],"usage":null}}"#
        )
    };
    let mut template = Template::default();
    let mut scratch = String::new();
    let first = frame("\"tok\"");
    assert!(scan(&first, &mut scratch, &mut template).is_some());
    for (text, through) in [
        ("\"next\"", true),
        ("\"\"", true),
        ("\"a\\nb \\u00e9\"", true),
        (" \"sp\"", true),
        ("\"a\",\"content\":\"b\"", false),
        ("\"a\" ", false),
        ("null", false),
        ("5", false),
        ("\"\\ud800\"", false),
        ("\"open", false),
    ] {
        let data = frame(text);
        let mut scratch = String::new();
        assert_eq!(
            template.read(&data, &mut scratch).is_some(),
            through,
            "{data}"
        );
        // Through the template or not, the reading is a fresh scan's.
        let (mut scratch, mut scratch2) = (String::new(), String::new());
        let mut t = Template::default();
        assert!(scan(&first, &mut scratch2, &mut t).is_some());
        let templated = scan(&data, &mut scratch, &mut t);
        let (mut scratch3, mut fresh) = (String::new(), Template::default());
        assert_eq!(templated, scan(&data, &mut scratch3, &mut fresh), "{data}");
    }
}

#[test]
fn chunks_that_differ_elsewhere_too_stop_recording_templates() {
    let chunk = |text: &str, pad: usize| {
        format!(
            r#"{{"id":"c","choices":[{{"delta":{{"content":"{text}"}}}}],"obfuscation":"{}"}}"#,
            "x".repeat(pad)
        )
    };
    let through = |template: &mut Template, data: &str| {
        let mut scratch = String::new();
        template.read(data, &mut scratch).is_some()
    };
    for (padded, kept) in [(3, true), (40, false)] {
        let mut template = Template::default();
        for pad in 0..padded {
            let data = chunk("a", pad);
            assert!(!through(&mut template, &data), "{data}");
            let mut scratch = String::new();
            same_as_value(
                &data,
                "scan",
                &scan(&data, &mut scratch, &mut template).unwrap(),
            );
        }
        // The same padding twice: read through the template while the stream has not
        // given templates up.
        let data = chunk("b", padded - 1);
        assert_eq!(
            through(&mut template, &data),
            kept,
            "after {padded} padded chunks"
        );
    }
}
