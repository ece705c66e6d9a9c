//! The usual Responses event, `response.output_text.delta` (or `response.refusal.delta`),
//! read straight from its bytes (`provider::scan`); every other event takes the parser's
//! `Value` path.

#[cfg(test)]
use serde_json::Value;

use crate::provider::scan::{Scan, Str};

/// What a text delta event says.
#[derive(Debug, Default, PartialEq)]
pub(super) struct TextDelta<'a> {
    /// `delta` (`""` when absent or null).
    pub delta: &'a str,
    /// `item_id`, when a string.
    pub item_id: Option<&'a str>,
    /// `output_index`, when a non-negative integer.
    pub output_index: Option<u64>,
}

impl<'a> TextDelta<'a> {
    /// The reference reading of a parsed event (its type already matched).
    #[cfg(test)]
    fn from_value(v: &'a Value) -> Self {
        TextDelta {
            delta: v.get("delta").and_then(Value::as_str).unwrap_or(""),
            item_id: v.get("item_id").and_then(Value::as_str),
            output_index: v.get("output_index").and_then(Value::as_u64),
        }
    }
}

/// Whether an event `type` is a text delta.
fn is_text_delta(ty: &str) -> bool {
    matches!(ty, "response.output_text.delta" | "response.refusal.delta")
}

/// The scanned reading of a `data:` payload: a text delta event (its JSON `type` says
/// so; no `item`; `delta` and `item_id` strings or null, `output_index` a non-negative
/// integer or null); `None` for any other payload (the `Value` path decides). Whenever it
/// answers, the answer equals the `Value` path's reading of the same payload.
pub(super) fn scan<'a>(data: &'a str, scratch: &'a mut String) -> Option<TextDelta<'a>> {
    let mut s = Scan::new(data, scratch);
    let (mut ty, mut delta, mut item_id, mut output_index) = (None, None, None, None);
    s.object(|s, key| {
        match key {
            b"type" => ty = s.opt_str()?,
            b"delta" => delta = s.opt_str()?,
            b"item_id" => item_id = s.opt_str()?,
            b"output_index" => output_index = s.opt_u64()?,
            // An item's own keys choose its slot: the `Value` path.
            b"item" => return None,
            _ => s.skip()?,
        }
        Some(())
    })?;
    let t = s.finish()?;
    if !is_text_delta(t.get(ty?)) {
        return None;
    }
    Some(TextDelta {
        delta: delta.map_or("", |d: Str| t.get(d)),
        item_id: item_id.map(|i| t.get(i)),
        output_index,
    })
}

#[cfg(test)]
mod tests {
    use super::super::Parser;
    use super::*;
    use crate::provider::scan::fuzz::{mutate, object, opt, Rng, TEXTS};

    /// A text delta payload of many shapes (and a few other events).
    fn gen_text_delta(rng: &mut Rng) -> String {
        let types = [
            "\"response.output_text.delta\"",
            "\"response.output_text.delta\"",
            "\"response.output_text.delta\"",
            "\"response.refusal.delta\"",
            "\"response.reasoning_text.delta\"",
            "null",
            "4",
            "\"response.output_text.d\\u0065lta\"",
        ];
        let ids = ["\"msg_1\"", "\"msg_1\"", "\"msg_2\"", "\"\"", "null", "5"];
        let indexes = ["0", "0", "1", "2", "null", "-1", "0.0", "\"0\""];
        let e = [
            ("type", opt(rng, 95, |r| r.pick(&types).into())),
            ("delta", opt(rng, 90, |r| r.pick(TEXTS).into())),
            ("item_id", opt(rng, 70, |r| r.pick(&ids).into())),
            ("output_index", opt(rng, 70, |r| r.pick(&indexes).into())),
            ("content_index", opt(rng, 50, |_| "0".into())),
            ("sequence_number", opt(rng, 50, |_| "17".into())),
            ("logprobs", opt(rng, 30, |_| "[]".into())),
            (
                "item",
                opt(rng, 4, |_| "{\"id\":\"msg_2\",\"type\":\"message\"}".into()),
            ),
        ];
        object(rng, &e)
    }

    fn check(data: &str) -> bool {
        let mut scratch = String::new();
        let Some(scanned) = scan(data, &mut scratch) else {
            return false;
        };
        let v: Value = serde_json::from_str(data)
            .unwrap_or_else(|e| panic!("scanned what Value refuses ({e}): {data}"));
        assert!(
            v.get("type")
                .and_then(Value::as_str)
                .is_some_and(is_text_delta),
            "{data}"
        );
        assert!(v.get("item").is_none(), "{data}");
        assert_eq!(scanned, TextDelta::from_value(&v), "{data}");
        true
    }

    #[test]
    fn scanned_text_deltas_read_like_values() {
        for data in [
            r#"{"type":"response.output_text.delta","sequence_number":12,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"tok ","logprobs":[]}"#,
            r#"{"delta":"a\"b\n\u00e9\ud83e\udd80 🦀","item_id":"msg_1","type":"response.refusal.delta"}"#,
            r#"{"type":"response.output_text.delta","delta":null,"output_index":null}"#,
        ] {
            assert!(check(data), "the scan reads {data}");
        }
        for data in [
            r#"{"type":"response.output_text.done","item_id":"msg_1","text":"x"}"#,
            r#"{"delta":"no type: the event line decides","item_id":"msg_1"}"#,
            r#"{"type":"response.output_text.delta","delta":"x","output_index":-1}"#,
            r#"{"type":"response.output_text.delta","delta":"x","item":{"id":"msg_2"}}"#,
            r#"{"type":"response.output_text.delta","delta":5}"#,
            r#"{"type":"response.output_text.delta","delta":"\udc00"}"#,
            r#"{"type":"response.output_text.delta","delta":"x"} {}"#,
        ] {
            assert!(!check(data), "the scan leaves {data}");
        }
        let mut rng = Rng(0x510E_527F_ADE6_82D1);
        let (mut scanned, total) = (0, 20_000);
        for i in 0..total {
            let mut data = gen_text_delta(&mut rng);
            if i % 2 == 1 {
                data = mutate(&mut rng, &data);
            }
            scanned += check(&data) as usize;
        }
        assert!(
            scanned > total / 8,
            "the scan read only {scanned} of {total}"
        );
    }

    #[test]
    fn scanned_text_deltas_stream_the_same_events_as_the_value_path() {
        let added = |i: u64, id: &str| {
            format!(
                "data: {{\"type\":\"response.output_item.added\",\"output_index\":{i},\"item\":{{\"id\":\"{id}\",\"type\":\"message\",\"content\":[]}}}}\n\n"
            )
        };
        let mut rng = Rng(0x9B05_688C_2B3E_6C1F);
        for round in 0..2000 {
            let mut body = String::from(
                "data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n",
            );
            if rng.chance(70) {
                body.push_str(&added(0, "msg_1"));
            }
            for _ in 0..1 + rng.below(8) {
                let mut data = gen_text_delta(&mut rng);
                if rng.chance(20) {
                    data = mutate(&mut rng, &data).replace('\n', " ");
                }
                if rng.chance(30) {
                    body.push_str("event: response.output_text.delta\n");
                }
                body.push_str(&format!("data: {data}\n\n"));
                if rng.chance(10) {
                    body.push_str(&added(1, "msg_2"));
                }
            }
            body.push_str("data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"whole\"}]}}\n\n");
            body.push_str("data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"id\":\"msg_2\",\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"two\"}]}]}}\n\n");
            let mut scanning = Parser::new("openai", "m");
            let mut reference = Parser::new("openai", "m");
            reference.scan = false;
            assert_eq!(
                crate::provider::wire::parse_body(&mut scanning, &body),
                crate::provider::wire::parse_body(&mut reference, &body),
                "round {round}: {body}"
            );
        }
    }
}
