//! One Chat Completions stream chunk (`data:` payload) as the parser reads it, and the
//! typed fast path that reads it without building a `serde_json::Value`.
//!
//! [`Chunk`] holds exactly what [`super::Parser`] looks at: the response `id`, the
//! `usage` object (already normalized, [`super::parse_usage`]), and of the first element
//! of `choices` its `delta` (or `message`) and `finish_reason`. It is made either from a
//! parsed `Value` ([`Chunk::from_value`], the reference semantics) or directly from the
//! JSON text ([`parse_typed`]); both must give the same `Chunk` for every input the typed
//! path accepts (unit tests compare the parser's events over many chunk shapes).
//!
//! The typed path accepts only the expected shape: objects where objects are expected,
//! strings (borrowed from the input unless they contain escapes) or `null` for string
//! fields, non-negative integers or `null` for token counts. Every other field is
//! skipped, but still parsed the way `Value` parses it (same number range and string
//! escape checks), so a payload the `Value` parser would refuse is refused here too.
//! Anything else — an odd type, an error object (`error` not null, `object:"error"`),
//! `finish_reason:"error"` — makes [`parse_typed`] answer `None` and the caller takes the
//! `Value` path, so behaviour and error messages stay those of the `Value` path.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::parse_usage;
use crate::provider::chat::Usage;

/// What the parser reads of one chunk.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Chunk<'a> {
    /// `id`, when it is a string.
    pub id: Option<Cow<'a, str>>,
    /// `usage`, when it is an object.
    pub usage: Option<Usage>,
    /// `choices[0]`, when `choices` is a non-empty array.
    pub choice: Option<Choice<'a>>,
}

/// The first choice of a chunk.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Choice<'a> {
    /// `delta`, or `message` when there is no `delta` key (a complete answer read as a
    /// chunk); `None` when neither is there.
    pub delta: Option<Delta<'a>>,
    /// `finish_reason`, when it is a string.
    pub finish_reason: Option<Cow<'a, str>>,
}

/// A choice's delta.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Delta<'a> {
    /// `reasoning_content` when it is a string, else `reasoning` when it is a string.
    pub reasoning: Option<Cow<'a, str>>,
    /// `content`, when it is a string.
    pub content: Option<Cow<'a, str>>,
    /// `tool_calls` fragments (empty when absent or not an array).
    pub tool_calls: Vec<Fragment<'a>>,
}

/// One element of `delta.tool_calls`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Fragment<'a> {
    /// `index`, when it is a non-negative integer.
    pub index: Option<u64>,
    /// `id`, when it is a string.
    pub id: Option<Cow<'a, str>>,
    /// `function.name`, when it is a string.
    pub name: Option<Cow<'a, str>>,
    /// `function.arguments`: the string, `""` when absent or null, the JSON text of any
    /// other value (some servers send an object).
    pub arguments: Cow<'a, str>,
}

impl<'a> Chunk<'a> {
    /// The reference reading of a parsed chunk: lenient, any field of an unexpected type
    /// reads as absent.
    pub fn from_value(v: &'a Value) -> Chunk<'a> {
        let s = |v: Option<&'a Value>| v.and_then(Value::as_str).map(Cow::Borrowed);
        Chunk {
            id: s(v.get("id")),
            usage: v.get("usage").filter(|u| u.is_object()).map(parse_usage),
            choice: v
                .get("choices")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
                .map(|c| Choice {
                    delta: c.get("delta").or_else(|| c.get("message")).map(|d| Delta {
                        reasoning: s(d.get("reasoning_content")).or_else(|| s(d.get("reasoning"))),
                        content: s(d.get("content")),
                        tool_calls: d
                            .get("tool_calls")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().map(Fragment::from_value).collect())
                            .unwrap_or_default(),
                    }),
                    finish_reason: s(c.get("finish_reason")),
                }),
        }
    }
}

impl<'a> Fragment<'a> {
    fn from_value(tc: &'a Value) -> Fragment<'a> {
        let f = tc.get("function");
        Fragment {
            index: tc.get("index").and_then(Value::as_u64),
            id: tc.get("id").and_then(Value::as_str).map(Cow::Borrowed),
            name: f
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(Cow::Borrowed),
            arguments: match f.and_then(|f| f.get("arguments")) {
                Some(Value::String(s)) => Cow::Borrowed(s),
                Some(Value::Null) | None => Cow::Borrowed(""),
                Some(other) => Cow::Owned(other.to_string()),
            },
        }
    }
}

/// The typed reading of a `data:` payload; `None` when it does not have the expected
/// shape (then the `Value` path decides, see the module docs).
pub(crate) fn parse_typed(data: &str) -> Option<Chunk<'_>> {
    let w: WireChunk = serde_json::from_str(data).ok()?;
    if w.error || w.object.as_deref() == Some("error") {
        return None;
    }
    let chunk = Chunk {
        id: w.id,
        usage: w.usage.map(WireUsage::usage),
        choice: w.choice,
    };
    if chunk
        .choice
        .as_ref()
        .and_then(|c| c.finish_reason.as_deref())
        == Some("error")
    {
        return None;
    }
    Some(chunk)
}

// ---------------------------------------------------------------------------------------
// Wire shapes. Each object is read with `deserialize_map` (an array in place of an object
// is refused, unlike derived structs, which accept sequences); a repeated key keeps the
// last value, like `Value`.
// ---------------------------------------------------------------------------------------

/// Reads the entries of a map: `field(key, map)` reads the value of a known key and
/// returns true, or returns false and the value is skipped ([`Skip`]).
fn visit_entries<'de, A: MapAccess<'de>>(
    mut map: A,
    mut field: impl FnMut(&str, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key::<Text<'de>>()? {
        if !field(&key.0, &mut map)? {
            map.next_value::<Skip>()?;
        }
    }
    Ok(())
}

/// Implements `Deserialize` for a wire type read from a JSON object by `$visit` (a
/// function `(MapAccess) -> Result<Self, Error>`).
macro_rules! from_map {
    ($ty:ident, $what:literal, $visit:ident) => {
        impl<'de> Deserialize<'de> for $ty<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                        $visit(map)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

/// A string, borrowed from the input when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Reads an optional string field (`null` = absent).
fn opt_text<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0))
}

/// Any JSON value, parsed and dropped. Unlike `serde::de::IgnoredAny` (which serde_json skips
/// without converting numbers), it goes through the same number and string parsing as
/// `Value`, so it fails exactly where `Value` fails (e.g. `1e999`: number out of range).
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_none<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        Skip::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
}

/// The top-level chunk object.
struct WireChunk<'a> {
    id: Option<Cow<'a, str>>,
    /// `error` is there and not null.
    error: bool,
    object: Option<Cow<'a, str>>,
    usage: Option<WireUsage>,
    choice: Option<Choice<'a>>,
}

fn visit_chunk<'de, A: MapAccess<'de>>(map: A) -> Result<WireChunk<'de>, A::Error> {
    let mut w = WireChunk {
        id: None,
        error: false,
        object: None,
        usage: None,
        choice: None,
    };
    visit_entries(map, |key, map| {
        match key {
            "id" => w.id = opt_text(map)?,
            "object" => w.object = opt_text(map)?,
            "error" => w.error = map.next_value::<Option<Skip>>()?.is_some(),
            "usage" => w.usage = map.next_value::<Option<WireUsage>>()?,
            "choices" => w.choice = map.next_value::<Option<FirstChoice>>()?.and_then(|c| c.0),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(w)
}
from_map!(WireChunk, "a chunk object", visit_chunk);

/// `choices`: the first element read as a [`Choice`], the others skipped.
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de> Deserialize<'de> for FirstChoice<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstChoice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Choice<'de>>()?;
                if first.is_some() {
                    while seq.next_element::<Skip>()?.is_some() {}
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A `delta`/`message` key: absent, `null`, or an object.
enum Slot<'a> {
    Absent,
    Null,
    Delta(Delta<'a>),
}

fn visit_choice<'de, A: MapAccess<'de>>(map: A) -> Result<Choice<'de>, A::Error> {
    let (mut delta, mut message, mut finish_reason) = (Slot::Absent, Slot::Absent, None);
    visit_entries(map, |key, map| {
        let slot = match key {
            "delta" => &mut delta,
            "message" => &mut message,
            "finish_reason" => {
                finish_reason = opt_text(map)?;
                return Ok(true);
            }
            _ => return Ok(false),
        };
        *slot = match map.next_value::<Option<Delta<'de>>>()? {
            Some(d) => Slot::Delta(d),
            None => Slot::Null,
        };
        Ok(true)
    })?;
    // `delta` wins whenever the key is there (even as null), as `get("delta")` does.
    let delta = match (delta, message) {
        (Slot::Delta(d), _) | (Slot::Absent, Slot::Delta(d)) => Some(d),
        // A null delta reads as an empty one.
        (Slot::Null, _) | (Slot::Absent, Slot::Null) => Some(Delta::default()),
        (Slot::Absent, Slot::Absent) => None,
    };
    Ok(Choice {
        delta,
        finish_reason,
    })
}
from_map!(Choice, "a choice object", visit_choice);

fn visit_delta<'de, A: MapAccess<'de>>(map: A) -> Result<Delta<'de>, A::Error> {
    let (mut reasoning_content, mut reasoning, mut d) = (None, None, Delta::default());
    visit_entries(map, |key, map| {
        match key {
            "content" => d.content = opt_text(map)?,
            "reasoning_content" => reasoning_content = opt_text(map)?,
            "reasoning" => reasoning = opt_text(map)?,
            "tool_calls" => {
                d.tool_calls = map
                    .next_value::<Option<Vec<Fragment<'de>>>>()?
                    .unwrap_or_default()
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    d.reasoning = reasoning_content.or(reasoning);
    Ok(d)
}
from_map!(Delta, "a delta object", visit_delta);

fn visit_fragment<'de, A: MapAccess<'de>>(map: A) -> Result<Fragment<'de>, A::Error> {
    let mut f = Fragment::default();
    visit_entries(map, |key, map| {
        match key {
            "index" => f.index = map.next_value()?,
            "id" => f.id = opt_text(map)?,
            "function" => {
                let func = map.next_value::<Option<Function<'de>>>()?;
                (f.name, f.arguments) = match func {
                    Some(func) => (func.name, func.arguments.unwrap_or(Cow::Borrowed(""))),
                    None => (None, Cow::Borrowed("")),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(f)
}
from_map!(Fragment, "a tool call object", visit_fragment);

/// `function` of a tool call fragment (`arguments` only as a string or null; another
/// type takes the `Value` path, which sends its JSON text).
struct Function<'a> {
    name: Option<Cow<'a, str>>,
    arguments: Option<Cow<'a, str>>,
}

fn visit_function<'de, A: MapAccess<'de>>(map: A) -> Result<Function<'de>, A::Error> {
    let mut f = Function {
        name: None,
        arguments: None,
    };
    visit_entries(map, |key, map| {
        match key {
            "name" => f.name = opt_text(map)?,
            "arguments" => f.arguments = opt_text(map)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(f)
}
from_map!(Function, "a function object", visit_function);

/// A `usage` object (token counts as non-negative integers or null).
#[derive(Default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_cache_hit_tokens: Option<u64>,
    prompt_details: Option<TokenDetails>,
    completion_details: Option<TokenDetails>,
}

impl WireUsage {
    /// The same figures as [`parse_usage`] of the equivalent `Value`.
    fn usage(self) -> Usage {
        let cached = self
            .prompt_details
            .and_then(|d| d.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0).saturating_sub(cached),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: cached,
            cache_creation_tokens: 0,
            reasoning_tokens: self
                .completion_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

impl<'de> Deserialize<'de> for WireUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireUsage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a usage object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<WireUsage, A::Error> {
                let mut u = WireUsage::default();
                visit_entries(map, |key, map| {
                    match key {
                        "prompt_tokens" => u.prompt_tokens = map.next_value()?,
                        "completion_tokens" => u.completion_tokens = map.next_value()?,
                        "prompt_cache_hit_tokens" => {
                            u.prompt_cache_hit_tokens = map.next_value()?
                        }
                        "prompt_tokens_details" => u.prompt_details = map.next_value()?,
                        "completion_tokens_details" => u.completion_details = map.next_value()?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                Ok(u)
            }
        }
        d.deserialize_map(V)
    }
}

/// `prompt_tokens_details` / `completion_tokens_details`.
#[derive(Default)]
struct TokenDetails {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

impl<'de> Deserialize<'de> for TokenDetails {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TokenDetails;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token details object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TokenDetails, A::Error> {
                let mut t = TokenDetails::default();
                visit_entries(map, |key, map| {
                    match key {
                        "cached_tokens" => t.cached_tokens = map.next_value()?,
                        "reasoning_tokens" => t.reasoning_tokens = map.next_value()?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                Ok(t)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::chat::StreamEvent;
    use crate::provider::openai_chat::Parser;
    use crate::provider::retry::AttemptError;
    use crate::provider::sse::SseEvent;
    use crate::provider::wire::WireParser;

    /// A tiny deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[(self.next() % xs.len() as u64) as usize]
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

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

    fn opt(rng: &mut Rng, percent: u64, v: impl FnOnce(&mut Rng) -> String) -> Option<String> {
        rng.chance(percent).then(|| v(rng))
    }

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

    /// Feeds `datas` through a parser (typed fast path on or off), then `[DONE]`/EOF.
    fn run(datas: &[String], typed: bool, end_with_done: bool) -> Run {
        let mut p = Parser::new("p", "m");
        p.typed = typed;
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
        let v: Value = serde_json::from_str(data)
            .unwrap_or_else(|e| panic!("typed path accepted what Value refuses ({e}): {data}"));
        assert!(
            !(v.get("error").is_some_and(|e| !e.is_null())
                || v.get("object").and_then(Value::as_str) == Some("error")),
            "typed path accepted an error object: {data}"
        );
        assert_eq!(typed, Chunk::from_value(&v), "chunk {data}");
        true
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
            let fast = run(&datas, true, done);
            let value = run(&datas, false, done);
            assert_eq!(fast, value, "round {round}: {datas:#?}");
        }
    }
}
