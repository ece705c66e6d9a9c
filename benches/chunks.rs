//! Chunk parsing bench: nanoseconds per streamed text delta through a protocol's parser,
//! on the three wire protocols, in-process (no sockets, no server).
//!
//! Each row builds one answer of N text-delta chunks in the shape a real service sends
//! (Chat Completions as OpenAI streams it, with and without escapes in the text;
//! Responses `response.output_text.delta` events; Anthropic `content_block_delta`
//! events) and replays it through `wuu::provider::ReplayProvider`: the SSE reader, the
//! protocol's parser and a sink that takes every text delta lent, as the built-in engine
//! does. Baselines measured in the same run on the same bytes: the SSE reader alone
//! (`sse`), and the SSE reader plus `serde_json::from_str::<Value>` of every payload
//! (`sse+Value`, what a parser building a `Value` per chunk pays at least).
//!
//! Times are the CPU time of the benchmarking thread (Linux `/proc/thread-self/schedstat`,
//! which other processes on a shared machine do not inflate; wall time where it cannot be
//! read).
//!
//! Run: `cargo bench --bench chunks`. Env: `WUU_BENCH_CHUNKS` (chunks per answer, default
//! 20 000), `WUU_BENCH_REPEAT` (rounds, default 7; the median is reported).

use std::path::Path;
use std::time::Instant;

/// A stopwatch of the calling thread's CPU time (wall time when the kernel does not
/// tell it).
struct Watch {
    cpu: Option<u64>,
    wall: Instant,
}

/// The calling thread's CPU time in nanoseconds (the first field of its schedstat).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

impl Watch {
    fn start() -> Watch {
        Watch {
            cpu: thread_cpu_ns(),
            wall: Instant::now(),
        }
    }

    /// Nanoseconds since `start`.
    fn ns(&self) -> f64 {
        match (self.cpu, thread_cpu_ns()) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64,
            _ => self.wall.elapsed().as_nanos() as f64,
        }
    }
}

use serde_json::{json, Value};
use wuu::provider::sse::SseReader;
use wuu::provider::{
    ChatMessage, ChatRequest, Provider, ReplayProvider, Role, StreamEvent, StreamSink,
};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The text of delta `i`: mostly plain words; with `escapes`, every fourth one carries a
/// newline, a quote or a non-ASCII character written as an escape.
fn piece(i: usize, escapes: bool) -> String {
    if escapes && i % 4 == 0 {
        ["line\n", "say \"hi\"", "caf\u{e9} ", "tab\tend"][(i / 4) % 4].to_string()
    } else {
        ["tok ", "the ", "parser", " reads", "."][i % 5].to_string()
    }
}

/// `data:` lines (and `event:` lines for Responses and Anthropic) of one answer.
fn body(protocol: &str, n: usize, escapes: bool) -> String {
    let mut s = String::new();
    let push = |s: &mut String, event: Option<&str>, data: &Value| {
        if let Some(e) = event {
            s.push_str("event: ");
            s.push_str(e);
            s.push('\n');
        }
        s.push_str("data: ");
        s.push_str(&data.to_string());
        s.push_str("\n\n");
    };
    match protocol {
        "openai-compatible" => {
            for i in 0..n {
                // Keys in OpenAI's order (json! sorts them, so the chunk is written out).
                let text = serde_json::to_string(&piece(i, escapes)).unwrap_or_default();
                s.push_str(&format!(
                    "data: {{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\",\
                     \"created\":1741570283,\"model\":\"gpt-4o-2024-08-06\",\"service_tier\":\"default\",\
                     \"system_fingerprint\":\"fp_eb9dce56a8\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{text}}},\
                     \"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
                ));
            }
            push(
                &mut s,
                None,
                &json!({"id":"chatcmpl-B9","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}),
            );
            push(
                &mut s,
                None,
                &json!({"id":"chatcmpl-B9","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":n}}),
            );
            s.push_str("data: [DONE]\n\n");
        }
        "openai-responses" => {
            let msg = "msg_67c9fdcecf488190bdd9a0409de3a1dec07";
            push(
                &mut s,
                Some("response.created"),
                &json!({"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}),
            );
            push(
                &mut s,
                Some("response.output_item.added"),
                &json!({"type":"response.output_item.added","output_index":0,"item":{"id":msg,"type":"message","status":"in_progress","content":[],"role":"assistant"}}),
            );
            for i in 0..n {
                let text = serde_json::to_string(&piece(i, escapes)).unwrap_or_default();
                s.push_str(&format!(
                    "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\
                     \"sequence_number\":{},\"item_id\":\"{msg}\",\"output_index\":0,\"content_index\":0,\
                     \"delta\":{text},\"logprobs\":[]}}\n\n",
                    i + 3
                ));
            }
            push(
                &mut s,
                Some("response.completed"),
                &json!({"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[],"usage":{"input_tokens":10,"output_tokens":n}}}),
            );
        }
        _ => {
            push(
                &mut s,
                Some("message_start"),
                &json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}),
            );
            push(
                &mut s,
                Some("content_block_start"),
                &json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            );
            for i in 0..n {
                let text = serde_json::to_string(&piece(i, escapes)).unwrap_or_default();
                s.push_str(&format!(
                    "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\
                     \"delta\":{{\"type\":\"text_delta\",\"text\":{text}}}}}\n\n"
                ));
            }
            push(
                &mut s,
                Some("content_block_stop"),
                &json!({"type":"content_block_stop","index":0}),
            );
            push(
                &mut s,
                Some("message_delta"),
                &json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":n}}),
            );
            push(
                &mut s,
                Some("message_stop"),
                &json!({"type":"message_stop"}),
            );
        }
    }
    s
}

/// Takes text deltas lent (no allocation), like the built-in engine.
#[derive(Default)]
struct Count {
    deltas: usize,
    bytes: usize,
    done: bool,
}

impl StreamSink for Count {
    fn event(&mut self, ev: StreamEvent) -> bool {
        match ev {
            StreamEvent::TextDelta { text } | StreamEvent::ReasoningDelta { text } => {
                self.deltas += 1;
                self.bytes += text.len();
            }
            StreamEvent::Done { .. } => self.done = true,
            StreamEvent::Failed { error } => panic!("the replayed answer failed: {error:?}"),
            _ => {}
        }
        true
    }
    fn text(&mut self, _reasoning: bool, text: &str) -> bool {
        self.deltas += 1;
        self.bytes += text.len();
        true
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// ns per chunk of the SSE reader alone, and with a `Value` parse of every payload.
fn baselines(body: &str, n: usize) -> (f64, f64) {
    let t = Watch::start();
    let mut r = SseReader::new(body.as_bytes());
    let mut bytes = 0;
    while let Some(ev) = r.next_event_ref().unwrap() {
        bytes += ev.data.len();
    }
    let sse = t.ns() / n as f64;
    assert!(bytes > 0);
    let t = Watch::start();
    let mut r = SseReader::new(body.as_bytes());
    let mut objects = 0;
    while let Some(ev) = r.next_event_ref().unwrap() {
        if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
            objects += v.is_object() as usize;
        }
    }
    let value = t.ns() / n as f64;
    assert!(objects >= n);
    (sse, value)
}

/// ns per chunk through the replay provider's parser.
fn parsed(protocol: &str, body: &str, n: usize) -> f64 {
    let cassette = json!({"protocol": protocol, "responses": [{"body": body}]}).to_string();
    let p =
        ReplayProvider::from_json("bench", Path::new("bench.json"), &cassette).expect("cassette");
    let req = ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::text(Role::User, "go")],
        ..Default::default()
    };
    let mut sink = Count::default();
    let t = Watch::start();
    p.stream(&req, &mut sink);
    let ns = t.ns() / n as f64;
    assert!(sink.done, "{protocol}: no Done");
    assert_eq!(sink.deltas, n, "{protocol}: every delta arrives");
    ns
}

fn main() {
    let n = env_or("WUU_BENCH_CHUNKS", 20_000);
    let rounds = env_or("WUU_BENCH_REPEAT", 7).max(1);
    println!(
        "chunk parsing, {n} text-delta chunks an answer, median of {rounds} rounds (ns of thread CPU per chunk)"
    );
    println!(
        "{:<28} {:>8} {:>11} {:>8} {:>16}",
        "row", "sse", "sse+Value", "parser", "parser/sse+Value"
    );
    let rows = [
        ("chat", "openai-compatible", false),
        ("chat, escapes in 1/4", "openai-compatible", true),
        ("responses", "openai-responses", false),
        ("anthropic", "anthropic", false),
    ];
    for (name, protocol, escapes) in rows {
        let body = body(protocol, n, escapes);
        let (mut sse, mut value, mut parser) = (vec![], vec![], vec![]);
        for _ in 0..rounds {
            let (s, v) = baselines(&body, n);
            sse.push(s);
            value.push(v);
            parser.push(parsed(protocol, &body, n));
        }
        let (s, v, p) = (median(sse), median(value), median(parser));
        println!("{name:<28} {s:>8.0} {v:>11.0} {p:>8.0} {:>15.2}×", p / v);
    }
}
