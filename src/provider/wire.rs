//! The wire protocols' common machinery (spec `providers.md` §0, §6.1): [`WireProtocol`]
//! picks a protocol's body builder and parser, a [`WireParser`] turns one attempt's SSE
//! events into normalized [`StreamEvent`]s, [`drive_sse`] and [`drive_payloads`] feed it,
//! and the small helpers every parser shares ([`parse_data`], [`finished_arguments`],
//! [`synth_call_id`]) live here.

use serde_json::Value;

use super::chat::{ChatRequest, StreamEvent, ToolSpec, Tools};
use super::{
    anthropic, openai_chat, openai_responses, request, retry, sse, CancelToken, StreamSink,
};

/// One of the three HTTP wire protocols (used by both the HTTP and the replay provider).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireProtocol {
    /// OpenAI Responses API (§1).
    OpenAiResponses,
    /// OpenAI Chat Completions and compatible servers (§2, §5).
    OpenAiChat,
    /// Anthropic Messages (§3).
    Anthropic,
}

impl WireProtocol {
    /// From a config `type` / cassette `protocol` value.
    pub fn from_type(t: &str) -> Option<Self> {
        match t {
            "openai-responses" => Some(WireProtocol::OpenAiResponses),
            "openai-compatible" => Some(WireProtocol::OpenAiChat),
            "anthropic" => Some(WireProtocol::Anthropic),
            _ => None,
        }
    }

    /// The config `type` name.
    pub fn name(self) -> &'static str {
        match self {
            WireProtocol::OpenAiResponses => "openai-responses",
            WireProtocol::OpenAiChat => "openai-compatible",
            WireProtocol::Anthropic => "anthropic",
        }
    }

    /// The JSON request body for `req`, sent by provider `provider_id` (what
    /// [`Self::body_bytes`] of [`Self::base_body`] serializes).
    pub fn build_body(self, provider_id: &str, base_url: &str, req: &ChatRequest) -> Value {
        let mut body = self.base_body(provider_id, base_url, req);
        if let (false, Some(o)) = (req.tools.is_empty(), body.as_object_mut()) {
            o.insert("tools".into(), self.tools_json(&req.tools));
        }
        body
    }

    /// The request's `tools` array offering `specs`, in this protocol's shape.
    fn tools_json(self, specs: &[ToolSpec]) -> Value {
        match self {
            WireProtocol::OpenAiResponses => openai_responses::tools_json(specs),
            WireProtocol::OpenAiChat => openai_chat::tools_json(specs),
            WireProtocol::Anthropic => anthropic::tools_json(specs),
        }
    }

    /// [`Self::build_body`] without its `tools` array (an object).
    pub fn base_body(self, provider_id: &str, base_url: &str, req: &ChatRequest) -> Value {
        match self {
            WireProtocol::OpenAiResponses => openai_responses::base_body(provider_id, req),
            WireProtocol::OpenAiChat => openai_chat::base_body(provider_id, base_url, req),
            WireProtocol::Anthropic => anthropic::base_body(provider_id, req),
        }
    }

    /// The bytes of the request body: `base` (a [`Self::base_body`], possibly amended)
    /// serialized with the `tools` array of `tools` when there are any, the same bytes
    /// `serde_json::to_vec` makes of the whole [`Self::build_body`]. The array's text is
    /// rendered once per tool list and protocol ([`Tools::rendered`]).
    pub fn body_bytes(self, base: &Value, tools: &Tools) -> Vec<u8> {
        if tools.is_empty() {
            return serde_json::to_vec(base).unwrap_or_default();
        }
        let text = tools.rendered(self.name(), |specs| {
            serde_json::to_vec(&self.tools_json(specs)).unwrap_or_default()
        });
        request::to_vec_with(base, &[("tools", &text)])
    }

    /// A fresh stream parser for one attempt.
    pub(crate) fn parser(self, provider_id: &str, model: &str) -> Box<dyn WireParser> {
        match self {
            WireProtocol::OpenAiResponses => {
                Box::new(openai_responses::Parser::new(provider_id, model))
            }
            WireProtocol::OpenAiChat => Box::new(openai_chat::Parser::new(provider_id, model)),
            WireProtocol::Anthropic => Box::new(anthropic::Parser::new(provider_id, model)),
        }
    }
}

/// What a [`WireParser`] made of one SSE event, in order: normalized events, and
/// streamed text copied into one buffer kept from event to event, so a text delta
/// costs no allocation on its way to the sink ([`StreamSink::text`]).
#[derive(Default)]
pub(crate) struct Out {
    pieces: Vec<Piece>,
    /// The text deltas of `pieces`, one after the other.
    text: String,
}

/// One piece of an [`Out`].
enum Piece {
    Event(StreamEvent),
    /// A text delta: `Out::text` from the previous text piece's end to `end`.
    Text {
        reasoning: bool,
        end: usize,
    },
}

impl Out {
    /// Adds an event.
    pub fn push(&mut self, ev: StreamEvent) {
        self.pieces.push(Piece::Event(ev));
    }

    /// Adds a text delta: reasoning text when `reasoning`, else the answer's text
    /// (a `ReasoningDelta` / `TextDelta` once handed on).
    pub fn text(&mut self, reasoning: bool, text: &str) {
        self.text.push_str(text);
        self.pieces.push(Piece::Text {
            reasoning,
            end: self.text.len(),
        });
    }

    /// Hands every piece to `sink` in order, text deltas lent ([`StreamSink::text`]),
    /// and empties itself (keeping its buffers). `false` = the sink stopped; the pieces
    /// after it are dropped.
    pub fn drain_into(&mut self, sink: &mut dyn StreamSink) -> bool {
        let mut start = 0;
        let mut go = true;
        for piece in self.pieces.drain(..) {
            if !go {
                break;
            }
            go = match piece {
                Piece::Event(ev) => sink.event(ev),
                Piece::Text { reasoning, end } => {
                    let text = self.text.get(start..end).unwrap_or_default();
                    start = end;
                    sink.text(reasoning, text)
                }
            };
        }
        self.text.clear();
        go
    }

    /// The pieces as owned events (text deltas as `TextDelta` / `ReasoningDelta`).
    #[cfg(test)]
    pub fn into_events(mut self) -> Vec<StreamEvent> {
        let mut evs = Vec::with_capacity(self.pieces.len());
        self.drain_into(&mut |ev| {
            evs.push(ev);
            true
        });
        evs
    }
}

/// A protocol's SSE → [`StreamEvent`] state machine for one attempt.
pub(crate) trait WireParser: Send {
    /// Handles one SSE event, pushing normalized events to `out`. Returns `Some` when the
    /// event is terminal: the `Done` event, or the attempt's failure.
    fn on_event(
        &mut self,
        ev: &sse::SseEvent,
        out: &mut Out,
    ) -> Option<Result<StreamEvent, retry::AttemptError>>;

    /// The stream ended (EOF) without a terminal event.
    fn on_eof(&mut self, out: &mut Out) -> Result<StreamEvent, retry::AttemptError>;

    /// A complete (non-streamed) JSON answer `v` to a streaming request, as the `data:`
    /// payloads of the equivalent stream (fed through [`WireParser::on_event`]); `None`
    /// when `v` is not an answer of this protocol.
    fn json_body_events(&self, v: &Value) -> Option<Vec<String>>;
}

/// Feeds the `data:` payloads `datas` through `parser` as SSE events (see
/// [`WireParser::json_body_events`]), forwarding events to `sink`.
pub(crate) fn drive_payloads(
    datas: Vec<String>,
    parser: &mut dyn WireParser,
    sink: &mut dyn StreamSink,
) -> retry::AttemptOutcome {
    use retry::AttemptOutcome;
    let mut out = Out::default();
    let mut end = None;
    for data in datas {
        let ev = sse::SseEvent {
            event: None,
            data,
            id: None,
        };
        if let Some(t) = parser.on_event(&ev, &mut out) {
            end = Some(t);
            break;
        }
    }
    let end = end.unwrap_or_else(|| parser.on_eof(&mut out));
    if !out.drain_into(sink) {
        return AttemptOutcome::Stopped;
    }
    match end {
        Ok(done) => AttemptOutcome::Done(done),
        Err(e) => AttemptOutcome::Failed(e),
    }
}

/// Test helper: feeds a whole SSE `body` through `parser`, returning the events it
/// pushed and its terminal result (or its end-of-stream verdict).
#[cfg(test)]
pub(crate) fn parse_body(
    parser: &mut dyn WireParser,
    body: &str,
) -> (Vec<StreamEvent>, Result<StreamEvent, retry::AttemptError>) {
    let mut out = Out::default();
    let mut r = sse::SseReader::new(body.as_bytes());
    while let Some(ev) = r.next_event().expect("in-memory SSE") {
        if let Some(t) = parser.on_event(&ev, &mut out) {
            return (out.into_events(), t);
        }
    }
    let t = parser.on_eof(&mut out);
    (out.into_events(), t)
}

/// Parses a `data:` payload as JSON; `None` (logged) when it is not JSON.
pub(crate) fn parse_data(ev: &sse::SseEvent) -> Option<Value> {
    match serde_json::from_str::<Value>(&ev.data) {
        Ok(v) => Some(v),
        Err(e) => {
            // The length only: a piece of a secret split across events would pass the
            // log redactor, which sees one line at a time.
            log::warn!("ignoring non-JSON SSE data ({e}; {} bytes)", ev.data.len());
            None
        }
    }
}

/// Feeds an SSE body through `parser`, forwarding events to `sink`, until a terminal
/// event, EOF, an I/O error (a read timeout = stalled stream), or cancellation. The sink
/// is flushed before every read of `reader` ([`StreamSink::flush`]).
pub(crate) fn drive_sse<R: std::io::BufRead>(
    reader: R,
    parser: &mut dyn WireParser,
    cancel: &CancelToken,
    sink: &mut dyn StreamSink,
) -> retry::AttemptOutcome {
    use retry::{AttemptError, AttemptOutcome};
    let mut sse = sse::SseReader::new(reader);
    let mut out = Out::default();
    loop {
        if cancel.is_cancelled() {
            return AttemptOutcome::Stopped;
        }
        // Before a read that may wait, the sink hands over what it holds.
        let mut stopped = false;
        let mut flush = || {
            stopped = !sink.flush();
            !stopped
        };
        let step = match sse.next_event_ref_or(&mut flush) {
            Ok(Some(ev)) => parser.on_event(ev, &mut out),
            Ok(None) => {
                if stopped || cancel.is_cancelled() {
                    return AttemptOutcome::Stopped;
                }
                Some(parser.on_eof(&mut out))
            }
            // The reading thread was woken (`super::wake`): the read left the stream
            // as it was; the sink's flush before the next read lets the thread serve
            // what woke it.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                if cancel.is_cancelled() {
                    return AttemptOutcome::Stopped;
                }
                let stalled = e.kind() == std::io::ErrorKind::TimedOut
                    || e.to_string().to_ascii_lowercase().contains("timeout");
                Some(Err(AttemptError::incomplete(if stalled {
                    format!("stream stalled: no data within the idle timeout ({e})")
                } else {
                    format!("stream interrupted: {e}")
                })))
            }
        };
        if !out.drain_into(sink) {
            return AttemptOutcome::Stopped;
        }
        match step {
            None => {}
            Some(Ok(done)) => return AttemptOutcome::Done(done),
            Some(Err(e)) => return AttemptOutcome::Failed(e),
        }
    }
}

/// How a finished call's argument text ends up: `Ok(arguments)` (an empty text becomes
/// `{}`, for tools without parameters) or `Err(reason)` when the call must not run: the
/// text is not complete JSON, or it is empty while the output was cut off (`truncated`).
pub(crate) fn finished_arguments(args: &str, truncated: bool) -> Result<String, String> {
    if args.trim().is_empty() {
        if truncated {
            return Err("the output limit cut the call off before its arguments".into());
        }
        return Ok("{}".into());
    }
    match serde_json::from_str::<Value>(args) {
        Ok(_) => Ok(args.to_string()),
        Err(_) if truncated => Err(format!(
            "the output limit cut the arguments off after {} bytes",
            args.len()
        )),
        Err(e) => Err(format!(
            "the arguments are not complete JSON ({e}) after {} bytes",
            args.len()
        )),
    }
}

/// A unique synthesized tool-call id (`call_<24 hex>`), for servers that send none.
pub(crate) fn synth_call_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &u[..24])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::Read;
    use std::rc::Rc;

    /// A body that hands out `chunks` one per read, logging each read.
    struct Chunks {
        chunks: std::collections::VecDeque<&'static str>,
        log: Rc<RefCell<Vec<String>>>,
    }

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some(c) = self.chunks.pop_front() else {
                return Ok(0);
            };
            self.log.borrow_mut().push(format!("read {c:?}"));
            buf[..c.len()].copy_from_slice(c.as_bytes());
            Ok(c.len())
        }
    }

    /// A sink that holds every delta until flushed, logging what each flush hands over.
    struct Holding {
        held: Vec<String>,
        log: Rc<RefCell<Vec<String>>>,
    }

    impl StreamSink for Holding {
        fn event(&mut self, ev: StreamEvent) -> bool {
            match ev {
                StreamEvent::TextDelta { text } => self.held.push(text),
                other => panic!("unexpected {other:?}"),
            }
            true
        }
        fn flush(&mut self) -> bool {
            if !self.held.is_empty() {
                let held = std::mem::take(&mut self.held).join(",");
                self.log.borrow_mut().push(format!("flush {held}"));
            }
            true
        }
    }

    /// A sink that logs what it gets, text deltas only through `text` (lent).
    #[derive(Default)]
    struct Lent {
        log: Vec<String>,
        stop_after: Option<usize>,
    }

    impl StreamSink for Lent {
        fn event(&mut self, ev: StreamEvent) -> bool {
            assert!(
                !matches!(
                    ev,
                    StreamEvent::TextDelta { .. } | StreamEvent::ReasoningDelta { .. }
                ),
                "a text delta came as an owned event: {ev:?}"
            );
            let name = format!("{ev:?}");
            self.log
                .push(name.split([' ', '{']).next().unwrap_or("").to_owned());
            self.stop_after != Some(self.log.len())
        }
        fn text(&mut self, reasoning: bool, text: &str) -> bool {
            self.log
                .push(format!("{}:{text}", if reasoning { "r" } else { "t" }));
            self.stop_after != Some(self.log.len())
        }
    }

    #[test]
    fn out_hands_text_lent_in_order_and_is_reused_after_a_stop() {
        let mut out = Out::default();
        out.text(true, "think");
        out.push(StreamEvent::ToolCallStart {
            id: "c".into(),
            name: "n".into(),
        });
        out.text(false, "hé");
        out.text(false, "llo");
        let mut sink = Lent::default();
        assert!(out.drain_into(&mut sink));
        assert_eq!(sink.log, ["r:think", "ToolCallStart", "t:hé", "t:llo"]);
        // A sink that stops: the pieces after it are dropped, the buffers kept.
        out.text(false, "a");
        out.text(false, "b");
        out.text(false, "c");
        let mut sink = Lent {
            stop_after: Some(2),
            ..Default::default()
        };
        assert!(!out.drain_into(&mut sink));
        assert_eq!(sink.log, ["t:a", "t:b"]);
        out.text(false, "next");
        assert_eq!(
            out.into_events(),
            [StreamEvent::TextDelta {
                text: "next".into()
            }]
        );
    }

    #[test]
    fn a_streamed_answer_reaches_the_sink_as_lent_text_between_its_events() {
        let body = [
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"say \\\"hi\\\"\\n\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        ]
        .concat();
        let mut sink = Lent::default();
        let mut parser = openai_chat::Parser::new("p", "m");
        let outcome = drive_sse(body.as_bytes(), &mut parser, &CancelToken::new(), &mut sink);
        assert!(matches!(outcome, retry::AttemptOutcome::Done(_)));
        assert_eq!(sink.log, ["r:hm", "ReasoningDone", "t:A", "t:say \"hi\"\n"]);
    }

    fn chat_delta(text: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n")
    }

    #[test]
    fn drive_sse_flushes_what_it_parsed_before_every_read_that_may_wait() {
        // The first read ends inside the third event: A and B must be handed over before
        // the read that waits for the rest of C (holding them there would delay them by
        // however long the network takes).
        let a = chat_delta("A") + &chat_delta("B");
        let c = chat_delta("C");
        let (c1, c2) = c.split_at(20);
        let first: &'static str = Box::leak(format!("{a}{c1}").into_boxed_str());
        let second: &'static str = Box::leak(c2.to_owned().into_boxed_str());
        let log = Rc::new(RefCell::new(vec![]));
        let body = Chunks {
            chunks: [first, second, "data: [DONE]\n\n"].into(),
            log: log.clone(),
        };
        let mut sink = Holding {
            held: vec![],
            log: log.clone(),
        };
        let mut parser = openai_chat::Parser::new("p", "m");
        let outcome = drive_sse(
            std::io::BufReader::new(body),
            &mut parser,
            &CancelToken::new(),
            &mut sink,
        );
        assert!(matches!(outcome, retry::AttemptOutcome::Done(_)));
        let log = log.borrow();
        let at = |what: &str| {
            log.iter()
                .position(|l| l == what)
                .unwrap_or_else(|| panic!("no {what:?} in {log:#?}"))
        };
        assert!(
            at("flush A,B") < at(&format!("read {second:?}")),
            "{log:#?}"
        );
        assert!(
            at("flush C") < at("read \"data: [DONE]\\n\\n\""),
            "{log:#?}"
        );
    }
}

#[cfg(test)]
mod body_tests {
    use super::*;
    use crate::provider::chat::{
        ChatMessage, ImageInput, ReasoningBlock, Role, ToolCall, ToolSpec,
    };
    use serde_json::json;

    /// A request with every kind of message and option, offering the built-in tools
    /// plus schemas the lowering amends (no `properties`, null).
    fn request(variant: usize) -> ChatRequest {
        let mut tools = crate::tools::specs(crate::tools::PermissionMode::Standard);
        tools.push(ToolSpec {
            name: "bare".into(),
            description: "an object schema without properties \u{2028} \"quoted\"".into(),
            parameters: json!({"type": "object"}),
        });
        tools.push(ToolSpec {
            name: "none".into(),
            description: String::new(),
            parameters: Value::Null,
        });
        let mut user = ChatMessage::text(Role::User, "look at this");
        user.images.push(ImageInput {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        });
        let mut assistant = ChatMessage::text(Role::Assistant, "");
        assistant.reasoning.push(ReasoningBlock {
            provider: "p".into(),
            model: "m".into(),
            text: "thinking".into(),
            signature: Some("sig".into()),
            redacted: None,
            raw: None,
        });
        assistant.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
            item_id: Some("fc_1".into()),
        });
        let mut result = ChatMessage::text(Role::Tool, "contents");
        result.tool_call_id = Some("call_1".into());
        ChatRequest {
            model: "m".into(),
            system: "You are a test.\nÉtienne's rules: \u{0}".into(),
            messages: vec![
                user,
                assistant,
                result,
                ChatMessage::text(Role::User, "go on"),
            ],
            tools: tools.into(),
            effort: (variant % 2 == 1).then(|| "high".into()),
            max_output_tokens: (variant % 3 == 1).then_some(1000),
            prompt_cache_key: Some("thread-1".into()),
            output_schema: (variant % 3 == 2)
                .then(|| json!({"name": "final_answer", "schema": {"type": "object"}})),
            temperature: (variant % 4 == 3).then_some(0.25),
        }
    }

    #[test]
    fn body_bytes_are_the_bytes_of_the_whole_body_rendered_or_not() {
        for protocol in [
            WireProtocol::OpenAiResponses,
            WireProtocol::OpenAiChat,
            WireProtocol::Anthropic,
        ] {
            for variant in 0..12 {
                let mut req = request(variant);
                if variant == 11 {
                    req.tools = Tools::default();
                }
                let base_url =
                    ["https://openrouter.ai/api/v1", "http://127.0.0.1:9/v1"][variant % 2];
                let whole = serde_json::to_vec(&protocol.build_body("p", base_url, &req)).unwrap();
                let mut base = protocol.base_body("p", base_url, &req);
                assert!(base.get("tools").is_none());
                // The first call renders the tools' text, the second reuses it.
                for _ in 0..2 {
                    let bytes = protocol.body_bytes(&base, &req.tools);
                    assert_eq!(
                        String::from_utf8(bytes).unwrap(),
                        String::from_utf8(whole.clone()).unwrap(),
                        "{protocol:?} variant {variant}"
                    );
                }
                // An amended base (the HTTP provider's output limit) as the whole body.
                let mut amended = protocol.build_body("p", base_url, &req);
                amended["max_tokens"] = json!(77);
                base["max_tokens"] = json!(77);
                assert_eq!(
                    protocol.body_bytes(&base, &req.tools),
                    serde_json::to_vec(&amended).unwrap()
                );
            }
        }
    }
}
