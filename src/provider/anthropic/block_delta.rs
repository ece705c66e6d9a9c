//! The usual Anthropic event, `content_block_delta`, read straight from its bytes
//! (`provider::scan`); every other event takes the parser's `Value` path.

use serde_json::Value;

use crate::provider::scan::{Scan, Str};

/// What a `content_block_delta` event says, read by either path.
#[derive(Debug, Default, PartialEq)]
pub(super) struct BlockDelta<'a> {
    /// `index` (0 when absent or not a non-negative integer).
    pub index: u64,
    /// `delta.type`, when `delta` is there and its `type` a string.
    pub kind: Option<&'a str>,
    /// `delta.text`, `delta.thinking`, `delta.partial_json`, `delta.signature`: each
    /// `""` when absent or not a string.
    pub text: &'a str,
    pub thinking: &'a str,
    pub partial_json: &'a str,
    pub signature: &'a str,
}

impl<'a> BlockDelta<'a> {
    /// The reference reading, from the parsed event (`index` already read).
    pub fn from_value(index: u64, v: &'a Value) -> Self {
        let d = v.get("delta");
        let s = |k: &str| {
            d.and_then(|d| d.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        BlockDelta {
            index,
            kind: d.and_then(|d| d.get("type")).and_then(Value::as_str),
            text: s("text"),
            thinking: s("thinking"),
            partial_json: s("partial_json"),
            signature: s("signature"),
        }
    }
}

/// The scanned reading of a `data:` payload (`provider::scan`): a `content_block_delta`
/// event (its JSON `type` says so) whose `index` is a non-negative integer or null and
/// whose `delta` is an object of string (or null) fields; `None` for any other payload
/// (the `Value` path decides). Whenever it answers, the answer equals
/// [`BlockDelta::from_value`] of the same payload.
pub(super) fn scan_block_delta<'a>(
    data: &'a str,
    scratch: &'a mut String,
) -> Option<BlockDelta<'a>> {
    let mut s = Scan::new(data, scratch);
    let (mut ty, mut index, mut delta) = (None, None, None);
    s.object(|s, key| {
        match key {
            b"type" => ty = s.opt_str()?,
            b"index" => index = s.opt_u64()?,
            b"delta" => {
                let mut d: [Option<Str>; 5] = [None; 5];
                s.object(|s, key| {
                    let slot = match key {
                        b"type" => 0,
                        b"text" => 1,
                        b"thinking" => 2,
                        b"partial_json" => 3,
                        b"signature" => 4,
                        _ => return s.skip(),
                    };
                    d[slot] = s.opt_str()?;
                    Some(())
                })?;
                delta = Some(d);
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    let t = s.finish()?;
    if ty.map(|x| t.get(x)) != Some("content_block_delta") {
        return None;
    }
    let Some(d) = delta else {
        return Some(BlockDelta {
            index: index.unwrap_or(0),
            ..BlockDelta::default()
        });
    };
    let get = |x: Option<Str>| x.map_or("", |x| t.get(x));
    Some(BlockDelta {
        index: index.unwrap_or(0),
        kind: d[0].map(|x| t.get(x)),
        text: get(d[1]),
        thinking: get(d[2]),
        partial_json: get(d[3]),
        signature: get(d[4]),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Parser;
    use super::*;
    use crate::provider::scan::fuzz::{mutate, object, opt, Rng, TEXTS};

    /// A `content_block_delta` payload of many shapes (and a few other events).
    fn gen_block_delta(rng: &mut Rng) -> String {
        let field = |rng: &mut Rng, p| opt(rng, p, |r| r.pick(TEXTS).into());
        let delta = opt(rng, 90, |rng| {
            if rng.chance(8) {
                return rng.pick(&["null", "5", "\"d\"", "[]"]).into();
            }
            let kinds = [
                "\"text_delta\"",
                "\"text_delta\"",
                "\"thinking_delta\"",
                "\"input_json_delta\"",
                "\"signature_delta\"",
                "\"other\"",
                "null",
                "3",
            ];
            let e = [
                ("type", opt(rng, 90, |r| r.pick(&kinds).into())),
                ("text", field(rng, 60)),
                ("thinking", field(rng, 30)),
                ("partial_json", field(rng, 30)),
                ("signature", field(rng, 20)),
            ];
            object(rng, &e)
        });
        let types = [
            "\"content_block_delta\"",
            "\"content_block_delta\"",
            "\"content_block_delta\"",
            "\"ping\"",
            "null",
            "1",
            "\"content_block_d\\u0065lta\"",
        ];
        let indexes = [
            "0",
            "1",
            "2",
            "0",
            "null",
            "-1",
            "1.5",
            "\"0\"",
            "18446744073709551616",
        ];
        let e = [
            ("type", opt(rng, 95, |r| r.pick(&types).into())),
            ("index", opt(rng, 85, |r| r.pick(&indexes).into())),
            ("delta", delta),
        ];
        object(rng, &e)
    }

    #[test]
    fn scanned_block_deltas_read_like_values() {
        let usual = [
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok "}}"#,
            r#"{"delta":{"text":"a\"b\n\u00e9\ud83e\udd80","type":"text_delta"},"index":3,"type":"content_block_delta"}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
            r#"{"type":"content_block_delta","delta":{}}"#,
            r#"{"type":"content_block_delta"}"#,
        ];
        let check = |data: &str| {
            let mut scratch = String::new();
            let Some(scanned) = scan_block_delta(data, &mut scratch) else {
                return false;
            };
            let v: Value = serde_json::from_str(data)
                .unwrap_or_else(|e| panic!("scanned what Value refuses ({e}): {data}"));
            assert_eq!(v["type"], "content_block_delta", "{data}");
            let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
            assert_eq!(scanned, BlockDelta::from_value(index, &v), "{data}");
            true
        };
        for data in usual {
            assert!(check(data), "the scan reads {data}");
        }
        for data in [
            r#"{"type":"ping"}"#,
            r#"{"index":0,"delta":{"type":"text_delta","text":"no type: the event line decides"}}"#,
            r#"{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"x"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":null}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ud800"}}"#,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}"#,
        ] {
            assert!(!check(data), "the scan leaves {data}");
        }
        let mut rng = Rng(0x3C6E_F372_FE94_F82B);
        let (mut scanned, total) = (0, 20_000);
        for i in 0..total {
            let mut data = gen_block_delta(&mut rng);
            if i % 2 == 1 {
                data = mutate(&mut rng, &data);
            }
            scanned += check(&data) as usize;
        }
        assert!(
            scanned > total / 16,
            "the scan read only {scanned} of {total}"
        );
    }

    #[test]
    fn scanned_block_deltas_stream_the_same_events_as_the_value_path() {
        let start = concat!(
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"x\",\"input\":{}}}\n\n",
        );
        let end = concat!(
            "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        let mut rng = Rng(0xA54F_F53A_5F1D_36F1);
        for round in 0..2000 {
            let mut body = start.to_string();
            for _ in 0..1 + rng.below(8) {
                let mut data = gen_block_delta(&mut rng);
                if rng.chance(20) {
                    data = mutate(&mut rng, &data).replace('\n', " ");
                }
                if rng.chance(30) {
                    body.push_str("event: content_block_delta\n");
                }
                body.push_str(&format!("data: {data}\n\n"));
            }
            body.push_str(end);
            let mut scanning = Parser::new("a", "claude");
            let mut reference = Parser::new("a", "claude");
            reference.scan = false;
            assert_eq!(
                crate::provider::wire::parse_body(&mut scanning, &body),
                crate::provider::wire::parse_body(&mut reference, &body),
                "round {round}: {body}"
            );
        }
    }
}
